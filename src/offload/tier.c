// tier.c — the slow tier (tier.h): a preallocated, already-unlinked scratch file per rank and a
// small pool of I/O threads doing pread/pwrite on it (O_DIRECT, or buffered with the pages
// dropped after each request where the filesystem refuses O_DIRECT).
//
// Requests wait in one list in ticket order. Each is cut into pieces of at most TIER_PIECE
// bytes; a worker takes the next piece of the first request that no earlier request still in
// the list overlaps, so one large request keeps every worker busy and a request never starts
// before the overlapping ones queued before it are complete. The first failure is kept: every
// later tier_wait / tier_drain returns it.
#include "tier.h"

#include "../common.h"
#include "tier_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

// I/O threads per tier, and the largest piece one thread moves at a time. Measured on the
// project's machine (virtio disk; tier_measure of 1 GiB, 10 back-to-back pairs, medians): with
// requests of 4 and 16 MiB two threads wrote 1.4-1.5x and read 1.3-1.4x faster than one (about
// 1.8 and 2.0 GB/s); with 64 MiB requests the two were equal (one large pwrite already keeps
// several block requests in flight). Four threads, or 32 MiB pieces, were no faster than two
// threads with 8 MiB pieces; single runs of one setting spread by up to 2x (a shared disk).
#ifndef TIER_WORKERS
#define TIER_WORKERS 2
#endif
#ifndef TIER_PIECE
#define TIER_PIECE ((size_t)8 << 20)
#endif

typedef struct Req {
    struct Req *prev, *next;
    uint64_t ticket;
    int write;
    size_t off, n, sent; // sent: bytes handed to workers so far
    int running;         // pieces in flight
    char *buf;
} Req;

struct Tier {
    TierHost *host;   // a host-memory tier under a device (tier_host.c): every call goes there
    TierSplit *split; // host memory above a disk under a device (tier_split.c): the same
    int fd, direct;
    size_t size;
    char dir[1024];
    pthread_mutex_t mu;
    pthread_cond_t work, done; // work: for the I/O threads; done: a request completed
    Req *head, *tail;          // incomplete requests, in ticket order
    Req *spare;                // completed ones, kept for reuse: no allocation per request
    uint64_t next_ticket;
    int stop, err; // err: errno of the first failure (kept), its message in errmsg
    char errmsg[1400];
    uint64_t rd, wr;
    double waited;
    int nthreads, ids;
    pthread_t th[TIER_WORKERS];
    // a disk under a device (tier_open_on): the fast buffers are device memory and each I/O
    // thread moves its piece through a page-locked bounce buffer of its own
    const Backend *dev;
    char *bounce[TIER_WORKERS];
};

