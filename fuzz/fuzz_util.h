// fuzz_util.h — shared helpers for the libFuzzer targets in fuzz/fuzz_*.c.
// Parsers that take a path get the fuzz input through fuzz_file(): one private temporary
// directory per process (under /dev/shm when it exists, so no disk writes), removed at exit.
#pragma once
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_dir_buf[256];
static char fuzz_paths[8][300];
static int fuzz_npaths;

__attribute__((unused)) static void fuzz_cleanup(void) {
    for (int i = 0; i < fuzz_npaths; i++)
        unlink(fuzz_paths[i]);
    if (fuzz_dir_buf[0]) rmdir(fuzz_dir_buf);
}

// The process's temporary directory (created on first use).
__attribute__((unused)) static const char *fuzz_dir(void) {
    if (!fuzz_dir_buf[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(fuzz_dir_buf, sizeof fuzz_dir_buf, "%s/loom-fuzz-XXXXXX", base);
        if (!mkdtemp(fuzz_dir_buf)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_cleanup);
    }
    return fuzz_dir_buf;
}

// Writes data[0, size) to <fuzz_dir>/<name> (replacing it) and returns the path.
__attribute__((unused)) static const char *fuzz_file(const char *name, const void *data,
                                                     size_t size) {
    char path[300];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    int known = 0;
    for (int i = 0; i < fuzz_npaths; i++)
        if (!strcmp(fuzz_paths[i], path)) known = 1;
    if (!known && fuzz_npaths < 8) snprintf(fuzz_paths[fuzz_npaths++], 300, "%s", path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror("fuzz: open");
        abort();
    }
    const char *p = data;
    while (size) {
        ssize_t w = write(fd, p, size);
        if (w <= 0) {
            perror("fuzz: write");
            abort();
        }
        p += w;
        size -= (size_t)w;
    }
    close(fd);
    for (int i = 0; i < fuzz_npaths; i++)
        if (!strcmp(fuzz_paths[i], path)) return fuzz_paths[i];
    static char last[300];
    snprintf(last, sizeof last, "%s", path);
    return last;
}
