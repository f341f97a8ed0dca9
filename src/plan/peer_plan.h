// peer_plan.h — what `loom peer` would do for the same workers, links and global batch, so that
// `loom plan` can choose between a swarm of peers and the MPI plans (data / pipeline
// parallelism). Each of the N peers runs the whole model as a data-parallel worker of the same
// plan would (plan_evaluate with w = N, d = 1: the same contention model) but without the
// per-step all-reduce; every τ steps it sends its Δ to the N − 1 others and receives theirs
// ((N − 1) · 4P bytes each way over its own link, plus the CPU that costs), which runs behind
// the next round: a round takes max(τ · step, exchange).
// Memory per peer: the data-parallel worker's, plus anchor, outer momentum, Δ, the average
// being applied and served, the snapshot a joiner downloads, and the N Δs of the round being
// averaged: (8 + N) · 4P bytes.
#pragma once
#include "planner.h"

typedef struct {
    int peers, tau, b, K, recompute;
    double step_s;     // one local step (compute + update)
    double exchange_s; // one round's Δ exchange
    double round_s;    // max(τ · step, exchange) + the exchange's CPU
    double tokens_per_s, mem_bytes;
} PeerPlan;

// The best swarm plan for in->workers peers and this τ; returns 1, or 0 if none fits memory.
int plan_peers(const Profile *p, const PlanInput *in, int tau, PeerPlan *out);
