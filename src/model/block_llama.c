// block_llama.c — one LLaMA layer (pre-RMSNorm, no biases):
//   qkv   = rope(rmsnorm_1(x_in) · [q|k|v]ᵀ)          (B,T,(H+2·KV)·hs), RoPE on q and k
//   res2  = x_in + o_proj(gqa_attention(qkv))          (B,T,C)
//   x_out = res2 + down(swiglu(rmsnorm_2(res2) · [gate|up]ᵀ))
// forward, backward (gradients accumulate, +=) and, with recompute, forward-again-during-
// backward. The embedding and the head of the LLaMA family live in block_embed.c/block_head.c.
// Tensor parallelism (m->tp.n > 1; llama_tp.c has the parts of it particular to LLaMA): a rank
// holds H/tp query heads, KV/tp kv heads (or, when tp = g·KV, the one kv head its query heads
// use, shared with g−1 other ranks), o_proj's matching columns, and gate columns [f0,f1) with
// up columns [f0,f1) (F/tp each, so SwiGLU is local) and down's matching columns. The q|k|v
// and gate|up products are column-parallel, o_proj and down row-parallel (one all-reduce of
// their partial sums each, as GPT-2's layer), and backward all-reduces d(rmsnorm out) the same
// way; the RMSNorm weights are replicated. Sequence parallelism goes through the same
// seq_parallel.c edges as GPT-2's layer. Context parallelism (m->cp.n > 1): attention goes
// around the ring (the rank's two chunks of every sequence, their RoPE at global positions).
#include <stddef.h>

#include "block_impl.h"

typedef struct {
    float *ln1w, *qkvw, *ow, *ln2w, *guw, *downw;
} LlamaParams;

// This rank's widths: N rows of the products, R of the norm/residual regions, H (KV) query
// (kv) heads, QKV columns of the fused product, Ch = H·hs of the attention output, F of SwiGLU.
typedef struct {
    int B, T, N, R, C, H, KV, hs, F, QKV, Ch;
} Dims;

static Dims dims(const GPT *m, const Workspace *ws) {
    const GPTConfig *c = &m->cfg;
    int tp = m->tp.n > 1 ? m->tp.n : 1, hs = c->C / c->H, H = c->H / tp;
    int KV = c->KV % tp ? 1 : c->KV / tp; // tp = g·KV: the one shared kv head
    return (Dims){ws->B, ws->T, ws->B * ws->T, (int)workspace_rows(ws, m), c->C,  H,
                  KV,    hs,    c->F / tp,     (H + 2 * KV) * hs,          H * hs};
}

// Same order as llama_add_tensors() lays the tensors out (q,k,v and gate,up back to back).
static LlamaParams llama_params(float *base, const Dims *d) {
    size_t C = (size_t)d->C, F = (size_t)d->F;
    LlamaParams p;
    float *q = base;
    p.ln1w = q, q += C;
    p.qkvw = q, q += (size_t)d->QKV * C;
    p.ow = q, q += C * (size_t)d->Ch;
    p.ln2w = q, q += C;
    p.guw = q, q += 2 * F * C;
    p.downw = q;
    return p;
}

typedef struct {
    float *ln1, *qkv, *atty, *res2, *ln2, *gu, *h, *rstd1, *rstd2, *att;
} LlamaActs;

// Saved per layer (llama_layer_act_floats counts the same): ln1 (R,C); qkv after RoPE (N,QKV);
// atty (N,Ch); res2, ln2 (R,C); gate|up (N,2F); swiglu out (N,F); rstd (R) ×2; attention state.
static LlamaActs llama_acts(const Workspace *ws, int layer, const Dims *d) {
    size_t N = (size_t)d->N, R = (size_t)d->R, C = (size_t)d->C, F = (size_t)d->F;
    float *q = ws->layer + (ws->recompute ? 0 : (size_t)(layer - ws->layer0) * ws->layer_stride);
    LlamaActs a;
    a.ln1 = q, q += R * C;
    a.qkv = q, q += N * d->QKV;
    a.atty = q, q += N * d->Ch;
    a.res2 = q, q += R * C;
    a.ln2 = q, q += R * C;
    a.gu = q, q += N * 2 * F;
    a.h = q, q += N * F;
    a.rstd1 = q, q += R;
    a.rstd2 = q, q += R;
    a.att = q;
    return a;
}

