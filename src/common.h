// common.h — small helpers every module uses: errors, allocation, timing, checksums.
// Library code reports failures with loom_fail() (message kept in loom_errmsg) and returns
// an error code; only the CLI turns an error into an exit status.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// Exit codes used by the CLI (all in 1..125 so shells and mpirun keep them).
enum { EXIT_USAGE = 2, EXIT_INPUT = 3, EXIT_NUMERIC = 4, EXIT_IO = 5 };

// Record an error message (printf-style) and return -1, so `return loom_fail(...)` reads well.
int loom_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *loom_errmsg(void);
// Print "loom: <msg>" to stderr and exit with `code`.
_Noreturn void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Exit with the recorded error message.
_Noreturn void die_last(int code);

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
// Room for one more of an array of n elements of `size` bytes at p with room for *cap: doubled
// (from `first`) when full, its elements kept. Returns the array (p, or its new place).
void *xgrow(void *p, size_t n, size_t *cap, size_t first, size_t size);
// 64-byte aligned, zeroed; released with free().
float *xalloc_floats(size_t n);

double now_sec(void);
// CPU seconds this process (all its threads) has used so far.
double process_cpu_sec(void);
// Blocks the asynchronous signals a run answers (SIGTERM, SIGINT, SIGUSR1, SIGALRM: stop.h) in
// the calling thread, so that helper threads (progress, I/O, network) never take them and the
// calls they make are not interrupted.
void thread_block_signals(void);
// This process's resident memory now (VmRSS) and its peak so far (VmHWM), in bytes, from
// /proc/self/status; 0 where that cannot be read.
size_t rss_bytes(void);
size_t rss_peak_bytes(void);
// Hands the allocator's free memory back to the system: large blocks are mapped on their own
// from then on (a fixed threshold instead of glibc's sliding one, which keeps freed blocks of up
// to 32 MiB resident in the heap) and the heap is trimmed now. A process whose memory is
// budgeted (block swapping) calls it before it measures what it holds.
void heap_release(void);
// The intersection of [a, b) and [lo, hi): its start in *start and its length (0 when empty).
static inline size_t range_isect(size_t a, size_t b, size_t lo, size_t hi, size_t *start) {
    size_t s = a > lo ? a : lo, e = b < hi ? b : hi;
    *start = s;
    return e > s ? e - s : 0;
}
// CRC-32 (zlib's crc32_z) of data, continuing from crc: crc32_update(0, ...) starts a new one.
uint32_t crc32_update(uint32_t crc, const void *data, size_t n);
// snprintf into out[n] for a path; -1 (loom_fail naming the start of it) when it does not fit,
// instead of silently using a truncated path.
int path_fmt(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// Read a whole file; returns NULL and records an error on failure.
char *read_file(const char *path, size_t *len);
// Write a file atomically: path.tmp, fsync, rename, fsync of the directory.
int write_file_atomic(const char *path, const void *data, size_t len);
// A file written to "<path>.tmp.<pid>" and renamed over path only by aout_commit, so the
// destination never holds a partial file. After the first failed write every later call is a
// no-op that returns -1, so callers may check only the final aout_commit.
typedef struct {
    FILE *fp;
    int failed;
    char path[4096];
    char tmp[4096 + 32];
} AtomicOut;

int aout_open(AtomicOut *o, const char *path);
int aout_write(AtomicOut *o, const void *data, size_t n);
// Writes n zero bytes.
int aout_write_zeros(AtomicOut *o, size_t n);
// Flush, fsync, rename over the destination, fsync the directory. Removes the temporary file
// on failure (and when an earlier write failed, keeping that write's error message).
int aout_commit(AtomicOut *o);
// Gives up: closes and removes the temporary file; the destination is untouched.
void aout_abort(AtomicOut *o);
