// pipeline_swap.c — a pipeline stage's blocks swapped through its own disk tier (--offload disk
// with --pp, gpipe/1f1b/2bw, ZeRO 0): the offload layer's tier brought to the pipeline through its
// PipeSwapOps hooks (parallel/pipeline_impl.h), which strat_pipeline.c hands to the pipeline. The
// stage's parameters, gradients and AdamW moments live in a scratch file of this rank (tier.h: one
// region per array, each block on a TIER_ALIGN boundary); in memory are a few block slots
// (parameters and gradients of one block each, as many as --fast-mem leaves after the fixed
// overhead, the micro-batches' activations and the tied wte replica), reused least recently used
// first. A block runs from its slot: before a forward its parameters are read, before a backward
// its gradient too (zeros on its first backward of a step), and a slot that is given up writes its
// gradient back; the next block in the walk's direction is read ahead into another slot while one
// computes. The end of a step walks the blocks in order for the norm (the same per-chunk partials
// as in memory) and the update (AdamW on one block at a time, its moments read and written around
// it), so the same kernels run on the same values in the same order as the in-memory stage: bit for
// bit. The activations of the micro-batches in flight (K under gpipe, D-s under 1f1b/2bw) stay in
// memory and are counted in the budget.
// 2bw: the tier holds both weight versions and two gradients (regions 4 and 5: version 1's
// parameters, the gradient of odd batches). A slot remembers which version it read and reads
// again when a micro-batch runs on the other; batch t accumulates into gradient t & 1, written
// to the tier when the batch ends (ps_batch_end). Its update is made when the pipeline needs it
// (pipeline_sched.c), outside the slots: block by block its gradient is all-reduced over the
// replicas (and the tie), summed into the norm, and W(t+1) = W(t) - opt(g_t) written over
// W(t-1) with two more buffers of one block (parameters, gradient) — the in-memory 2bw's
// values in its order. The wte replica's two versions and two gradients stay in memory.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "pipeline_swap.h"

#include "../offload/offload.h"
#include "../offload/offload_plan.h"
#include "../offload/tier.h"
#include "../parallel/pipeline_impl.h"
#include "../testhooks.h"

struct PipeSwap {
    Tier *tier;
    size_t *toff;  // per stage block: its offset in every region (bytes)
    size_t region; // bytes of one region (parameters, gradients, m, v)
    size_t cap;    // floats of a slot's array (the stage's largest block, padded)
    int nslot, clock;
    float **sp, **sg;                     // per slot: parameters, gradients
    int *owner, *grads_in, *dirty, *used; // per slot
    uint64_t *pt, *gt;                    // per slot: its reads in flight (0: none)
    int *slot;                            // per stage block: its slot, or -1
    int *gtier;                  // per stage block: its gradient of this step is in the tier
    float *mbuf, *vbuf;          // the update's moments of one block
    float *ubuf, *ugbuf;         // 2bw: the update's parameters and gradient of one block
    int *pver;                   // per slot: the weight version its parameters are (2bw)
    int gpar;                    // the gradient being accumulated: batch parity (2bw), else 0
    int cached_b, cached_region; // a checkpoint's reads: the block and array mbuf holds
    double budget, need;         // bytes
    const Backend *be;           // the slots' (device memory under a device tier)
    float *hscratch;             // a device tier: the host scratch a shard lends (cap floats)
};

static size_t toff(const PipeSwap *w, const Pipe *p, int b, int region) {
    return (size_t)region * w->region + w->toff[b - p->b0];
}

// The tier's regions: parameters of weight version v, gradient of parity g (2bw: batch t
// accumulates into t & 1; otherwise 0), and the moments (2, 3).
static int preg(int v) { return v ? 4 : 0; }
static int greg(int g) { return g ? 5 : 1; }
static int *gtier_of(PipeSwap *w, const Pipe *p, int g, int b) {
    return &w->gtier[g * (p->b1 - p->b0) + (b - p->b0)];
}

