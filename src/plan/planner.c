// planner.c — the PipeDream-2BW cost model and the search over (w, d, b, recompute)
// (see planner.h).
#include "planner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"

typedef struct {
    double t; // seconds per micro-batch (compute + point-to-point)
    double w; // parameter count
    int layers;
    int has_embed, has_head;
} StageCost;

// Splits [embed, L layers, head] into d stages minimising the slowest (linear partition).
static void split(const double *cost, int nb, int d, int *start) {
    double *pre = xcalloc((size_t)nb + 1, sizeof(double));
    for (int i = 0; i < nb; i++)
        pre[i + 1] = pre[i] + cost[i];
    double *best = xcalloc((size_t)(d + 1) * (nb + 1), sizeof(double));
    int *cut = xcalloc((size_t)(d + 1) * (nb + 1), sizeof(int));
    for (int i = 0; i <= nb; i++)
        best[nb + 1 + i] = pre[i];
    for (int k = 2; k <= d; k++)
        for (int i = k; i <= nb; i++) {
            double *bk = &best[(size_t)k * (nb + 1) + i];
            *bk = INFINITY;
            for (int j = k - 1; j < i; j++) {
                double c = fmax(best[(size_t)(k - 1) * (nb + 1) + j], pre[i] - pre[j]);
                if (c < *bk) *bk = c, cut[(size_t)k * (nb + 1) + i] = j;
            }
        }
    start[d] = nb;
    for (int k = d, i = nb; k >= 2; k--)
        i = start[k - 1] = cut[(size_t)k * (nb + 1) + i];
    start[0] = 0;
    free(pre), free(best), free(cut);
}

static int evaluate(const Profile *p, const PlanInput *in, int w, int d, int b, int rc, Plan *out) {
    const ProfileRow *row = profile_row(p, b);
    const GPTConfig *c = &p->cfg;
    if (!row || in->global_batch % (w * b)) return 0;
    int K = in->global_batch / (w * b), L = c->L, nb = L + 2;
    if (d > 1 && K < d) return 0;
    if (d > L) return 0;
    double slow = in->cores > 0 ? fmax(1.0, in->workers * (double)p->threads / in->cores) : 1.0;
    double *cost = xcalloc((size_t)nb, sizeof(double));
    double C = c->C, V = c->V, T = p->T;
    double wparams[3] = {(V + c->maxT) * C, 12 * C * C + 13 * C, 2 * C};
    for (int i = 0; i < nb; i++) {
        int k = i == 0 ? PROF_EMBED : i == nb - 1 ? PROF_HEAD : PROF_LAYER;
        cost[i] = (row->fwd[k] + row->bwd[k] + (rc && k == PROF_LAYER ? row->fwd[k] : 0)) * slow;
    }
    int start[65];
    if (d > 64) {
        free(cost);
        return 0;
    }
    split(cost, nb, d, start);
    double boundary = b * T * C * 4.0;
    double p2p = d > 1 ? 2 * (boundary / in->bandwidth + in->latency) : 0;
    double worst = 0, worst_mem = 0, worst_ar = 0, worst_update = 0;
    char *sl = out->stage_layers;
    sl[0] = 0;
    for (int s = 0; s < d; s++) {
        double t = 0, params = 0;
        int layers = 0;
        for (int i = start[s]; i < start[s + 1]; i++) {
            int k = i == 0 ? PROF_EMBED : i == nb - 1 ? PROF_HEAD : PROF_LAYER;
            t += cost[i];
            params += wparams[k];
            layers += k == PROF_LAYER;
        }
        if (s == d - 1 && d > 1) params += V * C; // the tied wte replica
        t += p2p;
        worst = fmax(worst, t);
        double ar = w > 1 ? 2.0 * (w - 1) / w * params * 4 / in->bandwidth : 0;
        worst_ar = fmax(worst_ar, ar);
        worst_update = fmax(worst_update, params * p->update_s_per_param * slow);
        // memory: weights (2 versions when pipelined), grads (2 under 2BW), AdamW (2)
        double mem = params * 4 * ((d > 1 ? 2 : 1) + (d > 1 ? 2 : 1) + 2);
        int inflight = d > 1 ? d - s : 1;
        double per_layer = (15 * C + 4) * b * T * 4 + (double)b * c->H * T * T * 4;
        double acts = rc ? inflight * (layers + 1) * b * T * C * 4 + per_layer
                         : inflight * ((layers + 1) * b * T * C * 4 + layers * per_layer);
        if (start[s + 1] == nb) acts += inflight * (double)b * T * V * 4; // logits/probs
        acts += 7 * b * T * C * 4;                                        // scratch
        worst_mem = fmax(worst_mem, mem + acts);
        snprintf(sl + strlen(sl), sizeof out->stage_layers - strlen(sl), "%s%d", s ? "," : "",
                 layers);
    }
    free(cost);
    out->w = w, out->d = d, out->b = b, out->K = K, out->recompute = rc;
    out->compute_s = K * worst;
    out->allreduce_s = worst_ar;
    out->update_s = worst_update;
    out->step_s = fmax(out->compute_s, out->allreduce_s) + out->update_s;
    out->tokens_per_s = in->global_batch * T / out->step_s;
    out->mem_bytes = worst_mem;
    return worst_mem <= in->mem_bytes;
}

static int by_throughput(const void *a, const void *b) {
    double x = ((const Plan *)a)->tokens_per_s, y = ((const Plan *)b)->tokens_per_s;
    return x < y ? 1 : x > y ? -1 : 0;
}

int plan_search(const Profile *p, const PlanInput *in, Plan *out, int max) {
    Plan all[512];
    int n = 0;
    for (int d = 1; d <= in->workers; d++) {
        if (in->workers % d) continue;
        int w = in->workers / d;
        for (int i = 0; i < p->nrows; i++)
            for (int rc = 0; rc <= 1; rc++)
                if (n < 512 && evaluate(p, in, w, d, p->rows[i].b, rc, &all[n])) n++;
    }
    qsort(all, (size_t)n, sizeof(Plan), by_throughput);
    int k = n < max ? n : max;
    memcpy(out, all, (size_t)k * sizeof(Plan));
    return k;
}
