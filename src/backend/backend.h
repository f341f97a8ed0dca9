// backend.h — the kernel table. Model code calls kernels only through a Backend, so the same
// blocks run on the CPU (cpu.c: CBLAS + OpenMP) or, later, a GPU backend.
//
// Conventions (shared by every backend):
//   * all tensors are row-major float32; B batch, T time, C channels, NH heads, V vocab.
//   * linear weights are (OC, C): out = inp · wᵀ + bias (PyTorch nn.Linear layout).
//   * parameter gradients are ACCUMULATED (+=) so gradient accumulation is free; activation
//     gradients are OVERWRITTEN unless the kernel says it accumulates.
#pragma once
#include <stddef.h>
#include <stdint.h>

// One chunk pair of ring attention (context parallelism): a chunk of `rows` queries against a
// chunk of `rows` keys, per batch element. Every buffer holds, per batch element, `tb` rows of
// which the chunk is `rows` consecutive ones (pointers are at the chunk's first row of batch
// element 0): q row (b,t) at q + (b·tb + t)·qs, k/v rows at stride kvs, out and dout rows at
// stride C, lse (B,NH,tb) at (b·NH + h)·tb + t. mode: where the key chunk lies against the
// query chunk by global position. Grouped-query attention (KV < NH kv heads): query head h reads
// kv head h / (NH/KV), at column (h / (NH/KV))·hs of the k and v rows.
enum { ATT_CHUNK_FULL, ATT_CHUNK_DIAG, ATT_CHUNK_NONE }; // keys before / the same / after
typedef struct {
    int B, NH, C; // batch, heads, channels (C = NH·hs)
    int rows, tb; // rows of the chunk; rows a batch element spans in every buffer
    int qs, kvs;  // row strides of q and of k, v (floats)
    int mode; // ATT_CHUNK_*: full (every key visible), causal diagonal (key j ≤ query t), none
    int KV;   // kv heads, dividing NH (0: NH, plain multi-head attention)
} AttnChunk;

// One piece of a multi-tensor AdamW step (Backend.adamw_multi): n elements at element offset off
// of the four arrays, weight decay wd.
typedef struct {
    size_t off, n;
    float wd;
} AdamwPiece;

enum { ACT16_INPUTS = 1, ACT16_QKV = 2, ACT16_FCH = 4 }; // Backend.act16's bits

