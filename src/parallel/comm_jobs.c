// comm_jobs.c — collectives as jobs on one queue (comm_mpi.h): each moves in pieces of at most
// LOOM_COMM_CHUNK elements (a large one shows progress; every count fits an int), at most two
// in flight; a job starts only once every earlier job on its communicator has started all of
// its pieces, so every rank issues the same MPI calls in the same order. A piece of a device
// buffer (comm_stage.c) goes through a host stage of its window slot, or, on a communicator
// with a device communicator (comm_devcoll.c), to the backend's collective library: a sum or
// a broadcast as one call per piece, a reduce-scatter's or all-gather's piece as one group of a
// reduce to each member (its block's slice) or a broadcast from each, so uneven layouts need
// nothing more; the piece's ticket stands for its MPI request. Everything here runs under
// comm.c's lock.
#include <mpi.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/backend.h"
#include "../common.h"
#include "comm_mpi.h"

// A collective in progress. Collectives on one communicator must be started in the same order
// on every rank, so a job starts pieces only once every earlier job on its communicator has
// started all of its own; at most WINDOW pieces of a job are in flight. All under mpi_lock.
typedef enum { J_SUM, J_BCAST, J_BARRIER, J_RSCATTER, J_GATHERV } JobKind;
#define WINDOW 2
typedef struct Job {
    JobKind kind;
    MPI_Comm comm;
    const Comm *cm;
    MPI_Datatype type;
    size_t esize;
    char *buf[2];
    size_t n[2], chunk, total; // elements per segment, per piece, in all
    size_t *cut;               // J_SUM: offsets in segment 0 no piece crosses (ascending)
    int ncut, ci;              // how many; the next one not behind the piece to start
    int root, max;             // J_BCAST: the root; J_SUM: the maximum instead of the sum
    const float *send;         // J_RSCATTER
    size_t *counts, *displs;   // J_RSCATTER, J_GATHERV: the caller's layout (J_RSCATTER: offsets)
    int nranks, rank, staged;  // of the layout; staged: J_GATHERV through the stage
    size_t per;                // elements of each member's block per piece
    int *pc, *pd;              // the pieces in flight: counts, displacements (WINDOW x nranks)
    float *stage;              // the pieces' packed blocks (WINDOW x per x nranks), when used
    int stage_pooled;          // stage came from comm_stage_alloc (a device all-gather's)
    int dev[2];                // buf[seg] is device memory: its pieces through host stages
    char *hst[WINDOW];         // a device piece's host stage, per window slot
    char *hdst[WINDOW];        // where the slot's result goes back to on the device (or NULL)
    size_t hbytes[WINDOW];     // and its bytes
    size_t at[WINDOW];         // the pieces' offset in every member's block
    int seg;                   // the next piece: segment and offset
    size_t off, issued;        // elements started so far
    MPI_Request req[WINDOW];   // FIFO of pieces in flight
    void *dc;                  // the device communicator its pieces go to (NULL: MPI)
    uint64_t fence;            // dc: the device's ops its pieces wait for (those before submit)
    uint64_t tk[WINDOW];       // dc: the pieces' tickets
    char *cerr;                // dc: the library's error, once it failed
    double due[WINDOW];        // LOOM_COMM_DELAY: a piece does not complete before this
    int head, inflight, all_issued, done, rc;
    long pieces_done, pieces;
    double t0, delay, progress; // start; emulated link time; when a piece last completed
    struct Job *next;
} Job;
static Job *jobs; // the jobs not collected yet, in the order they were started

