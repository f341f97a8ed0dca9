// strat_peer.h — what strat_peer.c (loom peer) shares with its helper files: the peer's state
// (Peer) and the functions each file gives the others.
#pragma once
#include <stdint.h>

#include "../parallel/co2.h"
#include "../swarm/swarm.h"
#include "strat_whole.h"
#include "strategy.h"

typedef struct {
    Whole w;
    Swarm *sw;
    CO2Config cc;
    float *anchor, *mom, *avg; // P each, spill_floats (with --offload: files, swarm/spill.h); Δ
                               // is formed in avg's (the swarm copies it)
    float *ef;                 // --outer-compress int8|topk: the error feedback (P)
    int64_t round;             // rounds ended
    int64_t first_round;
    uint64_t base;      // the first window of the current round
    int pos, N;         // this peer's position among the round's participants, their count
    int begun;          // the current round has begun (pos, N known)
    StepRecord *rec[2]; // (tau) the records of this round [0] and the previous one [1], with
    int n[2];           // their local losses
    char (*extra)[256]; // (tau) metrics fields of the previous round's records
    StrategyData data;  // the loop's data, with this peer's windows
    const StrategyData *orig;
    char *desc;     // the run description (joiners must match it)
    double drain_s; // the wait for the last round's average, after the last step
    double step_s;  // a running mean of the step time (whether a round end fits a stop's grace)
} Peer;

// x, the local weights: the model's parameters, or with --offload the swap tier's (the outer
// state in files of its own, swarm/spill.h). x ← src (P floats); a tier failure fails the next step
// (strat_peer.c).
void peer_x_set(Strategy *s, Peer *p, const float *src);
// Where the peer's arrays live (anchor, momentum, average, error feedback: host memory or files)
// and the anchor's first value; makes p->w (the model, in memory or swapped). 0 or -1
// (peer_place.c).
int peer_place(Strategy *s, Peer *p);
// The end of the span that starts at flat offset lo: the passes over the arrays walk them a span
// of at most SPILL_CHUNK floats at a time, never across a block's ends (peer_place.c).
size_t peer_span_end(const GPT *m, size_t lo);
// dst ← src, P floats, the model in memory (through the backend: the model may be on a device),
// a chunk at a time when either is an array in a file (peer_place.c).
void peer_copy_whole(GPT *m, float *dst, const float *src);
// The strategy's save: the anchor (a stop mid-round saves the round's start), its moments and,
// once a round is averaged, peer_state.bin (peer_ckpt.c).
int peer_save(Strategy *s, const char *dir, CkptMeta *meta, int final, CkptExtraFn extra,
              void *extra_ctx, int keep);
// --resume: reads peer_state.bin when there is one (*has_avg = 1); returns the checkpoint's round
// (its step / τ) or -1 (peer_ckpt.c).
int64_t peer_resume(Strategy *s, Peer *p, int *has_avg);

// The run description a joiner must match (JSON, named as the flags: the swarm's REFUSE names
// the first field that differs); free() it. Whether the model is swapped (--offload) is not
// part of it: an offloaded peer and an in-memory one train the same swarm (peer_desc.c).
char *peer_run_desc(const Strategy *s);
// --outer-compress int8: the error-feedback buffer (P floats, host memory) as peer_ef.bin in a
// checkpoint's step directory (peer_ef.c). Loading from a directory without one zeroes ef and
// says so (a checkpoint of a run without compression).
int peer_ef_save(const char *step_dir, const float *ef, size_t P);
int peer_ef_load(const char *dir, float *ef, size_t P, const char *peer_id);
// state_file_write_fn / _read_fn's windows from and into arrays ctx (float *[]), each window of
// a spilled array dropped from the resident set behind it (peer_ef.c).
int peer_arrays_fetch(void *ctx, int array, size_t at, size_t n, float *dst);
int peer_arrays_store(void *ctx, int array, size_t at, size_t n, const float *src);
