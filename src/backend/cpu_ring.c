// cpu_ring.c — the CPU kernels of ring attention (context parallelism): one query chunk against
// one key chunk (AttnChunk in backend.h), blockwise like cpu_attention.c (tiles of ≤ RING_BQ
// queries × ≤ RING_BK keys, online softmax, no (rows,rows) matrix), the key chunk either wholly
// before the queries (full), the same positions (causal diagonal) or after them (none). The
// forward returns the pair's own output and per-row log-sum-exp; a merge folds such partials
// together by online softmax; the backward recomputes P = exp(S − lse) from the FINAL lse of the
// query rows and D = rowsum(dO ∘ O) from their final output, so the pairs' gradients sum to the
// whole attention's. The forward spreads (b, h, query tile) over the threads, the backward (b, h),
// so one thread accumulates a head's dK and dV. With grouped-query attention (a->KV < NH) query
// head h reads kv head h/(NH/KV), and one backward thread takes a kv head's whole group of query
// heads (in head order), so its dK and dV have one writer.
#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "../common.h"
#include "cpu_impl.h"

#define RING_BQ 64  // queries per tile
#define RING_BK 128 // keys per tile

static int imin(int a, int b) { return a < b ? a : b; }

// Keys of the pair a query row r of the chunk sees (of nk in the tile starting at key j0).
static int visible(const AttnChunk *a, int r, int j0, int nk) {
    if (a->mode == ATT_CHUNK_FULL) return nk;
    if (a->mode == ATT_CHUNK_NONE) return 0;
    int n = r - j0 + 1;
    return n < 0 ? 0 : imin(n, nk);
}

// Keys [0, kend) the query rows [i0, i0+nq) of the chunk may see.
static int key_end(const AttnChunk *a, int i0, int nq) {
    return a->mode == ATT_CHUNK_FULL ? a->rows : a->mode == ATT_CHUNK_DIAG ? i0 + nq : 0;
}

// Per-thread scratch.
typedef struct {
    float *s, *acc, *m, *l; // scores/P (BQ,BK), accumulator (BQ,hs), running max and sum (BQ)
} FwdBuf;

// Query rows [i0, i0+nq) of head view q/k/v (row strides qs, kvs) → o (stride C), lse (stride 1).
static void fwd_tile(const AttnChunk *a, float *o, float *lse, const float *q, const float *k,
                     const float *v, int i0, int nq, int hs, const FwdBuf *w) {
    float scale = 1.0f / sqrtf((float)hs);
    for (int r = 0; r < nq; r++)
        w->m[r] = -INFINITY, w->l[r] = 0.f;
    memset(w->acc, 0, (size_t)nq * hs * sizeof(float));
    int kend = key_end(a, i0, nq);
    for (int j0 = 0; j0 < kend; j0 += RING_BK) {
        int nk = imin(RING_BK, kend - j0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, scale,
                    q + (size_t)i0 * a->qs, a->qs, k + (size_t)j0 * a->kvs, a->kvs, 0.0f, w->s,
                    RING_BK);
        for (int r = 0; r < nq; r++) {
            float *row = w->s + (size_t)r * RING_BK, mx = w->m[r], sum = 0.f;
            int cnt = visible(a, i0 + r, j0, nk);
            for (int j = 0; j < cnt; j++)
                mx = row[j] > mx ? row[j] : mx;
            for (int j = 0; j < nk; j++)
                row[j] = j < cnt ? fast_expf(row[j] - mx) : 0.f;
            for (int j = 0; j < cnt; j++)
                sum += row[j];
            if (cnt == 0) continue;
            float corr = w->m[r] == -INFINITY ? 0.f : fast_expf(w->m[r] - mx);
            w->l[r] = w->l[r] * corr + sum, w->m[r] = mx;
            for (int c = 0; c < hs && corr != 1.f; c++)
                w->acc[(size_t)r * hs + c] *= corr;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, 1.0f, w->s, RING_BK,
                    v + (size_t)j0 * a->kvs, a->kvs, 1.0f, w->acc, hs);
    }
    for (int r = 0; r < nq; r++) {
        float *orow = o + (size_t)(i0 + r) * a->C, inv = w->l[r] > 0 ? 1.0f / w->l[r] : 0.f;
        for (int c = 0; c < hs; c++)
            orow[c] = w->acc[(size_t)r * hs + c] * inv;
        lse[i0 + r] = w->l[r] > 0 ? w->m[r] + logf(w->l[r]) : -INFINITY;
    }
}

// Query heads per kv head.
static int group(const AttnChunk *a) { return a->KV > 0 ? a->NH / a->KV : 1; }

void cpu_attn_chunk_forward(const AttnChunk *a, float *out, float *lse, const float *q,
                            const float *k, const float *v) {
    int NH = a->NH, hs = a->C / NH, nqt = (a->rows + RING_BQ - 1) / RING_BQ, g = group(a);
#pragma omp parallel
    {
        FwdBuf w = {xalloc_floats((size_t)RING_BQ * RING_BK), xalloc_floats((size_t)RING_BQ * hs),
                    xalloc_floats(RING_BQ), xalloc_floats(RING_BQ)};
#pragma omp for schedule(dynamic, 1)
        for (long x = 0; x < (long)a->B * NH * nqt; x++) {
            int bh = (int)(x / nqt), i0 = (int)(x % nqt) * RING_BQ, b = bh / NH, h = bh % NH;
            size_t qo = (size_t)b * a->tb * a->qs + (size_t)h * hs,
                   ko = (size_t)b * a->tb * a->kvs + (size_t)(h / g) * hs;
            fwd_tile(a, out + (size_t)b * a->tb * a->C + (size_t)h * hs, lse + (size_t)bh * a->tb,
                     q + qo, k + ko, v + ko, i0, imin(RING_BQ, a->rows - i0), hs, &w);
        }
        free(w.s), free(w.acc), free(w.m), free(w.l);
    }
}

