// loss_scale.c — dynamic loss scaling (see loss_scale.h).
#include "loss_scale.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"

static int power_of_two(double x) {
    int e;
    return isfinite(x) && x >= 1 && frexp(x, &e) == 0.5;
}

int loss_scale_init(LossScale *ls, const char *spec, double init, int interval, int fp16) {
    *ls = (LossScale){.scale = 1.0, .interval = interval};
    if (!spec || !strcmp(spec, "auto")) spec = fp16 ? "dynamic" : "off";
    if (!strcmp(spec, "off")) {
        if (fp16)
            fprintf(stderr, "loom: WARNING: --dtype fp16 with --loss-scale off: gradients under "
                            "6e-8 round to zero in the products\n");
        return 0;
    }
    if (interval < 1) return loom_fail("--loss-scale-interval must be at least 1");
    if (!strcmp(spec, "dynamic")) {
        if (!power_of_two(init) || init > 0x1p48)
            return loom_fail("--loss-scale-init %g: must be a power of two up to 2^48 (the "
                             "scaling is then exact)",
                             init);
        ls->on = ls->dynamic = 1, ls->scale = init;
        return 0;
    }
    char *end;
    double v = strtod(spec, &end);
    if (*end || !power_of_two(v) || v > 0x1p48)
        return loom_fail("--loss-scale '%s': expected auto, off, dynamic or a power of two up to "
                         "2^48 (a static scale)",
                         spec);
    ls->on = 1, ls->scale = v;
    return 0;
}

double loss_scale_factor(const LossScale *ls) { return ls && ls->on ? ls->scale : 1.0; }

int loss_scale_after_step(LossScale *ls, int applied) {
    if (!ls->on || !ls->dynamic) return 0;
    if (applied) {
        if (++ls->good >= ls->interval && ls->scale < 0x1p48) ls->scale *= 2, ls->good = 0;
        return 0;
    }
    if (ls->scale <= 1.0) return 0; // unscaled and still not finite: not an overflow of scaling
    ls->scale /= 2, ls->good = 0, ls->skipped++;
    return 1;
}
