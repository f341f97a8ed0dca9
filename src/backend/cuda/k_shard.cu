// k_shard.cu — the CUDA kernels of the vocabulary shards (backend.h; the CPU's in cpu_shard.c):
// the embedding of the tokens a shard holds (rows [v0, v0+nv) of the vocabulary, an optional
// position table), and the cross-entropy over shards of the logits from per-row partials (a
// block per row). The shard's weight-gradient scatter reuses the embedding's (cuda_ops.c).
#include <math.h>

#include "k_common.cuh"

__global__ void enc_shard_fwd_kernel(float *out, const int *tok, const float *wte, const float *wpe,
                                     int v0, int nv, int T, int C, size_t n) {
    GRID_STRIDE(i, n) {
        size_t bt = i / C;
        int c = (int)(i % C), t = tok[bt] - v0;
        float v = t >= 0 && t < nv ? wte[(size_t)t * C + c] : 0.f;
        if (wpe) v += wpe[(size_t)(bt % T) * C + c];
        out[i] = v;
    }
}

extern "C" void k_encoder_forward_shard(float *out, const int *tok, const float *wte,
                                        const float *wpe, int v0, int nv, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    if (!n) return;
    enc_shard_fwd_kernel<<<k_blocks(n), K_THREADS, 0, cu_ctx.stream>>>(out, tok, wte, wpe, v0, nv,
                                                                       T, C, n);
    CU_LAUNCHED("enc_shard_fwd");
}

// The block's max of v; every thread gets it. sh: 32 floats.
static __device__ float block_max(float v, float *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return warp_max(v);
}

__global__ void xs_max_kernel(float *mx, const float *logits, int V, int nv) {
    __shared__ float sh[32];
    const float *row = logits + (size_t)blockIdx.x * V;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < nv; j += blockDim.x)
        m = fmaxf(m, row[j]);
    m = block_max(m, sh);
    if (threadIdx.x == 0) mx[blockIdx.x] = m;
}

__global__ void xs_sum_kernel(float *st, const float *logits, const float *mx, const int *targets,
                              int v0, int V, int nv) {
    __shared__ float sh[32];
    int n = blockIdx.x;
    const float *row = logits + (size_t)n * V;
    float s = 0.f, m = mx[n];
    for (int j = threadIdx.x; j < nv; j += blockDim.x)
        s += expf(row[j] - m);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) {
        int t = targets[n] - v0;
        st[2 * n] = s;
        st[2 * n + 1] = t >= 0 && t < nv ? row[t] : 0.f;
    }
}

__global__ void xs_finish_kernel(float *lp, float *losses, const float *mx, const float *st, int V,
                                 int nv) {
    int n = blockIdx.x;
    float *row = lp + (size_t)n * V, m = mx[n], inv = 1.0f / st[2 * n];
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        row[j] = j < nv ? expf(row[j] - m) * inv : 0.f; // padding: probability 0
    if (threadIdx.x == 0) losses[n] = logf(st[2 * n]) - (st[2 * n + 1] - m);
}

__global__ void xs_backward_kernel(float *pd, const int *targets, int v0, float scale, int V,
                                   int nv) {
    int n = blockIdx.x, t = targets[n] - v0;
    float *row = pd + (size_t)n * V;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float v = row[j] * scale;
        row[j] = j == t && t < nv ? v - scale : v;
    }
}

extern "C" void k_xent_shard_max(float *mx, const float *logits, int N, int V, int nv) {
    if (N <= 0) return;
    xs_max_kernel<<<(unsigned)N, K_THREADS, 0, cu_ctx.stream>>>(mx, logits, V, nv);
    CU_LAUNCHED("xent_shard_max");
}

extern "C" void k_xent_shard_sum(float *st, const float *logits, const float *mx,
                                 const int *targets, int v0, int N, int V, int nv) {
    if (N <= 0) return;
    xs_sum_kernel<<<(unsigned)N, K_THREADS, 0, cu_ctx.stream>>>(st, logits, mx, targets, v0, V, nv);
    CU_LAUNCHED("xent_shard_sum");
}

extern "C" void k_xent_shard_finish(float *lp, float *losses, const float *mx, const float *st,
                                    int N, int V, int nv) {
    if (N <= 0) return;
    xs_finish_kernel<<<(unsigned)N, K_THREADS, 0, cu_ctx.stream>>>(lp, losses, mx, st, V, nv);
    CU_LAUNCHED("xent_shard_finish");
}

extern "C" void k_xent_shard_backward(float *pd, const int *targets, int v0, float scale, int N,
                                      int V, int nv) {
    if (N <= 0) return;
    xs_backward_kernel<<<(unsigned)N, K_THREADS, 0, cu_ctx.stream>>>(pd, targets, v0, scale, V, nv);
    CU_LAUNCHED("xent_shard_backward");
}
