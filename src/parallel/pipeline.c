// pipeline.c — stage partitioning, the three schedules and the pipeline training loop
// (see pipeline.h).
#include "pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"

static int peak_inflight;
static double memory_report[3];
int pipeline_peak_inflight(void) { return peak_inflight; }
void pipeline_memory(double *weights, double *grads, double *opt) {
    *weights = memory_report[0], *grads = memory_report[1], *opt = memory_report[2];
}

// ---------------------------------------------------------------- partition

// Relative compute cost of a block per token (matmul FLOPs dominate).
static double block_cost(const GPT *m, int b, int T) {
    const Block *blk = &m->blocks[b];
    double C = m->cfg.C;
    if (blk->kind == BLOCK_EMBED) return C;
    if (blk->kind == BLOCK_HEAD) return (double)m->cfg.V * C;
    return 12.0 * C * C + 2.0 * T * C;
}

int pipeline_partition(const GPT *m, int D, int s, const char *stage_layers, int *b0, int *b1) {
    int nb = m->nblocks, L = m->cfg.L;
    if (D > L)
        return loom_fail("--pp %d needs at least %d transformer layers (model has %d)", D, D, L);
    int *start = xcalloc((size_t)D + 1, sizeof(int));
    if (stage_layers) { // layers per stage; the embedding joins stage 0, the head the last
        const char *p = stage_layers;
        int total = 0;
        for (int k = 0; k < D; k++) {
            char *end;
            long v = strtol(p, &end, 10);
            // the first and last stage may hold no layer (they keep the embedding / head)
            if (end == p || v < 0 || (v == 0 && k != 0 && k != D - 1)) {
                free(start);
                return loom_fail("--stage-layers '%s': need %d counts separated by commas (only "
                                 "the first and last stage may be 0)",
                                 stage_layers, D);
            }
            start[k] = k == 0 ? 0 : 1 + total;
            total += (int)v;
            p = *end == ',' ? end + 1 : end;
        }
        if (total != L || *p) {
            free(start);
            return loom_fail("--stage-layers '%s' must list %d stages adding up to %d layers",
                             stage_layers, D, L);
        }
        start[D] = nb;
    } else { // contiguous split minimising the most expensive stage (linear partition)
        double *pre = xcalloc((size_t)nb + 1, sizeof(double));
        for (int b = 0; b < nb; b++)
            pre[b + 1] = pre[b] + block_cost(m, b, m->cfg.maxT);
        // best[k][i]: minimal max cost splitting blocks [0, i) into k stages
        double *best = xcalloc((size_t)(D + 1) * (nb + 1), sizeof(double));
        int *cut = xcalloc((size_t)(D + 1) * (nb + 1), sizeof(int));
#define BEST(k, i) best[(size_t)(k) * (nb + 1) + (i)]
#define CUT(k, i) cut[(size_t)(k) * (nb + 1) + (i)]
        for (int i = 0; i <= nb; i++)
            BEST(1, i) = pre[i];
        for (int k = 2; k <= D; k++)
            for (int i = k; i <= nb; i++) {
                BEST(k, i) = INFINITY;
                for (int j = k - 1; j < i; j++) {
                    double c = fmax(BEST(k - 1, j), pre[i] - pre[j]);
                    if (c < BEST(k, i)) BEST(k, i) = c, CUT(k, i) = j;
                }
            }
        start[D] = nb;
        for (int k = D, i = nb; k >= 2; k--)
            i = start[k - 1] = CUT(k, i);
        start[0] = 0;
#undef BEST
#undef CUT
        free(pre), free(best), free(cut);
    }
    *b0 = start[s];
    *b1 = start[s + 1];
    free(start);
    if (*b1 <= *b0) return loom_fail("pipeline stage %d would be empty", s);
    return 0;
}

// ---------------------------------------------------------------- the runtime

