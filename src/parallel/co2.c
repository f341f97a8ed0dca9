// co2.c — the CO2 outer loop (see co2.h).
#include "co2.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"

struct CO2 {
    GPT *m;
    const Comm *c;
    CO2Config cfg;
    size_t P;
    int round; // rounds ended so far
    double exposed;
    double overlap; // at the last round end: the least age of the operations it waited for
    // unsharded
    float *anchor, *mom;
    float *delta[2]; // Δ of the round being averaged / of the round before
    CommReq req[2];
    int scaled[2]; // delta[i] holds the mean already (its sum was divided by the contributors)
    // sharded
    Comm *oc;      // the outer collectives' own communicator
    size_t lo, hi; // owned slice of the flat layout
    size_t *counts, *displs;
    float *a_sh, *aprev_sh, *m_sh, *xbar_sh; // anchor a(t), a(t-1), momentum, mean x slice
    float *send;                             // x_r of the round being reduce-scattered (P)
    float *next;                             // the anchor being all-gathered (P)
    CommReq rs, ag, nq;
    int rs_pending;   // reduce-scatter started, its result not applied yet
    int norm_pending; // adaptive: per-tensor norms of the slices being summed over workers
    double *sq;       // adaptive, sharded: ‖m(t−1)‖², ‖Δ̄‖² per tensor (2·ntensors)
    const BlockHooks *chained;
    BlockHooks hooks;
};

static void sharded_apply_rs(CO2 *o, int wait);
// Waits for r: the blocked time is exposed communication; how long r had been in flight when
// the wait began (the time it had to land behind computation) lowers o->overlap.
static void timed_wait(CO2 *o, CommReq *r) {
    double age;
    o->exposed += comm_wait_timed(r, &age);
    if (age > 0 && (o->overlap <= 0 || age < o->overlap)) o->overlap = age;
}
static void sharded_apply_norms(CO2 *o, int wait);

// ---------------------------------------------------------------- hooks

static void hook_before(void *ctx, int b, int backward) {
    CO2 *o = ctx;
    if (o->chained && o->chained->before) o->chained->before(o->chained->ctx, b, backward);
}

static void hook_after(void *ctx, int b, int backward) {
    CO2 *o = ctx;
    if (o->chained && o->chained->after) o->chained->after(o->chained->ctx, b, backward);
}

static void hook_poll(void *ctx) {
    CO2 *o = ctx;
    comm_progress();
    if (o->rs_pending && comm_test(&o->rs)) sharded_apply_rs(o, 0);
    if (o->norm_pending && comm_test(&o->nq)) sharded_apply_norms(o, 0);
}

CO2 *co2_create(GPT *m, const Comm *c, const CO2Config *cfg) {
    CO2 *o = xcalloc(1, sizeof *o);
    o->m = m;
    o->c = c;
    o->cfg = *cfg;
    o->P = m->nparams;
    const Backend *be = m->be;
    if (!cfg->sharded) {
        o->anchor = be->alloc(o->P);
        o->mom = be->alloc(o->P);
        o->delta[0] = be->alloc(o->P);
        o->delta[1] = be->alloc(o->P);
        be->copy(o->anchor, m->params, o->P);
    } else {
        int N = c->size;
        o->oc = comm_split(c, 0, c->rank, "co2-outer");
        o->counts = xcalloc((size_t)N, sizeof(size_t));
        o->displs = xcalloc((size_t)N, sizeof(size_t));
        for (int q = 0; q < N; q++) {
            size_t a = gpt_shard_bound(m, 0, o->P, q, N), b = gpt_shard_bound(m, 0, o->P, q + 1, N);
            o->counts[q] = b - a;
            o->displs[q] = a;
        }
        o->lo = o->displs[c->rank];
        o->hi = o->lo + o->counts[c->rank];
        size_t n = o->hi - o->lo;
        o->a_sh = be->alloc(n), o->aprev_sh = be->alloc(n), o->m_sh = be->alloc(n);
        o->xbar_sh = be->alloc(n);
        o->send = be->alloc(o->P);
        o->next = be->alloc(o->P);
        be->copy(o->a_sh, m->params + o->lo, n);
        be->copy(o->aprev_sh, m->params + o->lo, n);
        be->copy(o->next, m->params, o->P); // a(1) = a(0)
        o->sq = xcalloc((size_t)2 * m->ntensors, sizeof(double));
    }
    o->chained = m->hooks;
    o->hooks =
        (BlockHooks){.before = hook_before, .after = hook_after, .poll = hook_poll, .ctx = o};
    m->hooks = &o->hooks;
    return o;
}

