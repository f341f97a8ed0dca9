// cuda_ops.c — the CUDA backend's model kernels behind the Backend table (semantics in
// backend.h): embedding, LayerNorm, linear layers, attention, GELU, residual, the classifier
// and AdamW. Each one launches the kernels of k_nn.cu / k_ew.cu or the products of
// cuda_blas.c on the backend's stream.
//
// Attention keeps the (B,NH,T,T) probabilities in the model's att buffer, as the CPU backend
// does: per batch row, QKᵀ and att·V are strided-batched products over the heads.
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../common.h"
#include "cuda_blas.h"
#include "cuda_impl.h"
#include "cuda_ops.h"

// ------------------------------------------------------------------ embedding

void cuda_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B,
                          int T, int C) {
    cu_prof_begin(PROF_ENC_F);
    k_encoder_forward(out, cu_ints(inp, (size_t)B * T), wte, wpe, B, T, C);
    cu_prof_end(PROF_ENC_F);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

// The token scatter grouped on the host: positions sorted by (token, position), one GPU
// block per distinct token adds its rows in position order (no atomics, the CPU's order).
// Only tokens in [v0, v0+nv) count, into row token − v0 of dwte.
void cu_token_scatter(float *dwte, const float *dout, const int *inp, size_t BT, int C, int v0,
                      int nv) {
    uint64_t *key = xmalloc((BT ? BT : 1) * sizeof *key);
    size_t n = 0;
    for (size_t i = 0; i < BT; i++) {
        long tok = (long)inp[i] - v0;
        if (tok >= 0 && tok < nv) key[n++] = (uint64_t)(uint32_t)tok << 32 | i;
    }
    if (!n) {
        free(key);
        return;
    }
    qsort(key, n, sizeof *key, cmp_u64);
    // one int array: ids[U] | start[U+1] | perm[n], U ≤ n
    int *host = xmalloc((3 * n + 1) * sizeof(int)), *perm = host + 2 * n + 1;
    int U = 0;
    for (size_t i = 0; i < n; i++) {
        int tok = (int)(key[i] >> 32);
        if (!i || tok != (int)(key[i - 1] >> 32)) host[U++] = tok;
        perm[i] = (int)(uint32_t)key[i];
    }
    int *start = host + U; // starts follow the ids directly, then perm is moved after them
    for (size_t i = 0, u = 0; i < n; i++)
        if (!i || (key[i] >> 32) != (key[i - 1] >> 32)) start[u++] = (int)i;
    start[U] = (int)n;
    memmove(start + U + 1, perm, n * sizeof(int));
    int *dev = cu_ints(host, (size_t)2 * U + 1 + n);
    k_encoder_backward_wte(dwte, dout, dev, dev + U, dev + 2 * U + 1, U, C);
    free(host);
    free(key);
}

void cuda_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B,
                           int T, int C) {
    cu_prof_begin(PROF_ENC_B);
    k_encoder_backward_wpe(dwpe, dout, B, T, C);
    cu_token_scatter(dwte, dout, inp, (size_t)B * T, C, 0, INT_MAX);
    cu_prof_end(PROF_ENC_B);
}

// ------------------------------------------------------------------ layernorm

void cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                            const float *b, int N, int C) {
    cu_prof_begin(PROF_LN_F);
    if (cu_act16(out)) // a product's input kept in bf16
        k_layernorm_forward16(out, mean, rstd, inp, w, b, N, C);
    else
        k_layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    cu_prof_end(PROF_LN_F);
}

void cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                             const float *w, const float *mean, const float *rstd, int N, int C) {
    cu_prof_begin(PROF_LN_B);
    k_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    cu_prof_end(PROF_LN_B);
}

// ------------------------------------------------------------------ matmul
// Row-major out (N,OC) is column-major (OC,N): out = W·inpᵀ in cuBLAS terms, W (OC,C)
// row-major being the transposed operand.

