// pipeline_part.c — a pipeline stage that runs a part of its blocks (--tp, --sp, --cp;
// strat_pipeline.c): the tp group's collectives the part's blocks call, and the conversions
// between the part's layout and the whole model's flat layout that initial weights, resumes,
// checkpoints and exports use (cut into the part on the way in, gathered over tp on the way out).
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "ckpt_save.h"
#include "part_io.h"
#include "pipeline_part.h"

static void tp_allreduce(void *ctx, float *x, size_t n, int max) {
    const Comm *c = ((PipeState *)ctx)->s->grid->tp_comm;
    if (max)
        comm_allreduce_max(c, x, n);
    else
        comm_allreduce(c, x, n);
}

// --sp: rank r's `each` floats at x + r·each to every rank of the tp group, in place.
static void tp_allgather(void *ctx, float *x, size_t each) {
    const Comm *c = ((PipeState *)ctx)->s->grid->tp_comm;
    size_t n = (size_t)c->size, *counts = xmalloc(2 * n * sizeof *counts), *displs = counts + n;
    for (size_t r = 0; r < n; r++)
        counts[r] = each, displs[r] = r * each;
    CommReq q = comm_iallgatherv(c, x, counts, displs);
    comm_wait(&q);
    free(counts);
}

// --sp: rank r receives the tp group's sum of send[r·each, (r+1)·each).
static void tp_reduce_scatter(void *ctx, const float *send, float *recv, size_t each) {
    const Comm *c = ((PipeState *)ctx)->s->grid->tp_comm;
    size_t n = (size_t)c->size, *counts = xmalloc(n * sizeof *counts);
    for (size_t r = 0; r < n; r++)
        counts[r] = each;
    CommReq q = comm_ireduce_scatter(c, send, recv, counts);
    comm_wait(&q);
    free(counts);
}

// The gradient group (dp, or dp x cp: the ranks holding the same part of the stage).
const Comm *ppart_grad_comm(const Grid *g) { return g->cp > 1 ? g->dpcp_comm : g->dp_comm; }

// The whole layout's range of the part's [lo, hi), which starts and ends on tensor boundaries
// (a stage's blocks, or wte): the two layouts list the same tensors in the same order.
static void whole_range(const PipeState *ps, size_t lo, size_t hi, size_t *wlo, size_t *whi) {
    const GPT *w = ps->s->model, *p = &ps->part;
    *wlo = w->nparams, *whi = 0;
    for (int i = 0; i < p->ntensors; i++) {
        const TensorSpec *t = &p->tensors[i], *wt = &w->tensors[i];
        if (t->off < lo || t->off + t->n > hi) continue;
        if (wt->off < *wlo) *wlo = wt->off;
        if (wt->off + wt->n > *whi) *whi = wt->off + wt->n;
    }
    if (*whi < *wlo) *whi = *wlo;
}

static void stage_alloc(PipeState *ps, int n) {
    for (int k = 0; k < n; k++) // zeroed: the vocabulary's padding rows stay 0
        ps->cut.stage[k] = xcalloc(ps->part.nparams, sizeof(float));
}

void ppart_stage_free(PipeState *ps) { part_cut_free(&ps->cut); }

// The initial weights of the part's [lo, hi): the whole layout's range, cut.
int ppart_params(void *ctx, size_t lo, size_t hi, float *dst) {
    PipeState *ps = ctx;
    const StrategyData *d = ps->s->data;
    size_t wlo, whi;
    whole_range(ps, lo, hi, &wlo, &whi);
    stage_alloc(ps, 1);
    int rc = d->params_stream(d->ctx, wlo, whi, part_cut_sink, &ps->cut);
    if (!rc) ps->part.be->upload(dst, ps->cut.stage[CKPT_PARAMS] + lo, hi - lo);
    ppart_stage_free(ps);
    return rc;
}

// Resume: the whole layout's range of the part's [lo, hi) read for every array and cut; the
// part's [lo, hi) of the weights (and prev), [olo, ohi) of the moments uploaded.
int ppart_load(void *ctx, size_t lo, size_t hi, float *params, float *prev, size_t olo, size_t ohi,
               float *m, float *v) {
    PipeState *ps = ctx;
    const Backend *be = ps->part.be;
    size_t wlo, whi;
    whole_range(ps, lo, hi, &wlo, &whi);
    stage_alloc(ps, 4);
    CkptWant w = {.lo = {wlo, wlo, wlo, wlo},
                  .hi = {whi, whi, whi, prev ? whi : wlo},
                  .store = part_cut_store,
                  .store_ctx = &ps->cut};
    int rc = checkpoint_read_into(ps->s->resume_dir, ps->s->model->nparams, &w);
    if (!rc) {
        be->upload(params, ps->cut.stage[CKPT_PARAMS] + lo, hi - lo);
        be->upload(m, ps->cut.stage[CKPT_M] + olo, ohi - olo);
        be->upload(v, ps->cut.stage[CKPT_V] + olo, ohi - olo);
        if (prev && !w.no_prev) be->upload(prev, ps->cut.stage[CKPT_PREV] + lo, hi - lo);
    }
    ppart_stage_free(ps);
    return rc ? -1 : !prev || w.no_prev;
}

