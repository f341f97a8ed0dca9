// test_compress.c — --outer-compress int8's arithmetic (src/swarm/compress.c):
//   * a chunk's scale is max|x| / 127 and its codes round to nearest (ties away from zero),
//     the largest |x| coding to ±127; every value is within half a step of x; a zero chunk has
//     scale 0 and codes 0; chunks (the last one partial) are scaled independently;
//   * error feedback: e = (x + e_old) − dequant exactly, |e| <= half a step; a value too small
//     for its chunk's step, dropped every round without feedback, is carried by it: its
//     dequantized sum over rounds stays within one step of the true sum;
//   * a piece sent as a DELTA8 (codes and scales through wire.c) decodes on the receiver to
//     exactly the bits the sender averages (sw_piece_msg / sw_piece_take), also when only its
//     codes that are not zero travel (with their gaps; a NaN chunk's codes are all 0);
//   * a chunk with a NaN or an infinity codes to 0 with the scale NaN (all its values NaN);
//   * topk keeps exactly the k largest |x + e| (ties: the lower index; NaN the largest), the
//     rest moving into e, against a sort; a piece of it travels as DELTAS (gaps and values),
//     or as floats when more than half of it is kept, and decodes to the sender's exact bits;
//   * --topk-values 2bit: each chunk's kept values on its two levels, e taking what that drops,
//     and a piece of it as DELTAS2 (2 bits a value) decoding to the sender's bits.
#include <math.h>
#include <string.h>

#include "../src/common.h"
#include "../src/swarm/compress.h"
#include "../src/swarm/swarm_impl.h"
#include "test.h"

enum { N = 3 * CQ_CHUNK + 100 }; // three whole chunks and a partial one
static float x[N], d[N], e[N], y[N];
static int8_t q[N];
static float sc[8];

static void fill(float *v, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 1e-3f;
    }
}

TEST(quantize_chunks) {
    fill(x, N, 1);
    memset(x + CQ_CHUNK, 0, CQ_CHUNK * sizeof(float)); // chunk 1: all zero
    x[5] = 0.25f, x[7] = -0.25f;                       // chunk 0's max (both signs)
    x[N - 1] = 3.0f;                                   // the partial chunk's max
    CHECK(cq_nchunks(N) == 4 && cq_nchunks(CQ_CHUNK) == 1 && cq_nchunks(1) == 1, "chunks");
    cq_quantize(x, N, q, sc);
    cq_dequantize(q, sc, N, d);
    CHECK(sc[0] == 0.25f / 127.0f && sc[1] == 0 && sc[3] == 3.0f / 127.0f, "scales %g %g %g", sc[0],
          sc[1], sc[3]);
    CHECK(q[5] == 127 && q[7] == -127 && q[N - 1] == 127, "max codes %d %d %d", q[5], q[7],
          q[N - 1]);
    int bad = 0;
    for (size_t i = 0; i < N; i++) {
        float s = sc[i / CQ_CHUNK];
        long want = s > 0 ? lroundf(x[i] / s) : 0;
        bad += q[i] != want || fabsf(d[i] - x[i]) > 0.5f * s * 1.0001f || d[i] != (float)q[i] * s;
    }
    CHECK(bad == 0, "%d values off", bad);
    float t[2] = {1.5f, -2.5f}, ts[1]; // ties, with the scale set by a third value of 127
    float u[3] = {t[0], t[1], 127.0f};
    int8_t tq[3];
    cq_quantize(u, 3, tq, ts);
    CHECK(ts[0] == 1.0f && tq[0] == 2 && tq[1] == -3 && tq[2] == 127, "ties: %d %d", tq[0], tq[1]);
}

TEST(error_feedback) {
    fill(x, N, 2);
    memset(e, 0, sizeof e);
    int bad = 0;
    for (int round = 0; round < 3; round++) {
        fill(x, N, 3 + (unsigned)round);
        for (size_t i = 0; i < N; i++)
            y[i] = x[i] + e[i];
        memcpy(d, x, sizeof d);
        cq_ef_step(d, e, N, q, sc);
        for (size_t i = 0; i < N; i++) {
            float s = sc[i / CQ_CHUNK];
            bad +=
                d[i] != (float)q[i] * s || e[i] != y[i] - d[i] || fabsf(e[i]) > 0.5f * s * 1.0001f;
        }
    }
    CHECK(bad == 0, "%d values off", bad);
    // one large value sets the step (1.0); 0.3 is dropped every round without feedback
    float big[2], fb[2] = {0, 0}, s1[1], sum = 0, plain = 0;
    int8_t c[2];
    for (int round = 0; round < 10; round++) {
        big[0] = 127.0f, big[1] = 0.3f;
        cq_quantize(big, 2, c, s1);
        plain += (float)c[1] * s1[0];
        cq_ef_step(big, fb, 2, c, s1);
        sum += big[1];
    }
    CHECK(plain == 0 && fabsf(sum - 3.0f) <= 1.0f && sum > 0, "plain %g, with feedback %g (3)",
          plain, sum);
}

