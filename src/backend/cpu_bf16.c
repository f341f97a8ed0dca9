// cpu_bf16.c — the CPU backend in bf16 (--dtype bf16 on a CPU with AVX512-BF16 or AMX-BF16):
// the linear layers' products take bf16 operands and accumulate in fp32 through oneDNN's matmul
// primitive (its brgemm kernels for AVX512-BF16 / AMX, chosen by cpuid at run time); everything
// else is the fp32 CPU backend's: master weights, gradients and AdamW moments, LayerNorm,
// attention, softmax and the loss. Operands are rounded (to nearest even) into per-thread
// scratch at every call, weights included: a weight is never cached, so nothing can go stale
// when a strategy writes parameters without a backend op (ZeRO's gathers, checkpoint loads).
// The bf16 peak (vdpbf16ps chains) is MFU's denominator in this precision.
#include <immintrin.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "cpu_impl.h"

// ------------------------------------------------------------------ rounding

static uint16_t bf16_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(u >> 16 | 0x40); // NaN stays quiet NaN
    return (uint16_t)((u + 0x7fffu + (u >> 16 & 1)) >> 16);
}

void cpu_bf16_round(uint16_t *dst, const float *src, size_t n) {
    enum { CHUNK = 1 << 14 };
#pragma omp parallel for schedule(dynamic, 1) if (n > CHUNK)
    for (size_t c = 0; c < n; c += CHUNK) {
        size_t e = c + CHUNK < n ? c + CHUNK : n;
        for (size_t i = c; i < e; i++)
            dst[i] = bf16_of(src[i]);
    }
}

// ------------------------------------------------------------------ oneDNN products

static dnnl_engine_t engine;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static void engine_create(void) {
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) engine = NULL;
}

typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc, acc;
    dnnl_memory_desc_t a, b, c; // op(A), op(B), C
    dnnl_primitive_t prim;
} Plan;

enum { PLANS = 128 }; // a product cut into blocks (cpu_gemm_blocks) has two block shapes
// Per thread (a oneDNN stream serves one thread at a time): the primitives, the stream and the
// scratch of the rounded operands, freed when the thread ends.
typedef struct {
    Plan plans[PLANS];
    int nplans;
    dnnl_stream_t stream;
    uint16_t *scr[3];
    size_t scr_n[3];
} ThreadState;

static pthread_key_t state_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static void state_free(void *v) {
    ThreadState *t = v;
    for (int i = 0; i < t->nplans; i++)
        dnnl_primitive_destroy(t->plans[i].prim);
    if (t->stream) dnnl_stream_destroy(t->stream);
    for (int i = 0; i < 3; i++)
        free(t->scr[i]);
    free(t);
}
static void key_create(void) {
    if (pthread_key_create(&state_key, state_free)) die(EXIT_IO, "pthread_key_create failed");
}
static ThreadState *state(void) {
    pthread_once(&key_once, key_create);
    ThreadState *t = pthread_getspecific(state_key);
    if (!t) {
        t = xcalloc(1, sizeof *t);
        pthread_setspecific(state_key, t);
    }
    return t;
}

static void dnnl_check(dnnl_status_t s, const char *what) {
    if (s == dnnl_success) return;
    fprintf(stderr, "loom: oneDNN %s failed (status %d)\n", what, (int)s);
    abort();
}
#define DN(x) dnnl_check((x), #x)

