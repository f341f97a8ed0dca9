// pipeline.c — pipeline stages: partitioning, each stage's buffers (two weight versions under
// 2bw), the micro-batch forward/backward that crosses stage boundaries, validation through the
// stages and the views a checkpoint takes (see pipeline.h; the schedules are in
// pipeline_sched.c).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_impl.h"

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

static void poll_hook(void *ctx) {
    Pipe *p = ctx;
    comm_progress();
    if (p->pend.phase && !p->pend.running) pipe_pend_advance(p, 0);
}

// While the training thread waits (for an activation, a gradient, a send), the background
// chain keeps moving: its next chunks start as soon as the previous ones land.
static void wait_hook(void *ctx) {
    Pipe *p = ctx;
    if (p->pend.phase && !p->pend.running) pipe_pend_advance(p, 0);
}

// Points the blocks this stage uses (its own, and the embedding's wte on the last stage) at
// weight version v, and their gradients at the stage's buffers.
void pipe_use_version(Pipe *p, int v) {
    GPT *m = p->m;
    for (int b = 0; b < m->nblocks; b++) {
        Block *blk = &m->blocks[b];
        if (b >= p->b0 && b < p->b1) { // ZeRO-3: gathered per use; ZeRO-2: transient
            blk->params = p->pbuf[v] ? p->pbuf[v] + (blk->off - p->lo) : NULL;
            blk->grads = p->gbuf ? p->gbuf + (blk->off - p->lo) : b == 0 ? p->egrad : NULL;
        } else if (b == 0 && p->replica) {
            blk->params = p->wbuf[v];
            blk->grads = p->wgrad;
        } else {
            blk->params = blk->grads = NULL;
        }
    }
    p->cur_ver = v;
    if (p->nver == 2) gpt_extra_range(m, EXTRA_OTHER_VERSION, p->pbuf[v ^ 1], p->lo, p->hi);
}

// What the watchdog prints if this stage waits too long: stage, direction and micro-batch.
static char context[128];
void pipe_set_context(const Pipe *p, int step, const char *what, int g) {
    snprintf(context, sizeof context, "pipeline stage %d of %d, %s of micro-batch %d (step %d)",
             p->s, p->D, what, g % p->pc->K, step + 1);
    comm_set_context(step + 1, context);
}

// Runs this stage's blocks forward on the micro-batch in ws; returns the head's loss sum.
static double stage_forward(Pipe *p, Workspace *ws) {
    GPT *m = p->m;
    double loss = 0;
    for (int b = p->b0; b < p->b1; b++) {
        Block *blk = &m->blocks[b];
        pipe_swap_must(p, b, 0);
        blk->params = pipe_zero_params(p, b);
        BlockIO bio = {.tokens = ws->tokens, .targets = ws->targets};
        if (blk->kind != BLOCK_EMBED) bio.x_in = workspace_stream(ws, m, b - 1);
        if (blk->kind != BLOCK_HEAD) bio.x_out = workspace_stream(ws, m, b);
        if (blk->kind == BLOCK_HEAD) bio.wte = gpt_embed(m)->params;
        block_forward(m, blk, ws, &bio);
        if (blk->kind == BLOCK_HEAD) loss = bio.loss_sum;
    }
    return loss;
}

void pipe_forward_micro(Pipe *p, int g, int step, int j) {
    const PipelineIO *io = p->io;
    GPT *m = p->m;
    Workspace *ws = &p->ws[slot_of(p, g)];
    comm_wait(&p->send_x[slot_of(p, g)]);
    pipe_set_context(p, step, "forward", g);
    io->batch(io->ctx, step, j, ws->tokens, ws->targets);
    size_t n = workspace_rows(ws, m) * m->cfg.C; // (B,T,C), or the rank's rows (--sp)
    if (!p->first) {
        CommReq r = comm_irecv(p->g->pp_comm, workspace_stream(ws, m, p->b0 - 1), n, p->s - 1,
                               tag_of(g, 0));
        comm_wait(&r);
    }
    double loss = stage_forward(p, ws);
    if (p->last) p->loss_sum += loss / (double)(ws->B * ws->T);
    if (!p->last)
        p->send_x[slot_of(p, g)] = comm_isend(p->g->pp_comm, workspace_stream(ws, m, p->b1 - 1), n,
                                              p->s + 1, tag_of(g, 0));
}

