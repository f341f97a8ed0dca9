// swarm_shard.c — --peer-exchange sharded: a round's average by reduce-scatter + all-gather
// instead of every Δ to every peer (docs/PEERS.md, "Sharded averaging").
//
// Commit attempt a of round r names a set S (sorted ids; attempt 1: the live participants
// that have their Δ ready, decided by the coordinator — the lowest live participant — once all
// have reported HOLD). S cuts the P floats into |S| slices of whole CQ_CHUNK chunks; slice j is
// owned by S[j]. Every member sends its Δ's part of slice j to S[j] (DELTA / DELTA8 / DELTAS of
// that range: the Δ as --outer-compress sends it); the owner sums the |S| parts in id order and
// scales by 1/|S| — per float exactly the operations of the all-to-all sum — and sends that
// sum to every peer (SUM, carrying the set's mean losses): fp32, or with
// --outer-compress-sums int8 as int8 codes per CQ_CHUNK (SUM8; sparse pieces under topk as
// SUMS) whose dequantized values the owner applies too. Either way every peer applies the
// owner's bits (int8: not the all-to-all swarm's; no error feedback on the sums). Each peer reports
// (HOLD) which slice sums of attempt a it holds; the coordinator says FINAL (COMMIT 2a + 1) once
// every live member of S holds them all, and only then does a peer take the average. If a member of
// S leaves first (its parts or its slice's sum missing somewhere), the coordinator commits attempt
// a + 1 over the live members: the slices are cut again, every member still holds its Δ (kept until
// the round's average is final) and sends its new parts, and sums of older attempts are dropped.
// COMMIT's attempt field carries 2a (a commit) or 2a + 1 (final); 1 stays COMMIT_GONE.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common.h"
#include "../testhooks.h"
#include "compress.h"
#include "spill.h"
#include "swarm_impl.h"

_Static_assert(SPILL_CHUNK % SW_PIECE == 0, "a span of the sum must be whole pieces");

static int cmp_id(const void *a, const void *b) { return strcmp(a, b); }

// Slice j of the current attempt: chunks [sh_cut[j], sh_cut[j + 1]) as floats [lo, hi) (may be
// empty).
static void slice(const Swarm *s, const Slot *sl, int j, size_t *lo, size_t *hi) {
    size_t a = sl->sh_cut[j], b = sl->sh_cut[j + 1];
    *lo = a * CQ_CHUNK < s->P ? a * CQ_CHUNK : s->P;
    *hi = b * CQ_CHUNK < s->P ? b * CQ_CHUNK : s->P;
}

static int set_index(const Slot *sl, const char *id) {
    const PeerId *p =
        sl->set ? bsearch(id, sl->set, (size_t)sl->nset, sizeof(PeerId), cmp_id) : NULL;
    return p ? (int)(p - sl->set) : -1;
}

static int chunks_held(const uint8_t *got, size_t lo, size_t hi) {
    for (size_t k = lo / CQ_CHUNK; k * CQ_CHUNK < hi; k++)
        if (!got[k]) return 0;
    return 1;
}

static void chunks_mark(uint8_t *got, size_t lo, size_t hi) {
    for (size_t k = lo / CQ_CHUNK; k * CQ_CHUNK < hi; k++)
        got[k] = 1;
}

// The slice sums of sl->sh_att held here: their owners into ids (when given); the count.
static int held(Swarm *s, Slot *sl, PeerId *ids) {
    int k = 0;
    for (int j = 0; sl->sh_att && j < sl->nset; j++) {
        size_t lo, hi;
        slice(s, sl, j, &lo, &hi);
        if (!chunks_held(sl->sh_got, lo, hi)) continue;
        if (ids) memcpy(ids[k], sl->set[j], sizeof(PeerId));
        k++;
    }
    return k;
}

static int all_held(Swarm *s, Slot *sl) { return sl->sh_att && held(s, sl, NULL) == sl->nset; }

static Slot *near_slot(Swarm *s, int64_t r) {
    if (r < 1 || r > s->my_round + 2 || r < s->my_round - 2) return NULL;
    return sw_slot(s, r, 1);
}

