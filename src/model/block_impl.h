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

// The LLaMA block (block_llama.c) and shape (llama_layout.c).
void llama_layer_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
void llama_layer_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
int llama_config_check(const GPTConfig *c);
int llama_param_count(const GPTConfig *c, size_t *n);
// Appends block blk's tensors (Hugging Face Llama names) at *off.
void llama_add_tensors(GPT *m, const Block *blk, size_t *off);
size_t llama_layer_act_floats(const GPTConfig *c, const Backend *be, int B, int T);
// The workspace's scratch for micro-batches of BT rows (at least GPT-2's 7C per row).
size_t llama_scratch_floats(const GPTConfig *c, size_t BT);
double llama_flops_per_step(const GPTConfig *c, int B, int T);
// pos (T) = 0..T-1; freq (hs/2) = theta^(-2i/hs).
void llama_rope_tables(int *pos, float *freq, const GPTConfig *c, int T);
// gpt.c: appends one replicated tensor (rows, cols; cols 0: a vector) at *off.
void gpt_add_tensor(GPT *m, size_t *off, const char *name, int rows, int cols, float std);

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
