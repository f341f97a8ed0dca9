// part_swap.c — filling a swapped tensor- or context-parallel part's tier (strat_tp.c with
// --offload) from the whole model's flat layout: a fresh run's initial weights, or a
// checkpoint's parameters and moments, block by block. Each block of the whole layout is
// streamed from its source and cut into the part's block in the executor's largest slot (fast
// memory the budget already counts), then stored in the tier: the fill stays within --fast-mem.
#include <string.h>

#include "../common.h"
#include "part_io.h"

typedef struct {
    const GPT *whole, *part;
    size_t base; // the part's block's flat offset: stage[0] is that element
    float *stage;
} Fill;

static int fill_sink(void *ctx, size_t at, size_t n, const float *src) {
    Fill *f = ctx;
    gpt_tp_from_whole_at(f->whole, f->part, at, n, src, f->stage, f->base);
    return 0;
}

static int fill_store(void *ctx, int array, size_t at, size_t n, const float *src) {
    (void)array; // one array per read
    return fill_sink(ctx, at, n, src);
}

// Array k (0 parameters, 1 m, 2 v) of whole block b cut into the stage, stored in the tier.
static int fill_block(const Strategy *s, Fill *f, Swapper *sw, int b, int k) {
    const Block *wb = &f->whole->blocks[b], *pb = &f->part->blocks[b];
    memset(f->stage, 0, pb->n * sizeof(float)); // the vocabulary's padding rows stay 0
    f->base = pb->off;
    int rc;
    if (s->resume_dir) {
        CkptWant want = {.store = fill_store, .store_ctx = f};
        want.lo[k] = wb->off, want.hi[k] = wb->off + wb->n;
        rc = checkpoint_read_into(s->resume_dir, f->whole->nparams, &want);
    } else {
        rc = s->data->params_stream(s->data->ctx, wb->off, wb->off + wb->n, fill_sink, f);
    }
    int array = k == 0 ? SWAP_PARAMS : k == 1 ? SWAP_M : SWAP_V;
    return rc ? -1 : swap_store(sw, array, pb->off, pb->n, f->stage);
}

int part_swap_fill(const Strategy *s, const GPT *part, Swapper *sw) {
    size_t cap;
    Fill f = {.whole = s->model, .part = part, .stage = swap_scratch(sw, &cap)};
    if (!f.stage) return -1;
    int arrays = s->resume_dir ? 3 : 1;
    for (int b = 0; b < part->nblocks; b++) {
        if (part->blocks[b].n > cap)
            return loom_fail("offload: block %d of the part (%zu floats) does not fit the largest "
                             "slot (%zu floats)",
                             b, part->blocks[b].n, cap);
        for (int k = 0; k < arrays; k++)
            if (fill_block(s, &f, sw, b, k)) return -1;
    }
    return 0;
}