static void send_hold(Swarm *s, Slot *sl, const char *to) {
    WireMsg *m = s->out;
    m->attempt = sl->sh_att, m->hash = sl->hash;
    if (sl->sh_att)
        m->nids = held(s, sl, m->ids);
    else if ((m->nids = sw_contrib(s, sl, s->id, 0) != NULL))
        memcpy(m->ids[0], s->id, sizeof(PeerId));
    if (to)
        sw_send(s, to, WIRE_HOLD, sl->round);
    else
        sw_broadcast(s, WIRE_HOLD, sl->round);
}

// --outer-compress-sums int8: the averaged span [c0, c1) of this peer's slice (which starts at
// lo) becomes int8 codes and scales per CQ_CHUNK, and its floats their dequantized values,
// except, under topk, the runs sw_shard_job will send as index/value pairs (sw_sum_run): they keep
// their exact floats. (Rounding only zeroes values, so a run it sends as codes — dense after
// rounding — was dense before: its codes are here.)
static void quantize_span(Swarm *s, Slot *sl, size_t lo, size_t c0, size_t c1) {
    float *a = sl->avg;
    for (size_t p0 = c0, n; p0 < c1; p0 += n) { // (c0 - lo: a multiple of SW_PIECE)
        int sparse = 0;
        n = s->c.compress == CQ_TOPK ? sw_sum_run(s, a, lo, p0, c1, &sparse) : c1 - p0;
        if (sparse) continue;
        int8_t *q = sl->sh_q8 + (p0 - lo);
        float *sc = sl->sh_scales + (p0 - lo) / CQ_CHUNK;
        cq_quantize(a + p0, n, q, sc);
        cq_dequantize(q, sc, n, a + p0);
        spill_drop(q, n);
    }
}

// This peer owns a slice of the current attempt and holds every member's part of it: sum them
// in id order (the all-to-all sum's operations, float by float), the mean losses too, and
// send the sum to every peer.
static void try_sum(Swarm *s, Slot *sl) {
    int me = sl->sh_att && !sl->sh_summed ? set_index(sl, s->id) : -1;
    if (me < 0) return;
    size_t lo, hi;
    slice(s, sl, me, &lo, &hi);
    Contrib **cs = xcalloc((size_t)sl->nset, sizeof *cs);
    int nl = s->c.tau, ok = 1;
    for (int i = 0; i < sl->nset && ok; i++) {
        Contrib *c = cs[i] = sw_contrib(s, sl, sl->set[i], 0);
        ok = c && c->losses && (c->complete || chunks_held(c->got, lo, hi));
        if (ok && c->nloss < nl) nl = c->nloss;
    }
    if (ok) {
        float *a = sl->avg, inv = 1.0f / (float)sl->nset;
        if (s->c.sums_int8) { // the slice's codes and scales (whole chunks: slice() cuts so)
            spill_free(sl->sh_q8), free(sl->sh_scales);
            sl->sh_q8 = spill_alloc(hi - lo + 1);
            sl->sh_scales = xmalloc((cq_nchunks(hi - lo) + 1) * sizeof(float));
        }
        for (size_t c0 = lo; c0 < hi; c0 += SPILL_CHUNK) { // (a chunk at a time: spill.h)
            size_t c1 = hi - c0 < SPILL_CHUNK ? hi : c0 + SPILL_CHUNK;
            memset(a + c0, 0, (c1 - c0) * sizeof(float));
            for (int i = 0; i < sl->nset; i++) {
                for (size_t x = c0; x < c1; x++)
                    a[x] += cs[i]->delta[x];
                spill_drop(cs[i]->delta + c0, (c1 - c0) * sizeof(float));
            }
            for (size_t x = c0; x < c1; x++)
                a[x] *= inv;
            if (s->c.sums_int8) quantize_span(s, sl, lo, c0, c1);
            spill_drop(a + c0, (c1 - c0) * sizeof(float));
        }
        free(sl->loss);
        sl->loss = xcalloc((size_t)nl + 1, sizeof(double));
        sl->nloss = nl;
        for (int j = 0; j < nl; j++) {
            for (int i = 0; i < sl->nset; i++)
                sl->loss[j] += cs[i]->losses[j];
            sl->loss[j] /= sl->nset;
        }
        chunks_mark(sl->sh_got, lo, hi);
        sl->sh_summed = 1, sl->sh_sum_at = now_sec();
        for (int i = 1; i < s->view.n && lo < hi; i++)
            sw_add_job(s, s->view.e[i].rec.id, sl->round, 2, lo, hi, sl->sh_att);
        if (all_held(s, sl)) send_hold(s, sl, NULL);
    }
    free(cs);
}

