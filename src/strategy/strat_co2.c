// strat_co2.c — CO2: every worker (a dp rank) takes τ local AdamW steps on its own copy, then
// the outer average of the round runs in the background during the next round
// (parallel/co2.h has the outer rule). The workers' losses of a round are averaged by one
// small non-blocking all-reduce started at the round end, ahead of the outer average, and the
// round's records go to the loop when it lands: no step ever blocks on it.
// A stop signal (strategy.h) rides on that all-reduce too: each worker adds its vote at the round
// end. Every worker waits for round R's reduction at the end of round R+1 anyway, so a vote seen
// there stops every worker at that round end (workers hold one model only at round ends); and a
// worker that votes at the end of round R waits for the reduction at once, so when every worker
// voted (mpirun forwards a signal to all of them) all stop at round R itself.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "../parallel/co2.h"
#include "strat_whole.h"

typedef struct {
    StepRecord *rec; // (tau) the round's records
    double *loss;    // (tau + 1) local losses and the stop vote, then their sums over workers
    int n, inflight;
    double votes; // once reduced: the workers' stop votes
    CommReq req;
} RoundLosses;

typedef struct {
    Whole w;
    CO2 *co2;          // in memory; with --offload the outer state lives in w.sw's tier
    int rounds;        // rounds ended (--offload)
    RoundLosses rl[2]; // [0]: the current round, [1]: the previous one, in flight
} Co2State;

// A CO2 state file's arrays in the tier (--offload; ctx is the Co2State): the outer momentum,
// the round's average, then the worker's AdamW m and v.
static int swap_file_fetch(void *ctx, int array, size_t at, size_t n, float *dst) {
    Co2State *o = ctx;
    return array < 2 ? swap_co2_fetch(o->w.sw, o->rounds, array, at, n, dst)
                     : swap_fetch(o->w.sw, array == 2 ? SWAP_M : SWAP_V, at, n, dst);
}

static int swap_file_store(void *ctx, int array, size_t at, size_t n, const float *src) {
    Co2State *o = ctx;
    return array < 2 ? swap_co2_store(o->w.sw, o->rounds, array, at, n, src)
                     : swap_store(o->w.sw, array == 2 ? SWAP_M : SWAP_V, at, n, src);
}

static int co2_wants(const StrategyConfig *c) { return c->co2; }

static int co2_check(const StrategyConfig *c) {
    if (c->offload && c->zero > 0)
        return loom_fail("--offload with --co2 --zero %d: the sharded outer state is not swapped "
                         "(--co2 with --zero 0 is)",
                         c->zero);
    if (c->zero < 0 || c->zero > 2)
        return loom_fail("--co2 composes with --zero 1 or 2 (sharded outer state)");
    if (c->tau < 1) return loom_fail("--tau must be >= 1");
    if (c->save_every > 0 && c->save_every % c->tau)
        return loom_fail("--save-every %d: under --co2 checkpoints are taken at round ends, so "
                         "it must be a multiple of --tau %d",
                         c->save_every, c->tau);
    if (c->dump_grads) return loom_fail("--co2 does not combine with --dump-grads");
    return 0;
}

static void round_log(Strategy *s, RoundLosses *r, int wait) {
    if (!r->inflight) return;
    if (wait)
        comm_wait(&r->req);
    else if (!comm_test(&r->req))
        return;
    for (int i = 0; i < r->n; i++) { // the mean over the workers that contributed
        r->rec[i].loss = r->loss[i] / r->req.contributors;
        strategy_emit(s, &r->rec[i]);
    }
    r->votes = r->loss[r->n];
    r->inflight = r->n = 0;
}

// End of a round: hands over the previous round's records (long since reduced), starts this
// round's average with this worker's stop vote. Returns the previous round's votes.
static double round_send(Strategy *s, Co2State *o, double vote) {
    round_log(s, &o->rl[1], 1);
    double prev = o->rl[1].votes;
    RoundLosses t = o->rl[1];
    o->rl[1] = o->rl[0], o->rl[0] = t;
    RoundLosses *r = &o->rl[1];
    r->loss[r->n] = vote;
    r->req = comm_iallreduce_f64(s->grid->dp_comm, r->loss, r->n + 1);
    r->inflight = 1, r->votes = 0;
    return prev;
}

