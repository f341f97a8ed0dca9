// peer_plan.c — the swarm's cost model for `loom plan` (see peer_plan.h).
#include "peer_plan.h"

#include <math.h>

static int peer_evaluate(const Profile *p, const PlanInput *in, int tau, int b, int rc,
                         PeerPlan *out) {
    Plan dp = {0};
    int N = in->workers;
    plan_evaluate(p, in, N, 1, b, rc, &dp); // (its memory verdict is redone below)
    if (dp.step_s <= 0) return 0;           // no such plan (the batch does not divide)
    const GPTConfig *c = &p->cfg;
    double P = (double)c->V * c->C + (double)c->maxT * c->C +
               (double)c->L * (12.0 * c->C * c->C + 13.0 * c->C) + 2.0 * c->C;
    double bw = in->node_size >= N ? in->intra_bandwidth : in->bandwidth;
    double bytes = (N - 1) * 4.0 * P;
    *out = (PeerPlan){.peers = N, .tau = tau, .b = b, .K = dp.K, .recompute = rc};
    out->step_s = dp.compute_s + dp.update_s;
    out->exchange_s = N > 1 ? bytes / bw + in->latency : 0;
    out->round_s =
        fmax(tau * out->step_s, out->exchange_s) + 2 * bytes * in->net_cpu_per_byte; // sent + got
    out->tokens_per_s = (double)in->global_batch * p->T * tau / out->round_s;
    out->mem_bytes = dp.mem_bytes + (8.0 + N) * 4.0 * P;
    return out->mem_bytes <= in->mem_bytes;
}

int plan_peers(const Profile *p, const PlanInput *in, int tau, PeerPlan *out) {
    int found = 0;
    for (int i = 0; i < p->nrows; i++)
        for (int rc = 0; rc <= 1; rc++) {
            PeerPlan t;
            if (peer_evaluate(p, in, tau, p->rows[i].b, rc, &t) &&
                (!found || t.tokens_per_s > out->tokens_per_s))
                *out = t, found = 1;
        }
    return found;
}