// This peer's parts of the slices of the current attempt, to their owners (while it is a member
// and holds its Δ).
static void queue_parts(Swarm *s, Slot *sl) {
    if (!sw_contrib(s, sl, s->id, 0) || set_index(sl, s->id) < 0) return;
    for (int j = 0; j < sl->nset; j++) {
        size_t lo, hi;
        slice(s, sl, j, &lo, &hi);
        if (lo < hi && strcmp(sl->set[j], s->id))
            sw_add_job(s, sl->set[j], sl->round, 1, lo, hi, sl->sh_att);
    }
}

// Attempt a over ids (n of them, anchor hash h) is this round's commit now, its slices cut at
// cut (n - 1 boundaries; NULL: the coordinator's, who cuts them — shard_cut.c — and sends the
// commit to every peer first, or equal chunks when the commit came without a cut).
static void adopt(Swarm *s, Slot *sl, uint32_t a, PeerId *ids, int n, uint64_t h,
                  const uint32_t *cut, int announce) {
    PeerId *set = xcalloc((size_t)n + 1, sizeof(PeerId));
    memcpy(set, ids, sizeof(PeerId) * (size_t)n);
    qsort(set, (size_t)n, sizeof(PeerId), cmp_id);
    free(sl->set);
    sl->set = set, sl->nset = n;
    free(sl->sh_cut);
    if (announce) {
        sl->sh_cut = sw_cut_plan(s, sl, n);
    } else {
        sl->sh_cut = xcalloc((size_t)n + 1, sizeof *sl->sh_cut);
        sw_cut_weighted(NULL, s->nchunks, n, sl->sh_cut); // (ends; inside: the commit's cut)
        if (cut) memcpy(sl->sh_cut + 1, cut, sizeof *cut * (size_t)(n - 1));
    }
    sl->sh_att = a, sl->sh_summed = 0, sl->committed = 1, sl->chash = h;
    free(sl->sh_got);
    sl->sh_got = xcalloc(s->nchunks + 1, 1);
    spill_free(sl->sh_q8), free(sl->sh_scales), free(sl->sent); // (an earlier attempt's slice)
    sl->sh_q8 = NULL, sl->sh_scales = NULL, sl->sent = NULL, sl->nsent = 0;
    if (!sl->avg) sl->avg = sw_buf_get(s); // (the slices fill it: sums, or a fetch)
    free(sl->loss);
    sl->loss = NULL, sl->nloss = 0;
    if (sl->hash_set && sl->hash != h) s->st.diverged += !s->diverged, s->diverged = 1;
    if (announce) {
        sw_send_commit(s, sl, NULL, 2 * a);
        if (s->c.verbose) {
            fprintf(stderr, "loom peer %s: round %lld: attempt %u over %d peers (sharded), chunks",
                    s->id, (long long)sl->round, (unsigned)a, n);
            for (int j = 0; j < n; j++)
                fprintf(stderr, " %u", (unsigned)(sl->sh_cut[j + 1] - sl->sh_cut[j]));
            fprintf(stderr, "\n");
        }
    }
    queue_parts(s, sl);
    try_sum(s, sl);
}

// The average stands (FINAL): take it, or fetch it whole when slices are missing here (a
// joiner, a peer that was away).
static void finalize(Swarm *s, Slot *sl) {
    sl->sh_final = 1;
    if (sl->avg_ready || sl->fetch.active) return;
    if (!all_held(s, sl)) {
        const char *d = sw_avg_donor(s, sl, sl->fetch_turn++);
        if (d) sw_fetch_start(&sl->fetch, WIRE_ARR_AVERAGE, sl->round, sl->avg, s->P, d);
        return;
    }
    sl->fetched = sl->loss == NULL; // (the set's losses never came: the local ones stand)
    sl->avg_ready = 1;
    sw_cut_note(s, sl);
    for (int i = 0; i < sl->nc; i++) // the Δs are no longer needed
        sw_contrib_free(s, &sl->c[i]);
    free(sl->c);
    sl->c = NULL, sl->nc = 0;
}

