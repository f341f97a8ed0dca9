// hf_dir_load.c — reading a Hugging Face Llama directory's weights (see hf_dir.h): the one
// model.safetensors, or the shards model.safetensors.index.json's weight_map names. Each tensor
// of loom's layout is located in its file (safetensors.c checks name, shape and dtype) before
// any data is read, then streamed from it (weights.c's weights_stream, tensor by tensor).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common.h"
#include "hf_dir.h"
#include "safetensors.h"
#include "weights.h"

typedef struct {
    int n;           // shard files
    char **path;     // their paths
    int *file_of;    // per m->tensors: the index of its file in path
    WeightsSrc *src; // per m->tensors: where it is in that file
} HfLoc;

static void loc_free(HfLoc *h) {
    for (int k = 0; k < h->n; k++)
        free(h->path[k]);
    free(h->path);
    free(h->file_of);
    free(h->src);
    memset(h, 0, sizeof *h);
}

// The index of shard `file` of dir in h->path, added when new; -1 when the path is too long.
static int add_shard(HfLoc *h, const char *dir, const char *file) {
    char path[4200];
    if (path_fmt(path, sizeof path, "%s/%s", dir, file)) return -1;
    for (int k = 0; k < h->n; k++)
        if (!strcmp(h->path[k], path)) return k;
    h->path = realloc(h->path, (size_t)(h->n + 1) * sizeof *h->path);
    if (!h->path) die(EXIT_IO, "out of memory reading %s", dir);
    h->path[h->n] = xmalloc(strlen(path) + 1);
    memcpy(h->path[h->n], path, strlen(path) + 1);
    return h->n++;
}

// A shard name from the index must be a plain file name inside the directory.
static int plain_name(const cJSON *v) {
    const char *s = cJSON_IsString(v) ? v->valuestring : NULL;
    return s && *s && *s != '.' && !strchr(s, '/') && strlen(s) < 256;
}

// Each tensor's shard from the index's weight_map.
static int read_index(const GPT *m, const char *dir, const char *ipath, HfLoc *h) {
    size_t len;
    char *text = read_file(ipath, &len);
    if (!text) return -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    int rc = !root                ? loom_fail("%s: not valid JSON", ipath)
             : cJSON_IsObject(wm) ? 0
                                  : loom_fail("%s: no \"weight_map\" object", ipath);
    for (int i = 0; i < m->ntensors && !rc; i++) {
        const char *name = m->tensors[i].name;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(wm, name);
        if (!v)
            rc = loom_fail("%s: missing tensor '%s' (not in its weight_map)", ipath, name);
        else if (!plain_name(v))
            rc = loom_fail("%s: weight_map's file for '%s' is not a file name in %s", ipath, name,
                           dir);
        else if ((h->file_of[i] = add_shard(h, dir, v->valuestring)) < 0)
            rc = -1;
    }
    cJSON_Delete(root);
    return rc;
}

// Every tensor of m located in dir's files (h: freed on failure).
static int hf_locate(const GPT *m, const char *dir, HfLoc *h) {
    memset(h, 0, sizeof *h);
    if (!gpt_is_llama(&m->cfg))
        return loom_fail("%s: a Hugging Face directory is read for LLaMA models only", dir);
    h->file_of = xcalloc((size_t)m->ntensors, sizeof *h->file_of);
    h->src = xcalloc((size_t)m->ntensors, sizeof *h->src);
    char ipath[4200], wpath[4200];
    struct stat st;
    int rc = path_fmt(ipath, sizeof ipath, "%s/%s", dir, HF_INDEX) ||
             path_fmt(wpath, sizeof wpath, "%s/%s", dir, HF_WEIGHTS);
    if (rc)
        ;
    else if (!stat(ipath, &st))
        rc = read_index(m, dir, ipath, h);
    else if (!stat(wpath, &st))
        rc = add_shard(h, dir, HF_WEIGHTS) < 0;
    else
        rc = loom_fail("%s: neither %s nor %s (the weights of a Hugging Face directory)", dir,
                       HF_WEIGHTS, HF_INDEX);
    for (int k = 0; k < h->n && !rc; k++) {
        if (stat(h->path[k], &st))
            rc = loom_fail("%s: shard named by %s is missing", h->path[k], HF_INDEX);
        else
            rc = st_locate_tensors(m, h->path[k], h->file_of, k, h->src);
    }
    if (rc) loc_free(h);
    return rc ? -1 : 0;
}

int hf_check_dir(const GPT *m, const char *dir) {
    HfLoc h;
    if (hf_locate(m, dir, &h)) return -1;
    loc_free(&h);
    return 0;
}

int hf_stream_dir(const GPT *m, const char *dir, size_t lo, size_t hi, GptSink sink, void *ctx) {
    HfLoc h;
    if (hf_locate(m, dir, &h)) return -1;
    RFile *f = xcalloc((size_t)h.n, sizeof *f);
    for (int k = 0; k < h.n; k++)
        f[k].fd = -1;
    int rc = 0;
    for (int i = 0; i < m->ntensors && !rc; i++) { // tensor by tensor, each from its shard
        const TensorSpec *t = &m->tensors[i];
        size_t s, n = range_isect(t->off, t->off + t->n, lo, hi, &s);
        RFile *fi = &f[h.file_of[i]];
        if (!n) continue;
        if (fi->fd < 0 && rfile_open(fi, h.path[h.file_of[i]])) rc = -1;
        if (!rc) rc = weights_stream(m, fi, h.src, s, s + n, sink, ctx);
    }
    for (int k = 0; k < h.n; k++)
        if (f[k].fd >= 0) rfile_close(&f[k]);
    free(f);
    loc_free(&h);
    return rc;
}
