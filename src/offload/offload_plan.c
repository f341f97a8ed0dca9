// offload_plan.c — the search of the static analysis of block swapping (see offload_plan.h):
// dynamic programming over contiguous groupings under per-slot size caps, the candidates
// simulated (offload_sim.c) and refined by local search; the least-memory plan when none of
// them fits. Measuring the costs and the error for a budget nothing fits: offload_plan_run.c.
#include "offload_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "offload_sim.h"

#define TOP 12 // candidates per prefetch depth that are refined

// ---------------------------------------------------------------- the search

enum { OBJ_TIME, OBJ_MEM };

// A grouping as cuts: cut[b] = 1 when a unit ends at block b (cut[nb-1] = 1).
typedef struct {
    char *cut;
    int p;
    double t, mem;
} Cand;

static int to_units(const char *cut, int nb, OffloadUnit *u) {
    int n = 0;
    for (int b = 0, first = 0; b < nb; b++)
        if (cut[b]) u[n++] = (OffloadUnit){first, b}, first = b + 1;
    return n;
}

// Fast bytes of units u[0..n-1] at prefetch p (offload_fast_bytes, from the table).
static double mem_of(const Ctx *x, const OffloadUnit *u, int n, int p) {
    double slots = 0;
    for (int i = 0; i < p + 2; i++) {
        double big = 0;
        for (int k = i; k < n; k += p + 2)
            big = dmax(big, x->U[u[k].first * x->nb + u[k].last]);
        slots += big;
    }
    return x->fixed + 4 * slots;
}

// Simulates a candidate; 0 when it is a plan within budget, -1 otherwise.
static int evaluate(const Ctx *x, Cand *c, double budget, OffloadUnit *u) {
    int n = to_units(c->cut, x->nb, u);
    if (n < 2 || c->p < 1) return -1;
    c->mem = mem_of(x, u, n, c->p);
    if (c->mem > budget) return -1;
    c->t = offload_sim_step(x, u, n, c->p, NULL);
    return 0;
}

// a better than b under the objective (ties: the other measure, then the shallower prefetch).
static int better(const Cand *a, const Cand *b, int obj) {
    double a1 = obj == OBJ_TIME ? a->t : a->mem, b1 = obj == OBJ_TIME ? b->t : b->mem;
    double a2 = obj == OBJ_TIME ? a->mem : a->t, b2 = obj == OBJ_TIME ? b->mem : b->t;
    double tol = 1e-12 * fabs(b1);
    if (a1 < b1 - tol || a1 > b1 + tol) return a1 < b1;
    tol = 1e-12 * fabs(b2);
    if (a2 < b2 - tol || a2 > b2 + tol) return a2 < b2;
    return a->p < b->p;
}

// The DP's additive stand-in for a unit's share of the step: its compute or its own I/O,
// whichever is longer; unit 0 adds what nothing hides (its forward read starts the step; H's
// read and its gradient's write end the backward). r: the unit's place from the end.
static double surrogate(const Ctx *x, int a, int b, int r, int p) {
    double R = x->c->read_bps, W = x->c->write_bps, H = 4 * x->wte;
    double comp = x->pf[b + 1] - x->pf[a] + x->pb[b + 1] - x->pb[a];
    double par = 4 * (x->pp[b + 1] - x->pp[a]), rd = par + (r == 0 ? H : 0);
    double rdb = r <= p + 1 ? 0 : 4 * (x->pl[b + 1] - x->pl[a]);
    double wr = par * x->own; // the gradient, or (fused) parameters, m and v, m and v read first
    double io = (rd + rdb) / R + wr / W + (r == 0 ? H / W : 0) + (a == 0 ? H / R : 0);
    if (x->s->fused) { // the update's stream instead of the gradient's write
        io += par * 2 * x->own / offload_opt_read_bps(x->c) +
              par * (1 + 2 * x->own) / offload_opt_write_bps(x->c) - wr / W;
        comp += (par / 4) * x->own * x->c->update_s_per_param;
    }
    return dmax(comp, io) + (a == 0 ? rd / R + wr / W + H / R : 0);
}

