// view.h — a peer's view of the swarm's membership (no master): one record per peer (id,
// address, revision, the rounds it takes part in, flags) and when this peer last heard from it
// directly. Views spread by gossip: a record replaces the one held for the same id when its
// revision is higher (a restarted peer starts with a higher revision: it is derived from its
// start time). A peer not heard from directly for the timeout leaves the view and its
// (id, revision) is remembered as a tombstone, so gossip that still carries it cannot bring it
// back; only a higher revision (a new incarnation) can.
#pragma once
#include "wire.h"

typedef struct {
    PeerRecord rec;
    double heard;   // local time it was last heard from directly (or learned, for a new entry)
    int knows_self; // its own view holds this peer (its gossip or welcome listed it): it answers
    int direct;     // heard from directly since it entered this view (not only through gossip)
} ViewEntry;

typedef struct {
    ViewEntry *e;
    int n, cap;
    PeerRecord *dead; // tombstones
    double *dead_at;
    int ndead, capdead;
    char self[WIRE_ID_MAX + 1];
} View;

void view_init(View *v, const PeerRecord *self, double now);
void view_free(View *v);
// This peer's own record (always entry 0).
PeerRecord *view_self(View *v);
// Index of id, or -1.
int view_find(const View *v, const char *id);
// Merges a record heard from someone (direct: from the peer itself, which also refreshes
// `heard`). Returns 1 if the view changed (a new peer, or a newer revision), 0 otherwise.
int view_merge(View *v, const PeerRecord *r, int direct, double now);
// Refreshes `heard` for id (any message from it).
void view_heard(View *v, const char *id, double now);
// Removes id (BYE, or timed out), leaving a tombstone. Returns 1 if it was there.
int view_remove(View *v, const char *id, double now);
// Removes every peer (not this one) silent for more than timeout; their ids go to out (up to
// max; out may be NULL with max 0). Returns how many left. Old tombstones (10 × timeout) are
// forgotten.
int view_expire(View *v, double timeout, double now, char (*out)[WIRE_ID_MAX + 1], int max);
// The ids of the peers that take part in round r (first_round in [1, r], not left), sorted;
// returns the count (at most max).
int view_participants(const View *v, int64_t r, char (*ids)[WIRE_ID_MAX + 1], int max);
// view_participants less the peers never heard from directly since they entered this view
// (learned through others' gossip only: a peer that died just before this one learned of it
// must not be waited for a second --peer-timeout). Round commits wait for these.
int view_heard_participants(const View *v, int64_t r, char (*ids)[WIRE_ID_MAX + 1], int max);
// Position of id in a sorted id list (or -1).
int view_position(char (*ids)[WIRE_ID_MAX + 1], int n, const char *id);
