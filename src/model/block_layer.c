// block_layer.c — one transformer layer (pre-LayerNorm):
//   res2  = x_in + attn_proj(attention(qkv(ln_1(x_in))))
//   x_out = res2 + mlp_proj(gelu(fc(ln_2(res2))))
// forward, backward and (with recompute) forward-again-during-backward.
#include <stddef.h>

#include "block_impl.h"

typedef struct {
    float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} LayerParams;

// Same order as gpt_create() lays the tensors out.
static LayerParams layer_params(float *base, int C) {
    LayerParams p;
    float *q = base;
    p.ln1w = q, q += C;
    p.ln1b = q, q += C;
    p.qkvw = q, q += (size_t)3 * C * C;
    p.qkvb = q, q += 3 * C;
    p.projw = q, q += (size_t)C * C;
    p.projb = q, q += C;
    p.ln2w = q, q += C;
    p.ln2b = q, q += C;
    p.fcw = q, q += (size_t)4 * C * C;
    p.fcb = q, q += 4 * C;
    p.fcprojw = q, q += (size_t)4 * C * C;
    p.fcprojb = q;
    return p;
}

typedef struct {
    float *ln1, *qkv, *atty, *res2, *ln2, *fch, *fch_gelu, *ln1_mean, *ln1_rstd, *ln2_mean,
        *ln2_rstd, *att;
} LayerActs;

static LayerActs layer_acts(const Workspace *ws, const GPT *m, int layer) {
    size_t BT = (size_t)ws->B * ws->T, C = (size_t)m->cfg.C;
    float *q = ws->layer + (ws->recompute ? 0 : (size_t)(layer - ws->layer0) * ws->layer_stride);
    LayerActs a;
    a.ln1 = q, q += BT * C;
    a.qkv = q, q += BT * 3 * C;
    a.atty = q, q += BT * C;
    a.res2 = q, q += BT * C;
    a.ln2 = q, q += BT * C;
    a.fch = q, q += BT * 4 * C;
    a.fch_gelu = q, q += BT * 4 * C;
    a.ln1_mean = q, q += BT;
    a.ln1_rstd = q, q += BT;
    a.ln2_mean = q, q += BT;
    a.ln2_rstd = q, q += BT;
    a.att = q;
    return a;
}

static void layer_run_forward(const GPT *m, const Block *blk, const Workspace *ws,
                              const float *x_in, float *x_out) {
    const Backend *be = m->be;
    int B = ws->B, T = ws->T, C = m->cfg.C, NH = m->cfg.H, N = B * T;
    size_t NC = (size_t)N * C;
    LayerParams p = layer_params(blk->params, C);
    LayerActs a = layer_acts(ws, m, blk->layer);
    be->layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x_in, p.ln1w, p.ln1b, N, C);
    be->matmul_forward(a.qkv, a.ln1, p.qkvw, p.qkvb, N, C, 3 * C); // (N,3C)
    be->attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);      // (N,C)
    block_poll(m);
    be->matmul_forward(a.res2, a.atty, p.projw, p.projb, N, C, C); // (N,C)
    be->residual_forward(a.res2, a.res2, x_in, NC);
    be->layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p.ln2w, p.ln2b, N, C);
    be->matmul_forward(a.fch, a.ln2, p.fcw, p.fcb, N, C, 4 * C); // (N,4C)
    be->gelu_forward(a.fch_gelu, a.fch, NC * 4);
    block_poll(m);
    be->matmul_forward(x_out, a.fch_gelu, p.fcprojw, p.fcprojb, N, 4 * C, C); // (N,C)
    be->residual_forward(x_out, x_out, a.res2, NC);
}

void layer_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    layer_run_forward(m, blk, ws, io->x_in, io->x_out);
}

void layer_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    const Backend *be = m->be;
    int B = ws->B, T = ws->T, C = m->cfg.C, NH = m->cfg.H, N = B * T;
    size_t NC = (size_t)N * C;
    float *big = ws->scratch, *dln = big + 4 * NC, *dsmall = dln + NC, *recomp = dsmall + NC;
    if (ws->recompute) layer_run_forward(m, blk, ws, io->x_in, recomp);
    LayerParams p = layer_params(blk->params, C), g = layer_params(blk->grads, C);
    LayerActs a = layer_acts(ws, m, blk->layer);
    float *dx = io->dx; // d(x_out) on entry; d(res2), then d(x_in) after the residual adds
    // MLP branch: x_out = res2 + fcproj(gelu(fc(ln2)))
    be->matmul_backward(big, g.fcprojw, g.fcprojb, dx, a.fch_gelu, p.fcprojw, N, 4 * C, C);
    block_poll(m);
    be->gelu_backward(big, a.fch, big, NC * 4);
    be->matmul_backward(dln, g.fcw, g.fcb, big, a.ln2, p.fcw, N, C, 4 * C);
    block_poll(m);
    be->layernorm_backward(dx, g.ln2w, g.ln2b, dln, a.res2, p.ln2w, a.ln2_mean, a.ln2_rstd, N, C);
    // attention branch: res2 = x_in + proj(attention(qkv(ln1)))
    be->matmul_backward(dsmall, g.projw, g.projb, dx, a.atty, p.projw, N, C, C);
    block_poll(m);
    be->attention_backward(big, dsmall, a.qkv, a.atty, a.att, B, T, C, NH); // big = dqkv (N,3C)
    block_poll(m);
    be->matmul_backward(dln, g.qkvw, g.qkvb, big, a.ln1, p.qkvw, N, C, 3 * C);
    be->layernorm_backward(dx, g.ln1w, g.ln1b, dln, io->x_in, p.ln1w, a.ln1_mean, a.ln1_rstd, N, C);
}
