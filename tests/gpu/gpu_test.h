// gpu_test.h — helpers for the GPU tests (tests/gpu/test_*.c): both backends, random host
// data, device copies, NaN poisoning (an output element the GPU never wrote fails every
// comparison), and comparisons of a device result with the CPU backend's.
//
// fp32 tolerance, element-wise: |gpu − cpu| ≤ 1e-5 + 1e-4·|cpu| (the bound).
// A program whose GPU is missing prints "skip - <program>: <reason>" and exits 0.
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/backend/backend.h"
#include "../../src/common.h"
#include "../../src/model/gpt.h"
#include "../../src/rng.h"
#include "../test.h"

#define FP32_RTOL 1e-4
#define FP32_ATOL 1e-5

static const Backend *cpu, *gpu;
static Rng rng;

// Both backends, the GPU one in precision `device` ("cuda:fp32"); exits 0 with a skip line
// when there is no usable GPU.
static inline void gpu_open(const char *prog, const char *device) {
    rng_seed(&rng, 1234, 77);
    cpu = backend_select("cpu", 0);
    gpu = backend_select(device, 0);
    if (!gpu) {
        printf("skip - %s: %s\n", prog, loom_errmsg());
        exit(0);
    }
}

static inline float *h_rand(size_t n, float s) {
    float *x = xalloc_floats(n);
    for (size_t i = 0; i < n; i++)
        x[i] = s * rng_normal(&rng);
    return x;
}
static inline float *d_from(const float *h, size_t n) {
    float *d = gpu->alloc(n);
    gpu->upload(d, h, n);
    return d;
}
static inline float *d_poison(size_t n) {
    float *d = gpu->alloc(n);
    gpu->fill(d, NAN, n);
    return d;
}
static inline float *h_from_d(const float *d, size_t n) {
    float *h = xalloc_floats(n);
    gpu->download(h, d, n);
    return h;
}

// Element-wise check of device result d against the CPU's ref; prints the worst element.
static inline int cmp_tol(const char *what, const float *d, const float *ref, size_t n, double rtol,
                          double atol) {
    float *g = h_from_d(d, n);
    size_t bad = 0, worst = 0;
    double wr = -1;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)g[i] - ref[i]), lim = atol + rtol * fabs(ref[i]);
        if (!(err <= lim)) bad++;
        double r = err == err ? err / lim : INFINITY;
        if (r > wr) wr = r, worst = i;
    }
    if (bad || getenv("LOOM_GPU_TEST_VERBOSE"))
        fprintf(stderr,
                "  %s: %zu of %zu outside; worst [%zu] gpu %.9g cpu %.9g (%.3g of the bound)\n",
                what, bad, n, worst, n ? g[worst] : 0.0, n ? ref[worst] : 0.0, wr);
    free(g);
    return bad == 0;
}
static inline int cmp32(const char *what, const float *d, const float *ref, size_t n) {
    return cmp_tol(what, d, ref, n, FP32_RTOL, FP32_ATOL);
}

// ‖a − b‖ / ‖b‖ of host arrays (0 when both are 0; inf on a NaN).
static inline double rel_norm(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d, den += (double)b[i] * b[i];
    }
    if (num != num) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
// Norm-wise check of a device result; prints the value.
static inline int cmp_norm(const char *what, const float *d, const float *ref, size_t n,
                           double tol) {
    float *g = h_from_d(d, n);
    double r = rel_norm(g, ref, n);
    free(g);
    fprintf(stderr, "  %s: relative norm error %.3g (bound %.3g)\n", what, r, tol);
    return r <= tol;
}

// A model-level comparison: the max over tensors of max|a − b| / max|b|; prints the worst.
static inline double gpu_worst_tensor(const GPT *m, const float *a, const float *b,
                                      const char *what) {
    double worst = 0;
    int wi = 0;
    for (int i = 0; i < m->ntensors; i++) {
        const TensorSpec *t = &m->tensors[i];
        double d = 0, mx = 0;
        for (size_t k = t->off; k < t->off + t->n; k++) {
            double e = fabs((double)a[k] - b[k]);
            d = e > d || e != e ? e : d;
            mx = fabs(b[k]) > mx ? fabs(b[k]) : mx;
        }
        double r = d / (mx > 1e-30 ? mx : 1e-30);
        if (!(r <= worst)) worst = r, wi = i;
    }
    fprintf(stderr, "  %s: worst tensor %s, max|Δ|/max|ref| %.3g\n", what, m->tensors[wi].name,
            worst);
    return worst;
}
