// plot_axis.h — axes of a loss chart (internal to plot.c): range, tick values and labels.
#pragma once

enum { MAX_TICKS = 32 };

typedef struct {
    double lo, hi; // axis range (data units)
    int log;
    int nt;
    double t[MAX_TICKS];
    char label[MAX_TICKS][24];
} Axis;

// Linear axis covering [lo, hi] with about `target` ticks; the ends snap outward to whole
// ticks always (snap_always) or when that adds little empty space.
void axis_linear(Axis *a, double lo, double hi, int target, int snap_always);
// Log axis covering [lo, hi] (both > 0), padded a little, ticks at 1/2/5 or 1..9 per decade.
void axis_log(Axis *a, double lo, double hi);
// Position of v along the axis, 0 at lo and 1 at hi.
double axis_frac(const Axis *a, double v);
