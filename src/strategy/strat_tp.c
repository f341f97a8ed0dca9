// strat_tp.c — Megatron 1D tensor parallelism (--tp N) with data parallelism over dp: each
// rank of a tensor-parallel group holds its part of every layer (NH/tp heads, 4C/tp of the
// MLP) and of the vocabulary (model/tp_layout.c), its blocks all-reduce partial results over
// the tp communicator (two per layer forward, two backward, one for the embedding and three
// small ones for the vocabulary-parallel cross-entropy), and the part runs strat_whole's
// data-parallel mechanics over dp exactly as a whole model would (ZeRO 0-3). The flat
// layout of checkpoints, initial weights and exports stays the whole model's: a rank cuts its
// part out of it when it starts or resumes; a save assembles range r of it on tp rank r (each
// writes one shard), an export gathers the whole.
// Replicated tensors (LayerNorms, row-parallel biases, wpe) receive the same gradient on every
// rank and stay identical without communication; the gradient norm counts them once. LLaMA
// (--arch llama): a kv head shared by tp/KV ranks gets its gradient summed over them inside the
// layer's backward (model/llama_tp.c), so its copies stay identical too and the norm and saves
// count the first of them (gpt_tp_counts). With --sp
// (Megatron sequence parallelism, model/seq_parallel.c) the LayerNorm/residual regions hold T/tp
// positions per rank: the blocks all-gather and reduce-scatter instead of all-reducing, and sum
// the LayerNorms' gradients over tp, so those stay identical too.
// Context parallelism (--cp, tp may be 1) runs here too: the part runs on the rank's two chunks
// of every sequence (T/cp tokens), its attention around the ring (parallel/ring_attention.c),
// and the data-parallel mechanics over dp x cp (strat_cp.h has the rest).
// With --co2 every tp x cp group is a CO2 worker (strat_tp_co2.c): its gradients are summed over
// cp only and clipped by the worker's own norm, and the outer rule runs on the part over dp.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../common.h"
#include "ckpt_save.h"
#include "co2_rounds.h"
#include "compose.h"
#include "part_io.h"
#include "strat_cp.h"
#include "strat_tp_co2.h"

typedef struct {
    const GPT *whole;  // the whole model's layout (s->model: no buffers)
    GPT part;          // this rank's part of the model
    Strategy inner;    // the strategy as strat_whole sees it: the part, and the data below
    StrategyData data; // training and validation data; the part's initial parameters
    const Strategy *outer;
    Whole w;
    PartCut cut;          // the part's map; host parameters, m, v cut from the whole (start-up)
    double floats, calls; // what the blocks all-reduced over tp (for the summary)
    double gathered, scattered; // --sp: floats all-gathered / reduce-scattered (whole tensors)
    int steps;
    // --cp: the ring, the part's config (seq = T/cp), whole sequences before the rank's chunks
    // are cut (B,T), and the communicator gradients are summed over (dp x cp; dp without cp)
    CpRing *ring;
    StrategyConfig icfg;
    int *seq_in, *seq_tg;
    const Comm *gcomm;
    TpCo2 *co2;       // --co2: every tp x cp group a worker (strat_tp_co2.c)
    PartSpill *spill; // --offload: the whole model assembled for an export (tp_param_source)
} TP;

static void tp_allreduce(void *ctx, float *x, size_t n, int max) {
    TP *t = ctx;
    const Comm *c = t->outer->grid->tp_comm;
    t->floats += (double)n, t->calls++;
    if (max)
        comm_allreduce_max(c, x, n);
    else
        comm_allreduce(c, x, n);
}

// --sp: rank r's `each` floats at x + r·each to every rank of the group, in place.
static void tp_allgather(void *ctx, float *x, size_t each) {
    TP *t = ctx;
    const Comm *c = t->outer->grid->tp_comm;
    size_t n = (size_t)c->size, *counts = xmalloc(2 * n * sizeof *counts), *displs = counts + n;
    for (size_t r = 0; r < n; r++)
        counts[r] = each, displs[r] = r * each;
    t->gathered += (double)(n * each), t->calls++;
    CommReq q = comm_iallgatherv(c, x, counts, displs);
    comm_wait(&q);
    free(counts);
}

