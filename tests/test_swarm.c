// test_swarm.c — the swarm protocol in one process (swarm/swarm.h): three peers on 127.0.0.1
// (one starts the swarm, two join it and download its state), one round's average over all
// of them (the same bits on every peer, the exact mean, the mean losses), refusals that name
// the field, a wrong secret that cannot join, and garbage from an authenticated client that is
// counted and changes nothing, and a message longer than any valid one, dropped and counted.
// The first peer listens on a port the system picks; the others are told its address. The
// peers that must stay in each other's views have a --peer-timeout far longer than any stall a
// loaded machine gives a thread, and every wait for something that must happen (a join, a
// message counted) ends when it is seen, with PATIENCE seconds for a failing test.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "../src/common.h"
#include "../src/swarm/net.h"
#include "../src/swarm/swarm.h"
#include "../src/swarm/view.h"
#include "test.h"

enum { P = 300001 }; // two pieces and a bit
static char dir[] = "/tmp/loom-swarm-XXXXXX";
static char secret[300], other[300];
static const char *DESC = "{\"tau\":2,\"dim\":8}";
#define PATIENCE 30.0 // seconds

static Swarm *sw[3];
static float *anchor[3], *mom[3];

// A peer's configuration: it joins the swarm of sw[0] when boot is set. peer_timeout: how long
// a silent peer stays in its view, and a third of how long it tries to join (at least 3 s).
static SwarmConfig config(const char *id, int boot, const char *sec, double peer_timeout) {
    return (SwarmConfig){.id = id,
                         .listen = "127.0.0.1:0",
                         .bootstrap = boot ? swarm_address(sw[0]) : NULL,
                         .secret = sec,
                         .peer_timeout = peer_timeout,
                         .P = P,
                         .tau = 2,
                         .run_desc = DESC};
}

TEST(three_peers_average) {
    SwarmState st;
    int joined;
    anchor[0] = xalloc_floats(P), mom[0] = xalloc_floats(P);
    for (size_t i = 0; i < P; i++)
        anchor[0][i] = (float)i * 0.5f, mom[0][i] = -(float)i;
    SwarmConfig c0 = config("a", 0, secret, 600);
    sw[0] = swarm_open(&c0, anchor[0], mom[0], &st, &joined);
    CHECK(sw[0] && !joined, "first peer: %s", loom_errmsg());
    if (!sw[0]) return;
    swarm_start_state(sw[0], 0, 7, NULL);
    swarm_share_state(sw[0], anchor[0], mom[0]);
    swarm_state_lock(sw[0]);
    swarm_state_unlock(sw[0], 0, 7);
    const char *ids[] = {"a", "b", "c"};
    for (int k = 1; k < 3; k++) {
        anchor[k] = xalloc_floats(P), mom[k] = xalloc_floats(P);
        SwarmConfig c = config(ids[k], 1, secret, 600);
        sw[k] = swarm_open(&c, anchor[k], mom[k], &st, &joined);
        CHECK(sw[k] && joined, "peer %s: %s", ids[k], loom_errmsg());
        if (!sw[k]) return;
        int n;
        CHECK(swarm_catch_up(sw[k], st.round, &n) == 0, "nothing to catch up with at round 0");
        swarm_enter(sw[k], &st); // (the strategy enters once caught up)
        CHECK(st.round == 0 && st.first_round == 1 && st.window == 7,
              "state round %lld first %lld window %llu", (long long)st.round,
              (long long)st.first_round, (unsigned long long)st.window);
        CHECK(!memcmp(anchor[k], anchor[0], P * 4) && !memcmp(mom[k], mom[0], P * 4),
              "downloaded state differs");
        swarm_share_state(sw[k], anchor[k], mom[k]);
    }
    // Every peer's view must hold all three (b learns of c by gossip, after a does).
    for (int k = 0; k < 3; k++)
        CHECK(swarm_wait_peers(sw[k], 3, PATIENCE) == 0, "3 peers in %s's view", ids[k]);
    float *d = xalloc_floats(P);
    for (int k = 0; k < 3; k++) {
        int pos, n;
        swarm_round_begin(sw[k], 1, &pos, &n);
        CHECK(pos == k && n == 3, "peer %d: position %d of %d", k, pos, n);
    }
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < P; i++)
            d[i] = (float)(k + 1) * 0.25f + (float)(i % 7);
        double loss[2] = {1.0 + k, 2.0 * k};
        swarm_contribute(sw[k], 1, d, loss, 2);
        swarm_anchor_hash(sw[k], 1, swarm_hash(anchor[0], P));
    }
    float *avg[3];
    for (int k = 0; k < 3; k++) {
        avg[k] = xalloc_floats(P);
        double loss[2] = {-1, -1};
        SwarmRound info;
        CHECK(swarm_average(sw[k], 1, avg[k], loss, 2, &info) == 0, "average: %s", loom_errmsg());
        CHECK(info.averaged == 3 && !info.fetched, "peer %d averaged %d", k, info.averaged);
        CHECK(loss[0] == 2.0 && loss[1] == 2.0, "mean losses %g %g", loss[0], loss[1]);
    }
    int exact = 1;
    for (size_t i = 0; i < P; i++) {
        float want =
            ((0.25f + (float)(i % 7)) + (0.5f + (float)(i % 7)) + (0.75f + (float)(i % 7))) *
            (1.0f / 3.0f);
        exact &= avg[0][i] == want;
    }
    CHECK(exact, "the average is the sum in id order times 1/3");
    CHECK(!memcmp(avg[0], avg[1], P * 4) && !memcmp(avg[0], avg[2], P * 4),
          "every peer holds the same bits");
    for (int k = 0; k < 3; k++)
        free(avg[k]);
    free(d);
}

