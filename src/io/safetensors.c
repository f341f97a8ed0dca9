// safetensors.c — reading GPT-2 weights from safetensors (see safetensors.h; writing:
// safetensors_write.c).
// Reading first validates the whole header (st_open), then reads only the tensors it needs
// with bounded reads; nothing is trusted before it is checked against the file size.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "weights.h"

#define ST_MAX_HEADER (100u << 20) // the format's own limit on the JSON header
#define ST_MAX_DIMS 8
#define ST_PREFIX "transformer."

typedef struct {
    const char *key;  // the name as stored (for messages)
    const char *name; // without the "transformer." prefix
    const char *dtype;
    size_t esize; // bytes per element
    int ndim;
    uint64_t shape[ST_MAX_DIMS];
    uint64_t numel;
    uint64_t begin, end; // relative to the data section
} StEntry;

typedef struct {
    const char *path;
    RFile f;
    uint64_t data_start, data_len;
    cJSON *root;
    const cJSON *meta; // __metadata__ object or NULL
    int n;
    StEntry *e;
    StEntry **by_name; // e sorted by name, for st_find
} StFile;

static const struct {
    const char *name;
    size_t size;
} st_dtypes[] = {
    {"F64", 8},  {"F32", 4},     {"F16", 2},     {"BF16", 2}, {"I64", 8}, {"U64", 8},
    {"I32", 4},  {"U32", 4},     {"I16", 2},     {"U16", 2},  {"I8", 1},  {"U8", 1},
    {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"E8M0", 1},
};

static void st_close(StFile *s) {
    if (s->root) cJSON_Delete(s->root);
    free(s->e);
    free(s->by_name);
    if (s->f.fd >= 0) rfile_close(&s->f);
    memset(s, 0, sizeof *s);
    s->f.fd = -1;
}

// A JSON number that is an integer in [0, 2^53] (exactly representable in a double).
static int json_uint(const cJSON *x, uint64_t *out) {
    if (!cJSON_IsNumber(x)) return -1;
    double d = x->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d) return -1;
    *out = (uint64_t)d;
    return 0;
}

static int entry_cmp(const void *a, const void *b) {
    const StEntry *x = *(const StEntry *const *)a, *y = *(const StEntry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int name_cmp(const void *a, const void *b) {
    const StEntry *x = *(const StEntry *const *)a, *y = *(const StEntry *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->key, y->key);
}

static const char *strip_prefix(const char *k) {
    size_t n = strlen(ST_PREFIX);
    return strncmp(k, ST_PREFIX, n) ? k : k + n;
}

static int parse_entry(StFile *s, const cJSON *item, StEntry *e) {
    const char *path = s->path, *key = item->string;
    e->key = key;
    e->name = strip_prefix(key);
    if (!cJSON_IsObject(item))
        return loom_fail("%s: header entry '%s' is not an object", path, key);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dt) || !dt->valuestring)
        return loom_fail("%s: tensor '%s': missing or non-string \"dtype\"", path, key);
    e->dtype = dt->valuestring;
    e->esize = 0;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (!strcmp(e->dtype, st_dtypes[i].name)) e->esize = st_dtypes[i].size;
    if (!e->esize)
        return loom_fail("%s: tensor '%s': unknown dtype \"%.32s\"", path, key, e->dtype);
    if (!cJSON_IsArray(sh)) return loom_fail("%s: tensor '%s': missing \"shape\" array", path, key);
    int nd = cJSON_GetArraySize(sh);
    if (nd > ST_MAX_DIMS)
        return loom_fail("%s: tensor '%s': shape has %d dimensions (at most %d supported)", path,
                         key, nd, ST_MAX_DIMS);
    e->ndim = nd;
    e->numel = 1;
    int overflow = 0;
    for (int d = 0; d < nd; d++) {
        if (json_uint(cJSON_GetArrayItem(sh, d), &e->shape[d]))
            return loom_fail("%s: tensor '%s': shape entries must be non-negative integers", path,
                             key);
        if (e->shape[d] && e->numel > UINT64_MAX / e->shape[d]) overflow = 1;
        e->numel *= e->shape[d];
    }
    if (overflow || e->numel > UINT64_MAX / e->esize)
        return loom_fail("%s: tensor '%s': shape is too large", path, key);
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 ||
        json_uint(cJSON_GetArrayItem(of, 0), &e->begin) ||
        json_uint(cJSON_GetArrayItem(of, 1), &e->end))
        return loom_fail("%s: tensor '%s': \"data_offsets\" must be two non-negative integers",
                         path, key);
    if (e->begin > e->end)
        return loom_fail("%s: tensor '%s': data_offsets [%llu, %llu] run backwards", path, key,
                         (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > s->data_len)
        return loom_fail("%s: tensor '%s': data_offsets [%llu, %llu] exceed the data section "
                         "(%llu bytes; file truncated?)",
                         path, key, (unsigned long long)e->begin, (unsigned long long)e->end,
                         (unsigned long long)s->data_len);
    if (e->end - e->begin != e->numel * e->esize)
        return loom_fail("%s: tensor '%s': data_offsets span %llu bytes but %s x %llu elements "
                         "need %llu",
                         path, key, (unsigned long long)(e->end - e->begin), e->dtype,
                         (unsigned long long)e->numel, (unsigned long long)(e->numel * e->esize));
    return 0;
}

