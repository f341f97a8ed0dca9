// loop.c — the training loop: batch → strategy step → metrics and progress → validation →
// checkpoint. It knows nothing of how a step is distributed: the strategy (strategy.h) runs
// the step and hands back one record per step, possibly late.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "../io/hf_dir.h"
#include "../io/safetensors.h"
#include "../stop.h"
#include "../testhooks.h"
#include "run.h"

typedef struct {
    Run *r;
    Strategy *s;
    int skipped;
    int saved_step;          // the step of this run's last checkpoint (-1: none yet)
    int stopping;            // saving for a stop signal: a failed save ends the run
    double exposed, seconds; // totals over the logged steps
} Loop;

// A metrics line could not be written (disk full): the run stops with EXIT_IO rather than go
// on without its history. Only the lead rank writes, so with more ranks it ends them all.
static int metrics_failed(Loop *l) {
    progress_end(&l->r->pg);
    if (l->r->world->size > 1) comm_abort(EXIT_IO, loom_errmsg());
    fprintf(stderr, "loom: %s; stopping\n", loom_errmsg());
    return EXIT_IO;
}

// The backend's device-memory high-water mark in MiB (0 on a host-memory backend).
static double device_mem_mib(const Run *r) {
    const Backend *be = r->model.be;
    return be && be->mem_peak ? be->mem_peak() / 1048576.0 : 0.0;
}

static int log_record(Loop *l, const StepRecord *rec) {
    Run *r = l->r;
    const TrainArgs *a = r->a;
    double tokens = (double)a->batch * a->seq * a->grad_accum * r->grid.dp;
    double flops = gpt_flops_per_step(&r->model.cfg, a->batch, a->seq) * a->grad_accum /
                   r->grid.pp; // per rank
    double tps = tokens / rec->seconds, mfu = flops / rec->seconds / (r->peak_gflops * 1e9);
    l->seconds += rec->seconds;
    if (rec->exposed > 0) l->exposed += rec->exposed;
    MetricsStep ms = {.step = rec->step,
                      .loss = rec->loss,
                      .lr = rec->lr,
                      .grad_norm = rec->norm,
                      .step_ms = rec->seconds * 1e3,
                      .tokens =
                          (double)(rec->window ? rec->window : run_data_window(r, rec->step)) *
                          a->batch * a->seq,
                      .tokens_per_s = tps,
                      .mfu = mfu,
                      .exposed_ms = rec->exposed >= 0 ? rec->exposed * 1e3 : -1,
                      .overlap_ms = rec->overlap * 1e3,
                      .io_ms = r->sc.offload ? rec->io * 1e3 : -1,
                      .device_mem_mib = device_mem_mib(r),
                      .loss_scale = r->ls.on ? r->ls.scale : 0,
                      .overflow_skips = r->ls.skipped,
                      .extra = rec->extra};
    if (r->lead && metrics_step(&r->mt, &ms)) return metrics_failed(l);
    progress_step(&r->pg, rec->step, rec->loss, tps, mfu, rec->seconds,
                  r->sc.offload ? rec->io : -1);
    return 0;
}

// Logs the records the strategy has handed over. A step whose loss or gradient is not finite
// is an overflow of dynamic loss scaling while the scale can fall (skipped, the scale halves),
// else skipped (--on-nonfinite skip, where the strategy can) or stops the run (EXIT_NUMERIC).
static int take_records(Loop *l) {
    Run *r = l->r;
    const TrainArgs *a = r->a;
    StepRecord rec;
    while (strategy_take(l->s, &rec)) {
        if (rec.applied) {
            if (log_record(l, &rec)) return EXIT_IO;
            loss_scale_after_step(&r->ls, 1);
            continue;
        }
        double S = r->ls.scale;
        if (!rec.must_stop && loss_scale_after_step(&r->ls, 0)) {
            if (r->lead)
                progress_note(&r->pg,
                              "step %d: gradient overflow at loss scale %.0f; update skipped, "
                              "scale now %.0f",
                              rec.step, S, r->ls.scale);
            continue;
        }
        if (!rec.must_stop && !strcmp(a->on_nonfinite, "skip")) {
            l->skipped++;
            if (r->lead)
                progress_note(&r->pg,
                              "step %d: loss %g, grad norm %g is not finite; update skipped",
                              rec.step, rec.loss, rec.norm);
            continue;
        }
        progress_end(&r->pg);
        if (r->lead)
            fprintf(stderr,
                    "loom: step %d: %s is %s (loss %g, grad norm %g); stopping without applying "
                    "it. Lower --lr, set --grad-clip%s.%s%s\n",
                    rec.step, isfinite(rec.loss) ? "the gradient" : "the loss",
                    isnan(isfinite(rec.loss) ? rec.norm : rec.loss) ? "NaN" : "infinite", rec.loss,
                    rec.norm, rec.must_stop ? "" : ", or pass --on-nonfinite skip",
                    a->save ? " The last good checkpoint is in " : "", a->save ? a->save : "");
        return EXIT_NUMERIC;
    }
    return 0;
}

