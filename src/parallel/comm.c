// comm.c — MPI behind comm.h: every collective is a job on one queue, moved as pieces of at
// most LOOM_COMM_CHUNK elements (a large one shows progress; every count fits an int);
// point-to-point requests are tracked so comm_progress (and the progress thread) drive them.
// The MPI-free half (waits, watchdog, threads, blocking forms) is comm_watchdog.c. MPI is
// MPI_THREAD_SERIALIZED and every MPI call made here holds mpi_lock: the progress, heartbeat
// and training threads never call MPI at the same time.
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common.h"
#include "../testhooks.h"
#include "comm_impl.h"

static Comm world = {.handle = NULL, .rank = 0, .size = 1, .name = "world"};
static int mpi_on;
static int tag_ub = 32767; // MPI_TAG_UB once MPI is up (32767 is the guaranteed minimum)

// Outstanding point-to-point requests, polled by comm_progress (under mpi_lock; grows).
static MPI_Request **pending;
static int npending, cap_pending;
// Point-to-point requests and queued jobs not finished: the lock-free "anything to do?" check
// of the progress thread and comm_progress reads only this.
static atomic_int outstanding;

static pthread_mutex_t mpi_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int lock_held; // this thread holds mpi_lock (comm_abort must not re-take)
#define LOCK() (pthread_mutex_lock(&mpi_lock), lock_held = 1)
#define TRYLOCK() (pthread_mutex_trylock(&mpi_lock) == 0 && (lock_held = 1))
#define UNLOCK() (lock_held = 0, pthread_mutex_unlock(&mpi_lock))
static int thread_level; // what MPI_Init_thread provided
static void progress_locked(void);

// A collective in progress. Collectives on one communicator must be started in the same order
// on every rank, so a job starts pieces only once every earlier job on its communicator has
// started all of its own; at most WINDOW pieces of a job are in flight. All under mpi_lock.
typedef enum { J_SUM, J_BCAST, J_BARRIER, J_RSCATTER, J_GATHERV } JobKind;
#define WINDOW 2
typedef struct Job {
    JobKind kind;
    MPI_Comm comm;
    MPI_Datatype type;
    size_t esize;
    char *buf[2];
    size_t n[2], chunk, total; // elements per segment, per piece, in all
    int root, max;             // J_BCAST: the root; J_SUM: the maximum instead of the sum
    const float *send;         // J_RSCATTER
    size_t *counts, *displs;   // J_RSCATTER, J_GATHERV: the caller's layout (J_RSCATTER: offsets)
    int nranks, rank, staged;  // of the layout; staged: J_GATHERV through the stage
    size_t per;                // elements of each member's block per piece
    int *pc, *pd;              // the pieces in flight: counts, displacements (WINDOW x nranks)
    float *stage;              // the pieces' packed blocks (WINDOW x per x nranks), when used
    size_t at[WINDOW];         // the pieces' offset in every member's block
    int seg;                   // the next piece: segment and offset
    size_t off, issued;        // elements started so far
    MPI_Request req[WINDOW];   // FIFO of pieces in flight
    double due[WINDOW];        // LOOM_COMM_DELAY: a piece does not complete before this
    int head, inflight, all_issued, done, rc;
    long pieces_done, pieces;
    double t0, delay, progress; // start; emulated link time; when a piece last completed
    struct Job *next;
} Job;
static Job *jobs; // the jobs not collected yet, in the order they were started

static void track(MPI_Request *r) {
    if (npending == cap_pending) {
        cap_pending = cap_pending ? 2 * cap_pending : 64;
        MPI_Request **grown = realloc(pending, (size_t)cap_pending * sizeof *pending);
        if (!grown) die(EXIT_IO, "out of memory for %d MPI requests", cap_pending);
        pending = grown;
    }
    pending[npending++] = r;
    atomic_fetch_add(&outstanding, 1);
}

static void untrack(MPI_Request *r) {
    for (int i = 0; i < npending; i++)
        if (pending[i] == r) {
            pending[i] = pending[--npending];
            atomic_fetch_sub(&outstanding, 1);
            return;
        }
}

