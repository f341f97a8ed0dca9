// emu.c — the emulated device backend (--device emu): the CPU backend's kernels on buffers the
// host cannot dereference, so the code above the table is tested for the GPU's rule (reach a
// device buffer only through the backend's ops) without a GPU.
//
// Every buffer alloc hands out is a real host block with bit 62 of its address set (bit 54 on
// AArch64): a non-canonical x86-64 address, so a host load or store through it faults at once
// (SIGSEGV or SIGBUS), while pointer arithmetic (p + offset) keeps working (the tag is one high
// bit). Every op decodes its buffers (clears the bit) and calls the CPU backend's op, so it
// computes the CPU's bits exactly:
//   * a kernel's float buffers are decoded strictly: NULL stays NULL, and an untagged pointer
//     is the caller's bug (on a GPU the kernel would read host memory): it dies naming the op;
//   * what backend.h documents as host memory passes as it is: token and target arrays, RoPE's
//     pos and inv_freq, sumsq_chunks' out, the AttnChunk;
//   * upload, download and copy take host or device pointers on either side, like the CUDA
//     backend's cudaMemcpyDefault: a tagged pointer is decoded, any other is left.
// alloc keeps each block's size in a 64-byte header before it, so mem_peak is the high-water mark
// of the bytes the buffers hold (headers not counted), as the CUDA backend's is. The copy stream
// (copy_async) defers each copy until its ticket is waited for: code that uses a buffer with a
// copy in flight computes wrong bits here, as it could on a GPU.
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "backend.h"

#if defined(__aarch64__) // (the top byte is ignored there: TBI; bit 54 is past any VA size)
#define TAG ((uintptr_t)1 << 54)
#else
#define TAG ((uintptr_t)1 << 62)
#endif
#define HDR 64 // header bytes before a block: keeps xalloc_floats' 64-byte alignment

static inline int tagged(const void *p) { return ((uintptr_t)p & TAG) != 0; }
static inline void *untag(const void *p) { return (void *)((uintptr_t)p & ~TAG); }

// A device buffer argument of op: NULL, or a pointer this backend handed out (or into one); any
// other is the caller's bug (a GPU kernel would read host memory through it).
static void *dev(const void *p, const char *op) {
    if (p && !tagged(p))
        die(EXIT_IO, "emu backend: %s got a host pointer %p (internal error)", op, p);
    return untag(p);
}

#define CPU (backend_cpu())
#define D(p) dev((p), __func__ + 4) // strict: the op's name is the wrapper's without "emu_"
#define S(p) untag(p)               // soft: host or device

// ------------------------------------------------------------------ memory

static _Atomic size_t held, peak;

static float *emu_alloc(size_t n) {
    if (n > SIZE_MAX / sizeof(float) - HDR) die(EXIT_IO, "out of memory allocating %zu floats", n);
    size_t bytes = n * sizeof(float);
    char *p = (char *)xalloc_floats(n + HDR / sizeof(float)); // zeroed
    memcpy(p, &bytes, sizeof bytes);
    size_t now = atomic_fetch_add(&held, bytes) + bytes, top = atomic_load(&peak);
    while (now > top && !atomic_compare_exchange_weak(&peak, &top, now)) {
    }
    return (float *)((uintptr_t)(p + HDR) | TAG);
}
static void emu_release(float *p) {
    char *base = D(p);
    if (!base) return;
    size_t bytes;
    memcpy(&bytes, base - HDR, sizeof bytes);
    atomic_fetch_sub(&held, bytes);
    free(base - HDR);
}
static size_t emu_mem_peak(void) { return atomic_load(&peak); }
static int emu_owns(const void *p) { return tagged(p); }

static size_t emu_mem_used(void) { return atomic_load(&held); }

// The copy stream: a copy runs when its ticket (or a later one) is waited for or asked about,
// not when it is queued, in queue order, so a caller that touches a buffer before waiting for
// its copy sees what a GPU could show it (the old bytes, or its write overwritten).
typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} Copy;
static pthread_mutex_t cmu = PTHREAD_MUTEX_INITIALIZER;
static Copy *cq;
static size_t cq_n, cq_cap;
static uint64_t cq_done, cq_next; // tickets <= cq_done have run; cq_next: the last handed out