// p's row-major descriptors (op(A) (M,K) bf16, op(B) (K,N) bf16, C (M,N) fp32) and primitive.
static void plan_build(Plan *p) {
    dnnl_dims_t ad = {p->M, p->K}, bd = {p->K, p->N}, cd = {p->M, p->N};
    dnnl_dims_t as = {p->ta ? 1 : p->lda, p->ta ? p->lda : 1};
    dnnl_dims_t bs = {p->tb ? 1 : p->ldb, p->tb ? p->ldb : 1}, cs = {p->ldc, 1};
    DN(dnnl_memory_desc_init_by_strides(&p->a, 2, ad, dnnl_bf16, as));
    DN(dnnl_memory_desc_init_by_strides(&p->b, 2, bd, dnnl_bf16, bs));
    DN(dnnl_memory_desc_init_by_strides(&p->c, 2, cd, dnnl_f32, cs));
    dnnl_matmul_desc_t md;
    DN(dnnl_matmul_desc_init(&md, &p->a, &p->b, NULL, &p->c));
    dnnl_primitive_attr_t attr;
    DN(dnnl_primitive_attr_create(&attr));
    dnnl_post_ops_t po = NULL;
    if (p->acc) { // C += op(A)·op(B): the sum post-op reads C first
        DN(dnnl_post_ops_create(&po));
        DN(dnnl_post_ops_append_sum(po, 1.0f));
        DN(dnnl_primitive_attr_set_post_ops(attr, po));
    }
    dnnl_primitive_desc_t pd;
    DN(dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL));
    DN(dnnl_primitive_create(&p->prim, pd));
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    if (po) dnnl_post_ops_destroy(po);
}

static const Plan *plan_get(ThreadState *t, const Plan *key) {
    for (int i = 0; i < t->nplans; i++) {
        const Plan *p = &t->plans[i];
        if (p->ta == key->ta && p->tb == key->tb && p->M == key->M && p->N == key->N &&
            p->K == key->K && p->lda == key->lda && p->ldb == key->ldb && p->ldc == key->ldc &&
            p->acc == key->acc)
            return p;
    }
    Plan *p = &t->plans[t->nplans < PLANS ? t->nplans++ : (key->M + key->N + key->K) % PLANS];
    if (p->prim) dnnl_primitive_destroy(p->prim);
    *p = *key;
    plan_build(p);
    return p;
}

// Row-major C(M,N) = op(A)·op(B) (+ C when acc), A and B bf16, C fp32, in one primitive.
static void gemm_bf16_whole(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                            const uint16_t *B, int ldb, int acc, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!acc)
            for (int i = 0; i < M; i++)
                memset(C + (size_t)i * ldc, 0, (size_t)N * sizeof(float));
        return;
    }
    pthread_once(&engine_once, engine_create);
    if (!engine) die(EXIT_IO, "oneDNN: no CPU engine");
    ThreadState *t = state();
    if (!t->stream) DN(dnnl_stream_create(&t->stream, engine, dnnl_stream_default_flags));
    Plan key = {
        .ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc, .acc = acc};
    const Plan *p = plan_get(t, &key);
    dnnl_memory_t ma, mb, mc;
    DN(dnnl_memory_create(&ma, &p->a, engine, (void *)A));
    DN(dnnl_memory_create(&mb, &p->b, engine, (void *)B));
    DN(dnnl_memory_create(&mc, &p->c, engine, C));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    DN(dnnl_primitive_execute(p->prim, t->stream, 3, args));
    DN(dnnl_stream_wait(t->stream));
    dnnl_memory_destroy(ma), dnnl_memory_destroy(mb), dnnl_memory_destroy(mc);
}

typedef struct {
    int ta, tb, K, lda, ldb, ldc, acc;
    const uint16_t *A, *B;
    float *C;
} GemmBf16;

// C[m0:m1, n0:n1] from rows m0..m1 of op(A) and columns n0..n1 of op(B); inside the blocks'
// parallel loop oneDNN runs each primitive on the calling thread
static void bf16_block(void *ctx, int m0, int m1, int n0, int n1) {
    const GemmBf16 *g = ctx;
    CpuGemmAt at = cpu_gemm_at(g->ta, g->tb, g->lda, g->ldb, g->ldc, m0, n0);
    gemm_bf16_whole(g->ta, g->tb, m1 - m0, n1 - n0, g->K, g->A + at.a, g->lda, g->B + at.b, g->ldb,
                    g->acc, g->C + at.c, g->ldc);
}

// gemm_bf16_whole cut into blocks the threads take as they come free (cpu_gemm_blocks)
static void gemm_bf16(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                      const uint16_t *B, int ldb, int acc, float *C, int ldc) {
    GemmBf16 g = {ta, tb, K, lda, ldb, ldc, acc, A, B, C};
    cpu_gemm_blocks(M, N, bf16_block, &g);
}