// --sp: rank r receives Σ over the group of send[r·each, (r+1)·each).
static void tp_reduce_scatter(void *ctx, const float *send, float *recv, size_t each) {
    TP *t = ctx;
    const Comm *c = t->outer->grid->tp_comm;
    size_t n = (size_t)c->size, *counts = xmalloc(n * sizeof *counts);
    for (size_t r = 0; r < n; r++)
        counts[r] = each;
    t->scattered += (double)(n * each), t->calls++;
    CommReq q = comm_ireduce_scatter(c, send, recv, counts);
    comm_wait(&q);
    free(counts);
}

// --pp with 1D tensor, sequence or context parallelism runs in the pipeline strategy (each
// stage a tp part); --tp-mode 2d in strat_tp2d.c.
static int tp_wants(const StrategyConfig *c) {
    return !c->tp_2d && c->pp <= 1 && (c->tp > 1 || c->cp > 1 || c->sp);
}

static const char TP_DUMP_ZERO[] = "the first step's gradients are gathered from the parts' "
                                   "whole copies (ZeRO 0 or 1)";
static const char TP_CO2_ZERO[] = "CO2 over tensor- or context-parallel workers keeps its outer "
                                  "state unsharded (--zero 0)";
static const char TP_OFFLOAD_ZERO[] = "a tensor- or context-parallel part swaps its blocks with "
                                      "ZeRO 0 only (its norm is taken per tensor from the tier)";
static const FeaturePair TP_PAIRS[] = {
    {F_OFFLOAD, F_ZERO1, TP_OFFLOAD_ZERO},
    {F_OFFLOAD, F_ZERO2, TP_OFFLOAD_ZERO},
    {F_OFFLOAD, F_ZERO3, TP_OFFLOAD_ZERO},
    {F_OFFLOAD, F_CO2,
     "CO2's workers over tensor- or context-parallel parts keep their outer "
     "state in memory"},
    {F_OFFLOAD, F_DUMP_GRADS, "the gradients live in the offload tier, not in memory"},
    {F_DUMP_GRADS, F_ZERO2, TP_DUMP_ZERO},
    {F_DUMP_GRADS, F_ZERO3, TP_DUMP_ZERO},
    {F_CO2, F_ZERO1, TP_CO2_ZERO},
    {F_CO2, F_ZERO2, TP_CO2_ZERO},
    {F_CO2, F_ZERO3, TP_CO2_ZERO},
    {F_CO2, F_DUMP_GRADS, "CO2's workers never sum their gradients (as --dp --co2)"},
    {0, 0, NULL}};
static const Supports TP_SUPPORTS = {
    .self = {F_TP, F_CP, F_SP, F_COUNT},
    .features = FEAT(F_TP) | FEAT(F_SP) | FEAT(F_CP) | FEAT(F_DP) | FEAT(F_ZERO1) | FEAT(F_ZERO2) |
                FEAT(F_ZERO3) | FEAT(F_RECOMPUTE) | FEAT(F_DUMP_GRADS) | FEAT(F_CO2) |
                FEAT(F_OFFLOAD) | FEAT(F_OFFLOAD_DEVICE),
    .pairs = TP_PAIRS,
    .runs_with = "tensor and context parallelism run with data parallelism (ZeRO 0-3), "
                 "--sp, --pp, --recompute, --co2 (ZeRO 0) and --offload (ZeRO 0)"};

static int tp_check(const StrategyConfig *c) {
    if (cp_check(c) || (c->co2 && co2_check_config(c))) return -1;
    if (c->sp && c->tp < 2)
        return loom_fail(
            "--sp splits the sequence over the tensor-parallel group: it needs --tp >= 2 "
            "(got --tp %d)",
            c->tp);
    if (c->sp && c->seq / c->cp % c->tp)
        return loom_fail("--sp splits every sequence over the tensor-parallel group: --seq %d%s "
                         "is not divisible by --tp %d",
                         c->seq / c->cp, c->cp > 1 ? " (a context-parallel rank's tokens)" : "",
                         c->tp);
    return 0;
}

