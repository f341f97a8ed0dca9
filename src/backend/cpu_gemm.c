// cpu_gemm.c — the CPU backend's matrix engine: the fp32 products of the model's linear layers
// (cpu.c's matmul_forward/backward) go through cpu_sgemm, which hands them to one of three
// libraries, chosen once per process by the environment variable LOOM_MATMUL:
//   openblas  OpenBLAS's cblas_sgemm
//   blis      BLIS's typed API (bli_sgemm, strides instead of transposes)
//   onednn    oneDNN's dnnl_sgemm (its jit GEMM, kernels picked from cpuid at run time)
// Unset, the engine is the one measured fastest for the CPU it runs on (cpu_gemm_default):
// oneDNN where the CPU has AVX-512 (1.78× OpenBLAS 0.3.21 over a GPT-2 124M step on an AVX-512
// EPYC, where OpenBLAS runs its Haswell kernels), OpenBLAS elsewhere (level with oneDNN on an
// AVX2 EPYC: BENCHMARKS.md). Each is deterministic; their sums differ in order, so runs compared
// bit for bit use the same engine, which the same CPU gives them.
// The small single-threaded tile products of the attention kernels stay on OpenBLAS.
// A product big enough is cut into blocks of output rows or columns that the threads take as
// they come free (cpu_gemm_blocks): a thread whose core another process shares takes fewer, so a
// taken core costs the products about its share of the CPU rather than half of their speed.
#include <blis-openmp/blis.h>
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "backend.h"
#include "cpu_impl.h"

static const char *const NAMES[CPU_GEMM_NENGINES] = {"openblas", "blis", "onednn"};
static int engine = -1; // -1: not chosen yet
static int nthreads = 0;

const char *cpu_gemm_name(CpuGemm e) { return e >= 0 && e < CPU_GEMM_NENGINES ? NAMES[e] : "?"; }

int cpu_gemm_parse(const char *s, CpuGemm *out) {
    for (int e = 0; e < CPU_GEMM_NENGINES; e++)
        if (!strcmp(s, NAMES[e])) return *out = (CpuGemm)e, 0;
    return loom_fail("LOOM_MATMUL='%s': unknown matrix engine (openblas, blis, onednn)", s);
}

static void apply_threads(void) {
    if (nthreads <= 0) return;
    if (engine == CPU_GEMM_BLIS) bli_thread_set_num_threads(nthreads);
    // oneDNN (OpenMP runtime) and OpenBLAS follow omp_set_num_threads / openblas_set_num_threads
}

void cpu_gemm_set(CpuGemm e) {
    engine = (int)e;
    if (e == CPU_GEMM_BLIS && nthreads <= 0) {
        // BLIS runs one thread unless told otherwise: give it OpenMP's count
        nthreads = omp_get_max_threads();
    }
    apply_threads();
}

CpuGemm cpu_gemm_default(void) { return cpu_avx512() ? CPU_GEMM_ONEDNN : CPU_GEMM_OPENBLAS; }

int cpu_gemm_init(void) {
    if (engine >= 0) return 0;
    const char *v = getenv("LOOM_MATMUL");
    CpuGemm e = cpu_gemm_default();
    if (v && *v && cpu_gemm_parse(v, &e)) return -1;
    cpu_gemm_set(e);
    return 0;
}

CpuGemm cpu_gemm_engine(void) {
    if (engine < 0 && cpu_gemm_init()) {
        fprintf(stderr, "loom: %s\n", loom_errmsg());
        exit(2);
    }
    return (CpuGemm)engine;
}

void cpu_gemm_threads(int n) {
    nthreads = n;
    apply_threads();
}

// Blocks of the longer output side: about GEMM_BLOCKS of them, a multiple of 64 wide, at least
// GEMM_MIN_BLOCK; a side shorter than two of those is not cut.
enum { GEMM_BLOCKS = 8, GEMM_MIN_BLOCK = 128 };

void cpu_gemm_blocks(int M, int N, CpuGemmBlockFn fn, void *ctx) {
    int rows = M > N, D = rows ? M : N;
    if (D < 2 * GEMM_MIN_BLOCK || omp_in_parallel()) {
        fn(ctx, 0, M, 0, N); // one product, the engine's own threads
        return;
    }
    int bs = ((D + GEMM_BLOCKS - 1) / GEMM_BLOCKS + 63) / 64 * 64;
    if (bs < GEMM_MIN_BLOCK) bs = GEMM_MIN_BLOCK;
    int nb = (D + bs - 1) / bs;
#pragma omp parallel for schedule(dynamic, 1)
    for (int b = 0; b < nb; b++) {
        int a0 = b * bs, a1 = a0 + bs < D ? a0 + bs : D;
        if (rows)
            fn(ctx, a0, a1, 0, N);
        else
            fn(ctx, 0, M, a0, a1);
    }
}

// Row-major C(M,N) = alpha·op(A)·op(B) + beta·C, op(A) M×K, op(B) K×N.
static void sgemm_whole(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc) {
    switch (cpu_gemm_engine()) {
    case CPU_GEMM_BLIS: {
        // op(A)(i,k) lives at A[i·lda + k] (no transpose) or A[k·lda + i]: strides say which
        inc_t rsa = ta ? 1 : lda, csa = ta ? lda : 1, rsb = tb ? 1 : ldb, csb = tb ? ldb : 1;
        bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, M, N, K, &alpha, (float *)A, rsa, csa,
                  (float *)B, rsb, csb, &beta, C, ldc, 1);
        return;
    }
    case CPU_GEMM_ONEDNN:
        if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C,
                       ldc) != dnnl_success) {
            fprintf(stderr, "loom: dnnl_sgemm failed (M=%d N=%d K=%d)\n", M, N, K);
            abort();
        }
        return;
    default:
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
}

typedef struct {
    int ta, tb, K, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B;
    float *C;
} Sgemm;

// C[m0:m1, n0:n1] from rows m0..m1 of op(A) and columns n0..n1 of op(B)
static void sgemm_block(void *ctx, int m0, int m1, int n0, int n1) {
    const Sgemm *g = ctx;
    CpuGemmAt at = cpu_gemm_at(g->ta, g->tb, g->lda, g->ldb, g->ldc, m0, n0);
    sgemm_whole(g->ta, g->tb, m1 - m0, n1 - n0, g->K, g->alpha, g->A + at.a, g->lda, g->B + at.b,
                g->ldb, g->beta, g->C + at.c, g->ldc);
}

void cpu_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc) {
    Sgemm g = {ta, tb, K, lda, ldb, ldc, alpha, beta, A, B, C};
    if (cpu_gemm_engine() == CPU_GEMM_BLIS) // BLIS keeps its own thread count: never nested
        sgemm_block(&g, 0, M, 0, N);
    else
        cpu_gemm_blocks(M, N, sgemm_block, &g);
}

const char *backend_cpu_matmul(void) {
    static char buf[256];
    const dnnl_version_t *dv = dnnl_version();
    snprintf(buf, sizeof buf,
             "%s (LOOM_MATMUL; default %s on this CPU, %s); blis %s; onednn %d.%d.%d (%s)",
             cpu_gemm_name(cpu_gemm_engine()), NAMES[cpu_gemm_default()],
             cpu_avx512() ? "AVX-512" : "no AVX-512", bli_info_get_version_str(), dv->major,
             dv->minor, dv->patch, dv->cpu_runtime == DNNL_RUNTIME_OMP ? "omp" : "seq");
    return buf;
}