// Piece 0 of c as swarm s sends it: encoded into buf, its type in *type; returns its bytes.
static WireMsg out, in;
static uint8_t buf[WIRE_MSG_MAX];
static char err[160];
static size_t send_piece(Swarm *s, const Contrib *c, int *type) {
    s->out = &out;
    *type = sw_piece_msg(s, c, 0);
    out.type = (uint16_t)*type, out.round = 1;
    strcpy(out.from, "a");
    return wire_encode(&out, buf, sizeof buf);
}

// The n bytes in buf decoded (into in) and taken into got[0, N) as a receiver does (got filled
// with 0xff first): 1, or 0 if they do not decode (the reason in err) or s refuses the kind.
static int take_piece(const Swarm *s, size_t n, float *got) {
    err[0] = 0;
    if (wire_decode(buf, n, &in, err, sizeof err) || !sw_piece_ok(s, &in)) return 0;
    memset(got, 0xff, N * sizeof *got);
    sw_piece_take(&in, got);
    return 1;
}

// A DELTA8 of dense codes; then of a Δ that is mostly zero, with a chunk holding a NaN (scale
// NaN, codes 0): only its codes that are not zero travel, with their gaps, and every value,
// NaNs included, decodes to the sender's bits.
TEST(piece_over_the_wire) {
    static Swarm s;
    static float got[N];
    for (int sparse = 0; sparse < 2; sparse++) {
        s.P = N, s.c.compress = CQ_INT8;
        fill(x, N, 9);
        if (sparse) {
            for (size_t i = 0; i < N; i++)
                x[i] = i % 37 == 5 ? x[i] : 0.0f;
            x[CQ_CHUNK + 7] = NAN;
        }
        Contrib c = {.delta = d, .q8 = q, .scales = sc};
        double loss[2] = {3.5, 3.25};
        c.losses = loss, c.nloss = 2;
        memset(e, 0, sizeof e);
        memcpy(d, x, sizeof d);
        cq_ef_step(d, e, N, q, sc); // d: what the sender averages
        CHECK(SW_PIECE >= N, "one piece expected");
        int type;
        size_t n = send_piece(&s, &c, &type), nz = 0;
        for (size_t i = 0; i < N; i++)
            nz += q[i] != 0;
        size_t want = 17 + 1 + 24 + 4 * 4 + 4 + (sparse ? 4 + out.idx_len + nz : N) + 16;
        CHECK(type == WIRE_DELTA8 && n == want && wire_q8_sparse(&out) == sparse &&
                  (!sparse || out.idx_len < 2 * nz),
              "type %d, %zu bytes, want %zu (%zu codes not 0)", type, n, want, nz);
        CHECK(take_piece(&s, n, got), "decode: %s", err);
        CHECK(!memcmp(got, d, sizeof got), "the receiver's values differ from the sender's");
        CHECK(!sparse || (isnan(got[CQ_CHUNK]) && got[0] == 0 && !signbit(got[0])),
              "the NaN chunk, or a zero, decoded wrong");
        s.c.compress = CQ_NONE;
        CHECK(!sw_piece_ok(&s, &in), "a DELTA8 accepted by a swarm without compression");
    }
    free(s.sparse);
}

TEST(non_finite) {
    float v[4] = {1.0f, NAN, 2.0f, -1.0f}, vs[1], vd[4];
    int8_t vq[4];
    cq_quantize(v, 4, vq, vs);
    cq_dequantize(vq, vs, 4, vd);
    CHECK(isnan(vs[0]) && !vq[0] && !vq[1] && !vq[2] && !vq[3] && isnan(vd[0]) && isnan(vd[3]),
          "scale %g, codes %d %d %d %d", vs[0], vq[0], vq[1], vq[2], vq[3]);
    v[1] = INFINITY;
    cq_quantize(v, 4, vq, vs);
    CHECK(isnan(vs[0]) && !vq[0] && !vq[1], "infinity: scale %g", vs[0]);
}

