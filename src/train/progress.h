// progress.h — the live progress line (step/total, loss, tok/s, MFU, ETA) on a terminal, or a
// plain log line every N steps when stderr is not a terminal.
#pragma once

typedef struct {
    int enabled, tty, start, total, every;
    double t_start, ema_dt;
    int line_open;
} Progress;

void progress_start(Progress *p, int enabled, int start_step, int total_steps, int log_every);
// io_s: seconds the step waited on block swapping's slow tier (< 0: not swapping).
void progress_step(Progress *p, int step, double loss, double tok_per_s, double mfu, double dt,
                   double io_s);
void progress_note(Progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void progress_end(Progress *p);
