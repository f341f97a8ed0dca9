// test_shard_cut.c — where --peer-exchange sharded cuts a commit's slices
// (src/swarm/shard_cut.c, sw_cut_weighted):
//   * without weights (or all zero) slice j is chunks [C·j/n, C·(j+1)/n), the equal cut COMMIT
//     leaves implicit;
//   * with weights the cut starts at 0, ends at C, never decreases, and every slice's weight is
//     within the heaviest chunk of W/n (the best a cut at whole chunks can promise), against a
//     brute-force check of the boundaries;
//   * a dense head (the tied embedding's chunks, 100× the rest, as an 8-peer topk round's sums
//     measured) gives its slices few chunks each and the rest many; more slices than chunks
//     leave some slices empty;
//   * a slice sum goes in runs of chunks of one kind (sw_sum_run): sparse chunks (at most an
//     eighth non-zero with int8 sums, a half with fp32) together, dense ones together, a run
//     never crossing a piece boundary counted from the slice's start, the last chunk short.
#include <stdlib.h>
#include <string.h>

#include "../src/common.h"
#include "../src/swarm/compress.h"
#include "../src/swarm/swarm_impl.h"
#include "test.h"

static uint32_t cut[WIRE_MAX_PEERS + 1];

TEST(equal_without_weights) {
    uint32_t zero[50] = {0};
    for (int n = 1; n <= 9; n++)
        for (size_t C = 0; C <= 50; C += 7) {
            sw_cut_weighted(NULL, C, n, cut);
            for (int j = 0; j <= n; j++)
                CHECK(cut[j] == C * (size_t)j / (size_t)n, "C %zu n %d: cut[%d] = %u", C, n, j,
                      (unsigned)cut[j]);
            sw_cut_weighted(zero, C, n, cut);
            for (int j = 0; j <= n; j++)
                CHECK(cut[j] == C * (size_t)j / (size_t)n, "zero weights: C %zu n %d", C, n);
        }
}

// The cut of w (C chunks, n slices) is valid and balanced within the heaviest chunk.
static void balanced(const uint32_t *w, size_t C, int n, const char *what) {
    sw_cut_weighted(w, C, n, cut);
    double W = 0, wmax = 0;
    for (size_t k = 0; k < C; k++)
        W += w[k], wmax = w[k] > wmax ? w[k] : wmax;
    CHECK(cut[0] == 0 && cut[n] == C, "%s: ends %u, %u", what, (unsigned)cut[0], (unsigned)cut[n]);
    for (int j = 0; j < n; j++) {
        CHECK(cut[j] <= cut[j + 1], "%s: cut %d decreases", what, j);
        double sj = 0;
        for (uint32_t k = cut[j]; k < cut[j + 1]; k++)
            sj += w[k];
        CHECK(sj <= W / n + wmax && sj >= W / n - wmax, "%s: slice %d weighs %.0f, W/n %.0f", what,
              j, sj, W / n);
    }
    // each boundary is the nearest whole chunk to its target j·W/n (brute force)
    for (int j = 1; j < n; j++) {
        double pre = 0, best = 1e300, t = W * j / n;
        size_t bk = 0;
        for (size_t k = 0; k <= C; k++) {
            if (k) pre += w[k - 1];
            double d = pre > t ? pre - t : t - pre;
            if (d < best) best = d, bk = k;
        }
        double got = 0;
        for (uint32_t k = 0; k < cut[j]; k++)
            got += w[k];
        double dg = got > t ? got - t : t - got;
        CHECK(dg <= best, "%s: boundary %d at %u is %.0f from its target (best %zu: %.0f)", what, j,
              (unsigned)cut[j], dg, bk, best);
    }
}

TEST(weighted_balanced) {
    enum { C = 300 };
    static uint32_t w[C];
    uint64_t x = 88172645463325252ull;
    for (int trial = 0; trial < 40; trial++) {
        for (size_t k = 0; k < C; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            w[k] = (uint32_t)(x % (trial % 3 ? 1000 : 64)) + (trial % 2);
        }
        balanced(w, C, 2 + trial % 8, "random");
    }
}

TEST(dense_head) {
    enum { C = 7336 }; // a 30M model's chunks; the first 64% the embedding's
    static uint32_t w[C];
    for (size_t k = 0; k < C; k++)
        w[k] = k < C * 64 / 100 ? 7 * 4100 : 7 * 300;
    balanced(w, C, 8, "dense head");
    CHECK(cut[1] < C / 8 && C - cut[7] > C / 8, "dense head: cut %u .. %u", (unsigned)cut[1],
          (unsigned)cut[7]);
    for (int j = 0; j + 1 < 8; j++) // the embedding's slices are the short ones
        if (cut[j + 1] <= C * 64 / 100)
            CHECK(cut[j + 1] - cut[j] < C / 8, "dense slice %d has %u chunks", j,
                  (unsigned)(cut[j + 1] - cut[j]));
    uint32_t few[3] = {5, 1, 9};
    balanced(few, 3, 8, "more slices than chunks");
}

static Swarm sw;

TEST(sum_runs) {
    enum { C = CQ_CHUNK, N = SW_PIECE + 5 * C + 100 }; // a piece and 5 chunks and a bit
    static float a[2 * SW_PIECE];
    size_t lo = 3 * C, hi = lo + N; // (a slice starting at chunk 3)
    memset(a, 0, sizeof a);
    // the piece's first 10 chunks: sparse, sparse, dense, dense, sparse, ... (dense: C/8 + 1)
    const int kind[10] = {0, 0, 1, 1, 0, 1, 0, 0, 0, 1};
    for (int k = 0; k < 10; k++)
        for (int i = 0; i < (kind[k] ? C / 8 + 1 : C / 8); i++)
            a[lo + (size_t)k * C + (size_t)i * 7] = 1.0f + (float)i;
    for (size_t i = lo + SW_PIECE - 2 * C; i < hi; i++) // dense across the piece boundary
        a[i] = 2.0f;
    sw.c.sums_int8 = 1;
    const size_t want[][2] = {{2, 0}, {2, 1}, {1, 0}, {1, 1}, {3, 0}, {1, 1}};
    size_t at = lo;
    int sparse;
    for (int r = 0; r < 6; r++) {
        size_t n = sw_sum_run(&sw, a, lo, at, hi, &sparse);
        CHECK(n == want[r][0] * C && sparse == (int)!want[r][1], "run %d: %zu floats, sparse %d", r,
              n, sparse);
        at += n;
    }
    size_t n = sw_sum_run(&sw, a, lo, at, hi, &sparse); // the zero chunks up to the dense tail
    CHECK(sparse == 1 && at + n == lo + SW_PIECE - 2 * C, "the empty run ends at %zu", at + n);
    at += n, n = sw_sum_run(&sw, a, lo, at, hi, &sparse);
    CHECK(sparse == 0 && at + n == lo + SW_PIECE, "a run crossed the piece boundary: %zu", at + n);
    at += n, n = sw_sum_run(&sw, a, lo, at, hi, &sparse);
    CHECK(sparse == 0 && at + n == hi, "the last run: to %zu of %zu", at + n, hi);
    sw.c.sums_int8 = 0; // fp32 sums: a chunk C/8 + 1 non-zero is sparse (under a half)
    n = sw_sum_run(&sw, a, lo, lo, hi, &sparse);
    CHECK(sparse == 1 && n == SW_PIECE - 2 * C, "fp32 sums: %zu floats, sparse %d", n, sparse);
}

int main(void) {
    RUN(equal_without_weights);
    RUN(weighted_balanced);
    RUN(dense_head);
    RUN(sum_runs);
    return test_summary();
}
