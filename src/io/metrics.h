// metrics.h — the JSON Lines metrics file: one object per optimizer step
// {"step","loss","lr","grad_norm","step_ms","tokens","tokens_per_s","mfu"[,"comm_exposed_ms"]
//  [,"comm_overlap_ms"][,"io_ms"]}
// ("tokens": training tokens read since the start of the first run, across resumes) and one
// per evaluation
// {"step","val_loss"}, and one per checkpoint save that failed {"step","save_failed":"<reason>"}
// (a training run goes on after one, see train/loop.c). Lines are flushed as written so a
// crashed run keeps its history.
// A value that is not finite (the loss of a skipped step, a NaN gradient norm) is written as
// null: JSON has no nan or inf.
#pragma once
#include <stdio.h>

typedef struct {
    FILE *f;
    char *path;
    int failed; // a write failed (reported once; later writes fail silently)
} Metrics;

int metrics_open(Metrics *mt, const char *path, int append);
typedef struct {
    int step;
    double loss, lr, grad_norm, step_ms;
    double tokens; // cumulative training tokens after this step
    double tokens_per_s, mfu;
    double exposed_ms;     // time the step waited on communication after compute (< 0: not written)
    double io_ms;          // time it waited on block swapping's slow tier (< 0: not written)
    double overlap_ms;     // how long the communication it waited for had been in flight when the
                           // wait began, the least over its waits (written when > 0)
    double device_mem_mib; // the backend's device-memory high-water mark so far (written when > 0)
    double loss_scale;     // the loss scale the step ran with (written when > 0) and
    int overflow_skips;    // the steps this run skipped for overflow so far (written with it)
    const char *extra;     // more fields, JSON text without braces (loom peer's), or NULL
} MetricsStep;

// Write one line and flush it. Return 0, or -1 with loom_errmsg naming the file when the line
// could not be written (disk full, I/O error); after a failure every call returns -1.
int metrics_step(Metrics *mt, const MetricsStep *m);
int metrics_val(Metrics *mt, int step, double val_loss);
// A save of the checkpoint after `step` steps failed: its reason (the first 256 bytes, as a JSON
// string; a byte that is not part of valid UTF-8 is written as \u00XX).
int metrics_save_failed(Metrics *mt, int step, const char *reason);
void metrics_close(Metrics *mt);
