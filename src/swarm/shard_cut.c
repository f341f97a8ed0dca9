// shard_cut.c — --peer-exchange sharded: where a commit's slices are cut (docs/PEERS.md,
// "Sharded averaging"). A slice is a run of whole CQ_CHUNK chunks. Without topk every chunk
// costs the same on the wire, and the slices hold equal numbers of chunks (COMMIT carries no
// cut). Under topk they do not: the slice sums hold the union of the members' supports, dense
// where the members' top-k agree on a region (the tied embedding's rows) and nearly empty
// elsewhere, and each owner sends its slice's sum to every other peer. With equal chunks the
// owners of the dense slices sent 5–10× what the others did at 8 peers, and the round waited
// for them. So the coordinator cuts by bytes: a chunk weighs what its owner would send for it
// — its sum to each of the other V − 1 peers, as the last average's sums cost (noted on every
// peer when an average is final, sw_cut_note), less the part of it the owner keeps instead of
// sending (its own Δ's, as this round's topk selected it) — and every slice gets an equal share
// of the total. The cut travels in COMMIT: every member uses the coordinator's, so peers whose
// notes differ (a joiner has none) still cut alike. A slice's sum then goes in runs of chunks
// of one kind (sw_sum_run), so the bytes follow each chunk's density, as the weights assume.
#include <stdlib.h>

#include "../common.h"
#include "compress.h"
#include "swarm_impl.h"

// Every chunk weighs at least this (bytes): a slice of empty chunks still has to be summed.
#define CUT_FLOOR 64
// A sparse element's bytes: its gap (mostly 1 byte at these densities) and its float (a part
// with --topk-values 2bit: its gap and 2 bits, 5/4 bytes).
#define SPARSE_BYTES 5

// The non-zero floats of x[lo, hi).
static size_t nonzeros(const float *x, size_t lo, size_t hi) {
    size_t nz = 0;
    for (size_t i = lo; i < hi; i++)
        nz += x[i] != 0.0f;
    return nz;
}

// Chunk k's floats [*lo, *hi).
static void chunk(const Swarm *s, size_t k, size_t *lo, size_t *hi) {
    *lo = k * CQ_CHUNK, *hi = *lo + CQ_CHUNK < s->P ? *lo + CQ_CHUNK : s->P;
}

void sw_cut_weighted(const uint32_t *w, size_t C, int n, uint32_t *cut) {
    uint64_t W = 0;
    for (size_t k = 0; w && k < C; k++)
        W += w[k];
    cut[0] = 0, cut[n] = (uint32_t)C;
    size_t k = 0;
    uint64_t pre = 0; // the weight of chunks [0, k)
    for (int j = 1; j < n; j++) {
        if (!W) { // (no weights: equal chunks)
            cut[j] = (uint32_t)(C * (size_t)j / (size_t)n);
            continue;
        }
        uint64_t t = W * (uint64_t)j; // the target, times n: pre · n ≈ t
        while (k < C && (pre + w[k]) * (uint64_t)n <= t)
            pre += w[k++];
        if (k < C) { // one chunk more when that lands nearer the target
            uint64_t under = t - pre * (uint64_t)n, over = (pre + w[k]) * (uint64_t)n - t;
            if (over < under) pre += w[k++];
        }
        cut[j] = (uint32_t)k;
    }
}

// Per chunk: about the bytes the chunk's sum costs as sent, by the sender's rule (sw_sum_run):
// a gap and a float a non-zero element when it goes sparse (SUMS), else with int8 sums its codes
// (at most one gap and one code a non-zero element, at most one byte a float: SUM8), else
// floats (SUM).
void sw_cut_note(Swarm *s, const Slot *sl) {
    if (s->c.compress != CQ_TOPK || !s->c.exchange || !sl->avg) return;
    if (!s->sum_bytes) s->sum_bytes = xcalloc(s->nchunks + 1, sizeof *s->sum_bytes);
    for (size_t k = 0, lo, hi; k < s->nchunks; k++) {
        chunk(s, k, &lo, &hi);
        size_t nz = nonzeros(sl->avg, lo, hi), n = hi - lo, bytes = 4 * n;
        if (nz <= n / (s->c.sums_int8 ? 8 : 2))
            bytes = SPARSE_BYTES * nz;
        else if (s->c.sums_int8)
            bytes = 4 + (2 * nz < n ? 2 * nz : n);
        s->sum_bytes[k] = (uint32_t)bytes;
        spill_drop(sl->avg + lo, (hi - lo) * sizeof(float));
    }
}

uint32_t *sw_cut_plan(Swarm *s, Slot *sl, int n) {
    uint32_t *cut = xcalloc((size_t)n + 1, sizeof *cut);
    const Contrib *me = sw_contrib(s, sl, s->id, 0);
    if (s->c.compress != CQ_TOPK || !s->sum_bytes || !me || n < 2) {
        sw_cut_weighted(NULL, s->nchunks, n, cut);
        return cut;
    }
    uint32_t *w = xmalloc((s->nchunks + 1) * sizeof *w);
    uint64_t others = s->view.n > 1 ? (uint64_t)s->view.n - 1 : 1;
    for (size_t k = 0, lo, hi; k < s->nchunks; k++) {
        chunk(s, k, &lo, &hi);
        uint64_t part = (s->c.topk_2bit ? 5 : 4 * SPARSE_BYTES) *
                        (uint64_t)nonzeros(me->delta, lo, hi) / 4,
                 sum = others * s->sum_bytes[k];
        spill_drop(me->delta + lo, (hi - lo) * sizeof(float));
        uint64_t v = (sum > part ? sum - part : 0) + CUT_FLOOR;
        w[k] = v < UINT32_MAX ? (uint32_t)v : UINT32_MAX;
    }
    sw_cut_weighted(w, s->nchunks, n, cut);
    free(w);
    return cut;
}

// Under topk a slice sum travels in runs of whole chunks of one kind, none crossing a piece
// (SW_PIECE floats from the slice's start lo): chunks at most an eighth non-zero with int8 sums (a
// half with fp32 sums) exact, as gaps and floats (SUMS: about 5 bytes a float, no more than the
// chunk's codes or floats would cost), the others as codes (SUM8: only the codes not zero, with
// their gaps, when that is fewer bytes) or floats (SUM). The run at `at` (before hi):
// its length, and *sparse its kind. (A piece's kind was decided whole until 2026-11-28: a piece
// with a few dense chunks went whole as codes, one of mostly dense chunks whole as pairs.)
size_t sw_sum_run(const Swarm *s, const float *a, size_t lo, size_t at, size_t hi, int *sparse) {
    size_t end = lo + (at - lo) / SW_PIECE * SW_PIECE + SW_PIECE, x = at;
    if (end > hi) end = hi;
    *sparse = -1;
    while (x < end) {
        size_t ce = end - x < CQ_CHUNK ? end : x + CQ_CHUNK;
        int sp = nonzeros(a, x, ce) <= (ce - x) / (s->c.sums_int8 ? 8 : 2);
        if (*sparse >= 0 && sp != *sparse) break;
        *sparse = sp, x = ce;
    }
    return x - at;
}