void co2_free(CO2 *o) {
    if (!o) return;
    const Backend *be = o->m->be;
    float *bufs[] = {o->anchor,   o->mom,  o->delta[0], o->delta[1], o->a_sh,
                     o->aprev_sh, o->m_sh, o->xbar_sh,  o->send,     o->next};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->release(bufs[i]);
    o->m->hooks = o->chained;
    free(o->counts);
    free(o->displs);
    free(o->sq);
    free(o);
}

void co2_norms_add(const GPT *m, const Backend *be, const float *mom, const float *avg, size_t lo,
                   size_t hi, double *sq) {
    for (int b = 0; b < m->nblocks; b++) {
        const Block *blk = &m->blocks[b];
        size_t bs, bn = range_isect(blk->off, blk->off + blk->n, lo, hi, &bs);
        for (int i = blk->t0; bn && i < blk->t0 + blk->nt; i++) {
            const TensorSpec *t = &m->tensors[i];
            size_t ts, tn = range_isect(t->off, t->off + t->n, bs, bs + bn, &ts);
            // the tensor's pieces in each norm chunk of its block (gpt.h), in order
            for (size_t x = ts; x < ts + tn;) {
                size_t c = blk->off + ((x - blk->off) / GPT_CHUNK + 1) * GPT_CHUNK;
                size_t e = c < ts + tn ? c : ts + tn;
                sq[2 * i] += be->sumsq(mom + (x - lo), e - x);
                sq[2 * i + 1] += be->sumsq(avg + (x - lo), e - x);
                x = e;
            }
        }
    }
}

// Adaptive gap penalty: Σ over [lo, hi) of m² and Δ̄² per tensor into sq (2·ntensors).
static void partial_norms(const CO2 *o, const float *mom, const float *avg, size_t lo, size_t hi,
                          double *sq) {
    memset(sq, 0, sizeof(double) * 2 * (size_t)o->m->ntensors);
    co2_norms_add(o->m, o->m->be, mom, avg, lo, hi, sq);
}

// m ← β·m + Δ̄/λ, clipped; a ← a − α·m, block by block through the blocks' CO2 slots (anchor,
// momentum, the average being applied; set by point_blocks). Adaptive mode takes each tensor's
// ‖m(t−1)‖² and ‖Δ̄‖² from sq (summed over the whole tensor, even when a worker holds a piece).
#define CO2_PIECE ((size_t)1 << 17) // floats: 512 KiB of each of the three arrays (L3)

void co2_outer_update(const CO2Config *c, const GPT *m, const double *sq) {
    const Backend *be = c->be ? c->be : m->be;
    for (int b = 0; b < m->nblocks; b++) {
        const Block *blk = &m->blocks[b];
        const BlockExtra *x = &blk->extra;
        for (int i = blk->t0; x->hi > x->lo && i < blk->t0 + blk->nt; i++) {
            const TensorSpec *t = &m->tensors[i];
            size_t s, n = range_isect(t->off, t->off + t->n, x->lo, x->hi, &s);
            if (!n) continue;
            float *mo = x->p[EXTRA_CO2_MOMENTUM] + (s - x->lo),
                  *a = x->p[EXTRA_CO2_ANCHOR] + (s - x->lo);
            const float *d = x->p[EXTRA_CO2_AVERAGE] + (s - x->lo);
            float lambda = c->lambda;
            if (c->adaptive) { // how far the anchor moved since Δ̄ was computed, relative to Δ̄
                double moved = c->alpha * sqrt(sq[2 * i]), size = sqrt(sq[2 * i + 1]);
                lambda = size > 0 ? (float)(1.0 + moved / size) : 1.0f;
            }
            // in host memory a piece at a time, so that the three passes share the cache
            size_t step = be->host_memory ? CO2_PIECE : n;
            for (size_t k = 0; k < n; k += step) {
                size_t nk = n - k < step ? n - k : step;
                be->axpby(mo + k, 1.0f / lambda, d + k, c->beta, nk); // m ← β·m + Δ̄/λ
                if (c->phi > 0) be->clamp(mo + k, -c->phi, c->phi, nk);
                be->axpby(a + k, -c->alpha, mo + k, 1.0f, nk); // a ← a − α·m
            }
        }
    }
}

