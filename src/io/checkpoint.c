// checkpoint.c — atomic, checksummed training checkpoints (see checkpoint.h).
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common.h"
#include "../testhooks.h"
#include "ckpt_manifest.h"

static int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return loom_fail("%s: cannot open directory: %s", dir, strerror(errno));
    fsync(fd);
    close(fd);
    return 0;
}

static int rm_rf(const char *path) {
    DIR *d = opendir(path);
    if (!d) return unlink(path);
    struct dirent *e;
    char sub[4096];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            rm_rf(sub);
        else
            unlink(sub);
    }
    closedir(d);
    return rmdir(path);
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// Removes all but the newest `keep` step directories and any leftover partial ones.
static void prune(const char *dir, int keep) {
    DIR *d = opendir(dir);
    if (!d) return;
    char *names[4096];
    int n = 0;
    struct dirent *e;
    char sub[4096];
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "step_", 5)) continue;
        if (strstr(e->d_name, ".partial")) {
            snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
            rm_rf(sub);
        } else if (n < 4096) {
            names[n++] = strdup(e->d_name);
        }
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof(char *), cmp_names);
    for (int i = 0; i < n; i++) {
        if (keep > 0 && i < n - keep) {
            snprintf(sub, sizeof sub, "%s/%s", dir, names[i]);
            rm_rf(sub);
        }
        free(names[i]);
    }
}

// Writes this rank's shard: params, m, v (and prev) of [lo, hi).
static int write_shard(const char *path, const CkptShard *sh, uint32_t *crc) {
    size_t n = sh->hi - sh->lo, k = sh->prev ? 4 : 3;
    float *buf = xmalloc(k * n * sizeof(float) + 1);
    memcpy(buf, sh->params, n * sizeof(float));
    memcpy(buf + n, sh->m, n * sizeof(float));
    memcpy(buf + 2 * n, sh->v, n * sizeof(float));
    if (sh->prev) memcpy(buf + 3 * n, sh->prev, n * sizeof(float));
    *crc = crc32_update(0, buf, k * n * sizeof(float));
    int rc = write_file_atomic(path, buf, k * n * sizeof(float));
    free(buf);
    return rc;
}

int ckpt_begin(const char *dir, int step, char *part, size_t n) {
    if (mkdir(dir, 0755) && errno != EEXIST)
        return loom_fail("%s: cannot create checkpoint directory: %s", dir, strerror(errno));
    snprintf(part, n, "%s/step_%08d.partial", dir, step);
    rm_rf(part);
    if (mkdir(part, 0755)) return loom_fail("%s: cannot create: %s", part, strerror(errno));
    return 0;
}

int ckpt_write_shard(const char *part, int rank, const CkptShard *sh, CkptShardInfo *info) {
    char path[4200];
    snprintf(path, sizeof path, "%s/shard_%05d.bin", part, rank);
    *info = (CkptShardInfo){.written = 1, .lo = sh->lo, .hi = sh->hi, .arrays = sh->prev ? 4 : 3};
    return write_shard(path, sh, &info->crc);
}

int ckpt_commit(const char *dir, const char *part, const CkptMeta *meta, const CkptShardInfo *info,
                int n, CkptExtraFn extra, void *extra_ctx, int keep) {
    char path[4200], name[64], final[4200];
    snprintf(name, sizeof name, "step_%08d", meta->step);
    snprintf(final, sizeof final, "%s/%s", dir, name);
    if (extra && extra(part, extra_ctx)) return -1;
    // Test hook: LOOM_FAULT_SAVE=1 fails here, as a crash mid-save would, to prove that the
    // previous checkpoint stays intact and `latest` still points at it.
    if (testhook_save_fault()) return loom_fail("%s: injected fault (LOOM_FAULT_SAVE)", part);
    char *text = manifest_text(meta, 0, info, n);
    snprintf(path, sizeof path, "%s/checkpoint.json", part);
    int rc = write_file_atomic(path, text, strlen(text));
    free(text);
    if (rc || fsync_dir(part)) return -1;
    // commit: replace any older directory of the same step, then point `latest` at it
    rm_rf(final);
    if (rename(part, final)) return loom_fail("%s: rename failed: %s", final, strerror(errno));
    fsync_dir(dir);
    char line[80];
    snprintf(line, sizeof line, "%s\n", name);
    snprintf(path, sizeof path, "%s/latest", dir);
    if (write_file_atomic(path, line, strlen(line))) return -1;
    prune(dir, keep);
    return 0;
}

