// strategy.h — the Strategy interface: how one optimizer step is distributed over the process
// grid. The training loop (train/loop.c) only loops — batch → strategy step → metrics →
// validation → checkpoint — and every way of running a step is one implementation of this
// table, in its own file, listed once in registry.c:
//   strat_dp.c        single process, data parallel, ZeRO 1/2/3
//   strat_co2.c       CO2: local steps + a one-round-stale outer average
//   strat_pipeline.c  pipeline stages: gpipe, 1f1b, 2bw
// A strategy owns the state of its step (optimizer moments, reductions in flight, stage
// buffers), decides what its rank writes into a checkpoint and reads back on resume, and hands
// the loop one StepRecord per optimizer step, possibly late (CO2 averages a round's losses in
// the background; 2bw reports a step when its delayed update lands).
#pragma once
#include "../io/checkpoint.h"
#include "../model/gpt.h"
#include "../optim/optim.h"
#include "../parallel/grid.h"

// The flags that shape a step (filled by the loop from the command line).
typedef struct {
    int batch, seq, grad_accum, steps, recompute;
    OptConfig opt;
    int val_windows; // windows a validation pass reads (already capped to the data)
    int save_every;  // checkpoints every N steps (0: only at the end or none)
    // data parallel / ZeRO
    int dp; // data-parallel ranks (--dp; CO2's workers)
    int zero;
    float bucket_mb;
    int llama;      // --arch llama (compose_check refuses what its block does not run with)
    int dump_grads; // --dump-grads was given (the strategy must be able to hand gradients out)
    // CO2
    int co2, tau, gap_adaptive;
    float outer_lr, outer_momentum, gap_penalty, outer_clip;
    // tensor parallelism (Megatron 1D; tp_2d: Colossal-AI 2D SUMMA), sequence parallelism within
    // tp, context parallelism (ring attention over cp ranks)
    int tp, tp_2d, sp, cp;
    // pipeline
    int pp;
    const char *schedule;     // gpipe | 1f1b | 2bw
    const char *stage_layers; // NULL: balanced
    // block swapping (offload/): the state in a slow tier under offload_dir, fast_mem in memory
    int offload;
    int offload_host; // --offload host: the slow tier is host memory, the fast one the device's
                      // (offload_dir NULL)
    const char *offload_dir, *offload_units, *offload_profile;
    size_t host_mem; // --host-mem (0: none): under a device, the host memory above offload_dir
    size_t fast_mem;
    int offload_prefetch, threads;
    int nonfinite_skip; // --on-nonfinite skip (a non-finite step must be skippable)
    // --loss-scale: the loop's scaler (NULL: off). The step multiplies the backward's starting
    // gradient by its scale and divides the gradients by it before clipping and the update.
    const struct LossScale *loss_scale;
    // loom peer (swarm/): CO2's rule over the peers in the swarm (with tau, outer_* above)
    int peer, min_peers;
    const char *peer_id, *listen, *advertise, *bootstrap, *secret;
    float peer_timeout;
    int outer_compress;    // --outer-compress: 0 none, 1 int8, 2 topk (swarm/compress.h)
    int sums_int8;         // --outer-compress-sums: the sharded all-gather in int8
    int peer_exchange;     // --peer-exchange: 0 all, 1 sharded (swarm/swarm_shard.c)
    float topk_frac;       // --topk-frac (topk)
    int topk_2bit;         // --topk-values 2bit (topk)
    const char *device;    // the backend's name
    const char *tokenizer; // what identifies the data's tokenizer (peers must share it)
    int shuffle, seed;     // the data order's (peers must share it; the seed only with shuffle)
} StrategyConfig;

// Where a strategy gets its data: micro-batch j of 0-based optimizer step `step` for this
// rank's data-parallel index, validation window w, and, for a fresh run, the initial parameters
// (random or --init) of any flat range, so that a rank materialises only what it keeps (a
// resumed strategy streams its range from s->resume_dir with checkpoint_read_into instead).
typedef struct {
    void *ctx;
    void (*train)(void *ctx, int step, int j, int *inputs, int *targets);
    void (*val)(void *ctx, int w, int *inputs, int *targets);
    // parameters [lo, hi) into dst (backend memory, hi-lo floats); 0 or -1 (loom_errmsg)
    int (*params)(void *ctx, size_t lo, size_t hi, float *dst);
    // the same, handed over in ascending pieces of host memory to sink (for a state that lives
    // in a slow tier); 0 or -1
    int (*params_stream)(void *ctx, size_t lo, size_t hi, GptSink sink, void *sctx);
    // training window w of the data (a strategy that assigns windows itself: loom peer)
    void (*window)(void *ctx, uint64_t w, int *inputs, int *targets);
} StrategyData;

// One optimizer step, as the loop logs it.
typedef struct {
    int step;          // 1-based
    double loss;       // mean over the step's tokens on every data-parallel rank / worker
    double norm;       // global gradient norm (before clipping)
    float lr;          //
    double seconds;    // wall time of the step
    double exposed;    // seconds it blocked on communication (< 0: no communication)
    double overlap;    // how long the communication it waited for had been in flight when
                       // the wait began, the least over its waits (0: none recorded)
    double io;         // seconds it blocked on the slow tier of block swapping (< 0: none)
    int applied;       // 0: the loss or gradient was not finite and the update was not applied
    int must_stop;     // with applied 0: the strategy cannot skip it (the run stops)
    uint64_t window;   // > 0: the next unread data window after this step (else the loop's count)
    const char *extra; // more metrics fields, JSON text without braces (NULL: none; the
                       // strategy keeps it alive until the next record is taken)
} StepRecord;

