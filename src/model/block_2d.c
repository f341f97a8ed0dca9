// block_2d.c — the model's forward and backward on rank (i,j) of a 2D tensor-parallel grid
// (gpt_2d.h): its activations (Work2d), one transformer layer over SUMMA products and split
// LayerNorms (summa.c) with attention over the rank's own rows and heads, the embedding
// (vocabulary partials of every row, reduce-scattered along the row and swapped with the
// transposed rank) and the tied head (a SUMMA product and a vocabulary-parallel cross-entropy).
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
    if (gpt_is_llama(&m->cfg)) return llama2d_layer_floats(m, g, Bl, T);
    size_t N = (size_t)Bl * T, c = (size_t)m->cfg.C / g->q;
    return N * (c * 7 + 8 * c + 4) +
           m->be->attention_saved_floats(Bl, T, m->cfg.H / g->q, m->cfg.C / m->cfg.H);
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
    int L = m->cfg.L, q = g->q;
    int llama = gpt_is_llama(&m->cfg);
    size_t N = (size_t)w->Bl * T, c = (size_t)m->cfg.C / q;
    size_t F = llama ? llama2d_width(m, q) : 4 * c; // the widest product's columns
    size_t Vq = (size_t)gpt2d_vrows(&m->cfg, q), Wmax = (F > Vq ? F : Vq) * c;
    size_t Pmax =
        (size_t)q * Wmax > N * (F > Vq ? F : Vq) ? (size_t)q * Wmax : N * (F > Vq ? F : Vq);
    w->layer_stride = layer_floats(m, g, w->Bl, T);
    size_t sizes[] = {
        (size_t)(L + 1) * N * c,                       // stream
        (recompute ? 1 : (size_t)L) * w->layer_stride, // layer
        N * c + 3 * N + N * Vq,                        // head
        N * c,                                         // dstream
        N * F,
        Wmax, // xbuf, wbuf
        (size_t)q * N * F,
        Pmax, // dxs, dws (= tmp)
        N * F,
        N * c,
        N * (llama ? F : 3 * c), // big, dln, dsmall
        N * c,
        3 * N, // recomp, stats
    };
    float **dst[] = {&w->stream, &w->layer, &w->head, &w->dstream, &w->xbuf,   &w->wbuf, &w->dxs,
                     &w->dws,    &w->big,   &w->dln,  &w->dsmall,  &w->recomp, &w->stats};
    size_t total = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        total += sizes[k];
    w->mem = m->be->alloc(total);
    w->floats = total;
    float *p = w->mem;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        *dst[k] = p, p += sizes[k];
    w->tmp = w->dws; // a forward product's scratch: the backward's dW blocks are not live then
    return llama ? llama2d_work(w, m, g, T) : 0;
}

void work2d_free(Work2d *w, const GPT *m) {
    if (w->mem) m->be->release(w->mem);
    w->mem = NULL;
    llama2d_work_free(w, m);
}

static float *stream_at(const GPT *m, const Tp2d *g, const Work2d *w, int l) {
    return w->stream + (size_t)l * w->Bl * w->T * (m->cfg.C / g->q);
}

static void layer2d_forward(const GPT *m, const Tp2d *g, Work2d *w, const Block *blk,
                            const float *x, float *out) {
    const Backend *be = m->be;
    Dims d = dims(m, g, w);
    size_t NC = (size_t)d.Nl * d.c;
    g->section(g->ctx, blk->layer + 1); // first: a strategy may place the block's parameters
    P2 p = params2(blk->params, d.c, d.F);
    A2 a = acts2(m, g, w, blk->layer);
    ln2d_forward(m, g, w, a.ln1, a.m1, a.r1, x, p.ln1w, p.ln1b, d.Nl);
    summa_forward(m, g, w, a.qkv, a.ln1, p.qkvw, p.qkvb, d.Nl, d.c, 3 * d.c); // (Nl,3c)
    if (m->cp.n > 1) // ring attention over the context-parallel ranks (lse in the att slot)
        m->cp.forward(m->cp.ctx, a.atty, a.att, a.qkv, d.Bl, d.T, d.c, d.NHl, d.NHl);
    else
        be->attention_forward(a.atty, a.att, a.qkv, d.Bl, d.T, d.c, d.NHl); // (Nl,c)
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
    g->section(g->ctx, blk->layer + 1);
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
    if (m->cp.n > 1)
        m->cp.backward(m->cp.ctx, w->big, w->dsmall, a.qkv, a.atty, a.att, d.Bl, d.T, d.c, d.NHl,
                       d.NHl);
    else
        be->attention_backward(w->big, w->dsmall, a.qkv, a.atty, a.att, d.Bl, d.T, d.c, d.NHl);
    summa_backward(m, g, w, w->dln, gr.qkvw, gr.qkvb, w->big, a.ln1, p.qkvw, d.Nl, d.c, 3 * d.c);
    ln2d_backward(m, g, w, dx, gr.ln1w, gr.ln1b, w->dln, x, p.ln1w, a.m1, a.r1, d.Nl);
}

