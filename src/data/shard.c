// shard.c — reading and writing llm.c token shards, and cutting windows of B sequences of T+1
// tokens (stride T) out of the concatenated stream in sequential or seeded-shuffled order.
#include "shard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common.h"
#include "../rng.h"

int shard_width(int vocab) { return vocab > 65536 ? 4 : 2; }

int shard_write(const char *path, const uint32_t *tokens, size_t n, int width) {
    if (n > (size_t)INT32_MAX) return loom_fail("%s: too many tokens for one shard (%zu)", path, n);
    size_t bytes = SHARD_HEADER_INTS * 4 + n * (size_t)width;
    char *buf = xcalloc(bytes, 1);
    int32_t *h = (int32_t *)buf;
    h[0] = width == 4 ? SHARD_MAGIC_U32 : SHARD_MAGIC;
    h[1] = width == 4 ? SHARD_VERSION_U32 : SHARD_VERSION;
    h[2] = (int32_t)n;
    unsigned char *t = (unsigned char *)buf + SHARD_HEADER_INTS * 4;
    for (size_t i = 0; i < n; i++) {
        if (width == 2 && tokens[i] > UINT16_MAX) {
            free(buf);
            return loom_fail("%s: token %u at position %zu needs a 32-bit shard", path, tokens[i],
                             i);
        }
        if (width == 2) {
            uint16_t v = (uint16_t)tokens[i];
            memcpy(t + 2 * i, &v, 2);
        } else {
            memcpy(t + 4 * i, &tokens[i], 4);
        }
    }
    int rc = write_file_atomic(path, buf, bytes);
    free(buf);
    return rc;
}

