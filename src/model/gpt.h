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

// The model family: GPT-2's block (LayerNorm, learned positions, GELU MLP, tied head) or
// LLaMA's (RMSNorm, RoPE, grouped-query attention, SwiGLU MLP, no biases; block_llama.c).
typedef enum { ARCH_GPT2 = 0, ARCH_LLAMA = 1 } GPTArch;

typedef struct {
    int L;    // layers
    int H;    // heads
    int C;    // channels
    int V;    // vocabulary size
    int maxT; // longest sequence (rows of GPT-2's position embedding; LLaMA's RoPE limit)
    // LLaMA only (arch ARCH_LLAMA; zero for GPT-2; gpt_config_defaults fills what is 0)
    int arch;                   // GPTArch
    int KV;                     // key/value heads (divides H; H: plain multi-head attention)
    int F;                      // SwiGLU hidden size (default: 8C/3 rounded up to a multiple of 64)
    int tie;                    // 1: the head's logits use the token embedding (GPT-2: always)
    float rope_theta, norm_eps; // RoPE base (10000), RMSNorm epsilon (1e-5)
    // Llama-3.1's RoPE frequency scaling (rope_scaling = ROPE_LLAMA3; ROPE_PLAIN: none): the
    // frequencies of wavelength above rope_orig/rope_low are divided by rope_factor, those below
    // rope_orig/rope_high kept, the ones between interpolated (llama_rope_tables)
    int rope_scaling, rope_orig;            // RopeScaling; original_max_position_embeddings
    float rope_factor, rope_low, rope_high; // factor, low_freq_factor, high_freq_factor
} GPTConfig;

typedef enum { ROPE_PLAIN = 0, ROPE_LLAMA3 = 1 } RopeScaling;

// "gpt2" or "llama"; gpt_arch_parse: the GPTArch of a name, or -1.
const char *gpt_arch_name(int arch);
int gpt_arch_parse(const char *name);
// LLaMA's defaults where a field is 0 (KV = H, F = 8C/3 up to a multiple of 64, theta 10000,
// eps 1e-5; with llama3 scaling Llama 3.1's factor 8, low 1, high 4, original 8192); nothing
// for GPT-2.
void gpt_config_defaults(GPTConfig *c);
static inline int gpt_is_llama(const GPTConfig *c) { return c->arch == ARCH_LLAMA; }
// Whether the head reads the embedding (GPT-2, or LLaMA with --tie-embeddings).
static inline int gpt_tied(const GPTConfig *c) { return !gpt_is_llama(c) || c->tie; }

// Upper bounds on a shape (so sizes never overflow, whatever a weights file's header says).
#define GPT_MAX_LAYERS 65536
#define GPT_MAX_DIM (1 << 20)
#define GPT_MAX_VOCAB (1 << 21) // ids past 65,535 read from uint32 shards (data/shard.h)
#define GPT_MAX_BLOCK (1 << 24)

// Returns 0 or -1 (with loom_errmsg naming the field) when the shape is impossible.
int gpt_config_check(const GPTConfig *c);
// Parameters of a model of shape c (checked, in size_t). Returns 0, or -1 with loom_errmsg when
// the shape is invalid or the count overflows.
int gpt_param_count(const GPTConfig *c, size_t *n);

typedef enum { BLOCK_EMBED, BLOCK_LAYER, BLOCK_HEAD } BlockKind;

// One named parameter tensor. Names are Hugging Face GPT-2's (without "transformer.").
typedef struct {
    char name[64];
    size_t off;     // element offset in the flat parameter buffer
    size_t n;       // elements
    int ndim;       // 1 or 2 (AdamW decays only ndim ≥ 2)
    int shape[2];   // loom's layout; linear weights are (out, in)
    int hf_conv1d;  // 1 when Hugging Face stores the transpose (Conv1D, (in, out))
    float init_std; // N(0, std); 0 → zeros; -1 → ones
    int split;      // tensor parallelism: which part of the whole tensor a rank holds (TPSplit)
} TensorSpec;