void cpu_attn_chunk_merge(const AttnChunk *a, float *out, float *lse, const float *ob,
                          const float *lseb) {
    int NH = a->NH, hs = a->C / NH;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < a->B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        for (int t = 0; t < a->rows; t++) {
            float *l1 = lse + (size_t)bh * a->tb + t, l2 = lseb[(size_t)bh * a->tb + t];
            if (l2 == -INFINITY) continue; // the partial saw no key
            size_t o = ((size_t)b * a->tb + t) * a->C + (size_t)h * hs;
            float mx = *l1 > l2 ? *l1 : l2;
            float w1 = *l1 == -INFINITY ? 0.f : expf(*l1 - mx), w2 = expf(l2 - mx);
            float inv = 1.0f / (w1 + w2);
            for (int c = 0; c < hs; c++)
                out[o + c] = (w1 * out[o + c] + w2 * ob[o + c]) * inv;
            *l1 = mx + logf(w1 + w2);
        }
    }
}

// Scratch of one backward thread.
typedef struct {
    float *p, *dp, *d; // P and dP/dS tiles (BQ,BK), D = rowsum(dO ∘ O) (BQ)
} BwdBuf;

// Query rows [i0, i0+nq) of one head against the key chunk: dq rows, dk, dv rows +=.
static void bwd_tile(const AttnChunk *a, float *dq, float *dk, float *dv, const float *dy,
                     const float *o, const float *lse, const float *q, const float *k,
                     const float *v, int i0, int nq, int hs, const BwdBuf *w) {
    float scale = 1.0f / sqrtf((float)hs);
    int C = a->C, qs = a->qs, kvs = a->kvs;
    const float *dyi = dy + (size_t)i0 * C, *qi = q + (size_t)i0 * qs;
    for (int r = 0; r < nq; r++) {
        float d = 0.f;
        for (int c = 0; c < hs; c++)
            d += dyi[(size_t)r * C + c] * o[(size_t)(i0 + r) * C + c];
        w->d[r] = d;
    }
    int kend = key_end(a, i0, nq);
    for (int j0 = 0; j0 < kend; j0 += RING_BK) {
        int nk = imin(RING_BK, kend - j0);
        const float *kj = k + (size_t)j0 * kvs, *vj = v + (size_t)j0 * kvs;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, scale, qi, qs, kj, kvs,
                    0.0f, w->p, RING_BK);
        for (int r = 0; r < nq; r++) {
            float *row = w->p + (size_t)r * RING_BK, x = lse[i0 + r];
            int cnt = visible(a, i0 + r, j0, nk);
            for (int j = 0; j < nk; j++)
                row[j] = j < cnt ? fast_expf(row[j] - x) : 0.f;
        }
        // dV_j += Pᵀ dO_i ; dP = dO_i V_jᵀ ; dS = P ∘ (dP − D)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, 1.0f, w->p, RING_BK, dyi,
                    C, 1.0f, dv + (size_t)j0 * kvs, kvs);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, 1.0f, dyi, C, vj, kvs,
                    0.0f, w->dp, RING_BK);
        for (int r = 0; r < nq; r++) {
            float *ds = w->dp + (size_t)r * RING_BK, dr = w->d[r];
            const float *pr = w->p + (size_t)r * RING_BK;
            for (int j = 0; j < nk; j++)
                ds[j] = pr[j] * (ds[j] - dr);
        }
        // dQ_i += scale · dS K_j ; dK_j += scale · dSᵀ Q_i
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, scale, w->dp, RING_BK,
                    kj, kvs, 1.0f, dq + (size_t)i0 * qs, qs);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, scale, w->dp, RING_BK, qi,
                    qs, 1.0f, dk + (size_t)j0 * kvs, kvs);
    }
}

void cpu_attn_chunk_backward(const AttnChunk *a, float *dq, float *dk, float *dv, const float *dout,
                             const float *out, const float *lse, const float *q, const float *k,
                             const float *v) {
    if (a->mode == ATT_CHUNK_NONE) return;
    int NH = a->NH, hs = a->C / NH, g = group(a), KV = NH / g;
#pragma omp parallel
    {
        BwdBuf w = {xalloc_floats((size_t)RING_BQ * RING_BK),
                    xalloc_floats((size_t)RING_BQ * RING_BK), xalloc_floats(RING_BQ)};
#pragma omp for schedule(dynamic, 1)
        for (int bk = 0; bk < a->B * KV; bk++) { // (batch element, kv head)
            int b = bk / KV, kh = bk % KV;
            size_t ko = (size_t)b * a->tb * a->kvs + (size_t)kh * hs;
            for (int h = kh * g; h < (kh + 1) * g; h++) {
                size_t qo = (size_t)b * a->tb * a->qs + (size_t)h * hs,
                       oo = (size_t)b * a->tb * a->C + (size_t)h * hs,
                       lo = ((size_t)b * NH + (size_t)h) * a->tb;
                for (int i0 = 0; i0 < a->rows; i0 += RING_BQ)
                    bwd_tile(a, dq + qo, dk + ko, dv + ko, dout + oo, out + oo, lse + lo, q + qo,
                             k + ko, v + ko, i0, imin(RING_BQ, a->rows - i0), hs, &w);
            }
        }
        free(w.p), free(w.dp), free(w.d);
    }
}
