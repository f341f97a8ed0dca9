// comm.c — MPI behind comm.h: requests are tracked so comm_progress (and the progress
// thread) can drive them, and every wait runs under the watchdog.
//
// Threading: MPI is initialised MPI_THREAD_SERIALIZED and every MPI call made here holds
// mpi_lock, so the progress thread and the training thread never call MPI at the same time.
#include "comm.h"

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common.h"
#include "../testhooks.h"

static Comm world = {.handle = NULL, .rank = 0, .size = 1, .name = "world"};
static int mpi_on;
static double timeout_s = 300.0;
static int ctx_step = -1;
static const char *ctx_what = "startup";

// Outstanding requests, polled by comm_progress.
#define MAX_PENDING 256
static MPI_Request *pending[MAX_PENDING];
static int npending;

static pthread_mutex_t mpi_lock = PTHREAD_MUTEX_INITIALIZER;
#define LOCK() pthread_mutex_lock(&mpi_lock)
#define UNLOCK() pthread_mutex_unlock(&mpi_lock)
static int thread_level; // what MPI_Init_thread provided
static pthread_t progress_tid;
static volatile int progress_on;
static double progress_interval = 1e-3;
static void progress_locked(void);

// A chunked all-reduce in progress (comm_iallreduce_chunked); all fields under mpi_lock.
#define CHUNK_WINDOW 2
typedef struct ChunkJob {
    MPI_Comm comm;
    float *buf[2];
    size_t n[2], chunk;
    int seg; // the next chunk to start: segment and offset
    size_t off;
    MPI_Request req[CHUNK_WINDOW]; // FIFO of chunks in flight
    int head, inflight, done, rc;
    struct ChunkJob *next;
} ChunkJob;
static ChunkJob *jobs; // the jobs not finished yet, oldest first
static void job_advance(ChunkJob *j);

static void track(MPI_Request *r) {
    for (int i = 0; i < npending; i++)
        if (pending[i] == r) return;
    if (npending < MAX_PENDING) pending[npending++] = r;
}

static void untrack(MPI_Request *r) {
    for (int i = 0; i < npending; i++)
        if (pending[i] == r) {
            pending[i] = pending[--npending];
            return;
        }
}

// Launched by mpirun, or by srun/another PMIx launcher?
static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

Comm *comm_world(int *argc, char ***argv) {
    if (mpi_on || !launched_by_mpi()) return &world;
    int provided;
    MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    thread_level = provided;
    mpi_on = 1;
    MPI_Comm *h = xmalloc(sizeof *h);
    *h = MPI_COMM_WORLD;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    world.handle = h;
    MPI_Comm_rank(MPI_COMM_WORLD, &world.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world.size);
    return &world;
}

int comm_distributed(void) { return mpi_on && world.size > 1; }

// The progress thread: every `progress_interval` seconds, while non-blocking operations are
// outstanding, one MPI_Test drives Open MPI's progress engine (which otherwise runs only inside
// MPI calls), so transfers keep moving through long kernels that never reach a poll hook.
static void *progress_main(void *arg) {
    (void)arg;
    struct timespec nap = {0, (long)(progress_interval * 1e9)};
    while (progress_on) {
        nanosleep(&nap, NULL);
        if ((!npending && !jobs) || pthread_mutex_trylock(&mpi_lock)) continue; // idle, or busy
        progress_locked();
        UNLOCK();
    }
    return NULL;
}

int comm_start_progress_thread(double interval_s) {
    if (!mpi_on || world.size == 1 || progress_on) return progress_on;
    if (thread_level < MPI_THREAD_SERIALIZED) return 0;
    if (interval_s > 0) progress_interval = interval_s;
    progress_on = 1;
    if (pthread_create(&progress_tid, NULL, progress_main, NULL)) progress_on = 0;
    return progress_on;
}

static void stop_progress_thread(void) {
    if (!progress_on) return;
    progress_on = 0;
    pthread_join(progress_tid, NULL);
}

void comm_finalize(void) {
    stop_progress_thread();
    if (mpi_on) MPI_Finalize();
    mpi_on = 0;
}

