// Benchmark of the passes over every parameter (zeroing, chunked norm, AdamW) as
// cpu.c writes them, with a static and a dynamic OpenMP schedule, alternating A/B
// in one run; medians printed. Standalone: gcc -O2 -fopenmp -march=native.
// Usage: bench_param_passes [n_params] [reps]
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CH 4096

static void zero_s(float *x, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        x[i] = 0.0f;
}
static void zero_d(float *x, size_t n) {
#pragma omp parallel for simd schedule(dynamic, 65536)
    for (size_t i = 0; i < n; i++)
        x[i] = 0.0f;
}
static void norm_s(const float *x, size_t n, double *out) {
    size_t nk = (n + CH - 1) / CH;
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < nk; k++) {
        size_t i0 = k * CH, i1 = i0 + CH < n ? i0 + CH : n;
        double acc = 0.0;
#pragma omp simd reduction(+ : acc)
        for (size_t i = i0; i < i1; i++)
            acc += (double)x[i] * x[i];
        out[k] = acc;
    }
}
static void norm_d(const float *x, size_t n, double *out) {
    size_t nk = (n + CH - 1) / CH;
#pragma omp parallel for schedule(dynamic, 16)
    for (size_t k = 0; k < nk; k++) {
        size_t i0 = k * CH, i1 = i0 + CH < n ? i0 + CH : n;
        double acc = 0.0;
#pragma omp simd reduction(+ : acc)
        for (size_t i = i0; i < i1; i++)
            acc += (double)x[i] * x[i];
        out[k] = acc;
    }
}
#define ADAM_BODY                                                                                  \
    for (size_t i = 0; i < n; i++) {                                                               \
        float g = grad[i] * 1.0f;                                                                  \
        float mi = 0.9f * m[i] + 0.1f * g, vi = 0.95f * v[i] + 0.05f * g * g;                      \
        m[i] = mi;                                                                                 \
        v[i] = vi;                                                                                 \
        p[i] -= 1e-4f * ((mi / 0.1f) / (sqrtf(vi / 0.05f) + 1e-8f) + 0.1f * p[i]);                 \
    }
static void adam_s(float *p, const float *grad, float *m, float *v, size_t n) {
#pragma omp parallel for simd schedule(static)
    ADAM_BODY
}
static void adam_d(float *p, const float *grad, float *m, float *v, size_t n) {
#pragma omp parallel for simd schedule(dynamic, 65536)
    ADAM_BODY
}
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double med(double *a, int n) {
    qsort(a, n, sizeof *a, cmpd);
    return a[n / 2];
}
int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], 0, 10) : 124000000;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    float *p = malloc(n * 4), *g = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
    double *nk = malloc(((n + CH - 1) / CH) * sizeof(double));
    for (size_t i = 0; i < n; i++)
        p[i] = g[i] = m[i] = v[i] = 1e-3f * (float)(i % 97);
    double t[6][64];
    for (int r = 0; r < reps && r < 64; r++) {
        double a;
        a = omp_get_wtime();
        zero_s(g, n);
        t[0][r] = omp_get_wtime() - a;
        a = omp_get_wtime();
        zero_d(g, n);
        t[1][r] = omp_get_wtime() - a;
        a = omp_get_wtime();
        norm_s(g, n, nk);
        t[2][r] = omp_get_wtime() - a;
        a = omp_get_wtime();
        norm_d(g, n, nk);
        t[3][r] = omp_get_wtime() - a;
        a = omp_get_wtime();
        adam_s(p, g, m, v, n);
        t[4][r] = omp_get_wtime() - a;
        a = omp_get_wtime();
        adam_d(p, g, m, v, n);
        t[5][r] = omp_get_wtime() - a;
    }
    const char *nm[6] = {"zero static",  "zero dynamic", "norm static",
                         "norm dynamic", "adamw static", "adamw dynamic"};
    printf("n=%zu threads=%d reps=%d (medians, ms)\n", n, omp_get_max_threads(), reps);
    for (int k = 0; k < 6; k++)
        printf("%-14s %8.1f\n", nm[k], 1e3 * med(t[k], reps));
    return 0;
}
