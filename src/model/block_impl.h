// block_impl.h — the per-kind forward/backward functions behind block_forward/backward.
// Only block.c dispatches to these; everything else goes through gpt.h.
#pragma once
#include "gpt.h"

void embed_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
void embed_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
void layer_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
void layer_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
// Context parallelism (block_cp.c): the embedding at the rank's global positions.
void cp_embed_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
void cp_embed_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
void head_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
void head_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);

// Lets a parallel strategy drive its communication between kernels.
static inline void block_poll(const GPT *m) {
    if (m->hooks && m->hooks->poll) m->hooks->poll(m->hooks->ctx);
}

// ---------------------------------------------------------------- tensor / sequence parallel
// (seq_parallel.c) Rows a rank holds in the LayerNorm/residual regions: workspace_rows.
// The held rows (rows, C) as the whole (B·T, C) in (B,T) order for a column-parallel product:
// `held` itself without sequence parallelism, else gathered into full (tmp: (B·T, C) scratch).
const float *tp_gather(const GPT *m, const Workspace *ws, const float *held, float *full,
                       float *tmp);
// Completes a row-parallel product's partial sums partial (B·T, C): all-reduced in place (then
// copied to held if it differs), or with sequence parallelism reduce-scattered into the held
// rows (tmp: (B·T, C) scratch). Nothing without tensor parallelism.
void tp_reduce(const GPT *m, const Workspace *ws, float *partial, float *held, float *tmp);
// A LayerNorm's backward over the held rows: dx += d(inp); dw (2C: weight, then bias) += the
// parameters' gradient, summed over the group with sequence parallelism (tmp: 2C scratch).
typedef struct {
    float *dx, *dw, *tmp;
    const float *dout, *inp, *w, *mean, *rstd;
} LnBack;
void tp_layernorm_backward(const GPT *m, const Workspace *ws, const LnBack *l);
