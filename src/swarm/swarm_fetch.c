// swarm_fetch.c — a joiner's download of the swarm's state (the anchor and outer momentum at a
// round end b) from every live peer that holds version b at once: the pieces of both arrays are
// spread over the sources, at most SW_PULL_WINDOW in flight per source, each DATA checked to
// carry the whole array's expected hash (the donor's META) and the arrays hash-checked once
// complete. A source that leaves the view, answers that it no longer holds b, sends another
// version of the array, or does not answer for SW_FETCH_RETRY seconds has its outstanding pieces
// asked of the others. Peers at the same round end hold the same bits (docs/PEERS.md), so any of
// them can serve any piece; a diverged one is dropped by the hash check.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "../testhooks.h"
#include "swarm_impl.h"

void sw_pull_free(Pull *p) {
    free(p->got), free(p->asked), free(p->by);
    memset(p, 0, sizeof *p);
}

static int src_index(const Pull *p, const char *id) {
    for (int i = 0; i < p->nsrc; i++)
        if (!strcmp(p->src[i], id)) return i;
    return -1;
}

static void add_source(Pull *p, const char *id) {
    if (p->nsrc < SW_PULL_SRC && src_index(p, id) < 0)
        snprintf(p->src[p->nsrc++], sizeof(PeerId), "%s", id);
}

// Every peer of the view that holds state and knows this one (it answers only peers of its view)
// is a source, one that joined since too. Returns how many of those holding state do not know
// this peer yet.
static int add_sources(Swarm *s, Pull *p) {
    if (testhook_peer_one_donor()) return 0; // LOOM_PEER_ONE_DONOR
    int unknown = 0;
    for (int i = 1; i < s->view.n; i++) {
        const ViewEntry *e = &s->view.e[i];
        if (e->rec.first_round < 1 || src_index(p, e->rec.id) >= 0) continue;
        if (e->knows_self)
            add_source(p, e->rec.id);
        else
            unknown++;
    }
    return unknown;
}

void sw_pull_start(Swarm *s, Pull *p, int64_t round, float *a, float *m, uint64_t ha, uint64_t hm,
                   const char *first) {
    int keep = p->got && p->round == round && p->dst[0] == a && p->dst[1] == m &&
               p->hash[0] == ha && p->hash[1] == hm;
    if (!keep) {
        sw_pull_free(p);
        p->round = round, p->dst[0] = a, p->dst[1] = m, p->hash[0] = ha, p->hash[1] = hm;
        p->npieces = (s->P + SW_PIECE - 1) / SW_PIECE;
        p->got = xcalloc(2 * p->npieces, 1);
        p->asked = xcalloc(2 * p->npieces, sizeof(double));
        p->by = xcalloc(2 * p->npieces, sizeof(int));
    }
    for (size_t k = 0; k < 2 * p->npieces; k++)
        p->asked[k] = 0, p->by[k] = -1;
    p->nsrc = 0; // (the counts of an earlier try are not this one's)
    memset(p->dead, 0, sizeof p->dead), memset(p->served, 0, sizeof p->served);
    add_source(p, first);
    add_sources(s, p);
    p->active = 1, p->done = p->failed = 0;
    p->why[0] = 0;
    p->started = now_sec();
}

// Source i can no longer serve: its outstanding pieces go back to the others.
static void drop_source(Pull *p, int i, const char *why) {
    if (p->dead[i]) return;
    p->dead[i] = 1;
    for (size_t k = 0; k < 2 * p->npieces; k++)
        if (!p->got[k] && p->by[k] == i) p->asked[k] = 0;
    snprintf(p->why, sizeof p->why, "%s %s", p->src[i], why);
}

// The live source with the fewest pieces outstanding (below the window), other than `avoid`
// (the one a piece was asked of before) unless it is the only one free; -1 when none is free.
static int pick_source(const Pull *p, const int *out, int avoid) {
    int best = -1;
    for (int i = 0; i < p->nsrc; i++)
        if (!p->dead[i] && out[i] < SW_PULL_WINDOW && i != avoid &&
            (best < 0 || out[i] < out[best]))
            best = i;
    if (best < 0 && avoid >= 0 && !p->dead[avoid] && out[avoid] < SW_PULL_WINDOW) best = avoid;
    return best;
}