// Every tp rank's [lo, hi) of a part-layout host array into whole (host, the whole layout),
// on every rank of the stage's tp group.
static int tp_gather(PipeState *ps, const float *part, size_t lo, size_t hi, float *whole) {
    const Grid *g = ps->s->grid;
    size_t n = hi - lo, np = ps->part.nparams, T = (size_t)g->tp;
    size_t *counts = xmalloc(T * sizeof *counts), *displs = xmalloc(T * sizeof *displs);
    float *all = xmalloc((T * n + 1) * sizeof(float)), *one = xcalloc(np, sizeof(float));
    for (size_t r = 0; r < T; r++)
        counts[r] = n, displs[r] = r * n;
    memcpy(all + (size_t)g->tp_i * n, part + lo, n * sizeof(float));
    int rc = comm_allgatherv(g->tp_comm, all, counts, displs);
    for (size_t r = 0; r < T && !rc; r++) {
        memcpy(one + lo, all + r * n, n * sizeof(float));
        gpt_tp_to_whole(ps->s->model, &ps->part, (int)r, one, whole);
    }
    free(all), free(one), free(counts), free(displs);
    return rc;
}

// The stage's part [lo, hi) of the newest weights, moments (ZeRO 1-3: summed over the dp
// replicas, each holding its slice, zeros elsewhere) and 2bw's previous version, on host.
static int stage_host(PipeState *ps, size_t lo, size_t hi, const PipeShard *sh) {
    const Backend *be = ps->part.be;
    const Grid *g = ps->s->grid;
    stage_alloc(ps, sh->prev ? 4 : 3);
    pipeline_stage_weights(ps->p, ps->cut.stage[CKPT_PARAMS] + lo); // ZeRO-3: gathered
    be->download(ps->cut.stage[CKPT_M] + sh->lo, sh->m, sh->hi - sh->lo);
    be->download(ps->cut.stage[CKPT_V] + sh->lo, sh->v, sh->hi - sh->lo);
    if (sh->prev) pipeline_stage_prev(ps->p, ps->cut.stage[CKPT_PREV] + lo);
    const Comm *gc = ppart_grad_comm(g);
    if (ps->s->cfg->zero < 1 || gc->size < 2) return 0;
    return comm_allreduce(gc, ps->cut.stage[CKPT_M] + lo, hi - lo) ||
           comm_allreduce(gc, ps->cut.stage[CKPT_V] + lo, hi - lo);
}

// The part's flat range of this rank's stage.
static int stage_range(const PipeState *ps, size_t *lo, size_t *hi) {
    const GPT *m = &ps->part;
    int b0, b1;
    if (pipeline_partition(m, ps->s->grid->pp, ps->s->grid->pp_i, ps->pc.stage_layers, &b0, &b1))
        return -1;
    *lo = m->blocks[b0].off, *hi = m->blocks[b1 - 1].off + m->blocks[b1 - 1].n;
    return 0;
}

// A checkpoint in the whole layout: the stage's whole range assembled from its tp parts on
// replica 0's (dp 0, cp 0) tp rank 0, which writes it.
int ppart_save(Strategy *s, const char *dir, CkptMeta *meta, CkptExtraFn extra, void *extra_ctx,
               int keep) {
    PipeState *ps = s->impl;
    PipeShard sh;
    pipeline_shard(ps->p, &sh);
    size_t lo, hi, wlo, whi;
    if (stage_range(ps, &lo, &hi)) return -1;
    whole_range(ps, lo, hi, &wlo, &whi);
    float *w[4] = {NULL};
    int n = sh.prev ? 4 : 3, rc = stage_host(ps, lo, hi, &sh);
    int first = ppart_grad_comm(s->grid)->rank == 0; // dp 0, cp 0: assembles over tp
    int writes = first && s->grid->tp_i == 0;        // tp 0 writes
    for (int k = 0; k < n && !rc && first; k++) {
        w[k] = writes ? xalloc_floats(whi - wlo + 1) : NULL;
        rc = ckpt_tp_assemble(s->grid->tp_comm, s->model, &ps->part, ps->cut.stage[k], wlo, whi, 0,
                              w[k]);
    }
    ppart_stage_free(ps);
    CkptShard mine = {.lo = wlo, .hi = whi};
    if (!rc) mine.params = w[0], mine.m = w[1], mine.v = w[2], mine.prev = sh.prev ? w[3] : NULL;
    meta->opt_t = pipeline_opt_t(ps->p);
    comm_set_context(meta->step, "pipeline checkpoint");
    if (!rc)
        rc = ckpt_save_collective(dir, s->grid->world, writes ? &mine : NULL, meta, extra,
                                  extra_ctx, NULL, NULL, keep);
    for (int k = 0; k < 4; k++)
        free(w[k]);
    return rc;
}

// Every stage's part gathered over pp, then the parts over tp: the whole model into host.
int ppart_full_params(PipeState *ps, float *host) {
    float *part = xcalloc(ps->part.nparams, sizeof(float));
    int rc = pipeline_full_params(ps->p, part) || tp_gather(ps, part, 0, ps->part.nparams, host);
    free(part);
    return rc;
}

// The stage's part all-reduces (and with --sp gathers and reduce-scatters) over the tp group.
void ppart_install_tp(PipeState *ps, int sp) {
    ps->part.tp.allreduce = tp_allreduce;
    ps->part.tp.sp = sp;
    ps->part.tp.allgather = tp_allgather;
    ps->part.tp.reduce_scatter = tp_reduce_scatter;
    ps->part.tp.ctx = ps;
}