void comm_abort(int code, const char *msg) {
    fprintf(stderr, "loom[rank %d]: %s\n", world.rank, msg);
    fflush(stderr);
    progress_on = 0; // the thread may hold the lock; MPI_Abort ends every rank regardless
    if (mpi_on) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
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

void comm_set_timeout(double seconds) { timeout_s = seconds; }
void comm_set_context(int step, const char *what) {
    ctx_step = step;
    ctx_what = what;
}

static MPI_Comm H(const Comm *c) { return *(MPI_Comm *)c->handle; }

// Test hook LOOM_COMM_DELAY (testhooks.h): an emulated slow link, without using any CPU, for
// measuring how much communication a strategy hides.
static double comm_delay = -1;
static double delay_for(size_t n) {
    if (comm_delay < 0) comm_delay = testhook_comm_delay();
    return n >= 4096 ? comm_delay : 0;
}

static CommReq new_req(const Comm *c, const char *op) {
    CommReq r = {.handle = xmalloc(sizeof(MPI_Request)), .op = op, .comm = c, .started = now_sec()};
    *(MPI_Request *)r.handle = MPI_REQUEST_NULL;
    return r;
}

static CommReq done_req(const Comm *c, const char *op) {
    CommReq r = {.handle = NULL, .op = op, .comm = c, .contributors = c ? c->size : 1};
    return r;
}

static CommFailureFn fail_fn;
static void *fail_ctx;

void comm_set_failure_handler(CommFailureFn fn, void *ctx) {
    fail_fn = fn;
    fail_ctx = ctx;
}

// An operation failed: the handler hears it (and, over MPI, ends the job); -1 if it returns.
static int op_failed(int code, const char *msg) {
    if (!fail_fn) comm_abort(code, msg);
    fail_fn(fail_ctx, code, msg);
    loom_fail("%s", msg);
    return -1;
}

static int check(int rc, const char *op, const Comm *c) {
    if (rc == MPI_SUCCESS) return 0;
    char msg[MPI_MAX_ERROR_STRING + 256], err[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, err, &len);
    snprintf(msg, sizeof msg, "%s on %s communicator failed at step %d (%s): %s", op, c->name,
             ctx_step, ctx_what, err);
    return op_failed(6, msg);
}

int comm_req_members(const CommReq *r, int *world_ranks, int max) {
    const Comm *c = r->comm;
    int n = r->contributors < max ? r->contributors : max;
    if (!c || !c->handle) {
        if (n > 0) world_ranks[0] = world.rank;
        return n;
    }
    LOCK();
    MPI_Group g, wg;
    MPI_Comm_group(H(c), &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    for (int i = 0; i < n; i++) // every member contributes to a completed MPI collective
        MPI_Group_translate_ranks(g, 1, &i, wg, &world_ranks[i]);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    UNLOCK();
    return n;
}

static void check_count(size_t n, const char *op) {
    if (n > (size_t)2147483647) die(EXIT_USAGE, "%s: %zu elements exceeds MPI's int count", op, n);
}

CommReq comm_iallreduce(const Comm *c, float *buf, size_t n) {
    if (c->size == 1 || n == 0) return done_req(c, "allreduce");
    check_count(n, "allreduce");
    CommReq r = new_req(c, "allreduce");
    r.not_before = r.started + delay_for(n);
    LOCK();
    check(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, H(c), r.handle),
          "allreduce", c);
    track(r.handle);
    UNLOCK();
    return r;
}

CommReq comm_iallreduce_chunked(const Comm *c, float *b0, size_t n0, float *b1, size_t n1,
                                size_t chunk) {
    if (!b0) n0 = 0;
    if (!b1) n1 = 0;
    if (!c || c->size <= 1 || n0 + n1 == 0) return done_req(c, "allreduce (chunked)");
    check_count(chunk, "allreduce (chunked)");
    ChunkJob *j = xcalloc(1, sizeof *j);
    *j = (ChunkJob){.comm = H(c), .buf = {b0, b1}, .n = {n0, n1}, .chunk = chunk ? chunk : 1};
    CommReq r = {
        .handle = j, .chunked = 1, .op = "allreduce (chunked)", .comm = c, .started = now_sec()};
    LOCK();
    ChunkJob **t = &jobs;
    while (*t)
        t = &(*t)->next;
    *t = j;
    job_advance(j);
    UNLOCK();
    return r;
}

int comm_allreduce(const Comm *c, float *buf, size_t n) {
    CommReq r = comm_iallreduce(c, buf, n);
    return comm_wait(&r);
}

CommReq comm_iallreduce_f64(const Comm *c, double *buf, int n) {
    if (c->size <= 1) return done_req(c, "allreduce(f64)");
    CommReq r = new_req(c, "allreduce(f64)");
    LOCK();
    check(MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, H(c), r.handle),
          "allreduce(f64)", c);
    track(r.handle);
    UNLOCK();
    return r;
}

