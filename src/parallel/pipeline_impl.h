// pipeline_impl.h — the pipeline runtime's state, shared by its files: pipeline.c (stages,
// buffers, micro-batch forward/backward, validation, checkpoint views) and pipeline_sched.c
// (the schedules: a flushed gpipe/1f1b step, and 2bw's stream with background updates).
#pragma once
#include "../common.h"
#include "pipeline.h"

struct Pipeline {
    GPT *m;
    const Grid *g;
    // the ranks holding this stage's parameters, whose gradients are summed: the dp replicas,
    // or with context parallelism dp x cp (each ran its chunks of the same sequences)
    const Comm *gc;
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
    Comm *norm; // the stages' norm partials and loss are summed over it: pp_comm, or with tensor
                // parallelism (the model is a tp part) every stage and tp rank of this dp replica
    // ZeRO-1 over the gradient group gc: this replica updates [own_lo, own_hi) of the stage range
    // (offsets from lo) and [wown_lo, wown_hi) of the wte replica; the moments cover only those.
    int zero1;
    size_t own_lo, own_hi, wown_lo, wown_hi;
    size_t *cnt, *dsp, *wcnt, *wdsp; // all-gather layouts over the dp replicas
    // ZeRO-2 (pipeline_zero.c): the stage's gradients sharded too. Each block's gradient of a
    // micro-batch goes to tgrad and is reduce-scattered into the owners' gshard
    // (own_hi - own_lo) right after its backward; stage 0's embedding block accumulates in
    // egrad (whole: it is summed with the last stage's wte replica over the tie) and is copied
    // into gshard at the end of the batch. ZeRO-3: the weights too: the replica keeps pshard
    // (one shard per weight version), and every block is all-gathered into gparam before its
    // forward and backward.
    // Under 2bw (double-buffered weights) each replica holds: two weight shards pshard[0..1]
    // (ZeRO-3; 2 x own) or two whole stage versions pbuf[0..1] (ZeRO-2), two gradient shards
    // (gshard, and gspare while the previous batch's update is in flight), stage 0 two embedding
    // gradients (egrad, espare), the last stage two wte replicas and two wte gradients, plus
    // the transient tgrad/trecv/gparam of one block. The blocking reduce-scatters and gathers
    // of the training thread go over zc, a duplicate of gc, so that they never interleave with
    // the background chain's collectives on gc (which start at rank-dependent moments).
    int zero2, zero3;
    float *gshard, *tgrad, *trecv, *egrad, *pshard[2], *gparam, *espare;
    const Comm
        *zc; // the ZeRO-2/3 collectives of the training thread: gc, or under 2bw its duplicate
    size_t maxblk;       // the stage's largest block (the transient buffers' size)
    size_t *tcnt, *tdsp; // a block's counts and displacements over the replicas
    int gathered;        // ZeRO-3: the blocks point at a whole gathered copy (validation)
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
        double dt, v[3];    // the batch's wall time (end of batch t-1 to end of batch t); norm²,
                            // loss, stop votes
        float *g, *wg, *eg; // eg: ZeRO-2's stage 0 embedding gradient (whole)
        double loss;        // the last stage's mean loss of the batch
        double *part;       // norm partials and loss, being summed over the stages
        CommReq req[2];
        int running; // pend_advance is on the stack (the wait hook must not re-enter it)
    } pend;
    OptConfig opt;
    const PipelineIO *io;
    int stop; // a step's loss or gradient was not finite: the stream ends
    // stop votes (pipeline_step): this rank's for the batch being run, and the sum over every
    // rank of those of batch votes_step (carried on its norm and loss reductions)
    double vote, votes;
    int votes_step;
    // 2bw: the 1F1B stream of the current segment (steps from seg_from until a boundary)
    int seg_active, seg_from, nf, nb, inflight;
    double t0;     // when the current batch started (end of the previous one)
    double mem[4]; // bytes held: weights, grads, optimizer, activations
    int peak_inflight;
    int done;         // steps completed
    float grad_scale; // 1/(B·T·K·dp): T the rank's tokens, dp x cp ranks
    const BlockHooks *saved_hooks;
    struct PipeSwap *sw; // --offload: the stage's blocks swapped through a tier (pipeline_swap.c)
};
typedef struct Pipeline Pipe;
typedef struct PipeSwap PipeSwap;

