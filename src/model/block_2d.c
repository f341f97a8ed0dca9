// block_2d.c — the model's forward and backward on rank (i,j) of a 2D tensor-parallel grid
// (gpt_2d.h): its activations (Work2d), one transformer layer over SUMMA products and split
// LayerNorms (summa.c) with attention over the rank's own rows and heads, the embedding
// (columns block j of wte and wpe: no communication) and the tied head (partial logits summed
// along the row, then the whole cross-entropy of this row's tokens on every rank of the row).
#include <stddef.h>

#include "../common.h"
#include "gpt_2d.h"

typedef struct {
    float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} P2;

// The part's tensors of one layer in gpt_create order; c = C/q, F = 4C/q.
static P2 params2(float *q, size_t c, size_t F) {
    P2 p;
    p.ln1w = q, q += c;
    p.ln1b = q, q += c;
    p.qkvw = q, q += 3 * c * c;
    p.qkvb = q, q += 3 * c;
    p.projw = q, q += c * c;
    p.projb = q, q += c;
    p.ln2w = q, q += c;
    p.ln2b = q, q += c;
    p.fcw = q, q += F * c;
    p.fcb = q, q += F;
    p.fcprojw = q, q += c * F;
    p.fcprojb = q;
    return p;
}

typedef struct {
    float *ln1, *qkv, *atty, *res2, *ln2, *fch, *fchg, *m1, *r1, *m2, *r2, *att;
} A2;

typedef struct {
    int Bl, T, Nl, c, F, NHl;
} Dims;

static Dims dims(const GPT *m, const Tp2d *g, const Work2d *w) {
    int c = m->cfg.C / g->q;
    return (Dims){w->Bl, w->T, w->Bl * w->T, c, 4 * c, m->cfg.H / g->q};
}

static size_t layer_floats(const GPT *m, const Tp2d *g, int Bl, int T) {
    size_t N = (size_t)Bl * T, c = (size_t)m->cfg.C / g->q;
    return N * (c * 7 + 8 * c + 4) + m->be->attention_saved_floats(Bl, T, m->cfg.H / g->q);
}

static A2 acts2(const GPT *m, const Tp2d *g, const Work2d *w, int layer) {
    Dims d = dims(m, g, w);
    size_t N = (size_t)d.Nl, c = (size_t)d.c, F = (size_t)d.F;
    float *q = w->layer + (w->recompute ? 0 : (size_t)layer * w->layer_stride);
    A2 a;
    a.ln1 = q, q += N * c;
    a.qkv = q, q += N * 3 * c;
    a.atty = q, q += N * c;
    a.res2 = q, q += N * c;
    a.ln2 = q, q += N * c;
    a.fch = q, q += N * F;
    a.fchg = q, q += N * F;
    a.m1 = q, q += N;
    a.r1 = q, q += N;
    a.m2 = q, q += N;
    a.r2 = q, q += N;
    a.att = q;
    return a;
}

int work2d_create(Work2d *w, const GPT *m, const Tp2d *g, int B, int T, int recompute) {
    *w = (Work2d){.B = B, .T = T, .Bl = B / g->q, .recompute = recompute};
    int L = m->cfg.L, V = m->cfg.V, q = g->q;
    size_t N = (size_t)w->Bl * T, c = (size_t)m->cfg.C / q, F = 4 * c;
    w->layer_stride = layer_floats(m, g, w->Bl, T);
    size_t sizes[] = {
        (size_t)(L + 1) * N * c,                       // stream
        (recompute ? 1 : (size_t)L) * w->layer_stride, // layer
        N * c + 3 * N + N * (size_t)V,                 // head
        N * c,                                         // dstream
        N * F,
        F * c,
        N * F, // xbuf, wbuf, tmp
        (size_t)q * N * F,
        (size_t)q * F * c, // dxs, dws
        N * F,
        N * c,
        N * 3 * c, // big, dln, dsmall
        N * c,
        2 * N, // recomp, stats
    };
    float **dst[] = {&w->stream, &w->layer,  &w->head,   &w->dstream, &w->xbuf,
                     &w->wbuf,   &w->tmp,    &w->dxs,    &w->dws,     &w->big,
                     &w->dln,    &w->dsmall, &w->recomp, &w->stats};
    size_t total = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        total += sizes[k];
    w->mem = m->be->alloc(total);
    w->floats = total;
    float *p = w->mem;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        *dst[k] = p, p += sizes[k];
    return 0;
}

void work2d_free(Work2d *w, const GPT *m) {
    if (w->mem) m->be->release(w->mem);
    w->mem = NULL;
}

static float *stream_at(const GPT *m, const Tp2d *g, const Work2d *w, int l) {
    return w->stream + (size_t)l * w->Bl * w->T * (m->cfg.C / g->q);
}

static void layer2d_forward(const GPT *m, const Tp2d *g, Work2d *w, const Block *blk,
                            const float *x, float *out) {
    const Backend *be = m->be;
    Dims d = dims(m, g, w);
    size_t NC = (size_t)d.Nl * d.c;
    P2 p = params2(blk->params, d.c, d.F);
    A2 a = acts2(m, g, w, blk->layer);
    ln2d_forward(m, g, w, a.ln1, a.m1, a.r1, x, p.ln1w, p.ln1b, d.Nl);
    summa_forward(m, g, w, a.qkv, a.ln1, p.qkvw, p.qkvb, d.Nl, d.c, 3 * d.c); // (Nl,3c)
    be->attention_forward(a.atty, a.att, a.qkv, d.Bl, d.T, d.c, d.NHl);       // (Nl,c)
    summa_forward(m, g, w, a.res2, a.atty, p.projw, p.projb, d.Nl, d.c, d.c);
    be->residual_forward(a.res2, a.res2, x, NC);
    ln2d_forward(m, g, w, a.ln2, a.m2, a.r2, a.res2, p.ln2w, p.ln2b, d.Nl);
    summa_forward(m, g, w, a.fch, a.ln2, p.fcw, p.fcb, d.Nl, d.c, d.F); // (Nl,F)
    be->gelu_forward(a.fchg, a.fch, (size_t)d.Nl * d.F);
    summa_forward(m, g, w, out, a.fchg, p.fcprojw, p.fcprojb, d.Nl, d.F, d.c);
    be->residual_forward(out, out, a.res2, NC);
}