typedef struct Backend {
    const char *name;
    const char *precision; // the products' precision ("fp32", "bf16"; NULL: the device's)
    int host_memory; // 1: its buffers are host memory (code may read them through the pointer)
    // 1 when p points into this backend's device memory (NULL in a host-memory backend): what
    // code that holds either kind of pointer asks before reading one on the host
    int (*owns)(const void *p);

    // ---- memory (device buffers; on the CPU these are host buffers)
    float *(*alloc)(size_t n); // zeroed
    void (*release)(float *p);
    void (*upload)(float *dst, const float *host_src, size_t n);
    void (*download)(float *host_dst, const float *src, size_t n);
    void (*fill)(float *x, float v, size_t n);
    void (*copy)(float *dst, const float *src, size_t n);
    // dst[r·ds + c] = src[r·ss + c] for r < rows, c < cols: a strided 2-D copy (columns of a
    // row-major matrix, e.g. the K,V columns of qkv rows; cudaMemcpy2D on a GPU)
    void (*copy_rows)(float *dst, size_t ds, const float *src, size_t ss, size_t rows, size_t cols);
    void (*scale)(float *x, float s, size_t n);
    double (*sumsq)(const float *x, size_t n);   // Σ x² in double
    int (*all_finite)(const float *x, size_t n); // 1 when no NaN/inf
    // out[k] = Σ x² over x[k·chunk, min(n, (k+1)·chunk)) in double, each chunk summed in a
    // fixed order (so the value does not depend on the thread count or on who computes it)
    void (*sumsq_chunks)(const float *x, size_t n, size_t chunk, double *out);
    // element-wise vector ops for the strategies (CO2's outer step, ZeRO's shard sums)
    void (*axpby)(float *y, float a, const float *x, float b, size_t n); // y = a·x + b·y
    // out = (a − b)·s (out may be a or b)
    void (*sub_scaled)(float *out, const float *a, const float *b, float s, size_t n);
    void (*copy_scaled)(float *dst, const float *src, float s, size_t n); // dst = s·src
    void (*clamp)(float *x, float lo, float hi, size_t n);                // x = min(max(x,lo),hi)

    // ---- kernels
    // out (B,T,C) = wte[inp] + wpe[t]
    void (*encoder_forward)(float *out, const int *inp, const float *wte, const float *wpe, int B,
                            int T, int C);
    // dwte (V,C) += scatter of dout; dwpe (maxT,C) += Σ_b dout
    void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int *inp, int B,
                             int T, int C);
    // out (N,C), mean (N), rstd (N) = layernorm(inp (N,C)) · w + b, eps 1e-5
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C);
    // dinp (N,C) += ..., dw (C) += ..., db (C) += ...
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C);
    // out (N,OC) = inp (N,C) · w (OC,C)ᵀ + bias (OC) (bias may be NULL)
    void (*matmul_forward)(float *out, const float *inp, const float *w, const float *bias, int N,
                           int C, int OC);
    // dinp (N,C) = dout · w (overwritten; skipped when dinp is NULL),
    // dw (OC,C) += doutᵀ · inp, dbias (OC) += Σ_n dout (skipped when NULL)
    void (*matmul_backward)(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int C, int OC);
    // causal self-attention. qkv (B,T,3C) → out (B,T,C). att is what the backward needs
    // besides qkv and out, attention_saved_floats(B,T,NH,hs) floats (hs = C/NH), opaque to the
    // model: the CPU keeps the per-row log-sum-exp (B,NH,T) (the softmax (B,NH,T,T) while
    // T ≤ 96); CUDA the softmax (B,NH,T,T) on its batched-product path, the log-sum-exps
    // (B,NH,T) on its flash path (bf16, hs 64).
    void (*attention_forward)(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH);
    // dqkv (B,T,3C) overwritten from dout (B,T,C); out and att as the forward left them
    void (*attention_backward)(float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *att, int B, int T, int C, int NH);
    // floats of the forward's att for a (B,T) micro-batch with NH heads of size hs (in the
    // backend's precision: the path a backend takes can depend on both)
    size_t (*attention_saved_floats)(int B, int T, int NH, int hs);
    // ---- ring attention (context parallelism; NULL in a backend without it): see AttnChunk.
    // out (chunk rows, stride C) and lse = the chunk pair's attention alone (overwritten; a row
    // that sees no key: out 0, lse −inf)
    void (*attn_chunk_forward)(const AttnChunk *a, float *out, float *lse, const float *q,
                               const float *k, const float *v);
    // online-softmax merge of a partial (ob, lseb) into (out, lse), both the chunk's rows:
    // out = (e^lse·out + e^lseb·ob) / (e^lse + e^lseb), lse = log(e^lse + e^lseb)
    void (*attn_chunk_merge)(const AttnChunk *a, float *out, float *lse, const float *ob,
                             const float *lseb);
    // dq, dk, dv += the chunk pair's share of the gradient given dout and the FINAL out and lse
    // of the query rows (merged over every key chunk)
    void (*attn_chunk_backward)(const AttnChunk *a, float *dq, float *dk, float *dv,
                                const float *dout, const float *out, const float *lse,
                                const float *q, const float *k, const float *v);
    // GELU, tanh approximation, elementwise over n
    void (*gelu_forward)(float *out, const float *inp, size_t n);
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
    // out = a + b
    void (*residual_forward)(float *out, const float *a, const float *b, size_t n);
    // logits (N,V) are replaced by softmax probabilities; losses (N) = -log p[target].
    // Returns Σ losses (double). targets must be in [0,V).
    double (*softmax_xent_forward)(float *logits_probs, float *losses, const int *targets, int N,
                                   int V);
    // in place: probs (N,V) → dlogits = (probs − onehot(target)) · scale
    void (*softmax_xent_backward)(float *probs_dlogits, const int *targets, float scale, int N,
                                  int V);
    // ---- fused ops (NULL in a backend without them). Each returns 1 when it did the work, or
    // 0 having written nothing when it cannot fuse this call; the model then runs the ops it
    // stands for one by one.
    // pre (N,OC) = inp (N,C) · w (OC,C)ᵀ + bias, out (N,OC) = gelu(pre): matmul_forward, then
    // gelu_forward (the MLP's up product)
    int (*matmul_gelu_forward)(float *out, float *pre, const float *inp, const float *w,
                               const float *bias, int N, int C, int OC);
    // the backward of y = gin·wᵀ + bias where gin (N,C) = gelu(pre): dw (OC,C) += doutᵀ·gin,
    // dbias (OC) += Σ_n dout, then dpre (N,C) = (dout·w) ∘ gelu'(pre), overwritten:
    // matmul_backward, then gelu_backward. dpre may be gin (read before it is written).
    int (*matmul_gelu_backward)(float *dpre, float *dw, float *dbias, const float *dout,
                                const float *gin, const float *pre, const float *w, int N, int C,
                                int OC);
    // res (N,C) = a + b (res may be a or b), then ln (N,C), mean, rstd (N) = layernorm(res) · w
    // + bias: residual_forward, then layernorm_forward
    int (*residual_layernorm_forward)(float *res, float *ln, float *mean, float *rstd,
                                      const float *a, const float *b, const float *w,
                                      const float *bias, int N, int C);
    // ---- the classifier without the (N,V) logits (NULL in a backend without it): logits =
    // x (N,C) · wte (V,C)ᵀ are formed a chunk of rows at a time and never stored whole;
    // losses (N) = −log softmax(logits)[target]; returns Σ losses. With dx non-NULL, also the
    // gradient of scale·Σ losses: dx (N,C) overwritten, dwte (V,C) += (the head's backward
    // calls it again rather than keeping logits). targets must be in [0,V).
    double (*classifier)(float *losses, float *dx, float *dwte, const float *x, const float *wte,
                         const int *targets, float scale, int N, int C, int V);
    // ---- the LLaMA block (NULL in a backend without them; BACKEND_LLAMA)
    // out (N,C), rstd (N) = inp · rstd · w with rstd = 1/sqrt(mean(inp²) + eps) (RMSNorm)
    void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                            float eps);
    // dinp (N,C) += ..., dw (C) += ...
    void (*rmsnorm_backward)(float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, const float *rstd, int N, int C);
    // Rotary position embedding in place on the query and key heads of qkv (B,T,(NH+2·NKV)·hs),
    // Hugging Face's rotate-half convention: within a head, element i < hs/2 pairs with
    // i + hs/2, rotated by angle pos[t]·inv_freq[i]. pos (T): each row's global position (a
    // context-parallel rank's chunks sit where they are in the sequence). backward: the
    // inverse rotation of the same elements of dqkv, in place. pos and inv_freq are host memory
    // (the model's tables; the CUDA backend copies them per call).
    void (*rope_forward)(float *qkv, const int *pos, const float *inv_freq, int B, int T, int NH,
                         int NKV, int hs);
    void (*rope_backward)(float *dqkv, const int *pos, const float *inv_freq, int B, int T, int NH,
                          int NKV, int hs);
    // SwiGLU: inp (N,2F) holds [gate | up] per row; out (N,F) = silu(gate) · up.
    // backward: dinp (N,2F) overwritten from dout (N,F).
    void (*swiglu_forward)(float *out, const float *inp, int N, int F);
    void (*swiglu_backward)(float *dinp, const float *inp, const float *dout, int N, int F);
    // Grouped-query causal attention: qkv (B,T,(NH+2·NKV)·hs) holds NH query heads, then NKV key
    // and NKV value heads (NKV divides NH; query head h attends with kv head h/(NH/NKV)) → out
    // (B,T,NH·hs); att as attention_forward's (attention_saved_floats(B,T,NH)). NKV = NH with
    // hs = C/NH is attention_forward exactly.
    void (*gqa_attention_forward)(float *out, float *att, const float *qkv, int B, int T, int NH,
                                  int NKV, int hs);
    void (*gqa_attention_backward)(float *dqkv, const float *dout, const float *qkv,
                                   const float *out, const float *att, int B, int T, int NH,
                                   int NKV, int hs);
    // ---- vocabulary shards (tensor parallelism; NULL in a backend without them): this rank
    // holds rows [v0, v0+nv) of the vocabulary in a table of V ≥ nv rows (the rest padding).
    // out (B,T,C) = (v0 ≤ tok < v0+nv ? wte[tok−v0] : 0) + (wpe ? wpe[t] : 0)
    void (*encoder_forward_shard)(float *out, const int *inp, const float *wte, const float *wpe,
                                  int v0, int nv, int B, int T, int C);
    // dwte (V,C) += the rows' scatter of dout; dwpe (may be NULL) += Σ_b dout
    void (*encoder_backward_shard)(float *dwte, float *dwpe, const float *dout, const int *inp,
                                   int v0, int nv, int B, int T, int C);
    // The cross-entropy over shards of the logits (N,V): mx (N) = max of the nv real columns
    // (the caller takes the max across shards); st (N,2) = Σ exp(z − mx), the target's logit
    // (0 when another shard holds it; the caller sums both across shards); then the logits
    // become probabilities (padding 0) and losses (N) = log Σ − (z_t − mx): returns Σ losses.
    void (*xent_shard_max)(float *mx, const float *logits, int N, int V, int nv);
    void (*xent_shard_sum)(float *st, const float *logits, const float *mx, const int *targets,
                           int v0, int N, int V, int nv);
    double (*xent_shard_finish)(float *logits_probs, float *losses, const float *mx,
                                const float *st, int N, int V, int nv);
    // in place: probs → (probs − onehot(target − v0)) · scale
    void (*xent_shard_backward)(float *probs_dlogits, const int *targets, int v0, float scale,
                                int N, int V, int nv);
    // ---- split LayerNorm (2D tensor parallelism; NULL in a backend without it): a rank holds
    // C of the row's Cw channels; the caller sums each partial over the row's ranks.
    // part (N) = Σ_c inp (mean NULL), or Σ_c (inp − mean)²
    void (*ln_split_stats)(float *part, const float *inp, const float *mean, int N, int C);
    // rstd (N) = 1/√(sq/Cw + eps); out (N,C) = (inp − mean)·rstd·w + b
    void (*ln_split_apply)(float *out, float *rstd, const float *inp, const float *mean,
                           const float *sq, const float *w, const float *b, int N, int C, int Cw);
    // part (N,2) = Σ_c w·dout, Σ_c w·dout·x̂
    void (*ln_split_bwd_stats)(float *part, const float *dout, const float *inp, const float *w,
                               const float *mean, const float *rstd, int N, int C);
    // dinp (N,C) += ..., dw (C) += ..., db (C) += ... from the row's summed part
    void (*ln_split_backward)(float *dinp, float *dw, float *db, const float *dout,
                              const float *inp, const float *w, const float *mean,
                              const float *rstd, const float *part, int N, int C, int Cw);
    // one AdamW step over n elements. grads are multiplied by grad_scale first (clipping);
    // bias corrections use step t ≥ 1.
    void (*adamw)(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t);
    // adamw over each of npieces pieces (in increasing order, not overlapping) in one call: the
    // same bits as adamw per piece, one launch instead of one a tensor (NULL in a backend
    // without it)
    void (*adamw_multi)(float *param, const float *grad, float *m, float *v,
                        const AdamwPiece *pieces, int npieces, float lr, float beta1, float beta2,
                        float eps, float grad_scale, int t);

    // ---- the device's fp32 peak in GFLOP/s, measured (a short probe: call it once, before the
    // work starts); *threads gets the number of threads it ran on (MFU's denominator)
    double (*peak_gflops)(int *threads);
    // ---- bytes of device memory the backend has held at most so far (its own allocations:
    // buffers, scratch, caches; not the driver's context). NULL in a host-memory backend.
    size_t (*mem_peak)(void);
    // ---- a device's copy stream (BACKEND_COPY_STREAM; NULL in a host-memory backend): the slow
    // tier of block swapping in host memory (offload/tier_host.c). host_alloc: zeroed host memory
    // the device copies to and from at full speed (CUDA: page-locked), released by host_free.
    // copy_async: `bytes` from src to dst, host or device memory on either side, on a stream of
    // its own that first waits for every op queued before the call (what the compute wrote is
    // what is copied; a buffer the compute still reads is not overwritten); returns a ticket
    // (> 0). Copies complete in the order they were queued. copy_wait blocks until the ticket's
    // copy (and every earlier one) is complete; copy_done says so without blocking. mem_used:
    // device bytes the backend holds now (mem_peak's running count).
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
    uint64_t (*copy_async)(void *dst, const void *src, size_t bytes);
    void (*copy_wait)(uint64_t ticket);
    int (*copy_done)(uint64_t ticket);
    size_t (*mem_used)(void);
    // ---- 16-bit activations (act16 0 and act16_mark NULL in a backend that keeps every
    // activation in fp32). With act16, a model may mark tensors whose only readers are the
    // products and the kernels below: act16_mark(p, n) says the n elements at p (a tensor the
    // model allocated for n/2 floats, gpt_act_floats) hold the products' 16-bit type. Then
    // layernorm_forward, gelu_forward and attention_forward write such an out in 16 bits (and
    // gelu_backward such a dinp), and matmul_forward/backward's inp and dout, classifier's x
    // and attention_backward's out are read so: no rounding pass before a product, half the
    // bytes. A mark lasts until the buffer that holds it is released; every other kernel takes
    // fp32 only. act16 is a set of ACT16_* bits: with ACT16_QKV the model may mark the qkv
    // product's output too, which matmul_forward then writes in 16 bits and attention_forward
    // and attention_backward read so (and the attention's output gradient, which
    // matmul_backward then writes as dinp in 16 bits); with ACT16_FCH the fc product's output
    // (GELU's input), which gelu_forward, gelu_backward and the fused GELU ops read so.
    int act16;
    void (*act16_mark)(const float *p, size_t n);
    // ---- collectives between devices (BACKEND_COLLECTIVES; NULL where there is no such
    // library: comm then moves device buffers through host stages). A communicator joins n
    // processes, each with its own device: coll_usable says whether this process may (0; -1 +
    // loom_errmsg naming why: the library does not load); coll_device names the physical device
    // this process computes on (into key[n]: the same in two processes exactly when they share
    // it; CUDA: the host's name and the GPU's PCI bus id), so that comm can refuse ranks that
    // share one (the library needs a device each);
    // coll_id writes a new unique id (COLL_ID_BYTES: one member makes it, comm broadcasts it);
    // coll_open joins member `rank` of n to the communicator of id (every member calls it;
    // NULL + loom_errmsg). coll_fence marks the device's ops queued so far (a fence > 0, any
    // thread); an operation queues on the communicator's own stream after the device's ops
    // before its fence (what they wrote is what moves; the ops queued since do not hold it up:
    // an operation queued later by the progress thread keeps the fence of its collective's
    // start) and returns a ticket (> 0; 0 inside a group, whose coll_group_end returns the
    // ticket of all of it; a group's fence is coll_group_begin's); the ops
    // of a communicator complete in order. coll_test: 1 when the ticket's op (and every
    // earlier one) is complete, 0 not yet, -1 when the communicator failed (loom_errmsg names
    // the library's error). dtype: COLL_F32, COLL_F64 or COLL_BYTES; op: COLL_SUM or COLL_MAX.
    // coll_reduce sums f32 to member root's recv (recv unused elsewhere); coll_bcast is in
    // place; coll_abort ends a communicator that makes no progress (its ops never complete);
    // coll_close, after every op completed.
    const char *coll_name; // the library, for messages ("NCCL 2.27.3" once coll_usable ran)
    int (*coll_usable)(void);
    void (*coll_device)(char *key, size_t n);
    int (*coll_id)(unsigned char *id);
    void *(*coll_open)(const unsigned char *id, int n, int rank);
    uint64_t (*coll_fence)(void);
    uint64_t (*coll_allreduce)(void *c, uint64_t fence, void *buf, size_t n, int dtype, int op);
    uint64_t (*coll_bcast)(void *c, uint64_t fence, void *buf, size_t n, int dtype, int root);
    uint64_t (*coll_reduce)(void *c, const float *send, float *recv, size_t n, int root);
    void (*coll_group_begin)(void *c, uint64_t fence);
    uint64_t (*coll_group_end)(void *c);
    int (*coll_test)(void *c, uint64_t ticket);
    void (*coll_abort)(void *c);
    void (*coll_close)(void *c);
} Backend;

