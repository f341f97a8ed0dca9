// co2_ckpt.c — a CO2 worker's own state in checkpoints (see strat_co2.h). At a round end every
// worker holds the anchor as its weights (the shards), and writes co2_<rank>.bin: its outer
// arrays (parallel/co2.h co2_state) and its AdamW moments. Mid-round — a stop that could not
// wait for the next round end — the workers' weights differ, so the file also holds the
// worker's own weights x_r and, unsharded, the anchor a(t) (the shards then hold worker 0's
// weights); its kind says which ("co2-mid", "co2-sharded-mid"). Either resumes exactly.
#include <stdio.h>
#include <stdlib.h>

#include "../common.h"
#include "strat_co2.h"

// The file's arrays in the tier (--offload; ctx is the Co2State): the outer momentum, the
// round's average, mid-round the anchor, then the worker's AdamW m and v, mid-round its weights.
static int swap_array(const Co2State *o, int array, int *co2) {
    *co2 = array < 2 || (o->mid && array == 2);
    if (*co2) return array;
    int k = array - (o->mid ? 3 : 2);
    return k == 0 ? SWAP_M : k == 1 ? SWAP_V : SWAP_PARAMS;
}

static int swap_file_fetch(void *ctx, int array, size_t at, size_t n, float *dst) {
    Co2State *o = ctx;
    int co2, a = swap_array(o, array, &co2);
    return co2 ? swap_co2_fetch(o->w.sw, o->rounds, a, at, n, dst)
               : swap_fetch(o->w.sw, a, at, n, dst);
}

static int swap_file_store(void *ctx, int array, size_t at, size_t n, const float *src) {
    Co2State *o = ctx;
    int co2, a = swap_array(o, array, &co2);
    return co2 ? swap_co2_store(o->w.sw, o->rounds, a, at, n, src)
               : swap_store(o->w.sw, a, at, n, src);
}

const char *co2_kind(int sharded, int mid) {
    return sharded ? (mid ? "co2-sharded-mid" : "co2-sharded") : (mid ? "co2-mid" : "co2");
}

int co2_file_arrays(CO2 *co2, const AdamW *opt, GPT *m, int round, int mid, float **a, size_t *lens,
                    int read) {
    size_t P = m->nparams;
    const char *kind;
    float *outer[CO2_STATE_MAX];
    int k = read ? co2_state_buffers(co2, round, outer, lens, &kind)
                 : co2_state(co2, (const float **)outer, lens, &kind);
    for (int i = 0; i < k; i++)
        a[i] = outer[i];
    if (mid && co2_anchor(co2)) a[k] = co2_anchor(co2), lens[k++] = P;
    a[k] = opt->m, a[k + 1] = opt->v, lens[k] = lens[k + 1] = P, k += 2;
    if (mid) a[k] = m->params, lens[k++] = P;
    return k;
}

static int memory_arrays(Strategy *s, Co2State *o, int mid, float **a, size_t *lens, int read) {
    return co2_file_arrays(o->co2, &o->w.opt, s->model, s->start / s->cfg->tau, mid, a, lens, read);
}

int co2_ckpt_layout(const Strategy *s) {
    const StrategyConfig *c = s->cfg;
    const CkptMeta *r = s->resume;
    const Grid *g = s->grid;
    if (r->co2_workers == 0) {
        if (s->lead)
            fprintf(stderr,
                    "loom: %s holds no CO2 state (a non-CO2 run, or the end of a CO2 run): new "
                    "CO2 rounds start from its weights\n",
                    s->resume_dir);
        return 1;
    }
    int tp = r->co2_tp > 1 ? r->co2_tp : 1, cp = r->co2_cp > 1 ? r->co2_cp : 1;
    if (r->co2_workers != g->dp)
        return loom_fail("%s: holds the CO2 state of %d workers; resume it with --dp %d",
                         s->resume_dir, r->co2_workers, r->co2_workers);
    if (tp != g->tp || cp != g->cp)
        return loom_fail("%s: holds the CO2 state of workers of --tp %d --cp %d ranks (each "
                         "rank's own part); this run has --tp %d --cp %d: resume it with --tp %d "
                         "--cp %d",
                         s->resume_dir, tp, cp, g->tp, g->cp, tp, cp);
    if (tp > 1 && r->co2_tp2d != c->tp_2d)
        return loom_fail(
            "%s: holds the CO2 state of workers of --tp %d --tp-mode %s ranks (each rank's own "
            "part); this run has --tp-mode %s: resume it with --tp %d --tp-mode %s",
            s->resume_dir, tp, r->co2_tp2d ? "2d" : "1d", c->tp_2d ? "2d" : "1d", tp,
            r->co2_tp2d ? "2d" : "1d");
    int pp = r->co2_pp > 1 ? r->co2_pp : 1;
    if (pp != g->pp)
        return loom_fail("%s: holds the CO2 state of workers of --pp %d stages (each rank's own "
                         "stage); this run has --pp %d: resume it with --pp %d",
                         s->resume_dir, pp, g->pp, pp);
    if (r->co2_tau != c->tau)
        return loom_fail("%s: CO2 state saved with --tau %d at step %d; resume it with --tau %d",
                         s->resume_dir, r->co2_tau, s->start, r->co2_tau);
    int sh = r->co2_sharded;
    if (sh != (c->zero > 0))
        return loom_fail("%s: CO2 state saved %s --zero ('%s'), this run needs '%s'; resume it %s "
                         "--zero",
                         s->resume_dir, sh ? "with" : "without", co2_kind(sh, 0), co2_kind(!sh, 0),
                         sh ? "with" : "without");
    return 0;
}

