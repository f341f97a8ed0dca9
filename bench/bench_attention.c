// bench_attention.c — times the CPU backend's causal attention (forward + backward) against
// the stored-softmax kernel it replaced, kept here as the peer: per (b, head) one T×T score
// sgemm, a causal softmax saved as att (B,NH,T,T), and four T×T sgemms backward.
//
//   make bench-attention && build/bench/bench_attention [--reps N] [--B 4] [--NH 12] [--hs 64]
//                                                       [--T 256,512,1024] [--threads N]
// For each T: the medians over N reps (default 7) of one forward and of one backward of each
// kernel (ms; old and new alternate inside a rep so that a disturbance hits both), their sums
// and the new/old ratio of the sums; the att each keeps (MiB); and the largest difference of
// out and dqkv between the two (a sanity check, not a test).
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/backend/backend.h"
#include "../src/backend/cpu_impl.h"
#include "../src/common.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// ---- the peer: the stored-softmax kernel as it was

static void old_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    size_t C3 = 3 * (size_t)C;
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
        const float *k = q + C, *v = q + 2 * C;
        float *a = att + (size_t)bh * T * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, (int)C3, k,
                    (int)C3, 0.0f, a, T);
        for (int t = 0; t < T; t++) { // causal softmax over j ≤ t
            float *row = a + (size_t)t * T;
            float mx = -INFINITY;
            for (int j = 0; j <= t; j++)
                mx = row[j] > mx ? row[j] : mx;
            float sum = 0.f;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j <= t; j++) {
                row[j] = fast_expf(row[j] - mx);
                sum += row[j];
            }
            float inv = 1.0f / sum;
            for (int j = 0; j <= t; j++)
                row[j] *= inv;
            for (int j = t + 1; j < T; j++)
                row[j] = 0.f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, v, (int)C3,
                    0.0f, out + (size_t)b * T * C + (size_t)h * hs, C);
    }
}

static void old_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                         int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    size_t C3 = 3 * (size_t)C;
#pragma omp parallel
    {
        float *datt = xalloc_floats((size_t)T * T);
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH;
            size_t off = (size_t)b * T * C3 + (size_t)h * hs;
            const float *q = qkv + off, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
            const float *a = att + (size_t)bh * T * T;
            const float *dy = dout + (size_t)b * T * C + (size_t)h * hs;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, C, v, (int)C3,
                        0.0f, datt, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, dy, C, 0.0f,
                        dv, (int)C3);
            for (int t = 0; t < T; t++) {
                const float *ar = a + (size_t)t * T;
                float *dr = datt + (size_t)t * T;
                float dot = 0.f;
                for (int j = 0; j <= t; j++)
                    dot += ar[j] * dr[j];
                for (int j = 0; j <= t; j++)
                    dr[j] = ar[j] * (dr[j] - dot);
                for (int j = t + 1; j < T; j++)
                    dr[j] = 0.f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, scale, datt, T, k,
                        (int)C3, 0.0f, dq, (int)C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, scale, datt, T, q,
                        (int)C3, 0.0f, dk, (int)C3);
        }
        free(datt);
    }
}

// ---- the run

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double maxdiff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static void bench_one(const Backend *be, int B, int NH, int hs, int T, int reps) {
    int C = NH * hs;
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C;
    float *qkv = xalloc_floats(n3), *dout = xalloc_floats(n1);
    srand(1);
    for (size_t i = 0; i < n3; i++)
        qkv[i] = (float)rand() / RAND_MAX * 2.f - 1.f;
    for (size_t i = 0; i < n1; i++)
        dout[i] = (float)rand() / RAND_MAX * 2.f - 1.f;
    float *o_out = xalloc_floats(n1), *o_att = xalloc_floats((size_t)B * NH * T * T);
    float *o_d = xalloc_floats(n3), *n_out = xalloc_floats(n1), *n_d = xalloc_floats(n3);
    float *n_att = be->alloc(be->attention_saved_floats(B, T, NH, C / NH));
    double *t[4]; // old fwd, old bwd, new fwd, new bwd
    for (int i = 0; i < 4; i++)
        t[i] = xcalloc(reps, sizeof(double));
    for (int r = -1; r < reps; r++) { // r = -1: warm-up
        double t0 = now();
        old_forward(o_out, o_att, qkv, B, T, C, NH);
        double t1 = now();
        old_backward(o_d, dout, qkv, o_att, B, T, C, NH);
        double t2 = now();
        be->attention_forward(n_out, n_att, qkv, B, T, C, NH);
        double t3 = now();
        be->attention_backward(n_d, dout, qkv, n_out, n_att, B, T, C, NH);
        double t4 = now();
        if (r < 0) continue;
        t[0][r] = t1 - t0, t[1][r] = t2 - t1, t[2][r] = t3 - t2, t[3][r] = t4 - t3;
    }
    double md[4], mo, mn;
    for (int i = 0; i < 4; i++)
        qsort(t[i], reps, sizeof(double), cmp_double), md[i] = 1e3 * t[i][reps / 2];
    mo = md[0] + md[1], mn = md[2] + md[3]; // totals: sums of the medians
    printf("| %4d | %7.2f | %7.2f | %7.2f | %7.2f | %7.2f | %7.2f | %5.2f | %7.1f | %7.2f | %.0e "
           "| %.0e |\n",
           T, md[0], md[2], md[1], md[3], mo, mn, mn / mo, (double)B * NH * T * T * 4 / 1048576,
           be->attention_saved_floats(B, T, NH, C / NH) * 4.0 / 1048576, maxdiff(o_out, n_out, n1),
           maxdiff(o_d, n_d, n3));
    free(qkv), free(dout), free(o_out), free(o_att), free(o_d), free(n_out), free(n_d);
    be->release(n_att);
    for (int i = 0; i < 4; i++)
        free(t[i]);
}

int main(int argc, char **argv) {
    int reps = 7, B = 4, NH = 12, hs = 64, threads = 0;
    const char *Ts = "256,512,1024";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--B"))
            B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--NH"))
            NH = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--hs"))
            hs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--T"))
            Ts = argv[i + 1];
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else
            return fprintf(stderr, "bench_attention: unknown flag %s\n", argv[i]), 2;
    }
    if (reps < 1 || B < 1 || NH < 1 || hs < 1)
        return fprintf(stderr, "bench_attention: bad shape\n"), 2;
    const Backend *be = backend_select("cpu", threads);
    if (!be) return fprintf(stderr, "bench_attention: %s\n", loom_errmsg()), 1;
    printf("attention fwd+bwd, B=%d NH=%d hs=%d, %d threads, median of %d reps (ms)\n\n", B, NH, hs,
           omp_get_max_threads(), reps);
    printf("| T | fwd old | fwd new | bwd old | bwd new | old | new | new/old | old att MiB | "
           "new att MiB | max Δout | max Δdqkv |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
           "\n");
    for (const char *p = Ts; *p;) {
        int T = atoi(p);
        if (T > 0) bench_one(be, B, NH, hs, T, reps);
        p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
    }
    return 0;
}