enum { COLL_ID_BYTES = 128 };
enum { COLL_F32, COLL_F64, COLL_BYTES };
enum { COLL_SUM, COLL_MAX };

// What a backend can do beyond the required kernels (ggml's supports_op, by capability): the
// optional groups of the table above, each there or not as a whole, and whether its buffers are
// host memory. Strategies ask this instead of comparing device names (strategy/compose.h).
typedef enum {
    BACKEND_HOST_MEMORY,     // buffers a CPU can read and write directly
    BACKEND_VOCAB_SHARDS,    // encoder_*_shard, xent_shard_* (tensor parallelism)
    BACKEND_RING_ATTENTION,  // attn_chunk_* (context parallelism)
    BACKEND_SPLIT_LAYERNORM, // ln_split_* (2D tensor parallelism)
    BACKEND_LLAMA,           // rmsnorm_*, rope_*, swiglu_*, gqa_attention_* (the LLaMA block)
    BACKEND_COPY_STREAM,     // host_alloc, copy_async, copy_wait, copy_done, mem_used (a device)
    BACKEND_COLLECTIVES,     // coll_* (a collective library between devices: NCCL)
    BACKEND_NCAPS
} BackendCap;
int backend_supports(const Backend *be, BackendCap cap);
// What a capability is, for messages ("ring attention's chunk kernels").
const char *backend_cap_name(BackendCap cap);

