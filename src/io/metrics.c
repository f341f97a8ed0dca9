// metrics.c — JSON Lines metrics writer (see metrics.h).
#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"

int metrics_open(Metrics *mt, const char *path, int append) {
    mt->f = NULL;
    mt->path = NULL;
    mt->failed = 0;
    if (!path) return 0;
    mt->f = fopen(path, append ? "a" : "w");
    if (!mt->f) return loom_fail("%s: cannot open metrics file: %s", path, strerror(errno));
    size_t n = strlen(path) + 1;
    mt->path = memcpy(xmalloc(n), path, n);
    return 0;
}

// Appends `"key":value` (with a leading comma unless first) to buf; a non-finite value is
// written as null, since JSON has no nan or inf.
static void field(char *buf, size_t cap, const char *key, const char *fmt, double v) {
    // (cap leaves room for every field, so nothing here is ever cut short)
    size_t n = strlen(buf);
    if (n >= cap) return;
    int k = snprintf(buf + n, cap - n, "%s\"%s\":", n > 1 ? "," : "", key);
    if (k < 0 || (size_t)k >= cap - n) return;
    n += (size_t)k;
    if (isfinite(v))
        snprintf(buf + n, cap - n, fmt, v);
    else
        snprintf(buf + n, cap - n, "null");
}

static void close_line(char *buf, size_t cap) {
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, "}\n");
}

// Writes one line and flushes it; the first failure is recorded (loom_fail naming the file)
// and every later call fails without writing.
static int put_line(Metrics *mt, const char *line) {
    if (mt->failed) return -1;
    errno = 0;
    if (fputs(line, mt->f) < 0 || fflush(mt->f) || ferror(mt->f)) {
        mt->failed = 1;
        return loom_fail("%s: cannot write metrics: %s", mt->path, strerror(errno ? errno : EIO));
    }
    return 0;
}

int metrics_step(Metrics *mt, const MetricsStep *m) {
    if (!mt->f) return 0;
    char buf[4096] = "{"; // room for every field at %.3f of DBL_MAX
    field(buf, sizeof buf, "step", "%.0f", m->step);
    field(buf, sizeof buf, "loss", "%.7g", m->loss);
    field(buf, sizeof buf, "lr", "%.6g", m->lr);
    field(buf, sizeof buf, "grad_norm", "%.17g", m->grad_norm);
    field(buf, sizeof buf, "step_ms", "%.3f", m->step_ms);
    field(buf, sizeof buf, "tokens", "%.0f", m->tokens);
    field(buf, sizeof buf, "tokens_per_s", "%.1f", m->tokens_per_s);
    field(buf, sizeof buf, "mfu", "%.4f", m->mfu);
    if (m->exposed_ms >= 0) field(buf, sizeof buf, "comm_exposed_ms", "%.3f", m->exposed_ms);
    if (m->overlap_ms > 0) field(buf, sizeof buf, "comm_overlap_ms", "%.3f", m->overlap_ms);
    if (m->io_ms >= 0) field(buf, sizeof buf, "io_ms", "%.3f", m->io_ms);
    if (m->device_mem_mib > 0) field(buf, sizeof buf, "device_mem_mib", "%.1f", m->device_mem_mib);
    if (m->loss_scale > 0) {
        field(buf, sizeof buf, "loss_scale", "%.17g", m->loss_scale);
        field(buf, sizeof buf, "overflow_skips", "%.0f", (double)m->overflow_skips);
    }
    if (m->extra && m->extra[0]) {
        size_t k = strlen(buf);
        snprintf(buf + k, sizeof buf - k, ",%s", m->extra);
    }
    close_line(buf, sizeof buf);
    return put_line(mt, buf);
}

int metrics_val(Metrics *mt, int step, double val_loss) {
    if (!mt->f) return 0;
    char buf[1024] = "{";
    field(buf, sizeof buf, "step", "%.0f", step);
    field(buf, sizeof buf, "val_loss", "%.7g", val_loss);
    close_line(buf, sizeof buf);
    return put_line(mt, buf);
}

// Length of the UTF-8 sequence at p (lead byte C2–F4, then continuation bytes), 0 if invalid.
static int utf8_len(const unsigned char *p) {
    int k = *p >= 0xc2 && *p <= 0xdf   ? 2
            : *p >= 0xe0 && *p <= 0xef ? 3
            : *p >= 0xf0 && *p <= 0xf4 ? 4
                                       : 0;
    for (int i = 1; i < k; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    return k;
}

// Appends s (at most `max` bytes of it) to buf as a JSON string; a byte that is not part of
// valid UTF-8 is written as \u00XX.
static void json_string(char *buf, size_t cap, const char *s, size_t max) {
    size_t n = strlen(buf);
    const unsigned char *p = (const unsigned char *)s, *end = p + strnlen(s, max);
    buf[n++] = '"';
    while (p < end && n + 8 < cap) {
        int k = *p >= 0x80 ? utf8_len(p) : 1;
        if (k > 1 && p + k <= end) {
            memcpy(buf + n, p, (size_t)k), n += (size_t)k, p += k;
        } else if (*p == '"' || *p == '\\') {
            buf[n++] = '\\', buf[n++] = (char)*p++;
        } else if (*p < 0x20 || *p >= 0x7f) {
            n += (size_t)snprintf(buf + n, cap - n, "\\u%04x", *p++);
        } else {
            buf[n++] = (char)*p++;
        }
    }
    buf[n++] = '"', buf[n] = 0;
}

int metrics_save_failed(Metrics *mt, int step, const char *reason) {
    if (!mt->f) return 0;
    char buf[2048] = "{"; // the reason is cut at 256 bytes, at most 6 written per byte
    field(buf, sizeof buf, "step", "%.0f", step);
    strcat(buf, ",\"save_failed\":");
    json_string(buf, sizeof buf, reason, 256);
    close_line(buf, sizeof buf);
    return put_line(mt, buf);
}

void metrics_close(Metrics *mt) {
    if (mt->f) fclose(mt->f);
    free(mt->path);
    mt->f = NULL;
    mt->path = NULL;
}
