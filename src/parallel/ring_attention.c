// ring_attention.c — ring attention for context parallelism (--cp n). Rank i holds chunks i and
// 2n−1−i of every sequence (ContextParallel in model/gpt.h); its queries must meet the keys of
// every rank, causal by global position. Forward: the rank packs its K,V (B,Tl,2C) and the
// blocks travel the ring (rank i sends to i+1, receives from i−1); at hop s it holds rank
// (i−s)'s block, posts the next transfer, then computes its two query chunks against the
// block's two key chunks (each pair full, causal-diagonal or none: the backend's
// attn_chunk_forward) and merges each partial into the running output and log-sum-exp by
// online softmax. After n hops the output is exact; the final lse is saved for the backward.
// Backward: the K/V block travels with its dK/dV accumulator: at each hop the rank adds its
// queries' share to the accumulator it holds and passes it on with the block, so after n hops
// every accumulator is back at its owner, complete; dQ accumulates locally. The K/V transfer
// of the next hop and the dK/dV transfer of the previous one run under the hop's products. Every
// pair's gradient is computed from the final out and lse (attn_chunk_backward), so the sum is
// exact. Balanced: apart from the diagonal hop, every block gives every rank two full chunk pairs.
// Grouped-query attention (KV < NH, LLaMA) travels only its KV heads: blocks (B,Tl,2·KV·hs).
// Every buffer is the backend's and is touched only through it (on a GPU the blocks cross MPI
// through comm's host stages).
#include "ring_attention.h"

#include <math.h>
#include <stdlib.h>

#include "../common.h"

enum { TAG_KV = 1, TAG_DKV = 2 };

struct CpRing {
    const Comm *comm;
    const Backend *be;
    size_t cap, lcap;      // floats of each K/V buffer, of lseb
    float *kv[2], *dkv[2]; // (B,Tl,2C) blocks in flight; this rank's share of their dK/dV
    float *din[2];         // (B,Tl,2C) the accumulators arriving with the blocks
    float *ob, *lseb;      // (B,Tl,C), (B,NH,Tl): one chunk pair's partial
    double floats, calls;  // what training passes sent (not counted while paused)
    int paused;
};

CpRing *cp_ring_create(const Comm *cp, const Backend *be) {
    CpRing *r = xcalloc(1, sizeof *r);
    r->comm = cp, r->be = be;
    return r;
}

static void ring_free_buffers(CpRing *r) {
    float **all[8] = {&r->kv[0],  &r->kv[1],  &r->dkv[0], &r->dkv[1],
                      &r->din[0], &r->din[1], &r->ob,     &r->lseb};
    for (int k = 0; k < 8; k++)
        if (*all[k]) r->be->release(*all[k]), *all[k] = NULL;
}

void cp_ring_free(CpRing *r) {
    if (!r) return;
    ring_free_buffers(r);
    free(r);
}

void cp_ring_pause(CpRing *r, int paused) { r->paused = paused; }

void cp_ring_counts(const CpRing *r, double *floats, double *calls) {
    *floats = r->floats, *calls = r->calls;
}

// Buffers for a (B,T,C) micro-batch with NH heads (grown once, kept): K/V blocks of at most
// 2C columns, ob (B,T,C).
static void ring_reserve(CpRing *r, int B, int T, int C, int NH) {
    size_t n = (size_t)B * T * 2 * C, nl = (size_t)B * NH * T;
    if (n <= r->cap && nl <= r->lcap) return;
    ring_free_buffers(r);
    n = n > r->cap ? n : r->cap, nl = nl > r->lcap ? nl : r->lcap;
    for (int k = 0; k < 2; k++)
        r->kv[k] = r->be->alloc(n), r->dkv[k] = r->be->alloc(n), r->din[k] = r->be->alloc(n);
    r->ob = r->be->alloc(n / 2), r->lseb = r->be->alloc(nl);
    r->cap = n, r->lcap = nl;
}

// One micro-batch's widths: C = NH·hs query columns, Ck = KV·hs of k (and of v), W = C + 2Ck
// of a qkv row.
typedef struct {
    int B, T, C, NH, KV, Ck, W;
} Shape;

static Shape shape(int B, int T, int C, int NH, int KV) {
    int Ck = C / NH * KV;
    return (Shape){B, T, C, NH, KV, Ck, C + 2 * Ck};
}

// kv (B·T, 2Ck) = the K and V columns of qkv (B·T, W).
static void pack_kv(const Backend *be, float *kv, const float *qkv, size_t rows, const Shape *z) {
    be->copy_rows(kv, 2 * (size_t)z->Ck, qkv + z->C, (size_t)z->W, rows, 2 * (size_t)z->Ck);
}

// The pair (query chunk a of this rank, key chunk k of rank j): its AttnChunk, mode by the
// chunks' global indices (rank i's chunk 0 is i, chunk 1 is 2n−1−i).
static AttnChunk pair(const CpRing *r, int a, int j, int k, const Shape *z) {
    int n = r->comm->size, i = r->comm->rank;
    int gq = a ? 2 * n - 1 - i : i, gk = k ? 2 * n - 1 - j : j;
    int mode = gk < gq ? ATT_CHUNK_FULL : gk == gq ? ATT_CHUNK_DIAG : ATT_CHUNK_NONE;
    return (AttnChunk){z->B, z->NH, z->C, z->T / 2, z->T, z->W, 2 * z->Ck, mode, z->KV};
}

