// strat_pipeline.c — pipeline parallelism: the blocks split into --pp stages, micro-batches
// streamed through them under gpipe, 1f1b or 2bw (PipeDream-2BW: two weight versions, the
// update of batch t applied in the background before batch t+2), --dp replicas of every stage
// with ZeRO 1-3 inside them (under every schedule; parallel/pipeline.h has the runtime,
// pipeline_zero.c the shards). With --tp M every stage runs
// the Megatron 1D tensor-parallel part of its blocks (model/tp_layout.c): the stage's tp group
// all-reduces partial results as strat_tp does, activations go to the next stage's rank of the
// same tp index, and initial weights, resumes, checkpoints and exports stay in the whole
// model's flat layout (cut into the part on the way in, gathered over tp on the way out;
// pipeline_part.c).
// With --sp the part runs sequence parallel (model/seq_parallel.c): the activations between
// stages are the rank's B·T/tp rows. With --cp M (ring attention, parallel/ring_attention.c)
// every stage's part runs on the rank's two chunks of every sequence (T/cp tokens), its
// attention around the ring of its stage's cp ranks, activations go to the next stage's rank
// of the same (dp, cp, tp) coordinates, and a stage's gradients are summed over dp x cp.
// With --co2 (gpipe/1f1b, plain stages, ZeRO 0) every pipeline is a CO2 worker
// (strat_pp_co2.c): nothing is reduced over dp, and round ends run CO2's rule per stage over dp.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../common.h"
#include "../parallel/pipeline.h"
#include "ckpt_save.h"
#include "co2_rounds.h"
#include "compose.h"
#include "part_io.h"
#include "pipeline_part.h"
#include "pipeline_swap.h"
#include "strat_cp.h"
#include "strat_pp_co2.h"
#include "strategy.h"

static int pp_wants(const StrategyConfig *c) { return c->pp > 1; }

static const char PP_CO2_ZERO[] = "CO2 over pipeline workers keeps every stage's outer state "
                                  "unsharded (--zero 0)";
static const char PP_CO2_TP[] = "CO2 over pipeline workers runs plain stages (no tensor or "
                                "context parallelism inside them)";
static const char PP_OFF_ZERO[] = "a swapped pipeline stage keeps its whole gradient and "
                                  "moments in its own tier (--zero 0)";
static const char PP_OFF_TP[] = "a swapped pipeline stage runs plain blocks (no tensor or "
                                "context parallelism inside it)";
static const FeaturePair PP_PAIRS[] = {{F_CO2, F_ZERO1, PP_CO2_ZERO},
                                       {F_CO2, F_ZERO2, PP_CO2_ZERO},
                                       {F_CO2, F_ZERO3, PP_CO2_ZERO},
                                       {F_CO2, F_TP, PP_CO2_TP},
                                       {F_CO2, F_SP, PP_CO2_TP},
                                       {F_CO2, F_CP, PP_CO2_TP},
                                       {F_OFFLOAD, F_ZERO1, PP_OFF_ZERO},
                                       {F_OFFLOAD, F_ZERO2, PP_OFF_ZERO},
                                       {F_OFFLOAD, F_ZERO3, PP_OFF_ZERO},
                                       {F_OFFLOAD, F_TP, PP_OFF_TP},
                                       {F_OFFLOAD, F_SP, PP_OFF_TP},
                                       {F_OFFLOAD, F_CP, PP_OFF_TP},
                                       {F_OFFLOAD, F_CO2,
                                        "CO2's pipeline workers keep their "
                                        "stages in memory"},
                                       {0, 0, NULL}};
static const Supports PP_SUPPORTS = {
    .self = {F_PP, F_COUNT},
    .features = FEAT(F_PP) | FEAT(F_DP) | FEAT(F_ZERO1) | FEAT(F_ZERO2) | FEAT(F_ZERO3) |
                FEAT(F_TP) | FEAT(F_SP) | FEAT(F_CP) | FEAT(F_RECOMPUTE) | FEAT(F_CO2) |
                FEAT(F_OFFLOAD) | FEAT(F_OFFLOAD_DEVICE),
    .pairs = PP_PAIRS,
    .runs_with = "pipeline stages run with data parallelism (ZeRO 0-3 over each stage's "
                 "replicas, every schedule), 1D --tp, --sp, --cp, --recompute and "
                 "--co2 (gpipe/1f1b, ZeRO 0, plain stages) and --offload (every schedule, ZeRO 0, "
                 "plain stages)"};

