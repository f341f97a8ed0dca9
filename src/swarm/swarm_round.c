// swarm_round.c — one round's average (see swarm.h): the Δs each peer sends and collects, the
// HAVE reports, the commit of the round's set by the lowest live participant, the average
// summed in id order (or fetched when a Δ of the set is missing here). Sending the Δ's pieces:
// swarm_send.c.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "compress.h"
#include "spill.h"
#include "swarm_impl.h"

static int cmp_id(const void *a, const void *b) { return strcmp(a, b); }

float *sw_buf_get(Swarm *s) {
    if (s->npool) return s->pool[--s->npool];
    return spill_floats(s->P);
}

void sw_buf_put(Swarm *s, float *b) {
    if (b && s->npool < SW_POOL)
        s->pool[s->npool++] = b;
    else
        spill_free(b);
}

// A sharded peer in host memory gets a member's parts of its own slice only, so a buffer for
// them has that slice's pages resident and the rest never touched. Reusing one keeps the
// kernel from clearing fresh pages for every member every round (the slices move little from
// round to round); what lies outside the chunks the last round wrote is handed back first, so
// a buffer stays about a slice resident however the slices move.
static float *parts_get(Swarm *s) {
    if (s->nparts) return s->parts[--s->nparts];
    return spill_floats(s->P);
}

static void parts_put(Swarm *s, float *b, const uint8_t *got) {
    if (!b) return;
    if (s->nparts == SW_PARTS) {
        spill_free(b);
        return;
    }
    size_t a = 0, e = s->nchunks;
    while (got && a < e && !got[a])
        a++;
    while (got && e > a && !got[e - 1])
        e--;
    size_t lo = a * CQ_CHUNK < s->P ? a * CQ_CHUNK : s->P;
    size_t hi = e * CQ_CHUNK < s->P ? e * CQ_CHUNK : s->P;
    if (!got || a == e) lo = hi = 0;
    spill_discard(b, lo * sizeof(float));
    spill_discard(b + hi, (s->P - hi) * sizeof(float));
    s->parts[s->nparts++] = b;
}

static void delta_free(Swarm *s, Contrib *c) {
    if (c->pooled == SW_FROM_POOL)
        sw_buf_put(s, c->delta);
    else if (c->pooled == SW_FROM_PARTS)
        parts_put(s, c->delta, c->got);
    else
        spill_free(c->delta);
    c->delta = NULL;
}

void sw_parts_free(Swarm *s) {
    for (int i = 0; i < s->nparts; i++)
        spill_free(s->parts[i]);
    s->nparts = 0;
}

void sw_contrib_free(Swarm *s, Contrib *c) {
    delta_free(s, c), free(c->got), free(c->losses), spill_free(c->q8), free(c->scales);
}

void sw_slot_free(Swarm *s, Slot *sl) {
    for (int i = 0; i < sl->nc; i++)
        sw_contrib_free(s, &sl->c[i]);
    for (int i = 0; i < sl->nhv; i++)
        free(sl->hv[i].ids);
    free(sl->c), free(sl->hv), free(sl->set), sw_buf_put(s, sl->avg), free(sl->loss),
        free(sl->sh_got);
    free(sl->sh_cut);
    spill_free(sl->sh_q8), free(sl->sh_scales), free(sl->sent);
    sw_fetch_free(&sl->fetch);
    memset(sl, 0, sizeof *sl);
}

// The slot of round r (create: taking over the slot of a round 4 older); NULL if it is gone.
Slot *sw_slot(Swarm *s, int64_t r, int create) {
    Slot *sl = &s->slot[r % SW_SLOTS];
    if (sl->round == r) return sl;
    if (!create || sl->round > r) return NULL;
    sw_slot_free(s, sl);
    sl->round = r;
    sl->born = now_sec();
    return sl;
}

// Rounds a message may be about: near the one this peer computes.
static Slot *msg_slot(Swarm *s, int64_t r) {
    if (r < 1 || r > s->my_round + 2 || r < s->my_round - 2) return NULL;
    return sw_slot(s, r, 1);
}