// dx: d(x_out) on entry, d(x_in) on exit.
static void layer2d_backward(const GPT *m, const Tp2d *g, Work2d *w, const Block *blk,
                             const float *x, float *dx) {
    const Backend *be = m->be;
    Dims d = dims(m, g, w);
    if (w->recompute) layer2d_forward(m, g, w, blk, x, w->recomp);
    P2 p = params2(blk->params, d.c, d.F), gr = params2(blk->grads, d.c, d.F);
    A2 a = acts2(m, g, w, blk->layer);
    // MLP branch
    summa_backward(m, g, w, w->big, gr.fcprojw, gr.fcprojb, dx, a.fchg, p.fcprojw, d.Nl, d.F, d.c);
    be->gelu_backward(w->big, a.fch, w->big, (size_t)d.Nl * d.F);
    summa_backward(m, g, w, w->dln, gr.fcw, gr.fcb, w->big, a.ln2, p.fcw, d.Nl, d.c, d.F);
    ln2d_backward(m, g, w, dx, gr.ln2w, gr.ln2b, w->dln, a.res2, p.ln2w, a.m2, a.r2, d.Nl);
    // attention branch
    summa_backward(m, g, w, w->dsmall, gr.projw, gr.projb, dx, a.atty, p.projw, d.Nl, d.c, d.c);
    be->attention_backward(w->big, w->dsmall, a.qkv, a.atty, a.att, d.Bl, d.T, d.c, d.NHl);
    summa_backward(m, g, w, w->dln, gr.qkvw, gr.qkvb, w->big, a.ln1, p.qkvw, d.Nl, d.c, 3 * d.c);
    ln2d_backward(m, g, w, dx, gr.ln1w, gr.ln1b, w->dln, x, p.ln1w, a.m1, a.r1, d.Nl);
}

typedef struct {
    float *lnf, *mean, *rstd, *probs, *losses;
} H2;

static H2 head2(const GPT *m, const Tp2d *g, const Work2d *w) {
    size_t N = (size_t)w->Bl * w->T;
    H2 h;
    float *q = w->head;
    h.lnf = q, q += N * (m->cfg.C / g->q);
    h.mean = q, q += N;
    h.rstd = q, q += N;
    h.probs = q, q += N * m->cfg.V;
    h.losses = q;
    return h;
}

double gpt2d_forward(const GPT *m, const Tp2d *g, Work2d *w, const int *tokens,
                     const int *targets) {
    const Backend *be = m->be;
    Dims d = dims(m, g, w);
    size_t row0 = (size_t)g->i * d.Nl;
    int V = m->cfg.V, L = m->cfg.L;
    w->tokens = tokens + row0, w->targets = targets ? targets + row0 : NULL;
    const float *wte = m->blocks[0].params, *wpe = wte + (size_t)V * d.c;
    be->encoder_forward(stream_at(m, g, w, 0), w->tokens, wte, wpe, d.Bl, d.T, d.c);
    for (int l = 0; l < L; l++)
        layer2d_forward(m, g, w, &m->blocks[1 + l], stream_at(m, g, w, l),
                        stream_at(m, g, w, l + 1));
    const float *hp = m->blocks[L + 1].params;
    H2 h = head2(m, g, w);
    ln2d_forward(m, g, w, h.lnf, h.mean, h.rstd, stream_at(m, g, w, L), hp, hp + d.c, d.Nl);
    be->matmul_forward(h.probs, h.lnf, wte, NULL, d.Nl, d.c, V); // partial logits (Nl,V)
    g->allreduce(g->ctx, T2D_ROW, h.probs, (size_t)d.Nl * V);
    if (!targets) return 0;
    return be->softmax_xent_forward(h.probs, h.losses, w->targets, d.Nl, V);
}

void gpt2d_backward(const GPT *m, const Tp2d *g, Work2d *w, float grad_scale) {
    const Backend *be = m->be;
    Dims d = dims(m, g, w);
    int V = m->cfg.V, L = m->cfg.L;
    const float *wte = m->blocks[0].params, *hp = m->blocks[L + 1].params;
    float *dwte = m->blocks[0].grads, *dwpe = dwte + (size_t)V * d.c, *dh = m->blocks[L + 1].grads;
    H2 h = head2(m, g, w);
    be->softmax_xent_backward(h.probs, w->targets, grad_scale, d.Nl, V);
    be->matmul_backward(w->dln, dwte, NULL, h.probs, h.lnf, wte, d.Nl, d.c, V);
    be->fill(w->dstream, 0.f, (size_t)d.Nl * d.c);
    ln2d_backward(m, g, w, w->dstream, dh, dh + d.c, w->dln, stream_at(m, g, w, L), hp, h.mean,
                  h.rstd, d.Nl);
    for (int l = L - 1; l >= 0; l--)
        layer2d_backward(m, g, w, &m->blocks[1 + l], stream_at(m, g, w, l), w->dstream);
    be->encoder_backward(dwte, dwpe, w->dstream, w->tokens, d.Bl, d.T, d.c);
}