static int pp_check(const StrategyConfig *c) {
    if (cp_check(c) || (c->co2 && co2_check_config(c))) return -1;
    if (c->co2 && c->schedule && !strcmp(c->schedule, "2bw"))
        return loom_fail("--co2 with --schedule 2bw: 2bw applies every update one batch late, "
                         "so a round's end has no settled weights to average (use gpipe or "
                         "1f1b)");
    if (c->sp && (c->tp < 2 || c->tp_2d))
        return loom_fail("--sp with --pp splits the sequence over each stage's 1D tensor-parallel "
                         "group: it needs --tp >= 2 (got --tp %d%s)",
                         c->tp, c->tp_2d ? " --tp-mode 2d" : "");
    if (c->sp && c->seq / c->cp % c->tp)
        return loom_fail("--sp splits every sequence over the tensor-parallel group: --seq %d%s "
                         "is not divisible by --tp %d",
                         c->seq / c->cp, c->cp > 1 ? " (a context-parallel rank's tokens)" : "",
                         c->tp);
    return 0;
}

// Every rank of a stage's tp group and cp ring reads its dp replica's micro-batches (a cp rank
// keeps its chunks of them).
static void pp_batch(void *ctx, int step, int j, int *inputs, int *targets) {
    PipeState *ps = ctx;
    const Strategy *s = ps->s;
    if (!ps->ring) return s->data->train(s->data->ctx, step, j, inputs, targets);
    s->data->train(s->data->ctx, step, j, ps->seq_in, ps->seq_tg);
    cp_take_batch(ps->s, ps->seq_in, ps->seq_tg, inputs, targets);
}

static int pp_params(void *ctx, size_t lo, size_t hi, float *dst) {
    const Strategy *s = ((PipeState *)ctx)->s;
    return s->data->params(s->data->ctx, lo, hi, dst);
}

static void pp_val_batch(void *ctx, int w, int *inputs, int *targets) {
    PipeState *ps = ctx;
    const Strategy *s = ps->s;
    if (!ps->ring) return s->data->val(s->data->ctx, w, inputs, targets);
    s->data->val(s->data->ctx, w, ps->seq_in, ps->seq_tg);
    cp_take_batch(ps->s, ps->seq_in, ps->seq_tg, inputs, targets);
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
    ((PipeState *)ctx)->steps++;
    if (((PipeState *)ctx)->co2) return pp_co2_report(((PipeState *)ctx)->co2, &r);
    strategy_emit(((PipeState *)ctx)->s, &r);
}

// Resume: a stage's weights, AdamW moments and, for 2bw, the previous weight version, streamed
// from the checkpoint into the stage's buffers.
static int pp_load(void *ctx, size_t lo, size_t hi, float *params, float *prev, size_t olo,
                   size_t ohi, float *m, float *v) {
    const Strategy *s = ((PipeState *)ctx)->s;
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
                              .T = c->seq / s->grid->cp, // a cp rank's two chunks

                              .recompute = c->recompute,
                              .stage_layers = c->stage_layers,
                              .grad_clip = c->opt.grad_clip,
                              .zero = c->zero,
                              .local = c->co2,
                              .val_windows = c->val_windows,
                              .offload_dir = c->offload ? c->offload_dir : NULL,
                              .host_mem = c->host_mem,
                              .fast_mem = c->fast_mem,
                              .swap_ops = c->offload ? &PIPE_SWAP_OPS : NULL};
    const Grid *g = s->grid;
    int tp = g->tp > 1 || g->cp > 1;
    ps->s = s, ps->m = s->model;
    if (tp) { // the stage runs this rank's part, its blocks all-reducing over the tp group
        if (gpt_create_layout_tp(&ps->part, &s->model->cfg, s->model->be, g->tp, g->tp_i))
            return -1;
        ps->part.recompute_gelu = s->model->recompute_gelu;
        ps->cut.map = part_map_1d(s->model, &ps->part, g->tp, g->tp_i);
        ppart_install_tp(ps, c->sp); // --sp: the stage's regions hold the rank's rows
        ps->m = &ps->part;
    }
    if (g->cp > 1) { // the part runs on (B, T/cp) tokens, its attention around the ring
        if (cp_check_shape(s)) return -1;
        ps->ring = cp_ring_create(g->cp_comm, s->model->be);
        cp_ring_install(&ps->part, ps->ring);
        ps->seq_in = xmalloc((size_t)c->batch * c->seq * sizeof(int));
        ps->seq_tg = xmalloc((size_t)c->batch * c->seq * sizeof(int));
    }
    ps->io = (PipelineIO){.ctx = ps,
                          .batch = pp_batch,
                          .report = pp_report,
                          .params = tp ? ppart_params : pp_params,
                          .val_batch = c->val_windows > 0 ? pp_val_batch : NULL,
                          .load = !s->resume_dir ? NULL
                                  : tp           ? ppart_load
                                                 : pp_load};
    int opt_t = s->resume_dir ? s->resume->opt_t : 0;
    ps->p = pipeline_create(ps->m, s->grid, &ps->pc, &c->opt, opt_t, s->start, &ps->io);
    if (ps->p && c->co2 && !(ps->co2 = pp_co2_create(s, ps->p))) return -1;
    return ps->p ? 0 : -1;
}

