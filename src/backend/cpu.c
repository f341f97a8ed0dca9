// cpu.c — the CPU backend: matrix products through cpu_sgemm (cpu_gemm.c), everything else in C
// with OpenMP. Every loop that touches B·T rows or a whole parameter tensor is parallel. The
// heavy loops whose iterations write disjoint outputs (LayerNorm's forward rows, GELU, the loss
// rows, AdamW) hand their chunks out dynamically, so a thread that shares its core with another
// process does less of the work; loops that sum per-thread partials keep static schedules (the
// sums' order, hence their bits, must not depend on timing).
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "backend.h"
#include "cpu_impl.h"
#include "cpu_lnsplit.h"
#include "cpu_shard.h"

#define LN_EPS 1e-5f
#define GELU_K 0.7978845608028654f // sqrt(2/pi)

// ------------------------------------------------------------------ memory

static float *cpu_alloc(size_t n) { return xalloc_floats(n); }
static void cpu_release(float *p) { free(p); }
static void cpu_copy(float *dst, const float *src, size_t n) {
    if (dst != src) memcpy(dst, src, n * sizeof(float));
}
static void cpu_copy_rows(float *dst, size_t ds, const float *src, size_t ss, size_t rows,
                          size_t cols) {
    for (size_t r = 0; r < rows; r++)
        memmove(dst + r * ds, src + r * ss, cols * sizeof(float));
}
static void cpu_fill(float *x, float v, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        x[i] = v;
}
static void cpu_scale(float *x, float s, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}
// Deterministic parallel sum: fixed chunks, partials combined in chunk order.
static double cpu_sumsq(const float *x, size_t n) {
    enum { CHUNKS = 64 };
    double part[CHUNKS] = {0};
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int k = 0; k < CHUNKS; k++) {
        size_t i0 = n * k / CHUNKS, i1 = n * (k + 1) / CHUNKS;
        double acc = 0.0;
#pragma omp simd reduction(+ : acc)
        for (size_t i = i0; i < i1; i++)
            acc += (double)x[i] * x[i];
        part[k] = acc;
    }
    double acc = 0.0;
    for (int k = 0; k < CHUNKS; k++)
        acc += part[k];
    return acc;
}
static void cpu_sumsq_chunks(const float *x, size_t n, size_t chunk, double *out) {
    size_t nk = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t k = 0; k < nk; k++) {
        size_t i0 = k * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
        double acc = 0.0;
#pragma omp simd reduction(+ : acc)
        for (size_t i = i0; i < i1; i++)
            acc += (double)x[i] * x[i];
        out[k] = acc;
    }
}
static void cpu_axpby(float *y, float a, const float *x, float b, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        y[i] = a * x[i] + b * y[i];
}
static void cpu_sub_scaled(float *out, const float *a, const float *b, float s, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        out[i] = (a[i] - b[i]) * s;
}
static void cpu_copy_scaled(float *dst, const float *src, float s, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        dst[i] = src[i] * s;
}
static void cpu_clamp(float *x, float lo, float hi, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
}
static int cpu_all_finite(const float *x, size_t n) {
    int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        bad |= !isfinite(x[i]);
    return !bad;
}

// ------------------------------------------------------------------ embedding

static void cpu_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe,
                                int B, int T, int C) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const float *te = wte + (size_t)inp[bt] * C, *pe = wpe + (size_t)(bt % T) * C;
        float *o = out + (size_t)bt * C;
        for (int c = 0; c < C; c++)
            o[c] = te[c] + pe[c];
    }
}

static void cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B,
                                 int T, int C) {
    // Channels are split across threads so no two threads ever add to the same element.
#pragma omp parallel
    {
        int nth = omp_get_num_threads(), id = omp_get_thread_num();
        int c0 = (int)((long)C * id / nth), c1 = (int)((long)C * (id + 1) / nth);
        for (int bt = 0; bt < B * T; bt++) {
            const float *d = dout + (size_t)bt * C;
            float *te = dwte + (size_t)inp[bt] * C, *pe = dwpe + (size_t)(bt % T) * C;
            for (int c = c0; c < c1; c++) {
                te[c] += d[c];
                pe[c] += d[c];
            }
        }
    }
}

// ------------------------------------------------------------------ layernorm

// One row: out (C) = (x − mean)·rstd·w + b, its mean and rstd (float sums, in order)
static inline void ln_row(float *o, float *mean, float *rstd, const float *x, const float *w,
                          const float *b, int C) {
    float m = 0.f;
    for (int c = 0; c < C; c++)
        m += x[c];
    m /= C;
    float var = 0.f;
    for (int c = 0; c < C; c++) {
        float d = x[c] - m;
        var += d * d;
    }
    float s = 1.0f / sqrtf(var / C + LN_EPS);
    for (int c = 0; c < C; c++)
        o[c] = (x[c] - m) * s * w[c] + b[c];
    *mean = m;
    *rstd = s;
}