// ---------------------------------------------------------------- the part from the whole

// The part's parameters into host staging (t->cut.stage[0], the whole part): a fresh run's
// initial weights or, on resume, the checkpoint's parameters (its moments are staged for
// tp_create).
static int stage_part(TP *t) {
    const Strategy *s = t->outer;
    size_t np = t->part.nparams, N = t->whole->nparams;
    t->cut.stage[0] = xalloc_floats(np);
    if (!s->resume_dir) return s->data->params_stream(s->data->ctx, 0, N, part_cut_sink, &t->cut);
    t->cut.stage[1] = xalloc_floats(np), t->cut.stage[2] = xalloc_floats(np);
    CkptWant want = {
        .lo = {0, 0, 0, 0}, .hi = {N, N, N, 0}, .store = part_cut_store, .store_ctx = &t->cut};
    return checkpoint_read_into(s->resume_dir, N, &want);
}

// StrategyData.params for the part (ZeRO 0: the whole part at once).
static int part_params(void *ctx, size_t lo, size_t hi, float *dst) {
    TP *t = ctx;
    int rc = stage_part(t);
    if (!rc) t->part.be->upload(dst, t->cut.stage[0] + lo, hi - lo);
    free(t->cut.stage[0]);
    t->cut.stage[0] = NULL;
    return rc;
}

// StrategyData.params_stream for the part under --offload: nothing here, tp_create fills the
// tier block by block once the executor is set up (part_swap.c).
static int part_params_stream(void *ctx, size_t lo, size_t hi, GptSink sink, void *sctx) {
    (void)ctx, (void)lo, (void)hi, (void)sink, (void)sctx;
    return 0;
}

// Every rank of a tensor-parallel group (and of a context-parallel ring: each its chunks) reads
// the same micro-batches (its dp replica's).
static void part_train(void *ctx, int step, int j, int *inputs, int *targets) {
    TP *t = ctx;
    const StrategyData *d = t->outer->data;
    if (!t->ring) return d->train(d->ctx, step, j, inputs, targets);
    d->train(d->ctx, step, j, t->seq_in, t->seq_tg);
    cp_take_batch(t->outer, t->seq_in, t->seq_tg, inputs, targets);
}

static void part_val(void *ctx, int w, int *inputs, int *targets) {
    TP *t = ctx;
    const StrategyData *d = t->outer->data;
    if (!t->ring) return d->val(d->ctx, w, inputs, targets);
    d->val(d->ctx, w, t->seq_in, t->seq_tg);
    cp_take_batch(t->outer, t->seq_in, t->seq_tg, inputs, targets);
}

// ---------------------------------------------------------------- the whole from the parts

// A moment (ZeRO-1: each dp rank holds its slice [lo, hi) of the part) whole, into host dst.
static int gather_moment(TP *t, const float *slice, float *dst) {
    size_t lo, hi, n = (size_t)t->gcomm->size, me = (size_t)t->gcomm->rank;
    dp_owned_range(t->w.dp, &lo, &hi);
    double *r = xcalloc(2 * n, sizeof *r);
    r[2 * me] = (double)lo, r[2 * me + 1] = (double)hi;
    size_t *counts = xmalloc(n * sizeof *counts), *displs = xmalloc(n * sizeof *displs);
    int rc = comm_allreduce_f64(t->gcomm, r, (int)(2 * n));
    for (size_t q = 0; q < n; q++)
        displs[q] = (size_t)r[2 * q], counts[q] = (size_t)r[2 * q + 1] - displs[q];
    t->part.be->download(dst + lo, slice, hi - lo);
    if (!rc) rc = comm_allgatherv(t->gcomm, dst, counts, displs);
    free(r), free(counts), free(displs);
    return rc;
}

// ---------------------------------------------------------------- the strategy