// Piece idx of a reduce-scatter or all-gather, in window slot k: elements [idx·per, +per) of
// every member's block. A reduce-scatter packs its send blocks into the slot's stage; so does
// an all-gather whose layout spans more than an int (int displacements), unpacked on arrival.
static int layout_piece(Job *j, int k, size_t idx, MPI_Request *q) {
    size_t at = idx * j->per, used = 0, n = (size_t)j->nranks;
    int *pc = j->pc + (size_t)k * n, *pd = j->pd + (size_t)k * n;
    float *stage = j->stage ? j->stage + (size_t)k * j->per * n : NULL, *buf = (float *)j->buf[0];
    for (size_t r = 0; r < n; r++) {
        size_t len = j->counts[r] > at ? j->counts[r] - at : 0;
        len = len < j->per ? len : j->per;
        pc[r] = (int)len, pd[r] = (int)(stage ? used : j->displs[r] + (len ? at : 0));
        if (j->kind == J_RSCATTER) comm_to_host(stage + used, j->send + j->displs[r] + at, len * 4);
        used += len;
    }
    j->at[k] = at;
    size_t mine = j->counts[j->rank], off = at < mine ? at : mine;
    if (j->kind == J_RSCATTER) {
        float *recv = buf + off;
        if (j->dev[0]) // into the slot's host stage; job_advance uploads it
            j->hdst[k] = (char *)recv, j->hbytes[k] = (size_t)pc[j->rank] * 4,
            recv = (float *)j->hst[k];
        return MPI_Ireduce_scatter(stage, recv, pc, MPI_FLOAT, MPI_SUM, j->comm, q);
    }
    if (!stage)
        return MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, pc, pd, MPI_FLOAT, j->comm,
                               q);
    if (j->dev[0]) { // this member's block into its place in the stage, then in place there
        comm_to_host(stage + pd[j->rank], buf + j->displs[j->rank] + off, (size_t)pc[j->rank] * 4);
        return MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, stage, pc, pd, MPI_FLOAT,
                               j->comm, q);
    }
    return MPI_Iallgatherv(buf + j->displs[j->rank] + off, pc[j->rank], MPI_FLOAT, stage, pc, pd,
                           MPI_FLOAT, j->comm, q);
}

// Piece idx of a reduce-scatter or all-gather on the device communicator: one group, a reduce
// of each member's slice to it, or a broadcast of each member's slice from it (in place).
static uint64_t dc_layout_piece(Job *j, size_t idx) {
    const Backend *be = comm_dc_backend();
    size_t at = idx * j->per, mine = j->counts[j->rank];
    float *buf = (float *)j->buf[0], *recv = buf + (at < mine ? at : mine);
    be->coll_group_begin(j->dc, j->fence);
    for (int r = 0; r < j->nranks; r++) {
        size_t len = j->counts[r] > at ? j->counts[r] - at : 0;
        len = len < j->per ? len : j->per;
        if (len && j->kind == J_RSCATTER)
            be->coll_reduce(j->dc, j->send + j->displs[r] + at, recv, len, r);
        else if (len)
            be->coll_bcast(j->dc, j->fence, buf + j->displs[r] + at, len, COLL_F32, r);
    }
    return be->coll_group_end(j->dc);
}

// A piece of a job on the device communicator (its buffers device memory) into slot k.
static int dc_piece(Job *j, int k, void *p, size_t len) {
    const Backend *be = comm_dc_backend();
    if (j->kind == J_RSCATTER || j->kind == J_GATHERV)
        j->tk[k] = dc_layout_piece(j, j->issued);
    else if (j->kind == J_BCAST)
        j->tk[k] = be->coll_bcast(j->dc, j->fence, p, len, COLL_BYTES, j->root);
    else
        j->tk[k] =
            be->coll_allreduce(j->dc, j->fence, p, len, j->type == MPI_DOUBLE ? COLL_F64 : COLL_F32,
                               j->max ? COLL_MAX : COLL_SUM);
    if (j->tk[k]) return 0;
    j->cerr = strdup(loom_errmsg());
    return -1;
}

// A staged all-gather's piece in slot k has landed: the other members' blocks to their place.
static void layout_unpack(Job *j, int k) {
    size_t n = (size_t)j->nranks;
    const int *pc = j->pc + (size_t)k * n, *pd = j->pd + (size_t)k * n;
    const float *stage = j->stage + (size_t)k * j->per * n;
    for (size_t r = 0; r < n; r++)
        if ((int)r != j->rank && pc[r])
            comm_to_dev((float *)j->buf[0] + j->displs[r] + j->at[k], stage + pd[r],
                        (size_t)pc[r] * sizeof(float));
}

// Starts the next piece of j into slot k; *len = the elements it covers.
static int issue_piece(Job *j, int k, size_t *len) {
    MPI_Request *q = &j->req[k];
    *len = 1;
    if (j->kind == J_BARRIER) return MPI_Ibarrier(j->comm, q);
    if (j->dc && (j->kind == J_RSCATTER || j->kind == J_GATHERV)) return dc_piece(j, k, NULL, 0);
    if (j->kind == J_RSCATTER || j->kind == J_GATHERV) return layout_piece(j, k, j->issued, q);
    while (j->off >= j->n[j->seg])
        j->seg++, j->off = 0;
    size_t rest = j->n[j->seg] - j->off;
    while (j->seg == 0 && j->ci < j->ncut && j->cut[j->ci] <= j->off)
        j->ci++;
    if (j->seg == 0 && j->ci < j->ncut && j->cut[j->ci] - j->off < rest)
        rest = j->cut[j->ci] - j->off; // a new range starts there: its pieces from its start
    *len = rest < j->chunk ? rest : j->chunk;
    void *p = j->buf[j->seg] + j->off * j->esize;
    if (j->dc) return dc_piece(j, k, p, *len);
    if (j->dev[j->seg]) { // through the slot's host stage; job_advance uploads it
        j->hdst[k] = p, j->hbytes[k] = *len * j->esize;
        comm_to_host(j->hst[k], p, j->hbytes[k]);
        p = j->hst[k];
    }
    if (j->kind == J_BCAST) return MPI_Ibcast(p, (int)*len, j->type, j->root, j->comm, q);
    return MPI_Iallreduce(MPI_IN_PLACE, p, (int)*len, j->type, j->max ? MPI_MAX : MPI_SUM, j->comm,
                          q);
}

