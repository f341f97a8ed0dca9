// optim.h — AdamW with decoupled weight decay (tensors with ≥ 2 dims only), learning-rate
// schedules, and global-norm gradient clipping. Moments m and v mirror the flat parameter
// layout, so a block's optimizer state is the same slice as its parameters.
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
    size_t n;
    float *m, *v; // (n) device buffers
    int t;        // updates applied so far (bias correction uses t+1)
} AdamW;

// Learning rate for 0-based optimizer step `step`.
float lr_at(const OptConfig *c, int step);
void adamw_create(AdamW *o, const GPT *m, const OptConfig *cfg);
void adamw_free(AdamW *o, const GPT *m);
// Scale factor that clipping applies to the gradients (1 when off or under the limit).
float clip_scale(float grad_norm, float max_norm);
// Applies one AdamW update to every tensor of m with learning rate lr, gradients scaled by
// grad_scale (from clipping).
void adamw_step(AdamW *o, GPT *m, float lr, float grad_scale);
// Sharded form: o holds moments for the flat range [lo, hi) only; params and grads point at
// that range's first element. Weight decay still follows each tensor's rank.
void adamw_create_range(AdamW *o, const GPT *m, const OptConfig *cfg, size_t lo, size_t hi);
void adamw_step_range(AdamW *o, const GPT *m, size_t lo, size_t hi, float *params, float *grads,
                      float lr, float grad_scale);
