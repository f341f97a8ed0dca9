// strat_cp.c — the context-parallel parts of the tensor-parallel strategy (see strat_cp.h).
#include "strat_cp.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "../common.h"

int cp_check(const StrategyConfig *c) {
    if (c->cp <= 1) return 0;
    if (c->seq % (2 * c->cp))
        return loom_fail("--cp %d cuts every sequence into 2 x %d = %d chunks: --seq %d is not a "
                         "multiple of %d",
                         c->cp, c->cp, 2 * c->cp, c->seq, 2 * c->cp);
    return 0;
}

void cp_take_batch(const Strategy *s, const int *seq_in, const int *seq_tg, int *inputs,
                   int *targets) {
    const StrategyConfig *c = s->cfg;
    const Grid *g = s->grid;
    gpt_cp_take(inputs, seq_in, c->batch, c->seq, g->cp, g->cp_i);
    gpt_cp_take(targets, seq_tg, c->batch, c->seq, g->cp, g->cp_i);
}

// The k (and v) channels of a rank's K/V block: C/tp, or LLaMA's kv heads' (KV/tp heads, or
// the one it shares when tp does not divide them).
static int kv_channels(const Strategy *s) {
    const GPTConfig *g = &s->model->cfg;
    int tp = s->grid->tp, hs = g->C / g->H;
    if (!gpt_is_llama(g)) return g->C / tp;
    return g->KV % tp ? hs : g->KV / tp * hs;
}

int cp_check_shape(const Strategy *s) {
    const StrategyConfig *c = s->cfg;
    size_t n = (size_t)c->batch * (c->seq / c->cp) * 2 * kv_channels(s);
    if (n >= (size_t)1 << 31)
        return loom_fail("--cp %d: a K/V block of --batch %d x %d tokens x 2 x %d channels is "
                         "%zu floats, more than one message carries (2^31 - 1): raise --cp or "
                         "--tp, or lower --batch",
                         c->cp, c->batch, c->seq / c->cp, kv_channels(s), n);
    return 0;
}

double cp_evaluate(Strategy *inner, Whole *w, CpRing *r) {
    cp_ring_pause(r, 1);
    double loss = whole_evaluate(inner, w);
    cp_ring_pause(r, 0);
    comm_allreduce_f64(inner->grid->cp_comm, &loss, 1);
    return loss / inner->grid->cp;
}

void cp_summary(const Strategy *s, const CpRing *r, size_t ws_floats, int steps) {
    const StrategyConfig *c = s->cfg;
    double floats, calls;
    cp_ring_counts(r, &floats, &calls);
    int n = c->cp, L = s->model->cfg.L, Tl = c->seq / n, Cl = kv_channels(s);
    double micro = (double)steps * c->grad_accum, MiB = 1048576;
    // per layer and micro-batch: forward n−1 K/V blocks; backward n−1 K/V blocks and n dK/dV
    // accumulators; --recompute runs the forward again
    double per_layer = micro > 0 ? floats * 4.0 / micro / L / MiB : 0;
    double block = (double)c->batch * Tl * 2 * Cl * 4.0 / MiB;
    int blocks = 3 * n - 2 + (c->recompute ? n - 1 : 0);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(
        stderr,
        "loom: cp %d (ring attention: %d of %d tokens per rank) | per rank: activations %.1f "
        "MiB, peak RSS %.1f MiB | sent around the ring per layer and micro-batch %.3f MiB "
        "(%d K/V blocks (B,Tl,2 x %d) of %.3f MiB: %d K/V forward, %d K/V + %d dK/dV backward%s)\n",
        n, Tl, c->seq, ws_floats * 4.0 / MiB, ru.ru_maxrss / 1024.0, per_layer, blocks, Cl, block,
        n - 1, n - 1, n, c->recompute ? ", the forward's again under --recompute" : "");
    (void)calls;
}
