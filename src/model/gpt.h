// gpt.h — the GPT-2 model: configuration, the block list, the flat parameter layout and the
// whole-model forward/backward used by a single process.
//
// Parameters live in ONE flat buffer. The model is a list of blocks — the embedding, each
// transformer layer, the head — and every block owns one contiguous slice of the parameter
// and gradient buffers (and of the optimizer's moments, which mirror the same layout).
// Pipeline stages, ZeRO shards and layer swapping all move or own whole blocks.
#pragma once
#include <stddef.h>

#include "../backend/backend.h"

typedef struct {
    int L;    // layers
    int H;    // heads
    int C;    // channels
    int V;    // vocabulary size
    int maxT; // longest sequence (rows of the position embedding)
} GPTConfig;

// Upper bounds on a shape (so sizes never overflow, whatever a weights file's header says).
#define GPT_MAX_LAYERS 65536
#define GPT_MAX_DIM (1 << 20)
#define GPT_MAX_BLOCK (1 << 24)

// Returns 0 or -1 (with loom_errmsg naming the field) when the shape is impossible.
int gpt_config_check(const GPTConfig *c);
// Parameters of a model of shape c (checked, in size_t). Returns 0, or -1 with loom_errmsg when
// the shape is invalid or the count overflows.
int gpt_param_count(const GPTConfig *c, size_t *n);

typedef enum { BLOCK_EMBED, BLOCK_LAYER, BLOCK_HEAD } BlockKind;

// One named parameter tensor. Names are Hugging Face GPT-2's (without "transformer.").
typedef struct {
    char name[48];
    size_t off;     // element offset in the flat parameter buffer
    size_t n;       // elements
    int ndim;       // 1 or 2 (AdamW decays only ndim ≥ 2)
    int shape[2];   // loom's layout; linear weights are (out, in)
    int hf_conv1d;  // 1 when Hugging Face stores the transpose (Conv1D, (in, out))
    float init_std; // N(0, std); 0 → zeros; -1 → ones
} TensorSpec;

typedef struct {
    BlockKind kind;
    int layer;     // 0..L-1 for BLOCK_LAYER, -1 otherwise
    size_t off, n; // slice of the flat buffers
    int t0, nt;    // tensors [t0, t0+nt) of GPT.tensors
    float *params; // where this block's parameters are now (normally GPT.params + off)
    float *grads;  // where its gradients accumulate
} Block;

// Hooks a parallel strategy installs around every block: ZeRO-3 gathers a block's parameters
// in `before` and frees them in `after`; data parallelism starts a gradient reduction in
// `after` (backward); `poll` drives outstanding communication between kernels.
typedef struct {
    void (*before)(void *ctx, int block, int backward);
    void (*after)(void *ctx, int block, int backward);
    void (*poll)(void *ctx);
    void *ctx;
} BlockHooks;

typedef struct {
    GPTConfig cfg;
    const Backend *be;
    const BlockHooks *hooks; // NULL: plain single-process run
    int nblocks;             // L + 2: [embed, layer 0 .. layer L-1, head]
    Block *blocks;
    int ntensors;
    TensorSpec *tensors;
    size_t nparams;
    float *params; // (nparams) device buffer
    float *grads;  // (nparams) device buffer
} GPT;

// Builds the block list and tensor table and allocates params and grads (zeroed). A shape whose
// parameters and gradients would not fit in this machine's physical memory is an error (-1,
// before anything is allocated).
int gpt_create(GPT *m, const GPTConfig *cfg, const Backend *be);
void gpt_free(GPT *m);
// GPT-2 init: N(0,0.02); residual projections N(0, 0.02/sqrt(2L)); biases 0; LayerNorm (1,0).
void gpt_init_weights(GPT *m, unsigned long long seed);
const TensorSpec *gpt_find_tensor(const GPT *m, const char *name);
static inline Block *gpt_embed(GPT *m) { return &m->blocks[0]; }
static inline Block *gpt_head(GPT *m) { return &m->blocks[m->nblocks - 1]; }

// ---------------------------------------------------------------- running blocks

// Activations and gradient scratch for micro-batches of shape (B,T). With recompute on, a
// transformer layer keeps only its input and redoes its forward during backward.
typedef struct {
    int B, T, recompute;
    int b0, b1;    // the blocks it holds activations for (all of them unless a pipeline stage)
    float *stream; // residual stream: slot l is block l's output (slots b0-1 .. b1-1)
    float *layer;  // saved activations per layer (one shared slot when recompute is on)
    int layer0;    // the first layer with a slot
    size_t layer_stride;
    float *head;           // lnf (B,T,C), lnf mean/rstd (B,T), probs (B,T,V), losses (B,T)
    float *dstream;        // (B,T,C) gradient of the residual stream, updated in place
    float *scratch;        // layer backward scratch: (B,T,4C) + 2·(B,T,C) + recompute out (B,T,C)
    int *tokens, *targets; // (B,T) copies of the current micro-batch
    size_t floats;         // activation floats allocated (for memory reports)
} Workspace;

int workspace_create(Workspace *ws, const GPT *m, int B, int T, int recompute);
// A pipeline stage's workspace: activations only for blocks [b0, b1).
int workspace_create_range(Workspace *ws, const GPT *m, int B, int T, int recompute, int b0,
                           int b1);
// Block l's output in the residual stream (l = -1 .. nblocks-2; l = b-1 is block b's input).
float *workspace_stream(const Workspace *ws, const GPT *m, int l);
void workspace_free(Workspace *ws, const GPT *m);
size_t workspace_floats(const GPTConfig *c, int B, int T, int recompute);

// What flows into and out of a block for one micro-batch.
typedef struct {
    const int *tokens;  // (B,T) embedding input
    const int *targets; // (B,T) head targets; NULL: head only computes logits
    const float *x_in;  // (B,T,C) residual stream into the block (unused by the embedding)
    float *x_out;       // (B,T,C) residual stream out of the block (unused by the head)
    float *dx;          // backward: holds d(x_out) on entry, d(x_in) on exit
    const float *wte;   // head: the tied token embedding (owned by the embedding block)
    float *dwte;        // head: where the tied embedding's gradient accumulates
    float grad_scale;   // head backward: d(loss)/d(Σ token losses), e.g. 1/(B·T·K)
    double loss_sum;    // head forward output: Σ token losses of the micro-batch
} BlockIO;

void block_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
void block_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);

// Head logits/probabilities of the last forward, (B,T,V).
float *workspace_probs(const Workspace *ws, const GPT *m);

// ---------------------------------------------------------------- the whole model, one process

// Forward over all blocks. Returns the mean loss over B·T tokens (or 0 when targets is NULL).
double gpt_forward(GPT *m, Workspace *ws, const int *tokens, const int *targets);
// Backward over all blocks; gradients ACCUMULATE into m->grads scaled by grad_scale
// (use 1/(B·T·K) for the mean loss of K accumulated micro-batches).
void gpt_backward(GPT *m, Workspace *ws, float grad_scale);
void gpt_zero_grad(GPT *m);
// FLOPs of one forward+backward on (B,T) tokens (6·N·tokens + attention), for MFU.
double gpt_flops_per_step(const GPTConfig *c, int B, int T);
