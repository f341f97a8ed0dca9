// cpu_lnsplit.c — the CPU kernels of a LayerNorm whose C channels are split over ranks (2D
// tensor parallelism, backend.h "split LayerNorm"): each rank holds C of the row's Cw channels,
// computes per-row partial sums, and the caller all-reduces them over the ranks of the row
// before the next kernel. The arithmetic follows cpu_layernorm_forward/backward (float sums,
// eps 1e-5), so with C = Cw the results are the whole LayerNorm's.
#include <math.h>
#include <omp.h>
#include <stddef.h>

#include "cpu_lnsplit.h"

#define LN_EPS 1e-5f

void cpu_ln_split_stats(float *part, const float *inp, const float *mean, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float s = 0.f;
        if (mean)
            for (int c = 0; c < C; c++) {
                float d = x[c] - mean[n];
                s += d * d;
            }
        else
            for (int c = 0; c < C; c++)
                s += x[c];
        part[n] = s;
    }
}

void cpu_ln_split_apply(float *out, float *rstd, const float *inp, const float *mean,
                        const float *sq, const float *w, const float *b, int N, int C, int Cw) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float m = mean[n], s = 1.0f / sqrtf(sq[n] / Cw + LN_EPS);
        float *o = out + (size_t)n * C;
        for (int c = 0; c < C; c++)
            o[c] = (x[c] - m) * s * w[c] + b[c];
        rstd[n] = s;
    }
}

void cpu_ln_split_bwd_stats(float *part, const float *dout, const float *inp, const float *w,
                            const float *mean, const float *rstd, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        float m = mean[n], s = rstd[n], a = 0.f, b = 0.f;
        for (int c = 0; c < C; c++) {
            float xh = (x[c] - m) * s, dn = w[c] * d[c];
            a += dn;
            b += dn * xh;
        }
        part[2 * n] = a, part[2 * n + 1] = b;
    }
}

void cpu_ln_split_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, const float *part,
                           int N, int C, int Cw) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        float m = mean[n], s = rstd[n], dm = part[2 * n] / Cw, dnm = part[2 * n + 1] / Cw;
        float *di = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            float xh = (x[c] - m) * s, dn = w[c] * d[c];
            di[c] += (dn - dm - xh * dnm) * s;
        }
    }
#pragma omp parallel for schedule(static) // per channel, rows in order: reproducible sums
    for (int c = 0; c < C; c++) {
        float gw = 0.f, gb = 0.f;
        for (int n = 0; n < N; n++) {
            float d = dout[(size_t)n * C + c];
            gw += (inp[(size_t)n * C + c] - mean[n]) * rstd[n] * d;
            gb += d;
        }
        dw[c] += gw, db[c] += gb;
    }
}
