// swarm.h — ATOM's peers (loom peer): whole-model copies trained by peers that come and go,
// averaged CO2-style over ZeroMQ with no central point of failure. The strategy
// (strategy/strat_peer.c) runs the local steps and the outer rule; this module keeps the
// membership, moves the Δs, decides each round's set and serves joiners, on a network thread
// of its own (swarm.c). The protocol, in short (docs/PEERS.md has it in full):
//   - membership: every peer gossips its view to every peer it knows twice a second; a peer
//     silent for --peer-timeout leaves every view (view.h);
//   - a round's average: each participant sends its Δ (in 1 MiB pieces) and its local losses to
//     every peer, and tells every peer which Δs it holds (HAVE, with its anchor's hash); the
//     lowest live participant id commits the set once every live participant holds every live
//     participant's Δ (COMMIT: the sorted ids); any peer that holds a commit answers a HAVE for
//     that round with it, so a commit survives its coordinator. Every peer sums the set's Δs in
//     id order: the same bits everywhere. A peer that lacks a Δ of the set fetches the computed
//     average instead; with --peer-exchange sharded the commit comes first and names the slices
//     instead: each member sends its part of slice j to the j-th member, which sums the parts in
//     id order and sends that slice of the average to every peer (swarm_shard.c);
//   - joining: HELLO with the run's description to a bootstrap peer (REFUSE names the field
//     that differs), then the donor's state at its last round end, fetched in pieces
//     (restartable from another peer at the same round), then the average of that round.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

typedef struct {
    const char *id;        // --peer-id
    const char *listen;    // --listen HOST:PORT
    const char *advertise; // --advertise (NULL: the listen address)
    const char *bootstrap; // --bootstrap HOST:PORT[,…] (NULL: the first peer)
    const char *secret;    // --secret FILE
    double peer_timeout;   // --peer-timeout seconds
    size_t P;              // floats in the model
    int tau;               // local steps per round (bounds the losses a Δ carries)
    const char *run_desc;  // JSON: what must match to join (model shape, τ, optimizers, ...)
    int compress;          // --outer-compress: CQ_NONE, CQ_INT8 or CQ_TOPK (compress.h)
    double topk_frac;      // --topk-frac: the share of a Δ's floats topk sends
    int topk_2bit;         // --topk-values 2bit: topk's values as 2 bits on two levels a chunk
    int exchange;          // --peer-exchange: 0 all (every Δ to every peer), 1 sharded
                           // (reduce-scatter + all-gather, swarm_shard.c)
    int sums_int8;         // sharded: the all-gather's slice sums travel as int8 (SUM8)
    int verbose;
} SwarmConfig;

typedef struct Swarm Swarm;

// The swarm's state a joiner adopts: the anchor and outer momentum after round end `round`,
// the next data window there, and the average of that round (round ≥ 1). first_round is the
// first round it contributes to.
typedef struct {
    int64_t round, first_round;
    uint64_t window;
} SwarmState;

typedef struct {
    int64_t round;
    int view;      // peers in the view
    int averaged;  // peers whose Δ the average holds
    double wait_s; // seconds the caller blocked for it
    uint64_t sent; // bytes this peer has sent so far
    int fetched;   // 1: the average was fetched (its loss mean is unknown: local loss used)
} SwarmRound;

typedef struct {
    long rejected, denied, handshake_failed, oversized, diverged, lost;
    uint64_t sent, received;
    int view;
} SwarmStats;

// Binds, starts the network thread and joins: with no bootstrap this peer starts a swarm
// (*joined = 0: it keeps its own initial state); otherwise it says HELLO to the bootstrap peers
// until one welcomes it (or all refuse, or none answers within the join timeout: NULL with
// loom_errmsg saying why). Joined, it downloads the state into anchor and mom (P floats, host
// memory) and fills *st (*joined = 1); it takes part once it calls swarm_enter.
Swarm *swarm_open(const SwarmConfig *c, float *anchor, float *mom, SwarmState *st, int *joined);
// A joiner holding the state after round end b (swarm_open): the round the swarm computes now
// (the highest its peers holding state compute; b when none is ahead) and in *n the
// participants of round b + 1. It catches up by applying the committed averages of rounds b, b +
// 1, … (swarm_average) until it holds the state after the round the swarm computes, then enters
// at the next round boundary (swarm_enter), so nobody waits for a round it started late.
int64_t swarm_catch_up(Swarm *s, int64_t b, int *n);
// The joiner takes part from round st->round + 1 on (sets st->first_round); joins only.
void swarm_enter(Swarm *s, SwarmState *st);
// A peer that starts a swarm (or resumes one from its checkpoint) declares its state: round
// end `round` (0: fresh), the window, and the average of that round when round ≥ 1 (copied).
void swarm_start_state(Swarm *s, int64_t round, uint64_t window, const float *avg);
// Waits until at least n peers (this one included) are in the view; -1 after timeout_s.
int swarm_wait_peers(Swarm *s, int n, double timeout_s);
// Round r is starting for this peer: marks it in its record and returns its position among
// the round's participants (sorted by id) and their count.
void swarm_round_begin(Swarm *s, int64_t r, int *pos, int *n);
// This peer's Δ of round r (P floats) and its local losses (copied; sent in the background).
void swarm_contribute(Swarm *s, int64_t r, const float *delta, const double *losses, int nloss);
// swarm_contribute with --outer-compress: int8 quantizes delta + ef (compress.h), sends the
// codes, leaves in delta the values every peer averages and in ef what the codes dropped (the
// error feedback, P floats, the caller's to keep); topk keeps the largest --topk-frac of
// delta + ef and leaves the rest in ef; none is swarm_contribute (ef unused).
void swarm_contribute_ef(Swarm *s, int64_t r, float *delta, float *ef, const double *losses,
                         int nloss);
// The hash of this peer's anchor after round end r (compared with the coordinator's).
void swarm_anchor_hash(Swarm *s, int64_t r, uint64_t hash);
// Blocks until round r's average is decided: copies it into avg (P floats) and the mean of the
// set's losses per step into loss (nloss; the local ones when the average was fetched).
// SWARM_LOST (with loom_errmsg) when no peer holds it any more — the swarm moved on while this
// peer was away or slow: re-sync (swarm_resync) and go on from the swarm's round.
#define SWARM_LOST (-2)
int swarm_average(Swarm *s, int64_t r, float *avg, double *loss, int nloss, SwarmRound *info);
// The strategy's live state, for donors: under swarm_state_lock the strategy updates anchor /
// mom at a round end and sets the round; the network thread snapshots them for a joiner.
void swarm_share_state(Swarm *s, const float *anchor, const float *mom);
void swarm_state_lock(Swarm *s);
void swarm_state_unlock(Swarm *s, int64_t round, uint64_t window);
// 1 if a commit showed this peer's anchor differs from the swarm's (re-sync at the next round).
int swarm_diverged(Swarm *s);
// Downloads the swarm's current state again (after divergence): as swarm_open's join.
int swarm_resync(Swarm *s, float *anchor, float *mom, SwarmState *st);
// This peer finished: it says so and lingers (serving) until every peer in its view has
// finished or left, at most linger_s; then says BYE.
void swarm_finish(Swarm *s, double linger_s);
SwarmStats swarm_stats(Swarm *s);
// The address this peer gives the others: --advertise, else where it listens (with the port
// the system picked when --listen asked for port 0).
const char *swarm_address(const Swarm *s);
void swarm_close(Swarm *s);
// A 64-bit hash of n floats' bits (anchor checks, downloads): FNV-1a over 64-bit words.
uint64_t swarm_hash(const float *x, size_t n);
