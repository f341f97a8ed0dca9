// data_parallel.c — data parallelism with bucketed, overlapped gradient reduction and ZeRO
// stages 1–3 (see data_parallel.h).
#include "data_parallel.h"

#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "../testhooks.h"

// A reduce-scatter of one block's gradient in flight (zero 2/3).
typedef struct {
    CommReq req;
    float *send, *recv;
    size_t a; // flat offset of the piece this rank receives
    size_t n; // its length
    int active;
} PendingRS;

struct DataParallel {
    GPT *m;
    const Comm *c;
    int N, r, zero, last;
    size_t P, lo, hi;
    size_t *bound;           // (N+1) shard boundaries: rank q owns [bound[q], bound[q+1])
    size_t *counts, *displs; // shard sizes/offsets, for the parameter all-gather
    size_t *tmp_counts, *tmp_displs;
    size_t max_block; // largest block other than the embedding (which has its own buffers)
    size_t rs_cap;    // receive buffer size: min(max_block, owned slice)
    // zero 0/1: buckets of consecutive blocks, reduced as soon as their lowest block is done
    int nbuckets;
    int *bucket_start; // per block: bucket index whose reduction starts after it, or -1
    size_t *bucket_a, *bucket_b;
    CommReq *bucket_req;
    // zero 2/3: transient gradient buffers and the owned gradient shard
    float *gshard;
    float *tgrad[2], *trecv[2];
    PendingRS rs[2];
    int tslot;
    float *egrad; // the embedding block's gradient for one micro-batch (tied LM head writes it)
    // zero 3: owned parameters and gathered block parameters
    float *pshard;
    float *eparam;    // embedding parameters, gathered from its forward to its backward
    float *bparam[2]; // other blocks, double-buffered so the next gather can run ahead
    int bparam_block[2];
    CommReq gather_req[2];
    BlockHooks hooks;
    double exposed; // seconds this step spent blocked waiting on communication
    double overlap; // the least age of the operations this step waited for (0: none)
};

// comm_wait, with the blocked time counted as exposed communication and how long r had been
// in flight when the wait began lowering d->overlap.
static void timed_wait(DataParallel *d, CommReq *r) {
    double age;
    d->exposed += comm_wait_timed(r, &age);
    if (age > 0 && (d->overlap <= 0 || age < d->overlap)) d->overlap = age;
}

// ---------------------------------------------------------------- zero 0/1: buckets

static void start_bucket(DataParallel *d, int k) {
    size_t a = d->bucket_a[k], b = d->bucket_b[k];
    d->bucket_req[k] = comm_iallreduce(d->c, d->m->grads + a, b - a);
}

// ---------------------------------------------------------------- zero 2/3: reduce-scatter

static void rs_complete(DataParallel *d, int slot) {
    PendingRS *p = &d->rs[slot];
    if (!p->active) return;
    timed_wait(d, &p->req);
    d->m->be->axpby(d->gshard + (p->a - d->lo), 1.0f, p->recv, 1.0f, p->n);
    p->active = 0;
}

// Reduce-scatters send (the gradient of flat range [a, b)) into the owners' shards.
static void rs_start(DataParallel *d, int slot, float *send, float *recv, size_t a, size_t b) {
    for (int q = 0; q < d->N; q++) {
        size_t s;
        d->tmp_counts[q] = range_isect(a, b, d->bound[q], d->bound[q + 1], &s);
    }
    PendingRS *p = &d->rs[slot];
    p->n = range_isect(a, b, d->lo, d->hi, &p->a);
    p->send = send;
    p->recv = recv;
    p->req = comm_ireduce_scatter(d->c, send, recv, d->tmp_counts);
    p->active = 1;
}

// ---------------------------------------------------------------- zero 3: gathers

// Starts gathering block b's parameters into dst (in place all-gather of the owners' pieces).
static CommReq gather_start(DataParallel *d, int b, float *dst) {
    const Block *blk = &d->m->blocks[b];
    size_t a = blk->off, e = blk->off + blk->n;
    for (int q = 0; q < d->N; q++) {
        size_t s;
        d->tmp_counts[q] = range_isect(a, e, d->bound[q], d->bound[q + 1], &s);
        d->tmp_displs[q] = s > a ? s - a : 0;
        if (!d->tmp_counts[q]) d->tmp_displs[q] = 0;
    }
    size_t s, n = range_isect(a, e, d->lo, d->hi, &s);
    if (n) d->m->be->copy(dst + (s - a), d->pshard + (s - d->lo), n);
    return comm_iallgatherv(d->c, dst, d->tmp_counts, d->tmp_displs);
}

