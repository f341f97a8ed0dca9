// swap_step.c — one step's forward and backward through the swap units (the schedule in
// offload.h): K micro-batches per resident unit, the turn at the last unit, gradients reduced,
// measured and written unit by unit; and the validation pass.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "swap_impl.h"

// Block b's forward for micro-batch k of the unit u it belongs to; returns the head's mean
// token loss (0 for other blocks).
static double fwd(Swapper *s, int u, int b, int k) {
    GPT *m = s->m;
    if (s->co2) swap_co2_poll(s); // CO2's average runs in the background
    Workspace *ws = &s->ws[k];
    const Block *blk = &m->blocks[b];
    BlockIO io = {.tokens = ws->tokens, .targets = ws->targets};
    if (blk->kind != BLOCK_EMBED) io.x_in = workspace_stream(ws, m, b - 1);
    if (blk->kind != BLOCK_HEAD) io.x_out = workspace_stream(ws, m, b);
    if (blk->kind == BLOCK_HEAD) io.wte = swap_wte(s, u);
    block_forward(m, blk, ws, &io);
    return blk->kind == BLOCK_HEAD ? io.loss_sum / ((double)ws->B * ws->T) : 0;
}

static void bwd(Swapper *s, int u, int b, int k, float scale) {
    GPT *m = s->m;
    if (s->co2) swap_co2_poll(s);
    Workspace *ws = &s->ws[k];
    const Block *blk = &m->blocks[b];
    BlockIO io = {.tokens = ws->tokens, .targets = ws->targets, .dx = ws->dstream};
    if (blk->kind != BLOCK_EMBED) io.x_in = workspace_stream(ws, m, b - 1);
    if (blk->kind != BLOCK_HEAD) io.x_out = workspace_stream(ws, m, b);
    if (blk->kind == BLOCK_HEAD) {
        io.wte = swap_wte(s, u);
        io.dwte = swap_hbuf(s, u);
        io.grad_scale = scale;
    }
    block_backward(m, blk, ws, &io);
}

// Zeroes the unit's gradient regions (the embedding's overlays its parameters: zeroed when its
// backward starts).
static void zero_grads(Swapper *s, int u) {
    const OffloadUnit *un = &s->plan.unit[u];
    for (int b = un->first; b <= un->last; b++)
        if (s->m->blocks[b].kind != BLOCK_EMBED)
            s->m->be->fill(s->m->blocks[b].grads, 0.f, offload_pad(s->m->blocks[b].n));
}

// The head's part H comes back from the tier and is added to the embedding's gradient once.
static int fold_head(Swapper *s) {
    GPT *m = s->m;
    float *E = m->blocks[0].grads, *buf = s->stream;
    size_t n = offload_wte_floats(m), cap = 4 * s->chunk;
    for (size_t a = 0; a < n; a += cap) {
        size_t k = n - a < cap ? n - a : cap;
        uint64_t t = tier_read_async(s->tier, swap_tier_off(s, REGION_H, a), buf,
                                     offload_pad(k) * sizeof(float));
        if (tier_wait(s->tier, t)) return -1;
        m->be->axpby(E + a, 1.0f, buf, 1.0f, k); // E + H, as gpt_fold_head
    }
    return 0;
}

// Writes the owned part of padded range [p0, p1) of the gradient region from src (at p0).
static uint64_t write_grads(Swapper *s, const float *src, size_t p0, size_t p1) {
    size_t a = p0 > s->plo ? p0 : s->plo, e = p1 < s->phi ? p1 : s->phi;
    if (a >= e) return 0;
    size_t off = s->region[REGION_GRADS] + (a - s->plo) * sizeof(float);
    return tier_write_async(s->tier, off, src + (a - p0), (e - a) * sizeof(float));
}

