// test_devcoll.c — collectives between devices (src/parallel/comm_devcoll.c and the device path
// of comm_jobs.c), without a GPU: a stand-in for the collective library (the Backend's coll_*
// ops over MPI, defined here) on the emu device's buffers (the host cannot read them: each op
// downloads what it sends and uploads what arrives, and completes when its MPI request does).
// What is checked is comm's side of the contract NCCL has under the CUDA backend:
//   * single process, --device-comm nccl's mode 1: a one-member communicator still runs every
//     operation through the library (no size-1 shortcut), with the values unchanged;
//   * 3 ranks (LOOM_COMM_CHUNK=1000): all-reduce (sum, max, f64, two segments cut at offsets),
//     reduce-scatter and all-gather over uneven layouts with a gap, and a broadcast of bytes
//     give the right values with every piece on the library (the calls are counted: one sum or
//     broadcast a piece, a group of a reduce to or a broadcast from each member a layout's
//     piece) and none on MPI; host buffers still go over MPI; a device communicator opens for
//     a communicator split later too; an asynchronous error of the library fails the operation
//     naming it and the library, and an op that never completes fires the watchdog;
//     comm_dc_abort_all ends every open communicator;
//   * auto (mode -1) with one rank that may not use the library, or with two ranks on one
//     device: every rank keeps host stages; mode 1 then fails on every rank, naming why.
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/backend/backend.h"
#include "../src/common.h"
#include "../src/parallel/comm_impl.h"
#include "test.h"

// ---- the stand-in library
typedef struct {
    uint64_t ticket;
    MPI_Request req;
    void *host, *dev; // the op's host copy, and where it lands on the device (NULL: nowhere)
    void *tmp;        // a second host copy the op reads (a reduce's send), freed with it
    size_t bytes;
} Op;
typedef struct {
    MPI_Comm comm; // MPI_COMM_NULL with one member
    int n, rank, in_group;
    uint64_t next, done;
    Op *ops; // in flight, in order
    size_t nops, cap;
} Fake;

static Backend fake;
static const Backend *emu;
static int calls_sum, calls_bcast, calls_reduce, groups, opened, aborted, fail_next, unusable;
static int stall; // the library's ops never complete (a peer that is gone)
static MPI_Comm parent_of_next = MPI_COMM_NULL; // which MPI communicator the next open joins

