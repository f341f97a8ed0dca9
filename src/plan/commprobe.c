// commprobe.c — timing the job's all-reduce and point-to-point links (see commprobe.h).
#include "commprobe.h"

#include <stdlib.h>
#include <time.h>

#include "../common.h"

static double median3(double a, double b, double c) {
    return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}

// Seconds for one round trip of n floats between ranks 0 and 1 (others idle).
static double round_trip(const Comm *w, float *buf, size_t n) {
    comm_barrier(w);
    double t0 = now_sec();
    if (w->rank == 0) {
        CommReq s = comm_isend(w, buf, n, 1, 7), r;
        comm_wait(&s);
        r = comm_irecv(w, buf, n, 1, 8);
        comm_wait(&r);
    } else if (w->rank == 1) {
        CommReq r = comm_irecv(w, buf, n, 0, 7), s;
        comm_wait(&r);
        s = comm_isend(w, buf, n, 0, 8);
        comm_wait(&s);
    }
    return now_sec() - t0;
}

int comm_probe(const Comm *world, double bytes, CommProbe *out) {
    if (world->size < 2) return -1;
    size_t n = (size_t)(bytes / 4), small = n / 4 > 0 ? n / 4 : 1;
    float *buf = xalloc_floats(n);
    double t[3];
    comm_set_context(-1, "measuring the links (loom plan)");
    // latency: round trips of one float (the first warms the connection up)
    round_trip(world, buf, 1);
    for (int i = 0; i < 3; i++)
        t[i] = round_trip(world, buf, 1);
    out->latency = median3(t[0], t[1], t[2]) / 2;
    for (int i = 0; i < 3; i++)
        t[i] = round_trip(world, buf, small);
    double one_way = median3(t[0], t[1], t[2]) / 2 - out->latency;
    out->p2p_bw = small * 4.0 / (one_way > 1e-9 ? one_way : 1e-9);
    comm_allreduce(world, buf, n); // warm-up
    double cpu = 0;
    for (int i = 0; i < 3; i++) {
        comm_barrier(world);
        double t0 = now_sec(), c0 = process_cpu_sec();
        // wait as training does: the progress thread (or a poll every millisecond) moves the
        // data, so the CPU time is the transfer's, not a spinning wait's
        CommReq r = comm_iallreduce(world, buf, n);
        struct timespec ms = {0, 1000000};
        while (!comm_test(&r))
            nanosleep(&ms, NULL);
        t[i] = now_sec() - t0;
        cpu += process_cpu_sec() - c0;
    }
    double ar = median3(t[0], t[1], t[2]);
    int N = world->size;
    out->allreduce_bw = 2.0 * (N - 1) / N * n * 4.0 / ar;
    out->cpu_per_byte = cpu / (3 * 4.0 * (N - 1) / N * n * 4.0); // sent + received per rank
    // every rank adopts rank 0's numbers
    double v[4] = {out->latency, out->p2p_bw, out->allreduce_bw, out->cpu_per_byte};
    comm_broadcast(world, v, sizeof v, 0);
    out->latency = v[0], out->p2p_bw = v[1], out->allreduce_bw = v[2], out->cpu_per_byte = v[3];
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    out->local = local && atoi(local) == N;
    free(buf);
    return 0;
}
