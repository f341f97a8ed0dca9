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
// The 16-bit activations (gpt_act16) of GPT-2 layer `layer` in ws, and of the head's ln_f,
// marked on the model's backend (Backend.act16_mark).
void layer_act16_mark(const GPT *m, const Workspace *ws, int layer);
void head_act16_mark(const GPT *m, const Workspace *ws);
void head_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);

// The LLaMA block (block_llama.c) and shape (llama_layout.c).
void llama_layer_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
void llama_layer_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
int llama_config_check(const GPTConfig *c);
int llama_param_count(const GPTConfig *c, size_t *n);
// Appends block blk's tensors (Hugging Face Llama names) at *off.
void llama_add_tensors(GPT *m, const Block *blk, size_t *off);
// One layer's saved activations on tensor-parallel rank of tp (1: the whole layer) whose norm
// and residual regions hold R rows (B·T, or B·T/tp with sequence parallelism).
size_t llama_layer_act_floats(const GPTConfig *c, const Backend *be, int tp, size_t R, int B,
                              int T);
// -1 (loom_errmsg) when tensor parallelism over tp ranks cannot cut the LLaMA shape c.
int llama_tp_check(const GPTConfig *c, int tp);
// The workspace's scratch for micro-batches of BT rows (at least GPT-2's 7C per row); sp: a
// sequence-parallel tensor-parallel rank's.
size_t llama_scratch_floats(const GPTConfig *c, size_t BT, int sp);
double llama_flops_per_step(const GPTConfig *c, int B, int T);
// pos (T) = 0..T-1, or a context-parallel rank's two chunks' global positions; freq (hs/2) =
// theta^(-2i/hs), scaled by Llama 3.1's rule with rope_scaling llama3.
void llama_rope_tables(int *pos, float *freq, const GPTConfig *c, int T, const ContextParallel *cp);
// gpt.c: appends one tensor of the whole shape (rows, cols; cols 0: a vector) at *off, cut for
// tensor parallelism as split (TPSplit) says.
void gpt_add_tensor(GPT *m, size_t *off, const char *name, int rows, int cols, float std,
                    int split);

// llama_tp.c: an RMSNorm's backward over the held rows: dx += d(inp), dw (C) += the weight's
// gradient (summed over the group with sequence parallelism; tmp: C scratch).
typedef struct {
    float *dx, *dw, *tmp;
    const float *dout, *inp, *w, *rstd;
} RmsBack;
void llama_rmsnorm_backward(const GPT *m, const Workspace *ws, const RmsBack *r);
// The q|k|v product's backward when this rank's kv head is shared (tp = g·KV, g > 1): dqkv
// (N,QKV, after RoPE's backward; its k|v columns are consumed), ln1 (N,C) the product's input,
// w/dw the fused weight and its gradient (+=), dln (N,C) d(ln1) overwritten (this rank's
// partial), sum (KV·N·2hs) and dln_kv (N,C) scratch. Ch = the query columns.
typedef struct {
    float *dqkv, *dw, *dln, *sum, *dln_kv;
    const float *ln1, *w;
    int N, Ch, QKV, hs;
} KvShared;
void llama_kv_shared_backward(const GPT *m, const KvShared *k);

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