static int io_sync(PipeSwap *w, uint64_t t) { return t == 0 ? -1 : tier_wait(w->tier, t); }

static int tier_rd(PipeSwap *w, size_t off, float *dst, size_t n) {
    return io_sync(w, tier_read_async(w->tier, off, dst, offload_pad(n) * sizeof(float)));
}

static int tier_wr(PipeSwap *w, size_t off, const float *src, size_t n) {
    return io_sync(w, tier_write_async(w->tier, off, src, offload_pad(n) * sizeof(float)));
}

// Waits for slot k's reads in flight (a prefetch).
static int settle(PipeSwap *w, int k) {
    int rc = tier_wait(w->tier, w->pt[k]) | tier_wait(w->tier, w->gt[k]);
    w->pt[k] = w->gt[k] = 0;
    return rc ? -1 : 0;
}

// Gives up slot k: its block's gradient (when changed) goes back to the tier.
static int evict(Pipe *p, int k) {
    PipeSwap *w = p->sw;
    int b = w->owner[k];
    if (b < 0) return 0;
    const Block *blk = &p->m->blocks[b];
    if (settle(w, k) || (w->dirty[k] && tier_wr(w, toff(w, p, b, greg(w->gpar)), w->sg[k], blk->n)))
        return -1;
    if (w->dirty[k]) *gtier_of(w, p, w->gpar, b) = 1;
    w->slot[b - p->b0] = -1, w->owner[k] = -1, w->dirty[k] = w->grads_in[k] = 0;
    return 0;
}

// Block b into the least recently used slot other than `keep`, its parameters' read queued.
// Returns the slot, or -1.
static int take(Pipe *p, int b, int keep) {
    PipeSwap *w = p->sw;
    int k = -1;
    for (int i = 0; i < w->nslot; i++) {
        if (i == keep) continue;
        if (w->owner[i] < 0) { // a free slot
            k = i;
            break;
        }
        if (k < 0 || w->used[i] < w->used[k]) k = i;
    }
    if (k < 0 || evict(p, k)) return -1;
    size_t bytes = offload_pad(p->m->blocks[b].n) * sizeof(float);
    w->pt[k] = tier_read_async(w->tier, toff(w, p, b, preg(p->cur_ver)), w->sp[k], bytes);
    w->pver[k] = p->cur_ver, w->owner[k] = b, w->slot[b - p->b0] = k, w->used[k] = ++w->clock;
    return k;
}

// Slot k's block's gradient of this step: read from the tier (queued) or zeros.
static void want_grads(Pipe *p, int b, int k) {
    PipeSwap *w = p->sw;
    if (w->grads_in[k]) return;
    size_t n = p->m->blocks[b].n;
    if (*gtier_of(w, p, w->gpar, b))
        w->gt[k] =
            tier_read_async(w->tier, toff(w, p, b, greg(w->gpar)), w->sg[k], offload_pad(n) * 4);
    else
        w->be->fill(w->sg[k], 0.f, n);
    w->grads_in[k] = 1;
}

// pipe_swap_use, with block `next` (when in the stage, not resident and a second slot exists)
// read ahead while b computes: its parameters, and its gradient when b's is wanted.
static int use_next(Pipe *p, int b, int grads, int next) {
    PipeSwap *w = p->sw;
    Block *blk = &p->m->blocks[b];
    int k = w->slot[b - p->b0];
    if (k < 0 && (k = take(p, b, -1)) < 0) return -1;
    if (grads) want_grads(p, b, k);
    if (settle(w, k)) return -1;
    if (w->pver[k] != p->cur_ver) { // 2bw: the slot holds the other weight version
        if (tier_rd(w, toff(w, p, b, preg(p->cur_ver)), w->sp[k], blk->n)) return -1;
        w->pver[k] = p->cur_ver;
    }
    if (grads) w->dirty[k] = 1; // a backward or the update follows
    w->used[k] = ++w->clock;
    blk->params = w->sp[k];
    blk->grads = w->grads_in[k] ? w->sg[k] : NULL;
    if (next < p->b0 || next >= p->b1 || w->nslot < 2 || w->slot[next - p->b0] >= 0) return 0;
    int kn = take(p, next, k);
    if (kn < 0) return -1;
    if (grads) want_grads(p, next, kn);
    return 0;
}

