// swap_update.c — the update pass of a swapped step: the global gradient norm from the
// partials the backward took, then AdamW streamed through fast memory in pieces of at most
// s->chunk floats (parameters, gradients, m, v), two pieces in flight, parameters and
// moments written back; under ZeRO-1 each piece's parameters are all-gathered from their
// owners on the way.
#include <stdlib.h>

#include "../common.h"
#include "swap_impl.h"

double swap_grad_sumsq(Swapper *s) { return gpt_chunk_total(s->m, s->part); }

static int update_pass(Swapper *s, float lr, float grad_scale);

typedef struct {
    size_t a, n;   // the piece: flat [a, a+n) inside one block
    size_t oa, ob; // its owned part
    float *p, *g, *mo, *vo;
    uint64_t rd[4], wr[3];
} Piece;

// The next piece after flat offset x (inside the range the pass walks): up to the chunk, never
// across a block.
static size_t piece_end(const Swapper *s, size_t x, size_t end) {
    const Block *blk = &s->m->blocks[swap_block_at(s, x)];
    size_t e = blk->off + blk->n, c = x + s->chunk;
    e = e < c ? e : c;
    return e < end ? e : end;
}

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

// Starts reading piece [a, e) into q (after q's previous writes are done).
static int issue(Swapper *s, Piece *q, size_t a, size_t e) {
    if (wait_all(s, q->wr, 3)) return -1;
    q->a = a, q->n = e - a;
    size_t st, k = range_isect(a, e, s->lo, s->hi, &st);
    q->oa = k ? st : a, q->ob = k ? st + k : a;
    q->rd[0] = rd(s, REGION_PARAMS, a, q->p, q->n);
    if (k) {
        q->rd[1] = rd(s, REGION_GRADS, q->oa, q->g, k);
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

static int update_pass(Swapper *s, float lr, float grad_scale) {
    s->t++;
    Piece q[2] = {{0}};
    for (int i = 0; i < 2; i++) {
        float *base = s->stream + (size_t)i * 4 * s->chunk;
        q[i].p = base, q[i].g = base + s->chunk;
        q[i].mo = base + 2 * s->chunk, q[i].vo = base + 3 * s->chunk;
    }
    // ZeRO-1 walks every piece (each rank gathers what the others own); otherwise the owned range
    int gathers = s->N > 1 && s->c.zero >= 1;
    size_t lo = gathers ? 0 : s->lo, hi = gathers ? s->m->nparams : s->hi;
    int rc = 0, cur = 0;
    size_t a = lo, e = a < hi ? piece_end(s, a, hi) : hi;
    if (a < hi) rc = issue(s, &q[0], a, e);
    while (!rc && a < hi) {
        size_t a2 = e, e2 = a2 < hi ? piece_end(s, a2, hi) : hi;
        if (a2 < hi) rc = issue(s, &q[cur ^ 1], a2, e2); // the next piece's reads go first
        if (!rc) rc = compute(s, &q[cur], lr, grad_scale);
        a = a2, e = e2, cur ^= 1;
    }
    for (int i = 0; i < 2; i++)
        rc |= wait_all(s, q[i].rd, 4) | wait_all(s, q[i].wr, 3);
    for (int i = 0; i < s->S; i++) // every unit's parameters changed
        s->slot[i].unit = -1, s->slot[i].params_ok = 0;
    return rc ? -1 : 0;
}

int swap_update(Swapper *s, float lr, float grad_scale) {
    double t0 = now_sec();
    int rc = update_pass(s, lr, grad_scale);
    s->update_s += now_sec() - t0;
    return rc;
}
