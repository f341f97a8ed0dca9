// block_head.c — the head block: final LayerNorm, logits = ln_f(x) · wteᵀ (tied), and the
// softmax cross-entropy. Probabilities overwrite the logits in place to save (B,T,V) memory.
#include <stddef.h>
#include <string.h>

#include "block_impl.h"

typedef struct {
    float *lnf, *mean, *rstd, *probs, *losses;
} HeadActs;

static HeadActs head_acts(const Workspace *ws, const GPT *m) {
    size_t BT = (size_t)ws->B * ws->T;
    HeadActs a;
    float *q = ws->head;
    a.lnf = q, q += BT * m->cfg.C;
    a.mean = q, q += BT;
    a.rstd = q, q += BT;
    a.probs = q, q += BT * m->cfg.V;
    a.losses = q;
    return a;
}

void head_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    const Backend *be = m->be;
    int N = ws->B * ws->T, C = m->cfg.C, V = m->cfg.V;
    const float *w = blk->params, *b = w + C;
    HeadActs a = head_acts(ws, m);
    be->layernorm_forward(a.lnf, a.mean, a.rstd, io->x_in, w, b, N, C);
    block_poll(m);
    be->matmul_forward(a.probs, a.lnf, io->wte, NULL, N, C, V); // logits (N,V)
    block_poll(m);
    io->loss_sum = 0.0;
    if (io->targets) io->loss_sum = be->softmax_xent_forward(a.probs, a.losses, io->targets, N, V);
}

void head_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    const Backend *be = m->be;
    int N = ws->B * ws->T, C = m->cfg.C, V = m->cfg.V;
    const float *w = blk->params;
    float *dw = blk->grads, *db = dw + C;
    HeadActs a = head_acts(ws, m);
    float *dlnf = ws->scratch; // (N,C)
    be->softmax_xent_backward(a.probs, io->targets, io->grad_scale, N, V);
    block_poll(m);
    be->matmul_backward(dlnf, io->dwte, NULL, a.probs, a.lnf, io->wte, N, C, V);
    block_poll(m);
    be->fill(io->dx, 0.f, (size_t)N * C);
    be->layernorm_backward(io->dx, dw, db, dlnf, io->x_in, w, a.mean, a.rstd, N, C);
}