typedef struct {
    GPT *m;
    const Grid *g;
    const PipelineConfig *pc;
    int D, s, b0, b1, first, last;
    int nslots;
    Workspace *ws;
    CommReq *send_x, *send_dx; // per slot: the last sends out of its buffers
    // Stage-local state: only this stage's flat range [lo, hi) is held (two weight versions
    // under 2bw), plus, on the last stage, a replica of the tied wte [0, tie_n).
    float *pbuf[2], *gbuf, *om, *ov;  // weights per version, gradients, AdamW moments
    float *wbuf[2], *wgrad, *wm, *wv; // the wte replica (last stage only)
    int nver, cur_ver, t;             // versions held, the one blocks point at, AdamW step
    int replica;                      // 1 on the last stage when it is not also the first
    size_t lo, hi;                    // this stage's flat range
    size_t tie_n;                     // wte elements (tied embedding), synchronised first <-> last
    Comm *tie;                        // communicator of the first and last stage (NULL if D == 1)
    double loss_sum; // Σ micro-batch mean losses of the current batch (last stage)
    BlockHooks hooks;
    // 2bw: a finished batch's update runs in the background. Its gradients move to spare
    // buffers, its reductions (dp, tied embedding, global norm and loss) proceed as a chain of
    // non-blocking collectives driven from the poll hook, and the update is applied just before
    // the first micro-batch that needs the new version — so no stage ever waits for a flush.
    float *gspare, *wspare;
    struct {
        int phase; // 0 idle, 1 dp reduce, 2 tie reduce, 3 norm/loss reduce, 4 dp loss, 5 ready
        int step;
        double dt, v[2]; // the batch's wall time (end of batch t-1 to end of batch t); norm², loss
        float *g, *wg;
        CommReq req[2];
    } pend;
    AdamW *opt;
    const PipelineIO *io;
    int stop;
} Pipe;

static void pend_advance(Pipe *p, int block);

static void poll_hook(void *ctx) {
    Pipe *p = ctx;
    comm_progress();
    if (p->pend.phase) pend_advance(p, 0);
}

// Points the blocks this stage uses (its own, and the embedding's wte on the last stage) at
// weight version v, and their gradients at the stage's buffers.
static void use_version(Pipe *p, int v) {
    GPT *m = p->m;
    for (int b = 0; b < m->nblocks; b++) {
        Block *blk = &m->blocks[b];
        if (b >= p->b0 && b < p->b1) {
            blk->params = p->pbuf[v] + (blk->off - p->lo);
            blk->grads = p->gbuf + (blk->off - p->lo);
        } else if (b == 0 && p->replica) {
            blk->params = p->wbuf[v];
            blk->grads = p->wgrad;
        } else {
            blk->params = blk->grads = NULL;
        }
    }
    p->cur_ver = v;
}

static int slot_of(const Pipe *p, int g) { return g % p->nslots; }

// What the watchdog prints if this stage waits too long: stage, direction and micro-batch.
static char context[128];
static void set_context(const Pipe *p, int step, const char *what, int g) {
    snprintf(context, sizeof context, "pipeline stage %d of %d, %s of micro-batch %d (step %d)",
             p->s, p->D, what, g % p->pc->K, step + 1);
    comm_set_context(step + 1, context);
}

static void forward_micro(Pipe *p, int g, const PipelineIO *io, int step, int j) {
    GPT *m = p->m;
    Workspace *ws = &p->ws[slot_of(p, g)];
    comm_wait(&p->send_x[slot_of(p, g)]);
    set_context(p, step, "forward", g);
    io->batch(io->ctx, step, j, ws->tokens, ws->targets);
    size_t n = (size_t)ws->B * ws->T * m->cfg.C;
    if (!p->first) {
        CommReq r =
            comm_irecv(p->g->pp_comm, workspace_stream(ws, m, p->b0 - 1), n, p->s - 1, 2 * g);
        comm_wait(&r);
    }
    for (int b = p->b0; b < p->b1; b++) {
        const Block *blk = &m->blocks[b];
        BlockIO bio = {.tokens = ws->tokens, .targets = ws->targets};
        if (blk->kind != BLOCK_EMBED) bio.x_in = workspace_stream(ws, m, b - 1);
        if (blk->kind != BLOCK_HEAD) bio.x_out = workspace_stream(ws, m, b);
        if (blk->kind == BLOCK_HEAD) bio.wte = gpt_embed(m)->params;
        block_forward(m, blk, ws, &bio);
        if (blk->kind == BLOCK_HEAD) p->loss_sum += bio.loss_sum / (double)(ws->B * ws->T);
    }
    if (!p->last)
        p->send_x[slot_of(p, g)] =
            comm_isend(p->g->pp_comm, workspace_stream(ws, m, p->b1 - 1), n, p->s + 1, 2 * g);
}

