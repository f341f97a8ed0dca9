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

static int write_floats(const char *path, const float *dev, size_t n, const Backend *be,
                        uint32_t *crc) {
    float *host = xmalloc(n * sizeof(float));
    be->download(host, dev, n);
    *crc = crc32_update(0, host, n * sizeof(float));
    int rc = write_file_atomic(path, host, n * sizeof(float));
    free(host);
    return rc;
}

static int write_two(const char *path, const float *a, const float *b, size_t n,
                     const Backend *be, uint32_t *crc) {
    float *host = xmalloc(2 * n * sizeof(float));
    be->download(host, a, n);
    be->download(host + n, b, n);
    *crc = crc32_update(0, host, 2 * n * sizeof(float));
    int rc = write_file_atomic(path, host, 2 * n * sizeof(float));
    free(host);
    return rc;
}

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
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode)) rm_rf(sub);
        else unlink(sub);
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

int checkpoint_save(const char *dir, const GPT *m, const AdamW *opt, const CkptMeta *meta,
                    CkptExtraFn extra, void *extra_ctx, int keep) {
    if (mkdir(dir, 0755) && errno != EEXIST)
        return loom_fail("%s: cannot create checkpoint directory: %s", dir, strerror(errno));
    char name[64], final[4096], part[4096], path[4200];
    snprintf(name, sizeof name, "step_%08d", meta->step);
    snprintf(final, sizeof final, "%s/%s", dir, name);
    snprintf(part, sizeof part, "%s/%s.partial", dir, name);
    rm_rf(part);
    if (mkdir(part, 0755)) return loom_fail("%s: cannot create: %s", part, strerror(errno));

    uint32_t crc_model, crc_optim = 0;
    snprintf(path, sizeof path, "%s/model.bin", part);
    if (write_floats(path, m->params, m->nparams, m->be, &crc_model)) return -1;
    if (opt) {
        snprintf(path, sizeof path, "%s/optim.bin", part);
        if (write_two(path, opt->m, opt->v, opt->n, m->be, &crc_optim)) return -1;
    }
    if (extra && extra(part, extra_ctx)) return -1;
    // Test hook: LOOM_FAULT_SAVE=1 fails here, as a crash mid-save would, to prove that the
    // previous checkpoint stays intact and `latest` still points at it.
    if (getenv("LOOM_FAULT_SAVE")) return loom_fail("%s: injected fault (LOOM_FAULT_SAVE)", part);

    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "loom-checkpoint-1");
    cJSON *c = cJSON_AddObjectToObject(j, "model");
    cJSON_AddNumberToObject(c, "layers", m->cfg.L);
    cJSON_AddNumberToObject(c, "heads", m->cfg.H);
    cJSON_AddNumberToObject(c, "dim", m->cfg.C);
    cJSON_AddNumberToObject(c, "vocab", m->cfg.V);
    cJSON_AddNumberToObject(c, "block_size", m->cfg.maxT);
    cJSON_AddNumberToObject(j, "step", meta->step);
    cJSON_AddNumberToObject(j, "opt_t", opt ? opt->t : meta->opt_t);
    char buf[64];
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
    cJSON *files = cJSON_AddObjectToObject(j, "files");
    cJSON *f = cJSON_AddObjectToObject(files, "model.bin");
    cJSON_AddNumberToObject(f, "bytes", (double)(m->nparams * sizeof(float)));
    snprintf(buf, sizeof buf, "%08x", crc_model);
    cJSON_AddStringToObject(f, "crc32", buf);
    if (opt) {
        f = cJSON_AddObjectToObject(files, "optim.bin");
        cJSON_AddNumberToObject(f, "bytes", (double)(2 * opt->n * sizeof(float)));
        snprintf(buf, sizeof buf, "%08x", crc_optim);
        cJSON_AddStringToObject(f, "crc32", buf);
    }
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/checkpoint.json", part);
    int rc = write_file_atomic(path, text, strlen(text));
    free(text);
    if (rc) return -1;
    if (fsync_dir(part)) return -1;

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
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "loom-checkpoint-1"))
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
        if (cJSON_IsString(t)) snprintf(meta->tokenizer, sizeof meta->tokenizer, "%s", t->valuestring);
        cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "train_args");
        if (a) meta->train_args = cJSON_PrintUnformatted(a);
    }
    cJSON_Delete(j);
    return rc;
}

void checkpoint_meta_free(CkptMeta *meta) {
    free(meta->train_args);
    meta->train_args = NULL;
}

// Reads `name` from the step dir, checks size and CRC against the manifest.
static float *read_checked(const char *step_dir, const char *name, size_t want_bytes) {
    char mpath[4200], path[4200];
    snprintf(mpath, sizeof mpath, "%s/checkpoint.json", step_dir);
    snprintf(path, sizeof path, "%s/%s", step_dir, name);
    size_t len;
    char *txt = read_file(mpath, &len);
    if (!txt) return NULL;
    cJSON *j = cJSON_ParseWithLength(txt, len);
    free(txt);
    cJSON *f = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "files"), name);
    cJSON *crc = cJSON_GetObjectItemCaseSensitive(f, "crc32");
    if (!cJSON_IsString(crc)) {
        cJSON_Delete(j);
        loom_fail("%s: manifest lists no checksum for %s", mpath, name);
        return NULL;
    }
    unsigned long want_crc = strtoul(crc->valuestring, NULL, 16);
    cJSON_Delete(j);
    char *data = read_file(path, &len);
    if (!data) return NULL;
    if (len != want_bytes) {
        free(data);
        loom_fail("%s: %zu bytes, expected %zu (truncated or wrong model shape)", path, len,
                  want_bytes);
        return NULL;
    }
    uint32_t got = crc32_update(0, data, len);
    if (got != (uint32_t)want_crc) {
        free(data);
        loom_fail("%s: checksum mismatch (crc32 %08x, manifest says %08lx): file is corrupted",
                  path, got, want_crc);
        return NULL;
    }
    return (float *)data;
}

int checkpoint_load(const char *step_dir, GPT *m, AdamW *opt) {
    float *p = read_checked(step_dir, "model.bin", m->nparams * sizeof(float));
    if (!p) return -1;
    m->be->upload(m->params, p, m->nparams);
    free(p);
    if (opt) {
        float *mv = read_checked(step_dir, "optim.bin", 2 * opt->n * sizeof(float));
        if (!mv) return -1;
        m->be->upload(opt->m, mv, opt->n);
        m->be->upload(opt->v, mv + opt->n, opt->n);
        free(mv);
    }
    return 0;
}
