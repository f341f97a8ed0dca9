// block_layer.c — one transformer layer (pre-LayerNorm):
//   res2  = x_in + attn_proj(attention(qkv(ln_1(x_in))))
//   x_out = res2 + mlp_proj(gelu(fc(ln_2(res2))))
// forward, backward and (with recompute) forward-again-during-backward.
// With tensor parallelism (m->tp.n > 1) a rank holds NH/tp heads (q, k, v and the attention
// projection's matching columns) and 4C/tp of the MLP: the column-parallel products give its
// part, the row-parallel ones a partial sum that one all-reduce per branch completes (the
// replicated bias added by rank 0 only); backward reduces d(ln) the same way.
#include <stddef.h>

#include "block_impl.h"

typedef struct {
    float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} LayerParams;

// Same order as gpt_create() lays the tensors out; Cl = C/tp of the attention, F = 4C/tp.
static LayerParams layer_params(float *base, int C, int Cl, int F) {
    LayerParams p;
    float *q = base;
    p.ln1w = q, q += C;
    p.ln1b = q, q += C;
    p.qkvw = q, q += (size_t)3 * Cl * C;
    p.qkvb = q, q += 3 * Cl;
    p.projw = q, q += (size_t)C * Cl;
    p.projb = q, q += C;
    p.ln2w = q, q += C;
    p.ln2b = q, q += C;
    p.fcw = q, q += (size_t)F * C;
    p.fcb = q, q += F;
    p.fcprojw = q, q += (size_t)F * C;
    p.fcprojb = q;
    return p;
}

// This rank's widths: attention Cl of C (NHl heads), MLP F of 4C; lead: adds replicated biases.
typedef struct {
    int C, Cl, NHl, F, lead;
} Widths;

static Widths widths(const GPT *m) {
    int tp = m->tp.n > 1 ? m->tp.n : 1;
    return (Widths){m->cfg.C, m->cfg.C / tp, m->cfg.H / tp, 4 * m->cfg.C / tp, m->tp.i == 0};
}

typedef struct {
    float *ln1, *qkv, *atty, *res2, *ln2, *fch, *fch_gelu, *ln1_mean, *ln1_rstd, *ln2_mean,
        *ln2_rstd, *att;
} LayerActs;

static LayerActs layer_acts(const Workspace *ws, const GPT *m, int layer) {
    Widths w = widths(m);
    size_t BT = (size_t)ws->B * ws->T, C = (size_t)w.C, Cl = (size_t)w.Cl, F = (size_t)w.F;
    float *q = ws->layer + (ws->recompute ? 0 : (size_t)(layer - ws->layer0) * ws->layer_stride);
    LayerActs a;
    a.ln1 = q, q += BT * C;
    a.qkv = q, q += BT * 3 * Cl;
    a.atty = q, q += BT * Cl;
    a.res2 = q, q += BT * C;
    a.ln2 = q, q += BT * C;
    a.fch = q, q += BT * F;
    a.fch_gelu = q, q += BT * F;
    a.ln1_mean = q, q += BT;
    a.ln1_rstd = q, q += BT;
    a.ln2_mean = q, q += BT;
    a.ln2_rstd = q, q += BT;
    a.att = q;
    return a;
}

// Completes a row-parallel product's partial sums across the tensor-parallel group.
static void tp_sum(const GPT *m, float *x, size_t n) {
    if (m->tp.n > 1) m->tp.allreduce(m->tp.ctx, x, n, 0);
}

static void layer_run_forward(const GPT *m, const Block *blk, const Workspace *ws,
                              const float *x_in, float *x_out) {
    const Backend *be = m->be;
    Widths w = widths(m);
    int B = ws->B, T = ws->T, C = w.C, N = B * T;
    size_t NC = (size_t)N * C;
    LayerParams p = layer_params(blk->params, C, w.Cl, w.F);
    LayerActs a = layer_acts(ws, m, blk->layer);
    be->layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x_in, p.ln1w, p.ln1b, N, C);
    be->matmul_forward(a.qkv, a.ln1, p.qkvw, p.qkvb, N, C, 3 * w.Cl); // (N,3Cl)
    if (m->cp.n > 1) // ring attention over the context-parallel ranks
        m->cp.forward(m->cp.ctx, a.atty, a.att, a.qkv, B, T, w.Cl, w.NHl);
    else
        be->attention_forward(a.atty, a.att, a.qkv, B, T, w.Cl, w.NHl); // (N,Cl)
    block_poll(m);
    be->matmul_forward(a.res2, a.atty, p.projw, w.lead ? p.projb : NULL, N, w.Cl, C); // (N,C)
    tp_sum(m, a.res2, NC);
    be->residual_forward(a.res2, a.res2, x_in, NC);
    be->layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p.ln2w, p.ln2b, N, C);
    be->matmul_forward(a.fch, a.ln2, p.fcw, p.fcb, N, C, w.F); // (N,F)
    be->gelu_forward(a.fch_gelu, a.fch, (size_t)N * w.F);
    block_poll(m);
    be->matmul_forward(x_out, a.fch_gelu, p.fcprojw, w.lead ? p.fcprojb : NULL, N, w.F, C);
    tp_sum(m, x_out, NC);
    be->residual_forward(x_out, x_out, a.res2, NC);
}

void layer_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    layer_run_forward(m, blk, ws, io->x_in, io->x_out);
}

void layer_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    const Backend *be = m->be;
    Widths w = widths(m);
    int B = ws->B, T = ws->T, C = w.C, N = B * T;
    size_t NC = (size_t)N * C;
    float *big = ws->scratch, *dln = big + 4 * NC, *dsmall = dln + NC, *recomp = dsmall + NC;
    if (ws->recompute) layer_run_forward(m, blk, ws, io->x_in, recomp);
    LayerParams p = layer_params(blk->params, C, w.Cl, w.F),
                g = layer_params(blk->grads, C, w.Cl, w.F);
    LayerActs a = layer_acts(ws, m, blk->layer);
    float *dx = io->dx; // d(x_out) on entry; d(res2), then d(x_in) after the residual adds
    // MLP branch: x_out = res2 + fcproj(gelu(fc(ln2)))
    be->matmul_backward(big, g.fcprojw, g.fcprojb, dx, a.fch_gelu, p.fcprojw, N, w.F, C);
    block_poll(m);
    be->gelu_backward(big, a.fch, big, (size_t)N * w.F);
    be->matmul_backward(dln, g.fcw, g.fcb, big, a.ln2, p.fcw, N, C, w.F);
    tp_sum(m, dln, NC);
    block_poll(m);
    be->layernorm_backward(dx, g.ln2w, g.ln2b, dln, a.res2, p.ln2w, a.ln2_mean, a.ln2_rstd, N, C);
    // attention branch: res2 = x_in + proj(attention(qkv(ln1)))
    be->matmul_backward(dsmall, g.projw, g.projb, dx, a.atty, p.projw, N, w.Cl, C);
    block_poll(m);
    if (m->cp.n > 1)
        m->cp.backward(m->cp.ctx, big, dsmall, a.qkv, a.atty, a.att, B, T, w.Cl, w.NHl);
    else
        be->attention_backward(big, dsmall, a.qkv, a.atty, a.att, B, T, w.Cl, w.NHl); // (N,3Cl)
    block_poll(m);
    be->matmul_backward(dln, g.qkvw, g.qkvb, big, a.ln1, p.qkvw, N, C, 3 * w.Cl);
    tp_sum(m, dln, NC);
    be->layernorm_backward(dx, g.ln1w, g.ln1b, dln, io->x_in, p.ln1w, a.ln1_mean, a.ln1_rstd, N, C);
}
