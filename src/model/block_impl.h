// block_impl.h — the per-kind forward/backward functions behind block_forward/backward.
// Only block.c dispatches to these; everything else goes through gpt.h.
#pragma once
#include "gpt.h"

void embed_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
void embed_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
void layer_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
void layer_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
// Context parallelism (block_cp.c): the embedding at the rank's global positions.
void cp_embed_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
void cp_embed_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
void head_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);
void head_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io);

// Lets a parallel strategy drive its communication between kernels.
static inline void block_poll(const GPT *m) {
    if (m->hooks && m->hooks->poll) m->hooks->poll(m->hooks->ctx);
}