void co2_ckpt_meta(const Strategy *s, CkptMeta *meta) {
    meta->co2_workers = s->grid->dp, meta->co2_tau = s->cfg->tau;
    meta->co2_sharded = s->cfg->zero > 0;
    meta->co2_tp = s->grid->tp, meta->co2_cp = s->grid->cp, meta->co2_pp = s->grid->pp;
    meta->co2_tp2d = s->cfg->tp_2d && s->grid->tp > 1;
}

// This worker's own file: say so here (only rank 0 prints the run's errors).
static _Noreturn void read_failed(int rank) {
    fprintf(stderr, "loom: rank %d: %s\n", rank, loom_errmsg());
    fflush(stderr);
    exit(EXIT_INPUT);
}

// A checkpoint saved mid-run by CO2 restores every worker's outer state and inner AdamW
// moments (same worker count, τ and sharding), and mid-round its weights; any other checkpoint
// starts new rounds from its weights.
int co2_resume(Strategy *s, Co2State *o) {
    const StrategyConfig *c = s->cfg;
    int N = s->grid->dp, rank = s->grid->dp_i, mid = s->start % c->tau != 0;
    int layout = co2_ckpt_layout(s);
    if (layout) return layout > 0 ? 0 : -1;
    float *dev[CO2_STATE_MAX + 4];
    size_t lens[CO2_STATE_MAX + 4];
    if (!o->w.sw) {
        int k = memory_arrays(s, o, mid, dev, lens, 1);
        co2_read_file(s, rank, N, dev, lens, k);
        return 0;
    }
    // unsharded: momentum, the round's average, (anchor), m, v, (x) — the tier
    char path[4300];
    snprintf(path, sizeof path, "%s/co2_%05d.bin", s->resume_dir, rank);
    o->rounds = s->start / c->tau, o->mid = mid;
    int n = mid ? 6 : 4;
    for (int i = 0; i < n; i++)
        lens[i] = s->model->nparams;
    if (state_file_read_fn(path, co2_kind(0, mid), rank, N, lens, n, swap_file_store, o))
        read_failed(rank);
    return 0;
}

void co2_read_file(const Strategy *s, int rank, int N, float *const *dev, const size_t *lens,
                   int k) {
    char path[4300];
    snprintf(path, sizeof path, "%s/co2_%05d.bin", s->resume_dir, rank);
    int mid = s->start % s->cfg->tau != 0;
    if (state_file_read(path, co2_kind(s->resume->co2_sharded, mid), rank, N, dev, lens, k,
                        s->model->be))
        read_failed(rank);
}

int co2_write_file(const char *step_dir, void *ctx) {
    const CO2Files *f = ctx;
    char path[4300];
    snprintf(path, sizeof path, "%s/co2_%05d.bin", step_dir, f->rank);
    return state_file_write(path, f->kind, f->rank, f->N, f->arrays, f->lens, f->n, f->be);
}

static int write_swap_files(const char *step_dir, void *ctx) {
    Co2State *o = ctx;
    const Strategy *s = o->w.owner;
    char path[4300];
    size_t lens[6];
    int n = o->mid ? 6 : 4;
    for (int i = 0; i < n; i++)
        lens[i] = s->model->nparams;
    snprintf(path, sizeof path, "%s/co2_%05d.bin", step_dir, s->grid->dp_i);
    return state_file_write_fn(path, co2_kind(0, o->mid), s->grid->dp_i, s->grid->dp, lens, n,
                               swap_file_fetch, o);
}

static int settle_failed(const char *step_dir, void *ctx) {
    (void)step_dir;
    return loom_fail("%s", (const char *)ctx);
}

// Mid-run (a round end, or mid-round for a stop), every worker also saves its CO2 state so
// that the resumed run continues exactly; the final checkpoint holds the final anchor only.
int co2_save(Strategy *s, const char *dir, CkptMeta *meta, int final, CkptExtraFn extra,
             void *extra_ctx, int keep) {
    Co2State *o = s->impl;
    int mid = !final && meta->step % s->cfg->tau != 0;
    if (mid) co2_rounds_flush(s, &o->r); // the round's records so far (the loop logs them)
    CO2Files cf = {.rank = s->grid->dp_i, .N = s->grid->dp, .be = s->model->be};
    if (!final) co2_ckpt_meta(s, meta);
    if (!final && o->w.sw) { // the same arrays, streamed from the tier
        // a worker whose tier failed still takes part in the collective save, which then fails
        // on every worker with its message (none is left waiting)
        char err[1024] = "";
        if (swap_co2_settle(o->w.sw)) snprintf(err, sizeof err, "%s", loom_errmsg());
        o->mid = mid;
        return whole_save(s, &o->w, dir, meta, s->grid->dp_i == 0, extra, extra_ctx,
                          err[0] ? settle_failed : write_swap_files, err[0] ? (void *)err : o,
                          keep);
    }
    if (!final) { // waits for the average in flight (kept, not applied); streamed to the file
        cf.n = memory_arrays(s, o, mid, (float **)cf.arrays, cf.lens, 0);
        cf.kind = co2_kind(s->cfg->zero > 0, mid);
    }
    // every worker's strategy is unsharded: the first writes the parameters
    return whole_save(s, &o->w, dir, meta, s->grid->dp_i == 0, extra, extra_ctx,
                      final ? NULL : co2_write_file, &cf, keep);
}
