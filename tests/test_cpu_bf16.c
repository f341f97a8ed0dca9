// test_cpu_bf16.c — the CPU backend's bf16 products (cpu_bf16.c, --dtype bf16). Skipped on a
// CPU without AVX512-BF16 or AMX-BF16 (the refusal there is t_cpu_bf16.sh's).
//   * rounding: fp32 → bf16 to nearest even on chosen values (ties both ways, the largest
//     finite float to infinity, infinities, NaN stays NaN, negative zero, a subnormal);
//   * exactness: operands that are already bf16 values give the fp32 backend's products to
//     fp32 accumulation's rounding (1e-5 relative, norm-wise), so a wrong transpose, stride or
//     accumulation fails hard: forward with and without bias, dinp, dW accumulated onto a
//     non-zero start, dbias; odd shapes and the 2-row and 1-column edges;
//   * general operands: within 1e-2 norm-wise of fp32 (bf16 keeps 8 bits);
//   * a second thread gets its own primitives and scratch and the same bits.
// Negative control: the exactness comparison with the weight transposed must fail.
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/backend.h"
#include "../src/backend/cpu_impl.h"
#include "../src/common.h"
#include "../src/rng.h"
#include "test.h"

static Rng rng;
static const Backend *f32, *b16;

static float *randv(size_t n, int bf16_exact) {
    float *x = xalloc_floats(n);
    for (size_t i = 0; i < n; i++) {
        x[i] = rng_uniform(&rng) * 2.0f - 1.0f;
        if (bf16_exact) { // keep 8 significant bits: the value is its own bf16 rounding
            uint32_t u;
            memcpy(&u, &x[i], sizeof u);
            u &= 0xffff0000u;
            memcpy(&x[i], &u, sizeof u);
        }
    }
    return x;
}

static double rel_norm(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++)
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), r += (double)b[i] * b[i];
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

static uint16_t round1(float f) {
    uint16_t h;
    cpu_bf16_round(&h, &f, 1);
    return h;
}

TEST(rounding) {
    struct {
        uint32_t in;
        uint16_t out;
    } v[] = {
        {0x3f800000, 0x3f80}, // 1
        {0x3f808000, 0x3f80}, // 1 + 2^-8: halfway, to the even 0x3f80
        {0x3f818000, 0x3f82}, // halfway between 0x3f81 and 0x3f82: up to the even one
        {0x3f808001, 0x3f81}, // just above halfway: up
        {0x7f7fffff, 0x7f80}, // the largest float rounds to infinity
        {0x7f800000, 0x7f80}, // +inf
        {0xff800000, 0xff80}, // -inf
        {0x80000000, 0x8000}, // -0
        {0x00000001, 0x0000}, // the smallest subnormal: to zero
        {0xbf7fffff, 0xbf80}, // -(1 - 2^-24): to -1
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        float f;
        memcpy(&f, &v[i].in, sizeof f);
        CHECK(round1(f) == v[i].out, "bf16(0x%08x) = 0x%04x, want 0x%04x", v[i].in, round1(f),
              v[i].out);
    }
    float nan = NAN;
    uint16_t h = round1(nan);
    CHECK((h & 0x7f80) == 0x7f80 && (h & 0x7f), "NaN rounded to 0x%04x (not a NaN)", h);
}

