// test_tier.c — the slow tier of block swapping (src/offload/tier.c), on a fresh directory
// under $TMPDIR (default /tmp):
//   * random data survives many async writes and reads of assorted sizes (pieces split across
//     the I/O threads), waited in a shuffled order;
//   * overlapping requests run in queue order: a read after a write sees it, a write after a
//     read does not leak into the read, later overwrites win;
//   * byte counters, the waited clock and its reset;
//   * a misaligned or out-of-range request fails its wait with a clear message, and an I/O
//     error in the worker (a buffer the kernel cannot read) is kept for every later wait;
//   * tier_open refuses a missing directory, a file and an unaligned size; it leaves nothing
//     in the directory, even while open; tier_measure reports bandwidths;
//   * device <- host <- disk (tier_open_on with a directory and --host-mem, on the emu device):
//     the front of the tier in host memory, the rest on disk, the same round trip and ordering
//     with requests that span the cut, tickets older than the split tier's ring still waited
//     for, and the refusals (--host-mem not above the bounce buffers for a state that does not
//     fit in it, a host tier above it).
// Modes for tests/t_offload_tier.sh (sizes take K/M/G suffixes, KiB/MiB/GiB):
//   test_tier --open DIR BYTES     open and close a tier; on failure the message, exit 1
//   test_tier --hold DIR BYTES     open a tier, print "holding", then sleep until killed
//   test_tier --roundtrip DIR      the round-trip and ordering checks on DIR (two tiers)
//   test_tier --measure DIR BYTES PIECE [CHUNK]   tier_measure's read and write bandwidth
//                                         (and the optimizer stream's, in CHUNK pieces)
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../src/backend/backend.h"
#include "../src/common.h"
#include "../src/offload/tier.h"
#include "test.h"

#define MiB ((size_t)1 << 20)
static char dir[4096];
static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) { return rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; }
static void fill(char *p, size_t n) {
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t x = next_rand();
        memcpy(p + i, &x, 8);
    }
}
// A random multiple of TIER_ALIGN in [1, max_pages] pages.
static size_t rand_len(size_t max_pages) { return (1 + next_rand() % max_pages) * TIER_ALIGN; }

static int dir_is_empty(const char *d) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", d);
    return system(cmd) == 0;
}

// Writes the buffer in pieces of random sizes (up to 3072 pages: 12 MiB, several I/O pieces),
// reads it back in other random sizes waiting on the tickets in a shuffled order.
static void roundtrip(Tier *t, size_t bytes) {
    char *src = tier_alloc(bytes), *dst = tier_alloc(bytes);
    fill(src, bytes);
    int nreq = 0;
    for (size_t off = 0; off < bytes; nreq++) {
        size_t n = rand_len(nreq % 3 ? 16 : 3072);
        if (n > bytes - off) n = bytes - off;
        tier_write_async(t, off, src + off, n);
        off += n;
    }
    CHECK(tier_drain(t) == 0, "drain after writes: %s", loom_errmsg());
    uint64_t tickets[4096];
    int k = 0;
    for (size_t off = 0; off < bytes && k < 4096; k++) {
        size_t n = rand_len(k % 2 ? 7 : 2500);
        if (n > bytes - off) n = bytes - off;
        tickets[k] = tier_read_async(t, off, dst + off, n);
        off += n;
    }
    for (int i = k - 1; i > 0; i--) { // shuffle the waits
        int j = (int)(next_rand() % (uint64_t)(i + 1));
        uint64_t x = tickets[i];
        tickets[i] = tickets[j], tickets[j] = x;
    }
    int bad = 0;
    for (int i = 0; i < k; i++)
        bad += tier_wait(t, tickets[i]) != 0;
    CHECK(bad == 0, "%d reads failed: %s", bad, loom_errmsg());
    CHECK(memcmp(src, dst, bytes) == 0, "data read back differs");
    printf("  round trip: %zu MiB in %d writes and %d reads (direct I/O: %d)\n", bytes / MiB, nreq,
           k, tier_direct(t));
    tier_free(src), tier_free(dst);
}

