// peer_plan.h — what `loom peer` would do for the same workers, links and global batch, so that
// `loom plan` can choose between a swarm of peers and the MPI plans (data / pipeline
// parallelism). Each of the N peers runs the whole model as a data-parallel worker of the same
// plan would (plan_evaluate with w = N, d = 1: the same contention model) but without the
// per-step all-reduce; every τ steps it sends its Δ to the N − 1 others and receives theirs
// ((N − 1) · 4P bytes each way over its own link, plus the CPU that costs), which runs behind
// the next round: a round takes max(τ · step, exchange).
// What a peer sends per round follows `--peer-exchange` and `--outer-compress` (docs/PEERS.md,
// measured by bench/bench_peer_exchange.sh): one Δ as sent is 4P bytes (none), P + 4⌈P/4096⌉
// (int8) or 5⌈F·P⌉ (topk, F = --topk-frac: a one-byte gap and a float each; with
// --topk-values 2bit a one-byte gap and 2 bits each, plus two fp32 levels per 4096 floats:
// 1.25⌈F·P⌉ + 8⌈P/4096⌉); all-to-all sends
// (N − 1) of them, sharded sends (N − 1)/N of one plus the (N − 1)/N · 4P of fp32 slice sums
// (topk: the sums as gaps and fp32 values, at most (N − 1) · 5⌈F·P⌉). Unless told which, plan_peers
// takes the uncompressed exchange if it hides behind the round, else int8, else topk (compression
// changes what the swarm learns, so only where the link needs it), each with the cheaper of the two
// exchanges. Memory per peer: the data-parallel worker's, plus anchor, outer momentum, Δ, the
// average being applied and served, the snapshot a joiner downloads, and the N Δs of the round
// being averaged: (8 + N) · 4P bytes.
#pragma once
#include "planner.h"

enum { PEER_EX_ALL, PEER_EX_SHARDED, PEER_EX_ANY };
enum { PEER_COMP_NONE, PEER_COMP_INT8, PEER_COMP_TOPK, PEER_COMP_ANY };

typedef struct {
    int exchange, compress; // PEER_EX_*, PEER_COMP_* (ANY: plan_peers chooses)
    double topk_frac;       // --topk-frac
    int topk_2bit;          // --topk-values 2bit
} PeerWire;

typedef struct {
    int peers, tau, b, K, recompute;
    int exchange, compress; // the choice (never ANY)
    double sent_bytes;      // per peer per round
    double step_s;          // one local step (compute + update)
    double exchange_s;      // one round's Δ exchange
    double round_s;         // max(τ · step, exchange) + the exchange's CPU
    double tokens_per_s, mem_bytes;
} PeerPlan;

// The best swarm plan for in->workers peers, this τ and wire; returns 1, or 0 if none fits memory.
int plan_peers(const Profile *p, const PlanInput *in, int tau, const PeerWire *wire, PeerPlan *out);
// Bytes one of n peers sends per round for p parameters (exchange, compress: not ANY).
double peer_round_bytes(int n, double p, int exchange, int compress, const PeerWire *wire);
