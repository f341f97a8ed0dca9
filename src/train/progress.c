// progress.c — progress reporting for the training loop (see progress.h).
#include "progress.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "../common.h"

void progress_start(Progress *p, int enabled, int start_step, int total_steps, int log_every) {
    p->enabled = enabled;
    p->tty = isatty(2);
    p->start = start_step;
    p->total = total_steps;
    p->every = log_every > 0 ? log_every : 10;
    p->t_start = now_sec();
    p->ema_dt = 0;
    p->line_open = 0;
}

static void fmt_eta(char *buf, size_t n, double s) {
    int sec = (int)(s + 0.5);
    if (sec >= 3600)
        snprintf(buf, n, "%dh%02dm", sec / 3600, sec / 60 % 60);
    else
        snprintf(buf, n, "%dm%02ds", sec / 60, sec % 60);
}

void progress_step(Progress *p, int step, double loss, double tok_per_s, double mfu, double dt,
                   double io_s) {
    if (!p->enabled) return;
    p->ema_dt = p->ema_dt > 0 ? 0.9 * p->ema_dt + 0.1 * dt : dt;
    char eta[32], io[48] = "";
    fmt_eta(eta, sizeof eta, p->ema_dt * (p->total - step));
    if (io_s >= 0) snprintf(io, sizeof io, " | I/O wait %.0f ms", io_s * 1e3);
    if (p->tty) {
        fprintf(stderr, "\r\033[Kstep %d/%d | loss %.4f | %.0f tok/s | MFU %.1f%%%s | ETA %s", step,
                p->total, loss, tok_per_s, 100 * mfu, io, eta);
        p->line_open = 1;
    } else if (step % p->every == 0 || step == p->total || step == p->start + 1) {
        fprintf(stderr, "step %d/%d | loss %.4f | %.0f tok/s | MFU %.1f%%%s | ETA %s\n", step,
                p->total, loss, tok_per_s, 100 * mfu, io, eta);
    }
    fflush(stderr);
}

void progress_note(Progress *p, const char *fmt, ...) {
    if (p->line_open) fputc('\n', stderr);
    p->line_open = 0;
    va_list ap;
    va_start(ap, fmt);
    fputs("loom: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void progress_end(Progress *p) {
    if (p->line_open) fputc('\n', stderr);
    p->line_open = 0;
}