// Token k of shard f (little-endian, as llm.c writes them on the machines it runs on).
static inline uint32_t token_at(const DataSet *d, int f, size_t k) {
    if (d->width[f] == 2) {
        uint16_t v;
        memcpy(&v, d->tokens[f] + 2 * k, 2);
        return v;
    }
    uint32_t v;
    memcpy(&v, d->tokens[f] + 4 * k, 4);
    return v;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

static int has_bin_suffix(const char *s) {
    size_t n = strlen(s);
    return n > 4 && !strcmp(s + n - 4, ".bin");
}

// Expands spec (file, directory, or glob) into a sorted list of paths.
static int expand_spec(const char *spec, char ***out, int *nout) {
    struct stat st;
    char **v = NULL;
    int n = 0;
    if (stat(spec, &st) == 0 && S_ISDIR(st.st_mode)) {
        DIR *dir = opendir(spec);
        if (!dir) return loom_fail("%s: cannot open directory: %s", spec, strerror(errno));
        struct dirent *e;
        size_t cap = 0;
        while ((e = readdir(dir))) {
            if (!has_bin_suffix(e->d_name)) continue;
            v = xgrow(v, (size_t)n, &cap, 16, sizeof *v);
            size_t len = strlen(spec) + strlen(e->d_name) + 2;
            v[n] = xmalloc(len);
            snprintf(v[n++], len, "%s/%s", spec, e->d_name); // len fits it exactly
        }
        closedir(dir);
        if (!n) return loom_fail("%s: directory has no *.bin shards", spec);
    } else if (stat(spec, &st) == 0) {
        v = xmalloc(sizeof(char *));
        v[n++] = xstrdup(spec);
    } else {
        glob_t g;
        if (glob(spec, 0, NULL, &g) != 0 || g.gl_pathc == 0) {
            globfree(&g);
            return loom_fail("%s: no such file, directory or matching shards", spec);
        }
        v = xmalloc(sizeof(char *) * g.gl_pathc);
        for (size_t i = 0; i < g.gl_pathc; i++)
            v[n++] = xstrdup(g.gl_pathv[i]);
        globfree(&g);
    }
    qsort(v, (size_t)n, sizeof(char *), cmp_str);
    *out = v;
    *nout = n;
    return 0;
}

static int open_shard(DataSet *d, int i) {
    const char *path = d->paths[i];
    int fd = open(path, O_RDONLY | O_NONBLOCK); // a FIFO must not block; rejected below
    if (fd < 0) return loom_fail("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) {
        int err = errno;
        close(fd);
        return loom_fail("%s: cannot stat: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return loom_fail("%s: not a regular file (a token shard must be one)", path);
    }
    size_t size = (size_t)st.st_size;
    if (size < SHARD_HEADER_INTS * 4) {
        close(fd);
        return loom_fail("%s: truncated shard (%zu bytes, header alone is 1024)", path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return loom_fail("%s: cannot mmap: %s", path, strerror(errno));
    d->maps[i] = map;
    d->map_sizes[i] = size;
    const int32_t *h = map;
    int width = h[0] == SHARD_MAGIC ? 2 : h[0] == SHARD_MAGIC_U32 ? 4 : 0;
    if (!width)
        return loom_fail("%s: not an llm.c token shard (magic %d, expected %d for uint16 tokens "
                         "or %d for uint32)",
                         path, h[0], SHARD_MAGIC, SHARD_MAGIC_U32);
    int version = width == 2 ? SHARD_VERSION : SHARD_VERSION_U32;
    if (h[1] != version)
        return loom_fail("%s: unsupported shard version %d (expected %d with magic %d)", path, h[1],
                         version, h[0]);
    if (h[2] < 0) return loom_fail("%s: negative token count %d in header", path, h[2]);
    size_t want = SHARD_HEADER_INTS * 4 + (size_t)h[2] * (size_t)width;
    if (size != want)
        return loom_fail("%s: header says %d tokens (%zu bytes) but the file has %zu bytes%s", path,
                         h[2], want, size, size < want ? " (truncated)" : "");
    d->counts[i] = (size_t)h[2];
    d->width[i] = width;
    d->tokens[i] = (const unsigned char *)map + SHARD_HEADER_INTS * 4;
    for (size_t k = 0; k < d->counts[i]; k++) {
        uint32_t t = token_at(d, i, k);
        if (t >= (uint32_t)d->vocab)
            return loom_fail("%s: token %u at position %zu is out of range for vocab %d", path, t,
                             k, d->vocab);
    }
    madvise(map, size, MADV_DONTNEED); // checked: its pages leave this process (not the cache)
    return 0;
}

int dataset_open(DataSet *d, const char *spec, int vocab) {
    memset(d, 0, sizeof *d);
    d->vocab = vocab;
    if (expand_spec(spec, &d->paths, &d->nfiles)) return -1;
    int n = d->nfiles;
    d->tokens = xcalloc((size_t)n, sizeof *d->tokens);
    d->width = xcalloc((size_t)n, sizeof *d->width);
    d->counts = xcalloc((size_t)n, sizeof *d->counts);
    d->starts = xcalloc((size_t)n, sizeof *d->starts);
    d->maps = xcalloc((size_t)n, sizeof *d->maps);
    d->map_sizes = xcalloc((size_t)n, sizeof *d->map_sizes);
    for (int i = 0; i < n; i++) {
        if (open_shard(d, i)) {
            dataset_close(d);
            return -1;
        }
        d->starts[i] = d->total;
        d->total += d->counts[i];
    }
    return 0;
}

void dataset_close(DataSet *d) {
    for (int i = 0; i < d->nfiles; i++) {
        if (d->maps && d->maps[i]) munmap(d->maps[i], d->map_sizes[i]);
        free(d->paths[i]);
    }
    free(d->paths);
    free(d->tokens);
    free(d->width);
    free(d->counts);
    free(d->starts);
    free(d->maps);
    free(d->map_sizes);
    memset(d, 0, sizeof *d);
}

uint64_t dataset_num_sequences(const DataSet *d, int T) {
    return d->total < (size_t)T + 1 ? 0 : (d->total - 1) / (size_t)T;
}

uint64_t dataset_num_windows(const DataSet *d, int B, int T) {
    return dataset_num_sequences(d, T) / (uint64_t)B; // = floor((total − 1) / (B·T))
}

// The shard holding stream position pos (< total): the last one starting at or before it, so
// an empty shard is never the answer.
static int shard_of(const DataSet *d, size_t pos) {
    int lo = 0, hi = d->nfiles - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->starts[mid] <= pos)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

// Sequence starting at stream position `start`: its T+1 tokens as inputs [0, T) and targets
// shifted by one. One search for the first shard, then a walk to the following ones (a row
// crosses at most one boundary unless shards are shorter than T+1 tokens).
static void read_sequence(const DataSet *d, size_t start, int T, int *inputs, int *targets) {
    size_t n = (size_t)T + 1, k = 0;
    for (int f = shard_of(d, start); k < n; f++) {
        size_t off = start + k - d->starts[f], m = d->counts[f] - off;
        if (m > n - k) m = n - k;
        for (size_t i = 0; i < m; i++, k++) {
            int t = (int)token_at(d, f, off + i);
            if (k < (size_t)T)
                inputs[k] = t;
            else
                targets[T - 1] = t;
        }
    }
    memcpy(targets, inputs + 1, (size_t)(T - 1) * sizeof *targets);
}

// Drops the pages of tokens [a, b) from this process's memory (they stay in the page cache and
// fault back in when read again), so what a run has read of its data never accumulates in its
// resident memory (block swapping budgets all of it).
static void release_span(const DataSet *d, size_t a, size_t b) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < d->nfiles; i++) {
        size_t s, n = range_isect(a, b, d->starts[i], d->starts[i] + d->counts[i], &s);
        if (!n) continue;
        uintptr_t lo = (uintptr_t)(d->tokens[i] + (s - d->starts[i]) * (size_t)d->width[i]);
        uintptr_t hi = lo + n * (size_t)d->width[i];
        lo = lo / page * page, hi = (hi + page - 1) / page * page;
        uintptr_t base = (uintptr_t)d->maps[i], end = base + d->map_sizes[i];
        if (hi > end) hi = end; // the last page of the mapping
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
    }
}

// A seeded bijection on [0, n): cycle-walking over a 4-round Feistel network on the
// smallest power of 4 ≥ n. Deterministic from (seed, epoch) and needs no table.
static uint64_t permute(uint64_t x, uint64_t n, uint64_t seed, uint64_t epoch) {
    int bits = 2;
    while ((1ULL << bits) < n)
        bits += 2;
    int half = bits / 2;
    uint64_t mask = (1ULL << half) - 1;
    do {
        uint64_t l = x >> half, r = x & mask;
        for (int round = 0; round < 4; round++) {
            Rng g;
            rng_seed(&g, seed ^ (r * 0x9E3779B97F4A7C15ULL), epoch * 4 + (uint64_t)round);
            uint64_t f = rng_u32(&g) & mask;
            uint64_t nl = r, nr = l ^ f;
            l = nl;
            r = nr;
        }
        x = (l << half) | r;
    } while (x >= n);
    return x;
}

int dataset_window(DataSet *d, uint64_t w, int B, int T, int shuffle, uint64_t seed, int *inputs,
                   int *targets) {
    uint64_t ns = dataset_num_sequences(d, T);
    if (ns == 0)
        return loom_fail("%s: only %zu tokens, fewer than one sequence of T+1 = %d", d->paths[0],
                         d->total, T + 1);
    for (int b = 0; b < B; b++) {
        uint64_t g = w * (uint64_t)B + (uint64_t)b, epoch = g / ns, idx = g % ns;
        if (shuffle) idx = permute(idx, ns, seed, epoch);
        size_t row = (size_t)b * (size_t)T, at = (size_t)idx * (size_t)T;
        read_sequence(d, at, T, inputs + row, targets + row);
        release_span(d, at, at + (size_t)T + 1); // (its pages leave this process: --fast-mem)
    }
    return 0;
}
