// common.c — error reporting, allocation, timing, CRC-32 (zlib) and atomic file writes.
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

static char errbuf[1024];

int loom_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
    return -1;
}

const char *loom_errmsg(void) { return errbuf[0] ? errbuf : "unknown error"; }

void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("loom: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

void die_last(int code) { die(code, "%s", loom_errmsg()); }

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die(EXIT_IO, "out of memory allocating %zu bytes", n);
    return p;
}

void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) die(EXIT_IO, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

float *xalloc_floats(size_t n) {
    void *p = NULL;
    size_t bytes = (n ? n : 1) * sizeof(float);
    bytes = (bytes + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, bytes)) die(EXIT_IO, "out of memory allocating %zu floats", n);
    memset(p, 0, bytes);
    return p;
}

double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// zlib's CRC-32 (the PNG/gzip polynomial 0xEDB88320, pre- and post-inverted): the same values
// the checkpoints were written with, table-driven and thread-safe. crc32_z takes a size_t length.
uint32_t crc32_update(uint32_t crc, const void *data, size_t n) {
    return (uint32_t)crc32_z(crc, data, n);
}

char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        loom_fail("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0) {
        fclose(f);
        loom_fail("%s: cannot determine size", path);
        return NULL;
    }
    char *buf = xmalloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(buf);
        loom_fail("%s: read error", path);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

int write_file_atomic(const char *path, const void *data, size_t len) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return loom_fail("%s: cannot create: %s", tmp, strerror(errno));
    const char *p = data;
    size_t left = len;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            close(fd);
            unlink(tmp);
            return loom_fail("%s: write failed: %s", tmp, strerror(errno));
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) || close(fd)) {
        unlink(tmp);
        return loom_fail("%s: fsync failed: %s", tmp, strerror(errno));
    }
    if (rename(tmp, path)) {
        unlink(tmp);
        return loom_fail("%s: rename failed: %s", path, strerror(errno));
    }
    char dirbuf[4096];
    snprintf(dirbuf, sizeof dirbuf, "%s", path);
    int dfd = open(dirname(dirbuf), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}