static void backward_micro(Pipe *p, int g, int step, float grad_scale) {
    GPT *m = p->m;
    Workspace *ws = &p->ws[slot_of(p, g)];
    comm_wait(&p->send_dx[slot_of(p, g)]);
    set_context(p, step, "backward", g);
    size_t n = (size_t)ws->B * ws->T * m->cfg.C;
    if (!p->last) {
        CommReq r = comm_irecv(p->g->pp_comm, ws->dstream, n, p->s + 1, 2 * g + 1);
        comm_wait(&r);
    }
    for (int b = p->b1 - 1; b >= p->b0; b--) {
        const Block *blk = &m->blocks[b];
        BlockIO bio = {.tokens = ws->tokens, .targets = ws->targets, .dx = ws->dstream};
        if (blk->kind != BLOCK_EMBED) bio.x_in = workspace_stream(ws, m, b - 1);
        if (blk->kind != BLOCK_HEAD) bio.x_out = workspace_stream(ws, m, b);
        if (blk->kind == BLOCK_HEAD) {
            bio.wte = gpt_embed(m)->params;
            bio.dwte = gpt_embed(m)->grads;
            bio.grad_scale = grad_scale;
        }
        block_backward(m, blk, ws, &bio);
    }
    if (!p->first)
        p->send_dx[slot_of(p, g)] = comm_isend(p->g->pp_comm, ws->dstream, n, p->s - 1, 2 * g + 1);
}

// AdamW over the flat range [lo, hi) whose buffers start at element lo.
static void adamw_range(const GPT *m, const OptConfig *c, int t, size_t lo, size_t hi, float *w,
                        const float *g, float *mo, float *vo, float lr, float scale) {
    for (int i = 0; i < m->ntensors; i++) {
        const TensorSpec *ts = &m->tensors[i];
        size_t a = ts->off > lo ? ts->off : lo, e = ts->off + ts->n < hi ? ts->off + ts->n : hi;
        if (e <= a) continue;
        float wd = ts->ndim >= 2 ? c->weight_decay : 0.f;
        m->be->adamw(w + (a - lo), g + (a - lo), mo + (a - lo), vo + (a - lo), e - a, lr, c->beta1,
                     c->beta2, c->eps, wd, scale, t);
    }
}

// AdamW on the stage's range (and the wte replica) of weight version v.
static void apply_update(Pipe *p, const OptConfig *c, int v, float lr, float scale) {
    p->t++;
    adamw_range(p->m, c, p->t, p->lo, p->hi, p->pbuf[v], p->gbuf, p->om, p->ov, lr, scale);
    if (p->replica)
        adamw_range(p->m, c, p->t, 0, p->tie_n, p->wbuf[v], p->wgrad, p->wm, p->wv, lr, scale);
}

// End of batch `step`: reduce gradients (dp replicas, tied embedding), global loss and norm,
// clip, update. Returns the report callback's value.
static int finish_batch(Pipe *p, AdamW *opt, int step, const PipelineIO *io, double t0) {
    GPT *m = p->m;
    const Backend *be = m->be;
    const Grid *g = p->g;
    comm_set_context(step + 1, "pipeline optimizer step");
    size_t n = p->hi - p->lo;
    if (g->dp > 1) {
        comm_allreduce(g->dp_comm, p->gbuf, n);
        if (p->replica) comm_allreduce(g->dp_comm, p->wgrad, p->tie_n);
    }
    // wte: the head's part (last stage) + the embedding's part (first stage), on both
    if (p->tie) comm_allreduce(p->tie, p->replica ? p->wgrad : p->gbuf, p->tie_n);
    double v[2] = {be->sumsq(p->gbuf, n), p->last ? p->loss_sum / p->pc->K : 0};
    comm_allreduce_f64(g->pp_comm, v, 2);
    if (g->dp > 1) {
        comm_allreduce_f64(g->dp_comm, &v[1], 1);
        v[1] /= g->dp;
    }
    double norm = sqrt(v[0]), loss = v[1];
    float lr = lr_at(&opt->cfg, step);
    int stop = 0;
    if (isfinite(loss) && isfinite(norm)) {
        float scale = clip_scale((float)norm, p->pc->grad_clip);
        if (p->pc->schedule == SCHED_2BW) {
            // W(t+1) = W(t) - opt(g_t), written over W(t-1), whose last user was this batch
            int newest = step == 0 ? 0 : (step & 1), next = (step + 1) & 1;
            be->copy(p->pbuf[next], p->pbuf[newest], n);
            if (p->replica) be->copy(p->wbuf[next], p->wbuf[newest], p->tie_n);
            apply_update(p, &opt->cfg, next, lr, scale);
        } else {
            apply_update(p, &opt->cfg, 0, lr, scale);
        }
    }
    stop = io->report(io->ctx, step + 1, loss, norm, lr, now_sec() - t0);
    be->fill(p->gbuf, 0.f, n);
    if (p->replica) be->fill(p->wgrad, 0.f, p->tie_n);
    p->loss_sum = 0;
    return stop;
}