// reduce: the batch's last micro-batch under gpipe/1f1b with dp replicas — each block's
// gradient all-reduce starts as soon as its backward is done.
void pipe_backward_micro(Pipe *p, int g, int step, float grad_scale, int reduce) {
    GPT *m = p->m;
    Workspace *ws = &p->ws[slot_of(p, g)];
    comm_wait(&p->send_dx[slot_of(p, g)]);
    pipe_set_context(p, step, "backward", g);
    size_t n = workspace_rows(ws, m) * m->cfg.C; // (B,T,C), or the rank's rows (--sp)
    if (!p->last) {
        CommReq r = comm_irecv(p->g->pp_comm, ws->dstream, n, p->s + 1, tag_of(g, 1));
        comm_wait(&r);
    }
    for (int b = p->b1 - 1; b >= p->b0; b--) {
        Block *blk = &m->blocks[b];
        pipe_swap_must(p, b, 1);
        blk->params = pipe_zero_params(p, b);
        pipe_zero_before_backward(p, b);
        BlockIO bio = {.tokens = ws->tokens, .targets = ws->targets, .dx = ws->dstream};
        if (blk->kind != BLOCK_EMBED) bio.x_in = workspace_stream(ws, m, b - 1);
        if (blk->kind != BLOCK_HEAD) bio.x_out = workspace_stream(ws, m, b);
        if (blk->kind == BLOCK_HEAD) {
            bio.wte = gpt_embed(m)->params;
            bio.dwte = gpt_embed(m)->grads;
            bio.grad_scale = grad_scale;
        }
        block_backward(m, blk, ws, &bio);
        pipe_zero_after_backward(p, b); // ZeRO-2: reduce-scattered now (not stage 0's embedding)
        if (reduce) {
            if (!p->zero2 || b == 0)
                p->breq[p->nbreq++] = comm_iallreduce(p->gc, blk->grads, blk->n);
            if (blk->kind == BLOCK_HEAD && p->replica)
                p->breq[p->nbreq++] = comm_iallreduce(p->gc, p->wgrad, p->tie_n);
            if (p->sw) // the slot may be given up by the next block: reduced now
                for (; p->nbreq; p->nbreq--)
                    timed_wait(p, &p->breq[p->nbreq - 1]);
        }
    }
    if (!p->first)
        p->send_dx[slot_of(p, g)] =
            comm_isend(p->g->pp_comm, ws->dstream, n, p->s - 1, tag_of(g, 1));
}

void pipe_wait_sends(Pipe *p) {
    for (int k = 0; k < p->nslots; k++)
        comm_wait(&p->send_x[k]), comm_wait(&p->send_dx[k]);
}

// ---------------------------------------------------------------- validation