// How a tensor-parallel rank's tensor is cut from the whole one (tp_layout.c maps them).
typedef enum {
    TP_REPLICATED, // every rank holds all of it (LayerNorms, row-parallel biases, wpe)
    TP_ROWS,       // rows [i·r, (i+1)·r) (column-parallel MLP up-projection, its bias)
    TP_QKV,        // rows [i·r, (i+1)·r) of each of q, k and v (the heads i holds)
    TP_COLS,       // columns [i·c, (i+1)·c) (row-parallel projections)
    TP_VOCAB,      // rows [i·r, (i+1)·r) of the vocabulary padded to a multiple of 64·tp
    TP_KVSHARE,    // LLaMA's k/v when tp = g·KV (g > 1): the one kv head i/g, held by g ranks
} TPSplit;

// Megatron 1D tensor parallelism: a model laid out for rank i of n holds only its part of each
// layer (heads and MLP columns) and of the vocabulary (tp_layout.c), and its blocks reduce
// partial results across the group through allreduce (installed by the strategy).
typedef struct {
    int n, i;  // group size (0 or 1: no tensor parallelism), this rank
    int v0;    // first vocabulary row held
    int nv;    // real vocabulary rows held (the rest of the local table is padding)
    int vrows; // rows of the local embedding table (padded vocabulary / n)
    void (*allreduce)(void *ctx, float *x, size_t n, int max); // in place: sum (max: 1 → max)
    // Sequence parallelism (sp = 1, seq_parallel.c): the LayerNorm and residual regions hold
    // positions [i·T/n, (i+1)·T/n) of every sequence, rows ordered (B, T/n). allgather: in
    // place, rank r's `each` floats at x + r·each reach every rank; reduce_scatter: rank r
    // receives into recv Σ over ranks of send[r·each, (r+1)·each).
    int sp;
    void (*allgather)(void *ctx, float *x, size_t each);
    void (*reduce_scatter)(void *ctx, const float *send, float *recv, size_t each);
    void *ctx;
} TensorParallel;

// Context parallelism (ring attention, --cp): every sequence of T tokens is cut into 2n chunks
// of c = T/(2n) and rank i holds chunks i and 2n−1−i (Tl = T/n tokens; the workspace's T is
// Tl). The embedding adds wpe at those global positions (block_cp.c); attention, the one place
// tokens meet, goes through the hooks below (installed by the strategy: parallel/ring_attention.c),
// causal by global position, saving the per-row log-sum-exp (B,NH,Tl) in the layer's att slot.
// qkv rows are [q (C = NH·hs) | k (KV·hs) | v (KV·hs)]: KV = NH for GPT-2, LLaMA's kv heads
// (its RoPE turned each chunk's q and k by their global positions: llama_rope_tables).
typedef struct {
    int n, i; // ring size (0 or 1: no context parallelism), this rank
    void (*forward)(void *ctx, float *out, float *lse, const float *qkv, int B, int T, int C,
                    int NH, int KV);
    void (*backward)(void *ctx, float *dqkv, const float *dout, const float *qkv, const float *out,
                     const float *lse, int B, int T, int C, int NH, int KV);
    void *ctx;
} ContextParallel;

// The chunks' first global positions of context-parallel rank i of n for sequences of T:
// local rows [0, c) are positions [p0, p0+c), rows [c, 2c) positions [p1, p1+c).
static inline void gpt_cp_chunks(int T, int n, int i, int *c, int *p0, int *p1) {
    *c = T / (2 * n), *p0 = i * *c, *p1 = (2 * n - 1 - i) * *c;
}
// The rank's (B, T/n) tokens of whole (B,T) sequences: its two chunks of every row.
void gpt_cp_take(int *local, const int *whole, int B, int T, int n, int i);

// What a rank keeps of one block for its update, every piece behind a re-pointable pointer: a
// ZeRO shard, a pipeline stage or a swapper sets them, and the optimizer, the strategies and
// checkpoints reach the state only through them. [own_lo, own_hi) is the part of the block this
// rank updates (own_lo == own_hi: none); every pointer is at element own_lo of its array.
typedef struct {
    size_t own_lo, own_hi;
    float *own_params;      // the parameters the update writes
    const float *own_grads; // the gradients it reads
    float *m, *v;           // AdamW moments
} BlockState;

