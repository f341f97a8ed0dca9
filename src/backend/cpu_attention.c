// cpu_attention.c — the CPU backend's causal self-attention, blockwise (FlashAttention-style):
// tiles of ATT_BQ queries against tiles of ATT_BK keys, an online softmax (running max m and
// sum l per query row), no (T,T) matrix anywhere. The forward saves only each row's
// log-sum-exp lse = m + log l (B,NH,T); the backward recomputes P = exp(S − lse) tile by tile.
// A short sequence (T ≤ ATT_STORED) keeps its softmax (B,NH,T,T) instead — at most ATT_STORED
// floats per row, so still linear in T — because recomputing it costs the backward a fifth
// product that, on tiles this small, makes it slower than the stored-softmax kernel
// (bench/bench_attention.c, B=4 NH=12 hs=64: 1.16x at T = 64, parity at 96, faster above).
// Tiles are balanced (tile_of): no tile of a few rows, which cost a call each for no work.
//
// Grouped-query attention (LLaMA's kv-heads < heads) is the same kernel: qkv rows are
// (NH + 2·NKV)·hs wide (NH query heads, then NKV key heads, then NKV value heads; GPT-2's
// (B,T,3C) is NKV = NH), and query head h reads key/value head h / (NH/NKV) in place — the
// repeated K and V are never materialised. Per (batch b, head h), Q, K, V are (T,hs) views into
// qkv with row stride W = (NH + 2·NKV)·hs, the head's output an (T,hs) view into out
// (B,T,NH·hs) with row stride C = NH·hs. Tile products go through single-threaded sgemms
// (OpenBLAS runs one thread inside an OpenMP region); the forward spreads (b, h, query tile)
// over the threads, the backward (b, kv head) — the query heads of a group one after another —
// so dK and dV of a kv head are accumulated by one thread only.
#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "../common.h"
#include "cpu_impl.h"

#ifndef ATT_BQ
#define ATT_BQ 64 // queries per tile
#endif
#ifndef ATT_STORED
#define ATT_STORED 96 // up to this T the softmax is stored (see above)
#endif
#ifndef ATT_BK
#define ATT_BK 128 // keys per tile (64×128 measured best of 32–256 on B=4 NH=12 hs=64)
#endif

size_t cpu_attention_saved_floats(int B, int T, int NH, int hs) {
    (void)hs;
    return (size_t)B * NH * T * (T <= ATT_STORED ? T : 1);
}

static int imin(int a, int b) { return a < b ? a : b; }

// The tile size that cuts n rows into ceil(n/max) tiles of about equal size, rounded up to a
// multiple of 16 (whole vectors for the products), at most max: no tile of a few rows.
static int tile_of(int n, int max) {
    int k = (n + max - 1) / max, t = ((n + k - 1) / k + 15) / 16 * 16;
    return t < max ? t : max;
}

// The shapes of one call: W the row stride of qkv, C that of out, G query heads per kv head.
typedef struct {
    int B, T, NH, NKV, hs, W, C, G;
} Dims;

static Dims dims_of(int B, int T, int NH, int NKV, int hs) {
    return (Dims){B, T, NH, NKV, hs, (NH + 2 * NKV) * hs, NH * hs, NH / NKV};
}

// Head h of batch row b: its query view; its key view (the value view is NKV·hs further).
static size_t q_off(const Dims *d, int b, int h) {
    return (size_t)b * d->T * d->W + (size_t)h * d->hs;
}
static size_t k_off(const Dims *d, int b, int h) {
    return (size_t)b * d->T * d->W + (size_t)(d->NH + h / d->G) * d->hs;
}
static size_t o_off(const Dims *d, int b, int h) {
    return (size_t)b * d->T * d->C + (size_t)h * d->hs;
}

// ------------------------------------------------------------------ T ≤ ATT_STORED: stored softmax

