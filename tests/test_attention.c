// test_attention.c — the CPU backend's blockwise causal attention against a plain reference
// written here in double precision (full (T,T) scores, softmax, products: the algorithm the
// kernel replaced), forward out, the saved per-row log-sum-exp and backward dqkv, on shapes
// around the kernel's tiles (up to 64 queries × 128 keys; T ≤ 96 takes the stored-softmax path):
// T = 1, T not a multiple of a tile, hs not a multiple of 8, NH > 1, B > 1. The negative control:
// the same comparison against a reference without the causal mask must fail (test_gradcheck.c has
// the finite differences and the causal-leak check).
// Ring attention (context parallelism, the backend's attn_chunk_* kernels): n ranks simulated in
// one process, each holding chunks i and 2n−1−i, K/V blocks visited in ring order, partials
// merged by online softmax, dK/dV accumulated per block owner: out, lse and dqkv equal the
// whole attention kernel's and the double reference; finite differences of Σ R·out; a ring
// that stops one hop short must fail the comparison. Grouped-query attention (kv heads < heads,
// LLaMA's q|k|v rows) through the chunk kernels equals the whole gqa_attention kernels; the
// same chunks with a wrong kv-head map must not.
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
    float *dqkv = xalloc_floats(n3), *att = xalloc_floats(be->attention_saved_floats(B, T, NH, hs));
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

// ------------------------------------------------------------------ ring attention

// Global position of local row t of ring rank i of n (chunks of c rows: i, then 2n−1−i).
static int gpos(int t, int c, int n, int i) {
    return t < c ? i * c + t : (2 * n - 1 - i) * c + (t - c);
}

// The ring of n ranks over (B,T) sequences, block by block with the attn_chunk kernels, visiting
// `hops` blocks per rank (n: the whole ring): out (B,T,C), lse (B,NH,T) and, when dout is given,
// dqkv (B,T,3C) written back in the whole sequences' layout.
static void ring_run(Shape s, int n, int hops, const float *qkv, const float *dout, float *out,
                     float *lse, float *dqkv) {
    int B = s.B, T = s.T, C = s.C, NH = s.NH, Tl = T / n, c = Tl / 2;
    size_t C3 = 3 * (size_t)C, rows = (size_t)B * Tl;
    float *lq[8], *kv[8], *lo[8], *ll[8], *ldo[8], *dq[8], *dkv[8];
    float *ob = xalloc_floats(rows * C), *lb = xalloc_floats((size_t)B * NH * Tl);
    for (int i = 0; i < n; i++) { // rank i's rows of qkv (and dout), its K/V block
        lq[i] = xalloc_floats(rows * C3), kv[i] = xalloc_floats(rows * 2 * C);
        lo[i] = xalloc_floats(rows * C), ll[i] = xalloc_floats((size_t)B * NH * Tl);
        ldo[i] = xalloc_floats(rows * C), dq[i] = xalloc_floats(rows * C3);
        dkv[i] = xalloc_floats(rows * 2 * C);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++) {
                size_t g = (size_t)b * T + gpos(t, c, n, i), l = (size_t)b * Tl + t;
                memcpy(lq[i] + l * C3, qkv + g * C3, C3 * sizeof(float));
                memcpy(kv[i] + l * 2 * C, qkv + g * C3 + C, 2 * C * sizeof(float));
                if (dout) memcpy(ldo[i] + l * C, dout + g * C, C * sizeof(float));
            }
        for (size_t x = 0; x < (size_t)B * NH * Tl; x++)
            ll[i][x] = -INFINITY;
    }
    for (int pass = 0; pass < (dout ? 2 : 1); pass++)
        for (int i = 0; i < n; i++)
            for (int h = 0; h < hops; h++) {
                int j = (i - h + n) % n;
                for (int a = 0; a < 2; a++)
                    for (int k = 0; k < 2; k++) {
                        int gq = a ? 2 * n - 1 - i : i, gk = k ? 2 * n - 1 - j : j;
                        AttnChunk p = {
                            B,
                            NH,
                            C,
                            c,
                            Tl,
                            3 * C,
                            2 * C,
                            gk < gq ? ATT_CHUNK_FULL : gk == gq ? ATT_CHUNK_DIAG : ATT_CHUNK_NONE,
                            NH};
                        size_t qo = (size_t)a * c, ko = (size_t)k * c * 2 * C;
                        const float *K = kv[j] + ko, *V = K + C;
                        if (pass == 0) {
                            be->attn_chunk_forward(&p, ob + qo * C, lb + qo, lq[i] + qo * C3, K, V);
                            be->attn_chunk_merge(&p, lo[i] + qo * C, ll[i] + qo, ob + qo * C,
                                                 lb + qo);
                        } else {
                            be->attn_chunk_backward(
                                &p, dq[i] + qo * C3, dkv[j] + ko, dkv[j] + ko + C, ldo[i] + qo * C,
                                lo[i] + qo * C, ll[i] + qo, lq[i] + qo * C3, K, V);
                        }
                    }
            }
    for (int i = 0; i < n; i++) {
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++) {
                size_t gt = (size_t)gpos(t, c, n, i), g = (size_t)b * T + gt,
                       l = (size_t)b * Tl + t;
                memcpy(out + g * C, lo[i] + l * C, C * sizeof(float));
                for (int h = 0; h < NH; h++)
                    lse[((size_t)b * NH + h) * T + gt] = ll[i][((size_t)b * NH + h) * Tl + t];
                if (!dout) continue;
                memcpy(dqkv + g * C3, dq[i] + l * C3, C * sizeof(float));
                memcpy(dqkv + g * C3 + C, dkv[i] + l * 2 * C, 2 * C * sizeof(float));
            }
        free(lq[i]), free(kv[i]), free(lo[i]), free(ll[i]), free(ldo[i]), free(dq[i]);
        free(dkv[i]);
    }
    free(ob), free(lb);
}

