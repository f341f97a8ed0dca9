// st_test.h — what the weight-format tests share (test_safetensors.c, test_safetensors_bad.c,
// test_llmc.c): a scratch directory (tpath; st_test_begin/st_test_end make and remove it), small
// models with seeded weights (make_model, params_of, same_params), file helpers, and an
// independent safetensors writer (StDoc: the Hugging Face layout computed here, not by the code
// under test, so the layout checks compare two implementations).
#pragma once
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "../src/backend/backend.h"
#include "../src/common.h"
#include "../src/io/llmc_checkpoint.h"
#include "../src/io/safetensors.h"
#include "../src/io/weights.h"
#include "../src/model/gpt.h"
#include "test.h"

#define ST_MAYBE_UNUSED __attribute__((unused))

static char dir[64];
static const Backend *be;
static const GPTConfig cfg0 = {.L = 2, .H = 2, .C = 8, .V = 11, .maxT = 4};

static ST_MAYBE_UNUSED const char *tpath(const char *name) {
    static char buf[8][256];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

static ST_MAYBE_UNUSED void make_model(GPT *m, const GPTConfig *c, unsigned long long seed) {
    if (gpt_create(m, c, be)) {
        fprintf(stderr, "gpt_create: %s\n", loom_errmsg());
        exit(1);
    }
    gpt_init_weights(m, seed);
    // make biases and LayerNorms non-trivial too, so layout mistakes cannot hide in 0s and 1s
    float *h = xmalloc(m->nparams * sizeof(float));
    be->download(h, m->params, m->nparams);
    for (size_t i = 0; i < m->nparams; i++)
        h[i] += 0.001f * (float)(i % 97);
    be->upload(m->params, h, m->nparams);
    free(h);
}

static ST_MAYBE_UNUSED float *params_of(const GPT *m) {
    float *h = xmalloc(m->nparams * sizeof(float));
    be->download(h, m->params, m->nparams);
    return h;
}

static ST_MAYBE_UNUSED int same_params(const GPT *a, const GPT *b) {
    if (a->nparams != b->nparams) return 0;
    float *x = params_of(a), *y = params_of(b);
    int same = !memcmp(x, y, a->nparams * sizeof(float));
    free(x);
    free(y);
    return same;
}

static ST_MAYBE_UNUSED void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static ST_MAYBE_UNUSED size_t has_msg(const char *path) { return strstr(loom_errmsg(), path) != NULL; }

// ---------------------------------------------------------------- an independent writer

// One tensor of a hand-built safetensors file. dtype/shape/offsets are raw JSON text, so tests
// can put anything there; offsets "" means "the next free range of the data".
typedef struct {
    char name[64];
    char dtype[64];
    char shape[64];
    char offs[64];
    uint8_t *data;
    size_t nbytes;
} Ent;

typedef struct {
    Ent e[64];
    int n;
    char meta[256]; // JSON object text or "" for none
} StDoc;

static ST_MAYBE_UNUSED uint16_t f32_to_f16(float f) { // exact for normal values with ≤ 11 significant bits
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t s = (uint16_t)((u >> 16) & 0x8000);
    if ((u & 0x7fffffff) == 0) return s;
    int e = (int)((u >> 23) & 0xff) - 127 + 15;
    return (uint16_t)(s | (e << 10) | ((u >> 13) & 0x3ff));
}

static ST_MAYBE_UNUSED void ent_add(StDoc *d, const char *name, const char *dtype, const char *shape,
                    const float *x, size_t n) {
    Ent *e = &d->e[d->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(e->dtype, sizeof e->dtype, "\"%s\"", dtype);
    snprintf(e->shape, sizeof e->shape, "%s", shape);
    size_t es = !strcmp(dtype, "F32") ? 4 : 2;
    e->nbytes = n * es;
    e->data = xmalloc(e->nbytes ? e->nbytes : 1);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        if (es == 4)
            memcpy(e->data + 4 * i, &u, 4);
        else {
            uint16_t v = !strcmp(dtype, "F16") ? f32_to_f16(x[i]) : (uint16_t)(u >> 16);
            memcpy(e->data + 2 * i, &v, 2);
        }
    }
}

static ST_MAYBE_UNUSED Ent *ent_find(StDoc *d, const char *name) {
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->e[i].name, name)) return &d->e[i];
    return NULL;
}

static ST_MAYBE_UNUSED void doc_free(StDoc *d) {
    for (int i = 0; i < d->n; i++)
        free(d->e[i].data);
    d->n = 0;
}

