// gpt_2d.h — Colossal-AI 2D (SUMMA) tensor parallelism: the model as rank (i, j) of a q×q grid
// holds and runs it. Activations (N,K) are cut into q×q blocks: rows by the batch (rank row i
// runs sequences [i·B/q, (i+1)·B/q), so attention needs no communication), columns by j (K/q).
// A linear weight W (K in, M out) is cut the same way: rank (i,j) holds inputs block i × outputs
// block j (loom's (out, in) layout: rows block j, columns block i; q, k and v each cut so that
// the rank's qkv output columns are whole heads, NH/q of them). Biases, LayerNorms and wpe
// (maxT,C) are cut by columns (block j) and replicated down the grid's column (the q ranks with
// the same j): their gradients are partial sums over the rows i until the strategy sums them
// over the column. The tied embedding wte (V,C) is cut like a weight of the head (C in, V out):
// rank (i,j) holds vocabulary block j (V padded to a multiple of q; padding rows stay zero and
// are never saved) × channel block i, V·C/q² of it. The head is a SUMMA product giving logits
// (B/q·T, V/q) per rank and a vocabulary-parallel cross-entropy along the row (max, Σ exp and the
// target's logit all-reduced; the logits are never gathered); the embedding sums each row's
// vocabulary partials (a reduce-scatter along the row) and swaps blocks with the transposed
// rank (j,i). The flat layout of checkpoints and exports stays the whole model's
// (gpt2d_from/to_whole).
#pragma once
#include "gpt.h"

// How a part tensor is cut from the whole one (TensorSpec.split of a 2D part model).
enum {
    T2D_WEIGHT, // rows block j, columns block i (linear weight, (out, in))
    T2D_QKV_W,  // rows: block j of each of q, k and v; columns block i
    T2D_VOCAB,  // rows block j of the padded vocabulary, columns block i (wte)
    T2D_VEC,    // elements block j (bias, LayerNorm): replicated down the column
    T2D_QKV_B,  // block j of each of q, k and v: replicated down the column
    T2D_EMB,    // every row, columns block j (wpe): replicated down the column
};

enum { T2D_ROW, T2D_COL }; // axes: along the row (same i, over j), down the column (same j)

// The grid's collectives, installed by the strategy (model/ never talks to MPI). Ranks on a row
// are numbered by j, ranks on a column by i.
typedef struct {
    int q, i, j;
    void (*bcast)(void *ctx, int axis, float *buf, size_t n, int root);
    void (*allreduce)(void *ctx, int axis, float *buf, size_t n, int max); // sum (max: 1 → max)
    // member r receives Σ over members of send[r·each, (r+1)·each)
    void (*reduce_scatter)(void *ctx, int axis, const float *send, float *recv, size_t each);
    // in place: member r contributes buf[r·each, (r+1)·each); every member ends with all of it
    void (*allgather)(void *ctx, int axis, float *buf, size_t each);
    // recv = the n floats the transposed rank (j,i) sends (send itself on the diagonal)
    void (*transpose)(void *ctx, const float *send, float *recv, size_t n);
    // the model enters block b (0: embedding, 1..L: layers, L+1: head), for the strategy's counts
    void (*section)(void *ctx, int b);
    void *ctx;
} Tp2d;

// The padded vocabulary's rows per rank and the real ones rank column j holds.
static inline int gpt2d_vrows(const GPTConfig *c, int q) { return (c->V + q - 1) / q; }
static inline int gpt2d_vreal(const GPTConfig *c, int q, int j) {
    int n = c->V - j * gpt2d_vrows(c, q), r = gpt2d_vrows(c, q);
    return n < 0 ? 0 : n > r ? r : n;
}

// The layout of rank (i,j)'s part (cfg: the whole model's). -1 (loom_errmsg naming the numbers)
// when q does not divide C or the heads.
int gpt2d_layout(GPT *part, const GPTConfig *cfg, const Backend *be, const Tp2d *g);
// 1 when part tensor t is replicated down the column (its gradient needs the column's sum).
static inline int gpt2d_col_replicated(const GPT *part, int t) {
    return part->tensors[t].split >= T2D_VEC;
}
// The elements of the whole model's flat range [at, at+n) (src, host) that rank (i,j) holds,
// into dst (host, its layout from flat offset base: dst[0] is element base; every element of the
// range held must lie at or after it, e.g. base = the part's block that the whole block maps to).
void gpt2d_from_whole(const GPT *whole, const GPT *part, int q, int i, int j, size_t at, size_t n,
                      const float *src, float *dst, size_t base);
// What rank (i,j) holds (src, host, its layout) into the whole flat array dst (host).
void gpt2d_to_whole(const GPT *whole, const GPT *part, int q, int i, int j, const float *src,
                    float *dst);