// Forward (grads 0) reads ahead the next block, a backward (grads 1) the one before.
static int ps_use(Pipe *p, int b, int grads) {
    return use_next(p, b, grads, grads ? b - 1 : b + 1);
}

// Flat [lo, hi) of weight version v of the stage from the tier into host, block by block
// through the first slot (every slot is given up first).
static int ps_fetch(Pipe *p, int v, float *host) {
    PipeSwap *w = p->sw;
    for (int k = 0; k < w->nslot; k++)
        if (evict(p, k)) return -1;
    for (int b = p->b0; b < p->b1; b++) {
        const Block *blk = &p->m->blocks[b];
        if (tier_rd(w, toff(w, p, b, preg(v)), w->sp[0], blk->n)) return -1;
        w->be->download(host + (blk->off - p->lo), w->sp[0], blk->n);
    }
    return 0;
}

// Block b's first contents into the tier: its initial weights, or the checkpoint's weights
// and moments (resume); under 2bw (cur: the newest version's buffer) the previous version too,
// the newest again when the checkpoint has none.
static int fill_block(Pipe *p, int b, int resume, int cur) {
    PipeSwap *w = p->sw;
    const Block *blk = &p->m->blocks[b];
    size_t lo = blk->off, hi = lo + blk->n, pad = offload_pad(blk->n) * sizeof(float);
    float *a[4] = {w->sp[0], w->mbuf, w->vbuf, w->ubuf}; // (ubuf: 2bw only)
    for (int k = 0; k < 3 + (p->nver == 2); k++)
        w->be->fill(a[k], 0.f, pad / sizeof(float));
    int no_prev = 1;
    if (resume)
        no_prev =
            p->io->load(p->io->ctx, lo, hi, a[0], p->nver == 2 ? a[3] : NULL, lo, hi, a[1], a[2]);
    else if (p->io->params(p->io->ctx, lo, hi, a[0]))
        return -1;
    if (no_prev < 0 || tier_wr(w, toff(w, p, b, preg(cur)), a[0], blk->n) ||
        tier_wr(w, toff(w, p, b, 2), a[1], blk->n) || tier_wr(w, toff(w, p, b, 3), a[2], blk->n))
        return -1;
    return p->nver == 2 && tier_wr(w, toff(w, p, b, preg(cur ^ 1)), no_prev ? a[0] : a[3], blk->n);
}

static int ps_fill(Pipe *p, int start) {
    int resume = start > 0 && p->io->load, cur = p->nver == 2 ? start & 1 : 0;
    p->sw->gpar = cur; // batch `start` accumulates into its parity
    for (int b = p->b0; b < p->b1; b++)
        if (fill_block(p, b, resume, cur)) return -1;
    if (!p->replica) return 0;
    float *prev = p->nver == 2 ? p->wbuf[cur ^ 1] : NULL;
    int no_prev = 1;
    if (resume)
        no_prev =
            p->io->load(p->io->ctx, 0, p->tie_n, p->wbuf[cur], prev, 0, p->tie_n, p->wm, p->wv);
    else if (p->io->params(p->io->ctx, 0, p->tie_n, p->wbuf[cur]))
        return -1;
    if (no_prev < 0) return -1;
    if (prev && no_prev) p->m->be->copy(prev, p->wbuf[cur], p->tie_n);
    return 0;
}

