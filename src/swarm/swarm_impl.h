// swarm_impl.h — what swarm.c (thread, API, gossip), swarm_round.c (Δs, HAVE, COMMIT, the
// average), swarm_send.c (the Δ pieces sent) and swarm_join.c (HELLO, snapshots, fetches)
// share. Not for other files.
// Everything here is guarded by Swarm.mu; the network thread holds it while it handles
// messages, the training thread takes it briefly.
#pragma once
#include <pthread.h>

#include "net.h"
#include "spill.h"
#include "swarm.h"
#include "view.h"

#define SW_SLOTS 4 // rounds kept: the one applied, the one averaged, one ahead, one spare
#define SW_PIECE ((size_t)WIRE_MAX_FLOATS)
#define SW_TICK 0.5 // seconds between gossip / HAVE rounds
// The network thread's wait when it has nothing to send: messages, monitor events and the
// training thread (sw_wake) wake it sooner; its timers (SW_TICK, SW_HELLO_EVERY, retries) are
// coarser. Each wake-up costs CPU inside the peer's share (zmq_poll over every peer's
// monitor): at 10 ms, 8 peers of a quarter core spent ~7% of it on this (BENCHMARKS.md).
#define SW_IDLE_MS 100
#define SW_OWED 64         // FETCH answers kept to send again (Owed)
#define SW_HELLO_EVERY 0.1 // seconds between a joiner's HELLOs until it is welcomed
#define SW_FETCH_WINDOW 8
#define SW_BURST 8  // pieces sent (or messages taken) per hold of Swarm.mu
#define SW_POOL 8   // Δ buffers kept for reuse
#define SW_PARTS 16 // buffers for members' parts kept for reuse (sharded, in host memory)
#define SW_FROM_POOL 1
#define SW_FROM_PARTS 2
#define SW_FETCH_RETRY 5.0
#define SW_DEAD_GRACE 1.0 // s a closed connection to an address that refuses new ones must last
#define COMMIT_GONE 1u    // a COMMIT with this attempt and no ids: the round is gone here

typedef char PeerId[WIRE_ID_MAX + 1];

typedef struct {
    PeerId id;
    float *delta;   // (P)
    uint8_t *got;   // per piece
    size_t ngot;    // pieces held
    double *losses; // (nloss)
    int8_t *q8;     // this peer's own, with --outer-compress int8: the codes (P) and
    float *scales;  // scales (compress.h) its pieces travel as (topk 2bit: no codes, 2 levels
                    // a chunk); delta holds their values
    int nloss, complete;
    int pooled;  // delta came from (and goes back to) a pool: SW_FROM_POOL the Δ pool,
                 // SW_FROM_PARTS the pool of part buffers; 0: it is freed
    double last; // when its last piece came
} Contrib;

typedef struct {
    PeerId from;
    PeerId *ids;
    int nids;
    uint64_t hash;
    double asked; // when this peer last asked the reporter for missing pieces of its Δ
    uint32_t att; // HOLD (sharded): the commit attempt the reporter follows
} HaveRep;

// Sharded: this peer's slice sum to one peer, its last piece handed to the connection at done
// after took seconds of handing over; lost: the connection's losses (net_lost) then.
typedef struct {
    PeerId to;
    double done, took;
    long lost;
} SumSent;

typedef struct {
    int active, done, failed;
    uint32_t what;
    int64_t round;
    float *dst;
    size_t total, npieces, ngot;
    uint8_t *got;
    double *asked;
    PeerId donor;
    uint64_t hash;
    int hash_known;
    char why[160];
} Fetch;

// A joiner's download of a snapshot (anchor and momentum of round end `round`) from every peer
// that holds it at once (swarm_fetch.c): piece k of array a (0: anchor, 1: momentum) is asked
// of one source at a time; a source that leaves, answers that it lacks the version or sends
// another array (its hash is not the expected one) is dropped and its pieces asked of others.
#define SW_PULL_SRC 32     // sources at most
#define SW_PULL_WINDOW 4   // pieces asked of one source and not yet received
#define SW_PULL_GATHER 2.0 // seconds a download may wait for a second source (swarm_fetch.c)
typedef struct {
    int active, done, failed;
    int64_t round;
    float *dst[2];
    uint64_t hash[2]; // the whole arrays' (the donor's META): every DATA must carry them
    size_t npieces;   // per array
    size_t ngot;
    uint8_t *got; // (2 · npieces)
    double *asked;
    int *by; // the source asked (-1: none yet)
    int nsrc;
    PeerId src[SW_PULL_SRC];
    int dead[SW_PULL_SRC];
    size_t served[SW_PULL_SRC]; // pieces received from it
    double started;
    char why[160];
} Pull;

