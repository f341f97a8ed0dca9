// part_io.c — a part of the model to and from the whole layout (see part_io.h).
#include "part_io.h"

#include <stdlib.h>

#include "../common.h"
#include "../model/gpt_2d.h"
#include "ckpt_save.h"

PartMap part_map_1d(const GPT *whole, const GPT *part, int tp, int tpi) {
    return (PartMap){.whole = whole, .part = part, .ranks = tp, .me = tpi};
}

PartMap part_map_2d(const GPT *whole, const GPT *part, int q, int i, int j) {
    return (PartMap){.whole = whole, .part = part, .ranks = q * q, .q = q, .i = i, .j = j};
}

void part_from_whole(const PartMap *m, size_t at, size_t n, const float *src, float *dst) {
    if (m->q)
        gpt2d_from_whole(m->whole, m->part, m->q, m->i, m->j, at, n, src, dst, 0);
    else
        gpt_tp_from_whole(m->whole, m->part, at, n, src, dst);
}

void part_from_whole_at(const PartMap *m, size_t at, size_t n, const float *src, float *dst,
                        size_t base) {
    if (m->q)
        gpt2d_from_whole(m->whole, m->part, m->q, m->i, m->j, at, n, src, dst, base);
    else
        gpt_tp_from_whole_at(m->whole, m->part, at, n, src, dst, base);
}

void part_to_whole(const PartMap *m, int rank, const float *src, float *dst) {
    if (m->q)
        gpt2d_to_whole(m->whole, m->part, m->q, rank / m->q, rank % m->q, src, dst);
    else
        gpt_tp_to_whole(m->whole, m->part, rank, src, dst);
}

void part_to_whole_range_at(const PartMap *m, int rank, const float *src, size_t base, size_t at,
                            size_t n, float *dst) {
    if (m->q) // the column-replicated tensors from the grid's row 0 only: one copy in a sum
        gpt2d_to_whole_range_at(m->whole, m->part, rank / m->q, rank % m->q, rank < m->q, src, base,
                                at, n, dst);
    else
        gpt_tp_to_whole_range_at(m->whole, m->part, rank, src, base, at, n, dst);
}

int part_cut_store(void *cut, int array, size_t at, size_t n, const float *src) {
    PartCut *c = cut;
    part_from_whole(&c->map, at, n, src, c->stage[array]);
    return 0;
}

int part_cut_sink(void *cut, size_t at, size_t n, const float *src) {
    return part_cut_store(cut, CKPT_PARAMS, at, n, src);
}

void part_cut_free(PartCut *c) {
    for (int k = 0; k < 4; k++)
        free(c->stage[k]), c->stage[k] = NULL;
}

int part_gather_whole(const PartMap *m, const Comm *c, const float *src, int host, float *dst) {
    size_t np = m->part->nparams;
    float *mine = host ? NULL : xalloc_floats(np);
    if (mine) m->part->be->download(mine, src, np);
    float *all = ckpt_tp_gather_parts(c, mine ? mine : src, np);
    for (int r = 0; r < m->ranks && all; r++)
        part_to_whole(m, r, all + (size_t)r * np, dst);
    int rc = all ? 0 : -1;
    free(mine), free(all);
    return rc;
}
