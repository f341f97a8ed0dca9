// test_comm.c — the communication layer (src/parallel/comm*.c). Single process: pipeline tags
// stay within a small MPI_TAG_UB (LOOM_TAG_UB). Then, when mpirun is installed, the program
// runs itself on 2 ranks (LOOM_COMM_CHUNK=1000 floats per piece, LOOM_COMM_DELAY=2 s per
// collective of ≥ 4096 floats) and checks there:
//   * all-reduce, broadcast, reduce-scatter and all-gather in pieces (ragged last pieces, two
//     segments, unequal blocks; an all-gather over a layout wider than an int, staged);
//   * collectives started in one order and waited in the reverse order (the queue);
//   * an all-reduce cut at given offsets sends each range between them in its own pieces;
//   * a collective that takes twice the timeout but keeps completing pieces is not killed;
//   * 600 outstanding point-to-point requests are all tracked (the table grows) and land;
//   * a heartbeat (busy section) on one rank keeps the other's barrier alive past the
//     timeout, and with no heartbeat the watchdog fires.
// LOOM_TEST_BIG=1 adds a broadcast of more than INT_MAX bytes (4 GiB of memory in all).
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../src/parallel/comm_impl.h"
#include "../src/parallel/pipeline_impl.h"
#include "test.h"

TEST(tags_within_tag_ub) {
    int ub = comm_tag_ub(); // LOOM_TAG_UB=100: heartbeats on 100, messages at most 99
    CHECK(ub == 99, "comm_tag_ub %d", ub);
    int r = tag_range(), bad = 0;
    CHECK(r >= 16 && 3 * r - 1 <= ub, "tag range %d", r);
    for (int g = 0; g < 1000000; g++)
        for (int b = 0; b < 2; b++) {
            int t = tag_of(g, b), v = val_tag(g);
            bad += t < 0 || t > ub || v < 0 || v > ub || t >= val_tag(0);
            bad += g < r && g > 0 && tag_of(g, b) == tag_of(0, b); // distinct within a range
        }
    CHECK(bad == 0, "%d tags out of range or colliding", bad);
}

// ---- the part run under mpirun -np 2
static const Comm *W;
static int failures;
static void on_failure(void *ctx, int code, const char *msg) {
    (void)ctx, (void)code;
    failures++;
    fprintf(stderr, "  rank %d: failure reported (one is provoked on purpose): %s\n", W->rank, msg);
}
static void nap(double s) {
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&t, NULL);
}
// Every rank's CHECKs must hold: the outcome is agreed with an all-reduce.
static void agree(void) {
    double f = test_cur_failed;
    comm_allreduce_f64(W, &f, 1);
    test_cur_failed = f > 0;
}

TEST(allreduce_in_pieces_slow_link) {
    comm_set_timeout(1.0); // LOOM_COMM_DELAY=2: the 11 pieces take 2 s, ~0.2 s apart
    failures = 0;
    size_t n = 10007;
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(i % 7) + (float)W->rank;
    double t0 = now_sec();
    CommReq r = comm_iallreduce(W, x, n);
    CHECK(comm_wait(&r) == 0 && r.contributors == 2, "status %d", r.status);
    CHECK(now_sec() - t0 > 1.5, "the emulated link took %.2f s", now_sec() - t0);
    CHECK(failures == 0, "the watchdog fired on a progressing all-reduce");
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += x[i] != (float)(2 * (i % 7) + 1);
    CHECK(bad == 0, "%d wrong sums", bad);
    free(x);
    comm_set_timeout(30);
    agree();
}

