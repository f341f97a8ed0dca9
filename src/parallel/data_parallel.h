// data_parallel.h — the data-parallel strategy with ZeRO stages 0–3, over the dp axis.
//
//   zero 0: every rank holds everything; gradients are all-reduced in buckets that start as
//           soon as their blocks' backward is done (last micro-batch only), overlapping the
//           rest of backward.
//   zero 1: + AdamW moments sharded: each rank updates its contiguous slice [lo,hi) of the flat
//           parameter buffer, then parameters are all-gathered.
//   zero 2: + gradients sharded: each block's gradient goes to a transient buffer and is
//           reduce-scattered into the owners' gradient shards right after its backward.
//   zero 3: + parameters sharded: each block's parameters are all-gathered just before its
//           forward/backward and dropped after it.
// Shards are contiguous ranges of the flat layout, so they do not depend on block boundaries
// and a checkpoint can be re-cut for any other dp size.
#pragma once
#include <stddef.h>

#include "../model/gpt.h"
#include "../optim/optim.h"
#include "comm.h"

typedef struct DataParallel DataParallel;

// The model's whole parameter buffer holds the initial values for ZeRO 0-2 (then dropped by
// ZeRO-3 if present; ZeRO-3 fills dp_shard_params instead).
DataParallel *dp_create(GPT *m, const Comm *dp, int zero, double bucket_mb);
void dp_free(DataParallel *d);
// The slice of the flat buffers this rank owns (the whole model for zero 0).
void dp_owned_range(const DataParallel *d, size_t *lo, size_t *hi);
// Call before each micro-batch; `last` marks the one whose gradients are reduced (zero 0/1).
void dp_begin_micro(DataParallel *d, int last);
// Waits for every reduction of the step: owned gradients then hold the global mean.
void dp_finish_grads(DataParallel *d);
// Σ g² over all gradients (global, identical on every rank).
double dp_grad_sumsq(DataParallel *d);
// Zeroes the gradients this rank accumulates into.
void dp_zero_grad(DataParallel *d);
// AdamW on the owned slice (opt sized hi-lo), then the parameter all-gather (zero 1/2).
void dp_optimizer_step(DataParallel *d, AdamW *opt, float lr, float grad_scale);
// Full parameters into host-side dst (nparams floats), on every rank (zero 3 gathers).
void dp_full_params(DataParallel *d, float *dst);
// The reduced gradients of the owned slice (hi-lo floats, backend memory) after
// dp_finish_grads: the gradient shard under ZeRO 2/3, else a view of the whole buffer.
const float *dp_owned_grads(const DataParallel *d);
// This rank's owned parameters (hi-lo floats): a view, valid until the next step.
const float *dp_owned_params(DataParallel *d);
// ZeRO-3: the parameter shard to fill before the first step (the model has no whole buffer).
float *dp_shard_params(DataParallel *d);
// Overwrites the owned parameter slice (and, for zero 0–2, the full buffer on all ranks
// after dp_full_params-style gathering) from a full host copy.
void dp_set_params(DataParallel *d, const float *full);
// Bytes held per rank: parameters, gradients (persistent + transient), optimizer moments.
void dp_memory(const DataParallel *d, double *param_b, double *grad_b, double *opt_b);
// The same numbers predicted from any layout's sizes (a tensor-parallel part): P parameters,
// the embedding block's `embed`, the tied table's `wte` (the head's gradient part), the largest
// block.
void dp_memory_model(size_t P, size_t embed, size_t wte, size_t max_block, int N, int zero,
                     double *param_b, double *grad_b, double *opt_b);
// The same numbers predicted from the shape alone (for --dry-run, before launching).
void dp_memory_plan(const GPTConfig *c, int N, int zero, double *param_b, double *grad_b,
                    double *opt_b);
// Exposed communication: seconds this step spent waiting for reductions after backward.
double dp_exposed_wait(const DataParallel *d);
// How long the communication this step waited for had been in flight when each wait began
// (the least over its waits; 0: none): the time it had to run behind computation.
double dp_overlap(const DataParallel *d);