// Opens path and validates its whole header. On failure everything is released.
// No overlapping data and no tensor twice (also "x" next to "transformer.x"); leaves the
// entries sorted by name in s->by_name. O(n log n): a header may list 10^6 tensors.
static int check_entries(StFile *s) {
    StEntry **ord = xmalloc((size_t)(s->n > 0 ? s->n : 1) * sizeof *ord);
    for (int i = 0; i < s->n; i++)
        ord[i] = &s->e[i];
    qsort(ord, (size_t)s->n, sizeof *ord, entry_cmp);
    int rc = 0;
    for (int i = 1; i < s->n && !rc; i++)
        if (ord[i]->begin < ord[i - 1]->end)
            rc = loom_fail("%s: tensors '%s' and '%s' have overlapping data_offsets", s->path,
                           ord[i - 1]->key, ord[i]->key);
    if (!rc) qsort(ord, (size_t)s->n, sizeof *ord, name_cmp); // duplicates become neighbours
    for (int i = 1; i < s->n && !rc; i++)
        if (!strcmp(ord[i]->name, ord[i - 1]->name))
            rc = loom_fail("%s: tensor '%s' appears twice ('%s' and '%s')", s->path, ord[i]->name,
                           ord[i - 1]->key, ord[i]->key);
    if (rc)
        free(ord);
    else
        s->by_name = ord;
    return rc;
}

static int st_open(StFile *s, const char *path) {
    memset(s, 0, sizeof *s);
    s->path = path;
    s->f.fd = -1;
    if (rfile_open(&s->f, path)) return -1;
    uint64_t fsize = s->f.size;
    uint8_t lenb[8];
    if (fsize < 8) {
        st_close(s);
        return loom_fail("%s: too short for a safetensors file (%llu bytes)", path,
                         (unsigned long long)fsize);
    }
    if (rfile_read(&s->f, 0, lenb, 8)) goto fail;
    uint64_t hn = le64(lenb);
    if (hn > fsize - 8) {
        st_close(s);
        return loom_fail("%s: header length %llu exceeds the file size (%llu bytes; truncated "
                         "or not a safetensors file)",
                         path, (unsigned long long)hn, (unsigned long long)fsize);
    }
    if (hn < 2 || hn > ST_MAX_HEADER) {
        st_close(s);
        return loom_fail("%s: implausible safetensors header length %llu", path,
                         (unsigned long long)hn);
    }
    char *hdr = xmalloc((size_t)hn + 1);
    if (rfile_read(&s->f, 8, hdr, (size_t)hn)) {
        free(hdr);
        goto fail;
    }
    hdr[hn] = 0;
    if (memchr(hdr, 0, (size_t)hn)) {
        free(hdr);
        st_close(s);
        return loom_fail("%s: safetensors header contains a NUL byte", path);
    }
    const char *end = NULL;
    s->root = cJSON_ParseWithOpts(hdr, &end, 1);
    if (!s->root) {
        size_t at = end && end >= hdr ? (size_t)(end - hdr) : 0;
        free(hdr);
        st_close(s);
        return loom_fail("%s: safetensors header is not valid JSON (near byte %zu)", path, at);
    }
    free(hdr);
    if (!cJSON_IsObject(s->root)) {
        st_close(s);
        return loom_fail("%s: safetensors header is not a JSON object", path);
    }
    s->data_start = 8 + hn;
    s->data_len = fsize - s->data_start;
    int total = cJSON_GetArraySize(s->root);
    s->e = xcalloc((size_t)(total > 0 ? total : 1), sizeof(StEntry));
    for (const cJSON *it = s->root->child; it; it = it->next) {
        if (!it->string) {
            st_close(s);
            return loom_fail("%s: safetensors header has an unnamed entry", path);
        }
        if (!strcmp(it->string, "__metadata__")) {
            if (s->meta || !cJSON_IsObject(it)) {
                st_close(s);
                return loom_fail("%s: \"__metadata__\" must be a single JSON object", path);
            }
            s->meta = it;
            continue;
        }
        if (parse_entry(s, it, &s->e[s->n])) goto fail;
        s->n++;
    }
    if (check_entries(s)) goto fail;
    return 0;
fail: // the failing step has recorded the message
    st_close(s);
    return -1;
}