// In bf16 (and fp16: the context's half type) the products read the weight's cached 16-bit
// copy and the activations rounded into scratch, accumulate in fp32 and write the fp32 outputs. An
// output width OC that is not a multiple of 8 (GPT-2's vocabulary, 50257) leaves every column of
// the product misaligned and cuBLASLt on slow kernels (97 TFLOP/s on an H100 for the LM head,
// 480-840 for the others), so a bias-free product of such a width runs padded to a multiple of 64
// (zero weight rows, zero gradient columns; llm.c pads its vocabulary the same way), in chunks of
// PAD_ROWS rows: the forward's chunk is copied out of padded scratch, the backward rounds a chunk
// of the output gradient into padded 16-bit scratch. The scratch then stays at PAD_ROWS rows (412
// MiB for GPT-2's head) however many rows the micro-batch has.
enum { PAD_ROWS = 2048 };
// the products' 16-bit path: bf16, or fp16 (the same code; the half type is the context's)
static int half_mode(void) { return cu_ctx.dtype == CU_BF16 || cu_ctx.dtype == CU_FP16; }
static int pad_to(int OC, int has_bias) { return OC % 8 && !has_bias ? (OC + 63) / 64 * 64 : OC; }

static void half_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                         int C, int OC) {
    const void *x = cu_bf16_act(SCR_BF_A, inp, (size_t)N * C);
    int P = pad_to(OC, bias != NULL);
    const void *wb = cu_bf16_weight(w, (size_t)OC, (size_t)C, (size_t)P);
    if (P == OC && cu_act16(out)) { // a marked out (the qkv product's: ACT16_QKV) gets bf16
        if (cb_matmul_ep(CB_EP_NONE, 1, 0, OC, N, C, wb, C, x, C, out, OC, 0.0f, (void *)bias, NULL,
                         0, CB_BF16_AB | CB_BF16_C, 0))
            return;
        float *o = cu_scratch(SCR_BF_OUT, (size_t)N * OC * sizeof(float)); // no such plan here
        cb_matmul(1, 0, OC, N, C, wb, C, x, C, o, OC, 0.0f, bias, CB_BF16_AB);
        k_to_bf16(out, o, (size_t)N * OC);
        return;
    }
    if (P == OC) {
        cb_matmul(1, 0, OC, N, C, wb, C, x, C, out, OC, 0.0f, bias, CB_BF16_AB);
        return;
    }
    if (cu_act16(out)) die(EXIT_IO, "CUDA: a 16-bit product output that needs padding (internal)");
    int R = N < PAD_ROWS ? N : PAD_ROWS;
    float *o = cu_scratch(SCR_BF_OUT, (size_t)P * R * sizeof(float));
    for (int n0 = 0; n0 < N; n0 += R) {
        int nr = N - n0 < R ? N - n0 : R;
        cb_matmul(1, 0, P, nr, C, wb, C, (const char *)x + (size_t)n0 * C * 2, C, o, P, 0.0f, NULL,
                  CB_BF16_AB);
        CU(cudaMemcpy2DAsync(out + (size_t)n0 * OC, (size_t)OC * sizeof(float), o,
                             (size_t)P * sizeof(float), (size_t)OC * sizeof(float), (size_t)nr,
                             cudaMemcpyDeviceToDevice, cu_ctx.stream));
    }
}

// A marked dout (cuda_act16.c: bf16 already, a width that needs no padding) is read in place; a
// marked dinp (the attention's output gradient under ACT16_QKV) is written in bf16. dbias (then
// P = OC: one chunk) is summed by cu_dw_product.
static void half_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                          const float *w, int N, int C, int OC) {
    int P = pad_to(OC, dbias != NULL), R = P == OC || N < PAD_ROWS ? N : PAD_ROWS,
        d16 = cu_act16(dout);
    int i16 = dinp && cu_act16(dinp) ? CB_BF16_C : 0;
    if ((d16 && P != OC) || (i16 && R != N))
        die(EXIT_IO, "CUDA: a 16-bit output gradient needs padding (internal error)");
    const char *x = cu_bf16_act(SCR_BF_B, inp, (size_t)N * C);
    const void *wb = dinp ? cu_bf16_weight(w, (size_t)OC, (size_t)C, (size_t)P) : NULL;
    // a chunk of dout (R,P), zero past OC
    char *d = d16 ? (char *)dout : cu_scratch(SCR_BF_A, (size_t)R * P * 2);
    for (int n0 = 0; n0 < N; n0 += R) {
        int nr = N - n0 < R ? N - n0 : R;
        if (!d16) // (a marked dout is one chunk: R = N)
            k_to_half_pad(d, dout + (size_t)n0 * OC, (size_t)nr, (size_t)OC, (size_t)P);
        if (dinp) // (a marked dinp is one chunk: R = N)
            cb_matmul(0, 0, C, nr, P, wb, C, d, P, dinp + (size_t)n0 * C, C, 0.0f, NULL,
                      CB_BF16_AB | i16);
        if (R == N) // (one chunk, and the bias's if there is one)
            cu_dw_product(dw, dbias, dout, x, d, N, C, OC, P);
        else
            cb_matmul(0, 1, C, OC, nr, x + (size_t)n0 * C * 2, C, d, P, dw, C, 1.0f, NULL,
                      CB_BF16_AB);
    }
}

