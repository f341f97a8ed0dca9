// co2.c — the CO2 outer loop (see co2.h).
#include "co2.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"

struct CO2 {
    GPT *m;
    const Comm *c;
    CO2Config cfg;
    size_t P;
    float *anchor, *mom;
    float *delta[2];  // Δ of the round being averaged / of the round before
    CommReq req[2];
    int round;        // rounds ended so far
    double exposed;
};

CO2 *co2_create(GPT *m, const Comm *c, const CO2Config *cfg) {
    CO2 *o = xcalloc(1, sizeof *o);
    o->m = m;
    o->c = c;
    o->cfg = *cfg;
    o->P = m->nparams;
    const Backend *be = m->be;
    o->anchor = be->alloc(o->P);
    o->mom = be->alloc(o->P);
    o->delta[0] = be->alloc(o->P);
    o->delta[1] = be->alloc(o->P);
    be->copy(o->anchor, m->params, o->P);
    return o;
}

void co2_free(CO2 *o) {
    if (!o) return;
    const Backend *be = o->m->be;
    be->release(o->anchor);
    be->release(o->mom);
    be->release(o->delta[0]);
    be->release(o->delta[1]);
    free(o);
}

static double norm_of(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

// m ← β·m + avg/λ, clipped; a ← a − α·m.  avg holds the worker-mean Δ̄.
static void outer_update(CO2 *o, const float *avg) {
    const CO2Config *c = &o->cfg;
    const GPT *m = o->m;
    for (int i = 0; i < m->ntensors; i++) {
        const TensorSpec *t = &m->tensors[i];
        float *mo = o->mom + t->off, *a = o->anchor + t->off;
        const float *d = avg + t->off;
        float lambda = c->lambda;
        if (c->adaptive) {  // how far the anchor moved since Δ̄ was computed, relative to Δ̄
            double moved = c->alpha * norm_of(mo, t->n), size = norm_of(d, t->n);
            lambda = size > 0 ? (float)(1.0 + moved / size) : 1.0f;
        }
        float inv = 1.0f / lambda, beta = c->beta, phi = c->phi, alpha = c->alpha;
#pragma omp parallel for simd schedule(static) if (t->n > 65536)
        for (size_t k = 0; k < t->n; k++) {
            float v = beta * mo[k] + d[k] * inv;
            if (phi > 0) v = v < -phi ? -phi : v > phi ? phi : v;
            mo[k] = v;
            a[k] -= alpha * v;
        }
    }
}

static void wait_avg(CO2 *o, int slot) {
    double t0 = now_sec();
    comm_wait(&o->req[slot]);
    o->exposed += now_sec() - t0;
}

void co2_round_end(CO2 *o) {
    o->round++;
    int cur = o->round & 1, prev = cur ^ 1;
    float *d = o->delta[cur], *x = o->m->params, *a = o->anchor;
    float invN = 1.0f / (float)o->c->size;
    size_t P = o->P;
    // Δ(t)/N, so that the all-reduce sum is the worker mean
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < P; i++) d[i] = (a[i] - x[i]) * invN;
    o->req[cur] = comm_iallreduce(o->c, d, P);
    if (o->round >= 2) {  // apply the average started one round ago
        wait_avg(o, prev);
        outer_update(o, o->delta[prev]);
    }
    o->m->be->copy(x, a, P);  // x_r ← a(t)
}

void co2_finish(CO2 *o) {
    if (o->round >= 1) {
        int last = o->round & 1;
        wait_avg(o, last);
        outer_update(o, o->delta[last]);
    }
    o->m->be->copy(o->m->params, o->anchor, o->P);
}

double co2_exposed(const CO2 *o) { return o->exposed; }

double co2_memory(const CO2 *o) { return 4.0 * sizeof(float) * o->P; }
