// tp2d_swap.c — owns block swapping of a 2D tensor-parallel part (tp2d_swap.h): the part's
// layers' parameters and gradients and every block's AdamW moments live in this rank's scratch
// file (tier.h: one region per array, each block on a TIER_ALIGN boundary). In memory are the
// activations (Work2d, as in memory), the embedding and the final LayerNorm (the tied head reads
// wte in every micro-batch's forward and backward: they stay resident, parameters and gradients,
// as ZeRO 3 keeps them gathered), one layer's slot (parameters and gradients) and the update's
// moments of one block. The micro-batches run in the in-memory order: a forward reads each
// layer's parameters as it enters the layer; a backward reads its parameters and its gradient so
// far (zeros on the first micro-batch) and writes the gradient back when it leaves; on the last
// micro-batch the leaving block's gradient is first summed down the column (the replicated
// tensors) and over dp and measured per tensor. The update walks the blocks, AdamW on one at a
// time with its moments read and written around it. The same kernels run on the same values in
// the same order as the in-memory part: bit for bit. A save or an export hands part_swap_save.c
// each block (read from the tier, or the resident ends) through the update's moment buffer.
#include "tp2d_swap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "../offload/offload.h"
#include "../offload/offload_plan.h"
#include "../offload/tier.h"

enum { R_PARAMS, R_GRADS, R_M, R_V, NREG };

struct Tp2dSwap {
    GPT *m;
    const StrategyConfig *cfg;
    const Comm *col, *dp;
    Tier *tier;
    size_t *toff;   // per block: its offset in every region (bytes)
    size_t region;  // bytes of one region
    size_t lcap;    // floats of the layer slot (the largest layer, padded)
    size_t cap;     // floats of a moment buffer (the largest block, padded)
    float *end[4];  // resident: the embedding's parameters, gradients; the head's the same
    float *lp, *lg; // the layer slot
    float *um, *uv; // the update's moments of one block
    float *xs;      // an export's buffer, when a whole tensor is larger than um (host memory)
    float *hs;      // a device's slots (--offload host, a disk under a device): a host buffer of
                    // cap floats, which a fill, a save and an export then stage through
    const Backend *be;
    double *tsum; // (ntensors) Σ g² of each tensor of the step's reduced gradient
    int L, bwd, last, first, cur, layer_in, failed, t;
    double budget, need;
};

// What a fill, a save and an export stage through: um, or hs under a device.
static float *stage_of(const Tp2dSwap *w) { return w->hs ? w->hs : w->um; }

static size_t toff(const Tp2dSwap *w, int b, int r) { return (size_t)r * w->region + w->toff[b]; }

static int io(Tp2dSwap *w, int write, int b, int r, float *buf) {
    if (w->failed) return -1;
    size_t bytes = offload_pad(w->m->blocks[b].n) * sizeof(float);
    uint64_t t = write ? tier_write_async(w->tier, toff(w, b, r), buf, bytes)
                       : tier_read_async(w->tier, toff(w, b, r), buf, bytes);
    if (t == 0 || tier_wait(w->tier, t)) w->failed = 1;
    return w->failed ? -1 : 0;
}

static int is_layer(const Tp2dSwap *w, int b) { return b >= 1 && b <= w->L; }

// Block b's gradient is complete (the step's last micro-batch): the column-replicated tensors
// summed down the column (each row added its part), the block over dp, each tensor's Σ g².
static void reduce_block(Tp2dSwap *w, int b) {
    const GPT *m = w->m;
    const Block *blk = &m->blocks[b];
    for (int k = blk->t0; k < blk->t0 + blk->nt; k++)
        if (gpt2d_col_replicated(m, k))
            comm_allreduce(w->col, blk->grads + (m->tensors[k].off - blk->off), m->tensors[k].n);
    if (w->dp->size > 1) comm_allreduce(w->dp, blk->grads, blk->n);
    for (int k = blk->t0; k < blk->t0 + blk->nt; k++)
        w->tsum[k] = m->be->sumsq(blk->grads + (m->tensors[k].off - blk->off), m->tensors[k].n);
}

// The backward leaves layer b: its gradient (reduced on the last micro-batch) to the tier.
static void leave(Tp2dSwap *w, int b) {
    if (w->last) reduce_block(w, b);
    io(w, 1, b, R_GRADS, w->lg);
}

void tp2ds_section(Tp2dSwap *w, int b) {
    if (b == w->cur) return; // a recomputed layer's forward inside its backward
    if (w->bwd && is_layer(w, w->cur)) leave(w, w->cur);
    w->cur = b;
    if (!is_layer(w, b)) return;
    if (w->layer_in != b && !io(w, 0, b, R_PARAMS, w->lp)) w->layer_in = b;
    if (!w->bwd) return;
    if (w->first)
        w->be->fill(w->lg, 0.f, w->m->blocks[b].n);
    else
        io(w, 0, b, R_GRADS, w->lg);
}