// ---------------------------------------------------------------- reading

int checkpoint_resolve(const char *path, char *step_dir, size_t n) {
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/checkpoint.json", path);
    if (stat(p, &st) == 0) {
        snprintf(step_dir, n, "%s", path);
        return 0;
    }
    snprintf(p, sizeof p, "%s/latest", path);
    size_t len;
    char *txt = read_file(p, &len);
    if (!txt)
        return loom_fail("%s: not a checkpoint (no checkpoint.json and no 'latest' file)", path);
    char *nl = strchr(txt, '\n');
    if (nl) *nl = 0;
    if (!txt[0] || strchr(txt, '/')) {
        free(txt);
        return loom_fail("%s: malformed 'latest' file", p);
    }
    snprintf(step_dir, n, "%s/%s", path, txt);
    free(txt);
    return 0;
}

int checkpoint_read_meta(const char *step_dir, CkptMeta *meta) {
    CkptManifest mf;
    memset(meta, 0, sizeof *meta);
    if (manifest_read(step_dir, &mf)) return -1;
    *meta = mf.meta;
    mf.meta.train_args = NULL; // moved to meta
    manifest_free(&mf);
    return 0;
}

void checkpoint_meta_free(CkptMeta *meta) {
    free(meta->train_args);
    meta->train_args = NULL;
}

// One shard file, read whole and checked against its size and checksum (NULL on error).
static float *read_entry_data(const char *step_dir, const CkptEntry *e) {
    char path[4200];
    size_t len,
        want = (e->hi - e->lo) * (size_t)e->arrays * sizeof(float); // checked by the manifest
    if (path_fmt(path, sizeof path, "%s/%s", step_dir, e->file)) return NULL;
    char *data = read_file(path, &len);
    if (!data) return NULL;
    uint32_t got = len == want ? crc32_update(0, data, len) : 0;
    if (len != want)
        loom_fail("%s: %zu bytes, expected %zu (changed while reading?)", path, len, want);
    else if (got != e->crc)
        loom_fail("%s: checksum mismatch (crc32 %08x, manifest says %08x): file is corrupted", path,
                  got, e->crc);
    if (len != want || got != e->crc) {
        free(data);
        return NULL;
    }
    return (float *)data;
}

// Copies what the shards hold of [plo, phi) (params), [olo, ohi) (m, v) and [rlo, rhi) (prev);
// *no_prev is set when a shard that overlaps [rlo, rhi) has no previous version.
static int read_ranges(const char *step_dir, size_t nparams, size_t plo, size_t phi, float *params,
                       size_t olo, size_t ohi, float *m, float *v, size_t rlo, size_t rhi,
                       float *prev, int *no_prev) {
    CkptManifest mf;
    if (manifest_read(step_dir, &mf)) return -1;
    int rc = 0;
    if (mf.nparams != nparams)
        rc = loom_fail("%s: a model of %zu parameters, %zu expected (model shape mismatch)",
                       mf.path, mf.nparams, nparams);
    if (plo > phi || phi > nparams || olo > ohi || ohi > nparams || rlo > rhi || rhi > nparams)
        rc = loom_fail("%s: requested ranges outside [0, %zu)", mf.path, nparams);
    for (int i = 0; i < mf.n && !rc; i++) {
        const CkptEntry *e = &mf.e[i];
        if (i && e->lo == mf.e[i - 1].lo && e->hi == mf.e[i - 1].hi) continue; // a replica
        size_t s1 = 0, s2 = 0, s3 = 0, lo = e->lo, cnt = e->hi - e->lo;
        size_t n1 = params ? range_isect(plo, phi, lo, e->hi, &s1) : 0;
        size_t n2 = m || v ? range_isect(olo, ohi, lo, e->hi, &s2) : 0;
        size_t n3 = prev ? range_isect(rlo, rhi, lo, e->hi, &s3) : 0;
        if (n3 && e->arrays < 4) *no_prev = 1, n3 = 0;
        if (!n1 && !n2 && !n3) continue; // nothing needed here
        float *fp = read_entry_data(step_dir, e);
        if (!fp) {
            rc = -1;
            break;
        }
        if (n1) memcpy(params + (s1 - plo), fp + (s1 - lo), n1 * sizeof(float));
        if (n2 && m) memcpy(m + (s2 - olo), fp + cnt + (s2 - lo), n2 * sizeof(float));
        if (n2 && v) memcpy(v + (s2 - olo), fp + 2 * cnt + (s2 - lo), n2 * sizeof(float));
        if (n3) memcpy(prev + (s3 - rlo), fp + 3 * cnt + (s3 - lo), n3 * sizeof(float));
        free(fp);
    }
    manifest_free(&mf);
    return rc;
}