// Overlapping requests queued back to back, no waits between them.
static void ordering(Tier *t, int rounds) {
    size_t n = 16 * MiB;
    char *a = tier_alloc(n), *b = tier_alloc(n), *r1 = tier_alloc(n), *r2 = tier_alloc(n);
    char *want = tier_alloc(n);
    int bad_raw = 0, bad_war = 0, bad_waw = 0;
    for (int i = 0; i < rounds; i++) {
        fill(a, n), fill(b, n);
        size_t lo = rand_len(2000), len = rand_len(1000); // overwrite [lo, lo + len)
        tier_write_async(t, 0, a, n);
        uint64_t rd1 = tier_read_async(t, 0, r1, n); // read after write: sees a
        tier_write_async(t, lo, b, len);             // write after read: r1 keeps a
        tier_write_async(t, 0, a, TIER_ALIGN);       // tiny unrelated overlap at the start
        uint64_t rd2 = tier_read_async(t, 0, r2, n); // a with b over [lo, lo + len)
        CHECK(tier_wait(t, rd2) == 0 && tier_wait(t, rd1) == 0, "%s", loom_errmsg());
        memcpy(want, a, n), memcpy(want + lo, b, len);
        bad_raw += memcmp(r1, a, lo) || memcmp(r1 + lo + len, a + lo + len, n - lo - len);
        bad_war += memcmp(r1 + lo, a + lo, len) != 0;
        bad_waw += memcmp(r2, want, n) != 0;
    }
    CHECK(bad_raw == 0, "%d/%d reads missed the write queued before them", bad_raw, rounds);
    CHECK(bad_war == 0, "%d/%d reads saw a write queued after them", bad_war, rounds);
    CHECK(bad_waw == 0, "%d/%d reads missed an overwrite", bad_waw, rounds);
    printf("  ordering: %d rounds of write / read / overwrite / read, no waits between\n", rounds);
    tier_free(a), tier_free(b), tier_free(r1), tier_free(r2), tier_free(want);
}

TEST(round_trip_and_ordering) {
    Tier *t = tier_open(dir, 0, 64 * MiB);
    CHECK(t, "tier_open: %s", loom_errmsg());
    if (!t) return;
    CHECK(dir_is_empty(dir), "%s not empty while a tier is open", dir);
    roundtrip(t, 64 * MiB);
    ordering(t, 20);
    tier_close(t);
}

TEST(counters_and_waited) {
    Tier *t = tier_open(dir, 3, 32 * MiB);
    CHECK(t, "tier_open: %s", loom_errmsg());
    if (!t) return;
    char *buf = tier_alloc(32 * MiB);
    uint64_t r = 1, w = 1;
    tier_bytes(t, &r, &w);
    CHECK(r == 0 && w == 0 && tier_waited(t) == 0, "fresh tier: %llu read, %llu written",
          (unsigned long long)r, (unsigned long long)w);
    CHECK(tier_wait(t, 0) == 0, "tier_wait(0): %s", loom_errmsg());
    tier_write_async(t, 0, buf, 32 * MiB);
    tier_write_async(t, 4 * MiB, buf, 0); // empty: done at once
    CHECK(tier_drain(t) == 0, "%s", loom_errmsg());
    double w1 = tier_waited(t);
    CHECK(w1 > 0, "waited %g s after draining a 32 MiB write", w1);
    tier_read_async(t, 8 * MiB, buf, 4 * MiB);
    CHECK(tier_drain(t) == 0, "%s", loom_errmsg());
    tier_bytes(t, &r, &w);
    CHECK(r == 4 * MiB && w == 32 * MiB, "%llu read, %llu written", (unsigned long long)r,
          (unsigned long long)w);
    CHECK(tier_waited(t) >= w1, "waited went down");
    tier_reset_waited(t);
    CHECK(tier_waited(t) == 0, "waited %g after reset", tier_waited(t));
    printf("  counters: 4 MiB read, 32 MiB written; waited %.3f s, 0 after reset\n", w1);
    tier_free(buf);
    tier_close(t);
}

// Opens a tier, runs one bad request, expects -1 with `want` in the message, twice.
static void bad_request(const char *what, size_t off, size_t delta, size_t n, const char *want) {
    Tier *t = tier_open(dir, 0, 8 * MiB);
    CHECK(t, "tier_open: %s", loom_errmsg());
    if (!t) return;
    char *buf = tier_alloc(9 * MiB);
    uint64_t ok = tier_write_async(t, 0, buf, MiB);
    uint64_t k = tier_write_async(t, off, buf + delta, n);
    CHECK(k > ok, "tickets %llu then %llu", (unsigned long long)ok, (unsigned long long)k);
    int rc = tier_wait(t, k);
    CHECK(rc == -1 && strstr(loom_errmsg(), want) && strstr(loom_errmsg(), dir),
          "%s: rc %d, message: %s", what, rc, loom_errmsg());
    printf("  %s: %s\n", what, loom_errmsg());
    uint64_t later = tier_read_async(t, 0, buf, MiB);
    CHECK(tier_wait(t, later) == -1 && tier_drain(t) == -1 && strstr(loom_errmsg(), want),
          "%s: the error was not kept for later waits: %s", what, loom_errmsg());
    tier_free(buf);
    tier_close(t);
}

