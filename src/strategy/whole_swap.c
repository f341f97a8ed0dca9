// whole_swap.c — the whole-model strategies (one process, data parallelism with ZeRO 0/1) with
// block swapping: the state lives in the slow tier and the steps run through the swap executor
// (offload/swap.h); strat_whole.c calls these when StrategyConfig.offload is set.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../common.h"
#include "../offload/offload_plan.h"
#include "strat_whole.h"

static int sink_params(void *ctx, size_t at, size_t n, const float *src) {
    return swap_store(ctx, SWAP_PARAMS, at, n, src);
}

static int store_state(void *ctx, int array, size_t at, size_t n, const float *src) {
    return swap_store(ctx, array, at, n, src);
}

static int fetch_state(void *ctx, int array, size_t at, size_t n, float *dst) {
    return swap_fetch(ctx, array, at, n, dst);
}

// The fixed overhead (offload_plan.h, start-up): the first rank of the planning group (the
// data-parallel group, or Whole.plan_comm)
// measures the block costs and the tier (unless --offload-units is given), every other rank (and
// one that read its costs from a profile) warms the backend up with the same blocks; then each
// measures what it holds and the largest of them is every rank's overhead. 0 or -1.
static int measure_overhead(Strategy *s, const Whole *w, const OffloadShape *sh,
                            OffloadCosts *costs, double *overhead) {
    const StrategyConfig *c = s->cfg;
    const Comm *dp = w->plan_comm ? w->plan_comm : s->grid->dp_comm;
    int plans = !c->offload_units && dp->rank == 0, rc = 0;
    if (plans)
        rc = offload_startup_costs(s->model, sh, c->threads, c->offload_dir, c->host_mem,
                                   c->fast_mem, c->offload_profile, costs, s->lead ? stderr : NULL);
    if (dp->size > 1) comm_broadcast(dp, &rc, sizeof rc, 0);
    if (rc) return -1; // the first rank says why
    if (!plans || c->offload_profile) rc = offload_warmup(s->model, sh, c->fast_mem);
    float v[2] = {rc ? 1.f : 0.f, rc ? 0.f : (float)offload_overhead(s->model->be)};
    if (dp->size > 1 && comm_allreduce_max(dp, v, 2)) return -1;
    if (v[0] > 0)
        return rc ? -1
                  : loom_fail("--fast-mem %zu bytes: another rank of the planning group "
                              "cannot run its backend's warm-up within it",
                              c->fast_mem);
    *overhead = v[1];
    // what the tier's I/O costs the compute: measured now, with the backend's threads counted
    if (plans &&
        offload_interference_costs(s->model, c->offload_dir, 0, costs, s->lead ? stderr : NULL))
        return -1;
    return 0;
}

