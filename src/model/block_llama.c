// block_llama.c — one LLaMA layer (pre-RMSNorm, no biases):
//   qkv   = rope(rmsnorm_1(x_in) · [q|k|v]ᵀ)          (B,T,(H+2·KV)·hs), RoPE on q and k
//   res2  = x_in + o_proj(gqa_attention(qkv))          (B,T,C)
//   x_out = res2 + down(swiglu(rmsnorm_2(res2) · [gate|up]ᵀ))
// forward, backward (gradients accumulate, +=) and, with recompute, forward-again-during-
// backward. One process only: no tensor, sequence or context parallelism (refused up front).
// The embedding and the head of the LLaMA family live in block_embed.c and block_head.c.
#include <stddef.h>

#include "block_impl.h"

typedef struct {
    float *ln1w, *qkvw, *ow, *ln2w, *guw, *downw;
} LlamaParams;

// Same order as llama_add_tensors() lays the tensors out (q,k,v and gate,up back to back).
static LlamaParams llama_params(float *base, const GPTConfig *c, size_t QKV) {
    size_t C = (size_t)c->C, F = (size_t)c->F;
    LlamaParams p;
    float *q = base;
    p.ln1w = q, q += C;
    p.qkvw = q, q += QKV * C;
    p.ow = q, q += C * C;
    p.ln2w = q, q += C;
    p.guw = q, q += 2 * F * C;
    p.downw = q;
    return p;
}

typedef struct {
    float *ln1, *qkv, *atty, *res2, *ln2, *gu, *h, *rstd1, *rstd2, *att;
} LlamaActs;

// Saved per layer (llama_layer_act_floats counts the same): ln1, atty, res2, ln2 (N,C); qkv
// after RoPE (N,QKV); gate|up (N,2F); swiglu out (N,F); rstd (N) ×2; the attention's state.
static LlamaActs llama_acts(const Workspace *ws, int layer, const GPTConfig *c, size_t QKV) {
    size_t N = (size_t)ws->B * ws->T, C = (size_t)c->C, F = (size_t)c->F;
    float *q = ws->layer + (ws->recompute ? 0 : (size_t)(layer - ws->layer0) * ws->layer_stride);
    LlamaActs a;
    a.ln1 = q, q += N * C;
    a.qkv = q, q += N * QKV;
    a.atty = q, q += N * C;
    a.res2 = q, q += N * C;
    a.ln2 = q, q += N * C;
    a.gu = q, q += N * 2 * F;
    a.h = q, q += N * F;
    a.rstd1 = q, q += N;
    a.rstd2 = q, q += N;
    a.att = q;
    return a;
}

typedef struct {
    int B, T, N, C, H, KV, hs, F, QKV;
} Dims;

static Dims dims(const GPTConfig *c, const Workspace *ws) {
    int hs = c->C / c->H;
    return (Dims){ws->B, ws->T, ws->B * ws->T,          c->C, c->H, c->KV,
                  hs,    c->F,  (c->H + 2 * c->KV) * hs};
}

static void llama_run_forward(const GPT *m, const Block *blk, const Workspace *ws,
                              const float *x_in, float *x_out) {
    const Backend *be = m->be;
    const GPTConfig *c = &m->cfg;
    Dims d = dims(c, ws);
    LlamaParams p = llama_params(blk->params, c, (size_t)d.QKV);
    LlamaActs a = llama_acts(ws, blk->layer, c, (size_t)d.QKV);
    size_t NC = (size_t)d.N * d.C;
    be->rmsnorm_forward(a.ln1, a.rstd1, x_in, p.ln1w, d.N, d.C, c->norm_eps);
    be->matmul_forward(a.qkv, a.ln1, p.qkvw, NULL, d.N, d.C, d.QKV); // (N,QKV)
    be->rope_forward(a.qkv, ws->rope_pos, ws->rope_freq, d.B, d.T, d.H, d.KV, d.hs);
    be->gqa_attention_forward(a.atty, a.att, a.qkv, d.B, d.T, d.H, d.KV, d.hs); // (N,C)
    block_poll(m);
    be->matmul_forward(a.res2, a.atty, p.ow, NULL, d.N, d.C, d.C);
    be->residual_forward(a.res2, a.res2, x_in, NC);
    be->rmsnorm_forward(a.ln2, a.rstd2, a.res2, p.ln2w, d.N, d.C, c->norm_eps);
    be->matmul_forward(a.gu, a.ln2, p.guw, NULL, d.N, d.C, 2 * d.F); // (N,2F) [gate | up]
    be->swiglu_forward(a.h, a.gu, d.N, d.F);                         // (N,F)
    block_poll(m);
    be->matmul_forward(x_out, a.h, p.downw, NULL, d.N, d.F, d.C);
    be->residual_forward(x_out, x_out, a.res2, NC);
}

void llama_layer_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    llama_run_forward(m, blk, ws, io->x_in, io->x_out);
}

// Scratch (llama_scratch_floats): big (N, max(QKV, 2F)) for d(gate|up), then d(qkv); dln (N,C)
// a norm's input gradient; dsmall (N, max(F, C)) d(swiglu out), then d(atty); recomp (N,C).
void llama_layer_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    const Backend *be = m->be;
    const GPTConfig *c = &m->cfg;
    Dims d = dims(c, ws);
    size_t N = (size_t)d.N, big_w = (size_t)(d.QKV > 2 * d.F ? d.QKV : 2 * d.F);
    float *big = ws->scratch, *dln = big + N * big_w, *dsmall = dln + N * d.C;
    float *recomp = dsmall + N * (size_t)(d.F > d.C ? d.F : d.C);
    if (ws->recompute) llama_run_forward(m, blk, ws, io->x_in, recomp);
    LlamaParams p = llama_params(blk->params, c, (size_t)d.QKV),
                g = llama_params(blk->grads, c, (size_t)d.QKV);
    LlamaActs a = llama_acts(ws, blk->layer, c, (size_t)d.QKV);
    float *dx = io->dx; // d(x_out) on entry; d(res2), then d(x_in) after the norms add theirs
    // MLP branch: x_out = res2 + down(swiglu(gu(ln2)))
    be->matmul_backward(dsmall, g.downw, NULL, dx, a.h, p.downw, d.N, d.F, d.C); // d h (N,F)
    block_poll(m);
    be->swiglu_backward(big, a.gu, dsmall, d.N, d.F); // d(gate|up) (N,2F)
    be->matmul_backward(dln, g.guw, NULL, big, a.ln2, p.guw, d.N, d.C, 2 * d.F);
    be->rmsnorm_backward(dx, g.ln2w, dln, a.res2, p.ln2w, a.rstd2, d.N, d.C);
    block_poll(m);
    // attention branch: res2 = x_in + o(attention(rope(qkv(ln1))))
    be->matmul_backward(dsmall, g.ow, NULL, dx, a.atty, p.ow, d.N, d.C, d.C); // d atty (N,C)
    be->gqa_attention_backward(big, dsmall, a.qkv, a.atty, a.att, d.B, d.T, d.H, d.KV, d.hs);
    be->rope_backward(big, ws->rope_pos, ws->rope_freq, d.B, d.T, d.H, d.KV, d.hs);
    block_poll(m);
    be->matmul_backward(dln, g.qkvw, NULL, big, a.ln1, p.qkvw, d.N, d.C, d.QKV);
    be->rmsnorm_backward(dx, g.ln1w, dln, io->x_in, p.ln1w, a.rstd1, d.N, d.C);
}