static void *emu_host_alloc(size_t bytes) { // zeroed, page-aligned (direct I/O reads into it)
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytes ? bytes : 1))
        die(EXIT_IO, "out of memory allocating %zu bytes of host memory", bytes);
    return memset(p, 0, bytes ? bytes : 1);
}
static void emu_host_free(void *p) { free(p); }
static uint64_t emu_copy_async(void *dst, const void *src, size_t bytes) {
    pthread_mutex_lock(&cmu);
    cq = xgrow(cq, cq_n, &cq_cap, 64, sizeof *cq);
    cq[cq_n++] = (Copy){dst, src, bytes};
    uint64_t t = ++cq_next;
    pthread_mutex_unlock(&cmu);
    return t;
}
static void emu_copy_wait(uint64_t t) {
    pthread_mutex_lock(&cmu);
    size_t k = 0;
    for (; k < cq_n && cq_done < t; k++, cq_done++)
        memcpy(S(cq[k].dst), S(cq[k].src), cq[k].bytes);
    memmove(cq, cq + k, (cq_n - k) * sizeof *cq);
    cq_n -= k;
    pthread_mutex_unlock(&cmu);
}
static int emu_copy_done(uint64_t t) {
    emu_copy_wait(t);
    return 1;
}

static void emu_upload(float *d, const float *s, size_t n) { CPU->upload(S(d), S(s), n); }
static void emu_download(float *d, const float *s, size_t n) { CPU->download(S(d), S(s), n); }
static void emu_copy(float *d, const float *s, size_t n) { CPU->copy(S(d), S(s), n); }
static void emu_copy_rows(float *d, size_t ds, const float *s, size_t ss, size_t rows,
                          size_t cols) {
    CPU->copy_rows(D(d), ds, D(s), ss, rows, cols);
}
static void emu_fill(float *x, float v, size_t n) { CPU->fill(D(x), v, n); }
static void emu_scale(float *x, float s, size_t n) { CPU->scale(D(x), s, n); }
static double emu_sumsq(const float *x, size_t n) { return CPU->sumsq(D(x), n); }
static int emu_all_finite(const float *x, size_t n) { return CPU->all_finite(D(x), n); }
static void emu_sumsq_chunks(const float *x, size_t n, size_t chunk, double *out) {
    CPU->sumsq_chunks(D(x), n, chunk, out); // out: host memory
}
static void emu_axpby(float *y, float a, const float *x, float b, size_t n) {
    CPU->axpby(D(y), a, D(x), b, n);
}
static void emu_sub_scaled(float *out, const float *a, const float *b, float s, size_t n) {
    CPU->sub_scaled(D(out), D(a), D(b), s, n);
}
static void emu_copy_scaled(float *d, const float *s_, float s, size_t n) {
    CPU->copy_scaled(D(d), D(s_), s, n);
}
static void emu_clamp(float *x, float lo, float hi, size_t n) { CPU->clamp(D(x), lo, hi, n); }

// ------------------------------------------------------------------ the GPT block
// (inp, targets: host memory)

