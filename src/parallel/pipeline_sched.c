// pipeline_sched.c — the pipeline schedules (see pipeline.h): a flushed gpipe/1f1b step
// (reduce, clip, update at the end of every batch) and 2bw's stream, whose updates run in the
// background as a chain of non-blocking collectives and land before the batch that needs them.
#include <math.h>
#include <stdlib.h>

#include "../testhooks.h"
#include "pipeline_impl.h"

// 2bw's background gradient reductions go out as a chain of 1 MiB all-reduces driven by the
// progress thread (comm_iallreduce_chunked; the replicas' one cut at the blocks' ends), so the
// activations the pipeline waits for, which share each rank's link, queue behind a chunk rather
// than the whole reduction. (Test hook: LOOM_PIPE_CHUNK sets the chunk size: testhooks.h.)
static size_t chunk_floats(void) {
    static size_t n;
    if (!n) n = testhook_pipe_chunk();
    return n;
}

// The chain's replica reduction cuts the stage's gradient at its blocks' ends, so its MPI calls
// are those of one chained all-reduce per block: the calls a swapped stage makes
// (pipe_grad_allreduce, block by block from the tier). The two then agree bit for bit whatever
// order the MPI library's algorithm adds each element's terms in (one set by the element's offset
// in the message, e.g. a ring, included).
static CommReq reduce_stage(Pipe *p, float *g, float *wg) {
    int nb = p->b1 - p->b0;
    size_t *cut = xmalloc((size_t)nb * sizeof *cut);
    for (int b = p->b0; b < p->b1; b++)
        cut[b - p->b0] = p->m->blocks[b].off + p->m->blocks[b].n - p->lo;
    CommReq r =
        comm_iallreduce_cut(p->gc, g, p->hi - p->lo, cut, nb - 1, wg, p->tie_n, chunk_floats());
    free(cut);
    return r;
}

int pipe_grad_allreduce(const Comm *c, float *g, size_t n) {
    CommReq r = comm_iallreduce_chunked(c, g, n, NULL, 0, chunk_floats());
    return comm_wait(&r);
}

// A tensor-parallel part's Σ g² per tensor of the stage, each added at the chunk its tensor
// starts in; replicated tensors (the same on every tp rank) only on tp rank 0 (LLaMA's shared kv
// heads on the first of their ranks: gpt_tp_counts), so the sum over the stages and tp ranks
// counts every whole-model gradient once.
// g holds the flat range [glo, ghi) (the stage, or its ZeRO-2 shard).
static void tp_sumsq(const Pipe *p, const float *g, size_t glo, size_t ghi, double *v) {
    const GPT *m = p->m;
    for (int b = p->b0; b < p->b1; b++) {
        const Block *blk = &m->blocks[b];
        for (int i = blk->t0; i < blk->t0 + blk->nt; i++) {
            const TensorSpec *t = &m->tensors[i];
            size_t a, n = range_isect(t->off, t->off + t->n, glo, ghi, &a);
            if (!n || !gpt_tp_counts(m, i, m->tp.i)) continue;
            v[blk->chunk0 + (t->off - blk->off) / GPT_CHUNK] += m->be->sumsq(g + (a - glo), n);
        }
    }
}

// Per-chunk Σ g² of this stage's gradients g (its flat range; the wte replica is not counted:
// stage 0 holds the same values), followed by the loss and this rank's stop vote (p->vote):
// m->nchunks + 2 doubles (caller frees), zeros outside the stage, so their sum over the stages
// is the whole model's, bit for bit. A tensor-parallel part (summed over p->norm, the stages and
// tp ranks) gives its tensors' sums (tp_sumsq) and, on tp rank 0 only, the loss every tp rank
// computed.
// ZeRO-2: g is the replica's shard, and the partials are summed over gc too.
static double *norm_loss_partials(Pipe *p, const float *g, double loss) {
    double *v = xcalloc((size_t)p->m->nchunks + 2, sizeof(double));
    if (p->sw) g = NULL; // --offload: pipe_swap_sumsq takes the partials
    size_t glo = p->zero2 ? p->lo + p->own_lo : p->lo, ghi = p->zero2 ? p->lo + p->own_hi : p->hi;
    if (!g)
        ;
    else if (p->m->tp.n > 1)
        tp_sumsq(p, g, glo, ghi, v);
    else
        gpt_chunk_sumsq(p->m, g, glo, ghi, v);
    v[p->m->nchunks] = p->m->tp.n > 1 && p->m->tp.i != 0 ? 0 : loss;
    v[p->m->nchunks + 1] = p->vote;
    return v;
}

