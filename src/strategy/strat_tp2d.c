// strat_tp2d.c — Colossal-AI 2D (SUMMA) tensor parallelism (--tp q·q --tp-mode 2d) × data
// parallelism over dp (ZeRO 0-3). The tp group is a q×q grid, rank (i,j) = tp rank i·q + j;
// this file splits the group into its row (same i) and column (same j) communicators and
// installs them as the model's grid collectives (model/gpt_2d.h: what a rank holds; summa.c and
// block_2d.c: how it runs), with a point-to-point swap between ranks (i,j) and (j,i) for the
// embedding. A step runs the K micro-batches (every rank of a tp group reads the same ones and
// works on rows i·B/q.. of each), then sums the column-replicated gradients (biases, LayerNorms,
// wpe: partial over the rows i) down the column, all-reduces every gradient over dp, takes the
// global norm (replicated tensors counted once) and applies AdamW to the rank's part. ZeRO 1:
// dp rank r of a grid position keeps the moments of slice r of the part's flat layout only; the
// gradients are reduce-scattered over dp instead, each rank updates its slice and the parameters
// are all-gathered over dp (the norm: each slice's share, summed over tp and dp). ZeRO 2 and 3
// (tp2d_zero.c) use the same slices: no whole gradient buffer (each block reduced over the column
// and reduce-scattered over dp as the backward leaves it, every micro-batch), ZeRO 3 keeps only
// the slice of the parameters too (gathered block by block). Embedding
// and LM head (tied): wte is cut in q×q blocks like a weight of the head (vocabulary padded to a
// multiple of q: V·C/q² per rank, the padding never saved), the head is a SUMMA product with a
// vocabulary-parallel cross-entropy along the row; wpe is cut by columns (maxT·C/q per rank, the
// same down a column). Checkpoints, initial weights and exports stay in the whole model's flat
// layout (cut at start-up, the moments' slice cut from the part under ZeRO 1-3; moments gathered
// over dp, then everything over tp for a save; the first rank writes), so any layout resumes
// from them. --co2 (ZeRO 0): every grid is a CO2 worker — its gradients never summed over dp, the
// outer rule on the rank's part over dp (strat_tp_co2.c), every rank's state file in the saves.
// --offload (ZeRO 0): every rank swaps its part's blocks through its own tier (tp2d_swap.c,
// placed by the section hook), the same steps bit for bit; a save and an export assemble the
// whole model on the first rank from the tiers (part_swap_save.c), within --fast-mem. --cp
// (ZeRO 0): each grid runs on its ring position's two chunks of every sequence (the model's
// attention on the ring, wpe at the chunks' positions: block_2d.c), the gradients and losses
// summed over dp x cp.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "../io/safetensors.h"
#include "ckpt_save.h"
#include "co2_rounds.h"
#include "compose.h"
#include "strat_cp.h"
#include "tp2d_impl.h"

// ---------------------------------------------------------------- checks

static int t2_wants(const StrategyConfig *c) { return c->tp_2d; }

static const char T2_CO2_ZERO[] = "CO2 over 2D grids keeps its outer state unsharded (--zero 0)";
static const char T2_OFFLOAD_ZERO[] = "a 2D tensor-parallel part swaps its blocks with ZeRO 0 "
                                      "only (each rank its whole part through its own tier)";
static const char T2_CP[] = "2D tensor parallelism over a context-parallel ring keeps whole "
                            "moments and gradients in memory (--zero 0, no --co2 or --offload)";