static int cmp_mag(const void *a, const void *b) { // by |x| descending, then index
    const float *x = *(float *const *)a, *y = *(float *const *)b;
    if (fabsf(*x) != fabsf(*y)) return fabsf(*x) < fabsf(*y) ? 1 : -1;
    return x < y ? -1 : x > y;
}

TEST(topk_selection) {
    CHECK(cq_topk_count(100, 0.02) == 2 && cq_topk_count(100, 1e-9) == 1 &&
              cq_topk_count(100, 1.0) == 100 && cq_topk_count(101, 0.02) == 3,
          "counts");
    static float *order[N];
    size_t k = cq_topk_count(N, 0.02);
    fill(x, N, 5);
    for (size_t i = 0; i < N; i += 7)
        x[i] = x[i / 7 * 3]; // many equal magnitudes
    fill(e, N, 6);
    for (size_t i = 0; i < N; i++)
        y[i] = x[i] + e[i], order[i] = &y[i];
    qsort(order, N, sizeof *order, cmp_mag);
    static float e0[N];
    memcpy(e0, e, sizeof e0);
    size_t gather = cq_topk_gather_max;
    for (int pass = 0; pass < 2; pass++) { // the gathered bucket's select, then the passes over x
        cq_topk_gather_max = pass ? 0 : gather;
        memcpy(d, x, sizeof d), memcpy(e, e0, sizeof e);
        cq_topk_step(d, e, N, k);
        int bad = 0, kept = 0;
        for (size_t i = 0; i < N; i++) {
            kept += d[i] != 0;
            bad += (d[i] != 0 && e[i] != 0) || (d[i] != 0 ? d[i] : e[i]) != y[i];
        }
        for (size_t j = 0; j < N; j++) {
            size_t i = (size_t)(order[j] - y);
            bad += j < k ? d[i] != y[i] || e[i] != 0 : d[i] != 0 || e[i] != y[i];
        }
        CHECK(bad == 0 && kept == (int)k, "%s: %d off, %d kept of %zu",
              pass ? "passes over x" : "gathered", bad, kept, k);
    }
    cq_topk_gather_max = gather;
    float t[6] = {1, -2, 2, NAN, 2, -2}, te[6] = {0};
    cq_topk_step(t, te, 6, 3); // NaN, then the first two of the four ±2
    CHECK(isnan(t[3]) && t[1] == -2 && t[2] == 2 && t[4] == 0 && t[5] == 0 && te[4] == 2 &&
              te[5] == -2 && t[0] == 0 && te[0] == 1,
          "ties / NaN: %g %g %g %g %g %g", t[0], t[1], t[2], t[3], t[4], t[5]);
}

TEST(topk_piece_over_the_wire) {
    static Swarm s;
    static float got[N];
    s.P = N, s.c.compress = CQ_TOPK;
    for (int dense = 0; dense < 2; dense++) {
        fill(d, N, 11);
        memset(e, 0, sizeof e);
        cq_topk_step(d, e, N, cq_topk_count(N, dense ? 0.9 : 0.02));
        Contrib c = {.delta = d};
        int type;
        size_t n = send_piece(&s, &c, &type), k = cq_topk_count(N, 0.02);
        size_t want = dense ? 17 + 1 + 24 + 4 * (size_t)N : 17 + 1 + 32 + out.idx_len + 4 * k;
        CHECK(type == (dense ? WIRE_DELTA : WIRE_DELTAS) && n == want &&
                  (dense || out.idx_len < 2 * k),
              "type %d, %zu bytes (%u of gaps)", type, n, (unsigned)out.idx_len);
        CHECK(take_piece(&s, n, got), "decode: %s", err);
        CHECK(!memcmp(got, d, sizeof got), "the receiver's values differ from the sender's");
    }
    free(s.sparse);
}

