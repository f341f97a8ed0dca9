// tier_host.c — the slow tier in host memory under a device (--offload host, tier.h): one block
// of the backend's page-locked host memory per process, and requests that are the backend's
// copy stream (backend.h copy_async: host <-> device, after the compute queued before them, in
// order). The fast side is device memory: tier_fast_alloc hands out device buffers.
//
// Every request completes in queue order (one copy stream), so the tier's rule — a request never
// starts before an earlier overlapping one has completed — holds, and waiting for a ticket waits
// for every earlier one.
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "tier_host.h"

struct TierHost {
    const Backend *be;
    char *store;
    size_t size;
    uint64_t last; // the last ticket handed out
    uint64_t rd, wr;
    double waited;
};

TierHost *tier_host_open(const Backend *be, size_t bytes) {
    TierHost *h = xcalloc(1, sizeof *h);
    h->be = be, h->size = bytes;
    h->store = be->host_alloc(bytes ? bytes : 1);
    return h;
}

void tier_host_close(TierHost *h) {
    if (!h) return;
    tier_host_wait(h, h->last);
    h->be->host_free(h->store);
    free(h);
}

uint64_t tier_host_submit(TierHost *h, int write, size_t off, const void *buf, size_t n) {
    if (off > h->size || n > h->size - off)
        die(EXIT_IO,
            "--offload host: %s of %zu bytes at offset %zu is past the end of the "
            "%zu-byte host tier (internal error)",
            write ? "write" : "read", n, off, h->size);
    uint64_t t = write ? h->be->copy_async(h->store + off, buf, n)
                       : h->be->copy_async((void *)buf, h->store + off, n);
    *(write ? &h->wr : &h->rd) += n;
    h->last = t;
    return t;
}

int tier_host_wait(TierHost *h, uint64_t t) {
    if (!t) return 0;
    double t0 = now_sec();
    h->be->copy_wait(t);
    h->waited += now_sec() - t0;
    return 0;
}

int tier_host_done(TierHost *h, uint64_t t) { return !t || h->be->copy_done(t); }

uint64_t tier_host_last(const TierHost *h) { return h->last; }

double *tier_host_waited(TierHost *h) { return &h->waited; }

void tier_host_bytes(const TierHost *h, uint64_t *read, uint64_t *written) {
    if (read) *read = h->rd;
    if (written) *written = h->wr;
}

const Backend *tier_host_backend(const TierHost *h) { return h->be; }