static int validate(Loop *l, int step, int final) {
    Run *r = l->r;
    double vl = l->s->ops->evaluate(l->s);
    if (!r->lead) return 0;
    if (metrics_val(&r->mt, step, vl)) return metrics_failed(l);
    if (final)
        fprintf(stderr, "loom: val loss %.4f\n", vl);
    else
        progress_note(&r->pg, "step %d: val loss %.4f", step, vl);
    return 0;
}

// A save that failed: every rank has the same reason (ckpt_save.c), the partial directory is
// gone and the previous checkpoints and `latest` are as they were. The lead rank warns and
// records it in the metrics; a periodic save is tried again at the next --save-every (unless
// --save-on-error stop), a failed final save ends the run with EXIT_IO.
static int save_failed(Loop *l, int step, int final) {
    Run *r = l->r;
    const TrainArgs *a = r->a;
    int stop = final || l->stopping || !strcmp(a->save_on_error, "stop");
    char reason[1024];
    snprintf(reason, sizeof reason, "%s", loom_errmsg());
    progress_end(&r->pg);
    if (r->lead) {
        fprintf(stderr, "loom: WARNING: the checkpoint of step %d was NOT saved: %s\n", step,
                reason);
        if (stop)
            fprintf(stderr, "loom: stopping (%s); the last complete checkpoint in %s is kept\n",
                    l->stopping ? "the stop's save failed"
                    : final     ? "the final save failed"
                                : "--save-on-error stop",
                    a->save);
        else if (step + a->save_every < a->steps)
            fprintf(stderr,
                    "loom: training goes on; %s keeps its checkpoints, the next save is at "
                    "step %d\n",
                    a->save, step + a->save_every);
        else
            fprintf(stderr,
                    "loom: training goes on; %s keeps its checkpoints, the next save is at "
                    "the end\n",
                    a->save);
        if (metrics_save_failed(&r->mt, step, reason)) return metrics_failed(l);
    }
    return !stop ? 0 : l->stopping ? EXIT_INTERRUPTED : EXIT_IO;
}

static int save(Loop *l, int step, int final) {
    Run *r = l->r;
    comm_set_context(step, "checkpoint");
    CkptMeta meta = run_ckpt_meta(r, step);
    if (l->s->ops->data_window) meta.data_window = l->s->ops->data_window(l->s, step);
    int rc = l->s->ops->save(l->s, r->a->save, &meta, final, run_save_extras, r, r->a->keep);
    free(meta.train_args);
    if (rc) return save_failed(l, step, final);
    if (final && r->lead) fprintf(stderr, "loom: saved checkpoint to %s\n", r->a->save);
    char kept[600];
    l->saved_step = meta.step; // (a strategy may save an earlier state: a peer mid-round)
    snprintf(kept, sizeof kept, "%.500s/latest names step %d, saved by this run", r->a->save,
             meta.step);
    stop_set_kept(kept);
    return 0;
}