// A forward-only pass of the validation windows through the stages with weight version v
// (nothing else may be in flight). Replica q evaluates windows q, q+W, … (a CO2 worker all of
// them, on its own weights, as --dp --co2 does); every rank gets the
// mean loss over the windows (context parallelism: every cp rank its chunks of them, the mean
// of its tokens' losses, so the cp ranks' means are averaged).
static double evaluate_version(Pipe *p, int v) {
    GPT *m = p->m;
    const PipelineIO *io = p->io;
    Workspace *ws = &p->ws[0];
    size_t n = workspace_rows(ws, m) * m->cfg.C; // (B,T,C), or the rank's rows (--sp)
    int local = p->pc->local; // a CO2 worker evaluates every window on its own weights
    int nw = p->pc->val_windows, W = local ? 1 : p->g->dp, saved = p->cur_ver;
    pipe_zero_gather_all(p, v, 1); // ZeRO-3: replicas may run different numbers of windows
    pipe_use_version(p, v);
    comm_set_context(-1, "pipeline validation");
    double v2[1] = {0};
    for (int w = local ? 0 : p->g->dp_i; w < nw; w += W) {
        io->val_batch(io->ctx, w, ws->tokens, ws->targets);
        if (!p->first) {
            CommReq r = comm_irecv(p->g->pp_comm, workspace_stream(ws, m, p->b0 - 1), n, p->s - 1,
                                   val_tag(w));
            comm_wait(&r);
        }
        double loss = stage_forward(p, ws);
        if (p->last) v2[0] += loss / (double)(ws->B * ws->T);
        if (!p->last) {
            CommReq r = comm_isend(p->g->pp_comm, workspace_stream(ws, m, p->b1 - 1), n, p->s + 1,
                                   val_tag(w));
            comm_wait(&r);
        }
    }
    comm_allreduce_f64(p->g->pp_comm, v2, 1); // only the last stage holds losses
    comm_allreduce_f64(p->gc, v2, 1);
    pipe_zero_gather_all(p, v, 0);
    pipe_use_version(p, saved);
    return nw > 0 ? v2[0] / nw / p->g->cp : NAN;
}

// The stage's weights (and the wte replica's). Fresh: the initial values in every version.
// Resumed: W(start) and its moments in one read of the checkpoint, and under 2bw W(start-1)
// (the newest again when the checkpoint has no previous version).
static int stage_weights(Pipe *p, int start) {
    if (p->sw) return pipe_swap_fill(p, start);
    const Backend *be = p->m->be;
    size_t n = p->hi - p->lo;
    int cur = p->nver == 2 ? buffer_of(start) : 0, prv = cur ^ 1;
    float *prev = p->nver == 2 ? p->pbuf[prv] : NULL, *wprev = p->nver == 2 ? p->wbuf[prv] : NULL;
    int no_prev = 1, w_no_prev = 1;
    if (start > 0 && p->io->load) {
        no_prev = p->io->load(p->io->ctx, p->lo, p->hi, p->pbuf[cur], prev, p->lo + p->own_lo,
                              p->lo + p->own_hi, p->om, p->ov);
        if (no_prev >= 0 && p->replica)
            w_no_prev = p->io->load(p->io->ctx, 0, p->tie_n, p->wbuf[cur], wprev, p->wown_lo,
                                    p->wown_hi, p->wm, p->wv);
        if (no_prev < 0 || (p->replica && w_no_prev < 0)) return -1;
    } else if (p->io->params(p->io->ctx, p->lo, p->hi, p->pbuf[cur]) ||
               (p->replica && p->io->params(p->io->ctx, 0, p->tie_n, p->wbuf[cur]))) {
        return -1;
    }
    if (p->nver == 2 && no_prev) be->copy(p->pbuf[prv], p->pbuf[cur], n);
    if (p->nver == 2 && p->replica && w_no_prev) be->copy(p->wbuf[prv], p->wbuf[cur], p->tie_n);
    return 0;
}

// The communicators of the tied embedding (none when the head has its own weights: LLaMA
// untied) and of the norm (collective over the world).
static void stage_comms(Pipe *p, const Grid *g, int tied) {
    // the tied embedding's two holders: stage 0 and the last stage (of each dp replica, cp rank
    // and tp rank: a part's wte rows go to the same tp rank's head)
    int in_tie = p->first || p->last, dpcp = g->dp_i * g->cp + g->cp_i;
    Comm *tie = comm_split(g->world, in_tie ? dpcp * g->tp + g->tp_i : -1, g->pp_i, "tie");
    p->tie = in_tie && p->D > 1 && tied ? tie : NULL;
    p->norm =
        g->tp > 1 ? comm_split(g->world, dpcp, g->pp_i * g->tp + g->tp_i, "pp x tp") : g->pp_comm;
}