void tp2ds_begin_step(Tp2dSwap *w) {
    w->be->fill(w->end[1], 0.f, w->m->blocks[0].n);
    w->be->fill(w->end[3], 0.f, w->m->blocks[w->L + 1].n);
}

void tp2ds_forward(Tp2dSwap *w) { w->bwd = 0, w->cur = -1; }

void tp2ds_backward_begin(Tp2dSwap *w, int j, int last) {
    w->bwd = 1, w->cur = -1, w->first = j == 0, w->last = last;
}

void tp2ds_backward_end(Tp2dSwap *w) {
    if (is_layer(w, w->cur)) leave(w, w->cur); // (none: the embedding is the last block)
    if (w->last) reduce_block(w, w->L + 1), reduce_block(w, 0);
    w->bwd = 0, w->cur = -1;
}

double tp2ds_sumsq(const Tp2dSwap *w, int replicas) {
    double sum = 0;
    for (int k = 0; k < w->m->ntensors; k++)
        if (replicas || !gpt2d_col_replicated(w->m, k)) sum += w->tsum[k];
    return sum;
}

// AdamW step t on block b alone, its moments (and a layer's parameters and gradient) read and
// written around it.
static int update_block(Tp2dSwap *w, int b, float lr, float scale) {
    Block *blk = &w->m->blocks[b];
    int layer = is_layer(w, b);
    if ((layer && (io(w, 0, b, R_PARAMS, w->lp) || io(w, 0, b, R_GRADS, w->lg))) ||
        io(w, 0, b, R_M, w->um) || io(w, 0, b, R_V, w->uv))
        return -1;
    adamw_update_range(w->m, &w->cfg->opt, w->t, blk->off, blk->off + blk->n, blk->params,
                       blk->grads, w->um, w->uv, lr, scale);
    return (layer && io(w, 1, b, R_PARAMS, w->lp)) || io(w, 1, b, R_M, w->um) ||
           io(w, 1, b, R_V, w->uv);
}

int tp2ds_update(Tp2dSwap *w, float lr, float grad_scale) {
    w->t++, w->layer_in = -1;
    for (int b = 0; b < w->m->nblocks; b++)
        if (update_block(w, b, lr, grad_scale)) return -1;
    return 0;
}

static float *resident(const Tp2dSwap *w, int b, int grads) {
    return b == 0 ? w->end[grads] : b == w->L + 1 ? w->end[2 + grads] : NULL;
}

int tp2ds_fetch(Tp2dSwap *w, int k, float *host) {
    w->layer_in = -1;
    for (int b = 0; b < w->m->nblocks; b++) {
        const Block *blk = &w->m->blocks[b];
        float *src = k == 0 ? resident(w, b, 0) : NULL;
        if (!src && io(w, 0, b, k == 0 ? R_PARAMS : k == 1 ? R_M : R_V, src = w->um)) return -1;
        w->be->download(host + blk->off, src, blk->n);
    }
    return 0;
}

// part_blocks_spill's fetch: block b's array k into dst (a resident block's parameters copied).
static int fetch_block(void *ctx, int k, int b, float *dst) {
    Tp2dSwap *w = ctx;
    const float *src = k == 0 ? resident(w, b, 0) : NULL;
    if (src) return w->be->download(dst, src, w->m->blocks[b].n), 0; // dst: host memory
    return io(w, 0, b, k == 0 ? R_PARAMS : k == 1 ? R_M : R_V, dst);
}

PartSpill *tp2ds_spill(Tp2dSwap *w, const PartMap *map, const Comm *c, int rank, int to,
                       int arrays) {
    return part_blocks_spill(map, c, fetch_block, w, stage_of(w), w->cap, w->cfg->offload_dir, rank,
                             to, arrays);
}

float *tp2ds_scratch(Tp2dSwap *w, size_t need, size_t *floats) {
    if (need <= w->cap) return *floats = w->cap, stage_of(w);
    free(w->xs), w->xs = xalloc_floats(need);
    return *floats = need, w->xs;
}

// part_fill_blocks' store: a resident block's parameters stay in memory, the rest go to the tier.
static int fill_store(void *ctx, int k, int b, const float *stage) {
    Tp2dSwap *w = ctx;
    float *dst = k == 0 ? resident(w, b, 0) : NULL;
    if (dst) return w->be->upload(dst, stage, w->m->blocks[b].n), 0; // stage: host memory
    return io(w, 1, b, k == 0 ? R_PARAMS : k == 1 ? R_M : R_V, (float *)stage);
}

int *tp2ds_opt_t(Tp2dSwap *w) { return &w->t; }

int tp2ds_failed(const Tp2dSwap *w) { return w->failed; }