static const StEntry *st_find(const StFile *s, const char *name) {
    int lo = 0, hi = s->n; // binary search: loading a deep model looks up 12 tensors per layer
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(s->by_name[mid]->name, name);
        if (!c) return s->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

// Layer index of a name "h.<N>.<...>", or -1.
static long layer_of(const char *name) {
    if (strncmp(name, "h.", 2)) return -1;
    const char *p = name + 2;
    long v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        if (v > 100000000) return -1;
        v = v * 10 + (*p++ - '0');
        digits++;
    }
    return digits && *p == '.' ? v : -1;
}

// Metadata value as a positive int: 0 when absent, -1 (with message) when malformed.
static int meta_int(const StFile *s, const char *key, int *out) {
    *out = 0;
    if (!s->meta) return 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s->meta, key);
    if (!v) return 0;
    const char *str = cJSON_IsString(v) ? v->valuestring : NULL;
    char *endp = NULL;
    long x = str && *str ? strtol(str, &endp, 10) : -1;
    if (!str || !*str || *endp || x < 1 || x > INT_MAX)
        return loom_fail("%s: metadata \"%s\" must be a positive integer string", s->path, key);
    *out = (int)x;
    return 0;
}

static int dim_int(const StFile *s, const StEntry *e, int d, int *out) {
    if (e->shape[d] < 1 || e->shape[d] > INT_MAX)
        return loom_fail("%s: tensor '%s': dimension %d (%llu) out of range", s->path, e->key, d,
                         (unsigned long long)e->shape[d]);
    *out = (int)e->shape[d];
    return 0;
}

int st_read_config(const char *path, int heads, GPTConfig *cfg) {
    StFile s;
    if (st_open(&s, path)) return -1;
    GPTConfig c = {0};
    const StEntry *wte = st_find(&s, "wte.weight"), *wpe = st_find(&s, "wpe.weight");
    if (!wte && st_find(&s, "model.embed_tokens.weight")) {
        loom_fail("%s: a LLaMA safetensors file: give --init the Hugging Face directory it "
                  "belongs in (config.json + model.safetensors, as `loom export CKPT -o DIR` "
                  "writes)",
                  path);
        goto fail;
    }
    if (!wte || !wpe) {
        loom_fail("%s: no %s tensor (not a GPT-2 safetensors file?)", path,
                  wte ? "wpe.weight" : "wte.weight");
        goto fail;
    }
    if (wte->ndim != 2 || wpe->ndim != 2) {
        loom_fail("%s: tensor '%s' must be 2-D", path, wte->ndim != 2 ? wte->key : wpe->key);
        goto fail;
    }
    if (dim_int(&s, wte, 0, &c.V) || dim_int(&s, wte, 1, &c.C) || dim_int(&s, wpe, 0, &c.maxT))
        goto fail;
    if (wpe->shape[1] != wte->shape[1]) {
        loom_fail("%s: wpe.weight has %llu channels but wte.weight has %d", path,
                  (unsigned long long)wpe->shape[1], c.C);
        goto fail;
    }
    long maxl = -1;
    for (int i = 0; i < s.n; i++) {
        long l = layer_of(s.e[i].name);
        if (l > maxl) maxl = l;
    }
    if (maxl < 0) {
        loom_fail("%s: no transformer layers (h.N.* tensors) found", path);
        goto fail;
    }
    if (maxl >= 100000) {
        loom_fail("%s: implausible layer index h.%ld", path, maxl);
        goto fail;
    }
    c.L = (int)maxl + 1;
    int mh, ml, mc, mv, mt;
    if (meta_int(&s, "n_head", &mh) || meta_int(&s, "n_layer", &ml) ||
        meta_int(&s, "n_embd", &mc) || meta_int(&s, "vocab_size", &mv) ||
        meta_int(&s, "n_positions", &mt))
        goto fail;
    if ((ml && ml != c.L) || (mc && mc != c.C) || (mv && mv != c.V) || (mt && mt != c.maxT)) {
        loom_fail("%s: metadata (n_layer %d, n_embd %d, vocab_size %d, n_positions %d) "
                  "contradicts the tensors (L=%d, C=%d, V=%d, maxT=%d)",
                  path, ml, mc, mv, mt, c.L, c.C, c.V, c.maxT);
        goto fail;
    }
    if (mh && heads > 0 && heads != mh) {
        loom_fail("%s: the file's metadata says n_head=%d but --heads %d was given", path, mh,
                  heads);
        goto fail;
    }
    c.H = mh ? mh : heads;
    if (c.H <= 0) {
        loom_fail("%s: the file does not record the number of heads (no \"n_head\" metadata); "
                  "pass --heads",
                  path);
        goto fail;
    }
    st_close(&s);
    if (gpt_config_check(&c)) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", loom_errmsg());
        return loom_fail("%s: unusable model shape (L=%d H=%d C=%d V=%d maxT=%d): %s", path, c.L,
                         c.H, c.C, c.V, c.maxT, msg);
    }
    *cfg = c;
    return 0;
