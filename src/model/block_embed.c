// block_embed.c — the embedding block: x_0 = wte[token] + wpe[position]. It owns wte, which
// the head also uses (tied LM head); the head receives wte only through BlockIO.
#include <stddef.h>

#include "block_impl.h"

void embed_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    const float *wte = blk->params, *wpe = wte + (size_t)m->cfg.V * m->cfg.C;
    m->be->encoder_forward(io->x_out, io->tokens, wte, wpe, ws->B, ws->T, m->cfg.C);
}

void embed_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    float *dwte = blk->grads, *dwpe = dwte + (size_t)m->cfg.V * m->cfg.C;
    m->be->encoder_backward(dwte, dwpe, io->dx, io->tokens, ws->B, ws->T, m->cfg.C);
}
