// swarm.c — the swarm's network thread, gossip, and the API the peer strategy calls (see
// swarm.h). The thread owns the sockets; everything it shares with the training thread is
// under Swarm.mu, and the training thread waits on Swarm.cv for what the thread delivers.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common.h"
#include "compress.h"
#include "spill.h"
#include "swarm_impl.h"

uint64_t swarm_hash(const float *x, size_t n) {
    // FNV-1a's idea on 64-bit words (two floats at a time), then a final mix: a pass over the
    // anchor costs a fraction of a step even for large models
    uint64_t h = 1469598103934665603ull;
    size_t i = 0;
    for (size_t lo = 0; lo < n; lo = i) { // (a span at a time: spill.h; SPILL_CHUNK is even)
        size_t hi = n - lo < SPILL_CHUNK ? n : lo + SPILL_CHUNK;
        for (; i + 2 <= hi; i += 2) {
            uint64_t w;
            memcpy(&w, x + i, sizeof w);
            h = (h ^ w) * 1099511628211ull;
            h ^= h >> 29;
        }
        spill_drop(x + lo, (hi - lo) * sizeof(float));
        if (i + 2 > n) break;
    }
    if (i < n) {
        uint32_t w;
        memcpy(&w, x + i, sizeof w);
        h = (h ^ w) * 1099511628211ull;
    }
    h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33;
    return h ^ (uint64_t)n;
}

int sw_send(Swarm *s, const char *key, int type, int64_t round) {
    WireMsg *m = s->out;
    m->type = (uint16_t)type;
    m->round = round;
    snprintf(m->from, sizeof m->from, "%s", s->id);
    size_t len = wire_encode(m, s->buf, WIRE_MSG_MAX);
    if (type == WIRE_DELTA || type == WIRE_DATA || type == WIRE_SUM) // (a spilled array's piece)
        spill_drop(m->data, (size_t)m->n * sizeof(float));
    if (wire_is_q8(type)) spill_drop(m->q8, m->n);
    if (!len) return NET_ERR;
    int bulk = wire_is_delta(m) || type == WIRE_DATA; // (the rest: control messages)
    int rc = net_send(s->net, key, s->buf, len, !bulk);
    if (rc == NET_OK) s->st.sent += len;
    return rc;
}

void sw_broadcast(Swarm *s, int type, int64_t round) {
    for (int i = 1; i < s->view.n; i++)
        sw_send(s, s->view.e[i].rec.id, type, round);
}

void sw_bump(Swarm *s) { view_self(&s->view)->revision++; }

// Connects to every peer in the view that has no socket yet (or moved).
static void connect_view(Swarm *s) {
    for (int i = 1; i < s->view.n; i++)
        net_connect(s->net, s->view.e[i].rec.id, s->view.e[i].rec.addr);
}

static void merge_records(Swarm *s, const WireMsg *m) {
    double now = now_sec();
    int lists_me = 0;
    for (int i = 0; i < m->nrec; i++) {
        lists_me |= !strcmp(m->rec[i].id, s->id);
        int had = view_find(&s->view, m->rec[i].id) >= 0;
        int direct = !strcmp(m->rec[i].id, m->from);
        if (view_merge(&s->view, &m->rec[i], direct, now) && !had &&
            view_find(&s->view, m->rec[i].id) >= 0) {
            net_connect(s->net, m->rec[i].id, m->rec[i].addr);
            sw_new_peer(s, m->rec[i].id);
            if (view_self(&s->view)->first_round >= 1) // (a joiner hears of everyone at once)
                fprintf(stderr, "loom peer %s: %s joined the swarm (%d in the view)\n", s->id,
                        m->rec[i].id, s->view.n);
            s->last_tick = 0; // gossip now: a joiner can download from this peer sooner
        }
    }
    int f = view_find(&s->view, m->from);
    if (f > 0 && lists_me) s->view.e[f].knows_self = 1;
    connect_view(s);
}

