// block_layer.c — one transformer layer (pre-LayerNorm):
//   res2  = x_in + attn_proj(attention(qkv(ln_1(x_in))))
//   x_out = res2 + mlp_proj(gelu(fc(ln_2(res2))))
// forward, backward and (with recompute) forward-again-during-backward.
// With tensor parallelism (m->tp.n > 1) a rank holds NH/tp heads (q, k, v and the attention
// projection's matching columns) and 4C/tp of the MLP: the column-parallel products give its
// part, the row-parallel ones a partial sum that one all-reduce per branch completes (the
// replicated bias added by rank 0 only); backward reduces d(ln) the same way. With sequence
// parallelism (seq_parallel.c) the LayerNorm/residual regions hold T/tp positions of every
// sequence: ln output all-gathered before the column-parallel products (and again in backward:
// only the shard is kept), row-parallel partials reduce-scattered, d(x) all-gathered before the
// row-parallel backward and d(ln) reduce-scattered after the column-parallel one.
#include <stddef.h>

#include "../common.h"
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
    // R: rows of the LayerNorm/residual regions (B·T/tp with sequence parallelism)
    size_t BT = (size_t)ws->B * ws->T, R = workspace_rows(ws, m), C = (size_t)w.C,
           Cl = (size_t)w.Cl, F = (size_t)w.F;
    float *q = ws->layer + (ws->recompute ? 0 : (size_t)(layer - ws->layer0) * ws->layer_stride);
    int tp = m->tp.n > 1 ? m->tp.n : 1;
    int a16 = gpt_act16(&m->cfg, m->be, tp), q16 = gpt_act16_qkv(&m->cfg, m->be, tp),
        f16 = gpt_act16_fch(&m->cfg, m->be, tp);
    LayerActs a; // (16 bits: ln1, atty, ln2, fch_gelu; qkv with q16, fch with f16)
    a.ln1 = q, q += gpt_act_floats(a16, R * C);
    a.qkv = q, q += gpt_act_floats(q16, BT * 3 * Cl);
    a.atty = q, q += gpt_act_floats(a16, BT * Cl);
    a.res2 = q, q += R * C;
    a.ln2 = q, q += gpt_act_floats(a16, R * C);
    a.fch = q, q += gpt_act_floats(f16, BT * F);
    // recompute_gelu: in the workspace's scratch, written by the forward, recomputed by the
    // backward
    if (m->recompute_gelu)
        a.fch_gelu = workspace_gelu_scratch(ws, m);
    else
        a.fch_gelu = q, q += gpt_act_floats(a16, BT * F);
    a.ln1_mean = q, q += R;
    a.ln1_rstd = q, q += R;
    a.ln2_mean = q, q += R;
    a.ln2_rstd = q, q += R;
    a.att = q;
    return a;
}

void layer_act16_mark(const GPT *m, const Workspace *ws, int layer) {
    Widths w = widths(m);
    size_t BT = (size_t)ws->B * ws->T, R = workspace_rows(ws, m);
    LayerActs a = layer_acts(ws, m, layer);
    m->be->act16_mark(a.ln1, R * w.C);
    m->be->act16_mark(a.atty, BT * w.Cl);
    m->be->act16_mark(a.ln2, R * w.C);
    m->be->act16_mark(a.fch_gelu, BT * w.F);
    if (gpt_act16_qkv(&m->cfg, m->be, m->tp.n > 1 ? m->tp.n : 1)) {
        if (m->cp.n > 1) // (ring attention reads fp32 qkv; no 16-bit backend runs it)
            die(EXIT_IO, "a 16-bit qkv with context parallelism (internal error)");
        m->be->act16_mark(a.qkv, BT * 3 * w.Cl);
    }
    if (gpt_act16_fch(&m->cfg, m->be, m->tp.n > 1 ? m->tp.n : 1))
        m->be->act16_mark(a.fch, BT * w.F);
}