// The model in Hugging Face layout, computed here (not by the code under test). dtype_of(i)
// picks each tensor's dtype.
static ST_MAYBE_UNUSED void doc_from_model(StDoc *d, const GPT *m, const char *prefix,
                           const char *(*dtype_of)(int)) {
    memset(d, 0, sizeof *d);
    float *h = params_of(m);
    for (int i = 0; i < m->ntensors; i++) {
        const TensorSpec *t = &m->tensors[i];
        float *x = xmalloc(t->n * sizeof(float));
        char shape[64], name[64];
        if (t->ndim == 1) {
            memcpy(x, h + t->off, t->n * sizeof(float));
            snprintf(shape, sizeof shape, "[%d]", t->shape[0]);
        } else if (!t->hf_conv1d) {
            memcpy(x, h + t->off, t->n * sizeof(float));
            snprintf(shape, sizeof shape, "[%d,%d]", t->shape[0], t->shape[1]);
        } else { // HF Conv1D: (in, out)
            int out = t->shape[0], in = t->shape[1];
            for (int o = 0; o < out; o++)
                for (int k = 0; k < in; k++)
                    x[(size_t)k * out + o] = h[t->off + (size_t)o * in + k];
            snprintf(shape, sizeof shape, "[%d,%d]", in, out);
        }
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        ent_add(d, name, dtype_of ? dtype_of(i) : "F32", shape, x, t->n);
        free(x);
    }
    free(h);
}

// Serialises the document: header JSON (padded to 8) and data in entry order.
static ST_MAYBE_UNUSED uint8_t *doc_bytes(const StDoc *d, size_t *len, size_t *hdr_len) {
    size_t cap = 1 << 16, n = 0;
    char *hj = xmalloc(cap);
    n += (size_t)snprintf(hj + n, cap - n, "{");
    if (d->meta[0]) n += (size_t)snprintf(hj + n, cap - n, "\"__metadata__\":%s", d->meta);
    size_t off = 0, data_len = 0;
    for (int i = 0; i < d->n; i++) {
        const Ent *e = &d->e[i];
        char offs[64];
        if (e->offs[0])
            snprintf(offs, sizeof offs, "%s", e->offs);
        else
            snprintf(offs, sizeof offs, "[%zu,%zu]", off, off + e->nbytes);
        // a field whose text is "-" is left out
        n += (size_t)snprintf(hj + n, cap - n, "%s\"%s\":{", (i || d->meta[0]) ? "," : "", e->name);
        const char *keys[3] = {"dtype", "shape", "data_offsets"},
                   *vals[3] = {e->dtype, e->shape, offs};
        int first = 1;
        for (int k = 0; k < 3; k++) {
            if (!strcmp(vals[k], "-")) continue;
            n += (size_t)snprintf(hj + n, cap - n, "%s\"%s\":%s", first ? "" : ",", keys[k],
                                  vals[k]);
            first = 0;
        }
        n += (size_t)snprintf(hj + n, cap - n, "}");
        off += e->nbytes;
    }
    data_len = off;
    n += (size_t)snprintf(hj + n, cap - n, "}");
    while (n % 8)
        hj[n++] = ' ';
    uint8_t *b = xmalloc(8 + n + data_len);
    for (int k = 0; k < 8; k++)
        b[k] = (uint8_t)((uint64_t)n >> (8 * k));
    memcpy(b + 8, hj, n);
    off = 8 + n;
    for (int i = 0; i < d->n; i++) {
        memcpy(b + off, d->e[i].data, d->e[i].nbytes);
        off += d->e[i].nbytes;
    }
    free(hj);
    *len = off;
    if (hdr_len) *hdr_len = n;
    return b;
}

static ST_MAYBE_UNUSED void doc_write(const StDoc *d, const char *path) {
    size_t n;
    uint8_t *b = doc_bytes(d, &n, NULL);
    write_bytes(path, b, n);
    free(b);
}

static ST_MAYBE_UNUSED void rm_dir(void) {
    DIR *dd = opendir(dir);
    if (!dd) return;
    struct dirent *de;
    char p[512];
    while ((de = readdir(dd))) {
        if (de->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(dd);
    rmdir(dir);
}

static int st_test_begin(void) {
    be = backend_cpu();
    snprintf(dir, sizeof dir, "/tmp/loom_test_st_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    return 0;
}

static int st_test_end(void) {
    if (!test_failed_count)
        rm_dir();
    else
        fprintf(stderr, "files kept in %s\n", dir);
    return test_summary();
}