static const FeaturePair T2_PAIRS[] = {
    {F_CP, F_ZERO1, T2_CP},
    {F_CP, F_ZERO2, T2_CP},
    {F_CP, F_ZERO3, T2_CP},
    {F_CP, F_CO2, T2_CP},
    {F_CP, F_OFFLOAD, T2_CP},
    {F_OFFLOAD, F_ZERO1, T2_OFFLOAD_ZERO},
    {F_OFFLOAD, F_ZERO2, T2_OFFLOAD_ZERO},
    {F_OFFLOAD, F_ZERO3, T2_OFFLOAD_ZERO},
    {F_OFFLOAD, F_CO2, "CO2's workers over 2D grids keep their outer state in memory"},
    {F_OFFLOAD, F_DUMP_GRADS, "the gradients live in the offload tier, not in memory"},
    {F_CO2, F_ZERO1, T2_CO2_ZERO},
    {F_CO2, F_ZERO2, T2_CO2_ZERO},
    {F_CO2, F_ZERO3, T2_CO2_ZERO},
    {F_CO2, F_DUMP_GRADS, "CO2's workers never sum their gradients (as --dp --co2)"},
    {0, 0, NULL}};
static const Supports T2_SUPPORTS = {
    .self = {F_TP2D, F_COUNT},
    .features = FEAT(F_TP2D) | FEAT(F_DP) | FEAT(F_ZERO1) | FEAT(F_ZERO2) | FEAT(F_ZERO3) |
                FEAT(F_RECOMPUTE) | FEAT(F_DUMP_GRADS) | FEAT(F_CO2) | FEAT(F_OFFLOAD) |
                FEAT(F_CP) | FEAT(F_OFFLOAD_DEVICE),
    .pairs = T2_PAIRS,
    .runs_with = "2D tensor parallelism runs with data parallelism (ZeRO 0-3), --recompute, "
                 "--co2 (ZeRO 0), --offload (ZeRO 0) and --cp (ZeRO 0)"};

static int t2_check(const StrategyConfig *c) {
    if (cp_check(c) || (c->co2 && co2_check_config(c))) return -1;
    int q = 1;
    while ((q + 1) * (q + 1) <= c->tp)
        q++;
    if (q < 2 || q * q != c->tp)
        return loom_fail("--tp-mode 2d needs --tp = q*q with q >= 2 (a q x q grid: 4, 9, 16, ...; "
                         "got --tp %d)",
                         c->tp);
    if (c->batch % q)
        return loom_fail("--tp-mode 2d with --tp %d: --batch %d must be a multiple of q = %d (each "
                         "grid row runs batch/q sequences)",
                         c->tp, c->batch, q);
    return 0;
}

// ---------------------------------------------------------------- the part from the whole

// The part's parameters (and, on resume, its moments) into t->cut's staging arrays, then into
// backend memory.
static int load_part(T2 *t) {
    const Strategy *s = t->outer;
    size_t np = t->part.nparams, N = t->whole->nparams;
    const Backend *be = t->part.be;
    for (int k = 0; k < 3; k++)
        t->cut.stage[k] = xalloc_floats(np);
    int rc;
    if (s->resume_dir) {
        CkptWant want = {
            .lo = {0, 0, 0, 0}, .hi = {N, N, N, 0}, .store = part_cut_store, .store_ctx = &t->cut};
        rc = checkpoint_read_into(s->resume_dir, N, &want);
        if (!rc) {
            size_t n = t->hi - t->lo; // the moments of this rank's slice
            be->upload(t->opt.m, t->cut.stage[1] + t->lo, n);
            be->upload(t->opt.v, t->cut.stage[2] + t->lo, n);
            t->opt.t = s->resume->opt_t;
        }
    } else {
        rc = s->data->params_stream(s->data->ctx, 0, N, part_cut_sink, &t->cut);
    }
    if (!rc) be->upload(t->part.params, t->cut.stage[0], np);
    part_cut_free(&t->cut);
    return rc;
}

// ---------------------------------------------------------------- the whole from the parts

// Every rank's part of src (backend memory, or host when `host`) into dst (host, whole layout).
static int gather_whole(T2 *t, const float *src, int host, float *dst) {
    return part_gather_whole(&t->cut.map, t->outer->grid->tp_comm, src, host, dst);
}

// A slice [lo, hi) of the part (backend memory: the moments, or the gradients at lo) gathered
// over dp into host part (the part's flat layout, nparams floats).
static int gather_slice(T2 *t, const float *slice, float *part) {
    t->part.be->download(part + t->lo, slice, t->hi - t->lo);
    if (t->nshard == 1) return 0;
    return comm_allgatherv(t->outer->grid->dp_comm, part, t->counts, t->displs);
}