// CkptShard.fetch: n floats of the stage's flat array (0 the newest params, 1 m, 2 v, 3 under
// 2bw the previous version) from at, through mbuf, which keeps the last block read (the
// checkpoint writer reads in pieces, in order).
static int shard_fetch(void *ctx, int array, size_t at, size_t n, float *dst) {
    Pipe *p = ctx;
    PipeSwap *w = p->sw;
    int newest = p->nver == 2 ? p->done & 1 : 0;
    int region = array == 0 ? preg(newest) : array == 3 ? preg(newest ^ 1) : array + 1;
    for (int b = p->b0; b < p->b1 && n; b++) {
        const Block *blk = &p->m->blocks[b];
        size_t s, k = range_isect(blk->off, blk->off + blk->n, at, at + n, &s);
        if (!k) continue;
        if ((w->cached_b != b || w->cached_region != region) &&
            tier_rd(w, toff(w, p, b, region), w->mbuf, blk->n))
            return -1;
        w->cached_b = b, w->cached_region = region;
        w->be->download(dst + (s - at), w->mbuf + (s - blk->off), k);
    }
    return 0;
}

static int ps_shard(Pipe *p, PipeShard *sh) {
    PipeSwap *w = p->sw;
    for (int k = 0; k < w->nslot; k++) // (between steps no gradient is pending: nothing written)
        if (evict(p, k)) die_last(1);
    w->cached_b = -1;
    static const float prev_fetched; // 2bw: prev is only a flag, fetch reads array 3
    *sh = (PipeShard){.lo = p->lo,
                      .hi = p->hi,
                      .prev = p->nver == 2 ? &prev_fetched : NULL,
                      .fetch = shard_fetch,
                      .fetch_ctx = p,
                      .scratch = w->hscratch ? w->hscratch : w->sp[0],
                      .scratch_floats = w->cap};
    return p->gc->rank == 0;
}

// 2bw: block b's gradient of the pending batch into ugbuf (zeros if it has none), all-reduced
// over the replicas and, for stage 0's embedding, over the tie, then written back for the
// update.
static int reduce_block(Pipe *p, int b) {
    PipeSwap *w = p->sw;
    const Block *blk = &p->m->blocks[b];
    int par = p->pend.step & 1;
    if (!*gtier_of(w, p, par, b))
        w->be->fill(w->ugbuf, 0.f, blk->n);
    else if (tier_rd(w, toff(w, p, b, greg(par)), w->ugbuf, blk->n))
        return -1;
    *gtier_of(w, p, par, b) = 1;
    int dp = p->gc->size > 1, tie = b == 0 && p->first && p->tie;
    if ((dp && pipe_grad_allreduce(p->gc, w->ugbuf, blk->n)) ||
        (tie && pipe_grad_allreduce(p->tie, w->ugbuf, p->tie_n)))
        return -1;
    return dp || tie ? tier_wr(w, toff(w, p, b, greg(par)), w->ugbuf, blk->n) : 0;
}

// Σ g² per chunk of the stage's gradients into v (m->nchunks doubles), block by block. 2bw:
// of the pending batch's, each reduced first (reduce_block); the wte replica's gradient
// over the replicas and the tie too (it is not summed: stage 0 holds the same values).
static int ps_sumsq(Pipe *p, double *v) {
    if (p->nver == 2) {
        for (int b = p->b0; b < p->b1; b++) {
            const Block *blk = &p->m->blocks[b];
            if (reduce_block(p, b)) return -1;
            gpt_chunk_sumsq(p->m, p->sw->ugbuf, blk->off, blk->off + blk->n, v);
        }
        if (!p->replica) return 0;
        return (p->gc->size > 1 && pipe_grad_allreduce(p->gc, p->pend.wg, p->tie_n)) ||
                       (p->tie && pipe_grad_allreduce(p->tie, p->pend.wg, p->tie_n))
                   ? -1
                   : 0;
    }
    for (int b = p->b0; b < p->b1; b++) {
        if (use_next(p, b, 1, b + 1)) return -1;
        const Block *blk = &p->m->blocks[b];
        gpt_chunk_sumsq(p->m, blk->grads, blk->off, blk->off + blk->n, v);
    }
    return 0;
}

