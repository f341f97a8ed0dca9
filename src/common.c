// common.c — error reporting, allocation, timing, CRC-32 and atomic file writes.
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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
    if (n > (SIZE_MAX - 63) / sizeof(float)) die(EXIT_IO, "out of memory allocating %zu floats", n);
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

static uint32_t crc_table[256];
static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t crc32_update(uint32_t crc, const void *data, size_t n) {
    if (!crc_table[1]) crc_init();
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

char *read_file(const char *path, size_t *len) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; it is rejected below.
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
        loom_fail("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st)) {
        loom_fail("%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        loom_fail("%s: not a regular file (%s)", path,
                  S_ISDIR(st.st_mode)    ? "a directory"
                  : S_ISFIFO(st.st_mode) ? "a FIFO"
                                         : "a device or socket");
        close(fd);
        return NULL;
    }
    if ((uint64_t)st.st_size >= SIZE_MAX) {
        loom_fail("%s: too large (%lld bytes)", path, (long long)st.st_size);
        close(fd);
        return NULL;
    }
    size_t n = (size_t)st.st_size, got = 0;
    char *buf = xmalloc(n + 1);
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            loom_fail("%s: %s", path, r < 0 ? strerror(errno) : "file shrank while being read");
            close(fd);
            free(buf);
            return NULL;
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

int write_file_atomic(const char *path, const void *data, size_t len) {
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= sizeof tmp)
        return loom_fail("%.200s...: path too long", path);
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