typedef struct {
    int64_t round; // 0: free
    Contrib *c;
    int nc;
    HaveRep *hv;
    int nhv;
    uint64_t hash;
    int hash_set;
    int committed, nset;
    PeerId *set;
    uint64_t chash;
    float *avg;
    double *loss;
    int nloss, avg_ready, fetched;
    Fetch fetch;          // the average, when this peer lacks a Δ of the set
    int fetch_turn, want; // want: this peer waits for the average (it reports HAVE)
    int lost;             // no peer holds the average any more
    double born;          // when this peer first heard of the round
    double reported_at;   // the coordinator: when every live participant had reported
    double have_at;       // last HAVE sent
    uint64_t avg_hash;    // of avg (computed when first served)
    int avg_hash_set;
    // --peer-exchange sharded (swarm_shard.c): set / nset are the set of commit attempt
    // sh_att, which also cuts the slices; committed: sh_att >= 1
    uint32_t sh_att;
    int sh_final;     // every live member of the set holds every slice sum: the average stands
    int sh_summed;    // this peer summed its own slice under sh_att
    uint8_t *sh_got;  // per chunk of avg: held under sh_att
    uint32_t *sh_cut; // slice j is chunks [sh_cut[j], sh_cut[j + 1]) (nset + 1; shard_cut.c)
    int8_t *sh_q8;    // --outer-compress-sums int8: this peer's slice sum as codes (slice-long)
    float *sh_scales; // and scales (one per CQ_CHUNK); avg holds their dequantized values
    double sh_sum_at; // when this peer's slice sum was first sent
    SumSent *sent;    // to each peer, the last time (resend_sum)
    int nsent;
} Slot;

// A FETCH this peer could not answer at once (its connection to the asker was still being made,
// or its queue was full): answered again from the network loop until it goes or SW_FETCH_RETRY
// passes (the asker then asks again).
typedef struct {
    PeerId from;
    uint32_t what, n;
    int64_t round;
    uint64_t offset, total;
    double at;
} Owed;

typedef struct {
    PeerId to;
    int64_t round;
    size_t next;   // next piece (kind 0) or next offset (sharded: kinds 1 and 2)
    int kind;      // 0: this peer's whole Δ; 1: its part [lo, hi) for the slice's owner;
    size_t lo, hi; // 2: this peer's slice sum [lo, hi) (swarm_shard.c)
    uint32_t att;  // kinds 1, 2: the commit attempt it belongs to
    double start;  // when it was queued
} SendJob;

struct Swarm {
    SwarmConfig c;
    PeerId id;
    char addr[WIRE_ADDR_MAX + 1];
    size_t P, npieces, nchunks; // nchunks: of CQ_CHUNK floats (the sharded slices' unit)
    Net *net;
    View view;
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, running;
    int64_t my_round; // the round this peer computes (messages far from it are dropped)
    Slot slot[SW_SLOTS];
    SendJob *jobs;
    int njobs, capjobs;
    WireMsg *in, *out; // scratch messages (network thread / training thread under mu)
    uint8_t *buf;      // encode buffer (WIRE_MSG_MAX)
    double last_tick;
    double last_expire; // when this thread last looked for silent peers (its own stalls)
    // the strategy's live state (donors snapshot it under st_mu)
    pthread_mutex_t st_mu;
    const float *anchor, *mom;
    int64_t st_round;
    uint64_t st_window;
    float *snap_a, *snap_m;
    int64_t snap_round;
    uint64_t snap_window, snap_ha, snap_hm;
    double snap_used;
    int snap_valid;
    // joining
    int joining, welcomed, refused, nboot, boot_closed;
    char reason[600];
    PeerId donor;
    Fetch fetch;        // the state download's META (the donor's version and hashes)
    Pull pull;          // the state download's anchor and momentum (from every holder)
    Owed owed[SW_OWED]; // FETCHes to answer again (swarm_join.c)
    int nowed;
    int diverged;
    SwarmStats st;
    uint8_t *sparse;      // a sparse message's gaps and values (SW_SPARSE_BYTES; compress.c)
    uint32_t *sum_bytes;  // per chunk: what the last average's slice sums cost (shard_cut.c)
    float *pool[SW_POOL]; // Δ buffers for reuse
    int npool;
    float *parts[SW_PARTS]; // buffers for a member's parts of this peer's slice, for reuse
    int nparts;
};