static void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                  const float *w, const float *b, int N, int C) {
#pragma omp parallel for schedule(dynamic, 16) // rows taken as threads come free
    for (int n = 0; n < N; n++)
        ln_row(out + (size_t)n * C, mean + n, rstd + n, inp + (size_t)n * C, w, b, C);
}

// residual_forward then layernorm_forward in one pass over the rows: the same sums in the same
// order (bit for bit the two ops), the residual row read back from cache instead of memory
static int cpu_residual_layernorm_forward(float *res, float *out, float *mean, float *rstd,
                                          const float *a, const float *b, const float *w,
                                          const float *bias, int N, int C) {
#pragma omp parallel for schedule(dynamic, 16)
    for (int n = 0; n < N; n++) {
        size_t o = (size_t)n * C;
        for (int c = 0; c < C; c++)
            res[o + c] = a[o + c] + b[o + c];
        ln_row(out + o, mean + n, rstd + n, res + o, w, bias, C);
    }
    return 1;
}

static void cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                   const float *inp, const float *w, const float *mean,
                                   const float *rstd, int N, int C) {
    // dw/db partial sums per thread, combined in thread order so results are bit-reproducible.
    int nth = omp_get_max_threads();
    float *part = xalloc_floats((size_t)nth * 2 * C);
#pragma omp parallel
    {
        float *ldw = part + (size_t)omp_get_thread_num() * 2 * C, *ldb = ldw + C;
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            float dnorm_mean = 0.f, dnorm_norm_mean = 0.f;
            for (int c = 0; c < C; c++) {
                float xh = (x[c] - m) * s, dn = w[c] * d[c];
                dnorm_mean += dn;
                dnorm_norm_mean += dn * xh;
            }
            dnorm_mean /= C;
            dnorm_norm_mean /= C;
            float *di = dinp + (size_t)n * C;
            for (int c = 0; c < C; c++) {
                float xh = (x[c] - m) * s, dn = w[c] * d[c];
                ldb[c] += d[c];
                ldw[c] += xh * d[c];
                di[c] += (dn - dnorm_mean - xh * dnorm_norm_mean) * s;
            }
        }
    }
    for (int t = 0; t < nth; t++) {
        const float *ldw = part + (size_t)t * 2 * C, *ldb = ldw + C;
        for (int c = 0; c < C; c++) {
            dw[c] += ldw[c];
            db[c] += ldb[c];
        }
    }
    free(part);
}

// ------------------------------------------------------------------ matmul

void cpu_bias_rows(float *out, const float *bias, int N, int OC) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
}

void cpu_bias_backward(float *dbias, const float *dout, int N, int OC) {
    enum { CB = 256 };
#pragma omp parallel for schedule(static)
    for (int j0 = 0; j0 < OC; j0 += CB) {
        int j1 = j0 + CB < OC ? j0 + CB : OC;
        float acc[CB] = {0};
        for (int n = 0; n < N; n++) {
            const float *d = dout + (size_t)n * OC;
            for (int j = j0; j < j1; j++)
                acc[j - j0] += d[j];
        }
        for (int j = j0; j < j1; j++)
            dbias[j] += acc[j - j0];
    }
}

static void cpu_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                               int N, int C, int OC) {
    if (bias) cpu_bias_rows(out, bias, N, OC);
    cpu_sgemm(0, 1, N, OC, C, 1.0f, inp, C, w, C, bias ? 1.0f : 0.0f, out, OC);
}

static void cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                                const float *inp, const float *w, int N, int C, int OC) {
    if (dinp) // (N,C) = (N,OC) · (OC,C)
        cpu_sgemm(0, 0, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C);
    // (OC,C) += (OC,N) · (N,C)
    cpu_sgemm(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    if (dbias) cpu_bias_backward(dbias, dout, N, OC);
}

// ------------------------------------------------------------------ elementwise

// Elementwise loops run as parallel chunks with a vectorized inner loop.
#define EW_CHUNK 4096

static void cpu_gelu_forward(float *out, const float *inp, size_t n) {
    long nchunks = (long)((n + EW_CHUNK - 1) / EW_CHUNK);
#pragma omp parallel for schedule(dynamic, 4)
    for (long c = 0; c < nchunks; c++) {
        int len = (int)(n - (size_t)c * EW_CHUNK < EW_CHUNK ? n - (size_t)c * EW_CHUNK : EW_CHUNK);
        const float *x = inp + (size_t)c * EW_CHUNK;
        float *y = out + (size_t)c * EW_CHUNK;
#pragma omp simd
        for (int i = 0; i < len; i++) {
            float v = x[i];
            y[i] = 0.5f * v * (1.0f + fast_tanhf(GELU_K * (v + 0.044715f * v * v * v)));
        }
    }
}

static void cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    long nchunks = (long)((n + EW_CHUNK - 1) / EW_CHUNK);
#pragma omp parallel for schedule(dynamic, 4)
    for (long c = 0; c < nchunks; c++) {
        int len = (int)(n - (size_t)c * EW_CHUNK < EW_CHUNK ? n - (size_t)c * EW_CHUNK : EW_CHUNK);
        const float *x = inp + (size_t)c * EW_CHUNK, *d = dout + (size_t)c * EW_CHUNK;
        float *g = dinp + (size_t)c * EW_CHUNK;
#pragma omp simd
        for (int i = 0; i < len; i++) {
            float v = x[i];
            float th = fast_tanhf(GELU_K * (v + 0.044715f * v * v * v));
            float sech2 = 1.0f - th * th;
            g[i] = d[i] * (0.5f * (1.0f + th) +
                           0.5f * v * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * v * v));
        }
    }
}

