// metrics.c — JSON Lines metrics writer (see metrics.h).
#include "metrics.h"

#include <errno.h>
#include <string.h>

#include "../common.h"

int metrics_open(Metrics *mt, const char *path, int append) {
    mt->f = NULL;
    if (!path) return 0;
    mt->f = fopen(path, append ? "a" : "w");
    if (!mt->f) return loom_fail("%s: cannot open metrics file: %s", path, strerror(errno));
    return 0;
}

void metrics_step(Metrics *mt, const MetricsStep *m) {
    if (!mt->f) return;
    fprintf(mt->f,
            "{\"step\":%d,\"loss\":%.7g,\"lr\":%.6g,\"grad_norm\":%.17g,\"step_ms\":%.3f,"
            "\"tokens\":%.0f,\"tokens_per_s\":%.1f,\"mfu\":%.4f",
            m->step, m->loss, m->lr, m->grad_norm, m->step_ms, m->tokens, m->tokens_per_s, m->mfu);
    if (m->exposed_ms >= 0) fprintf(mt->f, ",\"comm_exposed_ms\":%.3f", m->exposed_ms);
    fputs("}\n", mt->f);
    fflush(mt->f);
}

void metrics_val(Metrics *mt, int step, double val_loss) {
    if (!mt->f) return;
    fprintf(mt->f, "{\"step\":%d,\"val_loss\":%.7g}\n", step, val_loss);
    fflush(mt->f);
}

void metrics_close(Metrics *mt) {
    if (mt->f) fclose(mt->f);
    mt->f = NULL;
}