// ------------------------------------------------------------------ the linear layers

// x rounded into this thread's scratch slot (grown as needed)
static uint16_t *rounded(int slot, const float *x, size_t n) {
    ThreadState *t = state();
    if (t->scr_n[slot] < n) {
        free(t->scr[slot]);
        t->scr[slot] = xmalloc(n * sizeof(uint16_t));
        t->scr_n[slot] = n;
    }
    cpu_bf16_round(t->scr[slot], x, n);
    return t->scr[slot];
}

// out (N,OC) = inp (N,C) · w (OC,C)ᵀ + bias
static void bf16_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                                int N, int C, int OC) {
    if (bias) cpu_bias_rows(out, bias, N, OC);
    const uint16_t *x = rounded(0, inp, (size_t)N * C), *wb = rounded(1, w, (size_t)OC * C);
    gemm_bf16(0, 1, N, OC, C, x, C, wb, C, bias != NULL, out, OC);
}

static void bf16_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                                 const float *inp, const float *w, int N, int C, int OC) {
    const uint16_t *d = rounded(2, dout, (size_t)N * OC);
    if (dinp) // (N,C) = (N,OC) · (OC,C)
        gemm_bf16(0, 0, N, C, OC, d, OC, rounded(1, w, (size_t)OC * C), C, 0, dinp, C);
    // (OC,C) += (OC,N) · (N,C)
    gemm_bf16(1, 0, OC, C, N, d, OC, rounded(0, inp, (size_t)N * C), C, 1, dw, C);
    if (dbias) cpu_bias_backward(dbias, dout, N, OC);
}

// ------------------------------------------------------------------ the bf16 peak

#if defined(__AVX512BF16__)
// CHAINS independent vdpbf16ps accumulators (32 bf16 products and sums into 16 fp32 lanes: 64
// flops an instruction), `iters` rounds each; the values stay bounded (tiny products). Built
// only where the compiler targets AVX512-BF16 (-march=native on such a CPU): a portable build
// holds no AVX instructions (tests/t_portable_build.sh) and takes twice the fp32 peak instead,
// vdpbf16ps's rate over vfmadd's on the CPUs that have both.
static float dp_chains(long iters, float seed) {
    enum { CHAINS = 16 };
    __m512 x[CHAINS];
    __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
    for (int c = 0; c < CHAINS; c++)
        x[c] = _mm512_set1_ps(seed + (float)c);
    for (long i = 0; i < iters; i++)
        for (int c = 0; c < CHAINS; c++)
            x[c] = _mm512_dpbf16_ps(x[c], a, a);
    float s = 0;
    for (int c = 0; c < CHAINS; c++)
        s += _mm512_reduce_add_ps(x[c]);
    return s;
}
#endif

// MFU's denominator in bf16: the vdpbf16ps chains on every thread (peak.c's probe), or twice the
// fp32 peak where the build cannot hold them
static double bf16_peak_gflops(int *threads) {
#if defined(__AVX512BF16__)
    return cpu_probe_gflops(dp_chains, 64.0 * 16, threads);
#else
    return 2.0 * backend_cpu_peak_gflops(threads);
#endif
}

// ------------------------------------------------------------------ the table

static Backend CPU_BF16;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static void table_init(void) {
    CPU_BF16 = *backend_cpu();
    CPU_BF16.precision = "bf16";
    CPU_BF16.matmul_forward = bf16_matmul_forward;
    CPU_BF16.matmul_backward = bf16_matmul_backward;
    // (a fused product of the fp32 table would bypass the two above)
    CPU_BF16.matmul_gelu_forward = NULL;
    CPU_BF16.matmul_gelu_backward = NULL;
    CPU_BF16.peak_gflops = bf16_peak_gflops;
}

const Backend *backend_cpu_bf16(void) {
    pthread_once(&table_once, table_init);
    return &CPU_BF16;
}