// The coordinator's decisions: the first commit once every live participant has reported, FINAL
// once every live member holds every slice sum, a new attempt when a member left before that.
static void coordinate(Swarm *s, Slot *sl) {
    if (sl->sh_final || !sl->hash_set) return;
    PeerId *L = xmalloc(sizeof(PeerId) * WIRE_MAX_PEERS);
    int nl = view_heard_participants(&s->view, sl->round, L, WIRE_MAX_PEERS), all = 1, k = 0;
    for (int p = 1; p < nl && all; p++) {
        HaveRep *h = sw_report(sl, L[p], 0);
        all = h && h->att <= sl->sh_att; // (a report of a later attempt: its commit comes first)
    }
    if (nl < 1 || strcmp(L[0], s->id) || !all) {
        free(L);
        return;
    }
    if (!sl->sh_att) { // the members: the participants whose Δ is ready (every one reported)
        uint64_t h = sw_majority_hash(sl, L, nl);
        if (h != sl->hash) {
            s->st.diverged += !s->diverged, s->diverged = 1;
            fprintf(stderr,
                    "loom peer %s: round %lld: this coordinator's anchor differs from the one "
                    "most participants hold; it re-syncs\n",
                    s->id, (long long)sl->round);
        }
        for (int p = 0; p < nl; p++) {
            HaveRep *r = p ? sw_report(sl, L[p], 0) : NULL;
            int ready = p ? r->att || (r->nids == 1 && !strcmp(r->ids[0], L[p]))
                          : sw_contrib(s, sl, s->id, 0) != NULL;
            if (ready) memcpy(L[k++], L[p], sizeof(PeerId));
        }
        if (k && !strcmp(L[0], s->id)) adopt(s, sl, 1, L, k, h, NULL, 1);
        free(L);
        return;
    }
    int fin = all_held(s, sl), dead = 0;
    for (int i = 0; i < sl->nset; i++) {
        if (!strcmp(sl->set[i], s->id)) continue;
        if (view_find(&s->view, sl->set[i]) < 0) {
            dead = 1;
            continue;
        }
        HaveRep *h = sw_report(sl, sl->set[i], 0);
        fin &= h && h->att == sl->sh_att && h->nids == sl->nset;
        memcpy(L[k++], sl->set[i], sizeof(PeerId));
    }
    if (fin) {
        sw_send_commit(s, sl, NULL, 2 * sl->sh_att + 1);
        finalize(s, sl);
    } else if (dead) { // its slice, or its parts of others, may be missing: cut again
        memcpy(L[k++], s->id, sizeof(PeerId));
        fprintf(stderr,
                "loom peer %s: round %lld: a member left mid-exchange; attempt %u over %d\n", s->id,
                (long long)sl->round, (unsigned)sl->sh_att + 1, k);
        adopt(s, sl, sl->sh_att + 1, L, k, sl->chash, NULL, 1);
    }
    free(L);
}

void sw_shard_contributed(Swarm *s, Slot *sl) {
    if (sl->sh_att && !sl->avg_ready) queue_parts(s, sl), try_sum(s, sl);
}

void sw_shard_on_part(Swarm *s, const WireMsg *m) {
    Slot *sl = near_slot(s, m->round);
    if (!sl || sl->avg_ready || !strcmp(m->from, s->id)) return;
    size_t end = m->offset + m->n;
    if (m->total != s->P || m->offset % CQ_CHUNK || (end % CQ_CHUNK && end != s->P) ||
        m->nloss > (uint32_t)s->c.tau || !sw_piece_ok(s, m)) {
        s->st.rejected++;
        return;
    }
    Contrib *c = sw_contrib(s, sl, m->from, 1);
    c->last = now_sec();
    sw_piece_take(m, c->delta + m->offset);
    spill_drop(c->delta + m->offset, (size_t)m->n * sizeof(float));
    chunks_mark(c->got, m->offset, end);
    if (m->nloss && !c->losses) {
        c->losses = xcalloc(m->nloss, sizeof(double));
        for (uint32_t i = 0; i < m->nloss; i++)
            c->losses[i] = wire_double(m->losses, i);
        c->nloss = (int)m->nloss;
    }
    try_sum(s, sl);
}