// ---------------------------------------------------------------- 2bw: background updates

static int req_done(CommReq *r, int block) {
    if (block) {
        comm_wait(r);
        return 1;
    }
    return comm_test(r);
}

// Moves the pending update through its chain of reductions as far as it can go (or, with
// block, to the end).
static void pend_advance(Pipe *p, int block) {
    const Grid *g = p->g;
    size_t n = p->hi - p->lo;
    for (;;) {
        switch (p->pend.phase) {
        case 1: // replicas' gradients
            if (!req_done(&p->pend.req[0], block) || !req_done(&p->pend.req[1], block)) return;
            p->pend.phase = 2;
            if (p->tie)
                p->pend.req[0] =
                    comm_iallreduce(p->tie, p->replica ? p->pend.wg : p->pend.g, p->tie_n);
            break;
        case 2: // tied embedding
            if (p->tie && !req_done(&p->pend.req[0], block)) return;
            p->pend.phase = 3;
            p->pend.v[0] = p->m->be->sumsq(p->pend.g, n);
            p->pend.req[0] = comm_iallreduce_f64(g->pp_comm, p->pend.v, 2);
            break;
        case 3: // global norm and the last stage's loss
            if (!req_done(&p->pend.req[0], block)) return;
            p->pend.phase = 4;
            p->pend.req[0] = comm_iallreduce_f64(g->dp_comm, &p->pend.v[1], 1);
            break;
        case 4: // mean loss over replicas
            if (!req_done(&p->pend.req[0], block)) return;
            p->pend.v[1] /= g->dp;
            p->pend.phase = 5;
            return;
        default: return;
        }
    }
}

// End of batch `step` on this stage: hand its gradients to the background chain.
static void pend_start(Pipe *p, int step, double t0) {
    const Backend *be = p->m->be;
    size_t n = p->hi - p->lo;
    float *t = p->gbuf;
    p->gbuf = p->gspare, p->gspare = t;
    be->fill(p->gbuf, 0.f, n);
    if (p->replica) {
        t = p->wgrad;
        p->wgrad = p->wspare, p->wspare = t;
        be->fill(p->wgrad, 0.f, p->tie_n);
    }
    use_version(p, p->cur_ver); // blocks now accumulate into the fresh buffers
    p->pend.step = step;
    p->pend.dt = now_sec() - t0;
    p->pend.g = p->gspare;
    p->pend.wg = p->wspare;
    p->pend.v[0] = 0;
    p->pend.v[1] = p->last ? p->loss_sum / p->pc->K : 0;
    p->loss_sum = 0;
    p->pend.req[0] = comm_iallreduce(p->g->dp_comm, p->pend.g, n);
    p->pend.req[1] =
        p->replica ? comm_iallreduce(p->g->dp_comm, p->pend.wg, p->tie_n) : (CommReq){0};
    p->pend.phase = 1;
    pend_advance(p, 0);
}

// Finishes the pending update: W(t+1) = W(t) - opt(g_t), over W(t-1)'s buffer.
static void pend_complete(Pipe *p) {
    if (!p->pend.phase) return;
    comm_set_context(p->pend.step + 1, "pipeline 2bw update");
    pend_advance(p, 1);
    const Backend *be = p->m->be;
    size_t n = p->hi - p->lo;
    int step = p->pend.step;
    double norm = sqrt(p->pend.v[0]), loss = p->pend.v[1];
    float lr = lr_at(&p->opt->cfg, step);
    if (isfinite(loss) && isfinite(norm)) {
        float scale = clip_scale((float)norm, p->pc->grad_clip);
        int newest = step == 0 ? 0 : (step & 1), next = (step + 1) & 1;
        be->copy(p->pbuf[next], p->pbuf[newest], n);
        if (p->replica) be->copy(p->wbuf[next], p->wbuf[newest], p->tie_n);
        float *g = p->gbuf, *wg = p->wgrad; // the update reads the batch's gradients
        p->gbuf = p->pend.g, p->wgrad = p->pend.wg;
        apply_update(p, &p->opt->cfg, next, lr, scale);
        p->gbuf = g, p->wgrad = wg;
    }
    p->pend.phase = 0;
    if (!p->stop) p->stop = p->io->report(p->io->ctx, step + 1, loss, norm, lr, p->pend.dt);
}

