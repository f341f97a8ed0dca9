// k_ew.cu — the CUDA backend's element-wise kernels (fill, scale, the strategies' vector ops,
// GELU, residual, AdamW) and its reductions (finiteness, Σ x² in double: per block for sumsq,
// per fixed chunk for sumsq_chunks). Every loop is grid-stride; reductions are fixed trees, so
// a result does not depend on timing.
#include <cuda_bf16.h>
#include <math.h>

#include "k_common.cuh"

#define GELU_K 0.7978845608028654f // sqrt(2/pi)

__device__ __forceinline__ float clamp_f(float v, float lo, float hi) {
    return v < lo ? lo : v > hi ? hi : v; // NaN passes through, as on the CPU
}
// GELU, tanh approximation, and its derivative (the CPU backend's formulas)
__device__ __forceinline__ float gelu_f(float v) {
    return 0.5f * v * (1.0f + tanhf(GELU_K * (v + 0.044715f * v * v * v)));
}
__device__ __forceinline__ float gelu_df(float v) {
    float th = tanhf(GELU_K * (v + 0.044715f * v * v * v)), sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * v * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
}

#define EW_KERNEL(name, params, body)                                                              \
    __global__ void name##_kernel params {                                                         \
        GRID_STRIDE(i, n) { body; }                                                                \
    }

EW_KERNEL(fill, (float *x, float v, size_t n), x[i] = v)
EW_KERNEL(scale, (float *x, float s, size_t n), x[i] *= s)
EW_KERNEL(axpby, (float *y, float a, const float *x, float b, size_t n), y[i] = a * x[i] + b * y[i])
EW_KERNEL(sub_scaled, (float *o, const float *a, const float *b, float s, size_t n),
          o[i] = (a[i] - b[i]) * s)
EW_KERNEL(copy_scaled, (float *d, const float *src, float s, size_t n), d[i] = src[i] * s)
EW_KERNEL(clamp, (float *x, float lo, float hi, size_t n), x[i] = clamp_f(x[i], lo, hi))
EW_KERNEL(residual, (float *o, const float *a, const float *b, size_t n), o[i] = a[i] + b[i])
EW_KERNEL(gelu_fwd, (float *o, const float *x, size_t n), o[i] = gelu_f(x[i]))
EW_KERNEL(gelu_bwd, (float *g, const float *x, const float *d, size_t n),
          g[i] = d[i] * gelu_df(x[i]))
EW_KERNEL(gelu_bwd16, (__nv_bfloat16 * g, const float *x, const float *d, size_t n),
          g[i] = __float2bfloat16_rn(d[i] * gelu_df(x[i])))
EW_KERNEL(from_bf16, (float *o, const __nv_bfloat16 *x, size_t n), o[i] = __bfloat162float(x[i]))
// GELU from a bf16 input (ACT16_FCH), into fp32 or bf16
__device__ __forceinline__ void st_f(float *o, size_t i, float v) { o[i] = v; }
__device__ __forceinline__ void st_f(__nv_bfloat16 *o, size_t i, float v) {
    o[i] = __float2bfloat16_rn(v);
}
template <typename TO>
__global__ void gelu_fwd_b16_kernel(TO *o, const __nv_bfloat16 *x, size_t n) {
    GRID_STRIDE(i, n) { st_f(o, i, gelu_f(__bfloat162float(x[i]))); }
}
template <typename TO>
__global__ void gelu_bwd_b16_kernel(TO *g, const __nv_bfloat16 *x, const float *d, size_t n) {
    GRID_STRIDE(i, n) { st_f(g, i, d[i] * gelu_df(__bfloat162float(x[i]))); }
}
EW_KERNEL(nonfinite, (int *flag, const float *x, size_t n), if (!isfinite(x[i])) *flag = 1)

// One element's AdamW step (both kernels below: the same bits)
__device__ __forceinline__ void adamw_elem(float *p, const float *g, float *m, float *v, size_t i,
                                           float lr, float b1, float b2, float eps, float wd,
                                           float gscale, float bc1, float bc2) {
    float gi = g[i] * gscale;
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
}

__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, float lr,
                             float b1, float b2, float eps, float wd, float gscale, float bc1,
                             float bc2) {
    GRID_STRIDE(i, n) { adamw_elem(p, g, m, v, i, lr, b1, b2, eps, wd, gscale, bc1, bc2); }
}

