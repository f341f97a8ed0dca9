// pipeline.c — stage partitioning, the three schedules and the pipeline training loop
// (see pipeline.h).
#include "pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"

static int peak_inflight;
static double memory_report[4];
int pipeline_peak_inflight(void) { return peak_inflight; }
void pipeline_memory(double *weights, double *grads, double *opt, double *acts) {
    *weights = memory_report[0], *grads = memory_report[1], *opt = memory_report[2];
    *acts = memory_report[3];
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

// Message tags: forward activations 2·g, activation gradients 2·g+1 for micro-batch g (modulo
// a range far larger than the micro-batches in flight), validation windows above that.
#define TAG_RANGE (1 << 22)
static int tag_of(int g, int backward) { return 2 * (g % TAG_RANGE) + backward; }
static int val_tag(int w) { return 2 * TAG_RANGE + w % TAG_RANGE; }

// 2bw's background gradient reductions go out as a chain of 1 MiB all-reduces driven by the
// progress thread (comm_iallreduce_chunked), so the activations the pipeline waits for, which
// share each rank's link, queue behind a chunk rather than the whole reduction. (Test hook:
// LOOM_PIPE_CHUNK=floats sets the chunk size.)
static size_t chunk_floats(void) {
    static size_t n;
    if (!n) {
        const char *v = getenv("LOOM_PIPE_CHUNK");
        n = v && atol(v) > 0 ? (size_t)atol(v) : (size_t)1 << 18;
    }
    return n;
}

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
    // ZeRO-1 over the dp replicas: this replica updates [own_lo, own_hi) of the stage range
    // (offsets from lo) and [wown_lo, wown_hi) of the wte replica; the moments cover only those.
    int zero1;
    size_t own_lo, own_hi, wown_lo, wown_hi;
    int *cnt, *dsp, *wcnt, *wdsp; // all-gather layouts over the dp replicas
    // gpipe/1f1b with dp replicas: per-block all-reduces started during the last backward
    CommReq *breq;
    int nbreq;
    double exposed;  // seconds the current batch blocked on reductions and gathers
    double loss_sum; // Σ micro-batch mean losses of the current batch (last stage)
    BlockHooks hooks;
    // 2bw: a finished batch's update runs in the background. Its gradients move to spare
    // buffers, its reductions (dp, tied embedding, global norm and loss) proceed as a chain of
    // non-blocking collectives driven from the poll hook, the update is applied to the free
    // version buffer as soon as they land (then all-gathered under ZeRO-1), and it is complete
    // before the first micro-batch that needs the new version — so no stage waits for a flush.
    float *gspare, *wspare;
    struct {
        int phase; // 0 idle, 1 dp reduce, 2 tie reduce, 3 norm/loss, 4 dp loss, 5 update,
                   // 6 gather, 7 done
        int step;
        double dt, v[2]; // the batch's wall time (end of batch t-1 to end of batch t); norm², loss
        float *g, *wg;
        CommReq req[2];
        int running; // pend_advance is on the stack (the wait hook must not re-enter it)
    } pend;
    AdamW *opt;
    const PipelineIO *io;
    int stop;
} Pipe;

static void pend_advance(Pipe *p, int block);

static void poll_hook(void *ctx) {
    Pipe *p = ctx;
    comm_progress();
    if (p->pend.phase && !p->pend.running) pend_advance(p, 0);
}

