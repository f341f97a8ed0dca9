// strat_cp.c — the context-parallel parts of the tensor-parallel strategy (see strat_cp.h).
#include "strat_cp.h"

#include <stdio.h>
#include <sys/resource.h>

#include "../common.h"

int cp_check(const StrategyConfig *c) {
    if (c->cp <= 1) return 0;
    const char *no = c->sp         ? "--sp"
                     : c->pp > 1   ? "--pp"
                     : c->tp_2d    ? "--tp-mode 2d"
                     : c->zero > 1 ? "--zero 2/3"
                     : c->co2      ? "--co2"
                     : c->offload  ? "--offload"
                     : c->peer     ? "loom peer"
                                   : NULL;
    if (no)
        return loom_fail("--cp %d with %s: not available (context parallelism runs with --tp "
                         "(1d) and data parallelism, ZeRO 0 or 1)",
                         c->cp, no);
    if (c->seq % (2 * c->cp))
        return loom_fail("--cp %d cuts every sequence into 2 x %d = %d chunks: --seq %d is not a "
                         "multiple of %d",
                         c->cp, c->cp, 2 * c->cp, c->seq, 2 * c->cp);
    return 0;
}

void cp_summary(const Strategy *s, const CpRing *r, size_t ws_floats, int steps) {
    const StrategyConfig *c = s->cfg;
    double floats, calls;
    cp_ring_counts(r, &floats, &calls);
    int L = s->model->cfg.L, Tl = c->seq / c->cp, Cl = s->model->cfg.C / s->grid->tp;
    double micro = (double)steps * c->grad_accum;
    // each layer runs a forward and a backward ring per micro-batch (and a second forward
    // under --recompute); validation passes add forwards: count per training micro-batch
    double per_layer = micro > 0 ? floats * 4.0 / micro / L / 1048576 : 0;
    double block = (double)c->batch * Tl * 2 * Cl * 4.0 / 1048576;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(stderr,
            "loom: cp %d (ring attention, %d tokens of %d per rank) | per rank: activations "
            "%.1f MiB, peak RSS %.1f MiB | sent around the ring per layer and micro-batch "
            "%.3f MiB (K/V block (B,Tl,2C/tp) = %.3f MiB: %d hops forward, %d + %d with dK/dV "
            "backward%s; validation included)\n",
            c->cp, Tl, c->seq, ws_floats * 4.0 / 1048576, ru.ru_maxrss / 1024.0, per_layer, block,
            c->cp - 1, c->cp - 1, c->cp, c->recompute ? ", recomputed forward again" : "");
    (void)calls;
}