// The elements of the whole flat range [at, at+n) that rank (i,j) holds, from src (host, its
// layout from flat offset base, as gpt2d_from_whole's dst) into dst (host, dst[0] is element at;
// the rest left as they are); the column-replicated tensors only when reps (one row of a column).
void gpt2d_to_whole_range_at(const GPT *whole, const GPT *part, int i, int j, int reps,
                             const float *src, size_t base, size_t at, size_t n, float *dst);

// Activations of one micro-batch of shape (B,T) on one rank: Bl = B/q sequences, C/q channels.
typedef struct {
    int B, T, Bl, recompute;
    float *mem;               // everything below, carved from one allocation
    float *stream;            // (L+1) × (Bl·T, C/q): x_0 .. x_L
    float *layer;             // saved activations per layer (one slot with recompute)
    size_t layer_stride;      //
    float *head;              // lnf (Bl·T,C/q), mean, rstd (Bl·T), logits/probs (Bl·T,V), losses
    float *dstream;           // (Bl·T, C/q)
    float *xbuf, *wbuf, *tmp; // SUMMA: a broadcast activation and weight block, a product
    float *dxs, *dws;         // SUMMA backward: q partial blocks of dX and of dW
    float *big, *dln, *dsmall;   // layer backward scratch
    float *recomp, *stats;       // a recomputed layer's output; row partials (Bl·T,3)
    const int *tokens, *targets; // this rank's rows of the micro-batch
    const int *all;              // the whole micro-batch's tokens (B,T)
    size_t floats;
    // LLaMA (block_2d_llama.c): RoPE's positions and frequencies (host), zeros (Bl·T + C/q: the
    // split norm's zero mean and bias), junk (C/q: its unused bias gradient), hstats (host, 2
    // floats a row)
    int *rope_pos;
    float *rope_freq, *zeros, *junk, *hstats;
} Work2d;

// B must be a multiple of q (checked by the caller). Returns 0 or -1.
int work2d_create(Work2d *w, const GPT *part, const Tp2d *g, int B, int T, int recompute);
void work2d_free(Work2d *w, const GPT *part);
// Forward of the whole micro-batch (tokens, targets: (B,T), every rank the same); returns Σ of
// the token losses of this rank's rows (targets NULL: 0).
double gpt2d_forward(const GPT *part, const Tp2d *g, Work2d *w, const int *tokens,
                     const int *targets);
// Backward; gradients accumulate (scaled by grad_scale) into part->grads; column-replicated
// tensors hold this row's partial sum.
void gpt2d_backward(const GPT *part, const Tp2d *g, Work2d *w, float grad_scale);
// SUMMA products and the split LayerNorm (summa.c). Y (Nl,Mq) = X·Wᵀ + b over the grid.
void summa_forward(const GPT *m, const Tp2d *g, Work2d *w, float *y, const float *x,
                   const float *wt, const float *b, int Nl, int Kq, int Mq);
// dx (Nl,Kq) = dY·W (overwritten; reduced along the row), dwt += dYᵀ·X (reduced down the
// column), db += Σ dY (this row's part).
void summa_backward(const GPT *m, const Tp2d *g, Work2d *w, float *dx, float *dwt, float *db,
                    const float *dy, const float *x, const float *wt, int Nl, int Kq, int Mq);
void ln2d_forward(const GPT *m, const Tp2d *g, Work2d *w, float *out, float *mean, float *rstd,
                  const float *x, const float *wt, const float *b, int Nl);
// dx += ..., dwt += ..., db += ... (this row's part)
void ln2d_backward(const GPT *m, const Tp2d *g, Work2d *w, float *dx, float *dwt, float *db,
                   const float *dout, const float *x, const float *wt, const float *mean,
                   const float *rstd, int Nl);

// LLaMA on the grid (block_2d_llama.c): one layer (RMSNorm over the row's channels, RoPE on the
// rank's q and k heads at their global positions, grouped-query attention over its KV/q kv
// heads, SwiGLU over its F/q columns of gate and up), its saved floats per layer and the widest
// product it runs (columns per row).
size_t llama2d_layer_floats(const GPT *m, const Tp2d *g, int Bl, int T);
size_t llama2d_width(const GPT *m, int q);
int llama2d_work(Work2d *w, const GPT *m, const Tp2d *g, int T);
void llama2d_work_free(Work2d *w, const GPT *m);
void llama2d_layer_forward(const GPT *m, const Tp2d *g, Work2d *w, const Block *blk, const float *x,
                           float *out);
void llama2d_layer_backward(const GPT *m, const Tp2d *g, Work2d *w, const Block *blk,
                            const float *x, float *dx);
// RMSNorm of rows split over the grid's row (rstd: (Nl)); backward: dx += ..., dwt += ...
void rms2d_forward(const GPT *m, const Tp2d *g, Work2d *w, float *out, float *rstd, const float *x,
                   const float *wt, int Nl);
void rms2d_backward(const GPT *m, const Tp2d *g, Work2d *w, float *dx, float *dwt,
                    const float *dout, const float *x, const float *wt, const float *rstd, int Nl);