static void gossip(Swarm *s) {
    WireMsg *m = s->out;
    m->nrec = s->view.n < WIRE_MAX_PEERS ? s->view.n : WIRE_MAX_PEERS;
    for (int i = 0; i < m->nrec; i++)
        m->rec[i] = s->view.e[i].rec;
    sw_broadcast(s, WIRE_GOSSIP, 0);
}

static void drop_peer(Swarm *s, const char *id, const char *why) {
    fprintf(stderr, "loom peer %s: %s %s (%d in the view)\n", s->id, id, why, s->view.n);
    net_disconnect(s->net, id);
    for (int j = 0; j < s->njobs;)
        if (!strcmp(s->jobs[j].to, id))
            s->jobs[j] = s->jobs[--s->njobs];
        else
            j++;
    pthread_cond_broadcast(&s->cv);
}

// The rounds this peer waits for (their average not here yet) that view entry e takes part in
// as the commits count it (heard from directly): what its silence held up here.
static int rounds_waiting_on(Swarm *s, const ViewEntry *e) {
    int k = 0;
    for (int i = 0; i < SW_SLOTS && e->direct; i++) {
        Slot *sl = &s->slot[i];
        k += sl->round && sl->want && !sl->avg_ready && e->rec.first_round >= 1 &&
             e->rec.first_round <= sl->round;
    }
    return k;
}

// View entry i leaves: out of the view (a tombstone keeps gossip from bringing it back) and out
// of the network, saying why and how many of this peer's open rounds counted it.
static void leave(Swarm *s, int i, double now, const char *cause) {
    PeerId id;
    char why[200];
    int w = rounds_waiting_on(s, &s->view.e[i]);
    memcpy(id, s->view.e[i].rec.id, sizeof id);
    snprintf(why, sizeof why, "left the swarm (%s; %d round%s waited)", cause, w,
             w == 1 ? "" : "s");
    view_remove(&s->view, id, now); // (moves the last entry into i)
    drop_peer(s, id, why);
}

static void tick(Swarm *s) {
    double now = now_sec();
    if (now - s->last_tick < SW_TICK) return;
    s->last_tick = now;
    // This thread itself did not run for a while (the host starved it, SIGSTOP): the others'
    // messages of that time are still queued, unread. The stall is not their silence.
    double stall = s->last_expire > 0 ? now - s->last_expire - SW_TICK : 0;
    for (int i = 1; i < s->view.n && stall > SW_TICK; i++)
        s->view.e[i].heard = s->view.e[i].heard + stall < now ? s->view.e[i].heard + stall : now;
    s->last_expire = now;
    // A peer leaves after --peer-timeout of silence, or as soon as its process is gone: its
    // connection closed and its address refuses new ones (a kill closes its sockets), for
    // SW_DEAD_GRACE with nothing heard from it meanwhile.
    for (int i = 1; i < s->view.n;) {
        const ViewEntry *e = &s->view.e[i];
        double dead = net_dead_since(s->net, e->rec.id);
        if (now - e->heard > s->c.peer_timeout)
            leave(s, i, now, "silent for --peer-timeout");
        else if (dead > 0 && now - dead > SW_DEAD_GRACE && now - e->heard > SW_DEAD_GRACE)
            leave(s, i, now, "its connection closed and its address refuses new ones");
        else
            i++;
    }
    view_expire(&s->view, s->c.peer_timeout, now, NULL, 0); // (ages the tombstones)
    gossip(s);
    sw_join_tick(s);
    if (s->snap_valid && now - s->snap_used > 30) { // nobody downloads it any more
        spill_free(s->snap_a), spill_free(s->snap_m);
        s->snap_a = s->snap_m = NULL;
        s->snap_valid = 0;
    }
    s->st.view = s->view.n;
}

