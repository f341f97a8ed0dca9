// k_nn.cu — the CUDA backend's model kernels: embedding forward/backward (the token scatter
// grouped by token on the host, so no atomics and the CPU's summation order), LayerNorm
// (a warp per row; parameter gradients through fixed per-block partial sums), bias rows and
// bias gradients, the classifier's softmax + cross-entropy (a block per row, one online
// max/sum pass), and the causal softmax of attention with its backward (a warp per row).
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "k_common.cuh"

#define LN_EPS 1e-5f
enum { ROWS_PER_BLOCK = K_THREADS / 32 };

static unsigned row_blocks(size_t rows) {
    return (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
}

// ------------------------------------------------------------------ embedding

__global__ void encoder_fwd_kernel(float *out, const int *tok, const float *wte, const float *wpe,
                                   int T, int C, size_t n) {
    GRID_STRIDE(i, n) {
        size_t bt = i / C;
        int c = (int)(i % C), t = (int)(bt % T);
        out[i] = wte[(size_t)tok[bt] * C + c] + wpe[(size_t)t * C + c];
    }
}

__global__ void encoder_bwd_wpe_kernel(float *dwpe, const float *dout, int B, int T, int C) {
    size_t n = (size_t)T * C;
    GRID_STRIDE(i, n) {
        float v = dwpe[i];
        for (int b = 0; b < B; b++) // in b order, as the CPU adds them
            v += dout[(size_t)b * n + i];
        dwpe[i] = v;
    }
}

__global__ void encoder_bwd_wte_kernel(float *dwte, const float *dout, const int *ids,
                                       const int *start, const int *perm, int C) {
    int u = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float *dst = dwte + (size_t)ids[u] * C + c;
    float v = *dst;
    for (int k = start[u]; k < start[u + 1]; k++) // positions in increasing order
        v += dout[(size_t)perm[k] * C + c];
    *dst = v;
}

// ------------------------------------------------------------------ layernorm

// out fp32, or bf16 for a product's input kept in 16 bits (cuda_act16.c)
__device__ __forceinline__ void st_act(float *o, int i, float v) { o[i] = v; }
__device__ __forceinline__ void st_act(__nv_bfloat16 *o, int i, float v) {
    o[i] = __float2bfloat16_rn(v);
}

// One row of a warp: o (C) = layernorm(x) · w + b, its mean and rstd (lane 0 stores them)
template <typename O>
__device__ __forceinline__ void ln_row(O *o, float *mean, float *rstd, const float *x,
                                       const float *w, const float *b, int C, int lane) {
    float s = 0.f;
    for (int c = lane; c < C; c += 32)
        s += x[c];
    float m = warp_sum(s) / C;
    float v = 0.f;
    for (int c = lane; c < C; c += 32) {
        float d = x[c] - m;
        v += d * d;
    }
    float rs = 1.0f / sqrtf(warp_sum(v) / C + LN_EPS);
    for (int c = lane; c < C; c += 32)
        st_act(o, c, (x[c] - m) * rs * w[c] + b[c]);
    if (lane == 0) *mean = m, *rstd = rs;
}

template <typename O>
__global__ void ln_fwd_kernel(O *out, float *mean, float *rstd, const float *inp, const float *w,
                              const float *b, int N, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    size_t r = (size_t)row * C;
    ln_row(out + r, mean + row, rstd + row, inp + r, w, b, C, lane);
}

// res = a + b (res may be a or b: each element is read, then written, by one thread), then
// ln_fwd_kernel's LayerNorm of res: the same sums in the same order, so the same bits as the
// residual kernel followed by it; each lane reads back the elements it just wrote
template <typename O>
__global__ void res_ln_fwd_kernel(float *res, O *out, float *mean, float *rstd, const float *a,
                                  const float *b, const float *w, const float *bias, int N, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    size_t r = (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        res[r + c] = a[r + c] + b[r + c];
    ln_row(out + r, mean + row, rstd + row, res + r, w, bias, C, lane);
}

__global__ void ln_bwd_rows_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                   const float *mean, const float *rstd, int N, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
    float m = mean[row], s = rstd[row], a = 0.f, bsum = 0.f;
    for (int c = lane; c < C; c += 32) {
        float dn = w[c] * d[c];
        a += dn;
        bsum += dn * (x[c] - m) * s;
    }
    a = warp_sum(a) / C;
    bsum = warp_sum(bsum) / C;
    float *di = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float xh = (x[c] - m) * s;
        di[c] += (w[c] * d[c] - a - xh * bsum) * s;
    }
}