// AdamW step t on block b alone from its slot, the moments read and written around it; its
// gradient is then zero for the next step.
static int update_block(Pipe *p, int b, int t, float lr, float scale) {
    PipeSwap *w = p->sw;
    GPT *m = p->m;
    Block *blk = &m->blocks[b];
    if (use_next(p, b, 1, b + 1) || tier_rd(w, toff(w, p, b, 2), w->mbuf, blk->n) ||
        tier_rd(w, toff(w, p, b, 3), w->vbuf, blk->n))
        return -1;
    gpt_own_range(m, blk->off, blk->off + blk->n, blk->off, blk->params, blk->grads);
    gpt_own_moments(m, w->mbuf, w->vbuf, blk->off);
    adamw_step_blocks(&p->opt, t, m, lr, scale);
    int k = w->slot[b - p->b0];
    w->be->fill(w->sg[k], 0.f, blk->n);
    w->dirty[k] = 0, *gtier_of(w, p, 0, b) = 0;
    return tier_wr(w, toff(w, p, b, 0), w->sp[k], blk->n) ||
           tier_wr(w, toff(w, p, b, 2), w->mbuf, blk->n) ||
           tier_wr(w, toff(w, p, b, 3), w->vbuf, blk->n);
}

// 2bw: AdamW step t on block b outside the slots, for the pending batch s = p->pend.step:
// W(s+1) = W(s) - opt(g_s), written over W(s-1) (a slot holding that version reads again).
static int update_2bw(Pipe *p, int b, int t, float lr, float scale) {
    PipeSwap *w = p->sw;
    GPT *m = p->m;
    Block *blk = &m->blocks[b];
    int s = p->pend.step, next = (s + 1) & 1;
    if (tier_rd(w, toff(w, p, b, preg(s & 1)), w->ubuf, blk->n) ||
        tier_rd(w, toff(w, p, b, greg(s & 1)), w->ugbuf, blk->n) ||
        tier_rd(w, toff(w, p, b, 2), w->mbuf, blk->n) ||
        tier_rd(w, toff(w, p, b, 3), w->vbuf, blk->n))
        return -1;
    gpt_own_range(m, blk->off, blk->off + blk->n, blk->off, w->ubuf, w->ugbuf);
    gpt_own_moments(m, w->mbuf, w->vbuf, blk->off);
    adamw_step_blocks(&p->opt, t, m, lr, scale);
    *gtier_of(w, p, s & 1, b) = 0; // batch s + 2 starts from zeros
    int k = w->slot[b - p->b0];
    if (k >= 0 && w->pver[k] == next) {
        if (settle(w, k)) return -1;
        w->pver[k] = -1;
    }
    return tier_wr(w, toff(w, p, b, preg(next)), w->ubuf, blk->n) ||
           tier_wr(w, toff(w, p, b, 2), w->mbuf, blk->n) ||
           tier_wr(w, toff(w, p, b, 3), w->vbuf, blk->n);
}

// The step's update (AdamW step p->t + 1) of the stage through the tier, then of the wte
// replica in memory (last stage; 2bw: its new version from the pending batch's gradient).
// 0 or -1.
static int ps_update(Pipe *p, float lr, float scale) {
    GPT *m = p->m;
    int t = ++p->t, two = p->nver == 2, v = two ? (p->pend.step + 1) & 1 : 0;
    p->sw->cached_b = -1; // mbuf is the update's
    for (int b = p->b0; b < p->b1; b++)
        if (two ? update_2bw(p, b, t, lr, scale) : update_block(p, b, t, lr, scale)) return -1;
    if (!p->replica) return 0;
    if (two) m->be->copy(p->wbuf[v], p->wbuf[v ^ 1], p->tie_n);
    gpt_own_range(m, 0, 0, 0, NULL, NULL);
    m->blocks[0].state = (BlockState){.own_lo = 0,
                                      .own_hi = p->tie_n,
                                      .own_params = p->wbuf[v],
                                      .own_grads = two ? p->pend.wg : p->wgrad,
                                      .m = p->wm,
                                      .v = p->wv};
    adamw_step_blocks(&p->opt, t, m, lr, scale);
    return 0;
}