static void dispatch(Swarm *s, const void *buf, size_t len) {
    WireMsg *m = s->in;
    char err[160];
    s->st.received += len;
    if (wire_decode(buf, len, m, err, sizeof err)) {
        s->st.rejected++;
        if (s->c.verbose) fprintf(stderr, "loom peer %s: rejected a message: %s\n", s->id, err);
        return;
    }
    view_heard(&s->view, m->from, now_sec());
    if (s->c.verbose && m->type != WIRE_DELTA && m->type != WIRE_DELTA8 && m->type != WIRE_DELTAS &&
        m->type != WIRE_DELTAS2 && m->type != WIRE_GOSSIP && m->type != WIRE_HAVE &&
        m->type != WIRE_COMMIT && m->type != WIRE_DATA && m->type != WIRE_FETCH &&
        m->type != WIRE_SUM && m->type != WIRE_SUMS && m->type != WIRE_SUM8 && m->type != WIRE_HOLD)
        fprintf(stderr, "loom peer %s: %.3f %s from %s\n", s->id, now_sec(),
                wire_type_name(m->type), m->from);
    switch (m->type) {
    case WIRE_HELLO: sw_on_hello(s, m); break;
    case WIRE_WELCOME:
        merge_records(s, m);
        if (s->joining && !s->welcomed) {
            s->welcomed = 1;
            snprintf(s->donor, sizeof s->donor, "%s", m->from);
        }
        break;
    case WIRE_REFUSE:
        if (s->joining && !s->welcomed) {
            s->refused++;
            snprintf(s->reason, sizeof s->reason, "%s refused this peer: %.500s", m->from, m->text);
        }
        break;
    case WIRE_GOSSIP: merge_records(s, m); break;
    case WIRE_DELTA:
    case WIRE_DELTA8:
    case WIRE_DELTAS:
    case WIRE_DELTAS2: sw_on_delta(s, m); break;
    case WIRE_HAVE: sw_on_have(s, m); break;
    case WIRE_COMMIT: sw_on_commit(s, m); break;
    case WIRE_SUM:
    case WIRE_SUMS:
    case WIRE_SUM8: sw_shard_on_sum(s, m); break;
    case WIRE_HOLD: sw_shard_on_hold(s, m); break;
    case WIRE_FETCH: sw_on_fetch(s, m); break;
    case WIRE_DATA: sw_on_data(s, m); break;
    case WIRE_BYE:
        if (view_remove(&s->view, m->from, now_sec()))
            drop_peer(s, m->from, "left the swarm (said bye)");
        break;
    }
    pthread_cond_broadcast(&s->cv);
}