// Every rank agreed to stop after step `done` (a stop signal, stop.h): what is in flight is
// completed, the state saved as a periodic checkpoint would be (resuming continues exactly), and
// the run ends with EXIT_STOPPED. The save is collective, so no rank exits before it is
// committed.
static int stop_run(Loop *l, int done) {
    Run *r = l->r;
    const TrainArgs *a = r->a;
    Strategy *s = l->s;
    progress_end(&r->pg);
    s->ops->drain(s, 0);
    int rc = take_records(l);
    if (rc) return rc;
    int sig = stop_signal();
    if (r->lead)
        fprintf(stderr, "loom: %s%s: stopped after step %d of %d%s\n",
                sig ? stop_signame(sig) : "a stop signal", sig ? "" : " reached another rank", done,
                a->steps, a->save ? "; saving" : "; no --save, so nothing is kept");
    if (!a->save) return EXIT_STOPPED;
    double t0 = now_sec();
    l->stopping = 1;
    if ((rc = save(l, done, 0))) return rc;
    if ((rc = take_records(l))) return rc; // (a CO2 save mid-round hands over its last records)
    char since[64] = "";
    if (sig) snprintf(since, sizeof since, " (%.1f s after the signal)", stop_elapsed());
    if (r->lead)
        fprintf(stderr, "loom: saved step %d to %s in %.1f s%s; resume with --resume %s\n",
                l->saved_step, a->save, now_sec() - t0, since, a->save);
    return EXIT_STOPPED;
}

// The whole model's parameters (or gradients) written as safetensors by the lead rank: read
// tensor by tensor where the strategy lends a source (block swapping keeps the run within its
// --fast-mem), else gathered into one host copy.
static int export_model(Loop *l, const char *path, int grads) {
    Run *r = l->r;
    ParamSource src;
    int via = !grads && l->s->ops->param_source ? l->s->ops->param_source(l->s, &src) : 0;
    if (via < 0) return -1;
    int dir = !grads && hf_export_is_dir(&r->model.cfg, path);
    int bf16 = !strcmp(r->a->export_dtype, "bf16");
    if (via && dir)
        return r->lead ? hf_save_dir(&r->model, path, bf16, src.fetch, src.ctx, src.scratch,
                                     src.scratch_floats)
                       : 0;
    if (via)
        return r->lead ? st_save_gpt_fn(&r->model, path, src.fetch, src.ctx, src.scratch,
                                        src.scratch_floats)
                       : 0;
    GPT view = r->model;
    float *host = xmalloc(r->model.nparams * sizeof(float));
    int rc = l->s->ops->full_params(l->s, host, grads);
    view.params = host;
    if (!rc && r->lead) rc = dir ? hf_save_dir_model(&view, path, bf16) : st_save_gpt(&view, path);
    free(host);
    return rc;
}

static int run_steps(Loop *l) {
    Run *r = l->r;
    const TrainArgs *a = r->a;
    Strategy *s = l->s;
    for (int step = r->start; step < a->steps; step++) {
        int done = step + 1, last = done == a->steps;
        int val = r->has_val && a->val_every > 0 && done % a->val_every == 0 && !last;
        int ckpt = a->save && a->save_every > 0 && done % a->save_every == 0 && !last;
        comm_set_context(done, "training step");
        testhook_signal(r->world->rank, done);
        if (s->ops->step(s, step, val || ckpt || last)) run_fail(r, EXIT_USAGE);
        int rc = take_records(l);
        if (rc) return rc;
        if (s->next_step >= 0) { // the strategy moved its clock (a peer re-synced)
            step = (s->next_step < a->steps ? s->next_step : a->steps) - 1;
            s->next_step = -1;
            continue;
        }
        if (s->stop && !last) return stop_run(l, done);
        if (a->dump_grads && step == r->start && export_model(l, a->dump_grads, 1)) return EXIT_IO;
        if (val || ckpt) {
            s->ops->drain(s, 0);
            if ((rc = take_records(l))) return rc;
        }
        if (val && validate(l, done, 0)) return EXIT_IO;
        if (ckpt && (rc = save(l, done, 0))) return rc;
    }
    s->ops->drain(s, 1);
    return take_records(l);
}