// The whole model's parameters into host dst (ZeRO 3: the part's slices gathered over dp first;
// --offload: the part read from the tier).
static int whole_params(T2 *t, float *dst) {
    const float *shard = t->z ? tp2dz_params(t->z) : NULL;
    if (!shard && !t->sw) return gather_whole(t, t->part.params, 0, dst);
    float *part = xalloc_floats(t->part.nparams);
    int rc = (t->sw ? tp2ds_fetch(t->sw, 0, part) : gather_slice(t, shard, part)) ||
             gather_whole(t, part, 1, dst);
    free(part);
    return rc;
}

// ---------------------------------------------------------------- the strategy

// The moments' shards: ZeRO 1-3 cut the part's flat layout into dp equal slices (AdamW is
// element-wise and grad_sumsq sums per tensor, so any cut will do); AdamW holds this rank's and
// updates only it.
static void shard_part(T2 *t) {
    const Grid *gr = t->outer->grid;
    GPT *m = &t->part;
    int N = t->outer->cfg->zero >= 1 ? gr->dp : 1, me = N > 1 ? gr->dp_i : 0;
    t->nshard = N;
    t->counts = xmalloc((size_t)N * sizeof *t->counts);
    t->displs = xmalloc((size_t)N * sizeof *t->displs);
    for (int r = 0; r < N; r++) {
        t->displs[r] = m->nparams * (size_t)r / (size_t)N;
        t->counts[r] = m->nparams * (size_t)(r + 1) / (size_t)N - t->displs[r];
    }
    t->lo = t->displs[me], t->hi = t->lo + t->counts[me];
    adamw_create(&t->opt, m, &t->outer->cfg->opt, t->lo, t->hi);
    gpt_own_range(m, t->lo, t->hi, 0, m->params, m->grads);
    if (N > 1 && t->outer->cfg->zero == 1) t->gown = m->be->alloc(t->hi - t->lo);
}

// --co2: a column-replicated tensor is counted in the gap penalty's norms on grid row 0 only.
static int t2_dup(const GPT *part, int k, void *ctx) {
    const T2 *t = ctx;
    return t->g.i && gpt2d_col_replicated(part, k);
}

static int t2_create(Strategy *s) {
    T2 *t = xcalloc(1, sizeof *t);
    s->impl = t;
    const Grid *gr = s->grid;
    const StrategyConfig *c = s->cfg;
    t->whole = s->model, t->outer = s;
    // --co2: a grid is a worker, its gradients never summed over dp
    t->gdp = c->co2 ? comm_split(gr->dp_comm, gr->dp_comm->rank, 0, "self") : gr->dp_comm;
    int q = 2;
    while (q * q < gr->tp)
        q++;
    tp2d_grid(t, q, gr->tp_i / q, gr->tp_i % q);
    t->axis[T2D_ROW] = comm_split(gr->tp_comm, t->g.i, t->g.j, "tp_row");
    t->axis[T2D_COL] = comm_split(gr->tp_comm, t->g.j, t->g.i, "tp_col");
    if (gpt2d_layout(&t->part, &s->model->cfg, s->model->be, &t->g)) return -1;
    t->T = c->seq / gr->cp;
    if (gr->cp > 1) { // the part runs on (B, T/cp) tokens; gradients sum over dp x cp
        if (cp_check_shape(s)) return -1;
        t->ring = cp_ring_create(gr->cp_comm, s->model->be);
        cp_ring_install(&t->part, t->ring);
        t->gdp = gr->dpcp_comm;
        t->seq_in = xmalloc((size_t)c->batch * c->seq * sizeof(int));
        t->seq_tg = xmalloc((size_t)c->batch * c->seq * sizeof(int));
    }
    t->cut.map = part_map_2d(s->model, &t->part, q, t->g.i, t->g.j);
    if (c->offload) { // ZeRO 0: every block through this rank's tier (tp2d_swap.c)
        t->nshard = 1;
        t->sw = tp2ds_create(s, &t->part, &t->cut.map, &t->g, &t->ws, t->axis[T2D_COL], t->gdp);
        if (!t->sw) return -1;
    } else {
        if (gpt_alloc_whole(&t->part, 1, c->zero < 2)) return -1; // ZeRO 2/3: no whole grads
        shard_part(t);
        if (load_part(t)) return -1;
        if (c->zero >= 2)
            t->z = tp2dz_create(&t->part, gr->dp_comm, t->axis[T2D_COL], c->zero, t->counts,
                                t->displs);
        if (work2d_create(&t->ws, &t->part, &t->g, c->batch, t->T, c->recompute)) return -1;
    }
    size_t BT = (size_t)c->batch * c->seq;
    t->inputs = xmalloc(BT * sizeof(int));
    t->targets = xmalloc(BT * sizeof(int));
    if (c->co2 && !(t->co2 = tp_co2_create(s, &t->part, &t->opt, t2_dup, t))) return -1;
    return 0;
}