// Column sums over rows in fixed groups: block (bx, by) sums columns [32·bx, 32·bx+32) over
// rows by·8+ty, by·8+ty + R·8, ... into part[by·C + c] (two arrays when ln: Σ x̂·d and Σ d).
// With ln == 0 only part0 (Σ d) is written.
__device__ __forceinline__ float ld_d(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float ld_d(const __nv_bfloat16 *p, size_t i) {
    return __bfloat162float(p[i]);
}

template <typename DT>
__global__ void colpart_kernel(float *part0, float *part1, const DT *d, const float *inp,
                               const float *mean, const float *rstd, int N, int C, int ln) {
    __shared__ float s0[8][33], s1[8][33];
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5, c = blockIdx.x * 32 + tx;
    int R = gridDim.y;
    float a0 = 0.f, a1 = 0.f;
    if (c < C) {
        for (int n = blockIdx.y * 8 + ty; n < N; n += R * 8) {
            float dv = ld_d(d, (size_t)n * C + c);
            a0 += dv;
            if (ln) a1 += (inp[(size_t)n * C + c] - mean[n]) * rstd[n] * dv;
        }
    }
    s0[ty][tx] = a0, s1[ty][tx] = a1;
    __syncthreads();
    if (ty == 0 && c < C) {
        for (int k = 1; k < 8; k++)
            a0 += s0[k][tx], a1 += s1[k][tx];
        part0[(size_t)blockIdx.y * C + c] = a0;
        if (ln) part1[(size_t)blockIdx.y * C + c] = a1;
    }
}

// dst[c] += Σ_r part[r·C + c], r in order
__global__ void colfinish_kernel(float *dst, const float *part, int R, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.f;
    for (int r = 0; r < R; r++)
        acc += part[(size_t)r * C + c];
    dst[c] += acc;
}

static int col_groups(int N) {
    int R = (N + 63) / 64;
    return R < 1 ? 1 : R > 256 ? 256 : R;
}

// dst0 += Σ_n d[n,:]; with ln, dst1 += Σ_n x̂[n,:]·d[n,:] (d fp32, or bf16 for a bias)
template <typename DT>
static void col_sums(float *dst0, float *dst1, const DT *d, const float *inp, const float *mean,
                     const float *rstd, int N, int C) {
    int R = col_groups(N), ln = dst1 != NULL;
    float *part = (float *)cu_scratch(SCR_PART, (size_t)2 * R * C * sizeof(float));
    dim3 grid((unsigned)((C + 31) / 32), (unsigned)R);
    colpart_kernel<<<grid, K_THREADS, 0, cu_ctx.stream>>>(part, part + (size_t)R * C, d, inp, mean,
                                                          rstd, N, C, ln);
    CU_LAUNCHED("colpart");
    unsigned fb = (unsigned)((C + K_THREADS - 1) / K_THREADS);
    colfinish_kernel<<<fb, K_THREADS, 0, cu_ctx.stream>>>(dst0, part, R, C);
    if (ln) colfinish_kernel<<<fb, K_THREADS, 0, cu_ctx.stream>>>(dst1, part + (size_t)R * C, R, C);
    CU_LAUNCHED("colfinish");
}

__global__ void bias_rows_kernel(float *out, const float *bias, int OC, size_t n) {
    GRID_STRIDE(i, n) { out[i] = bias[i % OC]; }
}

// ------------------------------------------------------------------ classifier

// (m, s) pairs of a running max and Σ exp(x − m); combining keeps s relative to the new max.
__device__ __forceinline__ void ms_add(float &m, float &s, float m2, float s2) {
    float mx = fmaxf(m, m2);
    if (mx == -INFINITY) return; // both empty
    s = (m == -INFINITY ? 0.f : s * expf(m - mx)) + (m2 == -INFINITY ? 0.f : s2 * expf(m2 - mx));
    m = mx;
}

// Every thread's (m, s) combined: each thread gets the block's, the warps combined in one
// order. sh: 64 floats of shared memory.
__device__ void block_ms_combine(float &m, float &s, float *sh) {
    for (int o = 16; o > 0; o >>= 1)
        ms_add(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) sh[wid] = m, sh[32 + wid] = s;
    __syncthreads();
    m = -INFINITY, s = 0.f;
    for (int k = 0; k < nw; k++)
        ms_add(m, s, sh[k], sh[32 + k]);
}

// One element into a running (m, s): one exp.
__device__ __forceinline__ void ms_push(float &m, float &s, float x) {
    if (x > m) {
        s = (m == -INFINITY ? 0.f : s * expf(m - x)) + 1.f;
        m = x;
    } else {
        s += expf(x - m);
    }
}

// The block's row max m and Σ exp(x − m) over row[0..V), one exp per element; every thread
// gets the same (m, s), the warps combined in one order. sh: 64 floats of shared memory.
__device__ void row_max_sum(const float *row, int V, float &m, float &s, float *sh) {
    m = -INFINITY, s = 0.f;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        ms_push(m, s, row[j]);
    block_ms_combine(m, s, sh);
}

__global__ void xent_fwd_kernel(float *lp, float *losses, const int *targets, int V) {
    __shared__ float sh[64];
    float *row = lp + (size_t)blockIdx.x * V;
    float m, s;
    row_max_sum(row, V, m, s, sh);
    float zt = row[targets[blockIdx.x]]; // read before the row is overwritten
    __syncthreads();
    float inv = 1.0f / s;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        row[j] = expf(row[j] - m) * inv;
    if (threadIdx.x == 0) losses[blockIdx.x] = logf(s) - (zt - m);
}

__global__ void xent_bwd_kernel(float *pd, const int *targets, float scale, int V) {
    float *row = pd + (size_t)blockIdx.x * V;
    int t = targets[blockIdx.x];
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        row[j] = row[j] * scale - (j == t ? scale : 0.f);
}

// 8 bf16 of a 16-byte load, in fp32
__device__ __forceinline__ void unpack8(const uint4 &u, float x[8]) {
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 f = __bfloat1622float2(h[i]);
        x[2 * i] = f.x, x[2 * i + 1] = f.y;
    }
}

