// swarm_join.c — joining a swarm: HELLO / WELCOME / REFUSE (the run descriptions compared
// field by field), the donor's snapshot of its state at its last round end, and fetches of an
// array in pieces (anchor, momentum, a round's average), hash-checked and restartable from
// another peer holding the same version.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "swarm_impl.h"

// ---------------------------------------------------------------- run descriptions

// "" if b (a joiner's description) fits a (this swarm's); else names the first field that
// differs, in why.
static void compare_desc(const char *a, const char *b, char *why, size_t n) {
    why[0] = 0;
    cJSON *ja = cJSON_Parse(a), *jb = cJSON_Parse(b);
    if (!ja || !jb || !cJSON_IsObject(jb)) {
        snprintf(why, n, "its run description is not a JSON object");
    } else {
        const cJSON *x;
        cJSON_ArrayForEach(x, ja) {
            const cJSON *y = cJSON_GetObjectItemCaseSensitive(jb, x->string);
            char *px = cJSON_PrintUnformatted(x), *py = y ? cJSON_PrintUnformatted(y) : NULL;
            if (!py || strcmp(px, py)) {
                const char *k = x->string;
                int flag = strcmp(k, "tokenizer") && strcmp(k, "loom-peer-protocol");
                snprintf(why, n, "%s%s differs: the swarm has %s, this peer %s",
                         flag ? "--" : "the ",
                         strcmp(k, "tokenizer") ? k
                                                : "data's tokenizer (the files of its "
                                                  "tokenizer/ directory)",
                         px, py ? py : "(none)");
            }
            free(px), free(py);
            if (why[0]) break;
        }
    }
    cJSON_Delete(ja), cJSON_Delete(jb);
}

void sw_on_hello(Swarm *s, const WireMsg *m) {
    if (m->nrec != 1 || strcmp(m->rec[0].id, m->from)) return;
    if (view_self(&s->view)->first_round < 1) return; // not holding the swarm's state yet
    const PeerRecord *r = &m->rec[0];
    char why[400];
    compare_desc(s->c.run_desc, m->text, why, sizeof why);
    if (!strcmp(r->id, s->id)) snprintf(why, sizeof why, "--peer-id %s is this peer's", r->id);
    net_connect(s->net, r->id, r->addr);
    WireMsg *o = s->out;
    if (why[0]) {
        snprintf(o->text, sizeof o->text, "%s", why);
        o->text_len = (uint32_t)strlen(o->text);
        sw_send(s, r->id, WIRE_REFUSE, 0);
        return;
    }
    if (view_merge(&s->view, r, 1, now_sec())) {
        sw_new_peer(s, r->id);
        fprintf(stderr, "loom peer %s: %s joined the swarm (%d in the view)\n", s->id, r->id,
                s->view.n);
        s->last_tick = 0; // gossip now: the others learn of it (and it of them) sooner
    }
    o->nrec = s->view.n < WIRE_MAX_PEERS ? s->view.n : WIRE_MAX_PEERS;
    for (int i = 0; i < o->nrec; i++)
        o->rec[i] = s->view.e[i].rec;
    sw_send(s, r->id, WIRE_WELCOME, 0);
}

void sw_join_tick(Swarm *s) {
    if (!s->c.bootstrap || s->boot_closed || (!s->joining && !s->welcomed)) return;
    char list[4096];
    snprintf(list, sizeof list, "%s", s->c.bootstrap);
    for (char *save = NULL, *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
        char key[WIRE_ADDR_MAX + 8];
        snprintf(key, sizeof key, "boot:%s", a);
        if (s->welcomed) { // joined: the view's sockets take over
            net_disconnect(s->net, key);
            continue;
        }
        if (net_connect(s->net, key, a)) continue;
        WireMsg *o = s->out;
        if (s->c.verbose) fprintf(stderr, "loom peer %s: %.3f HELLO to %s\n", s->id, now_sec(), a);
        o->nrec = 1;
        o->rec[0] = *view_self(&s->view);
        snprintf(o->text, sizeof o->text, "%s", s->c.run_desc);
        o->text_len = (uint32_t)strlen(o->text);
        sw_send(s, key, WIRE_HELLO, 0);
    }
    s->boot_closed = s->welcomed;
    // (until welcomed, HELLO again every SW_HELLO_EVERY, not every tick: the first HELLO, sent
    // while the bootstrap connection is still being made, is refused, and so is the WELCOME to
    // it, sent while the bootstrap peer's connection back to this one is still being made)
    if (!s->welcomed) s->last_tick = now_sec() - SW_TICK + SW_HELLO_EVERY;
}