// Starts a job's pieces up to the window (if it may start any) and retires the ones that
// landed, in order.
static void job_advance(Job *j, int may_start) {
    while (!j->done && !j->rc) {
        while (may_start && j->inflight < WINDOW && !j->all_issued) {
            int k = (j->head + j->inflight) % WINDOW;
            size_t len;
            if ((j->rc = issue_piece(j, k, &len))) return;
            j->off += len, j->issued += len, j->inflight++;
            j->all_issued = j->issued >= j->total;
            j->due[k] = j->delay > 0 ? j->t0 + j->delay * (double)j->issued / (double)j->total : 0;
        }
        if (!j->inflight) {
            j->done = j->all_issued;
            return;
        }
        int flag = 0, k = j->head;
        if (j->dc) {
            flag = comm_dc_backend()->coll_test(j->dc, j->tk[k]);
            if (flag < 0) j->rc = -1, j->cerr = strdup(loom_errmsg());
            if (flag <= 0) return;
        } else if ((j->rc = MPI_Test(&j->req[k], &flag, MPI_STATUS_IGNORE)) || !flag) {
            return;
        }
        if (j->due[k] > 0 && now_sec() < j->due[k]) return; // the emulated link is still busy
        if (j->staged) layout_unpack(j, k);
        if (j->hdst[k]) comm_to_dev(j->hdst[k], j->hst[k], j->hbytes[k]), j->hdst[k] = NULL;
        j->head = (k + 1) % WINDOW, j->inflight--, j->pieces_done++, j->progress = now_sec();
    }
}

// Advances every queued job. A job that has not started yet is waiting on the jobs before it
// on its communicator, so it counts their progress as its own.
void comm_jobs_advance(void) {
    for (Job *j = jobs; j; j = j->next) {
        const Job *prev = NULL; // the latest earlier job on the same communicator
        for (const Job *p = jobs; p != j; p = p->next)
            if (p->cm == j->cm || (p->comm != MPI_COMM_NULL && p->comm == j->comm)) prev = p;
        if (prev && !j->issued && prev->progress > j->progress) j->progress = prev->progress;
        job_advance(j, !prev || prev->all_issued);
    }
}

// A job on device buffers gets host stages: a window slot each of the largest piece (a
// reduce-scatter's received block; an all-gather goes through its packed stage).
static void stage_device(Job *j) {
    j->dev[0] = comm_dev(j->buf[0]), j->dev[1] = comm_dev(j->buf[1]);
    if (j->kind == J_GATHERV && j->dev[0] && !j->stage) {
        j->staged = 1;
        j->stage = comm_stage_alloc(WINDOW * j->per * (size_t)j->nranks * sizeof(float));
        j->stage_pooled = 1;
    }
    size_t bytes = 0;
    if (j->kind == J_RSCATTER && j->dev[0]) bytes = j->per * sizeof(float);
    if ((j->kind == J_SUM || j->kind == J_BCAST) && (j->dev[0] || j->dev[1])) {
        size_t most = j->n[0] > j->n[1] ? j->n[0] : j->n[1];
        bytes = (j->chunk < most ? j->chunk : most) * j->esize;
    }
    for (int k = 0; bytes && k < WINDOW; k++)
        j->hst[k] = comm_stage_alloc(bytes);
}

