// block_cp.c — the embedding of a context-parallel rank (--cp, see ContextParallel in gpt.h):
// its (B,Tl) tokens are two chunks of every sequence, positions [p0, p0+c) and [p1, p1+c), so
// each chunk of each row is embedded with wpe from its first global position (with tensor
// parallelism: the rank's vocabulary rows, wpe from tp rank 0, and the all-reduce completing
// x_0, or with --sp the reduce-scatter leaving the rank its T/(cp·tp) positions). Also the cut of
// whole sequences into a rank's chunks (inputs and targets alike).
#include <string.h>

#include "block_impl.h"

void gpt_cp_take(int *local, const int *whole, int B, int T, int n, int i) {
    int c, p0, p1, Tl = T / n;
    gpt_cp_chunks(T, n, i, &c, &p0, &p1);
    for (int b = 0; b < B; b++) {
        memcpy(local + (size_t)b * Tl, whole + (size_t)b * T + p0, (size_t)c * sizeof(int));
        memcpy(local + (size_t)b * Tl + c, whole + (size_t)b * T + p1, (size_t)c * sizeof(int));
    }
}

void cp_embed_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    const float *wte = blk->params, *wpe = wte + (size_t)gpt_vocab_rows(m) * m->cfg.C;
    const TensorParallel *tp = &m->tp;
    int C = m->cfg.C, Tl = ws->T, c, p[2];
    size_t NC = (size_t)ws->B * Tl * C;
    float *x = tp->n > 1 && tp->sp ? ws->scratch : io->x_out; // (B,Tl,C) (partial sums under tp)
    gpt_cp_chunks(Tl * m->cp.n, m->cp.n, m->cp.i, &c, &p[0], &p[1]);
    for (int b = 0; b < ws->B; b++)
        for (int k = 0; k < 2; k++) { // chunk k of row b: (1,c) tokens from position p[k]
            size_t row = (size_t)b * Tl + (size_t)k * c;
            const float *pe = wpe + (size_t)p[k] * C;
            if (tp->n <= 1)
                m->be->encoder_forward(x + row * C, io->tokens + row, wte, pe, 1, c, C);
            else
                m->be->encoder_forward_shard(x + row * C, io->tokens + row, wte,
                                             tp->i == 0 ? pe : NULL, tp->v0, tp->nv, 1, c, C);
        }
    tp_reduce(m, ws, x, io->x_out, ws->scratch + NC); // all-reduced, or reduce-scattered (--sp)
}

void cp_embed_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    float *dwte = blk->grads, *dwpe = dwte + (size_t)gpt_vocab_rows(m) * m->cfg.C;
    const TensorParallel *tp = &m->tp;
    int C = m->cfg.C, Tl = ws->T, c, p[2];
    size_t NC = (size_t)ws->B * Tl * C;
    const float *dx = tp_gather(m, ws, io->dx, ws->scratch, ws->scratch + NC); // (B,Tl,C)
    gpt_cp_chunks(Tl * m->cp.n, m->cp.n, m->cp.i, &c, &p[0], &p[1]);
    for (int b = 0; b < ws->B; b++)
        for (int k = 0; k < 2; k++) {
            size_t row = (size_t)b * Tl + (size_t)k * c;
            float *dpe = dwpe + (size_t)p[k] * C;
            if (tp->n <= 1)
                m->be->encoder_backward(dwte, dpe, dx + row * C, io->tokens + row, 1, c, C);
            else
                m->be->encoder_backward_shard(dwte, dpe, dx + row * C, io->tokens + row, tp->v0,
                                              tp->nv, 1, c, C);
        }
}