int checkpoint_read_state(const char *step_dir, size_t nparams, size_t plo, size_t phi,
                          float *params, size_t olo, size_t ohi, float *m, float *v) {
    return read_ranges(step_dir, nparams, plo, phi, params, olo, ohi, m, v, 0, 0, NULL, NULL);
}

int checkpoint_read_prev(const char *step_dir, size_t nparams, size_t lo, size_t hi, float *prev) {
    int missing = 0;
    if (read_ranges(step_dir, nparams, 0, 0, NULL, 0, 0, NULL, NULL, lo, hi, prev, &missing))
        return -1;
    return missing;
}

// ---------------------------------------------------------------- per-rank state files

#define STATE_MAGIC "LOOMST1"
typedef struct {
    char magic[8], kind[16];
    int32_t rank, nranks, narrays;
    uint32_t crc; // over the lengths and the arrays
} StateHeader;

int state_file_write(const char *path, const char *kind, int rank, int nranks,
                     const float *const *arrays, const size_t *lens, int n) {
    size_t total = sizeof(StateHeader) + (size_t)n * sizeof(uint64_t);
    for (int i = 0; i < n; i++)
        total += lens[i] * sizeof(float);
    char *buf = xcalloc(total, 1);
    StateHeader *h = (StateHeader *)buf;
    memcpy(h->magic, STATE_MAGIC, 8);
    snprintf(h->kind, sizeof h->kind, "%s", kind);
    h->rank = rank, h->nranks = nranks, h->narrays = n;
    uint64_t *ln = (uint64_t *)(buf + sizeof *h);
    char *p = (char *)(ln + n);
    for (int i = 0; i < n; i++) {
        ln[i] = lens[i];
        memcpy(p, arrays[i], lens[i] * sizeof(float));
        p += lens[i] * sizeof(float);
    }
    h->crc = crc32_update(0, ln, total - sizeof *h);
    int rc = write_file_atomic(path, buf, total);
    free(buf);
    return rc;
}

int state_file_read(const char *path, const char *kind, int rank, int nranks, float *const *arrays,
                    const size_t *lens, int n) {
    size_t len;
    char *buf = read_file(path, &len);
    if (!buf) return -1;
    int rc = 0;
    StateHeader h;
    size_t want = sizeof h + (size_t)n * sizeof(uint64_t);
    for (int i = 0; i < n; i++)
        want += lens[i] * sizeof(float);
    if (len < sizeof h || memcmp(buf, STATE_MAGIC, 8)) {
        rc = loom_fail("%s: not a loom state file", path);
        goto out;
    }
    memcpy(&h, buf, sizeof h);
    h.kind[sizeof h.kind - 1] = 0;
    if (strcmp(h.kind, kind)) {
        rc = loom_fail("%s: holds '%s' state, '%s' expected", path, h.kind, kind);
    } else if (h.rank != rank || h.nranks != nranks) {
        rc = loom_fail("%s: written by rank %d of %d, read by rank %d of %d", path, h.rank,
                       h.nranks, rank, nranks);
    } else if (h.narrays != n || len != want) {
        rc = loom_fail("%s: %zu bytes with %d arrays; %zu bytes with %d arrays expected "
                       "(model shape or layout differs)",
                       path, len, h.narrays, want, n);
    } else if (crc32_update(0, buf + sizeof h, len - sizeof h) != h.crc) {
        rc = loom_fail("%s: checksum mismatch (corrupted file)", path);
    } else {
        const uint64_t *ln = (const uint64_t *)(buf + sizeof h);
        const char *p = (const char *)(ln + n);
        for (int i = 0; i < n && !rc; i++) {
            if (ln[i] != lens[i]) {
                rc = loom_fail("%s: array %d has %llu values, %zu expected", path, i,
                               (unsigned long long)ln[i], lens[i]);
                break;
            }
            memcpy(arrays[i], p, lens[i] * sizeof(float));
            p += lens[i] * sizeof(float);
        }
    }
out:
    free(buf);
    return rc;
}
