// swap_co2.c — a CO2 worker whose outer state lives in the slow tier (see swap.h): the anchor,
// the outer momentum and the two round averages are whole-model regions of the tier; a round
// end streams them through fast memory piece by piece with parallel/co2.c's rule (pointed at
// each piece through the blocks' CO2 slots), and the all-reduce of the round's Δ runs piece by
// piece in the background — read from the tier, summed over the workers, divided by the
// contributors, written back — driven between blocks during the next round.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "swap_impl.h"

enum { IDLE, READING, REDUCING, WRITING };

typedef struct {
    int phase;
    size_t a, n; // flat piece
    uint64_t t;
    CommReq req;
    float *buf;
} AvgPiece;

struct SwapCO2 {
    CO2Config cfg;
    int region;   // the Δ region being averaged (-1: none in flight)
    size_t next;  // its next piece to read
    size_t order; // the piece whose reduction starts next (every rank starts them in order)
    AvgPiece p[2];
    double exposed;
    Comm *comm; // the averages' own communicator: its collectives start in piece order everywhere
};

static size_t next_end(const Swapper *s, size_t x) { return swap_piece_end(s, x, s->m->nparams); }

void swap_co2_setup(Swapper *s) {
    struct SwapCO2 *o = xcalloc(1, sizeof *o);
    o->cfg = *s->c.co2;
    o->region = -1;
    o->comm = comm_split(s->c.co2_comm, 0, s->c.co2_comm->rank, "co2-outer");
    for (int i = 0; i < 2; i++)
        o->p[i].buf = tier_fast_alloc(s->tier, s->chunk * sizeof(float));
    s->co2 = o;
}

void swap_co2_free(Swapper *s) {
    if (!s->co2) return;
    for (int i = 0; i < 2; i++)
        tier_fast_free(s->tier, s->co2->p[i].buf);
    free(s->co2);
    s->co2 = NULL;
}

double swap_co2_exposed(const Swapper *s) { return s->co2 ? s->co2->exposed : 0; }

// Moves piece q one phase on; blocking: wait for it. Returns 0 or -1.
static int avg_advance(Swapper *s, AvgPiece *q, int blocking) {
    struct SwapCO2 *o = s->co2;
    if (q->phase == READING) {
        if (q->a != o->order || (!blocking && !tier_done(s->tier, q->t))) return 0;
        if (tier_wait(s->tier, q->t)) return -1;
        q->req = comm_iallreduce(o->comm, q->buf, q->n);
        o->order = q->a + q->n;
        q->phase = REDUCING;
    } else if (q->phase == REDUCING) {
        if (!blocking && !comm_test(&q->req)) return 0;
        o->exposed += comm_wait_timed(&q->req, NULL);
        s->m->be->scale(q->buf, 1.0f / (float)q->req.contributors, q->n); // the mean
        q->t = tier_write_async(s->tier, swap_tier_off(s, o->region, q->a), q->buf,
                                offload_pad(q->n) * sizeof(float));
        q->phase = WRITING;
    } else if (q->phase == WRITING) {
        if (!blocking && !tier_done(s->tier, q->t)) return 0;
        if (tier_wait(s->tier, q->t)) return -1;
        q->phase = IDLE;
    }
    if (q->phase == IDLE && o->region >= 0 && o->next < s->m->nparams) {
        q->a = o->next, q->n = next_end(s, o->next) - o->next;
        o->next += q->n;
        q->t = tier_read_async(s->tier, swap_tier_off(s, o->region, q->a), q->buf,
                               offload_pad(q->n) * sizeof(float));
        q->phase = READING;
    }
    return 0;
}

void swap_co2_poll(Swapper *s) {
    struct SwapCO2 *o = s->co2;
    if (!o || o->region < 0) return;
    comm_progress();
    for (int i = 0; i < 2; i++)
        avg_advance(s, &o->p[i], 0); // a failure stays in the tier: settle reports it
}