// The layout of the tier and the fast memory's buffers; their bytes against the budget.
static int plan(Tp2dSwap *w, const Work2d *ws, double overhead) {
    GPT *m = w->m;
    for (int b = 0; b < m->nblocks; b++) {
        size_t pad = offload_pad(m->blocks[b].n);
        w->toff[b] = w->region;
        w->region += pad * sizeof(float);
        if (pad > w->cap) w->cap = pad;
        if (is_layer(w, b) && pad > w->lcap) w->lcap = pad;
    }
    double ends = 8.0 * (offload_pad(m->blocks[0].n) + offload_pad(m->blocks[w->L + 1].n));
    double slots = 8.0 * (double)(w->lcap + w->cap), acts = 4.0 * (double)ws->floats, MiB = 1048576;
    w->budget = (double)w->cfg->fast_mem, w->need = overhead + acts + ends + slots;
    if (w->need > w->budget)
        return loom_fail("--fast-mem %.1f MiB is too small for this 2D tensor-parallel part "
                         "swapped block by block: the fixed overhead %.1f MiB, activations %.1f "
                         "MiB, the resident embedding and final LayerNorm %.1f MiB and one "
                         "layer's slot with the update's moments %.1f MiB need %.1f MiB",
                         w->budget / MiB, overhead / MiB, acts / MiB, ends / MiB, slots / MiB,
                         w->need / MiB);
    return 0;
}

Tp2dSwap *tp2ds_create(const Strategy *s, GPT *part, const PartMap *map, const Tp2d *g, Work2d *ws,
                       const Comm *col, const Comm *dp) {
    const StrategyConfig *c = s->cfg;
    const Backend *be = part->be;
    double overhead = offload_overhead(be); // before the activations and slots exist
    if (work2d_create(ws, part, g, c->batch, c->seq, c->recompute)) return NULL;
    Tp2dSwap *w = xcalloc(1, sizeof *w);
    w->m = part, w->cfg = c, w->col = col, w->dp = dp, w->L = part->cfg.L, w->be = be;
    w->cur = w->layer_in = -1;
    w->toff = xcalloc((size_t)part->nblocks, sizeof(size_t));
    w->tsum = xcalloc((size_t)part->ntensors, sizeof(double));
    int rank = s->grid->world->rank;
    if (plan(w, ws, overhead) ||
        !(w->tier = tier_open_on(be, c->offload_dir, c->host_mem, rank, NREG * w->region)))
        return tp2ds_free(w), NULL;
    if (tier_fast_backend(w->tier)) w->hs = xalloc_floats(w->cap);
    int ends[2] = {0, w->L + 1};
    for (int e = 0; e < 2; e++) {
        size_t n = offload_pad(part->blocks[ends[e]].n) * sizeof(float);
        w->end[2 * e] = tier_fast_alloc(w->tier, n),
                   w->end[2 * e + 1] = tier_fast_alloc(w->tier, n);
        part->blocks[ends[e]].params = w->end[2 * e];
        part->blocks[ends[e]].grads = w->end[2 * e + 1];
    }
    w->lp = tier_fast_alloc(w->tier, w->lcap * sizeof(float));
    w->lg = tier_fast_alloc(w->tier, w->lcap * sizeof(float));
    w->um = tier_fast_alloc(w->tier, w->cap * sizeof(float));
    w->uv = tier_fast_alloc(w->tier, w->cap * sizeof(float));
    for (int b = 1; b <= w->L; b++)
        part->blocks[b].params = w->lp, part->blocks[b].grads = w->lg;
    if (part_fill_blocks(s, map, stage_of(w), w->cap, fill_store, w)) return tp2ds_free(w), NULL;
    if (s->resume_dir) w->t = s->resume->opt_t;
    return w;
}

void tp2ds_free(Tp2dSwap *w) {
    if (!w) return;
    Tier *t = w->tier;
    if (t) { // the buffers once the requests into them are done; the tier after them
        tier_drain(t);
        for (int k = 0; k < 4; k++)
            tier_fast_free(t, w->end[k]);
        tier_fast_free(t, w->lp), tier_fast_free(t, w->lg);
        tier_fast_free(t, w->um), tier_fast_free(t, w->uv);
        tier_close(t);
    }
    free(w->xs), free(w->hs);
    free(w->toff), free(w->tsum), free(w);
}

void tp2ds_report(const Tp2dSwap *w) {
    uint64_t rd = 0, wr = 0;
    tier_bytes(w->tier, &rd, &wr);
    double MiB = 1048576;
    fprintf(stderr,
            "loom: offload: 2D part: one layer slot of %.2f MiB, planned %.1f of --fast-mem %.1f "
            "MiB, read %.1f MiB, written %.1f MiB (this rank, the whole run)\n",
            4.0 * (double)w->lcap / MiB, w->need / MiB, w->budget / MiB, (double)rd / MiB,
            (double)wr / MiB);
}