static CommReq submit(const Comm *c, const char *op, Job *j) {
    const void *bufs[3] = {j->buf[0], j->buf[1], j->send};
    if (j->kind != J_BARRIER) j->dc = comm_dc_for(c, bufs, 3);
    if (j->dc) { // no host stages: the library moves device memory, after what is queued now
        j->fence = comm_dc_backend()->coll_fence();
        j->staged = 0;
        free(j->stage), j->stage = NULL;
    } else {
        stage_device(j);
    }
    j->comm = c->handle ? comm_h(c) : MPI_COMM_NULL, j->cm = c;
    j->t0 = j->progress = now_sec();
    if (!j->chunk) j->chunk = 1;
    j->total = j->n[0] + j->n[1];
    j->pieces = (long)((j->n[1] + j->chunk - 1) / j->chunk);
    size_t at = 0;
    for (int k = 0; k <= j->ncut; k++) { // segment 0's ranges between the cuts
        size_t end = k < j->ncut ? j->cut[k] : j->n[0];
        j->pieces += (long)((end - at + j->chunk - 1) / j->chunk);
        at = end;
    }
    CommReq r = {.handle = j, .chunked = 1, .op = op, .comm = c, .started = j->t0};
    comm_lock();
    Job **t = &jobs;
    while (*t)
        t = &(*t)->next;
    *t = j;
    atomic_fetch_add(&comm_outstanding_ops, 1);
    comm_jobs_advance();
    comm_unlock();
    return r;
}

static Job *sum_job(void *b0, size_t n0, void *b1, size_t n1, size_t chunk, int how,
                    double delay) { // how: f32 sum, f64 sum, f32 max
    Job *j = xcalloc(1, sizeof *j);
    size_t lim = comm_chunk_limit();
    *j = (Job){.kind = J_SUM,
               .max = how == 2,
               .type = how == 1 ? MPI_DOUBLE : MPI_FLOAT,
               .esize = how == 1 ? sizeof(double) : sizeof(float),
               .buf = {b0, b1},
               .n = {n0, n1},
               .chunk = chunk && chunk < lim ? chunk : lim,
               .delay = delay};
    return j;
}

static CommReq submit_sum(const Comm *c, const char *op, void *b0, size_t n0, void *b1, size_t n1,
                          size_t chunk, int how, double delay) {
    return submit(c, op, sum_job(b0, n0, b1, n1, chunk, how, delay));
}

// One member and the operation not on its device communicator: nothing to move (a device
// communicator of one member, comm_device_collectives' mode 1, still runs every operation).
static int alone(const Comm *c, const void *a, const void *b) {
    const void *bufs[2] = {a, b};
    return c->size == 1 && !comm_dc_for(c, bufs, 2);
}

CommReq comm_iallreduce(const Comm *c, float *buf, size_t n) {
    if (alone(c, buf, NULL) || n == 0) return comm_done_req(c, "allreduce");
    return submit_sum(c, "allreduce", buf, n, NULL, 0, 0, 0, comm_link_delay(n));
}

CommReq comm_iallreduce_max(const Comm *c, float *buf, size_t n) {
    if (alone(c, buf, NULL) || n == 0) return comm_done_req(c, "allreduce(max)");
    return submit_sum(c, "allreduce(max)", buf, n, NULL, 0, 0, 2, 0);
}

CommReq comm_iallreduce_chunked(const Comm *c, float *b0, size_t n0, float *b1, size_t n1,
                                size_t chunk) {
    return comm_iallreduce_cut(c, b0, n0, NULL, 0, b1, n1, chunk);
}

CommReq comm_iallreduce_cut(const Comm *c, float *b0, size_t n0, const size_t *cut, int ncut,
                            float *b1, size_t n1, size_t chunk) {
    if (!b0) n0 = 0, ncut = 0;
    if (!b1) n1 = 0;
    if (!c || c->size < 1 || alone(c, b0, b1) || n0 + n1 == 0)
        return comm_done_req(c, "allreduce (chunked)");
    size_t *own = NULL;
    int k = 0;
    if (ncut > 0) { // only the cuts inside (0, n0), ascending
        own = xmalloc((size_t)ncut * sizeof *own);
        for (int i = 0; i < ncut; i++)
            if (cut[i] > (k ? own[k - 1] : 0) && cut[i] < n0) own[k++] = cut[i];
    }
    Job *j = sum_job(b0, n0, b1, n1, chunk, 0, 0);
    j->cut = own, j->ncut = k;
    return submit(c, "allreduce (chunked)", j);
}

CommReq comm_iallreduce_f64(const Comm *c, double *buf, int n) {
    if (c->size < 1 || alone(c, buf, NULL) || n <= 0) return comm_done_req(c, "allreduce(f64)");
    return submit_sum(c, "allreduce(f64)", buf, (size_t)n, NULL, 0, 0, 1, 0);
}

// Layouts spanning more than this many elements are all-gathered through a stage (MPI's
// displacements are ints); tests lower it.
static size_t int_limit = 2147483647;
void comm_set_int_limit(size_t n) { int_limit = n; }