static int tp_create(Strategy *s) {
    TP *t = xcalloc(1, sizeof *t);
    s->impl = t;
    const Grid *g = s->grid;
    t->whole = s->model, t->outer = s;
    if (gpt_create_layout_tp(&t->part, &s->model->cfg, s->model->be, g->tp, g->tp_i)) return -1;
    t->part.recompute_gelu = s->model->recompute_gelu;
    t->cut.map = part_map_1d(s->model, &t->part, g->tp, g->tp_i);
    t->part.tp.allreduce = tp_allreduce;
    t->part.tp.sp = s->cfg->sp;
    t->part.tp.allgather = tp_allgather;
    t->part.tp.reduce_scatter = tp_reduce_scatter;
    t->part.tp.ctx = t;
    t->data = (StrategyData){.ctx = t,
                             .train = part_train,
                             .val = part_val,
                             .params = part_params,
                             .params_stream = part_params_stream};
    t->inner = *s;
    t->inner.model = &t->part, t->inner.data = &t->data, t->inner.resume_dir = NULL;
    t->gcomm = g->dp_comm;
    if (g->cp > 1) { // the part runs on (B, T/cp) tokens; gradients sum over dp x cp
        if (cp_check_shape(s)) return -1;
        t->ring = cp_ring_create(g->cp_comm, s->model->be);
        cp_ring_install(&t->part, t->ring);
        t->icfg = *s->cfg, t->icfg.seq = s->cfg->seq / g->cp, t->inner.cfg = &t->icfg;
        t->seq_in = xmalloc((size_t)s->cfg->batch * s->cfg->seq * sizeof(int));
        t->seq_tg = xmalloc((size_t)s->cfg->batch * s->cfg->seq * sizeof(int));
        t->gcomm = g->dpcp_comm;
    }
    if (s->cfg->co2) // a worker sums its gradients over cp only, never over dp
        t->gcomm = g->cp > 1 ? g->cp_comm : comm_split(g->dp_comm, g->dp_comm->rank, 0, "self");
    // --offload: every rank of the world runs the same units (its blocks communicate over tp and
    // cp inside), each its own tier; the norm is taken per tensor, as grad_sumsq takes it
    t->w.plan_comm = g->world, t->w.tensor_norm = 1, t->w.tier_rank = g->world->rank;
    if (whole_create(&t->inner, &t->w, t->gcomm, s->cfg->zero)) return -1;
    if (t->w.sw) { // ZeRO 0: the part's parameters (and a checkpoint's moments), into the tier
        if (part_swap_fill(s, &t->cut.map, t->w.sw)) return -1;
        if (s->resume_dir) *swap_opt_t(t->w.sw) = s->resume->opt_t;
    } else if (s->resume_dir) { // ZeRO-1: the moments' slice this dp rank owns
        size_t lo, hi;
        dp_owned_range(t->w.dp, &lo, &hi);
        t->part.be->upload(t->w.opt.m, t->cut.stage[1] + lo, hi - lo);
        t->part.be->upload(t->w.opt.v, t->cut.stage[2] + lo, hi - lo);
        t->w.opt.t = s->resume->opt_t;
    }
    part_cut_free(&t->cut);
    if (s->cfg->co2 && !(t->co2 = tp_co2_create(s, &t->part, &t->w.opt, NULL, NULL))) return -1;
    return 0;
}

// Σ g² over the whole model: the parts' split tensors, the replicated ones counted once. Each
// rank of the gradient group (dp, or dp x cp) sums the reduced gradients of the slice it owns
// (ZeRO 2: all it holds; ZeRO 0/1: the whole part on the group's rank 0 only), then the sums
// are added over that group and tp.
static double grad_sumsq(TP *t, double *votes) {
    const GPT *m = &t->part;
    const Grid *g = t->outer->grid;
    size_t lo = 0, hi = 0;
    if (!t->w.sw) dp_owned_range(t->w.dp, &lo, &hi);
    const float *own = t->w.sw ? NULL : dp_owned_grads(t->w.dp);
    int zero2 = t->outer->cfg->zero >= 2;
    double sum = t->w.sw && t->gcomm->rank == 0 ? swap_tensor_sumsq(t->w.sw) : 0;
    for (int i = 0; i < m->ntensors && !t->w.sw && (zero2 || t->gcomm->rank == 0); i++) {
        size_t a = m->tensors[i].off, b = a + m->tensors[i].n;
        if (zero2) a = a > lo ? a : lo, b = b < hi ? b : hi;
        if (a < b && gpt_tp_counts(m, i, m->tp.i))
            sum += m->be->sumsq(zero2 ? own + (a - lo) : m->grads + a, b - a);
    }
    double v[2] = {sum, *votes}; // the stop vote: summed over dp x cp, then tp (every rank)
    comm_allreduce_f64(t->gcomm, v, 2);
    comm_allreduce_f64(g->tp_comm, v, 2);
    *votes = v[1];
    return v[0];
}

