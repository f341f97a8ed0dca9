// offload_sim.c — the event simulation of one swapped step (the schedule in offload_plan.h):
// the numbers of one model, shape and costs (prefix sums, the update pass's and the fused
// updates' max-plus coefficients), the walk of swap_update.c, the step, and the predictions
// offload_plan.h exposes. The search over plans: offload_plan.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "offload_sim.h"

// ---------------------------------------------------------------- the numbers of one model

// The compute stream's seconds lost to the tier's CPU while rd bytes are read and wr written
// (offload_plan.h: the I/O threads' CPU).
static double stolen(const Ctx *x, double rd, double wr) {
    const OffloadCosts *c = x->c;
    if (c->io_slow > 0) return (rd + wr) * c->io_slow;
    return c->io_steal * (rd * c->read_cpu + wr * c->write_cpu);
}

// swap_update.c's walk over blocks [a, b] (offload_plan.h) from compute-free time cpu and
// I/O-free time io to its end: pieces of at most the optimizer chunk inside a block, two
// buffers. The update pass reads each piece's parameters and the owned gradients, m and v; the
// fused update (a unit's, from its slot) only the owned moments (and the embedding's
// parameters: its gradient overlays them in the slot). Both write parameters, m and v.
static double walk_end(const Ctx *x, int a, int b, int fused, double cpu, double io) {
    const GPT *m = x->m;
    double R = offload_opt_read_bps(x->c), W = offload_opt_write_bps(x->c), f = x->own;
    double wbuf[2] = {NEG, NEG}, pr = 0, pc = 0, pw = 0; // piece i-1: reads end, compute, write
    int i = 0;
    size_t chunk = offload_opt_chunk(m);
    for (int blk = a; blk <= b; blk++) {
        double rdf = !fused ? 1 + 3 * f : 2 * f + (m->blocks[blk].kind == BLOCK_EMBED);
        for (size_t at = 0; at < m->blocks[blk].n; at += chunk, i++) {
            size_t n = m->blocks[blk].n - at;
            n = n < chunk ? n : chunk;
            double pad = 4.0 * (double)offload_pad(n);
            cpu = dmax(cpu, wbuf[i % 2]); // the buffer's previous piece is written
            io = dmax(io, cpu) + pad * rdf / R;
            double r = io;
            if (i) { // piece i-1 computes and writes
                cpu = dmax(cpu, pr) + pc;
                io = wbuf[(i - 1) % 2] = dmax(io, cpu) + pw / W;
            }
            pr = r, pc = (double)n * f * x->c->update_s_per_param, pw = pad * (1 + 2 * f);
        }
    }
    if (i) {
        cpu = dmax(cpu, pr) + pc;
        io = dmax(io, cpu) + pw / W;
    }
    return dmax(cpu, io);
}

// The bytes the update pass reads and writes (walk_end's pieces).
static void update_bytes(const Ctx *x, double *rd, double *wr) {
    double f = x->own, all = 4 * x->pp[x->nb];
    *rd = all * (1 + 3 * f), *wr = all * (1 + 2 * f);
}

// The update pass after the backward over every block.
static double update_end(const Ctx *x, double cpu, double io) {
    return walk_end(x, 0, x->nb - 1, 0, cpu, io);
}

// The fused update of unit [a, b] right after its backward: the compute stream waits for its
// last write. The end is max-plus linear in (cpu, io): the table holds both coefficients.
static double fused_end(const Ctx *x, int a, int b, double cpu, double io) {
    if (!x->F) return walk_end(x, a, b, 1, cpu, io);
    const double *f = &x->F[2 * ((size_t)a * x->nb + b)];
    return dmax(cpu + f[0], io + f[1]);
}

