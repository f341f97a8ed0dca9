// tp2d_zero.h — ZeRO 2 and 3 for 2D (SUMMA) tensor parallelism: a 2D rank's part of the model
// sharded over its dp replicas (tp2d_zero.c). The part's flat layout is cut into the same dp
// slices as ZeRO 1 (strat_tp2d.c); dp rank r owns [displs[r], displs[r] + counts[r]).
//   zero 2: the part's whole gradient buffer is gone. A layer's backward writes into one
//           transient buffer, the embedding (tied: the head's SUMMA product writes into it
//           too) and the final LayerNorm each into their own; when the backward leaves a block,
//           its column-replicated tensors are summed down the grid's column and the block is
//           reduce-scattered over dp into the owners' gradient shards (accumulated over the
//           micro-batches).
//   zero 3: + the parameters too: each rank keeps its slice; the embedding and the final
//           LayerNorm are all-gathered over dp before a forward and kept until the backward
//           ends, each layer into one buffer when the forward or the backward enters it.
#pragma once
#include "../model/gpt.h"
#include "../parallel/comm.h"

typedef struct Tp2dZero Tp2dZero;

// After the part's parameters were loaded into m->params (the whole part; ZeRO 3 copies its
// slice out and drops the buffer). m's whole gradient buffer must already be absent. Points the
// blocks' owned state at the shards.
Tp2dZero *tp2dz_create(GPT *m, const Comm *dp, const Comm *col, int zero, const size_t *counts,
                       const size_t *displs);
void tp2dz_free(Tp2dZero *z);
// Zeroes the gradient shard (a step's start).
void tp2dz_begin_step(Tp2dZero *z);
// Before a forward (ZeRO 3: gathers the embedding and the final LayerNorm).
void tp2dz_forward(Tp2dZero *z);
// Around a backward: the transient gradient buffers in place; at its end the embedding's is
// reduced.
void tp2dz_backward_begin(Tp2dZero *z);
void tp2dz_backward_end(Tp2dZero *z);
// The model enters block b (Tp2d.section).
void tp2dz_section(Tp2dZero *z, int b);
// The owned gradients (backend memory, the slice's floats): the reduced sums.
const float *tp2dz_grads(const Tp2dZero *z);
// The owned parameters (ZeRO 3: the shard; else NULL: the model's whole buffer holds them).
const float *tp2dz_params(const Tp2dZero *z);
// Bytes a rank holds of part (z NULL: ZeRO 0/1, the whole part's parameters and gradients and
// `gown` floats of reduced gradients): parameters (the shard and the gathered blocks' buffers
// under ZeRO 3), gradients (the shard, the transient buffers and the reduce-scatter's receive
// buffer under ZeRO 2/3).
void tp2dz_held(const Tp2dZero *z, const GPT *part, size_t gown, double *param_b, double *grad_b);
// What a rank's part shards over dp, for the banner ("" below ZeRO 2).
const char *tp2dz_what(int zero);
// Seconds spent in its collectives.
double tp2dz_comm_seconds(const Tp2dZero *z);
