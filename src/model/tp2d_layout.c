// tp2d_layout.c — where rank (i,j) of a 2D tensor-parallel q×q grid holds its tensors (see
// gpt_2d.h for the cut): its part model's layout, built from the whole model's tensor table
// (same names and order, each tensor shrunk to the rank's block), and the copies between the
// part and the whole flat layout of checkpoints, initial weights and exports.
#include <limits.h>
#include <string.h>

#include "../common.h"
#include "gpt_2d.h"

static size_t rows_of(const TensorSpec *t) { return (size_t)t->shape[0]; }
static size_t cols_of(const TensorSpec *t) { return t->ndim == 2 ? (size_t)t->shape[1] : 1; }

// The cut of tensor k (0-based) of a layer: GPT-2's, or LLaMA's (input norm, q, k, v, o, post
// norm, gate, up, down: q|k|v and gate|up are separate tensors, each cut by rows block j, so
// the part's q|k|v and gate|up lie back to back as its fused products).
static int layer_cut(const GPTConfig *c, int k) {
    static const int cut[12] = {T2D_VEC, T2D_VEC, T2D_QKV_W,  T2D_QKV_B, T2D_WEIGHT, T2D_VEC,
                                T2D_VEC, T2D_VEC, T2D_WEIGHT, T2D_VEC,   T2D_WEIGHT, T2D_VEC};
    static const int llama[9] = {T2D_VEC, T2D_WEIGHT, T2D_WEIGHT, T2D_WEIGHT, T2D_WEIGHT,
                                 T2D_VEC, T2D_WEIGHT, T2D_WEIGHT, T2D_WEIGHT};
    return gpt_is_llama(c) ? llama[k] : cut[k];
}

// The cut of tensor k of the embedding (wte, GPT-2's wpe) or the head (its norm's weight and
// bias, LLaMA's untied lm_head).
static int end_cut(const GPTConfig *c, int head, int k) {
    if (head) return gpt_is_llama(c) && k == 1 ? T2D_VOCAB : T2D_VEC;
    return k == 0 ? T2D_VOCAB : T2D_EMB;
}

// LLaMA's further needs of q: whole kv heads and SwiGLU columns per rank.
static int llama_check(const GPTConfig *c, int q) {
    if (c->KV % q)
        return loom_fail("--arch llama --tp-mode 2d with a %dx%d grid (--tp %d): q = %d must "
                         "divide --kv-heads %d (each rank holds KV/q kv heads, those of its "
                         "query heads)",
                         q, q, q * q, q, c->KV);
    if (c->F % q)
        return loom_fail("--arch llama --tp-mode 2d with a %dx%d grid (--tp %d): q = %d must "
                         "divide --ffn-dim %d (each rank holds F/q columns of gate and of up)",
                         q, q, q * q, q, c->F);
    return 0;
}

static void shrink(TensorSpec *t, int cut, int q) {
    t->split = cut;
    if (cut == T2D_VOCAB)
        t->shape[0] = (t->shape[0] + q - 1) / q, t->shape[1] /= q;
    else if (cut == T2D_EMB)
        t->shape[1] /= q;
    else if (cut == T2D_WEIGHT || cut == T2D_QKV_W)
        t->shape[0] /= q, t->shape[1] /= q;
    else
        t->shape[0] /= q;
    t->n = (size_t)t->shape[0] * cols_of(t);
}

int gpt2d_layout(GPT *m, const GPTConfig *cfg, const Backend *be, const Tp2d *g) {
    int q = g->q;
    if (cfg->C % q || cfg->H % q)
        return loom_fail("--tp-mode 2d with q = %d (--tp %d): q must divide --dim %d and --heads "
                         "%d (each rank holds C/q channels and whole heads)",
                         q, q * q, cfg->C, cfg->H);
    if (gpt_is_llama(cfg) && llama_check(cfg, q)) return -1;
    if (gpt_create_layout(m, cfg, be)) return -1;
    size_t off = 0, chunks = 0;
    for (int b = 0; b < m->nblocks; b++) {
        Block *blk = &m->blocks[b];
        blk->off = off;
        for (int k = 0; k < blk->nt; k++) {
            TensorSpec *t = &m->tensors[blk->t0 + k];
            int cut = blk->kind == BLOCK_LAYER ? layer_cut(cfg, k)
                                               : end_cut(cfg, blk->kind == BLOCK_HEAD, k);
            shrink(t, cut, q);
            t->off = off;
            off += t->n;
        }
        blk->n = off - blk->off;
        blk->chunk0 = (int)(chunks < INT_MAX ? chunks : INT_MAX);
        chunks += (blk->n + GPT_CHUNK - 1) / GPT_CHUNK;
    }
    m->nparams = off;
    m->nchunks = (int)chunks;
    gpt_own_all(m);
    return 0;
}

