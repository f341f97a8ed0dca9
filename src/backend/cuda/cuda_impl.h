// cuda_impl.h — what the CUDA backend's files share (not part of the backend interface): the
// context (device, compute stream, cuBLAS handles, scratch buffers), error checks, and the
// kernel launchers that the .cu files export with C linkage. Host files are C11; the .cu files
// hold kernels and their launchers only.
//
// Pointers: every float* a launcher takes is device memory. Token and target arrays arrive
// from the model as host memory (Workspace.tokens) and are uploaded here (cu_ints).
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

// The precision of matrix products: fp32 (no TF32), or bf16 / fp16 operands with fp32
// accumulation, fp32 master weights, moments and activations. "Half" below is the 16-bit type
// of the context: fp16 under CU_FP16, bf16 otherwise.
typedef enum { CU_FP32, CU_BF16, CU_FP16 } CuDtype;

typedef struct {
    int device, sms, cc_major, cc_minor;
    char name[256];
    cudaStream_t stream; // every kernel, copy and cuBLAS call runs on it, in order
    CuDtype dtype;
} CuCtx;

extern CuCtx cu_ctx;

// Fatal unless e == cudaSuccess: prints what failed and exits (EXIT_IO).
void cu_check(cudaError_t e, const char *what, const char *file, int line);
#define CU(x) cu_check((x), #x, __FILE__, __LINE__)
// After a kernel launch: launch-configuration errors surface here.
#define CU_LAUNCHED(name) cu_check(cudaGetLastError(), name, __FILE__, __LINE__)

// Device memory (cuda_mem.c): cudaMalloc / cudaFree that keep count of the bytes the backend
// holds and their high-water mark. Every device allocation of the backend goes through these.
cudaError_t cu_malloc(void **p, size_t bytes);
void cu_free(void *p);
size_t cu_mem_held(void);
size_t cu_mem_peak(void);

// Makes the process's GPU this thread's current device (once per thread): the tier's I/O threads
// and comm's progress thread call the copy ops, and a new thread starts on device 0.
void cu_thread_device(void);
// The copy stream (cuda_copy.c): backend.h's host_alloc, host_free, copy_async, copy_wait and
// copy_done.
void *cu_host_alloc(size_t bytes);
void cu_host_free(void *p);
uint64_t cu_copy_async(void *dst, const void *src, size_t bytes);
void cu_copy_wait(uint64_t ticket);
int cu_copy_done(uint64_t ticket);

// Collectives between devices (cuda_nccl.c): backend.h's coll_* ops over NCCL, loaded at run
// time; cu_nccl_name its version once loaded ("NCCL 2.28.3").
extern char cu_nccl_name[64];
int cu_coll_usable(void);
void cu_coll_device(char *key, size_t n);
int cu_coll_id(unsigned char *id);
void *cu_coll_open(const unsigned char *id, int n, int rank);
uint64_t cu_coll_fence(void);
uint64_t cu_coll_allreduce(void *c, uint64_t fence, void *buf, size_t n, int dtype, int op);
uint64_t cu_coll_bcast(void *c, uint64_t fence, void *buf, size_t n, int dtype, int root);
uint64_t cu_coll_reduce(void *c, const float *send, float *recv, size_t n, int root);
void cu_coll_group_begin(void *c, uint64_t fence);
uint64_t cu_coll_group_end(void *c);
int cu_coll_test(void *c, uint64_t ticket);
void cu_coll_abort(void *c);
void cu_coll_close(void *c);

// Scratch device memory, one growable buffer per slot (stream-ordered users only: a slot's
// previous contents are dead once a later op on the stream asks for it).
enum {
    SCR_INTS,
    SCR_PART,
    SCR_ATT,
    SCR_RED,
    SCR_BF_A,
    SCR_BF_B,
    SCR_BF_OUT,
    SCR_FLASH,
    SCR_ROPE,       // RoPE's positions and inverse frequencies, uploaded per call
    SCR_GQA,        // grouped-query attention on the flash kernels: the MHA rows (B,T,3C)
    SCR_GQA_D,      // and their gradient
    SCR_FLASH_DQKV, // the flash backward's fp32 dqkv under LOOM_CUDA_FLASH_DQ=atomic, when bf16 is
                    // wanted
    SCR_BGRAD,      // a bias gradient from a product's epilogue, before it is added (cuda_fused.c)
    SCR_ADAM,       // adamw_multi's table of pieces
    SCR_QKV32,      // a marked qkv as fp32, for the batched-product attention
    SCR_DOUT,       // the attention's dout converted to the type its qkv has
    SCR_SLOTS
};
void *cu_scratch(int slot, size_t bytes);
// Σ of N device floats (the classifier's losses), added in order on the host as the CPU
// backend adds them; synchronizes.
double cu_sum_losses(const float *losses, int N);
// Uploads n host ints into scratch slot `slot` (SCR_INTS by default); returns the device copy.
int *cu_ints(const int *host, size_t n);

