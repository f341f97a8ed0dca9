// block_2d_llama.c — one LLaMA layer on rank (i,j) of a 2D tensor-parallel grid (gpt_2d.h):
// block_llama.c's layer with its products as SUMMA products (summa.c) and its RMSNorms over the
// row's split channels. Rank (i,j) holds rows i of the micro-batch and, of every product's
// outputs, block j: query heads j·H/q.., kv heads j·KV/q.. (the ones those query heads read: q
// divides KV), gate and up columns j·F/q.. (so SwiGLU is local), o_proj's and down's output
// channels block j. RoPE turns the rank's q and k heads at the rows' positions (global under
// context parallelism), with the backend's LLaMA kernels throughout. The split RMSNorm is the
// split LayerNorm's kernels with a zero mean and bias: the statistics Σx² are summed along the
// row; the backward drops the mean's term (Σ dy·w, zeroed on the host: 2 floats a row) and the
// eps of the kernels (1e-5) is moved to the model's norm eps by adjusting Σx².
#include <stddef.h>
#include <stdlib.h>

#include "../common.h"
#include "block_impl.h"
#include "gpt_2d.h"

#define SPLIT_EPS 1e-5f // the eps the ln_split kernels add

typedef struct {
    float *ln1w, *qkvw, *ow, *ln2w, *guw, *downw;
} LP2;

// Rank widths: Nl rows, c = C/q channels, Hl/KVl heads, hs, Fq SwiGLU columns, QKV columns.
typedef struct {
    int Bl, T, Nl, c, Hl, KVl, hs, Fq, QKV;
} LD;

static LD ldims(const GPT *m, int q, int Bl, int T) {
    const GPTConfig *cf = &m->cfg;
    int hs = cf->C / cf->H, Hl = cf->H / q, KVl = cf->KV / q;
    return (LD){Bl, T, Bl * T, cf->C / q, Hl, KVl, hs, cf->F / q, (Hl + 2 * KVl) * hs};
}

static LP2 lparams(float *p, const LD *d) {
    size_t c = (size_t)d->c, F = (size_t)d->Fq;
    LP2 r;
    r.ln1w = p, p += c;
    r.qkvw = p, p += (size_t)d->QKV * c;
    r.ow = p, p += c * c;
    r.ln2w = p, p += c;
    r.guw = p, p += 2 * F * c;
    r.downw = p;
    return r;
}

typedef struct {
    float *ln1, *qkv, *atty, *res2, *ln2, *gu, *h, *rstd1, *rstd2, *att;
} LA2;

size_t llama2d_layer_floats(const GPT *m, const Tp2d *g, int Bl, int T) {
    LD d = ldims(m, g->q, Bl, T);
    size_t N = (size_t)d.Nl;
    return N * (4 * (size_t)d.c + d.QKV + 3 * (size_t)d.Fq + 2) +
           m->be->attention_saved_floats(Bl, T, d.Hl, d.hs);
}

size_t llama2d_width(const GPT *m, int q) {
    LD d = ldims(m, q, 1, 1);
    size_t w = (size_t)(d.QKV > 2 * d.Fq ? d.QKV : 2 * d.Fq);
    return w > 3 * (size_t)d.c ? w : 3 * (size_t)d.c;
}

static LA2 lacts(const Work2d *w, int layer, const LD *d) {
    size_t N = (size_t)d->Nl, c = (size_t)d->c, F = (size_t)d->Fq;
    float *q = w->layer + (w->recompute ? 0 : (size_t)layer * w->layer_stride);
    LA2 a;
    a.ln1 = q, q += N * c;
    a.qkv = q, q += N * d->QKV;
    a.atty = q, q += N * c;
    a.res2 = q, q += N * c;
    a.ln2 = q, q += N * c;
    a.gu = q, q += N * 2 * F;
    a.h = q, q += N * F;
    a.rstd1 = q, q += N;
    a.rstd2 = q, q += N;
    a.att = q;
    return a;
}

int llama2d_work(Work2d *w, const GPT *m, const Tp2d *g, int T) {
    const GPTConfig *c = &m->cfg;
    size_t N = (size_t)w->Bl * T, cq = (size_t)c->C / g->q;
    w->rope_pos = xcalloc((size_t)T, sizeof(int));
    w->rope_freq = xcalloc((size_t)(c->C / c->H / 2), sizeof(float));
    llama_rope_tables(w->rope_pos, w->rope_freq, c, T, &m->cp);
    w->zeros = m->be->alloc(N + cq);
    w->junk = m->be->alloc(cq);
    m->be->fill(w->zeros, 0.f, N + cq);
    w->hstats = xalloc_floats(2 * N);
    return 0;
}

void llama2d_work_free(Work2d *w, const GPT *m) {
    if (w->zeros) m->be->release(w->zeros);
    if (w->junk) m->be->release(w->junk);
    free(w->rope_pos), free(w->rope_freq), free(w->hstats);
    w->zeros = w->junk = NULL, w->rope_pos = NULL, w->rope_freq = w->hstats = NULL;
}

void rms2d_forward(const GPT *m, const Tp2d *g, Work2d *w, float *out, float *rstd, const float *x,
                   const float *wt, int Nl) {
    const Backend *be = m->be;
    int C = m->cfg.C, Cq = C / g->q;
    float *sq = w->stats, shift = (float)C * (m->cfg.norm_eps - SPLIT_EPS);
    be->ln_split_stats(sq, x, w->zeros, Nl, Cq); // Σ x² of the rank's channels
    g->allreduce(g->ctx, T2D_ROW, sq, (size_t)Nl, 0);
    if (shift != 0.f) { // sq/C + 1e-5 = Σx²/C + eps
        be->download(w->hstats, sq, (size_t)Nl);
        for (int n = 0; n < Nl; n++)
            w->hstats[n] += shift;
        be->upload(sq, w->hstats, (size_t)Nl);
    }
    be->ln_split_apply(out, rstd, x, w->zeros, sq, wt, w->zeros + Nl, Nl, Cq, C);
}