// The stop rule at a round end (see the top): the previous round carried a vote, or this
// worker voted and so did every worker (the wait is for this round's small reduction only).
static int round_stop(Strategy *s, Co2State *o, double prev, double vote) {
    if (prev > 0) return 1;
    if (vote <= 0) return 0;
    round_log(s, &o->rl[1], 1);
    return o->rl[1].votes >= o->rl[1].req.contributors;
}

// A checkpoint saved mid-run by CO2 restores every worker's outer state and inner AdamW
// moments (same worker count, τ and sharding); any other checkpoint starts new rounds from its
// weights.
static int co2_resume(Strategy *s, Co2State *o) {
    const StrategyConfig *c = s->cfg;
    const CkptMeta *r = s->resume;
    int N = s->grid->dp, rank = s->grid->dp_i;
    if (r->co2_workers == 0) {
        if (s->lead)
            fprintf(stderr,
                    "loom: %s holds no CO2 state (a non-CO2 run, or the end of a CO2 run): new "
                    "CO2 rounds start from its weights\n",
                    s->resume_dir);
        return 0;
    }
    if (r->co2_workers != N)
        return loom_fail("%s: holds the CO2 state of %d workers; resume it with --dp %d",
                         s->resume_dir, r->co2_workers, r->co2_workers);
    if (r->co2_tau != c->tau || s->start % c->tau)
        return loom_fail("%s: CO2 state saved with --tau %d at step %d; resume it with --tau %d",
                         s->resume_dir, r->co2_tau, s->start, r->co2_tau);
    int sh = r->co2_sharded;
    if (sh != (c->zero > 0))
        return loom_fail("%s: CO2 state saved %s --zero ('%s'), this run needs '%s'; resume it %s "
                         "--zero",
                         s->resume_dir, sh ? "with" : "without", sh ? "co2-sharded" : "co2",
                         sh ? "co2" : "co2-sharded", sh ? "with" : "without");
    float *dev[CO2_STATE_MAX + 2];
    size_t lens[CO2_STATE_MAX + 2];
    const char *kind = "co2";
    char path[4300];
    snprintf(path, sizeof path, "%s/co2_%05d.bin", s->resume_dir, rank);
    int rc;
    if (o->w.sw) { // unsharded: momentum, the round's average, m, v — into the tier
        o->rounds = s->start / c->tau;
        for (int i = 0; i < 4; i++)
            lens[i] = s->model->nparams;
        rc = state_file_read_fn(path, kind, rank, N, lens, 4, swap_file_store, o);
    } else {
        int k = co2_state_buffers(o->co2, s->start / c->tau, dev, lens, &kind);
        dev[k] = o->w.opt.m, dev[k + 1] = o->w.opt.v; // this worker's own moments
        lens[k] = lens[k + 1] = s->model->nparams;
        rc = state_file_read(path, kind, rank, N, dev, lens, k + 2, s->model->be);
    }
    if (rc) {
        // this worker's own file: say so here (only rank 0 prints the run's errors)
        fprintf(stderr, "loom: rank %d: %s\n", rank, loom_errmsg());
        fflush(stderr);
        exit(EXIT_INPUT);
    }
    return 0;
}