// ---------------------------------------------------------------- serving

// The snapshot a joiner downloads: this peer's anchor and momentum at its last round end. One
// a round older is kept while a download of it is going on (its pieces asked for in the last
// 2 s), so a download is not restarted by every round end; an older one is replaced (a joiner
// needs that round's average, which peers keep for a few rounds only).
static void take_snapshot(Swarm *s) {
    double now = now_sec();
    if (s->snap_valid && s->snap_round == s->st_round) return;
    if (s->snap_valid && now - s->snap_used < 2 && s->snap_round + 1 >= s->st_round) return;
    pthread_mutex_lock(&s->st_mu);
    if (s->anchor) {
        if (!s->snap_a) s->snap_a = spill_floats(s->P), s->snap_m = spill_floats(s->P);
        spill_copy(s->snap_a, s->anchor, s->P);
        spill_copy(s->snap_m, s->mom, s->P);
        s->snap_round = s->st_round, s->snap_window = s->st_window;
        s->snap_valid = 1;
    }
    pthread_mutex_unlock(&s->st_mu);
    if (!s->snap_valid) return;
    s->snap_ha = swarm_hash(s->snap_a, s->P);
    s->snap_hm = swarm_hash(s->snap_m, s->P);
}

static int send_gone(Swarm *s, const WireMsg *m) {
    WireMsg *o = s->out;
    o->what = m->what, o->offset = o->total = 0, o->n = 0, o->hash = 0;
    return sw_send(s, m->from, WIRE_DATA, m->round);
}

static int send_piece(Swarm *s, const WireMsg *m, const float *src, uint64_t hash) {
    WireMsg *o = s->out;
    if (m->total != s->P || m->offset + m->n > s->P || m->n == 0) {
        s->st.rejected++;
        return NET_OK;
    }
    if (!net_writable(s->net, m->from)) return NET_BUSY; // (encode nothing yet)
    o->what = m->what, o->offset = m->offset, o->total = s->P, o->n = m->n, o->hash = hash;
    o->data = (const uint8_t *)(src + m->offset);
    return sw_send(s, m->from, WIRE_DATA, m->round);
}

static int answer(Swarm *s, const WireMsg *m);

void sw_on_fetch(Swarm *s, const WireMsg *m) {
    if (!net_has(s->net, m->from)) return; // only peers in the view are answered
    if (m->what == WIRE_ARR_DELTA) return sw_send_delta_piece(s, m);
    if (answer(s, m) != NET_BUSY || s->nowed == SW_OWED) return;
    Owed *w = &s->owed[s->nowed++];
    snprintf(w->from, sizeof w->from, "%s", m->from);
    w->what = m->what, w->n = m->n, w->round = m->round;
    w->offset = m->offset, w->total = m->total, w->at = now_sec();
}

void sw_answer_owed(Swarm *s) {
    double now = now_sec();
    for (int i = 0; i < s->nowed;) {
        Owed *w = &s->owed[i];
        WireMsg *m = s->in; // (the network thread's scratch: dispatch is done with it)
        m->type = WIRE_FETCH;
        snprintf(m->from, sizeof m->from, "%s", w->from);
        m->what = w->what, m->n = w->n, m->round = w->round;
        m->offset = w->offset, m->total = w->total;
        if (now - w->at < SW_FETCH_RETRY && net_has(s->net, w->from) && answer(s, m) == NET_BUSY)
            i++;
        else
            s->owed[i] = s->owed[--s->nowed];
    }
}