int swap_co2_settle(Swapper *s) {
    struct SwapCO2 *o = s->co2;
    while (o->region >= 0) {
        for (int i = 0; i < 2; i++)
            if (avg_advance(s, &o->p[i], 1)) return -1;
        if (o->next >= s->m->nparams && o->p[0].phase == IDLE && o->p[1].phase == IDLE)
            o->region = -1;
    }
    return 0;
}

// ---------------------------------------------------------------- the round end's pass

typedef struct {
    float *a, *x, *mo, *avg;
    uint64_t rd[4], wr[4];
} Set;

// One piece [p0, p1) of the pass: Δ = a − x into the `dreg` region (dreg < 0: none), the outer
// update with the average in avg_reg (< 0: none), then x ← a.
static int piece(Swapper *s, Set *q, size_t p0, size_t p1, int dreg, int avg_reg,
                 const double *sq) {
    GPT *m = s->m;
    const Backend *be = m->be;
    size_t n = p1 - p0, bytes = offload_pad(n) * sizeof(float);
    for (int i = 0; i < 4; i++)
        if (tier_wait(s->tier, q->rd[i])) return -1;
    if (dreg >= 0) {
        be->sub_scaled(q->x, q->a, q->x, 1.0f, n); // Δ(t) = a(t−1) − x, in x's buffer
        q->wr[0] = tier_write_async(s->tier, swap_tier_off(s, dreg, p0), q->x, bytes);
    }
    if (avg_reg >= 0) {
        gpt_extra_range(m, EXTRA_CO2_ANCHOR, q->a, p0, p1);
        gpt_extra_range(m, EXTRA_CO2_MOMENTUM, q->mo, p0, p1);
        gpt_extra_range(m, EXTRA_CO2_AVERAGE, q->avg, p0, p1);
        co2_outer_update(&s->co2->cfg, m, sq);
        q->wr[1] = tier_write_async(s->tier, swap_tier_off(s, REGION_MOM, p0), q->mo, bytes);
        q->wr[2] = tier_write_async(s->tier, swap_tier_off(s, REGION_ANCHOR, p0), q->a, bytes);
    }
    q->wr[3] = tier_write_async(s->tier, swap_tier_off(s, REGION_PARAMS, p0), q->a, bytes);
    return 0;
}

// Starts reading what piece [p0, p1) needs: the anchor, the parameters (need_x), the momentum
// and the average (avg_reg >= 0); after the set's previous writes.
static int issue(Swapper *s, Set *q, size_t p0, size_t p1, int need_x, int avg_reg) {
    for (int i = 0; i < 4; i++)
        if (tier_wait(s->tier, q->wr[i])) return -1;
    memset(q->wr, 0, sizeof q->wr);
    size_t bytes = offload_pad(p1 - p0) * sizeof(float);
    q->rd[0] = tier_read_async(s->tier, swap_tier_off(s, REGION_ANCHOR, p0), q->a, bytes);
    q->rd[1] =
        need_x ? tier_read_async(s->tier, swap_tier_off(s, REGION_PARAMS, p0), q->x, bytes) : 0;
    q->rd[2] =
        avg_reg >= 0 ? tier_read_async(s->tier, swap_tier_off(s, REGION_MOM, p0), q->mo, bytes) : 0;
    q->rd[3] =
        avg_reg >= 0 ? tier_read_async(s->tier, swap_tier_off(s, avg_reg, p0), q->avg, bytes) : 0;
    return 0;
}

