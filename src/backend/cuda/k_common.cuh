// k_common.cuh — helpers the CUDA kernel files share: grid sizing for grid-stride loops and
// warp/block sums (float and double). Included by the .cu files only.
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>

#include "cuda_impl.h"

#define K_THREADS 256

// Blocks for a grid-stride loop over n elements: enough to fill the GPU, never zero.
static inline unsigned k_blocks(size_t n) {
    size_t b = (n + K_THREADS - 1) / K_THREADS;
    size_t cap = (size_t)(cu_ctx.sms > 0 ? cu_ctx.sms : 80) * 32;
    if (b > cap) b = cap;
    return (unsigned)(b ? b : 1);
}

#define GRID_STRIDE(i, n)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

template <typename F> __device__ __forceinline__ F warp_sum(F v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// sh: 32 elements of shared memory. Safe to call repeatedly (it synchronizes before reuse).
template <typename F> __device__ F block_sum(F v, F *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); // sh may still be read by an earlier call
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (F)0;
    return warp_sum(v);
}