// A stop vote is summed with the batch's norm: under 2bw that reduction completes during the
// next step on every rank, so the run stops one step after the vote (never mid-stream).
static int pp_step(Strategy *s, int step, int boundary) {
    PipeState *ps = s->impl;
    Pipeline *p = ps->p;
    if (ps->co2) { // the stop is the CO2 agreement's (over the whole job)
        pp_co2_begin(ps->co2, step, now_sec());
        pipeline_step(p, step, boundary, 0);
        pp_co2_step(ps->co2, s, step);
        return 0;
    }
    pipeline_step(p, step, boundary, strategy_stop_vote());
    int done = strcmp(s->cfg->schedule, "2bw") ? step : step - 1;
    strategy_stop_tally(s, pipeline_stop_votes(p, done));
    return 0;
}

static void pp_drain(Strategy *s, int final) {
    pipeline_drain(((PipeState *)s->impl)->p);
    if (((PipeState *)s->impl)->co2) pp_co2_drain(((PipeState *)s->impl)->co2, s, final);
}

static double pp_evaluate(Strategy *s) { return pipeline_evaluate(((PipeState *)s->impl)->p); }

// Every rank calls it at the same step; a stage's range is written by replica 0, or by every
// replica for its ZeRO-1 slice.
static int pp_save(Strategy *s, const char *dir, CkptMeta *meta, int final, CkptExtraFn extra,
                   void *extra_ctx, int keep) {
    PipeState *ps = s->impl;
    CkptExtraFn files = NULL; // --co2: every rank's own state (not in the final checkpoint)
    void *files_ctx = NULL;
    if (ps->co2 && !final && pp_co2_save_files(ps->co2, s, meta, &files, &files_ctx)) return -1;
    if (ps->ring || s->grid->tp > 1) return ppart_save(s, dir, meta, extra, extra_ctx, keep);
    Pipeline *p = ps->p;
    PipeShard sh;
    int writes = pipeline_shard(p, &sh);
    CkptShard mine = {.lo = sh.lo,
                      .hi = sh.hi,
                      .params = sh.params,
                      .m = sh.m,
                      .v = sh.v,
                      .prev = sh.prev,
                      .be = sh.fetch ? NULL : s->model->be,
                      .fetch = sh.fetch,
                      .fetch_ctx = sh.fetch_ctx};
    meta->opt_t = pipeline_opt_t(p);
    comm_set_context(meta->step, "pipeline checkpoint");
    return ckpt_save_collective(dir, s->grid->world, writes ? &mine : NULL, meta, extra, extra_ctx,
                                files, files_ctx, keep);
}

static int pp_full_params(Strategy *s, float *host, int grads) {
    if (grads) return loom_fail("the pipeline strategy cannot hand out whole-model gradients");
    if (((PipeState *)s->impl)->ring || s->grid->tp > 1) return ppart_full_params(s->impl, host);
    return pipeline_full_params(((PipeState *)s->impl)->p, host);
}

static void pp_describe(const Strategy *s, char *buf, size_t n) {
    if (s->cfg->co2) return pp_co2_describe(s, buf, n);
    char cp[48] = "";
    if (s->grid->cp > 1) snprintf(cp, sizeof cp, " x cp %d (ring attention)", s->grid->cp);
    snprintf(buf, n, "pipeline: pp %d (%s) x tp %d (1d%s)%s x dp %d (zero %d)", s->grid->pp,
             s->cfg->schedule, s->grid->tp, s->cfg->sp ? " + sequence parallel" : "", cp,
             s->grid->dp, s->cfg->zero);
    if (s->cfg->offload)
        snprintf(buf + strlen(buf), n - strlen(buf),
                 ", each stage's blocks swapped through its own disk tier");
}

