// cuda_ops.h — the CUDA backend's model kernels (cuda_ops.c), as the Backend table
// (cuda_backend.c) points at them. Semantics are backend.h's; pointers are device memory
// except the int token / target arrays, which are host memory.
#pragma once
#include <stddef.h>

#include "../backend.h" // AdamwPiece

void cuda_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B,
                          int T, int C);
void cuda_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B,
                           int T, int C);
void cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                            const float *b, int N, int C);
void cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                             const float *w, const float *mean, const float *rstd, int N, int C);
void cuda_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                         int C, int OC);
void cuda_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                          const float *w, int N, int C, int OC);
// the fused ops (cuda_fused.c): 0 when they decline (LOOM_CUDA_FUSE, the dtype, no plan)
int cuda_matmul_gelu_forward(float *out, float *pre, const float *inp, const float *w,
                             const float *bias, int N, int C, int OC);
int cuda_matmul_gelu_backward(float *dpre, float *dw, float *dbias, const float *dout,
                              const float *gin, const float *pre, const float *w, int N, int C,
                              int OC);
int cuda_residual_layernorm_forward(float *res, float *ln, float *mean, float *rstd, const float *a,
                                    const float *b, const float *w, const float *bias, int N,
                                    int C);
void cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
size_t cuda_attention_saved_floats(int B, int T, int NH, int hs);
// whether attention at this shape takes the flash kernels (bf16, head size 64, T > 64)
int cuda_attention_is_flash(int T, int C, int NH);
void cuda_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                             const float *att, int B, int T, int C, int NH);
void cuda_gelu_forward(float *out, const float *inp, size_t n);
void cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void cuda_residual_forward(float *out, const float *a, const float *b, size_t n);
double cuda_softmax_xent_forward(float *logits_probs, float *losses, const int *targets, int N,
                                 int V);
void cuda_softmax_xent_backward(float *probs_dlogits, const int *targets, float scale, int N,
                                int V);
double cuda_classifier(float *losses, float *dx, float *dwte, const float *x, const float *wte,
                       const int *targets, float scale, int N, int C, int V);
void cuda_adamw_multi(float *param, const float *grad, float *m, float *v, const AdamwPiece *pc,
                      int np, float lr, float beta1, float beta2, float eps, float grad_scale,
                      int t);
void cuda_adamw(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t);
// the LLaMA block (cuda_llama.c)
void cuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                          float eps);
void cuda_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                           const float *w, const float *rstd, int N, int C);
void cuda_rope_forward(float *qkv, const int *pos, const float *inv_freq, int B, int T, int NH,
                       int NKV, int hs);
void cuda_rope_backward(float *dqkv, const int *pos, const float *inv_freq, int B, int T, int NH,
                        int NKV, int hs);
void cuda_swiglu_forward(float *out, const float *inp, int N, int F);
void cuda_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F);
void cuda_gqa_attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH,
                                int NKV, int hs);
void cuda_gqa_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                 const float *att, int B, int T, int NH, int NKV, int hs);
// dwte += the scatter of dout's rows by token, tokens in [v0, v0+nv) only, into row token − v0
// (the embedding's backward, cuda_ops.c); inp is host memory
void cu_token_scatter(float *dwte, const float *dout, const int *inp, size_t BT, int C, int v0,
                      int nv);
// the vocabulary shards (cuda_shard.c)
void cuda_encoder_forward_shard(float *out, const int *inp, const float *wte, const float *wpe,
                                int v0, int nv, int B, int T, int C);
void cuda_encoder_backward_shard(float *dwte, float *dwpe, const float *dout, const int *inp,
                                 int v0, int nv, int B, int T, int C);
void cuda_xent_shard_max(float *mx, const float *logits, int N, int V, int nv);
void cuda_xent_shard_sum(float *st, const float *logits, const float *mx, const int *targets,
                         int v0, int N, int V, int nv);
double cuda_xent_shard_finish(float *logits_probs, float *losses, const float *mx, const float *st,
                              int N, int V, int nv);
void cuda_xent_shard_backward(float *probs_dlogits, const int *targets, int v0, float scale, int N,
                              int V, int nv);