// swarm.c
// Encodes s->out (type and fields set by the caller; from and round filled here) and sends it
// to key: NET_OK / NET_BUSY / NET_ERR; counts bytes.
int sw_send(Swarm *s, const char *key, int type, int64_t round);
// Sends s->out to every peer in the view.
void sw_broadcast(Swarm *s, int type, int64_t round);
void sw_bump(Swarm *s);            // this peer's record changed: new revision
void sw_wait(Swarm *s, double dt); // waits on cv (mu held) at most dt seconds
void sw_wake(Swarm *s);            // the training thread gave the network thread work: now

// swarm_round.c
Slot *sw_slot(Swarm *s, int64_t r, int create);
// Whether peer id reported the anchor hash the latest committed round settled on (1), another
// one (0), or nothing known (-1): a re-sync downloads from one that agrees.
int sw_donor_agrees(Swarm *s, const char *id);
void sw_slot_free(Swarm *s, Slot *sl);
// Δ-sized buffers, kept for reuse (no page faults every round); under mu.
float *sw_buf_get(Swarm *s);
void sw_buf_put(Swarm *s, float *b);
void sw_parts_free(Swarm *s); // the part buffers kept for reuse (at the end)
void sw_on_delta(Swarm *s, const WireMsg *m);
void sw_on_have(Swarm *s, const WireMsg *m);
void sw_on_commit(Swarm *s, const WireMsg *m);
void sw_round_tick(Swarm *s); // HAVE resends, commits, Δ send jobs

// This peer's Δ of round r (copied) and its local losses; with --outer-compress int8 also its
// codes and scales (taken over: freed with the round).
void sw_contribute(Swarm *s, int64_t r, const float *delta, int8_t *q8, float *scales,
                   const double *losses, int nloss);
void sw_contrib_free(Swarm *s, Contrib *c);

// The anchor hash most of the round's live participants L report (L[0]: this peer).
uint64_t sw_majority_hash(Slot *sl, PeerId *L, int nl);
// A donor for round r's average (the set's live members first); `turn` picks among them.
const char *sw_avg_donor(Swarm *s, Slot *sl, int turn);
HaveRep *sw_report(Slot *sl, const char *from, int create);
// *arr (n elements of size bytes) grown by one zeroed element; returns that element.
void *sw_append(void *arr, int n, size_t size);
// Answers a report of a round long gone here (no slot, older than my_round - 2); 1 if it did.
int sw_answer_gone(Swarm *s, const WireMsg *m, const Slot *old);
// Keeps report m (HAVE or HOLD) in sl under its sender: the ids it holds and its anchor hash.
HaveRep *sw_record_report(Slot *sl, const WireMsg *m);
// The contribution of id to the round (create: 1 with a buffer for its pieces, 2 without).
Contrib *sw_contrib(Swarm *s, Slot *sl, const char *id, int create);
void sw_send_commit(Swarm *s, Slot *sl, const char *to, uint32_t attempt);
// 1 if id is one of ids[0, n).
int sw_has_id(PeerId *ids, int n, const char *id);

// swarm_send.c
void sw_add_job(Swarm *s, const char *to, int64_t r, int kind, size_t lo, size_t hi, uint32_t att);
void sw_new_peer(Swarm *s, const char *id);           // queue the Δs in flight to a newcomer
void sw_send_delta_piece(Swarm *s, const WireMsg *m); // FETCH of WIRE_ARR_DELTA
// Sends pending Δ pieces until every peer's queue is full or SW_BURST pieces went (mu held).
void sw_pump_jobs(Swarm *s);
// Asks the senders of the Δs of sl that it holds (their HAVE says so) but that stalled here
// for SW_FETCH_RETRY seconds for the missing pieces.
void sw_repair(Swarm *s, Slot *sl, double now);

// shard_cut.c (--peer-exchange sharded): cut[0..n] (cut[0] = 0, cut[n] = C) splits C chunks
// into n runs of about equal weight w (NULL: equal chunks).
void sw_cut_weighted(const uint32_t *w, size_t C, int n, uint32_t *cut);
// The coordinator's cut of a commit over n members (n + 1 boundaries; xcalloc'd).
uint32_t *sw_cut_plan(Swarm *s, Slot *sl, int n);
// sl's average is final here: what its slice sums cost per chunk (the next cut's weights).
void sw_cut_note(Swarm *s, const Slot *sl);
// Under topk: the run of a slice sum a (slice [lo, hi)) that starts at `at` — whole chunks of
// one kind, inside one SW_PIECE from lo — its length, and *sparse: 1 if it goes as index/value
// pairs (every chunk at most an eighth non-zero with int8 sums, a half with fp32), else 0.
size_t sw_sum_run(const Swarm *s, const float *a, size_t lo, size_t at, size_t hi, int *sparse);

