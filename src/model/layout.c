// layout.c — who owns which part of each block, and the fixed chunks every sum over the model
// is taken in (see gpt.h, "the layout of reductions").
#include "../common.h"
#include "gpt.h"

void gpt_own_range(GPT *m, size_t lo, size_t hi, size_t base, float *pparams, const float *pgrads) {
    for (int b = 0; b < m->nblocks; b++) {
        Block *blk = &m->blocks[b];
        BlockState *st = &blk->state;
        size_t s, n = range_isect(blk->off, blk->off + blk->n, lo, hi, &s);
        st->own_lo = n ? s : blk->off;
        st->own_hi = n ? s + n : blk->off;
        st->own_params = n && pparams ? pparams + (s - base) : NULL;
        st->own_grads = n && pgrads ? pgrads + (s - base) : NULL;
    }
}

void gpt_own_moments(GPT *m, float *mo, float *vo, size_t base) {
    for (int b = 0; b < m->nblocks; b++) {
        BlockState *st = &m->blocks[b].state;
        int own = st->own_hi > st->own_lo;
        st->m = own ? mo + (st->own_lo - base) : NULL;
        st->v = own ? vo + (st->own_lo - base) : NULL;
    }
}

void gpt_extra_range(GPT *m, int k, float *buf, size_t lo, size_t hi) {
    for (int b = 0; b < m->nblocks; b++) {
        Block *blk = &m->blocks[b];
        size_t s, n = range_isect(blk->off, blk->off + blk->n, lo, hi, &s);
        blk->extra.lo = n ? s : blk->off;
        blk->extra.hi = n ? s + n : blk->off;
        blk->extra.p[k] = n && buf ? buf + (s - lo) : NULL;
    }
}

void gpt_own_all(GPT *m) {
    for (int b = 0; b < m->nblocks; b++) {
        Block *blk = &m->blocks[b];
        blk->params = m->params ? m->params + blk->off : NULL;
        blk->grads = m->grads ? m->grads + blk->off : NULL;
        blk->state = (BlockState){0};
    }
    gpt_own_range(m, 0, m->nparams, 0, m->params, m->grads);
}

void gpt_drop_whole(GPT *m, int params, int grads) {
    for (int b = 0; b < m->nblocks; b++) {
        Block *blk = &m->blocks[b];
        if (params) blk->params = NULL, blk->state.own_params = NULL;
        if (grads) blk->grads = NULL, blk->state.own_grads = NULL;
    }
    if (params && m->params) m->be->release(m->params), m->params = NULL;
    if (grads && m->grads) m->be->release(m->grads), m->grads = NULL;
}

// The block holding flat offset x (the last block for x = nparams).
static const Block *block_at(const GPT *m, size_t x) {
    int lo = 0, hi = m->nblocks - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (m->blocks[mid].off <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &m->blocks[lo];
}

size_t gpt_chunk_round(const GPT *m, size_t x) {
    const Block *blk = block_at(m, x);
    size_t rel = x - blk->off, k = (rel + GPT_CHUNK / 2) / GPT_CHUNK * GPT_CHUNK;
    return blk->off + (k < blk->n ? k : blk->n);
}

size_t gpt_shard_bound(const GPT *m, size_t lo, size_t hi, int q, int N) {
    if (q <= 0) return lo;
    if (q >= N) return hi;
    size_t x = gpt_chunk_round(m, lo + (hi - lo) * (size_t)q / (size_t)N);
    return x < lo ? lo : x > hi ? hi : x;
}

void gpt_chunk_sumsq(const GPT *m, const float *x, size_t lo, size_t hi, double *part) {
    for (int b = 0; b < m->nblocks; b++) {
        const Block *blk = &m->blocks[b];
        size_t s, n = range_isect(blk->off, blk->off + blk->n, lo, hi, &s);
        if (!n) continue;
        size_t first = (s - blk->off) / GPT_CHUNK; // s is a chunk boundary
        m->be->sumsq_chunks(x + (s - lo), n, GPT_CHUNK, part + blk->chunk0 + first);
    }
}

double gpt_chunk_total(const GPT *m, const double *part) {
    double acc = 0;
    for (int k = 0; k < m->nchunks; k++)
        acc += part[k];
    return acc;
}