// --peer-exchange sharded (swarm_shard.c): three peers started together (b and c join a; no
// state is used), rounds 1 and 2 with Δs that differ per peer: every peer ends with the bits of
// the all-to-all average (the sum in id order times 1/3) and the mean losses, and sends about
// 2·(N−1)/N Δs, not N−1.
TEST(three_peers_sharded) {
    Swarm *x[3] = {0};
    float *a[3], *m[3], *d = xalloc_floats(P), *avg = xalloc_floats(P);
    const char *ids[] = {"a", "b", "c"};
    SwarmState st;
    int joined;
    for (int k = 0; k < 3; k++) {
        a[k] = xalloc_floats(P), m[k] = xalloc_floats(P);
        SwarmConfig c = config(ids[k], 0, secret, 600);
        c.exchange = 1;
        c.bootstrap = k ? swarm_address(x[0]) : NULL;
        x[k] = swarm_open(&c, a[k], m[k], &st, &joined);
        CHECK(x[k] != NULL, "peer %s: %s", ids[k], loom_errmsg());
        if (!x[k]) return;
        if (!k) swarm_start_state(x[0], 0, 0, NULL);
        if (k) swarm_enter(x[k], &st);
        swarm_share_state(x[k], a[k], m[k]);
    }
    for (int k = 0; k < 3; k++)
        CHECK(swarm_wait_peers(x[k], 3, PATIENCE) == 0, "3 peers in %s's view", ids[k]);
    uint64_t sent0[3];
    for (int k = 0; k < 3; k++)
        sent0[k] = swarm_stats(x[k]).sent;
    for (int r = 1; r <= 2; r++) {
        for (int k = 0; k < 3; k++) {
            int pos, n;
            swarm_round_begin(x[k], r, &pos, &n);
            for (size_t i = 0; i < P; i++)
                d[i] = (float)(k + r) * 0.1f + (float)(i % 11) * 0.3f;
            double loss[2] = {1.0 + k, 2.0 * k + r};
            swarm_contribute(x[k], r, d, loss, 2);
            swarm_anchor_hash(x[k], r, 42);
        }
        for (int k = 0; k < 3; k++) {
            double loss[2] = {-1, -1};
            SwarmRound info;
            CHECK(swarm_average(x[k], r, avg, loss, 2, &info) == 0, "average: %s", loom_errmsg());
            CHECK(info.averaged == 3 && !info.fetched, "peer %d averaged %d", k, info.averaged);
            CHECK(loss[0] == 2.0 && loss[1] == 2.0 + r, "mean losses %g %g", loss[0], loss[1]);
            int exact = 1;
            for (size_t i = 0; i < P; i++) {
                float s = 0;
                for (int j = 0; j < 3; j++)
                    s += (float)(j + r) * 0.1f + (float)(i % 11) * 0.3f;
                exact &= avg[i] == s * (1.0f / 3.0f);
            }
            CHECK(exact, "round %d, peer %d: not the all-to-all average's bits", r, k);
        }
    }
    for (int k = 0; k < 3; k++) {
        double deltas = (double)(swarm_stats(x[k]).sent - sent0[k]) / (2 * 4.0 * P);
        CHECK(deltas > 1.3 && deltas < 1.5, "peer %d sent %.2f Δs per round (2·2/3 expected)", k,
              deltas);
    }
    for (int k = 2; k >= 0; k--)
        swarm_close(x[k]), free(a[k]), free(m[k]);
    free(d), free(avg);
}