// The pass over the whole model, two pieces in flight (s->stream holds both sets).
static int pass(Swapper *s, int dreg, int avg_reg, const double *sq) {
    Set q[2];
    memset(q, 0, sizeof q);
    for (int i = 0; i < 2; i++) {
        float *b = s->stream + (size_t)i * 4 * s->chunk;
        q[i] = (Set){.a = b, .x = b + s->chunk, .mo = b + 2 * s->chunk, .avg = b + 3 * s->chunk};
    }
    size_t P = s->m->nparams, a = 0, e = next_end(s, 0);
    int rc = issue(s, &q[0], a, e, dreg >= 0, avg_reg), cur = 0;
    while (!rc && a < P) {
        size_t a2 = e, e2 = a2 < P ? next_end(s, a2) : P;
        if (a2 < P) rc = issue(s, &q[cur ^ 1], a2, e2, dreg >= 0, avg_reg);
        if (!rc) rc = piece(s, &q[cur], a, e, dreg, avg_reg, sq);
        a = a2, e = e2, cur ^= 1;
    }
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++)
            rc |= tier_wait(s->tier, q[i].rd[k]) | tier_wait(s->tier, q[i].wr[k]);
    for (int i = 0; i < s->S; i++) // the parameters changed
        s->slot[i].unit = -1, s->slot[i].params_ok = 0;
    return rc ? -1 : 0;
}

// Adaptive gap penalty: the per-tensor norms of the momentum and the average (a read pass).
static int norms(Swapper *s, int avg_reg, double **sq) {
    *sq = NULL;
    if (!s->co2->cfg.adaptive) return 0;
    GPT *m = s->m;
    *sq = xcalloc((size_t)2 * m->ntensors, sizeof(double));
    float *mo = s->stream, *avg = s->stream + s->chunk;
    for (size_t a = 0, e; a < m->nparams; a = e) {
        e = next_end(s, a);
        size_t bytes = offload_pad(e - a) * sizeof(float);
        uint64_t t0 = tier_read_async(s->tier, swap_tier_off(s, REGION_MOM, a), mo, bytes);
        uint64_t t1 = tier_read_async(s->tier, swap_tier_off(s, avg_reg, a), avg, bytes);
        if (tier_wait(s->tier, t0) | tier_wait(s->tier, t1)) return -1;
        co2_norms_add(m, m->be, mo, avg, a, e, *sq);
    }
    return 0;
}

static int delta_region(int round) { return round & 1 ? REGION_D1 : REGION_D0; }

// Applies the average of Δ in avg_reg (after it has landed); dreg >= 0: computes this round's
// Δ into it first. Then x ← a.
static int outer(Swapper *s, int dreg, int avg_reg) {
    double *sq = NULL;
    int rc = avg_reg >= 0 && (swap_co2_settle(s) || norms(s, avg_reg, &sq));
    if (!rc) rc = pass(s, dreg, avg_reg, sq);
    free(sq);
    return rc ? -1 : 0;
}

int swap_co2_begin(Swapper *s) {
    GPT *m = s->m;
    for (size_t a = 0, e; a < m->nparams; a = e) { // a(0) = x
        e = next_end(s, a);
        size_t bytes = offload_pad(e - a) * sizeof(float);
        if (tier_wait(s->tier, tier_read_async(s->tier, swap_tier_off(s, REGION_PARAMS, a),
                                               s->stream, bytes)) ||
            tier_wait(s->tier, tier_write_async(s->tier, swap_tier_off(s, REGION_ANCHOR, a),
                                                s->stream, bytes)))
            return -1;
    }
    return 0;
}

int swap_co2_round_end(Swapper *s, int round) {
    int cur = delta_region(round), prev = delta_region(round - 1);
    if (outer(s, cur, round >= 2 ? prev : -1)) return -1;
    s->co2->region = cur; // its average starts now and runs during the next round
    s->co2->next = s->co2->order = 0;
    swap_co2_poll(s);
    return 0;
}

int swap_co2_finish(Swapper *s, int round) {
    return outer(s, -1, round >= 1 ? delta_region(round) : -1);
}

static int state_region(int round, int array) {
    return array == 0 ? REGION_MOM : array == 2 ? REGION_ANCHOR : delta_region(round);
}

int swap_co2_fetch(Swapper *s, int round, int array, size_t at, size_t n, float *dst) {
    return swap_move(s, state_region(round, array), at, n, dst, 0);
}

int swap_co2_store(Swapper *s, int round, int array, size_t at, size_t n, const float *src) {
    return swap_move(s, state_region(round, array), at, n, (float *)src, 1);
}
