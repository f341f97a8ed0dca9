// registry.c — the strategy table: the first entry that wants a configuration runs it.
// Adding a strategy = its file + one line here (docs/ADDING_A_STRATEGY.md).
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "../parallel/comm.h"
#include "../stop.h"
#include "compose.h"
#include "strategy.h"

extern const StrategyOps STRATEGY_TP2D, STRATEGY_TP, STRATEGY_PIPELINE, STRATEGY_CO2, STRATEGY_PEER,
    STRATEGY_DP;

static const StrategyOps *const TABLE[] = {
    &STRATEGY_TP2D,     // --tp q*q --tp-mode 2d: Colossal-AI 2D (SUMMA) tensor parallelism x dp
    &STRATEGY_TP,       // --tp > 1 (no --pp), --sp, --cp: Megatron 1D tp x dp (ZeRO 0-2)
    &STRATEGY_PIPELINE, // --pp > 1: stages (gpipe, 1f1b, 2bw) of 1D tp parts, dp replicas, ZeRO-1
    &STRATEGY_CO2,      // --co2: local steps + stale outer average
    &STRATEGY_PEER,     // loom peer: CO2's rule over a swarm of peers (swarm/)
    &STRATEGY_DP,       // everything else: one process, data parallel, ZeRO 0-3
};

const StrategyOps *strategy_find(const StrategyConfig *c, const Backend *be) {
    for (size_t i = 0; i < sizeof TABLE / sizeof TABLE[0]; i++)
        if (TABLE[i]->wants(c))
            return compose_check(TABLE[i]->supports, c, be) || TABLE[i]->check(c) ? NULL : TABLE[i];
    loom_fail("no strategy runs this configuration");
    return NULL;
}

void strategy_emit(Strategy *s, const StepRecord *r) {
    if (s->nrec == s->caprec) {
        s->caprec = s->caprec ? 2 * s->caprec : 16;
        StepRecord *n = xcalloc((size_t)s->caprec, sizeof *n);
        if (s->nrec) memcpy(n, s->rec, (size_t)s->nrec * sizeof *n);
        free(s->rec);
        s->rec = n;
    }
    s->rec[s->nrec++] = *r;
}

int strategy_take(Strategy *s, StepRecord *r) {
    if (!s->nrec) return 0;
    *r = s->rec[0];
    memmove(s->rec, s->rec + 1, (size_t)(s->nrec - 1) * sizeof *r);
    s->nrec--;
    return 1;
}

_Noreturn void strategy_end_job(Strategy *s, int code, const char *msg) {
    (void)s;
    comm_abort(code, msg);
}

double strategy_stop_vote(void) { return stop_signal() ? 1.0 : 0.0; }

void strategy_stop_tally(Strategy *s, double votes) {
    if (votes > 0) s->stop = 1;
}
