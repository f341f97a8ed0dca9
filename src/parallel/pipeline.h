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
// 1/W of the stage and the new weights are all-gathered; --zero 2 (gpipe/1f1b) shards its
// gradients too (reduce-scattered block by block after every micro-batch's backward), --zero 3
// its weights (each block all-gathered before it runs); the tied wte replica on the last stage
// and stage 0's embedding gradient stay whole (pipeline_zero.c). Loss, gradient norm and clipping
// are global — except with pc->local (CO2 workers): then every dp replica's pipeline reduces
// nothing over the replicas (its gradient group is the rank alone) and reports its own loss.
// Validation (--val-every) is a forward-only pass of the windows through the stages.
// The model may be a Megatron 1D tensor-parallel part (m->tp.n > 1, its hooks installed by the
// strategy): every stage then holds its part's blocks, activations go to the next stage's rank
// of the same tp index, the tied embedding's rows to the same tp rank of the other end, and the
// norm is summed over every stage and tp rank of a replica (replicated tensors counted once).
// With context parallelism (m->cp.n > 1, grid cp > 1) every rank runs its chunks of the
// micro-batches (pc->T = T/cp tokens): the gradient group (reductions, ZeRO-1 slices, the loss
// mean) is dp x cp, and messages between stages stay within equal (dp, cp, tp) coordinates.
// With sequence parallelism (m->tp.sp) they carry the rank's workspace_rows.
#pragma once
#include "../model/gpt.h"
#include "../optim/optim.h"
#include "grid.h"

typedef enum { SCHED_GPIPE, SCHED_1F1B, SCHED_2BW } Schedule;

typedef struct {
    Schedule schedule;
    int K, B, T, recompute;
    int zero;                 // 1: shard AdamW moments over the stage's dp replicas; 2: and
                              // gradients; 3: and weights (gpipe/1f1b)
    int val_windows;          // windows a validation pass reads
    const char *stage_layers; // "3,3,2": transformer layers per stage (NULL: balanced)
    float grad_clip;
    int local; // CO2 (gpipe/1f1b, no cp): every dp replica is its own worker; its gradients,
               // loss and norm stay its own (nothing is reduced over the replicas)
    // --offload (ZeRO 0; swap_ops NULL: in memory): the stage's parameters (both versions under
    // 2bw), gradients and moments in its tier — a scratch file under offload_dir, or host memory
    // under a device when offload_dir is NULL (--offload host) — its blocks run from slots within
    // fast_mem bytes (pipeline_swap.c)
    const char *offload_dir;
    size_t host_mem; // --host-mem (0: none): host memory above the disk under a device
    size_t fast_mem;
    const struct PipeSwapOps *swap_ops; // the swapped stage's implementation
                                        // (strategy/pipeline_swap.c: the offload tier)
} PipelineConfig;

// What one rank contributes to a checkpoint: the flat range [lo, hi) of the newest weights, the
// AdamW moments and, under 2bw, the previous weight version (host buffers).
typedef struct {
    size_t lo, hi;
    const float *params, *m, *v, *prev;
    // --offload: the arrays are read through fetch instead (CkptShard.fetch: array 0 params,
    // 1 m, 2 v; flat offset at, n floats into dst), the state being in the stage's tier
    int (*fetch)(void *ctx, int array, size_t at, size_t n, float *dst);
    void *fetch_ctx;
    float *scratch; // --offload: the stage's idle slot, lent until its next step (else NULL)
    size_t scratch_floats;
} PipeShard;

typedef struct {
    void *ctx;
    // The micro-batch j of optimizer step `step` for this data-parallel rank.
    void (*batch)(void *ctx, int step, int j, int *inputs, int *targets);
    // Step `step` (1-based) is known, on every rank: loss and norm are global; seconds is its
    // wall time; exposed the seconds it blocked on reductions and gathers; applied 0 when the
    // loss or norm was not finite (the update was not applied and the pipeline stops).
    void (*report)(void *ctx, int step, double loss, double norm, float lr, double seconds,
                   double exposed, int applied);
    // The initial parameters of the flat range [lo, hi) into dst (backend memory).
    int (*params)(void *ctx, size_t lo, size_t hi, float *dst);
    // Validation window w (NULL: no validation data).
    void (*val_batch)(void *ctx, int w, int *inputs, int *targets);
    // Resume (start > 0; NULL: none), in one read of the checkpoint: the weights of [lo, hi)
    // into params, the previous weight version into prev (NULL: not wanted) and the moments of
    // [olo, ohi) into m and v. Returns 0, 1 when the checkpoint holds no previous version, -1.
    int (*load)(void *ctx, size_t lo, size_t hi, float *params, float *prev, size_t olo, size_t ohi,
                float *m, float *v);
} PipelineIO;