// Allocates the stage's buffers (and drops the whole-model ones); sets the ZeRO-1 slices.
static int pipe_setup(Pipe *p, GPT *m, const Grid *g, const PipelineConfig *pc, int start) {
    const Backend *be = m->be;
    p->first = p->s == 0;
    p->last = p->s == p->D - 1;
    if (pipeline_partition(m, p->D, p->s, pc->stage_layers, &p->b0, &p->b1)) return -1;
    if (pc->schedule != SCHED_GPIPE && pc->K < p->D)
        return loom_fail("--schedule 1f1b/2bw needs --grad-accum >= --pp (%d < %d)", pc->K, p->D);
    p->lo = m->blocks[p->b0].off;
    p->hi = m->blocks[p->b1 - 1].off + m->blocks[p->b1 - 1].n;
    p->tie_n = (size_t)gpt_vocab_rows(m) * m->cfg.C; // a tp part holds its rows of wte
    stage_comms(p, g, gpt_tied(&m->cfg));
    p->nslots = pc->schedule == SCHED_GPIPE ? pc->K : p->D - p->s;
    p->ws = xcalloc((size_t)p->nslots, sizeof(Workspace));
    p->send_x = xcalloc((size_t)p->nslots, sizeof(CommReq));
    p->send_dx = xcalloc((size_t)p->nslots, sizeof(CommReq));
    for (int k = 0; k < p->nslots; k++) {
        if (workspace_create_range(&p->ws[k], m, pc->B, pc->T, pc->recompute, p->b0, p->b1))
            return -1;
        p->mem[3] += 4.0 * p->ws[k].floats;
    }
    size_t n = p->hi - p->lo;
    p->replica = p->last && !p->first && gpt_tied(&m->cfg); // the head's copy of wte
    p->nver = pc->schedule == SCHED_2BW ? 2 : 1;
    int W = p->gc->size, q = p->gc->rank;
    p->zero1 = pc->zero >= 1 && W > 1;
    p->zero2 = pc->zero >= 2 && W > 1, p->zero3 = pc->zero >= 3 && W > 1;
    p->own_lo = 0, p->own_hi = n, p->wown_lo = 0, p->wown_hi = p->replica ? p->tie_n : 0;
    if (p->zero1) { // replica slices on norm-chunk boundaries (gpt.h), offsets from lo / 0
        p->cnt = xcalloc((size_t)W, sizeof(size_t)), p->dsp = xcalloc((size_t)W, sizeof(size_t));
        p->wcnt = xcalloc((size_t)W, sizeof(size_t)), p->wdsp = xcalloc((size_t)W, sizeof(size_t));
        for (int r = 0; r < W; r++) {
            size_t a = gpt_shard_bound(m, p->lo, p->hi, r, W) - p->lo;
            size_t b = gpt_shard_bound(m, p->lo, p->hi, r + 1, W) - p->lo;
            p->dsp[r] = a, p->cnt[r] = b - a;
            a = gpt_shard_bound(m, 0, p->tie_n, r, W),
            b = gpt_shard_bound(m, 0, p->tie_n, r + 1, W);
            p->wdsp[r] = a, p->wcnt[r] = b - a;
        }
        p->own_lo = p->dsp[q], p->own_hi = p->own_lo + p->cnt[q];
        if (p->replica) p->wown_lo = (size_t)p->wdsp[q], p->wown_hi = p->wown_lo + p->wcnt[q];
    }
    int swapped = pc->swap_ops != NULL; // the stage's arrays live in the tier
    for (int v = 0; v < p->nver; v++) {
        if (!swapped) p->pbuf[v] = be->alloc(n);
        if (p->replica) p->wbuf[v] = be->alloc(p->tie_n);
    }
    size_t own = p->own_hi - p->own_lo, wown = p->wown_hi - p->wown_lo;
    if (!swapped)
        p->gbuf = p->zero2 ? NULL : be->alloc(n), p->om = be->alloc(own), p->ov = be->alloc(own);
    if (p->replica)
        p->wgrad = be->alloc(p->tie_n), p->wm = be->alloc(wown), p->wv = be->alloc(wown);
    if ((swapped && pipe_swap_setup(p)) || stage_weights(p, start)) return -1;
    size_t held = (swapped ? 0 : n) + (p->replica ? p->tie_n : 0);
    p->mem[0] = 4.0 * held * p->nver;
    p->mem[1] = 4.0 * held;
    p->mem[2] = 8.0 * ((swapped ? 0 : own) + wown);
    if (swapped) pipe_swap_mem(p); // + the slots
    gpt_drop_whole(m, 1, 1);       // the stage's buffers replace the whole model's
    pipe_zero_setup(p);            // ZeRO-2/3: the shards replace the stage's whole buffers
    pipe_use_version(p, 0);
    p->hooks = (BlockHooks){.poll = poll_hook, .ctx = p};
    if (p->nver == 2 && !p->zero2) { // (ZeRO-2/3: the spares are shards, pipeline_zero.c)
        if (!swapped) p->gspare = be->alloc(n); // (--offload: the tier keeps two gradients)
        if (p->replica) p->wspare = be->alloc(p->tie_n);
        p->mem[1] *= 2;
    }
    p->breq = xcalloc((size_t)(p->b1 - p->b0) + 1, sizeof(CommReq));
    return 0;
}

