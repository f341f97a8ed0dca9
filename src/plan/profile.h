// profile.h — measured per-block costs on this machine, the planner's input. Layers are
// identical, so one layer is measured; the embedding and the head are measured separately.
// Each micro-batch size also records how much slower a layer runs when every core of the
// machine runs one (the contention of ranks that share a machine: memory bandwidth, caches,
// turbo), and the communication between the job's ranks can be measured too.
// A profile can be saved as JSON and read back, so a plan for a cluster can be made from a
// profile taken on one of its machines.
#pragma once
#include "../model/gpt.h"

#define PROFILE_MAX_B 8

typedef struct {
    int b; // micro-batch size
    // seconds per micro-batch: forward and backward of the embedding, one layer, the head
    double fwd[3], bwd[3];
    double busy; // a layer's forward+backward time with every core busy ÷ alone (≥ 1)
} ProfileRow;

typedef struct {
    GPTConfig cfg;
    int T, threads, nrows;
    int cores; // cores of the profiled machine
    ProfileRow rows[PROFILE_MAX_B];
    double update_s_per_param; // AdamW + gradient zeroing + norm, per parameter per step
} Profile;

enum { PROF_EMBED = 0, PROF_LAYER = 1, PROF_HEAD = 2 };

// Times forward/backward of each block kind for micro-batch sizes 1, 2, 4, ... up to max_b,
// then a layer again with cores/threads copies running at once.
int profile_measure(Profile *p, const Backend *be, const GPTConfig *cfg, int T, int max_b,
                    int threads);
// One row only, for micro-batch b, without the contention measurement (busy = 1): what block
// swapping plans with (one process, its own batch size). max_bytes (0: no bound) bounds what it
// allocates at once: more than profile_batch_bytes is needed, and the optimizer's timing
// arrays shrink to fit.
int profile_measure_batch(Profile *p, const Backend *be, const GPTConfig *cfg, int T, int b,
                          int threads, size_t max_bytes);
// Bytes profile_measure_batch allocates for the blocks at micro-batch b (a one-layer model's
// parameters and gradients, its workspace and a gradient buffer); SIZE_MAX for a bad shape.
size_t profile_batch_bytes(const Backend *be, const GPTConfig *cfg, int T, int b);
// One forward and backward of each block kind at micro-batch b on a one-layer copy of the model
// (the same allocations as profile_measure_batch, nothing timed): what brings up the backend's
// threads and their BLAS buffers the way a step will. 0 or -1 (over max_bytes, when not 0).
int profile_warmup(const Backend *be, const GPTConfig *cfg, int T, int b, size_t max_bytes);
int profile_save(const Profile *p, const char *path);
int profile_load(Profile *p, const char *path);
// The row for micro-batch b (NULL when not profiled).
const ProfileRow *profile_row(const Profile *p, int b);