// full, tmp: (N,C) scratch for sequence parallelism's gathers and reorders.
static void llama_run_forward(const GPT *m, const Block *blk, const Workspace *ws,
                              const float *x_in, float *x_out, float *full, float *tmp) {
    const Backend *be = m->be;
    const GPTConfig *c = &m->cfg;
    Dims d = dims(m, ws);
    LlamaParams p = llama_params(blk->params, &d);
    LlamaActs a = llama_acts(ws, blk->layer, &d);
    size_t RC = (size_t)d.R * d.C;
    int sp = d.R < d.N;
    be->rmsnorm_forward(a.ln1, a.rstd1, x_in, p.ln1w, d.R, d.C, c->norm_eps);
    const float *ln1 = tp_gather(m, ws, a.ln1, full, tmp);         // (N,C) in (B,T) order
    be->matmul_forward(a.qkv, ln1, p.qkvw, NULL, d.N, d.C, d.QKV); // (N,QKV)
    be->rope_forward(a.qkv, ws->rope_pos, ws->rope_freq, d.B, d.T, d.H, d.KV, d.hs);
    if (m->cp.n > 1) // ring attention: q and k turned by their global positions (rope_pos)
        m->cp.forward(m->cp.ctx, a.atty, a.att, a.qkv, d.B, d.T, d.Ch, d.H, d.KV);
    else
        be->gqa_attention_forward(a.atty, a.att, a.qkv, d.B, d.T, d.H, d.KV, d.hs); // (N,Ch)
    block_poll(m);
    float *part = sp ? full : a.res2; // (N,C) partial sums of the row-parallel product
    be->matmul_forward(part, a.atty, p.ow, NULL, d.N, d.Ch, d.C);
    tp_reduce(m, ws, part, a.res2, tmp);
    be->residual_forward(a.res2, a.res2, x_in, RC);
    be->rmsnorm_forward(a.ln2, a.rstd2, a.res2, p.ln2w, d.R, d.C, c->norm_eps);
    const float *ln2 = tp_gather(m, ws, a.ln2, full, tmp);
    be->matmul_forward(a.gu, ln2, p.guw, NULL, d.N, d.C, 2 * d.F); // (N,2F) [gate | up]
    be->swiglu_forward(a.h, a.gu, d.N, d.F);                       // (N,F)
    block_poll(m);
    part = sp ? full : x_out;
    be->matmul_forward(part, a.h, p.downw, NULL, d.N, d.F, d.C);
    tp_reduce(m, ws, part, x_out, tmp);
    be->residual_forward(x_out, x_out, a.res2, RC);
}

// The backward's scratch (llama_scratch_floats; its sp case for full, tmp, dw): big (N, max(QKV,
// 2F)) d(gate|up), then d(qkv); dln (N,C) the column-parallel backward's d(norm out); dsmall
// (N, max(F,C)) d(swiglu out), then d(atty), then the shared kv heads' d(k|v); recomp (N,C)
// the recomputed output, then the shared kv head's part of d(ln1); with sequence parallelism
// full and tmp (N,C) and the norm weight's (C).
typedef struct {
    float *big, *dln, *dsmall, *recomp, *full, *tmp, *dw;
} Scratch;

static Scratch scratch(const Workspace *ws, const Dims *d) {
    size_t N = (size_t)d->N, C = (size_t)d->C,
           big_w = (size_t)(d->QKV > 2 * d->F ? d->QKV : 2 * d->F);
    Scratch s;
    s.big = ws->scratch;
    s.dln = s.big + N * big_w;
    s.dsmall = s.dln + N * C;
    s.recomp = s.dsmall + N * (size_t)(d->F > d->C ? d->F : d->C);
    s.full = s.recomp + N * C;
    s.tmp = s.full + N * C;
    s.dw = s.tmp + N * C;
    return s;
}