void offload_sim_init(Ctx *x, const GPT *m, const OffloadShape *s, const OffloadCosts *c,
                      int table) {
    memset(x, 0, sizeof *x);
    x->m = m, x->s = s, x->c = c, x->nb = m->nblocks;
    size_t nb = (size_t)m->nblocks;
    x->pf = xcalloc(nb + 1, sizeof(double)), x->pb = xcalloc(nb + 1, sizeof(double));
    x->pp = xcalloc(nb + 1, sizeof(double)), x->pl = xcalloc(nb + 1, sizeof(double));
    x->t = xcalloc(3 * nb + OFFLOAD_MAX_PREFETCH + 2, sizeof(double));
    for (size_t b = 0; b < nb; b++) {
        const Block *blk = &m->blocks[b];
        int k = blk->kind == BLOCK_EMBED ? 0 : blk->kind == BLOCK_LAYER ? 1 : 2;
        double pad = (double)offload_pad(blk->n);
        x->pf[b + 1] = x->pf[b] + s->K * c->fwd[k];
        x->pb[b + 1] = x->pb[b] + s->K * c->bwd[k];
        x->pp[b + 1] = x->pp[b] + pad;
        x->pl[b + 1] = x->pl[b] + (blk->kind == BLOCK_LAYER ? pad : 0);
    }
    x->wte = (double)offload_pad(offload_wte_floats(m));
    double all = x->pp[nb];
    int N = s->dp > 1 ? s->dp : 1;
    x->own = s->zero >= 1 ? ceil(all / N) / all : 1.0;
    x->upd_cpu = update_end(x, 0, NEG), x->upd_io = update_end(x, NEG, 0);
    x->upd_work = (double)m->nparams * x->own * c->update_s_per_param;
    // the update pass mostly waits for its I/O: the threads share the CPUs rather than delay
    // each other, and the pass takes at least its AdamW plus its I/O's CPU spread over them
    double rd, wr, pw = 0;
    update_bytes(x, &rd, &wr);
    if (c->io_steal > 0) pw = x->upd_work + stolen(x, rd, wr) / (c->threads > 0 ? c->threads : 1);
    x->upd_cpu = dmax(x->upd_cpu, pw);
    OffloadPlan one;
    offload_plan_per_block(m, &one);
    x->fixed = offload_fast_bytes(m, s, &one) - 4.0 * (double)offload_slots_floats(m, &one);
    offload_plan_free(&one);
    if (!table) return;
    x->U = xcalloc(nb * nb, sizeof(double));
    for (size_t a = 0; a < nb; a++)
        for (size_t b = a; b < nb; b++)
            x->U[a * nb + b] = (double)offload_unit_floats(m, (OffloadUnit){(int)a, (int)b});
    if (!s->fused) return;
    double *F = xcalloc(2 * nb * nb, sizeof(double));
    for (size_t a = 0; a < nb; a++)
        for (size_t b = a; b < nb; b++) {
            F[2 * (a * nb + b)] = walk_end(x, (int)a, (int)b, 1, 0, NEG);
            F[2 * (a * nb + b) + 1] = walk_end(x, (int)a, (int)b, 1, NEG, 0);
        }
    x->F = F;
}

void offload_sim_free(Ctx *x) {
    free(x->pf), free(x->pb), free(x->pp), free(x->pl), free(x->t), free(x->U), free(x->F);
}

static void ctx_unit(const Ctx *x, OffloadUnit u, int idx, int n, int p, OffloadUnitCost *o) {
    int a = u.first, b = u.last + 1;
    o->fwd_s = x->pf[b] - x->pf[a];
    o->bwd_s = x->pb[b] - x->pb[a];
    o->read_fwd = 4 * (x->pp[b] - x->pp[a] + (idx == n - 1 && n > 1 ? x->wte : 0));
    o->read_bwd = idx >= n - 2 - p ? 0 : 4 * (x->pl[b] - x->pl[a]); // n-2-p..n-1: resident
    double par = 4 * (x->pp[b] - x->pp[a]), f = x->own;
    o->write = x->s->fused ? par * (1 + 2 * f) : par * f;
    o->read_update = x->s->fused ? par * 2 * f + (a == 0 ? 4 * (x->pp[1] - x->pp[0]) : 0) : 0;
}

// ---------------------------------------------------------------- the simulation