// The column-replicated tensors' gradients summed down the column (each row added its part),
// then every gradient summed over dp (--co2: none; ZeRO 1: only this rank's slice [lo, hi),
// reduce-scattered; the rest of its gradients stay this rank's own). ZeRO 0 sums each block in
// an all-reduce of its own: the same calls on the same data as a swapped part makes, so the two
// agree bit for bit whatever order the MPI library's algorithm adds each element's dp terms in
// (one that depends on the element's offset in the message, e.g. a ring, included).
static void reduce_grads(T2 *t) {
    const GPT *m = &t->part;
    const Comm *dp = t->gdp;
    if (t->z || t->sw) return; // ZeRO 2/3, --offload: reduced block by block in the backward
    for (int k = 0; k < m->ntensors; k++)
        if (gpt2d_col_replicated(m, k))
            comm_allreduce(t->axis[T2D_COL], m->grads + m->tensors[k].off, m->tensors[k].n);
    if (t->nshard > 1) {
        CommReq rq = comm_ireduce_scatter(dp, m->grads, t->gown, t->counts);
        comm_wait(&rq);
        m->be->copy(m->grads + t->lo, t->gown, t->hi - t->lo);
    } else if (dp->size > 1) { // block by block, as a swapped part sums them (tp2d_swap.c)
        CommReq *rq = xmalloc((size_t)m->nblocks * sizeof *rq);
        for (int b = 0; b < m->nblocks; b++)
            rq[b] = comm_iallreduce(dp, m->grads + m->blocks[b].off, m->blocks[b].n);
        for (int b = 0; b < m->nblocks; b++)
            comm_wait(&rq[b]);
        free(rq);
    }
}

// Σ g² over the whole model: every rank's own blocks, the column-replicated ones from row 0;
// under ZeRO 1-3 each dp rank's slice of them. *votes (the stop votes, already summed over the
// grid's columns and dp by mean_loss) rides along: summed over tp, it counts every rank's.
static double grad_sumsq(T2 *t, double *votes) {
    const GPT *m = &t->part;
    const float *own = t->z ? tp2dz_grads(t->z) : m->grads + t->lo; // the slice's reduced sums
    double sum = t->sw ? tp2ds_sumsq(t->sw, t->g.i == 0) : 0;
    for (int k = 0; k < m->ntensors && !t->sw; k++) {
        size_t a = m->tensors[k].off, b = a + m->tensors[k].n;
        a = a > t->lo ? a : t->lo, b = b < t->hi ? b : t->hi;
        if (b > a && (!gpt2d_col_replicated(m, k) || t->g.i == 0))
            sum += m->be->sumsq(own + (a - t->lo), b - a);
    }
    double v[2] = {sum, *votes};
    comm_allreduce_f64(t->outer->grid->tp_comm, v, 2);
    if (t->nshard > 1) comm_allreduce_f64(t->outer->grid->dp_comm, v, 2);
    *votes = v[1];
    return v[0];
}