void llama_layer_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    Dims d = dims(m, ws);
    Scratch s = scratch(ws, &d);
    llama_run_forward(m, blk, ws, io->x_in, io->x_out, s.full, s.tmp);
}

void llama_layer_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    const Backend *be = m->be;
    Dims d = dims(m, ws);
    Scratch s = scratch(ws, &d);
    int sp = d.R < d.N;
    float *dlnh = sp ? s.full : s.dln; // d(norm out) of the held rows
    if (ws->recompute) llama_run_forward(m, blk, ws, io->x_in, s.recomp, s.full, s.tmp);
    LlamaParams p = llama_params(blk->params, &d), g = llama_params(blk->grads, &d);
    LlamaActs a = llama_acts(ws, blk->layer, &d);
    float *dx = io->dx; // d(x_out) on entry; d(res2), then d(x_in) after the norms add theirs
    // MLP branch: x_out = res2 + down(swiglu(gu(ln2)))
    const float *dout = tp_gather(m, ws, dx, s.full, s.tmp);                         // (N,C)
    be->matmul_backward(s.dsmall, g.downw, NULL, dout, a.h, p.downw, d.N, d.F, d.C); // d h
    block_poll(m);
    be->swiglu_backward(s.big, a.gu, s.dsmall, d.N, d.F); // d(gate|up) (N,2F)
    const float *ln2 = tp_gather(m, ws, a.ln2, s.full, s.tmp);
    be->matmul_backward(s.dln, g.guw, NULL, s.big, ln2, p.guw, d.N, d.C, 2 * d.F);
    tp_reduce(m, ws, s.dln, dlnh, s.tmp);
    llama_rmsnorm_backward(m, ws, &(RmsBack){dx, g.ln2w, s.dw, dlnh, a.res2, p.ln2w, a.rstd2});
    block_poll(m);
    // attention branch: res2 = x_in + o(attention(rope(qkv(ln1))))
    dout = tp_gather(m, ws, dx, s.full, s.tmp);
    be->matmul_backward(s.dsmall, g.ow, NULL, dout, a.atty, p.ow, d.N, d.Ch, d.C); // d atty
    if (m->cp.n > 1)
        m->cp.backward(m->cp.ctx, s.big, s.dsmall, a.qkv, a.atty, a.att, d.B, d.T, d.Ch, d.H, d.KV);
    else
        be->gqa_attention_backward(s.big, s.dsmall, a.qkv, a.atty, a.att, d.B, d.T, d.H, d.KV,
                                   d.hs);
    be->rope_backward(s.big, ws->rope_pos, ws->rope_freq, d.B, d.T, d.H, d.KV, d.hs);
    block_poll(m);
    const float *ln1 = tp_gather(m, ws, a.ln1, s.full, s.tmp);
    if (m->tp.n > 1 && m->cfg.KV % m->tp.n) // the kv head shared with other ranks
        llama_kv_shared_backward(m, &(KvShared){.dqkv = s.big,
                                                .ln1 = ln1,
                                                .w = p.qkvw,
                                                .dw = g.qkvw,
                                                .dln = s.dln,
                                                .sum = s.dsmall,
                                                .dln_kv = s.recomp,
                                                .N = d.N,
                                                .Ch = d.Ch,
                                                .QKV = d.QKV,
                                                .hs = d.hs});
    else
        be->matmul_backward(s.dln, g.qkvw, NULL, s.big, ln1, p.qkvw, d.N, d.C, d.QKV);
    tp_reduce(m, ws, s.dln, dlnh, s.tmp);
    llama_rmsnorm_backward(m, ws, &(RmsBack){dx, g.ln1w, s.dw, dlnh, io->x_in, p.ln1w, a.rstd1});
}