void cuda_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                         int C, int OC) {
    cu_prof_begin(PROF_MM_F);
    if (half_mode())
        half_forward(out, inp, w, bias, N, C, OC);
    else if (cu_act16(inp))
        die(EXIT_IO, "CUDA: an fp32 product read a 16-bit activation (internal error)");
    else
        cb_matmul(1, 0, OC, N, C, w, C, inp, C, out, OC, 0.0f, bias, 0);
    cu_prof_end(PROF_MM_F);
}

void cuda_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                          const float *w, int N, int C, int OC) {
    cu_prof_begin(PROF_MM_B);
    if (half_mode()) {
        half_backward(dinp, dw, dbias, dout, inp, w, N, C, OC);
    } else {
        if (cu_act16(inp) || cu_act16(dout) || (dinp && cu_act16(dinp)))
            die(EXIT_IO, "CUDA: an fp32 product read a 16-bit activation (internal error)");
        if (dinp) // dinp (N,C) = dout·W: column-major (C,N) = Wᶜᵐ(C,OC) · doutᶜᵐ(OC,N)
            cb_matmul(0, 0, C, N, OC, w, C, dout, OC, dinp, C, 0.0f, NULL, 0);
        // dW (OC,C) += doutᵀ·inp: column-major (C,OC) += inpᶜᵐ(C,N) · (doutᶜᵐ)ᵀ(N,OC)
        cb_matmul(0, 1, C, OC, N, inp, C, dout, OC, dw, C, 1.0f, NULL, 0);
        if (dbias) k_bias_backward(dbias, dout, N, OC);
    }
    cu_prof_end(PROF_MM_B);
}

// ------------------------------------------------------------------ attention
// Per batch row b, the heads are a strided batch: Q, K, V of head h start at column h·hs of
// the (T,3C) rows (leading dimension 3C), att of head h at h·T·T.

// bf16 with head size 64 and T > 64 takes the flash kernels (k_flash_fwd.cu, k_flash_bwd.cu);
// LOOM_CUDA_FLASH=0 keeps the batched products.
static int use_flash(int T, int C, int NH) {
    static int env = -1;
    if (env < 0) {
        const char *e = getenv("LOOM_CUDA_FLASH");
        env = !(e && !strcmp(e, "0"));
    }
    return env && cu_ctx.dtype == CU_BF16 && k_flash_ok(T, C, NH);
}

static void batched_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                                      int NH);

// A marked qkv (ACT16_QKV) as fp32 in scratch, for the batched products; any other as it is
static const float *qkv32(const float *qkv, int B, int T, int C) {
    if (!cu_act16(qkv)) return qkv;
    size_t n = (size_t)B * T * 3 * C;
    float *f = cu_scratch(SCR_QKV32, n * sizeof(float));
    k_from_bf16(f, qkv, n);
    return f;
}

// A marked out (cuda_act16.c) gets bf16: from the flash kernel directly, else rounded from fp32
// scratch.
void cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    int o16 = cu_act16(out);
    if (use_flash(T, C, NH)) {
        cu_prof_begin(PROF_ATT_F);
        k_flash_forward(out, o16, att, qkv, cu_act16(qkv), B, T, C, NH);
        cu_prof_end(PROF_ATT_F);
        return;
    }
    qkv = qkv32(qkv, B, T, C);
    size_t n = (size_t)B * T * C;
    float *o = o16 ? cu_scratch(SCR_BF_OUT, n * sizeof(float)) : out;
    batched_attention_forward(o, att, qkv, B, T, C, NH);
    if (o16) k_to_bf16(out, o, n);
}

