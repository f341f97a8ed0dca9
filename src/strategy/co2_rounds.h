// co2_rounds.h — what CO2 over whole-model workers (strat_co2.c) and CO2 over tensor- and
// context-parallel workers (strat_tp_co2.c) share: the flags' check, the rounds' losses (summed
// over the workers by one small non-blocking all-reduce per round, handed to the loop when it
// lands) and the stop agreement (parallel/stop_agree.h) with its decision: run on to the next
// round end when it fits in half the grace period left, else stop at the furthest step reached.
#pragma once
#include "../parallel/stop_agree.h"
#include "strategy.h"

typedef struct {
    StepRecord *rec; // (tau) the round's records
    double *loss;    // (tau) local losses, then their sums over workers
    int n, inflight;
    CommReq req;
} RoundLosses;

typedef struct {
    RoundLosses rl[2];   // [0]: the current round, [1]: the previous one, in flight
    const Comm *workers; // the losses are averaged over it (one rank of every worker)
    StopAgree *agree;    // the agreement on the step to stop at (stop_agree.h)
    int boundary;        // while a step runs: the boundary it ends at (0 between steps)
    int stop_at;         // the agreed step to stop after (-1: none)
    double step_s;       // a running mean of the step time (does the next round end fit?)
} Co2Rounds;

// --tau and --save-every (checkpoints at round ends). 0, or -1 (loom_errmsg).
int co2_check_config(const StrategyConfig *c);
// Losses averaged over `workers`; the stop agreed over `agree_ranks` (every rank that must stop
// at the same step). Installs the communication wait hook (co2_rounds_free removes it).
// Collective over agree_ranks.
void co2_rounds_init(Co2Rounds *r, int tau, const Comm *workers, const Comm *agree_ranks);
void co2_rounds_free(Co2Rounds *r);
// A step begins: it ends at boundary `step + 1` (the wait hook joins a stop there).
void co2_rounds_begin(Co2Rounds *r, int step);
// The step's loss joins the round; returns the slot its record goes to (stays valid when the
// rounds swap places). Hands over the previous round's records when they have landed.
StepRecord *co2_rounds_add(Strategy *s, Co2Rounds *r, double loss);
// End of a round: hands over the previous round's records, starts this round's average.
void co2_rounds_send(Strategy *s, Co2Rounds *r);
// The rounds' records up to now (a mid-round stop's save, or the end): the previous round's,
// waited for, and (flush) the current round's so far, averaged over the workers now.
void co2_rounds_drain(Strategy *s, Co2Rounds *r);
void co2_rounds_flush(Strategy *s, Co2Rounds *r);
// The outer step at a round's end: runs the outer average, adds what it waited for (exposed)
// and how long that had been in flight (overlap) to *w; 0, or -1 (loom_errmsg).
typedef struct {
    double exposed, overlap;
} Co2Wait;
typedef int (*Co2RoundEnd)(void *ctx, Co2Wait *w);
// What every CO2 worker does after its local update of step `step` (r: its record, r->seconds
// counted from t0): a non-finite step takes the job down (a worker's own decision ends them
// all); the loss joins the round; at a round's end (or the run's) the previous round's records
// are handed over and round_end(ctx) runs the outer step; then the record is kept and the stop
// agreement runs. 0, or -1 when round_end failed.
int co2_rounds_step(Strategy *s, Co2Rounds *rr, StepRecord *r, int step, double t0,
                    Co2RoundEnd round_end, void *ctx);
// After step `done` (seconds long): join a stop (a signal here, or another rank's notice), agree
// on where, and set s->stop at that step.
void co2_rounds_end_step(Strategy *s, Co2Rounds *r, int done, double seconds);