// One layer's forward and backward on both backends; returns the worst norm-wise difference
// (over out, dinp, dW, dbias). wt: the bf16 side reads w transposed (the negative control).
static double layer_diff(int N, int C, int OC, int bias, int exact, int wt) {
    float *x = randv((size_t)N * C, exact), *w = randv((size_t)OC * C, exact);
    float *b = bias ? randv(OC, exact) : NULL, *g = randv((size_t)N * OC, exact);
    float *o1 = xalloc_floats((size_t)N * OC), *o2 = xalloc_floats((size_t)N * OC);
    float *di1 = xalloc_floats((size_t)N * C), *di2 = xalloc_floats((size_t)N * C);
    float *dw1 = randv((size_t)OC * C, 1), *dw2 = xalloc_floats((size_t)OC * C);
    float *db1 = randv(OC, 1), *db2 = xalloc_floats(OC);
    memcpy(dw2, dw1, (size_t)OC * C * sizeof(float)), memcpy(db2, db1, OC * sizeof(float));
    float *w2 = w;
    if (wt) { // square only: w2 = wᵀ
        w2 = xalloc_floats((size_t)OC * C);
        for (int i = 0; i < OC; i++)
            for (int j = 0; j < C; j++)
                w2[(size_t)j * OC + i] = w[(size_t)i * C + j];
    }
    f32->matmul_forward(o1, x, w, b, N, C, OC);
    b16->matmul_forward(o2, x, w2, b, N, C, OC);
    f32->matmul_backward(di1, dw1, bias ? db1 : NULL, g, x, w, N, C, OC);
    b16->matmul_backward(di2, dw2, bias ? db2 : NULL, g, x, w2, N, C, OC);
    double e = rel_norm(o2, o1, (size_t)N * OC), t;
    if ((t = rel_norm(di2, di1, (size_t)N * C)) > e) e = t;
    if ((t = rel_norm(dw2, dw1, (size_t)OC * C)) > e) e = t;
    if ((t = rel_norm(db2, db1, OC)) > e) e = t;
    if (wt) free(w2);
    free(x), free(w), free(b), free(g), free(o1), free(o2), free(di1), free(di2);
    free(dw1), free(dw2), free(db1), free(db2);
    return e;
}

// ({300, 96, 211} and {100, 48, 700}: products cut into blocks of rows and of columns)
static const int SHAPES[][3] = {{37, 50, 61}, {300, 96, 211}, {2, 3, 1},
                                {1, 17, 5},   {129, 64, 64},  {100, 48, 700}};

TEST(products_exact) {
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
        for (int bias = 0; bias < 2; bias++) {
            const int *d = SHAPES[s];
            double e = layer_diff(d[0], d[1], d[2], bias, 1, 0);
            CHECK(e <= 1e-5, "bf16-exact operands N=%d C=%d OC=%d bias=%d: %.3g from fp32", d[0],
                  d[1], d[2], bias, e);
        }
    double neg = layer_diff(40, 64, 64, 1, 1, 1);
    CHECK(neg > 1e-2, "negative control: the transposed weight passed (%.3g)", neg);
}

TEST(products_rounded) {
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
        const int *d = SHAPES[s];
        double e = layer_diff(d[0], d[1], d[2], 1, 0, 0);
        CHECK(e <= 1e-2, "N=%d C=%d OC=%d: %.3g from fp32 (bound 1e-2)", d[0], d[1], d[2], e);
    }
}

typedef struct {
    const float *x, *w;
    float *out;
    int N, C, OC;
} Job;

static void *job_run(void *v) {
    Job *j = v;
    b16->matmul_forward(j->out, j->x, j->w, NULL, j->N, j->C, j->OC);
    return NULL;
}

TEST(second_thread) {
    int N = 33, C = 40, OC = 24;
    float *x = randv((size_t)N * C, 0), *w = randv((size_t)OC * C, 0);
    float *a = xalloc_floats((size_t)N * OC), *b = xalloc_floats((size_t)N * OC);
    b16->matmul_forward(a, x, w, NULL, N, C, OC);
    Job j = {x, w, b, N, C, OC};
    pthread_t t;
    CHECK(!pthread_create(&t, NULL, job_run, &j), "pthread_create");
    pthread_join(t, NULL);
    CHECK(!memcmp(a, b, (size_t)N * OC * sizeof(float)), "another thread's product differs");
    free(x), free(w), free(a), free(b);
}

int main(void) {
    if (!cpu_bf16_isa()) {
        printf("skip - test_cpu_bf16: this CPU has neither AVX512-BF16 nor AMX-BF16\n");
        return 0;
    }
    rng_seed(&rng, 99, 1);
    f32 = backend_select_dtype("cpu", "fp32", 0);
    b16 = backend_select_dtype("cpu", "bf16", 0);
    if (!f32 || !b16) {
        printf("FAIL - select: %s\n", loom_errmsg());
        return 1;
    }
    RUN(rounding);
    RUN(products_exact);
    RUN(products_rounded);
    RUN(second_thread);
    return test_summary();
}