static void batched_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                                      int NH) {
    int hs = C / NH, C3 = 3 * C;
    long long TT = (long long)T * T;
    float scale = 1.0f / sqrtf((float)hs);
    cu_prof_begin(PROF_ATT_F);
    for (int b = 0; b < B; b++) { // att[t][j] = scale·q_t·k_j: column-major (j,t) = K·Qᵀ
        const float *q = qkv + (size_t)b * T * C3, *k = q + C;
        cb_matmul_batched(1, 0, T, T, hs, scale, k, C3, hs, q, C3, hs, att + (size_t)b * NH * TT, T,
                          TT, NH);
    }
    k_causal_softmax(att, (size_t)B * NH * T, T);
    for (int b = 0; b < B; b++) { // out_t = Σ_j att[t][j]·v_j: column-major (hs,T) = Vᵀ·attᵀ
        const float *v = qkv + (size_t)b * T * C3 + 2 * C;
        cb_matmul_batched(0, 0, hs, T, T, 1.0f, v, C3, hs, att + (size_t)b * NH * TT, T, TT,
                          out + (size_t)b * T * C, C, hs, NH);
    }
    cu_prof_end(PROF_ATT_F);
}

int cuda_attention_is_flash(int T, int C, int NH) { return use_flash(T, C, NH); }

// att holds the softmax (B,NH,T,T) for the batched products, the per-row log-sum-exps
// (B,NH,T) on the flash path (which reads the output rows from out in the backward).
size_t cuda_attention_saved_floats(int B, int T, int NH, int hs) {
    return (size_t)B * NH * T * (use_flash(T, NH * hs, NH) ? 1 : (size_t)T);
}

static void batched_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                       const float *att, int B, int T, int C, int NH);

// out is read by the flash path only (D = rowsum(dO ∘ O)), in bf16 when it is marked; a marked
// dqkv (the qkv product's output gradient) is written in bf16
void cuda_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                             const float *att, int B, int T, int C, int NH) {
    if (use_flash(T, C, NH)) {
        cu_prof_begin(PROF_ATT_B);
        float *drow = cu_scratch(SCR_FLASH, (size_t)B * NH * T * sizeof(float));
        int q16 = cu_act16(qkv);
        const void *d = dout;
        if (q16 != cu_act16(dout)) { // dout as qkv is: the kernels take both in one type
            size_t n = (size_t)B * T * C;
            d = cu_scratch(SCR_DOUT, n * (q16 ? 2 : 4));
            if (q16)
                k_to_bf16((void *)d, dout, n);
            else
                k_from_bf16((float *)d, dout, n);
        }
        k_flash_backward(dqkv, cu_act16(dqkv), d, qkv, q16, out, cu_act16(out), att, drow, B, T, C,
                         NH);
        cu_prof_end(PROF_ATT_B);
        return;
    }
    qkv = qkv32(qkv, B, T, C);
    if (cu_act16(dout)) { // a marked dout (ACT16_QKV), as fp32 for the batched products
        size_t n = (size_t)B * T * C;
        float *d = cu_scratch(SCR_DOUT, n * sizeof(float));
        k_from_bf16(d, dout, n);
        dout = d;
    }
    size_t n3 = (size_t)B * T * 3 * C;
    if (cu_act16(dqkv)) { // the qkv product's output gradient, wanted in bf16
        float *d = cu_scratch(SCR_BF_OUT, n3 * sizeof(float));
        batched_attention_backward(d, dout, qkv, att, B, T, C, NH);
        k_to_bf16(dqkv, d, n3);
        return;
    }
    batched_attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
}