// The contribution of id to this round (create: 1 with a buffer for its pieces, 2 without).
Contrib *sw_contrib(Swarm *s, Slot *sl, const char *id, int create) {
    for (int i = 0; i < sl->nc; i++)
        if (!strcmp(sl->c[i].id, id)) return &sl->c[i];
    if (!create) return NULL;
    Contrib *c = sw_append(&sl->c, sl->nc++, sizeof *c);
    snprintf(c->id, sizeof c->id, "%s", id);
    if (create == 1) { // (not zeroed: its pieces fill it)
        // sharded in host memory: a member's parts fill only this peer's slice (parts_get)
        c->pooled = !s->c.exchange || spill_active() ? SW_FROM_POOL : SW_FROM_PARTS;
        c->delta = c->pooled == SW_FROM_POOL ? sw_buf_get(s) : parts_get(s);
    }
    c->got = xcalloc(s->nchunks, 1); // (per piece; sharded: per chunk)
    return c;
}

// The ids whose whole Δ of this round is here, sorted (into ids; returns the count).
static int held(const Slot *sl, PeerId *ids) {
    int k = 0;
    for (int i = 0; i < sl->nc && k < WIRE_MAX_PEERS; i++)
        if (sl->c[i].complete) snprintf(ids[k++], sizeof(PeerId), "%s", sl->c[i].id);
    qsort(ids, (size_t)k, sizeof(PeerId), cmp_id);
    return k;
}

static void send_have(Swarm *s, Slot *sl, const char *to) {
    WireMsg *m = s->out;
    m->nids = held(sl, m->ids);
    m->hash = sl->hash;
    if (to)
        sw_send(s, to, WIRE_HAVE, sl->round);
    else
        sw_broadcast(s, WIRE_HAVE, sl->round);
}

void sw_send_commit(Swarm *s, Slot *sl, const char *to, uint32_t attempt) {
    WireMsg *m = s->out;
    m->nids = sl->nset;
    for (int i = 0; i < sl->nset; i++)
        memcpy(m->ids[i], sl->set[i], sizeof(PeerId));
    m->hash = sl->chash, m->attempt = attempt;
    m->ncut = sl->sh_cut && sl->nset > 1 ? (uint32_t)sl->nset - 1 : 0;
    for (uint32_t i = 0; i < m->ncut; i++)
        m->cut[i] = sl->sh_cut[i + 1];
    if (to)
        sw_send(s, to, WIRE_COMMIT, sl->round);
    else
        sw_broadcast(s, WIRE_COMMIT, sl->round);
}

// A donor for round r's average: the members of the set first, then any peer, those heard from
// lately (and that know this peer) before the others — a joiner's view may still list a peer
// that is gone, which it never heard from; `turn` picks among them (a retry takes the next).
// NULL when this peer is alone.
const char *sw_avg_donor(Swarm *s, Slot *sl, int turn) {
    int n = s->view.n - 1;
    if (n < 1) return NULL;
    const char **cand = xcalloc((size_t)n, sizeof *cand);
    int k = 0;
    double now = now_sec();
    for (int pass = 0; pass < 4; pass++)
        for (int i = 1; i < s->view.n; i++) {
            const ViewEntry *e = &s->view.e[i];
            int in = bsearch(e->rec.id, sl->set, (size_t)sl->nset, sizeof(PeerId), cmp_id) != NULL;
            int live = e->direct && e->knows_self && now - e->heard < 4 * SW_TICK;
            if (in == !(pass & 1) && live == !(pass & 2)) cand[k++] = e->rec.id;
        }
    const char *d = cand[turn % k];
    free(cand);
    return d;
}

