// block_head.c — the head block: final LayerNorm, logits = ln_f(x) · wteᵀ (tied), and the
// softmax cross-entropy. Probabilities overwrite the logits in place to save (B,T,V) memory;
// a backend with a fused classifier (backend.h) computes the loss and its gradient without
// storing the logits at all (it recomputes them in the backward).
// With tensor parallelism a rank computes the logits of its vocabulary rows only and the
// cross-entropy is assembled from per-row partials (max, then Σ exp and the target's logit)
// reduced across the group: the logits are never gathered; d(ln_f) is all-reduced. With
// sequence parallelism ln_f runs on the rank's positions, its output is all-gathered before the
// logits (and again in backward), d(ln_f) is reduce-scattered and ln_f's gradient summed.
// LLaMA: the final norm is an RMSNorm (its weight, then the untied lm_head (V,C) when not
// tied: the logits use lm_head and its gradient stays in this block; under tensor parallelism
// lm_head is cut by vocabulary rows exactly as the tied embedding is); rstd in the rstd slot.
#include <stddef.h>
#include <string.h>

#include "../common.h"
#include "block_impl.h"

typedef struct {
    float *lnf, *mean, *rstd, *probs, *losses, *mx, *st;
} HeadActs;

static HeadActs head_acts(const Workspace *ws, const GPT *m) {
    size_t BT = (size_t)ws->B * ws->T, R = workspace_rows(ws, m); // R: ln_f's rows
    HeadActs a;
    float *q = ws->head;
    a.lnf = q, q += R * m->cfg.C;
    a.mean = q, q += R;
    a.rstd = q, q += R;
    a.probs = q, q += BT * (size_t)gpt_logit_rows(m);
    a.losses = q, q += BT;
    a.mx = q, q += BT; // tensor parallelism only: (N) row max, (N,2) Σ exp and target logit
    a.st = q;
    return a;
}

// The output weights the logits use and where their gradient goes: the tied embedding's (from
// io), or LLaMA's untied lm_head (the head's own tensors, after the final norm's weight).
static int own_lm_head(const GPT *m) { return gpt_is_llama(&m->cfg) && !m->cfg.tie; }
static const float *head_wte(const GPT *m, const Block *blk, const BlockIO *io) {
    return own_lm_head(m) ? blk->params + m->cfg.C : io->wte;
}
static float *head_dwte(const GPT *m, const Block *blk, const BlockIO *io) {
    return own_lm_head(m) ? blk->grads + m->cfg.C : io->dwte;
}

void head_act16_mark(const GPT *m, const Workspace *ws) {
    m->be->act16_mark(head_acts(ws, m).lnf, workspace_rows(ws, m) * m->cfg.C);
}

// The vocabulary-parallel cross-entropy: Σ token losses; probabilities of this rank's rows.
static double xent_shards(const GPT *m, const HeadActs *a, const int *targets, int N) {
    const Backend *be = m->be;
    const TensorParallel *tp = &m->tp;
    int V = tp->vrows;
    be->xent_shard_max(a->mx, a->probs, N, V, tp->nv);
    tp->allreduce(tp->ctx, a->mx, (size_t)N, 1);
    be->xent_shard_sum(a->st, a->probs, a->mx, targets, tp->v0, N, V, tp->nv);
    tp->allreduce(tp->ctx, a->st, (size_t)2 * N, 0);
    return be->xent_shard_finish(a->probs, a->losses, a->mx, a->st, N, V, tp->nv);
}

void head_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    const Backend *be = m->be;
    int N = ws->B * ws->T, C = m->cfg.C, V = gpt_vocab_rows(m), R = (int)workspace_rows(ws, m);
    const float *w = blk->params, *b = w + C, *wte = head_wte(m, blk, io);
    HeadActs a = head_acts(ws, m);
    if (gpt_is_llama(&m->cfg)) {
        be->rmsnorm_forward(a.lnf, a.rstd, io->x_in, w, R, C, m->cfg.norm_eps);
    } else {
        be->layernorm_forward(a.lnf, a.mean, a.rstd, io->x_in, w, b, R, C);
    }
    const float *lnf = tp_gather(m, ws, a.lnf, ws->scratch, ws->scratch + (size_t)N * C); // (N,C)
    block_poll(m);
    if (io->targets && gpt_fused_classifier(m)) { // the loss without storing the logits, and
        // with grad_next its gradient now (d(ln_f) into head_backward's dlnf, the scratch)
        int g = io->grad_next;
        io->loss_sum =
            be->classifier(a.losses, g ? ws->scratch : NULL, g ? head_dwte(m, blk, io) : NULL, lnf,
                           wte, io->targets, g ? io->grad_scale : 0.f, N, C, V);
        ws->head_grad_ready = g;
        return;
    }
    if (!gpt_logit_rows(m))
        die(EXIT_IO, "head_forward: no targets, and the workspace keeps no logits (set "
                     "GPT.want_logits before workspace_create)");
    be->matmul_forward(a.probs, lnf, wte, NULL, N, C, V); // logits (N,V)
    block_poll(m);
    io->loss_sum = 0.0;
    if (!io->targets) return;
    if (m->tp.n > 1)
        io->loss_sum = xent_shards(m, &a, io->targets, N);
    else
        io->loss_sum = be->softmax_xent_forward(a.probs, a.losses, io->targets, N, V);
}

void head_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    const Backend *be = m->be;
    const TensorParallel *tp = &m->tp;
    int N = ws->B * ws->T, C = m->cfg.C, V = gpt_vocab_rows(m);
    size_t NC = (size_t)N * C;
    const float *w = blk->params, *wte = head_wte(m, blk, io);
    float *dwte = head_dwte(m, blk, io);
    int llama = gpt_is_llama(&m->cfg);
    HeadActs a = head_acts(ws, m);
    // scratch: d(ln_f) (N,C) | gathered ln_f, then the held rows' d(ln_f) | reorder | ln_f's 2C
    float *dlnf = ws->scratch, *full = dlnf + NC, *tmp = full + NC;
    float *dheld = workspace_rows(ws, m) < (size_t)N ? full : dlnf;
    const float *lnf = tp_gather(m, ws, a.lnf, full, tmp);
    if (gpt_fused_classifier(m)) { // (in the forward already: gpt_forward_backward)
        if (!ws->head_grad_ready)
            be->classifier(a.losses, dlnf, dwte, lnf, wte, io->targets, io->grad_scale, N, C, V);
        ws->head_grad_ready = 0;
    } else {
        if (tp->n > 1)
            be->xent_shard_backward(a.probs, io->targets, tp->v0, io->grad_scale, N, V, tp->nv);
        else
            be->softmax_xent_backward(a.probs, io->targets, io->grad_scale, N, V);
        block_poll(m);
        be->matmul_backward(dlnf, dwte, NULL, a.probs, lnf, wte, N, C, V);
    }
    tp_reduce(m, ws, dlnf, dheld, tmp);
    block_poll(m);
    be->fill(io->dx, 0.f, workspace_rows(ws, m) * C);
    if (llama) {
        llama_rmsnorm_backward(
            m, ws, &(RmsBack){io->dx, blk->grads, tmp + NC, dheld, io->x_in, w, a.rstd});
        return;
    }
    tp_layernorm_backward(m, ws,
                          &(LnBack){.dx = io->dx,
                                    .dw = blk->grads,
                                    .tmp = tmp + NC,
                                    .dout = dheld,
                                    .inp = io->x_in,
                                    .w = w,
                                    .mean = a.mean,
                                    .rstd = a.rstd});
}