// Points the blocks' update state at what this replica updates: its part of the stage in
// weight version v with gradients g, and on the last stage the wte replica's part (block 0)
// with gradients wg; the moments follow.
static void point_state(Pipe *p, int v, const float *g, const float *wg) {
    GPT *m = p->m;
    size_t a = p->lo + p->own_lo, e = p->lo + p->own_hi;
    float *w = p->zero3 ? p->pshard[v] : p->pbuf[v] + p->own_lo;
    gpt_own_range(m, a, e, a, w, pipe_own_grads(p, g));
    gpt_own_moments(m, p->om, p->ov, a);
    if (!p->replica) return;
    BlockState *st = &m->blocks[0].state; // the tied embedding's copy: wte = [0, tie_n)
    *st = (BlockState){.own_lo = p->wown_lo,
                       .own_hi = p->wown_hi,
                       .own_params = p->wbuf[v] + p->wown_lo,
                       .own_grads = wg + p->wown_lo,
                       .m = p->wm,
                       .v = p->wv};
}

// AdamW on this replica's part of the stage (and of the wte replica) in weight version v, from
// gradients g / wg (ZeRO-2/3: g is the replica's shard). Under ZeRO 1-3 that is its 1/W slice;
// the rest arrives by all-gather (ZeRO-3: only the wte replica's).
static void apply_update(Pipe *p, int v, const float *g, const float *wg, float lr, float scale) {
    point_state(p, v, g, wg);
    adamw_step_blocks(&p->opt, ++p->t, p->m, lr, scale);
}

// ZeRO-1: every replica contributes its updated slice of version v.
static void start_gather(Pipe *p, int v, CommReq req[2]) {
    req[0] = p->zero3 ? (CommReq){0} : comm_iallgatherv(p->gc, p->pbuf[v], p->cnt, p->dsp);
    req[1] = p->replica ? comm_iallgatherv(p->gc, p->wbuf[v], p->wcnt, p->wdsp) : (CommReq){0};
}

