// strat_co2.c — CO2: every worker (a dp rank) takes τ local AdamW steps on its own copy, then
// the outer average of the round runs in the background during the next round
// (parallel/co2.h has the outer rule). The workers' losses of a round are averaged by one
// small non-blocking all-reduce started at the round end, ahead of the outer average, and the
// round's records go to the loop when it lands: no step ever blocks on it.
// A stop signal: workers meet only at round ends, so they agree on the step to stop at through
// parallel/stop_agree.h (a notice and one small all-reduce, only once a signal has arrived; no
// collective per step). From the furthest step S any worker has reached, they run on to the next
// round end when it fits in half the grace period left (by the slowest worker's step time), and
// otherwise stop at S and save mid-round (co2_ckpt.c: every worker's own weights too).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "compose.h"
#include "strat_co2.h"

static int co2_wants(const StrategyConfig *c) { return c->co2; }

static const char SWAP_SHARDED[] = "CO2's sharded outer state (--zero 1 or 2) is not swapped "
                                   "(--co2 --offload runs with --zero 0)";
static const FeaturePair CO2_PAIRS[] = {
    {F_OFFLOAD, F_ZERO1, SWAP_SHARDED}, {F_OFFLOAD, F_ZERO2, SWAP_SHARDED}, {0, 0, NULL}};
static const Supports CO2_SUPPORTS = {
    .self = {F_CO2, F_COUNT},
    .features = FEAT(F_CO2) | FEAT(F_DP) | FEAT(F_ZERO1) | FEAT(F_ZERO2) | FEAT(F_OFFLOAD) |
                FEAT(F_OFFLOAD_DEVICE) | FEAT(F_RECOMPUTE),
    .pairs = CO2_PAIRS,
    .runs_with = "CO2's workers are the data-parallel ranks, each with the whole model; it runs "
                 "with --zero 1 or 2 (a sharded outer state), --offload and --recompute"};

static int co2_create_s(Strategy *s) {
    const StrategyConfig *c = s->cfg;
    Co2State *o = xcalloc(1, sizeof *o);
    s->impl = o;
    // workers never reduce gradients: their data-parallel mechanics run over a group of one
    const Comm *self = comm_split(s->grid->dp_comm, s->grid->dp_comm->rank, 0, "self");
    co2_rounds_init(&o->r, c->tau, s->grid->dp_comm, s->grid->dp_comm);
    if (whole_create(s, &o->w, self, 0)) return -1;
    CO2Config cc = whole_co2_config(c);
    if (o->w.sw) { // the anchor a(0) = the parameters, in the tier
        if (swap_co2_begin(o->w.sw)) return -1;
    } else {
        o->co2 = co2_create(s->model, s->grid->dp_comm, &cc);
    }
    return s->resume_dir ? co2_resume(s, o) : 0;
}

// The outer step at a round's end: in memory, or through the swap executor's tier.
static int whole_round_end(void *ctx, Co2Wait *w) {
    Co2State *o = ctx;
    Swapper *sw = o->w.sw;
    double e0 = sw ? swap_co2_exposed(sw) : co2_exposed(o->co2);
    if (sw && swap_co2_round_end(sw, ++o->rounds)) return -1;
    if (!sw) co2_round_end(o->co2), w->overlap = co2_overlap(o->co2);
    w->exposed = (sw ? swap_co2_exposed(sw) : co2_exposed(o->co2)) - e0;
    return 0;
}

static int co2_step(Strategy *s, int step, int boundary) {
    (void)boundary;
    Co2State *o = s->impl;
    double t0 = now_sec();
    co2_rounds_begin(&o->r, step); // (the wait hook joins a stop at its end)
    double loss = whole_grads(s, &o->w, step);
    StepRecord r = {.step = step + 1, .loss = loss};
    if (o->w.failed) return -1;
    whole_update(s, &o->w, step, loss, &r);
    if (o->w.failed) return -1;
    // the round's end (or the run's: a final, partial round) is part of its step
    return co2_rounds_step(s, &o->r, &r, step, t0, whole_round_end, o);
}

static void co2_drain(Strategy *s, int final) {
    Co2State *o = s->impl;
    co2_rounds_drain(s, &o->r);                                    // records up to here
    if (final && o->w.sw && swap_co2_finish(o->w.sw, o->rounds)) { // x = the final anchor
        fprintf(stderr, "loom: %s\n", loom_errmsg());
        exit(EXIT_IO);
    }
    if (final && !o->w.sw) co2_finish(o->co2);
}

static double co2_evaluate(Strategy *s) { return whole_evaluate(s, &((Co2State *)s->impl)->w); }

static int co2_full_params(Strategy *s, float *host, int grads) {
    return whole_full_params(s, &((Co2State *)s->impl)->w, host, grads);
}

static int co2_param_source(Strategy *s, ParamSource *src) {
    return whole_param_source(&((Co2State *)s->impl)->w, src);
}

static void co2_describe(const Strategy *s, char *buf, size_t n) {
    snprintf(buf, n, "co2: %d workers, tau %d%s", s->grid->dp, s->cfg->tau,
             s->cfg->zero ? ", sharded outer state" : "");
}

static void co2_summary(Strategy *s, double exposed_s, double step_s) {
    Co2State *o = s->impl;
    if (o->w.sw && s->lead) whole_swap_summary(&o->w);
    if (!s->lead || step_s <= 0) return;
    fprintf(stderr,
            "loom: co2 %d workers, tau %d | exposed communication %.1f%% of step time | CO2 "
            "state %.1f MiB per worker%s\n",
            s->grid->dp, s->cfg->tau, 100 * exposed_s / step_s,
            (o->co2 ? co2_memory(o->co2) : 4.0 * sizeof(float) * s->model->nparams) / 1048576,
            o->co2 ? "" : " (in the offload tier)");
}

static void co2_destroy(Strategy *s) {
    Co2State *o = s->impl;
    if (!o) return;
    co2_rounds_free(&o->r);
    co2_free(o->co2);
    whole_free(s, &o->w);
    free(o);
    s->impl = NULL;
}

const StrategyOps STRATEGY_CO2 = {.name = "co2",
                                  .wants = co2_wants,
                                  .supports = &CO2_SUPPORTS,
                                  .check = co2_check_config,
                                  .create = co2_create_s,
                                  .step = co2_step,
                                  .drain = co2_drain,
                                  .evaluate = co2_evaluate,
                                  .save = co2_save,
                                  .full_params = co2_full_params,
                                  .param_source = co2_param_source,
                                  .comm_failed = strategy_end_job,
                                  .describe = co2_describe,
                                  .summary = co2_summary,
                                  .destroy = co2_destroy};