// The backend's fused ops where it has them and takes the call (backend.h), else the ops they
// stand for, one by one. res = res + x, then its LayerNorm:
static void residual_layernorm(const Backend *be, float *res, float *ln, float *mean, float *rstd,
                               const float *x, const float *w, const float *b, int R, int C) {
    if (be->residual_layernorm_forward &&
        be->residual_layernorm_forward(res, ln, mean, rstd, res, x, w, b, R, C))
        return;
    be->residual_forward(res, res, x, (size_t)R * C);
    be->layernorm_forward(ln, mean, rstd, res, w, b, R, C);
}
// pre = inp·wᵀ + b, out = gelu(pre)
static void matmul_gelu_forward(const Backend *be, float *out, float *pre, const float *inp,
                                const float *w, const float *b, int N, int C, int F) {
    if (be->matmul_gelu_forward && be->matmul_gelu_forward(out, pre, inp, w, b, N, C, F)) return;
    be->matmul_forward(pre, inp, w, b, N, C, F);
    be->gelu_forward(out, pre, (size_t)N * F);
}

static void layer_run_forward(const GPT *m, const Block *blk, const Workspace *ws,
                              const float *x_in, float *x_out) {
    const Backend *be = m->be;
    Widths w = widths(m);
    int B = ws->B, T = ws->T, C = w.C, N = B * T, R = (int)workspace_rows(ws, m), sp = R < N;
    size_t NC = (size_t)N * C, RC = (size_t)R * C;
    float *full = ws->scratch + 4 * NC, *tmp = full + NC; // (N,C) each, sequence parallel only
    LayerParams p = layer_params(blk->params, C, w.Cl, w.F);
    LayerActs a = layer_acts(ws, m, blk->layer);
    be->layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x_in, p.ln1w, p.ln1b, R, C);
    const float *ln1bt = tp_gather(m, ws, a.ln1, full, tmp);          // (N,C), in (B,T) order
    be->matmul_forward(a.qkv, ln1bt, p.qkvw, p.qkvb, N, C, 3 * w.Cl); // (N,3Cl)
    if (m->cp.n > 1) // ring attention over the context-parallel ranks
        m->cp.forward(m->cp.ctx, a.atty, a.att, a.qkv, B, T, w.Cl, w.NHl, w.NHl);
    else
        be->attention_forward(a.atty, a.att, a.qkv, B, T, w.Cl, w.NHl); // (N,Cl)
    block_poll(m);
    float *part = sp ? full : a.res2; // (N,C) partial sums of the row-parallel product
    be->matmul_forward(part, a.atty, p.projw, w.lead ? p.projb : NULL, N, w.Cl, C);
    tp_reduce(m, ws, part, a.res2, tmp);
    residual_layernorm(be, a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, x_in, p.ln2w, p.ln2b, R, C);
    const float *ln2 = tp_gather(m, ws, a.ln2, full, tmp);
    matmul_gelu_forward(be, a.fch_gelu, a.fch, ln2, p.fcw, p.fcb, N, C, w.F); // (N,F) each
    block_poll(m);
    part = sp ? full : x_out;
    be->matmul_forward(part, a.fch_gelu, p.fcprojw, w.lead ? p.fcprojb : NULL, N, w.F, C);
    tp_reduce(m, ws, part, x_out, tmp);
    be->residual_forward(x_out, x_out, a.res2, RC);
}

void layer_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    layer_run_forward(m, blk, ws, io->x_in, io->x_out);
}