// The pieces as one index space: element j of it is in the last piece whose start ≤ j
__global__ void adamw_multi_kernel(float *p, const float *g, float *m, float *v,
                                   const KAdamPiece *pc, int np, size_t total, float lr, float b1,
                                   float b2, float eps, float gscale, float bc1, float bc2) {
    GRID_STRIDE(j, total) {
        int lo = 0, hi = np - 1;
        while (lo < hi) {
            int mid = (lo + hi + 1) >> 1;
            if (pc[mid].start <= j)
                lo = mid;
            else
                hi = mid - 1;
        }
        size_t i = pc[lo].off + (j - pc[lo].start);
        adamw_elem(p, g, m, v, i, lr, b1, b2, eps, pc[lo].wd, gscale, bc1, bc2);
    }
}

// What the bf16 conversions apply to each value before rounding: nothing (k_to_bf16), or GELU
// (k_gelu_forward16: the values gelu_fwd computes, into a product's input kept in 16 bits).
struct AsIs {
    __device__ float operator()(float v) const { return v; }
};
struct Gelu {
    __device__ float operator()(float v) const { return gelu_f(v); }
};

// f(src) → bf16 (round to nearest even), four at a time where n allows
template <typename F>
__global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n, F f) {
    size_t n4 = n / 4;
    GRID_STRIDE(i, n4) {
        float4 v = reinterpret_cast<const float4 *>(src)[i];
        __nv_bfloat162 *d = reinterpret_cast<__nv_bfloat162 *>(dst + 4 * i);
        d[0] = __floats2bfloat162_rn(f(v.x), f(v.y));
        d[1] = __floats2bfloat162_rn(f(v.z), f(v.w));
    }
    if (blockIdx.x == 0 && threadIdx.x < n % 4)
        dst[4 * n4 + threadIdx.x] = __float2bfloat16_rn(f(src[4 * n4 + threadIdx.x]));
}

template <typename F>
__global__ void to_bf16_scalar_kernel(__nv_bfloat16 *dst, const float *src, size_t n, F f) {
    GRID_STRIDE(i, n) { dst[i] = __float2bfloat16_rn(f(src[i])); }
}

// The vector kernel where src is 16-byte and dst 8-byte aligned, else the scalar one
template <typename F>
static void to_bf16_launch(void *dst, const float *src, size_t n, F f, const char *name) {
    if (!n) return;
    __nv_bfloat16 *d = (__nv_bfloat16 *)dst;
    if ((uintptr_t)src % 16 == 0 && (uintptr_t)dst % 8 == 0)
        to_bf16_kernel<<<k_blocks(n / 4 + 1), K_THREADS, 0, cu_ctx.stream>>>(d, src, n, f);
    else
        to_bf16_scalar_kernel<<<k_blocks(n), K_THREADS, 0, cu_ctx.stream>>>(d, src, n, f);
    CU_LAUNCHED(name);
}

__global__ void to_bf16_pad_kernel(__nv_bfloat16 *dst, const float *src, size_t cols, size_t pcols,
                                   size_t n) {
    GRID_STRIDE(i, n) {
        size_t r = i / pcols, c = i % pcols;
        dst[i] = c < cols ? __float2bfloat16_rn(src[r * cols + c]) : __float2bfloat16_rn(0.f);
    }
}

