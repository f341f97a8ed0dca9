// cpu_impl.h — what the CPU backend's files share: the inline vector math and the kernels
// that live in their own file (cpu_attention.c, cpu_llama.c, ...). Private to src/backend/.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"

// ------------------------------------------------------------------ vector math
// expf and tanhf from libm are scalar calls; these inline versions vectorize under
// `omp simd` and are accurate to a few ulp (Cody-Waite range reduction + degree-6 polynomial).

static inline float fast_expf(float x) {
    x = x < -87.0f ? -87.0f : x; // ternaries, not fminf/fmaxf: NaN passes through
    x = x > 88.0f ? 88.0f : x;
    // round x·log2(e) to an integer n by adding 1.5·2^23: n lands in t's low mantissa bits
    float t = x * 1.4426950409f + 12582912.0f;
    float n = t - 12582912.0f;
    float r = x - n * 0.693145752f - n * 1.428606765e-6f; // |r| <= ln2/2
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (0.1666666667f +
                                                  r * (0.0416666667f +
                                                       r * (0.0083333333f + r * 0.0013888889f)))));
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    uint32_t sb = (tb - 0x4B400000u + 127u) << 23; // 2^n (unsigned: no UB for any input)
    float scale;
    memcpy(&scale, &sb, sizeof scale);
    return p * scale;
}

// Absolute error ~2e-7 everywhere (relative error grows near 0, harmless inside GELU).
static inline float fast_tanhf(float u) { return 1.0f - 2.0f / (fast_expf(2.0f * u) + 1.0f); }

// ------------------------------------------------------------------ cpu_gemm.c
// The matrix engine of the linear layers' products: LOOM_MATMUL=openblas|blis|onednn.
typedef enum { CPU_GEMM_OPENBLAS, CPU_GEMM_BLIS, CPU_GEMM_ONEDNN, CPU_GEMM_NENGINES } CpuGemm;
// Row-major C(M,N) = alpha·op(A)·op(B) + beta·C; ta/tb nonzero: op is the transpose.
void cpu_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc);
int cpu_gemm_init(void); // reads LOOM_MATMUL once; -1 (loom_fail) on a bad value
int cpu_gemm_parse(const char *s, CpuGemm *out); // -1 (loom_fail) when unknown
void cpu_gemm_set(CpuGemm e);                    // the engine from now on (tests, benchmarks)
CpuGemm cpu_gemm_engine(void);                   // the engine in use (chosen on first use)
CpuGemm cpu_gemm_default(void); // unset LOOM_MATMUL: oneDNN with AVX-512, else OpenBLAS
const char *cpu_gemm_name(CpuGemm e);
void cpu_gemm_threads(int n); // threads for the engines that keep their own count
// A product C(M,N) cut into blocks of output rows or columns, which the threads take as they
// come free (a thread sharing its core with another process takes fewer): fn(ctx, m0, m1, n0,
// n1) computes C[m0:m1, n0:n1] (single-threaded inside the blocks' parallel loop). The blocks
// depend on M and N only (not on the thread count: one thread runs them in turn); small products
// and a caller already in a parallel region get one call over the whole of C.
typedef void (*CpuGemmBlockFn)(void *ctx, int m0, int m1, int n0, int n1);
void cpu_gemm_blocks(int M, int N, CpuGemmBlockFn fn, void *ctx);
// Where block (m0, n0) starts, in elements: in A (rows of op(A)), B (columns of op(B)) and C.
typedef struct {
    size_t a, b, c;
} CpuGemmAt;
static inline CpuGemmAt cpu_gemm_at(int ta, int tb, int lda, int ldb, int ldc, int m0, int n0) {
    return (CpuGemmAt){ta ? (size_t)m0 : (size_t)m0 * lda, tb ? (size_t)n0 * ldb : (size_t)n0,
                       (size_t)m0 * ldc + n0};
}

// ------------------------------------------------------------------ cpu.c, cpu_bf16.c
void cpu_bias_rows(float *out, const float *bias, int N, int OC);       // every row = bias
void cpu_bias_backward(float *dbias, const float *dout, int N, int OC); // dbias += Σ_n dout
// dst = src rounded to bf16 (nearest even; NaN stays NaN)
void cpu_bf16_round(uint16_t *dst, const float *src, size_t n);

// ------------------------------------------------------------------ peak.c
// A probe's kernel: `iters` rounds of independent multiply-add chains seeded by `seed`,
// returning something that depends on every result (so none is optimized away).
typedef float (*ProbeChains)(long iters, float seed);
// Every OpenMP thread runs `run` at once; the sum of their GFLOP/s, each over its own CPU time.
double cpu_probe_gflops(ProbeChains run, double flops_per_iter, int *threads);

// ------------------------------------------------------------------ cpu_isa.c
// The bf16 matrix instruction sets this CPU and OS offer (run-time cpuid), as a bit set.
enum { CPU_ISA_AVX512_BF16 = 1, CPU_ISA_AMX_BF16 = 2 };
int cpu_bf16_isa(void);
// 1 if the CPU runs AVX-512 (F, DQ, BW, VL with the OS's register state): cpu_isa.c.
int cpu_avx512(void);

// ------------------------------------------------------------------ cpu_attention.c
void cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
void cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                            const float *att, int B, int T, int C, int NH);
size_t cpu_attention_saved_floats(int B, int T, int NH, int hs);
void cpu_gqa_attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH,
                               int NKV, int hs);
void cpu_gqa_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                const float *att, int B, int T, int NH, int NKV, int hs);

// ------------------------------------------------------------------ cpu_llama.c
void cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                         float eps);
void cpu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                          const float *w, const float *rstd, int N, int C);
void cpu_rope_forward(float *qkv, const int *pos, const float *inv_freq, int B, int T, int NH,
                      int NKV, int hs);
void cpu_rope_backward(float *dqkv, const int *pos, const float *inv_freq, int B, int T, int NH,
                       int NKV, int hs);
void cpu_swiglu_forward(float *out, const float *inp, int N, int F);
void cpu_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F);

// ------------------------------------------------------------------ cpu_ring.c
void cpu_attn_chunk_forward(const AttnChunk *a, float *out, float *lse, const float *q,
                            const float *k, const float *v);
void cpu_attn_chunk_merge(const AttnChunk *a, float *out, float *lse, const float *ob,
                          const float *lseb);
void cpu_attn_chunk_backward(const AttnChunk *a, float *dq, float *dk, float *dv, const float *dout,
                             const float *out, const float *lse, const float *q, const float *k,
                             const float *v);
