// layout_mem.h — the memory one rank holds under a parallel layout (dp × pp × tp × cp, ZeRO,
// sequence parallelism, 1D or 2D tensor parallelism), from the model's real shapes: the
// tensor-parallel part's tensor table (gpt_create_layout_tp), the workspace's size functions
// (workspace_range_floats: what a run's workspace reports) and the data-parallel and pipeline
// strategies' own accounting. `loom train --dry-run` prints it; the planner checks its plans
// against it. Where a layout is not built yet the numbers follow its definition:
//   --tp-mode 2d (SUMMA on a q×q grid, tp = q²): each layer's parameters and saved activations
//     ÷ q²; the embedding, the head and the residual stream as a whole model's (so the ZeRO
//     slices of the part are above a run's); ZeRO 2/3's transient and gathered blocks are the
//     2D part's real embedding, final LayerNorm and a layer (tp2d_zero.c);
//   --sp (1D only): each layer's LayerNorm inputs/outputs and statistics, the residual stream,
//     its gradient and the final LayerNorm's activations ÷ tp;
//   --cp N: activations of T/cp tokens per rank, plus the ring's buffers: the K/V chunk being
//     sent and the one being received (2 × (B,T/cp,2C/tp)), and in backward their gradients
//     (as many again);
//   ZeRO shards over the dp × cp ranks that share the gradient all-reduce.
#pragma once
#include "../model/gpt.h"

typedef struct {
    int dp, zero;             // data-parallel replicas, ZeRO stage
    int pp, schedule;         // pipeline stages; schedule: SCHED_GPIPE / 1F1B / 2BW (pipeline.h)
    const char *stage_layers; // layers per stage (NULL: the pipeline's balanced split)
    int tp, tp_2d, sp;        // tensor-parallel ranks (tp_2d: tp = q·q), sequence parallelism
    int cp;                   // context-parallel ranks
    int B, T, K, recompute;   // micro-batch (B,T), micro-batches per step, recompute
} LayoutShape;

typedef struct {
    double params, grads, opt, acts; // bytes, of the stage with the most when pp > 1
    int stage;                       // that stage (0 when pp = 1)
    size_t part_params;              // parameters of one rank's tensor-parallel part
} LayoutMemory;

// Fills out; -1 (loom_errmsg naming the numbers) for a layout the model cannot take (tp not
// dividing the heads, a 2D tp that is not a square, T not divisible by 2·cp, ...).
int layout_memory(const GPTConfig *c, const Backend *be, const LayoutShape *s, LayoutMemory *out);
static inline double layout_total(const LayoutMemory *m) {
    return m->params + m->grads + m->opt + m->acts;
}
// Parameters of the embedding, of one layer and of the head of a 1D tensor-parallel rank's part
// (tp = 1: the whole model's); -1 when tp does not divide the heads.
int layout_block_params(const GPTConfig *c, int tp, double out[3]);