int comm_outstanding(void) { return atomic_load(&outstanding); }

Comm *comm_world(int *argc, char ***argv) { // MPI only when launched by mpirun, srun or PMIx
    if (mpi_on || !(getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK")))
        return &world;
    int provided, flag = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    thread_level = provided;
    mpi_on = 1;
    MPI_Comm *h = xmalloc(sizeof *h);
    *h = MPI_COMM_WORLD;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    world.handle = h;
    MPI_Comm_rank(MPI_COMM_WORLD, &world.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world.size);
    int *ub = NULL;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    if (flag && ub && *ub > 0) tag_ub = *ub;
    // the test hooks are read once, here, before any other thread can
    (void)comm_tag_ub(), (void)comm_chunk_limit(), (void)comm_link_delay(0);
    return &world;
}

int comm_distributed(void) { return mpi_on && world.size > 1; }

void comm_library_version(char *out, size_t n) { // allowed before MPI_Init (and without mpirun)
    char v[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    snprintf(out, n, "%.*s", MPI_Get_library_version(v, &len) == MPI_SUCCESS ? len : 0, v);
}

// The tag of heartbeats: MPI_TAG_UB (or the lower LOOM_TAG_UB); other messages stay below.
static int hb_tag(void) {
    static int fake = -1;
    if (fake < 0) fake = testhook_tag_ub();
    return fake > 0 && fake < tag_ub ? fake : tag_ub;
}
int comm_tag_ub(void) { return hb_tag() - 1; }

int comm_threads_ok(void) {
    return mpi_on && world.size > 1 && thread_level >= MPI_THREAD_SERIALIZED;
}

void comm_finalize(void) {
    comm_busy_end();
    comm_stop_progress_thread();
    if (mpi_on) MPI_Finalize();
    mpi_on = 0;
}

// MPI is SERIALIZED, so MPI_Abort is called holding mpi_lock: no other thread is inside MPI.
// The threads that take the lock hold it only for non-blocking calls; if it stays taken
// anyway (a thread stuck inside MPI), this rank exits without MPI_Abort and mpirun ends the
// job when it sees a rank exit non-zero.
void comm_abort(int code, const char *msg) {
    fprintf(stderr, "loom[rank %d]: %s\n", world.rank, msg);
    fflush(stderr);
    if (!mpi_on) exit(code);
    atomic_store(&comm_progress_on, 0); // the thread stops at its next wake-up
    if (!lock_held) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 5;
        if (pthread_mutex_timedlock(&mpi_lock, &dl)) {
            fprintf(stderr, "loom[rank %d]: MPI is busy in another thread; exiting\n", world.rank);
            _Exit(code);
        }
        lock_held = 1;
    }
    MPI_Abort(MPI_COMM_WORLD, code);
    _Exit(code);
}

Comm *comm_split(const Comm *parent, int color, int key, const char *name) {
    Comm *c = xcalloc(1, sizeof *c);
    c->name = name;
    if (!parent->handle) {
        c->size = 1;
        return c;
    }
    MPI_Comm *h = xmalloc(sizeof *h);
    LOCK();
    MPI_Comm_split(*(MPI_Comm *)parent->handle, color < 0 ? MPI_UNDEFINED : color, key, h);
    if (*h == MPI_COMM_NULL) { // not a member
        UNLOCK();
        free(h);
        c->size = 0;
        return c;
    }
    MPI_Comm_rank(*h, &c->rank);
    MPI_Comm_size(*h, &c->size);
    UNLOCK();
    c->handle = h;
    return c;
}

static MPI_Comm H(const Comm *c) { return *(MPI_Comm *)c->handle; }

static CommReq done_req(const Comm *c, const char *op) {
    return (CommReq){.handle = NULL, .op = op, .comm = c, .contributors = c ? c->size : 1};
}

static int check(int rc, const char *op, const Comm *c) {
    if (rc == MPI_SUCCESS) return 0;
    char msg[MPI_MAX_ERROR_STRING + 256], err[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, err, &len);
    snprintf(msg, sizeof msg, "%s on %s communicator failed at step %d (%s): %s", op, c->name,
             comm_ctx_step, comm_ctx_what, err);
    return comm_op_failed(6, msg);
}

// The world ranks of c's first n members (under mpi_lock).
static void world_ranks_locked(const Comm *c, int *out, int n) {
    MPI_Group g, wg;
    MPI_Comm_group(H(c), &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    for (int i = 0; i < n; i++)
        MPI_Group_translate_ranks(g, 1, &i, wg, &out[i]);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
}

int comm_req_members(const CommReq *r, int *world_ranks, int max) {
    const Comm *c = r->comm;
    int n = r->contributors < max ? r->contributors : max;
    if (!c || !c->handle) {
        if (n > 0) world_ranks[0] = world.rank;
        return n;
    }
    LOCK();
    world_ranks_locked(c, world_ranks, n); // every member contributes to an MPI collective
    UNLOCK();
    return n;
}

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
        if (j->kind == J_RSCATTER) memcpy(stage + used, j->send + j->displs[r] + at, len * 4);
        used += len;
    }
    j->at[k] = at;
    size_t mine = j->counts[j->rank], off = at < mine ? at : mine;
    if (j->kind == J_RSCATTER)
        return MPI_Ireduce_scatter(stage, buf + off, pc, MPI_FLOAT, MPI_SUM, j->comm, q);
    if (!stage)
        return MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, pc, pd, MPI_FLOAT, j->comm,
                               q);
    return MPI_Iallgatherv(buf + j->displs[j->rank] + off, pc[j->rank], MPI_FLOAT, stage, pc, pd,
                           MPI_FLOAT, j->comm, q);
}

