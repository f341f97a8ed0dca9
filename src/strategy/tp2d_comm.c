// tp2d_comm.c — the grid's collectives of a 2D tensor-parallel rank (strat_tp2d.c): the
// broadcasts, all-reduces, reduce-scatters and all-gathers along its row or down its column,
// the swap with the transposed rank, and the section hook the model calls as it enters a block
// (ZeRO 2/3 and block swapping place the block's buffers there); what they moved and how long
// they took, counted for the summary line.
#include <stdlib.h>

#include "../common.h"
#include "tp2d_impl.h"

static void count(T2 *t, double floats, double *layer) {
    if (!t->counting) return;
    if (t->section >= 1 && t->section <= t->whole->cfg.L)
        *layer += floats;
    else
        t->ends += floats;
}

static void t2_bcast(void *ctx, int axis, float *buf, size_t n, int root) {
    T2 *t = ctx;
    const Comm *c = t->axis[axis];
    double t0 = now_sec();
    comm_broadcast(c, buf, n * sizeof(float), root);
    t->comm_s += now_sec() - t0;
    if (c->rank != root) count(t, (double)n, &t->bcast);
}

static void t2_allreduce(void *ctx, int axis, float *buf, size_t n, int max) {
    T2 *t = ctx;
    const Comm *c = t->axis[axis];
    double t0 = now_sec();
    if (max)
        comm_allreduce_max(c, buf, n);
    else
        comm_allreduce(c, buf, n);
    t->comm_s += now_sec() - t0;
    count(t, 2.0 * (c->size - 1) / c->size * (double)n, &t->allred);
}

static void t2_allgather(void *ctx, int axis, float *buf, size_t each) {
    T2 *t = ctx;
    const Comm *c = t->axis[axis];
    size_t *counts = xmalloc((size_t)c->size * sizeof *counts),
           *displs = xmalloc((size_t)c->size * sizeof *displs);
    for (int r = 0; r < c->size; r++)
        counts[r] = each, displs[r] = (size_t)r * each;
    double t0 = now_sec();
    comm_allgatherv(c, buf, counts, displs);
    t->comm_s += now_sec() - t0;
    count(t, (double)(c->size - 1) * (double)each, &t->other);
    free(counts), free(displs);
}

// Exchanges n floats with the transposed rank (j,i) of the tp group (the diagonal copies).
static void t2_transpose(void *ctx, const float *send, float *recv, size_t n) {
    T2 *t = ctx;
    const Comm *c = t->outer->grid->tp_comm;
    int peer = t->g.j * t->g.q + t->g.i;
    if (peer == c->rank) {
        t->part.be->copy(recv, send, n);
        return;
    }
    double t0 = now_sec();
    CommReq rq[2] = {comm_irecv(c, recv, n, peer, 1), comm_isend(c, send, n, peer, 1)};
    comm_wait(&rq[0]), comm_wait(&rq[1]);
    t->comm_s += now_sec() - t0;
    count(t, (double)n, &t->other);
}

static void t2_section(void *ctx, int b) {
    T2 *t = ctx;
    t->section = b;
    if (t->z) tp2dz_section(t->z, b);
    if (t->sw) tp2ds_section(t->sw, b);
}

static void t2_rscatter(void *ctx, int axis, const float *send, float *recv, size_t each) {
    T2 *t = ctx;
    const Comm *c = t->axis[axis];
    size_t *counts = xmalloc((size_t)c->size * sizeof *counts);
    for (int r = 0; r < c->size; r++)
        counts[r] = each;
    double t0 = now_sec();
    CommReq rq = comm_ireduce_scatter(c, send, recv, counts);
    comm_wait(&rq);
    t->comm_s += now_sec() - t0;
    count(t, (double)(c->size - 1) * (double)each, &t->rscat);
    free(counts);
}

void tp2d_grid(T2 *t, int q, int i, int j) {
    t->g = (Tp2d){.q = q,
                  .i = i,
                  .j = j,
                  .bcast = t2_bcast,
                  .allreduce = t2_allreduce,
                  .reduce_scatter = t2_rscatter,
                  .allgather = t2_allgather,
                  .transpose = t2_transpose,
                  .section = t2_section,
                  .ctx = t};
}