Pipeline *pipeline_create(GPT *m, const Grid *g, const PipelineConfig *pc, const OptConfig *oc,
                          int opt_t, int start, const PipelineIO *io) {
    Pipe *p = xcalloc(1, sizeof *p);
    *p = (Pipe){.m = m, .g = g, .pc = pc, .D = g->pp, .s = g->pp_i, .io = io, .opt = *oc};
    p->votes_step = -1;
    p->gc = g->cp > 1 ? g->dpcp_comm : g->dp_comm;
    if (pc->local) p->gc = comm_split(g->world, g->world->rank, 0, "co2 worker"); // alone
    p->t = opt_t;
    p->done = start;
    if (pipe_setup(p, m, g, pc, start)) {
        pipeline_free(p);
        return NULL;
    }
    p->saved_hooks = m->hooks;
    m->hooks = &p->hooks;
    comm_set_wait_hook(wait_hook, p);
    p->grad_scale = 1.0f / ((float)pc->B * pc->T * pc->K * p->gc->size);
    return p;
}

int pipeline_step(Pipeline *p, int step, int boundary, double vote) {
    p->vote = vote;
    int rc = p->pc->schedule == SCHED_2BW ? pipe_step_2bw(p, step, boundary, p->grad_scale)
                                          : pipe_step_flushed(p, step, p->grad_scale);
    p->done = step + 1;
    return rc;
}

void pipeline_drain(Pipeline *p) { pipe_pend_complete(p); }

void pipeline_stage_view(Pipeline *p, float **w, size_t *lo, size_t *hi, float **wte,
                         size_t *tie_n) {
    *w = p->pbuf[0], *lo = p->lo, *hi = p->hi;
    *wte = p->replica ? p->wbuf[0] : NULL, *tie_n = p->tie_n;
}

int pipeline_moments(Pipeline *p, float **a, size_t *lens) {
    a[0] = p->om, a[1] = p->ov, lens[0] = lens[1] = p->own_hi - p->own_lo;
    if (!p->replica) return 2;
    a[2] = p->wm, a[3] = p->wv, lens[2] = lens[3] = p->wown_hi - p->wown_lo;
    return 4;
}

double pipeline_stop_votes(const Pipeline *p, int step) {
    return p->votes_step == step ? p->votes : 0;
}