static void emu_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe,
                                int B, int T, int C) {
    CPU->encoder_forward(D(out), inp, D(wte), D(wpe), B, T, C);
}
static void emu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B,
                                 int T, int C) {
    CPU->encoder_backward(D(dwte), D(dwpe), D(dout), inp, B, T, C);
}
static void emu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                  const float *w, const float *b, int N, int C) {
    CPU->layernorm_forward(D(out), D(mean), D(rstd), D(inp), D(w), D(b), N, C);
}
static void emu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                   const float *inp, const float *w, const float *mean,
                                   const float *rstd, int N, int C) {
    CPU->layernorm_backward(D(dinp), D(dw), D(db), D(dout), D(inp), D(w), D(mean), D(rstd), N, C);
}
static void emu_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                               int N, int C, int OC) {
    CPU->matmul_forward(D(out), D(inp), D(w), D(bias), N, C, OC);
}
static void emu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                                const float *inp, const float *w, int N, int C, int OC) {
    CPU->matmul_backward(D(dinp), D(dw), D(dbias), D(dout), D(inp), D(w), N, C, OC);
}
static void emu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                                  int NH) {
    CPU->attention_forward(D(out), D(att), D(qkv), B, T, C, NH);
}
static void emu_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                   const float *out, const float *att, int B, int T, int C,
                                   int NH) {
    CPU->attention_backward(D(dqkv), D(dout), D(qkv), D(out), D(att), B, T, C, NH);
}
static size_t emu_attention_saved_floats(int B, int T, int NH, int hs) {
    return CPU->attention_saved_floats(B, T, NH, hs);
}
static void emu_gelu_forward(float *out, const float *inp, size_t n) {
    CPU->gelu_forward(D(out), D(inp), n);
}
static void emu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    CPU->gelu_backward(D(dinp), D(inp), D(dout), n);
}
static void emu_residual_forward(float *out, const float *a, const float *b, size_t n) {
    CPU->residual_forward(D(out), D(a), D(b), n);
}
// The fused ops as the ops they stand for (backend.h), so the model's calls to them run here
static int emu_matmul_gelu_forward(float *out, float *pre, const float *inp, const float *w,
                                   const float *bias, int N, int C, int OC) {
    CPU->matmul_forward(D(pre), D(inp), D(w), D(bias), N, C, OC);
    CPU->gelu_forward(D(out), D(pre), (size_t)N * OC);
    return 1;
}
static int emu_matmul_gelu_backward(float *dpre, float *dw, float *dbias, const float *dout,
                                    const float *gin, const float *pre, const float *w, int N,
                                    int C, int OC) {
    float *dg = xalloc_floats((size_t)N * C); // d(gin): dpre may be gin, which dW reads
    CPU->matmul_backward(dg, D(dw), D(dbias), D(dout), D(gin), D(w), N, C, OC);
    CPU->gelu_backward(D(dpre), D(pre), dg, (size_t)N * C);
    free(dg);
    return 1;
}
static int emu_residual_layernorm_forward(float *res, float *ln, float *mean, float *rstd,
                                          const float *a, const float *b, const float *w,
                                          const float *bias, int N, int C) {
    return CPU->residual_layernorm_forward(D(res), D(ln), D(mean), D(rstd), D(a), D(b), D(w),
                                           D(bias), N, C);
}
static void emu_adamw_multi(float *param, const float *grad, float *m, float *v,
                            const AdamwPiece *pc, int np, float lr, float beta1, float beta2,
                            float eps, float gscale, int t) {
    float *P = D(param), *M = D(m), *V = D(v);
    const float *G = D(grad);
    for (int k = 0; k < np; k++) // (adamw per piece: the bits a device's one launch must give)
        CPU->adamw(P + pc[k].off, G + pc[k].off, M + pc[k].off, V + pc[k].off, pc[k].n, lr, beta1,
                   beta2, eps, pc[k].wd, gscale, t);
}
static double emu_softmax_xent_forward(float *lp, float *losses, const int *targets, int N, int V) {
    return CPU->softmax_xent_forward(D(lp), D(losses), targets, N, V);
}
static void emu_softmax_xent_backward(float *pd, const int *targets, float scale, int N, int V) {
    CPU->softmax_xent_backward(D(pd), targets, scale, N, V);
}
static void emu_adamw(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float wd, float gscale, int t) {
    CPU->adamw(D(param), D(grad), D(m), D(v), n, lr, beta1, beta2, eps, wd, gscale, t);
}

// ------------------------------------------------------------------ ring attention
// (the AttnChunk: host memory)

static void emu_attn_chunk_forward(const AttnChunk *a, float *out, float *lse, const float *q,
                                   const float *k, const float *v) {
    CPU->attn_chunk_forward(a, D(out), D(lse), D(q), D(k), D(v));
}
static void emu_attn_chunk_merge(const AttnChunk *a, float *out, float *lse, const float *ob,
                                 const float *lseb) {
    CPU->attn_chunk_merge(a, D(out), D(lse), D(ob), D(lseb));
}
static void emu_attn_chunk_backward(const AttnChunk *a, float *dq, float *dk, float *dv,
                                    const float *dout, const float *out, const float *lse,
                                    const float *q, const float *k, const float *v) {
    CPU->attn_chunk_backward(a, D(dq), D(dk), D(dv), D(dout), D(out), D(lse), D(q), D(k), D(v));
}

