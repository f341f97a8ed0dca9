// checkpoint.c — atomic, checksummed training checkpoints (see checkpoint.h).
#include "checkpoint.h"

#include <cjson/cJSON.h>
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

static cJSON *manifest_json(const CkptMeta *meta, const CkptShardInfo *info, int n) {
    char buf[64];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "loom-checkpoint-2");
    cJSON *c = cJSON_AddObjectToObject(j, "model");
    cJSON_AddNumberToObject(c, "layers", meta->cfg.L);
    cJSON_AddNumberToObject(c, "heads", meta->cfg.H);
    cJSON_AddNumberToObject(c, "dim", meta->cfg.C);
    cJSON_AddNumberToObject(c, "vocab", meta->cfg.V);
    cJSON_AddNumberToObject(c, "block_size", meta->cfg.maxT);
    cJSON_AddNumberToObject(j, "step", meta->step);
    cJSON_AddNumberToObject(j, "opt_t", meta->opt_t);
    snprintf(buf, sizeof buf, "%" PRIu64, meta->rng_state);
    cJSON_AddStringToObject(j, "rng_state", buf);
    snprintf(buf, sizeof buf, "%" PRIu64, meta->rng_inc);
    cJSON_AddStringToObject(j, "rng_inc", buf);
    snprintf(buf, sizeof buf, "%" PRIu64, meta->data_window);
    cJSON_AddStringToObject(j, "data_window", buf);
    cJSON_AddStringToObject(j, "tokenizer", meta->tokenizer);
    if (meta->train_args) {
        cJSON *args = cJSON_Parse(meta->train_args);
        if (args) cJSON_AddItemToObject(j, "train_args", args);
    }
    if (meta->co2_workers > 0) {
        cJSON *co2 = cJSON_AddObjectToObject(j, "co2");
        cJSON_AddNumberToObject(co2, "workers", meta->co2_workers);
        cJSON_AddNumberToObject(co2, "tau", meta->co2_tau);
        cJSON_AddNumberToObject(co2, "sharded", meta->co2_sharded);
    }
    cJSON *shards = cJSON_AddArrayToObject(j, "shards");
    for (int q = 0; q < n; q++) {
        const CkptShardInfo *e = &info[q];
        if (!e->written) continue;
        cJSON *f = cJSON_CreateObject();
        snprintf(buf, sizeof buf, "shard_%05d.bin", q);
        cJSON_AddStringToObject(f, "file", buf);
        cJSON_AddNumberToObject(f, "lo", (double)e->lo);
        cJSON_AddNumberToObject(f, "hi", (double)e->hi);
        snprintf(buf, sizeof buf, "%08x", e->crc);
        cJSON_AddStringToObject(f, "crc32", buf);
        cJSON_AddNumberToObject(f, "arrays", e->arrays);
        cJSON_AddItemToArray(shards, f);
    }
    return j;
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
    cJSON *j = manifest_json(meta, info, n);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
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

static int get_int(cJSON *o, const char *key, int *out, const char *file) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return loom_fail("%s: missing or non-numeric '%s'", file, key);
    *out = v->valueint;
    return 0;
}

static int get_u64(cJSON *o, const char *key, uint64_t *out, const char *file) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v)) return loom_fail("%s: missing '%s'", file, key);
    char *end;
    *out = strtoull(v->valuestring, &end, 10);
    if (*end) return loom_fail("%s: '%s' is not an unsigned integer", file, key);
    return 0;
}

int checkpoint_read_meta(const char *step_dir, CkptMeta *meta) {
    memset(meta, 0, sizeof *meta);
    char path[4200];
    snprintf(path, sizeof path, "%s/checkpoint.json", step_dir);
    size_t len;
    char *txt = read_file(path, &len);
    if (!txt) return -1;
    cJSON *j = cJSON_ParseWithLength(txt, len);
    free(txt);
    if (!j) return loom_fail("%s: corrupted manifest (not valid JSON)", path);
    int rc = 0;
    cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
    cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "loom-checkpoint-2"))
        rc = loom_fail("%s: not a loom checkpoint manifest", path);
    else if (!cJSON_IsObject(c))
        rc = loom_fail("%s: missing 'model'", path);
    else if (get_int(c, "layers", &meta->cfg.L, path) || get_int(c, "heads", &meta->cfg.H, path) ||
             get_int(c, "dim", &meta->cfg.C, path) || get_int(c, "vocab", &meta->cfg.V, path) ||
             get_int(c, "block_size", &meta->cfg.maxT, path) ||
             get_int(j, "step", &meta->step, path) || get_int(j, "opt_t", &meta->opt_t, path) ||
             get_u64(j, "rng_state", &meta->rng_state, path) ||
             get_u64(j, "rng_inc", &meta->rng_inc, path) ||
             get_u64(j, "data_window", &meta->data_window, path))
        rc = -1;
    else if (gpt_config_check(&meta->cfg))
        rc = loom_fail("%s: bad model shape: %s", path, loom_errmsg());
    if (!rc) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokenizer");
        if (cJSON_IsString(t))
            snprintf(meta->tokenizer, sizeof meta->tokenizer, "%s", t->valuestring);
        cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "train_args");
        if (a) meta->train_args = cJSON_PrintUnformatted(a);
        cJSON *co2 = cJSON_GetObjectItemCaseSensitive(j, "co2");
        if (co2 && (get_int(co2, "workers", &meta->co2_workers, path) ||
                    get_int(co2, "tau", &meta->co2_tau, path) ||
                    get_int(co2, "sharded", &meta->co2_sharded, path)))
            rc = -1;
        else if (co2 && (meta->co2_workers < 1 || meta->co2_tau < 1))
            rc = loom_fail("%s: bad 'co2' entry", path);
    }
    cJSON_Delete(j);
    return rc;
}