static void small_forward(float *out, float *att, const float *qkv, const Dims *d) {
    int T = d->T, hs = d->hs, W = d->W;
    float scale = 1.0f / sqrtf((float)hs);
    size_t V = (size_t)d->NKV * hs; // from a key view to its value view
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < d->B * d->NH; bh++) {
        int b = bh / d->NH, h = bh % d->NH;
        const float *q = qkv + q_off(d, b, h), *k = qkv + k_off(d, b, h);
        float *a = att + (size_t)bh * T * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, W, k, W, 0.0f, a,
                    T);
        for (int t = 0; t < T; t++) { // causal softmax over j ≤ t
            float *row = a + (size_t)t * T, mx = -INFINITY, sum = 0.f;
            for (int j = 0; j <= t; j++)
                mx = row[j] > mx ? row[j] : mx;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j <= t; j++) {
                row[j] = fast_expf(row[j] - mx);
                sum += row[j];
            }
            float inv = 1.0f / sum;
            for (int j = 0; j < T; j++)
                row[j] = j <= t ? row[j] * inv : 0.f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, k + V, W, 0.0f,
                    out + o_off(d, b, h), d->C);
    }
}

// One query head of the stored-softmax backward: dq overwritten, dk and dv overwritten (first of
// its group: beta 0) or added to (beta 1). dp: (T,T) scratch.
static void small_backward_head(float *dqkv, const float *dout, const float *qkv, const float *att,
                                const Dims *d, int b, int h, float beta, float *dp) {
    int T = d->T, hs = d->hs, W = d->W, C = d->C;
    float scale = 1.0f / sqrtf((float)hs);
    size_t V = (size_t)d->NKV * hs;
    const float *q = qkv + q_off(d, b, h), *k = qkv + k_off(d, b, h), *v = k + V;
    const float *p = att + ((size_t)b * d->NH + h) * T * T, *dy = dout + o_off(d, b, h);
    float *dq = dqkv + q_off(d, b, h), *dk = dqkv + k_off(d, b, h), *dv = dk + V;
    // dP (T,T) = dO Vᵀ ; dV (+)= Pᵀ dO
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, C, v, W, 0.0f, dp, T);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, p, T, dy, C, beta, dv, W);
    for (int t = 0; t < T; t++) { // dS = P ∘ (dP − Σ_j P dP), in place in dp
        const float *pr = p + (size_t)t * T;
        float *dr = dp + (size_t)t * T, s = 0.f;
        for (int j = 0; j <= t; j++)
            s += pr[j] * dr[j];
        for (int j = 0; j < T; j++)
            dr[j] = j <= t ? pr[j] * (dr[j] - s) : 0.f;
    }
    // dQ = scale · dS K ; dK (+)= scale · dSᵀ Q
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, scale, dp, T, k, W, 0.0f, dq,
                W);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, scale, dp, T, q, W, beta, dk, W);
}

static void small_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                           const Dims *d) {
#pragma omp parallel
    {
        float *dp = xalloc_floats((size_t)d->T * d->T);
#pragma omp for schedule(dynamic, 1)
        for (int bk = 0; bk < d->B * d->NKV; bk++) {
            int b = bk / d->NKV, kh = bk % d->NKV;
            for (int g = 0; g < d->G; g++)
                small_backward_head(dqkv, dout, qkv, att, d, b, kh * d->G + g, g ? 1.0f : 0.0f, dp);
        }
        free(dp);
    }
}
// ------------------------------------------------------------------ blockwise

// One key tile for query rows [i0, i0+nq): s (nq,nk; row stride ATT_BK) holds the scaled
// scores on entry, P = exp(s − m_new) on exit (0 at the causal mask); m, l, acc (nq,hs) are
// updated online: acc rows are rescaled by exp(m_old − m_new) before P·V is added.
static void online_softmax_tile(float *s, float *m, float *l, float *acc, int i0, int nq, int j0,
                                int nk, int hs) {
    for (int r = 0; r < nq; r++) {
        float *row = s + (size_t)r * ATT_BK;
        int cnt = imin(nk, i0 + r - j0 + 1); // keys j ≤ t of this tile
        if (cnt <= 0) {
            for (int j = 0; j < nk; j++)
                row[j] = 0.f;
            continue;
        }
        float mx = m[r];
        for (int j = 0; j < cnt; j++)
            mx = row[j] > mx ? row[j] : mx;
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < cnt; j++) {
            row[j] = fast_expf(row[j] - mx);
            sum += row[j];
        }
        for (int j = cnt; j < nk; j++)
            row[j] = 0.f;
        float corr = m[r] == -INFINITY ? 0.f : fast_expf(m[r] - mx);
        l[r] = l[r] * corr + sum;
        m[r] = mx;
        if (corr != 1.f) {
            float *a = acc + (size_t)r * hs;
            for (int c = 0; c < hs; c++)
                a[c] *= corr;
        }
    }
}