// Half operands (cuda_bf16.c: bf16, or fp16 under CU_FP16). cu_gen changes whenever parameters
// may have changed (every op that is not a model kernel bumps it); a weight's copy is
// reconverted when it is stale.
extern unsigned cu_gen;
// Bumps cu_gen atomically (the progress thread's staged copies bump it too) and reads it.
static inline void cu_gen_bump(void) { __atomic_fetch_add(&cu_gen, 1u, __ATOMIC_RELAXED); }
static inline unsigned cu_gen_now(void) { return __atomic_load_n(&cu_gen, __ATOMIC_RELAXED); }
// w (rows, cols) row-major as bf16, followed by prows − rows zero rows (prows ≥ rows)
const void *cu_bf16_weight(const float *w, size_t rows, size_t cols, size_t prows);
const void *cu_bf16_act(int slot, const float *x, size_t n); // converted into scratch `slot`
void cu_bf16_flush(void);                                    // drops every cached copy

// 16-bit activations (cuda_act16.c): tensors the model marked (Backend.act16_mark) hold bf16.
// cu_act16(p): p is the first element of a marked tensor. cu_act16_drop: every mark inside
// [p, p + bytes) is gone (its buffer is released). cu_act16_enabled: Backend.act16's bits as
// LOOM_CUDA_ACT16 says (unset: ACT16_INPUTS; 0: none; qkv, fch, all: ACT16_QKV, ACT16_FCH too).
void cu_act16_mark(const float *p, size_t n);
int cu_act16(const void *p);
void cu_act16_drop(const void *p, size_t bytes);
int cu_act16_enabled(void);
// The bytes of a live cu_malloc allocation starting at p (0: none).
size_t cu_mem_size(const void *p);

// 1 when word is one of the words of list (separated by ',' or '+': "gelu+ln" passes through
// bench_gpu.sh's variants, whose ',' separates variables); a NULL list has none. For the
// LOOM_CUDA_* switches that take a list.
static inline int cu_list_has(const char *list, const char *word) {
    size_t w = strlen(word);
    for (const char *p = list ? list : ""; *p;) {
        size_t n = strcspn(p, ",+");
        if (n == w && !strncmp(p, word, n)) return 1;
        p += n + (p[n] != 0);
    }
    return 0;
}

// Fused ops (cuda_fused.c): cu_fuse says whether LOOM_CUDA_FUSE picked one. cu_dw_product: dw
// (OC,C) += dᵀ·x for 16-bit x (N,C) and d (N, leading dimension P ≥ OC: dout rounded, or
// dout itself when it is marked), and with dbias (then P = OC) dbias (OC) += Σ_n dout: in the
// product's epilogue where bgrad is picked and cuBLASLt can, else by the column sums of dout.
enum { CU_FUSE_GELU = 1, CU_FUSE_LN = 2, CU_FUSE_BGRAD = 4 };
int cu_fuse(int what);
void cu_dw_product(float *dw, float *dbias, const float *dout, const void *x, const void *d, int N,
                   int C, int OC, int P);

// Opt-in per-op device timing (cuda_prof.c, LOOM_CUDA_PROFILE=1): brackets around each op.
enum {
    PROF_ENC_F,
    PROF_ENC_B,
    PROF_LN_F,
    PROF_LN_B,
    PROF_MM_F,
    PROF_MM_B,
    PROF_ATT_F,
    PROF_ATT_B,
    PROF_GELU_F,
    PROF_GELU_B,
    PROF_RES,
    PROF_XENT_F,
    PROF_XENT_B,
    PROF_ADAMW,
    PROF_RED,
    PROF_RMS_F,
    PROF_RMS_B,
    PROF_ROPE,
    PROF_SWIGLU_F,
    PROF_SWIGLU_B,
    PROF_OPS
};
void cu_prof_begin(int op);
void cu_prof_end(int op);