typedef struct {
    float *lnf, *mean, *rstd, *losses, *probs;
    int Vq, v0, nv; // the padded vocabulary's rows per rank, this column's first, its real ones
} H2;

static H2 head2(const GPT *m, const Tp2d *g, const Work2d *w) {
    size_t N = (size_t)w->Bl * w->T;
    H2 h;
    float *q = w->head;
    h.lnf = q, q += N * (m->cfg.C / g->q);
    h.mean = q, q += N;
    h.rstd = q, q += N;
    h.losses = q, q += N;
    h.probs = q;
    h.Vq = gpt2d_vrows(&m->cfg, g->q), h.v0 = g->j * h.Vq, h.nv = gpt2d_vreal(&m->cfg, g->q, g->j);
    return h;
}

// wpe's rows of this rank's positions added to x (Bl·T, c) (backward: dx's rows into dwpe): rows
// 0..T-1, or under context parallelism (T = the rank's Tl tokens) its two chunks of every
// sequence at their global positions.
static void wpe2d(const GPT *m, const Work2d *w, float *x, const float *wpe, float *dwte,
                  float *dwpe, const float *dx, int c) {
    int n = m->cp.n > 1 ? 2 : 1, cc = w->T, p[2] = {0, 0};
    if (n == 2) gpt_cp_chunks(w->T * m->cp.n, m->cp.n, m->cp.i, &cc, &p[0], &p[1]);
    for (int b = 0; b < (n == 2 ? w->Bl : 1); b++)
        for (int k = 0; k < n; k++) { // chunk k of row b (all rows at once without cp)
            size_t row = (size_t)b * w->T + (size_t)k * cc;
            int rows = n == 2 ? 1 : w->Bl;
            if (wpe)
                m->be->encoder_forward_shard(x + row * c, w->tokens + row, NULL,
                                             wpe + (size_t)p[k] * c, 0, 0, rows, cc, c);
            else
                m->be->encoder_backward_shard(dwte, dwpe + (size_t)p[k] * c, dx + row * c,
                                              w->tokens + row, 0, 0, rows, cc, c);
        }
}

// x_0 (rows i, channels j) = wte[token] + wpe[t]. This rank embeds every token of the micro-batch
// from its vocabulary block j into channels i; the row's reduce-scatter completes rows block j
// of channels i, which the transposed rank (j,i) holds the place of.
static void embed2d_forward(const GPT *m, const Tp2d *g, Work2d *w) {
    const Backend *be = m->be;
    Dims d = dims(m, g, w);
    H2 h = head2(m, g, w);
    size_t NC = (size_t)d.Nl * d.c;
    const float *wte = m->blocks[0].params, *wpe = wte + (size_t)h.Vq * d.c;
    float *x0 = stream_at(m, g, w, 0);
    g->section(g->ctx, 0);
    be->encoder_forward_shard(w->dxs, w->all, wte, NULL, h.v0, h.nv, w->B, d.T, d.c); // (B·T,c)
    g->reduce_scatter(g->ctx, T2D_ROW, w->dxs, w->xbuf, NC);
    g->transpose(g->ctx, w->xbuf, x0, NC);
    if (gpt_is_llama(&m->cfg)) return; // LLaMA: no position table (RoPE in the layers)
    wpe2d(m, w, w->tmp, wpe, NULL, NULL, NULL, d.c); // wpe only
    be->residual_forward(x0, x0, w->tmp, NC);
}

