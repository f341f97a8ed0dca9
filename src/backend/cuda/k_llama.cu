// k_llama.cu — the CUDA kernels of the LLaMA block (semantics in backend.h, the CPU's in
// cpu_llama.c and cpu_attention.c): RMSNorm (a warp per row; the weight gradient through fixed
// per-block partial sums, no atomics), rotary embeddings in Hugging Face's rotate-half
// convention (a thread per rotated pair), SwiGLU (element-wise), and grouped-query causal
// attention written for clarity rather than speed: a block per query row in the forward and
// the query gradient, a block per key row for the key and value gradients (so every output row
// has one writer and nothing is summed by atomics), the kv head of a query head read in place
// (no repeated K/V), and only the (B,NH,T) log-sum-exps kept for the backward.
#include <math.h>

#include "k_common.cuh"

enum { RMS_ROWS = K_THREADS / 32, GQA_THREADS = 128 };

// ------------------------------------------------------------------ RMSNorm

__global__ void rms_fwd_kernel(float *out, float *rstd, const float *inp, const float *w, int N,
                               int C, float eps) {
    int row = blockIdx.x * RMS_ROWS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float ss = 0.f;
    for (int c = lane; c < C; c += 32)
        ss += x[c] * x[c];
    float r = 1.0f / sqrtf(warp_sum(ss) / (float)C + eps);
    float *y = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        y[c] = x[c] * r * w[c];
    if (lane == 0) rstd[row] = r;
}

// dx_i += r·w_i·g_i − x_i · r³/C · Σ_k g_k·w_k·x_k
__global__ void rms_bwd_rows_kernel(float *dinp, const float *dout, const float *inp,
                                    const float *w, const float *rstd, int N, int C) {
    int row = blockIdx.x * RMS_ROWS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C, *g = dout + (size_t)row * C;
    float r = rstd[row], dot = 0.f;
    for (int c = lane; c < C; c += 32)
        dot += g[c] * w[c] * x[c];
    float k = warp_sum(dot) * r * r * r / (float)C;
    float *dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        dx[c] += r * w[c] * g[c] - x[c] * k;
}

// part[by·C + c] = Σ g·x·r over rows by·8+ty, by·8+ty + R·8, ... (block: 32 columns × 8 rows)
__global__ void rms_dw_part_kernel(float *part, const float *dout, const float *inp,
                                   const float *rstd, int N, int C) {
    __shared__ float sh[8][33];
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5, c = blockIdx.x * 32 + tx, R = gridDim.y;
    float a = 0.f;
    if (c < C)
        for (int n = blockIdx.y * 8 + ty; n < N; n += R * 8)
            a += dout[(size_t)n * C + c] * inp[(size_t)n * C + c] * rstd[n];
    sh[ty][tx] = a;
    __syncthreads();
    if (ty == 0 && c < C) {
        for (int k = 1; k < 8; k++)
            a += sh[k][tx];
        part[(size_t)blockIdx.y * C + c] = a;
    }
}

// dw[c] += Σ_r part[r·C + c], r in order
__global__ void rms_dw_finish_kernel(float *dw, const float *part, int R, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.f;
    for (int r = 0; r < R; r++)
        acc += part[(size_t)r * C + c];
    dw[c] += acc;
}

extern "C" void k_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N,
                                  int C, float eps) {
    if (N <= 0) return;
    unsigned blocks = (unsigned)((N + RMS_ROWS - 1) / RMS_ROWS);
    rms_fwd_kernel<<<blocks, K_THREADS, 0, cu_ctx.stream>>>(out, rstd, inp, w, N, C, eps);
    CU_LAUNCHED("rms_fwd");
}

extern "C" void k_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                                   const float *w, const float *rstd, int N, int C) {
    if (N <= 0) return;
    unsigned blocks = (unsigned)((N + RMS_ROWS - 1) / RMS_ROWS);
    rms_bwd_rows_kernel<<<blocks, K_THREADS, 0, cu_ctx.stream>>>(dinp, dout, inp, w, rstd, N, C);
    CU_LAUNCHED("rms_bwd_rows");
    int R = (N + 63) / 64;
    R = R > 256 ? 256 : R;
    float *part = (float *)cu_scratch(SCR_PART, (size_t)R * C * sizeof(float));
    dim3 grid((unsigned)((C + 31) / 32), (unsigned)R);
    rms_dw_part_kernel<<<grid, K_THREADS, 0, cu_ctx.stream>>>(part, dout, inp, rstd, N, C);
    CU_LAUNCHED("rms_dw_part");
    unsigned fb = (unsigned)((C + K_THREADS - 1) / K_THREADS);
    rms_dw_finish_kernel<<<fb, K_THREADS, 0, cu_ctx.stream>>>(dw, part, R, C);
    CU_LAUNCHED("rms_dw_finish");
}

