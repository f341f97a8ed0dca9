// llama_tp.c — what tensor parallelism needs of the LLaMA layer beyond GPT-2's (block_llama.c
// uses both): the RMSNorm backward over the held rows, and the gradient of a kv head that
// several ranks share.
//
// Shared kv heads (tp = g·KV with g > 1): rank i holds kv head j = i/g, the one its H/tp query
// heads read, and so do the g−1 other ranks of j's group. Each rank's attention backward gives
// d(k|v) only from its own query heads; the whole model's d(k|v) of head j is their sum over
// the group. So, per micro-batch: every rank puts its d(k|v) (N, 2·hs) into slot j of a
// (KV, N, 2·hs) buffer (zeros elsewhere) and one all-reduce over the tp group sums each slot
// over exactly the ranks sharing that head. Every sharer then adds the same Σ d(k|v)ᵀ · ln1 to
// its k/v weight gradient — the whole model's, identical on the g ranks (so the replicas stay
// equal with no further communication, and norms and saves count the first of them only:
// gpt_tp_counts) — while only the first sharer adds Σ d(k|v) · W_kv to d(ln1), which the
// usual all-reduce of d(ln1) then completes (each kv head's part counted once).
#include <stddef.h>

#include "block_impl.h"

void llama_rmsnorm_backward(const GPT *m, const Workspace *ws, const RmsBack *r) {
    const Backend *be = m->be;
    int R = (int)workspace_rows(ws, m), C = m->cfg.C;
    if (m->tp.n <= 1 || !m->tp.sp) { // the same rows, so the same gradient, on every rank
        be->rmsnorm_backward(r->dx, r->dw, r->dout, r->inp, r->w, r->rstd, R, C);
        return;
    }
    be->fill(r->tmp, 0.f, (size_t)C); // this shard's gradient, summed over the group
    be->rmsnorm_backward(r->dx, r->tmp, r->dout, r->inp, r->w, r->rstd, R, C);
    m->tp.allreduce(m->tp.ctx, r->tmp, (size_t)C, 0);
    be->axpby(r->dw, 1.0f, r->tmp, 1.0f, (size_t)C);
}

void llama_kv_shared_backward(const GPT *m, const KvShared *k) {
    const Backend *be = m->be;
    int KV = m->cfg.KV, g = m->tp.n / KV, j = m->tp.i / g, C = m->cfg.C;
    size_t N = (size_t)k->N, w = 2 * (size_t)k->hs, QKV = (size_t)k->QKV;
    float *mine = k->sum + (size_t)j * N * w; // slot j: (N, 2·hs)
    be->fill(k->sum, 0.f, (size_t)KV * N * w);
    for (size_t n = 0; n < N; n++) { // move this rank's d(k|v) columns into slot j
        float *row = k->dqkv + n * QKV + k->Ch;
        be->copy(mine + n * w, row, w);
        be->fill(row, 0.f, w);
    }
    m->tp.allreduce(m->tp.ctx, k->sum, (size_t)KV * N * w, 0);
    // the query heads (k|v columns now zero), then the shared head's Σ over its ranks
    be->matmul_backward(k->dln, k->dw, NULL, k->dqkv, k->ln1, k->w, k->N, C, k->QKV);
    size_t kv0 = (size_t)k->Ch * C; // k's first row in the fused weight
    be->matmul_backward(k->dln_kv, k->dw + kv0, NULL, mine, k->ln1, k->w + kv0, k->N, C, (int)w);
    if (m->tp.i % g == 0) be->axpby(k->dln, 1.0f, k->dln_kv, 1.0f, N * C);
}