static const char *human(size_t b, char *out, size_t n) {
    const char *u[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double x = (double)b;
    int k = 0;
    while (x >= 1024 && k < 4)
        x /= 1024, k++;
    snprintf(out, n, k ? "%.1f %s" : "%.0f %s", x, u[k]);
    return out;
}

// ---- the I/O threads --------------------------------------------------------------------------

// Moves n bytes between buf and the file at off; 0 or an errno.
static int xfer(int fd, int write, char *buf, size_t n, size_t off) {
    while (n) {
        ssize_t k = write ? pwrite(fd, buf, n, (off_t)off) : pread(fd, buf, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return errno;
        if (k == 0) return write ? ENOSPC : EIO; // the file is preallocated: never at its end
        buf += k, n -= (size_t)k, off += (size_t)k;
    }
    return 0;
}

// Buffered fallback: write the range back and drop its pages, so the page cache does not
// become a fast tier nobody budgeted. (DONTNEED skips dirty pages, hence the sync first.)
static int drop_pages(int fd, int write, size_t off, size_t n) {
    if (write && sync_file_range(fd, (off_t)off, (off_t)n,
                                 SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                     SYNC_FILE_RANGE_WAIT_AFTER))
        return errno;
    posix_fadvise(fd, (off_t)off, (off_t)n, POSIX_FADV_DONTNEED); // advice: failure is harmless
    return 0;
}

// A piece between a device buffer and the file, through the thread's bounce buffer: read, then
// copied up; or copied down (after the kernels queued before it), then written.
static int xfer_dev(const Tier *t, char *bounce, int write, char *buf, size_t n, size_t off) {
    if (write) t->dev->copy_wait(t->dev->copy_async(bounce, buf, n));
    int err = xfer(t->fd, write, bounce, n, off);
    if (!write && !err) t->dev->copy_wait(t->dev->copy_async(buf, bounce, n));
    return err;
}

static int overlaps(const Req *a, const Req *b) {
    return a->off < b->off + b->n && b->off < a->off + a->n;
}

// The first request with a piece left to start whose range no earlier incomplete request
// overlaps; NULL when none can start now.
static Req *next_ready(Tier *t) {
    for (Req *r = t->head; r; r = r->next) {
        if (r->sent == r->n) continue;
        const Req *e = t->head;
        while (e != r && !overlaps(e, r))
            e = e->next;
        if (e == r) return r;
    }
    return NULL;
}

static void fail_locked(Tier *t, int err, const Req *r) {
    if (t->err) return; // the first failure is the one reported
    t->err = err;
    snprintf(t->errmsg, sizeof t->errmsg,
             "--offload-dir %s: %s of %zu bytes at offset %zu of the scratch file failed: %s",
             t->dir, r->write ? "write" : "read", r->n, r->off, strerror(err));
}

static void finish_piece(Tier *t, Req *r, size_t n, int err) {
    if (err)
        fail_locked(t, err, r);
    else if (r->write)
        t->wr += n;
    else
        t->rd += n;
    if (--r->running || r->sent < r->n) return;
    *(r->prev ? &r->prev->next : &t->head) = r->next; // complete: leave the list
    *(r->next ? &r->next->prev : &t->tail) = r->prev;
    r->next = t->spare, t->spare = r;
    pthread_cond_broadcast(&t->done);
    pthread_cond_broadcast(&t->work); // requests that overlapped it may start now
}

static void *worker(void *arg) {
    Tier *t = arg;
    thread_block_signals();
    pthread_mutex_lock(&t->mu);
    char *bounce = t->dev ? t->bounce[t->ids++] : NULL;
    for (;;) {
        Req *r = next_ready(t);
        if (!r) {
            if (t->stop && !t->head) break;
            pthread_cond_wait(&t->work, &t->mu);
            continue;
        }
        size_t off = r->off + r->sent, n = r->n - r->sent;
        if (n > TIER_PIECE) n = TIER_PIECE;
        char *buf = r->buf + r->sent;
        r->sent += n, r->running++;
        pthread_mutex_unlock(&t->mu);
        int err = bounce ? xfer_dev(t, bounce, r->write, buf, n, off)
                         : xfer(t->fd, r->write, buf, n, off);
        if (!err && !t->direct) err = drop_pages(t->fd, r->write, off, n);
        pthread_mutex_lock(&t->mu);
        finish_piece(t, r, n, err);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

// ---- opening -------------------------------------------------------------------------------

static int fail_errno(const char *dir, const char *what, int err) {
    return loom_fail("--offload-dir %s: %s%s%s", dir, what, *what ? ": " : "", strerror(err));
}

// Creates dir/loom-offload-r<rank>-<pid>-<seq>/scratch and removes both names at once: only
// the descriptor keeps the file. Opens with O_DIRECT; where that is refused, buffered with
// one warning per process. Returns the descriptor, or -1 (loom_fail).
static int open_scratch(const char *dir, int rank, int *direct) {
    static atomic_uint seq;
    static atomic_int warned;
    struct stat st;
    if (stat(dir, &st)) return fail_errno(dir, "", errno);
    if (!S_ISDIR(st.st_mode)) return fail_errno(dir, "", ENOTDIR);
    char sub[1200], path[1300];
    int made = 0;
    for (int tries = 0; tries < 100 && !made; tries++) {
        if (path_fmt(sub, sizeof sub, "%s/loom-offload-r%d-%d-%u", dir, rank, (int)getpid(),
                     atomic_fetch_add(&seq, 1)))
            return -1;
        if (!mkdir(sub, 0700))
            made = 1;
        else if (errno != EEXIST)
            return fail_errno(dir, "cannot create a directory in it", errno);
    }
    if (!made) return fail_errno(dir, "cannot create a directory in it", EEXIST);
    snprintf(path, sizeof path, "%s/scratch", sub);
    int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
    int fd = open(path, flags | O_DIRECT, 0600);
    *direct = fd >= 0;
    if (fd < 0 && errno == EINVAL) { // the refused open may have created it: no O_EXCL now
        fd = open(path, flags & ~O_EXCL, 0600);
        if (fd >= 0 && !atomic_exchange(&warned, 1))
            fprintf(stderr,
                    "loom: warning: --offload-dir %s refuses direct I/O (O_DIRECT); falling back "
                    "to buffered I/O whose pages are dropped after each transfer\n",
                    dir);
    }
    int err = errno;
    unlink(path); // also when only the refused O_DIRECT open created it
    rmdir(sub);
    if (fd < 0) return fail_errno(dir, "cannot create a file in it", err);
    return fd;
}

// Zero-fills [0, bytes) where the filesystem has no fallocate: aligned writes also work with
// O_DIRECT (posix_fallocate's emulation writes single bytes, which O_DIRECT refuses).
static int zero_fill(int fd, size_t bytes) {
    size_t chunk = (size_t)8 << 20;
    char *z = tier_alloc(chunk);
    int err = 0;
    for (size_t off = 0; off < bytes && !err; off += chunk)
        err = xfer(fd, 1, z, bytes - off < chunk ? bytes - off : chunk, off);
    tier_free(z);
    return err;
}

// Reserves the file's blocks now, so a disk too small fails here and not mid-training.
static int preallocate(const char *dir, int fd, size_t bytes) {
    int err = fallocate(fd, 0, 0, (off_t)bytes) ? errno : 0;
    if (err == EOPNOTSUPP) err = zero_fill(fd, bytes);
    if (!err) return 0;
    if (err != ENOSPC && err != EFBIG && err != EDQUOT) {
        char what[64];
        snprintf(what, sizeof what, "preallocating %zu bytes", bytes);
        return fail_errno(dir, what, err);
    }
    struct statvfs vs;
    char need[32], have[32];
    if (statvfs(dir, &vs))
        return loom_fail("--offload-dir %s: %s (needs %s)", dir, strerror(err),
                         human(bytes, need, sizeof need));
    return loom_fail("--offload-dir %s: %s (needs %s, %s free)", dir, strerror(err),
                     human(bytes, need, sizeof need),
                     human((size_t)vs.f_bavail * vs.f_frsize, have, sizeof have));
}

// Starts the I/O threads with every signal blocked: signals go to the caller's threads.
static int start_workers(Tier *t) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = 0;
    for (; t->nthreads < TIER_WORKERS && !rc; t->nthreads += !rc)
        rc = pthread_create(&t->th[t->nthreads], NULL, worker, t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc ? fail_errno(t->dir, "cannot start an I/O thread", rc) : 0;
}

Tier *tier_open_disk(const char *dir, int rank, size_t bytes, const Backend *dev) {
    if (bytes % TIER_ALIGN)
        return loom_fail("--offload-dir %s: scratch size %zu is not a multiple of %zu", dir, bytes,
                         TIER_ALIGN),
               NULL;
    int direct, fd = open_scratch(dir, rank, &direct);
    if (fd < 0) return NULL;
    if (bytes && preallocate(dir, fd, bytes)) return close(fd), NULL;
    Tier *t = xcalloc(1, sizeof *t);
    t->fd = fd, t->direct = direct, t->size = bytes, t->next_ticket = 1;
    snprintf(t->dir, sizeof t->dir, "%s", dir);
    t->dev = dev;
    for (int i = 0; dev && i < TIER_WORKERS; i++)
        t->bounce[i] = dev->host_alloc(TIER_PIECE);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->work, NULL);
    pthread_cond_init(&t->done, NULL);
    if (start_workers(t)) {
        tier_close(t);
        return NULL;
    }
    return t;
}

Tier *tier_open(const char *dir, int rank, size_t bytes) {
    return tier_open_disk(dir, rank, bytes, NULL);
}

Tier *tier_of_host(TierHost *h, size_t bytes) {
    Tier *t = xcalloc(1, sizeof *t);
    t->host = h, t->fd = -1, t->direct = 1, t->size = bytes;
    return t;
}

Tier *tier_of_split(TierSplit *sp, size_t bytes, int direct, const char *dir) {
    Tier *t = xcalloc(1, sizeof *t);
    t->split = sp, t->fd = -1, t->direct = direct, t->size = bytes;
    snprintf(t->dir, sizeof t->dir, "%s", dir);
    return t;
}

size_t tier_bounce_bytes(void) { return TIER_WORKERS * TIER_PIECE; }

const Backend *tier_fast_backend(const Tier *t) {
    if (t->split) return tier_fast_backend(tier_split_back(t->split));
    return t->host ? tier_host_backend(t->host) : t->dev;
}

void tier_close(Tier *t) {
    if (!t) return;
    if (t->host || t->split) {
        tier_host_close(t->host);
        tier_split_close(t->split);
        free(t);
        return;
    }
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_broadcast(&t->work);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->nthreads; i++)
        pthread_join(t->th[i], NULL);
    close(t->fd);
    for (int i = 0; t->dev && i < TIER_WORKERS; i++)
        t->dev->host_free(t->bounce[i]);
    while (t->spare) {
        Req *r = t->spare;
        t->spare = r->next;
        free(r);
    }
    pthread_cond_destroy(&t->work);
    pthread_cond_destroy(&t->done);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

int tier_direct(const Tier *t) { return t->direct; }

// ---- requests ------------------------------------------------------------------------------

// A request that breaks the rules is not run: it fails at once (its wait returns -1), and,
// unless an earlier failure is already kept, its message becomes the tier's error.
static int check_req(Tier *t, int write, size_t off, const void *buf, size_t n) {
    const char *op = write ? "write" : "read";
    char msg[sizeof t->errmsg];
    if (off % TIER_ALIGN || n % TIER_ALIGN || (!t->dev && (uintptr_t)buf % TIER_ALIGN))
        snprintf(msg, sizeof msg,
                 "--offload-dir %s: misaligned %s (offset %zu, length %zu, buffer %p): offsets, "
                 "lengths and buffer addresses must be multiples of %zu",
                 t->dir, op, off, n, buf, TIER_ALIGN);
    else if (off > t->size || n > t->size - off)
        snprintf(msg, sizeof msg,
                 "--offload-dir %s: %s of %zu bytes at offset %zu is past the end of the "
                 "%zu-byte scratch file",
                 t->dir, op, n, off, t->size);
    else
        return 0;
    if (!t->err) t->err = EINVAL, memcpy(t->errmsg, msg, sizeof msg);
    return -1;
}

static uint64_t submit(Tier *t, int write, size_t off, const void *buf, size_t n) {
    if (t->split) return tier_split_submit(t->split, write, off, buf, n);
    if (t->host) return tier_host_submit(t->host, write, off, buf, n);
    pthread_mutex_lock(&t->mu);
    uint64_t ticket = t->next_ticket++;
    if (!check_req(t, write, off, buf, n) && n) {
        Req *r = t->spare ? t->spare : xmalloc(sizeof *r);
        if (r == t->spare) t->spare = r->next;
        *r = (Req){0};
        r->ticket = ticket, r->write = write, r->off = off, r->n = n, r->buf = (char *)buf;
        r->prev = t->tail;
        *(t->tail ? &t->tail->next : &t->head) = r;
        t->tail = r;
        pthread_cond_signal(&t->work);
    }
    pthread_mutex_unlock(&t->mu);
    return ticket;
}

uint64_t tier_read_async(Tier *t, size_t off, void *buf, size_t n) {
    return submit(t, 0, off, buf, n);
}

uint64_t tier_write_async(Tier *t, size_t off, const void *buf, size_t n) {
    return submit(t, 1, off, buf, n);
}

// Blocks until no request with a ticket <= upto is incomplete (all: the whole list).
static int wait_upto(Tier *t, uint64_t upto, int all) {
    if (t->split) return tier_split_wait(t->split, upto, all);
    if (t->host) return tier_host_wait(t->host, upto); // in order: every earlier one too
    pthread_mutex_lock(&t->mu);
    double t0 = 0;
    for (;;) {
        const Req *r = t->head;
        while (r && !all && r->ticket < upto)
            r = r->next;
        if (!r || (all ? r->ticket > upto : r->ticket != upto)) break;
        if (!t0) t0 = now_sec();
        pthread_cond_wait(&t->done, &t->mu);
    }
    if (t0) t->waited += now_sec() - t0;
    int rc = t->err ? loom_fail("%s", t->errmsg) : 0;
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int tier_wait(Tier *t, uint64_t ticket) { return wait_upto(t, ticket, 0); }

int tier_wait_upto(Tier *t, uint64_t ticket) { return ticket ? wait_upto(t, ticket, 1) : 0; }

int tier_drain(Tier *t) {
    if (t->split) return tier_split_drain(t->split);
    if (t->host) return tier_host_wait(t->host, tier_host_last(t->host));
    pthread_mutex_lock(&t->mu);
    uint64_t last = t->next_ticket - 1;
    pthread_mutex_unlock(&t->mu);
    return wait_upto(t, last, 1);
}

double tier_waited(const Tier *t) {
    if (t->split) return tier_split_waited(t->split);
    if (t->host) return *tier_host_waited(t->host);
    pthread_mutex_t *mu = (pthread_mutex_t *)&t->mu;
    pthread_mutex_lock(mu);
    double w = t->waited;
    pthread_mutex_unlock(mu);
    return w;
}

void tier_reset_waited(Tier *t) {
    if (t->split) return tier_split_reset_waited(t->split);
    if (t->host) {
        *tier_host_waited(t->host) = 0;
        return;
    }
    pthread_mutex_lock(&t->mu);
    t->waited = 0;
    pthread_mutex_unlock(&t->mu);
}

void tier_bytes(const Tier *t, uint64_t *read, uint64_t *written) {
    if (t->split) return tier_split_bytes(t->split, read, written);
    if (t->host) return tier_host_bytes(t->host, read, written);
    pthread_mutex_t *mu = (pthread_mutex_t *)&t->mu;
    pthread_mutex_lock(mu);
    if (read) *read = t->rd;
    if (written) *written = t->wr;
    pthread_mutex_unlock(mu);
}

int tier_workers(void) { return TIER_WORKERS; }

int tier_done(Tier *t, uint64_t ticket) {
    if (!ticket) return 1;
    if (t->split) return tier_split_done(t->split, ticket, 0);
    if (t->host) return tier_host_done(t->host, ticket);
    pthread_mutex_lock(&t->mu);
    const Req *r = t->head;
    while (r && r->ticket < ticket)
        r = r->next;
    int done = !r || r->ticket != ticket;
    pthread_mutex_unlock(&t->mu);
    return done;
}

int tier_done_upto(Tier *t, uint64_t ticket) {
    if (!ticket) return 1;
    if (t->split) return tier_split_done(t->split, ticket, 1);
    if (t->host) return tier_host_done(t->host, ticket); // in order
    pthread_mutex_lock(&t->mu);
    int done = !t->head || t->head->ticket > ticket;
    pthread_mutex_unlock(&t->mu);
    return done;
}

void tier_parts(const Tier *t, size_t *host, size_t *disk) {
    size_t cut = t->split ? tier_split_cut(t->split) : t->host ? t->size : 0;
    *host = cut, *disk = t->size - cut;
}
