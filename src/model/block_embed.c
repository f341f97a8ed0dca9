// block_embed.c — the embedding block: x_0 = wte[token] + wpe[position]. It owns wte, which
// the head also uses (tied LM head); the head receives wte only through BlockIO. With tensor
// parallelism a rank holds rows [v0, v0+nv) of wte: it embeds the tokens it holds (rank 0 adds
// wpe) and an all-reduce completes x_0; backward scatters into its rows only. With sequence
// parallelism the partial x_0 is reduce-scattered (a rank keeps its positions) and d(x_0) is
// all-gathered before the backward. LLaMA: x_0 = wte[token], no position table (its layers
// rotate q and k instead), the same vocabulary sharding under tensor parallelism, and nothing
// particular to context parallelism (a rank's chunks need no positions here).
#include <stddef.h>

#include "block_impl.h"

void embed_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    int llama = gpt_is_llama(&m->cfg); // LLaMA: no position table
    const float *wte = blk->params;
    const float *wpe = llama ? NULL : wte + (size_t)gpt_vocab_rows(m) * m->cfg.C;
    const TensorParallel *tp = &m->tp;
    int B = ws->B, T = ws->T, C = m->cfg.C;
    if (m->cp.n > 1 && !llama) return cp_embed_forward(m, blk, ws, io); // wpe at global positions
    if (tp->n <= 1) {
        if (llama) // the shard kernel over the whole vocabulary
            m->be->encoder_forward_shard(io->x_out, io->tokens, wte, NULL, 0, m->cfg.V, B, T, C);
        else
            m->be->encoder_forward(io->x_out, io->tokens, wte, wpe, B, T, C);
        return;
    }
    float *part = tp->sp ? ws->scratch : io->x_out; // (B,T,C) partial sums
    m->be->encoder_forward_shard(part, io->tokens, wte, tp->i == 0 ? wpe : NULL, tp->v0, tp->nv, B,
                                 T, C);
    tp_reduce(m, ws, part, io->x_out, ws->scratch + (size_t)B * T * C);
}

void embed_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    int llama = gpt_is_llama(&m->cfg);
    float *dwte = blk->grads;
    float *dwpe = llama ? NULL : dwte + (size_t)gpt_vocab_rows(m) * m->cfg.C;
    const TensorParallel *tp = &m->tp;
    if (m->cp.n > 1 && !llama) return cp_embed_backward(m, blk, ws, io);
    if (tp->n <= 1 && llama)
        m->be->encoder_backward_shard(dwte, NULL, io->dx, io->tokens, 0, m->cfg.V, ws->B, ws->T,
                                      m->cfg.C);
    else if (tp->n <= 1)
        m->be->encoder_backward(dwte, dwpe, io->dx, io->tokens, ws->B, ws->T, m->cfg.C);
    else { // d(x_0) is the same on every rank: wpe's gradient too
        size_t NC = (size_t)ws->B * ws->T * m->cfg.C;
        const float *dx = tp_gather(m, ws, io->dx, ws->scratch, ws->scratch + NC);
        m->be->encoder_backward_shard(dwte, dwpe, dx, io->tokens, tp->v0, tp->nv, ws->B, ws->T,
                                      m->cfg.C);
    }
}