// A FETCH of the snapshot's META, its pieces or an average's: NET_BUSY when it could not be
// answered now.
static int answer(Swarm *s, const WireMsg *m) {
    if (m->what == WIRE_ARR_META) {
        take_snapshot(s);
        if (!s->snap_valid) return send_gone(s, m);
        s->snap_used = now_sec();
        uint32_t w[8] = {(uint32_t)s->snap_window, (uint32_t)(s->snap_window >> 32),
                         (uint32_t)s->snap_ha,     (uint32_t)(s->snap_ha >> 32),
                         (uint32_t)s->snap_hm,     (uint32_t)(s->snap_hm >> 32)};
        float f[8];
        memcpy(f, w, sizeof f);
        WireMsg *o = s->out;
        o->what = WIRE_ARR_META, o->offset = 0, o->total = 8, o->n = 8, o->hash = 0;
        o->data = (const uint8_t *)f;
        return sw_send(s, m->from, WIRE_DATA, s->snap_round);
    }
    if (m->what == WIRE_ARR_ANCHOR || m->what == WIRE_ARR_MOMENTUM) {
        // (a peer asked without a META first: a joiner downloading from every holder)
        if ((!s->snap_valid || m->round != s->snap_round) && m->round == s->st_round)
            take_snapshot(s);
        if (!s->snap_valid || m->round != s->snap_round) return send_gone(s, m);
        s->snap_used = now_sec();
        int a = m->what == WIRE_ARR_ANCHOR;
        return send_piece(s, m, a ? s->snap_a : s->snap_m, a ? s->snap_ha : s->snap_hm);
    }
    if (m->what == WIRE_ARR_AVERAGE) {
        Slot *sl = sw_slot(s, m->round, 0);
        if (!sl) return send_gone(s, m);
        if (!sl->avg_ready) return NET_OK; // not decided yet: the requester asks again
        if (!sl->avg_hash_set) sl->avg_hash = swarm_hash(sl->avg, s->P), sl->avg_hash_set = 1;
        return send_piece(s, m, sl->avg, sl->avg_hash);
    }
    return NET_OK;
}

// ---------------------------------------------------------------- fetching

void sw_fetch_free(Fetch *f) {
    free(f->got), free(f->asked);
    memset(f, 0, sizeof *f);
}

// Starts (or, for the same array and version, resumes with the pieces already held) a fetch
// of total floats into dst from donor.
void sw_fetch_start(Fetch *f, uint32_t what, int64_t round, float *dst, size_t total,
                    const char *donor) {
    int keep = f->got && f->what == what && f->round == round && f->total == total && f->dst == dst;
    if (!keep) {
        sw_fetch_free(f);
        f->what = what, f->round = round, f->dst = dst, f->total = total;
        f->npieces = total ? (total + SW_PIECE - 1) / SW_PIECE : 1;
        f->got = xcalloc(f->npieces, 1);
        f->asked = xcalloc(f->npieces, sizeof(double));
    }
    for (size_t i = 0; i < f->npieces; i++)
        f->asked[i] = 0;
    f->active = 1, f->done = f->failed = 0;
    snprintf(f->donor, sizeof f->donor, "%s", donor);
}

static void fetch_fail(Fetch *f, const char *why) {
    f->failed = 1;
    snprintf(f->why, sizeof f->why, "%s", why);
}

void sw_fetch_pump(Swarm *s, Fetch *f) {
    if (!f->active || f->done || f->failed) return;
    if (view_find(&s->view, f->donor) < 0) return fetch_fail(f, "the donor left");
    double now = now_sec();
    int out = 0;
    for (size_t i = 0; i < f->npieces; i++)
        out += !f->got[i] && f->asked[i] > 0 && now - f->asked[i] < SW_FETCH_RETRY;
    for (size_t i = 0; i < f->npieces && out < SW_FETCH_WINDOW; i++) {
        if (f->got[i] || (f->asked[i] > 0 && now - f->asked[i] < SW_FETCH_RETRY)) continue;
        WireMsg *o = s->out;
        o->what = f->what, o->offset = i * SW_PIECE, o->total = f->total;
        o->n = (uint32_t)(f->total - o->offset < SW_PIECE ? f->total - o->offset : SW_PIECE);
        if (sw_send(s, f->donor, WIRE_FETCH, f->round) != NET_OK) break;
        f->asked[i] = now;
        out++;
    }
}

static void fetch_data(Fetch *f, const WireMsg *m) {
    if (m->n == 0 && m->total == 0) return fetch_fail(f, "the donor no longer has that version");
    if (m->total != f->total || m->offset % SW_PIECE || m->offset >= f->total) return;
    size_t i = m->offset / SW_PIECE;
    size_t want = f->total - m->offset < SW_PIECE ? f->total - m->offset : SW_PIECE;
    if (m->n != want || f->got[i]) return;
    if (f->what == WIRE_ARR_META) f->round = m->round; // the snapshot's version
    wire_floats(m->data, m->n, f->dst + m->offset);
    spill_drop(f->dst + m->offset, (size_t)m->n * sizeof(float));
    f->got[i] = 1;
    if (f->ngot == 0 || !f->hash_known) f->hash = m->hash, f->hash_known = 1;
    if (++f->ngot < f->npieces) return;
    if (f->what != WIRE_ARR_META && swarm_hash(f->dst, f->total) != f->hash) {
        memset(f->got, 0, f->npieces), f->ngot = 0, f->hash_known = 0;
        return fetch_fail(f, "the downloaded array does not match its hash");
    }
    f->done = 1;
}