static int f_usable(void) { return unusable ? loom_fail("this rank may not (test)") : 0; }
static int sharing; // ranks 1 and 2 name one device
static const Comm *W;
static void f_device(char *key, size_t n) {
    snprintf(key, n, "stand-in device %d", sharing && W->rank == 2 ? 1 : W->rank);
}
static int f_id(unsigned char *id) {
    memset(id, 7, COLL_ID_BYTES);
    return 0;
}
static void *f_open(const unsigned char *id, int n, int rank) {
    Fake *f = xcalloc(1, sizeof *f);
    f->n = n, f->rank = rank, f->next = 1, f->comm = MPI_COMM_NULL;
    if (n > 1 && id[0] == 7) MPI_Comm_dup(parent_of_next, &f->comm);
    opened++;
    return f;
}
static MPI_Datatype mtype(int dtype) {
    return dtype == COLL_F64 ? MPI_DOUBLE : dtype == COLL_BYTES ? MPI_BYTE : MPI_FLOAT;
}
static size_t esize(int dtype) { return dtype == COLL_F64 ? 8 : dtype == COLL_BYTES ? 1 : 4; }
static uint64_t ticket_of(Fake *f) { return f->in_group ? 0 : f->next++; }
static Op *push(Fake *f, void *host, void *dev, size_t bytes) {
    f->ops = xgrow(f->ops, f->nops, &f->cap, 8, sizeof *f->ops);
    Op *o = &f->ops[f->nops++];
    *o = (Op){.ticket = f->next,
              .req = MPI_REQUEST_NULL,
              .host = host,
              .dev = dev,
              .bytes = bytes}; // in a group f->next is the ticket f_group_end returns
    return o;
}
static void *down(const void *dev, size_t bytes) { // emu's copies take either side, any bytes
    void *h = xmalloc(bytes ? bytes : 1);
    emu->copy_wait(emu->copy_async(h, dev, bytes));
    return h;
}
static uint64_t fences, unfenced; // fences made; ops (and groups) queued without one
static uint64_t f_fence(void) { return ++fences; }
static void fenced(const Fake *f, uint64_t fence) { unfenced += !f->in_group && !fence; }
static uint64_t f_allreduce(void *c, uint64_t fence, void *buf, size_t n, int dtype, int op) {
    Fake *f = c;
    fenced(f, fence);
    calls_sum++;
    void *h = down(buf, n * esize(dtype));
    Op *o = push(f, h, buf, n * esize(dtype));
    if (f->n > 1)
        MPI_Iallreduce(MPI_IN_PLACE, h, (int)n, mtype(dtype), op == COLL_MAX ? MPI_MAX : MPI_SUM,
                       f->comm, &o->req);
    return ticket_of(f);
}
static uint64_t f_bcast(void *c, uint64_t fence, void *buf, size_t n, int dtype, int root) {
    Fake *f = c;
    fenced(f, fence);
    calls_bcast++;
    void *h = down(buf, n * esize(dtype));
    Op *o = push(f, h, f->rank == root ? NULL : buf, n * esize(dtype));
    if (f->n > 1) MPI_Ibcast(h, (int)n, mtype(dtype), root, f->comm, &o->req);
    return ticket_of(f);
}
static uint64_t f_reduce(void *c, const float *send, float *recv, size_t n, int root) {
    Fake *f = c;
    calls_reduce++;
    void *h = down(send, n * 4), *out = f->rank == root ? xmalloc(n * 4) : NULL;
    Op *o = push(f, out, out ? recv : NULL, n * 4);
    o->tmp = h;
    if (f->n > 1)
        MPI_Ireduce(h, out, (int)n, MPI_FLOAT, MPI_SUM, root, f->comm, &o->req);
    else if (out)
        memcpy(out, h, n * 4);
    return ticket_of(f);
}
static void f_group_begin(void *c, uint64_t fence) {
    fenced(c, fence);
    ((Fake *)c)->in_group = 1, groups++;
}
static uint64_t f_group_end(void *c) {
    Fake *f = c;
    f->in_group = 0;
    return f->next++;
}
static int f_test(void *c, uint64_t t) {
    Fake *f = c;
    if (stall) return 0;
    if (fail_next) {
        fail_next = 0;
        return loom_fail("stand-in library: asynchronous error (provoked)");
    }
    while (f->nops && f->ops[0].ticket <= t) {
        Op *o = &f->ops[0];
        int flag = 1;
        if (o->req != MPI_REQUEST_NULL) MPI_Test(&o->req, &flag, MPI_STATUS_IGNORE);
        if (!flag) return 0;
        if (o->dev) emu->copy_wait(emu->copy_async(o->dev, o->host, o->bytes));
        free(o->host), free(o->tmp);
        memmove(f->ops, f->ops + 1, --f->nops * sizeof *f->ops);
    }
    return 1;
}
static void f_abort(void *c) {
    (void)c;
    aborted++;
}
static void f_close(void *c) {
    Fake *f = c;
    if (f->comm != MPI_COMM_NULL) MPI_Comm_free(&f->comm);
    free(f->ops), free(f);
}

static void fake_install(void) {
    emu = backend_emu();
    fake = *emu;
    fake.coll_name = "stand-in";
    fake.coll_usable = f_usable, fake.coll_device = f_device, fake.coll_id = f_id;
    fake.coll_open = f_open;
    fake.coll_fence = f_fence, fake.coll_allreduce = f_allreduce, fake.coll_bcast = f_bcast;
    fake.coll_reduce = f_reduce;
    fake.coll_group_begin = f_group_begin, fake.coll_group_end = f_group_end;
    fake.coll_test = f_test, fake.coll_abort = f_abort, fake.coll_close = f_close;
    comm_set_backend(&fake);
}

// ---- helpers on device buffers
static float *dev_of(const float *x, size_t n) {
    float *d = emu->alloc(n);
    emu->upload(d, x, n);
    return d;
}
static float *host_of(const float *d, size_t n) {
    float *h = xmalloc(n * sizeof *h);
    emu->download(h, d, n);
    return h;
}
static int failures;
static char last_failure[2048];
static void on_failure(void *ctx, int code, const char *msg) {
    (void)ctx, (void)code;
    failures++;
    snprintf(last_failure, sizeof last_failure, "%s", msg);
}
static void agree(void) {
    double f = test_cur_failed;
    comm_allreduce_f64(W, &f, 1);
    test_cur_failed = f > 0;
}
static void zero_calls(void) { calls_sum = calls_bcast = calls_reduce = groups = 0; }

