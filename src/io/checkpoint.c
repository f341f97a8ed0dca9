// checkpoint.c — atomic, checksummed training checkpoints (see checkpoint.h).
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common.h"
#include "../testhooks.h"
#include "ckpt_manifest.h"
#include "ckpt_stream.h"
#include "weights.h"

static int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return loom_fail("%s: cannot open directory: %s", dir, strerror(errno));
    fsync(fd);
    close(fd);
    return 0;
}

// Removes a file or a directory tree; never follows a symbolic link (it removes the link).
static int rm_rf(const char *path) {
    struct stat st;
    if (lstat(path, &st)) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) return unlink(path);
    DIR *d = opendir(path);
    if (!d) return -1;
    struct dirent *e;
    char sub[4200];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (path_fmt(sub, sizeof sub, "%s/%s", path, e->d_name) == 0) rm_rf(sub);
    }
    closedir(d);
    return rmdir(path);
}

// "step_<digits>" followed by *suffix ("" for a checkpoint, ".partial", ".old"); 0 otherwise.
static int step_name(const char *s, const char **suffix) {
    if (strncmp(s, "step_", 5)) return 0;
    size_t n = strspn(s + 5, "0123456789");
    if (n < 8 || n > 10) return 0;
    *suffix = s + 5 + n;
    return 1;
}

// ---------------------------------------------------------------- the save order and pruning

// A checkpoint loom wrote in DIR: its name, save order (manifest "seq") and step.
typedef struct {
    char name[64];
    int64_t seq;
    long step;
} SaveDir;

static int cmp_saves(const void *a, const void *b) {
    const SaveDir *x = a, *y = b;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
    return x->step < y->step ? -1 : x->step > y->step;
}

// Removes the leftover dir/name (path sub): a step_<N>.partial always (a save that did not
// finish), a step_<N>.old unless step_<N> is incomplete and named by `latest`.
static void clean_leftover(const char *dir, const char *name, const char *suffix,
                           const char *latest, const char *sub) {
    char base[4200];
    int64_t seq;
    size_t blen = (size_t)(suffix - name);
    int needed =
        !strcmp(suffix, ".old") && strlen(latest) == blen && !strncmp(latest, name, blen) &&
        (path_fmt(base, sizeof base, "%s/%.*s", dir, (int)blen, name) || !manifest_seq(base, &seq));
    if (!needed) rm_rf(sub);
}

// The step_<N> directories of dir that hold a loom manifest, oldest save first (*n of them).
// With `latest` (the name `latest` now holds), leftover step_<N>.partial directories are
// removed, and step_<N>.old ones unless checkpoint_resolve may still need them (step_<N> is
// incomplete and is what `latest` names; see install). Anything else is left alone.
static SaveDir *list_saves(const char *dir, int *n, const char *latest) {
    DIR *d = opendir(dir);
    int cap = 16;
    SaveDir *v = xmalloc((size_t)cap * sizeof *v);
    *n = 0;
    if (!d) return v;
    struct dirent *e;
    char sub[4200];
    while ((e = readdir(d))) {
        const char *suffix;
        struct stat st;
        int64_t seq;
        if (!step_name(e->d_name, &suffix) || strlen(e->d_name) >= sizeof v->name ||
            path_fmt(sub, sizeof sub, "%s/%s", dir, e->d_name) || lstat(sub, &st) ||
            !S_ISDIR(st.st_mode))
            continue;
        if (latest && (!strcmp(suffix, ".partial") || !strcmp(suffix, ".old"))) {
            clean_leftover(dir, e->d_name, suffix, latest, sub);
        } else if (!*suffix && manifest_seq(sub, &seq)) {
            if (*n == cap) v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!v) die(EXIT_IO, "out of memory listing %s", dir);
            memcpy(v[*n].name, e->d_name, strlen(e->d_name) + 1); // length checked above
            v[*n].seq = seq, v[(*n)++].step = strtol(e->d_name + 5, NULL, 10);
        }
    }
    closedir(d);
    qsort(v, (size_t)*n, sizeof *v, cmp_saves);
    return v;
}

// The save order of the next checkpoint written into dir: after every one already there.
static int64_t ckpt_next_seq(const char *dir) {
    int n;
    SaveDir *v = list_saves(dir, &n, NULL);
    int64_t seq = n ? v[n - 1].seq + 1 : 1;
    free(v);
    return seq < 1 ? 1 : seq;
}

