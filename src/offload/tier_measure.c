// tier_measure.c — how fast the slow tier (tier.h) moves the requests swapping makes: large
// requests of a unit's size in each direction, and the optimizer's stream of small pieces
// (swap_update.c's walk), through a tier of its own on the same directory.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "tier.h"

// Queues bytes/piece requests of one kind, then drains; the seconds it took, or -1 (cpu: the
// process's CPU seconds meanwhile).
static double timed_pass(Tier *t, int write, char *buf, size_t cap, size_t bytes, size_t piece,
                         double *cpu) {
    double t0 = now_sec(), c0 = process_cpu_sec();
    for (size_t off = 0; off < bytes; off += piece) {
        size_t n = bytes - off < piece ? bytes - off : piece;
        char *b = buf + off % cap; // requests beyond the buffer reuse it (a ring)
        if (write)
            tier_write_async(t, off, b, n);
        else
            tier_read_async(t, off, b, n);
    }
    if (tier_drain(t)) return -1;
    *cpu = process_cpu_sec() - c0;
    return now_sec() - t0;
}

// swap_update.c's walk over 4 regions of `region` bytes in pieces of `chunk`: each piece reads
// one chunk of every region (parameters, gradients, m, v) and writes three back, two pieces in
// flight, a buffer's next reads queued once its previous writes are done. Seconds, or -1.
static double timed_stream(Tier *t, char *buf, size_t region, size_t chunk) {
    uint64_t rd[2][4] = {{0}}, wr[2][3] = {{0}};
    size_t n = region / chunk;
    double t0 = now_sec();
    for (size_t i = 0; i <= n; i++) {
        int q = (int)(i % 2);
        if (i < n) { // the next piece's reads, into the buffer whose writes are done
            for (int k = 0; k < 3; k++)
                tier_wait(t, wr[q][k]);
            for (int k = 0; k < 4; k++)
                rd[q][k] =
                    tier_read_async(t, k * region + i * chunk, buf + (4 * q + k) * chunk, chunk);
        }
        if (i == 0) continue;
        int p = q ^ 1; // the previous piece: its reads, then its writes (parameters, m, v)
        for (int k = 0; k < 4; k++)
            tier_wait(t, rd[p][k]);
        for (int k = 0, j = 0; k < 4; k++)
            if (k != 1)
                wr[p][j++] = tier_write_async(t, k * region + (i - 1) * chunk,
                                              buf + (4 * p + k) * chunk, chunk);
    }
    return tier_drain(t) ? -1 : now_sec() - t0;
}

// Sets out's opt rates from the stream timed over `bytes` (twice; 1 when it does not fit).
static int measure_stream(Tier *t, size_t bytes, size_t chunk, TierSpeed *out) {
    out->opt_read_bps = out->read_bps, out->opt_write_bps = out->write_bps;
    size_t region = chunk ? bytes / 4 / chunk * chunk : 0;
    if (!region) return 0;
    char *buf = tier_fast_alloc(t, 8 * chunk);
    double s = 0;
    for (int rep = 0; rep < 2 && s >= 0; rep++) {
        double x = timed_stream(t, buf, region, chunk);
        s = x < 0 ? -1 : s + x;
    }
    tier_fast_free(t, buf);
    if (s < 0) return -1;
    double rd = 2.0 * 4 * region, wr = 2.0 * 3 * region; // both repeats
    double k = (rd / out->read_bps + wr / out->write_bps) / (s > 1e-9 ? s : 1e-9);
    out->opt_read_bps = k * out->read_bps, out->opt_write_bps = k * out->write_bps;
    return 0;
}

int tier_measure(const char *dir, const Backend *be, size_t bytes, size_t piece, size_t chunk,
                 TierSpeed *out) {
    if (!bytes || !piece || bytes % TIER_ALIGN || piece % TIER_ALIGN || chunk % TIER_ALIGN)
        return loom_fail("tier_measure: %zu bytes in pieces of %zu (optimizer chunks of %zu): "
                         "the first two must be positive, all multiples of %zu",
                         bytes, piece, chunk, TIER_ALIGN);
    Tier *t = tier_open_on(be, dir, 0, 0, bytes);
    if (!t) return -1;
    size_t cap = (size_t)256 << 20; // memory used: at most 256 MiB (or one piece), whole pieces
    cap = cap < piece ? piece : cap / piece * piece;
    if (cap > bytes) cap = (bytes + piece - 1) / piece * piece;
    char *buf = tier_fast_alloc(t, cap);
    uint64_t x = 0x9E3779B97F4A7C15ull; // not zeros: storage that compresses must not flatter
    for (size_t i = 0; !tier_fast_backend(t) && i < cap / 8; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(buf + 8 * i, &x, 8);
    }
    // a run overwrites its scratch file (the fill wrote all of it), and the first write into
    // preallocated blocks is slower (the filesystem converts them: 1.3-1.5 GB/s against
    // 1.9-2.2 GB/s on the project's virtio disk): the region is written once untimed
    double wc = 0, rc = 0, w = timed_pass(t, 1, buf, cap, bytes, piece, &wc);
    if (w >= 0) w = timed_pass(t, 1, buf, cap, bytes, piece, &wc);
    double r = w < 0 ? -1 : timed_pass(t, 0, buf, cap, bytes, piece, &rc);
    if (r >= 0) {
        out->write_bps = bytes / (w > 1e-9 ? w : 1e-9);
        out->read_bps = bytes / (r > 1e-9 ? r : 1e-9);
        out->write_cpu = wc / (double)bytes, out->read_cpu = rc / (double)bytes;
        if (!dir) out->write_cpu = out->read_cpu = 0; // copy engines (the wait may spin)
        if (measure_stream(t, bytes, chunk, out)) r = -1;
    }
    tier_fast_free(t, buf);
    tier_close(t);
    return r < 0 ? -1 : 0;
}