double pipeline_evaluate(Pipeline *p) {
    return evaluate_version(p, p->nver == 2 ? buffer_of(p->done) : 0);
}

// With ZeRO-1 every replica writes its slice of the stage; otherwise replica 0 writes the
// whole stage. The last stage's wte replica equals stage 0's (same updates), so only stage 0
// writes it.
int pipeline_shard(Pipeline *p, PipeShard *sh) {
    if (p->sw) return pipe_swap_shard(p, sh);
    int newest = p->nver == 2 ? buffer_of(p->done) : 0;
    *sh = (PipeShard){.lo = p->lo + p->own_lo,
                      .hi = p->lo + p->own_hi,
                      .params = p->zero3 ? p->pshard[newest] : p->pbuf[newest] + p->own_lo,
                      .m = p->om,
                      .v = p->ov,
                      .prev = NULL};
    int prev = buffer_of(p->done - 1);
    if (p->nver == 2) sh->prev = p->zero3 ? p->pshard[prev] : p->pbuf[prev] + p->own_lo;
    return p->zero1 || p->gc->rank == 0;
}

int pipeline_opt_t(const Pipeline *p) { return p->t; }

int pipeline_peak_inflight(const Pipeline *p) { return p->peak_inflight; }

void pipeline_memory(const Pipeline *p, double *weights, double *grads, double *opt, double *acts) {
    *weights = p->mem[0], *grads = p->mem[1], *opt = p->mem[2], *acts = p->mem[3];
}

void pipeline_free(Pipeline *p) {
    if (!p) return;
    GPT *m = p->m;
    const Backend *be = m->be;
    float *bufs[] = {p->pbuf[0], p->pbuf[1], p->gbuf, p->om, p->ov,     p->wbuf[0],
                     p->wbuf[1], p->wgrad,   p->wm,   p->wv, p->gspare, p->wspare};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->release(bufs[i]);
    pipe_zero_free(p);
    pipe_swap_free(p);
    if (m->hooks == &p->hooks) {
        m->hooks = p->saved_hooks;
        comm_set_wait_hook(NULL, NULL);
    }
    for (int b = 0; b < m->nblocks; b++)
        m->blocks[b].params = m->blocks[b].grads = NULL, m->blocks[b].state = (BlockState){0};
    for (int k = 0; k < p->nslots && p->ws; k++)
        workspace_free(&p->ws[k], m);
    free(p->ws), free(p->send_x), free(p->send_dx), free(p->breq);
    free(p->cnt), free(p->dsp), free(p->wcnt), free(p->wdsp), free(p->pend.part);
    free(p);
}

void pipeline_stage_weights(Pipeline *p, float *host) {
    pipe_stage_weights(p, p->nver == 2 ? buffer_of(p->done) : 0, host);
}

void pipeline_stage_prev(Pipeline *p, float *host) {
    pipe_stage_weights(p, buffer_of(p->done - 1), host);
}

int pipeline_full_params(Pipeline *p, float *host) {
    GPT *m = p->m;
    const Grid *g = p->g;
    const char *stage_layers = p->pc->stage_layers;
    int D = g->pp;
    size_t *counts = xcalloc((size_t)D, sizeof(size_t)),
           *displs = xcalloc((size_t)D, sizeof(size_t));
    for (int s = 0; s < D; s++) {
        int b0, b1;
        if (pipeline_partition(m, D, s, stage_layers, &b0, &b1)) return -1;
        displs[s] = m->blocks[b0].off;
        counts[s] = m->blocks[b1 - 1].off + m->blocks[b1 - 1].n - m->blocks[b0].off;
    }
    int newest = p->nver == 2 ? buffer_of(p->done) : 0;
    pipe_stage_weights(p, newest, host + p->lo); // ZeRO-3: gathered over the replicas
    comm_allgatherv(g->pp_comm, host, counts, displs);
    free(counts);
    free(displs);
    return 0;
}