static void *net_main(void *arg) {
    Swarm *s = arg;
    thread_block_signals();
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        pthread_mutex_unlock(&s->mu);
        net_wait(s->net, s->njobs ? 2 : SW_IDLE_MS); // (pieces to send: look at their queues often)
        pthread_mutex_lock(&s->mu);
        const void *buf;
        size_t len;
        for (int k = 0; k < SW_BURST && net_recv(s->net, &buf, &len); k++)
            dispatch(s, buf, len);
        NetStats ns = net_stats(s->net);
        s->st.denied = ns.denied, s->st.oversized = ns.oversized;
        s->st.handshake_failed = ns.handshake_failed, s->st.lost = ns.lost;
        tick(s);
        sw_round_tick(s);
        if (s->fetch.active) sw_fetch_pump(s, &s->fetch);
        if (s->pull.active) sw_pull_pump(s, &s->pull);
        if (s->nowed) sw_answer_owed(s);
        for (int i = 0; i < SW_SLOTS; i++)
            if (s->slot[i].fetch.active) sw_fetch_pump(s, &s->slot[i].fetch);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

// ---------------------------------------------------------------- the API

void sw_wake(Swarm *s) {
    if (s->net) net_wake(s->net);
}

// Waits on cv (mu held) for at most dt seconds, the network thread woken first: the caller
// (the training thread) waits for what that thread does next.
void sw_wait(Swarm *s, double dt) {
    sw_wake(s);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double t = ts.tv_sec + ts.tv_nsec * 1e-9 + dt;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

static Swarm *swarm_alloc(const SwarmConfig *c) {
    Swarm *s = xcalloc(1, sizeof *s);
    s->c = *c;
    s->P = c->P;
    s->npieces = (c->P + SW_PIECE - 1) / SW_PIECE;
    s->nchunks = (c->P + CQ_CHUNK - 1) / CQ_CHUNK;
    snprintf(s->id, sizeof s->id, "%s", c->id);
    s->in = xmalloc(sizeof *s->in);
    s->out = xcalloc(1, sizeof *s->out);
    s->buf = xmalloc(WIRE_MSG_MAX);
    // A sharded peer in host memory circulates 2 · SW_SLOTS of the pool's buffers once its
    // first rounds have run (each round's own Δ and its average, kept SW_SLOTS rounds): their
    // pages now, so that the kernel does not fault in and clear ~8 P floats inside rounds 1–4
    // (bench/bench_peer.sh times rounds 2–3), and the peer's memory peaks at its start.
    if (c->exchange && !spill_active())
        for (; s->npool < 2 * SW_SLOTS && s->npool < SW_POOL; s->npool++) {
            float *b = spill_floats(s->P);
            for (size_t i = 0; i < s->P; i += 1024) // (a write per 4 KiB page)
                b[i] = 0;
            s->pool[s->npool] = b;
        }
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->st_mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    return s;
}

Swarm *swarm_open(const SwarmConfig *c, float *anchor, float *mom, SwarmState *st, int *joined) {
    char secret[NET_KEY_LEN + 1];
    if (!wire_id_ok(c->id))
        return loom_fail("--peer-id '%s': 1 to %d characters of A-Z a-z 0-9 . _ -", c->id,
                         WIRE_ID_MAX),
               NULL;
    if (net_secret_read(c->secret, secret)) return NULL;
    Swarm *s = swarm_alloc(c);
    s->net = net_open(c->listen, secret, WIRE_MSG_MAX);
    if (!s->net) {
        swarm_close(s);
        return NULL;
    }
    const char *adv = c->advertise ? c->advertise : net_bound_addr(s->net);
    if (!wire_addr_ok(adv)) {
        loom_fail("--advertise '%s' is not a usable HOST:PORT", adv);
        swarm_close(s);
        return NULL;
    }
    snprintf(s->addr, sizeof s->addr, "%s", adv);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); // a restarted peer's records outrank its old ones
    PeerRecord self = {.revision = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000};
    snprintf(self.id, sizeof self.id, "%s", s->id);
    snprintf(self.addr, sizeof self.addr, "%s", s->addr);
    view_init(&s->view, &self, now_sec());
    s->running = 1;
    pthread_create(&s->thr, NULL, net_main, s);
    *joined = c->bootstrap && c->bootstrap[0];
    if (!*joined) {
        memset(st, 0, sizeof *st);
        return s;
    }
    if (sw_join(s, anchor, mom, st)) {
        swarm_close(s);
        return NULL;
    }
    return s;
}

void swarm_start_state(Swarm *s, int64_t round, uint64_t window, const float *avg) {
    pthread_mutex_lock(&s->mu);
    PeerRecord *me = view_self(&s->view);
    me->first_round = round + 1, me->cur_round = round;
    sw_bump(s);
    s->my_round = round;
    s->st_round = round, s->st_window = window;
    if (round >= 1 && avg) { // the average of that round, as if it had just been committed
        Slot *sl = sw_slot(s, round, 1);
        sl->avg = sw_buf_get(s);
        spill_copy(sl->avg, avg, s->P);
        sl->avg_ready = sl->committed = 1;
        sl->set = xcalloc(1, sizeof(PeerId)); // the set, as far as anyone can tell: this peer
        memcpy(sl->set[0], s->id, sizeof(PeerId));
        sl->nset = 1;
    }
    pthread_mutex_unlock(&s->mu);
    sw_wake(s);
}

static int count_joined(Swarm *s) {
    int k = 0;
    for (int i = 0; i < s->view.n; i++)
        k += s->view.e[i].rec.first_round >= 1;
    return k;
}

int swarm_wait_peers(Swarm *s, int n, double timeout_s) {
    double end = now_sec() + timeout_s;
    pthread_mutex_lock(&s->mu);
    while (count_joined(s) < n && now_sec() < end)
        sw_wait(s, 0.1);
    int ok = count_joined(s) >= n;
    pthread_mutex_unlock(&s->mu);
    return ok ? 0 : -1;
}

void swarm_round_begin(Swarm *s, int64_t r, int *pos, int *n) {
    pthread_mutex_lock(&s->mu);
    PeerRecord *me = view_self(&s->view);
    if (me->cur_round != r) me->cur_round = r, sw_bump(s);
    if (s->c.verbose)
        fprintf(stderr, "loom peer %s: %.3f round %lld begins\n", s->id, now_sec(), (long long)r);
    s->my_round = r;
    PeerId *ids = xmalloc(sizeof(PeerId) * WIRE_MAX_PEERS);
    *n = view_participants(&s->view, r, ids, WIRE_MAX_PEERS);
    *pos = view_position(ids, *n, s->id);
    free(ids);
    pthread_mutex_unlock(&s->mu);
    sw_wake(s);
}

void swarm_share_state(Swarm *s, const float *anchor, const float *mom) {
    pthread_mutex_lock(&s->st_mu);
    s->anchor = anchor, s->mom = mom;
    pthread_mutex_unlock(&s->st_mu);
}

void swarm_state_lock(Swarm *s) { pthread_mutex_lock(&s->st_mu); }

void swarm_state_unlock(Swarm *s, int64_t round, uint64_t window) {
    s->st_round = round, s->st_window = window;
    pthread_mutex_unlock(&s->st_mu);
}

int swarm_diverged(Swarm *s) {
    pthread_mutex_lock(&s->mu);
    int d = s->diverged;
    pthread_mutex_unlock(&s->mu);
    return d;
}

static int all_done(Swarm *s) {
    for (int i = 1; i < s->view.n; i++)
        if (!(s->view.e[i].rec.flags & (WIRE_PEER_DONE | WIRE_PEER_LEFT))) return 0;
    return 1;
}

void swarm_finish(Swarm *s, double linger_s) {
    double end = now_sec() + linger_s;
    pthread_mutex_lock(&s->mu);
    view_self(&s->view)->flags |= WIRE_PEER_DONE;
    sw_bump(s);
    s->last_tick = 0; // gossip it now
    while (!all_done(s) && now_sec() < end)
        sw_wait(s, 0.1);
    s->out->nrec = 0;
    sw_broadcast(s, WIRE_BYE, 0);
    pthread_mutex_unlock(&s->mu);
}

SwarmStats swarm_stats(Swarm *s) {
    pthread_mutex_lock(&s->mu);
    SwarmStats st = s->st;
    st.view = s->view.n;
    pthread_mutex_unlock(&s->mu);
    return st;
}

const char *swarm_address(const Swarm *s) { return s->addr; } // set once, before the thread

void swarm_close(Swarm *s) {
    if (!s) return;
    if (s->running) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_mutex_unlock(&s->mu);
        sw_wake(s);
        pthread_join(s->thr, NULL);
    }
    if (s->net) net_close(s->net);
    for (int i = 0; i < SW_SLOTS; i++)
        sw_slot_free(s, &s->slot[i]);
    for (int i = 0; i < s->npool; i++)
        spill_free(s->pool[i]);
    sw_fetch_free(&s->fetch);
    sw_pull_free(&s->pull);
    if (s->view.e) view_free(&s->view);
    free(s->jobs);
    spill_free(s->snap_a), spill_free(s->snap_m);
    free(s->in), free(s->out), free(s->buf), free(s->sparse), free(s->sum_bytes);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->st_mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
