// cuda_shard.c — the CUDA backend's vocabulary-shard ops behind the Backend table (semantics in
// backend.h): the embedding of a shard's tokens (also the LLaMA embedding, which has no
// position table: the whole vocabulary as one shard), its gradient scatter, and the
// cross-entropy over shards of the logits. Token and target arrays are host memory, uploaded
// per call; the launchers are k_shard.cu's.
#include "cuda_impl.h"
#include "cuda_ops.h"

void cuda_encoder_forward_shard(float *out, const int *inp, const float *wte, const float *wpe,
                                int v0, int nv, int B, int T, int C) {
    cu_prof_begin(PROF_ENC_F);
    k_encoder_forward_shard(out, cu_ints(inp, (size_t)B * T), wte, wpe, v0, nv, B, T, C);
    cu_prof_end(PROF_ENC_F);
}

void cuda_encoder_backward_shard(float *dwte, float *dwpe, const float *dout, const int *inp,
                                 int v0, int nv, int B, int T, int C) {
    cu_prof_begin(PROF_ENC_B);
    if (dwpe) k_encoder_backward_wpe(dwpe, dout, B, T, C);
    cu_token_scatter(dwte, dout, inp, (size_t)B * T, C, v0, nv);
    cu_prof_end(PROF_ENC_B);
}

void cuda_xent_shard_max(float *mx, const float *logits, int N, int V, int nv) {
    cu_prof_begin(PROF_XENT_F);
    k_xent_shard_max(mx, logits, N, V, nv);
    cu_prof_end(PROF_XENT_F);
}

void cuda_xent_shard_sum(float *st, const float *logits, const float *mx, const int *targets,
                         int v0, int N, int V, int nv) {
    if (N <= 0) return;
    cu_prof_begin(PROF_XENT_F);
    k_xent_shard_sum(st, logits, mx, cu_ints(targets, (size_t)N), v0, N, V, nv);
    cu_prof_end(PROF_XENT_F);
}

double cuda_xent_shard_finish(float *logits_probs, float *losses, const float *mx, const float *st,
                              int N, int V, int nv) {
    if (N <= 0) return 0.0;
    cu_prof_begin(PROF_XENT_F);
    k_xent_shard_finish(logits_probs, losses, mx, st, N, V, nv);
    cu_prof_end(PROF_XENT_F);
    return cu_sum_losses(losses, N); // in order on the host, as the CPU adds them
}

void cuda_xent_shard_backward(float *probs_dlogits, const int *targets, int v0, float scale, int N,
                              int V, int nv) {
    if (N <= 0) return;
    cu_prof_begin(PROF_XENT_B);
    k_xent_shard_backward(probs_dlogits, cu_ints(targets, (size_t)N), v0, scale, N, V, nv);
    cu_prof_end(PROF_XENT_B);
}