static int tp_step(Strategy *s, int step, int boundary) {
    (void)boundary;
    TP *t = s->impl;
    Whole *w = &t->w;
    double t0 = now_sec();
    if (t->co2) tp_co2_begin(t->co2, step);
    double loss = whole_grads(&t->inner, w, step);
    if (w->failed) return -1;
    int N = t->gcomm->size; // dp x cp ranks, each the mean over its tokens (equal counts)
    if (N > 1) {
        comm_allreduce_f64(t->gcomm, &loss, 1);
        loss /= N;
    }
    StepRecord r = {.step = step + 1, .loss = loss};
    double votes = strategy_stop_vote();
    whole_update_sumsq(&t->inner, w, step, loss, grad_sumsq(t, &votes), &r);
    if (t->co2) return t->steps++, tp_co2_step(t->co2, s, step, &r, t0); // (the agreed stop)
    strategy_stop_tally(s, votes);
    r.seconds = now_sec() - t0;
    r.exposed = N > 1 && w->dp ? dp_exposed_wait(w->dp) : -1;
    t->steps++;
    strategy_emit(s, &r);
    return 0;
}

static void tp_drain(Strategy *s, int final) {
    TP *t = s->impl;
    if (t->co2) tp_co2_drain(t->co2, s, final);
}

static double tp_evaluate(Strategy *s) {
    TP *t = s->impl; // the summary counts training steps only
    double f = t->floats, g = t->gathered, r = t->scattered, n = t->calls;
    double loss =
        t->ring ? cp_evaluate(&t->inner, &t->w, t->ring) : whole_evaluate(&t->inner, &t->w);
    if (t->w.failed) loss = NAN;
    t->floats = f, t->gathered = g, t->scattered = r, t->calls = n;
    return loss;
}

// CkptExtraFn of a rank that has nothing to write because its part failed (loom_errmsg).
static int failed_files(const char *part, void *ctx) {
    (void)part, (void)ctx;
    return -1;
}

// --offload (ZeRO 0): the first group's tp rank r assembles its range from every rank's tier
// into a scratch file and writes its shard from there (part_swap_save.c), within --fast-mem.
static int tp_save_swapped(Strategy *s, const char *dir, CkptMeta *meta, CkptExtraFn extra,
                           void *extra_ctx, int keep) {
    TP *t = s->impl;
    const Grid *g = s->grid;
    int writes = g->dp_i == 0 && g->cp_i == 0;
    PartSpill *sp = writes ? part_swap_spill(&t->cut.map, g->tp_comm, t->w.sw, s->cfg->offload_dir,
                                             g->world->rank, -1, 3)
                           : NULL;
    meta->opt_t = *swap_opt_t(t->w.sw);
    CkptShard sh = sp ? part_spill_shard(sp) : (CkptShard){0};
    // a rank whose assembly failed still joins the save, failing it there (agreed by all)
    int rc = ckpt_save_collective(dir, g->world, sp ? &sh : NULL, meta, extra, extra_ctx,
                                  writes && !sp ? failed_files : NULL, NULL, keep);
    part_spill_free(sp);
    return rc;
}