static void cpu_residual_forward(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

// ------------------------------------------------------------------ loss

static double cpu_softmax_xent_forward(float *lp, float *losses, const int *targets, int N, int V) {
#pragma omp parallel for schedule(dynamic, 2)
    for (int n = 0; n < N; n++) {
        float *row = lp + (size_t)n * V;
        float mx = -INFINITY;
        for (int j = 0; j < V; j++)
            mx = row[j] > mx ? row[j] : mx;
        float zt = row[targets[n]];
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < V; j++) {
            row[j] = fast_expf(row[j] - mx);
            sum += row[j];
        }
        float inv = 1.0f / sum;
#pragma omp simd
        for (int j = 0; j < V; j++)
            row[j] *= inv;
        float l = logf(sum) - (zt - mx); // -log p[target], without underflow
        losses[n] = l;
    }
    double total = 0.0; // summed in order: bit-reproducible
    for (int n = 0; n < N; n++)
        total += losses[n];
    return total;
}

static void cpu_softmax_xent_backward(float *pd, const int *targets, float scale, int N, int V) {
#pragma omp parallel for schedule(dynamic, 2)
    for (int n = 0; n < N; n++) {
        float *row = pd + (size_t)n * V;
#pragma omp simd
        for (int j = 0; j < V; j++)
            row[j] *= scale;
        row[targets[n]] -= scale;
    }
}

// ------------------------------------------------------------------ optimizer

static void cpu_adamw(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                      int t) {
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
#pragma omp parallel for simd schedule(dynamic, 65536) if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        param[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * param[i]);
    }
}

// ------------------------------------------------------------------ table

void backend_cpu_set_threads(int n) {
    if (n <= 0) return;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
    cpu_gemm_threads(n);
}

static const Backend CPU = {
    .name = "cpu",
    .precision = "fp32",
    .host_memory = 1,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .fill = cpu_fill,
    .copy = cpu_copy,
    .copy_rows = cpu_copy_rows,
    .scale = cpu_scale,
    .sumsq = cpu_sumsq,
    .all_finite = cpu_all_finite,
    .sumsq_chunks = cpu_sumsq_chunks,
    .axpby = cpu_axpby,
    .sub_scaled = cpu_sub_scaled,
    .copy_scaled = cpu_copy_scaled,
    .clamp = cpu_clamp,
    .encoder_forward = cpu_encoder_forward,
    .encoder_backward = cpu_encoder_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .residual_layernorm_forward = cpu_residual_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .attention_saved_floats = cpu_attention_saved_floats,
    .attn_chunk_forward = cpu_attn_chunk_forward,
    .attn_chunk_merge = cpu_attn_chunk_merge,
    .attn_chunk_backward = cpu_attn_chunk_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .residual_forward = cpu_residual_forward,
    .softmax_xent_forward = cpu_softmax_xent_forward,
    .softmax_xent_backward = cpu_softmax_xent_backward,
    .encoder_forward_shard = cpu_encoder_forward_shard,
    .encoder_backward_shard = cpu_encoder_backward_shard,
    .xent_shard_max = cpu_xent_shard_max,
    .xent_shard_sum = cpu_xent_shard_sum,
    .xent_shard_finish = cpu_xent_shard_finish,
    .xent_shard_backward = cpu_xent_shard_backward,
    .ln_split_stats = cpu_ln_split_stats,
    .ln_split_apply = cpu_ln_split_apply,
    .ln_split_bwd_stats = cpu_ln_split_bwd_stats,
    .ln_split_backward = cpu_ln_split_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .gqa_attention_forward = cpu_gqa_attention_forward,
    .gqa_attention_backward = cpu_gqa_attention_backward,
    .adamw = cpu_adamw,
    .peak_gflops = backend_cpu_peak_gflops,
};

const Backend *backend_cpu(void) { return &CPU; }

const char *backend_blas_version(void) { return openblas_get_config(); }