// ZeRO-2: the padded gradient range [gp0, gp1) (g at gp0) summed over the ranks, each receiving
// only the part it owns, in pieces of the streaming buffer's size (every rank walks the same
// pieces; the buffer is free during the backward: fold_head and the fused update wait for their
// I/O before returning, and CO2, which uses it between blocks, is not sharded with --offload).
static int scatter_grads(Swapper *s, float *g, size_t gp0, size_t gp1) {
    size_t piece = 8 * s->chunk, *cnt = xcalloc((size_t)s->N, sizeof(size_t));
    int rc = 0;
    for (size_t a = gp0; a < gp1 && !rc; a += piece) {
        size_t e = gp1 - a < piece ? gp1 : a + piece, mine = 0, at = a;
        for (int r = 0; r < s->N; r++) {
            size_t lo = s->pbound[r] > a ? s->pbound[r] : a;
            size_t hi = s->pbound[r + 1] < e ? s->pbound[r + 1] : e;
            cnt[r] = hi > lo ? hi - lo : 0;
            if (r == s->rank) mine = cnt[r], at = lo;
        }
        CommReq req = comm_ireduce_scatter(s->c.comm, g + (a - gp0), s->stream, cnt);
        rc = comm_wait(&req);
        if (!rc && mine) s->m->be->copy(g + (at - gp0), s->stream, mine);
    }
    free(cnt);
    return rc;
}

// The unit's gradients summed over the ranks (ZeRO-2: the layers' reduce-scattered, the
// embedding's all-reduced as under ZeRO-1).
static int reduce_unit(Swapper *s, int ge, int g0, size_t gp0, size_t gp1) {
    GPT *m = s->m;
    if (gp1 > gp0) {
        int rc = s->c.zero >= 2 ? scatter_grads(s, m->blocks[g0].grads, gp0, gp1)
                                : comm_allreduce(s->c.comm, m->blocks[g0].grads, gp1 - gp0);
        if (rc) return -1;
    }
    if (ge && comm_allreduce(s->c.comm, m->blocks[0].grads, offload_pad(m->blocks[0].n))) return -1;
    return 0;
}

// SwapConfig.tensor_norm: Σ g² of each tensor of block b (ZeRO 0: the whole gradient is here).
static void tensor_sums(Swapper *s, int b) {
    const GPT *m = s->m;
    const Block *blk = &m->blocks[b];
    for (int t = 0; t < m->ntensors; t++) {
        const TensorSpec *ts = &m->tensors[t];
        if (ts->off >= blk->off && ts->off < blk->off + blk->n)
            s->tsum[t] = m->be->sumsq(blk->grads + (ts->off - blk->off), ts->n);
    }
}

// A unit's gradient is complete: sum it over the ranks, take its norm partials (ZeRO-2: of the
// owned chunks only; swap_grad_sumsq adds them over the ranks), write it.
static int finish_unit(Swapper *s, int u) {
    GPT *m = s->m;
    const OffloadUnit *un = &s->plan.unit[u];
    Slot *sl = swap_slot_of(s, u);
    int ge = m->blocks[un->first].kind == BLOCK_EMBED;
    int g0 = ge ? un->first + 1 : un->first;
    size_t gp0 = s->poff[g0], gp1 = s->poff[un->last + 1];
    if (s->N > 1 && reduce_unit(s, ge, g0, gp0, gp1)) return -1;
    for (int b = un->first; b <= un->last && s->tsum; b++)
        tensor_sums(s, b);
    for (int b = un->first; b <= un->last && !s->tsum; b++) {
        const Block *blk = &m->blocks[b];
        size_t a = blk->off, e = blk->off + blk->n;
        if (s->N > 1 && s->c.zero >= 2) a = a > s->lo ? a : s->lo, e = e < s->hi ? e : s->hi;
        if (a < e) gpt_chunk_sumsq(m, blk->grads + (a - blk->off), a, e, s->part);
    }
    if (s->fused) return swap_update_unit(s, u); // the gradient never leaves fast memory
    if (gp1 > gp0) sl->wr[0] = write_grads(s, m->blocks[g0].grads, gp0, gp1);
    if (ge) sl->wr[1] = write_grads(s, m->blocks[0].grads, s->poff[0], s->poff[1]);
    return 0;
}

// Issues the reads of the units after position i of the visiting order (dir +1 / -1).
static int prefetch(Swapper *s, int u, int dir, int layers_only) {
    for (int j = 1; j <= s->plan.prefetch; j++) {
        int v = u + dir * j;
        if (v < 0 || v >= s->plan.nunits - (dir > 0 ? 0 : 1)) break;
        if (swap_fetch_unit(s, v, layers_only)) return -1;
    }
    return 0;
}