// The checkpoint in the whole flat layout: the moments gathered over the gradient group (dp, or
// dp x cp), then the first group's tp rank r writes range r of tp equal ranges of the whole
// layout (parameters and moments), assembled from every tp rank's part (any layout resumes).
static int tp_save(Strategy *s, const char *dir, CkptMeta *meta, int final, CkptExtraFn extra,
                   void *extra_ctx, int keep) {
    TP *t = s->impl;
    if (t->w.sw && !t->co2) return tp_save_swapped(s, dir, meta, extra, extra_ctx, keep);
    const Grid *g = s->grid;
    size_t N = t->whole->nparams, np = t->part.nparams, tp = (size_t)g->tp;
    float *src[3] = {xalloc_floats(np), xalloc_floats(np), xalloc_floats(np)};
    int rc;
    if (t->w.sw) { // ZeRO 0: the whole part's state is in this rank's tier
        rc = swap_fetch(t->w.sw, SWAP_PARAMS, 0, np, src[0]) ||
             swap_fetch(t->w.sw, SWAP_M, 0, np, src[1]) ||
             swap_fetch(t->w.sw, SWAP_V, 0, np, src[2]);
    } else {
        dp_full_params(t->w.dp, src[0]); // ZeRO-3: gathered over the gradient group
        rc = gather_moment(t, t->w.opt.m, src[1]) || gather_moment(t, t->w.opt.v, src[2]);
    }
    int writes = g->dp_i == 0 && g->cp_i == 0; // the first group: all of its tp ranks write
    size_t lo = N * (size_t)g->tp_i / tp, hi = N * ((size_t)g->tp_i + 1) / tp;
    float *mine[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3 && writes; k++)
        mine[k] = xalloc_floats(hi - lo + 1);
    for (size_t d = 0; d < tp && writes && !rc; d++)
        for (int k = 0; k < 3 && !rc; k++)
            rc = ckpt_tp_assemble(g->tp_comm, t->whole, &t->part, src[k], N * d / tp,
                                  N * (d + 1) / tp, (int)d, mine[k]);
    for (int k = 0; k < 3; k++)
        free(src[k]);
    CkptShard sh = {.lo = lo, .hi = hi, .params = mine[0], .m = mine[1], .v = mine[2]};
    meta->opt_t = t->w.sw ? *swap_opt_t(t->w.sw) : t->w.opt.t;
    CkptExtraFn files = NULL; // --co2: every rank's own state (not in the final checkpoint)
    void *files_ctx = NULL;
    if (t->co2 && !final) tp_co2_save_files(t->co2, s, meta, &files, &files_ctx);
    if (!rc)
        rc = ckpt_save_collective(dir, g->world, writes ? &sh : NULL, meta, extra, extra_ctx, files,
                                  files_ctx, keep);
    for (int k = 0; k < 3; k++)
        free(mine[k]);
    return rc;
}

static int tp_full(Strategy *s, float *host, int grads) {
    TP *t = s->impl;
    memset(host, 0, t->whole->nparams * sizeof(float));
    if (grads) return part_gather_whole(&t->cut.map, s->grid->tp_comm, t->part.grads, 0, host);
    float *mine = xalloc_floats(t->part.nparams); // ZeRO-3: gathered over the gradient group
    int rc = 0;
    if (t->w.sw)
        rc = swap_fetch(t->w.sw, SWAP_PARAMS, 0, t->part.nparams, mine);
    else
        dp_full_params(t->w.dp, mine);
    if (!rc) rc = part_gather_whole(&t->cut.map, s->grid->tp_comm, mine, 1, host);
    free(mine);
    return rc;
}

// --offload: an export reads the whole model's parameters from a scratch file the first
// group's ranks assemble on tp rank 0 from their tiers (collective: every rank calls it).
static int tp_param_source(Strategy *s, ParamSource *src) {
    TP *t = s->impl;
    const Grid *g = s->grid;
    if (!t->w.sw || t->co2) return 0;
    part_spill_free(t->spill), t->spill = NULL;
    if (g->dp_i || g->cp_i) return 1; // not the lead's group: nothing to read
    t->spill = part_swap_spill(&t->cut.map, g->tp_comm, t->w.sw, s->cfg->offload_dir,
                               g->world->rank, 0, 1);
    if (!t->spill) return -1;
    *src = (ParamSource){.fetch = part_spill_params, .ctx = t->spill};
    src->scratch = swap_scratch(t->w.sw, &src->scratch_floats);
    return src->scratch ? 1 : -1;
}

