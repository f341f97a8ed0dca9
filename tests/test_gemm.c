// test_gemm.c — the CPU backend's matrix engines (cpu_gemm.c: OpenBLAS, BLIS, oneDNN behind
// cpu_sgemm, LOOM_MATMUL) against a double-precision reference written here, at odd shapes (1×1×1,
// sizes that are no multiple of any kernel's tile, K larger than M and N), every transpose case
// (loom's layers use NT forward, NN for dinp and TN for dw), leading dimensions wider than the
// rows, alpha ≠ 1, beta 0 (C's old contents, NaN here, must be ignored) and beta 1.
// The tolerance is fp32's bound for a K-term dot product in any summation order:
//   |c − ref| ≤ (K + 2)·2⁻²⁴·(Σ_k |α·a_ik·b_kj| + |β·c_ij|).
// Each engine must also be reproducible run to run (the same call twice gives the same bits: a
// resumed run repeats its steps exactly) and give the same bits on 1 and 2 threads (a product is
// cut into blocks by its shape alone), the blocks must cover C exactly once, and the backend's
// matmul_forward/backward must give the same through every engine. Negative control: the reference
// with A's transpose flag flipped (a square A, so the shapes still fit) must fail the same
// comparison.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/backend.h"
#include "../src/backend/cpu_impl.h"
#include "../src/common.h"
#include "../src/rng.h"
#include "test.h"

static Rng rng;

static float *randv(size_t n) {
    float *x = xalloc_floats(n);
    for (size_t i = 0; i < n; i++)
        x[i] = rng_uniform(&rng) * 2.0f - 1.0f;
    return x;
}

// op(X)(r, c) of a row-major X with leading dimension ld
static double at(const float *X, int ld, int t, int r, int c) {
    return t ? X[(size_t)c * ld + r] : X[(size_t)r * ld + c];
}

// How many entries of C are outside the tolerance of the reference op(A)·op(B) (A's transpose
// flag ref_ta differs from the one C was computed with only in the negative control).
static int bad_entries(int ref_ta, int tb, int M, int N, int K, float alpha, const float *A,
                       int lda, const float *B, int ldb, float beta, const float *C0,
                       const float *C, int ldc) {
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = alpha * at(A, lda, ref_ta, i, k) * at(B, ldb, tb, k, j);
                ref += p, mag += fabs(p);
            }
            if (beta != 0) {
                ref += beta * (double)C0[(size_t)i * ldc + j];
                mag += fabs(beta * (double)C0[(size_t)i * ldc + j]);
            }
            double got = C[(size_t)i * ldc + j];
            bad += !(fabs(got - ref) <= (K + 2) * ldexp(1.0, -24) * mag);
        }
    return bad;
}

typedef struct {
    int M, N, K;
} Shape;

// (the last two are cut into blocks of columns and of rows: cpu_gemm_blocks)
static const Shape SHAPES[] = {{1, 1, 1},    {37, 53, 29},  {5, 130, 67},  {64, 17, 300},
                               {33, 33, 33}, {70, 700, 50}, {600, 130, 40}};

TEST(engines_match_reference) {
    for (int e = 0; e < CPU_GEMM_NENGINES; e++) {
        cpu_gemm_set((CpuGemm)e);
        for (size_t s = 0; s < sizeof SHAPES / sizeof *SHAPES; s++)
            for (int tc = 0; tc < 8; tc++) {
                int ta = tc & 1, tb = (tc >> 1) & 1, acc = tc >> 2;
                int M = SHAPES[s].M, N = SHAPES[s].N, K = SHAPES[s].K;
                int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
                float *A = randv((size_t)(ta ? K : M) * lda),
                      *B = randv((size_t)(tb ? N : K) * ldb);
                float *C0 = randv((size_t)M * ldc), *C = xalloc_floats((size_t)M * ldc);
                float beta = acc ? 1.0f : 0.0f;
                memcpy(C, C0, sizeof(float) * M * ldc);
                if (!acc)
                    for (size_t i = 0; i < (size_t)M * ldc; i++)
                        C[i] = NAN; // beta 0: never read
                cpu_sgemm(ta, tb, M, N, K, 0.75f, A, lda, B, ldb, beta, C, ldc);
                int bad = bad_entries(ta, tb, M, N, K, 0.75f, A, lda, B, ldb, beta, C0, C, ldc);
                CHECK(bad == 0, "%s: M=%d N=%d K=%d ta=%d tb=%d beta=%g: %d entries off",
                      cpu_gemm_name((CpuGemm)e), M, N, K, ta, tb, beta, bad);
                free(A), free(B), free(C0), free(C);
            }
    }
    cpu_gemm_set(CPU_GEMM_OPENBLAS);
}