// Model-sized state a strategy keeps beside the optimizer's, per block: slots of the flat range
// [lo, hi) ∩ block, each pointer at element lo (CO2: anchor, outer momentum, the average being
// applied; 2bw: the other weight version than the one blk->params points at). A swapper moves
// these with the block.
enum { EXTRA_CO2_ANCHOR, EXTRA_CO2_MOMENTUM, EXTRA_CO2_AVERAGE };
enum { EXTRA_OTHER_VERSION };
enum { BLOCK_EXTRA = 3 };
typedef struct {
    size_t lo, hi;
    float *p[BLOCK_EXTRA];
} BlockExtra;

typedef struct {
    BlockKind kind;
    int layer;     // 0..L-1 for BLOCK_LAYER, -1 otherwise
    size_t off, n; // slice of the flat buffers
    int t0, nt;    // tensors [t0, t0+nt) of GPT.tensors
    float *params; // where this block's parameters are now (normally GPT.params + off)
    float *grads;  // where its gradients accumulate
    BlockState state;
    BlockExtra extra;
    int chunk0; // index of its first norm chunk (see gpt_chunk_*)
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
    int nchunks;   // norm chunks over all blocks
    // The tied embedding's gradient is the embedding's part E (its backward) plus the head's
    // part H. With head_dwte set, gpt_backward accumulates H there and, after the embedding's
    // backward of a micro-batch with fold_head set, adds it to E once (E + H) and clears it —
    // the order a pipeline (H on the last stage, E on the first) and block swapping (the head
    // and the embedding in different units) share. NULL: H accumulates straight into E.
    float *head_dwte; // (V·C) device buffer, or NULL
    int fold_head;
    TensorParallel tp;  // tp.n > 1: this model is one tensor-parallel rank's part
    ContextParallel cp; // cp.n > 1: this rank holds two chunks of every sequence
    // Set before workspace_create when forwards without targets read the logits (sampling):
    // with a backend's fused classifier the workspace keeps no (B·T, V) logits otherwise.
    int want_logits;
    // Set before workspace_create: GPT-2 layers keep no GELU output (B,T,4C/tp) per layer; the
    // forward writes it into the workspace's scratch and the backward recomputes it from the
    // kept pre-activation (llm.c's default recompute): 16·B·T·C/tp bytes less a layer for one
    // more GELU a layer. Exact: the recomputed values are the forward's. LLaMA layers ignore it.
    int recompute_gelu;
} GPT;

// Builds the block list and tensor table and allocates params and grads (zeroed). A shape whose
// parameters and gradients would not fit in this machine's physical memory is an error (-1,
// before anything is allocated).
int gpt_create(GPT *m, const GPTConfig *cfg, const Backend *be);
// The block list and tensor table only: no parameter or gradient buffer yet (a strategy that
// keeps a shard or a stage allocates just that; gpt_alloc_whole adds the whole-model ones, and
// refuses, before allocating, what would not fit in physical memory).
int gpt_create_layout(GPT *m, const GPTConfig *cfg, const Backend *be);
int gpt_alloc_whole(GPT *m, int params, int grads);
// The layout of tensor-parallel rank tpi of tp (tp_layout.c): cfg is the whole model's; every
// tensor keeps its name, with the shape of the part this rank holds. -1 (loom_errmsg naming the
// numbers) when tp does not divide the heads.
int gpt_create_layout_tp(GPT *m, const GPTConfig *cfg, const Backend *be, int tp, int tpi);
// Copies the elements of the whole model's flat range [at, at+n) (src, host) that the
// tensor-parallel model `part` holds into dst (host, part->nparams floats).
void gpt_tp_from_whole(const GPT *whole, const GPT *part, size_t at, size_t n, const float *src,
                       float *dst);
// The same into dst holding the part's flat range from element `base` on (every element the
// whole range maps to must be at or after base: a whole block's range into the part's block).
void gpt_tp_from_whole_at(const GPT *whole, const GPT *part, size_t at, size_t n, const float *src,
                          float *dst, size_t base);