__global__ void sumsq_part_kernel(double *part, const float *x, size_t n) {
    __shared__ double sh[32];
    double acc = 0.0;
    GRID_STRIDE(i, n) {
        double v = x[i];
        acc += v * v;
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

__global__ void sumsq_chunks_kernel(double *out, const float *x, size_t n, size_t chunk) {
    __shared__ double sh[32];
    size_t i0 = (size_t)blockIdx.x * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
    double acc = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        double v = x[i];
        acc += v * v;
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) out[blockIdx.x] = acc;
}

#define LAUNCH(name, n, ...)                                                                       \
    do {                                                                                           \
        if (!(n)) return;                                                                          \
        name##_kernel<<<k_blocks(n), K_THREADS, 0, cu_ctx.stream>>>(__VA_ARGS__);                  \
        CU_LAUNCHED(#name);                                                                        \
    } while (0)

extern "C" {
void k_fill(float *x, float v, size_t n) { LAUNCH(fill, n, x, v, n); }
void k_scale(float *x, float s, size_t n) { LAUNCH(scale, n, x, s, n); }
void k_axpby(float *y, float a, const float *x, float b, size_t n) {
    LAUNCH(axpby, n, y, a, x, b, n);
}
void k_sub_scaled(float *out, const float *a, const float *b, float s, size_t n) {
    LAUNCH(sub_scaled, n, out, a, b, s, n);
}
void k_copy_scaled(float *dst, const float *src, float s, size_t n) {
    LAUNCH(copy_scaled, n, dst, src, s, n);
}
void k_clamp(float *x, float lo, float hi, size_t n) { LAUNCH(clamp, n, x, lo, hi, n); }
void k_residual(float *out, const float *a, const float *b, size_t n) {
    LAUNCH(residual, n, out, a, b, n);
}
void k_gelu_forward(float *out, const float *inp, size_t n) { LAUNCH(gelu_fwd, n, out, inp, n); }
void k_gelu_forward16(void *out, const float *inp, size_t n) {
    to_bf16_launch(out, inp, n, Gelu(), "gelu_forward16");
}
void k_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    LAUNCH(gelu_bwd, n, dinp, inp, dout, n);
}
void k_gelu_backward16(void *dinp, const float *inp, const float *dout, size_t n) {
    LAUNCH(gelu_bwd16, n, (__nv_bfloat16 *)dinp, inp, dout, n);
}
void k_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
             float eps, float wd, float gscale, float bc1, float bc2) {
    LAUNCH(adamw, n, p, g, m, v, n, lr, b1, b2, eps, wd, gscale, bc1, bc2);
}
void k_adamw_multi(float *p, const float *g, float *m, float *v, const KAdamPiece *pc_dev, int np,
                   size_t total, float lr, float b1, float b2, float eps, float gscale, float bc1,
                   float bc2) {
    if (!total) return;
    adamw_multi_kernel<<<k_blocks(total), K_THREADS, 0, cu_ctx.stream>>>(
        p, g, m, v, pc_dev, np, total, lr, b1, b2, eps, gscale, bc1, bc2);
    CU_LAUNCHED("adamw_multi");
}
void k_from_bf16(float *dst, const void *src, size_t n) {
    LAUNCH(from_bf16, n, dst, (const __nv_bfloat16 *)src, n);
}
void k_gelu_forward_b16(void *out, int out16, const void *inp, size_t n) {
    const __nv_bfloat16 *x = (const __nv_bfloat16 *)inp;
    if (!n) return;
    if (out16)
        gelu_fwd_b16_kernel<<<k_blocks(n), K_THREADS, 0, cu_ctx.stream>>>((__nv_bfloat16 *)out, x,
                                                                          n);
    else
        gelu_fwd_b16_kernel<<<k_blocks(n), K_THREADS, 0, cu_ctx.stream>>>((float *)out, x, n);
    CU_LAUNCHED("gelu_forward_b16");
}
void k_gelu_backward_b16(void *dinp, int dinp16, const void *inp, const float *dout, size_t n) {
    const __nv_bfloat16 *x = (const __nv_bfloat16 *)inp;
    if (!n) return;
    if (dinp16)
        gelu_bwd_b16_kernel<<<k_blocks(n), K_THREADS, 0, cu_ctx.stream>>>((__nv_bfloat16 *)dinp, x,
                                                                          dout, n);
    else
        gelu_bwd_b16_kernel<<<k_blocks(n), K_THREADS, 0, cu_ctx.stream>>>((float *)dinp, x, dout,
                                                                          n);
    CU_LAUNCHED("gelu_backward_b16");
}
void k_nonfinite(int *flag_dev, const float *x, size_t n) { LAUNCH(nonfinite, n, flag_dev, x, n); }
void k_to_bf16(void *dst, const float *src, size_t n) {
    to_bf16_launch(dst, src, n, AsIs(), "to_bf16");
}
void k_to_bf16_pad(void *dst, const float *src, size_t rows, size_t cols, size_t pcols) {
    if (pcols == cols) return k_to_bf16(dst, src, rows * cols);
    size_t n = rows * pcols;
    if (!n) return;
    to_bf16_pad_kernel<<<k_blocks(n), K_THREADS, 0, cu_ctx.stream>>>((__nv_bfloat16 *)dst, src,
                                                                     cols, pcols, n);
    CU_LAUNCHED("to_bf16_pad");
}
void k_sumsq_part(double *part_dev, const float *x, size_t n) {
    sumsq_part_kernel<<<K_SUMSQ_BLOCKS, K_THREADS, 0, cu_ctx.stream>>>(part_dev, x, n);
    CU_LAUNCHED("sumsq_part");
}
void k_sumsq_chunks(double *out_dev, const float *x, size_t n, size_t chunk) {
    size_t nk = (n + chunk - 1) / chunk;
    if (!nk) return;
    sumsq_chunks_kernel<<<(unsigned)nk, K_THREADS, 0, cu_ctx.stream>>>(out_dev, x, n, chunk);
    CU_LAUNCHED("sumsq_chunks");
}
}
