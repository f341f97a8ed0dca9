// part_swap_save.c — a checkpoint save or an export of a swapped tensor- or context-parallel
// part (a 1D one, strat_tp.c with --offload; a 2D grid's, strat_tp2d.c) within --fast-mem. Rank
// d of the writing group gets range d of equal ranges of the whole flat layout (parameters and
// moments; or all of it on one rank), assembled block by block from every rank's tier: each rank
// reads its part's block b of one array into a buffer counted in the budget (the executor's
// largest slot), cuts the windows of whole block b that fall in range d out of it, and a
// reduce-scatter sums them into rank d (each element from exactly one part: the same bytes as
// the in-memory assembly). Rank d appends what it receives to a scratch file of its own under
// --offload-dir (a Tier: unlinked at once), through one window-sized buffer; the shard or the
// export is then read from that file. No rank holds its part's state or its range in memory.
// Under a device with the state in host memory (--offload host: no --offload-dir, --fast-mem
// bounds the device) the range is assembled in host memory instead.
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "../offload/tier.h"
#include "part_io.h"

#define WIN ((size_t)1 << 18) // floats in a window and in the file's chunks (1 MiB)

struct PartSpill {
    int to, arrays; // to >= 0: the whole layout goes to rank `to` (else range d to rank d)
    size_t N, tp;
    Tier *tier;
    char *mem;             // no directory: the range in host memory instead of the file
    size_t lo, hi, stride; // this rank's range; bytes per array in the file
    float *buf;            // WIN floats: the chunk being filled, then the one last read
    long cached;           // the chunk in buf while reading (array·chunks + chunk), or -1
};

// Rank d's range [*lo, *hi) of the whole layout.
static void range_of(const PartSpill *sp, size_t d, size_t *lo, size_t *hi) {
    if (sp->to >= 0)
        *lo = 0, *hi = d == (size_t)sp->to ? sp->N : 0;
    else
        *lo = sp->N * d / sp->tp, *hi = sp->N * (d + 1) / sp->tp;
}

size_t part_spill_len(size_t lo, size_t a, size_t e) {
    size_t end = lo + ((a - lo) / WIN + 1) * WIN;
    return (end < e ? end : e) - a;
}

float *part_spill_at(PartSpill *sp, size_t a) { return sp->buf + (a - sp->lo) % WIN; }

int part_spill_put(PartSpill *sp, int k, size_t a, size_t len) {
    size_t j = (a - sp->lo) / WIN, filled = a + len - sp->lo - j * WIN;
    if (filled != WIN && a + len != sp->hi) return 0;
    size_t bytes = (filled * sizeof(float) + TIER_ALIGN - 1) / TIER_ALIGN * TIER_ALIGN;
    size_t off = (size_t)k * sp->stride + j * WIN * sizeof(float);
    if (sp->mem) return memcpy(sp->mem + off, sp->buf, filled * sizeof(float)), 0;
    return tier_wait(sp->tier, tier_write_async(sp->tier, off, sp->buf, bytes));
}

PartSpill *part_spill_open(const char *dir, int rank, size_t lo, size_t hi, int arrays) {
    PartSpill *sp = xcalloc(1, sizeof *sp);
    *sp = (PartSpill){.lo = lo, .hi = hi, .arrays = arrays, .cached = -1, .to = -1};
    sp->stride = ((hi - lo) / WIN + 1) * WIN * sizeof(float);
    sp->buf = tier_alloc(WIN * sizeof(float));
    if (!dir) {
        sp->mem = xcalloc((size_t)arrays, sp->stride);
        return sp;
    }
    sp->tier = tier_open(dir, rank, (size_t)arrays * sp->stride);
    if (!sp->tier) part_spill_free(sp), sp = NULL;
    return sp;
}

typedef struct {
    const PartMap *m;
    const Comm *c;
    PartBlockFetch fetch;
    void *ctx;
    PartSpill *sp;
    float *win, *stage;
    size_t *counts;
    int bad; // a local failure (a read or write of a tier): the collectives still run
} Asm;

// Whole range [a, e) (inside whole block b and range d; stage: the part's block b) summed into
// rank d window by window, each inside one chunk of d's file; rank d files it (array k).
static int assemble(Asm *x, int k, int b, size_t d, size_t a, size_t e) {
    const GPT *part = x->m->part;
    size_t lo, hi, dummy = 0;
    range_of(x->sp, d, &lo, &hi);
    int me = x->c->rank == (int)d;
    for (size_t len; a < e; a += len) {
        len = part_spill_len(lo, a, e);
        if (x->m->q) // 2D copies in memory: -0 + -0 = -0 and v + -0 = v keep every value's bits
            for (size_t k = 0; k < len; k++)
                x->win[k] = -0.0f;
        else // 1D sums with zeros in memory (ckpt_tp_assemble): the same sums
            memset(x->win, 0, len * sizeof(float));
        part_to_whole_range_at(x->m, x->c->rank, x->stage, part->blocks[b].off, a, len, x->win);
        x->counts[d] = len;
        float *recv = me ? part_spill_at(x->sp, a) : (float *)&dummy;
        CommReq q = comm_ireduce_scatter(x->c, x->win, recv, x->counts);
        if (comm_wait(&q)) return -1;
        x->counts[d] = 0;
        if (me && part_spill_put(x->sp, k, a, len)) x->bad = 1;
    }
    return 0;
}

