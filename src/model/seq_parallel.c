// seq_parallel.c — the communication at the edges of a tensor-parallel block's regions, and
// Megatron sequence parallelism (GPT.tp.sp). With sp, the LayerNorm and residual regions (the
// residual stream, ln_1/ln_2/ln_f and their statistics, the embedding's output) hold only this
// rank's rows: positions [i·T/n, (i+1)·T/n) of every sequence, ordered (B, T/n). Before a
// column-parallel product the shards are all-gathered and put back in (B,T) order; the partial
// sums of a row-parallel product are put in shard order and reduce-scattered (an all-gather and
// a reduce-scatter move what one all-reduce does). LayerNorm parameters' gradients, computed
// from a shard, are summed over the group. Without sp the same calls are 1D's all-reduce.
#include "block_impl.h"

size_t workspace_rows(const Workspace *ws, const GPT *m) {
    size_t N = (size_t)ws->B * ws->T;
    return m->tp.n > 1 && m->tp.sp ? N / (size_t)m->tp.n : N;
}

// (n, B, T/n, C) in shard order ↔ (B, T, C): shard r of sequence b is positions
// [r·T/n, (r+1)·T/n). to_bt: shard order src into (B,T) dst; else the reverse.
static void reorder(const GPT *m, const Workspace *ws, float *dst, const float *src, int to_bt) {
    int n = m->tp.n, B = ws->B;
    size_t piece = (size_t)(ws->T / n) * m->cfg.C;
    for (int r = 0; r < n; r++)
        for (int b = 0; b < B; b++) {
            size_t sh = ((size_t)r * B + b) * piece, bt = ((size_t)b * n + r) * piece;
            if (to_bt)
                m->be->copy(dst + bt, src + sh, piece);
            else
                m->be->copy(dst + sh, src + bt, piece);
        }
}

const float *tp_gather(const GPT *m, const Workspace *ws, const float *held, float *full,
                       float *tmp) {
    if (m->tp.n <= 1 || !m->tp.sp) return held;
    size_t each = workspace_rows(ws, m) * m->cfg.C;
    m->be->copy(tmp + (size_t)m->tp.i * each, held, each);
    m->tp.allgather(m->tp.ctx, tmp, each); // (n, B, T/n, C)
    reorder(m, ws, full, tmp, 1);
    return full;
}

void tp_reduce(const GPT *m, const Workspace *ws, float *partial, float *held, float *tmp) {
    size_t N = (size_t)ws->B * ws->T, C = (size_t)m->cfg.C;
    if (m->tp.n <= 1) return;
    if (!m->tp.sp) {
        m->tp.allreduce(m->tp.ctx, partial, N * C, 0);
        if (partial != held) m->be->copy(held, partial, N * C);
        return;
    }
    reorder(m, ws, tmp, partial, 0);
    m->tp.reduce_scatter(m->tp.ctx, tmp, held, workspace_rows(ws, m) * C);
}

void tp_layernorm_backward(const GPT *m, const Workspace *ws, const LnBack *l) {
    const Backend *be = m->be;
    int R = (int)workspace_rows(ws, m), C = m->cfg.C;
    if (m->tp.n <= 1 || !m->tp.sp) {
        be->layernorm_backward(l->dx, l->dw, l->dw + C, l->dout, l->inp, l->w, l->mean, l->rstd, R,
                               C);
        return;
    }
    be->fill(l->tmp, 0.f, 2 * (size_t)C); // this micro-batch's shard's (dw, db), summed over tp
    be->layernorm_backward(l->dx, l->tmp, l->tmp + C, l->dout, l->inp, l->w, l->mean, l->rstd, R,
                           C);
    m->tp.allreduce(m->tp.ctx, l->tmp, 2 * (size_t)C, 0);
    be->axpby(l->dw, 1.0f, l->tmp, 1.0f, 2 * (size_t)C);
}