TEST(bad_requests) {
    bad_request("misaligned offset", 100, 0, MiB, "misaligned write");
    bad_request("misaligned length", 0, 0, 1000, "misaligned write");
    bad_request("misaligned buffer", 0, 512, MiB, "misaligned write");
    bad_request("past the end", 7 * MiB, 0, 2 * MiB, "past the end");
    // A worker-side failure: the kernel cannot read a PROT_NONE buffer (EFAULT).
    Tier *t = tier_open(dir, 0, 8 * MiB);
    CHECK(t, "tier_open: %s", loom_errmsg());
    if (!t) return;
    void *none = mmap(NULL, MiB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint64_t k = tier_write_async(t, 0, none, MiB);
    int rc = tier_wait(t, k);
    CHECK(rc == -1 && strstr(loom_errmsg(), strerror(EFAULT)) && strstr(loom_errmsg(), dir),
          "I/O error: rc %d, message: %s", rc, loom_errmsg());
    printf("  I/O error: %s\n", loom_errmsg());
    CHECK(tier_wait(t, 0) == -1 && tier_drain(t) == -1, "the I/O error was not kept");
    munmap(none, MiB);
    tier_close(t);
}

TEST(open_errors) {
    char missing[4200], file[4200];
    snprintf(missing, sizeof missing, "%s/no/such/dir", dir);
    snprintf(file, sizeof file, "%s/a-file", dir);
    CHECK(!tier_open(missing, 0, MiB) && strstr(loom_errmsg(), missing) &&
              strstr(loom_errmsg(), "No such file or directory"),
          "missing dir: %s", loom_errmsg());
    printf("  missing: %s\n", loom_errmsg());
    FILE *f = fopen(file, "w");
    if (f) fclose(f);
    CHECK(!tier_open(file, 0, MiB) && strstr(loom_errmsg(), file) &&
              strstr(loom_errmsg(), "Not a directory"),
          "a file: %s", loom_errmsg());
    printf("  a file: %s\n", loom_errmsg());
    unlink(file);
    CHECK(!tier_open(dir, 0, 1000) && strstr(loom_errmsg(), "multiple of 4096"),
          "unaligned size: %s", loom_errmsg());
    CHECK(dir_is_empty(dir), "%s not empty after the failed opens", dir);
}

TEST(measure) {
    TierSpeed v = {0};
    int rc = tier_measure(dir, NULL, 64 * MiB, 4 * MiB, MiB, &v);
    CHECK(rc == 0 && v.read_bps > 0 && v.write_bps > 0, "rc %d (%s), read %g, write %g B/s", rc,
          loom_errmsg(), v.read_bps, v.write_bps);
    // the optimizer's stream: both rates scaled by one measured factor
    double k = v.opt_read_bps / v.read_bps;
    CHECK(k > 0 && fabs(v.opt_write_bps / v.write_bps - k) < 1e-9 * k,
          "stream rates %g / %g B/s against %g / %g", v.opt_read_bps, v.opt_write_bps, v.read_bps,
          v.write_bps);
    CHECK(!tier_measure(dir, NULL, 64 * MiB, 4 * MiB, 0, &v) && v.opt_read_bps == v.read_bps &&
              v.opt_write_bps == v.write_bps,
          "no stream timed: %g / %g B/s against %g / %g", v.opt_read_bps, v.opt_write_bps,
          v.read_bps, v.write_bps);
    // CPU seconds per byte: not negative, and below 1 s per MB (a core copies GBs a second)
    CHECK(v.read_cpu >= 0 && v.write_cpu >= 0 && v.read_cpu < 1e-6 && v.write_cpu < 1e-6,
          "CPU per byte: read %g, write %g s", v.read_cpu, v.write_cpu);
    CHECK(tier_measure(dir, NULL, 64 * MiB, 1000, MiB, &v) == -1, "unaligned piece accepted");
    CHECK(tier_measure(dir, NULL, 64 * MiB, 4 * MiB, 1000, &v) == -1, "unaligned chunk accepted");
    CHECK(dir_is_empty(dir), "%s not empty after tier_measure", dir);
}
// The split tier on emu: the fast buffers may be host memory (emu's copies take either side).
TEST(split_under_device) {
    const Backend *emu = backend_emu();
    size_t bytes = 24 * MiB, host_mem = tier_bounce_bytes() + 6 * MiB + 3 * TIER_ALIGN, h, d;
    Tier *t = tier_open_on(emu, dir, host_mem, 0, bytes);
    CHECK(t, "split tier: %s", loom_errmsg());
    if (!t) return;
    tier_parts(t, &h, &d);
    CHECK(h == 6 * MiB + 3 * TIER_ALIGN && h + d == bytes, "parts: %zu host, %zu disk", h, d);
    CHECK(dir_is_empty(dir), "%s not empty while a split tier is open", dir);
    roundtrip(t, bytes);
    ordering(t, 20);
    // more requests than the ring remembers: the first ticket is still waited for
    char *buf = tier_alloc(2 * TIER_ALIGN);
    uint64_t first = tier_write_async(t, h - TIER_ALIGN, buf, 2 * TIER_ALIGN), last = first;
    for (int i = 0; i < 20000; i++)
        last = tier_write_async(t, (size_t)(i % 64) * TIER_ALIGN, buf, TIER_ALIGN);
    CHECK(tier_wait(t, first) == 0 && tier_done(t, first), "an old ticket: %s", loom_errmsg());
    CHECK(tier_wait_upto(t, last) == 0 && tier_done(t, last), "the last: %s", loom_errmsg());
    uint64_t past = tier_read_async(t, bytes - TIER_ALIGN, buf, 2 * TIER_ALIGN);
    CHECK(tier_wait(t, past) == -1 && strstr(loom_errmsg(), "past the end"),
          "a read past the end: %s", loom_errmsg());
    tier_free(buf);
    tier_close(t);
    CHECK(!tier_open_on(emu, dir, tier_bounce_bytes(), 0, bytes) &&
              strstr(loom_errmsg(), "bounce buffers"),
          "--host-mem of only the bounce buffers: %s", loom_errmsg());
    CHECK(!tier_open_on(emu, NULL, 8 * MiB, 0, bytes) && strstr(loom_errmsg(), "--offload-dir"),
          "a host tier above --host-mem: %s", loom_errmsg());
    t = tier_open_on(emu, dir, 2 * bytes, 0, bytes); // it fits: host memory only
    CHECK(t, "%s", loom_errmsg());
    if (t) tier_parts(t, &h, &d), tier_close(t);
    CHECK(h == bytes && d == 0, "all of it fits: %zu host, %zu disk", h, d);
    // a --host-mem below the bounce buffers that holds the state: no disk part, no bounce
    t = tier_open_on(emu, dir, 4 * MiB, 0, 2 * MiB);
    CHECK(t, "a small state in a small --host-mem: %s", loom_errmsg());
    if (t) tier_parts(t, &h, &d), tier_close(t);
    CHECK(h == 2 * MiB && d == 0, "the small state: %zu host, %zu disk", h, d);
}

static size_t parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    int sh = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    return (size_t)(v * (double)((size_t)1 << sh));
}

