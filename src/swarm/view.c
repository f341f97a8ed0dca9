// view.c — membership records, gossip merge, timeouts and tombstones (see view.h).
#include "view.h"

#include <stdlib.h>
#include <string.h>

#include "../common.h"

void view_init(View *v, const PeerRecord *self, double now) {
    memset(v, 0, sizeof *v);
    v->cap = 8;
    v->e = xcalloc((size_t)v->cap, sizeof *v->e);
    v->e[0].rec = *self;
    v->e[0].heard = now;
    v->e[0].direct = 1;
    v->n = 1;
    snprintf(v->self, sizeof v->self, "%s", self->id);
}

void view_free(View *v) {
    free(v->e);
    free(v->dead);
    free(v->dead_at);
    memset(v, 0, sizeof *v);
}

PeerRecord *view_self(View *v) { return &v->e[0].rec; }

int view_find(const View *v, const char *id) {
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->e[i].rec.id, id)) return i;
    return -1;
}

static int dead_index(const View *v, const char *id) {
    for (int i = 0; i < v->ndead; i++)
        if (!strcmp(v->dead[i].id, id)) return i;
    return -1;
}

int view_merge(View *v, const PeerRecord *r, int direct, double now) {
    if (!strcmp(r->id, v->self)) return 0; // only this peer changes its own record
    int i = view_find(v, r->id);
    if (i >= 0) {
        if (direct) v->e[i].heard = now, v->e[i].direct = 1;
        if (r->revision <= v->e[i].rec.revision) return 0;
        v->e[i].rec = *r;
        return 1;
    }
    if (r->flags & WIRE_PEER_LEFT) return 0;
    int d = dead_index(v, r->id);
    if (d >= 0) {
        if (r->revision <= v->dead[d].revision) return 0; // gossip about a peer that left
        v->dead[d] = v->dead[--v->ndead];
        v->dead_at[d] = v->dead_at[v->ndead];
    }
    if (v->n == v->cap) {
        v->cap *= 2;
        ViewEntry *e = xcalloc((size_t)v->cap, sizeof *e);
        memcpy(e, v->e, sizeof *e * (size_t)v->n);
        free(v->e);
        v->e = e;
    }
    memset(&v->e[v->n], 0, sizeof v->e[v->n]);
    v->e[v->n].rec = *r;
    v->e[v->n].heard = now; // learned now: it has a full timeout to be heard from
    v->e[v->n].direct = direct;
    v->n++;
    return 1;
}

void view_heard(View *v, const char *id, double now) {
    int i = view_find(v, id);
    if (i > 0) v->e[i].heard = now, v->e[i].direct = 1;
}

int view_remove(View *v, const char *id, double now) {
    int i = view_find(v, id);
    if (i <= 0) return 0;
    if (v->ndead == v->capdead) {
        v->capdead = v->capdead ? 2 * v->capdead : 8;
        PeerRecord *d = xcalloc((size_t)v->capdead, sizeof *d);
        double *t = xcalloc((size_t)v->capdead, sizeof *t);
        if (v->ndead) {
            memcpy(d, v->dead, sizeof *d * (size_t)v->ndead);
            memcpy(t, v->dead_at, sizeof *t * (size_t)v->ndead);
        }
        free(v->dead), free(v->dead_at);
        v->dead = d, v->dead_at = t;
    }
    v->dead[v->ndead] = v->e[i].rec;
    v->dead_at[v->ndead++] = now;
    v->e[i] = v->e[--v->n];
    return 1;
}

int view_expire(View *v, double timeout, double now, char (*out)[WIRE_ID_MAX + 1], int max) {
    int k = 0;
    for (int i = 1; i < v->n;) {
        if (now - v->e[i].heard > timeout) {
            if (k < max) snprintf(out[k], sizeof out[k], "%s", v->e[i].rec.id);
            k++;
            view_remove(v, v->e[i].rec.id, now); // moves the last entry into i
        } else {
            i++;
        }
    }
    for (int d = 0; d < v->ndead;) {
        if (now - v->dead_at[d] > 10 * timeout) {
            v->dead[d] = v->dead[--v->ndead];
            v->dead_at[d] = v->dead_at[v->ndead];
        } else {
            d++;
        }
    }
    return k;
}

static int cmp_id(const void *a, const void *b) { return strcmp(a, b); }

static int participants(const View *v, int64_t r, char (*ids)[WIRE_ID_MAX + 1], int max,
                        int heard) {
    int k = 0;
    for (int i = 0; i < v->n && k < max; i++) {
        const PeerRecord *p = &v->e[i].rec;
        if (heard && !v->e[i].direct) continue;
        if (p->first_round >= 1 && p->first_round <= r && !(p->flags & WIRE_PEER_LEFT))
            snprintf(ids[k++], WIRE_ID_MAX + 1, "%s", p->id);
    }
    qsort(ids, (size_t)k, WIRE_ID_MAX + 1, cmp_id);
    return k;
}

int view_participants(const View *v, int64_t r, char (*ids)[WIRE_ID_MAX + 1], int max) {
    return participants(v, r, ids, max, 0);
}

int view_heard_participants(const View *v, int64_t r, char (*ids)[WIRE_ID_MAX + 1], int max) {
    return participants(v, r, ids, max, 1);
}

int view_position(char (*ids)[WIRE_ID_MAX + 1], int n, const char *id) {
    for (int i = 0; i < n; i++)
        if (!strcmp(ids[i], id)) return i;
    return -1;
}