// 2bw, end of batch `step`: its gradients (those still in slots) written to the tier; the
// next batch accumulates into the other parity, from zeros. 0 or -1.
static int ps_batch_end(Pipe *p, int step) {
    PipeSwap *w = p->sw;
    for (int k = 0; k < w->nslot; k++) {
        int b = w->owner[k];
        if (b >= 0 && settle(w, k)) return -1;
        if (b < 0 || !w->dirty[k]) {
            w->grads_in[k] = 0;
            continue;
        }
        if (tier_wr(w, toff(w, p, b, greg(w->gpar)), w->sg[k], p->m->blocks[b].n)) return -1;
        *gtier_of(w, p, w->gpar, b) = 1;
        w->dirty[k] = w->grads_in[k] = 0;
    }
    w->gpar = (step + 1) & 1;
    return 0;
}

// Slots: as many as the budget leaves (at most the stage's blocks), at least one.
static int swap_slots(Pipe *p, PipeSwap *w) {
    const PipelineConfig *pc = p->pc;
    int two = p->nver == 2; // 2bw: two wte versions and gradients; the update's two buffers
    double kept = p->mem[3] + (p->replica ? (16.0 + 8 * two) * p->tie_n : 0);    // activations, wte
    double fixed = offload_overhead(p->m->be) + kept + (8.0 + 8 * two) * w->cap; // + the update's
    double per = 8.0 * w->cap, left = (double)pc->fast_mem - fixed;
    int n = left >= per ? (int)(left / per) : 0, nb = p->b1 - p->b0;
    if (n < 1)
        return loom_fail("--fast-mem %.1f MiB is too small for pipeline stage %d: the fixed "
                         "overhead, %.1f MiB of activations and wte replica, and one block slot "
                         "(%.1f MiB) need %.1f MiB",
                         pc->fast_mem / 1048576.0, p->s, kept / 1048576.0, per / 1048576.0,
                         (fixed + per) / 1048576.0);
    int cap = testhook_pipe_swap_slots();
    if (cap && n > cap) n = cap;
    w->nslot = n < nb ? n : nb;
    w->budget = (double)pc->fast_mem, w->need = fixed + per * w->nslot;
    return 0;
}