// Σ of a forward's token losses over the grid's rows and the cp ring (and dp when dp_too; not
// across CO2's workers), per token; votes (may be NULL) rides along.
static double mean_loss(T2 *t, double sum, double tokens, int dp_too, double *votes) {
    double v[2] = {sum, votes ? *votes : 0};
    int n = votes ? 2 : 1;
    comm_allreduce_f64(t->axis[T2D_COL], v, n);
    if (dp_too && t->gdp->size > 1) comm_allreduce_f64(t->gdp, v, n); // (dp x cp)
    if (!dp_too && t->ring) comm_allreduce_f64(t->outer->grid->cp_comm, v, n);
    if (votes) *votes = v[1];
    return v[0] / tokens;
}

// Micro-batch j of the step (val: validation window j) into t->inputs/targets: every rank of a
// grid reads the same one (its dp replica's), a cp rank its two chunks of every sequence.
static void read_batch(T2 *t, int val, int step, int j) {
    const StrategyData *d = t->outer->data;
    int *in = t->ring ? t->seq_in : t->inputs, *tg = t->ring ? t->seq_tg : t->targets;
    val ? d->val(d->ctx, j, in, tg) : d->train(d->ctx, step, j, in, tg);
    if (t->ring) cp_take_batch(t->outer, in, tg, t->inputs, t->targets);
}

static int t2_step(Strategy *s, int step, int boundary) {
    (void)boundary;
    T2 *t = s->impl;
    const StrategyConfig *c = s->cfg;
    GPT *m = &t->part;
    double t0 = now_sec(), c0 = t->comm_s + (t->z ? tp2dz_comm_seconds(t->z) : 0);
    int K = c->grad_accum, N = t->gdp->size;
    double tokens = (double)c->batch * t->T * K * N;
    if (t->co2) tp_co2_begin(t->co2, step);
    if (t->sw)
        tp2ds_begin_step(t->sw);
    else
        t->z ? tp2dz_begin_step(t->z) : m->be->fill(m->grads, 0.f, m->nparams);
    double sum = 0;
    t->counting = 1;
    for (int j = 0; j < K; j++) {
        read_batch(t, 0, step, j);
        if (t->z) tp2dz_forward(t->z);
        if (t->sw) tp2ds_forward(t->sw);
        sum += gpt2d_forward(m, &t->g, &t->ws, t->inputs, t->targets);
        if (t->z) tp2dz_backward_begin(t->z);
        if (t->sw) tp2ds_backward_begin(t->sw, j, j == K - 1);
        gpt2d_backward(m, &t->g, &t->ws, (float)(1.0 / tokens));
        if (t->z) tp2dz_backward_end(t->z);
        if (t->sw) tp2ds_backward_end(t->sw);
    }
    t->counting = 0;
    if (t->sw && tp2ds_failed(t->sw)) return -1;
    double c1 = now_sec();
    reduce_grads(t);
    double votes = strategy_stop_vote();
    StepRecord r = {.step = step + 1, .loss = mean_loss(t, sum, tokens, 1, &votes)};
    r.norm = sqrt(grad_sumsq(t, &votes));
    if (!t->co2) strategy_stop_tally(s, votes); // CO2: the rounds' agreement (co2_rounds.h)
    r.lr = lr_at(&c->opt, step);
    r.applied = isfinite(r.loss) && isfinite(r.norm);
    float scale = clip_scale((float)r.norm, c->opt.grad_clip);
    if (r.applied && t->sw && tp2ds_update(t->sw, r.lr, scale)) return -1;
    if (r.applied && !t->sw) adamw_step(&t->opt, m, r.lr, scale);
    if (r.applied && t->nshard > 1 && c->zero < 3) // every dp rank's updated slice
        comm_allgatherv(s->grid->dp_comm, m->params, t->counts, t->displs);
    r.seconds = now_sec() - t0;
    r.exposed = t->comm_s + (t->z ? tp2dz_comm_seconds(t->z) : 0) - c0 + (now_sec() - c1);
    t->steps++;
    if (t->co2) return tp_co2_step(t->co2, s, step, &r, t0); // records, round end, agreed stop
    strategy_emit(s, &r);
    return 0;
}

