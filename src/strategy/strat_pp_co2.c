// strat_pp_co2.c — CO2 over pipeline workers (see strat_pp_co2.h). The outer rule
// (parallel/co2.h) runs over dp_comm — the ranks holding the same stage in every worker — on a
// whole-model-sized copy of the rank's weights (s->model's params, dropped by the pipeline and
// given back here): the stage's range, on the last stage its replica of the tied wte, zeros
// elsewhere (equal on every worker, so their Δ, momentum and anchor stay 0). The rule is
// elementwise, so this is CO2 on the whole model restricted to the stage; the adaptive gap
// penalty's per-tensor norms are local, since a stage holds whole tensors and the wte replica
// equals stage 0's wte (the pipeline sums their gradients and applies the same update, and the
// outer rule then sees the same values on both). The rounds' losses and the stop agreement
// (over the whole job) are strat_co2.c's (co2_rounds.h). Checkpoints at round ends: the
// pipeline's stage ranges (the anchor) and moments, and every rank's co2_<world rank>.bin
// (the outer momentum, the average in flight and the rank's own AdamW moments, as the stage
// ranges hold worker 0's); the same --dp, --pp and --tau resume it.
#include "strat_pp_co2.h"

#include <stdio.h>
#include <stdlib.h>

#include "../common.h"
#include "strat_co2.h"

struct PpCo2 {
    CO2 *co2;
    Co2Rounds r;
    Pipeline *p;
    GPT *m;
    StepRecord rec; // the pipeline's report of the step running
    double t0;
    CO2Files files;
};

// The stage's weights into the whole-model copy (to = 1) or back.
static void sync_copy(PpCo2 *o, int to) {
    float *w, *wte;
    size_t lo, hi, tie_n;
    pipeline_stage_view(o->p, &w, &lo, &hi, &wte, &tie_n);
    const Backend *be = o->m->be;
    if (to) {
        be->copy(o->m->params + lo, w, hi - lo);
        if (wte) be->copy(o->m->params, wte, tie_n);
    } else {
        be->copy(w, o->m->params + lo, hi - lo);
        if (wte) be->copy(wte, o->m->params, tie_n);
    }
}

PpCo2 *pp_co2_create(Strategy *s, Pipeline *p) {
    const StrategyConfig *c = s->cfg;
    PpCo2 *o = xcalloc(1, sizeof *o);
    o->p = p, o->m = s->model;
    const Backend *be = o->m->be;
    o->m->params = be->alloc(o->m->nparams);
    be->fill(o->m->params, 0.f, o->m->nparams);
    sync_copy(o, 1);
    co2_rounds_init(&o->r, c->tau, s->grid->dp_comm, s->grid->world);
    CO2Config cc = whole_co2_config(c);
    o->co2 = co2_create(o->m, s->grid->dp_comm, &cc);
    if (!s->resume_dir) return o;
    int layout = co2_ckpt_layout(s);
    if (layout == 0 && s->start % c->tau)
        layout = loom_fail("%s: a mid-round CO2 checkpoint; CO2 over pipeline workers resumes "
                           "only at round ends",
                           s->resume_dir);
    if (layout < 0) {
        pp_co2_free(o);
        return NULL;
    }
    if (layout > 0) return o;
    float *dev[CO2_STATE_MAX + 4];
    size_t lens[CO2_STATE_MAX + 4];
    const char *kind;
    int k = co2_state_buffers(o->co2, s->start / c->tau, dev, lens, &kind);
    k += pipeline_moments(p, dev + k, lens + k); // the worker's own (the stages hold worker 0's)
    co2_read_file(s, s->grid->world->rank, s->grid->world->size, dev, lens, k);
    return o;
}

void pp_co2_free(PpCo2 *o) {
    if (!o) return;
    co2_rounds_free(&o->r);
    co2_free(o->co2); // (the whole-model copy goes with the model)
    free(o);
}

void pp_co2_begin(PpCo2 *o, int step, double t0) {
    o->t0 = t0;
    co2_rounds_begin(&o->r, step);
}

void pp_co2_report(PpCo2 *o, const StepRecord *r) { o->rec = *r; }

static int pp_round_end(void *ctx, Co2Wait *w) {
    PpCo2 *o = ctx;
    double e0 = co2_exposed(o->co2);
    sync_copy(o, 1);
    co2_round_end(o->co2);
    sync_copy(o, 0);
    w->overlap = co2_overlap(o->co2);
    w->exposed = co2_exposed(o->co2) - e0;
    return 0;
}

void pp_co2_step(PpCo2 *o, Strategy *s, int step) {
    o->rec.must_stop = 0;
    co2_rounds_step(s, &o->r, &o->rec, step, o->t0, pp_round_end, o);
}

void pp_co2_drain(PpCo2 *o, Strategy *s, int final) {
    co2_rounds_drain(s, &o->r);
    if (!final) return;
    sync_copy(o, 1);
    co2_finish(o->co2);
    sync_copy(o, 0);
}

int pp_co2_save_files(PpCo2 *o, Strategy *s, CkptMeta *meta, CkptExtraFn *fn, void **ctx) {
    if (meta->step % s->cfg->tau)
        return loom_fail("step %d: CO2 over pipeline workers saves only at round ends (every "
                         "--tau %d steps); this mid-round checkpoint is not written",
                         meta->step, s->cfg->tau);
    co2_ckpt_meta(s, meta);
    CO2Files *f = &o->files;
    *f = (CO2Files){.rank = s->grid->world->rank,
                    .N = s->grid->world->size,
                    .kind = co2_kind(0, 0),
                    .be = o->m->be};
    const char *kind;
    f->n = co2_state(o->co2, f->arrays, f->lens, &kind);
    f->n += pipeline_moments(o->p, (float **)f->arrays + f->n, f->lens + f->n);
    *fn = co2_write_file, *ctx = f;
    return 0;
}

void pp_co2_describe(const Strategy *s, char *buf, size_t n) {
    snprintf(buf, n, "co2: %d workers of pp %d stages (%s), tau %d", s->grid->dp, s->grid->pp,
             s->cfg->schedule, s->cfg->tau);
}

void pp_co2_summary(const PpCo2 *o, const Strategy *s, double exposed_s, double step_s) {
    if (!s->lead || step_s <= 0) return;
    fprintf(stderr,
            "loom: co2 %d workers of pp %d stages, tau %d | exposed communication %.1f%% of step "
            "time | CO2 state %.1f MiB per rank (whole-model sized)\n",
            s->grid->dp, s->grid->pp, s->cfg->tau, 100 * exposed_s / step_s,
            co2_memory(o->co2) / 1048576);
}
