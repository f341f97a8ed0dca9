// strat_dp.c — one process, or data parallelism over the dp axis with ZeRO 0–3: every rank
// runs the step's micro-batches on its own data, gradients are reduced in buckets that overlap
// the backward (or reduce-scattered into ZeRO shards), and AdamW updates the slice each rank
// owns (parallel/data_parallel.h has the mechanics).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "../common.h"
#include "compose.h"
#include "strat_whole.h"

static int dp_wants(const StrategyConfig *c) {
    (void)c;
    return 1; // the default
}

static const char SWAP_ZERO[] = "block swapping keeps every rank's parameters whole in its own "
                                "tier (ZeRO 0, 1 or 2)";
static const char DUMP_ZERO[] = "the first step's gradients are written whole from every rank's "
                                "copy (ZeRO 0 or 1)";
static const FeaturePair DP_PAIRS[] = {
    {F_OFFLOAD, F_ZERO3, SWAP_ZERO},
    {F_DUMP_GRADS, F_ZERO2, DUMP_ZERO},
    {F_DUMP_GRADS, F_ZERO3, DUMP_ZERO},
    {F_OFFLOAD, F_DUMP_GRADS, "the gradients live in the offload tier, not in memory"},
    {0, 0, NULL}};
static const Supports DP_SUPPORTS = {
    .self = {F_COUNT},
    .features = FEAT(F_DP) | FEAT(F_ZERO1) | FEAT(F_ZERO2) | FEAT(F_ZERO3) | FEAT(F_OFFLOAD) |
                FEAT(F_OFFLOAD_DEVICE) | FEAT(F_RECOMPUTE) | FEAT(F_DUMP_GRADS),
    .pairs = DP_PAIRS,
    .runs_with = "data parallelism runs ZeRO 0-3, --offload (disk or host) and --recompute"};

static int dp_check(const StrategyConfig *c) {
    if (c->zero < 0 || c->zero > 3) return loom_fail("--zero must be 0, 1, 2 or 3");
    return 0;
}

static int dp_create_s(Strategy *s) {
    Whole *w = xcalloc(1, sizeof *w);
    s->impl = w;
    if (s->resume_dir && s->resume->co2_workers > 0 && s->lead)
        fprintf(stderr,
                "loom: %s was saved mid-run by CO2; without --co2 training continues from %s "
                "with worker 0's AdamW moments (the average in flight is dropped)\n",
                s->resume_dir,
                s->resume->step % s->resume->co2_tau ? "worker 0's weights (saved mid-round)"
                                                     : "its anchor");
    return whole_create(s, w, s->grid->dp_comm, s->cfg->zero);
}

static int dp_step(Strategy *s, int step, int boundary) {
    (void)boundary;
    Whole *w = s->impl;
    double t0 = now_sec();
    double loss = whole_grads(s, w, step);
    if (w->failed) return -1;
    int N = s->grid->dp;
    double v[2] = {loss, strategy_stop_vote()}; // the stop vote rides on the loss's reduction
    if (N > 1) {
        comm_allreduce_f64(s->grid->dp_comm, v, 2);
        loss = v[0] / N;
    }
    strategy_stop_tally(s, v[1]);
    StepRecord r = {.step = step + 1, .loss = loss};
    whole_update(s, w, step, loss, &r);
    if (w->failed) return -1;
    r.seconds = now_sec() - t0;
    r.exposed = N > 1 && w->dp ? dp_exposed_wait(w->dp) : -1;
    r.overlap = N > 1 && w->dp ? dp_overlap(w->dp) : 0;
    strategy_emit(s, &r);
    return 0;
}

static void dp_drain(Strategy *s, int final) { (void)s, (void) final; }

static double dp_evaluate(Strategy *s) { return whole_evaluate(s, s->impl); }

static int dp_save(Strategy *s, const char *dir, CkptMeta *meta, int final, CkptExtraFn extra,
                   void *extra_ctx, int keep) {
    (void) final;
    // ZeRO 0: every rank holds the same parameters, so only the first writes them
    int writes = s->cfg->zero > 0 || s->grid->dp_i == 0;
    return whole_save(s, s->impl, dir, meta, writes, extra, extra_ctx, NULL, NULL, keep);
}

static int dp_full(Strategy *s, float *host, int grads) {
    return whole_full_params(s, s->impl, host, grads);
}

static int dp_param_source(Strategy *s, ParamSource *src) {
    return whole_param_source(s->impl, src);
}

static void dp_describe(const Strategy *s, char *buf, size_t n) {
    const char *sw = !s->cfg->offload ? ""
                     : s->cfg->offload_host && s->cfg->offload_dir
                         ? ", blocks swapped from host memory and a disk below it onto the device"
                     : s->cfg->offload_host ? ", blocks swapped from host memory onto the device"
                     : !s->model->be->host_memory
                         ? ", blocks swapped from a disk tier onto the device"
                         : ", blocks swapped through a disk tier";
    if (s->grid->dp > 1 || s->cfg->zero)
        snprintf(buf, n, "data parallel: dp %d (zero %d)%s", s->grid->dp, s->cfg->zero, sw);
    else
        snprintf(buf, n, "one process%s", sw);
}

static void dp_summary(Strategy *s, double exposed_s, double step_s) {
    Whole *w = s->impl;
    if (w->sw && s->lead) whole_swap_summary(w);
    if (s->grid->dp == 1 || !s->lead || step_s <= 0 || !w->dp) return;
    double pb, gb, ob;
    dp_memory(w->dp, &pb, &gb, &ob);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(stderr,
            "loom: dp %d zero %d | exposed communication %.1f%% of step time | per rank: "
            "params %.1f MiB, grads %.1f MiB, optimizer %.1f MiB, peak RSS %.1f MiB\n",
            s->grid->dp, s->cfg->zero, 100 * exposed_s / step_s, pb / 1048576, gb / 1048576,
            ob / 1048576, ru.ru_maxrss / 1024.0);
}

static void dp_destroy(Strategy *s) {
    if (!s->impl) return;
    whole_free(s, s->impl);
    free(s->impl);
    s->impl = NULL;
}

const StrategyOps STRATEGY_DP = {.name = "data-parallel",
                                 .wants = dp_wants,
                                 .supports = &DP_SUPPORTS,
                                 .check = dp_check,
                                 .create = dp_create_s,
                                 .step = dp_step,
                                 .drain = dp_drain,
                                 .evaluate = dp_evaluate,
                                 .save = dp_save,
                                 .full_params = dp_full,
                                 .param_source = dp_param_source,
                                 .comm_failed = strategy_end_job,
                                 .describe = dp_describe,
                                 .summary = dp_summary,
                                 .destroy = dp_destroy};
