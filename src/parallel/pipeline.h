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
// With --dp W each stage is replicated W times; replicas all-reduce their stage's gradients.
// Loss, gradient norm and clipping are global.
#pragma once
#include "../model/gpt.h"
#include "../train/optim.h"
#include "grid.h"

typedef enum { SCHED_GPIPE, SCHED_1F1B, SCHED_2BW } Schedule;

typedef struct {
    Schedule schedule;
    int K, B, T, recompute;
    const char *stage_layers; // "3,3,2": transformer layers per stage (NULL: balanced)
    float grad_clip;
} PipelineConfig;

typedef struct {
    void *ctx;
    // The micro-batch j of optimizer step `step` for this data-parallel rank.
    void (*batch)(void *ctx, int step, int j, int *inputs, int *targets);
    // Called on every rank once step `step` (1-based) is applied; loss and norm are global.
    // Returns non-zero to stop (e.g. a non-finite loss).
    int (*report)(void *ctx, int step, double loss, double norm, float lr, double seconds);
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
// Bytes this stage held in the last run: weights (both versions under 2bw), gradients, AdamW.
void pipeline_memory(double *weights, double *grads, double *opt);