// A staged all-gather's piece in slot k has landed: the other members' blocks to their place.
static void layout_unpack(Job *j, int k) {
    size_t n = (size_t)j->nranks;
    const int *pc = j->pc + (size_t)k * n, *pd = j->pd + (size_t)k * n;
    const float *stage = j->stage + (size_t)k * j->per * n;
    for (size_t r = 0; r < n; r++)
        if ((int)r != j->rank)
            memcpy((float *)j->buf[0] + j->displs[r] + j->at[k], stage + pd[r],
                   (size_t)pc[r] * sizeof(float));
}

// Starts the next piece of j into slot k; *len = the elements it covers.
static int issue_piece(Job *j, int k, size_t *len) {
    MPI_Request *q = &j->req[k];
    *len = 1;
    if (j->kind == J_BARRIER) return MPI_Ibarrier(j->comm, q);
    if (j->kind == J_RSCATTER || j->kind == J_GATHERV) return layout_piece(j, k, j->issued, q);
    while (j->off >= j->n[j->seg])
        j->seg++, j->off = 0;
    size_t rest = j->n[j->seg] - j->off;
    *len = rest < j->chunk ? rest : j->chunk;
    void *p = j->buf[j->seg] + j->off * j->esize;
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
        if ((j->rc = MPI_Test(&j->req[k], &flag, MPI_STATUS_IGNORE)) || !flag) return;
        if (j->due[k] > 0 && now_sec() < j->due[k]) return; // the emulated link is still busy
        if (j->staged) layout_unpack(j, k);
        j->head = (k + 1) % WINDOW, j->inflight--, j->pieces_done++, j->progress = now_sec();
    }
}

// Advances every queued job. A job that has not started yet is waiting on the jobs before it
// on its communicator, so it counts their progress as its own.
static void advance_all(void) {
    for (Job *j = jobs; j; j = j->next) {
        const Job *prev = NULL; // the latest earlier job on the same communicator
        for (const Job *p = jobs; p != j; p = p->next)
            if (p->comm == j->comm) prev = p;
        if (prev && !j->issued && prev->progress > j->progress) j->progress = prev->progress;
        job_advance(j, !prev || prev->all_issued);
    }
}