// The set is decided: sum its Δs in id order (identical bits on every peer), or fetch the
// average computed elsewhere when one is missing here.
static void finish_commit(Swarm *s, Slot *sl) {
    if (sl->avg_ready || sl->fetch.active) return;
    Contrib **cs = xcalloc((size_t)sl->nset + 1, sizeof *cs);
    int all = sl->nset > 0; // (an empty set comes from no commit this peer makes: fetch it)
    for (int i = 0; i < sl->nset && all; i++) {
        cs[i] = sw_contrib(s, sl, sl->set[i], 0);
        all = cs[i] && cs[i]->complete;
    }
    if (!sl->avg) sl->avg = sw_buf_get(s); // (every element is written before it is read)
    if (!all) {
        free(cs);
        const char *d = sw_avg_donor(s, sl, 0);
        if (d) sw_fetch_start(&sl->fetch, WIRE_ARR_AVERAGE, sl->round, sl->avg, s->P, d);
        return;
    }
    float *a = sl->avg;
    int nl = sl->nset ? cs[0]->nloss : 0;
    for (int i = 0; i < sl->nset; i++)
        if (cs[i]->nloss < nl) nl = cs[i]->nloss;
    // The sum runs without Swarm.mu (the training thread may need it meanwhile): only this
    // thread changes the slot's contributions, and no round close enough to evict it can start
    // while it is being averaged.
    pthread_mutex_unlock(&s->mu);
    float inv = 1.0f / (float)sl->nset;
    for (size_t lo = 0; lo < s->P; lo += SPILL_CHUNK) { // (a chunk at a time: spill.h)
        size_t hi = s->P - lo < SPILL_CHUNK ? s->P : lo + SPILL_CHUNK;
        memset(a + lo, 0, (hi - lo) * sizeof(float));
        for (int i = 0; i < sl->nset; i++) {
            const float *d = cs[i]->delta;
            for (size_t x = lo; x < hi; x++)
                a[x] += d[x];
            spill_drop(d + lo, (hi - lo) * sizeof(float));
        }
        for (size_t x = lo; x < hi; x++)
            a[x] *= inv;
        spill_drop(a + lo, (hi - lo) * sizeof(float));
    }
    pthread_mutex_lock(&s->mu);
    sl->loss = xcalloc((size_t)nl + 1, sizeof(double));
    sl->nloss = nl;
    for (int j = 0; j < nl; j++) {
        for (int i = 0; i < sl->nset; i++)
            sl->loss[j] += cs[i]->losses[j];
        sl->loss[j] /= sl->nset;
    }
    free(cs);
    for (int i = 0; i < sl->nc; i++) // the Δs are no longer needed
        sw_contrib_free(s, &sl->c[i]);
    free(sl->c);
    sl->c = NULL, sl->nc = 0;
    sl->avg_ready = 1;
}

void sw_on_delta(Swarm *s, const WireMsg *m) {
    if (s->c.exchange) {
        sw_shard_on_part(s, m);
        return;
    }
    Slot *sl = msg_slot(s, m->round);
    if (!sl || sl->committed) return;
    size_t piece = m->offset / SW_PIECE;
    size_t want = s->P - m->offset < SW_PIECE ? s->P - m->offset : SW_PIECE;
    if (m->total != s->P || m->offset % SW_PIECE || m->n != want || m->nloss > (uint32_t)s->c.tau ||
        !sw_piece_ok(s, m)) {
        s->st.rejected++;
        return;
    }
    Contrib *c = sw_contrib(s, sl, m->from, 1);
    c->last = now_sec();
    if (c->complete || c->got[piece]) return;
    sw_piece_take(m, c->delta + m->offset);
    spill_drop(c->delta + m->offset, want * sizeof(float));
    c->got[piece] = 1;
    c->ngot++;
    if (m->nloss && !c->losses) {
        c->losses = xcalloc(m->nloss, sizeof(double));
        for (uint32_t i = 0; i < m->nloss; i++)
            c->losses[i] = wire_double(m->losses, i);
        c->nloss = (int)m->nloss;
    }
    if (c->ngot == s->npieces && c->losses) {
        c->complete = 1;
        if (sl->hash_set) send_have(s, sl, NULL);
    }
}