// ---- one process: every operation still goes through the library
TEST(single_member) {
    const char *engine = NULL;
    CHECK(comm_device_collectives(1, &engine) == 0 && !strcmp(engine, "stand-in") && W->dc,
          "mode 1 on one process: %s", loom_errmsg());
    float x[2500], send[700];
    for (int i = 0; i < 2500; i++)
        x[i] = (float)i;
    for (int i = 0; i < 700; i++)
        send[i] = (float)(3 * i);
    float *d = dev_of(x, 2500), *ds = dev_of(send, 700), *dr = emu->alloc(700);
    zero_calls();
    CHECK(comm_allreduce(W, d, 2500) == 0, "allreduce");
    size_t cnt[1] = {700}, dsp[1] = {0};
    CommReq rs = comm_ireduce_scatter(W, ds, dr, cnt), ag = comm_iallgatherv(W, d, cnt, dsp);
    CHECK(comm_wait(&rs) == 0 && comm_wait(&ag) == 0, "layouts");
    CHECK(calls_sum == 3 && calls_reduce == 1 && calls_bcast == 1,
          "one member: %d sums (3 pieces), %d reduces, %d broadcasts", calls_sum, calls_reduce,
          calls_bcast);
    float *hx = host_of(d, 2500), *hr = host_of(dr, 700);
    int bad = 0;
    for (int i = 0; i < 2500; i++)
        bad += hx[i] != (float)i;
    for (int i = 0; i < 700; i++)
        bad += hr[i] != (float)(3 * i);
    CHECK(bad == 0, "%d wrong values", bad);
    float h[4] = {1, 2, 3, 4};
    CHECK(comm_allreduce(W, h, 4) == 0 && calls_sum == 3, "a host buffer: nothing to move");
    free(hx), free(hr);
    emu->release(d), emu->release(ds), emu->release(dr);
    comm_dc_close_all();
}

// ---- under mpirun -np 3
TEST(sums_on_the_library) {
    int r = W->rank;
    size_t n = 2500; // 3 pieces of at most 1000
    float *x = xmalloc(n * sizeof *x), *b1 = xmalloc(900 * sizeof *b1);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(i % 11) + (float)r;
    for (int i = 0; i < 900; i++)
        b1[i] = (float)(r * i);
    float *d = dev_of(x, n), *m = dev_of(x, n), *c0 = dev_of(x, n), *db1 = dev_of(b1, 900);
    double f[3] = {0.5, (double)r, 0.25};
    float *df = emu->alloc(6); // 3 doubles
    emu->copy_wait(emu->copy_async(df, f, sizeof f));
    uint64_t f0 = fences;
    zero_calls();
    size_t cut[1] = {1200};
    CommReq q[4] = {comm_iallreduce(W, d, n), comm_iallreduce_max(W, m, n),
                    comm_iallreduce_f64(W, (double *)df, 3),
                    comm_iallreduce_cut(W, c0, n, cut, 1, db1, 900, 600)};
    for (int k = 3; k >= 0; k--)
        CHECK(comm_wait(&q[k]) == 0, "request %d: %s", k, last_failure);
    // 3 + 3 + 1 + ([0,1200): 2, [1200,2500): 3, b1: 2) pieces
    CHECK(calls_sum == 14 && calls_bcast == 0 && calls_reduce == 0, "%d sums, want 14", calls_sum);
    // one fence a collective, made when it starts, that every one of its pieces waits for
    CHECK(fences - f0 == 4 && unfenced == 0, "%llu fences for 4 collectives, %llu ops without",
          (unsigned long long)(fences - f0), (unsigned long long)unfenced);
    float *hd = host_of(d, n), *hm = host_of(m, n), *hc = host_of(c0, n);
    float *hb = host_of(db1, 900);
    double hf[3];
    emu->copy_wait(emu->copy_async(hf, df, sizeof hf));
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += hd[i] != (float)(3 * (i % 11) + 3) || hm[i] != (float)(i % 11) + 2 || hc[i] != hd[i];
    for (int i = 0; i < 900; i++)
        bad += hb[i] != (float)(3 * i);
    bad += hf[0] != 1.5 || hf[1] != 3 || hf[2] != 0.75;
    CHECK(bad == 0, "%d wrong values", bad);
    float h[3] = {1, 2, (float)r};
    int before = calls_sum;
    CHECK(comm_allreduce(W, h, 3) == 0 && h[2] == 3 && calls_sum == before,
          "a host buffer goes over MPI");
    free(x), free(b1), free(hd), free(hm), free(hc), free(hb);
    emu->release(d), emu->release(m), emu->release(c0), emu->release(db1), emu->release(df);
    agree();
}

