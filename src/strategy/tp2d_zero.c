// tp2d_zero.c — owns ZeRO 2 and 3 of 2D tensor parallelism over dp (tp2d_zero.h): the
// gradient shard and the transient gradient buffers a backward writes into, their reduction
// (column sum of the replicated tensors, then a reduce-scatter over dp) as each block ends, and
// under ZeRO 3 the parameter shard and the per-block gathers. strat_tp2d.c drives it through
// its section hook and step.
#include "tp2d_zero.h"

#include <stdlib.h>

#include "../common.h"
#include "../model/gpt_2d.h"

struct Tp2dZero {
    GPT *m;
    const Comm *dp, *col;
    int zero, N, L, bwd, cur, layer_in; // layer_in: the layer whose parameters lparam holds
    size_t lo, hi, max_layer, nrecv;
    const size_t *counts, *displs; // the dp slices (strat_tp2d.c's)
    size_t *tc, *td;               // per dp rank: one block's piece, its offset in the block
    float *gshard, *recv;          // (hi-lo) owned gradients; a reduce-scatter's receive buffer
    float *egrad, *hgrad, *lgrad;  // the embedding's, the final LayerNorm's, one layer's
    float *pshard, *eparam, *hparam, *lparam; // ZeRO 3: the same for parameters
    double comm_s;
};

// The pieces of block b's flat range that every dp rank owns (tc: sizes, td: offsets in the
// block); returns this rank's, *at its flat start.
static size_t pieces(Tp2dZero *z, int b, size_t *at) {
    const Block *blk = &z->m->blocks[b];
    size_t a = blk->off, e = a + blk->n, s;
    for (int r = 0; r < z->N; r++) {
        z->tc[r] = range_isect(a, e, z->displs[r], z->displs[r] + z->counts[r], &s);
        z->td[r] = z->tc[r] ? s - a : 0;
    }
    return range_isect(a, e, z->lo, z->hi, at);
}

static float *grad_buf(Tp2dZero *z, int b) {
    return b == 0 ? z->egrad : b == z->L + 1 ? z->hgrad : z->lgrad;
}

// Block b's backward is done: its column-replicated tensors summed down the column (each row
// added its part), then the block reduce-scattered over dp and added into the owners' shards.
static void reduce_block(Tp2dZero *z, int b) {
    const GPT *m = z->m;
    const Block *blk = &m->blocks[b];
    float *g = grad_buf(z, b);
    double t0 = now_sec();
    for (int k = blk->t0; k < blk->t0 + blk->nt; k++)
        if (gpt2d_col_replicated(m, k))
            comm_allreduce(z->col, g + (m->tensors[k].off - blk->off), m->tensors[k].n);
    size_t at, n = pieces(z, b, &at);
    CommReq rq = comm_ireduce_scatter(z->dp, g, z->recv, z->tc);
    comm_wait(&rq);
    if (n) m->be->axpby(z->gshard + (at - z->lo), 1.0f, z->recv, 1.0f, n);
    z->comm_s += now_sec() - t0;
}

// ZeRO 3: block b's parameters from the owners' slices into dst (every dp rank the same).
static void gather_block(Tp2dZero *z, int b, float *dst) {
    const Block *blk = &z->m->blocks[b];
    double t0 = now_sec();
    size_t at, n = pieces(z, b, &at);
    if (n) z->m->be->copy(dst + (at - blk->off), z->pshard + (at - z->lo), n);
    comm_allgatherv(z->dp, dst, z->tc, z->td);
    z->m->blocks[b].params = dst;
    z->comm_s += now_sec() - t0;
}

