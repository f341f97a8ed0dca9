// test_attention.c — the CPU backend's blockwise causal attention against a plain reference
// written here in double precision (full (T,T) scores, softmax, products: the algorithm the
// kernel replaced), forward out, the saved per-row log-sum-exp and backward dqkv, on shapes
// around the kernel's tiles (up to 64 queries × 128 keys; T ≤ 96 takes the stored-softmax path):
// T = 1, T not a multiple of a tile, hs not a multiple of 8, NH > 1, B > 1. The negative control:
// the same comparison against a reference without the causal mask must fail (test_gradcheck.c has
// the finite differences and the causal-leak check).
#include <math.h>
#include <string.h>

#include "../src/backend/backend.h"
#include "../src/common.h"
#include "../src/rng.h"
#include "test.h"

#define STORED_MAX 96 // cpu_attention.c's ATT_STORED: up to here att is the softmax

static Rng rng;
static const Backend *be;

typedef struct {
    int B, T, C, NH;
} Shape;

// Reference for one (b, h): out (T,hs), lse (T) and dq, dk, dv (T,hs) in double; causal = 0
// lets every query see every key.
static void ref_head(const Shape *s, const float *qkv, const float *dout, int b, int h, int causal,
                     double *out, double *lse, double *dq, double *dk, double *dv) {
    int T = s->T, C = s->C, hs = C / s->NH;
    size_t C3 = 3 * (size_t)C;
    double scale = 1.0 / sqrt((double)hs);
    const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs, *k = q + C, *v = q + 2 * C;
    const float *dy = dout + (size_t)b * T * C + (size_t)h * hs;
    double *p = xcalloc((size_t)T * T, sizeof(double)), *dp = xcalloc(T, sizeof(double));
    memset(dq, 0, sizeof(double) * T * hs), memset(dk, 0, sizeof(double) * T * hs);
    memset(dv, 0, sizeof(double) * T * hs), memset(out, 0, sizeof(double) * T * hs);
    for (int t = 0; t < T; t++) {
        int n = causal ? t + 1 : T;
        double *pt = p + (size_t)t * T, mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; j++) {
            double x = 0;
            for (int c = 0; c < hs; c++)
                x += (double)q[t * C3 + c] * k[j * C3 + c];
            pt[j] = x * scale, mx = fmax(mx, pt[j]);
        }
        for (int j = 0; j < n; j++)
            sum += pt[j] = exp(pt[j] - mx);
        lse[t] = mx + log(sum);
        for (int j = 0; j < n; j++) {
            pt[j] /= sum;
            for (int c = 0; c < hs; c++)
                out[t * hs + c] += pt[j] * v[j * C3 + c];
        }
        // backward of row t: dP_j = dy_t·v_j, dS_j = P_j (dP_j − Σ P dP)
        double d = 0;
        for (int j = 0; j < n; j++) {
            dp[j] = 0;
            for (int c = 0; c < hs; c++)
                dp[j] += (double)dy[t * C + c] * v[j * C3 + c];
            d += pt[j] * dp[j];
        }
        for (int j = 0; j < n; j++) {
            double ds = pt[j] * (dp[j] - d) * scale;
            for (int c = 0; c < hs; c++) {
                dv[j * hs + c] += pt[j] * dy[t * C + c];
                dq[t * hs + c] += ds * k[j * C3 + c];
                dk[j * hs + c] += ds * q[t * C3 + c];
            }
        }
    }
    free(p), free(dp);
}

// max |x − ref| / max |ref| over the (T,hs) view x (row stride ld) against ref (T,hs).
static double rel_err(const float *x, size_t ld, const double *ref, int T, int hs, double *amax) {
    double e = 0;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < hs; c++) {
            e = fmax(e, fabs(x[t * ld + c] - ref[t * hs + c]));
            *amax = fmax(*amax, fabs(ref[t * hs + c]));
        }
    return e;
}

// Runs the kernel on a random shape; returns the worst relative error of out, lse and dqkv
// against the reference (causal or not).
static double compare(Shape s, int causal) {
    int B = s.B, T = s.T, C = s.C, NH = s.NH, hs = C / NH;
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C;
    float *qkv = xalloc_floats(n3), *dout = xalloc_floats(n1), *out = xalloc_floats(n1);
    float *dqkv = xalloc_floats(n3), *att = xalloc_floats(be->attention_saved_floats(B, T, NH));
    for (size_t i = 0; i < n3; i++)
        qkv[i] = 1.5f * rng_normal(&rng), dqkv[i] = NAN; // dqkv must be overwritten
    for (size_t i = 0; i < n1; i++)
        dout[i] = rng_normal(&rng);
    be->attention_forward(out, att, qkv, B, T, C, NH);
    be->attention_backward(dqkv, dout, qkv, out, att, B, T, C, NH);
    double *r[5], worst = 0;
    for (int i = 0; i < 5; i++)
        r[i] = xcalloc((size_t)T * hs, sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            ref_head(&s, qkv, dout, b, h, causal, r[0], r[1], r[2], r[3], r[4]);
            size_t C3 = 3 * (size_t)C, o = (size_t)b * T * C3 + (size_t)h * hs;
            double e[4], a[4] = {0};
            e[0] = rel_err(out + (size_t)b * T * C + (size_t)h * hs, C, r[0], T, hs, &a[0]);
            e[1] = rel_err(dqkv + o, C3, r[2], T, hs, &a[1]);
            e[2] = fmax(rel_err(dqkv + o + C, C3, r[3], T, hs, &a[2]),
                        rel_err(dqkv + o + 2 * C, C3, r[4], T, hs, &a[2]));
            e[3] = 0; // the saved log-sum-exp, on the blockwise path
            if (T > STORED_MAX)
                e[3] = rel_err(att + ((size_t)b * NH + h) * T, 1, r[1], T, 1, &a[3]);
            for (int i = 0; i < 4; i++)
                worst = fmax(worst, isnan(e[i]) ? INFINITY : e[i] / fmax(a[i], 1e-30));
        }
    for (int i = 0; i < 5; i++)
        free(r[i]);
    free(qkv), free(dout), free(out), free(dqkv), free(att);
    return worst;
}

TEST(attention_matches_reference) {
    const Shape shapes[] = {
        {1, 1, 8, 1},    // T = 1
        {2, 7, 12, 3},   // hs 4, T below a tile
        {2, 65, 40, 4},  // hs 10, the stored path
        {1, 96, 16, 2},  // the longest stored
        {2, 97, 16, 2},  // the shortest blockwise: query tiles 64+33
        {1, 129, 16, 2}, // query tiles 48+48+33, key tiles 80+49
        {1, 130, 24, 1}, // key tiles of 128 and 2
        {3, 200, 36, 3}, // hs 12, B 3, query tiles of 50
        {1, 257, 64, 2}, // hs 64, T past two key tiles, query tiles 52+52+52+52+49
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        Shape s = shapes[i];
        double e = compare(s, 1);
        CHECK(e < 1e-5, "B=%d T=%d C=%d NH=%d: relative error %.3g", s.B, s.T, s.C, s.NH, e);
    }
}

TEST(attention_reference_sees_a_leak) { // negative control: the comparison has teeth
    Shape s = {1, 150, 16, 2};
    double e = compare(s, 0);
    CHECK(e > 1e-2, "a non-causal reference matches the kernel (error %.3g)", e);
}

int main(void) {
    rng_seed(&rng, 4321, 1);
    be = backend_select("cpu", 0);
    RUN(attention_matches_reference);
    RUN(attention_reference_sees_a_leak);
    return test_summary();
}
