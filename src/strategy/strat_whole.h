// strat_whole.h — what the strategies that keep the whole model on every rank share
// (strat_dp.c, strat_co2.c): the data-parallel mechanics (parallel/data_parallel.h) with the
// optimizer over the slice this rank owns, one workspace, and the step's micro-batches.
#pragma once
#include "../offload/swap.h"
#include "../parallel/data_parallel.h"
#include "strategy.h"

typedef struct {
    DataParallel *dp;
    AdamW opt;
    Workspace ws;
    int *inputs, *targets;
    int grad_ranks; // ranks a gradient is averaged over (the dp size; 1 under CO2)
    Swapper *sw;    // block swapping (--offload): the state lives in its tier, not in memory
    int failed;     // the tier failed (loom_errmsg): the step returns -1
    int fused;      // swapping updates each unit right after its backward (SwapConfig.fused)
    // With swapping: host memory the strategy keeps beside the swapped model (a peer's outer
    // state and its swarm's buffers), counted in --fast-mem with the fixed overhead; set before
    // whole_create, with what it is in words.
    double kept;
    const char *kept_what;
    const Strategy *owner;
    // With swapping, set before whole_create by a strategy whose ranks beside the data-parallel
    // group must run the same units (a tensor- or context-parallel part): the ranks that plan
    // together (NULL: the dp group), per-tensor norms (SwapConfig.tensor_norm) and the rank in
    // the scratch directory's name.
    const Comm *plan_comm;
    int tensor_norm, tier_rank;
} Whole;

// Sets up the mechanics over grad_comm with ZeRO stage `zero`, the optimizer for the owned
// slice (its moments read back on resume) and the workspace. Returns 0 or -1.
int whole_create(Strategy *s, Whole *w, const Comm *grad_comm, int zero);
void whole_free(Strategy *s, Whole *w);
// The step's K micro-batches, forward and backward, and the reductions of their gradients;
// returns this rank's mean loss.
double whole_grads(Strategy *s, Whole *w, int step);
// Global gradient norm, then — if it and the loss are finite — clipping and AdamW on the owned
// slice. Fills the record's norm, lr and applied.
void whole_update(Strategy *s, Whole *w, int step, double loss, StepRecord *r);
// The same with the global Σ g² given (a strategy whose ranks hold parts of tensors: --tp).
void whole_update_sumsq(Strategy *s, Whole *w, int step, double loss, double sumsq, StepRecord *r);
double whole_evaluate(Strategy *s, Whole *w);
// The checkpoint: `writes` ranks write the owned slice with their moments; rank_files (may be
// NULL) lets every rank add files of its own. Collective over the dp communicator.
int whole_save(Strategy *s, Whole *w, const char *dir, CkptMeta *meta, int writes,
               CkptExtraFn extra, void *extra_ctx, CkptExtraFn rank_files, void *rank_ctx,
               int keep);
int whole_full_params(Strategy *s, Whole *w, float *host, int grads);
// StrategyOps.param_source: with block swapping, the tier and a slot (1); else 0.
int whole_param_source(Whole *w, ParamSource *src);

// The same with block swapping (whole_swap.c); strat_whole.c's functions dispatch to these.
int whole_swap_create(Strategy *s, Whole *w, const Comm *grad_comm, int zero);
double whole_swap_grads(Strategy *s, Whole *w, int step);
// The step's update once whole_update has filled r's norm, lr and applied (grad_scale: the
// clipping factor); the record's I/O wait.
void whole_swap_apply(Whole *w, StepRecord *r, float grad_scale);
double whole_swap_evaluate(Strategy *s, Whole *w);
CkptShard whole_swap_shard(Whole *w);
// Reads the parameters [at, at + n) from the tier into host memory.
int whole_swap_full_params(Whole *w, float *host, size_t at, size_t n);
// Writes the parameters [at, at + n) into the tier from host memory (between steps: loom peer's
// x ← a, a span at a time).
int whole_swap_set_params(Whole *w, const float *host, size_t at, size_t n);
// The lead rank's line on what swapping cost per step (bytes, the update pass, I/O waits).
void whole_swap_summary(Whole *w);
// CO2's outer rule from the flags.
CO2Config whole_co2_config(const StrategyConfig *c);