// --topk-values 2bit: every kept value is its sign times the nearer of its chunk's two levels,
// which are the means of the kept magnitudes below and at-or-above their mean (recomputed here
// in double); e takes exactly what that drops; elements not kept are untouched; a chunk with
// nothing kept has levels 0, one with a kept NaN has levels NaN. Negative control: a level off
// by one ulp fails the check.
static int check_levels(const float *before, const float *xs, const float *es, const float *e0,
                        const float *lv, size_t n) {
    int bad = 0;
    for (size_t at = 0; at < n; at += CQ_CHUNK) {
        size_t m = n - at < CQ_CHUNK ? n - at : CQ_CHUNK, k = 0, klo = 0;
        double sum = 0, slo = 0, shi = 0;
        for (size_t i = at; i < at + m; i++)
            if (before[i] != 0) sum += fabsf(before[i]), k++;
        float mean = k ? (float)(sum / (double)k) : 0;
        for (size_t i = at; i < at + m; i++)
            if (before[i] != 0) {
                if (fabsf(before[i]) < mean)
                    slo += fabsf(before[i]), klo++;
                else
                    shi += fabsf(before[i]);
            }
        float hi = k ? (float)(shi / (double)(k - klo)) : 0, lo = klo ? (float)(slo / klo) : hi;
        const float *l = lv + 2 * (at / CQ_CHUNK);
        bad += l[0] != lo || l[1] != hi || lo > hi;
        for (size_t i = at; i < at + m; i++) {
            if (before[i] == 0) {
                bad += xs[i] != 0 || es[i] != e0[i];
                continue;
            }
            float a = fabsf(before[i]), v = fabsf(a - lo) < fabsf(a - hi) ? lo : hi;
            bad += xs[i] != copysignf(v, before[i]) || es[i] != before[i] - xs[i];
        }
    }
    return bad;
}

TEST(topk_two_bit_levels) {
    static float before[N], e0[N], lv[2 * 8];
    fill(d, N, 21), fill(e, N, 22);
    cq_topk_step(d, e, N, cq_topk_count(N, 0.05));
    for (size_t i = 3 * CQ_CHUNK; i < N; i++) // the partial chunk: nothing kept
        e[i] += d[i], d[i] = 0;
    memcpy(before, d, sizeof before), memcpy(e0, e, sizeof e0);
    cq_topk2_step(d, e, N, lv);
    CHECK(check_levels(before, d, e, e0, lv, N) == 0, "levels, values or error feedback off");
    CHECK(lv[6] == 0 && lv[7] == 0, "a chunk with nothing kept: levels %g %g", lv[6], lv[7]);
    lv[1] = nextafterf(lv[1], 1.0f);
    CHECK(check_levels(before, d, e, e0, lv, N) > 0, "negative control: a level off by an ulp");
    float t[4] = {1, NAN, 0, -3}, te[4] = {0}, tl[2];
    cq_topk2_step(t, te, 4, tl);
    CHECK(isnan(tl[0]) && isnan(tl[1]) && isnan(t[0]) && isnan(t[3]) && signbit(t[3]) && t[2] == 0,
          "NaN chunk: levels %g %g", tl[0], tl[1]);
}

// A 2-bit piece travels as DELTAS2 (gaps, 2 bits a value, two levels a chunk) and decodes to
// the sender's bits, NaNs included; the size is as wire.c's layout says.
TEST(topk_two_bit_over_the_wire) {
    static Swarm s;
    static float got[N], lv[2 * 8];
    s.P = N, s.c.compress = CQ_TOPK, s.c.topk_2bit = 1;
    fill(d, N, 31);
    memset(e, 0, sizeof e);
    cq_topk_step(d, e, N, cq_topk_count(N, 0.02));
    d[CQ_CHUNK + 9] = NAN; // (kept, and its chunk's levels NaN)
    cq_topk2_step(d, e, N, lv);
    Contrib c = {.delta = d, .scales = lv};
    int type;
    size_t n = send_piece(&s, &c, &type), k = out.nnz;
    size_t want = 17 + 1 + 24 + 8 * 4 + 8 + out.idx_len + (k + 3) / 4;
    CHECK(type == WIRE_DELTAS2 && n == want && k >= cq_topk_count(N, 0.02) && out.idx_len < 2 * k,
          "type %d, %zu bytes, want %zu", type, n, want);
    CHECK(take_piece(&s, n, got), "decode: %s", err);
    CHECK(!memcmp(got, d, sizeof got), "the receiver's values differ from the sender's");
    s.c.topk_2bit = 0;
    CHECK(!sw_piece_ok(&s, &in), "a DELTAS2 accepted by a swarm of fp32 topk values");
    free(s.sparse);
}

int main(void) {
    RUN(quantize_chunks);
    RUN(error_feedback);
    RUN(piece_over_the_wire);
    RUN(non_finite);
    RUN(topk_selection);
    RUN(topk_piece_over_the_wire);
    RUN(topk_two_bit_levels);
    RUN(topk_two_bit_over_the_wire);
    return test_summary();
}