// swarm_shard.c (--peer-exchange sharded)
void sw_shard_on_part(Swarm *s, const WireMsg *m);   // DELTA* with a slice part
void sw_shard_on_sum(Swarm *s, const WireMsg *m);    // SUM
void sw_shard_on_hold(Swarm *s, const WireMsg *m);   // HOLD
void sw_shard_on_commit(Swarm *s, const WireMsg *m); // COMMIT (attempt 2a: commit, 2a+1: final)
void sw_shard_tick(Swarm *s, Slot *sl, double now);
void sw_shard_contributed(Swarm *s, Slot *sl); // this peer's Δ of the slot's round is here
// Sends the next piece of a kind-1/2 job: 1 sent, 0 not now, -1 finished or stale (drop it).
int sw_shard_job(Swarm *s, SendJob *jb);

// compress.c
// Fills s->out with piece `piece` of contribution c (this peer's): returns the type to send it
// as, WIRE_DELTA (floats), WIRE_DELTA8 (codes and scales, with --outer-compress int8) or
// WIRE_DELTAS (its elements not zero, with topk, when they are at most half of the piece).
int sw_piece_msg(Swarm *s, const Contrib *c, size_t piece);
// As sw_piece_msg for the n floats at offset (a multiple of CQ_CHUNK); losses when `losses`.
int sw_range_msg(Swarm *s, const Contrib *c, size_t offset, size_t n, int losses);
// topk: the m->n floats x (m->offset, m->n set) as m's indices and values (in s->sparse) when
// at most half are not zero (sum8, a slice sum whose other form is int8 codes: an eighth): 1;
// else 0 (send them as floats, or codes).
int sw_sparse_msg(Swarm *s, const float *x, WireMsg *m, int sum8);
// The m->n int8 codes q as m's codes (m->nnz, m->q8; m->idx, m->idx_len): only those not zero,
// at their gaps (in s->sparse), when that is fewer bytes and they are at most half; else all.
void sw_q8_msg(Swarm *s, const int8_t *q, WireMsg *m);
// 1 if a DELTA / DELTA8 / DELTAS is a kind this swarm's --outer-compress sends.
int sw_piece_ok(const Swarm *s, const WireMsg *m);
// The floats of a received DELTA / DELTA8 / DELTAS piece (m->n of them) into dst.
void sw_piece_take(const WireMsg *m, float *dst);

// swarm_fetch.c (a joiner's download from every peer holding the version)
// Starts (or, for the same version and arrays, resumes with the pieces held) the download of
// round end `round`'s anchor and momentum into a and m, whose hashes are ha and hm; `first` (the
// donor that told the version) is the first source, every peer of the view holding state the
// others (LOOM_PEER_ONE_DONOR: the first only).
void sw_pull_start(Swarm *s, Pull *p, int64_t round, float *a, float *m, uint64_t ha, uint64_t hm,
                   const char *first);
void sw_pull_pump(Swarm *s, Pull *p);                  // asks for pieces (network thread)
int sw_pull_data(Swarm *s, Pull *p, const WireMsg *m); // a DATA of the pull: 1 (taken)
void sw_pull_free(Pull *p);
// "p0 (3), p1 (2)": the sources that served pieces, into buf; returns how many did.
int sw_pull_sources(const Pull *p, char *buf, size_t n);

// swarm_join.c
void sw_on_hello(Swarm *s, const WireMsg *m);
void sw_on_fetch(Swarm *s, const WireMsg *m);
void sw_answer_owed(Swarm *s); // the FETCHes not answered at once (network thread)
void sw_on_data(Swarm *s, const WireMsg *m);
void sw_fetch_start(Fetch *f, uint32_t what, int64_t round, float *dst, size_t total,
                    const char *donor);
void sw_fetch_free(Fetch *f);
void sw_fetch_pump(Swarm *s, Fetch *f);
void sw_join_tick(Swarm *s);
// The join (training thread): HELLO until welcomed, then the state download.
int sw_join(Swarm *s, float *anchor, float *mom, SwarmState *st);