// DP from the last block backwards: the grouping of least surrogate cost whose units fit the
// caps (the turn's slot class 0: cap0; unit 0 outside class 0: capE; the rest: capN).
// State: the next unit's place r from the end, exactly while r < S, else r mod S.
static int dp_caps(const Ctx *x, int p, double cap0, double capE, double capN, char *cut) {
    int nb = x->nb, S = p + 2, NS = 2 * S;
    double *g = xmalloc((size_t)(nb + 1) * NS * sizeof(double));
    int *from = xmalloc((size_t)(nb + 1) * NS * sizeof(int));
    for (int i = 0; i < (nb + 1) * NS; i++)
        g[i] = INFINITY, from[i] = -1;
    g[nb * NS] = 0;
    for (int b = nb; b >= 1; b--)
        for (int st = 0; st < NS; st++) {
            if (g[b * NS + st] == INFINITY) continue;
            int cls = st < S ? st : st - S, r = st < S ? st : S + cls;
            int nst = st + 1 < S ? st + 1 : S + (cls + 1) % S;
            for (int a = b - 1; a >= 0; a--) {
                double cap = cls == 0 ? cap0 : a == 0 ? capE : capN;
                if (x->U[a * nb + b - 1] > cap) {
                    if (cls == 0 || a == 0 || capE <= capN) break;
                    a = 1; // only unit 0 may be larger
                    continue;
                }
                if (a == 0 && r == 0) continue; // at least two units
                double v = g[b * NS + st] + surrogate(x, a, b - 1, r, p);
                if (v < g[a * NS + nst]) g[a * NS + nst] = v, from[a * NS + nst] = b * NS + st;
            }
        }
    int best = -1;
    for (int st = 0; st < NS; st++)
        if (g[st] < INFINITY && (best < 0 || g[st] < g[best])) best = st;
    if (best >= 0) {
        memset(cut, 0, (size_t)nb);
        for (int cell = best; cell != nb * NS; cell = from[cell])
            cut[from[cell] / NS - 1] = 1;
    }
    free(g), free(from);
    return best >= 0 ? 0 : -1;
}

// The search's working set: the best TOP distinct candidates of one prefetch depth.
typedef struct {
    const Ctx *x;
    double budget;
    int obj;
    Cand top[TOP];
    int ntop;
    OffloadUnit *u; // scratch
} Search;

static void offer(Search *q, const char *cut, int p) {
    int nb = q->x->nb;
    Cand c = {(char *)cut, p, 0, 0};
    if (evaluate(q->x, &c, q->budget, q->u)) return;
    for (int i = 0; i < q->ntop; i++)
        if (q->top[i].p == p && !memcmp(q->top[i].cut, cut, (size_t)nb)) return;
    int at = q->ntop;
    while (at > 0 && better(&c, &q->top[at - 1], q->obj))
        at--;
    if (at >= TOP) return;
    if (q->ntop == TOP) free(q->top[--q->ntop].cut);
    memmove(&q->top[at + 1], &q->top[at], (size_t)(q->ntop - at) * sizeof(Cand));
    q->top[at] = c;
    q->top[at].cut = xmalloc((size_t)nb);
    memcpy(q->top[at].cut, cut, (size_t)nb);
    q->ntop++;
}

// Seeds that need no DP: one block per unit, and every split into two units.
static void seeds(Search *q, int p, char *cut) {
    int nb = q->x->nb;
    memset(cut, 1, (size_t)nb);
    offer(q, cut, p);
    for (int b = 0; b < nb - 1; b++) {
        memset(cut, 0, (size_t)nb);
        cut[b] = cut[nb - 1] = 1;
        offer(q, cut, p);
    }
}

// The next layer count of a cap to try: every one up to 64 layers, then about 5% apart (deep
// models would take minutes otherwise).
static int next_k(int k, int max) {
    if (max <= 64 || k < 16) return k + 1;
    int nk = k + k / 20 + 1;
    return k < max && nk > max ? max : nk;
}