void sw_shard_on_sum(Swarm *s, const WireMsg *m) {
    Slot *sl = near_slot(s, m->round);
    if (!sl || sl->avg_ready || !sl->sh_att || m->attempt != sl->sh_att) return;
    int j = set_index(sl, m->from);
    size_t lo = 0, hi = 0, end = m->offset + m->n;
    if (j >= 0) slice(s, sl, j, &lo, &hi);
    if (j < 0 || m->total != s->P || m->offset < lo || end > hi || m->offset % CQ_CHUNK ||
        (end % CQ_CHUNK && end != s->P) || m->nloss > (uint32_t)s->c.tau ||
        (m->type == WIRE_SUMS && s->c.compress != CQ_TOPK) ||
        (m->type == WIRE_SUM8 && !s->c.sums_int8)) {
        s->st.rejected++;
        return;
    }
    sw_piece_take(m, sl->avg + m->offset);
    spill_drop(sl->avg + m->offset, (size_t)m->n * sizeof(float));
    chunks_mark(sl->sh_got, m->offset, end);
    if (m->nloss && !sl->loss) {
        sl->loss = xcalloc(m->nloss, sizeof(double));
        for (uint32_t i = 0; i < m->nloss; i++)
            sl->loss[i] = wire_double(m->losses, i);
        sl->nloss = (int)m->nloss;
    }
    if (all_held(s, sl)) send_hold(s, sl, NULL);
}

void sw_shard_on_commit(Swarm *s, const WireMsg *m) {
    Slot *sl = near_slot(s, m->round);
    if (!sl || m->attempt < 2 || m->nids < 1 || sl->avg_ready) return;
    uint32_t a = m->attempt / 2;
    if (a < sl->sh_att) return;
    if (m->ncut && m->cut[m->ncut - 1] > s->nchunks) { // (wire.c checked the count and order)
        s->st.rejected++;
        return;
    }
    if (a > sl->sh_att)
        adopt(s, sl, a, (PeerId *)m->ids, m->nids, m->hash, m->ncut ? m->cut : NULL, 0);
    if (m->attempt & 1) finalize(s, sl);
}

static SumSent *sum_sent(Slot *sl, const char *to, int create) {
    for (int i = 0; i < sl->nsent; i++)
        if (!strcmp(sl->sent[i].to, to)) return &sl->sent[i];
    if (!create) return NULL;
    SumSent *t = sw_append(&sl->sent, sl->nsent++, sizeof *t);
    snprintf(t->to, sizeof t->to, "%s", to);
    return t;
}

static int has_id_in(const WireMsg *m, const char *id) {
    for (int i = 0; i < m->nids; i++)
        if (!strcmp(m->ids[i], id)) return 1;
    return 0;
}

// A resend of this peer's slice sum to a reporter that lacks it: none queued to it already, and
// what was handed to its connection has had time to arrive — as long again as handing it over
// took (the connection's queue and the kernel's hold about as much as was waiting to go in
// meanwhile: on a slow link, tens of seconds), unless the connection closed since (a close
// drops what it held).
static void resend_sum(Swarm *s, Slot *sl, HaveRep *h, const WireMsg *m) {
    double now = now_sec();
    int me = set_index(sl, s->id);
    if (me < 0 || has_id_in(m, s->id) || now - sl->sh_sum_at < SW_FETCH_RETRY ||
        now - h->asked < SW_FETCH_RETRY)
        return;
    const SumSent *t = sum_sent(sl, m->from, 0);
    if (t && now - t->done < SW_FETCH_RETRY + t->took && net_lost(s->net, m->from) == t->lost)
        return;
    for (int j = 0; j < s->njobs; j++)
        if (s->jobs[j].round == sl->round && s->jobs[j].kind == 2 &&
            !strcmp(s->jobs[j].to, m->from))
            return;
    size_t lo, hi;
    slice(s, sl, me, &lo, &hi);
    h->asked = now;
    if (lo < hi) sw_add_job(s, m->from, sl->round, 2, lo, hi, sl->sh_att);
}