static int run_mode(int argc, char **argv) {
    const char *m = argv[1];
    if (!strcmp(m, "--roundtrip") && argc == 3) {
        snprintf(dir, sizeof dir, "%s", argv[2]);
        RUN(round_trip_and_ordering);
        Tier *t = tier_open(dir, 1, MiB); // a second tier: the fallback warning is not repeated
        CHECK(t, "second tier_open: %s", loom_errmsg());
        printf("direct %d\n", t ? tier_direct(t) : -1);
        tier_close(t);
        return test_summary();
    }
    if ((!strcmp(m, "--open") || !strcmp(m, "--hold")) && argc == 4) {
        Tier *t = tier_open(argv[2], 0, parse_size(argv[3]));
        if (!t) {
            fprintf(stderr, "loom: %s\n", loom_errmsg());
            return 1;
        }
        printf(m[2] == 'o' ? "opened (direct I/O: %d)\n" : "holding (direct I/O: %d)\n",
               tier_direct(t));
        fflush(stdout);
        while (m[2] == 'h')
            pause();
        tier_close(t);
        return 0;
    }
    if (!strcmp(m, "--measure") && (argc == 5 || argc == 6)) {
        TierSpeed v;
        size_t chunk = argc == 6 ? parse_size(argv[5]) : 0;
        if (tier_measure(argv[2], NULL, parse_size(argv[3]), parse_size(argv[4]), chunk, &v)) {
            fprintf(stderr, "loom: %s\n", loom_errmsg());
            return 1;
        }
        printf("%s pieces: write %.0f MB/s, read %.0f MB/s; CPU %.3f s per GB written, %.3f s "
               "per GB read\n",
               argv[4], v.write_bps / 1e6, v.read_bps / 1e6, v.write_cpu * 1e9, v.read_cpu * 1e9);
        if (chunk)
            printf("%s stream: write %.0f MB/s, read %.0f MB/s\n", argv[5], v.opt_write_bps / 1e6,
                   v.opt_read_bps / 1e6);
        return 0;
    }
    fprintf(stderr, "usage: test_tier [--open|--hold DIR BYTES | --roundtrip DIR | "
                    "--measure DIR BYTES PIECE]\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc > 1) return run_mode(argc, argv);
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/loom-tier-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror(dir);
        return 1;
    }
    RUN(round_trip_and_ordering);
    RUN(counters_and_waited);
    RUN(bad_requests);
    RUN(open_errors);
    RUN(measure);
    RUN(split_under_device);
    CHECK(dir_is_empty(dir), "not empty at the end");
    rmdir(dir);
    return test_summary();
}