TEST(negative_control_wrong_transpose_fails) {
    int M = 33, N = 33, K = 33, ld = 33;
    float *A = randv(33 * 33), *B = randv(33 * 33), *C = xalloc_floats(33 * 33);
    for (int e = 0; e < CPU_GEMM_NENGINES; e++) {
        cpu_gemm_set((CpuGemm)e);
        cpu_sgemm(1, 0, M, N, K, 1.0f, A, ld, B, ld, 0.0f, C, ld);
        int bad = bad_entries(0, 0, M, N, K, 1.0f, A, ld, B, ld, 0.0f, C, C, ld);
        CHECK(bad > M * N / 2, "%s: only %d of %d entries differ from the wrong reference",
              cpu_gemm_name((CpuGemm)e), bad, M * N);
    }
    cpu_gemm_set(CPU_GEMM_OPENBLAS);
    free(A), free(B), free(C);
}

TEST(engines_reproducible) {
    int M = 300, N = 250, K = 400;
    float *A = randv((size_t)M * K), *B = randv((size_t)N * K);
    float *C1 = xalloc_floats((size_t)M * N), *C2 = xalloc_floats((size_t)M * N);
    for (int e = 0; e < CPU_GEMM_NENGINES; e++) {
        cpu_gemm_set((CpuGemm)e);
        cpu_sgemm(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C1, N);
        cpu_sgemm(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C2, N);
        CHECK(!memcmp(C1, C2, sizeof(float) * M * N), "%s: two identical calls differ",
              cpu_gemm_name((CpuGemm)e));
    }
    cpu_gemm_set(CPU_GEMM_OPENBLAS);
    free(A), free(B), free(C1), free(C2);
}

typedef struct {
    int M, N, bad, calls, whole;
    unsigned char *hit;
} Cover;

static void cover_block(void *ctx, int m0, int m1, int n0, int n1) {
    Cover *c = ctx;
    int whole = m0 == 0 && n0 == 0 && m1 == c->M && n1 == c->N;
    int bad = m0 < 0 || n0 < 0 || m1 > c->M || n1 > c->N || m0 >= m1 || n0 >= n1;
#pragma omp critical
    {
        c->calls++;
        c->whole += whole;
        c->bad += bad;
        for (int i = m0; !bad && i < m1; i++)
            for (int j = n0; j < n1; j++)
                c->hit[(size_t)i * c->N + j]++;
    }
}

// Every element of C in exactly one block; small products in one call outside any block.
TEST(blocks_cover_once) {
    static const int MN[][2] = {{1, 1},      {255, 255},    {256, 40},    {40, 1000},
                                {1024, 768}, {1024, 50304}, {3072, 1024}, {257, 513}};
    for (size_t s = 0; s < sizeof MN / sizeof MN[0]; s++) {
        Cover c = {.M = MN[s][0], .N = MN[s][1]};
        c.hit = xcalloc((size_t)c.M * c.N, 1);
        cpu_gemm_blocks(c.M, c.N, cover_block, &c);
        size_t off = 0;
        for (size_t i = 0; i < (size_t)c.M * c.N; i++)
            off += c.hit[i] != 1;
        int big = (c.M > c.N ? c.M : c.N) >= 256;
        CHECK(!c.bad && !off, "M=%d N=%d: %zu elements not covered exactly once", c.M, c.N, off);
        CHECK(big ? c.calls > 1 && !c.whole : c.calls == 1 && c.whole == 1,
              "M=%d N=%d: %d calls, %d whole", c.M, c.N, c.calls, c.whole);
        free(c.hit);
    }
}