// A reduce-scatter or all-gather job over the caller's layout, in pieces of at most
// LOOM_COMM_CHUNK elements in all (so every count and displacement MPI sees fits an int).
static Job *layout_job(const Comm *c, JobKind kind, const size_t *counts, const size_t *displs,
                       size_t *total) {
    Job *j = xcalloc(1, sizeof *j);
    size_t n = (size_t)c->size, end = 0, most = 0;
    *j = (Job){.kind = kind, .type = MPI_FLOAT, .esize = sizeof(float), .chunk = 1};
    j->nranks = c->size, j->rank = c->rank;
    j->counts = xmalloc(n * sizeof(size_t)), j->displs = xmalloc(n * sizeof(size_t));
    *total = 0;
    for (size_t q = 0; q < n; q++) {
        j->counts[q] = counts[q], j->displs[q] = displs ? displs[q] : *total;
        *total += counts[q];
        end = j->displs[q] + counts[q] > end ? j->displs[q] + counts[q] : end;
        most = counts[q] > most ? counts[q] : most;
    }
    j->per = comm_chunk_limit() / n > 0 ? comm_chunk_limit() / n : 1;
    j->n[0] = most ? (most + j->per - 1) / j->per : 1; // pieces
    if (most && most < j->per) j->per = most;
    j->staged = kind == J_GATHERV && end > int_limit;
    j->pc = xmalloc(WINDOW * n * sizeof(int)), j->pd = xmalloc(WINDOW * n * sizeof(int));
    if (kind == J_RSCATTER || j->staged) j->stage = xmalloc(WINDOW * j->per * n * sizeof(float));
    return j;
}

CommReq comm_ireduce_scatter(const Comm *c, const float *send, float *recv, const size_t *counts) {
    if (alone(c, send, recv)) {
        if (send != recv) comm_copy_any(recv, send, counts[0] * sizeof(float));
        return comm_done_req(c, "reduce_scatter");
    }
    size_t total;
    Job *j = layout_job(c, J_RSCATTER, counts, NULL, &total);
    j->send = send, j->buf[0] = (char *)recv, j->delay = comm_link_delay(total);
    return submit(c, "reduce_scatter", j);
}

CommReq comm_iallgatherv(const Comm *c, float *buf, const size_t *counts, const size_t *displs) {
    if (alone(c, buf, NULL)) return comm_done_req(c, "allgather");
    size_t total;
    Job *j = layout_job(c, J_GATHERV, counts, displs, &total);
    j->buf[0] = (char *)buf, j->delay = comm_link_delay(total);
    return submit(c, "allgather", j);
}

void comm_broadcast(const Comm *c, void *buf, size_t bytes, int root) {
    if (alone(c, buf, NULL) || bytes == 0) return;
    Job *j = xcalloc(1, sizeof *j);
    size_t lim = comm_chunk_limit() < 536870911 ? 4 * comm_chunk_limit() : 2147483647; // in bytes
    *j = (Job){.kind = J_BCAST, .type = MPI_BYTE, .esize = 1, .buf = {buf}, .n = {bytes}};
    j->chunk = lim, j->root = root;
    CommReq r = submit(c, "broadcast", j);
    comm_wait(&r);
}

void comm_barrier(const Comm *c) {
    if (c->size == 1) return;
    Job *j = xcalloc(1, sizeof *j);
    *j = (Job){.kind = J_BARRIER, .n = {1, 0}, .chunk = 1};
    CommReq r = submit(c, "barrier", j);
    comm_wait(&r);
}

// A job: advance the queue; once this one is done, unlink and free it.
int comm_job_test(CommReq *r, CommProgress *pr) {
    Job *j = r->handle;
    comm_lock();
    comm_jobs_advance();
    int done = j->done, rc = j->rc;
    if (pr) *pr = (CommProgress){j->progress, j->pieces_done, j->pieces};
    if (done || rc) {
        Job **t = &jobs;
        while (*t != j)
            t = &(*t)->next;
        *t = j->next;
        atomic_fetch_sub(&comm_outstanding_ops, 1);
    }
    comm_unlock();
    int bad = j->cerr ? comm_dc_failed(j->cerr, r->op, r->comm) : comm_check(rc, r->op, r->comm);
    if (!done && !bad) return 0;
    free(j->counts), free(j->displs), free(j->pc), free(j->pd), free(j->cut), free(j->cerr);
    if (j->stage_pooled)
        comm_stage_free(j->stage);
    else
        free(j->stage);
    for (int k = 0; k < WINDOW; k++)
        comm_stage_free(j->hst[k]);
    free(j);
    r->handle = NULL, r->chunked = 0;
    r->status = bad, r->contributors = bad ? 0 : r->comm->size;
    return 1;
}
