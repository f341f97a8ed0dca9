// plot_axis.c — chart axes for plot.c: "nice" tick values (1/2/2.5/5 x 10^k), linear and log
// ranges, and tick labels with the decimals they need and a k/M/B suffix.
#include "plot_axis.h"

#include <math.h>
#include <stdio.h>

#include "plot.h"

int plot_nice_ticks(double lo, double hi, int target, double *ticks, int max, double *step) {
    if (!(hi > lo) || target < 1) {
        if (step) *step = 0;
        if (max > 0) ticks[0] = lo;
        return max > 0 ? 1 : 0;
    }
    double raw = (hi - lo) / target;
    double mag = pow(10, floor(log10(raw))), f = raw / mag;
    double m = f < 1.5 ? 1 : f < 2.25 ? 2 : f < 3.5 ? 2.5 : f < 7.5 ? 5 : 10;
    double st = m * mag;
    if (step) *step = st;
    double eps = 1e-9 * (hi - lo);
    int n = 0;
    for (double k = ceil((lo - eps) / st); n < max; k++) {
        double v = k * st;
        if (v > hi + eps) break;
        ticks[n++] = fabs(v) < eps ? 0 : v;
    }
    return n;
}

// Decimals (at most 6) needed to print x exactly.
static int decimals_for(double x) {
    int d = 0;
    while (d < 6 && fabs(x * pow(10, d) - round(x * pow(10, d))) > 1e-6 * fmax(1, fabs(x)))
        d++;
    return d;
}

// Tick labels: value / unit, with the decimals the tick spacing needs (evenly spaced ticks:
// "0.5 1.0 1.5") or each value needs (log ticks, step = 0), and a k/M/B suffix.
static void axis_labels(Axis *a, double step) {
    double big = 0;
    for (int i = 0; i < a->nt; i++)
        big = fmax(big, fabs(a->t[i]));
    double unit = big >= 1e9 ? 1e9 : big >= 1e6 ? 1e6 : big >= 1e4 ? 1e3 : 1;
    const char *suf = big >= 1e9 ? "B" : big >= 1e6 ? "M" : big >= 1e4 ? "k" : "";
    for (int i = 0; i < a->nt; i++) {
        double x = a->t[i] / unit;
        int d = decimals_for(step > 0 ? step / unit : x);
        if (fabs(x) < 1e-12) x = 0;
        snprintf(a->label[i], sizeof a->label[i], "%.*f%s", x == 0 ? 0 : d, x, x == 0 ? "" : suf);
    }
}

void axis_linear(Axis *a, double lo, double hi, int target, int snap_always) {
    a->log = 0;
    if (!(hi > lo)) {
        double d = fabs(lo) > 0 ? 0.5 * fabs(lo) : 1;
        lo -= d, hi += d;
    }
    double st;
    plot_nice_ticks(lo, hi, target, a->t, MAX_TICKS, &st);
    double flo = floor(lo / st + 1e-9) * st, fhi = ceil(hi / st - 1e-9) * st;
    // y axes snap outward to whole ticks; x axes only when that adds little empty space
    if (snap_always || lo - flo <= 0.05 * (hi - lo)) lo = flo;
    if (snap_always || fhi - hi <= 0.03 * (hi - lo)) hi = fhi;
    a->lo = lo, a->hi = hi;
    a->nt = plot_nice_ticks(lo, hi, target, a->t, MAX_TICKS, &st);
    axis_labels(a, st);
}

// Log ticks at 1, 1-2-5 or 1..9 per decade (every k-th decade when there are too many).
static int log_ticks(Axis *a, int set) {
    static const double sets[3][9] = {{1}, {1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
    static const int set_n[3] = {1, 3, 9};
    int k0 = (int)floor(log10(a->lo)), k1 = (int)ceil(log10(a->hi)), n = 0;
    for (int every = 1;; every++) {
        n = 0;
        for (int k = k0; k <= k1 && n < MAX_TICKS; k++) {
            if ((k - k0) % every) continue;
            for (int j = 0; j < set_n[set] && n < MAX_TICKS; j++) {
                double v = sets[set][j] * pow(10, k);
                if (v >= a->lo * (1 - 1e-9) && v <= a->hi * (1 + 1e-9)) a->t[n++] = v;
            }
        }
        if (n <= 10) return n;
    }
}

void axis_log(Axis *a, double lo, double hi) {
    a->log = 1;
    if (!(hi > lo)) lo /= 2, hi *= 2;
    double l0 = log10(lo), l1 = log10(hi), pad = 0.04 * (l1 - l0);
    a->lo = pow(10, l0 - pad), a->hi = pow(10, l1 + pad);
    for (int s = 0; s < 3; s++)
        if ((a->nt = log_ticks(a, s)) >= 4) {
            axis_labels(a, 0);
            return;
        }
    // a narrow range: evenly spaced values, placed on the log scale
    double st;
    a->nt = plot_nice_ticks(a->lo, a->hi, 5, a->t, MAX_TICKS, &st);
    axis_labels(a, st);
}

double axis_frac(const Axis *a, double v) {
    if (a->log) return (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
    return (v - a->lo) / (a->hi - a->lo);
}