// Keeps the `keep` most recently saved checkpoints of dir (0: all), and always `latest`.
static void ckpt_prune(const char *dir, int keep, const char *latest) {
    int n;
    char sub[4200];
    SaveDir *v = list_saves(dir, &n, latest);
    for (int i = 0; keep > 0 && i < n - keep; i++)
        if (strcmp(v[i].name, latest) && path_fmt(sub, sizeof sub, "%s/%s", dir, v[i].name) == 0)
            rm_rf(sub);
    free(v);
}

// ---------------------------------------------------------------- saving

int ckpt_write_array(AtomicOut *o, const CkptShard *sh, int a, const float *src, size_t n,
                     uint32_t *crc, float *buf) {
    for (size_t k = 0; k < n && !o->failed; k += CKPT_STREAM_FLOATS) {
        size_t c = n - k < CKPT_STREAM_FLOATS ? n - k : CKPT_STREAM_FLOATS;
        const float *p = buf;
        if (sh->fetch) {
            if (sh->fetch(sh->fetch_ctx, a, sh->lo + k, c, buf)) return -1;
        } else if (sh->be) {
            sh->be->download(buf, src + k, c);
        } else {
            p = src + k;
        }
        *crc = crc32_update(*crc, p, c * sizeof(float));
        aout_write(o, p, c * sizeof(float));
    }
    return 0;
}

// Writes this rank's shard: params, m, v (and prev) of [lo, hi), array by array.
static int write_shard(const char *path, int rank, int step, const CkptShard *sh, uint32_t *crc) {
    size_t n = sh->hi - sh->lo, k = sh->prev ? 4 : 3;
    const float *arrays[4] = {sh->params, sh->m, sh->v, sh->prev};
    AtomicOut o;
    if (aout_open(&o, path)) return -1;
    float *buf = sh->be || sh->fetch ? xmalloc(CKPT_STREAM_FLOATS * sizeof(float)) : NULL;
    *crc = 0;
    for (size_t a = 0; a < k; a++) {
        if (ckpt_write_array(&o, sh, (int)a, arrays[a], n, crc, buf)) {
            free(buf);
            aout_abort(&o);
            return -1;
        }
        if (a == 0 && !o.failed) {
            fflush(o.fp);
            testhook_save_pause(rank, step); // a crash with a partial file on disk
        }
    }
    free(buf);
    return aout_commit(&o);
}

int ckpt_begin(const char *dir, int step, char *part, size_t n) {
    if (mkdir(dir, 0755) && errno != EEXIST)
        return loom_fail("%s: cannot create checkpoint directory: %s", dir, strerror(errno));
    if (path_fmt(part, n, "%s/step_%08d.partial", dir, step)) return -1;
    rm_rf(part);
    if (mkdir(part, 0755)) return loom_fail("%s: cannot create: %s", part, strerror(errno));
    return 0;
}

int ckpt_write_shard(const char *part, int rank, int step, const CkptShard *sh,
                     CkptShardInfo *info) {
    char path[4200];
    *info = (CkptShardInfo){
        .written = sh->hi > sh->lo, .lo = sh->lo, .hi = sh->hi, .arrays = sh->prev ? 4 : 3};
    if (!info->written) return 0; // an empty range: no file, no manifest entry
    if (path_fmt(path, sizeof path, "%s/shard_%05d.bin", part, rank)) return -1;
    return write_shard(path, rank, step, sh, &info->crc);
}

void ckpt_discard(const char *part) { rm_rf(part); }