typedef struct Pipeline Pipeline;

// Splits the blocks into D stages; fills [b0, b1) for stage s. Fails on a bad --stage-layers.
int pipeline_partition(const GPT *m, int D, int s, const char *stage_layers, int *b0, int *b1);
// This rank's stage, ready to run steps from `start` (opt_t: AdamW updates applied so far).
// It keeps only its own range of weights (two versions under 2bw, filled through io->params),
// gradients and AdamW moments; the model needs no whole-model buffer. NULL with loom_errmsg.
Pipeline *pipeline_create(GPT *m, const Grid *g, const PipelineConfig *pc, const OptConfig *oc,
                          int opt_t, int start, const PipelineIO *io);
void pipeline_free(Pipeline *p);
// Runs step `step`. gpipe/1f1b: the whole batch, flushed and updated. 2bw: the stream up to the
// batch's last backward, with its update started in the background (reported later);
// boundary: drain the stream after it (validation, checkpoint or the end follows). vote: this
// rank's stop vote, carried on the batch's norm and loss reductions. Returns 1 once a
// non-finite step has stopped the pipeline, else 0.
int pipeline_step(Pipeline *p, int step, int boundary, double vote);
// The sum over every rank of the stop votes of step `step`, once its reductions are complete
// on every rank (after pipeline_step: that step under gpipe/1f1b, the step before under 2bw);
// 0 for any other step.
double pipeline_stop_votes(const Pipeline *p, int step);
// 2bw: completes the update in flight (and reports it); nothing to do for gpipe/1f1b.
void pipeline_drain(Pipeline *p);
// Mean loss of pc->val_windows validation windows through the stages (newest weights).
double pipeline_evaluate(Pipeline *p);
// What this rank contributes to a checkpoint after the steps run so far (nothing in flight):
// the newest weights of its range, its moments and, under 2bw, the previous version (backend
// buffers). Returns 1 when this rank writes it (another replica may hold the same range).
int pipeline_shard(Pipeline *p, PipeShard *sh);
int pipeline_opt_t(const Pipeline *p);
// Collective over the stage's replicas: its newest weights into host (the stage's hi - lo
// floats, element lo first), gathered under ZeRO-3.
void pipeline_stage_weights(Pipeline *p, float *host);
// 2bw: the same for the previous weight version (what a checkpoint keeps beside the newest).
void pipeline_stage_prev(Pipeline *p, float *host);
// Collective over the stages: every stage's newest weights into host (nparams floats).
int pipeline_full_params(Pipeline *p, float *host);
// gpipe/1f1b: the stage's weights (backend memory, flat [lo, hi)) and, on the last stage of
// more than one, its replica of the tied wte (flat [0, tie_n); else NULL), for CO2's outer rule.
void pipeline_stage_view(Pipeline *p, float **w, size_t *lo, size_t *hi, float **wte,
                         size_t *tie_n);
// ZeRO 0: the stage's AdamW moments and the wte replica's (last stage; else NULL) in a[0..3]
// (backend memory) with their lengths; returns how many (2 or 4).
int pipeline_moments(Pipeline *p, float **a, size_t *lens);
// Peak number of micro-batches whose activations this stage held.
int pipeline_peak_inflight(const Pipeline *p);
// Bytes this stage holds: weights (both versions under 2bw), gradients, AdamW moments, and
// activations (one workspace per micro-batch it can hold: K under gpipe, D-s under 1f1b/2bw).
void pipeline_memory(const Pipeline *p, double *weights, double *grads, double *opt, double *acts);