void checkpoint_meta_free(CkptMeta *meta) {
    free(meta->train_args);
    meta->train_args = NULL;
}

// Copies what the shards hold of [plo, phi) (params), [olo, ohi) (m, v) and [rlo, rhi) (prev);
// *no_prev is set when a shard that overlaps [rlo, rhi) has no previous version.
static int read_ranges(const char *step_dir, size_t nparams, size_t plo, size_t phi, float *params,
                       size_t olo, size_t ohi, float *m, float *v, size_t rlo, size_t rhi,
                       float *prev, int *no_prev) {
    char mpath[4200], path[4200];
    snprintf(mpath, sizeof mpath, "%s/checkpoint.json", step_dir);
    size_t len;
    char *txt = read_file(mpath, &len);
    if (!txt) return -1;
    cJSON *j = cJSON_ParseWithLength(txt, len);
    free(txt);
    cJSON *shards = cJSON_GetObjectItemCaseSensitive(j, "shards");
    if (!cJSON_IsArray(shards)) {
        cJSON_Delete(j);
        return loom_fail("%s: manifest lists no shards", mpath);
    }
    // the shards must tile [0, nparams) exactly: check coverage before reading anything
    size_t covered = 0;
    int rc = 0, n = cJSON_GetArraySize(shards);
    for (int want = 0; want < n && !rc; want++) {
        int found = 0;
        for (cJSON *f = shards->child; f; f = f->next) {
            cJSON *lo = cJSON_GetObjectItemCaseSensitive(f, "lo");
            if (cJSON_IsNumber(lo) && (size_t)lo->valuedouble == covered) {
                cJSON *hi = cJSON_GetObjectItemCaseSensitive(f, "hi");
                if (!cJSON_IsNumber(hi) || hi->valuedouble <= lo->valuedouble) break;
                covered = (size_t)hi->valuedouble;
                found = 1;
                break;
            }
        }
        if (!found) break;
    }
    if (covered != nparams)
        rc = loom_fail("%s: shards cover %zu of %zu parameters (model shape mismatch or a shard "
                       "missing from the manifest)",
                       mpath, covered, nparams);
    for (cJSON *f = shards->child; f && !rc; f = f->next) {
        cJSON *file = cJSON_GetObjectItemCaseSensitive(f, "file");
        cJSON *crc = cJSON_GetObjectItemCaseSensitive(f, "crc32");
        size_t lo = (size_t)cJSON_GetObjectItemCaseSensitive(f, "lo")->valuedouble;
        size_t hi = (size_t)cJSON_GetObjectItemCaseSensitive(f, "hi")->valuedouble;
        if (!cJSON_IsString(file) || !cJSON_IsString(crc) || strchr(file->valuestring, '/')) {
            rc = loom_fail("%s: malformed shard entry", mpath);
            break;
        }
        cJSON *ar = cJSON_GetObjectItemCaseSensitive(f, "arrays");
        size_t arrays = cJSON_IsNumber(ar) ? (size_t)ar->valuedouble : 3; // 3 before 2bw
        if (arrays != 3 && arrays != 4) {
            rc = loom_fail("%s: shard entry with %zu arrays (3 or 4 expected)", mpath, arrays);
            break;
        }
        size_t s1, e1, s2, e2, s3, e3;
        s1 = plo > lo ? plo : lo, e1 = phi < hi ? phi : hi;
        s2 = olo > lo ? olo : lo, e2 = ohi < hi ? ohi : hi;
        s3 = rlo > lo ? rlo : lo, e3 = rhi < hi ? rhi : hi;
        if (prev && e3 > s3 && arrays < 4) {
            *no_prev = 1;
            continue;
        }
        if (!(params && e1 > s1) && !((m || v) && e2 > s2) && !(prev && e3 > s3))
            continue; // nothing needed here
        snprintf(path, sizeof path, "%s/%s", step_dir, file->valuestring);
        char *data = read_file(path, &len);
        if (!data) {
            rc = -1;
            break;
        }
        size_t cnt = hi - lo;
        if (len != arrays * cnt * sizeof(float)) {
            free(data);
            rc = loom_fail("%s: %zu bytes, expected %zu (truncated or wrong model shape)", path,
                           len, arrays * cnt * sizeof(float));
            break;
        }
        uint32_t got = crc32_update(0, data, len),
                 want = (uint32_t)strtoul(crc->valuestring, NULL, 16);
        if (got != want) {
            free(data);
            rc = loom_fail("%s: checksum mismatch (crc32 %08x, manifest says %08x): file is "
                           "corrupted",
                           path, got, want);
            break;
        }
        const float *fp = (const float *)data;
        if (params && e1 > s1)
            memcpy(params + (s1 - plo), fp + (s1 - lo), (e1 - s1) * sizeof(float));
        if (m && e2 > s2) memcpy(m + (s2 - olo), fp + cnt + (s2 - lo), (e2 - s2) * sizeof(float));
        if (v && e2 > s2)
            memcpy(v + (s2 - olo), fp + 2 * cnt + (s2 - lo), (e2 - s2) * sizeof(float));
        if (prev && e3 > s3)
            memcpy(prev + (s3 - rlo), fp + 3 * cnt + (s3 - lo), (e3 - s3) * sizeof(float));
        free(data);
    }
    cJSON_Delete(j);
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