// row_max_sum of a bf16 row whose start is 16-byte aligned: 8 columns per load, the running
// max moved once per 8 (one exp per element plus one per group that raises it), the columns
// past the last full group of 8 one at a time.
__device__ void row_max_sum_bf8(const __nv_bfloat16 *row, int V, float &m, float &s, float *sh) {
    m = -INFINITY, s = 0.f;
    int V8 = V / 8 * 8;
    for (int j = 8 * threadIdx.x; j < V8; j += 8 * blockDim.x) {
        float x[8];
        unpack8(*reinterpret_cast<const uint4 *>(row + j), x);
        float lm = x[0];
#pragma unroll
        for (int i = 1; i < 8; i++)
            lm = fmaxf(lm, x[i]);
        if (lm > m) s = (m == -INFINITY ? 0.f : s * expf(m - lm)), m = lm;
        if (m == -INFINITY) continue; // all -inf so far
#pragma unroll
        for (int i = 0; i < 8; i++)
            s += expf(x[i] - m);
    }
    for (int j = V8 + threadIdx.x; j < V; j += blockDim.x)
        ms_push(m, s, __bfloat162float(row[j]));
    block_ms_combine(m, s, sh);
}

// One row of an fp32 classifier chunk per block: the online max / sum over the V real columns,
// the loss, and with grad the row overwritten by (softmax − onehot)·scale (padding 0).
__global__ void xent_chunk_kernel(float *lg, float *losses, const int *targets, int V, int P,
                                  float scale, int grad) {
    __shared__ float sh[64];
    float *row = lg + (size_t)blockIdx.x * P;
    float m, s;
    row_max_sum(row, V, m, s, sh);
    int tgt = targets[blockIdx.x];
    float zt = row[tgt];
    __syncthreads(); // the target's logit is read before the row is overwritten
    if (threadIdx.x == 0) losses[blockIdx.x] = logf(s) - (zt - m);
    if (!grad) return;
    float inv = scale / s;
    for (int j = threadIdx.x; j < P; j += blockDim.x)
        row[j] = j < V ? expf(row[j] - m) * inv - (j == tgt ? scale : 0.f) : 0.f;
}