static void embed2d_backward(const GPT *m, const Tp2d *g, Work2d *w) {
    const Backend *be = m->be;
    Dims d = dims(m, g, w);
    H2 h = head2(m, g, w);
    size_t NC = (size_t)d.Nl * d.c;
    float *dwte = m->blocks[0].grads, *dwpe = dwte + (size_t)h.Vq * d.c;
    g->section(g->ctx, 0);
    if (!gpt_is_llama(&m->cfg)) // (no wte rows: nv 0)
        wpe2d(m, w, NULL, NULL, dwte, dwpe, w->dstream, d.c);
    g->transpose(g->ctx, w->dstream, w->dxs + (size_t)g->j * NC, NC); // rows j, channels i
    g->allgather(g->ctx, T2D_ROW, w->dxs, NC);                        // (B·T, c): channels i
    be->encoder_backward_shard(dwte, NULL, w->dxs, w->all, h.v0, h.nv, w->B, d.T, d.c);
}

double gpt2d_forward(const GPT *m, const Tp2d *g, Work2d *w, const int *tokens,
                     const int *targets) {
    const Backend *be = m->be;
    Dims d = dims(m, g, w);
    size_t row0 = (size_t)g->i * d.Nl;
    int L = m->cfg.L;
    w->all = tokens, w->tokens = tokens + row0, w->targets = targets ? targets + row0 : NULL;
    embed2d_forward(m, g, w);
    for (int l = 0; l < L; l++)
        (gpt_is_llama(&m->cfg) ? llama2d_layer_forward : layer2d_forward)(
            m, g, w, &m->blocks[1 + l], stream_at(m, g, w, l), stream_at(m, g, w, l + 1));
    const float *hp = m->blocks[L + 1].params, *wte = m->blocks[0].params;
    H2 h = head2(m, g, w);
    g->section(g->ctx, L + 1);
    if (gpt_is_llama(&m->cfg)) // RMSNorm; the untied lm_head after its weight
        rms2d_forward(m, g, w, h.lnf, h.rstd, stream_at(m, g, w, L), hp, d.Nl);
    else
        ln2d_forward(m, g, w, h.lnf, h.mean, h.rstd, stream_at(m, g, w, L), hp, hp + d.c, d.Nl);
    const float *hw = gpt_tied(&m->cfg) ? wte : hp + d.c;
    summa_forward(m, g, w, h.probs, h.lnf, hw, NULL, d.Nl, d.c, h.Vq); // logits (Nl, Vq)
    if (!targets) return 0;
    float *mx = w->stats, *st = mx + d.Nl;
    be->xent_shard_max(mx, h.probs, d.Nl, h.Vq, h.nv);
    g->allreduce(g->ctx, T2D_ROW, mx, (size_t)d.Nl, 1);
    be->xent_shard_sum(st, h.probs, mx, w->targets, h.v0, d.Nl, h.Vq, h.nv);
    g->allreduce(g->ctx, T2D_ROW, st, (size_t)2 * d.Nl, 0);
    return be->xent_shard_finish(h.probs, h.losses, mx, st, d.Nl, h.Vq, h.nv);
}

void gpt2d_backward(const GPT *m, const Tp2d *g, Work2d *w, float grad_scale) {
    const Backend *be = m->be;
    Dims d = dims(m, g, w);
    int L = m->cfg.L;
    const float *wte = m->blocks[0].params, *hp = m->blocks[L + 1].params;
    float *dwte = m->blocks[0].grads, *dh = m->blocks[L + 1].grads;
    H2 h = head2(m, g, w);
    g->section(g->ctx, L + 1);
    be->xent_shard_backward(h.probs, w->targets, h.v0, grad_scale, d.Nl, h.Vq, h.nv);
    int tied = gpt_tied(&m->cfg);
    summa_backward(m, g, w, w->dln, tied ? dwte : dh + d.c, NULL, h.probs, h.lnf,
                   tied ? wte : hp + d.c, d.Nl, d.c, h.Vq);
    be->fill(w->dstream, 0.f, (size_t)d.Nl * d.c);
    if (gpt_is_llama(&m->cfg))
        rms2d_backward(m, g, w, w->dstream, dh, w->dln, stream_at(m, g, w, L), hp, h.rstd, d.Nl);
    else
        ln2d_backward(m, g, w, w->dstream, dh, dh + d.c, w->dln, stream_at(m, g, w, L), hp, h.mean,
                      h.rstd, d.Nl);
    for (int l = L - 1; l >= 0; l--)
        (gpt_is_llama(&m->cfg) ? llama2d_layer_backward : layer2d_backward)(
            m, g, w, &m->blocks[1 + l], stream_at(m, g, w, l), w->dstream);
    embed2d_backward(m, g, w);
}