// A product's bits do not depend on the thread count (its blocks depend on its shape only).
TEST(same_bits_any_thread_count) {
    int M = 520, N = 300, K = 96;
    float *A = randv((size_t)M * K), *B = randv((size_t)N * K);
    float *C1 = xalloc_floats((size_t)M * N), *C2 = xalloc_floats((size_t)M * N);
    int nth = omp_get_max_threads();
    for (int e = 0; e < CPU_GEMM_NENGINES; e++) {
        if (e == CPU_GEMM_BLIS) continue; // BLIS keeps its own threads, never cut
        cpu_gemm_set((CpuGemm)e);
        omp_set_num_threads(1);
        cpu_sgemm(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C1, N);
        omp_set_num_threads(2);
        cpu_sgemm(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C2, N);
        CHECK(!memcmp(C1, C2, sizeof(float) * M * N), "%s: 1 and 2 threads differ",
              cpu_gemm_name((CpuGemm)e));
    }
    omp_set_num_threads(nth);
    cpu_gemm_set(CPU_GEMM_OPENBLAS);
    free(A), free(B), free(C1), free(C2);
}

// The layer's products through the backend table, as the model calls them: out = inp·wᵀ + bias,
// dinp = dout·w, dw += doutᵀ·inp, dbias += Σ dout; every engine within the bound of the
// OpenBLAS result's reference (checked through bad_entries on each product).
TEST(backend_matmul_every_engine) {
    const Backend *be = backend_cpu();
    int N = 45, C = 70, OC = 91;
    float *inp = randv((size_t)N * C), *w = randv((size_t)OC * C), *bias = randv(OC);
    float *dout = randv((size_t)N * OC), *dw0 = randv((size_t)OC * C);
    float *out = xalloc_floats((size_t)N * OC), *dinp = xalloc_floats((size_t)N * C);
    float *dw = xalloc_floats((size_t)OC * C), *db = xalloc_floats(OC);
    for (int e = 0; e < CPU_GEMM_NENGINES; e++) {
        cpu_gemm_set((CpuGemm)e);
        const char *name = cpu_gemm_name((CpuGemm)e);
        be->matmul_forward(out, inp, w, bias, N, C, OC);
        float *bias_rows = xalloc_floats((size_t)N * OC);
        for (int n = 0; n < N; n++)
            memcpy(bias_rows + (size_t)n * OC, bias, sizeof(float) * OC);
        CHECK(!bad_entries(0, 1, N, OC, C, 1, inp, C, w, C, 1, bias_rows, out, OC), "%s: forward",
              name);
        memcpy(dw, dw0, sizeof(float) * OC * C);
        memset(db, 0, sizeof(float) * OC);
        be->matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC);
        CHECK(!bad_entries(0, 0, N, C, OC, 1, dout, OC, w, C, 0, dinp, dinp, C), "%s: dinp", name);
        CHECK(!bad_entries(1, 0, OC, C, N, 1, dout, OC, inp, C, 1, dw0, dw, C), "%s: dw", name);
        free(bias_rows);
    }
    cpu_gemm_set(CPU_GEMM_OPENBLAS);
    free(inp), free(w), free(bias), free(dout), free(dw0), free(out), free(dinp), free(dw);
    free(db);
}

TEST(engine_names_parse) {
    CpuGemm e;
    for (int i = 0; i < CPU_GEMM_NENGINES; i++)
        CHECK(!cpu_gemm_parse(cpu_gemm_name((CpuGemm)i), &e) && e == (CpuGemm)i, "engine %d", i);
    CHECK(cpu_gemm_parse("mkl", &e) == -1, "mkl accepted");
    CHECK(strstr(loom_errmsg(), "LOOM_MATMUL='mkl'") != NULL, "message: %s", loom_errmsg());
}

int main(void) {
    rng_seed(&rng, 26, 0);
    backend_cpu_set_threads(2);
    RUN(engines_match_reference);
    RUN(negative_control_wrong_transpose_fails);
    RUN(engines_reproducible);
    RUN(blocks_cover_once);
    RUN(same_bits_any_thread_count);
    RUN(backend_matmul_every_engine);
    RUN(engine_names_parse);
    return test_summary();
}
