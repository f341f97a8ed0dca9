// summa.c — the 2D grid's linear products (SUMMA) and its LayerNorm over split channels.
// Rank (i,j) holds X[i][j] (Nl, K/q) and W[i][j] (inputs block i, outputs block j; loom's layout
// (M/q, K/q)). Forward, for k = 0..q−1: X[i][k] is broadcast along row i from rank (i,k) and
// W[k][j] down column j from rank (k,j), and Y[i][j] += X[i][k]·W[k][j]. Backward broadcasts the
// same blocks again and, for every k, forms dY[i][j]·W[k][j]ᵀ (a part of dX[i][k]) and
// X[i][k]ᵀ·dY[i][j] (a part of dW[k][j]); one reduce-scatter along the row delivers every
// dX[i][k] to rank (i,k), one down the column every dW[k][j] to rank (k,j): the q reductions
// of the SUMMA backward, each rank's piece summed once.
#include "gpt_2d.h"

void summa_forward(const GPT *m, const Tp2d *g, Work2d *w, float *y, const float *x,
                   const float *wt, const float *b, int Nl, int Kq, int Mq) {
    const Backend *be = m->be;
    size_t nx = (size_t)Nl * Kq, nw = (size_t)Mq * Kq, ny = (size_t)Nl * Mq;
    for (int k = 0; k < g->q; k++) {
        float *xk = g->j == k ? (float *)x : w->xbuf, *wk = g->i == k ? (float *)wt : w->wbuf;
        g->bcast(g->ctx, T2D_ROW, xk, nx, k);
        g->bcast(g->ctx, T2D_COL, wk, nw, k);
        be->matmul_forward(k ? w->tmp : y, xk, wk, k ? NULL : b, Nl, Kq, Mq); // (Nl,Mq)
        if (k) be->residual_forward(y, y, w->tmp, ny);
    }
}

void summa_backward(const GPT *m, const Tp2d *g, Work2d *w, float *dx, float *dwt, float *db,
                    const float *dy, const float *x, const float *wt, int Nl, int Kq, int Mq) {
    const Backend *be = m->be;
    size_t nx = (size_t)Nl * Kq, nw = (size_t)Mq * Kq;
    be->fill(w->dws, 0.f, (size_t)g->q * nw);
    for (int k = 0; k < g->q; k++) {
        float *xk = g->j == k ? (float *)x : w->xbuf, *wk = g->i == k ? (float *)wt : w->wbuf;
        g->bcast(g->ctx, T2D_ROW, xk, nx, k);
        g->bcast(g->ctx, T2D_COL, wk, nw, k);
        // dxs[k] = dY[i][j]·W[k][j] (Nl,Kq); dws[k] += dY[i][j]ᵀ·X[i][k] (Mq,Kq)
        be->matmul_backward(w->dxs + k * nx, w->dws + k * nw, k ? NULL : db, dy, xk, wk, Nl, Kq,
                            Mq);
    }
    g->reduce_scatter(g->ctx, T2D_ROW, w->dxs, dx, nx);
    g->reduce_scatter(g->ctx, T2D_COL, w->dws, w->wbuf, nw);
    be->residual_forward(dwt, dwt, w->wbuf, nw);
}

// mean, rstd (Nl): the rows' statistics over all C channels (two passes, each partial summed
// along the row), out (Nl, C/q).
void ln2d_forward(const GPT *m, const Tp2d *g, Work2d *w, float *out, float *mean, float *rstd,
                  const float *x, const float *wt, const float *b, int Nl) {
    const Backend *be = m->be;
    int C = m->cfg.C, Cq = C / g->q;
    be->ln_split_stats(mean, x, NULL, Nl, Cq);
    g->allreduce(g->ctx, T2D_ROW, mean, (size_t)Nl, 0);
    be->scale(mean, 1.0f / (float)C, (size_t)Nl);
    be->ln_split_stats(w->stats, x, mean, Nl, Cq);
    g->allreduce(g->ctx, T2D_ROW, w->stats, (size_t)Nl, 0);
    be->ln_split_apply(out, rstd, x, mean, w->stats, wt, b, Nl, Cq, C);
}

void ln2d_backward(const GPT *m, const Tp2d *g, Work2d *w, float *dx, float *dwt, float *db,
                   const float *dout, const float *x, const float *wt, const float *mean,
                   const float *rstd, int Nl) {
    const Backend *be = m->be;
    int C = m->cfg.C, Cq = C / g->q;
    be->ln_split_bwd_stats(w->stats, dout, x, wt, mean, rstd, Nl, Cq);
    g->allreduce(g->ctx, T2D_ROW, w->stats, (size_t)2 * Nl, 0);
    be->ln_split_backward(dx, dwt, db, dout, x, wt, mean, rstd, w->stats, Nl, Cq, C);
}