// Scratch: big (N,4C) — with sequence parallelism (tp >= 2) its first half holds (N,F) or
// d(qkv) (N,3Cl) and its second half a gathered (N,C) and the reorder's (N,C); dln (N,C) the
// column-parallel backward's partial d(ln); dsmall (N,Cl); recomp (the recomputed output, then
// the LayerNorm parameters' 2C).
void layer_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    const Backend *be = m->be;
    Widths w = widths(m);
    int B = ws->B, T = ws->T, C = w.C, N = B * T, sp = workspace_rows(ws, m) < (size_t)N;
    size_t NC = (size_t)N * C;
    float *big = ws->scratch, *dln = big + 4 * NC, *dsmall = dln + NC, *recomp = dsmall + NC;
    float *full = big + 2 * NC, *tmp = full + NC, *dlnh = sp ? full : dln;
    if (ws->recompute) layer_run_forward(m, blk, ws, io->x_in, recomp);
    LayerParams p = layer_params(blk->params, C, w.Cl, w.F),
                g = layer_params(blk->grads, C, w.Cl, w.F);
    LayerActs a = layer_acts(ws, m, blk->layer);
    float *dx = io->dx; // d(x_out) on entry; d(res2), then d(x_in) after the residual adds
    // MLP branch: x_out = res2 + fcproj(gelu(fc(ln2)))
    if (m->recompute_gelu && !ws->recompute) // (the layer's forward just ran again otherwise)
        be->gelu_forward(a.fch_gelu, a.fch, (size_t)N * w.F);
    const float *dout = tp_gather(m, ws, dx, full, tmp); // (N,C)
    // d(fch) into the GELU output's storage, dead once the fcproj backward has read it (in bf16
    // where it is: the fc product then reads it without rounding, Backend.act16)
    float *dfch = a.fch_gelu;
    if (!be->matmul_gelu_backward ||
        !be->matmul_gelu_backward(dfch, g.fcprojw, g.fcprojb, dout, a.fch_gelu, a.fch, p.fcprojw, N,
                                  w.F, C)) {
        be->matmul_backward(big, g.fcprojw, g.fcprojb, dout, a.fch_gelu, p.fcprojw, N, w.F, C);
        be->gelu_backward(dfch, a.fch, big, (size_t)N * w.F);
    }
    block_poll(m);
    const float *ln2 = tp_gather(m, ws, a.ln2, full, tmp);
    be->matmul_backward(dln, g.fcw, g.fcb, dfch, ln2, p.fcw, N, C, w.F);
    tp_reduce(m, ws, dln, dlnh, tmp);
    block_poll(m);
    tp_layernorm_backward(m, ws,
                          &(LnBack){.dx = dx,
                                    .dw = g.ln2w,
                                    .tmp = recomp,
                                    .dout = dlnh,
                                    .inp = a.res2,
                                    .w = p.ln2w,
                                    .mean = a.ln2_mean,
                                    .rstd = a.ln2_rstd});
    // attention branch: res2 = x_in + proj(attention(qkv(ln1)))
    dout = tp_gather(m, ws, dx, full, tmp);
    // d(atty): 16-bit with a 16-bit qkv (the attention backward then reads both so)
    float *datt = m->cp.n > 1 || !workspace_datt16(ws, m) ? dsmall : workspace_datt16(ws, m);
    be->matmul_backward(datt, g.projw, g.projb, dout, a.atty, p.projw, N, w.Cl, C);
    block_poll(m);
    // d(qkv) (N,3Cl) into the GELU output's storage too (N,F; bf16 where that is), dead since
    // the fc backward; ring attention's into big
    float *dqkv = m->cp.n > 1 ? big : a.fch_gelu;
    if (m->cp.n > 1)
        m->cp.backward(m->cp.ctx, big, dsmall, a.qkv, a.atty, a.att, B, T, w.Cl, w.NHl, w.NHl);
    else
        be->attention_backward(dqkv, datt, a.qkv, a.atty, a.att, B, T, w.Cl, w.NHl);
    block_poll(m);
    const float *ln1 = tp_gather(m, ws, a.ln1, full, tmp);
    be->matmul_backward(dln, g.qkvw, g.qkvb, dqkv, ln1, p.qkvw, N, C, 3 * w.Cl);
    tp_reduce(m, ws, dln, dlnh, tmp);
    tp_layernorm_backward(m, ws,
                          &(LnBack){.dx = dx,
                                    .dw = g.ln1w,
                                    .tmp = recomp,
                                    .dout = dlnh,
                                    .inp = io->x_in,
                                    .w = p.ln1w,
                                    .mean = a.ln1_mean,
                                    .rstd = a.ln1_rstd});
}
