// pipeline_zero.c — ZeRO-2 and ZeRO-3 inside a pipeline stage (gpipe, 1f1b and 2bw), over the
// stage's gradient group (the dp replicas, or dp x cp): the shards, the reduce-scatter of each
// block's gradient after its backward, the all-gather of each block's weights before it runs,
// the whole stage's weights when a checkpoint, an export or validation needs them, and under 2bw
// the second set of shards that double-buffering needs (see pipeline_impl.h). ZeRO-1's slices
// (own_lo, own_hi; cnt, dsp) are the shards' bounds.
#include <stdlib.h>

#include "pipeline_impl.h"

// ZeRO-3: the loaded weight versions move into their shards; the stage's whole copies go.
static void shard_weights(Pipe *p, size_t own) {
    const Backend *be = p->m->be;
    for (int v = 0; v < p->nver; v++) {
        p->pshard[v] = be->alloc(own);
        be->copy(p->pshard[v], p->pbuf[v] + p->own_lo, own);
        be->release(p->pbuf[v]);
        p->pbuf[v] = NULL;
    }
}

void pipe_zero_setup(Pipe *p) {
    p->zc = p->gc;
    if (!p->zero2) return;
    GPT *m = p->m;
    const Backend *be = m->be;
    size_t W = (size_t)p->gc->size, own = p->own_hi - p->own_lo, nv = (size_t)p->nver;
    p->tcnt = xcalloc(W, sizeof(size_t)), p->tdsp = xcalloc(W, sizeof(size_t));
    for (int b = p->b0; b < p->b1; b++)
        if (m->blocks[b].n > p->maxblk) p->maxblk = m->blocks[b].n;
    size_t piece = p->maxblk < own ? p->maxblk : own; // the most of a block a replica receives
    p->gshard = be->alloc(own), p->tgrad = be->alloc(p->maxblk), p->trecv = be->alloc(piece);
    be->fill(p->gshard, 0.f, own);
    size_t embed = p->first ? m->blocks[0].n : 0, wte = p->replica ? p->tie_n : 0;
    if (embed) p->egrad = be->alloc(embed), be->fill(p->egrad, 0.f, embed);
    if (p->nver == 2) { // 2bw: the gradients of the batch whose update is in flight
        p->gspare = be->alloc(own);
        if (embed) p->espare = be->alloc(embed);
        if (wte) p->wspare = be->alloc(wte);
        p->zc = comm_split(p->gc, 0, p->gc->rank, "zero 2bw");
    }
    p->mem[1] = 4.0 * ((double)nv * (own + embed + wte) + p->maxblk + piece);
    if (!p->zero3) return;
    shard_weights(p, own);
    p->gparam = be->alloc(p->maxblk);
    p->mem[0] = 4.0 * ((double)nv * (own + wte) + p->maxblk);
}

void pipe_zero_free(Pipe *p) {
    const Backend *be = p->m->be;
    float *bufs[] = {p->gshard,    p->tgrad,     p->trecv,  p->egrad,
                     p->pshard[0], p->pshard[1], p->gparam, p->espare};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->release(bufs[i]);
    free(p->tcnt), free(p->tdsp);
}

// Each replica's part of block b (counts; displacements from the block's start) and this
// replica's (its length; *at: the flat offset where it starts).
static size_t block_parts(Pipe *p, const Block *blk, size_t *at) {
    size_t a = blk->off, e = a + blk->n, base = p->lo;
    for (int q = 0; q < p->gc->size; q++) {
        size_t s, lo = base + p->dsp[q];
        p->tcnt[q] = range_isect(a, e, lo, lo + p->cnt[q], &s);
        p->tdsp[q] = p->tcnt[q] ? s - a : 0;
    }
    return range_isect(a, e, base + p->own_lo, base + p->own_hi, at);
}