// The one place a backend is chosen: "cpu", "emu" (a CUDA build adds "cuda"). threads: CPU threads
// for OpenMP and BLAS (0 = leave the default). NULL, with loom_errmsg naming --device, when the
// device is unknown or not built in. The device may carry a precision: "cuda:fp32".
const Backend *backend_select(const char *device, int threads);
// The backend of host arrays next to a device model (a strategy's own state in host memory,
// e.g. a peer's outer state): the CPU's fp32 kernels, whatever --device chose.
const Backend *backend_host(void);
// The backends themselves (called only by backend_select).
const Backend *backend_cpu(void);
// The emulated device (emu.c, --device emu): the CPU's kernels on buffers whose addresses the
// host cannot dereference (a host access faults at once), for testing device-memory code paths
// without a GPU. fp32 only; threads as the CPU's.
const Backend *backend_emu(void);
// The CPU backend with bf16 products (cpu_bf16.c): call only where cpu_bf16_isa() found
// AVX512-BF16 or AMX-BF16 (backend_select_dtype checks).
const Backend *backend_cpu_bf16(void);
void backend_cpu_set_threads(int n);
// The CPU's fp32 peak in GFLOP/s, measured by a short FMA probe (peak.c, ~30 ms of CPU a
// thread) on every thread OpenMP uses; *threads gets their number. The backend's peak_gflops.
double backend_cpu_peak_gflops(int *threads);