typedef struct Strategy Strategy;

// The parameters read range by range (flat [at, at+n) into dst, host memory; 0 or -1), and
// host memory the strategy lends until its next step: scratch_floats floats of it.
typedef struct {
    GptSource fetch;
    void *ctx;
    float *scratch;
    size_t scratch_floats;
} ParamSource;

typedef struct {
    const char *name;
    // Selected for this configuration? The first entry of the registry that wants it runs.
    int (*wants)(const StrategyConfig *c);
    // What it implements (compose.h): the features it runs and the pairs of them it cannot;
    // strategy_find refuses everything else with one message naming both flags.
    const struct Supports *supports;
    // The values it cannot honour (a shape that does not divide, --tau 0): loom_fail naming
    // the flag, -1. Which options combine is `supports`' business, not this.
    int (*check)(const StrategyConfig *c);
    // Sets up from s->model (its layout; no parameter buffers yet) and s->grid: allocates what
    // this rank keeps and fills it through s->data->params; on resume (s->resume_dir) reads its
    // own state. Returns 0 or -1 (loom_errmsg).
    int (*create)(Strategy *s);
    // Runs optimizer step `step` (0-based). `boundary`: the loop validates, saves or stops
    // after it, so no later step's work may start. Returns 0 or -1.
    int (*step)(Strategy *s, int step, int boundary);
    // Completes work in flight before validation or a save (final = 1: after the last step,
    // leaving the trained model in place).
    void (*drain)(Strategy *s, int final);
    // Mean validation loss over s->cfg->val_windows windows (every rank gets it).
    double (*evaluate)(Strategy *s);
    // Collective checkpoint after `meta->step` steps (final: the end of the run).
    int (*save)(Strategy *s, const char *dir, CkptMeta *meta, int final, CkptExtraFn extra,
                void *extra_ctx, int keep);
    // Collective: the whole model's parameters (grads = 1: gradients) into host (nparams floats
    // on every rank: the gathers fill every rank's copy). Returns 0 or -1.
    int (*full_params)(Strategy *s, float *host, int grads);
    // Optional: where an export reads the whole model's parameters without a copy of them
    // (block swapping: the rank's tier, through the executor's idle slot). Returns 1 and fills
    // *src when this rank can do so by itself (not collective), 0 when full_params is the way.
    int (*param_source)(Strategy *s, ParamSource *src);
    // A communication operation failed (comm.h): a strategy that can lose a member carries on
    // (the operation completes with status -1 and its contributors); over MPI the job ends
    // (strategy_end_job).
    void (*comm_failed)(Strategy *s, int code, const char *msg);
    // One line on how steps run, for the run's banner (e.g. "dp 2 (zero 1)").
    void (*describe)(const Strategy *s, char *buf, size_t n);
    // Prints (lead rank) what the strategy held and how much communication was exposed.
    void (*summary)(Strategy *s, double exposed_s, double step_s);
    void (*destroy)(Strategy *s);
    // The next unread data window after `step` steps, for checkpoints (NULL: the loop's count).
    uint64_t (*data_window)(Strategy *s, int step);
} StrategyOps;

struct Strategy {
    const StrategyOps *ops;
    GPT *model;
    const Grid *grid;
    const StrategyConfig *cfg;
    const StrategyData *data;
    const char *resume_dir; // the step directory resumed from (NULL: a fresh run)
    const CkptMeta *resume; // its manifest
    int start;              // first step of this run
    int next_step;          // >= 0: the loop goes on at this step (set by a strategy whose clock
                            // is not its own: a peer that re-synced with its swarm); else -1
    int lead;               // world rank 0
    int stop;               // every rank agreed to stop after the step just run (a stop signal
                            // reached one of them; see strategy_stop_vote): the loop saves and
                            // exits. Set only by the strategy, the same step on every rank.
    StepRecord *rec;        // records not yet taken by the loop
    int nrec, caprec;
    void *impl;
};

// The strategy for this configuration (registry.c), checked against what it supports and what
// the backend can do (compose.h), then its own value checks; NULL with loom_errmsg.
const StrategyOps *strategy_find(const StrategyConfig *c, const Backend *be);
// Hands a record to the loop (strategies call it when a step's numbers are known).
void strategy_emit(Strategy *s, const StepRecord *r);
// The oldest record not yet taken: 1 and *r, or 0.
int strategy_take(Strategy *s, StepRecord *r);
// Stopping on a signal (stop.h) at the same step on every rank, with no collective of its own:
// each strategy adds this rank's vote (1: a stop signal arrived here, else 0) to a reduction its
// step already makes that reaches every rank (a sum over the whole grid, directly or as sums of
// sums over its axes), and hands the reduced sum to strategy_stop_tally, which sets s->stop when
// it is > 0. A strategy whose steps reduce nothing across ranks agrees through
// parallel/stop_agree.h (CO2) or decides alone (a peer). In a single process the vote is the
// tally.
double strategy_stop_vote(void);
void strategy_stop_tally(Strategy *s, double votes);
// comm_failed for strategies over MPI, which cannot go on without a member: ends the job.
_Noreturn void strategy_end_job(Strategy *s, int code, const char *msg);