void sw_on_data(Swarm *s, const WireMsg *m) {
    if (sw_pull_data(s, &s->pull, m)) return;
    Fetch *f = &s->fetch;
    if (f->active && f->what == m->what && (m->what == WIRE_ARR_META || f->round == m->round) &&
        !strcmp(f->donor, m->from)) {
        fetch_data(f, m);
        return;
    }
    Slot *sl = m->what == WIRE_ARR_AVERAGE ? sw_slot(s, m->round, 0) : NULL;
    if (sl && sl->fetch.active && !strcmp(sl->fetch.donor, m->from)) fetch_data(&sl->fetch, m);
}

// ---------------------------------------------------------------- the joiner's side

// Waits (mu held) until f is done or failed, at most t seconds; 0 when done.
static int fetch_wait(Swarm *s, Fetch *f, double t) {
    double end = now_sec() + t;
    while (!f->done && !f->failed && now_sec() < end)
        sw_wait(s, 0.1);
    if (!f->done && !f->failed) fetch_fail(f, "no answer");
    return f->done ? 0 : -1;
}

// Whether view entry i can donate: it holds state and, when agree, its anchor was the one the
// latest committed round settled on (sw_donor_agrees; unknown counts as not agreeing).
static int donor_ok(Swarm *s, int i, int agree) {
    return s->view.e[i].rec.first_round >= 1 &&
           (!agree || sw_donor_agrees(s, s->view.e[i].rec.id) == 1);
}

// Another peer holding state, to download from (rotating through the view): one whose anchor
// agrees with the swarm's if there is any (a re-sync must not copy a diverged peer), else any.
static int next_donor(Swarm *s, int turn) {
    for (int agree = 1; agree >= 0; agree--) {
        int k = 0;
        for (int i = 1; i < s->view.n; i++)
            k += donor_ok(s, i, agree);
        for (int i = 1, j = 0; i < s->view.n && k; i++)
            if (donor_ok(s, i, agree) && j++ == turn % k) {
                snprintf(s->donor, sizeof s->donor, "%s", s->view.e[i].rec.id);
                return 0;
            }
    }
    return -1;
}

// The anchor and momentum of round end b, from every peer holding them (swarm_fetch.c), at
// most t seconds; 0 when done (and says where the pieces came from).
static int pull(Swarm *s, int64_t b, float *anchor, float *mom, uint64_t ha, uint64_t hm,
                double t) {
    Pull *p = &s->pull;
    sw_pull_start(s, p, b, anchor, mom, ha, hm, s->donor);
    double end = now_sec() + t;
    while (!p->done && !p->failed && now_sec() < end)
        sw_wait(s, 0.1);
    if (!p->done && !p->failed) p->failed = 1, snprintf(p->why, sizeof p->why, "no answer");
    p->active = 0;
    if (!p->done) return -1;
    char who[1024];
    int k = sw_pull_sources(p, who, sizeof who);
    fprintf(stderr, "loom peer %s: downloaded round %lld's state (%zu pieces) from %d peer%s: %s\n",
            s->id, (long long)b, 2 * p->npieces, k, k == 1 ? "" : "s", who);
    return 0;
}

// The snapshot: its version, window and hashes from the current donor, then the anchor and the
// momentum from every peer holding that version; when they all fail, the next donor's version
// (pieces of the same version are kept).
static int download(Swarm *s, float *anchor, float *mom, SwarmState *st) {
    float meta[8];
    double t = 3 * s->c.peer_timeout;
    for (int turn = 0; turn < 16; turn++) {
        if (turn && next_donor(s, turn)) break;
        Fetch *f = &s->fetch;
        sw_fetch_start(f, WIRE_ARR_META, 0, meta, 8, s->donor);
        if (fetch_wait(s, f, t)) continue;
        int64_t b = f->round;
        if (s->c.verbose)
            fprintf(stderr, "loom peer %s: downloading round %lld's state from %s\n", s->id,
                    (long long)b, s->donor);
        uint32_t w[8];
        memcpy(w, meta, sizeof w);
        st->round = b;
        st->window = (uint64_t)w[0] | (uint64_t)w[1] << 32;
        uint64_t ha = (uint64_t)w[2] | (uint64_t)w[3] << 32,
                 hm = (uint64_t)w[4] | (uint64_t)w[5] << 32;
        if (swarm_hash(anchor, s->P) == ha && swarm_hash(mom, s->P) == hm) { // (the same seed)
            f->active = 0;
            return 0;
        }
        f->active = 0;
        if (pull(s, b, anchor, mom, ha, hm, t * 8)) continue;
        return 0;
    }
    if (s->pull.failed) snprintf(s->fetch.why, sizeof s->fetch.why, "%s", s->pull.why);
    return loom_fail("could not download the swarm's state: %s", s->fetch.why);
}