int comm_allreduce_f64(const Comm *c, double *buf, int n) {
    CommReq r = comm_iallreduce_f64(c, buf, n);
    return comm_wait(&r);
}

CommReq comm_ireduce_scatter(const Comm *c, const float *send, float *recv, const int *counts) {
    if (c->size == 1) {
        if (send != recv) memcpy(recv, send, (size_t)counts[0] * sizeof(float));
        return done_req(c, "reduce_scatter");
    }
    CommReq r = new_req(c, "reduce_scatter");
    size_t total = 0;
    for (int q = 0; q < c->size; q++)
        total += (size_t)counts[q];
    r.not_before = r.started + delay_for(total);
    LOCK();
    check(MPI_Ireduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, H(c), r.handle),
          "reduce_scatter", c);
    track(r.handle);
    UNLOCK();
    return r;
}

CommReq comm_iallgatherv(const Comm *c, float *buf, const int *counts, const int *displs) {
    if (c->size == 1) return done_req(c, "allgather");
    CommReq r = new_req(c, "allgather");
    size_t total = 0;
    for (int q = 0; q < c->size; q++)
        total += (size_t)counts[q];
    r.not_before = r.started + delay_for(total);
    LOCK();
    check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, H(c),
                          r.handle),
          "allgather", c);
    track(r.handle);
    UNLOCK();
    return r;
}

int comm_allgatherv(const Comm *c, float *buf, const int *counts, const int *displs) {
    CommReq r = comm_iallgatherv(c, buf, counts, displs);
    return comm_wait(&r);
}

void comm_broadcast(const Comm *c, void *buf, size_t bytes, int root) {
    if (c->size == 1) return;
    check_count(bytes, "broadcast");
    CommReq r = new_req(c, "broadcast");
    LOCK();
    check(MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, H(c), r.handle), "broadcast", c);
    track(r.handle);
    UNLOCK();
    comm_wait(&r);
}

void comm_barrier(const Comm *c) {
    if (c->size == 1) return;
    CommReq r = new_req(c, "barrier");
    LOCK();
    check(MPI_Ibarrier(H(c), r.handle), "barrier", c);
    track(r.handle);
    UNLOCK();
    comm_wait(&r);
}

CommReq comm_isend(const Comm *c, const float *buf, size_t n, int peer, int tag) {
    check_count(n, "send");
    CommReq r = new_req(c, "send");
    LOCK();
    check(MPI_Isend(buf, (int)n, MPI_FLOAT, peer, tag, H(c), r.handle), "send", c);
    track(r.handle);
    UNLOCK();
    return r;
}

CommReq comm_irecv(const Comm *c, float *buf, size_t n, int peer, int tag) {
    check_count(n, "recv");
    CommReq r = new_req(c, "recv");
    LOCK();
    check(MPI_Irecv(buf, (int)n, MPI_FLOAT, peer, tag, H(c), r.handle), "recv", c);
    track(r.handle);
    UNLOCK();
    return r;
}

static void finish(CommReq *r) {
    untrack(r->handle);
    free(r->handle);
    r->handle = NULL;
}

// A chunked job: advance it; once done, unlink and free it.
static int test_job(CommReq *r) {
    ChunkJob *j = r->handle;
    LOCK();
    job_advance(j);
    int done = j->done, rc = j->rc;
    if (done || rc) {
        ChunkJob **t = &jobs;
        while (*t != j)
            t = &(*t)->next;
        *t = j->next;
    }
    UNLOCK();
    int bad = check(rc, r->op, r->comm);
    if (!done && !bad) return 0;
    free(j);
    r->handle = NULL, r->chunked = 0;
    r->status = bad, r->contributors = bad ? 0 : r->comm->size;
    return 1;
}

int comm_test(CommReq *r) {
    if (!r->handle) return 1;
    if (r->chunked) return test_job(r);
    int flag = 0;
    LOCK();
    int rc = MPI_Test(r->handle, &flag, MPI_STATUS_IGNORE);
    UNLOCK();
    int bad = check(rc, r->op, r->comm);
    if (!bad && flag && r->not_before > 0 && now_sec() < r->not_before) {
        // data has arrived; the emulated link is still "busy" (request is now MPI_REQUEST_NULL)
        return 0;
    }
    if (flag || bad) {
        LOCK();
        finish(r);
        UNLOCK();
        r->status = bad, r->contributors = bad ? 0 : r->comm->size;
    }
    return flag || bad;
}

