#pragma once
// k_flash.cuh — causal attention for --dtype bf16 without the (T,T) matrix: FlashAttention-2
// style forward and backward on the tensor cores (mma.sync m16n8k16, bf16 operands, fp32
// accumulation and softmax), head size 64. Q, K, V are read from the fp32 qkv rows and rounded
// to bf16 as tiles enter shared memory, row-major; a product that needs a tile transposed reads
// it with ldmatrix .trans (no transposed copies).
//
// Forward: a block per (64 queries, head); each of its 4 warps owns 16 query rows, keeps Q in
// registers and runs the online softmax over key tiles of 64 up to the diagonal. It writes the
// output and, into the model's att buffer (T floats per head, opaque to the model), the per-row
// log-sum-exp (base 2), which the backward needs with the output rows.
// Backward: D = rowsum(dO ∘ O) first; then a block per (64 keys, head), each warp owning 16
// keys with dK, dV in registers (K and V in shared memory by default, or in registers), loops
// over the query tiles at or after its keys and recomputes P from the log-sum-exp. dQ: by
// default a second pass, a block per (64 queries, head) over the key tiles up to the diagonal,
// recomputes P and dS and writes dQ once (no atomics, two more products per tile pair); or the
// first pass adds its share into dqkv with fp32 atomics.
//
// This header holds what the two kernel files share (the geometry, the tensor-core product,
// the fragment and tile loads); k_flash_fwd.cu has the forward, k_flash_bwd.cu the backward.
// q, k, v come from the fp32 qkv rows, or from bf16 ones (a qkv the model keeps in 16 bits,
// cuda_act16.c): the loads below take either, and give the same bf16 values for the same
// rounded inputs.
//
// Fragment layouts (PTX ISA, mma.m16n8k16): g = lane/4, t = lane%4; A (16×16) a0 = (g, 2t..2t+1),
// a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..); B (16×8, k × n) b0 = (k 2t..2t+1, n g),
// b1 = (k 2t+8.., n g); C (16×8) c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..).
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "k_common.cuh"

#define D 64       // head size
#define TILE 64    // queries and keys per tile
#define LD (D + 8) // shared-memory row pitch in bf16 (16 bytes of padding against conflicts)
typedef __nv_bfloat16 bf16;

__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
__device__ __forceinline__ uint32_t ld2(const bf16 *p) {
    return *reinterpret_cast<const uint32_t *>(p);
}
// Turing (sm_75) has no bf16 mma; it never runs these kernels (bf16 is refused below 8.0).
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();
#endif
}
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// The B fragment (k16 × n8) at rows k0.., columns n0.. of a row-major bf16 tile [k][n] in shared
// memory, read transposed by ldmatrix: b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g). Lanes
// 0-15 give the row addresses (rows k0 + lane%16); LD·2 = 144 bytes keeps the rows 16-byte
// aligned and the 8 rows of each matrix on distinct banks. This replaces transposed copies of
// the tiles, whose 2-byte column stores collided 16-way on the banks.
__device__ __forceinline__ void ldsm_t(uint32_t &b0, uint32_t &b1, const bf16 *tile, int k0,
                                       int n0) {
#if __CUDA_ARCH__ >= 750
    const bf16 *p = tile + (k0 + (threadIdx.x & 15)) * LD + n0;
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(b0), "=r"(b1)
                 : "r"(a));
#else
    __trap();
#endif
}

// The A fragment (16×16) at rows r0.., columns c0.. of a row-major bf16 tile in shared memory
// (ldmatrix .x4: lanes 0-15 give rows r0.. at column c0, lanes 16-31 the same rows at c0 + 8):
// a0 = (g, 2t..), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..).
__device__ __forceinline__ void ldsm_a(uint32_t a[4], const bf16 *tile, int r0, int c0) {
#if __CUDA_ARCH__ >= 750
    int l = threadIdx.x & 31;
    const bf16 *p = tile + (r0 + (l & 15)) * LD + c0 + (l >> 4) * 8;
    unsigned addr = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(addr));
