// strat_co2.h — what the CO2 strategy's files share: strat_co2.c (the steps, the round ends and
// the stop) and co2_ckpt.c (a worker's own state in checkpoints: at round ends, and mid-round
// when a stop cannot wait for the next round end).
#pragma once
#include "../parallel/co2.h"
#include "../parallel/stop_agree.h"
#include "strat_whole.h"

typedef struct {
    StepRecord *rec; // (tau) the round's records
    double *loss;    // (tau) local losses, then their sums over workers
    int n, inflight;
    CommReq req;
} RoundLosses;

typedef struct {
    Whole w;
    CO2 *co2;          // in memory; with --offload the outer state lives in w.sw's tier
    int rounds;        // rounds ended (--offload)
    RoundLosses rl[2]; // [0]: the current round, [1]: the previous one, in flight
    StopAgree *agree;  // the workers' agreement on the step to stop at (stop_agree.h)
    int boundary;      // while a step runs: the boundary it ends at (0 between steps)
    int stop_at;       // the agreed step to stop after (-1: none)
    double step_s;     // a running mean of the step time (does the next round end fit?)
    int mid;           // the state file being written or read is a mid-round one (offload)
} Co2State;

// The rounds' records up to now (a mid-round stop's save): the previous round's, waited for,
// and the current round's so far, averaged over the workers now. Collective over the workers.
void co2_round_flush(Strategy *s, Co2State *o);
// Resume: every worker's own state from its co2_<rank>.bin (exits with EXIT_INPUT when it is
// bad: the file is this worker's).
int co2_resume(Strategy *s, Co2State *o);
// The strategy's save (StrategyOps.save).
int co2_save(Strategy *s, const char *dir, CkptMeta *meta, int final, CkptExtraFn extra,
             void *extra_ctx, int keep);
