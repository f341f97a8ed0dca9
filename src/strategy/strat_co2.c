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
#include "../stop.h"
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
                FEAT(F_RECOMPUTE),
    .pairs = CO2_PAIRS,
    .runs_with = "CO2's workers are the data-parallel ranks, each with the whole model; it runs "
                 "with --zero 1 or 2 (a sharded outer state), --offload and --recompute"};

static int co2_check(const StrategyConfig *c) {
    if (c->tau < 1) return loom_fail("--tau must be >= 1");
    if (c->save_every > 0 && c->save_every % c->tau)
        return loom_fail("--save-every %d: under --co2 checkpoints are taken at round ends, so "
                         "it must be a multiple of --tau %d",
                         c->save_every, c->tau);
    return 0;
}

static void round_log(Strategy *s, RoundLosses *r, int wait) {
    if (!r->inflight) return;
    if (wait)
        comm_wait(&r->req);
    else if (!comm_test(&r->req))
        return;
    for (int i = 0; i < r->n; i++) { // the mean over the workers that contributed
        r->rec[i].loss = r->loss[i] / r->req.contributors;
        strategy_emit(s, &r->rec[i]);
    }
    r->inflight = r->n = 0;
}

// End of a round: hands over the previous round's records (long since reduced), starts this
// round's average.
static void round_send(Strategy *s, Co2State *o) {
    round_log(s, &o->rl[1], 1);
    RoundLosses t = o->rl[1];
    o->rl[1] = o->rl[0], o->rl[0] = t;
    o->rl[1].req = comm_iallreduce_f64(s->grid->dp_comm, o->rl[1].loss, o->rl[1].n);
    o->rl[1].inflight = 1;
}

void co2_round_flush(Strategy *s, Co2State *o) {
    round_log(s, &o->rl[1], 1);
    RoundLosses *r = &o->rl[0];
    if (!r->n) return;
    r->req = comm_iallreduce_f64(s->grid->dp_comm, r->loss, r->n);
    r->inflight = 1;
    round_log(s, r, 1);
}

// While a step waits for communication (a round end waiting for a slower worker, who may be
// paused for the stop agreement), a worker joins a stop it has been asked for.
static void co2_wait_hook(void *ctx) {
    Strategy *s = ctx;
    Co2State *o = s->impl;
    if (o->boundary && !stop_agree_joined(o->agree) &&
        (stop_signal() || stop_agree_heard(o->agree)))
        stop_agree_join(o->agree, o->boundary, o->step_s, stop_grace_left());
}

// At the boundary after step `done`: join a stop (a signal here, or another worker's notice),
// agree on where, and stop there.
static void stop_check(Strategy *s, Co2State *o, int done) {
    const StrategyConfig *c = s->cfg;
    if (o->stop_at < 0) {
        if (stop_signal() || stop_agree_heard(o->agree))
            stop_agree_join(o->agree, done, o->step_s, stop_grace_left());
        int S;
        double step_s, grace;
        if (!stop_agree_joined(o->agree) || stop_agree_wait(o->agree, &S, &step_s, &grace)) return;
        int E = (S + c->tau - 1) / c->tau * c->tau;
        E = E < c->steps ? E : c->steps;
        o->stop_at = (E - S) * step_s <= grace / 2 ? E : S;
        if (s->lead)
            fprintf(stderr,
                    "loom: co2: the workers stop after step %d (%s; the furthest had done %d, "
                    "%.2f s per step, %.0f s of grace left)\n",
                    o->stop_at, o->stop_at % c->tau ? "mid-round" : "a round end", S, step_s,
                    grace);
    }
    if (done == o->stop_at) s->stop = 1;
}

static int co2_create_s(Strategy *s) {
    const StrategyConfig *c = s->cfg;
    Co2State *o = xcalloc(1, sizeof *o);
    s->impl = o;
    // workers never reduce gradients: their data-parallel mechanics run over a group of one
    const Comm *self = comm_split(s->grid->dp_comm, s->grid->dp_comm->rank, 0, "self");
    for (int i = 0; i < 2; i++) {
        o->rl[i].rec = xcalloc((size_t)c->tau, sizeof(StepRecord));
        o->rl[i].loss = xcalloc((size_t)c->tau, sizeof(double));
    }
    o->agree = stop_agree_create(s->grid->dp_comm);
    o->stop_at = -1;
    comm_set_wait_hook(co2_wait_hook, s);
    if (whole_create(s, &o->w, self, 0)) return -1;
    CO2Config cc = whole_co2_config(c);
    if (o->w.sw) { // the anchor a(0) = the parameters, in the tier
        if (swap_co2_begin(o->w.sw)) return -1;
    } else {
        o->co2 = co2_create(s->model, s->grid->dp_comm, &cc);
    }
    return s->resume_dir ? co2_resume(s, o) : 0;
}

static int co2_step(Strategy *s, int step, int boundary) {
    (void)boundary;
    Co2State *o = s->impl;
    const StrategyConfig *c = s->cfg;
    double t0 = now_sec();
    o->boundary = step + 1; // (the wait hook joins a stop at it)
    double loss = whole_grads(s, &o->w, step);
    StepRecord r = {.step = step + 1, .loss = loss};
    if (o->w.failed) return -1;
    whole_update(s, &o->w, step, loss, &r);
    if (o->w.failed) return -1;
    if (!r.applied) { // a local decision: take the other workers down with this one
        char msg[256];
        snprintf(msg, sizeof msg,
                 "step %d: the loss or gradient is not finite (loss %g, grad norm %g); stopping "
                 "the job",
                 step + 1, loss, r.norm);
        comm_abort(EXIT_NUMERIC, msg);
    }
    // the round's end (or the run's: a final, partial round) is part of its step
    StepRecord *rec = &o->rl[0].rec[o->rl[0].n]; // (stays valid when the rounds swap places)
    o->rl[0].loss[o->rl[0].n++] = loss;
    round_log(s, &o->rl[1], 0);
    double wait = 0, overlap = 0;
    if ((step + 1) % c->tau == 0 || step + 1 == c->steps) {
        Swapper *sw = o->w.sw;
        double e0 = sw ? swap_co2_exposed(sw) : co2_exposed(o->co2);
        round_send(s, o); // ahead of the outer average
        if (sw && swap_co2_round_end(sw, ++o->rounds)) return -1;
        if (!sw) co2_round_end(o->co2), overlap = co2_overlap(o->co2);
        wait = (sw ? swap_co2_exposed(sw) : co2_exposed(o->co2)) - e0;
    }
    r.seconds = now_sec() - t0;
    r.exposed = wait;
    r.overlap = overlap;
    *rec = r;
    o->boundary = 0;
    o->step_s = o->step_s > 0 ? 0.8 * o->step_s + 0.2 * r.seconds : r.seconds;
    stop_check(s, o, step + 1);
    return 0;
}

static void co2_drain(Strategy *s, int final) {
    Co2State *o = s->impl;
    round_log(s, &o->rl[1], 1);                                    // records up to here
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
    comm_set_wait_hook(NULL, NULL);
    stop_agree_free(o->agree);
    co2_free(o->co2);
    whole_free(s, &o->w);
    for (int i = 0; i < 2; i++)
        free(o->rl[i].rec), free(o->rl[i].loss);
    free(o);
    s->impl = NULL;
}

const StrategyOps STRATEGY_CO2 = {.name = "co2",
                                  .wants = co2_wants,
                                  .supports = &CO2_SUPPORTS,
                                  .check = co2_check,
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