TEST(uneven_layouts_and_broadcast) {
    int r = W->rank;
    size_t counts[3] = {1300, 900, 400}, displs[3] = {0, 1300, 2200}; // 2600: 3 pieces of 333
    float send[2600];
    for (int i = 0; i < 2600; i++)
        send[i] = (float)(i + r);
    size_t gc[3] = {1500, 700, 50}, gd[3] = {0, 1600, 2300}; // gaps the all-gather leaves alone
    float g[2400];
    for (int i = 0; i < 2400; i++)
        g[i] = -1;
    for (size_t i = 0; i < gc[r]; i++)
        g[gd[r] + i] = (float)(gd[r] + i);
    float *ds = dev_of(send, 2600), *dr = emu->alloc(1300), *dg = dev_of(g, 2400);
    zero_calls();
    CommReq rs = comm_ireduce_scatter(W, ds, dr, counts), ag = comm_iallgatherv(W, dg, gc, gd);
    CHECK(comm_wait(&ag) == 0 && comm_wait(&rs) == 0, "status: %s", last_failure);
    // a piece is 1000 / 3 = 333 of each block: the scatter's 1300 in 4 pieces, the gather's
    // 1500 in 5; each piece one group of a reduce (broadcast) per member with elements left in
    // it: 3 + 3 + 2 + 1 reduces, 3 + 2 + 2 + 1 + 1 broadcasts
    int want_r = 9, want_b = 9;
    CHECK(groups == 9 && calls_reduce == want_r && calls_bcast == want_b && calls_sum == 0,
          "%d groups, %d reduces (want %d), %d broadcasts (want %d)", groups, calls_reduce, want_r,
          calls_bcast, want_b);
    float *hr = host_of(dr, counts[r]), *hg = host_of(dg, 2400);
    int bad = 0;
    for (size_t i = 0; i < counts[r]; i++)
        bad += hr[i] != (float)(3 * (displs[r] + i) + 3);
    for (int i = 0; i < 2400; i++) {
        int gap = (i >= 1500 && i < 1600) || i >= 2350;
        bad += hg[i] != (gap ? -1.f : (float)i);
    }
    CHECK(bad == 0, "%d wrong values", bad);
    char bytes[5001];
    for (int i = 0; i < 5001; i++)
        bytes[i] = r == 1 ? (char)(i * 31) : 0;
    float *db = emu->alloc(1251);
    emu->copy_wait(emu->copy_async(db, bytes, sizeof bytes));
    zero_calls();
    comm_broadcast(W, db, sizeof bytes, 1); // 2 pieces of 4000 bytes
    emu->copy_wait(emu->copy_async(bytes, db, sizeof bytes));
    bad = 0;
    for (int i = 0; i < 5001; i++)
        bad += bytes[i] != (char)(i * 31);
    CHECK(bad == 0 && calls_bcast == 2, "broadcast: %d wrong bytes, %d calls", bad, calls_bcast);
    free(hr), free(hg);
    emu->release(ds), emu->release(dr), emu->release(dg), emu->release(db);
    agree();
}