// ------------------------------------------------------------------ rotary embeddings

// One thread per pair (row (b,t), head hh of the NH query and NKV key heads, i < hs/2): element
// i pairs with i + hs/2, rotated by pos[t]·inv_freq[i] (the angle in float, as the CPU forms
// it); sign −1 rotates back.
__global__ void rope_kernel(float *qkv, const int *pos, const float *inv_freq, int T, int NH,
                            int NKV, int hs, float sign, size_t n) {
    int half = hs / 2, heads = NH + NKV;
    size_t W = (size_t)(NH + 2 * NKV) * hs;
    GRID_STRIDE(idx, n) {
        int i = (int)(idx % half);
        size_t rest = idx / half;
        int hh = (int)(rest % heads);
        size_t bt = rest / heads;
        int t = (int)(bt % T);
        float ang = (float)pos[t] * inv_freq[i];
        float cs = cosf(ang), s = sign * sinf(ang);
        float *a = qkv + bt * W + (size_t)hh * hs, *b = a + half;
        float x1 = a[i], x2 = b[i];
        a[i] = x1 * cs - x2 * s;
        b[i] = x2 * cs + x1 * s;
    }
}

extern "C" void k_rope(float *qkv, const int *pos_dev, const float *freq_dev, int B, int T, int NH,
                       int NKV, int hs, float sign) {
    size_t n = (size_t)B * T * (NH + NKV) * (hs / 2);
    if (!n) return;
    rope_kernel<<<k_blocks(n), K_THREADS, 0, cu_ctx.stream>>>(qkv, pos_dev, freq_dev, T, NH, NKV,
                                                              hs, sign, n);
    CU_LAUNCHED("rope");
}

// ------------------------------------------------------------------ SwiGLU

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void swiglu_fwd_kernel(float *out, const float *inp, int F, size_t n) {
    GRID_STRIDE(i, n) {
        size_t r = i / F;
        int f = (int)(i % F);
        float g = inp[r * 2 * F + f], u = inp[r * 2 * F + F + f];
        out[i] = g * sigmoidf_(g) * u;
    }
}

// silu'(g) = σ(g)·(1 + g·(1 − σ(g)))
__global__ void swiglu_bwd_kernel(float *dinp, const float *inp, const float *dout, int F,
                                  size_t n) {
    GRID_STRIDE(i, n) {
        size_t r = i / F;
        int f = (int)(i % F);
        float g = inp[r * 2 * F + f], u = inp[r * 2 * F + F + f], dy = dout[i];
        float s = sigmoidf_(g);
        dinp[r * 2 * F + F + f] = dy * g * s;
        dinp[r * 2 * F + f] = dy * u * s * (1.0f + g * (1.0f - s));
    }
}

extern "C" void k_swiglu_forward(float *out, const float *inp, int N, int F) {
    size_t n = (size_t)N * F;
    if (!n) return;
    swiglu_fwd_kernel<<<k_blocks(n), K_THREADS, 0, cu_ctx.stream>>>(out, inp, F, n);
    CU_LAUNCHED("swiglu_fwd");
}

extern "C" void k_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F) {
    size_t n = (size_t)N * F;
    if (!n) return;
    swiglu_bwd_kernel<<<k_blocks(n), K_THREADS, 0, cu_ctx.stream>>>(dinp, inp, dout, F, n);
    CU_LAUNCHED("swiglu_bwd");
}

// ------------------------------------------------------------------ grouped-query attention
// qkv row (b,t) has W = (NH+2·NKV)·hs floats: query head h at h·hs, key head g at (NH+g)·hs,
// value head g at (NH+NKV+g)·hs; query head h reads kv head h / (NH/NKV). out and dout rows
// have NH·hs floats. lse (B,NH,T): log Σ_j exp(s_tj), s_tj = q_t·k_j / √hs over j ≤ t.

struct GqaDims {
    int T, NH, NKV, hs;
    size_t W, C; // row strides of qkv and of out
    float scale;
};

__device__ __forceinline__ float dot_(const float *a, const float *b, int n) {
    float s = 0.f;
    for (int d = 0; d < n; d++)
        s += a[d] * b[d];
    return s;
}