static void t2_drain(Strategy *s, int final) {
    T2 *t = s->impl;
    if (t->co2) tp_co2_drain(t->co2, s, final);
}

static double t2_evaluate(Strategy *s) {
    T2 *t = s->impl;
    const StrategyConfig *c = s->cfg;
    double sum = 0;
    for (int k = 0; k < c->val_windows; k++) {
        read_batch(t, 1, 0, k);
        if (t->z) tp2dz_forward(t->z);
        if (t->sw) tp2ds_forward(t->sw);
        double l = gpt2d_forward(&t->part, &t->g, &t->ws, t->inputs, t->targets);
        sum += mean_loss(t, l, (double)c->batch * c->seq, 0, NULL);
    }
    return c->val_windows ? sum / c->val_windows : NAN;
}

// --offload (ZeRO 0): the first group's tp rank 0 gets the whole model's parameters and moments
// assembled from every tp rank's tier into a scratch file (part_swap_save.c: within --fast-mem)
// and writes its one shard from there: the same bytes as in memory.
static int t2_save_swapped(Strategy *s, const char *dir, CkptMeta *meta, CkptExtraFn extra,
                           void *extra_ctx, int keep) {
    T2 *t = s->impl;
    const Grid *g = s->grid;
    int group = g->dp_i == 0 && g->cp_i == 0;
    PartSpill *sp =
        group ? tp2ds_spill(t->sw, &t->cut.map, g->tp_comm, g->world->rank, 0, 3) : NULL;
    meta->opt_t = *tp2ds_opt_t(t->sw);
    CkptShard sh = sp && g->tp_i == 0 ? part_spill_shard(sp) : (CkptShard){0};
    double bad = group && !sp; // agreed by every rank (no rank left waiting in the save)
    comm_allreduce_f64(g->world, &bad, 1);
    int rc = bad ? -1
                 : ckpt_save_collective(dir, g->world, sh.fetch ? &sh : NULL, meta, extra,
                                        extra_ctx, NULL, NULL, keep);
    if (bad && !(group && !sp))
        loom_fail("offload: another rank failed to assemble the checkpoint from its tier");
    part_spill_free(sp);
    return rc;
}

// The whole model's parameters and moments (ZeRO 1-3: the moments gathered over dp first, ZeRO
// 3 the parameters too), gathered in every tp group; the first group's rank 0 writes them as one
// shard of the whole layout (--co2: worker 0's; every rank adds its own CO2 state file).
static int t2_save(Strategy *s, const char *dir, CkptMeta *meta, int final, CkptExtraFn extra,
                   void *extra_ctx, int keep) {
    T2 *t = s->impl;
    if (t->sw) return t2_save_swapped(s, dir, meta, extra, extra_ctx, keep);
    size_t N = t->whole->nparams;
    float *p = xalloc_floats(N), *m = xalloc_floats(N), *v = xalloc_floats(N);
    float *pm = xalloc_floats(t->part.nparams), *pv = xalloc_floats(t->part.nparams);
    int rc = t->sw ? tp2ds_fetch(t->sw, 1, pm) || tp2ds_fetch(t->sw, 2, pv)
                   : gather_slice(t, t->opt.m, pm) || gather_slice(t, t->opt.v, pv);
    rc = rc || whole_params(t, p) || gather_whole(t, pm, 1, m) || gather_whole(t, pv, 1, v);
    free(pm), free(pv);
    CkptShard sh = {.lo = 0, .hi = N, .params = p, .m = m, .v = v};
    meta->opt_t = t->sw ? *tp2ds_opt_t(t->sw) : t->opt.t;
    int writes = s->grid->dp_i == 0 && s->grid->tp_i == 0 && s->grid->cp_i == 0;
    CkptExtraFn files = NULL; // --co2: every rank's own state (not in the final checkpoint)
    void *files_ctx = NULL;
    if (t->co2 && !final) tp_co2_save_files(t->co2, s, meta, &files, &files_ctx);
    if (!rc)
        rc = ckpt_save_collective(dir, s->grid->world, writes ? &sh : NULL, meta, extra, extra_ctx,
                                  files, files_ctx, keep);
    free(p), free(m), free(v);
    return rc;
}