// backend_select with a precision (--dtype): "fp32", "bf16" or "fp16"; NULL is the device's
// default (cpu, emu: fp32; cuda: bf16). The CPU computes in fp32 only: anything else is an error
// there (for bf16 it names AVX512-BF16 and AMX-BF16 when the CPU lacks both: cpu_isa.c); emu
// takes fp32 only.
// A dtype given both here and in the device string must agree.
const Backend *backend_select_dtype(const char *device, const char *dtype, int threads);
// The CUDA backend (only in a `make CUDA=1` build; src/backend/cuda/): matrix products in
// dtype's precision with fp32 accumulation, everything else fp32. NULL, with loom_errmsg, when
// no GPU or driver is usable or the dtype is unknown or unsupported by the GPU.
const Backend *backend_cuda(const char *dtype);
// The chosen GPU's name (NULL before backend_cuda succeeded).
const char *backend_cuda_device_name(void);

// What this build's backends are, for `loom --version`: the devices --device accepts ("cpu emu",
// or "cpu emu cuda" in a CUDA=1 build); the CPU backend's BLAS (OpenBLAS's openblas_get_config: its
// version, build options and the core it chose); the CUDA backend's runtime, driver and cuBLASLt
// versions into out ("" in a build without it; "driver none" on a machine without a driver).
const char *backend_names(void);
const char *backend_blas_version(void);
// The CPU backend's matrix engine for the linear layers (LOOM_MATMUL: openblas, blis, onednn),
// the default, and the BLIS and oneDNN versions, for `loom --version`.
const char *backend_cpu_matmul(void);
void backend_cuda_versions(char *out, size_t n);
