// offload_interference.c — how much the compute slows while the slow tier moves bytes: a
// product of a layer's shape timed alone and while the tier streams (reads and writes
// alternated, a few requests always in flight), in alternated rounds whose times are summed
// (short windows under a CPU quota are quantized by its period: sums average that out). What it
// finds is the compute seconds lost per byte moved (OffloadCosts.io_slow), which the simulation
// charges to the compute stream for the requests that overlap it.
//
// Why measured and not derived from the I/O threads' CPU: on the project's virtual machine a
// tier on its virtio disk took 0.006-0.03 CPU seconds per GB in the process, but a layer's
// forward ran 1.8-2x slower while another process streamed 10 GB/s through the tier — about
// 0.05 s per GB: the host's copies into the guest's memory compete with the compute for what
// the guest cannot see. A run moving its bytes through the step pays the same, per byte.
#include <stdlib.h>

#include "../common.h"
#include "offload_plan.h"
#include "tier.h"

#define ROUNDS 4
#define IN_FLIGHT 4
#define WINDOW_S 0.1 // seconds of compute per timing
#define MAX_REPS 64

typedef struct {
    Tier *t;
    char *buf;
    size_t piece, bytes, next; // requests of `piece` bytes walking the file
    uint64_t ticket[IN_FLIGHT];
    int k; // requests issued so far (even: reads, odd: writes)
} Feeder;

// Keeps IN_FLIGHT requests queued: every finished one is replaced (all share one buffer: what
// it holds does not matter here).
static void feed(Feeder *f) {
    for (int i = 0; i < IN_FLIGHT; i++) {
        if (f->ticket[i] && !tier_done(f->t, f->ticket[i])) continue;
        if (f->next + f->piece > f->bytes) f->next = 0;
        f->ticket[i] = f->k++ % 2 ? tier_write_async(f->t, f->next, f->buf, f->piece)
                                  : tier_read_async(f->t, f->next, f->buf, f->piece);
        f->next += f->piece;
    }
}

// Seconds of `reps` products (N,C)·(C,OC)ᵀ, feeding the tier between them when f is not NULL.
static double compute(const Backend *be, float *out, const float *in, const float *w, int N, int C,
                      int OC, int reps, Feeder *f) {
    double t0 = now_sec();
    for (int r = 0; r < reps; r++) {
        if (f) feed(f);
        be->matmul_forward(out, in, w, NULL, N, C, OC);
    }
    return now_sec() - t0;
}

int offload_io_interference(const GPT *m, const char *dir, size_t bytes, size_t piece,
                            double *s_per_byte) {
    const Backend *be = m->be;
    int N = 256, C = m->cfg.C, OC = 4 * C;
    float *in = be->alloc((size_t)N * C), *w = be->alloc((size_t)OC * C),
          *out = be->alloc((size_t)N * OC);
    be->fill(in, 0.01f, (size_t)N * C), be->fill(w, 0.02f, (size_t)OC * C);
    double one = compute(be, out, in, w, N, C, OC, 3, NULL) / 3; // warm, then size the window
    int reps = (int)(WINDOW_S / (one > 1e-6 ? one : 1e-6)) + 1;
    reps = reps < MAX_REPS ? reps : MAX_REPS; // a tiny model's window is short, not thousands of
                                              // calls (each may allocate: under ASan, kept)
    Feeder f = {.t = tier_open(dir, 0, bytes), .piece = piece, .bytes = bytes};
    int rc = f.t ? 0 : -1;
    if (!rc) {
        f.buf = tier_alloc(piece);
        for (size_t off = 0; off + piece <= bytes; off += piece) // written once, as a run's file
            tier_write_async(f.t, off, f.buf, piece);
        rc = tier_drain(f.t);
    }
    double alone = 0, busy = 0, moved = 0;
    for (int r = 0; r < ROUNDS && !rc; r++) {
        alone += compute(be, out, in, w, N, C, OC, reps, NULL);
        uint64_t r0, w0, r1, w1;
        tier_bytes(f.t, &r0, &w0);
        busy += compute(be, out, in, w, N, C, OC, reps, &f);
        tier_bytes(f.t, &r1, &w1);
        rc = tier_drain(f.t);
        moved += (double)(r1 - r0 + w1 - w0);
    }
    if (f.t) tier_free(f.buf), tier_close(f.t);
    be->release(in), be->release(w), be->release(out);
    if (rc) return -1;
    *s_per_byte = moved > 0 && busy > alone ? (busy - alone) / moved : 0;
    return 0;
}