static CommReq submit(const Comm *c, const char *op, Job *j) {
    j->comm = H(c);
    j->t0 = j->progress = now_sec();
    if (!j->chunk) j->chunk = 1;
    j->total = j->n[0] + j->n[1];
    j->pieces = (long)((j->n[0] + j->chunk - 1) / j->chunk + (j->n[1] + j->chunk - 1) / j->chunk);
    CommReq r = {.handle = j, .chunked = 1, .op = op, .comm = c, .started = j->t0};
    LOCK();
    Job **t = &jobs;
    while (*t)
        t = &(*t)->next;
    *t = j;
    atomic_fetch_add(&outstanding, 1);
    advance_all();
    UNLOCK();
    return r;
}

static CommReq submit_sum(const Comm *c, const char *op, void *b0, size_t n0, void *b1, size_t n1,
                          size_t chunk, int how, double delay) { // how: f32 sum, f64 sum, f32 max
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
    return submit(c, op, j);
}

CommReq comm_iallreduce(const Comm *c, float *buf, size_t n) {
    if (c->size == 1 || n == 0) return done_req(c, "allreduce");
    return submit_sum(c, "allreduce", buf, n, NULL, 0, 0, 0, comm_link_delay(n));
}

CommReq comm_iallreduce_max(const Comm *c, float *buf, size_t n) {
    if (c->size == 1 || n == 0) return done_req(c, "allreduce(max)");
    return submit_sum(c, "allreduce(max)", buf, n, NULL, 0, 0, 2, 0);
}

CommReq comm_iallreduce_chunked(const Comm *c, float *b0, size_t n0, float *b1, size_t n1,
                                size_t chunk) {
    if (!b0) n0 = 0;
    if (!b1) n1 = 0;
    if (!c || c->size <= 1 || n0 + n1 == 0) return done_req(c, "allreduce (chunked)");
    return submit_sum(c, "allreduce (chunked)", b0, n0, b1, n1, chunk, 0, 0);
}

CommReq comm_iallreduce_f64(const Comm *c, double *buf, int n) {
    if (c->size <= 1 || n <= 0) return done_req(c, "allreduce(f64)");
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
    if (c->size == 1) {
        if (send != recv) memcpy(recv, send, counts[0] * sizeof(float));
        return done_req(c, "reduce_scatter");
    }
    size_t total;
    Job *j = layout_job(c, J_RSCATTER, counts, NULL, &total);
    j->send = send, j->buf[0] = (char *)recv, j->delay = comm_link_delay(total);
    return submit(c, "reduce_scatter", j);
}

CommReq comm_iallgatherv(const Comm *c, float *buf, const size_t *counts, const size_t *displs) {
    if (c->size == 1) return done_req(c, "allgather");
    size_t total;
    Job *j = layout_job(c, J_GATHERV, counts, displs, &total);
    j->buf[0] = (char *)buf, j->delay = comm_link_delay(total);
    return submit(c, "allgather", j);
}