// Names the world ranks of a communicator's members, e.g. "0 1 2 3".
static void peer_list(const Comm *c, char *out, size_t n) {
    out[0] = 0;
    if (!c->handle) return;
    if (pthread_mutex_trylock(&mpi_lock)) return; // the progress thread is stuck inside MPI
    MPI_Group g, wg;
    MPI_Comm_group(H(c), &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    size_t used = 0;
    for (int i = 0; i < c->size && used + 16 < n; i++) {
        int w;
        MPI_Group_translate_ranks(g, 1, &i, wg, &w);
        used += (size_t)snprintf(out + used, n - used, "%s%d", i ? " " : "", w);
    }
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    UNLOCK();
}

static int watchdog_fire(const CommReq *r, double waited) {
    char msg[1024], peers[512];
    peer_list(r->comm, peers, sizeof peers);
    snprintf(msg, sizeof msg,
             "watchdog: waited %.0f s for %s on the %s communicator (peers: world ranks %s) at "
             "step %d (%s); a peer is dead or stuck. Aborting the job (--comm-timeout %.0f).",
             waited, r->op, r->comm->name, peers, ctx_step, ctx_what, timeout_s);
    return op_failed(7, msg);
}

static void (*wait_hook)(void *);
static void *wait_hook_ctx;
static int in_wait_hook;
void comm_set_wait_hook(void (*fn)(void *ctx), void *ctx) {
    wait_hook = fn;
    wait_hook_ctx = ctx;
}

int comm_wait(CommReq *r) {
    if (!r->handle) return r->status;
    struct timespec nap = {0, 200000}; // 0.2 ms between polls
    for (long polls = 0;; polls++) {
        if (comm_test(r)) return r->status;
        comm_progress();
        if (wait_hook && !in_wait_hook) {
            in_wait_hook = 1;
            wait_hook(wait_hook_ctx);
            in_wait_hook = 0;
        }
        double waited = now_sec() - r->started;
        if (timeout_s > 0 && waited > timeout_s && watchdog_fire(r, waited))
            return r->status = -1; // the handler returned: the operation is given up
        if (polls > 50) nanosleep(&nap, NULL);
    }
}

double comm_wait_timed(CommReq *r) {
    if (!r->handle) return 0;
    double t0 = now_sec();
    comm_wait(r);
    return now_sec() - t0;
}

void comm_progress(void) {
    if ((!npending && !jobs) || pthread_mutex_trylock(&mpi_lock)) return; // the thread has it
    progress_locked();
    UNLOCK();
}

// Starts a job's chunks up to the window and retires the ones that landed (under mpi_lock).
static void job_advance(ChunkJob *j) {
    while (!j->done && !j->rc) {
        while (j->inflight < CHUNK_WINDOW && j->seg < 2) {
            if (j->off >= j->n[j->seg]) {
                j->seg++, j->off = 0;
                continue;
            }
            size_t len = j->n[j->seg] - j->off < j->chunk ? j->n[j->seg] - j->off : j->chunk;
            MPI_Request *q = &j->req[(j->head + j->inflight) % CHUNK_WINDOW];
            j->rc = MPI_Iallreduce(MPI_IN_PLACE, j->buf[j->seg] + j->off, (int)len, MPI_FLOAT,
                                   MPI_SUM, j->comm, q);
            if (j->rc) return;
            j->off += len, j->inflight++;
        }
        if (!j->inflight) {
            j->done = 1;
            return;
        }
        int flag = 0;
        j->rc = MPI_Test(&j->req[j->head], &flag, MPI_STATUS_IGNORE);
        if (j->rc || !flag) return;
        j->head = (j->head + 1) % CHUNK_WINDOW, j->inflight--;
    }
}

static void progress_locked(void) {
    // Chunked all-reduces issue their next chunks; then one MPI_Test on a live request runs
    // Open MPI's progress engine for all of them. Completed requests become
    // MPI_REQUEST_NULL; their owner's comm_test sees them done.
    for (ChunkJob *j = jobs; j; j = j->next)
        job_advance(j);
    for (int i = 0; i < npending; i++) {
        if (*pending[i] == MPI_REQUEST_NULL) continue;
        int flag;
        MPI_Test(pending[i], &flag, MPI_STATUS_IGNORE);
        return;
    }
}
