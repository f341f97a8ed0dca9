// bench_matmul.c — times the CPU backend's matrix engines (LOOM_MATMUL: openblas, blis, onednn)
// on the products one GPT-2 step makes, as cpu.c calls them: for each linear layer (C → OC) the
// forward out = inp·wᵀ (N×OC, K = C), the input gradient dinp = dout·w (N×C, K = OC) and the
// weight gradient dw += doutᵀ·inp (OC×C, K = N). Defaults: 124M at B4 T256 (N = 1024 rows,
// C = 768; layers qkv 768→2304, attn-proj 768→768, fc 768→3072, fc-proj 3072→768 and the head
// 768→50304).
//
//   make bench-matmul && build/bench/bench_matmul [--reps 5] [--threads 2] [--rows 1024]
//                                                 [--engines openblas,blis,onednn] [--no-head]
// Each rep runs every product once on every engine, the engines' order rotating from rep to rep
// (the host is shared: a disturbance hits all of them); per product and engine the median ms
// and GFLOP/s over the reps, and the largest difference from OpenBLAS's result (relative to the
// largest |value|). The last lines: each engine's whole-step sum (ms, weighted by the layer
// counts of a 12-layer model) and its rate.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/backend/backend.h"
#include "../src/backend/cpu_impl.h"
#include "../src/common.h"

enum { MAXREPS = 64 };

typedef struct {
    const char *name;
    int C, OC, count; // count: how many such layers a step has
} Layer;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
}

// product p of a layer: 0 forward, 1 dinp, 2 dw (into out, which must hold OC·C or N·OC)
static void product(int p, const Layer *l, int N, const float *inp, const float *w,
                    const float *dout, float *out) {
    int C = l->C, OC = l->OC;
    if (p == 0) cpu_sgemm(0, 1, N, OC, C, 1.0f, inp, C, w, C, 0.0f, out, OC);
    if (p == 1) cpu_sgemm(0, 0, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, out, C);
    if (p == 2) cpu_sgemm(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 0.0f, out, C);
}

static double maxrel(const float *a, const float *ref, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - ref[i]);
        d = e > d ? e : d;
        m = fabs(ref[i]) > m ? fabs(ref[i]) : m;
    }
    return m > 0 ? d / m : d;
}

int main(int argc, char **argv) {
    int reps = 5, threads = 2, N = 1024, head = 1;
    const char *engines = "openblas,blis,onednn";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            N = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--engines") && i + 1 < argc)
            engines = argv[++i];
        else if (!strcmp(argv[i], "--no-head"))
            head = 0;
        else {
            fprintf(stderr, "usage: bench_matmul [--reps N] [--threads N] [--rows N] "
                            "[--engines a,b] [--no-head]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > MAXREPS || N < 1) return fprintf(stderr, "bad --reps/--rows\n"), 2;
    CpuGemm eng[CPU_GEMM_NENGINES];
    int ne = 0;
    char list[128];
    snprintf(list, sizeof list, "%s", engines);
    for (char *t = strtok(list, ","); t && ne < CPU_GEMM_NENGINES; t = strtok(NULL, ","))
        if (cpu_gemm_parse(t, &eng[ne++])) return fprintf(stderr, "%s\n", loom_errmsg()), 2;
    backend_cpu_set_threads(threads);
    Layer layers[] = {{"qkv", 768, 2304, 12},
                      {"attproj", 768, 768, 12},
                      {"fc", 768, 3072, 12},
                      {"fcproj", 3072, 768, 12},
                      {"head", 768, 50304, 1}};
    int nl = head ? 5 : 4;
    static const char *PN[3] = {"fwd  out=inp·wT", "bwd  dinp=dout·w", "bwd  dw=doutT·inp"};
    printf("bench_matmul: N=%d rows, %d threads, %d reps, engines %s\n", N, threads, reps, engines);
    printf("%-8s %-18s %6s %6s %6s", "layer", "product", "M", "N", "K");
    for (int e = 0; e < ne; e++)
        printf(" %10s ms %7s", cpu_gemm_name(eng[e]), "GF/s");
    printf("  maxreldiff\n");
    double step_ms[CPU_GEMM_NENGINES] = {0}, step_flop = 0;
    for (int li = 0; li < nl; li++) {
        const Layer *l = &layers[li];
        size_t ni = (size_t)N * l->C, nw = (size_t)l->OC * l->C, nd = (size_t)N * l->OC;
        size_t no = nd > nw ? nd : nw;
        no = ni > no ? ni : no;
        float *inp = xalloc_floats(ni), *w = xalloc_floats(nw), *dout = xalloc_floats(nd);
        float *out = xalloc_floats(no), *ref = xalloc_floats(no);
        fill(inp, ni, 1), fill(w, nw, 2), fill(dout, nd, 3);
        for (int p = 0; p < 3; p++) {
            double t[CPU_GEMM_NENGINES][MAXREPS], diff = 0;
            size_t on = p == 2 ? nw : nd;
            if (p == 1) on = ni;
            cpu_gemm_set(CPU_GEMM_OPENBLAS);
            product(p, l, N, inp, w, dout, ref);
            for (int r = 0; r < reps; r++)
                for (int k = 0; k < ne; k++) {
                    int e = (k + r) % ne;
                    cpu_gemm_set(eng[e]);
                    if (r == 0) product(p, l, N, inp, w, dout, out); // warm-up
                    double t0 = now();
                    product(p, l, N, inp, w, dout, out);
                    t[e][r] = now() - t0;
                    double d = maxrel(out, ref, on);
                    diff = d > diff ? d : diff;
                }
            int M = p == 2 ? l->OC : N, Nn = p == 1 ? l->C : p == 0 ? l->OC : l->C;
            int K = p == 0 ? l->C : p == 1 ? l->OC : N;
            double flop = 2.0 * M * Nn * K;
            step_flop += flop * l->count;
            printf("%-8s %-18s %6d %6d %6d", l->name, PN[p], M, Nn, K);
            for (int e = 0; e < ne; e++) {
                double ms = 1e3 * median(t[e], reps);
                step_ms[e] += ms * l->count;
                printf(" %13.2f %7.1f", ms, flop / ms / 1e6);
            }
            printf("  %.1e\n", diff);
        }
        free(inp), free(w), free(dout), free(out), free(ref);
    }
    printf("%-53s", "step (12 layers + head), sum of medians");
    for (int e = 0; e < ne; e++)
        printf(" %13.1f %7.1f", step_ms[e], step_flop / step_ms[e] / 1e6);
    printf("\n");
    return 0;
}
