// metrics_read.h — read a training metrics log (JSON Lines) into column arrays.
//
// Each non-blank line is one JSON object. A line with "loss" is a training row (one optimizer
// step): "step" and "loss" are required; "lr", "grad_norm", "step_ms", "tokens_per_s" and
// "tokens" (cumulative tokens seen) are optional. A line with "val_loss" (and "step") is a
// validation row. A line may carry both. Lines with neither are ignored, as are unknown keys.
// A number may also be null (read as NaN: the writer's value for a number that is not finite)
// or a string "nan" / "inf" / "-inf". The lines must be JSON: bare nan / inf (as printf writes
// them, and as loom wrote them before it wrote null) make the line malformed.
// When a step number does not increase (a run resumed from an earlier checkpoint appended to the
// same file), the rows it supersedes — those with step >= the new one — are dropped.
// A missing file or a malformed line is an error naming the file (and line).
#pragma once
#include <stddef.h>

typedef struct {
    char *path; // as given to metrics_read (or the name given to metrics_parse)
    // training rows; absent optional values are NaN
    size_t n, cap;
    double *step, *loss, *lr, *grad_norm, *step_ms, *tokens_per_s, *tokens;
    // validation rows
    size_t n_val, cap_val;
    double *val_step, *val_loss, *val_tokens;
} MetricsLog;

// Parse `len` bytes of JSON Lines text; `name` is used in error messages ("name:LINE: ...").
// Returns 0, or -1 with loom_errmsg (and *m left empty).
int metrics_parse(const char *text, size_t len, const char *name, MetricsLog *m);
// Read and parse a file. Returns 0, or -1 with loom_errmsg naming the file.
int metrics_read(const char *path, MetricsLog *m);
void metrics_free(MetricsLog *m);

// Cumulative tokens at each training row (x_train, m->n values) and validation row (x_val,
// m->n_val values). Uses the "tokens" key where every training row has it (validation rows
// without it are interpolated by step); otherwise tokens = step x tokens-per-step, where
// tokens-per-step is the median of tokens_per_s x step_ms / 1000 over the training rows.
// Returns 0, or -1 with loom_errmsg when neither source is available.
int metrics_tokens(const MetricsLog *m, double *x_train, double *x_val);

// Centred moving average over `window` points (window <= 1 copies). NaN inputs are skipped in
// the averages and stay NaN in the output; the window shrinks at the ends.
void metrics_smooth(const double *y, size_t n, int window, double *out);