void sw_shard_on_hold(Swarm *s, const WireMsg *m) {
    Slot *old = m->round >= 1 ? sw_slot(s, m->round, 0) : NULL;
    if (old && old->avg_ready) { // decided here: a peer still waiting gets the final commit
        sw_send_commit(s, old, m->from, 2 * (old->sh_att ? old->sh_att : 1) + 1);
        return;
    }
    if (sw_answer_gone(s, m, old)) return;
    Slot *sl = near_slot(s, m->round);
    if (!sl) return;
    HaveRep *h = sw_record_report(sl, m);
    h->att = m->attempt;
    if (sl->sh_att > m->attempt) // a commit survives its coordinator
        sw_send_commit(s, sl, m->from, 2 * sl->sh_att + (uint32_t)sl->sh_final);
    else if (sl->sh_att && m->attempt == sl->sh_att && sl->sh_summed)
        resend_sum(s, sl, h, m);
    coordinate(s, sl);
}

void sw_shard_tick(Swarm *s, Slot *sl, double now) {
    if (!sl->want || sl->avg_ready || now - sl->have_at < SW_TICK) return;
    sl->have_at = now;
    if (sl->sh_final) {
        finalize(s, sl); // (a fetch that found no donor before)
        return;
    }
    send_hold(s, sl, NULL);
    coordinate(s, sl);
}

int sw_shard_job(Swarm *s, SendJob *jb) {
    Slot *sl = sw_slot(s, jb->round, 0);
    if (!sl || sl->avg_ready || sl->sh_att != jb->att || jb->next >= jb->hi) return -1;
    Contrib *c = jb->kind == 1 ? sw_contrib(s, sl, s->id, 0) : NULL;
    if ((jb->kind == 1 && !c) || (jb->kind == 2 && !sl->sh_summed)) return -1;
    if (!net_writable(s->net, jb->to)) return 0;
    size_t n = jb->hi - jb->next < SW_PIECE ? jb->hi - jb->next : SW_PIECE;
    int type = WIRE_SUM, first = jb->next == jb->lo, sparse = 0;
    if (jb->kind == 2 && s->c.compress == CQ_TOPK)
        n = sw_sum_run(s, sl->avg, jb->lo, jb->next, jb->hi, &sparse);
    if (jb->kind == 1) {
        type = sw_range_msg(s, c, jb->next, n, first);
    } else {
        WireMsg *m = s->out;
        m->attempt = jb->att, m->offset = jb->next, m->total = s->P, m->n = (uint32_t)n;
        m->data = (const uint8_t *)(sl->avg + jb->next);
        m->nloss = first && sl->loss ? (uint32_t)sl->nloss : 0;
        m->losses = (const uint8_t *)sl->loss;
        if (sparse && sw_sparse_msg(s, sl->avg + jb->next, m, sl->sh_q8 != NULL)) {
            type = WIRE_SUMS, spill_drop(sl->avg + jb->next, n * sizeof(float));
        } else if (sl->sh_q8) { // (jb->lo: the slice's start)
            type = WIRE_SUM8;
            m->data = (const uint8_t *)(sl->sh_scales + (jb->next - jb->lo) / CQ_CHUNK);
            sw_q8_msg(s, sl->sh_q8 + (jb->next - jb->lo), m);
        }
    }
    if (sw_send(s, jb->to, type, jb->round) != NET_OK) return 0;
    jb->next += n;
    if (jb->kind == 2 && jb->next >= jb->hi) { // (handed over: resend_sum's clock)
        SumSent *t = sum_sent(sl, jb->to, 1);
        t->done = now_sec(), t->took = t->done - jb->start, t->lost = net_lost(s->net, jb->to);
    }
    if (jb->kind == 1 && jb->round == testhook_peer_kill_exchange()) { // LOOM_FAULT_PEER_KILL
        fprintf(stderr, "loom peer %s: killed by LOOM_FAULT_PEER_KILL mid-exchange\n", s->id);
        nanosleep(&(struct timespec){0, 300000000}, NULL); // (the part leaves; nothing else does)
        raise(SIGKILL);
    }
    return 1;
}
