// gradcheck.h — what the finite-difference tests share (test_gradcheck.c, test_llama_kernels.c):
// the seeded generator and backend they use, random vectors, a dot product in double, and the
// check of an analytic gradient against central differences of a scalar function.
#pragma once
#include "../src/backend/backend.h"
#include "../src/common.h"
#include "../src/rng.h"
#include "test.h"

static Rng rng;
static const Backend *be;

static float *randv(size_t n, float s) {
    float *x = xalloc_floats(n);
    for (size_t i = 0; i < n; i++)
        x[i] = s * rng_normal(&rng);
    return x;
}
static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

// Compares analytic grad g of scalar function f wrt x at up to `probes` coordinates.
typedef double (*ScalarFn)(void *ctx);
static int fd_check(const char *what, ScalarFn f, void *ctx, float *x, const float *g, size_t n,
                    int probes, double rtol, double atol) {
    int bad = 0;
    double h = 1e-2;
    for (int p = 0; p < probes; p++) {
        size_t i = probes >= (int)n ? (size_t)p : rng_below(&rng, (uint32_t)n);
        if (i >= n) break;
        float x0 = x[i];
        x[i] = x0 + (float)h;
        double fp = f(ctx);
        x[i] = x0 - (float)h;
        double fm = f(ctx);
        x[i] = x0;
        double num = (fp - fm) / (2 * h);
        if (!close_enough(g[i], num, rtol, atol)) {
            if (bad < 3)
                fprintf(stderr, "  %s[%zu]: analytic %.6g vs numeric %.6g\n", what, i, g[i], num);
            bad++;
        }
    }
    return bad;
}