// Copies what tensor-parallel rank tpi holds (src, host, in its layout) into the whole model's
// flat array dst (host, whole->nparams floats); replicated tensors are copied from any rank.
void gpt_tp_to_whole(const GPT *whole, const GPT *part_layout, int tpi, const float *src,
                     float *dst);
// The elements of the whole model's flat range [at, at+n) that rank tpi holds (src, host, in
// its layout part_layout) into dst[pos - at] (host, n floats); other elements are left as they
// are, and replicated tensors are copied by rank 0 only, so the ranks' windows add up to the
// whole range exactly once.
void gpt_tp_to_whole_range(const GPT *whole, const GPT *part_layout, int tpi, const float *src,
                           size_t at, size_t n, float *dst);
// The same from src holding the part's flat range from element `base` on (every part element
// the whole range maps to must be at or after base: a part block's range for the whole block's).
void gpt_tp_to_whole_range_at(const GPT *whole, const GPT *part_layout, int tpi, const float *src,
                              size_t base, size_t at, size_t n, float *dst);
// Rows of the (local) embedding table and of the logits: V, or a tensor-parallel rank's share.
static inline int gpt_vocab_rows(const GPT *m) { return m->tp.n > 1 ? m->tp.vrows : m->cfg.V; }
// The backend's fused classifier computes the loss and its gradient (one rank of the vocabulary).
static inline int gpt_fused_classifier(const GPT *m) { return m->be->classifier && m->tp.n <= 1; }
// Logit columns per row the head's workspace keeps: none with the fused classifier unless the
// logits are wanted (want_logits), else gpt_vocab_rows.
static inline int gpt_logit_rows(const GPT *m) {
    return gpt_fused_classifier(m) && !m->want_logits ? 0 : gpt_vocab_rows(m);
}
// 1 when tensor t of a tensor-parallel model is replicated on every rank of the group.
static inline int gpt_tp_replicated(const GPT *m, int t) {
    return m->tp.n <= 1 || m->tensors[t].split == TP_REPLICATED;
}
// 1 when tensor-parallel rank i counts tensor t in sums over the group (norms, assembled saves):
// a split tensor on every rank, a replicated one on rank 0, a TP_KVSHARE one (the same on the
// tp/KV ranks sharing that kv head) on the first rank of its sharers.
static inline int gpt_tp_counts(const GPT *m, int t, int i) {
    if (m->tp.n <= 1) return 1;
    if (m->tensors[t].split == TP_KVSHARE) return i % (m->tp.n / m->cfg.KV) == 0;
    return !gpt_tp_replicated(m, t) || i == 0;
}
void gpt_free(GPT *m);
// GPT-2 init: N(0,0.02); residual projections N(0, 0.02/sqrt(2L)); biases 0; LayerNorm (1,0).
void gpt_init_weights(GPT *m, unsigned long long seed);
// The same initial values of the flat range [lo, hi) only, into dst (backend memory, hi-lo
// floats), with a bounded host buffer.
void gpt_init_range(const GPT *m, unsigned long long seed, size_t lo, size_t hi, float *dst);
// The same values handed to sink in ascending pieces of host memory (flat offset at, n floats);
// returns the first non-zero sink result, or 0.
typedef int (*GptSink)(void *ctx, size_t at, size_t n, const float *src);
// The other way: n floats of the flat range at [at, at+n) into dst (host memory); 0 or -1.
typedef int (*GptSource)(void *ctx, size_t at, size_t n, float *dst);
int gpt_init_stream(const GPT *m, unsigned long long seed, size_t lo, size_t hi, GptSink sink,
                    void *ctx);
