// planner.h — picks data-parallel width w, pipeline depth d, micro-batch b and recompute from a
// measured profile with the PipeDream-2BW cost model:
//   per micro-batch, stage s costs t_s = Σ its blocks' forward + backward (+ forward again with
//   recompute), plus sending its boundary activation and receiving its gradient (b·T·C floats
//   each way over the inter-worker link);
//   a step of K = G/(w·b) micro-batches takes K · max_s(t_s + p2p_s) under 2BW (no flush);
//   the stage's gradient all-reduce over its w replicas, 2(w−1)/w · |W_s| bytes, overlaps that
//   compute, so step time = max(compute, all-reduce) + the optimizer update of the stage's
//   parameters (AdamW, gradient zeroing and norm: measured per parameter);
//   memory per worker = 2|W_s| weights (one version when d = 1) + |W_s| gradients (2 under 2BW)
//   + 2|W_s| AdamW moments + activations of the micro-batches in flight (d on stage 0; with
//   recompute, only each layer's input plus one layer's full activations).
// Plans that do not fit the memory budget are discarded; the rest are sorted by throughput.
#pragma once
#include "profile.h"

typedef struct {
    int workers;      // ranks (w·d must equal it)
    double mem_bytes; // memory per worker
    double bandwidth; // inter-worker bandwidth, bytes/s
    double latency;   // per message, seconds
    int global_batch; // sequences per optimizer step (G)
    double cores;     // cores shared by all workers (0: each worker has its own)
} PlanInput;

typedef struct {
    int w, d, b, K, recompute;
    char stage_layers[128]; // layers per stage, e.g. "3,3"
    double step_s, tokens_per_s, mem_bytes;
    double compute_s, allreduce_s; // overlapped: the step takes the larger of the two...
    double update_s;               // ...plus the optimizer update of the largest stage
} Plan;

// Fills up to max plans, best first; returns how many fit.
int plan_search(const Profile *p, const PlanInput *in, Plan *out, int max);