void sw_pull_pump(Swarm *s, Pull *p) {
    if (!p->active || p->done || p->failed) return;
    // (while the donor is the only source and peers that hold state have not heard of this one
    // yet, wait for their gossip, up to SW_PULL_GATHER seconds, so the first pieces are spread;
    // not for all of them: the view may still list a peer that is gone, which never answers)
    if (add_sources(s, p) && p->nsrc < 2 && now_sec() - p->started < SW_PULL_GATHER) return;
    int live = 0, out[SW_PULL_SRC] = {0};
    for (int i = 0; i < p->nsrc; i++) {
        if (!p->dead[i] && view_find(&s->view, p->src[i]) < 0) drop_source(p, i, "left");
        live += !p->dead[i];
    }
    if (!live) {
        p->failed = 1;
        char why[160];
        snprintf(why, sizeof why, "no peer holds round %lld's state any more (last: %.100s)",
                 (long long)p->round, p->why[0] ? p->why : "none");
        snprintf(p->why, sizeof p->why, "%s", why);
        return;
    }
    double now = now_sec();
    size_t n2 = 2 * p->npieces;
    for (size_t k = 0; k < n2; k++) {
        if (p->got[k] || p->asked[k] <= 0) continue;
        if (now - p->asked[k] >= SW_FETCH_RETRY)
            p->asked[k] = 0; // unanswered: ask again, of another source if one is free
        else
            out[p->by[k]]++;
    }
    for (size_t k = 0; k < n2; k++) {
        if (p->got[k] || p->asked[k] > 0) continue;
        int i = pick_source(p, out, p->by[k]);
        if (i < 0) break;
        size_t piece = k % p->npieces, off = piece * SW_PIECE;
        WireMsg *o = s->out;
        o->what = k < p->npieces ? WIRE_ARR_ANCHOR : WIRE_ARR_MOMENTUM;
        o->offset = off, o->total = s->P;
        o->n = (uint32_t)(s->P - off < SW_PIECE ? s->P - off : SW_PIECE);
        int rc = sw_send(s, p->src[i], WIRE_FETCH, p->round);
        if (rc == NET_ERR) {
            drop_source(p, i, "cannot be reached");
            continue;
        }
        if (rc != NET_OK) { // its queue is full: another source, or later
            out[i] = SW_PULL_WINDOW;
            k--;
            continue;
        }
        p->asked[k] = now, p->by[k] = i;
        out[i]++;
    }
}

int sw_pull_data(Swarm *s, Pull *p, const WireMsg *m) {
    int i = src_index(p, m->from);
    if (!p->active || i < 0 || m->round != p->round ||
        (m->what != WIRE_ARR_ANCHOR && m->what != WIRE_ARR_MOMENTUM))
        return 0;
    if (p->done || p->failed || p->dead[i]) return 1;
    int a = m->what == WIRE_ARR_MOMENTUM;
    if (m->n == 0 && m->total == 0) {
        drop_source(p, i, "no longer holds that version");
        return 1;
    }
    if (m->hash != p->hash[a]) { // another state than the donor's (a diverged peer)
        drop_source(p, i, "holds another state of that round");
        return 1;
    }
    if (m->total != s->P || m->offset % SW_PIECE || m->offset >= s->P) return 1;
    size_t piece = m->offset / SW_PIECE, k = (size_t)a * p->npieces + piece;
    size_t want = s->P - m->offset < SW_PIECE ? s->P - m->offset : SW_PIECE;
    if (m->n != want || p->got[k]) return 1;
    wire_floats(m->data, m->n, p->dst[a] + m->offset);
    spill_drop(p->dst[a] + m->offset, (size_t)m->n * sizeof(float));
    p->got[k] = 1, p->served[i]++;
    if (++p->ngot < 2 * p->npieces) return 1;
    if (swarm_hash(p->dst[0], s->P) != p->hash[0] || swarm_hash(p->dst[1], s->P) != p->hash[1]) {
        memset(p->got, 0, 2 * p->npieces), p->ngot = 0;
        p->failed = 1;
        snprintf(p->why, sizeof p->why, "the downloaded state does not match its hash");
        return 1;
    }
    p->done = 1;
    return 1;
}

int sw_pull_sources(const Pull *p, char *buf, size_t n) {
    int k = 0;
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < p->nsrc; i++) {
        if (!p->served[i]) continue;
        int w = snprintf(buf + len, n - len, "%s%s (%zu)", k ? ", " : "", p->src[i], p->served[i]);
        if (w > 0 && (size_t)w < n - len) len += (size_t)w;
        k++;
    }
    return k;
}
