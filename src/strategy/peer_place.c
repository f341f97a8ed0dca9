// peer_place.c — where a peer's arrays live (see strat_peer.h): the model in memory, swapped
// (--offload disk: its outer state and the swarm's arrays in files under --offload-dir, a span of
// each resident at a time, counted in --fast-mem) or on a device (--offload host: everything but
// the units computing in host memory); `--offload-dir` alone: the model in memory, the arrays in
// files. The spans every pass over the arrays walks.
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../common.h"
#include "../swarm/spill.h"
#include "../testhooks.h"
#include "strat_peer.h"

// With --offload, the spans of SPILL_CHUNK floats resident at a time (counted in --fast-mem):
// the training thread's passes walk up to three arrays (anchor, momentum, Δ/average), the
// swarm's thread sums a slice over the Δs it received (one span of each, dropped as it goes)
// and pieces arrive and leave one at a time; the rest is headroom.
#define PEER_SPANS_KEPT 8
// With --offload, an allowance for the swarm's messages in flight: pieces of 1 MiB queued in
// ZeroMQ to and from the other peers (up to 8 to each, 64 from each) and the allocator's hold
// on them. Measured: 7 and 22 MiB above the rest of the budget for two 124M peers
// (docs/PEERS.md).
#define PEER_MSGS_KEPT (32.0 * 1048576)

// The passes over the outer state walk it a span at a time (with --offload it lives in files,
// swarm/spill.h): [lo, end) of at most SPILL_CHUNK floats, never across a block's ends. A span
// starts at its block's start or SPILL_CHUNK floats after the previous one, so on one of the
// block's norm chunks (gpt.h): per-tensor norms summed span by span are the whole-model sums.
size_t peer_span_end(const GPT *m, size_t lo) {
    size_t e = m->nparams - lo < SPILL_CHUNK ? m->nparams : lo + SPILL_CHUNK;
    for (int b = 0; b < m->nblocks; b++) {
        size_t b0 = m->blocks[b].off, b1 = b0 + m->blocks[b].n;
        if (b0 > lo && b0 < e) e = b0;
        if (b1 > lo && b1 < e) e = b1;
    }
    return e;
}

// dst ← src, P floats, the model in memory: a chunk at a time when either is an array in a
// file (spill.h), so that it does not stay resident.
void peer_copy_whole(GPT *m, float *dst, const float *src) {
    if (spill_active())
        spill_copy(dst, src, m->nparams);
    else
        m->be->copy(dst, src, m->nparams);
}

int peer_place(Strategy *s, Peer *p) {
    const StrategyConfig *c = s->cfg;
    GPT *m = s->model;
    size_t P = m->nparams;
    // swapped: the outer state and the swarm's arrays live in files under --offload-dir
    // (swarm/spill.h); what stays resident are the spans the passes over them hold at a time
    // (on a device --fast-mem bounds the device's memory: they are host memory, outside it)
    p->w.kept = !m->be->host_memory ? 0 : PEER_SPANS_KEPT * 4.0 * SPILL_CHUNK + PEER_MSGS_KEPT;
    p->w.kept_what = "the spans in use of the peer's outer state and of the swarm's Δs and "
                     "averages, which live in files under --offload-dir, and the swarm's "
                     "messages in flight";
    if (whole_create(s, &p->w, s->grid->dp_comm, 0)) return -1;
    // the outer state and the swarm's arrays live in files whenever there is an --offload-dir
    // (--offload needs one); without --offload the model stays in memory (a 124M peer at B4
    // T256 held 2.9 GiB this way, ~7.8 at B1 with the arrays in memory: BENCHMARKS.md)
    if (c->offload_dir && mkdir(c->offload_dir, 0700) && errno != EEXIST)
        return loom_fail("--offload-dir %s: cannot create: %s", c->offload_dir, strerror(errno));
    if (c->offload_dir && !c->offload && !m->be->host_memory) // (swapped, x moves through host)
        return loom_fail("loom peer --offload-dir with --device %s: the outer state in files "
                         "needs the model in host memory or swapped (--offload disk)",
                         c->device);
    if (c->offload_dir && !testhook_peer_no_spill() && spill_setup(c->offload_dir)) return -1;
    p->anchor = spill_floats(P), p->mom = spill_floats(P), p->avg = spill_floats(P);
    if (c->outer_compress) p->ef = spill_floats(P); // (zeroed)
    if (!spill_active()) { // in memory: their pages now, not in the first rounds' passes
        memset(p->mom, 0, P * sizeof(float)), memset(p->avg, 0, P * sizeof(float));
        if (p->ef) memset(p->ef, 0, P * sizeof(float));
    }
    if (!p->w.sw) {
        peer_copy_whole(m, p->anchor, m->params);
        if (spill_active())
            fprintf(stderr,
                    "loom peer %s: --offload-dir: the model in memory; the outer state and the "
                    "swarm's arrays (%.1f MiB each) live in files under %s, a span of each in "
                    "memory at a time (docs/PEERS.md)\n",
                    c->peer_id, 4.0 * P / 1048576, c->offload_dir);
    } else {
        for (size_t lo = 0, hi; lo < P; lo = hi) {
            hi = peer_span_end(m, lo);
            if (whole_swap_full_params(&p->w, p->anchor + lo, lo, hi - lo)) return -1;
            spill_drop(p->anchor + lo, (hi - lo) * sizeof(float));
        }
        if (c->offload_host && !c->offload_dir)
            fprintf(stderr,
                    "loom peer %s: --offload host: the model is swapped from host memory onto "
                    "the device; the outer state and the swarm's arrays (%.1f MiB each) live in "
                    "host memory (docs/PEERS.md)\n",
                    c->peer_id, 4.0 * P / 1048576);
        else
            fprintf(stderr,
                    "loom peer %s: --offload: the model is swapped; the outer state and the "
                    "swarm's arrays (%.1f MiB each) live in files under --offload-dir, %.0f MiB "
                    "of them in memory at a time (docs/PEERS.md)\n",
                    c->peer_id, 4.0 * P / 1048576, p->w.kept / 1048576);
    }
    return 0;
}
