// strat_pp_co2.h — CO2 over pipeline workers (--dp W --pp D --co2, gpipe or 1f1b), run by
// strat_pipeline.c: a worker is one pipeline (its D stages on the pp ranks of one dp replica);
// the pipeline takes its inner steps with nothing reduced over the replicas (PipelineConfig's
// local) and the worker's own norm; strat_pp_co2.c adds the rounds, the outer rule per stage over
// dp_comm, the stop agreement and the per-rank CO2 state files.
#pragma once
#include "../parallel/pipeline.h"
#include "ckpt_save.h"
#include "strategy.h"

typedef struct PpCo2 PpCo2;

// After pipeline_create (the stage's weights are a(0)): the outer state of this rank's stage
// over dp_comm; on resume, the rank's own CO2 state file. NULL when that fails.
PpCo2 *pp_co2_create(Strategy *s, Pipeline *p);
void pp_co2_free(PpCo2 *o);
// A step begins at t0 (the stop agreement's wait hook joins at its end).
void pp_co2_begin(PpCo2 *o, int step, double t0);
// The pipeline's report of the step (the worker's loss and norm).
void pp_co2_report(PpCo2 *o, const StepRecord *r);
// After the step: the round's records, the round end's outer rule, the stop agreement.
void pp_co2_step(PpCo2 *o, Strategy *s, int step);
// The records up to here; final: the stage's weights become the final anchor.
void pp_co2_drain(PpCo2 *o, Strategy *s, int final);
// Before a save (not the final one), at a round end: the manifest's CO2 fields and the rank's
// state file (*fn, *ctx, for ckpt_save_collective's rank_files). -1 mid-round (refused).
int pp_co2_save_files(PpCo2 *o, Strategy *s, CkptMeta *meta, CkptExtraFn *fn, void **ctx);
void pp_co2_describe(const Strategy *s, char *buf, size_t n);
void pp_co2_summary(const PpCo2 *o, const Strategy *s, double exposed_s, double step_s);
