// stop_agree.h — agreeing on the step to stop at when the ranks do not meet every step (CO2's
// workers run τ local steps between round ends, at their own pace). Nothing is exchanged until
// some rank asks to stop (a signal reached it): it sends a notice to every other rank and joins
// a small all-reduce (max) of [the step boundary it has reached, its step time, −grace left].
// Every rank checks for notices at its step boundaries and, while it waits inside a step, from
// the communication wait hook; on hearing one it joins too (with the boundary that step ends
// at). A rank that has joined pauses at that boundary until everyone has (the wait is under the
// watchdog): a rank blocked at a round end for a paused one has joined from its wait hook, so
// the all-reduce always completes. Its result — the furthest boundary S any rank reached, the
// slowest step time, the least grace left — is the same everywhere, and no rank is past S.
#pragma once
#include "comm.h"

typedef struct StopAgree StopAgree;

// Over the ranks of `ranks` (a communicator of its own is split from it). Collective.
StopAgree *stop_agree_create(const Comm *ranks);
void stop_agree_free(StopAgree *a);
// Another rank has asked to stop (a notice arrived); cheap when none has.
int stop_agree_heard(StopAgree *a);
// Joins once (later calls do nothing): this rank is at (or its step ends at) `boundary`.
void stop_agree_join(StopAgree *a, int boundary, double step_s, double grace_left);
int stop_agree_joined(const StopAgree *a);
// Waits for every rank to join; the agreed values. 0, or -1 when the wait failed.
int stop_agree_wait(StopAgree *a, int *boundary, double *step_s, double *grace_left);
