// co2_rounds.c — CO2's rounds' losses and stop agreement, for strat_co2.c and strat_tp_co2.c
// (see co2_rounds.h).
#include "co2_rounds.h"

#include <stdio.h>
#include <stdlib.h>

#include "../common.h"
#include "../stop.h"

int co2_check_config(const StrategyConfig *c) {
    if (c->tau < 1) return loom_fail("--tau must be >= 1");
    if (c->save_every > 0 && c->save_every % c->tau)
        return loom_fail("--save-every %d: under --co2 checkpoints are taken at round ends, so "
                         "it must be a multiple of --tau %d",
                         c->save_every, c->tau);
    return 0;
}

// While a step waits for communication (a round end waiting for a slower worker, or a tensor-
// parallel block waiting for a rank of its group, who may be paused for the stop agreement), a
// rank joins a stop it has been asked for.
static void wait_hook(void *ctx) {
    Co2Rounds *r = ctx;
    if (r->boundary && !stop_agree_joined(r->agree) &&
        (stop_signal() || stop_agree_heard(r->agree)))
        stop_agree_join(r->agree, r->boundary, r->step_s, stop_grace_left());
}

void co2_rounds_init(Co2Rounds *r, int tau, const Comm *workers, const Comm *agree_ranks) {
    for (int i = 0; i < 2; i++) {
        r->rl[i].rec = xcalloc((size_t)tau, sizeof(StepRecord));
        r->rl[i].loss = xcalloc((size_t)tau, sizeof(double));
    }
    r->workers = workers;
    r->agree = stop_agree_create(agree_ranks);
    r->stop_at = -1;
    comm_set_wait_hook(wait_hook, r);
}

void co2_rounds_free(Co2Rounds *r) {
    comm_set_wait_hook(NULL, NULL);
    stop_agree_free(r->agree);
    for (int i = 0; i < 2; i++)
        free(r->rl[i].rec), free(r->rl[i].loss);
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

void co2_rounds_begin(Co2Rounds *r, int step) { r->boundary = step + 1; }

StepRecord *co2_rounds_add(Strategy *s, Co2Rounds *r, double loss) {
    StepRecord *rec = &r->rl[0].rec[r->rl[0].n];
    r->rl[0].loss[r->rl[0].n++] = loss;
    round_log(s, &r->rl[1], 0);
    return rec;
}

void co2_rounds_send(Strategy *s, Co2Rounds *r) {
    round_log(s, &r->rl[1], 1);
    RoundLosses t = r->rl[1];
    r->rl[1] = r->rl[0], r->rl[0] = t;
    r->rl[1].req = comm_iallreduce_f64(r->workers, r->rl[1].loss, r->rl[1].n);
    r->rl[1].inflight = 1;
}

void co2_rounds_drain(Strategy *s, Co2Rounds *r) { round_log(s, &r->rl[1], 1); }

void co2_rounds_flush(Strategy *s, Co2Rounds *r) {
    round_log(s, &r->rl[1], 1);
    RoundLosses *l = &r->rl[0];
    if (!l->n) return;
    l->req = comm_iallreduce_f64(r->workers, l->loss, l->n);
    l->inflight = 1;
    round_log(s, l, 1);
}

void co2_rounds_end_step(Strategy *s, Co2Rounds *r, int done, double seconds) {
    const StrategyConfig *c = s->cfg;
    r->boundary = 0;
    r->step_s = r->step_s > 0 ? 0.8 * r->step_s + 0.2 * seconds : seconds;
    if (r->stop_at < 0) {
        if (stop_signal() || stop_agree_heard(r->agree))
            stop_agree_join(r->agree, done, r->step_s, stop_grace_left());
        int S;
        double step_s, grace;
        if (!stop_agree_joined(r->agree) || stop_agree_wait(r->agree, &S, &step_s, &grace)) return;
        int E = (S + c->tau - 1) / c->tau * c->tau;
        E = E < c->steps ? E : c->steps;
        r->stop_at = (E - S) * step_s <= grace / 2 ? E : S;
        if (s->lead)
            fprintf(stderr,
                    "loom: co2: the workers stop after step %d (%s; the furthest had done %d, "
                    "%.2f s per step, %.0f s of grace left)\n",
                    r->stop_at, r->stop_at % c->tau ? "mid-round" : "a round end", S, step_s,
                    grace);
    }
    if (done == r->stop_at) s->stop = 1;
}

int co2_rounds_step(Strategy *s, Co2Rounds *rr, StepRecord *r, int step, double t0,
                    Co2RoundEnd round_end, void *ctx) {
    const StrategyConfig *c = s->cfg;
    if (!r->applied) { // a worker's own decision: take the other workers down with this one
        char msg[256];
        snprintf(msg, sizeof msg,
                 "step %d: the loss or gradient is not finite (loss %g, grad norm %g); stopping "
                 "the job",
                 step + 1, r->loss, r->norm);
        comm_abort(EXIT_NUMERIC, msg);
    }
    StepRecord *rec = co2_rounds_add(s, rr, r->loss);
    Co2Wait w = {0, 0};
    if ((step + 1) % c->tau == 0 || step + 1 == c->steps) { // a round's end (or the run's)
        co2_rounds_send(s, rr);                             // ahead of the outer average
        if (round_end(ctx, &w)) return -1;
    }
    r->seconds = now_sec() - t0;
    r->exposed = w.exposed;
    r->overlap = w.overlap;
    *rec = *r;
    co2_rounds_end_step(s, rr, step + 1, r->seconds);
    return 0;
}