// End of batch `step` under gpipe/1f1b: reduce gradients (dp replicas, tied embedding), global
// loss and norm, clip, update. Returns the report callback's value.
static int finish_batch(Pipe *p, int step, double t0) {
    const PipelineIO *io = p->io;
    GPT *m = p->m;
    const Backend *be = m->be;
    comm_set_context(step + 1, "pipeline optimizer step");
    size_t n = p->hi - p->lo;
    for (int i = 0; i < p->nbreq; i++) // the replicas' per-block all-reduces
        timed_wait(p, &p->breq[i]);
    p->nbreq = 0;
    // wte: the head's part (last stage) + the embedding's part (first stage), on both
    if (p->tie) {
        if (p->first) pipe_swap_must(p, 0, 1); // --offload: the embedding's slot
        float *e = p->replica ? p->wgrad
                   : p->sw    ? p->m->blocks[0].grads
                   : p->zero2 ? p->egrad
                              : p->gbuf;
        CommReq r = comm_iallreduce(p->tie, e, p->tie_n);
        timed_wait(p, &r);
    }
    pipe_zero_embed_done(p, p->gshard, p->egrad);
    float *g = p->zero2 ? p->gshard : p->gbuf;
    double *v = norm_loss_partials(p, g, p->last ? p->loss_sum / p->pc->K : 0);
    if (p->sw && pipe_swap_sumsq(p, v)) die_last(1);
    int nc = m->nchunks;
    comm_allreduce_f64(p->norm, v, nc + 2);
    if (p->gc->size > 1) { // every rank's mean over its tokens (equal counts); the votes' sum
        comm_allreduce_f64(p->gc, p->zero2 ? v : &v[nc], p->zero2 ? nc + 2 : 2);
        v[nc] /= p->gc->size;
    }
    p->votes = v[nc + 1], p->votes_step = step; // (p->norm x gc is every rank)
    double norm = sqrt(gpt_chunk_total(m, v)), loss = v[nc];
    free(v);
    float lr = lr_at(&p->opt, step);
    int ok = isfinite(loss) && isfinite(norm);
    if (ok && p->sw) {
        if (pipe_swap_update(p, lr, clip_scale((float)norm, p->pc->grad_clip))) die_last(1);
    } else if (ok) {
        apply_update(p, 0, g, p->wgrad, lr, clip_scale((float)norm, p->pc->grad_clip));
        if (p->zero1) {
            CommReq r[2];
            start_gather(p, 0, r);
            timed_wait(p, &r[0]), timed_wait(p, &r[1]);
        }
    }
    io->report(io->ctx, step + 1, loss, norm, lr, now_sec() - t0, p->exposed, ok);
    if (!ok) p->stop = 1;
    p->exposed = 0;
    if (p->gbuf) be->fill(p->gbuf, 0.f, n);
    pipe_zero_clear(p);
    if (p->replica) be->fill(p->wgrad, 0.f, p->tie_n);
    p->loss_sum = 0;
    return p->stop;
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

// The tied embedding's gradient the chain sums over the tie: the last stage's wte replica, or
// stage 0's embedding (its whole stage buffer, or ZeRO-2's egrad).
static float *tie_grads(const Pipe *p) {
    return p->replica ? p->pend.wg : p->zero2 ? p->pend.eg : p->pend.g;
}

// The summed norm partials: norm², loss and stop votes.
static void take_partials(Pipe *p) {
    p->pend.v[0] = gpt_chunk_total(p->m, p->pend.part);
    p->pend.v[1] = p->pend.part[p->m->nchunks];
    p->pend.v[2] = p->pend.part[p->m->nchunks + 1];
}

// Moves the pending update through its chain as far as it can go (or, with block, to the end).
void pipe_pend_advance(Pipe *p, int block) {
    p->pend.running = 1;
    pend_advance_chain(p, block);
    p->pend.running = 0;
}

// --offload under 2bw: the pending batch's gradients are in the stage's tier, not in buffers a
// background chain could reduce, so its update is made when it is due (pipe_pend_complete),
// with blocking collectives in the chain's order: the replicas' and the tie's reductions and
// the norm partials (pipe_swap_sumsq), the loss and votes over gc, then the update. Every stage
// reaches that point of the stream (the first forward of batch step+2, or the end of batch
// step+1) without waiting on a stage that has passed it, so the collectives meet.
static void pend_swapped(Pipe *p) {
    int nc = p->m->nchunks;
    double *v = norm_loss_partials(p, NULL, p->pend.loss);
    if (pipe_swap_sumsq(p, v)) die_last(1);
    comm_allreduce_f64(p->norm, v, nc + 2);
    free(p->pend.part);
    p->pend.part = v;
    take_partials(p);
    comm_allreduce_f64(p->gc, &p->pend.v[1], 2);
    p->pend.v[1] /= p->gc->size;
    p->pend.phase = 7;
    double norm = sqrt(p->pend.v[0]), loss = p->pend.v[1];
    if (!isfinite(loss) || !isfinite(norm)) return; // reported, never applied
    float lr = lr_at(&p->opt, p->pend.step);
    if (pipe_swap_update(p, lr, clip_scale((float)norm, p->pc->grad_clip))) die_last(1);
}

static void pend_advance_chain(Pipe *p, int block) {
    size_t n = p->hi - p->lo;
    if (p->sw) {
        if (block && p->pend.phase < 7) pend_swapped(p);
        return;
    }
    for (;;) {
        switch (p->pend.phase) {
        case 1: // replicas' gradients
            if (!req_done(p, &p->pend.req[0], block)) return;
            p->pend.phase = 2;
            p->pend.req[0] =
                comm_iallreduce_chunked(p->tie, tie_grads(p), p->tie_n, NULL, 0, chunk_floats());
            break;
        case 2: // tied embedding
            if (!req_done(p, &p->pend.req[0], block)) return;
            p->pend.phase = 3;
            pipe_zero_embed_done(p, p->pend.g, p->pend.eg);
            free(p->pend.part);
            p->pend.part = norm_loss_partials(p, p->pend.g, p->pend.loss);
            p->pend.req[0] = comm_iallreduce_f64(p->norm, p->pend.part, p->m->nchunks + 2);
            break;
        case 3: // global norm partials and the last stage's loss
            if (!req_done(p, &p->pend.req[0], block)) return;
            p->pend.phase = 4;
            if (p->zero2) { // the norm partials of the other replicas' shards too
                p->pend.req[0] = comm_iallreduce_f64(p->gc, p->pend.part, p->m->nchunks + 2);
                break;
            }
            take_partials(p);
            p->pend.req[0] = comm_iallreduce_f64(p->gc, &p->pend.v[1], 2);
            break;
        case 4: // mean loss over replicas (ZeRO-2/3: with the norm partials)
            if (!req_done(p, &p->pend.req[0], block)) return;
            if (p->zero2) take_partials(p);
            p->pend.v[1] /= p->gc->size;
            p->pend.phase = 5;
            break;
        case 5: { // W(t+1) = W(t) - opt(g_t), written over W(t-1)'s buffer (free since batch t)
            int step = p->pend.step, next = buffer_of(step + 1);
            double norm = sqrt(p->pend.v[0]), loss = p->pend.v[1];
            p->pend.phase = 7;
            if (!isfinite(loss) || !isfinite(norm)) break; // reported, never applied
            if (p->zero3) // this replica's shard of the new version only
                p->m->be->copy(p->pshard[next], p->pshard[buffer_of(step)], p->own_hi - p->own_lo);
            else
                p->m->be->copy(p->pbuf[next], p->pbuf[buffer_of(step)], n);
            if (p->replica) p->m->be->copy(p->wbuf[next], p->wbuf[buffer_of(step)], p->tie_n);
            apply_update(p, next, p->pend.g, p->pend.wg, lr_at(&p->opt, step),
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
    float *t;
    if (p->replica) {
        t = p->wgrad;
        p->wgrad = p->wspare, p->wspare = t;
        be->fill(p->wgrad, 0.f, p->tie_n);
    }
    p->pend.wg = p->wspare;
    if (p->sw) { // --offload: the gradients stay in the tier until the update is due
        if (pipe_swap_batch_end(p, step)) die_last(1);
        p->pend.g = NULL;
    } else if (p->zero2) { // the shard (already reduce-scattered) and stage 0's embedding gradient
        pipe_zero_pend_start(p, chunk_floats());
    } else {
        t = p->gbuf;
        p->gbuf = p->gspare, p->gspare = t;
        be->fill(p->gbuf, 0.f, n);
        p->pend.g = p->gspare;
        p->pend.req[0] = reduce_stage(p, p->pend.g, p->pend.wg);
    }
    pipe_use_version(p, p->cur_ver); // blocks now accumulate into the fresh buffers
    p->pend.step = step;
    p->pend.dt = now_sec() - t0;
    p->pend.v[0] = p->pend.v[1] = p->pend.v[2] = 0;
    p->pend.loss = p->last ? p->loss_sum / p->pc->K : 0;
    p->loss_sum = 0;
    p->pend.phase = 1;
    pipe_pend_advance(p, 0);
}

// Finishes the pending update (blocking for what is left of its chain) and reports it.
void pipe_pend_complete(Pipe *p) {
    if (!p->pend.phase) return;
    comm_set_context(p->pend.step + 1, "pipeline 2bw update");
    pipe_pend_advance(p, 1);
    int step = p->pend.step;
    p->pend.phase = 0;
    p->votes = p->pend.v[2], p->votes_step = step;
    double loss = p->pend.v[1], norm = sqrt(p->pend.v[0]);
    int ok = isfinite(loss) && isfinite(norm);
    if (!p->stop)
        p->io->report(p->io->ctx, step + 1, loss, norm, lr_at(&p->opt, step), p->pend.dt,
                      p->exposed, ok);
    if (!ok) p->stop = 1;
    p->exposed = 0;
}

// gpipe / 1f1b: one flushed step.
int pipe_step_flushed(Pipe *p, int step, float grad_scale) {
    const PipelineConfig *pc = p->pc;
    int K = pc->K, D = p->D, s = p->s;
    int overlap = p->gc->size > 1; // replicas' all-reduces during the last micro-batch's backward
    double t0 = now_sec();
    int base = step * K, warm = pc->schedule == SCHED_GPIPE ? K : (D - s - 1 < K ? D - s - 1 : K);
    int inflight = 0;
    for (int j = 0; j < warm; j++)
        pipe_forward_micro(p, base + j, step, j), inflight++;
    if (inflight > p->peak_inflight) p->peak_inflight = inflight;
    for (int j = 0; j < K - warm; j++) {
        pipe_forward_micro(p, base + warm + j, step, warm + j);
        if (++inflight > p->peak_inflight) p->peak_inflight = inflight;
        pipe_backward_micro(p, base + j, step, grad_scale, overlap && j == K - 1), inflight--;
    }
    for (int j = K - warm; j < K; j++)
        pipe_backward_micro(p, base + j, step, grad_scale, overlap && j == K - 1);
    pipe_wait_sends(p);
    return finish_batch(p, step, t0);
}

// 2bw: one 1F1B stream over all micro-batches of a segment of steps, no flush; batch t uses
// version max(t-1, 0). A call runs the stream until batch `step`'s last backward is done; the
// stream drains at a boundary (the end, a validation point or a checkpoint).
int pipe_step_2bw(Pipe *p, int step, int boundary, float grad_scale) {
    int K = p->pc->K, warm = p->D - p->s - 1;
    if (!p->seg_active) {
        p->seg_active = 1, p->seg_from = step;
        p->nf = p->nb = p->inflight = 0;
        p->t0 = now_sec();
    }
    // forwards run at most `warm` micro-batches ahead, so only batch step+1 can be touched
    int total = (step + (boundary ? 1 : 2) - p->seg_from) * K, g0 = p->seg_from * K;
    int until = (step + 1 - p->seg_from) * K;
#define VERSION_OF(gi) ((gi) / K == 0 ? 0 : buffer_of((gi) / K - 1))
    while (p->nb < until && !p->stop) {
        int do_forward = p->nf < total && (p->nf < warm || p->nf - p->nb <= warm);
        if (do_forward && p->nf - p->nb < p->nslots) {
            int gi = g0 + p->nf;
            // batch t+2 needs W(t+1): the pending update of batch t must be complete
            if (p->pend.phase && gi / K >= p->pend.step + 2) pipe_pend_complete(p);
            pipe_use_version(p, VERSION_OF(gi));
            pipe_forward_micro(p, gi, gi / K, gi % K);
            p->nf++;
            if (++p->inflight > p->peak_inflight) p->peak_inflight = p->inflight;
            if (p->nf <= warm) continue;
        }
        int gi = g0 + p->nb;
        pipe_use_version(p, VERSION_OF(gi));
        pipe_backward_micro(p, gi, gi / K, grad_scale, 0);
        p->nb++, p->inflight--;
        if (gi % K == K - 1) {
            pipe_pend_complete(p); // (normally already applied) keeps one update in flight
            pend_start(p, gi / K, p->t0);
            p->t0 = now_sec();
        }
    }
#undef VERSION_OF
    if (boundary || p->stop) {
        pipe_wait_sends(p);
        p->seg_active = 0;
    }
    return p->stop;
}
