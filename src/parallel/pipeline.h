// pipeline.h — pipeline parallelism over the grid's pp axis: GPipe, 1F1B (PipeDream-Flush) and
// PipeDream-2BW.
//
// The block list [embed, layer 0..L-1, head] is cut into D contiguous stages; stage s runs on
// pipeline coordinate s. Activations go forward and activation gradients backward by
// non-blocking point-to-point messages. A step is K micro-batches (--grad-accum):
//   gpipe: all K forwards, all K backwards, flush, optimizer step.
//   1f1b : warm-up of D-s-1 forwards, then one forward / one backward, cool-down, flush, step.
//          At most D-s micro-batches of activations are held on stage s.
//   2bw  : 1F1B over the whole stream of micro-batches with no flush. Two weight versions per
//          stage; micro-batches of batch t run forward and backward on version max(t-1, 0); the
//          K gradients of batch t are coalesced into one update of the newest version:
//          W(t+1) = W(t) - opt(grad f(W(t-1))). AdamW moments are not duplicated.
// The LM head is tied to the token embedding: the last stage keeps a replica of wte; its
// gradient is summed with the first stage's after every batch and both apply the same update.
// With --dp W each stage is replicated W times; replicas all-reduce their stage's gradients
// (gpipe/1f1b: block by block during the last micro-batch's backward; 2bw: in the background
// chain). With --zero 1 the replicas also shard the stage's AdamW moments: each updates its
// 1/W of the stage and the new weights are all-gathered. Loss, gradient norm and clipping are
// global. Validation (--val-every) is a forward-only pass of the windows through the stages.
#pragma once
#include "../model/gpt.h"
#include "../train/optim.h"
#include "grid.h"

typedef enum { SCHED_GPIPE, SCHED_1F1B, SCHED_2BW } Schedule;

typedef struct {
    Schedule schedule;
    int K, B, T, recompute;
    int zero;                   // 1: shard AdamW moments over the stage's dp replicas
    int val_every, val_windows; // validation every N steps (0: only at the end) over N windows
    int save_every;             // checkpoint every N steps (0: only at the end, when io->save)
    const char *stage_layers;   // "3,3,2": transformer layers per stage (NULL: balanced)
    float grad_clip;
} PipelineConfig;

// What one rank contributes to a checkpoint: the flat range [lo, hi) of the newest weights, the
// AdamW moments and, under 2bw, the previous weight version (host buffers).
typedef struct {
    size_t lo, hi;
    const float *params, *m, *v, *prev;
} PipeShard;

typedef struct {
    void *ctx;
    // The micro-batch j of optimizer step `step` for this data-parallel rank.
    void (*batch)(void *ctx, int step, int j, int *inputs, int *targets);
    // Called on every rank once step `step` (1-based) is applied; loss and norm are global.
    // Returns non-zero to stop (e.g. a non-finite loss).
    // exposed: seconds this batch blocked on gradient reductions / weight gathers.
    int (*report)(void *ctx, int step, double loss, double norm, float lr, double seconds,
                  double exposed);
    // Validation window w (NULL: no validation data), and where the mean loss goes (every rank).
    void (*val_batch)(void *ctx, int w, int *inputs, int *targets);
    void (*val_report)(void *ctx, int step, double loss);
    // Checkpoint after `step` steps (NULL: none). Collective: every rank calls it at the same
    // steps, with its shard or NULL (another replica or stage writes that range). opt_t is the
    // AdamW step count. Returns non-zero to stop.
    int (*save)(void *ctx, int step, int opt_t, const PipeShard *shard);
    // Resume (start > 0; NULL: none): the previous weight version of [lo, hi) into prev (left
    // as it is when the checkpoint has none) and the moments of [olo, ohi) into m and v.
    int (*load)(void *ctx, size_t lo, size_t hi, float *prev, size_t olo, size_t ohi, float *m,
                float *v);
} PipelineIO;

// Splits the blocks into g->pp stages; fills [b0, b1) for stage s. Fails on a bad --stage-layers.
int pipeline_partition(const GPT *m, int D, int s, const char *stage_layers, int *b0, int *b1);
// Trains steps [start, steps). Each stage keeps only its own range of weights (two versions
// under 2bw), gradients and AdamW moments (opt supplies the configuration and step count;
// its own buffers are not used). On return m->params holds this stage's blocks (the newest
// version); pipeline_gather_params completes it. Returns 0, or a report callback's non-zero.
int pipeline_train(GPT *m, const Grid *g, const PipelineConfig *pc, AdamW *opt, int start,
                   int steps, const PipelineIO *io);
// Makes every stage's copy of the parameters complete (each stage contributes its blocks).
int pipeline_gather_params(GPT *m, const Grid *g, const char *stage_layers);
// Peak number of micro-batches whose activations a stage held in the last run.
int pipeline_peak_inflight(void);
// Bytes stage 0 held in the last run: weights (both versions under 2bw), gradients, AdamW
// moments, and activations (one workspace per micro-batch it can hold: K under gpipe, D-s
// under 1f1b/2bw).
void pipeline_memory(double *weights, double *grads, double *opt, double *acts);
