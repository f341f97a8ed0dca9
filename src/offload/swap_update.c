// swap_update.c — the update pass of a swapped step: the global gradient norm from the
// partials the backward took, then AdamW streamed through fast memory in pieces of at most
// s->chunk floats (parameters, gradients, m, v), two pieces in flight, parameters and
// moments written back; under ZeRO-1 each piece's parameters are all-gathered from their
// owners on the way.
#include <math.h>
#include <stdlib.h>

#include "../common.h"
#include "swap_impl.h"

// ZeRO-2: each rank took the partials of the chunks it owns (the others are 0, so the sum over
// the ranks is every chunk's partial exactly, whatever the order of the additions).
double swap_grad_sumsq(Swapper *s) {
    if (s->N > 1 && s->c.zero >= 2 && comm_allreduce_f64(s->c.comm, s->part, s->m->nchunks))
        return NAN;
    return gpt_chunk_total(s->m, s->part);
}

double swap_tensor_sumsq(const Swapper *s) {
    const GPT *m = s->m;
    double sum = 0;
    for (int t = 0; t < m->ntensors; t++)
        if (gpt_tp_counts(m, t, m->tp.i)) sum += s->tsum[t]; // shared ones once (LLaMA's kv)
    return sum;
}

static int update_pass(Swapper *s, float lr, float grad_scale);

typedef struct {
    size_t a, n;   // the piece: flat [a, a+n) inside one block
    size_t oa, ob; // its owned part
    float *p, *g;  // its parameters (at a) and owned gradients (at oa): buffers or a slot
    float *pbuf, *gbuf, *mo, *vo;
    uint64_t rd[4], wr[3];
    int p_slot; // p is in a slot: its write is the slot's to wait for, not the buffer's
} Piece;

static int wait_all(Swapper *s, uint64_t *t, int n) {
    int rc = 0;
    for (int i = 0; i < n; i++)
        rc |= tier_wait(s->tier, t[i]), t[i] = 0;
    return rc ? -1 : 0;
}

static uint64_t rd(Swapper *s, int r, size_t x, float *dst, size_t n) {
    return tier_read_async(s->tier, swap_tier_off(s, r, x), dst, offload_pad(n) * sizeof(float));
}

static uint64_t wr(Swapper *s, int r, size_t x, const float *src, size_t n) {
    return tier_write_async(s->tier, swap_tier_off(s, r, x), src, offload_pad(n) * sizeof(float));
}

// Starts reading piece [a, e) into q (after q's previous writes are done): everything from the
// tier, or (fused) only the moments — parameters and gradients are in the unit's slot (the
// embedding's parameters excepted: its gradient overlays them, they come from the tier).
static int issue(Swapper *s, Piece *q, size_t a, size_t e, int fused) {
    if (wait_all(s, q->wr, 3)) return -1;
    q->a = a, q->n = e - a;
    size_t st, k = range_isect(a, e, s->lo, s->hi, &st);
    q->oa = k ? st : a, q->ob = k ? st + k : a;
    const Block *blk = &s->m->blocks[swap_block_at(s, a)];
    q->p_slot = fused && blk->kind != BLOCK_EMBED;
    q->p = q->p_slot ? blk->params + (a - blk->off) : q->pbuf;
    q->g = fused ? blk->grads + (q->oa - blk->off) : q->gbuf;
    q->rd[0] = q->p_slot ? 0 : rd(s, REGION_PARAMS, a, q->p, q->n);
    if (k) {
        q->rd[1] = fused ? 0 : rd(s, REGION_GRADS, q->oa, q->g, k);
        q->rd[2] = rd(s, REGION_M, q->oa, q->mo, k);
        q->rd[3] = rd(s, REGION_V, q->oa, q->vo, k);
    }
    return 0;
}