// The same for bf16 chunks whose pitch P is a multiple of 8 (16-byte rows): 8 columns per
// load and per store.
__global__ void xent_chunk_bf8_kernel(__nv_bfloat16 *lg, float *losses, const int *targets, int V,
                                      int P, float scale, int grad) {
    __shared__ float sh[64];
    __nv_bfloat16 *row = lg + (size_t)blockIdx.x * P;
    float m, s;
    row_max_sum_bf8(row, V, m, s, sh);
    int tgt = targets[blockIdx.x];
    float zt = __bfloat162float(row[tgt]);
    __syncthreads(); // the target's logit is read before the row is overwritten
    if (threadIdx.x == 0) losses[blockIdx.x] = logf(s) - (zt - m);
    if (!grad) return;
    float inv = scale / s;
    for (int j = 8 * threadIdx.x; j < P; j += 8 * blockDim.x) {
        float x[8];
        unpack8(*reinterpret_cast<const uint4 *>(row + j), x);
        uint4 u;
        __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int c = j + 2 * i;
            float a = c < V ? expf(x[2 * i] - m) * inv - (c == tgt ? scale : 0.f) : 0.f;
            float b = c + 1 < V ? expf(x[2 * i + 1] - m) * inv - (c + 1 == tgt ? scale : 0.f) : 0.f;
            h[i] = __floats2bfloat162_rn(a, b);
        }
        *reinterpret_cast<uint4 *>(row + j) = u;
    }
}

// ------------------------------------------------------------------ attention softmax