Tp2dZero *tp2dz_create(GPT *m, const Comm *dp, const Comm *col, int zero, const size_t *counts,
                       const size_t *displs) {
    Tp2dZero *z = xcalloc(1, sizeof *z);
    const Backend *be = m->be;
    z->m = m, z->dp = dp, z->col = col, z->zero = zero, z->N = dp->size, z->L = m->cfg.L;
    z->counts = counts, z->displs = displs, z->cur = -1, z->layer_in = -1;
    z->lo = displs[dp->rank], z->hi = z->lo + counts[dp->rank];
    z->tc = xmalloc((size_t)z->N * sizeof *z->tc), z->td = xmalloc((size_t)z->N * sizeof *z->td);
    for (int b = 1; b <= z->L; b++)
        if (m->blocks[b].n > z->max_layer) z->max_layer = m->blocks[b].n;
    size_t big = z->max_layer > m->blocks[0].n ? z->max_layer : m->blocks[0].n;
    z->gshard = be->alloc(z->hi - z->lo);
    z->nrecv = big < z->hi - z->lo ? big : z->hi - z->lo;
    z->recv = be->alloc(z->nrecv);
    z->egrad = be->alloc(m->blocks[0].n);
    z->hgrad = be->alloc(m->blocks[z->L + 1].n);
    z->lgrad = be->alloc(z->max_layer);
    float *own = m->params + z->lo;
    if (zero >= 3) {
        z->pshard = be->alloc(z->hi - z->lo);
        be->copy(z->pshard, m->params + z->lo, z->hi - z->lo);
        z->eparam = be->alloc(m->blocks[0].n);
        z->hparam = be->alloc(m->blocks[z->L + 1].n);
        z->lparam = be->alloc(z->max_layer);
        gpt_drop_whole(m, 1, 0);
        own = z->pshard;
    }
    gpt_own_range(m, z->lo, z->hi, z->lo, own, z->gshard);
    return z;
}

void tp2dz_free(Tp2dZero *z) {
    if (!z) return;
    const Backend *be = z->m->be;
    float *bufs[] = {z->gshard, z->recv,   z->egrad,  z->hgrad, z->lgrad,
                     z->pshard, z->eparam, z->hparam, z->lparam};
    for (size_t k = 0; k < sizeof bufs / sizeof *bufs; k++)
        if (bufs[k]) be->release(bufs[k]);
    free(z->tc), free(z->td);
    free(z);
}

void tp2dz_begin_step(Tp2dZero *z) { z->m->be->fill(z->gshard, 0.f, z->hi - z->lo); }

void tp2dz_forward(Tp2dZero *z) {
    z->bwd = 0, z->cur = -1, z->layer_in = -1; // (an update may have changed every shard)
    if (z->zero < 3) return;
    gather_block(z, 0, z->eparam);
    gather_block(z, z->L + 1, z->hparam);
}

void tp2dz_backward_begin(Tp2dZero *z) {
    GPT *m = z->m;
    z->bwd = 1, z->cur = -1;
    m->be->fill(z->egrad, 0.f, m->blocks[0].n);
    m->be->fill(z->hgrad, 0.f, m->blocks[z->L + 1].n);
    m->blocks[0].grads = z->egrad, m->blocks[z->L + 1].grads = z->hgrad;
}

void tp2dz_backward_end(Tp2dZero *z) {
    if (z->cur > 0) reduce_block(z, z->cur); // (none: the embedding is the last block)
    reduce_block(z, 0);
    z->bwd = 0, z->cur = -1;
}

void tp2dz_section(Tp2dZero *z, int b) {
    if (b == z->cur) return; // a recomputed layer's forward inside its backward
    int layer = b >= 1 && b <= z->L;
    if (z->bwd) {
        if (z->cur > 0) reduce_block(z, z->cur); // the block the backward just left
        if (layer) {
            z->m->be->fill(z->lgrad, 0.f, z->m->blocks[b].n);
            z->m->blocks[b].grads = z->lgrad;
        }
    }
    if (layer && z->zero >= 3 && z->layer_in != b) gather_block(z, b, z->lparam), z->layer_in = b;
    z->cur = b;
}

const float *tp2dz_grads(const Tp2dZero *z) { return z->gshard; }

const float *tp2dz_params(const Tp2dZero *z) { return z->pshard; }

void tp2dz_held(const Tp2dZero *z, const GPT *part, size_t gown, double *param_b, double *grad_b) {
    if (!z) {
        *param_b = 4.0 * (double)part->nparams, *grad_b = 4.0 * (double)(part->nparams + gown);
        return;
    }
    const GPT *m = z->m;
    double own = (double)(z->hi - z->lo), ends = (double)(m->blocks[0].n + m->blocks[z->L + 1].n);
    *grad_b = 4.0 * (own + ends + (double)z->max_layer + (double)z->nrecv);
    *param_b = z->zero >= 3 ? 4.0 * (own + ends + (double)z->max_layer) : 4.0 * (double)m->nparams;
}

double tp2dz_comm_seconds(const Tp2dZero *z) { return z->comm_s; }

const char *tp2dz_what(int zero) {
    return zero >= 3   ? ": the part's moments, gradients and parameters sharded over dp"
           : zero == 2 ? ": the part's moments and gradients sharded over dp"
                       : "";
}