int pipeline_train(GPT *m, const Grid *g, const PipelineConfig *pc, AdamW *opt, int start,
                   int steps, const PipelineIO *io) {
    memory_report[0] = memory_report[1] = memory_report[2] = 0;
    Pipe p = {.m = m, .g = g, .pc = pc, .D = g->pp, .s = g->pp_i};
    p.first = p.s == 0;
    p.last = p.s == p.D - 1;
    if (pipeline_partition(m, p.D, p.s, pc->stage_layers, &p.b0, &p.b1)) return -1;
    if (pc->schedule != SCHED_GPIPE && pc->K < p.D)
        return loom_fail("--schedule 1f1b/2bw needs --grad-accum >= --pp (%d < %d)", pc->K, p.D);
    p.lo = m->blocks[p.b0].off;
    p.hi = m->blocks[p.b1 - 1].off + m->blocks[p.b1 - 1].n;
    p.tie_n = (size_t)m->cfg.V * m->cfg.C;
    // the tied embedding's two holders: stage 0 and the last stage (of each dp replica)
    int in_tie = p.first || p.last;
    Comm *tie = comm_split(g->world, in_tie ? g->dp_i : -1, g->pp_i, "tie");
    p.tie = in_tie && p.D > 1 ? tie : NULL;
    p.nslots = pc->schedule == SCHED_GPIPE ? pc->K : p.D - p.s;
    p.ws = xcalloc((size_t)p.nslots, sizeof(Workspace));
    p.send_x = xcalloc((size_t)p.nslots, sizeof(CommReq));
    p.send_dx = xcalloc((size_t)p.nslots, sizeof(CommReq));
    for (int k = 0; k < p.nslots; k++)
        if (workspace_create_range(&p.ws[k], m, pc->B, pc->T, pc->recompute, p.b0, p.b1)) return -1;
    // Stage-local buffers; the full copies m->params / m->grads are dropped until the end.
    const Backend *be = m->be;
    size_t n = p.hi - p.lo;
    p.replica = p.last && !p.first;
    p.nver = pc->schedule == SCHED_2BW ? 2 : 1;
    for (int v = 0; v < p.nver; v++) {
        p.pbuf[v] = be->alloc(n);
        be->copy(p.pbuf[v], m->params + p.lo, n);
        if (p.replica) {
            p.wbuf[v] = be->alloc(p.tie_n);
            be->copy(p.wbuf[v], m->params, p.tie_n);
        }
    }
    p.gbuf = be->alloc(n), p.om = be->alloc(n), p.ov = be->alloc(n);
    if (p.replica)
        p.wgrad = be->alloc(p.tie_n), p.wm = be->alloc(p.tie_n), p.wv = be->alloc(p.tie_n);
    p.t = opt->t;
    size_t held = n + (p.replica ? p.tie_n : 0);
    memory_report[0] = 4.0 * held * p.nver;
    memory_report[1] = 4.0 * held;
    memory_report[2] = 8.0 * held;
    be->release(m->params), be->release(m->grads);
    m->params = m->grads = NULL;
    use_version(&p, 0);
    p.hooks = (BlockHooks){.poll = poll_hook, .ctx = &p};
    p.opt = opt;
    p.io = io;
    if (p.nver == 2) {
        p.gspare = be->alloc(n);
        if (p.replica) p.wspare = be->alloc(p.tie_n);
        memory_report[1] *= 2;
    }
    const BlockHooks *saved = m->hooks;
    m->hooks = &p.hooks;
    float grad_scale = 1.0f / ((float)pc->B * pc->T * pc->K * g->dp);
    int K = pc->K, D = p.D, s = p.s, rc = 0;
    peak_inflight = 0;

    if (pc->schedule != SCHED_2BW) {
        for (int step = start; step < steps && !rc; step++) {
            double t0 = now_sec();
            int base = step * K,
                warm = pc->schedule == SCHED_GPIPE ? K : (D - s - 1 < K ? D - s - 1 : K);
            int inflight = 0;
            for (int j = 0; j < warm; j++)
                forward_micro(&p, base + j, io, step, j), inflight++;
            if (inflight > peak_inflight) peak_inflight = inflight;
            for (int j = 0; j < K - warm; j++) {
                forward_micro(&p, base + warm + j, io, step, warm + j);
                if (++inflight > peak_inflight) peak_inflight = inflight;
                backward_micro(&p, base + j, step, grad_scale), inflight--;
            }
            for (int j = K - warm; j < K; j++)
                backward_micro(&p, base + j, step, grad_scale);
            for (int k = 0; k < p.nslots; k++)
                comm_wait(&p.send_x[k]), comm_wait(&p.send_dx[k]);
            rc = finish_batch(&p, opt, step, io, t0);
        }
    } else {
        // one 1F1B stream over all micro-batches of all steps; batch t uses version max(t-1,0)
        int total = (steps - start) * K, g0 = start * K, warm = D - s - 1;
        int nf = 0, nb = 0, inflight = 0;
        double t0 = now_sec();
#define VERSION_OF(gi) ((gi) / K == 0 ? 0 : (((gi) / K - 1) & 1))
        while (nb < total && !p.stop) {
            int do_forward = nf < total && (nf < warm || nf - nb <= warm);
            if (do_forward && nf - nb < p.nslots) {
                int gi = g0 + nf;
                // batch t+2 needs W(t+1): the pending update of batch t must be applied first
                if (p.pend.phase && gi / K >= p.pend.step + 2) pend_complete(&p);
                use_version(&p, VERSION_OF(gi));
                forward_micro(&p, gi, io, gi / K, gi % K);
                nf++;
                if (++inflight > peak_inflight) peak_inflight = inflight;
                if (nf <= warm) continue;
            }
            int gi = g0 + nb;
            use_version(&p, VERSION_OF(gi));
            backward_micro(&p, gi, gi / K, grad_scale);
            nb++, inflight--;
            if (gi % K == K - 1) {
                pend_complete(&p); // (normally already applied) keeps one update in flight
                pend_start(&p, gi / K, t0);
                t0 = now_sec();
            }
        }
        pend_complete(&p);
        rc = p.stop;
#undef VERSION_OF
        for (int k = 0; k < p.nslots; k++)
            comm_wait(&p.send_x[k]), comm_wait(&p.send_dx[k]);
    }
    // Hand back a whole-model buffer holding this stage's trained weights (the newest version:
    // W(steps) under 2bw) — pipeline_gather_params fills in the other stages' blocks.
    int newest = p.nver == 2 && steps > 0 ? steps & 1 : 0;
    m->params = be->alloc(m->nparams);
    m->grads = be->alloc(m->nparams);
    be->copy(m->params + p.lo, p.pbuf[newest], n);
    for (int b = 0; b < m->nblocks; b++) {
        m->blocks[b].params = m->params + m->blocks[b].off;
        m->blocks[b].grads = m->grads + m->blocks[b].off;
    }
    opt->t = p.t;
    float *bufs[] = {p.pbuf[0], p.pbuf[1], p.gbuf, p.om, p.ov,     p.wbuf[0],
                     p.wbuf[1], p.wgrad,   p.wm,   p.wv, p.gspare, p.wspare};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->release(bufs[i]);
    m->hooks = saved;
    for (int k = 0; k < p.nslots; k++)
        workspace_free(&p.ws[k], m);
    free(p.ws), free(p.send_x), free(p.send_dx);
    return rc;
}

int pipeline_gather_params(GPT *m, const Grid *g, const char *stage_layers) {
    int D = g->pp;
    int *counts = xcalloc((size_t)D, sizeof(int)), *displs = xcalloc((size_t)D, sizeof(int));
    for (int s = 0; s < D; s++) {
        int b0, b1;
        if (pipeline_partition(m, D, s, stage_layers, &b0, &b1)) return -1;
        displs[s] = (int)m->blocks[b0].off;
        counts[s] = (int)(m->blocks[b1 - 1].off + m->blocks[b1 - 1].n - m->blocks[b0].off);
    }
    comm_allgatherv(g->pp_comm, m->params, counts, displs);
    free(counts);
    free(displs);
    return 0;
}
