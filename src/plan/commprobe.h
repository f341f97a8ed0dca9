// commprobe.h — measures the links between the ranks of this job (under mpirun), so the
// planner can use the transport the job really has instead of a nominal bandwidth: the bus
// bandwidth of a ring all-reduce over all ranks, and the latency and bandwidth of point-to-
// point messages between ranks 0 and 1. Collective: every rank calls it.
#pragma once
#include "../parallel/comm.h"

typedef struct {
    double allreduce_bw; // bytes/s as 2(n-1)/n * bytes / time (the ring's bus bandwidth)
    double p2p_bw;       // bytes/s, one direction
    double latency;      // seconds, one way
    double cpu_per_byte; // CPU seconds (all of this process's threads) per byte a rank sends or
                         // receives during the all-reduce
    int local;           // 1 when all ranks run on one machine (shared memory)
} CommProbe;

// Times an all-reduce of `bytes` and point-to-point messages of `bytes`/4 (median of three
// each). Returns 0 with *out filled on every rank, or -1 on a one-rank world.
int comm_probe(const Comm *world, double bytes, CommProbe *out);
