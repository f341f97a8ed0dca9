// strat_tp_co2.c — CO2 over tensor- and context-parallel workers (see strat_tp_co2.h). The
// outer rule (parallel/co2.h) runs on this rank's part over dp_comm — the ranks holding the same
// part (tp_i, cp_i) in every worker — and is elementwise, so it is CO2 on the whole model
// restricted to the part; the adaptive gap penalty's per-tensor norms are the whole tensors'
// (summed over tp, replicated tensors counted once; cp ranks hold the same part). strat_tp2d.c
// runs it the same way on 2D grids (a worker is one q x q grid, cp 1). The rounds'
// losses and the stop agreement are strat_co2.c's (co2_rounds.h), the agreement over the whole
// job so every rank of a worker stops at the same step. Checkpoints: strat_tp.c's whole flat
// layout (at a round end the anchor; worker 0's weights mid-round) and moments, and every rank's
// co2_<world rank>.bin (co2_ckpt.c's arrays for its part): the same --dp, --tau, --tp and --cp
// resume it.
#include "strat_tp_co2.h"

#include <stdio.h>
#include <stdlib.h>

#include "../common.h"
#include "strat_co2.h"

struct TpCo2 {
    CO2 *co2;
    Co2Rounds r;
    GPT *part;
    const AdamW *opt;
    const Grid *g;
    TpCo2Dup dup; // NULL: 1D's replicated tensors, counted on tp rank 0
    void *dup_ctx;
    CO2Files files;
};

// The per-tensor Σ m², Σ Δ̄² of the part made the whole tensors': summed over tp, a tensor
// another rank of the group also holds counted on one of them only (1D: replicated tensors from
// tp rank 0, LLaMA's shared kv heads from the first of their ranks (gpt_tp_counts); 2D: down the
// grid's column (dup)).
static void whole_norms(void *ctx, double *sq, int ntensors) {
    TpCo2 *o = ctx;
    if (o->g->tp == 1) return;
    for (int i = 0; i < ntensors; i++)
        if (o->dup ? o->dup(o->part, i, o->dup_ctx) : !gpt_tp_counts(o->part, i, o->g->tp_i))
            sq[2 * i] = sq[2 * i + 1] = 0;
    comm_allreduce_f64(o->g->tp_comm, sq, 2 * ntensors);
}

TpCo2 *tp_co2_create(Strategy *s, GPT *part, const AdamW *opt, TpCo2Dup dup, void *dup_ctx) {
    const StrategyConfig *c = s->cfg;
    TpCo2 *o = xcalloc(1, sizeof *o);
    o->part = part, o->opt = opt, o->g = s->grid, o->dup = dup, o->dup_ctx = dup_ctx;
    co2_rounds_init(&o->r, c->tau, s->grid->dp_comm, s->grid->world);
    CO2Config cc = whole_co2_config(c);
    cc.norms = whole_norms, cc.norms_ctx = o;
    o->co2 = co2_create(part, s->grid->dp_comm, &cc);
    if (!s->resume_dir) return o;
    int layout = co2_ckpt_layout(s);
    if (layout < 0) {
        tp_co2_free(o);
        return NULL;
    }
    if (layout > 0) return o;
    float *dev[CO2_STATE_MAX + 4];
    size_t lens[CO2_STATE_MAX + 4];
    int mid = s->start % c->tau != 0;
    int k = co2_file_arrays(o->co2, opt, part, s->start / c->tau, mid, dev, lens, 1);
    co2_read_file(s, s->grid->world->rank, s->grid->world->size, dev, lens, k);
    return o;
}

void tp_co2_free(TpCo2 *o) {
    if (!o) return;
    co2_rounds_free(&o->r);
    co2_free(o->co2);
    free(o);
}

void tp_co2_begin(TpCo2 *o, int step) { co2_rounds_begin(&o->r, step); }

static int tp_round_end(void *ctx, Co2Wait *w) {
    TpCo2 *o = ctx;
    double e0 = co2_exposed(o->co2);
    co2_round_end(o->co2);
    w->overlap = co2_overlap(o->co2);
    w->exposed = co2_exposed(o->co2) - e0;
    return 0;
}

int tp_co2_step(TpCo2 *o, Strategy *s, int step, StepRecord *r, double t0) {
    return co2_rounds_step(s, &o->r, r, step, t0, tp_round_end, o);
}

void tp_co2_drain(TpCo2 *o, Strategy *s, int final) {
    co2_rounds_drain(s, &o->r);
    if (final) co2_finish(o->co2);
}

void tp_co2_save_files(TpCo2 *o, Strategy *s, CkptMeta *meta, CkptExtraFn *fn, void **ctx) {
    int mid = meta->step % s->cfg->tau != 0;
    if (mid) co2_rounds_flush(s, &o->r); // the round's records so far (the loop logs them)
    co2_ckpt_meta(s, meta);
    CO2Files *f = &o->files;
    *f = (CO2Files){.rank = s->grid->world->rank,
                    .N = s->grid->world->size,
                    .kind = co2_kind(0, mid),
                    .be = o->part->be};
    f->n = co2_file_arrays(o->co2, o->opt, o->part, co2_rounds(o->co2), mid, (float **)f->arrays,
                           f->lens, 0);
    *fn = co2_write_file, *ctx = f;
}

void tp_co2_describe(const Strategy *s, char *buf, size_t n) {
    snprintf(buf, n, "co2: %d workers of tp %d x cp %d ranks, tau %d", s->grid->dp, s->grid->tp,
             s->grid->cp, s->cfg->tau);
}

void tp_co2_summary(const TpCo2 *o, const Strategy *s, double exposed_s, double step_s) {
    if (!s->lead || step_s <= 0) return;
    fprintf(stderr,
            "loom: co2 %d workers of tp %d%s x cp %d ranks, tau %d | exposed communication "
            "%.1f%% of step time | CO2 state %.1f MiB per rank (its part)\n",
            s->grid->dp, s->grid->tp, s->cfg->tp_2d ? " (2d)" : "", s->grid->cp, s->cfg->tau,
            100 * exposed_s / step_s, co2_memory(o->co2) / 1048576);
}