// ------------------------------------------------------------------ the LLaMA block
// (pos, inv_freq: host memory)

static void emu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N,
                                int C, float eps) {
    CPU->rmsnorm_forward(D(out), D(rstd), D(inp), D(w), N, C, eps);
}
static void emu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                                 const float *w, const float *rstd, int N, int C) {
    CPU->rmsnorm_backward(D(dinp), D(dw), D(dout), D(inp), D(w), D(rstd), N, C);
}
static void emu_rope_forward(float *qkv, const int *pos, const float *inv_freq, int B, int T,
                             int NH, int NKV, int hs) {
    CPU->rope_forward(D(qkv), pos, inv_freq, B, T, NH, NKV, hs);
}
static void emu_rope_backward(float *dqkv, const int *pos, const float *inv_freq, int B, int T,
                              int NH, int NKV, int hs) {
    CPU->rope_backward(D(dqkv), pos, inv_freq, B, T, NH, NKV, hs);
}
static void emu_swiglu_forward(float *out, const float *inp, int N, int F) {
    CPU->swiglu_forward(D(out), D(inp), N, F);
}
static void emu_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F) {
    CPU->swiglu_backward(D(dinp), D(inp), D(dout), N, F);
}
static void emu_gqa_attention_forward(float *out, float *att, const float *qkv, int B, int T,
                                      int NH, int NKV, int hs) {
    CPU->gqa_attention_forward(D(out), D(att), D(qkv), B, T, NH, NKV, hs);
}
static void emu_gqa_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                       const float *out, const float *att, int B, int T, int NH,
                                       int NKV, int hs) {
    CPU->gqa_attention_backward(D(dqkv), D(dout), D(qkv), D(out), D(att), B, T, NH, NKV, hs);
}

// ------------------------------------------------------------------ vocabulary shards
// (inp, targets: host memory)

static void emu_encoder_forward_shard(float *out, const int *inp, const float *wte,
                                      const float *wpe, int v0, int nv, int B, int T, int C) {
    CPU->encoder_forward_shard(D(out), inp, D(wte), D(wpe), v0, nv, B, T, C);
}
static void emu_encoder_backward_shard(float *dwte, float *dwpe, const float *dout, const int *inp,
                                       int v0, int nv, int B, int T, int C) {
    CPU->encoder_backward_shard(D(dwte), D(dwpe), D(dout), inp, v0, nv, B, T, C);
}
static void emu_xent_shard_max(float *mx, const float *logits, int N, int V, int nv) {
    CPU->xent_shard_max(D(mx), D(logits), N, V, nv);
}
static void emu_xent_shard_sum(float *st, const float *logits, const float *mx, const int *targets,
                               int v0, int N, int V, int nv) {
    CPU->xent_shard_sum(D(st), D(logits), D(mx), targets, v0, N, V, nv);
}
static double emu_xent_shard_finish(float *lp, float *losses, const float *mx, const float *st,
                                    int N, int V, int nv) {
    return CPU->xent_shard_finish(D(lp), D(losses), D(mx), D(st), N, V, nv);
}
static void emu_xent_shard_backward(float *pd, const int *targets, int v0, float scale, int N,
                                    int V, int nv) {
    CPU->xent_shard_backward(D(pd), targets, v0, scale, N, V, nv);
}

// ------------------------------------------------------------------ split LayerNorm

static void emu_ln_split_stats(float *part, const float *inp, const float *mean, int N, int C) {
    CPU->ln_split_stats(D(part), D(inp), D(mean), N, C);
}
static void emu_ln_split_apply(float *out, float *rstd, const float *inp, const float *mean,
                               const float *sq, const float *w, const float *b, int N, int C,
                               int Cw) {
    CPU->ln_split_apply(D(out), D(rstd), D(inp), D(mean), D(sq), D(w), D(b), N, C, Cw);
}
static void emu_ln_split_bwd_stats(float *part, const float *dout, const float *inp, const float *w,
                                   const float *mean, const float *rstd, int N, int C) {
    CPU->ln_split_bwd_stats(D(part), D(dout), D(inp), D(w), D(mean), D(rstd), N, C);
}
static void emu_ln_split_backward(float *dinp, float *dw, float *db, const float *dout,
                                  const float *inp, const float *w, const float *mean,
                                  const float *rstd, const float *part, int N, int C, int Cw) {
    CPU->ln_split_backward(D(dinp), D(dw), D(db), D(dout), D(inp), D(w), D(mean), D(rstd), D(part),
                           N, C, Cw);
}