// A round this peer no longer has a slot for (long gone: older than my_round - 2) is answered
// with a COMMIT saying so; 1 when it was.
int sw_answer_gone(Swarm *s, const WireMsg *m, const Slot *old) {
    if (old || m->round < 1 || m->round >= s->my_round - 2) return 0;
    WireMsg *o = s->out;
    o->nids = 0, o->hash = 0, o->attempt = COMMIT_GONE, o->ncut = 0;
    sw_send(s, m->from, WIRE_COMMIT, m->round);
    return 1;
}

// The report m (HAVE or HOLD) from its sender, kept in sl: the ids it holds and its anchor hash.
HaveRep *sw_record_report(Slot *sl, const WireMsg *m) {
    HaveRep *h = sw_report(sl, m->from, 1);
    free(h->ids);
    h->ids = xcalloc((size_t)m->nids + 1, sizeof(PeerId));
    memcpy(h->ids, m->ids, sizeof(PeerId) * (size_t)m->nids);
    h->nids = m->nids, h->hash = m->hash;
    return h;
}

void *sw_append(void *arr, int n, size_t size) {
    void **p = arr;
    char *a = xcalloc((size_t)n + 1, size);
    if (n) memcpy(a, *p, size * (size_t)n);
    free(*p);
    *p = a;
    return a + size * (size_t)n;
}

HaveRep *sw_report(Slot *sl, const char *from, int create) {
    for (int i = 0; i < sl->nhv; i++)
        if (!strcmp(sl->hv[i].from, from)) return &sl->hv[i];
    if (!create) return NULL;
    HaveRep *h = sw_append(&sl->hv, sl->nhv++, sizeof *h);
    snprintf(h->from, sizeof h->from, "%s", from);
    return h;
}

int sw_has_id(PeerId *ids, int n, const char *id) {
    for (int i = 0; i < n; i++)
        if (!strcmp(ids[i], id)) return 1;
    return 0;
}

// The anchor hash most of the round's live participants L report (L[0] is this peer, the
// coordinator). A strict majority decides; without one (two participants that disagree, or a
// three-way split) the coordinator's own hash stands, as every peer's re-sync needs one answer.
uint64_t sw_majority_hash(Slot *sl, PeerId *L, int nl) {
    uint64_t best = sl->hash;
    int bestn = 0;
    for (int p = 0; p < nl; p++) {
        uint64_t h = p ? sw_report(sl, L[p], 0)->hash : sl->hash;
        int n = 0;
        for (int q = 0; q < nl; q++)
            n += (q ? sw_report(sl, L[q], 0)->hash : sl->hash) == h;
        if (n > bestn) best = h, bestn = n;
    }
    return 2 * bestn > nl ? best : sl->hash;
}

int sw_donor_agrees(Swarm *s, const char *id) {
    const Slot *best = NULL;
    for (int i = 0; i < SW_SLOTS; i++) // the latest committed round this peer heard reports of
        if (s->slot[i].round && s->slot[i].committed && s->slot[i].nhv &&
            (!best || s->slot[i].round > best->round))
            best = &s->slot[i];
    if (!best) return -1;
    for (int i = 0; i < best->nhv; i++)
        if (!strcmp(best->hv[i].from, id)) return best->hv[i].hash == best->chash;
    return -1;
}