float *pipe_zero_params(Pipe *p, int b) {
    Block *blk = &p->m->blocks[b];
    if (!p->zero3 || p->gathered) return blk->params;
    size_t s, k = block_parts(p, blk, &s);
    const float *src = p->pshard[p->cur_ver] + (s - p->lo - p->own_lo);
    if (k) p->m->be->copy(p->gparam + (s - blk->off), src, k);
    CommReq r = comm_iallgatherv(p->zc, p->gparam, p->tcnt, p->tdsp);
    timed_wait(p, &r);
    return p->gparam;
}

void pipe_zero_before_backward(Pipe *p, int b) {
    if (!p->zero2 || b == 0) return; // stage 0's embedding accumulates in egrad
    Block *blk = &p->m->blocks[b];
    blk->grads = p->tgrad;
    p->m->be->fill(p->tgrad, 0.f, blk->n);
}

void pipe_zero_after_backward(Pipe *p, int b) {
    if (!p->zero2 || b == 0) return;
    const Block *blk = &p->m->blocks[b];
    size_t s, k = block_parts(p, blk, &s);
    CommReq r = comm_ireduce_scatter(p->zc, p->tgrad, p->trecv, p->tcnt);
    timed_wait(p, &r);
    if (k) p->m->be->axpby(p->gshard + (s - p->lo - p->own_lo), 1.0f, p->trecv, 1.0f, k);
}

void pipe_zero_embed_done(Pipe *p, float *g, const float *eg) {
    if (!p->zero2 || !p->first) return;
    size_t s, k = range_isect(0, p->m->blocks[0].n, p->lo + p->own_lo, p->lo + p->own_hi, &s);
    if (k) p->m->be->copy(g + (s - p->lo - p->own_lo), eg + s, k);
}

void pipe_zero_pend_start(Pipe *p, size_t chunk) {
    const Backend *be = p->m->be;
    size_t own = p->own_hi - p->own_lo, embed = p->first ? p->m->blocks[0].n : 0;
    float *t = p->gshard;
    p->gshard = p->gspare, p->gspare = t;
    be->fill(p->gshard, 0.f, own);
    if (embed) {
        t = p->egrad;
        p->egrad = p->espare, p->espare = t;
        be->fill(p->egrad, 0.f, embed);
    }
    p->pend.g = p->gspare, p->pend.eg = p->espare;
    // the other blocks' gradients are already reduce-scattered; these two are whole
    p->pend.req[0] = comm_iallreduce_chunked(p->gc, p->espare, embed, p->pend.wg,
                                             p->replica ? p->tie_n : 0, chunk);
}

void pipe_zero_clear(Pipe *p) {
    if (!p->zero2) return;
    p->m->be->fill(p->gshard, 0.f, p->own_hi - p->own_lo);
    if (p->egrad) p->m->be->fill(p->egrad, 0.f, p->m->blocks[0].n);
}

const float *pipe_own_grads(const Pipe *p, const float *g) { return p->zero2 ? g : g + p->own_lo; }

void pipe_stage_weights(Pipe *p, int v, float *host) {
    const Backend *be = p->m->be;
    if (p->sw) { // --offload: from the tier
        if (pipe_swap_fetch(p, v, host)) die_last(1);
        return;
    }
    if (!p->zero3) {
        be->download(host, p->pbuf[v], p->hi - p->lo);
        return;
    }
    be->download(host + p->own_lo, p->pshard[v], p->own_hi - p->own_lo);
    comm_allgatherv(p->zc, host, p->cnt, p->dsp);
}

void pipe_zero_gather_all(Pipe *p, int v, int on) {
    if (!p->zero3) return;
    const Backend *be = p->m->be;
    if (!on) {
        be->release(p->pbuf[v]);
        p->pbuf[v] = NULL, p->gathered = 0;
        return;
    }
    p->pbuf[v] = be->alloc(p->hi - p->lo);
    be->copy(p->pbuf[v] + p->own_lo, p->pshard[v], p->own_hi - p->own_lo);
    comm_allgatherv(p->zc, p->pbuf[v], p->cnt, p->dsp);
    p->gathered = 1;
}
