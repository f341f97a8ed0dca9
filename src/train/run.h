// run.h — what one training process holds for the loop (loop.c) and how it is set up and torn
// down (setup.c): the grid, the backend, the model with its initial or resumed parameters, the
// data, the checkpoint it resumed from, metrics and progress.
#pragma once
#include "../data/shard.h"
#include "../io/checkpoint.h"
#include "../io/metrics.h"
#include "../model/gpt.h"
#include "../optim/loss_scale.h"
#include "../parallel/grid.h"
#include "../rng.h"
#include "../strategy/strategy.h"
#include "progress.h"
#include "trainer.h"

typedef struct {
    const TrainArgs *a;
    Comm *world;
    Grid grid;
    int lead;  // world rank 0: prints, writes metrics and exports
    GPT model; // the layout; the strategy allocates and fills what this rank keeps
    DataSet train, val;
    int has_val;
    Rng rng;
    char tokenizer_dir[4200]; // the data's tokenizer directory, copied into checkpoints
    char tokenizer_fp[32];    // what identifies it ("crc32:…" of its files, or "none")
    char resume_dir[4096];    // the step directory resumed from ("" for a fresh run)
    CkptMeta resume;          // its manifest
    int start;                // the first step
    uint64_t window0;         // the first data window this run reads (the resumed position)
    Metrics mt;
    Progress pg;
    double peak_gflops; // MFU's denominator: --peak-gflops, or measured (lead rank; NaN elsewhere)
    StrategyConfig sc;
    StrategyData data;
    size_t fast_mem; // --fast-mem in bytes
    size_t host_mem; // --host-mem in bytes (0: not given)
    int save_lock;   // the --save directory's lock (io/dirlock.h; lead rank), or -1
    LossScale ls;    // --loss-scale (the strategy reads it through sc.loss_scale)
} Run;

// Stops the run: the lead rank prints loom_errmsg, every rank exits with `code`.
_Noreturn void run_fail(const Run *r, int code);
// Grid, backend, model (initial, --init or resumed parameters), data, the --save directory's
// lock, metrics file and the strategy configuration; exits through run_fail on any error.
void run_setup(Run *r);
void run_teardown(Run *r);
// The peak MFU is reported against (r->peak_gflops): --peak-gflops, or (0) the backend's probe
// on the lead rank, the one that prints progress and writes metrics, which says what it measured.
// Called once the run is set up (a probe before a setup error would delay only rank 0's message).
void run_peak(Run *r);
// The next unread data window after `step` steps (every rank's micro-batches of the steps this
// run took follow the resumed position, whatever layout wrote it).
uint64_t run_data_window(const Run *r, int step);
// The manifest of a checkpoint after `step` steps (train_args allocated; the caller frees it).
CkptMeta run_ckpt_meta(const Run *r, int step);
// Copies the data's tokenizer into a step directory (a CkptExtraFn; ctx is the Run).
int run_save_extras(const char *step_dir, void *ctx);