static double emu_peak_gflops(int *threads) { return CPU->peak_gflops(threads); }

// ------------------------------------------------------------------ the table
// Every optional group the CPU backend has, so backend_supports answers as for the CPU except
// BACKEND_HOST_MEMORY. (The CPU has no fused classifier: NULL here too; test_emu checks.)

static const Backend EMU = {
    .name = "emu",
    .precision = "fp32",
    .host_memory = 0,
    .owns = emu_owns,
    .alloc = emu_alloc,
    .release = emu_release,
    .upload = emu_upload,
    .download = emu_download,
    .fill = emu_fill,
    .copy = emu_copy,
    .copy_rows = emu_copy_rows,
    .scale = emu_scale,
    .sumsq = emu_sumsq,
    .all_finite = emu_all_finite,
    .sumsq_chunks = emu_sumsq_chunks,
    .axpby = emu_axpby,
    .sub_scaled = emu_sub_scaled,
    .copy_scaled = emu_copy_scaled,
    .clamp = emu_clamp,
    .encoder_forward = emu_encoder_forward,
    .encoder_backward = emu_encoder_backward,
    .layernorm_forward = emu_layernorm_forward,
    .layernorm_backward = emu_layernorm_backward,
    .matmul_forward = emu_matmul_forward,
    .matmul_backward = emu_matmul_backward,
    .attention_forward = emu_attention_forward,
    .attention_backward = emu_attention_backward,
    .attention_saved_floats = emu_attention_saved_floats,
    .attn_chunk_forward = emu_attn_chunk_forward,
    .attn_chunk_merge = emu_attn_chunk_merge,
    .attn_chunk_backward = emu_attn_chunk_backward,
    .gelu_forward = emu_gelu_forward,
    .gelu_backward = emu_gelu_backward,
    .residual_forward = emu_residual_forward,
    .matmul_gelu_forward = emu_matmul_gelu_forward,
    .matmul_gelu_backward = emu_matmul_gelu_backward,
    .residual_layernorm_forward = emu_residual_layernorm_forward,
    .softmax_xent_forward = emu_softmax_xent_forward,
    .softmax_xent_backward = emu_softmax_xent_backward,
    .rmsnorm_forward = emu_rmsnorm_forward,
    .rmsnorm_backward = emu_rmsnorm_backward,
    .rope_forward = emu_rope_forward,
    .rope_backward = emu_rope_backward,
    .swiglu_forward = emu_swiglu_forward,
    .swiglu_backward = emu_swiglu_backward,
    .gqa_attention_forward = emu_gqa_attention_forward,
    .gqa_attention_backward = emu_gqa_attention_backward,
    .encoder_forward_shard = emu_encoder_forward_shard,
    .encoder_backward_shard = emu_encoder_backward_shard,
    .xent_shard_max = emu_xent_shard_max,
    .xent_shard_sum = emu_xent_shard_sum,
    .xent_shard_finish = emu_xent_shard_finish,
    .xent_shard_backward = emu_xent_shard_backward,
    .ln_split_stats = emu_ln_split_stats,
    .ln_split_apply = emu_ln_split_apply,
    .ln_split_bwd_stats = emu_ln_split_bwd_stats,
    .ln_split_backward = emu_ln_split_backward,
    .adamw = emu_adamw,
    .adamw_multi = emu_adamw_multi,
    .peak_gflops = emu_peak_gflops,
    .mem_peak = emu_mem_peak,
    .host_alloc = emu_host_alloc,
    .host_free = emu_host_free,
    .copy_async = emu_copy_async,
    .copy_wait = emu_copy_wait,
    .copy_done = emu_copy_done,
    .mem_used = emu_mem_used,
};

const Backend *backend_emu(void) { return &EMU; }