// ---- k_ew.cu: element-wise and reductions
void k_fill(float *x, float v, size_t n);
void k_scale(float *x, float s, size_t n);
void k_axpby(float *y, float a, const float *x, float b, size_t n);
void k_sub_scaled(float *out, const float *a, const float *b, float s, size_t n);
void k_copy_scaled(float *dst, const float *src, float s, size_t n);
void k_clamp(float *x, float lo, float hi, size_t n);
void k_residual(float *out, const float *a, const float *b, size_t n);
void k_gelu_forward(float *out, const float *inp, size_t n);
void k_gelu_forward16(void *out, const float *inp, size_t n); // out bf16
void k_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void k_gelu_backward16(void *dinp, const float *inp, const float *dout, size_t n); // dinp bf16
// the same from a bf16 inp (a marked GELU input, ACT16_FCH); out16 / dinp16: bf16 outputs
void k_gelu_forward_b16(void *out, int out16, const void *inp, size_t n);
void k_gelu_backward_b16(void *dinp, int dinp16, const void *inp, const float *dout, size_t n);
void k_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
             float eps, float wd, float gscale, float bc1, float bc2);
// adamw over pieces (device table: start = the piece's first index in the concatenation of the
// pieces, off = its element offset in the arrays), total = Σ n
typedef struct {
    size_t start, off;
    float wd;
} KAdamPiece;
void k_adamw_multi(float *p, const float *g, float *m, float *v, const KAdamPiece *pc_dev, int np,
                   size_t total, float lr, float b1, float b2, float eps, float gscale, float bc1,
                   float bc2);
// nonzero written to *flag_dev (int) when x holds a NaN or inf
void k_nonfinite(int *flag_dev, const float *x, size_t n);
// dst (n bf16) = src rounded to bf16; k_from_bf16: back to fp32 (exact)
void k_to_bf16(void *dst, const float *src, size_t n);
void k_from_bf16(float *dst, const void *src, size_t n);
// dst (rows, pcols) bf16 = src (rows, cols) fp32, zero in columns cols..pcols-1
void k_to_bf16_pad(void *dst, const float *src, size_t rows, size_t cols, size_t pcols);
// k_half.cu: the same into the context's half type (fp16 under CU_FP16, else bf16)
void k_to_half(void *dst, const float *src, size_t n);
void k_to_half_pad(void *dst, const float *src, size_t rows, size_t cols, size_t pcols);
// part_dev[k] = Σ x² over grid block k's grid-stride share, K_SUMSQ_BLOCKS doubles
enum { K_SUMSQ_BLOCKS = 1024 };
void k_sumsq_part(double *part_dev, const float *x, size_t n);
// out_dev[k] = Σ x² over chunk k (ceil(n/chunk) doubles)
void k_sumsq_chunks(double *out_dev, const float *x, size_t n, size_t chunk);

// ---- k_nn.cu: the model's kernels
void k_encoder_forward(float *out, const int *tok, const float *wte, const float *wpe, int B, int T,
                       int C);
void k_encoder_backward_wpe(float *dwpe, const float *dout, int B, int T, int C);
// groups: U distinct tokens; ids[U], start[U+1], perm[BT] (positions sorted by token)
void k_encoder_backward_wte(float *dwte, const float *dout, const int *ids, const int *start,
                            const int *perm, int U, int C);
void k_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                         const float *b, int N, int C);
void k_layernorm_forward16(void *out, float *mean, float *rstd, const float *inp, const float *w,
                           const float *b, int N, int C); // out bf16
// res (N,C) = a + b, then out = layernorm(res) as k_layernorm_forward (bf16 when out16)
void k_residual_layernorm_forward(float *res, void *out, int out16, float *mean, float *rstd,
                                  const float *a, const float *b, const float *w, const float *bias,
                                  int N, int C);