TEST(queue_order_and_broadcast) {
    float *a = malloc(5000 * sizeof *a), *b0 = malloc(3001 * sizeof *b0), g[1000];
    float *b1 = malloc(2999 * sizeof *b1);
    double d[3] = {1, 2, W->rank};
    for (int i = 0; i < 5000; i++)
        a[i] = (float)i;
    for (int i = 0; i < 3001; i++)
        b0[i] = 1;
    for (int i = 0; i < 2999; i++)
        b1[i] = (float)W->rank;
    for (int i = 0; i < 1000; i++)
        g[i] = i / 500 == W->rank ? (float)i : -1;
    size_t counts[2] = {500, 500}, displs[2] = {0, 500};
    CommReq r[4] = {comm_iallreduce(W, a, 5000), comm_iallreduce_f64(W, d, 3),
                    comm_iallreduce_chunked(W, b0, 3001, b1, 2999, 700),
                    comm_iallgatherv(W, g, counts, displs)};
    for (int k = 3; k >= 0; k--)
        CHECK(comm_wait(&r[k]) == 0, "request %d", k);
    int bad = 0;
    for (int i = 0; i < 5000; i++)
        bad += a[i] != 2.0f * (float)i;
    for (int i = 0; i < 3001; i++)
        bad += b0[i] != 2;
    for (int i = 0; i < 2999; i++)
        bad += b1[i] != 1;
    for (int i = 0; i < 1000; i++)
        bad += g[i] != (float)i;
    bad += d[0] != 2 || d[1] != 4 || d[2] != 1;
    CHECK(bad == 0, "%d wrong values", bad);
    char bytes[10001];
    for (int i = 0; i < 10001; i++)
        bytes[i] = W->rank == 1 ? (char)(i * 31) : 0;
    comm_broadcast(W, bytes, sizeof bytes, 1); // 3 pieces of 4000 bytes
    bad = 0;
    for (int i = 0; i < 10001; i++)
        bad += bytes[i] != (char)(i * 31);
    CHECK(bad == 0, "broadcast: %d wrong bytes", bad);
    CHECK(comm_outstanding() == 0, "%d left outstanding", comm_outstanding());
    free(a), free(b0), free(b1);
    agree();
}

// An all-reduce cut at offsets (a pipeline stage's block ends): each range between cuts goes in
// chunks from its own start. Queued behind a slow one, it reports its pieces before it starts:
// [0,700) 600+100, [700,1500) 600+200, [1500,3001) 600+600+301, then b1's 500 = 8 (uncut: 6);
// the cuts outside (0, n0) or not ascending are ignored.
TEST(allreduce_cut_at_offsets) {
    size_t n = 5000, cut[5] = {700, 600, 1500, 1500, 3001};
    float *x = calloc(n, sizeof *x), *b0 = malloc(3001 * sizeof *b0), b1[500];
    for (int i = 0; i < 3001; i++)
        b0[i] = (float)(i + W->rank);
    for (int i = 0; i < 500; i++)
        b1[i] = (float)W->rank;
    CommReq slow = comm_iallreduce(W, x, n); // 2 s on the emulated link
    CommReq r = comm_iallreduce_cut(W, b0, 3001, cut, 5, b1, 500, 600);
    CommProgress pr = {0};
    CHECK(!comm_test_progress(&r, &pr) && pr.pieces == 8, "%ld pieces, want 8", pr.pieces);
    CHECK(comm_wait(&slow) == 0 && comm_wait(&r) == 0, "status %d", r.status);
    int bad = 0;
    for (int i = 0; i < 3001; i++)
        bad += b0[i] != (float)(2 * i + 1);
    for (int i = 0; i < 500; i++)
        bad += b1[i] != 1;
    CHECK(bad == 0, "%d wrong sums", bad);
    free(x), free(b0);
    agree();
}

TEST(layouts_in_pieces) { // 1000 elements a piece: 500 per member, 3 pieces of unequal blocks
    size_t counts[2] = {1300, 900}, displs[2] = {0, 1300};
    int mine = (int)counts[W->rank];
    float send[2200], recv[1300], g[2300];
    for (int i = 0; i < 2200; i++)
        send[i] = (float)(i + W->rank);
    for (int i = 0; i < 2300; i++)
        g[i] = -1;
    size_t gc[2] = {1500, 700}, gd[2] = {0, 1600}; // a gap the all-gather leaves alone
    for (size_t i = 0; i < gc[W->rank]; i++)
        g[gd[W->rank] + i] = (float)(gd[W->rank] + i);
    CommReq rs = comm_ireduce_scatter(W, send, recv, counts);
    CommReq ag = comm_iallgatherv(W, g, gc, gd);
    CHECK(comm_wait(&ag) == 0 && comm_wait(&rs) == 0, "status");
    int bad = 0;
    for (int i = 0; i < mine; i++)
        bad += recv[i] != (float)(2 * (displs[W->rank] + (size_t)i) + 1);
    for (int i = 0; i < 2300; i++)
        bad += g[i] != (i >= 1500 && i < 1600 ? -1 : (float)i);
    CHECK(bad == 0, "%d wrong values", bad);
    agree();
}