// Makes block b's parameters available in one of the two buffers; returns it.
static float *gather_block(DataParallel *d, int b, int prefetch_next) {
    int slot = b & 1;
    if (d->bparam_block[slot] != b) {
        timed_wait(d, &d->gather_req[slot]);
        d->gather_req[slot] = gather_start(d, b, d->bparam[slot]);
        d->bparam_block[slot] = b;
    }
    timed_wait(d, &d->gather_req[slot]);
    int nb = d->m->nblocks;
    if (prefetch_next >= 1 && prefetch_next < nb - 1) { // run the next layer's gather ahead
        int s2 = prefetch_next & 1;
        if (d->bparam_block[s2] != prefetch_next) {
            timed_wait(d, &d->gather_req[s2]);
            d->gather_req[s2] = gather_start(d, prefetch_next, d->bparam[s2]);
            d->bparam_block[s2] = prefetch_next;
        }
    }
    return d->bparam[slot];
}

// ---------------------------------------------------------------- hooks

static void hook_before(void *ctx, int b, int backward) {
    DataParallel *d = ctx;
    GPT *m = d->m;
    Block *blk = &m->blocks[b];
    int head = m->nblocks - 1;
    if (d->zero >= 3) {
        if (b == 0 && !backward) { // embedding: gathered once, kept until its backward
            CommReq r = gather_start(d, 0, d->eparam);
            timed_wait(d, &r);
            blk->params = d->eparam;
        } else if (b != 0) {
            int next = backward ? b - 1 : b + 1;
            blk->params = gather_block(d, b, next);
        }
    }
    if (d->zero >= 2 && backward) {
        if (b == head) m->be->fill(d->egrad, 0.f, m->blocks[0].n);
        if (b != 0) {
            int s = d->tslot;
            rs_complete(d, s); // the buffer's previous reduction must be done
            m->be->fill(d->tgrad[s], 0.f, blk->n);
            blk->grads = d->tgrad[s];
        }
    }
}

static void hook_after(void *ctx, int b, int backward) {
    DataParallel *d = ctx;
    if (!backward) return;
    const Block *blk = &d->m->blocks[b];
    if (d->zero >= 2) {
        if (b == 0) { // the embedding ends the micro-batch: reduce it in pieces, drain all
            size_t chunk = d->max_block, end = blk->off + blk->n;
            for (size_t a = blk->off; a < end; a += chunk) {
                int s = d->tslot;
                rs_complete(d, s);
                rs_start(d, s, d->egrad + (a - blk->off), d->trecv[s], a,
                         a + chunk < end ? a + chunk : end);
                d->tslot ^= 1;
            }
            rs_complete(d, 0);
            rs_complete(d, 1);
        } else {
            int s = d->tslot;
            rs_start(d, s, d->tgrad[s], d->trecv[s], blk->off, blk->off + blk->n);
            d->tslot ^= 1;
        }
        return;
    }
    if (d->last && d->bucket_start[b] >= 0) start_bucket(d, d->bucket_start[b]);
}

static void hook_poll(void *ctx) {
    (void)ctx;
    comm_progress();
}

// ---------------------------------------------------------------- setup

static void make_buckets(DataParallel *d, double bucket_mb) {
    GPT *m = d->m;
    // buckets: consecutive blocks in backward order, each at most bucket_mb (one block at least)
    d->bucket_start = xmalloc(sizeof(int) * (size_t)m->nblocks);
    d->bucket_a = xcalloc((size_t)m->nblocks, sizeof(size_t));
    d->bucket_b = xcalloc((size_t)m->nblocks, sizeof(size_t));
    d->bucket_req = xcalloc((size_t)m->nblocks, sizeof(CommReq));
    size_t cap = (size_t)(bucket_mb * 1024 * 1024 / sizeof(float));
    for (int b = 0; b < m->nblocks; b++)
        d->bucket_start[b] = -1;
    for (int b = m->nblocks - 1; b >= 0;) {
        int top = b;
        size_t size = m->blocks[b].n;
        while (b - 1 >= 0 && size + m->blocks[b - 1].n <= cap)
            size += m->blocks[--b].n;
        int k = d->nbuckets++;
        d->bucket_a[k] = m->blocks[b].off;
        d->bucket_b[k] = m->blocks[top].off + m->blocks[top].n;
        d->bucket_start[b] = k;
        b--;
    }
}

