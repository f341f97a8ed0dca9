// pipeline_zero.c — ZeRO-2 and ZeRO-3 inside a pipeline stage (gpipe/1f1b), over the stage's
// gradient group (the dp replicas, or dp x cp): the shards, the reduce-scatter of each block's
// gradient after its backward, the all-gather of each block's weights before it runs, and the
// whole stage's weights when a checkpoint, an export or validation needs them (see
// pipeline_impl.h). ZeRO-1's slices (own_lo, own_hi; cnt, dsp) are the shards' bounds.
#include <stdlib.h>

#include "pipeline_impl.h"

void pipe_zero_setup(Pipe *p) {
    if (!p->zero2) return;
    GPT *m = p->m;
    const Backend *be = m->be;
    size_t W = (size_t)p->gc->size, own = p->own_hi - p->own_lo;
    p->tcnt = xcalloc(W, sizeof(size_t)), p->tdsp = xcalloc(W, sizeof(size_t));
    for (int b = p->b0; b < p->b1; b++)
        if (m->blocks[b].n > p->maxblk) p->maxblk = m->blocks[b].n;
    size_t piece = p->maxblk < own ? p->maxblk : own; // the most of a block a replica receives
    p->gshard = be->alloc(own), p->tgrad = be->alloc(p->maxblk), p->trecv = be->alloc(piece);
    be->fill(p->gshard, 0.f, own);
    size_t embed = p->first ? m->blocks[0].n : 0;
    if (embed) p->egrad = be->alloc(embed), be->fill(p->egrad, 0.f, embed);
    p->mem[1] = 4.0 * ((double)(own + p->maxblk + piece + embed) + (p->replica ? p->tie_n : 0));
    if (!p->zero3) return;
    p->pshard = be->alloc(own);
    be->copy(p->pshard, p->pbuf[0] + p->own_lo, own);
    be->release(p->pbuf[0]);
    p->pbuf[0] = NULL;
    p->gparam = be->alloc(p->maxblk);
    p->mem[0] = 4.0 * ((double)own + p->maxblk + (p->replica ? p->tie_n : 0));
}

void pipe_zero_free(Pipe *p) {
    const Backend *be = p->m->be;
    float *bufs[] = {p->gshard, p->tgrad, p->trecv, p->egrad, p->pshard, p->gparam};
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
    if (k) p->m->be->copy(p->gparam + (s - blk->off), p->pshard + (s - p->lo - p->own_lo), k);
    CommReq r = comm_iallgatherv(p->gc, p->gparam, p->tcnt, p->tdsp);
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
    CommReq r = comm_ireduce_scatter(p->gc, p->tgrad, p->trecv, p->tcnt);
    timed_wait(p, &r);
    if (k) p->m->be->axpby(p->gshard + (s - p->lo - p->own_lo), 1.0f, p->trecv, 1.0f, k);
}

void pipe_zero_embed_done(Pipe *p) {
    if (!p->zero2 || !p->first) return;
    size_t s, k = range_isect(0, p->m->blocks[0].n, p->lo + p->own_lo, p->lo + p->own_hi, &s);
    if (k) p->m->be->copy(p->gshard + (s - p->lo - p->own_lo), p->egrad + s, k);
}

void pipe_zero_clear(Pipe *p) {
    if (!p->zero2) return;
    p->m->be->fill(p->gshard, 0.f, p->own_hi - p->own_lo);
    if (p->egrad) p->m->be->fill(p->egrad, 0.f, p->m->blocks[0].n);
}

const float *pipe_own_grads(const Pipe *p, const float *g) {
    return p->zero2 ? p->gshard : g + p->own_lo;
}

void pipe_stage_weights(Pipe *p, int v, float *host) {
    const Backend *be = p->m->be;
    if (!p->zero3) {
        be->download(host, p->pbuf[v], p->hi - p->lo);
        return;
    }
    be->download(host + p->own_lo, p->pshard, p->own_hi - p->own_lo);
    comm_allgatherv(p->gc, host, p->cnt, p->dsp);
}

void pipe_zero_gather_all(Pipe *p, int on) {
    if (!p->zero3) return;
    const Backend *be = p->m->be;
    if (!on) {
        be->release(p->pbuf[0]);
        p->pbuf[0] = NULL, p->gathered = 0;
        return;
    }
    p->pbuf[0] = be->alloc(p->hi - p->lo);
    be->copy(p->pbuf[0] + p->own_lo, p->pshard, p->own_hi - p->own_lo);
    comm_allgatherv(p->gc, p->pbuf[0], p->cnt, p->dsp);
    p->gathered = 1;
}