// One step of units un[0..n-1] at prefetch p (the schedule in offload_plan.h); its seconds.
double offload_sim_step(const Ctx *x, const OffloadUnit *un, int n, int p, double *work) {
    int S = p + 2;
    double R = x->c->read_bps, W = x->c->write_bps, H = 4 * x->wte;
    double *rf = x->t, *rb = x->t + n, *wend = x->t + 2 * n, cpu = 0, io, w = 0;
    for (int i = 0; i < S; i++)
        wend[i] = NEG;
    OffloadUnitCost c, cv;
    ctx_unit(x, un[0], 0, n, p, &c);
    io = rf[0] = c.read_fwd / R;
    for (int u = 0, issued = 0; u < n; u++) { // forward, and the turn's reads
        cpu = dmax(cpu, rf[u]);
        for (; issued < u + p && issued < n - 1; issued++) {
            ctx_unit(x, un[issued + 1], issued + 1, n, p, &cv);
            io = rf[issued + 1] = dmax(io, cpu) + cv.read_fwd / R;
            cpu += stolen(x, cv.read_fwd, 0);
        }
        ctx_unit(x, un[u], u, n, p, &c);
        if (u < n - 1) cpu += c.fwd_s, w += c.fwd_s;
    }
    cpu += c.fwd_s + c.bwd_s, w += c.fwd_s + c.bwd_s; // the turn, then its gradient and H out
    if (x->s->fused)                                  // its update instead of its gradient
        cpu = io = fused_end(x, un[n - 1].first, un[n - 1].last, cpu, io);
    io = wend[(n - 1) % S] = dmax(io, cpu) + (x->s->fused ? 0 : c.write / W) + H / W;
    cpu += stolen(x, 0, (x->s->fused ? 0 : c.write) + H);
    for (int u = n - 2; u >= 0; u--) {
        ctx_unit(x, un[u], u, n, p, &c);
        if (u <= n - 3 - p) cpu = dmax(cpu, rb[u]); // not resident: its read
        int v = u - p;                              // read into its slot now
        if (v >= 0 && v <= n - 3 - p) {
            ctx_unit(x, un[v], v, n, p, &cv);
            cpu = dmax(cpu, wend[v % S]); // after that slot's writes (unit v+S)
            rb[v] = cpu;
            if (cv.read_bwd > 0) io = rb[v] = dmax(io, cpu) + cv.read_bwd / R;
            cpu += stolen(x, cv.read_bwd, 0);
        }
        cpu += c.bwd_s, w += c.bwd_s;
        if (u == 0) cpu = io = dmax(io, cpu) + H / R; // H back and added
        if (x->s->fused)
            cpu = io = wend[u % S] = fused_end(x, un[u].first, un[u].last, cpu, io);
        else
            io = wend[u % S] = dmax(io, cpu) + c.write / W, cpu += stolen(x, 0, c.write);
    }
    if (work) work[0] = w, work[1] = cpu;
    if (x->s->fused) return dmax(cpu, io);
    return dmax(cpu + x->upd_cpu, io + x->upd_io);
}

void offload_sim_fill(const Ctx *x, OffloadPlan *p, OffloadPrediction *d) {
    double work[2], rd, wr;
    double t = offload_sim_step(x, p->unit, p->nunits, p->prefetch, work);
    offload_io_bytes(x->m, x->s, p, &rd, &wr);
    p->predicted_step_ms = 1e3 * t;
    p->peak_fast_bytes = offload_fast_bytes(x->m, x->s, p);
    p->io_bytes_per_step = rd + wr;
    if (!d) return;
    d->step_s = t;
    d->compute_s = work[0] + x->upd_work;
    d->update_s = x->s->fused ? 0 : t - work[1];
    d->read_bytes = rd, d->written_bytes = wr;
    double ro = 0, wo = 0; // what the optimizer's stream moves: the update pass, or each unit's
    if (!x->s->fused) update_bytes(x, &ro, &wo);
    for (int u = 0; x->s->fused && u < p->nunits; u++) {
        OffloadUnitCost c;
        ctx_unit(x, p->unit[u], u, p->nunits, p->prefetch, &c);
        ro += c.read_update, wo += c.write;
    }
    d->io_s = offload_io_seconds(x->c, rd, wr, ro, wo);
}

double offload_predict(const GPT *m, const OffloadShape *s, const OffloadCosts *c, OffloadPlan *p,
                       OffloadPrediction *d) {
    Ctx x;
    offload_sim_init(&x, m, s, c, 0);
    offload_sim_fill(&x, p, d);
    offload_sim_free(&x);
    return p->predicted_step_ms / 1e3;
}

void offload_unit_cost(const GPT *m, const OffloadShape *s, const OffloadCosts *c,
                       const OffloadPlan *p, int u, OffloadUnitCost *out) {
    Ctx x;
    offload_sim_init(&x, m, s, c, 0);
    ctx_unit(&x, p->unit[u], u, p->nunits, p->prefetch, out);
    offload_sim_free(&x);
}
