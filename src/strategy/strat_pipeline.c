// strat_pipeline.c — pipeline parallelism: the blocks split into --pp stages, micro-batches
// streamed through them under gpipe, 1f1b or 2bw (PipeDream-2BW: two weight versions, the
// update of batch t applied in the background before batch t+2), --dp replicas of every stage
// with ZeRO-1 inside them (parallel/pipeline.h has the runtime).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../common.h"
#include "../parallel/pipeline.h"
#include "ckpt_save.h"
#include "strategy.h"

typedef struct {
    Pipeline *p;
    PipelineConfig pc;
    PipelineIO io;
} PipeState;

static int pp_wants(const StrategyConfig *c) { return c->pp > 1; }

static int pp_check(const StrategyConfig *c) {
    if (c->offload)
        return loom_fail("--offload with --pp: block swapping keeps a whole model per rank; "
                         "pipeline stages are not swapped");
    if (c->co2 || c->dump_grads)
        return loom_fail("--pp does not combine with --co2/--dump-grads yet");
    if (c->zero < 0 || c->zero > 1)
        return loom_fail("--pp composes with --zero 1 (AdamW state sharded over each stage's dp "
                         "replicas); --zero %d is not implemented inside a pipeline",
                         c->zero);
    return 0;
}

static void pp_batch(void *ctx, int step, int j, int *inputs, int *targets) {
    const Strategy *s = ctx;
    s->data->train(s->data->ctx, step, j, inputs, targets);
}

static int pp_params(void *ctx, size_t lo, size_t hi, float *dst) {
    const Strategy *s = ctx;
    return s->data->params(s->data->ctx, lo, hi, dst);
}

static void pp_val_batch(void *ctx, int w, int *inputs, int *targets) {
    const Strategy *s = ctx;
    s->data->val(s->data->ctx, w, inputs, targets);
}

static void pp_report(void *ctx, int step, double loss, double norm, float lr, double seconds,
                      double exposed, int applied) {
    StepRecord r = {.step = step,
                    .loss = loss,
                    .norm = norm,
                    .lr = lr,
                    .seconds = seconds,
                    .exposed = exposed,
                    .applied = applied,
                    .must_stop = !applied}; // the stream cannot skip an update
    strategy_emit(ctx, &r);
}

// Resume: a stage's weights, AdamW moments and, for 2bw, the previous weight version, streamed
// from the checkpoint into the stage's buffers.
static int pp_load(void *ctx, size_t lo, size_t hi, float *params, float *prev, size_t olo,
                   size_t ohi, float *m, float *v) {
    const Strategy *s = ctx;
    CkptWant w = {.lo = {lo, olo, olo, lo},
                  .hi = {hi, ohi, ohi, prev ? hi : lo},
                  .dst = {params, m, v, prev},
                  .be = s->model->be};
    if (checkpoint_read_into(s->resume_dir, s->model->nparams, &w)) return -1;
    return !prev || w.no_prev;
}

static int pp_create(Strategy *s) {
    const StrategyConfig *c = s->cfg;
    PipeState *ps = xcalloc(1, sizeof *ps);
    s->impl = ps;
    Schedule sched = !strcmp(c->schedule, "gpipe") ? SCHED_GPIPE
                     : !strcmp(c->schedule, "2bw") ? SCHED_2BW
                                                   : SCHED_1F1B;
    ps->pc = (PipelineConfig){.schedule = sched,
                              .K = c->grad_accum,
                              .B = c->batch,
                              .T = c->seq,
                              .recompute = c->recompute,
                              .stage_layers = c->stage_layers,
                              .grad_clip = c->opt.grad_clip,
                              .zero = c->zero,
                              .val_windows = c->val_windows};
    ps->io = (PipelineIO){.ctx = s,
                          .batch = pp_batch,
                          .report = pp_report,
                          .params = pp_params,
                          .val_batch = c->val_windows > 0 ? pp_val_batch : NULL,
                          .load = s->resume_dir ? pp_load : NULL};
    int opt_t = s->resume_dir ? s->resume->opt_t : 0;
    ps->p = pipeline_create(s->model, s->grid, &ps->pc, &c->opt, opt_t, s->start, &ps->io);
    return ps->p ? 0 : -1;
}

