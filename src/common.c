// common.c — error reporting, allocation, resident memory, timing, CRC-32 (zlib) and atomic
// file writes.
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

void *xgrow(void *p, size_t n, size_t *cap, size_t first, size_t size) {
    if (n < *cap) return p;
    size_t c = *cap ? 2 * *cap : first;
    void *q = realloc(p, c * size);
    if (!q) die(EXIT_IO, "out of memory allocating %zu bytes", c * size);
    *cap = c;
    return q;
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

double process_cpu_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static size_t status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kib = 0, n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') {
            kib = (size_t)strtoull(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return kib * 1024;
}

size_t rss_bytes(void) { return status_kib("VmRSS"); }

size_t rss_peak_bytes(void) { return status_kib("VmHWM"); }

void heap_release(void) {
    mallopt(M_MMAP_THRESHOLD, 256 << 10);
    mallopt(M_TRIM_THRESHOLD, 1 << 20);
    malloc_trim(0);
}

// zlib's CRC-32 (the PNG/gzip polynomial 0xEDB88320, pre- and post-inverted): the same values
// the checkpoints were written with, table-driven and thread-safe. crc32_z takes a size_t length.
uint32_t crc32_update(uint32_t crc, const void *data, size_t n) {
    return (uint32_t)crc32_z(crc, data, n);
}

int path_fmt(char *out, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= n)
        return loom_fail("path too long (%d bytes, at most %zu): %.200s...", k, n - 1, out);
    return 0;
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

int aout_open(AtomicOut *o, const char *path) {
    memset(o, 0, sizeof *o);
    if (strlen(path) >= sizeof o->path ||
        (size_t)snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%d", path, (int)getpid()) >= sizeof o->tmp)
        return loom_fail("%.200s...: path too long", path);
    snprintf(o->path, sizeof o->path, "%s", path);
    o->fp = fopen(o->tmp, "wb");
    if (!o->fp) {
        o->failed = 1;
        return loom_fail("%s: cannot create %s: %s", path, o->tmp, strerror(errno));
    }
    return 0;
}

int aout_write(AtomicOut *o, const void *data, size_t n) {
    if (o->failed) return -1;
    if (n && fwrite(data, 1, n, o->fp) != n) {
        o->failed = 1;
        return loom_fail("%s: write failed: %s", o->path, strerror(errno));
    }
    return 0;
}

int aout_write_zeros(AtomicOut *o, size_t n) {
    static const uint8_t zeros[4096];
    while (n && !o->failed) {
        size_t k = n < sizeof zeros ? n : sizeof zeros;
        aout_write(o, zeros, k);
        n -= k;
    }
    return o->failed ? -1 : 0;
}

void aout_abort(AtomicOut *o) {
    if (o->fp) fclose(o->fp);
    o->fp = NULL;
    if (o->tmp[0]) unlink(o->tmp);
    o->failed = 1;
}

int aout_commit(AtomicOut *o) {
    if (o->failed || !o->fp) {
        aout_abort(o);
        return -1;
    }
    if (fflush(o->fp) || fsync(fileno(o->fp))) {
        int e = errno;
        aout_abort(o);
        return loom_fail("%s: write failed: %s", o->path, strerror(e));
    }
    int rc = fclose(o->fp);
    o->fp = NULL;
    if (rc) {
        int e = errno;
        aout_abort(o);
        return loom_fail("%s: write failed: %s", o->path, strerror(e));
    }
    if (rename(o->tmp, o->path)) {
        int e = errno;
        aout_abort(o);
        return loom_fail("%s: cannot rename %s into place: %s", o->path, o->tmp, strerror(e));
    }
    char dir[sizeof o->path];
    snprintf(dir, sizeof dir, "%s", o->path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

int write_file_atomic(const char *path, const void *data, size_t len) {
    AtomicOut o;
    if (aout_open(&o, path)) return -1;
    aout_write(&o, data, len);
    return aout_commit(&o);
}

void thread_block_signals(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}