static int co2_create_s(Strategy *s) {
    const StrategyConfig *c = s->cfg;
    Co2State *o = xcalloc(1, sizeof *o);
    s->impl = o;
    // workers never reduce gradients: their data-parallel mechanics run over a group of one
    const Comm *self = comm_split(s->grid->dp_comm, s->grid->dp_comm->rank, 0, "self");
    for (int i = 0; i < 2; i++) {
        o->rl[i].rec = xcalloc((size_t)c->tau, sizeof(StepRecord));
        o->rl[i].loss = xcalloc((size_t)c->tau + 1, sizeof(double));
    }
    if (whole_create(s, &o->w, self, 0)) return -1;
    CO2Config cc = whole_co2_config(c);
    if (o->w.sw) { // the anchor a(0) = the parameters, in the tier
        if (swap_co2_begin(o->w.sw)) return -1;
    } else {
        o->co2 = co2_create(s->model, s->grid->dp_comm, &cc);
    }
    return s->resume_dir ? co2_resume(s, o) : 0;
}

static int co2_step(Strategy *s, int step, int boundary) {
    (void)boundary;
    Co2State *o = s->impl;
    const StrategyConfig *c = s->cfg;
    double t0 = now_sec();
    double loss = whole_grads(s, &o->w, step);
    StepRecord r = {.step = step + 1, .loss = loss};
    if (o->w.failed) return -1;
    whole_update(s, &o->w, step, loss, &r);
    if (o->w.failed) return -1;
    if (!r.applied) { // a local decision: take the other workers down with this one
        char msg[256];
        snprintf(msg, sizeof msg,
                 "step %d: the loss or gradient is not finite (loss %g, grad norm %g); stopping "
                 "the job",
                 step + 1, loss, r.norm);
        comm_abort(EXIT_NUMERIC, msg);
    }
    // the round's end (or the run's: a final, partial round) is part of its step
    StepRecord *rec = &o->rl[0].rec[o->rl[0].n]; // (stays valid when the rounds swap places)
    o->rl[0].loss[o->rl[0].n++] = loss;
    round_log(s, &o->rl[1], 0);
    double wait = 0, overlap = 0, vote = 0, prev = 0;
    int round_end = (step + 1) % c->tau == 0 || step + 1 == c->steps;
    if (round_end) {
        Swapper *sw = o->w.sw;
        double e0 = sw ? swap_co2_exposed(sw) : co2_exposed(o->co2);
        vote = strategy_stop_vote();
        prev = round_send(s, o, vote); // ahead of the outer average
        if (sw && swap_co2_round_end(sw, ++o->rounds)) return -1;
        if (!sw) co2_round_end(o->co2), overlap = co2_overlap(o->co2);
        wait = (sw ? swap_co2_exposed(sw) : co2_exposed(o->co2)) - e0;
    }
    r.seconds = now_sec() - t0;
    r.exposed = wait;
    r.overlap = overlap;
    *rec = r;
    if (round_end) strategy_stop_tally(s, round_stop(s, o, prev, vote));
    return 0;
}

static void co2_drain(Strategy *s, int final) {
    Co2State *o = s->impl;
    round_log(s, &o->rl[1], 1);                                    // records up to here
    if (final && o->w.sw && swap_co2_finish(o->w.sw, o->rounds)) { // x = the final anchor
        fprintf(stderr, "loom: %s\n", loom_errmsg());
        exit(EXIT_IO);
    }
    if (final && !o->w.sw) co2_finish(o->co2);
}

static double co2_evaluate(Strategy *s) { return whole_evaluate(s, &((Co2State *)s->impl)->w); }

// A worker's own state, written next to the shards: its outer arrays and its AdamW moments.
typedef struct {
    int rank, N, n;
    const float *arrays[CO2_STATE_MAX + 2]; // backend memory
    size_t lens[CO2_STATE_MAX + 2];
    const char *kind;
    const Backend *be;
} CO2Files;

static int write_co2_files(const char *step_dir, void *ctx) {
    const CO2Files *f = ctx;
    char path[4300];
    snprintf(path, sizeof path, "%s/co2_%05d.bin", step_dir, f->rank);
    return state_file_write(path, f->kind, f->rank, f->N, f->arrays, f->lens, f->n, f->be);
}

