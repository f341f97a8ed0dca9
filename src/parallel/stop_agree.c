// stop_agree.c — the stop agreement of ranks that do not meet every step (see stop_agree.h).
#include "stop_agree.h"

#include <stdlib.h>

#include "../common.h"

struct StopAgree {
    Comm *c;    // its own communicator: the notices ride on its heartbeat tag
    int joined; // this rank has joined (notified the others, started the all-reduce)
    int heard;  // a notice has arrived
    float v[3]; // boundary, step seconds, −grace left: the maximum over the ranks
    CommReq req;
};

StopAgree *stop_agree_create(const Comm *ranks) {
    StopAgree *a = xcalloc(1, sizeof *a);
    a->c = comm_split(ranks, 0, ranks->rank, "stop");
    return a;
}

void stop_agree_free(StopAgree *a) {
    if (!a) return;
    if (a->joined) comm_wait(&a->req);
    free(a);
}

int stop_agree_heard(StopAgree *a) {
    if (!a->heard && a->c->size > 1 && comm_notified(a->c) > 0) a->heard = 1;
    return a->heard;
}

void stop_agree_join(StopAgree *a, int boundary, double step_s, double grace_left) {
    if (a->joined) return;
    a->joined = 1;
    comm_notify(a->c);
    a->v[0] = (float)boundary, a->v[1] = (float)step_s;
    a->v[2] = (float)(grace_left < 1e30 ? -grace_left : -1e30);
    a->req = comm_iallreduce_max(a->c, a->v, 3);
}

int stop_agree_joined(const StopAgree *a) { return a->joined; }

int stop_agree_wait(StopAgree *a, int *boundary, double *step_s, double *grace_left) {
    if (!a->joined || comm_wait(&a->req)) return -1;
    *boundary = (int)a->v[0], *step_s = a->v[1];
    *grace_left = a->v[2] <= -1e30f ? 1e30 : -(double)a->v[2];
    return 0;
}