// ZeRO 2/3: the shards and transient buffers replace the model's whole gradient (and, for
// ZeRO-3, parameter) buffers.
static void shard_buffers(DataParallel *d) {
    GPT *m = d->m;
    int zero = d->zero;
    const Backend *be = m->be;
    if (zero >= 2) {
        d->gshard = be->alloc(d->hi - d->lo);
        for (int s = 0; s < 2; s++) {
            d->tgrad[s] = be->alloc(d->max_block);
            d->trecv[s] = be->alloc(d->rs_cap);
        }
        d->egrad = be->alloc(m->blocks[0].n);
        gpt_drop_whole(m, 0, 1); // the full gradient buffer is never needed again
        m->blocks[0].grads = d->egrad;
    }
    if (zero >= 3) {
        d->pshard = be->alloc(d->hi - d->lo);
        if (m->params) be->copy(d->pshard, m->params + d->lo, d->hi - d->lo);
        d->eparam = be->alloc(m->blocks[0].n);
        for (int s = 0; s < 2; s++) {
            d->bparam[s] = be->alloc(d->max_block);
            d->bparam_block[s] = -1;
        }
        gpt_drop_whole(m, 1, 0);
    }
}

DataParallel *dp_create(GPT *m, const Comm *c, int zero, double bucket_mb) {
    DataParallel *d = xcalloc(1, sizeof *d);
    d->m = m;
    d->c = c;
    d->N = c->size;
    d->r = c->rank;
    d->zero = zero;
    d->P = m->nparams;
    d->bound = xcalloc((size_t)d->N + 1, sizeof(size_t));
    d->counts = xcalloc((size_t)d->N, sizeof(size_t));
    d->displs = xcalloc((size_t)d->N, sizeof(size_t));
    d->tmp_counts = xcalloc((size_t)d->N, sizeof(size_t));
    d->tmp_displs = xcalloc((size_t)d->N, sizeof(size_t));
    for (int q = 0; q <= d->N; q++) // on norm-chunk boundaries (gpt.h)
        d->bound[q] = gpt_shard_bound(m, 0, d->P, q, d->N);
    for (int q = 0; q < d->N; q++) {
        d->counts[q] = d->bound[q + 1] - d->bound[q];
        d->displs[q] = d->bound[q];
    }
    if (zero >= 1) {
        d->lo = d->bound[d->r];
        d->hi = d->bound[d->r + 1];
    } else {
        d->lo = 0;
        d->hi = d->P;
    }
    for (int b = 1; b < m->nblocks; b++)
        if (m->blocks[b].n > d->max_block) d->max_block = m->blocks[b].n;
    d->rs_cap = d->max_block < d->hi - d->lo ? d->max_block : d->hi - d->lo;

    make_buckets(d, bucket_mb);
    shard_buffers(d);
    // what this rank updates, for the optimizer's per-block pointers
    float *own_p = zero >= 3 ? d->pshard : m->params + d->lo;
    float *own_g = zero >= 2 ? d->gshard : m->grads + d->lo;
    gpt_own_range(m, d->lo, d->hi, d->lo, own_p, own_g);
    // the head's part of the tied embedding's gradient, added to the embedding's once per
    // reduction (gpt.h head_dwte): every ZeRO stage and the pipeline sum E + H
    if (!testhook_tied_interleaved()) m->head_dwte = m->be->alloc((size_t)m->cfg.V * m->cfg.C);
    d->hooks =
        (BlockHooks){.before = hook_before, .after = hook_after, .poll = hook_poll, .ctx = d};
    m->hooks = &d->hooks;
    return d;
}

void dp_free(DataParallel *d) {
    if (!d) return;
    const Backend *be = d->m->be;
    if (d->gshard) be->release(d->gshard);
    for (int s = 0; s < 2; s++) {
        if (d->tgrad[s]) be->release(d->tgrad[s]);
        if (d->trecv[s]) be->release(d->trecv[s]);
        if (d->bparam[s]) be->release(d->bparam[s]);
    }
    if (d->egrad) be->release(d->egrad);
    if (d->pshard) be->release(d->pshard);
    if (d->eparam) be->release(d->eparam);
    d->m->hooks = NULL;
    if (d->m->head_dwte) be->release(d->m->head_dwte), d->m->head_dwte = NULL;
    free(d->bound), free(d->counts), free(d->displs), free(d->tmp_counts), free(d->tmp_displs);
    free(d->bucket_start), free(d->bucket_a), free(d->bucket_b), free(d->bucket_req);
    free(d);
}

void dp_owned_range(const DataParallel *d, size_t *lo, size_t *hi) {
    *lo = d->lo;
    *hi = d->hi;
}

// ---------------------------------------------------------------- the step

void dp_begin_micro(DataParallel *d, int last) {
    d->last = last;
    d->m->fold_head = d->zero >= 2 || last; // ZeRO 2/3 reduce the embedding every micro-batch
}

void dp_finish_grads(DataParallel *d) {
    if (d->zero >= 2) {
        rs_complete(d, 0);
        rs_complete(d, 1);
    } else {
        for (int k = 0; k < d->nbuckets; k++)
            timed_wait(d, &d->bucket_req[k]);
    }
}

double dp_exposed_wait(const DataParallel *d) { return d->exposed; }