static void tp_describe(const Strategy *s, char *buf, size_t n) {
    if (s->cfg->co2) return tp_co2_describe(s, buf, n);
    char cp[48] = "";
    if (s->grid->cp > 1) snprintf(cp, sizeof cp, " x cp %d (ring attention)", s->grid->cp);
    snprintf(buf, n,
             "tensor parallel: tp %d (1d%s, vocabulary-parallel head)%s x dp %d (zero %d)%s",
             s->grid->tp, s->cfg->sp ? " + sequence parallel" : "", cp, s->grid->dp, s->cfg->zero,
             s->cfg->offload ? ", each rank's blocks swapped through its own disk tier" : "");
}

// Per rank: memory, and what its blocks all-reduced over tp per layer and micro-batch, against
// 1D's cost of 4 all-reduces of (B,T,C); with --sp also what they all-gathered and
// reduce-scattered (whole (B,T,C) tensors: an all-reduce moves as much as one of each).
static void tp_summary(Strategy *s, double exposed_s, double step_s) {
    TP *t = s->impl;
    if (t->co2) tp_co2_summary(t->co2, s, exposed_s, step_s);
    if (!s->lead) return;
    if (t->w.sw) return whole_swap_summary(&t->w); // this rank's tier, its peak RSS
    if (t->ring) cp_summary(s, t->ring, t->w.ws.floats, t->steps);
    if (s->grid->tp == 1) return;
    const StrategyConfig *c = s->cfg;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double micro = (double)t->steps * c->grad_accum, L = t->whole->cfg.L;
    double per = micro > 0 ? 4.0 / micro / L / 1048576 : 0; // floats → MiB per layer, micro-batch
    double table = 4.0 * c->batch * t->w.ws.T * t->whole->cfg.C * 4.0 / 1048576;
    char sp[256] = "";
    if (c->sp)
        snprintf(sp, sizeof sp,
                 " | sp: all-gathered %.3f + reduce-scattered %.3f MiB per layer and micro-batch "
                 "(1D: 4 all-reduces = 4 + 4 x (B,T,C) = %.3f + %.3f MiB)",
                 t->gathered * per, t->scattered * per, table, table);
    double pb, gb, ob, MiB = 1048576;
    dp_memory(t->w.dp, &pb, &gb, &ob);
    fprintf(stderr,
            "loom: tp %d%s x dp %d zero %d | per rank: a part of %.2f MiB of the whole model's "
            "%.2f MiB, holding params %.2f MiB, grads %.2f MiB, optimizer %.2f MiB, activations "
            "%.1f MiB, peak RSS %.1f MiB | all-reduced over tp per layer and micro-batch %.3f MiB "
            "(4 x (B,T,C) = %.3f MiB; embedding and loss included)%s\n",
            s->grid->tp, c->sp ? " + sp" : "", s->grid->dp, c->zero, t->part.nparams * 4.0 / MiB,
            t->whole->nparams * 4.0 / MiB, pb / MiB, gb / MiB, ob / MiB, t->w.ws.floats * 4.0 / MiB,
            ru.ru_maxrss / 1024.0, t->floats * per, table, sp);
}

static void tp_destroy(Strategy *s) {
    TP *t = s->impl;
    if (!t) return;
    tp_co2_free(t->co2);
    part_spill_free(t->spill);
    if (t->w.dp || t->w.sw) whole_free(&t->inner, &t->w);
    gpt_free(&t->part);
    cp_ring_free(t->ring);
    free(t->seq_in), free(t->seq_tg);
    free(t);
    s->impl = NULL;
}

const StrategyOps STRATEGY_TP = {.name = "tensor-parallel",
                                 .wants = tp_wants,
                                 .supports = &TP_SUPPORTS,
                                 .check = tp_check,
                                 .create = tp_create,
                                 .step = tp_step,
                                 .drain = tp_drain,
                                 .evaluate = tp_evaluate,
                                 .save = tp_save,
                                 .full_params = tp_full,
                                 .param_source = tp_param_source,
                                 .comm_failed = strategy_end_job,
                                 .describe = tp_describe,
                                 .summary = tp_summary,
                                 .destroy = tp_destroy};