// The swap units: --offload-units, or the best plan the static analysis finds in what the
// budget leaves after the fixed overhead. The first rank of the planning group plans and
// every rank takes its plan: the ranks' per-unit reductions must match.
static int make_plan(Strategy *s, const Whole *w, const OffloadShape *sh, OffloadPlan *plan,
                     double *overhead) {
    const StrategyConfig *c = s->cfg;
    const Comm *dp = w->plan_comm ? w->plan_comm : s->grid->dp_comm;
    OffloadCosts costs = {0};
    double share, MiB = 1048576;
    memset(plan, 0, sizeof *plan);
    if (measure_overhead(s, w, sh, &costs, overhead)) return -1;
    double least = offload_plan_min_bytes(s->model, sh, NULL);
    if (w->kept > 0 && (double)c->fast_mem - *overhead - w->kept < least)
        return loom_fail("--fast-mem %.1f MiB: the fixed overhead %.1f MiB and %.1f MiB kept in "
                         "host memory (%s) leave less than the %.1f MiB block swapping needs at "
                         "least: --fast-mem must be at least %.1f MiB",
                         (double)c->fast_mem / MiB, *overhead / MiB, w->kept / MiB, w->kept_what,
                         least / MiB, (*overhead + w->kept + least) / MiB);
    double fixed = *overhead;
    *overhead += w->kept;
    if (offload_plan_share(s->model, sh, c->fast_mem, *overhead, &share)) return -1;
    char kept[320] = "";
    if (w->kept > 0)
        snprintf(kept, sizeof kept, ", %.1f MiB kept in host memory (%s)", w->kept / MiB,
                 w->kept_what);
    if (s->lead && !s->model->be->host_memory)
        fprintf(stderr,
                "loom: offload: fixed overhead %.1f MiB of device memory (measured at start-up: "
                "the backend's scratch, caches and workspaces), %.1f MiB of --fast-mem %.1f MiB "
                "left to block swapping; the state %s\n",
                fixed / MiB, share / MiB, (double)c->fast_mem / MiB,
                !c->offload_host ? "on disk (through page-locked buffers)"
                : c->offload_dir ? "in host memory (--host-mem) above a disk"
                                 : "in host memory");
    else if (s->lead)
        fprintf(stderr,
                "loom: offload: fixed overhead %.1f MiB (measured at start-up: the binary and "
                "its libraries%s, the backend's threads and BLAS buffers, + %.0f MiB for what "
                "starts later)%s, %.1f MiB of --fast-mem %.1f MiB left to block swapping\n",
                fixed / MiB, dp->size > 1 ? ", MPI" : "", OFFLOAD_LATE_BYTES / MiB, kept,
                share / MiB, (double)c->fast_mem / MiB);
    if (c->offload_units) {
        plan->prefetch = c->offload_prefetch;
        return offload_plan_parse_units(s->model, c->offload_units, plan);
    }
    int head[3] = {0, 0, 0}; // status, units, prefetch
    if (dp->rank == 0) {
        head[0] = offload_plan_for_run(s->model, sh, &costs, share, plan, s->lead ? stderr : NULL);
        head[1] = plan->nunits, head[2] = plan->prefetch;
    }
    if (dp->size == 1) return head[0];
    comm_broadcast(dp, head, sizeof head, 0);
    if (head[0]) return -1; // the first rank says why
    if (dp->rank != 0) {
        plan->nunits = head[1], plan->prefetch = head[2];
        plan->unit = xcalloc((size_t)head[1], sizeof(OffloadUnit));
    }
    comm_broadcast(dp, plan->unit, (size_t)head[1] * sizeof(OffloadUnit), 0);
    return 0;
}

CO2Config whole_co2_config(const StrategyConfig *c) {
    return (CO2Config){.tau = c->tau,
                       .alpha = c->outer_lr,
                       .beta = c->outer_momentum,
                       .lambda = c->gap_penalty,
                       .phi = c->outer_clip,
                       .adaptive = c->gap_adaptive,
                       .sharded = c->zero > 0};
}