__global__ void causal_softmax_kernel(float *att, size_t rows, int T) {
    size_t r = (size_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    int t = (int)(r % T);
    float *row = att + r * T;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += 32)
        mx = fmaxf(mx, row[j]);
    mx = warp_max(mx);
    float sum = 0.f;
    for (int j = lane; j <= t; j += 32) {
        float e = expf(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < T; j += 32)
        row[j] = j <= t ? row[j] * inv : 0.f;
}

__global__ void causal_softmax_bwd_kernel(float *datt, const float *att, size_t rows, int T) {
    size_t r = (size_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    int t = (int)(r % T);
    float *d = datt + r * T;
    const float *a = att + r * T;
    float dot = 0.f;
    for (int j = lane; j <= t; j += 32)
        dot += a[j] * d[j];
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += 32)
        d[j] = j <= t ? a[j] * (d[j] - dot) : 0.f;
}

// ------------------------------------------------------------------ launchers

extern "C" {
void k_encoder_forward(float *out, const int *tok, const float *wte, const float *wpe, int B, int T,
                       int C) {
    size_t n = (size_t)B * T * C;
    if (!n) return;
    encoder_fwd_kernel<<<k_blocks(n), K_THREADS, 0, cu_ctx.stream>>>(out, tok, wte, wpe, T, C, n);
    CU_LAUNCHED("encoder_forward");
}
void k_encoder_backward_wpe(float *dwpe, const float *dout, int B, int T, int C) {
    size_t n = (size_t)T * C;
    if (!n) return;
    encoder_bwd_wpe_kernel<<<k_blocks(n), K_THREADS, 0, cu_ctx.stream>>>(dwpe, dout, B, T, C);
    CU_LAUNCHED("encoder_backward_wpe");
}
void k_encoder_backward_wte(float *dwte, const float *dout, const int *ids, const int *start,
                            const int *perm, int U, int C) {
    if (!U || !C) return;
    dim3 grid((unsigned)U, (unsigned)((C + K_THREADS - 1) / K_THREADS));
    encoder_bwd_wte_kernel<<<grid, K_THREADS, 0, cu_ctx.stream>>>(dwte, dout, ids, start, perm, C);
    CU_LAUNCHED("encoder_backward_wte");
}
void k_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                         const float *b, int N, int C) {
    if (N <= 0) return;
    ln_fwd_kernel<<<row_blocks(N), K_THREADS, 0, cu_ctx.stream>>>(out, mean, rstd, inp, w, b, N, C);
    CU_LAUNCHED("layernorm_forward");
}
void k_layernorm_forward16(void *out, float *mean, float *rstd, const float *inp, const float *w,
                           const float *b, int N, int C) {
    if (N <= 0) return;
    ln_fwd_kernel<<<row_blocks(N), K_THREADS, 0, cu_ctx.stream>>>((__nv_bfloat16 *)out, mean, rstd,
                                                                  inp, w, b, N, C);
    CU_LAUNCHED("layernorm_forward16");
}
void k_residual_layernorm_forward(float *res, void *out, int out16, float *mean, float *rstd,
                                  const float *a, const float *b, const float *w, const float *bias,
                                  int N, int C) {
    if (N <= 0) return;
    if (out16)
        res_ln_fwd_kernel<<<row_blocks(N), K_THREADS, 0, cu_ctx.stream>>>(
            res, (__nv_bfloat16 *)out, mean, rstd, a, b, w, bias, N, C);
    else
        res_ln_fwd_kernel<<<row_blocks(N), K_THREADS, 0, cu_ctx.stream>>>(
            res, (float *)out, mean, rstd, a, b, w, bias, N, C);
    CU_LAUNCHED("residual_layernorm_forward");
}
void k_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, const float *mean, const float *rstd, int N, int C) {
    if (N <= 0) return;
    ln_bwd_rows_kernel<<<row_blocks(N), K_THREADS, 0, cu_ctx.stream>>>(dinp, dout, inp, w, mean,
                                                                       rstd, N, C);
    CU_LAUNCHED("layernorm_backward");
    col_sums(db, dw, dout, inp, mean, rstd, N, C);
}
void k_bias_rows(float *out, const float *bias, int N, int OC) {
    size_t n = (size_t)N * OC;
    if (!n) return;
    bias_rows_kernel<<<k_blocks(n), K_THREADS, 0, cu_ctx.stream>>>(out, bias, OC, n);
    CU_LAUNCHED("bias_rows");
}
void k_bias_backward(float *dbias, const float *dout, int N, int OC) {
    if (N <= 0) return;
    col_sums(dbias, NULL, dout, NULL, NULL, NULL, N, OC);
}
void k_bias_backward16(float *dbias, const void *dout, int N, int OC) {
    if (N <= 0) return;
    col_sums(dbias, NULL, (const __nv_bfloat16 *)dout, NULL, NULL, NULL, N, OC);
}
void k_softmax_xent_forward(float *lp, float *losses, const int *targets, int N, int V) {
    if (N <= 0) return;
    xent_fwd_kernel<<<(unsigned)N, 512, 0, cu_ctx.stream>>>(lp, losses, targets, V);
    CU_LAUNCHED("softmax_xent_forward");
}
void k_softmax_xent_backward(float *pd, const int *targets, float scale, int N, int V) {
    if (N <= 0) return;
    xent_bwd_kernel<<<(unsigned)N, 512, 0, cu_ctx.stream>>>(pd, targets, scale, V);
    CU_LAUNCHED("softmax_xent_backward");
}
void k_xent_chunk(void *lg, int bf, float *losses, const int *targets, int N, int V, int P,
                  float scale, int grad) {
    if (N <= 0) return;
    if (bf) // cuda_classifier pads bf16 chunks to a multiple of 64 columns in cu_scratch
        xent_chunk_bf8_kernel<<<(unsigned)N, 512, 0, cu_ctx.stream>>>((__nv_bfloat16 *)lg, losses,
                                                                      targets, V, P, scale, grad);
    else
        xent_chunk_kernel<<<(unsigned)N, 512, 0, cu_ctx.stream>>>((float *)lg, losses, targets, V,
                                                                  P, scale, grad);
    CU_LAUNCHED("xent_chunk");
}
void k_causal_softmax(float *att, size_t rows, int T) {
    if (!rows) return;
    causal_softmax_kernel<<<row_blocks(rows), K_THREADS, 0, cu_ctx.stream>>>(att, rows, T);
    CU_LAUNCHED("causal_softmax");
}
void k_causal_softmax_backward(float *datt, const float *att, size_t rows, int T) {
    if (!rows) return;
    causal_softmax_bwd_kernel<<<row_blocks(rows), K_THREADS, 0, cu_ctx.stream>>>(datt, att, rows,
                                                                                 T);
    CU_LAUNCHED("causal_softmax_backward");
}
}