// The DP under every useful combination of caps for prefetch p: capN from the sizes of runs
// of layers; capE from the sizes of units holding the embedding, or capE = capN (kE = -1: unit
// 0 no larger than the others unless it shares the turn's slot class); cap0 the rest of the
// budget (time) or the least the turn's slot can be (memory).
static void dp_candidates(Search *q, int p, char *cut) {
    const Ctx *x = q->x;
    int nb = x->nb, L = nb - 2;
    double room = (q->budget - x->fixed) / 4, T0 = x->U[(nb - 1) * nb + nb - 1];
    for (int kN = 1; kN <= L; kN = next_k(kN, L)) {
        double capN = x->U[nb + kN];
        for (int kE = -1; kE <= nb - 2; kE = next_k(kE, nb - 2)) {
            double capE = kE < 0 ? capN : x->U[kE];
            if (kE >= 0 && capE <= capN) continue; // kE = -1 allows as much
            double caps0[3] = {room - capE - p * capN, T0, 0};
            int n0 = 1;
            if (q->obj == OBJ_MEM)
                caps0[0] = dmax(T0, capN), caps0[2] = dmax(T0, capE), n0 = 3;
            else if (caps0[0] < T0) {
                if (kE < 0) continue;
                break; // larger kE need more
            }
            for (int i = 0; i < n0; i++)
                if (!dp_caps(x, p, caps0[i], capE, capN, cut)) offer(q, cut, p);
        }
    }
}

// Tries t (a copy of c changed by a move); keeps it in c when better.
static int try_move(Search *q, Cand *c, Cand *t) {
    if (evaluate(q->x, t, q->budget, q->u) || !better(t, c, q->obj)) return 0;
    memcpy(c->cut, t->cut, (size_t)q->x->nb);
    c->p = t->p, c->t = t->t, c->mem = t->mem;
    return 1;
}

// Moves the cuts with indices i..j of the cut list (ends excluded) by d blocks; 0 when they
// would collide or leave the model.
static int shift(char *cut, int nb, const int *at, int n, int i, int j, int d) {
    if ((d < 0 && at[i] + d < (i ? at[i - 1] + 1 : 0)) ||
        (d > 0 && at[j] + d > (j + 1 < n ? at[j + 1] - 1 : nb - 2)))
        return 0;
    for (int k = i; k <= j; k++)
        cut[at[k]] = 0;
    for (int k = i; k <= j; k++)
        cut[at[k] + d] = 1;
    return 1;
}

// Local search from c, first improvement until nothing improves. Moves: another prefetch depth
// with or without toggling one cut; toggling two cuts; moving a run of consecutive cuts by one.
static void polish(Search *q, Cand *c, int maxp) {
    int nb = q->x->nb, *at = xmalloc((size_t)nb * sizeof(int)), reach = nb <= 64 ? nb : 8;
    Cand t = {xmalloc((size_t)nb), 0, 0, 0};
    for (int improved = 1; improved;) {
        improved = 0;
        for (int pp = 1; pp <= maxp; pp++)
            for (int i = -1; i < nb - 1; i++) {
                memcpy(t.cut, c->cut, (size_t)nb), t.p = pp;
                if (i >= 0) t.cut[i] ^= 1;
                if (i >= 0 || pp != c->p) improved |= try_move(q, c, &t);
            }
        for (int i = 0; i < nb - 1; i++)
            for (int j = i + 1; j < nb - 1 && j - i <= reach; j++) {
                memcpy(t.cut, c->cut, (size_t)nb), t.p = c->p;
                t.cut[i] ^= 1, t.cut[j] ^= 1;
                improved |= try_move(q, c, &t);
            }
        int n = 0;
        for (int b = 0; b < nb - 1; b++)
            if (c->cut[b]) at[n++] = b;
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n && j - i <= reach; j++) // j == i: a pair toggle above
                for (int d = -1; d <= 1; d += 2) {
                    memcpy(t.cut, c->cut, (size_t)nb), t.p = c->p;
                    if (shift(t.cut, nb, at, n, i, j, d) && try_move(q, c, &t)) {
                        improved = 1;
                        i = j = n; // the cut list changed
                        break;
                    }
                }
    }
    free(t.cut), free(at);
}

static int least_plan(const GPT *m, const OffloadShape *s, const OffloadSearchOpts *o,
                      OffloadPlan *out);

// Polishes q's candidates and keeps the best in best; empties q.
static void take(Search *q, Cand *best, int maxp, int polishing) {
    for (int i = 0; i < q->ntop; i++) {
        if (polishing) polish(q, &q->top[i], maxp);
        if (!best->p || better(&q->top[i], best, q->obj))
            memcpy(best->cut, q->top[i].cut, (size_t)q->x->nb),
                best->p = q->top[i].p, best->t = q->top[i].t, best->mem = q->top[i].mem;
        free(q->top[i].cut);
    }
    q->ntop = 0;
}