void rms2d_backward(const GPT *m, const Tp2d *g, Work2d *w, float *dx, float *dwt,
                    const float *dout, const float *x, const float *wt, const float *rstd, int Nl) {
    const Backend *be = m->be;
    int C = m->cfg.C, Cq = C / g->q;
    be->ln_split_bwd_stats(w->stats, dout, x, wt, w->zeros, rstd, Nl, Cq);
    g->allreduce(g->ctx, T2D_ROW, w->stats, (size_t)2 * Nl, 0);
    be->download(w->hstats, w->stats, (size_t)2 * Nl);
    for (int n = 0; n < Nl; n++) // RMSNorm has no mean: its term goes
        w->hstats[2 * n] = 0.f;
    be->upload(w->stats, w->hstats, (size_t)2 * Nl);
    be->fill(w->junk, 0.f, (size_t)Cq);
    be->ln_split_backward(dx, dwt, w->junk, dout, x, wt, w->zeros, rstd, w->stats, Nl, Cq, C);
}

void llama2d_layer_forward(const GPT *m, const Tp2d *g, Work2d *w, const Block *blk, const float *x,
                           float *out) {
    const Backend *be = m->be;
    LD d = ldims(m, g->q, w->Bl, w->T);
    size_t NC = (size_t)d.Nl * d.c;
    g->section(g->ctx, blk->layer + 1); // first: a strategy may place the block's parameters
    LP2 p = lparams(blk->params, &d);
    LA2 a = lacts(w, blk->layer, &d);
    rms2d_forward(m, g, w, a.ln1, a.rstd1, x, p.ln1w, d.Nl);
    summa_forward(m, g, w, a.qkv, a.ln1, p.qkvw, NULL, d.Nl, d.c, d.QKV);
    be->rope_forward(a.qkv, w->rope_pos, w->rope_freq, d.Bl, d.T, d.Hl, d.KVl, d.hs);
    if (m->cp.n > 1) // ring attention: q and k turned by their global positions
        m->cp.forward(m->cp.ctx, a.atty, a.att, a.qkv, d.Bl, d.T, d.c, d.Hl, d.KVl);
    else
        be->gqa_attention_forward(a.atty, a.att, a.qkv, d.Bl, d.T, d.Hl, d.KVl, d.hs);
    summa_forward(m, g, w, a.res2, a.atty, p.ow, NULL, d.Nl, d.c, d.c);
    be->residual_forward(a.res2, a.res2, x, NC);
    rms2d_forward(m, g, w, a.ln2, a.rstd2, a.res2, p.ln2w, d.Nl);
    summa_forward(m, g, w, a.gu, a.ln2, p.guw, NULL, d.Nl, d.c, 2 * d.Fq); // [gate_j | up_j]
    be->swiglu_forward(a.h, a.gu, d.Nl, d.Fq);
    summa_forward(m, g, w, out, a.h, p.downw, NULL, d.Nl, d.Fq, d.c);
    be->residual_forward(out, out, a.res2, NC);
}

// dx: d(x_out) on entry, d(x_in) on exit.
void llama2d_layer_backward(const GPT *m, const Tp2d *g, Work2d *w, const Block *blk,
                            const float *x, float *dx) {
    const Backend *be = m->be;
    LD d = ldims(m, g->q, w->Bl, w->T);
    g->section(g->ctx, blk->layer + 1);
    if (w->recompute) llama2d_layer_forward(m, g, w, blk, x, w->recomp);
    LP2 p = lparams(blk->params, &d), gr = lparams(blk->grads, &d);
    LA2 a = lacts(w, blk->layer, &d);
    // MLP branch: x_out = res2 + down(swiglu(gu(ln2)))
    summa_backward(m, g, w, w->dsmall, gr.downw, NULL, dx, a.h, p.downw, d.Nl, d.Fq, d.c);
    be->swiglu_backward(w->big, a.gu, w->dsmall, d.Nl, d.Fq);
    summa_backward(m, g, w, w->dln, gr.guw, NULL, w->big, a.ln2, p.guw, d.Nl, d.c, 2 * d.Fq);
    rms2d_backward(m, g, w, dx, gr.ln2w, w->dln, a.res2, p.ln2w, a.rstd2, d.Nl);
    // attention branch: res2 = x_in + o(attention(rope(qkv(ln1))))
    summa_backward(m, g, w, w->dsmall, gr.ow, NULL, dx, a.atty, p.ow, d.Nl, d.c, d.c);
    if (m->cp.n > 1)
        m->cp.backward(m->cp.ctx, w->big, w->dsmall, a.qkv, a.atty, a.att, d.Bl, d.T, d.c, d.Hl,
                       d.KVl);
    else
        be->gqa_attention_backward(w->big, w->dsmall, a.qkv, a.atty, a.att, d.Bl, d.T, d.Hl, d.KVl,
                                   d.hs);
    be->rope_backward(w->big, w->rope_pos, w->rope_freq, d.Bl, d.T, d.Hl, d.KVl, d.hs);
    summa_backward(m, g, w, w->dln, gr.qkvw, NULL, w->big, a.ln1, p.qkvw, d.Nl, d.c, d.QKV);
    rms2d_backward(m, g, w, dx, gr.ln1w, w->dln, x, p.ln1w, a.rstd1, d.Nl);
}
