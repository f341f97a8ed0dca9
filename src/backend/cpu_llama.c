// cpu_llama.c — the CPU backend's kernels of the LLaMA block besides its attention
// (cpu_attention.c does grouped-query attention): RMSNorm, rotary position embeddings in Hugging
// Face's rotate-half convention, and the SwiGLU activation. Rows are independent: each kernel
// spreads them over the threads; statistics are float with double sums where a row is reduced.
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "../common.h"
#include "cpu_impl.h"

// ------------------------------------------------------------------ RMSNorm

void cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                         float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C, ss = 0.f;
#pragma omp simd reduction(+ : ss)
        for (int i = 0; i < C; i++)
            ss += x[i] * x[i];
        float r = 1.0f / sqrtf(ss / (float)C + eps);
        rstd[n] = r;
#pragma omp simd
        for (int i = 0; i < C; i++)
            y[i] = x[i] * r * w[i];
    }
}

// y = x·r·w, r = (mean(x²) + eps)^(−1/2):
//   dx_i = r·w_i·g_i − x_i · r³/C · Σ_k g_k·w_k·x_k ;  dw_i = Σ_n g_i·x_i·r
// dw partial sums per thread, combined in thread order so results are bit-reproducible.
void cpu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                          const float *w, const float *rstd, int N, int C) {
    int nth = omp_get_max_threads();
    float *part = xalloc_floats((size_t)nth * C);
#pragma omp parallel
    {
        float *mine = part + (size_t)omp_get_thread_num() * C;
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
            float *dx = dinp + (size_t)n * C, r = rstd[n], dot = 0.f;
#pragma omp simd reduction(+ : dot)
            for (int i = 0; i < C; i++)
                dot += g[i] * w[i] * x[i];
            float k = dot * r * r * r / (float)C;
#pragma omp simd
            for (int i = 0; i < C; i++) {
                dx[i] += r * w[i] * g[i] - x[i] * k;
                mine[i] += g[i] * x[i] * r;
            }
        }
    }
    for (int t = 0; t < nth; t++)
        for (int i = 0; i < C; i++)
            dw[i] += part[(size_t)t * C + i];
    free(part);
}

// ------------------------------------------------------------------ rotary embeddings

// Rotates the first 2·hs/2 elements of each of n heads of a row (stride hs) by the angles
// whose cosines and sines are cs, sn (hs/2 each); sign −1 rotates back (the backward).
static void rotate_heads(float *x, int n, int hs, const float *cs, const float *sn, float sign) {
    int half = hs / 2;
    for (int h = 0; h < n; h++) {
        float *a = x + (size_t)h * hs, *b = a + half;
#pragma omp simd
        for (int i = 0; i < half; i++) {
            float x1 = a[i], x2 = b[i], s = sign * sn[i];
            a[i] = x1 * cs[i] - x2 * s;
            b[i] = x2 * cs[i] + x1 * s;
        }
    }
}

static void rope_apply(float *qkv, const int *pos, const float *inv_freq, int B, int T, int NH,
                       int NKV, int hs, float sign) {
    int half = hs / 2;
    size_t W = (size_t)(NH + 2 * NKV) * hs;
#pragma omp parallel
    {
        float *cs = xalloc_floats((size_t)half), *sn = xalloc_floats((size_t)half);
#pragma omp for schedule(static)
        for (int t = 0; t < T; t++) {
            for (int i = 0; i < half; i++) { // the angle in float, as the reference computes it
                float ang = (float)pos[t] * inv_freq[i];
                cs[i] = cosf(ang), sn[i] = sinf(ang);
            }
            for (int b = 0; b < B; b++) {
                float *row = qkv + ((size_t)b * T + t) * W;
                rotate_heads(row, NH + NKV, hs, cs, sn, sign); // the query and the key heads
            }
        }
        free(cs), free(sn);
    }
}

void cpu_rope_forward(float *qkv, const int *pos, const float *inv_freq, int B, int T, int NH,
                      int NKV, int hs) {
    rope_apply(qkv, pos, inv_freq, B, T, NH, NKV, hs, 1.0f);
}

void cpu_rope_backward(float *dqkv, const int *pos, const float *inv_freq, int B, int T, int NH,
                       int NKV, int hs) {
    rope_apply(dqkv, pos, inv_freq, B, T, NH, NKV, hs, -1.0f);
}

// ------------------------------------------------------------------ SwiGLU

static inline float sigmoid(float x) { return 1.0f / (1.0f + fast_expf(-x)); }

void cpu_swiglu_forward(float *out, const float *inp, int N, int F) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F;
        float *y = out + (size_t)n * F;
#pragma omp simd
        for (int i = 0; i < F; i++)
            y[i] = g[i] * sigmoid(g[i]) * u[i];
    }
}

// y = silu(g)·u, silu(g) = g·σ(g), silu'(g) = σ(g)·(1 + g·(1 − σ(g))).
void cpu_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F, *dy = dout + (size_t)n * F;
        float *dg = dinp + (size_t)n * 2 * F, *du = dg + F;
#pragma omp simd
        for (int i = 0; i < F; i++) {
            float s = sigmoid(g[i]);
            du[i] = dy[i] * g[i] * s;
            dg[i] = dy[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
        }
    }
}