// Points the blocks' CO2 slots at this worker's outer state and the average avg to apply.
static void point_blocks(CO2 *o, float *avg) {
    int sh = o->cfg.sharded;
    size_t lo = sh ? o->lo : 0, hi = sh ? o->hi : o->P;
    gpt_extra_range(o->m, EXTRA_CO2_ANCHOR, sh ? o->a_sh : o->anchor, lo, hi);
    gpt_extra_range(o->m, EXTRA_CO2_MOMENTUM, sh ? o->m_sh : o->mom, lo, hi);
    gpt_extra_range(o->m, EXTRA_CO2_AVERAGE, avg, lo, hi);
}

// The average started in `slot` has landed: the sum of the workers' Δ becomes their mean, over
// the workers the all-reduce reports as contributors.
static void avg_landed(CO2 *o, int slot) {
    timed_wait(o, &o->req[slot]);
    if (o->scaled[slot]) return;
    o->m->be->scale(o->delta[slot], 1.0f / (float)o->req[slot].contributors, o->P);
    o->scaled[slot] = 1;
}

static void outer_update(CO2 *o, float *avg) {
    double *sq = NULL;
    if (o->cfg.adaptive) {
        sq = xcalloc((size_t)2 * o->m->ntensors, sizeof(double));
        partial_norms(o, o->mom, avg, 0, o->P, sq);
        if (o->cfg.norms) o->cfg.norms(o->cfg.norms_ctx, sq, o->m->ntensors);
    }
    point_blocks(o, avg);
    co2_outer_update(&o->cfg, o->m, sq);
    free(sq);
}

// ---------------------------------------------------------------- sharded mode

// The outer update of this worker's slice, then the all-gather of the new anchor a(t+1).
static void sharded_update(CO2 *o) {
    size_t n = o->hi - o->lo;
    point_blocks(o, o->xbar_sh);
    co2_outer_update(&o->cfg, o->m, o->sq);
    o->m->be->copy(o->next + o->lo, o->a_sh, n);
    o->ag = comm_iallgatherv(o->oc, o->next, o->counts, o->displs);
}

// The reduce-scatter of x(t) has landed: Δ̄ slice = a(t−1) − mean x. Constant gap penalty:
// update the slices and start gathering the new anchor. Adaptive: first sum the per-tensor
// norms of m and Δ̄ over the workers' slices (a small non-blocking all-reduce).
static void sharded_apply_rs(CO2 *o, int wait) {
    if (wait) timed_wait(o, &o->rs);
    size_t n = o->hi - o->lo;
    float *d = o->xbar_sh; // Σ x over the workers that contributed, this slice
    o->m->be->scale(d, 1.0f / (float)o->rs.contributors, n);
    o->m->be->sub_scaled(d, o->aprev_sh, d, 1.0f, n); // in place: Δ̄ slice = a(t−1) − mean x
    o->m->be->copy(o->aprev_sh, o->a_sh, n);          // a(t) starts the next round
    o->rs_pending = 0;
    if (!o->cfg.adaptive) {
        sharded_update(o);
        return;
    }
    partial_norms(o, o->m_sh, d, o->lo, o->hi, o->sq);
    o->nq = comm_iallreduce_f64(o->oc, o->sq, 2 * o->m->ntensors);
    o->norm_pending = 1;
    if (wait) sharded_apply_norms(o, 1);
}

static void sharded_apply_norms(CO2 *o, int wait) {
    if (wait) timed_wait(o, &o->nq);
    o->norm_pending = 0;
    sharded_update(o);
}

static void sharded_round_end(CO2 *o) {
    if (o->rs_pending) sharded_apply_rs(o, 1);
    if (o->norm_pending) sharded_apply_norms(o, 1);
    timed_wait(o, &o->ag); // o->next = a(t)
    float *x = o->m->params;
    o->m->be->copy(o->send, x, o->P); // summed by the reduce-scatter, averaged on landing
    o->rs = comm_ireduce_scatter(o->oc, o->send, o->xbar_sh, o->counts);
    o->rs_pending = 1;
    o->m->be->copy(x, o->next, o->P); // x_r ← a(t)
}

