// gpu_test.h — helpers for the GPU tests (tests/gpu/test_*.c): both backends, random host
// data, device copies, NaN poisoning (an output element the GPU never wrote fails every
// comparison), and comparisons of a device result with the CPU backend's.
//
// fp32 tolerance, element-wise: |gpu − cpu| ≤ 1e-5 + 1e-4·|cpu| (the bound).
// A program whose GPU is missing prints "skip - <program>: <reason>" and exits 0.
#pragma once
#include <math.h>
#include <stdint.h>
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

// ---- 16-bit activations (Backend.act16): marked device tensors and their values
static inline float bf16_round(float f) { // round to nearest even, as __float2bfloat16_rn
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    u &= 0xFFFF0000u;
    memcpy(&f, &u, 4);
    return f;
}
static inline float *h_round(const float *x, size_t n) {
    float *r = xalloc_floats(n);
    for (size_t i = 0; i < n; i++)
        r[i] = bf16_round(x[i]);
    return r;
}
// A marked device tensor of n elements (gpt_act_floats(1, n) floats), poisoned with ones bits.
static inline float *d_act16(size_t n) {
    float *d = gpu->alloc(gpt_act_floats(1, n));
    gpu->fill(d, NAN, gpt_act_floats(1, n));
    gpu->act16_mark(d, n);
    return d;
}
// Its n values as floats on the host.
static inline float *h_from_act16(const float *d, size_t n) {
    size_t nf = gpt_act_floats(1, n);
    float *raw = h_from_d(d, nf), *x = xalloc_floats(n);
    const uint16_t *h = (const uint16_t *)raw;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)h[i] << 16;
        memcpy(&x[i], &u, 4);
    }
    free(raw);
    return x;
}
// A marked tensor holding bf16(x), and an fp32 one holding the same values.
static inline float *d_act16_from(const float *x, size_t n, float **d32) {
    float *r = h_round(x, n), *d = d_act16(n);
    // the bf16 bits, packed on the host and uploaded as raw floats
    size_t nf = gpt_act_floats(1, n);
    float *raw = xalloc_floats(nf);
    uint16_t *h = (uint16_t *)raw;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &r[i], 4);
        h[i] = (uint16_t)(u >> 16);
    }
    gpu->upload(d, raw, nf);
    *d32 = d_from(r, n);
    free(raw), free(r);
    return d;
}

// One first step of a GPT (cfg, micro-batch B×T, weights from seed 42, fixed tokens) on the GPU
// backend as it is now: returns the loss; the gradients into grads (nparams floats), the
// workspace's floats into *floats.
static inline double gpu_first_step(const GPTConfig *cfg, int B, int T, float *grads,
                                    size_t *floats) {
    GPT m;
    Workspace ws;
    if (gpt_create(&m, cfg, gpu) || workspace_create(&ws, &m, B, T, 0)) {
        fprintf(stderr, "model: %s\n", loom_errmsg());
        exit(1);
    }
    gpt_init_weights(&m, 42);
    int *tok = xcalloc((size_t)B * T, sizeof(int)), *tgt = xcalloc((size_t)B * T, sizeof(int));
    Rng r;
    rng_seed(&r, 7, 1);
    for (int i = 0; i < B * T; i++)
        tok[i] = (int)rng_below(&r, cfg->V), tgt[i] = (tok[i] * 7 + 3) % cfg->V;
    gpt_zero_grad(&m);
    double loss = gpt_forward(&m, &ws, tok, tgt);
    gpt_backward(&m, &ws, 1.0f / (B * T));
    gpu->download(grads, m.grads, m.nparams);
    *floats = ws.floats;
    free(tok), free(tgt);
    workspace_free(&ws, &m), gpt_free(&m);
    return loss;
}
