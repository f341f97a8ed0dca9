// tp_layout.c — where a tensor-parallel rank's tensors sit in the whole model (Megatron 1D):
// the column-parallel q/k/v and MLP up-projections hold a block of rows (q, k and v each their
// heads' rows), the row-parallel projections a block of columns, the embedding a block of rows
// of the vocabulary padded to a multiple of 64·tp; the rest is replicated. LLaMA (its separate
// q/k/v and gate/up tensors are TP_ROWS) with tp = g·KV, g > 1: k/v are TP_KVSHARE, kv head
// i/g on rank i, the same rows on g ranks (one of them counts in sums). Checkpoints, the
// initial weights and exports stay in the whole model's flat layout; these copy between it and
// a rank's own layout (gpt_create_layout_tp in gpt.c builds that).
#include <string.h>

#include "gpt.h"

static size_t rows_of(const TensorSpec *t) { return (size_t)t->shape[0]; }
static size_t cols_of(const TensorSpec *t) { return t->ndim == 2 ? (size_t)t->shape[1] : 1; }

// The whole tensor's row that row r of rank i's part is (-1: padding, in no whole row).
// part: the tensor-parallel layout p belongs to.
static long whole_row(const GPT *part, const TensorSpec *w, const TensorSpec *p, int i, size_t r) {
    size_t pr = rows_of(p), fr = rows_of(w);
    switch (p->split) {
    case TP_KVSHARE: // kv head i/g (pr = hs rows), g = tp/KV ranks sharing each
        return (long)((size_t)(i / (part->tp.n / part->cfg.KV)) * pr + r);
    case TP_ROWS: return (long)(i * pr + r);
    case TP_QKV: return (long)(r / (pr / 3) * (fr / 3) + i * (pr / 3) + r % (pr / 3));
    case TP_VOCAB: return i * pr + r < fr ? (long)(i * pr + r) : -1;
    default: return (long)r; // replicated, columns
    }
}

static size_t col_offset(const TensorSpec *p, int i) {
    return p->split == TP_COLS ? (size_t)i * cols_of(p) : 0;
}

void gpt_tp_to_whole(const GPT *whole, const GPT *part, int tpi, const float *src, float *dst) {
    for (int t = 0; t < part->ntensors; t++) {
        const TensorSpec *w = &whole->tensors[t], *p = &part->tensors[t];
        size_t pc = cols_of(p), fc = cols_of(w), co = col_offset(p, tpi);
        for (size_t r = 0; r < rows_of(p); r++) {
            long wr = whole_row(part, w, p, tpi, r);
            if (wr >= 0)
                memcpy(dst + w->off + (size_t)wr * fc + co, src + p->off + r * pc,
                       pc * sizeof(float));
        }
    }
}

void gpt_tp_to_whole_range(const GPT *whole, const GPT *part, int tpi, const float *src, size_t at,
                           size_t n, float *dst) {
    gpt_tp_to_whole_range_at(whole, part, tpi, src, 0, at, n, dst);
}

void gpt_tp_to_whole_range_at(const GPT *whole, const GPT *part, int tpi, const float *src,
                              size_t base, size_t at, size_t n, float *dst) {
    for (int t = 0; t < part->ntensors; t++) {
        const TensorSpec *w = &whole->tensors[t], *p = &part->tensors[t];
        if (w->off >= at + n || w->off + w->n <= at) continue;
        if (!gpt_tp_counts(part, t, tpi)) continue; // one holder contributes shared ones
        size_t pc = cols_of(p), fc = cols_of(w), co = col_offset(p, tpi);
        for (size_t r = 0; r < rows_of(p); r++) {
            long wr = whole_row(part, w, p, tpi, r);
            if (wr < 0) continue;
            size_t lo = w->off + (size_t)wr * fc + co, hi = lo + pc; // the row's held elements
            size_t a = lo > at ? lo : at, b = hi < at + n ? hi : at + n;
            if (a < b)
                memcpy(dst + (a - at), src + (p->off - base) + r * pc + (a - lo), (b - a) * 4);
        }
    }
}

void gpt_tp_from_whole(const GPT *whole, const GPT *part, size_t at, size_t n, const float *src,
                       float *dst) {
    gpt_tp_from_whole_at(whole, part, at, n, src, dst, 0);
}

void gpt_tp_from_whole_at(const GPT *whole, const GPT *part, size_t at, size_t n, const float *src,
                          float *dst, size_t base) {
    int i = part->tp.n > 1 ? part->tp.i : 0;
    for (int t = 0; t < part->ntensors; t++) {
        const TensorSpec *w = &whole->tensors[t], *p = &part->tensors[t];
        if (w->off >= at + n || w->off + w->n <= at) continue;
        size_t pc = cols_of(p), fc = cols_of(w), co = col_offset(p, i);
        for (size_t r = 0; r < rows_of(p); r++) {
            long wr = whole_row(part, w, p, i, r);
            if (wr < 0) continue;
            size_t lo = w->off + (size_t)wr * fc + co, hi = lo + pc; // the row's held elements
            size_t a = lo > at ? lo : at, b = hi < at + n ? hi : at + n;
            if (a < b)
                memcpy(dst + (p->off - base) + r * pc + (a - lo), src + (a - at), (b - a) * 4);
        }
    }
}
