// spill.c — arrays in unlinked, preallocated, shared file mappings (see spill.h): the registry
// of the mappings (so spill_drop and spill_free know what is theirs), allocation and release.
#include "spill.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../common.h"

// Host arrays from this size on are anonymous mappings: the kernel hands out zeroed pages as
// they are first touched, so an array written only in part (a sharded peer's buffer for a
// member's parts: its own slice of P) costs only those pages, and none is cleared twice.
#define SPILL_ANON_MIN ((size_t)1 << 20)

typedef struct {
    char *base;
    size_t len; // mapped bytes (whole pages)
    int anon;   // host memory (spill_drop must not touch it: MADV_DONTNEED would zero it)
} Map;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char *dir;
static Map *maps;
static int nmaps, capmaps;
static size_t page;

static void add_map(char *p, size_t len, int anon) {
    pthread_mutex_lock(&mu);
    if (nmaps == capmaps) {
        capmaps = capmaps ? 2 * capmaps : 64;
        maps = realloc(maps, (size_t)capmaps * sizeof *maps);
        if (!maps) die(EXIT_IO, "out of memory for the spill registry");
    }
    maps[nmaps++] = (Map){p, len, anon};
    pthread_mutex_unlock(&mu);
}

int spill_setup(const char *d) {
    if (!d) return loom_fail("spill_setup: no directory");
    pthread_mutex_lock(&mu);
    free(dir);
    dir = strdup(d);
    page = (size_t)sysconf(_SC_PAGESIZE);
    pthread_mutex_unlock(&mu);
    return 0;
}

int spill_active(void) { return dir != NULL; }

// An unlinked file of `bytes` in dir, its blocks reserved; -1 with errno and *what set.
static int spill_file(size_t bytes, const char **what) {
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) { // (a file system without O_TMPFILE: a named file, unlinked at once)
        char path[4096];
        snprintf(path, sizeof path, "%s/.loom-spill-XXXXXX", dir);
        *what = "create a file in";
        if ((fd = mkostemp(path, O_CLOEXEC)) < 0) return -1;
        unlink(path);
    }
    int e = posix_fallocate(fd, 0, (off_t)bytes);
    if (e) {
        close(fd);
        errno = e, *what = "reserve space in";
        return -1;
    }
    return fd;
}

void *spill_alloc(size_t bytes) {
    if (!dir && bytes >= SPILL_ANON_MIN) {
        size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = (bytes + pg - 1) / pg * pg;
        char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) die(EXIT_IO, "out of memory allocating %zu bytes", bytes);
        add_map(p, len, 1);
        return p;
    }
    if (!dir) {
        void *p = NULL;
        size_t b = (bytes + 63) & ~(size_t)63;
        if (posix_memalign(&p, 64, b ? b : 64))
            die(EXIT_IO, "out of memory allocating %zu bytes", bytes);
        memset(p, 0, b);
        return p;
    }
    size_t len = (bytes + page - 1) / page * page;
    if (!len) len = page;
    const char *what = "create a file in";
    int fd = spill_file(len, &what);
    if (fd < 0)
        die(EXIT_IO, "--offload-dir %s: cannot %s it for %.1f MiB of the peer's outer state: %s",
            dir, what, bytes / 1048576.0, strerror(errno));
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd); // (the mapping keeps the file)
    if (p == MAP_FAILED)
        die(EXIT_IO, "--offload-dir %s: cannot map %.1f MiB: %s", dir, bytes / 1048576.0,
            strerror(e));
    add_map(p, len, 0);
    return p;
}

float *spill_floats(size_t n) {
    if (n > SIZE_MAX / sizeof(float)) die(EXIT_IO, "out of memory allocating %zu floats", n);
    return spill_alloc(n * sizeof(float));
}

// The mapping that holds p (under mu); -1 if none.
static int find(const char *p) {
    for (int i = 0; i < nmaps; i++)
        if (p >= maps[i].base && p < maps[i].base + maps[i].len) return i;
    return -1;
}

void spill_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&mu);
    int i = nmaps ? find(p) : -1;
    Map m = i >= 0 ? maps[i] : (Map){0};
    if (i >= 0) maps[i] = maps[--nmaps];
    pthread_mutex_unlock(&mu);
    if (i >= 0)
        munmap(m.base, m.len);
    else
        free(p);
}

void spill_drop(const void *p, size_t bytes) {
    if (!dir || !p || !bytes) return;
    const char *c = p;
    pthread_mutex_lock(&mu);
    int i = find(c);
    if (i < 0 || maps[i].anon) {
        pthread_mutex_unlock(&mu);
        return;
    }
    // whole pages, rounded outwards but inside the mapping: dropping never loses data, so a
    // page shared with a neighbouring chunk only costs a fault to bring back
    char *lo = maps[i].base + (size_t)(c - maps[i].base) / page * page;
    char *end = maps[i].base + maps[i].len;
    char *hi = c + bytes > end ? end : (char *)c + bytes;
    hi = maps[i].base + ((size_t)(hi - maps[i].base) + page - 1) / page * page;
    if (hi > end) hi = end;
    madvise(lo, (size_t)(hi - lo), MADV_DONTNEED); // (under mu: no spill_free unmaps it meanwhile)
    pthread_mutex_unlock(&mu);
}

void spill_discard(void *p, size_t bytes) {
    if (!p || !bytes) return;
    char *c = p;
    pthread_mutex_lock(&mu);
    int i = nmaps ? find(c) : -1;
    if (i >= 0) { // whole pages, rounded inwards: a page shared with live data stays
        size_t pg = (size_t)sysconf(_SC_PAGESIZE);
        size_t off = (size_t)(c - maps[i].base), end = off + bytes;
        if (end > maps[i].len) end = maps[i].len;
        size_t lo = (off + pg - 1) / pg * pg, hi = end / pg * pg;
        if (lo < hi) madvise(maps[i].base + lo, hi - lo, MADV_DONTNEED);
    }
    pthread_mutex_unlock(&mu);
}

void spill_copy(float *dst, const float *src, size_t n) {
    for (size_t lo = 0; lo < n; lo += SPILL_CHUNK) {
        size_t k = n - lo < SPILL_CHUNK ? n - lo : SPILL_CHUNK;
        memcpy(dst + lo, src + lo, k * sizeof(float));
        spill_drop(dst + lo, k * sizeof(float));
        spill_drop(src + lo, k * sizeof(float));
    }
}
