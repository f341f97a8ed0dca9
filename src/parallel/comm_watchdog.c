// comm_watchdog.c — the MPI-free half of comm.h: failure reports, waits under the watchdog,
// the blocking forms, the progress thread, and busy sections with their heartbeats. The MPI
// side is comm.c, reached through comm_impl.h.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "../common.h"
#include "../testhooks.h"
#include "comm_impl.h"

double comm_timeout_s = 300.0;
int comm_ctx_step = -1;
const char *comm_ctx_what = "startup";

void comm_set_timeout(double seconds) { comm_timeout_s = seconds; }
void comm_set_context(int step, const char *what) {
    comm_ctx_step = step;
    comm_ctx_what = what;
}

static CommFailureFn fail_fn;
static void *fail_ctx;

void comm_set_failure_handler(CommFailureFn fn, void *ctx) {
    fail_fn = fn;
    fail_ctx = ctx;
}

int comm_op_failed(int code, const char *msg) {
    if (!fail_fn) comm_abort(code, msg);
    fail_fn(fail_ctx, code, msg);
    loom_fail("%s", msg);
    return -1;
}

// Test hook LOOM_COMM_DELAY (testhooks.h): an emulated slow link, without using any CPU, for
// measuring how much communication a strategy hides. A job's pieces complete no earlier than
// their share of the delay (a slow link that progresses).
static double comm_delay = -1;
double comm_link_delay(size_t n) {
    if (comm_delay < 0) comm_delay = testhook_comm_delay();
    return n >= 4096 ? comm_delay : 0;
}
// The most elements one piece of a collective moves (LOOM_COMM_CHUNK, ≤ INT_MAX).
size_t comm_chunk_limit(void) {
    static size_t lim;
    if (!lim) lim = testhook_comm_chunk();
    return lim < 1 ? 1 : lim > 2147483647 ? 2147483647 : lim;
}

static int watchdog_fire(const CommReq *r, double waited, double idle, const CommProgress *pr) {
    char msg[1024], peers[512], pieces[80] = "";
    comm_other_members(r->comm, peers, sizeof peers);
    if (pr->pieces > 1)
        snprintf(pieces, sizeof pieces, ", %ld of its %ld pieces done", pr->pieces_done,
                 pr->pieces);
    snprintf(msg, sizeof msg,
             "watchdog: waited %.0f s for %s on the %s communicator (no progress for %.0f s%s; "
             "waiting on world ranks %s) at step %d (%s); a peer is dead or stuck. Aborting the "
             "job (--comm-timeout %.0f).",
             waited, r->op, r->comm->name, idle, pieces, peers[0] ? peers : "?", comm_ctx_step,
             comm_ctx_what, comm_timeout_s);
    return comm_op_failed(7, msg);
}

// Blocking forms: the non-blocking operation and comm_wait.
int comm_allreduce(const Comm *c, float *buf, size_t n) {
    CommReq r = comm_iallreduce(c, buf, n);
    return comm_wait(&r);
}

int comm_allreduce_max(const Comm *c, float *buf, size_t n) {
    CommReq r = comm_iallreduce_max(c, buf, n);
    return comm_wait(&r);
}

int comm_allreduce_f64(const Comm *c, double *buf, int n) {
    CommReq r = comm_iallreduce_f64(c, buf, n);
    return comm_wait(&r);
}

int comm_allgatherv(const Comm *c, float *buf, const size_t *counts, const size_t *displs) {
    CommReq r = comm_iallgatherv(c, buf, counts, displs);
    return comm_wait(&r);
}
CommReq comm_isend(const Comm *c, const float *buf, size_t n, int peer, int tag) {
    return comm_p2p(c, buf, n, peer, tag, 1);
}
CommReq comm_irecv(const Comm *c, float *buf, size_t n, int peer, int tag) {
    return comm_p2p(c, buf, n, peer, tag, 0);
}
int comm_test(CommReq *r) { return comm_test_progress(r, NULL); }

static void (*wait_hook)(void *);
static void *wait_hook_ctx;
static int in_wait_hook;
void comm_set_wait_hook(void (*fn)(void *ctx), void *ctx) {
    wait_hook = fn;
    wait_hook_ctx = ctx;
}

