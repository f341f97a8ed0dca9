// tier_place.c — which slow tier a run opens (tier.h tier_open_on): a scratch file when the
// fast memory is the host's; under a device, page-locked host memory (--offload host), a disk
// through bounce buffers (--offload disk), or host memory above a disk (--offload host
// --offload-dir DIR --host-mem SIZE: device <- host <- disk, tier_split.c).
#include <stdio.h>

#include "../common.h"
#include "offload.h"
#include "tier_impl.h"

static Tier *open_host(const Backend *be, size_t bytes) {
    return tier_of_host(tier_host_open(be, bytes), bytes);
}

// host_mem less the disk part's bounce buffers holds the front of the tier; all of it when it
// fits (no disk part then, and no bounce buffers: any --host-mem that holds the state will do).
static Tier *open_split(const Backend *be, const char *dir, size_t host_mem, int rank,
                        size_t bytes) {
    char b0[32], b1[32], b2[32], b3[32];
    double bounce = (double)tier_bounce_bytes();
    if (bytes <= host_mem) {
        fprintf(stderr,
                "loom: offload: rank %d: the state's %s fit in --host-mem %s: all of it in "
                "page-locked host memory, none on disk\n",
                rank, offload_size_str((double)bytes, b0, sizeof b0),
                offload_size_str((double)host_mem, b1, sizeof b1));
        return open_host(be, bytes);
    }
    if (host_mem <= tier_bounce_bytes())
        return loom_fail("--host-mem %s: the disk tier below it moves through %s of page-locked "
                         "bounce buffers; give it more than that",
                         offload_size_str((double)host_mem, b0, sizeof b0),
                         offload_size_str(bounce, b1, sizeof b1)),
               NULL;
    size_t cut = (host_mem - tier_bounce_bytes()) / TIER_ALIGN * TIER_ALIGN;
    Tier *front = open_host(be, cut), *back = tier_open_disk(dir, rank, bytes - cut, be);
    if (!back) return tier_close(front), NULL;
    fprintf(stderr,
            "loom: offload: rank %d: %s of the state in page-locked host memory (--host-mem %s "
            "less %s of bounce buffers), %s on disk under %s\n",
            rank, offload_size_str((double)cut, b0, sizeof b0),
            offload_size_str((double)host_mem, b1, sizeof b1),
            offload_size_str(bounce, b2, sizeof b2),
            offload_size_str((double)(bytes - cut), b3, sizeof b3), dir);
    return tier_of_split(tier_split_open(front, back, cut), bytes, tier_direct(back), dir);
}

Tier *tier_open_on(const Backend *be, const char *dir, size_t host_mem, int rank, size_t bytes) {
    if (!be || be->host_memory) return tier_open(dir, rank, bytes);
    if (!backend_supports(be, BACKEND_COPY_STREAM))
        return loom_fail("--offload %s with --device %s: the %s backend lacks %s",
                         dir ? "disk" : "host", be->name, be->name,
                         backend_cap_name(BACKEND_COPY_STREAM)),
               NULL;
    if (dir && host_mem) return open_split(be, dir, host_mem, rank, bytes);
    if (dir) return tier_open_disk(dir, rank, bytes, be);
    char b0[32], b1[32];
    if (host_mem && bytes > host_mem)
        return loom_fail("--host-mem %s: the state's host tier needs %s; add --offload-dir DIR "
                         "for a disk tier below host memory",
                         offload_size_str((double)host_mem, b0, sizeof b0),
                         offload_size_str((double)bytes, b1, sizeof b1)),
               NULL;
    return open_host(be, bytes);
}