const TensorSpec *gpt_find_tensor(const GPT *m, const char *name);
static inline Block *gpt_embed(GPT *m) { return &m->blocks[0]; }
// Releases the model's whole-model parameter and/or gradient buffer, for a strategy that keeps
// only a shard or a stage: the blocks' pointers into it become NULL until it re-points them.
void gpt_drop_whole(GPT *m, int params, int grads);
// Points every block's state at the whole model (own = the block; params/grads = the model's
// buffers; moments and extras cleared) — the single-process layout.
void gpt_own_all(GPT *m);
// Points block b's owned part at [lo, hi) ∩ block, with params/grads taken from buffers whose
// element `base` is at pparams/pgrads (NULL leaves it NULL).
void gpt_own_range(GPT *m, size_t lo, size_t hi, size_t base, float *pparams, const float *pgrads);
// Points extra slot k of every block at buf, which holds the flat range [lo, hi) (element lo
// first); the blocks' extra ranges become [lo, hi) ∩ block.
void gpt_extra_range(GPT *m, int k, float *buf, size_t lo, size_t hi);
// Points the owned parts' moments into mo / vo, whose element `base` is the flat offset base.
void gpt_own_moments(GPT *m, float *mo, float *vo, size_t base);

// ---------------------------------------------------------------- the layout of reductions
// Sums over the model (the gradient norm, CO2's per-tensor norms) are taken over fixed chunks
// of GPT_CHUNK elements counted from each block's start, one partial per chunk in double,
// summed in chunk order. Shards are cut on chunk boundaries, so whoever holds a chunk computes
// the same partial, and a sum cannot change by a bit when blocks are sharded, pipelined or
// swapped.
#define GPT_CHUNK ((size_t)4096)
// The nearest chunk boundary to flat offset x (block ends are boundaries).
size_t gpt_chunk_round(const GPT *m, size_t x);
// Boundary q of N equal shards of the flat range [lo, hi), on a chunk boundary: shard q is
// [gpt_shard_bound(q), gpt_shard_bound(q+1)). lo and hi must be chunk boundaries.
size_t gpt_shard_bound(const GPT *m, size_t lo, size_t hi, int q, int N);
// Writes Σ x² per chunk of the flat range [lo, hi) (chunk boundaries; x at element lo) into
// part (m->nchunks doubles) at the chunks' indices.
void gpt_chunk_sumsq(const GPT *m, const float *x, size_t lo, size_t hi, double *part);
// Σ part in chunk order.
double gpt_chunk_total(const GPT *m, const double *part);
static inline Block *gpt_head(GPT *m) { return &m->blocks[m->nblocks - 1]; }

// ---------------------------------------------------------------- running blocks

// Activations and gradient scratch for micro-batches of shape (B,T). With recompute on, a
// transformer layer keeps only its input and redoes its forward during backward.
typedef struct {
    int B, T, recompute;
    int *rope_pos;    // LLaMA: (T) positions 0..T-1, --cp: global (host memory, both tables)
    float *rope_freq; // LLaMA: (hs/2) RoPE inverse frequencies theta^(-2i/hs)
    int b0, b1;       // the blocks it holds activations for (all of them unless a pipeline stage)
    float *stream;    // residual stream: slot l is block l's output (slots b0-1 .. b1-1); with
                      // sequence parallelism every (B,T,C) of the residual regions is (B,T/tp,C)
    float *layer;     // saved activations per layer (one shared slot when recompute is on)
    int layer0;       // the first layer with a slot
    size_t layer_stride;
    float *head;           // lnf (B,T,C), lnf mean/rstd (B,T), probs (B,T,V), losses (B,T)
    float *dstream;        // (B,T,C) gradient of the residual stream, updated in place
    float *scratch;        // layer backward scratch: (B,T,4C) + 2·(B,T,C) + recompute out (B,T,C)
    int *tokens, *targets; // (B,T) copies of the current micro-batch
    size_t floats;         // activation floats allocated (for memory reports)
    int shares;            // head, scratch (and the recompute slot) belong to another workspace
    int head_grad_ready;   // the head's forward left d(ln_f) in scratch and added its dwte
} Workspace;

int workspace_create(Workspace *ws, const GPT *m, int B, int T, int recompute);
// A pipeline stage's workspace: activations only for blocks [b0, b1).
int workspace_create_range(Workspace *ws, const GPT *m, int B, int T, int recompute, int b0,
                           int b1);