// Posts this hop's transfer of n floats: send to the next rank, receive from the previous one.
static void ring_post(CpRing *r, CommReq q[2], const float *send, float *recv, size_t n, int tag) {
    int N = r->comm->size, i = r->comm->rank;
    q[0] = comm_isend(r->comm, send, n, (i + 1) % N, tag);
    q[1] = comm_irecv(r->comm, recv, n, (i + N - 1) % N, tag);
    if (!r->paused) r->floats += (double)n;
}

static void ring_forward(void *ctx, float *out, float *lse, const float *qkv, int B, int T, int C,
                         int NH, int KV) {
    CpRing *r = ctx;
    const Backend *be = r->be;
    Shape z = shape(B, T, C, NH, KV);
    int n = r->comm->size, i = r->comm->rank, c = T / 2;
    size_t rows = (size_t)B * T, nkv = rows * 2 * z.Ck;
    ring_reserve(r, B, T, C, NH);
    r->calls += !r->paused;
    pack_kv(be, r->kv[0], qkv, rows, &z);
    be->fill(out, 0.f, rows * C);
    be->fill(lse, -INFINITY, (size_t)B * NH * T);
    for (int s = 0; s < n; s++) {
        int j = (i - s + n) % n;
        float *cur = r->kv[s & 1];
        CommReq q[2];
        if (s < n - 1) ring_post(r, q, cur, r->kv[(s + 1) & 1], nkv, TAG_KV);
        for (int a = 0; a < 2; a++)
            for (int k = 0; k < 2; k++) {
                AttnChunk p = pair(r, a, j, k, &z);
                if (p.mode == ATT_CHUNK_NONE) continue;
                size_t qo = (size_t)a * c, ko = (size_t)k * c * 2 * z.Ck;
                be->attn_chunk_forward(&p, r->ob + qo * C, r->lseb + qo, qkv + qo * z.W, cur + ko,
                                       cur + ko + z.Ck);
                be->attn_chunk_merge(&p, out + qo * C, lse + qo, r->ob + qo * C, r->lseb + qo);
            }
        if (s < n - 1) comm_wait(&q[0]), comm_wait(&q[1]);
    }
}

// The backward's hop s adds this rank's share for the block it holds into a zeroed buffer while
// the block's accumulator is still arriving from the previous rank (posted at hop s−1), then
// adds the two and passes the sum on: the dK/dV transfer overlaps the next hop's products.
static void ring_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                          const float *out, const float *lse, int B, int T, int C, int NH, int KV) {
    CpRing *r = ctx;
    const Backend *be = r->be;
    Shape z = shape(B, T, C, NH, KV);
    int n = r->comm->size, i = r->comm->rank, c = T / 2;
    size_t rows = (size_t)B * T, nkv = rows * 2 * z.Ck;
    ring_reserve(r, B, T, C, NH);
    r->calls += !r->paused;
    pack_kv(be, r->kv[0], qkv, rows, &z);
    be->fill(dqkv, 0.f, rows * z.W);
    CommReq kq[2], dr[2];
    for (int s = 0; s < n; s++) {
        int j = (i - s + n) % n;
        float *cur = r->kv[s & 1], *part = r->dkv[s & 1];
        if (s < n - 1) ring_post(r, kq, cur, r->kv[(s + 1) & 1], nkv, TAG_KV);
        be->fill(part, 0.f, nkv);
        for (int a = 0; a < 2; a++)
            for (int k = 0; k < 2; k++) {
                AttnChunk p = pair(r, a, j, k, &z);
                if (p.mode == ATT_CHUNK_NONE) continue;
                size_t qo = (size_t)a * c, ko = (size_t)k * c * 2 * z.Ck;
                be->attn_chunk_backward(&p, dqkv + qo * z.W, part + ko, part + ko + z.Ck,
                                        dout + qo * C, out + qo * C, lse + qo, qkv + qo * z.W,
                                        cur + ko, cur + ko + z.Ck);
            }
        if (s < n - 1) comm_wait(&kq[0]), comm_wait(&kq[1]);
        if (s > 0) { // block j's accumulator, sent on by the previous rank at its hop s−1
            comm_wait(&dr[0]), comm_wait(&dr[1]);
            be->axpby(part, 1.0f, r->din[(s - 1) & 1], 1.0f, nkv);
        }
        // the accumulator goes on with its block; the last hop brings this rank's own home
        ring_post(r, dr, part, r->din[s & 1], nkv, TAG_DKV);
    }
    comm_wait(&dr[0]), comm_wait(&dr[1]);
    const float *mine = r->din[(n - 1) & 1];
    be->copy_rows(dqkv + C, (size_t)z.W, mine, 2 * (size_t)z.Ck, rows, 2 * (size_t)z.Ck);
}

void cp_ring_install(GPT *m, CpRing *r) {
    m->cp = (ContextParallel){.n = r->comm->size,
                              .i = r->comm->rank,
                              .forward = ring_forward,
                              .backward = ring_backward,
                              .ctx = r};
}