TEST(many_point_to_point_requests) {
    enum { N = 300, LEN = 4 };
    static float out[N][LEN], in[N][LEN];
    static CommReq s[N], q[N];
    int peer = 1 - W->rank, base = comm_outstanding();
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < LEN; k++)
            out[i][k] = (float)(W->rank * 100000 + i * LEN + k);
        q[i] = comm_irecv(W, in[i], LEN, peer, i % 50);
        s[i] = comm_isend(W, out[i], LEN, peer, i % 50);
    }
    CHECK(comm_outstanding() - base == 2 * N, "tracked %d of %d", comm_outstanding() - base, 2 * N);
    int bad = 0;
    for (int i = N - 1; i >= 0; i--) {
        bad += comm_wait(&q[i]) != 0 || comm_wait(&s[i]) != 0;
        for (int k = 0; k < LEN; k++)
            bad += in[i][k] != (float)(peer * 100000 + i * LEN + k);
    }
    CHECK(bad == 0, "%d wrong messages", bad);
    CHECK(comm_outstanding() == base, "%d left", comm_outstanding() - base);
    agree();
}

TEST(heartbeats_and_watchdog) {
    comm_set_timeout(1.0);
    failures = 0;
    if (W->rank == 0) { // busy for 2.5 s: rank 1's barrier hears it working
        comm_busy_begin(W);
        nap(2.5);
        comm_busy_end();
    }
    comm_barrier(W);
    CHECK(failures == 0, "the watchdog fired while the peer was busy");
    if (W->rank == 0) nap(2.5); // not busy: rank 1's barrier makes no progress
    comm_barrier(W);
    CHECK(W->rank == 0 || failures == 1, "rank 1: %d watchdog reports", failures);
    comm_set_timeout(30);
    if (W->rank == 1) nap(0.5); // rank 1 gave its barrier up; rank 0's completed
    agree();
}

// Opt-in (LOOM_TEST_BIG=1: 2 x 2 GiB of memory): a broadcast of more than INT_MAX bytes moves
// as pieces whose counts fit an int (it used to die: "exceeds MPI's int count").
TEST(broadcast_over_int_max_bytes) {
    size_t n = (size_t)2147483647 + 4097, at[4] = {0, 2147483646, 2147483647, n - 1};
    char *b = calloc(n, 1); // untouched pages stay unallocated zeros
    CHECK(b != NULL, "no memory for %zu bytes", n);
    if (!b) return;
    for (int i = 0; i < 4 && W->rank == 0; i++)
        b[at[i]] = (char)(i + 1);
    comm_broadcast(W, b, n, 0);
    for (int i = 0; i < 4; i++)
        CHECK(b[at[i]] == (char)(i + 1), "byte %zu: %d", at[i], b[at[i]]);
    free(b);
    agree();
}

static int run_mpi_part(int argc, char **argv) {
    W = comm_world(&argc, &argv);
    if (W->size != 2) return fprintf(stderr, "needs 2 ranks\n"), 1;
    if (W->rank != 0 && !freopen("/dev/null", "w", stdout)) return 1; // one report
    comm_set_failure_handler(on_failure, NULL);
    comm_start_progress_thread(1e-3);
    comm_set_timeout(30);
    if (getenv("LOOM_TEST_BIG")) {
        RUN(broadcast_over_int_max_bytes);
        comm_finalize();
        return test_summary();
    }
    RUN(allreduce_in_pieces_slow_link);
    RUN(queue_order_and_broadcast);
    RUN(allreduce_cut_at_offsets);
    RUN(layouts_in_pieces);
    comm_set_int_limit(1000); // as if MPI's int displacements could not span these layouts
    RUN(layouts_in_pieces);
    comm_set_int_limit(2147483647);
    RUN(many_point_to_point_requests);
    RUN(heartbeats_and_watchdog);
    comm_finalize();
    return test_summary();
}

int main(int argc, char **argv) {
    setenv("LOOM_TAG_UB", "100", 1);
    if (getenv("OMPI_COMM_WORLD_SIZE")) return run_mpi_part(argc, argv);
    RUN(tags_within_tag_ub);
    if (system("command -v mpirun > /dev/null 2>&1") != 0) {
        printf("skip - mpi part (no mpirun)\n");
        return test_summary();
    }
    int rc = test_mpirun_self(2, "-u LOOM_TEST_BIG LOOM_COMM_CHUNK=1000 LOOM_COMM_DELAY=2",
                              "LOOM_TAG_UB", 120);
    if (rc != 0) {
        printf("FAIL - mpi part: mpirun exited with %d\n", rc);
        return 1;
    }
    if (getenv("LOOM_TEST_BIG") && // the default pieces (4 MiB)
        (rc = test_mpirun_self(2, "", "LOOM_TEST_BIG LOOM_TAG_UB", 300)) != 0)
        printf("FAIL - big part: mpirun exited with %d\n", rc);
    return rc ? 1 : test_summary();
}