static void batched_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                       const float *att, int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    long long TT = (long long)T * T;
    float scale = 1.0f / sqrtf((float)hs);
    float *datt = cu_scratch(SCR_ATT, (size_t)NH * TT * sizeof(float));
    cu_prof_begin(PROF_ATT_B);
    for (int b = 0; b < B; b++) {
        size_t off = (size_t)b * T * C3;
        const float *q = qkv + off, *k = q + C, *v = q + 2 * C, *a = att + (size_t)b * NH * TT;
        const float *dy = dout + (size_t)b * T * C;
        float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
        // datt[t][j] = dy_t·v_j ; dv_j = Σ_t att[t][j]·dy_t
        cb_matmul_batched(1, 0, T, T, hs, 1.0f, v, C3, hs, dy, C, hs, datt, T, TT, NH);
        cb_matmul_batched(0, 1, hs, T, T, 1.0f, dy, C, hs, a, T, TT, dv, C3, hs, NH);
        k_causal_softmax_backward(datt, a, (size_t)NH * T, T);
        // dq_t = scale·Σ_j dpre[t][j]·k_j ; dk_j = scale·Σ_t dpre[t][j]·q_t
        cb_matmul_batched(0, 0, hs, T, T, scale, k, C3, hs, datt, T, TT, dq, C3, hs, NH);
        cb_matmul_batched(0, 1, hs, T, T, scale, q, C3, hs, datt, T, TT, dk, C3, hs, NH);
    }
    cu_prof_end(PROF_ATT_B);
}

// ------------------------------------------------------------------ element-wise, loss, AdamW

void cuda_gelu_forward(float *out, const float *inp, size_t n) {
    cu_prof_begin(PROF_GELU_F);
    if (cu_act16(inp)) // a marked GELU input (ACT16_FCH)
        k_gelu_forward_b16(out, cu_act16(out), inp, n);
    else if (cu_act16(out))
        k_gelu_forward16(out, inp, n);
    else
        k_gelu_forward(out, inp, n);
    cu_prof_end(PROF_GELU_F);
}
void cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    cu_prof_begin(PROF_GELU_B);
    if (cu_act16(inp)) // a marked GELU input (ACT16_FCH)
        k_gelu_backward_b16(dinp, cu_act16(dinp), inp, dout, n);
    else if (cu_act16(dinp)) // the fc product's output gradient, read by it in bf16
        k_gelu_backward16(dinp, inp, dout, n);
    else
        k_gelu_backward(dinp, inp, dout, n);
    cu_prof_end(PROF_GELU_B);
}
void cuda_residual_forward(float *out, const float *a, const float *b, size_t n) {
    cu_prof_begin(PROF_RES);
    k_residual(out, a, b, n);
    cu_prof_end(PROF_RES);
}

double cuda_softmax_xent_forward(float *logits_probs, float *losses, const int *targets, int N,
                                 int V) {
    if (N <= 0) return 0.0;
    cu_prof_begin(PROF_XENT_F);
    k_softmax_xent_forward(logits_probs, losses, cu_ints(targets, (size_t)N), N, V);
    cu_prof_end(PROF_XENT_F);
    return cu_sum_losses(losses, N);
}

void cuda_softmax_xent_backward(float *probs_dlogits, const int *targets, float scale, int N,
                                int V) {
    if (N <= 0) return;
    cu_prof_begin(PROF_XENT_B);
    k_softmax_xent_backward(probs_dlogits, cu_ints(targets, (size_t)N), scale, N, V);
    cu_prof_end(PROF_XENT_B);
}

void cuda_adamw_multi(float *param, const float *grad, float *m, float *v, const AdamwPiece *pc,
                      int np, float lr, float beta1, float beta2, float eps, float grad_scale,
                      int t) {
    if (np <= 0) return;
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    KAdamPiece *tab = xmalloc((size_t)np * sizeof *tab);
    size_t total = 0;
    for (int k = 0; k < np; k++) {
        tab[k] = (KAdamPiece){.start = total, .off = pc[k].off, .wd = pc[k].wd};
        total += pc[k].n;
    }
    KAdamPiece *dev = cu_scratch(SCR_ADAM, (size_t)np * sizeof *tab);
    // (pageable: the table is copied out of tab before the call returns)
    CU(cudaMemcpyAsync(dev, tab, (size_t)np * sizeof *tab, cudaMemcpyHostToDevice, cu_ctx.stream));
    free(tab);
    cu_prof_begin(PROF_ADAMW);
    k_adamw_multi(param, grad, m, v, dev, np, total, lr, beta1, beta2, eps, grad_scale, bc1, bc2);
    cu_prof_end(PROF_ADAMW);
}

void cuda_adamw(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    cu_prof_begin(PROF_ADAMW);
    k_adamw(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2);
    cu_prof_end(PROF_ADAMW);
}