TEST(refused_naming_the_field) {
    SwarmState st;
    int joined;
    float *a = xalloc_floats(P), *m = xalloc_floats(P);
    SwarmConfig c = config("d", 1, secret, 20); // it would try to join for 50 s
    c.run_desc = "{\"tau\":3,\"dim\":8}";
    double t0 = now_sec();
    Swarm *s = swarm_open(&c, a, m, &st, &joined);
    CHECK(!s, "a peer with another tau joined");
    CHECK(strstr(loom_errmsg(), "tau") && strstr(loom_errmsg(), "refused"), "message: %s",
          loom_errmsg());
    // the refusal ends the join, not the join timeout
    CHECK(now_sec() - t0 < 50, "refusal took %.1f s", now_sec() - t0);
    free(a), free(m);
}

TEST(wrong_secret_cannot_join) {
    SwarmState st;
    int joined;
    float *a = xalloc_floats(P), *m = xalloc_floats(P);
    SwarmConfig c = config("e", 1, other, 1); // tries to join for 3 s
    double t0 = now_sec();
    Swarm *s = swarm_open(&c, a, m, &st, &joined);
    CHECK(!s, "a peer with another secret joined");
    CHECK(strstr(loom_errmsg(), "secret"), "message: %s", loom_errmsg());
    CHECK(now_sec() - t0 < 10, "took %.1f s", now_sec() - t0);
    free(a), free(m);
}

// An authenticated client (the right secret) sends garbage: counted, nothing else happens.
TEST(garbage_is_counted) {
    char key[NET_KEY_LEN + 1];
    CHECK(net_secret_read(secret, key) == 0, "%s", loom_errmsg());
    Net *n = net_open("127.0.0.1:0", key, 1 << 20);
    CHECK(n && net_connect(n, "a", swarm_address(sw[0])) == 0, "%s", loom_errmsg());
    long before = swarm_stats(sw[0]).rejected;
    unsigned char junk[64];
    for (int i = 0; i < 64; i++)
        junk[i] = (unsigned char)(i * 37 + 11);
    int sent = 0;
    double end = now_sec() + PATIENCE;
    while (sent < 3 && now_sec() < end) {
        if (net_send(n, "a", junk, sizeof junk, 0) == NET_OK) sent++;
        net_wait(n, 10);
    }
    CHECK(sent == 3, "sent %d", sent);
    while (swarm_stats(sw[0]).rejected < before + 3 && now_sec() < end)
        usleep(20000);
    CHECK(swarm_stats(sw[0]).rejected >= before + 3, "rejected %ld -> %ld", before,
          swarm_stats(sw[0]).rejected);
    // oversized: longer than any valid message (dropped by the transport, counted)
    size_t big = WIRE_MSG_MAX + 4096;
    unsigned char *huge = calloc(big, 1);
    long over = swarm_stats(sw[0]).oversized;
    sent = 0;
    end = now_sec() + PATIENCE;
    while (!sent && now_sec() < end) {
        sent = net_send(n, "a", huge, big, 0) == NET_OK;
        net_wait(n, 10);
    }
    while (swarm_stats(sw[0]).oversized == over && now_sec() < end)
        usleep(20000);
    CHECK(swarm_stats(sw[0]).oversized == over + 1, "oversized %ld -> %ld", over,
          swarm_stats(sw[0]).oversized);
    free(huge);
    // and the swarm still works: a's view still holds b and c
    CHECK(swarm_stats(sw[0]).view == 3, "view %d", swarm_stats(sw[0]).view);
    net_close(n);
}