static int pp_step(Strategy *s, int step, int boundary) {
    pipeline_step(((PipeState *)s->impl)->p, step, boundary);
    return 0;
}

static void pp_drain(Strategy *s, int final) {
    (void) final;
    pipeline_drain(((PipeState *)s->impl)->p);
}

static double pp_evaluate(Strategy *s) { return pipeline_evaluate(((PipeState *)s->impl)->p); }

// Every rank calls it at the same step; a stage's range is written by replica 0, or by every
// replica for its ZeRO-1 slice.
static int pp_save(Strategy *s, const char *dir, CkptMeta *meta, int final, CkptExtraFn extra,
                   void *extra_ctx, int keep) {
    (void) final;
    Pipeline *p = ((PipeState *)s->impl)->p;
    PipeShard sh;
    int writes = pipeline_shard(p, &sh);
    CkptShard mine = {.lo = sh.lo,
                      .hi = sh.hi,
                      .params = sh.params,
                      .m = sh.m,
                      .v = sh.v,
                      .prev = sh.prev,
                      .be = s->model->be};
    meta->opt_t = pipeline_opt_t(p);
    comm_set_context(meta->step, "pipeline checkpoint");
    return ckpt_save_collective(dir, s->grid->world, writes ? &mine : NULL, meta, extra, extra_ctx,
                                NULL, NULL, keep);
}

static int pp_full_params(Strategy *s, float *host, int grads) {
    if (grads) return loom_fail("the pipeline strategy cannot hand out whole-model gradients");
    return pipeline_full_params(((PipeState *)s->impl)->p, host);
}

static void pp_describe(const Strategy *s, char *buf, size_t n) {
    snprintf(buf, n, "pipeline: pp %d (%s) x dp %d (zero %d)", s->grid->pp, s->cfg->schedule,
             s->grid->dp, s->cfg->zero);
}

static void pp_summary(Strategy *s, double exposed_s, double step_s) {
    (void)exposed_s, (void)step_s;
    Pipeline *p = ((PipeState *)s->impl)->p;
    double wb, gb, ob, ab;
    pipeline_memory(p, &wb, &gb, &ob, &ab);
    if (!s->lead) return;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(stderr,
            "loom: pipeline %d stages x dp %d (zero %d), schedule %s | peak %d micro-batches of "
            "activations held on stage 0 | stage 0 holds weights %.2f MiB, grads %.2f MiB, "
            "optimizer %.2f MiB, activations %.2f MiB (whole model %.2f MiB), peak RSS %.1f MiB\n",
            s->grid->pp, s->grid->dp, s->cfg->zero, s->cfg->schedule, pipeline_peak_inflight(p),
            wb / 1048576, gb / 1048576, ob / 1048576, ab / 1048576,
            s->model->nparams * 4.0 / 1048576, ru.ru_maxrss / 1024.0);
}

static void pp_destroy(Strategy *s) {
    PipeState *ps = s->impl;
    if (!ps) return;
    pipeline_free(ps->p);
    free(ps);
    s->impl = NULL;
}

const StrategyOps STRATEGY_PIPELINE = {.name = "pipeline",
                                       .wants = pp_wants,
                                       .check = pp_check,
                                       .create = pp_create,
                                       .step = pp_step,
                                       .drain = pp_drain,
                                       .evaluate = pp_evaluate,
                                       .save = pp_save,
                                       .full_params = pp_full_params,
                                       .comm_failed = strategy_end_job,
                                       .describe = pp_describe,
                                       .summary = pp_summary,
                                       .destroy = pp_destroy};
