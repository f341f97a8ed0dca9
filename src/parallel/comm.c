// comm.c — MPI behind comm.h: start-up, communicators, the lock every MPI call holds, and the
// point-to-point side (tracked requests that comm_progress and the progress thread drive,
// heartbeats). Collectives are jobs on one queue (comm_jobs.c); the MPI-free half (waits,
// watchdog, threads, blocking forms) is comm_watchdog.c. MPI is MPI_THREAD_SERIALIZED and every
// MPI call made here holds mpi_lock: the progress, heartbeat and training threads never call
// MPI at the same time.
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common.h"
#include "../testhooks.h"
#include "comm_mpi.h"

static Comm world = {.handle = NULL, .rank = 0, .size = 1, .name = "world"};
static int mpi_on;
static int tag_ub = 32767; // MPI_TAG_UB once MPI is up (32767 is the guaranteed minimum)

// Outstanding point-to-point requests, polled by comm_progress (under mpi_lock; grows).
static MPI_Request **pending;
static int npending, cap_pending;
// Point-to-point requests and queued jobs not finished: the lock-free "anything to do?" check
// of the progress thread and comm_progress reads only this.
atomic_int comm_outstanding_ops;

static pthread_mutex_t mpi_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int lock_held; // this thread holds mpi_lock (comm_abort must not re-take)
#define LOCK() (pthread_mutex_lock(&mpi_lock), lock_held = 1)
#define TRYLOCK() (pthread_mutex_trylock(&mpi_lock) == 0 && (lock_held = 1))
#define UNLOCK() (lock_held = 0, pthread_mutex_unlock(&mpi_lock))
static int thread_level; // what MPI_Init_thread provided
static void progress_locked(void);
void comm_lock(void) { LOCK(); }
void comm_unlock(void) { UNLOCK(); }

static void track(MPI_Request *r) {
    if (npending == cap_pending) {
        cap_pending = cap_pending ? 2 * cap_pending : 64;
        MPI_Request **grown = realloc(pending, (size_t)cap_pending * sizeof *pending);
        if (!grown) die(EXIT_IO, "out of memory for %d MPI requests", cap_pending);
        pending = grown;
    }
    pending[npending++] = r;
    atomic_fetch_add(&comm_outstanding_ops, 1);
}

static void untrack(MPI_Request *r) {
    for (int i = 0; i < npending; i++)
        if (pending[i] == r) {
            pending[i] = pending[--npending];
            atomic_fetch_sub(&comm_outstanding_ops, 1);
            return;
        }
}

int comm_outstanding(void) { return atomic_load(&comm_outstanding_ops); }

Comm *comm_world(int *argc, char ***argv) { // MPI only when launched by mpirun, srun or PMIx
    static int registered;
    if (!registered) comm_dc_register(&world), registered = 1;
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
    comm_dc_close_all();
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
    comm_dc_abort_all(); // the device library's kernels may wait on the ranks that are gone
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
        comm_dc_register(c);
        return c;
    }
    MPI_Comm *h = xmalloc(sizeof *h);
    LOCK();
    MPI_Comm_split(*(MPI_Comm *)parent->handle, color < 0 ? MPI_UNDEFINED : color, key, h);
    if (*h == MPI_COMM_NULL) { // not a member
        UNLOCK();
        free(h);
        c->size = 0;
        comm_dc_register(c);
        return c;
    }
    MPI_Comm_rank(*h, &c->rank);
    MPI_Comm_size(*h, &c->size);
    UNLOCK();
    c->handle = h;
    comm_dc_register(c);
    return c;
}

int comm_check(int rc, const char *op, const Comm *c) {
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
    MPI_Comm_group(comm_h(c), &g);
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

// A point-to-point request (CommReq.handle; pending[] holds &req). A device buffer's message
// goes through a host copy: a send's is downloaded before it starts, a receive's uploaded to
// dev when it completes.
typedef struct {
    MPI_Request req;
    float *host, *dev; // the host copy of a device buffer; dev: a receive's destination
    size_t n;
} P2P;

CommReq comm_p2p(const Comm *c, const float *buf, size_t n, int peer, int tag, int send) {
    const char *op = send ? "send" : "recv";
    if (n > (size_t)2147483647) die(EXIT_USAGE, "%s: %zu elements exceeds MPI's int count", op, n);
    if (tag < 0 || tag > comm_tag_ub())
        die(EXIT_USAGE, "%s: tag %d outside [0, %d] (MPI_TAG_UB)", op, tag, comm_tag_ub());
    P2P *m = xcalloc(1, sizeof *m);
    CommReq r = {.handle = m, .op = op, .comm = c, .started = now_sec()};
    m->req = MPI_REQUEST_NULL, m->n = n;
    if (comm_dev(buf)) {
        m->host = comm_stage_alloc((n ? n : 1) * sizeof(float));
        if (send)
            comm_to_host(m->host, buf, n * sizeof(float));
        else
            m->dev = (float *)buf;
        buf = m->host;
    }
    LOCK();
    int rc = send ? MPI_Isend(buf, (int)n, MPI_FLOAT, peer, tag, comm_h(c), &m->req)
                  : MPI_Irecv((float *)buf, (int)n, MPI_FLOAT, peer, tag, comm_h(c), &m->req);
    track(&m->req);
    UNLOCK();
    comm_check(rc, op, c);
    return r;
}
int comm_test_progress(CommReq *r, CommProgress *pr) {
    if (!r->handle) return 1;
    if (r->chunked) return comm_job_test(r, pr);
    if (pr) *pr = (CommProgress){r->started, 0, 1}; // no progress is visible inside a message
    int flag = 0;
    P2P *m = r->handle;
    LOCK();
    int rc = MPI_Test(&m->req, &flag, MPI_STATUS_IGNORE);
    UNLOCK();
    int bad = comm_check(rc, r->op, r->comm);
    if (flag || bad) {
        LOCK();
        untrack(&m->req);
        UNLOCK();
        if (m->dev && !bad) comm_to_dev(m->dev, m->host, m->n * sizeof(float));
        comm_stage_free(m->host), free(m);
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
        if (q != c->rank && MPI_Isend(&hb_token, 1, MPI_INT, q, hb_tag(), comm_h(c), &rq) == 0)
            MPI_Request_free(&rq);
    }
    UNLOCK();
}

int comm_heartbeats_recv(const Comm *c) {
    if (!mpi_on || !c || !c->handle || c->size < 2 || !TRYLOCK()) return 0;
    int n = 0, flag = 0, tok;
    MPI_Status st;
    while (MPI_Iprobe(MPI_ANY_SOURCE, hb_tag(), comm_h(c), &flag, &st) == MPI_SUCCESS && flag) {
        MPI_Recv(&tok, 1, MPI_INT, st.MPI_SOURCE, hb_tag(), comm_h(c), MPI_STATUS_IGNORE);
        n++;
    }
    UNLOCK();
    return n;
}

void comm_progress(void) {
    if (!atomic_load(&comm_outstanding_ops) || !TRYLOCK())
        return; // nothing to do, or the thread has it
    progress_locked();
    UNLOCK();
}

static void progress_locked(void) {
    // Jobs start their next pieces; then one MPI_Test on a live point-to-point request runs
    // Open MPI's progress for all (completed ones become MPI_REQUEST_NULL: comm_test sees it).
    comm_jobs_advance();
    for (int i = 0; i < npending; i++) {
        if (*pending[i] == MPI_REQUEST_NULL) continue;
        int flag;
        MPI_Test(pending[i], &flag, MPI_STATUS_IGNORE);
        return;
    }
}