fail:
    st_close(&s);
    return -1;
}

static void fmt_shape(char *buf, size_t cap, const uint64_t *shape, int nd) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < nd && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%llu", d ? ", " : "",
                              (unsigned long long)shape[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

// Where tensor t is in s (its shape and dtype checked) into w.
static int locate_one(const StFile *s, const TensorSpec *t, WeightsSrc *w) {
    const StEntry *e = st_find(s, t->name);
    if (!e) return loom_fail("%s: missing tensor '%s'", s->path, t->name);
    uint64_t want[2];
    int nd = st_hf_shape(t, want);
    int same = e->ndim == nd;
    for (int d = 0; same && d < nd; d++)
        same = e->shape[d] == want[d];
    if (!same) {
        char got[160], exp[64];
        fmt_shape(got, sizeof got, e->shape, e->ndim);
        fmt_shape(exp, sizeof exp, want, nd);
        return loom_fail("%s: tensor '%s' has shape %s, expected %s for this model", s->path,
                         e->key, got, exp);
    }
    if (!strcmp(e->dtype, "F32"))
        w->type = RAW_F32;
    else if (!strcmp(e->dtype, "F16"))
        w->type = RAW_F16;
    else if (!strcmp(e->dtype, "BF16"))
        w->type = RAW_BF16;
    else
        return loom_fail("%s: tensor '%s' has dtype %s; only F32, F16 and BF16 are supported",
                         s->path, e->key, e->dtype);
    w->off = s->data_start + e->begin;
    w->transposed = t->ndim == 2 && t->hf_conv1d;
    return 0;
}

int st_locate_tensors(const GPT *m, const char *path, const int *file_of, int file,
                      WeightsSrc *src) {
    StFile s;
    if (st_open(&s, path)) return -1;
    int rc = 0;
    for (int i = 0; i < s.n && !rc && !file_of; i++) {
        long l = layer_of(s.e[i].name);
        if (l >= m->cfg.L)
            rc = loom_fail("%s: tensor '%s' belongs to layer %ld but the model has %d layers", path,
                           s.e[i].key, l, m->cfg.L);
    }
    for (int i = 0; i < m->ntensors && !rc; i++)
        if (!file_of || file_of[i] == file) rc = locate_one(&s, &m->tensors[i], &src[i]);
    st_close(&s);
    return rc;
}

int st_locate_gpt(const GPT *m, const char *path, WeightsSrc *src) {
    return st_locate_tensors(m, path, NULL, 0, src);
}

int st_load_gpt(GPT *m, const char *path) { return weights_load(m, path, st_locate_gpt); }