// After the last step: validation, the strategy's summary, the final checkpoint, the export.
static int finish(Loop *l) {
    Run *r = l->r;
    const TrainArgs *a = r->a;
    comm_set_context(a->steps, "finishing");
    if (r->has_val && validate(l, a->steps, 1)) return EXIT_IO;
    if (l->skipped && r->lead)
        fprintf(stderr, "loom: %d steps skipped for non-finite values\n", l->skipped);
    if (r->ls.on && r->lead)
        fprintf(stderr,
                "loom: loss scale %.0f at the end; %d steps skipped for gradient overflow\n",
                r->ls.scale, r->ls.skipped);
    l->s->ops->summary(l->s, l->exposed, l->seconds);
    int rc = a->save ? save(l, a->steps > r->start ? a->steps : r->start, 1) : 0;
    if (!rc && a->export_path) {
        if (export_model(l, a->export_path, 0)) {
            if (r->lead) fprintf(stderr, "loom: export failed: %s\n", loom_errmsg());
            rc = EXIT_IO;
        } else if (r->lead) {
            fprintf(stderr, "loom: exported %s\n", a->export_path);
        }
    }
    if (device_mem_mib(r) > 0 && r->lead)
        fprintf(stderr,
                "loom: peak device memory %.1f MiB (loom's own allocations; the CUDA "
                "context and libraries come on top)\n",
                device_mem_mib(r));
    if (r->sc.offload && !r->model.be->host_memory) // --fast-mem bounds the device memory
        fprintf(stderr,
                "loom: offload: rank %d: peak device memory %.1f MiB of --fast-mem %.1f MiB\n",
                r->world->rank, device_mem_mib(r), r->sc.fast_mem / 1048576.0);
    else if (r->sc.offload && r->lead)
        fprintf(stderr, "loom: offload: peak RSS %.1f MiB of --fast-mem %.1f MiB (the whole run)\n",
                rss_peak_bytes() / 1048576.0, r->sc.fast_mem / 1048576.0);
    else if (r->sc.offload) // --fast-mem bounds every rank: each says what it held
        fprintf(stderr,
                "loom: offload: rank %d: peak RSS %.1f MiB of --fast-mem %.1f MiB (the whole "
                "run)\n",
                r->world->rank, rss_peak_bytes() / 1048576.0, r->sc.fast_mem / 1048576.0);
    return rc;
}

static void comm_failed(void *ctx, int code, const char *msg) {
    Strategy *s = ctx;
    s->ops->comm_failed(s, code, msg);
}

static void banner(const Run *r, const Strategy *s) {
    const TrainArgs *a = r->a;
    const GPTConfig *c = &r->model.cfg;
    char how[256];
    s->ops->describe(s, how, sizeof how);
    if (!r->lead) return;
    char fam[96] = "";
    if (gpt_is_llama(c))
        snprintf(fam, sizeof fam, "llama KV%d F%d%s ", c->KV, c->F, c->tie ? " tied" : "");
    fprintf(stderr,
            "loom: model %sL%d H%d C%d V%d T%d, %.2fM params | batch %d x seq %d x accum %d | %s | "
            "%d steps%s%s\n",
            fam, c->L, c->H, c->C, c->V, c->maxT, r->model.nparams / 1e6, a->batch, a->seq,
            a->grad_accum, how, a->steps, r->resume_dir[0] ? " | resumed from " : "",
            r->resume_dir);
}

int train_run(const TrainArgs *args) {
    TrainArgs planned = *args;
    if (args->plan) train_apply_auto_plan(&planned);
    Run r = {.a = &planned};
    run_setup(&r);
    const StrategyOps *ops = strategy_find(&r.sc, r.model.be);
    if (!ops) run_fail(&r, EXIT_USAGE);
    Strategy s = {.ops = ops,
                  .model = &r.model,
                  .grid = &r.grid,
                  .cfg = &r.sc,
                  .data = &r.data,
                  .resume_dir = r.resume_dir[0] ? r.resume_dir : NULL,
                  .resume = &r.resume,
                  .start = r.start,
                  .next_step = -1,
                  .lead = r.lead};
    comm_set_failure_handler(comm_failed, &s); // the strategy hears failed operations
    if (ops->create(&s)) run_fail(&r, s.resume_dir ? EXIT_INPUT : EXIT_USAGE);
    r.start = s.start; // a peer that joins late starts on the swarm's clock
    run_peak(&r);
    banner(&r, &s);
    Loop l = {.r = &r, .s = &s, .saved_step = -1};
    progress_start(&r.pg, planned.progress && r.lead, r.start, planned.steps, planned.log_every);
    if (planned.save) {
        char kept[600];
        snprintf(kept, sizeof kept, "%.500s holds no checkpoint of this run yet", planned.save);
        stop_set_kept(kept);
    }
    stop_install(planned.stop_grace, r.lead);
    int rc = run_steps(&l);
    progress_end(&r.pg);
    if (!rc) rc = finish(&l);
    stop_uninstall();
    ops->destroy(&s);
    comm_set_failure_handler(NULL, NULL);
    free(s.rec);
    run_teardown(&r);
    return rc;
}
