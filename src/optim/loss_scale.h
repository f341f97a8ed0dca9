// loss_scale.h — dynamic loss scaling for fp16 products (--dtype fp16, or --loss-scale on any
// precision): the gradient the backward starts from is multiplied by a power of two S, so
// that small gradients survive fp16's range (the smallest normal is 6.1e-5); the optimizer
// sees the gradients divided by S again (exactly: S is a power of two). A step whose gradient
// overflowed (a NaN or inf anywhere) is skipped and S halves; after `interval` applied steps
// in a row S doubles (PyTorch's GradScaler rule: init 2^16, growth 2, backoff 0.5, interval
// 2000). A static scale (--loss-scale N) never changes. The state rides in checkpoints.
#pragma once

typedef struct LossScale {
    int on;       // 0: no scaling (S = 1, nothing skipped for overflow)
    int dynamic;  // 1: S halves on overflow and doubles after `interval` clean steps
    double scale; // S, a power of two
    int good;     // applied steps since S last changed
    int interval; // clean steps before S doubles
    int skipped;  // steps skipped for overflow, this run
} LossScale;

// From --loss-scale (auto | off | dynamic | N, a power of two), --loss-scale-init and
// --loss-scale-interval; `fp16`: the products round to fp16 (auto then means dynamic).
// 0, or -1 with loom_errmsg naming the flag.
int loss_scale_init(LossScale *ls, const char *spec, double init, int interval, int fp16);
// The multiplier on the backward's starting gradient (1 when off).
double loss_scale_factor(const LossScale *ls);
// After a step: applied (1) counts towards growth; not applied (0) is an overflow when the
// scale can still fall: S halves and the step counts as skipped. Returns 1 when the step was
// an overflow handled here, 0 otherwise (applied, or a non-finite value scaling cannot explain:
// off, static, or S already 1, which --on-nonfinite then decides).
int loss_scale_after_step(LossScale *ls, int applied);