// max |x − y| / max |y|
static double rel_diff(const float *x, const float *y, size_t n) {
    double e = 0, a = 1e-30;
    for (size_t i = 0; i < n; i++)
        e = fmax(e, fabs((double)x[i] - y[i])), a = fmax(a, fabs((double)y[i]));
    return isnan(e) ? INFINITY : e / a;
}

// The ring (n ranks, `hops` blocks each) against the whole attention kernel and, for the log-sum-
// exp, the double reference: the worst relative error of out, lse and dqkv.
static double ring_compare(Shape s, int n, int hops) {
    int B = s.B, T = s.T, C = s.C, NH = s.NH, hs = C / NH;
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = xalloc_floats(n3), *dout = xalloc_floats(n1), *out = xalloc_floats(n1);
    float *dqkv = xalloc_floats(n3), *att = xalloc_floats(be->attention_saved_floats(B, T, NH, hs));
    float *rout = xalloc_floats(n1), *rlse = xalloc_floats(nl), *rdqkv = xalloc_floats(n3);
    float *lse = xalloc_floats(nl);
    for (size_t i = 0; i < n3; i++)
        qkv[i] = 1.5f * rng_normal(&rng);
    for (size_t i = 0; i < n1; i++)
        dout[i] = rng_normal(&rng);
    be->attention_forward(out, att, qkv, B, T, C, NH);
    be->attention_backward(dqkv, dout, qkv, out, att, B, T, C, NH);
    ring_run(s, n, hops, qkv, dout, rout, rlse, rdqkv);
    double *r[5];
    for (int i = 0; i < 5; i++)
        r[i] = xcalloc((size_t)T * hs, sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            ref_head(&s, qkv, dout, b, h, 1, r[0], r[1], r[2], r[3], r[4]);
            for (int t = 0; t < T; t++)
                lse[((size_t)b * NH + h) * T + t] = (float)r[1][t];
        }
    for (int i = 0; i < 5; i++)
        free(r[i]);
    double e = fmax(rel_diff(rout, out, n1), rel_diff(rdqkv, dqkv, n3));
    e = fmax(e, rel_diff(rlse, lse, nl));
    free(qkv), free(dout), free(out), free(dqkv), free(att), free(rout), free(rlse), free(rdqkv);
    free(lse);
    return e;
}

TEST(ring_matches_attention) {
    const struct {
        Shape s;
        int n;
    } cases[] = {
        {{1, 2, 8, 1}, 1},    // one rank: chunks 0 and 1
        {{2, 8, 12, 3}, 2},   // chunks of 2 rows
        {{2, 24, 16, 2}, 3},  // three ranks, chunks of 4
        {{1, 96, 16, 2}, 4},  // the whole kernel's stored path
        {{2, 200, 24, 2}, 2}, // chunks of 50
        {{1, 280, 16, 2}, 2}, // chunks of 70: two query tiles (64 + 6)
        {{1, 520, 16, 1}, 2}, // chunks of 130: key tiles of 128 + 2
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Shape s = cases[i].s;
        double e = ring_compare(s, cases[i].n, cases[i].n);
        CHECK(e < 1e-5, "ring %d, B=%d T=%d C=%d NH=%d: relative error %.3g", cases[i].n, s.B, s.T,
              s.C, s.NH, e);
    }
}

TEST(ring_one_hop_short_fails) { // negative control: a ring missing a block does not pass
    Shape s = {1, 64, 16, 2};
    double e = ring_compare(s, 2, 1);
    CHECK(e > 1e-2, "a ring without its last hop matches the kernel (error %.3g)", e);
}

