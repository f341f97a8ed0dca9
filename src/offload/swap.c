// swap.c — the executor's set-up (tier layout, slots, workspaces, the budget check), its
// slots (which unit is where, reads in flight, writes out of them), and moving ranges of the
// tier's arrays in and out for fills, checkpoints and exports (see swap.h).
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "../testhooks.h"
#include "offload_plan.h"
#include "swap_impl.h"

static size_t wte_pad(const GPT *m) { return offload_pad(offload_wte_floats(m)); }

int swap_block_at(const Swapper *s, size_t x) {
    int lo = 0, hi = s->m->nblocks - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->m->blocks[mid].off <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

size_t swap_piece_end(const Swapper *s, size_t x, size_t end) {
    const Block *blk = &s->m->blocks[swap_block_at(s, x)];
    size_t e = blk->off + blk->n, c = x + s->chunk;
    e = e < c ? e : c;
    return e < end ? e : end;
}

// Padded position of flat offset x (x == nparams: the end).
static size_t padpos_of(const Swapper *s, size_t x) {
    if (x >= s->m->nparams) return s->poff[s->m->nblocks];
    int b = swap_block_at(s, x);
    return swap_padpos(s, b, x);
}

size_t swap_tier_off(const Swapper *s, int r, size_t x) {
    if (r == REGION_H) return s->region[r] + x * sizeof(float);
    size_t p = padpos_of(s, x);
    int whole = r == REGION_PARAMS || r >= REGION_ANCHOR;
    return s->region[r] + (whole ? p : p - s->plo) * sizeof(float);
}

// The unit's first block with a gradient region of its own (the embedding's overlays its
// parameters).
static int grad0(const Swapper *s, int u) {
    const OffloadUnit *un = &s->plan.unit[u];
    return s->m->blocks[un->first].kind == BLOCK_EMBED ? un->first + 1 : un->first;
}

static size_t unit_pfloats(const Swapper *s, int u) {
    return s->poff[s->plan.unit[u].last + 1] - s->poff[s->plan.unit[u].first];
}

static size_t unit_gfloats(const Swapper *s, int u) {
    return s->poff[s->plan.unit[u].last + 1] - s->poff[grad0(s, u)];
}

Slot *swap_slot_of(Swapper *s, int u) { return &s->slot[u % s->S]; }

float *swap_wte(Swapper *s, int u) {
    return swap_slot_of(s, u)->buf + unit_pfloats(s, u) + unit_gfloats(s, u);
}

float *swap_hbuf(Swapper *s, int u) { return swap_wte(s, u) + wte_pad(s->m); }

void swap_point_unit(Swapper *s, int u) {
    const OffloadUnit *un = &s->plan.unit[u];
    float *P = swap_slot_of(s, u)->buf, *G = P + unit_pfloats(s, u);
    size_t p0 = s->poff[un->first], g0 = s->poff[grad0(s, u)];
    for (int b = un->first; b <= un->last; b++) {
        Block *blk = &s->m->blocks[b];
        blk->params = P + (s->poff[b] - p0);
        blk->grads = blk->kind == BLOCK_EMBED ? blk->params : G + (s->poff[b] - g0);
    }
}

int swap_wait_slot_writes(Swapper *s, Slot *sl) {
    int rc = 0;
    for (int k = 0; k < SLOT_WRITES; k++) {
        if (tier_wait(s->tier, sl->wr[k])) rc = -1;
        sl->wr[k] = 0;
    }
    if (tier_wait_upto(s->tier, sl->wr_upto)) rc = -1;
    sl->wr_upto = 0;
    return rc;
}

int swap_fetch_unit(Swapper *s, int u, int layers_only) {
    Slot *sl = swap_slot_of(s, u);
    const OffloadUnit *un = &s->plan.unit[u];
    int has_embed = s->m->blocks[un->first].kind == BLOCK_EMBED;
    // sl->unit == u: its layers' parameters are here or on their way; params_ok: all of them
    if (sl->unit == u && (layers_only || sl->params_ok || !has_embed)) return 0;
    if (swap_wait_slot_writes(s, sl)) return -1;
    if (tier_wait(s->tier, sl->rd[0]) || tier_wait(s->tier, sl->rd[1])) return -1;
    sl->unit = u;
    sl->params_ok = !layers_only || !has_embed;
    int b0 = layers_only && has_embed ? un->first + 1 : un->first;
    size_t at = s->poff[b0] - s->poff[un->first], n = s->poff[un->last + 1] - s->poff[b0];
    sl->rd[0] = n ? tier_read_async(s->tier, swap_tier_off(s, REGION_PARAMS, s->m->blocks[b0].off),
                                    sl->buf + at, n * sizeof(float))
                  : 0;
    sl->rd[1] = 0;
    if (s->m->blocks[un->last].kind == BLOCK_HEAD && !layers_only) // the tied wte
        sl->rd[1] = tier_read_async(s->tier, s->region[REGION_PARAMS], swap_wte(s, u),
                                    wte_pad(s->m) * sizeof(float));
    return 0;
}

int swap_ready(Swapper *s, int u) {
    Slot *sl = swap_slot_of(s, u);
    int rc = testhook_swap_no_read_wait()
                 ? 0
                 : tier_wait(s->tier, sl->rd[0]) | tier_wait(s->tier, sl->rd[1]);
    sl->rd[0] = sl->rd[1] = 0;
    swap_point_unit(s, u);
    return rc ? -1 : 0;
}

// ---------------------------------------------------------------- set-up

static int check_plan(const GPT *m, const OffloadPlan *p) {
    if (p->nunits < 2 || p->prefetch < 1)
        return loom_fail("offload plan: needs at least 2 units and prefetch >= 1 (got %d, %d)",
                         p->nunits, p->prefetch);
    for (int u = 0, next = 0; u < p->nunits; next = p->unit[u].last + 1, u++)
        if (p->unit[u].first != next || p->unit[u].last < next || p->unit[u].last >= m->nblocks ||
            (u == p->nunits - 1 && p->unit[u].last != m->nblocks - 1))
            return loom_fail("offload plan: unit %d [%d, %d] does not continue the blocks", u,
                             p->unit[u].first, p->unit[u].last);
    return 0;
}

static void layout(Swapper *s) {
    GPT *m = s->m;
    s->poff = xcalloc((size_t)m->nblocks + 1, sizeof(size_t));
    for (int b = 0; b < m->nblocks; b++)
        s->poff[b + 1] = s->poff[b] + offload_pad(m->blocks[b].n);
    s->N = s->c.comm ? s->c.comm->size : 1;
    s->rank = s->c.comm ? s->c.comm->rank : 0;
    s->bound = xcalloc((size_t)s->N + 1, sizeof(size_t));
    for (int q = 0; q <= s->N; q++)
        s->bound[q] =
            s->c.zero >= 1 ? gpt_shard_bound(m, 0, m->nparams, q, s->N) : (q ? m->nparams : 0);
    s->lo = s->c.zero >= 1 ? s->bound[s->rank] : 0;
    s->hi = s->c.zero >= 1 ? s->bound[s->rank + 1] : m->nparams;
    s->pbound = xcalloc((size_t)s->N + 1, sizeof(size_t));
    for (int q = 0; q <= s->N; q++)
        s->pbound[q] = padpos_of(s, s->bound[q]);
    s->plo = padpos_of(s, s->lo);
    s->phi = padpos_of(s, s->hi);
    size_t own = (s->phi - s->plo) * sizeof(float);
    s->region[REGION_PARAMS] = 0;
    s->region[REGION_GRADS] = s->poff[m->nblocks] * sizeof(float);
    s->region[REGION_M] = s->region[REGION_GRADS] + own;
    s->region[REGION_V] = s->region[REGION_M] + own;
    s->region[REGION_H] = s->region[REGION_V] + own;
    gpt_own_range(m, s->lo, s->hi, s->lo, NULL, NULL);
}

static int alloc_fast(Swapper *s) {
    GPT *m = s->m;
    s->S = s->plan.prefetch + 2;
    s->slot = xcalloc((size_t)s->S, sizeof(Slot));
    for (int i = 0; i < s->S; i++) {
        size_t big = 0;
        for (int u = i; u < s->plan.nunits; u += s->S) {
            size_t f = offload_unit_floats(m, s->plan.unit[u]);
            if (f > big) big = f;
        }
        s->slot[i] =
            (Slot){.buf = tier_fast_alloc(s->tier, big * sizeof(float)), .floats = big, .unit = -1};
    }
    s->ws = xcalloc((size_t)s->c.K, sizeof(Workspace));
    if (workspace_create(&s->ws[0], m, s->c.B, s->c.T, s->c.recompute)) return -1;
    for (int k = 1; k < s->c.K; k++)
        workspace_create_sharing(&s->ws[k], m, &s->ws[0]);
    s->chunk = offload_opt_chunk(m);
    s->stream = tier_fast_alloc(s->tier, 8 * s->chunk * sizeof(float));
    s->part = xcalloc((size_t)m->nchunks, sizeof(double));
    if (s->c.tensor_norm) s->tsum = xcalloc((size_t)m->ntensors, sizeof(double));
    return 0;
}

Swapper *swap_create(GPT *m, const SwapConfig *c) {
    if (check_plan(m, c->plan)) return NULL;
    if (c->tensor_norm && c->zero)
        return loom_fail("offload: per-tensor norms need ZeRO 0 (got %d)", c->zero), NULL;
    OffloadShape sh = {.B = c->B,
                       .T = c->T,
                       .K = c->K,
                       .recompute = c->recompute,
                       .dp = c->comm ? c->comm->size : 1,
                       .zero = c->zero,
                       .co2 = c->co2 != NULL,
                       .fused = c->fused};
    double need = offload_fast_bytes(m, &sh, c->plan), share = (double)c->budget - c->overhead;
    if (need > share) {
        char b0[32], b1[32], b2[32], b3[32];
        loom_fail("--fast-mem %s less the fixed overhead %s leaves %s for block swapping, too "
                  "little for these swap units: they need %s (the least any grouping of this "
                  "model with --batch %d --seq %d --grad-accum %d%s needs is %s)",
                  offload_size_str((double)c->budget, b0, sizeof b0),
                  offload_size_str(c->overhead, b1, sizeof b1),
                  offload_size_str(share, b2, sizeof b2), offload_size_str(need, b3, sizeof b3),
                  c->B, c->T, c->K, c->recompute ? " --recompute" : "",
                  offload_size_str(offload_plan_min_bytes(m, &sh, NULL), b0, sizeof b0));
        return NULL;
    }
    Swapper *s = xcalloc(1, sizeof *s);
    s->m = m;
    s->c = *c;
    s->plan = *c->plan;
    s->plan.unit = xmalloc((size_t)c->plan->nunits * sizeof(OffloadUnit));
    memcpy(s->plan.unit, c->plan->unit, (size_t)c->plan->nunits * sizeof(OffloadUnit));
    s->c.plan = &s->plan;
    s->fused = c->fused;
    layout(s);
    size_t bytes = s->region[REGION_H] + wte_pad(m) * sizeof(float), all = s->poff[m->nblocks];
    for (int r = REGION_ANCHOR; r < NREGIONS; r++) { // CO2's outer state: whole-model arrays
        s->region[r] = bytes;
        if (c->co2) bytes += all * sizeof(float);
    }
    int tr = c->tier_rank ? c->tier_rank : s->rank;
    s->tier = tier_open_on(m->be, c->dir, c->host_mem, tr, bytes);
    if (!s->tier || alloc_fast(s)) {
        swap_free(s);
        return NULL;
    }
    if (c->co2) swap_co2_setup(s);
    return s;
}

void swap_free(Swapper *s) {
    if (!s) return;
    swap_co2_free(s);
    if (s->tier) tier_drain(s->tier);
    for (int i = 0; s->tier && s->slot && i < s->S; i++)
        tier_fast_free(s->tier, s->slot[i].buf);
    for (int k = s->c.K - 1; s->ws && k >= 0; k--)
        if (s->ws[k].stream) workspace_free(&s->ws[k], s->m);
    if (s->tier) tier_fast_free(s->tier, s->stream);
    free(s->host_scratch);
    free(s->slot), free(s->ws), free(s->part), free(s->tsum), free(s->poff), free(s->bound),
        free(s->pbound);
    offload_plan_free(&s->plan);
    tier_close(s->tier);
    free(s);
}

void swap_owned(const Swapper *s, size_t *lo, size_t *hi) { *lo = s->lo, *hi = s->hi; }

float *swap_scratch(Swapper *s, size_t *floats) {
    if (tier_drain(s->tier)) return NULL;
    int big = 0;
    for (int i = 0; i < s->S; i++) {
        Slot *sl = &s->slot[i];
        sl->unit = -1, sl->params_ok = 0; // whatever it held is gone
        memset(sl->rd, 0, sizeof sl->rd), memset(sl->wr, 0, sizeof sl->wr), sl->wr_upto = 0;
        if (sl->floats > s->slot[big].floats) big = i;
    }
    *floats = s->slot[big].floats;
    if (!tier_fast_backend(s->tier)) return s->slot[big].buf;
    // the slots are device memory: the caller's scratch is host memory of the same size, not
    // counted in --fast-mem (which bounds the device's)
    if (!s->host_scratch) s->host_scratch = xalloc_floats(*floats);
    return s->host_scratch;
}

int *swap_opt_t(Swapper *s) { return &s->t; }

double swap_io_wait(Swapper *s) {
    double w = tier_waited(s->tier);
    tier_reset_waited(s->tier);
    s->wait_total += w;
    return w;
}

void swap_stats(const Swapper *s, SwapStats *st) {
    uint64_t r, w;
    tier_bytes(s->tier, &r, &w);
    *st = (SwapStats){.steps = s->steps,
                      .update_s = s->update_s,
                      .wait_s = s->wait_total,
                      .read_bytes = (double)(r - s->base_read),
                      .written_bytes = (double)(w - s->base_written)};
}

// ---------------------------------------------------------------- ranges in and out

// Reads (write = 0) or writes n floats of region r at flat x, within one block, through the
// bounce buffer; a write reads the aligned pages around it first.
static int move_piece(Swapper *s, int r, size_t x, size_t n, float *host, int write) {
    size_t off = swap_tier_off(s, r, x), a0 = off / TIER_ALIGN * TIER_ALIGN;
    size_t e = off + n * sizeof(float), e1 = (e + TIER_ALIGN - 1) / TIER_ALIGN * TIER_ALIGN;
    char *bounce = (char *)s->stream;
    if (!write || a0 < off || e1 > e)
        if (tier_wait(s->tier, tier_read_async(s->tier, a0, bounce, e1 - a0))) return -1;
    float *at = (float *)(bounce + (off - a0));
    if (!write) {
        s->m->be->download(host, at, n);
        return 0;
    }
    s->m->be->upload(at, host, n);
    return tier_wait(s->tier, tier_write_async(s->tier, a0, bounce, e1 - a0));
}

int swap_move(Swapper *s, int r, size_t at, size_t n, float *host, int write) {
    int owned = r == REGION_GRADS || r == REGION_M || r == REGION_V;
    if (owned && (at < s->lo || at + n > s->hi))
        return loom_fail("offload: moments [%zu, %zu) outside the owned range [%zu, %zu)", at,
                         at + n, s->lo, s->hi);
    size_t cap = 4 * s->chunk;
    while (n) {
        int b = swap_block_at(s, at);
        const Block *blk = &s->m->blocks[b];
        size_t k = blk->off + blk->n - at;
        if (k > n) k = n;
        if (k > cap) k = cap;
        if (move_piece(s, r, at, k, host, write)) return -1;
        at += k, n -= k, host += k;
    }
    return 0;
}

static int region_of(int array) {
    return array == SWAP_PARAMS ? REGION_PARAMS : array == SWAP_M ? REGION_M : REGION_V;
}

int swap_store(Swapper *s, int array, size_t at, size_t n, const float *src) {
    if (array != SWAP_PARAMS) return swap_move(s, region_of(array), at, n, (float *)src, 1);
    if (tier_drain(s->tier)) return -1; // (a unit's update may still be on its way out)
    int rc = swap_move(s, REGION_PARAMS, at, n, (float *)src, 1);
    for (int i = 0; i < s->S; i++) // the parameters changed: every slot reads its unit again
        s->slot[i].unit = -1, s->slot[i].params_ok = 0;
    return rc;
}

int swap_fetch(Swapper *s, int array, size_t at, size_t n, float *dst) {
    return swap_move(s, region_of(array), at, n, dst, 0);
}