// The coordinator (the lowest live participant) commits once every live participant holds
// every live participant's Δ: the set is what they all hold, the anchor hash the majority's
// (majority_hash; a coordinator outvoted re-syncs like any other peer that differs).
static void try_commit(Swarm *s, Slot *sl) {
    if (sl->committed || !sl->hash_set) return;
    PeerId *L = xmalloc(sizeof(PeerId) * WIRE_MAX_PEERS);
    PeerId *mine = xmalloc(sizeof(PeerId) * WIRE_MAX_PEERS);
    int nl = view_heard_participants(&s->view, sl->round, L, WIRE_MAX_PEERS);
    int nm = held(sl, mine), ok = nl > 0 && !strcmp(L[0], s->id), all = ok;
    for (int p = 1; p < nl && all; p++) // every live participant has reported
        all = sw_report(sl, L[p], 0) != NULL;
    for (int p = 0; p < nl && ok && all; p++) {
        HaveRep *h = p == 0 ? NULL : sw_report(sl, L[p], 0);
        for (int q = 0; q < nl && ok; q++)
            ok = p == 0 ? sw_has_id(mine, nm, L[q]) : sw_has_id(h->ids, h->nids, L[q]);
    }
    // Everyone has computed its Δ but some never reach some peer (a one-way link): after a
    // deadline generous for a slow link (10 Mbit/s for every Δ), commit what they all hold.
    double now = now_sec();
    if (all && !sl->reported_at) sl->reported_at = now;
    double deadline = 3 * s->c.peer_timeout + (nl - 1) * 4.0 * (double)s->P / 1.25e6;
    if (all && !ok && now - sl->reported_at > deadline) ok = 1;
    if (ok && all) { // S = ∩ of what they hold (a peer that died after everyone got its Δ stays in)
        sl->set = xcalloc((size_t)nm + 1, sizeof(PeerId));
        for (int i = 0; i < nm; i++) {
            int in = 1;
            for (int p = 1; p < nl && in; p++) {
                HaveRep *h = sw_report(sl, L[p], 0);
                in = sw_has_id(h->ids, h->nids, mine[i]);
            }
            if (in) memcpy(sl->set[sl->nset++], mine[i], sizeof(PeerId));
        }
        sl->chash = sw_majority_hash(sl, L, nl);
        sl->committed = 1;
        if (sl->chash != sl->hash) {
            s->st.diverged += !s->diverged, s->diverged = 1;
            fprintf(stderr,
                    "loom peer %s: round %lld: this coordinator's anchor differs from the one "
                    "most participants hold; it re-syncs\n",
                    s->id, (long long)sl->round);
        }
        if (s->c.verbose)
            fprintf(stderr, "loom peer %s: round %lld committed over %d of %d participants\n",
                    s->id, (long long)sl->round, sl->nset, nl);
        sw_send_commit(s, sl, NULL, 0);
        finish_commit(s, sl);
    }
    free(L), free(mine);
}

void sw_on_have(Swarm *s, const WireMsg *m) {
    if (s->c.exchange) return; // (sharded peers report with HOLD)
    Slot *old = m->round >= 1 ? sw_slot(s, m->round, 0) : NULL;
    if (old && old->committed) { // a peer still waiting (a joiner, a late peer) gets the commit
        sw_send_commit(s, old, m->from, 0);
        return;
    }
    if (sw_answer_gone(s, m, old)) return;
    Slot *sl = msg_slot(s, m->round);
    if (!sl) return;
    sw_record_report(sl, m);
    try_commit(s, sl);
}

void sw_on_commit(Swarm *s, const WireMsg *m) {
    Slot *sl = msg_slot(s, m->round);
    if (!sl || (sl->committed && !s->c.exchange)) return;
    if (m->attempt == COMMIT_GONE && m->nids == 0) { // the swarm has moved on without it
        if (!sl->avg_ready) sl->lost = 1;
        return;
    }
    if (s->c.exchange) {
        sw_shard_on_commit(s, m);
        return;
    }
    sl->set = xcalloc((size_t)m->nids + 1, sizeof(PeerId));
    memcpy(sl->set, m->ids, sizeof(PeerId) * (size_t)m->nids);
    sl->nset = m->nids;
    qsort(sl->set, (size_t)sl->nset, sizeof(PeerId), cmp_id);
    sl->chash = m->hash;
    sl->committed = 1;
    if (sl->hash_set && sl->hash != sl->chash) s->st.diverged += !s->diverged, s->diverged = 1;
    finish_commit(s, sl);
}