// The whole tensor's row that row r of rank (i,j)'s part is (-1: vocabulary padding).
static long whole_row(const TensorSpec *w, const TensorSpec *p, int j, size_t r) {
    size_t pr = rows_of(p), fr = rows_of(w);
    switch (p->split) {
    case T2D_QKV_W:
    case T2D_QKV_B: return (long)(r / (pr / 3) * (fr / 3) + (size_t)j * (pr / 3) + r % (pr / 3));
    case T2D_EMB: return (long)r;
    case T2D_VOCAB: return (size_t)j * pr + r < fr ? (long)((size_t)j * pr + r) : -1;
    default: return (long)((size_t)j * pr + r);
    }
}

static size_t col_offset(const TensorSpec *p, int i, int j) {
    size_t pc = cols_of(p);
    if (p->split == T2D_EMB) return (size_t)j * pc;
    return p->split <= T2D_VOCAB ? (size_t)i * pc : 0; // weights, q/k/v, wte
}

void gpt2d_to_whole(const GPT *whole, const GPT *part, int q, int i, int j, const float *src,
                    float *dst) {
    (void)q;
    for (int t = 0; t < part->ntensors; t++) {
        const TensorSpec *w = &whole->tensors[t], *p = &part->tensors[t];
        size_t pc = cols_of(p), fc = cols_of(w), co = col_offset(p, i, j);
        for (size_t r = 0; r < rows_of(p); r++) {
            long wr = whole_row(w, p, j, r);
            if (wr >= 0)
                memcpy(dst + w->off + (size_t)wr * fc + co, src + p->off + r * pc,
                       pc * sizeof(float));
        }
    }
}

// Copies the whole-model floats [at, at+n) between a window of the whole layout and the part's
// buffer (starting at part offset base): from_part, src is the part's buffer and dst the
// window, else the other way. Tensors replicated down a grid column are skipped when reps is 0.
static void range_copy(const GPT *whole, const GPT *part, int i, int j, int reps, size_t base,
                       size_t at, size_t n, const float *src, float *dst, int from_part) {
    for (int t = 0; t < part->ntensors; t++) {
        const TensorSpec *w = &whole->tensors[t], *p = &part->tensors[t];
        if (w->off >= at + n || w->off + w->n <= at || (!reps && gpt2d_col_replicated(part, t)))
            continue;
        size_t pc = cols_of(p), fc = cols_of(w), co = col_offset(p, i, j);
        for (size_t r = 0; r < rows_of(p); r++) {
            long wr = whole_row(w, p, j, r);
            if (wr < 0) continue;
            size_t lo = w->off + (size_t)wr * fc + co, hi = lo + pc;
            size_t a = lo > at ? lo : at, b = hi < at + n ? hi : at + n;
            if (a >= b) continue;
            size_t po = (p->off - base) + r * pc + (a - lo), wo = a - at;
            memcpy(dst + (from_part ? wo : po), src + (from_part ? po : wo),
                   (b - a) * sizeof(float));
        }
    }
}

void gpt2d_to_whole_range_at(const GPT *whole, const GPT *part, int i, int j, int reps,
                             const float *src, size_t base, size_t at, size_t n, float *dst) {
    range_copy(whole, part, i, j, reps, base, at, n, src, dst, 1);
}

void gpt2d_from_whole(const GPT *whole, const GPT *part, int q, int i, int j, size_t at, size_t n,
                      const float *src, float *dst, size_t base) {
    (void)q;
    range_copy(whole, part, i, j, 1, base, at, n, src, dst, 0);
}