static void sharded_finish(CO2 *o) {
    if (o->rs_pending) sharded_apply_rs(o, 1);
    if (o->norm_pending) sharded_apply_norms(o, 1);
    timed_wait(o, &o->ag);
    o->m->be->copy(o->m->params, o->next, o->P);
}

// ---------------------------------------------------------------- unsharded mode

void co2_round_end(CO2 *o) {
    o->overlap = 0;
    if (o->cfg.sharded) {
        o->round++;
        sharded_round_end(o);
        return;
    }
    o->round++;
    int cur = o->round & 1, prev = cur ^ 1;
    float *d = o->delta[cur], *x = o->m->params, *a = o->anchor;
    size_t P = o->P;
    o->m->be->sub_scaled(d, a, x, 1.0f, P); // Δ(t); its sum over the workers is averaged on landing
    o->req[cur] = comm_iallreduce(o->c, d, P);
    o->scaled[cur] = 0;
    if (o->round >= 2) { // apply the average started one round ago
        avg_landed(o, prev);
        outer_update(o, o->delta[prev]);
    }
    o->m->be->copy(x, a, P); // x_r ← a(t)
}

void co2_finish(CO2 *o) {
    if (o->cfg.sharded) {
        if (o->round >= 1) sharded_finish(o);
        return;
    }
    if (o->round >= 1) {
        int last = o->round & 1;
        avg_landed(o, last);
        outer_update(o, o->delta[last]);
    }
    o->m->be->copy(o->m->params, o->anchor, o->P);
}

// ---------------------------------------------------------------- checkpoint state
// Unsharded: the outer momentum m(t) and the average Δ̄(t) started at this round end (waited
// for, not applied). Sharded: everything in flight is drained — applying a landed reduce-scatter
// early is what the poll hook does anyway, and x only takes the new anchor at the next round
// end — leaving the slices a(t+1), a(t), m(t+1) and the gathered anchor a(t+1).

static int state_arrays(CO2 *o, float **arrays, size_t *lens, const char **kind) {
    if (!o->cfg.sharded) {
        int cur = o->round & 1;
        arrays[0] = o->mom, arrays[1] = o->delta[cur];
        lens[0] = lens[1] = o->P;
        *kind = "co2";
        return 2;
    }
    size_t n = o->hi - o->lo;
    arrays[0] = o->a_sh, arrays[1] = o->aprev_sh, arrays[2] = o->m_sh, arrays[3] = o->next;
    lens[0] = lens[1] = lens[2] = n, lens[3] = o->P;
    *kind = "co2-sharded";
    return 4;
}

int co2_state(CO2 *o, const float **arrays, size_t *lens, const char **kind) {
    if (!o->cfg.sharded) {
        if (o->round >= 1) avg_landed(o, o->round & 1);
    } else {
        if (o->rs_pending) sharded_apply_rs(o, 1);
        if (o->norm_pending) sharded_apply_norms(o, 1);
        timed_wait(o, &o->ag);
    }
    float *a[CO2_STATE_MAX];
    int n = state_arrays(o, a, lens, kind);
    for (int i = 0; i < n; i++)
        arrays[i] = a[i];
    return n;
}

int co2_state_buffers(CO2 *o, int round, float **arrays, size_t *lens, const char **kind) {
    o->round = round; // every request stays null: the state holds their results
    o->scaled[0] = o->scaled[1] = 1;
    return state_arrays(o, arrays, lens, kind);
}

int co2_rounds(const CO2 *o) { return o->round; }

float *co2_anchor(CO2 *o) { return o->cfg.sharded ? NULL : o->anchor; }

double co2_exposed(const CO2 *o) { return o->exposed; }

double co2_overlap(const CO2 *o) { return o->overlap; }

double co2_memory(const CO2 *o) {
    if (!o->cfg.sharded) return 4.0 * sizeof(float) * o->P;
    return sizeof(float) * (2.0 * o->P + 4.0 * (o->hi - o->lo));
}