// (m, s) pairs of a running max and Σ exp(x − m): combining keeps s relative to the new max.
__device__ __forceinline__ void ms_merge(float &m, float &s, float m2, float s2) {
    float mx = fmaxf(m, m2);
    if (mx == -INFINITY) return;
    s = (m == -INFINITY ? 0.f : s * expf(m - mx)) + (m2 == -INFINITY ? 0.f : s2 * expf(m2 - mx));
    m = mx;
}

// Block (t, h, b): lse of the row, then out row = Σ_j exp(s_tj − lse)·v_j, a tile of
// GQA_THREADS keys at a time (probabilities in shared memory, a thread per output column).
__global__ void gqa_fwd_kernel(float *out, float *lse, const float *qkv, GqaDims d) {
    __shared__ float p[GQA_THREADS], sh[64];
    int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    int g = h / (d.NH / d.NKV);
    const float *base = qkv + (size_t)b * d.T * d.W;
    const float *q = base + (size_t)t * d.W + (size_t)h * d.hs;
    const float *kh = base + (size_t)(d.NH + g) * d.hs, *vh = kh + (size_t)d.NKV * d.hs;
    float m = -INFINITY, s = 0.f;
    for (int j = tid; j <= t; j += blockDim.x)
        ms_merge(m, s, dot_(q, kh + (size_t)j * d.W, d.hs) * d.scale, 1.f);
    for (int o = 16; o > 0; o >>= 1)
        ms_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    int lane = tid & 31, wid = tid >> 5, nw = blockDim.x >> 5;
    if (lane == 0) sh[wid] = m, sh[32 + wid] = s;
    __syncthreads();
    m = -INFINITY, s = 0.f;
    for (int k = 0; k < nw; k++)
        ms_merge(m, s, sh[k], sh[32 + k]);
    float L = m + logf(s); // key 0 is always visible: s ≥ 1
    if (tid == 0) lse[((size_t)b * d.NH + h) * d.T + t] = L;
    float *o = out + ((size_t)b * d.T + t) * d.C + (size_t)h * d.hs;
    for (int c = tid; c < d.hs; c += blockDim.x)
        o[c] = 0.f;
    for (int j0 = 0; j0 <= t; j0 += blockDim.x) {
        int j = j0 + tid;
        p[tid] = j <= t ? expf(dot_(q, kh + (size_t)j * d.W, d.hs) * d.scale - L) : 0.f;
        __syncthreads();
        int nj = t + 1 - j0 < (int)blockDim.x ? t + 1 - j0 : (int)blockDim.x;
        for (int c = tid; c < d.hs; c += blockDim.x) { // this thread alone owns o[c]
            float a = o[c];
            for (int jj = 0; jj < nj; jj++)
                a += p[jj] * vh[(size_t)(j0 + jj) * d.W + c];
            o[c] = a;
        }
        __syncthreads();
    }
}

// Block (t, h, b): dq_t = scale · Σ_j p_tj (dout_t·v_j − dout_t·out_t) k_j (overwritten).
__global__ void gqa_bwd_q_kernel(float *dqkv, const float *dout, const float *qkv, const float *out,
                                 const float *lse, GqaDims d) {
    __shared__ float ds[GQA_THREADS], sh[32];
    int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    int g = h / (d.NH / d.NKV);
    const float *base = qkv + (size_t)b * d.T * d.W;
    const float *q = base + (size_t)t * d.W + (size_t)h * d.hs;
    const float *kh = base + (size_t)(d.NH + g) * d.hs, *vh = kh + (size_t)d.NKV * d.hs;
    size_t orow = ((size_t)b * d.T + t) * d.C + (size_t)h * d.hs;
    const float *dy = dout + orow, *y = out + orow;
    float part = 0.f;
    for (int c = tid; c < d.hs; c += blockDim.x)
        part += dy[c] * y[c];
    float D = block_sum(part, sh), L = lse[((size_t)b * d.NH + h) * d.T + t];
    float *dq = dqkv + (size_t)b * d.T * d.W + (size_t)t * d.W + (size_t)h * d.hs;
    for (int c = tid; c < d.hs; c += blockDim.x)
        dq[c] = 0.f;
    for (int j0 = 0; j0 <= t; j0 += blockDim.x) {
        int j = j0 + tid;
        float v = 0.f;
        if (j <= t) {
            float p = expf(dot_(q, kh + (size_t)j * d.W, d.hs) * d.scale - L);
            v = p * (dot_(dy, vh + (size_t)j * d.W, d.hs) - D);
        }
        ds[tid] = v;
        __syncthreads();
        int nj = t + 1 - j0 < (int)blockDim.x ? t + 1 - j0 : (int)blockDim.x;
        for (int c = tid; c < d.hs; c += blockDim.x) {
            float a = 0.f;
            for (int jj = 0; jj < nj; jj++)
                a += ds[jj] * kh[(size_t)(j0 + jj) * d.W + c];
            dq[c] += a * d.scale;
        }
        __syncthreads();
    }
}