// The turn: the last unit's forward and backward, micro-batch by micro-batch.
static int turn(Swapper *s, float scale, double *loss) {
    int u = s->plan.nunits - 1;
    const OffloadUnit *un = &s->plan.unit[u];
    if (swap_fetch_unit(s, u, 0) || swap_ready(s, u) || prefetch(s, u, -1, 1)) return -1;
    zero_grads(s, u);
    s->m->be->fill(swap_hbuf(s, u), 0.f, offload_pad(offload_wte_floats(s->m)));
    for (int k = 0; k < s->c.K; k++) {
        for (int b = un->first; b <= un->last; b++)
            *loss += fwd(s, u, b, k);
        for (int b = un->last; b >= un->first; b--)
            bwd(s, u, b, k, scale);
    }
    if (finish_unit(s, u)) return -1;
    swap_slot_of(s, u)->wr[2] =
        tier_write_async(s->tier, s->region[REGION_H], swap_hbuf(s, u),
                         offload_pad(offload_wte_floats(s->m)) * sizeof(float));
    return 0;
}

static int backward_unit(Swapper *s, int u, float scale) {
    const OffloadUnit *un = &s->plan.unit[u];
    if (swap_fetch_unit(s, u, 1) || swap_ready(s, u) || prefetch(s, u, -1, 1)) return -1;
    zero_grads(s, u);
    for (int k = 0; k < s->c.K; k++)
        for (int b = un->last; b >= un->first; b--) {
            if (s->m->blocks[b].kind == BLOCK_EMBED && k == 0) { // overlays its parameters
                swap_slot_of(s, u)->params_ok = 0;
                s->m->be->fill(s->m->blocks[b].grads, 0.f, offload_pad(s->m->blocks[b].n));
            }
            bwd(s, u, b, k, scale);
        }
    if (s->m->blocks[un->first].kind == BLOCK_EMBED && fold_head(s)) return -1;
    return finish_unit(s, u);
}

int swap_grads(Swapper *s, SwapBatchFn batch, void *ctx, int step, float scale, float lr,
               double *loss) {
    int n = s->plan.nunits;
    s->lr = lr;
    if (s->fused) s->t++; // this step's updates run unit by unit during the backward
    if (!s->steps++) tier_bytes(s->tier, &s->base_read, &s->base_written);
    for (int k = 0; k < s->c.K; k++)
        batch(ctx, step, k, s->ws[k].tokens, s->ws[k].targets);
    memset(s->part, 0, (size_t)s->m->nchunks * sizeof(double));
    double sum = 0;
    if (swap_fetch_unit(s, 0, 0)) return -1;
    for (int u = 0; u < n - 1; u++) {
        if (swap_ready(s, u) || prefetch(s, u, +1, 0)) return -1;
        const OffloadUnit *un = &s->plan.unit[u];
        for (int k = 0; k < s->c.K; k++)
            for (int b = un->first; b <= un->last; b++)
                fwd(s, u, b, k);
    }
    if (turn(s, scale, &sum)) return -1;
    for (int u = n - 2; u >= 0; u--)
        if (backward_unit(s, u, scale)) return -1;
    if (s->fused) swap_slot_of(s, n - 1)->unit = -1; // its copy of the tied wte is stale now
    *loss = sum / s->c.K;
    return 0;
}

int swap_evaluate(Swapper *s, int n, SwapValFn val, void *ctx, double *loss) {
    double sum = 0;
    int U = s->plan.nunits;
    for (int w0 = 0; w0 < n; w0 += s->c.K) {
        int kk = n - w0 < s->c.K ? n - w0 : s->c.K;
        for (int k = 0; k < kk; k++)
            val(ctx, w0 + k, s->ws[k].tokens, s->ws[k].targets);
        if (swap_fetch_unit(s, 0, 0)) return -1;
        for (int u = 0; u < U; u++) {
            if (swap_fetch_unit(s, u, 0) || swap_ready(s, u) || prefetch(s, u, +1, 0)) return -1;
            const OffloadUnit *un = &s->plan.unit[u];
            for (int k = 0; k < kk; k++)
                for (int b = un->first; b <= un->last; b++)
                    sum += fwd(s, u, b, k);
        }
    }
    *loss = n ? sum / n : NAN;
    return 0;
}