// The best plan under the objective within budget into out; 0, or -1 when none fits. The
// time objective falls back on the least-memory plan (least_plan) when no candidate fits, so
// it finds a plan whenever the budget holds the least that offload_plan_min_bytes reports.
static int search(const Ctx *x, double budget, int obj, const OffloadSearchOpts *o,
                  OffloadPlan *out) {
    int nb = x->nb, maxp = o->max_prefetch < 1 ? 1 : o->max_prefetch;
    if (maxp > OFFLOAD_MAX_PREFETCH) maxp = OFFLOAD_MAX_PREFETCH;
    Search q = {
        .x = x, .budget = budget, .obj = obj, .u = xcalloc((size_t)nb, sizeof(OffloadUnit))};
    char *cut = xmalloc((size_t)nb);
    Cand best = {xmalloc((size_t)nb), 0, INFINITY, INFINITY};
    for (int p = 1; p <= maxp; p++) {
        seeds(&q, p, cut);
        dp_candidates(&q, p, cut);
        take(&q, &best, maxp, o->polish);
    }
    OffloadPlan least = {0};
    if (!best.p && obj == OBJ_TIME && !least_plan(x->m, x->s, o, &least)) {
        memset(cut, 0, (size_t)nb);
        for (int u = 0; u < least.nunits; u++)
            cut[least.unit[u].last] = 1;
        offer(&q, cut, least.prefetch); // nothing when it does not fit either
        take(&q, &best, maxp, o->polish);
        offload_plan_free(&least);
    }
    int ok = best.p > 0;
    if (ok) {
        memset(out, 0, sizeof *out);
        out->unit = xcalloc((size_t)nb, sizeof(OffloadUnit));
        out->nunits = to_units(best.cut, nb, out->unit);
        out->prefetch = best.p;
        offload_sim_fill(x, out, NULL);
    }
    free(q.u), free(cut), free(best.cut);
    return ok ? 0 : -1;
}

// ---------------------------------------------------------------- entry points

static const OffloadSearchOpts DEFAULT_OPTS = {OFFLOAD_MAX_PREFETCH, 1};

// The least-memory plan (searched with unit costs: the bytes do not depend on them) into out.
static int least_plan(const GPT *m, const OffloadShape *s, const OffloadSearchOpts *o,
                      OffloadPlan *out) {
    OffloadCosts c = {.fwd = {1, 1, 1}, .bwd = {1, 1, 1}, .read_bps = 1, .write_bps = 1};
    Ctx x;
    offload_sim_init(&x, m, s, &c, 1);
    int rc = search(&x, INFINITY, OBJ_MEM, o, out);
    offload_sim_free(&x);
    return rc;
}

double offload_plan_min_bytes(const GPT *m, const OffloadShape *s, OffloadPlan *out) {
    OffloadPlan p = {0};
    double least = offload_min_bytes(m, s);
    if (!least_plan(m, s, &DEFAULT_OPTS, &p)) {
        least = p.peak_fast_bytes;
        if (out)
            *out = p;
        else
            offload_plan_free(&p);
    }
    return least;
}

int offload_plan_search_opts(const GPT *m, const OffloadShape *s, const OffloadCosts *c,
                             double budget, const OffloadSearchOpts *o, OffloadPlan *out) {
    if (m->nblocks < 3) return loom_fail("offload plan: the model has no transformer layer");
    if (!(c->read_bps > 0) || !(c->write_bps > 0))
        return loom_fail("offload plan: the tier's bandwidth is unknown");
    Ctx x;
    offload_sim_init(&x, m, s, c, 1);
    int rc = search(&x, budget, OBJ_TIME, o, out);
    offload_sim_free(&x);
    return rc ? offload_plan_fail(m, s, (size_t)budget, 0, 0) : 0;
}

int offload_plan_search(const GPT *m, const OffloadShape *s, const OffloadCosts *c, double budget,
                        OffloadPlan *out) {
    return offload_plan_search_opts(m, s, c, budget, &DEFAULT_OPTS, out);
}