void k_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, const float *mean, const float *rstd, int N, int C);
void k_bias_rows(float *out, const float *bias, int N, int OC);        // out[n,:] = bias
void k_bias_backward(float *dbias, const float *dout, int N, int OC);  // dbias += Σ_n dout
void k_bias_backward16(float *dbias, const void *dout, int N, int OC); // dout bf16
// losses[n] = -log softmax(row n)[target]; rows become probabilities
void k_softmax_xent_forward(float *lp, float *losses, const int *targets, int N, int V);
void k_softmax_xent_backward(float *pd, const int *targets, float scale, int N, int V);
// A chunk of the classifier: lg (N,P) logits, bf16 when bf, fp32 otherwise, of which the first
// V columns are real; losses[n] = log Σ exp − z[target]; grad: lg becomes (softmax − onehot)·
// scale on the V columns and 0 on the padding.
void k_xent_chunk(void *lg, int bf, float *losses, const int *targets, int N, int V, int P,
                  float scale, int grad);
// causal softmax over rows of att (rows of length T, row r is query r % T), in place
void k_causal_softmax(float *att, size_t rows, int T);
// in place: datt → dpre = att ⊙ (datt − Σ att·datt) on j ≤ t, 0 above the diagonal
void k_causal_softmax_backward(float *datt, const float *att, size_t rows, int T);

// ---- k_flash_fwd.cu, k_flash_bwd.cu: tensor-core causal attention for bf16, head size 64,
// T > 64 (k_flash_ok); qkv16: qkv holds bf16 (a marked qkv) instead of fp32.
// lse (B,NH,T): the forward's per-row log-sum-exps (base 2), read by the backward with the
// forward's out; drow is B·NH·T floats of scratch. dQ is summed by fp32 atomics in the key
// pass, or (LOOM_CUDA_FLASH_DQ=pass) by a second pass over the query tiles without atomics.
int k_flash_ok(int T, int C, int NH);
// out16: out holds bf16 (a marked activation) instead of fp32.
void k_flash_forward(void *out, int out16, float *lse, const void *qkv, int qkv16, int B, int T,
                     int C, int NH);
// dqkv16: dqkv holds bf16 (a marked output gradient) instead of fp32.
// in16: qkv and dout hold bf16 (both marked) instead of fp32.
void k_flash_backward(void *dqkv, int dqkv16, const void *dout, const void *qkv, int in16,
                      const void *out, int out16, const float *lse, float *drow, int B, int T,
                      int C, int NH);

// ---- k_llama.cu: the LLaMA block (semantics in backend.h). RoPE's pos (T ints) and freq
// (hs/2 floats) are device memory here; sign −1 rotates back (the backward). The grouped-query
// attention keeps lse (B,NH,T), the rows' log-sum-exps, for its backward.
void k_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                       float eps);
void k_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                        const float *rstd, int N, int C);
void k_rope(float *qkv, const int *pos_dev, const float *freq_dev, int B, int T, int NH, int NKV,
            int hs, float sign);
void k_swiglu_forward(float *out, const float *inp, int N, int F);
void k_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F);
void k_gqa_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV, int hs);
// k_gqa_expand.cu: the GQA rows as MHA rows (B,T,3C), each kv head repeated for its query
// heads, and the MHA gradient folded back into the GQA layout (dk, dv summed over the group)
void k_gqa_expand(float *full, const float *qkv, int B, int T, int NH, int NKV, int hs);
void k_gqa_fold(float *dqkv, const float *dfull, int B, int T, int NH, int NKV, int hs);
void k_gqa_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                    const float *lse, int B, int T, int NH, int NKV, int hs);

// ---- k_shard.cu: the vocabulary shards (semantics in backend.h); tok and targets are device
// copies here
void k_encoder_forward_shard(float *out, const int *tok, const float *wte, const float *wpe, int v0,
                             int nv, int B, int T, int C);
void k_xent_shard_max(float *mx, const float *logits, int N, int V, int nv);
void k_xent_shard_sum(float *st, const float *logits, const float *mx, const int *targets, int v0,
                      int N, int V, int nv);
void k_xent_shard_finish(float *lp, float *losses, const float *mx, const float *st, int N, int V,
                         int nv);
void k_xent_shard_backward(float *pd, const int *targets, int v0, float scale, int N, int V,
                           int nv);

#ifdef __cplusplus
}
#endif