static int ps_setup(Pipe *p) {
    PipeSwap *w = p->sw = xcalloc(1, sizeof *w);
    int nb = p->b1 - p->b0;
    w->toff = xcalloc((size_t)nb, sizeof(size_t));
    for (int b = p->b0; b < p->b1; b++) {
        size_t pad = offload_pad(p->m->blocks[b].n);
        w->toff[b - p->b0] = w->region;
        w->region += pad * sizeof(float);
        if (pad > w->cap) w->cap = pad;
    }
    if (swap_slots(p, w)) return -1;
    int two = p->nver == 2; // 2bw: version 1's parameters, odd batches' gradient (preg, greg)
    const Backend *be = p->m->be;
    size_t bytes = (4 + 2 * two) * w->region;
    int rank = p->g->world->rank;
    w->tier = tier_open_on(be, p->pc->offload_dir, p->pc->host_mem, rank, bytes);
    if (!w->tier) return -1;
    w->be = be;
    if (tier_fast_backend(w->tier)) w->hscratch = xalloc_floats(w->cap);
    w->sp = xcalloc((size_t)w->nslot, sizeof(float *));
    w->sg = xcalloc((size_t)w->nslot, sizeof(float *));
    w->owner = xcalloc((size_t)w->nslot, sizeof(int)), w->used = xcalloc((size_t)w->nslot, 4);
    w->grads_in = xcalloc((size_t)w->nslot, sizeof(int)), w->dirty = xcalloc((size_t)w->nslot, 4);
    w->pt = xcalloc((size_t)w->nslot, sizeof(uint64_t)), w->pver = xcalloc((size_t)w->nslot, 4);
    w->gt = xcalloc((size_t)w->nslot, sizeof(uint64_t));
    for (int k = 0; k < w->nslot; k++) {
        w->sp[k] = tier_fast_alloc(w->tier, w->cap * sizeof(float));
        w->sg[k] = tier_fast_alloc(w->tier, w->cap * sizeof(float));
        w->owner[k] = -1;
    }
    w->slot = xmalloc((size_t)nb * sizeof(int)), w->gtier = xcalloc(2 * (size_t)nb, sizeof(int));
    for (int b = 0; b < nb; b++)
        w->slot[b] = -1;
    w->mbuf = tier_fast_alloc(w->tier, w->cap * sizeof(float));
    w->vbuf = tier_fast_alloc(w->tier, w->cap * sizeof(float));
    if (two)
        w->ubuf = tier_fast_alloc(w->tier, w->cap * 4),
        w->ugbuf = tier_fast_alloc(w->tier, w->cap * 4);
    return 0;
}

static void ps_mem(Pipe *p) {
    const PipeSwap *w = p->sw;
    p->mem[0] += 4.0 * w->cap * w->nslot, p->mem[1] += 4.0 * w->cap * w->nslot;
    p->mem[2] += 8.0 * w->cap;
    if (p->nver == 2) p->mem[0] += 4.0 * w->cap, p->mem[1] += 4.0 * w->cap; // the update's
}

static void ps_free(Pipe *p) {
    PipeSwap *w = p->sw;
    if (!w) return;
    Tier *t = w->tier;
    if (t) { // the buffers once the reads queued into them are done; the tier after them
        tier_drain(t);
        for (int k = 0; k < w->nslot && w->sp; k++)
            tier_fast_free(t, w->sp[k]), tier_fast_free(t, w->sg[k]);
        tier_fast_free(t, w->mbuf), tier_fast_free(t, w->vbuf);
        tier_fast_free(t, w->ubuf), tier_fast_free(t, w->ugbuf);
        tier_close(t);
    }
    free(w->hscratch);
    free(w->sp), free(w->sg), free(w->owner), free(w->used), free(w->grads_in), free(w->dirty);
    free(w->pt), free(w->gt), free(w->pver);
    free(w->slot), free(w->gtier), free(w->toff), free(w);
    p->sw = NULL;
}

void pipeline_swap_report(const Pipeline *p) {
    const PipeSwap *w = p->sw;
    if (!w) return;
    uint64_t rd = 0, wr = 0;
    tier_bytes(w->tier, &rd, &wr);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(stderr,
            "loom: offload: rank %d, pipeline stage %d: %d of %d blocks in slots of %.2f MiB, "
            "planned %.1f of --fast-mem %.1f MiB, read %.1f MiB, written %.1f MiB | peak RSS "
            "%.1f MiB\n",
            p->g->world->rank, p->s, w->nslot, p->b1 - p->b0, w->cap * 8.0 / 1048576,
            w->need / 1048576, w->budget / 1048576, rd / 1048576.0, wr / 1048576.0,
            ru.ru_maxrss / 1024.0);
}

const PipeSwapOps PIPE_SWAP_OPS = {.setup = ps_setup,
                                   .fill = ps_fill,
                                   .shard = ps_shard,
                                   .mem = ps_mem,
                                   .release = ps_free,
                                   .use = ps_use,
                                   .fetch = ps_fetch,
                                   .sumsq = ps_sumsq,
                                   .update = ps_update,
                                   .batch_end = ps_batch_end};
