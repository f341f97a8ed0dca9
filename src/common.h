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
// 64-byte aligned, zeroed; released with free().
float *xalloc_floats(size_t n);

double now_sec(void);
// CRC-32 (zlib's crc32_z) of data, continuing from crc: crc32_update(0, ...) starts a new one.
uint32_t crc32_update(uint32_t crc, const void *data, size_t n);
// Read a whole file; returns NULL and records an error on failure.
char *read_file(const char *path, size_t *len);
// Write a file atomically: path.tmp, fsync, rename, fsync of the directory.
int write_file_atomic(const char *path, const void *data, size_t len);
