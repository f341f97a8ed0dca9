// swarm_send.c — the Δ pieces this peer sends (see swarm_impl.h): the send jobs queued per peer
// (at a contribution, for a newcomer), their pump (a bounded burst per call, never past a full
// queue), a piece resent when a peer asks for it, and the repair that asks a sender for the
// pieces of its Δ that never came here. The rounds these pieces serve: swarm_round.c.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "swarm_impl.h"

void sw_add_job(Swarm *s, const char *to, int64_t r, int kind, size_t lo, size_t hi, uint32_t att) {
    if (s->njobs == s->capjobs) {
        s->capjobs = s->capjobs ? 2 * s->capjobs : 16;
        SendJob *j = xcalloc((size_t)s->capjobs, sizeof *j);
        if (s->njobs) memcpy(j, s->jobs, sizeof *j * (size_t)s->njobs);
        free(s->jobs);
        s->jobs = j;
    }
    SendJob *j = &s->jobs[s->njobs++];
    snprintf(j->to, sizeof j->to, "%s", to);
    j->round = r, j->next = lo, j->kind = kind, j->lo = lo, j->hi = hi, j->att = att;
    j->start = now_sec();
}

void sw_new_peer(Swarm *s, const char *id) {
    if (s->c.exchange) return; // (sharded: it gets the slice sums it reports lacking)
    for (int i = 0; i < SW_SLOTS; i++) {
        Slot *sl = &s->slot[i];
        if (sl->round && !sl->committed && sw_contrib(s, sl, s->id, 0))
            sw_add_job(s, id, sl->round, 0, 0, 0, 0);
    }
}

// Sends the pending Δ pieces, one piece per peer per pass, until every queue is full.
// (At most SW_BURST pieces per call: the network thread holds Swarm.mu meanwhile, and the
// training thread must not wait long for it.)
void sw_pump_jobs(Swarm *s) {
    for (int moved = 1, sent = 0; moved && sent < SW_BURST;) {
        moved = 0;
        for (int j = 0; j < s->njobs;) {
            SendJob *jb = &s->jobs[j];
            int rc = jb->kind ? sw_shard_job(s, jb) : 0;
            if (rc < 0) {
                s->jobs[j] = s->jobs[--s->njobs];
                continue;
            }
            if (jb->kind) {
                moved |= rc, sent += rc, j++;
                continue;
            }
            Slot *sl = sw_slot(s, jb->round, 0);
            Contrib *c = sl && !sl->committed ? sw_contrib(s, sl, s->id, 0) : NULL;
            if (!c || jb->next == s->npieces) {
                s->jobs[j] = s->jobs[--s->njobs];
                continue;
            }
            if (!net_writable(s->net, jb->to)) { // its queue is full: encode nothing yet
                j++;
                continue;
            }
            int type = sw_piece_msg(s, c, jb->next);
            if (sw_send(s, jb->to, type, jb->round) == NET_OK) jb->next++, moved = 1, sent++;
            j++;
        }
    }
}

// A piece of this peer's own Δ of a round, asked for by a peer that lacks it.
void sw_send_delta_piece(Swarm *s, const WireMsg *m) {
    Slot *sl = sw_slot(s, m->round, 0);
    Contrib *c = sl && !sl->committed ? sw_contrib(s, sl, s->id, 0) : NULL;
    if (!c || m->total != s->P || m->offset % SW_PIECE || m->offset >= s->P) return;
    int type = sw_piece_msg(s, c, m->offset / SW_PIECE);
    sw_send(s, m->from, type, m->round);
}

// A Δ this peer lacks although its sender holds it (its HAVE says so) and no piece of it came
// for SW_FETCH_RETRY seconds (it was sent before this peer could take it, or pieces were
// lost): ask the sender for the missing pieces.
void sw_repair(Swarm *s, Slot *sl, double now) {
    for (int i = 0; i < sl->nhv; i++) {
        HaveRep *h = &sl->hv[i];
        if (!sw_has_id(h->ids, h->nids, h->from)) continue; // it has not contributed (yet)
        Contrib *c = sw_contrib(s, sl, h->from, 0);
        if (c && c->complete) continue;
        double last = c ? c->last : sl->born;
        if (now - last < SW_FETCH_RETRY || now - h->asked < SW_FETCH_RETRY) continue;
        h->asked = now;
        for (size_t k = 0; k < s->npieces; k++) {
            if (c && c->got[k]) continue;
            WireMsg *o = s->out;
            o->what = WIRE_ARR_DELTA, o->offset = k * SW_PIECE, o->total = s->P;
            o->n = (uint32_t)(s->P - o->offset < SW_PIECE ? s->P - o->offset : SW_PIECE);
            if (sw_send(s, h->from, WIRE_FETCH, sl->round) != NET_OK) break;
        }
    }
}
