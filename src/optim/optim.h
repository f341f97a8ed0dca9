// optim.h — AdamW with decoupled weight decay (tensors with ≥ 2 dims only), learning-rate
// schedules and global-norm clipping. Moments mirror the flat parameter layout: the moments of
// a flat range [lo, hi) are hi-lo floats, and every caller (a whole model, a ZeRO shard, a
// pipeline stage's slice of either weight version) updates through adamw_update_range.
#pragma once
#include "../model/gpt.h"

typedef enum { LR_CONSTANT, LR_COSINE } LrSchedule;

typedef struct {
    float lr, min_lr, beta1, beta2, eps, weight_decay, grad_clip;
    LrSchedule schedule;
    int warmup;      // linear warmup steps (both schedules)
    int total_steps; // cosine decays from lr to min_lr at total_steps
} OptConfig;

typedef struct {
    OptConfig cfg;
    size_t lo, hi; // the flat range whose moments this optimizer holds
    float *m, *v;  // (hi-lo) device buffers
    int t;         // updates applied so far (bias correction uses t+1)
} AdamW;

// Learning rate for 0-based optimizer step `step`.
float lr_at(const OptConfig *c, int step);
// Scale factor that clipping applies to the gradients (1 when off or under the limit).
float clip_scale(float grad_norm, float max_norm);

// Moments for the flat range [lo, hi) (zeroed), and their per-block pointers: every block that
// intersects [lo, hi) gets blk->m / blk->v at the first element it owns (see gpt.h BlockState).
void adamw_create(AdamW *o, GPT *m, const OptConfig *cfg, size_t lo, size_t hi);
void adamw_free(AdamW *o, GPT *m);
// One AdamW update at step count t (≥ 1) of the flat range [lo, hi): w, g, mo, vo point at the
// range's first element. Weight decay follows each tensor's rank.
void adamw_update_range(const GPT *m, const OptConfig *c, int t, size_t lo, size_t hi, float *w,
                        const float *g, float *mo, float *vo, float lr, float grad_scale);
// The update at step count t of every block's owned part, through the per-block pointers
// (blk->state: own_params, own_grads, m, v), in block order.
void adamw_step_blocks(const OptConfig *c, int t, GPT *m, float lr, float grad_scale);
// o->t++, then adamw_step_blocks.
void adamw_step(AdamW *o, GPT *m, float lr, float grad_scale);