// While the training thread waits (for an activation, a gradient, a send), the background
// chain keeps moving: its next chunks start as soon as the previous ones land.
static void wait_hook(void *ctx) {
    Pipe *p = ctx;
    if (p->pend.phase && !p->pend.running) pend_advance(p, 0);
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

static void timed_wait(Pipe *p, CommReq *r) {
    if (!r->handle) return;
    double t0 = now_sec();
    comm_wait(r);
    p->exposed += now_sec() - t0;
}

// What the watchdog prints if this stage waits too long: stage, direction and micro-batch.
static char context[128];
static void set_context(const Pipe *p, int step, const char *what, int g) {
    snprintf(context, sizeof context, "pipeline stage %d of %d, %s of micro-batch %d (step %d)",
             p->s, p->D, what, g % p->pc->K, step + 1);
    comm_set_context(step + 1, context);
}

// Runs this stage's blocks forward on the micro-batch in ws; returns the head's loss sum.
static double stage_forward(Pipe *p, Workspace *ws) {
    GPT *m = p->m;
    double loss = 0;
    for (int b = p->b0; b < p->b1; b++) {
        const Block *blk = &m->blocks[b];
        BlockIO bio = {.tokens = ws->tokens, .targets = ws->targets};
        if (blk->kind != BLOCK_EMBED) bio.x_in = workspace_stream(ws, m, b - 1);
        if (blk->kind != BLOCK_HEAD) bio.x_out = workspace_stream(ws, m, b);
        if (blk->kind == BLOCK_HEAD) bio.wte = gpt_embed(m)->params;
        block_forward(m, blk, ws, &bio);
        if (blk->kind == BLOCK_HEAD) loss = bio.loss_sum;
    }
    return loss;
}

static void forward_micro(Pipe *p, int g, const PipelineIO *io, int step, int j) {
    GPT *m = p->m;
    Workspace *ws = &p->ws[slot_of(p, g)];
    comm_wait(&p->send_x[slot_of(p, g)]);
    set_context(p, step, "forward", g);
    io->batch(io->ctx, step, j, ws->tokens, ws->targets);
    size_t n = (size_t)ws->B * ws->T * m->cfg.C;
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
static void backward_micro(Pipe *p, int g, int step, float grad_scale, int reduce) {
    GPT *m = p->m;
    Workspace *ws = &p->ws[slot_of(p, g)];
    comm_wait(&p->send_dx[slot_of(p, g)]);
    set_context(p, step, "backward", g);
    size_t n = (size_t)ws->B * ws->T * m->cfg.C;
    if (!p->last) {
        CommReq r = comm_irecv(p->g->pp_comm, ws->dstream, n, p->s + 1, tag_of(g, 1));
        comm_wait(&r);
    }
    for (int b = p->b1 - 1; b >= p->b0; b--) {
        Block *blk = &m->blocks[b];
        BlockIO bio = {.tokens = ws->tokens, .targets = ws->targets, .dx = ws->dstream};
        if (blk->kind != BLOCK_EMBED) bio.x_in = workspace_stream(ws, m, b - 1);
        if (blk->kind != BLOCK_HEAD) bio.x_out = workspace_stream(ws, m, b);
        if (blk->kind == BLOCK_HEAD) {
            bio.wte = gpt_embed(m)->params;
            bio.dwte = gpt_embed(m)->grads;
            bio.grad_scale = grad_scale;
        }
        block_backward(m, blk, ws, &bio);
        if (reduce) {
            p->breq[p->nbreq++] = comm_iallreduce(p->g->dp_comm, blk->grads, blk->n);
            if (blk->kind == BLOCK_HEAD && p->replica)
                p->breq[p->nbreq++] = comm_iallreduce(p->g->dp_comm, p->wgrad, p->tie_n);
        }
    }
    if (!p->first)
        p->send_dx[slot_of(p, g)] =
            comm_isend(p->g->pp_comm, ws->dstream, n, p->s - 1, tag_of(g, 1));
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

// AdamW on this replica's part of the stage (and of the wte replica) in weight version v, from
// gradients g / wg. Under ZeRO-1 that is its 1/W slice; the rest arrives by all-gather.
static void apply_update(Pipe *p, const OptConfig *c, int v, const float *g, const float *wg,
                         float lr, float scale) {
    p->t++;
    size_t a = p->own_lo, e = p->own_hi;
    adamw_range(p->m, c, p->t, p->lo + a, p->lo + e, p->pbuf[v] + a, g + a, p->om, p->ov, lr,
                scale);
    if (p->replica)
        adamw_range(p->m, c, p->t, p->wown_lo, p->wown_hi, p->wbuf[v] + p->wown_lo, wg + p->wown_lo,
                    p->wm, p->wv, lr, scale);
}

// ZeRO-1: every replica contributes its updated slice of version v.
static void start_gather(Pipe *p, int v, CommReq req[2]) {
    req[0] = comm_iallgatherv(p->g->dp_comm, p->pbuf[v], p->cnt, p->dsp);
    req[1] =
        p->replica ? comm_iallgatherv(p->g->dp_comm, p->wbuf[v], p->wcnt, p->wdsp) : (CommReq){0};
}

// 2bw: the buffer holding W(k), the weights after k updates (W(0) is the initial model).
static int buffer_of(int k) { return k & 1; }

// End of batch `step` under gpipe/1f1b: reduce gradients (dp replicas, tied embedding), global
// loss and norm, clip, update. Returns the report callback's value.
static int finish_batch(Pipe *p, AdamW *opt, int step, const PipelineIO *io, double t0) {
    GPT *m = p->m;
    const Backend *be = m->be;
    const Grid *g = p->g;
    comm_set_context(step + 1, "pipeline optimizer step");
    size_t n = p->hi - p->lo;
    for (int i = 0; i < p->nbreq; i++) // the replicas' per-block all-reduces
        timed_wait(p, &p->breq[i]);
    p->nbreq = 0;
    // wte: the head's part (last stage) + the embedding's part (first stage), on both
    if (p->tie) {
        CommReq r = comm_iallreduce(p->tie, p->replica ? p->wgrad : p->gbuf, p->tie_n);
        timed_wait(p, &r);
    }
    double v[2] = {be->sumsq(p->gbuf, n), p->last ? p->loss_sum / p->pc->K : 0};
    comm_allreduce_f64(g->pp_comm, v, 2);
    if (g->dp > 1) {
        comm_allreduce_f64(g->dp_comm, &v[1], 1);
        v[1] /= g->dp;
    }
    double norm = sqrt(v[0]), loss = v[1];
    float lr = lr_at(&opt->cfg, step);
    if (isfinite(loss) && isfinite(norm)) {
        apply_update(p, &opt->cfg, 0, p->gbuf, p->wgrad, lr,
                     clip_scale((float)norm, p->pc->grad_clip));
        if (p->zero1) {
            CommReq r[2];
            start_gather(p, 0, r);
            timed_wait(p, &r[0]), timed_wait(p, &r[1]);
        }
    }
    int stop = io->report(io->ctx, step + 1, loss, norm, lr, now_sec() - t0, p->exposed);
    p->exposed = 0;
    be->fill(p->gbuf, 0.f, n);
    if (p->replica) be->fill(p->wgrad, 0.f, p->tie_n);
    p->loss_sum = 0;
    return stop;
}

// ---------------------------------------------------------------- 2bw: background updates

static int req_done(Pipe *p, CommReq *r, int block) {
    if (block) {
        timed_wait(p, r);
        return 1;
    }
    return comm_test(r);
}

static void pend_advance_chain(Pipe *p, int block);

// Moves the pending update through its chain as far as it can go (or, with block, to the end).
static void pend_advance(Pipe *p, int block) {
    p->pend.running = 1;
    pend_advance_chain(p, block);
    p->pend.running = 0;
}

static void pend_advance_chain(Pipe *p, int block) {
    const Grid *g = p->g;
    size_t n = p->hi - p->lo;
    for (;;) {
        switch (p->pend.phase) {
        case 1: // replicas' gradients
            if (!req_done(p, &p->pend.req[0], block)) return;
            p->pend.phase = 2;
            p->pend.req[0] = comm_iallreduce_chunked(p->tie, p->replica ? p->pend.wg : p->pend.g,
                                                     p->tie_n, NULL, 0, chunk_floats());
            break;
        case 2: // tied embedding
            if (!req_done(p, &p->pend.req[0], block)) return;
            p->pend.phase = 3;
            p->pend.v[0] = p->m->be->sumsq(p->pend.g, n);
            p->pend.req[0] = comm_iallreduce_f64(g->pp_comm, p->pend.v, 2);
            break;
        case 3: // global norm and the last stage's loss
            if (!req_done(p, &p->pend.req[0], block)) return;
            p->pend.phase = 4;
            p->pend.req[0] = comm_iallreduce_f64(g->dp_comm, &p->pend.v[1], 1);
            break;
        case 4: // mean loss over replicas
            if (!req_done(p, &p->pend.req[0], block)) return;
            p->pend.v[1] /= g->dp;
            p->pend.phase = 5;
            break;
        case 5: { // W(t+1) = W(t) - opt(g_t), written over W(t-1)'s buffer (free since batch t)
            int step = p->pend.step, next = buffer_of(step + 1);
            double norm = sqrt(p->pend.v[0]), loss = p->pend.v[1];
            p->pend.phase = 7;
            if (!isfinite(loss) || !isfinite(norm)) break; // reported, never applied
            p->m->be->copy(p->pbuf[next], p->pbuf[buffer_of(step)], n);
            if (p->replica) p->m->be->copy(p->wbuf[next], p->wbuf[buffer_of(step)], p->tie_n);
            apply_update(p, &p->opt->cfg, next, p->pend.g, p->pend.wg, lr_at(&p->opt->cfg, step),
                         clip_scale((float)norm, p->pc->grad_clip));
            if (p->zero1) {
                start_gather(p, next, p->pend.req);
                p->pend.phase = 6;
            }
            break;
        }
        case 6: // ZeRO-1: the other replicas' slices of the new version
            if (!req_done(p, &p->pend.req[0], block) || !req_done(p, &p->pend.req[1], block))
                return;
            p->pend.phase = 7;
            break;
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
    p->pend.req[0] = comm_iallreduce_chunked(
        p->g->dp_comm, p->pend.g, n, p->replica ? p->pend.wg : NULL, p->tie_n, chunk_floats());
    p->pend.phase = 1;
    pend_advance(p, 0);
}

// Finishes the pending update (blocking for what is left of its chain) and reports it.
static void pend_complete(Pipe *p) {
    if (!p->pend.phase) return;
    comm_set_context(p->pend.step + 1, "pipeline 2bw update");
    pend_advance(p, 1);
    int step = p->pend.step;
    p->pend.phase = 0;
    if (!p->stop)
        p->stop = p->io->report(p->io->ctx, step + 1, p->pend.v[1], sqrt(p->pend.v[0]),
                                lr_at(&p->opt->cfg, step), p->pend.dt, p->exposed);
    p->exposed = 0;
}

// ---------------------------------------------------------------- validation

// A forward-only pass of the validation windows through the stages with weight version v
// (nothing else may be in flight). Replica q evaluates windows q, q+W, …; every rank gets the
// mean loss over the windows.
static double pipe_evaluate(Pipe *p, int v) {
    GPT *m = p->m;
    const PipelineIO *io = p->io;
    Workspace *ws = &p->ws[0];
    size_t n = (size_t)ws->B * ws->T * m->cfg.C;
    int nw = p->pc->val_windows, W = p->g->dp, saved = p->cur_ver;
    use_version(p, v);
    comm_set_context(-1, "pipeline validation");
    double v2[1] = {0};
    for (int w = p->g->dp_i; w < nw; w += W) {
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
    comm_allreduce_f64(p->g->dp_comm, v2, 1);
    use_version(p, saved);
    return nw > 0 ? v2[0] / nw : NAN;
}

static int want_val(const Pipe *p, int done, int steps) {
    const PipelineConfig *pc = p->pc;
    if (!p->io->val_batch || pc->val_windows <= 0) return 0;
    if (done == steps) return 1; // always at the end
    return pc->val_every > 0 && done % pc->val_every == 0;
}

static int want_save(const Pipe *p, int done, int steps) {
    if (!p->io->save) return 0;
    return done == steps || (p->pc->save_every > 0 && done % p->pc->save_every == 0);
}

// Checkpoint after `done` steps (nothing in flight). With ZeRO-1 every replica writes its
// slice of the stage; otherwise replica 0 writes the whole stage. The last stage's wte replica
// equals stage 0's (same updates), so only stage 0 writes it.
static void pipe_save(Pipe *p, int done) {
    int writes = p->zero1 || p->g->dp_i == 0, newest = p->nver == 2 ? buffer_of(done) : 0;
    PipeShard sh = {.lo = p->lo + p->own_lo,
                    .hi = p->lo + p->own_hi,
                    .params = p->pbuf[newest] + p->own_lo,
                    .m = p->om,
                    .v = p->ov,
                    .prev = p->nver == 2 ? p->pbuf[buffer_of(done - 1)] + p->own_lo : NULL};
    comm_set_context(done, "pipeline checkpoint");
    int rc = p->io->save(p->io->ctx, done, p->t, writes ? &sh : NULL);
    if (rc && !p->stop) p->stop = rc;
}

// ---------------------------------------------------------------- the training loop

// Allocates the stage's buffers (and drops the whole-model ones); sets the ZeRO-1 slices.
static int pipe_setup(Pipe *p, GPT *m, const Grid *g, const PipelineConfig *pc, AdamW *opt,
                      int start) {
    const Backend *be = m->be;
    p->first = p->s == 0;
    p->last = p->s == p->D - 1;
    if (pipeline_partition(m, p->D, p->s, pc->stage_layers, &p->b0, &p->b1)) return -1;
    if (pc->schedule != SCHED_GPIPE && pc->K < p->D)
        return loom_fail("--schedule 1f1b/2bw needs --grad-accum >= --pp (%d < %d)", pc->K, p->D);
    p->lo = m->blocks[p->b0].off;
    p->hi = m->blocks[p->b1 - 1].off + m->blocks[p->b1 - 1].n;
    p->tie_n = (size_t)m->cfg.V * m->cfg.C;
    // the tied embedding's two holders: stage 0 and the last stage (of each dp replica)
    int in_tie = p->first || p->last;
    Comm *tie = comm_split(g->world, in_tie ? g->dp_i : -1, g->pp_i, "tie");
    p->tie = in_tie && p->D > 1 ? tie : NULL;
    p->nslots = pc->schedule == SCHED_GPIPE ? pc->K : p->D - p->s;
    p->ws = xcalloc((size_t)p->nslots, sizeof(Workspace));
    p->send_x = xcalloc((size_t)p->nslots, sizeof(CommReq));
    p->send_dx = xcalloc((size_t)p->nslots, sizeof(CommReq));
    for (int k = 0; k < p->nslots; k++) {
        if (workspace_create_range(&p->ws[k], m, pc->B, pc->T, pc->recompute, p->b0, p->b1))
            return -1;
        memory_report[3] += 4.0 * p->ws[k].floats;
    }
    size_t n = p->hi - p->lo;
    p->replica = p->last && !p->first;
    p->nver = pc->schedule == SCHED_2BW ? 2 : 1;
    int W = g->dp, q = g->dp_i;
    p->zero1 = pc->zero >= 1 && W > 1;
    p->own_lo = 0, p->own_hi = n, p->wown_lo = 0, p->wown_hi = p->replica ? p->tie_n : 0;
    if (p->zero1) {
        p->cnt = xcalloc((size_t)W, sizeof(int)), p->dsp = xcalloc((size_t)W, sizeof(int));
        p->wcnt = xcalloc((size_t)W, sizeof(int)), p->wdsp = xcalloc((size_t)W, sizeof(int));
        for (int r = 0; r < W; r++) {
            p->dsp[r] = (int)(n * r / W), p->cnt[r] = (int)(n * (r + 1) / W) - p->dsp[r];
            p->wdsp[r] = (int)(p->tie_n * r / W);
            p->wcnt[r] = (int)(p->tie_n * (r + 1) / W) - p->wdsp[r];
        }
        p->own_lo = (size_t)p->dsp[q], p->own_hi = p->own_lo + (size_t)p->cnt[q];
        if (p->replica) p->wown_lo = (size_t)p->wdsp[q], p->wown_hi = p->wown_lo + p->wcnt[q];
    }
    for (int v = 0; v < p->nver; v++) {
        p->pbuf[v] = be->alloc(n);
        be->copy(p->pbuf[v], m->params + p->lo, n);
        if (p->replica) {
            p->wbuf[v] = be->alloc(p->tie_n);
            be->copy(p->wbuf[v], m->params, p->tie_n);
        }
    }
    size_t own = p->own_hi - p->own_lo, wown = p->wown_hi - p->wown_lo;
    p->gbuf = be->alloc(n), p->om = be->alloc(own), p->ov = be->alloc(own);
    if (p->replica)
        p->wgrad = be->alloc(p->tie_n), p->wm = be->alloc(wown), p->wv = be->alloc(wown);
    p->t = opt->t;
    if (start > 0 && p->io->load) { // resume: moments, and under 2bw W(start-1) (W(start) is m)
        int prev = buffer_of(start - 1);
        if (p->io->load(p->io->ctx, p->lo, p->hi, p->nver == 2 ? p->pbuf[prev] : NULL,
                        p->lo + p->own_lo, p->lo + p->own_hi, p->om, p->ov))
            return -1;
        if (p->replica && p->io->load(p->io->ctx, 0, p->tie_n, p->nver == 2 ? p->wbuf[prev] : NULL,
                                      p->wown_lo, p->wown_hi, p->wm, p->wv))
            return -1;
    }
    size_t held = n + (p->replica ? p->tie_n : 0);
    memory_report[0] = 4.0 * held * p->nver;
    memory_report[1] = 4.0 * held;
    memory_report[2] = 8.0 * (own + wown);
    be->release(m->params), be->release(m->grads);
    m->params = m->grads = NULL;
    use_version(p, 0);
    p->hooks = (BlockHooks){.poll = poll_hook, .ctx = p};
    p->opt = opt;
    if (p->nver == 2) {
        p->gspare = be->alloc(n);
        if (p->replica) p->wspare = be->alloc(p->tie_n);
        memory_report[1] *= 2;
    }
    p->breq = xcalloc((size_t)(p->b1 - p->b0) + 1, sizeof(CommReq));
    return 0;
}

// gpipe / 1f1b: one flushed step at a time.
static int run_flushed(Pipe *p, int start, int steps, float grad_scale) {
    const PipelineConfig *pc = p->pc;
    const PipelineIO *io = p->io;
    int K = pc->K, D = p->D, s = p->s, rc = 0;
    int overlap = p->g->dp > 1; // replicas' all-reduces during the last micro-batch's backward
    for (int step = start; step < steps && !rc; step++) {
        double t0 = now_sec();
        int base = step * K,
            warm = pc->schedule == SCHED_GPIPE ? K : (D - s - 1 < K ? D - s - 1 : K);
        int inflight = 0;
        for (int j = 0; j < warm; j++)
            forward_micro(p, base + j, io, step, j), inflight++;
        if (inflight > peak_inflight) peak_inflight = inflight;
        for (int j = 0; j < K - warm; j++) {
            forward_micro(p, base + warm + j, io, step, warm + j);
            if (++inflight > peak_inflight) peak_inflight = inflight;
            backward_micro(p, base + j, step, grad_scale, overlap && j == K - 1), inflight--;
        }
        for (int j = K - warm; j < K; j++)
            backward_micro(p, base + j, step, grad_scale, overlap && j == K - 1);
        for (int k = 0; k < p->nslots; k++)
            comm_wait(&p->send_x[k]), comm_wait(&p->send_dx[k]);
        rc = finish_batch(p, p->opt, step, io, t0);
        if (!rc && want_val(p, step + 1, steps))
            io->val_report(io->ctx, step + 1, pipe_evaluate(p, 0));
        if (!rc && want_save(p, step + 1, steps)) {
            pipe_save(p, step + 1);
            rc = p->stop;
        }
    }
    return rc;
}

// 2bw: one 1F1B stream over all micro-batches of the steps [from, to), no flush; batch t
// uses version max(t-1, 0). The stream drains at `to` (the end, or a validation point).
static void run_2bw_segment(Pipe *p, int from, int to, float grad_scale) {
    const PipelineIO *io = p->io;
    int K = p->pc->K, warm = p->D - p->s - 1;
    int total = (to - from) * K, g0 = from * K, nf = 0, nb = 0, inflight = 0;
    double t0 = now_sec();
#define VERSION_OF(gi) ((gi) / K == 0 ? 0 : buffer_of((gi) / K - 1))
    while (nb < total && !p->stop) {
        int do_forward = nf < total && (nf < warm || nf - nb <= warm);
        if (do_forward && nf - nb < p->nslots) {
            int gi = g0 + nf;
            // batch t+2 needs W(t+1): the pending update of batch t must be complete
            if (p->pend.phase && gi / K >= p->pend.step + 2) pend_complete(p);
            use_version(p, VERSION_OF(gi));
            forward_micro(p, gi, io, gi / K, gi % K);
            nf++;
            if (++inflight > peak_inflight) peak_inflight = inflight;
            if (nf <= warm) continue;
        }
        int gi = g0 + nb;
        use_version(p, VERSION_OF(gi));
        backward_micro(p, gi, gi / K, grad_scale, 0);
        nb++, inflight--;
        if (gi % K == K - 1) {
            pend_complete(p); // (normally already applied) keeps one update in flight
            pend_start(p, gi / K, t0);
            t0 = now_sec();
        }
    }
#undef VERSION_OF
    for (int k = 0; k < p->nslots; k++)
        comm_wait(&p->send_x[k]), comm_wait(&p->send_dx[k]);
}

static int run_2bw(Pipe *p, int start, int steps, float grad_scale) {
    const PipelineIO *io = p->io;
    for (int from = start; from < steps && !p->stop;) {
        int to = from + 1;
        while (to < steps && !want_val(p, to, steps) && !want_save(p, to, steps))
            to++;
        run_2bw_segment(p, from, to, grad_scale);
        if (p->stop) break;
        if (want_val(p, to, steps) || want_save(p, to, steps)) { // W(to): the model after `to`
            pend_complete(p);
            if (!p->stop && want_val(p, to, steps))
                io->val_report(io->ctx, to, pipe_evaluate(p, buffer_of(to)));
            if (!p->stop && want_save(p, to, steps)) pipe_save(p, to);
            if (p->stop) break;
        }
        from = to;
    }
    pend_complete(p);
    return p->stop;
}

int pipeline_train(GPT *m, const Grid *g, const PipelineConfig *pc, AdamW *opt, int start,
                   int steps, const PipelineIO *io) {
    memory_report[0] = memory_report[1] = memory_report[2] = memory_report[3] = 0;
    Pipe p = {.m = m, .g = g, .pc = pc, .D = g->pp, .s = g->pp_i, .io = io};
    if (pipe_setup(&p, m, g, pc, opt, start)) return -1;
    const Backend *be = m->be;
    size_t n = p.hi - p.lo;
    const BlockHooks *saved = m->hooks;
    m->hooks = &p.hooks;
    comm_set_wait_hook(wait_hook, &p);
    float grad_scale = 1.0f / ((float)pc->B * pc->T * pc->K * g->dp);
    peak_inflight = 0;
    int rc = pc->schedule == SCHED_2BW ? run_2bw(&p, start, steps, grad_scale)
                                       : run_flushed(&p, start, steps, grad_scale);
    // Hand back a whole-model buffer holding this stage's trained weights (the newest version:
    // W(steps) under 2bw) — pipeline_gather_params fills in the other stages' blocks.
    int newest = p.nver == 2 ? buffer_of(steps) : 0;
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
    comm_set_wait_hook(NULL, NULL);
    for (int k = 0; k < p.nslots; k++)
        workspace_free(&p.ws[k], m);
    free(p.ws), free(p.send_x), free(p.send_dx), free(p.breq);
    free(p.cnt), free(p.dsp), free(p.wcnt), free(p.wdsp);
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