// Block (j, g, b): key row j of kv head g, over every query head of its group and every query
// t ≥ j: dv_j = Σ p_tj dout_t, dk_j = scale · Σ p_tj (dout_t·v_j − dout_t·out_t) q_t
// (both overwritten).
__global__ void gqa_bwd_kv_kernel(float *dqkv, const float *dout, const float *qkv,
                                  const float *out, const float *lse, GqaDims d) {
    __shared__ float sp[GQA_THREADS], sds[GQA_THREADS];
    int j = blockIdx.x, g = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    int G = d.NH / d.NKV;
    const float *base = qkv + (size_t)b * d.T * d.W;
    const float *k = base + (size_t)j * d.W + (size_t)(d.NH + g) * d.hs;
    const float *v = k + (size_t)d.NKV * d.hs;
    float *dk = dqkv + (size_t)b * d.T * d.W + (size_t)j * d.W + (size_t)(d.NH + g) * d.hs;
    float *dv = dk + (size_t)d.NKV * d.hs;
    for (int c = tid; c < d.hs; c += blockDim.x)
        dk[c] = 0.f, dv[c] = 0.f;
    for (int h = g * G; h < (g + 1) * G; h++) {
        const float *qh = base + (size_t)h * d.hs;
        const float *dyh = dout + (size_t)b * d.T * d.C + (size_t)h * d.hs;
        const float *yh = out + (size_t)b * d.T * d.C + (size_t)h * d.hs;
        const float *L = lse + ((size_t)b * d.NH + h) * d.T;
        for (int t0 = j; t0 < d.T; t0 += blockDim.x) {
            int t = t0 + tid;
            float p = 0.f, s = 0.f;
            if (t < d.T) {
                const float *dy = dyh + (size_t)t * d.C;
                p = expf(dot_(qh + (size_t)t * d.W, k, d.hs) * d.scale - L[t]);
                s = p * (dot_(dy, v, d.hs) - dot_(dy, yh + (size_t)t * d.C, d.hs));
            }
            sp[tid] = p, sds[tid] = s;
            __syncthreads();
            int nt = d.T - t0 < (int)blockDim.x ? d.T - t0 : (int)blockDim.x;
            for (int c = tid; c < d.hs; c += blockDim.x) { // this thread alone owns dk[c], dv[c]
                float av = 0.f, ak = 0.f;
                for (int tt = 0; tt < nt; tt++) {
                    av += sp[tt] * dyh[(size_t)(t0 + tt) * d.C + c];
                    ak += sds[tt] * qh[(size_t)(t0 + tt) * d.W + c];
                }
                dv[c] += av;
                dk[c] += ak * d.scale;
            }
            __syncthreads();
        }
    }
}

static GqaDims gqa_dims(int T, int NH, int NKV, int hs) {
    GqaDims d;
    d.T = T, d.NH = NH, d.NKV = NKV, d.hs = hs;
    d.W = (size_t)(NH + 2 * NKV) * hs, d.C = (size_t)NH * hs;
    d.scale = 1.0f / sqrtf((float)hs);
    return d;
}

extern "C" void k_gqa_forward(float *out, float *lse, const float *qkv, int B, int T, int NH,
                              int NKV, int hs) {
    if (B <= 0 || T <= 0) return;
    dim3 grid((unsigned)T, (unsigned)NH, (unsigned)B);
    gqa_fwd_kernel<<<grid, GQA_THREADS, 0, cu_ctx.stream>>>(out, lse, qkv,
                                                            gqa_dims(T, NH, NKV, hs));
    CU_LAUNCHED("gqa_fwd");
}

extern "C" void k_gqa_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *lse, int B, int T, int NH, int NKV, int hs) {
    if (B <= 0 || T <= 0) return;
    GqaDims d = gqa_dims(T, NH, NKV, hs);
    gqa_bwd_q_kernel<<<dim3((unsigned)T, (unsigned)NH, (unsigned)B), GQA_THREADS, 0,
                       cu_ctx.stream>>>(dqkv, dout, qkv, out, lse, d);
    CU_LAUNCHED("gqa_bwd_q");
    gqa_bwd_kv_kernel<<<dim3((unsigned)T, (unsigned)NKV, (unsigned)B), GQA_THREADS, 0,
                        cu_ctx.stream>>>(dqkv, dout, qkv, out, lse, d);
    CU_LAUNCHED("gqa_bwd_kv");
}