static PeerRecord rec(const char *id, uint64_t rev, int64_t first) {
    PeerRecord r = {.revision = rev, .first_round = first};
    snprintf(r.id, sizeof r.id, "%s", id);
    snprintf(r.addr, sizeof r.addr, "127.0.0.1:1");
    return r;
}

// Membership: newer revisions win, a peer that timed out stays out until a newer incarnation
// (gossip still carrying its old record cannot bring it back), participants sorted by id.
TEST(view_rules) {
    View v;
    PeerRecord me = rec("m", 1, 1), b = rec("b", 5, 1), z = rec("z", 3, 4);
    view_init(&v, &me, 0.0);
    CHECK(view_merge(&v, &b, 0, 0.0) == 1 && view_merge(&v, &z, 1, 0.0) == 1, "new peers");
    PeerRecord old = rec("b", 4, 9);
    CHECK(view_merge(&v, &old, 1, 0.5) == 0 && v.e[view_find(&v, "b")].rec.first_round == 1,
          "an older revision is ignored");
    PeerRecord self = rec("m", 99, 7);
    CHECK(view_merge(&v, &self, 0, 0.5) == 0 && view_self(&v)->revision == 1,
          "nobody else changes this peer's record");
    char ids[8][WIRE_ID_MAX + 1];
    CHECK(view_participants(&v, 3, ids, 8) == 2 && !strcmp(ids[0], "b") && !strcmp(ids[1], "m"),
          "round 3: b, m (z takes part from round 4)");
    CHECK(view_participants(&v, 4, ids, 8) == 3 && !strcmp(ids[2], "z"), "round 4: b, m, z");
    // c is learned through gossip only: the commits do not wait for it until it is heard from
    PeerRecord c = rec("c", 2, 1);
    CHECK(view_merge(&v, &c, 0, 0.5) == 1 && view_participants(&v, 4, ids, 8) == 4, "c");
    CHECK(view_heard_participants(&v, 4, ids, 8) == 3 && !strcmp(ids[1], "m"),
          "heard directly in round 4: b, m, z");
    view_heard(&v, "c", 0.6);
    CHECK(view_heard_participants(&v, 4, ids, 8) == 4, "c heard from: it counts");
    view_remove(&v, "c", 0.7);
    view_heard(&v, "z", 5.0);
    char gone[4][WIRE_ID_MAX + 1];
    CHECK(view_expire(&v, 2.0, 5.5, gone, 4) == 1 && !strcmp(gone[0], "b"), "b timed out");
    CHECK(view_merge(&v, &b, 0, 5.6) == 0 && view_find(&v, "b") < 0,
          "gossip about b's old record does not bring it back");
    PeerRecord b2 = rec("b", 6, 12);
    CHECK(view_merge(&v, &b2, 1, 5.7) == 1 && view_find(&v, "b") > 0,
          "a restarted b (higher revision) rejoins");
    view_free(&v);
}

int main(void) {
    RUN(view_rules);
    if (!mkdtemp(dir)) return 1;
    snprintf(secret, sizeof secret, "%s/secret", dir);
    snprintf(other, sizeof other, "%s/other", dir);
    if (net_keygen(secret) || net_keygen(other)) return 1;
    RUN(three_peers_average);
    RUN(three_peers_sharded);
    RUN(refused_naming_the_field);
    RUN(wrong_secret_cannot_join);
    RUN(garbage_is_counted);
    for (int k = 0; k < 3; k++)
        if (sw[k]) swarm_close(sw[k]), free(anchor[k]), free(mom[k]);
    unlink(secret), unlink(other), rmdir(dir);
    return test_summary();
}