// Rows of (B,T) a rank holds in the LayerNorm/residual regions: B·T, or B·T/tp with sp.
size_t workspace_rows(const Workspace *ws, const GPT *m);
// Block l's output in the residual stream (l = -1 .. nblocks-2; l = b-1 is block b's input).
float *workspace_stream(const Workspace *ws, const GPT *m, int l);
void workspace_free(Workspace *ws, const GPT *m);
// GPT-2 layers keep the products' inputs (ln_1, the attention's output, ln_2, the GELU output;
// the head's ln_f) in 16 bits on a backend with act16 (Backend.act16), one tensor-parallel rank
// of 1 (their collectives move fp32); gpt_act_floats: the floats n such elements take (n/2 in
// 16 bits, whole 16-byte units, so the tensor after it stays aligned).
// gpt_act16_qkv: the qkv product's output too (Backend.act16 has ACT16_QKV); gpt_act16_fch:
// the fc product's (GELU's input; ACT16_FCH).
int gpt_act16(const GPTConfig *c, const Backend *be, int tp);
int gpt_act16_qkv(const GPTConfig *c, const Backend *be, int tp);
int gpt_act16_fch(const GPTConfig *c, const Backend *be, int tp);
size_t gpt_act_floats(int act16, size_t n);
// Activation floats of a whole-model workspace; be: the backend that will run it (its attention
// keeps backend-specific saved state).
size_t workspace_floats(const GPTConfig *c, const Backend *be, int B, int T, int recompute);
// Activation floats of a workspace_create_range(m, B, T, recompute, b0, b1) (m may be a
// tensor-parallel part): what its `floats` reports, without allocating.
size_t workspace_range_floats(const GPT *m, int B, int T, int recompute, int b0, int b1);
// One layer's saved activations, and the head's, of model m (its tensor-parallel part's).
size_t workspace_layer_floats(const GPT *m, int B, int T);
// Floats of a workspace's scratch (the layer backward's and the head's; with recompute_gelu
// also a GELU output; with a 16-bit qkv a 16-bit d(attention output))
size_t workspace_scratch_floats(const GPT *m, int B, int T);
// With recompute_gelu: where a GPT-2 layer's GELU output lives (past the backward's scratch).
float *workspace_gelu_scratch(const Workspace *ws, const GPT *m);
// With a 16-bit qkv (gpt_act16_qkv): the layer backward's d(attention output), marked 16-bit
// (past the GELU output's); NULL otherwise.
float *workspace_datt16(const Workspace *ws, const GPT *m);
size_t workspace_head_floats(const GPT *m, int B, int T);
// Several micro-batches in flight at once (block swapping runs K of them through a unit): a
// workspace that shares `share`'s head, scratch and (with recompute) layer slot, with its own
// residual stream, stream gradient, tokens and (without recompute) layer activations.
int workspace_create_sharing(Workspace *ws, const GPT *m, const Workspace *share);
// Floats of the parts micro-batches share, and of those each needs for itself.
size_t workspace_shared_floats(const GPTConfig *c, const Backend *be, int B, int T, int recompute);
size_t workspace_own_floats(const GPTConfig *c, const Backend *be, int B, int T, int recompute);

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
    // head forward: the backward follows with grad_scale and dwte set here, so a fused
    // classifier may compute the head's gradient in this pass (gpt_forward_backward)
    int grad_next;
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
// gpt_forward then gpt_backward (the same loss and gradients), for a micro-batch that trains:
// with a fused classifier (Backend.classifier) the head computes the loss and its gradient in
// one pass over the logits in the forward, and its backward takes that gradient (the logits are
// not computed again). LOOM_HEAD_GRAD_IN_FORWARD=0 keeps the two passes (a benchmark switch).
double gpt_forward_backward(GPT *m, Workspace *ws, const int *tokens, const int *targets,
                            float grad_scale);
void gpt_zero_grad(GPT *m);
// dwte (the embedding's gradient, V·C floats from its start) += head_dwte; head_dwte = 0.
void gpt_fold_head(GPT *m, float *dwte);
// FLOPs of one forward+backward on (B,T) tokens (6·N·tokens + attention), for MFU.
double gpt_flops_per_step(const GPTConfig *c, int B, int T);
