// cuda_llama.c — the CUDA backend's LLaMA-block ops behind the Backend table (semantics in
// backend.h): RMSNorm, rotary embeddings, SwiGLU and grouped-query attention, launching the
// kernels of k_llama.cu on the backend's stream.
//
// RoPE's positions and inverse frequencies arrive as the model keeps them (host memory,
// Workspace.rope_pos / rope_freq; device pointers work too): they are copied into scratch per
// call, T ints and hs/2 floats. Attention with as many kv heads as query heads is plain
// multi-head attention and takes cuda_attention_* (the batched products, or the flash kernels
// in bf16); with fewer, k_llama.cu's kernels read each group's kv head in place and keep the
// rows' log-sum-exps (B,NH,T) in att, which attention_saved_floats always covers.
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_impl.h"
#include "cuda_ops.h"

void cuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                          float eps) {
    cu_prof_begin(PROF_RMS_F);
    k_rmsnorm_forward(out, rstd, inp, w, N, C, eps);
    cu_prof_end(PROF_RMS_F);
}

void cuda_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                           const float *w, const float *rstd, int N, int C) {
    cu_prof_begin(PROF_RMS_B);
    k_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
    cu_prof_end(PROF_RMS_B);
}

static void rope(float *qkv, const int *pos, const float *inv_freq, int B, int T, int NH, int NKV,
                 int hs, float sign) {
    if (B <= 0 || T <= 0 || hs < 2) return;
    size_t half = (size_t)hs / 2, ints = (size_t)T * sizeof(int);
    char *dev = cu_scratch(SCR_ROPE, ints + half * sizeof(float));
    CU(cudaMemcpyAsync(dev, pos, ints, cudaMemcpyDefault, cu_ctx.stream));
    CU(cudaMemcpyAsync(dev + ints, inv_freq, half * sizeof(float), cudaMemcpyDefault,
                       cu_ctx.stream));
    cu_prof_begin(PROF_ROPE);
    k_rope(qkv, (const int *)dev, (const float *)(dev + ints), B, T, NH, NKV, hs, sign);
    cu_prof_end(PROF_ROPE);
}

void cuda_rope_forward(float *qkv, const int *pos, const float *inv_freq, int B, int T, int NH,
                       int NKV, int hs) {
    rope(qkv, pos, inv_freq, B, T, NH, NKV, hs, 1.0f);
}

void cuda_rope_backward(float *dqkv, const int *pos, const float *inv_freq, int B, int T, int NH,
                        int NKV, int hs) {
    rope(dqkv, pos, inv_freq, B, T, NH, NKV, hs, -1.0f);
}

void cuda_swiglu_forward(float *out, const float *inp, int N, int F) {
    cu_prof_begin(PROF_SWIGLU_F);
    k_swiglu_forward(out, inp, N, F);
    cu_prof_end(PROF_SWIGLU_F);
}

void cuda_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F) {
    cu_prof_begin(PROF_SWIGLU_B);
    k_swiglu_backward(dinp, inp, dout, N, F);
    cu_prof_end(PROF_SWIGLU_B);
}

// Fewer kv heads on the flash kernels where attention at this shape is flash: the rows expanded
// to MHA in scratch (k_gqa_expand.cu); 51x faster than the GQA kernels at SmolLM-135M's shape on
// an H200. LOOM_CUDA_FLASH_GQA=0 keeps the GQA kernels (t_cuda_llama.sh compares both ways).
static int gqa_on_flash(int T, int NH, int hs) {
    static int env = -1;
    if (env < 0) {
        const char *e = getenv("LOOM_CUDA_FLASH_GQA");
        env = !(e && !strcmp(e, "0"));
    }
    return env && cuda_attention_is_flash(T, NH * hs, NH);
}

void cuda_gqa_attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH,
                                int NKV, int hs) {
    if (NKV == NH) {
        cuda_attention_forward(out, att, qkv, B, T, NH * hs, NH);
        return;
    }
    if (gqa_on_flash(T, NH, hs)) {
        float *full = cu_scratch(SCR_GQA, (size_t)B * T * 3 * NH * hs * sizeof(float));
        k_gqa_expand(full, qkv, B, T, NH, NKV, hs);
        cuda_attention_forward(out, att, full, B, T, NH * hs, NH);
        return;
    }
    cu_prof_begin(PROF_ATT_F);
    k_gqa_forward(out, att, qkv, B, T, NH, NKV, hs);
    cu_prof_end(PROF_ATT_F);
}

void cuda_gqa_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                 const float *att, int B, int T, int NH, int NKV, int hs) {
    if (NKV == NH) {
        cuda_attention_backward(dqkv, dout, qkv, out, att, B, T, NH * hs, NH);
        return;
    }
    if (gqa_on_flash(T, NH, hs)) {
        size_t bytes = (size_t)B * T * 3 * NH * hs * sizeof(float);
        float *full = cu_scratch(SCR_GQA, bytes), *dfull = cu_scratch(SCR_GQA_D, bytes);
        k_gqa_expand(full, qkv, B, T, NH, NKV, hs);
        cuda_attention_backward(dfull, dout, full, out, att, B, T, NH * hs, NH);
        k_gqa_fold(dqkv, dfull, B, T, NH, NKV, hs);
        return;
    }
    cu_prof_begin(PROF_ATT_B);
    k_gqa_backward(dqkv, dout, qkv, out, att, B, T, NH, NKV, hs);
    cu_prof_end(PROF_ATT_B);
}