void comm_broadcast(const Comm *c, void *buf, size_t bytes, int root) {
    if (c->size == 1 || bytes == 0) return;
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

CommReq comm_p2p(const Comm *c, const float *buf, size_t n, int peer, int tag, int send) {
    const char *op = send ? "send" : "recv";
    if (n > (size_t)2147483647) die(EXIT_USAGE, "%s: %zu elements exceeds MPI's int count", op, n);
    if (tag < 0 || tag > comm_tag_ub())
        die(EXIT_USAGE, "%s: tag %d outside [0, %d] (MPI_TAG_UB)", op, tag, comm_tag_ub());
    CommReq r = {.handle = xmalloc(sizeof(MPI_Request)), .op = op, .comm = c, .started = now_sec()};
    *(MPI_Request *)r.handle = MPI_REQUEST_NULL;
    LOCK();
    int rc = send ? MPI_Isend(buf, (int)n, MPI_FLOAT, peer, tag, H(c), r.handle)
                  : MPI_Irecv((float *)buf, (int)n, MPI_FLOAT, peer, tag, H(c), r.handle);
    track(r.handle);
    UNLOCK();
    check(rc, op, c);
    return r;
}
// A job: advance the queue; once this one is done, unlink and free it.
static int test_job(CommReq *r, CommProgress *pr) {
    Job *j = r->handle;
    LOCK();
    advance_all();
    int done = j->done, rc = j->rc;
    if (pr) *pr = (CommProgress){j->progress, j->pieces_done, j->pieces};
    if (done || rc) {
        Job **t = &jobs;
        while (*t != j)
            t = &(*t)->next;
        *t = j->next;
        atomic_fetch_sub(&outstanding, 1);
    }
    UNLOCK();
    int bad = check(rc, r->op, r->comm);
    if (!done && !bad) return 0;
    free(j->counts), free(j->displs), free(j->pc), free(j->pd), free(j->stage), free(j);
    r->handle = NULL, r->chunked = 0;
    r->status = bad, r->contributors = bad ? 0 : r->comm->size;
    return 1;
}

int comm_test_progress(CommReq *r, CommProgress *pr) {
    if (!r->handle) return 1;
    if (r->chunked) return test_job(r, pr);
    if (pr) *pr = (CommProgress){r->started, 0, 1}; // no progress is visible inside a message
    int flag = 0;
    LOCK();
    int rc = MPI_Test(r->handle, &flag, MPI_STATUS_IGNORE);
    UNLOCK();
    int bad = check(rc, r->op, r->comm);
    if (flag || bad) {
        LOCK();
        untrack(r->handle);
        UNLOCK();
        free(r->handle);
        r->handle = NULL;
        r->status = bad, r->contributors = bad ? 0 : r->comm->size;
    }
    return flag || bad;
}

// Names the world ranks of a communicator's other members, e.g. "1 2 3".
void comm_other_members(const Comm *c, char *out, size_t n) {
    out[0] = 0;
    if (!c || !c->handle || !TRYLOCK()) return; // another thread is stuck inside MPI
    int *w = xmalloc((size_t)c->size * sizeof *w);
    world_ranks_locked(c, w, c->size);
    UNLOCK();
    size_t used = 0;
    for (int i = 0; i < c->size && used + 16 < n; i++)
        if (i != c->rank)
            used += (size_t)snprintf(out + used, n - used, "%s%d", used ? " " : "", w[i]);
    free(w);
}

// Heartbeats: one int on tag hb_tag() of the communicator itself (point-to-point messages
// never match collectives), sent and dropped (MPI_Request_free; the int is never written).
static const int hb_token;
void comm_heartbeats_send(const Comm *c) {
    if (!mpi_on || !c || !c->handle || c->size < 2 || thread_level < MPI_THREAD_SERIALIZED) return;
    LOCK();
    for (int q = 0; q < c->size; q++) {
        MPI_Request rq;
        if (q != c->rank && MPI_Isend(&hb_token, 1, MPI_INT, q, hb_tag(), H(c), &rq) == 0)
            MPI_Request_free(&rq);
    }
    UNLOCK();
}

int comm_heartbeats_recv(const Comm *c) {
    if (!mpi_on || !c || !c->handle || c->size < 2 || !TRYLOCK()) return 0;
    int n = 0, flag = 0, tok;
    MPI_Status st;
    while (MPI_Iprobe(MPI_ANY_SOURCE, hb_tag(), H(c), &flag, &st) == MPI_SUCCESS && flag) {
        MPI_Recv(&tok, 1, MPI_INT, st.MPI_SOURCE, hb_tag(), H(c), MPI_STATUS_IGNORE);
        n++;
    }
    UNLOCK();
    return n;
}

void comm_progress(void) {
    if (!atomic_load(&outstanding) || !TRYLOCK()) return; // nothing to do, or the thread has it
    progress_locked();
    UNLOCK();
}

static void progress_locked(void) {
    // Jobs start their next pieces; then one MPI_Test on a live point-to-point request runs
    // Open MPI's progress for all (completed ones become MPI_REQUEST_NULL: comm_test sees it).
    advance_all();
    for (int i = 0; i < npending; i++) {
        if (*pending[i] == MPI_REQUEST_NULL) continue;
        int flag;
        MPI_Test(pending[i], &flag, MPI_STATUS_IGNORE);
        return;
    }
}