TEST(split_later_and_failure) {
    MPI_Comm two;
    MPI_Comm_split(MPI_COMM_WORLD, W->rank < 2 ? 0 : MPI_UNDEFINED, W->rank, &two);
    parent_of_next = two;
    int before = opened;
    Comm *c = comm_split(W, W->rank < 2 ? 0 : -1, W->rank, "pair");
    CHECK(W->rank < 2 ? c->dc && opened == before + 1 : !c->dc && opened == before,
          "rank %d: a communicator split later: dc %p", W->rank, c->dc);
    if (W->rank < 2) {
        float x[10] = {0};
        x[0] = (float)W->rank + 1;
        float *d = dev_of(x, 10);
        zero_calls();
        CHECK(comm_allreduce(c, d, 10) == 0 && calls_sum == 1, "on the pair: %d sums", calls_sum);
        float *h = host_of(d, 10);
        CHECK(h[0] == 3, "pair sum %g", h[0]);
        // an asynchronous error: the operation fails, naming it, its communicator, the library
        failures = 0, fail_next = 1;
        CHECK(comm_allreduce(c, d, 10) == -1 && failures == 1 &&
                  strstr(last_failure, "allreduce on pair communicator (stand-in) failed") &&
                  strstr(last_failure, "asynchronous error (provoked)"),
              "failure: %d, '%s'", failures, last_failure);
        while (!f_test(c->dc, UINT64_MAX)) // the failed op's MPI request: both ranks finish it
            ;
        // an op that never completes: the watchdog fires on the library's pieces too
        comm_set_timeout(0.5);
        failures = 0, stall = 1;
        CHECK(comm_allreduce(c, d, 10) == -1 && failures == 1 && strstr(last_failure, "watchdog") &&
                  strstr(last_failure, "allreduce on the pair"),
              "a stalled op: %d failures, '%s'", failures, last_failure);
        stall = 0;
        comm_set_timeout(60);
        while (!f_test(c->dc, UINT64_MAX)) // its MPI request: both ranks finish it
            ;
        free(h);
        emu->release(d);
    }
    comm_dc_abort_all();
    CHECK(aborted == opened, "%d aborted of %d open", aborted, opened);
    agree();
}

// One rank may not use the library, then two share a device: auto keeps host stages on every
// rank, mode 1 fails on all.
TEST(ranks_that_may_not) {
    unusable = W->rank == 2;
    const char *engine = NULL;
    CHECK(comm_device_collectives(-1, &engine) == 0 && !strcmp(engine, "host stages") && !W->dc,
          "auto with a rank that may not: %s", engine ? engine : loom_errmsg());
    CHECK(comm_device_collectives(1, &engine) == -1 &&
              strstr(loom_errmsg(),
                     W->rank == 2 ? "this rank may not (test)" : "another rank cannot use it"),
          "mode 1 with a rank that may not: %s", loom_errmsg());
    unusable = 0, sharing = 1; // ranks 1 and 2 on one device: the same on every rank
    engine = NULL;
    CHECK(comm_device_collectives(-1, &engine) == 0 && !strcmp(engine, "host stages") && !W->dc,
          "auto with ranks sharing a device: %s", engine ? engine : loom_errmsg());
    CHECK(comm_device_collectives(1, &engine) == -1 &&
              strstr(loom_errmsg(), "ranks 1 and 2 share one device (stand-in device 1)"),
          "mode 1 with ranks sharing a device: %s", loom_errmsg());
    agree();
}

static int run_mpi_part(int argc, char **argv) {
    fake_install();
    W = comm_world(&argc, &argv);
    comm_set_failure_handler(on_failure, NULL);
    comm_set_timeout(60);
    if (getenv("DEVCOLL_AUTO")) {
        RUN(ranks_that_may_not);
        comm_finalize();
        return test_summary();
    }
    parent_of_next = MPI_COMM_WORLD;
    const char *engine = NULL;
    CHECK(comm_device_collectives(1, &engine) == 0 && W->dc && !strcmp(engine, "stand-in"),
          "mode 1 on 3 ranks: %s", loom_errmsg());
    RUN(sums_on_the_library);
    RUN(uneven_layouts_and_broadcast);
    RUN(split_later_and_failure);
    comm_finalize();
    return test_summary();
}

int main(int argc, char **argv) {
    if (getenv("OMPI_COMM_WORLD_SIZE")) return run_mpi_part(argc, argv);
    setenv("LOOM_COMM_CHUNK", "1000", 1); // (read at the first operation)
    fake_install();
    W = comm_world(&argc, &argv);
    RUN(single_member);
    if (system("command -v mpirun > /dev/null 2>&1") != 0) {
        printf("skip - mpi part (no mpirun)\n");
        return test_summary();
    }
    for (int auto_ = 0; auto_ < 2; auto_++) {
        int rc = test_mpirun_self(
            3, auto_ ? "LOOM_COMM_CHUNK=1000 DEVCOLL_AUTO=1" : "LOOM_COMM_CHUNK=1000", NULL, 120);
        if (rc != 0) {
            printf("FAIL - mpi part%s: mpirun exited with %d\n", auto_ ? " (auto)" : "", rc);
            return 1;
        }
    }
    return test_summary();
}