// A peer that holds the state after round end st->round takes part from the next round on.
static void adopt_round(Swarm *s, SwarmState *st) {
    PeerRecord *me = view_self(&s->view);
    me->first_round = st->round + 1;
    me->cur_round = st->round;
    sw_bump(s);
    st->first_round = me->first_round;
    s->my_round = st->round;
    s->last_tick = 0; // tell the others now
}

int sw_join(Swarm *s, float *anchor, float *mom, SwarmState *st) {
    double jt = 3 * s->c.peer_timeout;
    jt = jt < 3 ? 3 : jt > 50 ? 50 : jt;
    pthread_mutex_lock(&s->mu);
    s->nboot = 1;
    for (const char *p = s->c.bootstrap; *p; p++)
        s->nboot += *p == ',';
    s->joining = 1;
    s->last_tick = 0;
    double end = now_sec() + jt;
    while (!s->welcomed && s->refused < s->nboot && now_sec() < end)
        sw_wait(s, 0.1);
    int rc = 0;
    if (!s->welcomed && s->refused) {
        rc = loom_fail("cannot join the swarm: %s", s->reason);
    } else if (!s->welcomed) {
        NetStats ns = net_stats(s->net);
        rc = loom_fail("cannot join the swarm: no bootstrap peer (%s) answered within %.0f s%s",
                       s->c.bootstrap, jt,
                       ns.handshake_failed ? "; the handshakes failed: is --secret the swarm's "
                                             "secret?"
                                           : "; are they running, and is --secret the swarm's?");
    }
    if (!rc) rc = download(s, anchor, mom, st);
    if (!rc) s->my_round = st->round; // (it takes part once caught up: swarm_enter)
    s->joining = 0;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int64_t swarm_catch_up(Swarm *s, int64_t b, int *n) {
    pthread_mutex_lock(&s->mu);
    s->my_round = b; // (the messages of the rounds it catches up through are taken)
    int64_t R = b;
    for (int i = 1; i < s->view.n; i++) {
        const PeerRecord *r = &s->view.e[i].rec;
        if (r->first_round >= 1 && !(r->flags & (WIRE_PEER_LEFT | WIRE_PEER_DONE)) &&
            r->cur_round > R)
            R = r->cur_round;
    }
    PeerId *ids = xmalloc(sizeof(PeerId) * WIRE_MAX_PEERS);
    *n = view_participants(&s->view, b + 1, ids, WIRE_MAX_PEERS);
    free(ids);
    pthread_mutex_unlock(&s->mu);
    sw_wake(s);
    return R;
}

void swarm_enter(Swarm *s, SwarmState *st) {
    pthread_mutex_lock(&s->mu);
    adopt_round(s, st);
    pthread_mutex_unlock(&s->mu);
    sw_wake(s);
}

int swarm_resync(Swarm *s, float *anchor, float *mom, SwarmState *st) {
    pthread_mutex_lock(&s->st_mu); // no snapshots of a half-written state
    const float *a = s->anchor, *m = s->mom;
    s->anchor = s->mom = NULL;
    s->snap_valid = 0;
    pthread_mutex_unlock(&s->st_mu);
    pthread_mutex_lock(&s->mu);
    s->diverged = 0;
    for (int i = 0; i < SW_SLOTS; i++) // this peer's anchor hashes were of the state it drops
        s->slot[i].hash_set = 0;
    int rc = -1;
    for (int turn = 0; rc && turn < 4 && !next_donor(s, turn); turn++)
        rc = download(s, anchor, mom, st);
    if (rc && !loom_errmsg()[0]) loom_fail("no peer to re-sync from");
    if (!rc) adopt_round(s, st);
    pthread_mutex_unlock(&s->mu);
    swarm_share_state(s, a, m);
    return rc;
}