// The deadline runs from the operation's last progress: its start, a piece of it completing
// (or of the jobs queued before it), or a heartbeat from a busy peer of its communicator.
int comm_wait(CommReq *r) {
    if (!r->handle) return r->status;
    struct timespec nap = {0, 200000}; // 0.2 ms between polls
    double heard = 0, next_listen = 0;
    for (long polls = 0;; polls++) {
        CommProgress pr;
        if (comm_test_progress(r, &pr)) return r->status;
        comm_progress();
        if (wait_hook && !in_wait_hook) {
            in_wait_hook = 1;
            wait_hook(wait_hook_ctx);
            in_wait_hook = 0;
        }
        double now = now_sec();
        if (now >= next_listen) { // heartbeats, every 10 ms
            if (comm_heartbeats_recv(r->comm)) heard = now;
            next_listen = now + 0.01;
        }
        double last = pr.progress > heard ? pr.progress : heard;
        if (comm_timeout_s > 0 && now - last > comm_timeout_s &&
            watchdog_fire(r, now - r->started, now - last, &pr))
            return r->status = -1; // the handler returned: the operation is given up
        if (polls > 50) nanosleep(&nap, NULL);
    }
}

double comm_wait_timed(CommReq *r, double *age) {
    if (age) *age = 0;
    if (!r->handle) return 0;
    double t0 = now_sec();
    if (age) *age = t0 - r->started;
    comm_wait(r);
    return now_sec() - t0;
}

// The progress thread: every `progress_interval` seconds, while operations are outstanding,
// comm_progress starts queued pieces and drives Open MPI's progress engine (which otherwise
// runs only inside MPI calls), so transfers keep moving through long kernels that never reach
// a poll hook.
atomic_int comm_progress_on;
static pthread_t progress_tid;
static double progress_interval = 1e-3;

static void *progress_main(void *arg) {
    (void)arg;
    thread_block_signals();
    struct timespec nap = {0, (long)(progress_interval * 1e9)};
    while (atomic_load(&comm_progress_on)) {
        nanosleep(&nap, NULL);
        comm_progress();
    }
    return NULL;
}

int comm_start_progress_thread(double interval_s) {
    if (atomic_load(&comm_progress_on) || !comm_threads_ok()) return atomic_load(&comm_progress_on);
    if (interval_s > 0) progress_interval = interval_s;
    atomic_store(&comm_progress_on, 1);
    if (pthread_create(&progress_tid, NULL, progress_main, NULL))
        atomic_store(&comm_progress_on, 0);
    return atomic_load(&comm_progress_on);
}

void comm_stop_progress_thread(void) {
    if (atomic_exchange(&comm_progress_on, 0)) pthread_join(progress_tid, NULL);
}

// Busy sections: a thread sends heartbeats every min(timeout/4, 1 s) until comm_busy_end.
static pthread_t hb_tid;
static atomic_int hb_on;
static const Comm *hb_comm;
static double hb_interval;

static void *hb_main(void *arg) {
    (void)arg;
    thread_block_signals();
    struct timespec nap = {0, 10000000}; // 10 ms: comm_busy_end never waits long
    double next = 0;
    while (atomic_load(&hb_on)) {
        if (now_sec() >= next) {
            comm_heartbeats_send(hb_comm);
            next = now_sec() + hb_interval;
        }
        nanosleep(&nap, NULL);
    }
    return NULL;
}

void comm_busy_begin(const Comm *c) {
    if (!c || !c->handle || c->size < 2 || atomic_load(&hb_on)) return;
    hb_comm = c;
    hb_interval = comm_timeout_s > 0 && comm_timeout_s < 4 ? comm_timeout_s / 4 : 1.0;
    atomic_store(&hb_on, 1);
    if (pthread_create(&hb_tid, NULL, hb_main, NULL)) atomic_store(&hb_on, 0);
}

void comm_busy_end(void) {
    if (atomic_exchange(&hb_on, 0)) pthread_join(hb_tid, NULL);
}

void comm_notify(const Comm *c) { comm_heartbeats_send(c); }
int comm_notified(const Comm *c) { return comm_heartbeats_recv(c); }