static int write_swap_files(const char *step_dir, void *ctx) {
    Co2State *o = ctx;
    const Strategy *s = o->w.owner;
    char path[4300];
    size_t lens[4];
    for (int i = 0; i < 4; i++)
        lens[i] = s->model->nparams;
    snprintf(path, sizeof path, "%s/co2_%05d.bin", step_dir, s->grid->dp_i);
    return state_file_write_fn(path, "co2", s->grid->dp_i, s->grid->dp, lens, 4, swap_file_fetch,
                               o);
}

// Mid-run (a round end), every worker also saves its CO2 state so that the resumed run
// continues exactly; the final checkpoint holds the final anchor only.
static int co2_save(Strategy *s, const char *dir, CkptMeta *meta, int final, CkptExtraFn extra,
                    void *extra_ctx, int keep) {
    Co2State *o = s->impl;
    size_t P = s->model->nparams;
    CO2Files cf = {.rank = s->grid->dp_i, .N = s->grid->dp, .be = s->model->be};
    if (!final && o->w.sw) { // the same four arrays, streamed from the tier
        if (swap_co2_settle(o->w.sw)) return -1;
        cf.n = 0;
        meta->co2_workers = s->grid->dp, meta->co2_tau = s->cfg->tau, meta->co2_sharded = 0;
        return whole_save(s, &o->w, dir, meta, s->grid->dp_i == 0, extra, extra_ctx,
                          write_swap_files, o, keep);
    }
    if (!final) { // waits for the average in flight (kept, not applied); streamed to the file
        int k = co2_state(o->co2, cf.arrays, cf.lens, &cf.kind);
        cf.arrays[k] = o->w.opt.m, cf.arrays[k + 1] = o->w.opt.v;
        cf.lens[k] = cf.lens[k + 1] = P;
        cf.n = k + 2;
        meta->co2_workers = s->grid->dp, meta->co2_tau = s->cfg->tau;
        meta->co2_sharded = s->cfg->zero > 0;
    }
    // every worker's strategy is unsharded: the first writes the parameters
    return whole_save(s, &o->w, dir, meta, s->grid->dp_i == 0, extra, extra_ctx,
                      final ? NULL : write_co2_files, &cf, keep);
}

static int co2_full_params(Strategy *s, float *host, int grads) {
    return whole_full_params(s, &((Co2State *)s->impl)->w, host, grads);
}

static void co2_describe(const Strategy *s, char *buf, size_t n) {
    snprintf(buf, n, "co2: %d workers, tau %d%s", s->grid->dp, s->cfg->tau,
             s->cfg->zero ? ", sharded outer state" : "");
}

static void co2_summary(Strategy *s, double exposed_s, double step_s) {
    Co2State *o = s->impl;
    if (o->w.sw && s->lead) whole_swap_summary(&o->w);
    if (!s->lead || step_s <= 0) return;
    fprintf(stderr,
            "loom: co2 %d workers, tau %d | exposed communication %.1f%% of step time | CO2 "
            "state %.1f MiB per worker%s\n",
            s->grid->dp, s->cfg->tau, 100 * exposed_s / step_s,
            (o->co2 ? co2_memory(o->co2) : 4.0 * sizeof(float) * s->model->nparams) / 1048576,
            o->co2 ? "" : " (in the offload tier)");
}

static void co2_destroy(Strategy *s) {
    Co2State *o = s->impl;
    if (!o) return;
    co2_free(o->co2);
    whole_free(s, &o->w);
    for (int i = 0; i < 2; i++)
        free(o->rl[i].rec), free(o->rl[i].loss);
    free(o);
    s->impl = NULL;
}

const StrategyOps STRATEGY_CO2 = {.name = "co2",
                                  .wants = co2_wants,
                                  .check = co2_check,
                                  .create = co2_create_s,
                                  .step = co2_step,
                                  .drain = co2_drain,
                                  .evaluate = co2_evaluate,
                                  .save = co2_save,
                                  .full_params = co2_full_params,
                                  .comm_failed = strategy_end_job,
                                  .describe = co2_describe,
                                  .summary = co2_summary,
                                  .destroy = co2_destroy};