// Every array, block by block: this rank's block read from its tier, then the block's windows
// for every destination range.
static int assemble_all(Asm *x) {
    const GPT *whole = x->m->whole, *part = x->m->part;
    for (int k = 0; k < x->sp->arrays; k++)
        for (int b = 0; b < whole->nblocks; b++) {
            const Block *wb = &whole->blocks[b], *pb = &part->blocks[b];
            if (pb->n && x->fetch(x->ctx, k, b, x->stage)) x->bad = 1;
            for (size_t d = 0; d < x->sp->tp; d++) {
                size_t lo, hi;
                range_of(x->sp, d, &lo, &hi);
                size_t a = wb->off > lo ? wb->off : lo, e = wb->off + wb->n;
                if (e > hi) e = hi;
                if (a < e && assemble(x, k, b, d, a, e)) return -1;
            }
        }
    return x->bad ? -1 : 0;
}

PartSpill *part_blocks_spill(const PartMap *m, const Comm *c, PartBlockFetch fetch, void *ctx,
                             float *stage, size_t cap, const char *dir, int rank, int to,
                             int arrays) {
    size_t N = m->whole->nparams, covered = 0;
    for (int b = 0; b < m->whole->nblocks; b++)
        covered += m->whole->blocks[b].off == covered ? m->whole->blocks[b].n : N + 1;
    if (covered != N || m->whole->nblocks != m->part->nblocks) {
        loom_fail("offload: the model's blocks do not tile its %zu parameters", N);
        return NULL;
    }
    size_t tp = (size_t)c->size, lo, hi;
    PartSpill r = {.to = to, .N = N, .tp = tp};
    range_of(&r, (size_t)c->rank, &lo, &hi);
    PartSpill *sp = part_spill_open(dir, rank, lo, hi, arrays);
    if (sp) sp->to = to, sp->N = N, sp->tp = tp;
    Asm x = {.m = m, .c = c, .fetch = fetch, .ctx = ctx, .sp = sp, .win = xalloc_floats(WIN)};
    x.counts = xcalloc(tp, sizeof *x.counts);
    size_t big = 0;
    x.stage = sp ? stage : NULL;
    for (int b = 0; b < m->part->nblocks; b++)
        if (m->part->blocks[b].n > big) big = m->part->blocks[b].n;
    if (x.stage && big > cap)
        loom_fail("offload: a block of the part (%zu floats) does not fit the largest slot (%zu "
                  "floats)",
                  big, cap);
    double fail = !x.stage || big > cap; // agreed first: every rank then runs every collective
    comm_allreduce_f64(c, &fail, 1);
    double rc = fail ? -1 : assemble_all(&x), mine = rc;
    if (!fail) comm_allreduce_f64(c, &rc, 1); // a rank that read garbage fails it everywhere
    if (rc && !mine)
        loom_fail("offload: another rank's tier failed while assembling a save or an export");
    free(x.win), free(x.counts);
    if (rc) part_spill_free(sp), sp = NULL;
    return sp;
}

typedef struct {
    Swapper *sw;
    const GPT *part;
} SwapBlocks;

static int swap_block(void *ctx, int k, int b, float *dst) {
    static const int arr[3] = {SWAP_PARAMS, SWAP_M, SWAP_V};
    const SwapBlocks *s = ctx;
    const Block *pb = &s->part->blocks[b];
    return swap_fetch(s->sw, arr[k], pb->off, pb->n, dst);
}

PartSpill *part_swap_spill(const PartMap *m, const Comm *c, Swapper *sw, const char *dir, int rank,
                           int to, int arrays) {
    SwapBlocks s = {.sw = sw, .part = m->part};
    size_t cap = 0;
    float *stage = swap_scratch(sw, &cap);
    return part_blocks_spill(m, c, swap_block, &s, stage, stage ? cap : 0, dir, rank, to, arrays);
}

int part_spill_fetch(void *ctx, int array, size_t at, size_t n, float *dst) {
    PartSpill *sp = ctx;
    size_t chunks = sp->stride / (WIN * sizeof(float));
    for (size_t len; n; at += len, dst += len, n -= len) {
        size_t j = (at - sp->lo) / WIN, in = (at - sp->lo) % WIN;
        len = WIN - in < n ? WIN - in : n;
        long want = (long)((size_t)array * chunks + j);
        if (sp->mem) {
            memcpy(dst, sp->mem + (size_t)array * sp->stride + (at - sp->lo) * sizeof(float),
                   len * sizeof(float));
            continue;
        }
        if (sp->cached != want) {
            size_t off = (size_t)array * sp->stride + j * WIN * sizeof(float);
            if (tier_wait(sp->tier, tier_read_async(sp->tier, off, sp->buf, WIN * sizeof(float))))
                return -1;
            sp->cached = want;
        }
        memcpy(dst, sp->buf + in, len * sizeof(float));
    }
    return 0;
}

CkptShard part_spill_shard(PartSpill *sp) {
    return (CkptShard){.lo = sp->lo, .hi = sp->hi, .fetch = part_spill_fetch, .fetch_ctx = sp};
}

void part_spill_free(PartSpill *sp) {
    if (!sp) return;
    if (sp->tier) tier_close(sp->tier);
    tier_free(sp->buf);
    free(sp->mem), free(sp);
}

int part_spill_params(void *ctx, size_t at, size_t n, float *dst) {
    return part_spill_fetch(ctx, 0, at, n, dst);
}
