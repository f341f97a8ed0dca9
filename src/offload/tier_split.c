// tier_split.c — device <- host <- disk (tier.h, tier_open_on with a directory and host_mem):
// the first `cut` bytes of the tier live in page-locked host memory (a host tier, tier_host.c:
// the copy stream), the rest in a scratch file under the directory (a disk tier under the
// device, through its I/O threads' bounce buffers). A request goes to the part its bytes are
// in, or is cut in two at `cut`; what lives where is fixed when the tier opens (the executor's
// layout puts the parameters, read twice a step, first: swap.h).
//
// Tickets are the split tier's own, one per request in submission order. A ring remembers the
// children's tickets of the last RING requests: each entry's own ticket in each part (0: the
// request has no bytes there) and the last ticket each part had issued by then (what waiting
// for every earlier request waits for). A ticket older than the ring is answered with the
// oldest entry still in it, whose children's tickets are at least as late: the wait is exact
// or longer, never shorter, and tier_done says 0 until that later entry is done.
#include "tier_split.h"

#include <pthread.h>
#include <stdlib.h>

#include "../common.h"

#define RING ((uint64_t)1 << 14)

typedef struct {
    uint64_t own[2];  // the request's ticket in the front (0) and the back (1); 0: none there
    uint64_t upto[2]; // the last ticket each part had issued when the request was queued
} Entry;

struct TierSplit {
    Tier *part[2]; // 0: host memory [0, cut); 1: the disk [cut, size)
    size_t cut;
    pthread_mutex_t mu;
    uint64_t next;    // the next ticket (the first is 1)
    uint64_t last[2]; // the last ticket each part issued
    Entry *ring;
};

TierSplit *tier_split_open(Tier *front, Tier *back, size_t cut) {
    TierSplit *s = xcalloc(1, sizeof *s);
    s->part[0] = front, s->part[1] = back, s->cut = cut, s->next = 1;
    s->ring = xcalloc(RING, sizeof *s->ring);
    pthread_mutex_init(&s->mu, NULL);
    return s;
}

void tier_split_close(TierSplit *s) {
    if (!s) return;
    tier_close(s->part[0]);
    tier_close(s->part[1]);
    pthread_mutex_destroy(&s->mu);
    free(s->ring);
    free(s);
}

static uint64_t part_submit(Tier *t, int write, size_t off, const void *buf, size_t n) {
    return write ? tier_write_async(t, off, buf, n) : tier_read_async(t, off, (void *)buf, n);
}

uint64_t tier_split_submit(TierSplit *s, int write, size_t off, const void *buf, size_t n) {
    Entry e = {{0, 0}, {0, 0}};
    const char *b = buf;
    pthread_mutex_lock(&s->mu);
    if (n && off < s->cut) { // the bytes before the cut
        size_t k = n < s->cut - off ? n : s->cut - off;
        e.own[0] = s->last[0] = part_submit(s->part[0], write, off, b, k);
    }
    if (n && off + n > s->cut) { // the bytes after it (the disk tier checks the range)
        size_t at = off > s->cut ? off : s->cut;
        e.own[1] = s->last[1] =
            part_submit(s->part[1], write, at - s->cut, b + (at - off), off + n - at);
    }
    e.upto[0] = s->last[0], e.upto[1] = s->last[1];
    uint64_t ticket = s->next++;
    s->ring[ticket % RING] = e;
    pthread_mutex_unlock(&s->mu);
    return ticket;
}

// The entry of ticket t (*exact 0: t left the ring; the oldest entry in it instead).
static Entry lookup(TierSplit *s, uint64_t t, int *exact) {
    pthread_mutex_lock(&s->mu);
    uint64_t oldest = s->next > RING ? s->next - RING : 1;
    *exact = t >= oldest;
    Entry e = t >= s->next ? (Entry){{0, 0}, {s->last[0], s->last[1]}}
                           : s->ring[(*exact ? t : oldest) % RING];
    pthread_mutex_unlock(&s->mu);
    return e;
}

int tier_split_wait(TierSplit *s, uint64_t ticket, int upto) {
    if (!ticket) return 0;
    int exact, rc = 0;
    Entry e = lookup(s, ticket, &exact);
    for (int p = 0; p < 2; p++)
        if (upto || !exact)
            rc |= tier_wait_upto(s->part[p], e.upto[p]);
        else if (e.own[p])
            rc |= tier_wait(s->part[p], e.own[p]);
    return rc ? -1 : 0;
}

int tier_split_done(TierSplit *s, uint64_t ticket, int upto) {
    if (!ticket) return 1;
    int exact, done = 1;
    Entry e = lookup(s, ticket, &exact);
    for (int p = 0; p < 2; p++)
        done &= exact && !upto ? tier_done(s->part[p], e.own[p])
                               : tier_done_upto(s->part[p], e.upto[p]);
    return done;
}

int tier_split_drain(TierSplit *s) {
    int a = tier_drain(s->part[0]), b = tier_drain(s->part[1]);
    return a || b ? -1 : 0;
}

double tier_split_waited(const TierSplit *s) {
    return tier_waited(s->part[0]) + tier_waited(s->part[1]);
}

void tier_split_reset_waited(TierSplit *s) {
    tier_reset_waited(s->part[0]);
    tier_reset_waited(s->part[1]);
}

void tier_split_bytes(const TierSplit *s, uint64_t *read, uint64_t *written) {
    uint64_t r[2], w[2];
    for (int p = 0; p < 2; p++)
        tier_bytes(s->part[p], &r[p], &w[p]);
    if (read) *read = r[0] + r[1];
    if (written) *written = w[0] + w[1];
}

const Tier *tier_split_back(const TierSplit *s) { return s->part[1]; }

size_t tier_split_cut(const TierSplit *s) { return s->cut; }