// Message tags: forward activations 2·g, activation gradients 2·g+1 for micro-batch g (modulo
// a range far larger than the micro-batches in flight), validation windows above that. The
// range is a third of the tags MPI allows (comm_tag_ub, at least 32766), at most 2^22, so
// every tag stays within MPI_TAG_UB.
static inline int tag_range(void) {
    int r = (comm_tag_ub() + 1) / 3;
    return r < (1 << 22) ? r : 1 << 22;
}
static inline int tag_of(int g, int backward) { return 2 * (g % tag_range()) + backward; }
static inline int val_tag(int w) { return 2 * tag_range() + w % tag_range(); }
// 2bw: the buffer holding W(k), the weights after k updates (W(0) is the initial model).
static inline int buffer_of(int k) { return k & 1; }
static inline int slot_of(const Pipe *p, int g) { return g % p->nslots; }
static inline void timed_wait(Pipe *p, CommReq *r) { p->exposed += comm_wait_timed(r, NULL); }

void pipe_use_version(Pipe *p, int v);
void pipe_set_context(const Pipe *p, int step, const char *what, int g);
void pipe_forward_micro(Pipe *p, int g, int step, int j);
void pipe_backward_micro(Pipe *p, int g, int step, float grad_scale, int reduce);
void pipe_wait_sends(Pipe *p);
// pipeline_sched.c
int pipe_step_flushed(Pipe *p, int step, float grad_scale);
int pipe_step_2bw(Pipe *p, int step, int boundary, float grad_scale);
void pipe_pend_advance(Pipe *p, int block);
void pipe_pend_complete(Pipe *p);
// pipeline_zero.c: ZeRO-2/3 over the stage's gradient group
// Allocates the shards and transient buffers (under 2bw the spares of the gradients whose
// update is in flight, and zc); moves the loaded weights into the shards (ZeRO-3).
void pipe_zero_setup(Pipe *p);
void pipe_zero_free(Pipe *p);
// ZeRO-3: block b's weights gathered into gparam (returned); ZeRO 0-2 or a gathered copy: the
// block's pointer as it is.
float *pipe_zero_params(Pipe *p, int b);
// ZeRO-2: before block b's backward, its gradient goes to the zeroed transient buffer; after
// it, the buffer is reduce-scattered into the owners' shards.
void pipe_zero_before_backward(Pipe *p, int b);
void pipe_zero_after_backward(Pipe *p, int b);
// ZeRO-2, end of the batch: stage 0's reduced embedding gradient eg into the shard g; the shard
// and egrad zeroed for the next batch.
void pipe_zero_embed_done(Pipe *p, float *g, const float *eg);
void pipe_zero_clear(Pipe *p);
// The stage's newest weights [lo, hi) into host (hi-lo floats), on every replica (ZeRO-3
// gathers them over gc).
void pipe_stage_weights(Pipe *p, int v, float *host);
// ZeRO-3: a whole gathered copy of weight version v for validation (on = 1), released (on = 0).
void pipe_zero_gather_all(Pipe *p, int v, int on);
// The gradients this replica updates (own_hi - own_lo, from element lo + own_lo), given the
// stage's whole gradient buffer g (ZeRO 0/1) or the replica's shard g (ZeRO-2/3).
const float *pipe_own_grads(const Pipe *p, const float *g);
// 2bw under ZeRO-2/3, end of a batch: its gradients (shard, embedding) swapped into the spares,
// the fresh ones zeroed; the chain's first all-reduce (stage 0's embedding gradient and the
// last stage's wte gradient over gc) started.
void pipe_zero_pend_start(Pipe *p, size_t chunk);
// 2bw: g[0, n) all-reduced over c in the pieces the background chain sends one block's
// gradient (or the wte replica's) in, blocking: the swapped stage's reductions, one block at a
// time, are then the in-memory chain's MPI calls. 0 or -1 (loom_errmsg).
int pipe_grad_allreduce(const Comm *c, float *g, size_t n);
// --offload (gpipe/1f1b/2bw, ZeRO 0): the stage's parameters (2bw: both versions), gradients
// and moments in a tier of this rank, its blocks run from slots in memory. The tier belongs to the
// offload layer above this one, so the swapped stage is implemented there
// (strategy/pipeline_swap.c) and comes in as hooks through PipelineConfig.swap_ops; the pipeline
// calls them through the wrappers below.
//   setup: after the workspaces (their bytes count in --fast-mem); 0 or -1 (loom_errmsg).
//   fill: the tier's first contents, block by block through the first slot (the initial
//     weights, or on resume (start > 0) the checkpoint's weights and moments; the wte replica
//     of the last stage into memory). 0 or -1.
//   shard: pipeline_shard: the stage's weights and moments read from the tier by the
//     checkpoint writer, piece by piece (PipeShard.fetch); replica 0 writes.
//   mem: adds the slots and the update's buffers to p->mem. release: frees it all.
//   use: block b into a slot (grads: its gradient too, which it then accumulates); the block
//     points at the slot, in weight version p->cur_ver. 0 or -1 (the tier failed).
//   fetch: the stage's weight version v into host. 0 or -1.
//   sumsq: the stage's Σ g² per chunk into v. update: AdamW step ++p->t of the stage and of the
//     last stage's wte replica. 0 or -1. Under 2bw both act on the pending batch p->pend.step
//     (sumsq first all-reduces its gradients over gc and the tie, wte replica's p->pend.wg
//     included; update writes W(step+1) from W(step)).
//   batch_end (2bw): batch `step`'s gradients are complete; the next batch's start from zeros.
struct PipeSwapOps {
    int (*setup)(Pipe *p);
    int (*fill)(Pipe *p, int start);
    int (*shard)(Pipe *p, PipeShard *sh);
    void (*mem)(Pipe *p);
    void (*release)(Pipe *p);
    int (*use)(Pipe *p, int b, int grads);
    int (*fetch)(Pipe *p, int array, float *host);
    int (*sumsq)(Pipe *p, double *v);
    int (*update)(Pipe *p, float lr, float scale);
    int (*batch_end)(Pipe *p, int step);
};
static inline int pipe_swap_setup(Pipe *p) { return p->pc->swap_ops->setup(p); }
static inline int pipe_swap_fill(Pipe *p, int start) { return p->pc->swap_ops->fill(p, start); }
static inline int pipe_swap_shard(Pipe *p, PipeShard *sh) { return p->pc->swap_ops->shard(p, sh); }
static inline void pipe_swap_mem(Pipe *p) { p->pc->swap_ops->mem(p); }
static inline void pipe_swap_free(Pipe *p) {
    if (p->sw) p->pc->swap_ops->release(p);
}
static inline int pipe_swap_use(Pipe *p, int b, int grads) {
    return p->pc->swap_ops->use(p, b, grads);
}
static inline int pipe_swap_fetch(Pipe *p, int v, float *host) {
    return p->pc->swap_ops->fetch(p, v, host);
}
static inline int pipe_swap_batch_end(Pipe *p, int step) {
    return p->pc->swap_ops->batch_end(p, step);
}
static inline int pipe_swap_sumsq(Pipe *p, double *v) { return p->pc->swap_ops->sumsq(p, v); }
static inline int pipe_swap_update(Pipe *p, float lr, float scale) {
    return p->pc->swap_ops->update(p, lr, scale);
}
// Block b into a slot or the run ends (the tier failed): the schedules cannot stop mid-batch.
static inline void pipe_swap_must(Pipe *p, int b, int grads) {
    if (p->sw && pipe_swap_use(p, b, grads)) die_last(1);
}