static int t2_full(Strategy *s, float *host, int grads) {
    T2 *t = s->impl;
    memset(host, 0, t->whole->nparams * sizeof(float));
    if (!grads) return whole_params(t, host);
    if (!t->z && t->nshard == 1) return gather_whole(t, t->part.grads, 0, host);
    float *part = xalloc_floats(t->part.nparams); // ZeRO 1-3: the reduced slices, over dp
    const float *own = t->z ? tp2dz_grads(t->z) : t->part.grads + t->lo;
    int rc = gather_slice(t, own, part) || gather_whole(t, part, 1, host);
    free(part);
    return rc;
}

// --offload: an export reads the whole model's parameters from a scratch file the first group
// assembles on its tp rank 0 from the ranks' tiers (collective: every rank calls it).
static int t2_param_source(Strategy *s, ParamSource *src) {
    T2 *t = s->impl;
    const Grid *g = s->grid;
    if (!t->sw) return 0;
    part_spill_free(t->spill), t->spill = NULL;
    if (g->dp_i || g->cp_i) return 1; // not the lead's group: nothing to read
    t->spill = tp2ds_spill(t->sw, &t->cut.map, g->tp_comm, g->world->rank, 0, 1);
    if (!t->spill) return -1;
    *src = (ParamSource){.fetch = part_spill_params, .ctx = t->spill};
    src->scratch = tp2ds_scratch(t->sw, st_save_floats(t->whole), &src->scratch_floats);
    return 1;
}

static void t2_describe(const Strategy *s, char *buf, size_t n) {
    const T2 *t = s->impl;
    if (t->co2) {
        snprintf(buf, n, "co2: %d workers of 2d tp %d (%dx%d SUMMA grid), tau %d", s->grid->dp,
                 s->grid->tp, t->g.q, t->g.q, s->cfg->tau);
        return;
    }
    char cp[48] = "";
    if (t->ring) snprintf(cp, sizeof cp, " x cp %d (ring attention)", s->grid->cp);
    snprintf(buf, n,
             "tensor parallel: tp %d (2d SUMMA, %dx%d grid, column-cut embedding)%s x dp %d (zero "
             "%d%s)%s",
             s->grid->tp, t->g.q, t->g.q, cp, s->grid->dp, s->cfg->zero, tp2dz_what(s->cfg->zero),
             t->sw ? ", each rank's blocks swapped through its own disk tier" : "");
}

static void t2_destroy(Strategy *s) {
    T2 *t = s->impl;
    if (!t) return;
    tp_co2_free(t->co2);
    work2d_free(&t->ws, &t->part);
    if (t->opt.m) adamw_free(&t->opt, &t->part);
    if (t->gown) t->part.be->release(t->gown);
    free(t->counts), free(t->displs);
    tp2dz_free(t->z);
    tp2ds_free(t->sw);
    part_spill_free(t->spill);
    gpt_free(&t->part);
    cp_ring_free(t->ring);
    free(t->seq_in), free(t->seq_tg);
    free(t->inputs), free(t->targets);
    free(t);
    s->impl = NULL;
}

const StrategyOps STRATEGY_TP2D = {.name = "tensor-parallel-2d",
                                   .wants = t2_wants,
                                   .supports = &T2_SUPPORTS,
                                   .check = t2_check,
                                   .create = t2_create,
                                   .step = t2_step,
                                   .drain = t2_drain,
                                   .evaluate = t2_evaluate,
                                   .save = t2_save,
                                   .full_params = t2_full,
                                   .param_source = t2_param_source,
                                   .comm_failed = strategy_end_job,
                                   .describe = t2_describe,
                                   .summary = tp2d_summary,
                                   .destroy = t2_destroy};
