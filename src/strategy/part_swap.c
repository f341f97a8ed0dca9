// part_swap.c — filling a swapped part's tier (a tensor- or context-parallel part: strat_tp.c
// with --offload; a 2D grid part: tp2d_swap.c) from the whole model's flat layout: a fresh run's
// initial weights, or a checkpoint's parameters and moments, block by block. Each block of the
// whole layout is streamed from its source and cut into the part's block (PartMap) in a stage
// the caller's budget already counts (the executor's largest slot), then handed to the caller's
// store: the fill stays within --fast-mem.
#include <string.h>

#include "../common.h"
#include "part_io.h"

typedef struct {
    const PartMap *map;
    size_t base; // the part's block's flat offset: stage[0] is that element
    float *stage;
} Fill;

static int fill_sink(void *ctx, size_t at, size_t n, const float *src) {
    Fill *f = ctx;
    part_from_whole_at(f->map, at, n, src, f->stage, f->base);
    return 0;
}

static int fill_store(void *ctx, int array, size_t at, size_t n, const float *src) {
    (void)array; // one array per read
    return fill_sink(ctx, at, n, src);
}

// Array k (0 parameters, 1 m, 2 v) of whole block b cut into the stage, then stored.
static int fill_block(const Strategy *s, Fill *f, int b, int k, PartBlockStore store, void *ctx) {
    const Block *wb = &f->map->whole->blocks[b], *pb = &f->map->part->blocks[b];
    memset(f->stage, 0, pb->n * sizeof(float)); // the vocabulary's padding rows stay 0
    f->base = pb->off;
    int rc;
    if (s->resume_dir) {
        CkptWant want = {.store = fill_store, .store_ctx = f};
        want.lo[k] = wb->off, want.hi[k] = wb->off + wb->n;
        rc = checkpoint_read_into(s->resume_dir, f->map->whole->nparams, &want);
    } else {
        rc = s->data->params_stream(s->data->ctx, wb->off, wb->off + wb->n, fill_sink, f);
    }
    return rc ? -1 : store(ctx, k, b, f->stage);
}

int part_fill_blocks(const Strategy *s, const PartMap *map, float *stage, size_t cap,
                     PartBlockStore store, void *ctx) {
    Fill f = {.map = map, .stage = stage};
    int arrays = s->resume_dir ? 3 : 1;
    for (int b = 0; b < map->part->nblocks; b++) {
        if (map->part->blocks[b].n > cap)
            return loom_fail("offload: block %d of the part (%zu floats) does not fit the largest "
                             "slot (%zu floats)",
                             b, map->part->blocks[b].n, cap);
        for (int k = 0; k < arrays; k++)
            if (fill_block(s, &f, b, k, store, ctx)) return -1;
    }
    return 0;
}

static int swap_block_store(void *ctx, int k, int b, const float *stage) {
    const PartMap *map = ((void **)ctx)[0];
    Swapper *sw = ((void **)ctx)[1];
    const Block *pb = &map->part->blocks[b];
    int array = k == 0 ? SWAP_PARAMS : k == 1 ? SWAP_M : SWAP_V;
    return swap_store(sw, array, pb->off, pb->n, stage);
}

int part_swap_fill(const Strategy *s, const PartMap *map, Swapper *sw) {
    size_t cap;
    float *stage = swap_scratch(sw, &cap);
    if (!stage) return -1;
    void *ctx[2] = {(void *)map, sw};
    return part_fill_blocks(s, map, stage, cap, swap_block_store, ctx);
}