#else
    __trap();
#endif
}

// A 64×64 tile of rows r0.. (zero past T) of a matrix with row stride ld, rounded to bf16,
// into `row` shared memory (row-major, pitch LD). When g and ld allow 16-byte loads, each
// thread issues all 8 of its loads before the first store (latency, not bandwidth, bounds a
// tile) and stores 8 bytes at a time.
static __device__ void load_tile(bf16 *row, const float *g, int r0, int T, size_t ld) {
    if (((uintptr_t)g | (ld * sizeof(float))) % 16 == 0 && blockDim.x == 128) {
        float4 x[8];
#pragma unroll
        for (int k = 0; k < 8; k++) { // 16 float4 a row, 64 rows: 1024 slots, 8 per thread
            int i = threadIdx.x + 128 * k, r = i >> 4, c = (i & 15) * 4;
            x[k] = r0 + r < T ? *reinterpret_cast<const float4 *>(g + (size_t)(r0 + r) * ld + c)
                              : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int i = threadIdx.x + 128 * k, r = i >> 4, c = (i & 15) * 4;
            *reinterpret_cast<uint2 *>(row + r * LD + c) =
                make_uint2(pack2(x[k].x, x[k].y), pack2(x[k].z, x[k].w));
        }
        return;
    }
    for (int i = threadIdx.x; i < TILE * D; i += blockDim.x) {
        int r = i / D, c = i % D;
        row[r * LD + c] = __float2bfloat16_rn(r0 + r < T ? g[(size_t)(r0 + r) * ld + c] : 0.f);
    }
}

// A fragments of 16 rows (r0.. of a matrix with row stride ld, zero past T) over D columns.
static __device__ void load_a(uint32_t a[4][4], const float *g, int r0, int T, size_t ld) {
    int gq = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    for (int kk = 0; kk < 4; kk++)
        for (int h = 0; h < 2; h++) { // rows g, g+8
            int r = r0 + gq + 8 * h;
            const float *p = g + (size_t)(r < T ? r : 0) * ld + kk * 16 + 2 * t;
            float z = r < T ? 1.f : 0.f; // rows past T are zero
            a[kk][h] = pack2(z * p[0], z * p[1]), a[kk][2 + h] = pack2(z * p[8], z * p[9]);
        }
}

// The same from bf16 rows (a marked qkv): 16-byte loads (8 values) where g and ld allow, all of a
// thread's loads issued before its first store, as above.
static __device__ void load_tile(bf16 *row, const bf16 *g, int r0, int T, size_t ld) {
    if (((uintptr_t)g | (ld * sizeof(bf16))) % 16 == 0 && blockDim.x == 128) {
        uint4 x[4];
#pragma unroll
        for (int k = 0; k < 4; k++) { // 8 uint4 a row, 64 rows: 512 slots, 4 per thread
            int i = threadIdx.x + 128 * k, r = i >> 3, c = (i & 7) * 8;
            x[k] = r0 + r < T ? *reinterpret_cast<const uint4 *>(g + (size_t)(r0 + r) * ld + c)
                              : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int i = threadIdx.x + 128 * k, r = i >> 3, c = (i & 7) * 8;
            *reinterpret_cast<uint4 *>(row + r * LD + c) = x[k];
        }
        return;
    }
    for (int i = threadIdx.x; i < TILE * D; i += blockDim.x) {
        int r = i / D, c = i % D;
        row[r * LD + c] = r0 + r < T ? g[(size_t)(r0 + r) * ld + c] : __float2bfloat16_rn(0.f);
    }
}
static __device__ void load_a(uint32_t a[4][4], const bf16 *g, int r0, int T, size_t ld) {
    int gq = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    for (int kk = 0; kk < 4; kk++)
        for (int h = 0; h < 2; h++) { // rows g, g+8
            int r = r0 + gq + 8 * h;
            const bf16 *p = g + (size_t)(r < T ? r : 0) * ld + kk * 16 + 2 * t;
            a[kk][h] = r < T ? ld2(p) : 0u, a[kk][2 + h] = r < T ? ld2(p + 8) : 0u;
        }
}

