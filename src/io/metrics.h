// metrics.h — the JSON Lines metrics file: one object per optimizer step
// {"step","loss","lr","grad_norm","step_ms","tokens_per_s","mfu"[,"comm_exposed_ms"]} and one
// per evaluation
// {"step","val_loss"}. Lines are flushed as written so a crashed run keeps its history.
#pragma once
#include <stdio.h>

typedef struct {
    FILE *f;
} Metrics;

int metrics_open(Metrics *mt, const char *path, int append);
// exposed_ms: time the step spent waiting on communication after compute (< 0: not written)
void metrics_step(Metrics *mt, int step, double loss, double lr, double grad_norm, double step_ms,
                  double tokens_per_s, double mfu, double exposed_ms);
void metrics_val(Metrics *mt, int step, double val_loss);
void metrics_close(Metrics *mt);