// Moves the complete directory part to final. An older directory of the same step (which
// `latest` may name) is swapped out atomically and left at old (*replaced = 1), so that
// `latest` names a complete checkpoint at every instant; without RENAME_EXCHANGE (some
// filesystems), the old one moves to old first and checkpoint_resolve falls back to it until
// the new one is in place.
static int install(const char *part, const char *final, const char *old, int *replaced) {
    struct stat st;
    int64_t seq;
    *replaced = 0;
    if (lstat(final, &st)) {
        if (errno != ENOENT) return loom_fail("%s: cannot stat: %s", final, strerror(errno));
        if (rename(part, final)) return loom_fail("%s: rename failed: %s", final, strerror(errno));
        return 0;
    }
    if (!S_ISDIR(st.st_mode) || !manifest_seq(final, &seq))
        return loom_fail("%s exists and is not a loom checkpoint: not replacing it", final);
    rm_rf(old);
    *replaced = 1;
    int x = testhook_save_no_exchange()
                ? (errno = EINVAL, -1)
                : renameat2(AT_FDCWD, part, AT_FDCWD, final, RENAME_EXCHANGE);
    if (x == 0) {
        testhook_save_kill("replace");
        if (rename(part, old)) return loom_fail("%s: rename failed: %s", old, strerror(errno));
        return 0;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
        return loom_fail("%s: cannot exchange with %s: %s", final, part, strerror(errno));
    if (rename(final, old)) return loom_fail("%s: rename failed: %s", old, strerror(errno));
    testhook_save_kill("replace");
    if (rename(part, final)) return loom_fail("%s: rename failed: %s", final, strerror(errno));
    return 0;
}

int ckpt_commit(const char *dir, const char *part, const CkptMeta *meta, const CkptShardInfo *info,
                int n, CkptExtraFn extra, void *extra_ctx, int keep) {
    char path[4200], name[64], final[4200], old[4300];
    snprintf(name, sizeof name, "step_%08d", meta->step);
    if (path_fmt(final, sizeof final, "%s/%s", dir, name) ||
        path_fmt(old, sizeof old, "%s.old", final) ||
        path_fmt(path, sizeof path, "%s/checkpoint.json", part))
        return -1;
    if (extra && extra(part, extra_ctx)) return -1;
    // Test hook: LOOM_FAULT_SAVE=1 fails here, as a crash mid-save would, to prove that the
    // previous checkpoint stays intact and `latest` still points at it.
    if (testhook_save_fault(meta->step))
        return loom_fail("%s: injected fault (LOOM_FAULT_SAVE)", part);
    char *text = manifest_text(meta, ckpt_next_seq(dir), info, n);
    int rc = write_file_atomic(path, text, strlen(text)), replaced;
    free(text);
    if (rc || fsync_dir(part) || install(part, final, old, &replaced)) return -1;
    fsync_dir(dir);
    char line[80];
    snprintf(line, sizeof line, "%s\n", name);
    if (path_fmt(path, sizeof path, "%s/latest", dir) ||
        write_file_atomic(path, line, strlen(line))) {
        // `latest` still names the previous checkpoint: put the directory back as it was (the
        // new one back to part, which the caller discards; an older one of this step back in
        // place, resolve falling back to it meanwhile)
        if (rename(final, part) == 0 && replaced) rename(old, final);
        return -1;
    }
    rm_rf(old); // only now: until `latest` names the new directory, resolve may need it
    ckpt_prune(dir, keep, name);
    return 0;
}

// ---------------------------------------------------------------- reading

int checkpoint_resolve(const char *path, char *step_dir, size_t n) {
    char p[4200];
    struct stat st;
    if (path_fmt(p, sizeof p, "%s/checkpoint.json", path)) return -1;
    if (stat(p, &st) == 0) return path_fmt(step_dir, n, "%s", path);
    if (path_fmt(p, sizeof p, "%s/latest", path)) return -1;
    if (stat(p, &st) || !S_ISREG(st.st_mode))
        return loom_fail("%s: not a checkpoint (no checkpoint.json and no 'latest' file)", path);
    size_t len;
    char *txt = st.st_size <= 256 ? read_file(p, &len) : NULL;
    if (!txt) return loom_fail("%s: malformed 'latest' file (too long or unreadable)", p);
    char *nl = strchr(txt, '\n');
    if (nl && !nl[1]) *nl = 0;
    const char *suffix;
    int ok = strlen(txt) == len - (nl ? 1 : 0) && step_name(txt, &suffix) && !*suffix;
    int rc = ok ? path_fmt(step_dir, n, "%s/%s", path, txt)
                : loom_fail("%s: malformed 'latest' file: it must name a step_<number> directory "
                            "inside %s",
                            p, path);
    free(txt);
    if (rc) return -1;
    // a crash while replacing the directory without RENAME_EXCHANGE (see install) leaves the
    // complete previous version at <name>.old
    char old[4300];
    if (path_fmt(p, sizeof p, "%s/checkpoint.json", step_dir) == 0 && stat(p, &st) &&
        path_fmt(old, sizeof old, "%s.old", step_dir) == 0 &&
        path_fmt(p, sizeof p, "%s/checkpoint.json", old) == 0 && stat(p, &st) == 0)
        return path_fmt(step_dir, n, "%s", old);
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

// Streams shard file e through buf (CKPT_STREAM_FLOATS floats), checking its size and CRC-32, and
// copies what w wants of each of its arrays. Returns 0 or -1 (loom_errmsg names the file).
static int read_entry(const char *step_dir, const CkptEntry *e, CkptWant *w, float *buf) {
    char path[4200];
    if (path_fmt(path, sizeof path, "%s/%s", step_dir, e->file)) return -1;
    RFile f;
    if (rfile_open(&f, path)) return -1;
    size_t cnt = e->hi - e->lo, total = cnt * (size_t)e->arrays; // floats, checked by the manifest
    int rc = f.size == total * sizeof(float)
                 ? 0
                 : loom_fail("%s: %" PRIu64 " bytes, expected %zu (changed while reading?)", path,
                             f.size, total * sizeof(float));
    uint32_t crc = 0;
    for (size_t f0 = 0; f0 < total && !rc; f0 += CKPT_STREAM_FLOATS) {
        size_t c = total - f0 < CKPT_STREAM_FLOATS ? total - f0 : CKPT_STREAM_FLOATS;
        if ((rc = rfile_read(&f, (uint64_t)f0 * sizeof(float), buf, c * sizeof(float)))) break;
        crc = crc32_update(crc, buf, c * sizeof(float));
        for (int a = 0; a < e->arrays; a++) { // array a holds file floats [a·cnt, (a+1)·cnt)
            size_t s, n = range_isect(w->lo[a], w->hi[a], e->lo, e->hi, &s);
            size_t at, k = n ? range_isect(a * cnt + (s - e->lo), a * cnt + (s - e->lo) + n, f0,
                                           f0 + c, &at)
                             : 0;
            if (!k) continue;
            if (w->store) {
                if ((rc = w->store(w->store_ctx, a, e->lo + (at - a * cnt), k, buf + (at - f0))))
                    break;
                continue;
            }
            float *dst = w->dst[a] + (s - w->lo[a]) + (at - (a * cnt + (s - e->lo)));
            if (w->be)
                w->be->upload(dst, buf + (at - f0), k);
            else
                memcpy(dst, buf + (at - f0), k * sizeof(float));
        }
    }
    rfile_close(&f);
    if (!rc && crc != e->crc)
        rc = loom_fail("%s: checksum mismatch (crc32 %08x, manifest says %08x): file is corrupted",
                       path, crc, e->crc);
    return rc;
}

int checkpoint_read_into(const char *step_dir, size_t nparams, CkptWant *w) {
    CkptManifest mf;
    if (manifest_read(step_dir, &mf)) return -1;
    int rc = 0;
    if (mf.nparams != nparams)
        rc = loom_fail("%s: a model of %zu parameters, %zu expected (model shape mismatch)",
                       mf.path, mf.nparams, nparams);
    for (int a = 0; a < 4 && !rc; a++)
        if (w->lo[a] > w->hi[a] || w->hi[a] > nparams ||
            (w->hi[a] > w->lo[a] && !w->dst[a] && !w->store))
            rc = loom_fail("%s: requested ranges outside [0, %zu)", mf.path, nparams);
    float *buf = xmalloc(CKPT_STREAM_FLOATS * sizeof(float));
    for (int i = 0; i < mf.n && !rc; i++) {
        const CkptEntry *e = &mf.e[i];
        if (i && e->lo == mf.e[i - 1].lo && e->hi == mf.e[i - 1].hi) continue; // a replica
        size_t s, need = 0;
        for (int a = 0; a < 4; a++)
            need += range_isect(w->lo[a], w->hi[a], e->lo, e->hi, &s);
        if (range_isect(w->lo[CKPT_PREV], w->hi[CKPT_PREV], e->lo, e->hi, &s) && e->arrays < 4)
            w->no_prev = 1;
        if (need) rc = read_entry(step_dir, e, w, buf);
    }
    free(buf);
    manifest_free(&mf);
    return rc;
}

int checkpoint_read_state(const char *step_dir, size_t nparams, size_t plo, size_t phi,
                          float *params, size_t olo, size_t ohi, float *m, float *v) {
    CkptWant w = {.lo = {plo, olo, olo, 0},
                  .hi = {params ? phi : plo, m ? ohi : olo, v ? ohi : olo, 0},
                  .dst = {params, m, v, NULL}};
    return checkpoint_read_into(step_dir, nparams, &w);
}

int checkpoint_read_prev(const char *step_dir, size_t nparams, size_t lo, size_t hi, float *prev) {
    CkptWant w = {.lo = {0, 0, 0, lo}, .hi = {0, 0, 0, hi}, .dst = {NULL, NULL, NULL, prev}};
    if (checkpoint_read_into(step_dir, nparams, &w)) return -1;
    return w.no_prev;
}
