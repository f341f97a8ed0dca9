// planner.h — picks data-parallel width w, pipeline depth d, tensor-parallel tp and context-
// parallel cp ranks, micro-batch b and recompute from a measured profile with the PipeDream-2BW
// cost model. Per plan:
//   CPU: a block's measured time is scaled by how busy the cores it shares are — alone it runs
//   at the profiled speed, with every core busy at the profile's `busy` factor; beyond one
//   rank per core the ranks time-share the cores, and the cores' total work per step (every
//   stage's compute and communication CPU) divided by the cores bounds the step;
//   links: ranks on one machine (--node-size) talk through shared memory, which is CPU work
//   and adds to compute; ranks on different machines talk over the network, which overlaps
//   compute (a progress thread drives it) except for its CPU cost per byte (measured);
//   d = 1 (data parallelism): a step is K micro-batches through the whole model; the gradient
//   all-reduce (ring: 2(w−1)/w · bytes) runs in buckets that start as the last micro-batch's
//   backward finishes their blocks, and whatever outlasts the backward is exposed;
//   tp, cp (with d = 1): each block's profiled time ÷ (tp·cp); tp's ranks are consecutive on
//   one machine (tp divides the heads and --node-size) and all-reduce 4 × (b,T/cp,C) per layer
//   and micro-batch (forward and backward, 1D) at the shared-memory bandwidth; the cp ring
//   (T divisible by 2·cp) passes each rank's K/V (b,T/cp,2C/tp) cp−1 hops forward and 2(cp−1)
//   in backward (the K/V again with their gradients) at the link's bandwidth; both block the
//   step (no overlap modelled); the gradient all-reduce is the tp part's, over w·cp ranks;
//   d > 1 (PipeDream-2BW, no flush): a step is K · max over stages of (stage compute + its
//   boundary transfers: b·T·C floats each way); the batch's reductions (the stage's
//   all-reduce over w replicas, the tied embedding's first ↔ last stage all-reduce) run in
//   the background during the next batch — over the network what outlasts it is exposed, and
//   while they run each activation the pipeline waits for queues behind up to two 1 MiB
//   chunks of them; over shared memory they take the same cores, so their time adds;
//   plus the optimizer update of the largest stage (measured per parameter);
//   memory per worker: what `loom train --dry-run` prints for the layout (layout_mem.h; ZeRO 0,
//   2BW when d > 1): weights, gradients, AdamW moments and the activations of the micro-batches
//   in flight on the fullest stage.
// Plans that do not fit the memory budget are discarded; the rest are sorted by throughput.
#pragma once
#include "profile.h"

typedef struct {
    int workers;             // ranks (w·d·tp·cp must equal it)
    double mem_bytes;        // memory per worker
    double bandwidth;        // between machines, bytes/s (all-reduce bus bandwidth, point-to-point)
    double intra_bandwidth;  // between ranks of one machine (shared memory), bytes/s
    double latency;          // per message, seconds
    double net_cpu_per_byte; // CPU seconds a rank spends per byte it sends or receives over the
                             // network (TCP stack, MPI progress, reductions)
    int node_size;           // ranks per machine (consecutive ranks; 1: each its own machine)
    int cpu_group;           // ranks sharing one set of cores (normally node_size)
    int cores;               // cores of that set (0: the profiled machine's)
    int global_batch;        // sequences per optimizer step (G)
    double bucket_bytes;     // data-parallel all-reduce bucket size (loom train --bucket-mb)
    const Backend *be;       // the backend the plan runs on (its activations); NULL: cpu
} PlanInput;

// Defaults: 1 Gbit/s between machines, 40 Gbit/s shared memory, 0.1 ms, 1 ns of CPU per
// network byte, one rank per machine.
void plan_input_defaults(PlanInput *in);

typedef struct {
    int w, d, b, K, recompute;
    int tp, cp;             // tensor-parallel (1D) and context-parallel ranks (d = 1 only)
    char stage_layers[128]; // layers per stage, e.g. "3,3"
    double step_s, tokens_per_s, mem_bytes;
    double compute_s;   // K micro-batches (× the slowest stage + its transfers when d > 1)
    double allreduce_s; // the step's reductions: gradients over w, the tied embedding when d > 1
    double exposed_s;   // the part of them the step waits for
    double update_s;    // the optimizer update of the largest stage
    double cpu_slow;    // the contention factor applied to the profiled times
    double tp_s, cp_s;  // of compute_s: tp's all-reduces, the cp ring's K/V transfers
} Plan;

// Evaluates one plan; returns 1 if it is valid and fits memory (out filled either way when
// valid), 0 otherwise.
int plan_evaluate(const Profile *p, const PlanInput *in, int w, int d, int b, int recompute,
                  Plan *out);
// The same with tp tensor-parallel and cp context-parallel ranks (w·d·tp·cp ranks).
int plan_evaluate_layout(const Profile *p, const PlanInput *in, int w, int d, int tp, int cp, int b,
                         int recompute, Plan *out);
// Fills up to max plans, best first; returns how many fit.
int plan_search(const Profile *p, const PlanInput *in, Plan *out, int max);