double dp_overlap(const DataParallel *d) { return d->overlap; }

double dp_grad_sumsq(DataParallel *d) {
    GPT *m = d->m;
    double *part = xcalloc((size_t)m->nchunks, sizeof(double));
    if (d->zero < 2) { // every rank holds the reduced gradient
        gpt_chunk_sumsq(m, m->grads, 0, d->P, part);
    } else { // each chunk from its owner, zeros elsewhere: the sum is exact
        gpt_chunk_sumsq(m, d->gshard, d->lo, d->hi, part);
        comm_allreduce_f64(d->c, part, m->nchunks);
    }
    double s = gpt_chunk_total(m, part);
    free(part);
    return s;
}

void dp_zero_grad(DataParallel *d) {
    const Backend *be = d->m->be;
    d->exposed = 0, d->overlap = 0;
    if (d->zero >= 2)
        be->fill(d->gshard, 0.f, d->hi - d->lo);
    else
        be->fill(d->m->grads, 0.f, d->P);
}

void dp_optimizer_step(DataParallel *d, AdamW *opt, float lr, float grad_scale) {
    GPT *m = d->m;
    adamw_step(opt, m, lr, grad_scale); // through the blocks' pointers (set in dp_create)
    if (d->zero == 1 || d->zero == 2) {
        CommReq r = comm_iallgatherv(d->c, m->params, d->counts, d->displs);
        timed_wait(d, &r);
    }
    if (d->zero >= 3) // gathered copies are stale now
        d->bparam_block[0] = d->bparam_block[1] = -1;
}

void dp_full_params(DataParallel *d, float *dst) {
    if (d->zero < 3) {
        d->m->be->download(dst, d->m->params, d->P);
        return;
    }
    d->m->be->download(dst + d->lo, d->pshard, d->hi - d->lo);
    comm_allgatherv(d->c, dst, d->counts, d->displs);
}

float *dp_shard_params(DataParallel *d) { return d->pshard; }

const float *dp_owned_grads(const DataParallel *d) {
    return d->zero >= 2 ? d->gshard : d->m->grads + d->lo;
}

const float *dp_owned_params(DataParallel *d) {
    return d->zero >= 3 ? d->pshard : d->m->params + d->lo;
}

void dp_set_params(DataParallel *d, const float *full) {
    if (d->zero >= 3) {
        d->m->be->upload(d->pshard, full + d->lo, d->hi - d->lo);
        d->bparam_block[0] = d->bparam_block[1] = -1;
    } else {
        d->m->be->upload(d->m->params, full, d->P);
    }
}

// Bytes per rank for a model of P parameters whose embedding block has `embed` and whose
// largest block has `max_block` parameters, sharded `zero` ways over N ranks.
// Transient buffers: two block gradients in flight plus their receive pieces, the embedding's
// gradient for one micro-batch (the tied head writes all of it), and for zero 3 the gathered
// embedding and two gathered blocks.
static void memory_model(size_t P, size_t embed, size_t wte, size_t max_block, int N, int zero,
                         double *param_b, double *grad_b, double *opt_b) {
    double f = sizeof(float);
    size_t own = zero >= 1 ? (P + (size_t)N - 1) / (size_t)N : P;
    size_t cap = max_block < own ? max_block : own;
    *param_b = zero >= 3 ? f * (own + embed + 2 * max_block) : f * P;
    *grad_b = zero >= 2 ? f * (own + 2 * max_block + 2 * cap + embed) : f * P;
    *grad_b += f * (double)wte; // the head's part of the tied embedding's gradient
    *opt_b = f * 2 * own;
}

void dp_memory(const DataParallel *d, double *param_b, double *grad_b, double *opt_b) {
    memory_model(d->P, d->m->blocks[0].n, (size_t)d->m->cfg.V * d->m->cfg.C, d->max_block, d->N,
                 d->zero, param_b, grad_b, opt_b);
}

void dp_memory_model(size_t P, size_t embed, size_t wte, size_t max_block, int N, int zero,
                     double *param_b, double *grad_b, double *opt_b) {
    memory_model(P, embed, wte, max_block, N, zero, param_b, grad_b, opt_b);
}

void dp_memory_plan(const GPTConfig *c, int N, int zero, double *param_b, double *grad_b,
                    double *opt_b) {
    GPT m; // the block sizes of either family, from the layout (no buffers)
    if (gpt_create_layout(&m, c, NULL)) {
        *param_b = *grad_b = *opt_b = 0;
        return;
    }
    size_t embed = m.blocks[0].n, layer = c->L > 0 ? m.blocks[1].n : 0;
    memory_model(m.nparams, embed, (size_t)c->V * c->C, layer, N, zero, param_b, grad_b, opt_b);
    gpt_free(&m);
}