// Query rows [i0, i0+nq) of one head: o (nq rows, stride C) and lse (nq); q, k, v rows have
// stride W (the qkv row).
static void forward_qtile(float *o, float *lse, const float *q, const float *k, const float *v,
                          int i0, int nq, int W, int C, int hs, float scale, float *s, float *acc,
                          float *m, float *l) {
    for (int r = 0; r < nq; r++)
        m[r] = -INFINITY, l[r] = 0.f;
    for (size_t i = 0; i < (size_t)nq * hs; i++)
        acc[i] = 0.f;
    int bk = tile_of(i0 + nq, ATT_BK);
    for (int j0 = 0; j0 < i0 + nq; j0 += bk) { // key tiles up to the diagonal
        int nk = imin(bk, i0 + nq - j0);
        // s (nq,nk) = scale · Q_i K_jᵀ
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, scale, q + (size_t)i0 * W,
                    W, k + (size_t)j0 * W, W, 0.0f, s, ATT_BK);
        online_softmax_tile(s, m, l, acc, i0, nq, j0, nk, hs);
        // acc (nq,hs) += P V_j
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, 1.0f, s, ATT_BK,
                    v + (size_t)j0 * W, W, 1.0f, acc, hs);
    }
    for (int r = 0; r < nq; r++) {
        float inv = 1.0f / l[r], *orow = o + (size_t)(i0 + r) * C;
        const float *a = acc + (size_t)r * hs;
        for (int c = 0; c < hs; c++)
            orow[c] = a[c] * inv;
        lse[i0 + r] = m[r] + logf(l[r]);
    }
}

// att: the softmax (B,NH,T,T) for T ≤ ATT_STORED, else the row log-sum-exps (B,NH,T)
void cpu_gqa_attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH,
                               int NKV, int hs) {
    Dims d = dims_of(B, T, NH, NKV, hs);
    if (T <= ATT_STORED) return small_forward(out, att, qkv, &d);
    int bq = tile_of(T, ATT_BQ), nqt = (T + bq - 1) / bq;
    float scale = 1.0f / sqrtf((float)hs);
    size_t V = (size_t)NKV * hs;
#pragma omp parallel
    {
        float *s = xalloc_floats((size_t)ATT_BQ * ATT_BK),
              *acc = xalloc_floats((size_t)ATT_BQ * hs);
        float *m = xalloc_floats(ATT_BQ), *l = xalloc_floats(ATT_BQ);
#pragma omp for schedule(dynamic, 1)
        for (long w = 0; w < (long)B * NH * nqt; w++) {
            int bh = (int)(w / nqt), qt = nqt - 1 - (int)(w % nqt); // long tiles first
            int b = bh / NH, h = bh % NH, i0 = qt * bq;
            const float *k = qkv + k_off(&d, b, h);
            forward_qtile(out + o_off(&d, b, h), att + (size_t)bh * T, qkv + q_off(&d, b, h), k,
                          k + V, i0, imin(bq, T - i0), d.W, d.C, hs, scale, s, acc, m, l);
        }
        free(s), free(acc), free(m), free(l);
    }
}

void cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    cpu_gqa_attention_forward(out, att, qkv, B, T, NH, NH, C / NH);
}

// Scratch of one backward thread.
typedef struct {
    float *p, *dp, *d; // P and dP/dS tiles (ATT_BQ,ATT_BK), D = rowsum(dO ∘ O) (ATT_BQ)
} BwdBuf;