void sw_round_tick(Swarm *s) {
    sw_pump_jobs(s);
    double now = now_sec();
    for (int i = 0; i < SW_SLOTS; i++) {
        Slot *sl = &s->slot[i];
        if (!sl->round) continue;
        Fetch *f = &sl->fetch;
        if (f->active && f->done) { // the average came from elsewhere
            sl->avg_ready = sl->fetched = 1;
            f->active = 0;
        } else if (f->active && f->failed) {
            if (sl->fetch_turn > s->view.n + 2) sl->lost = 1, f->active = 0;
            const char *d = sl->lost ? NULL : sw_avg_donor(s, sl, ++sl->fetch_turn);
            if (d) sw_fetch_start(f, WIRE_ARR_AVERAGE, sl->round, sl->avg, s->P, d);
        }
        if (s->c.exchange) {
            sw_shard_tick(s, sl, now);
            continue;
        }
        if (sl->want && !sl->avg_ready && now - sl->have_at >= SW_TICK) {
            sl->have_at = now;
            if (!sl->committed) sw_repair(s, sl, now);
            if (sl->committed && !f->active) finish_commit(s, sl);
            if (!sl->committed) send_have(s, sl, NULL);
            try_commit(s, sl);
        }
    }
}

// ---------------------------------------------------------------- the strategy's side

void swarm_contribute(Swarm *s, int64_t r, const float *delta, const double *losses, int nloss) {
    sw_contribute(s, r, delta, NULL, NULL, losses, nloss);
}

void sw_contribute(Swarm *s, int64_t r, const float *delta, int8_t *q8, float *scales,
                   const double *losses, int nloss) {
    pthread_mutex_lock(&s->mu);
    float *copy = sw_buf_get(s); // (copied outside the lock: the network thread goes on)
    pthread_mutex_unlock(&s->mu);
    spill_copy(copy, delta, s->P);
    pthread_mutex_lock(&s->mu);
    Slot *sl = sw_slot(s, r, 1);
    Contrib *c = sw_contrib(s, sl, s->id, 2); // (2: no buffer of its own)
    delta_free(s, c), spill_free(c->q8), free(c->scales);
    c->delta = copy, c->q8 = q8, c->scales = scales, c->pooled = SW_FROM_POOL;
    free(c->losses);
    c->losses = xcalloc((size_t)nloss + 1, sizeof(double));
    memcpy(c->losses, losses, (size_t)nloss * sizeof(double));
    c->nloss = nloss;
    c->ngot = s->npieces, c->complete = 1;
    for (int i = 1; i < s->view.n && !s->c.exchange; i++)
        sw_add_job(s, s->view.e[i].rec.id, r, 0, 0, 0, 0);
    if (s->c.exchange) sw_shard_contributed(s, sl);
    pthread_mutex_unlock(&s->mu);
    sw_wake(s);
}

void swarm_anchor_hash(Swarm *s, int64_t r, uint64_t hash) {
    pthread_mutex_lock(&s->mu);
    Slot *sl = sw_slot(s, r, 1);
    sl->hash = hash, sl->hash_set = 1, sl->want = 1;
    if (sl->committed && sl->chash != hash) s->st.diverged += !s->diverged, s->diverged = 1;
    sl->have_at = 0; // report at once
    pthread_mutex_unlock(&s->mu);
    sw_wake(s);
}

int swarm_average(Swarm *s, int64_t r, float *avg, double *loss, int nloss, SwarmRound *info) {
    double t0 = now_sec();
    pthread_mutex_lock(&s->mu);
    Slot *sl = sw_slot(s, r, 1);
    sl->want = 1;
    while (!sl->avg_ready && !sl->lost && !s->stop) {
        if (sl->fetch.active && sl->fetch.failed && s->view.n == 1) sl->lost = 1;
        sw_wait(s, 0.1);
    }
    if (!sl->avg_ready) {
        pthread_mutex_unlock(&s->mu);
        loom_fail("round %lld's average is no longer held by any peer (the swarm moved on)",
                  (long long)r);
        return SWARM_LOST;
    }
    spill_copy(avg, sl->avg, s->P);
    if (!sl->fetched)
        for (int j = 0; j < nloss && j < sl->nloss; j++)
            loss[j] = sl->loss[j];
    if (info) {
        info->round = r, info->view = s->view.n, info->averaged = sl->nset;
        info->wait_s = now_sec() - t0, info->sent = s->st.sent, info->fetched = sl->fetched;
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}