static void pp_summary(Strategy *s, double exposed_s, double step_s) {
    Pipeline *p = ((PipeState *)s->impl)->p;
    if (((PipeState *)s->impl)->co2)
        pp_co2_summary(((PipeState *)s->impl)->co2, s, exposed_s, step_s);
    double wb, gb, ob, ab;
    pipeline_memory(p, &wb, &gb, &ob, &ab);
    if (s->cfg->offload) pipeline_swap_report(p); // every stage: its tier, its peak
    if (!s->lead) return;
    const PipeState *ps = s->impl;
    if (ps->ring) cp_summary(s, ps->ring, (size_t)(ab / 4), ps->steps);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    // 2bw: what the double buffer costs each replica (pipeline_impl.h)
    char two[200] = "", wsh[64] = "", gsh[64] = "";
    int W = ppart_grad_comm(s->grid)->size, z = W > 1 ? s->cfg->zero : 0;
    if (z >= 3) snprintf(wsh, sizeof wsh, ", each a 1/%d shard, + one gathered block", W);
    if (z >= 2) snprintf(gsh, sizeof gsh, ", each a 1/%d shard, + one block in flight", W);
    if (!strcmp(s->cfg->schedule, "2bw"))
        snprintf(two, sizeof two, " (2bw: two weight versions%s; two gradient buffers%s)", wsh,
                 gsh);
    fprintf(stderr,
            "loom: pipeline %d stages x tp %d%s x cp %d x dp %d (zero %d), schedule %s | peak %d "
            "micro-batches of activations held on stage 0 | stage 0 holds weights %.2f MiB, grads "
            "%.2f MiB, optimizer %.2f MiB, activations %.2f MiB (whole model %.2f MiB), peak RSS "
            "%.1f MiB%s\n",
            s->grid->pp, s->grid->tp, s->cfg->sp ? " + sp" : "", s->grid->cp, s->grid->dp,
            s->cfg->zero, s->cfg->schedule, pipeline_peak_inflight(p), wb / 1048576, gb / 1048576,
            ob / 1048576, ab / 1048576, s->model->nparams * 4.0 / 1048576, ru.ru_maxrss / 1024.0,
            two);
}

// --offload (plain stages): an export reads the whole model from a scratch file the first
// pipeline's ranks fill on its first rank from their tiers (collective: every rank calls it).
static int pp_param_source(Strategy *s, ParamSource *src) {
    PipeState *ps = s->impl;
    const Grid *g = s->grid;
    if (!s->cfg->offload || ps->ring || g->tp > 1 || ps->co2) return 0;
    part_spill_free(ps->spill), ps->spill = NULL;
    if (g->dp_i) return 1; // not the lead's pipeline: nothing to read
    return pipeline_swap_source(ps->p, g->pp_comm, s->model->nparams, s->cfg->offload_dir,
                                g->world->rank, &ps->spill, src);
}

static void pp_destroy(Strategy *s) {
    PipeState *ps = s->impl;
    if (!ps) return;
    pp_co2_free(ps->co2); // (its hooks sit on the pipeline's)
    part_spill_free(ps->spill);
    pipeline_free(ps->p);
    if (ps->m == &ps->part) gpt_free(&ps->part);
    cp_ring_free(ps->ring);
    free(ps->seq_in), free(ps->seq_tg);
    ppart_stage_free(ps);
    free(ps);
    s->impl = NULL;
}

const StrategyOps STRATEGY_PIPELINE = {.name = "pipeline",
                                       .wants = pp_wants,
                                       .supports = &PP_SUPPORTS,
                                       .check = pp_check,
                                       .create = pp_create,
                                       .step = pp_step,
                                       .drain = pp_drain,
                                       .evaluate = pp_evaluate,
                                       .save = pp_save,
                                       .full_params = pp_full_params,
                                       .param_source = pp_param_source,
                                       .comm_failed = strategy_end_job,
                                       .describe = pp_describe,
                                       .summary = pp_summary,
                                       .destroy = pp_destroy};
