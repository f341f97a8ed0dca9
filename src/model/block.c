// block.c — dispatch from a block to its kind's forward/backward.
#include "block_impl.h"

void block_forward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    switch (blk->kind) {
    case BLOCK_EMBED: embed_forward(m, blk, ws, io); break;
    case BLOCK_LAYER:
        if (gpt_is_llama(&m->cfg))
            llama_layer_forward(m, blk, ws, io);
        else
            layer_forward(m, blk, ws, io);
        break;
    case BLOCK_HEAD: head_forward(m, blk, ws, io); break;
    }
}

void block_backward(const GPT *m, const Block *blk, Workspace *ws, BlockIO *io) {
    switch (blk->kind) {
    case BLOCK_EMBED: embed_backward(m, blk, ws, io); break;
    case BLOCK_LAYER:
        if (gpt_is_llama(&m->cfg))
            llama_layer_backward(m, blk, ws, io);
        else
            layer_backward(m, blk, ws, io);
        break;
    case BLOCK_HEAD: head_backward(m, blk, ws, io); break;
    }
}
