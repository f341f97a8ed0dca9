// k_half.cu — the 16-bit operands of the products in the context's half type: bf16 (k_ew.cu's
// conversions) or, under --dtype fp16, fp16 (round to nearest even; values past 65504 become
// inf, which the loss scaler reads as an overflow). fp16 kernels mirror k_ew.cu's bf16 ones.
#include <cuda_fp16.h>
#include <stdint.h>

#include "k_common.cuh"

__global__ void to_f16_kernel(__half *dst, const float *src, size_t n) {
    size_t n4 = n / 4;
    GRID_STRIDE(i, n4) {
        float4 v = reinterpret_cast<const float4 *>(src)[i];
        __half2 *d = reinterpret_cast<__half2 *>(dst + 4 * i);
        d[0] = __floats2half2_rn(v.x, v.y);
        d[1] = __floats2half2_rn(v.z, v.w);
    }
    if (blockIdx.x == 0 && threadIdx.x < n % 4)
        dst[4 * n4 + threadIdx.x] = __float2half_rn(src[4 * n4 + threadIdx.x]);
}

__global__ void to_f16_scalar_kernel(__half *dst, const float *src, size_t n) {
    GRID_STRIDE(i, n) { dst[i] = __float2half_rn(src[i]); }
}

__global__ void to_f16_pad_kernel(__half *dst, const float *src, size_t cols, size_t pcols,
                                  size_t n) {
    GRID_STRIDE(i, n) {
        size_t r = i / pcols, c = i % pcols;
        dst[i] = c < cols ? __float2half_rn(src[r * cols + c]) : __float2half_rn(0.f);
    }
}

extern "C" {
void k_to_half(void *dst, const float *src, size_t n) {
    if (cu_ctx.dtype != CU_FP16) return k_to_bf16(dst, src, n);
    if (!n) return;
    __half *d = (__half *)dst;
    if ((uintptr_t)src % 16 == 0 && (uintptr_t)dst % 8 == 0)
        to_f16_kernel<<<k_blocks(n / 4 + 1), K_THREADS, 0, cu_ctx.stream>>>(d, src, n);
    else
        to_f16_scalar_kernel<<<k_blocks(n), K_THREADS, 0, cu_ctx.stream>>>(d, src, n);
    CU_LAUNCHED("to_f16");
}
void k_to_half_pad(void *dst, const float *src, size_t rows, size_t cols, size_t pcols) {
    if (cu_ctx.dtype != CU_FP16) return k_to_bf16_pad(dst, src, rows, cols, pcols);
    if (pcols == cols) return k_to_half(dst, src, rows * cols);
    size_t n = rows * pcols;
    if (!n) return;
    to_f16_pad_kernel<<<k_blocks(n), K_THREADS, 0, cu_ctx.stream>>>((__half *)dst, src, cols, pcols,
                                                                    n);
    CU_LAUNCHED("to_f16_pad");
}
}