// All-gathers the piece's parameters from their owners (ZeRO-1), in place.
static int gather(Swapper *s, Piece *q) {
    size_t *cnt = xcalloc((size_t)s->N, sizeof(size_t)),
           *dsp = xcalloc((size_t)s->N, sizeof(size_t));
    for (int r = 0; r < s->N; r++) {
        size_t st;
        cnt[r] = range_isect(q->a, q->a + q->n, s->bound[r], s->bound[r + 1], &st);
        dsp[r] = cnt[r] ? st - q->a : 0;
    }
    CommReq req = comm_iallgatherv(s->c.comm, q->p, cnt, dsp);
    int rc = comm_wait(&req);
    free(cnt), free(dsp);
    return rc;
}

static int compute(Swapper *s, Piece *q, float lr, float scale) {
    if (wait_all(s, q->rd, 4)) return -1;
    size_t k = q->ob - q->oa;
    if (k)
        adamw_update_range(s->m, &s->c.opt, s->t, q->oa, q->ob, q->p + (q->oa - q->a), q->g, q->mo,
                           q->vo, lr, scale);
    if (s->N > 1 && s->c.zero >= 1 && gather(s, q)) return -1;
    q->wr[0] = wr(s, REGION_PARAMS, q->a, q->p, q->n);
    if (k) {
        q->wr[1] = wr(s, REGION_M, q->oa, q->mo, k);
        q->wr[2] = wr(s, REGION_V, q->oa, q->vo, k);
    }
    return 0;
}

// AdamW over the pieces of flat [lo, hi) (ZeRO-1: every piece, each rank gathering what the
// others own; else the owned part), two in flight. fused: from the slot `sl` (see issue); the
// writes out of it are left to the slot (sl->wr_upto), those out of the buffers are waited for.
static int walk(Swapper *s, size_t lo, size_t hi, Slot *sl, float lr, float grad_scale) {
    Piece q[2] = {{0}};
    for (int i = 0; i < 2; i++) {
        float *base = s->stream + (size_t)i * 4 * s->chunk;
        q[i].pbuf = base, q[i].gbuf = base + s->chunk;
        q[i].mo = base + 2 * s->chunk, q[i].vo = base + 3 * s->chunk;
    }
    int gathers = s->N > 1 && s->c.zero >= 1;
    if (!gathers) {
        lo = lo > s->lo ? lo : s->lo;
        hi = hi < s->hi ? hi : s->hi;
    }
    int rc = 0, cur = 0, fused = sl != NULL;
    size_t a = lo, e = a < hi ? swap_piece_end(s, a, hi) : hi;
    if (a < hi) rc = issue(s, &q[0], a, e, fused);
    while (!rc && a < hi) {
        size_t a2 = e, e2 = a2 < hi ? swap_piece_end(s, a2, hi) : hi;
        if (a2 < hi) rc = issue(s, &q[cur ^ 1], a2, e2, fused); // the next piece's reads first
        if (!rc) rc = compute(s, &q[cur], lr, grad_scale);
        if (!rc && q[cur].p_slot && q[cur].wr[0] > sl->wr_upto) sl->wr_upto = q[cur].wr[0];
        if (q[cur].p_slot) q[cur].wr[0] = 0; // the slot waits for it before it is reused
        a = a2, e = e2, cur ^= 1;
    }
    for (int i = 0; i < 2; i++)
        rc |= wait_all(s, q[i].rd, 4) | wait_all(s, q[i].wr, 3);
    return rc ? -1 : 0;
}

static int update_pass(Swapper *s, float lr, float grad_scale) {
    s->t++;
    int rc = walk(s, 0, s->m->nparams, NULL, lr, grad_scale);
    for (int i = 0; i < s->S; i++) // every unit's parameters changed
        s->slot[i].unit = -1, s->slot[i].params_ok = 0;
    return rc;
}

int swap_update_unit(Swapper *s, int u) {
    const OffloadUnit *un = &s->plan.unit[u];
    const Block *b0 = &s->m->blocks[un->first], *b1 = &s->m->blocks[un->last];
    double t0 = now_sec();
    int rc = walk(s, b0->off, b1->off + b1->n, swap_slot_of(s, u), s->lr, 1.0f);
    s->update_s += now_sec() - t0;
    return rc;
}

int swap_update(Swapper *s, float lr, float grad_scale) {
    double t0 = now_sec();
    int rc = update_pass(s, lr, grad_scale);
    s->update_s += now_sec() - t0;
    return rc;
}