// Finite differences of f = Σ R·out of the ring (central, float32, step 1e-2) against its
// backward, at coordinates of q, k and v across ranks and chunks.
TEST(ring_grad_finite_differences) {
    Shape s = {2, 12, 8, 2};
    int n = 3;
    size_t n3 = (size_t)s.B * s.T * 3 * s.C, n1 = (size_t)s.B * s.T * s.C;
    size_t nl = (size_t)s.B * s.NH * s.T;
    float *qkv = xalloc_floats(n3), *R = xalloc_floats(n1), *out = xalloc_floats(n1);
    float *lse = xalloc_floats(nl), *g = xalloc_floats(n3);
    for (size_t i = 0; i < n3; i++)
        qkv[i] = rng_normal(&rng);
    for (size_t i = 0; i < n1; i++)
        R[i] = rng_normal(&rng);
    ring_run(s, n, n, qkv, R, out, lse, g);
    double worst = 0;
    for (size_t x = 0; x < n3; x += 7) {
        float keep = qkv[x], h = 1e-2f;
        double f[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            qkv[x] = keep + (sgn ? -h : h);
            ring_run(s, n, n, qkv, NULL, out, lse, NULL);
            f[sgn] = 0;
            for (size_t i = 0; i < n1; i++)
                f[sgn] += (double)R[i] * out[i];
        }
        qkv[x] = keep;
        double fd = (f[0] - f[1]) / (2 * h);
        worst = fmax(worst, fabs(fd - g[x]) / (2e-2 + fabs(fd)));
    }
    CHECK(worst < 2e-2, "ring dqkv against finite differences: worst relative error %.3g", worst);
    free(qkv), free(R), free(out), free(lse), free(g);
}

// Grouped-query attention through the chunk kernels: one rank's two chunks of (B,T) sequences
// (pairs 0·0 and 1·1 on the diagonal, 1·0 full, 0·1 none) with KV kv heads, q|k|v rows of
// (NH + 2KV)·hs (LLaMA's), against the whole gqa_attention kernels: out and dqkv, relative.
// kv_field: the AttnChunk's KV (another count maps the query heads to the wrong kv heads: the
// negative control).
static double gqa_chunks_compare(int B, int T, int NH, int KV, int hs, int kv_field) {
    int C = NH * hs, Ck = KV * hs, W = C + 2 * Ck, c = T / 2;
    size_t nq = (size_t)B * T * W, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = xalloc_floats(nq), *dout = xalloc_floats(no), *out = xalloc_floats(no);
    float *dqkv = xalloc_floats(nq), *att = xalloc_floats(be->attention_saved_floats(B, T, NH, hs));
    float *rout = xalloc_floats(no), *lse = xalloc_floats(nl), *rdq = xalloc_floats(nq);
    float *ob = xalloc_floats(no), *lb = xalloc_floats(nl);
    for (size_t i = 0; i < nq; i++)
        qkv[i] = 1.5f * rng_normal(&rng);
    for (size_t i = 0; i < no; i++)
        dout[i] = rng_normal(&rng);
    be->gqa_attention_forward(out, att, qkv, B, T, NH, KV, hs);
    be->gqa_attention_backward(dqkv, dout, qkv, out, att, B, T, NH, KV, hs);
    for (size_t x = 0; x < nl; x++)
        lse[x] = -INFINITY;
    for (int pass = 0; pass < 2; pass++)
        for (int a = 0; a < 2; a++)
            for (int k = 0; k < 2; k++) {
                int mode = k < a ? ATT_CHUNK_FULL : k == a ? ATT_CHUNK_DIAG : ATT_CHUNK_NONE;
                AttnChunk p = {B, NH, C, c, T, W, W, mode, kv_field};
                size_t qo = (size_t)a * c, ko = (size_t)k * c * W + C;
                if (mode == ATT_CHUNK_NONE) continue;
                if (pass == 0) {
                    be->attn_chunk_forward(&p, ob + qo * C, lb + qo, qkv + qo * W, qkv + ko,
                                           qkv + ko + Ck);
                    be->attn_chunk_merge(&p, rout + qo * C, lse + qo, ob + qo * C, lb + qo);
                } else {
                    be->attn_chunk_backward(&p, rdq + qo * W, rdq + ko, rdq + ko + Ck,
                                            dout + qo * C, rout + qo * C, lse + qo, qkv + qo * W,
                                            qkv + ko, qkv + ko + Ck);
                }
            }
    double e = fmax(rel_diff(rout, out, no), rel_diff(rdq, dqkv, nq));
    free(qkv), free(dout), free(out), free(dqkv), free(att), free(rout), free(lse), free(rdq);
    free(ob), free(lb);
    return e;
}

TEST(ring_chunks_grouped_query) {
    int shapes[][5] = {{2, 140, 4, 2, 8}, {1, 200, 4, 1, 6}, {2, 20, 6, 3, 4}, {1, 64, 2, 2, 8}};
    for (int i = 0; i < 4; i++) {
        int *z = shapes[i];
        double e = gqa_chunks_compare(z[0], z[1], z[2], z[3], z[4], z[3]);
        CHECK(e < 1e-5, "B=%d T=%d NH=%d KV=%d hs=%d: relative error %.3g", z[0], z[1], z[2], z[3],
              z[4], e);
    }
    double e = gqa_chunks_compare(2, 140, 4, 2, 8, 1); // negative control: every head reads kv 0
    CHECK(e > 1e-2, "the chunk kernels with a wrong kv-head map match GQA (error %.3g)", e);
}

int main(void) {
    rng_seed(&rng, 4321, 1);
    be = backend_select("cpu", 0);
    RUN(attention_matches_reference);
    RUN(attention_reference_sees_a_leak);
    RUN(ring_matches_attention);
    RUN(ring_one_hop_short_fails);
    RUN(ring_grad_finite_differences);
    RUN(ring_chunks_grouped_query);
    return test_summary();
}