// Query rows [i0, i0+nq) of one head against all their key tiles: dq rows += (complete for
// these rows), dk, dv rows of the keys += their share. Pointers are the head's (T,hs) views.
static void backward_qtile(float *dq, float *dk, float *dv, const float *dy, const float *o,
                           const float *q, const float *k, const float *v, const float *lse, int i0,
                           int nq, int W, int C, int hs, float scale, const BwdBuf *w) {
    const float *dyi = dy + (size_t)i0 * C, *qi = q + (size_t)i0 * W;
    for (int r = 0; r < nq; r++) { // D_t = dO_t · O_t
        const float *a = dyi + (size_t)r * C, *b = o + (size_t)(i0 + r) * C;
        float d = 0.f;
        for (int c = 0; c < hs; c++)
            d += a[c] * b[c];
        w->d[r] = d;
    }
    int bk = tile_of(i0 + nq, ATT_BK);
    for (int j0 = 0; j0 < i0 + nq; j0 += bk) {
        int nk = imin(bk, i0 + nq - j0);
        const float *kj = k + (size_t)j0 * W, *vj = v + (size_t)j0 * W;
        // P (nq,nk) = exp(scale · Q_i K_jᵀ − lse), 0 above the diagonal
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, scale, qi, W, kj, W, 0.0f,
                    w->p, ATT_BK);
        for (int r = 0; r < nq; r++) {
            float *row = w->p + (size_t)r * ATT_BK, x = lse[i0 + r];
            int cnt = imin(nk, i0 + r - j0 + 1);
#pragma omp simd
            for (int j = 0; j < nk; j++)
                row[j] = j < cnt ? fast_expf(row[j] - x) : 0.f;
        }
        // dV_j (nk,hs) += Pᵀ dO_i ; dP (nq,nk) = dO_i V_jᵀ
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, 1.0f, w->p, ATT_BK, dyi, C,
                    1.0f, dv + (size_t)j0 * W, W);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, 1.0f, dyi, C, vj, W, 0.0f,
                    w->dp, ATT_BK);
        for (int r = 0; r < nq; r++) { // dS = P ∘ (dP − D)
            float *ds = w->dp + (size_t)r * ATT_BK, dr = w->d[r];
            const float *pr = w->p + (size_t)r * ATT_BK;
#pragma omp simd
            for (int j = 0; j < nk; j++)
                ds[j] = pr[j] * (ds[j] - dr);
        }
        // dQ_i += scale · dS K_j ; dK_j += scale · dSᵀ Q_i
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, scale, w->dp, ATT_BK, kj,
                    W, 1.0f, dq + (size_t)i0 * W, W);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, scale, w->dp, ATT_BK, qi,
                    W, 1.0f, dk + (size_t)j0 * W, W);
    }
}

// Every head of one kv head's group (b, kh): their dq, and dk, dv of the kv head, from zero.
static void backward_group(float *dqkv, const float *dout, const float *qkv, const float *out,
                           const float *att, const Dims *d, int b, int kh, const BwdBuf *w) {
    int T = d->T, hs = d->hs, bq = tile_of(T, ATT_BQ);
    float scale = 1.0f / sqrtf((float)hs);
    size_t V = (size_t)d->NKV * hs;
    float *dk = dqkv + k_off(d, b, kh * d->G), *dv = dk + V;
    for (int t = 0; t < T; t++) { // dk, dv of this kv head accumulate from zero
        memset(dk + (size_t)t * d->W, 0, hs * sizeof(float));
        memset(dv + (size_t)t * d->W, 0, hs * sizeof(float));
    }
    for (int g = 0; g < d->G; g++) {
        int h = kh * d->G + g;
        const float *q = qkv + q_off(d, b, h), *k = qkv + k_off(d, b, h);
        float *dq = dqkv + q_off(d, b, h);
        for (int t = 0; t < T; t++)
            memset(dq + (size_t)t * d->W, 0, hs * sizeof(float));
        for (int i0 = 0; i0 < T; i0 += bq)
            backward_qtile(dq, dk, dv, dout + o_off(d, b, h), out + o_off(d, b, h), q, k, k + V,
                           att + ((size_t)b * d->NH + h) * T, i0, imin(bq, T - i0), d->W, d->C, hs,
                           scale, w);
    }
}

void cpu_gqa_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                const float *att, int B, int T, int NH, int NKV, int hs) {
    Dims d = dims_of(B, T, NH, NKV, hs);
    if (T <= ATT_STORED) return small_backward(dqkv, dout, qkv, att, &d);
#pragma omp parallel
    {
        BwdBuf w = {xalloc_floats((size_t)ATT_BQ * ATT_BK), xalloc_floats((size_t)ATT_BQ * ATT_BK),
                    xalloc_floats(ATT_BQ)};
#pragma omp for schedule(dynamic, 1)
        for (int bk = 0; bk < B * NKV; bk++)
            backward_group(dqkv, dout, qkv, out, att, &d, bk / NKV, bk % NKV, &w);
        free(w.p), free(w.dp), free(w.d);
    }
}

void cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                            const float *att, int B, int T, int C, int NH) {
    cpu_gqa_attention_backward(dqkv, dout, qkv, out, att, B, T, NH, NH, C / NH);
}