// A 64×64 bf16 tile copied straight into shared memory by cp.async (16 bytes a copy, 4 a
// thread, rows past T zero-filled), not waited for: cp_commit closes a group of them and
// cp_wait<n> waits until at most n groups are still in flight. g must be 16-byte aligned and
// ld a multiple of 8 (flash_fwd16_ok). sm_80 and later.
static __device__ __forceinline__ void async_tile(bf16 *row, const bf16 *g, int r0, int T,
                                                  size_t ld) {
#if __CUDA_ARCH__ >= 800
#pragma unroll
    for (int k = 0; k < 4; k++) {
        int i = threadIdx.x + 128 * k, r = i >> 3, c = (i & 7) * 8, in = r0 + r < T;
        const bf16 *src = g + (size_t)(in ? r0 + r : 0) * ld + c;
        unsigned dst = (unsigned)__cvta_generic_to_shared(row + r * LD + c);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                     "r"(in ? 16 : 0));
    }
#else
    __trap();
#endif
}
static __device__ __forceinline__ void cp_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N> static __device__ __forceinline__ void cp_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// The K and V tiles of a loop over key tiles kt = 0..last (the forward's, the dQ pass's), from the
// rows at base (K at +C, V at +2C), into Ks, Vs: each call waits for tile kt and returns its
// buffers in Kb, Vb. PIPE (bf16 rows): two buffers each, tile kt in pair kt & 1, the next tile
// copied into the other pair by cp.async while the warps compute on this one (kv_first issues
// tile 0; the caller ends each iteration with a barrier, so the pair refilled is free); else one
// pair, loaded between two barriers.
template <bool PIPE, typename I>
static __device__ __forceinline__ void kv_first(bf16 *Ks, bf16 *Vs, const I *base, int C, int T,
                                                size_t C3) {
    if constexpr (PIPE) {
        async_tile(Ks, base + C, 0, T, C3), async_tile(Vs, base + 2 * C, 0, T, C3);
        cp_commit();
    }
}
template <bool PIPE, typename I>
static __device__ __forceinline__ void kv_tile(bf16 *Ks, bf16 *Vs, const I *base, int C, int T,
                                               size_t C3, int kt, int last, bf16 **Kb, bf16 **Vb) {
    int k0 = kt * TILE;
    if constexpr (PIPE) {
        *Kb = Ks + (kt & 1) * TILE * LD, *Vb = Vs + (kt & 1) * TILE * LD;
        if (kt < last) {
            int nb = ((kt + 1) & 1) * TILE * LD;
            async_tile(Ks + nb, base + C, k0 + TILE, T, C3);
            async_tile(Vs + nb, base + 2 * C, k0 + TILE, T, C3);
            cp_commit();
            cp_wait<1>(); // this tile's copies are done (the next one's may not be)
        } else {
            cp_wait<0>();
        }
        __syncthreads(); // every thread's copies of this tile are visible
    } else {
        *Kb = Ks, *Vb = Vs;
        __syncthreads(); // every warp is done with the previous tile
        load_tile(Ks, base + C, k0, T, C3);
        load_tile(Vs, base + 2 * C, k0, T, C3);
        __syncthreads();
    }
}

// out fp32, or bf16 for a product's input kept in 16 bits (cuda_act16.c)
__device__ __forceinline__ void st_out(float *o, size_t i, float v) { o[i] = v; }
__device__ __forceinline__ void st_out(bf16 *o, size_t i, float v) {
    o[i] = __float2bfloat16_rn(v);
}
__device__ __forceinline__ float ld_out(const float *o, int i) { return o[i]; }
__device__ __forceinline__ float ld_out(const bf16 *o, int i) { return __bfloat162float(o[i]); }