int whole_swap_create(Strategy *s, Whole *w, const Comm *grad_comm, int zero) {
    const StrategyConfig *c = s->cfg;
    GPT *m = s->model;
    OffloadShape sh = {.B = c->batch,
                       .T = c->seq,
                       .K = c->grad_accum,
                       .recompute = c->recompute,
                       .dp = grad_comm->size,
                       .zero = zero,
                       .co2 = c->co2,
                       .fused = c->opt.grad_clip <= 0 && !c->nonfinite_skip};
    CO2Config cc = whole_co2_config(c);
    OffloadPlan plan;
    double overhead = 0;
    if (make_plan(s, w, &sh, &plan, &overhead)) return -1;
    SwapConfig sc = {.B = c->batch,
                     .T = c->seq,
                     .K = c->grad_accum,
                     .recompute = c->recompute,
                     .opt = c->opt,
                     .comm = grad_comm,
                     .zero = zero,
                     .dir = c->offload_dir,
                     .host_mem = c->host_mem,
                     .budget = c->fast_mem,
                     .overhead = overhead,
                     .plan = &plan,
                     .co2 = c->co2 ? &cc : NULL,
                     .co2_comm = s->grid->dp_comm,
                     .fused = sh.fused,
                     .tensor_norm = w->tensor_norm,
                     .tier_rank = w->tier_rank};
    w->fused = sc.fused;
    w->sw = swap_create(m, &sc);
    if (w->sw && s->lead) {
        double rd, wr;
        offload_io_bytes(m, &sh, &plan, &rd, &wr);
        fprintf(stderr,
                "loom: offload: %d units, prefetch %d, %.1f MiB of the %.1f MiB left to block "
                "swapping, %.2f GiB read + %.2f GiB written per step\n",
                plan.nunits, plan.prefetch, offload_fast_bytes(m, &sh, &plan) / 1048576,
                ((double)c->fast_mem - overhead) / 1048576, rd / (1 << 30), wr / (1 << 30));
    }
    offload_plan_free(&plan);
    if (!w->sw) return -1;
    w->grad_ranks = grad_comm->size;
    size_t lo, hi;
    swap_owned(w->sw, &lo, &hi);
    if (s->resume_dir) { // parameters and the owned moments, streamed into the tier
        CkptWant want = {.lo = {0, lo, lo, 0},
                         .hi = {m->nparams, hi, hi, 0},
                         .store = store_state,
                         .store_ctx = w->sw};
        if (checkpoint_read_into(s->resume_dir, m->nparams, &want)) return -1;
        *swap_opt_t(w->sw) = s->resume->opt_t;
        return 0;
    }
    return s->data->params_stream(s->data->ctx, 0, m->nparams, sink_params, w->sw);
}

double whole_swap_grads(Strategy *s, Whole *w, int step) {
    const StrategyConfig *c = s->cfg;
    float scale = 1.0f / (float)((size_t)c->batch * c->seq * c->grad_accum * w->grad_ranks);
    double loss = NAN;
    if (swap_grads(w->sw, s->data->train, s->data->ctx, step, scale, lr_at(&c->opt, step), &loss))
        w->failed = 1;
    return loss;
}

void whole_swap_apply(Whole *w, StepRecord *r, float grad_scale) {
    if (w->fused)
        r->must_stop = !r->applied; // the units' updates already ran during the backward
    else if (r->applied && swap_update(w->sw, r->lr, grad_scale))
        w->failed = 1;
    r->io = swap_io_wait(w->sw);
}

double whole_swap_evaluate(Strategy *s, Whole *w) {
    double loss = NAN;
    if (swap_evaluate(w->sw, s->cfg->val_windows, s->data->val, s->data->ctx, &loss)) w->failed = 1;
    return loss;
}

CkptShard whole_swap_shard(Whole *w) {
    size_t lo, hi;
    swap_owned(w->sw, &lo, &hi);
    return (CkptShard){.lo = lo, .hi = hi, .fetch = fetch_state, .fetch_ctx = w->sw};
}

int whole_swap_full_params(Whole *w, float *host, size_t at, size_t n) {
    return swap_fetch(w->sw, SWAP_PARAMS, at, n, host);
}

int whole_swap_set_params(Whole *w, const float *host, size_t at, size_t n) {
    return swap_store(w->sw, SWAP_PARAMS, at, n, host);
}

static int fetch_params(void *ctx, size_t at, size_t n, float *dst) {
    return swap_fetch(ctx, SWAP_PARAMS, at, n, dst);
}

int whole_param_source(Whole *w, ParamSource *src) {
    if (!w->sw) return 0;
    *src = (ParamSource){.fetch = fetch_params, .ctx = w->sw};
    src->scratch = swap_scratch(w->sw, &src->scratch_floats);
    return src->scratch ? 1 : -1;
}

void whole_swap_summary(Whole *w) {
    SwapStats st;
    swap_stats(w->sw, &st);
    if (st.steps < 1) return;
    double n = st.steps, gib = 1 << 30;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(stderr,
            "loom: offload per step: %.2f GiB read, %.2f GiB written, update pass %.2f s, waiting "
            "on the tier %.2f s | peak RSS %.1f MiB\n",
            st.read_bytes / n / gib, st.written_bytes / n / gib, st.update_s / n, st.wait_s / n,
            ru.ru_maxrss / 1024.0);
}
