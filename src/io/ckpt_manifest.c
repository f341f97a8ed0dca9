// ckpt_manifest.c — writing and validating checkpoint manifests (see ckpt_manifest.h).
#include "ckpt_manifest.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common.h"

enum { MAX_MANIFEST_BYTES = 64 << 20, MAX_SHARDS = 1 << 20 };
#define MAX_EXACT 9007199254740992.0 // 2^53: every integer up to it is exact in a double

// ---------------------------------------------------------------- writing

static void add_u64(cJSON *j, const char *key, uint64_t x) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, x);
    cJSON_AddStringToObject(j, key, buf);
}

static void add_shards(cJSON *j, const CkptShardInfo *info, int n) {
    char buf[64];
    cJSON *shards = cJSON_AddArrayToObject(j, "shards");
    for (int q = 0; q < n; q++) {
        const CkptShardInfo *e = &info[q];
        if (!e->written || e->hi <= e->lo) continue; // an empty range holds nothing
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
}

char *manifest_text(const CkptMeta *meta, int64_t seq, const CkptShardInfo *info, int n) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", CKPT_FORMAT);
    cJSON *c = cJSON_AddObjectToObject(j, "model");
    cJSON_AddNumberToObject(c, "layers", meta->cfg.L);
    cJSON_AddNumberToObject(c, "heads", meta->cfg.H);
    cJSON_AddNumberToObject(c, "dim", meta->cfg.C);
    cJSON_AddNumberToObject(c, "vocab", meta->cfg.V);
    cJSON_AddNumberToObject(c, "block_size", meta->cfg.maxT);
    if (gpt_is_llama(&meta->cfg)) { // absent: GPT-2 (every checkpoint before LLaMA)
        const GPTConfig *g = &meta->cfg;
        cJSON_AddStringToObject(c, "arch", gpt_arch_name(g->arch));
        cJSON_AddNumberToObject(c, "kv_heads", g->KV);
        cJSON_AddNumberToObject(c, "ffn", g->F);
        cJSON_AddNumberToObject(c, "rope_theta", g->rope_theta);
        cJSON_AddNumberToObject(c, "norm_eps", g->norm_eps);
        cJSON_AddNumberToObject(c, "tie", g->tie);
        if (g->rope_scaling == ROPE_LLAMA3) { // absent: plain RoPE
            cJSON *r = cJSON_AddObjectToObject(c, "rope_scaling");
            cJSON_AddStringToObject(r, "type", "llama3");
            cJSON_AddNumberToObject(r, "factor", g->rope_factor);
            cJSON_AddNumberToObject(r, "low_freq_factor", g->rope_low);
            cJSON_AddNumberToObject(r, "high_freq_factor", g->rope_high);
            cJSON_AddNumberToObject(r, "original_max_pos", g->rope_orig);
        }
    }
    cJSON_AddNumberToObject(j, "step", meta->step);
    cJSON_AddNumberToObject(j, "opt_t", meta->opt_t);
    cJSON_AddNumberToObject(j, "seq", (double)seq);
    add_u64(j, "rng_state", meta->rng_state);
    add_u64(j, "rng_inc", meta->rng_inc);
    add_u64(j, "data_window", meta->data_window);
    cJSON_AddStringToObject(j, "data_order", "sequences"); // see CKPT_ORDER_SEQUENCES
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
        if (meta->co2_tp > 1) cJSON_AddNumberToObject(co2, "tp", meta->co2_tp);
        if (meta->co2_tp2d) cJSON_AddNumberToObject(co2, "tp_2d", 1);
        if (meta->co2_cp > 1) cJSON_AddNumberToObject(co2, "cp", meta->co2_cp);
        if (meta->co2_pp > 1) cJSON_AddNumberToObject(co2, "pp", meta->co2_pp);
    }
    if (meta->loss_scale > 0) {
        cJSON *ls = cJSON_AddObjectToObject(j, "loss_scale");
        cJSON_AddNumberToObject(ls, "scale", meta->loss_scale);
        cJSON_AddNumberToObject(ls, "good", meta->loss_scale_good);
    }
    add_shards(j, info, n);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    return text;
}

// ---------------------------------------------------------------- field readers

// An integer-valued JSON number in [lo, hi] (both within ±2^53). `pre` prefixes the key in
// messages ("model.", "shards[3]."). Optional fields take `def` when absent.
static int get_num(const char *path, const char *pre, cJSON *o, const char *key, double lo,
                   double hi, const double *def, double *out) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v && def) {
        *out = *def;
        return 0;
    }
    if (!cJSON_IsNumber(v))
        return loom_fail("%s: '%s%s' is %s", path, pre, key, v ? "not a number" : "missing");
    double d = v->valuedouble;
    if (!(d >= lo && d <= hi) || d != (double)(int64_t)d)
        return loom_fail("%s: '%s%s' must be an integer in [%.0f, %.0f] (got %.17g)", path, pre,
                         key, lo, hi, d);
    *out = d;
    return 0;
}

static int get_int(const char *path, const char *pre, cJSON *o, const char *key, int lo, int hi,
                   int *out) {
    double d;
    if (get_num(path, pre, o, key, lo, hi, NULL, &d)) return -1;
    *out = (int)d;
    return 0;
}

// A decimal string holding an unsigned 64-bit integer (JSON numbers cannot hold every one).
static int get_u64(const char *path, cJSON *o, const char *key, uint64_t *out) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v)) return loom_fail("%s: '%s' is missing or not a string", path, key);
    const char *s = v->valuestring;
    size_t n = strspn(s, "0123456789");
    errno = 0;
    unsigned long long x = n ? strtoull(s, NULL, 10) : 0;
    if (!n || s[n] || n > 20 || errno == ERANGE)
        return loom_fail("%s: '%s' must be a decimal unsigned 64-bit integer (got \"%.40s\")", path,
                         key, s);
    *out = (uint64_t)x;
    return 0;
}

// ---------------------------------------------------------------- the header fields

// model.rope_scaling: absent (plain RoPE) or {"type": "llama3", its four numbers}; the ranges
// are gpt_config_check's.
static int read_rope_scaling(const char *p, cJSON *c, GPTConfig *g) {
    cJSON *r = cJSON_GetObjectItemCaseSensitive(c, "rope_scaling");
    if (!r) return 0;
    cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "type");
    if (!cJSON_IsString(t) || strcmp(t->valuestring, "llama3"))
        return loom_fail("%s: 'model.rope_scaling.type' must be \"llama3\"", p);
    const char *k[3] = {"factor", "low_freq_factor", "high_freq_factor"};
    float *v[3] = {&g->rope_factor, &g->rope_low, &g->rope_high};
    for (int i = 0; i < 3; i++) {
        cJSON *x = cJSON_GetObjectItemCaseSensitive(r, k[i]);
        if (!cJSON_IsNumber(x))
            return loom_fail("%s: 'model.rope_scaling.%s' must be a number", p, k[i]);
        *v[i] = (float)x->valuedouble;
    }
    g->rope_scaling = ROPE_LLAMA3;
    return get_int(p, "model.rope_scaling.", r, "original_max_pos", 1, INT_MAX, &g->rope_orig);
}

// The LLaMA fields of the model record (arch "llama"); absent arch: GPT-2.
static int read_arch(const char *p, cJSON *c, GPTConfig *g) {
    cJSON *a = cJSON_GetObjectItemCaseSensitive(c, "arch");
    if (!a) return 0;
    int arch = cJSON_IsString(a) ? gpt_arch_parse(a->valuestring) : -1;
    if (arch < 0) return loom_fail("%s: 'model.arch' must be \"gpt2\" or \"llama\"", p);
    g->arch = arch;
    if (arch == ARCH_GPT2) return 0;
    if (get_int(p, "model.", c, "kv_heads", 1, 1 << 20, &g->KV) ||
        get_int(p, "model.", c, "ffn", 1, GPT_MAX_DIM, &g->F) ||
        get_int(p, "model.", c, "tie", 0, 1, &g->tie))
        return -1;
    cJSON *th = cJSON_GetObjectItemCaseSensitive(c, "rope_theta"),
          *ep = cJSON_GetObjectItemCaseSensitive(c, "norm_eps");
    if (!cJSON_IsNumber(th) || !cJSON_IsNumber(ep))
        return loom_fail("%s: 'model.rope_theta' and 'model.norm_eps' must be numbers", p);
    g->rope_theta = (float)th->valuedouble, g->norm_eps = (float)ep->valuedouble;
    return read_rope_scaling(p, c, g);
}

static int read_model(CkptManifest *mf, cJSON *j) {
    const char *p = mf->path;
    cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "model");
    GPTConfig *g = &mf->meta.cfg;
    if (!cJSON_IsObject(c)) return loom_fail("%s: 'model' is missing or not an object", p);
    if (get_int(p, "model.", c, "layers", 1, 1 << 20, &g->L) ||
        get_int(p, "model.", c, "heads", 1, 1 << 20, &g->H) ||
        get_int(p, "model.", c, "dim", 1, 1 << 24, &g->C) ||
        get_int(p, "model.", c, "vocab", 2, GPT_MAX_VOCAB, &g->V) ||
        get_int(p, "model.", c, "block_size", 1, 1 << 24, &g->maxT) || read_arch(p, c, g))
        return -1;
    if (gpt_param_count(g, &mf->nparams)) {
        char why[256]; // loom_errmsg's buffer is the one loom_fail writes
        snprintf(why, sizeof why, "%s", loom_errmsg());
        return loom_fail("%s: bad 'model' shape: %s", p, why);
    }
    if (mf->nparams > (size_t)MAX_EXACT)
        return loom_fail("%s: 'model' has %zu parameters, too many", p, mf->nparams);
    return 0;
}

// step, opt_t, the data position, the RNG state and the save order.
static int read_position(CkptManifest *mf, cJSON *j) {
    const char *p = mf->path;
    CkptMeta *m = &mf->meta;
    double seq, zero = 0;
    if (get_int(p, "", j, "step", 0, INT_MAX, &m->step) ||
        get_int(p, "", j, "opt_t", 0, m->step, &m->opt_t) ||
        get_num(p, "", j, "seq", 0, MAX_EXACT, &zero, &seq) ||
        get_u64(p, j, "rng_state", &m->rng_state) || get_u64(p, j, "rng_inc", &m->rng_inc) ||
        get_u64(p, j, "data_window", &m->data_window))
        return -1;
    mf->seq = (int64_t)seq;
    if (!(m->rng_inc & 1)) return loom_fail("%s: 'rng_inc' must be odd (a PCG32 stream)", p);
    // data_window: the next unread window (of B sequences); every step reads at least one (the runs
    // that led here may have used different dp x grad-accum layouts, so it need not divide by
    // step), and it must leave room to count on (window indices are uint64_t, scaled by B·T for
    // tokens)
    uint64_t st = (uint64_t)m->step, w = m->data_window;
    if (st ? w < st || w > ((uint64_t)1 << 53) : w != 0)
        return loom_fail("%s: 'data_window' %" PRIu64 " is out of range for step %d (at least "
                         "one window per step, at most 2^53)",
                         p, w, m->step);
    return 0;
}

static int read_extras(CkptManifest *mf, cJSON *j) {
    const char *p = mf->path;
    CkptMeta *m = &mf->meta;
    cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokenizer");
    if (t && (!cJSON_IsString(t) || strlen(t->valuestring) >= sizeof m->tokenizer))
        return loom_fail("%s: 'tokenizer' must be a string of at most %zu bytes", p,
                         sizeof m->tokenizer - 1);
    if (t) snprintf(m->tokenizer, sizeof m->tokenizer, "%s", t->valuestring);
    cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "train_args");
    if (a && !cJSON_IsObject(a)) return loom_fail("%s: 'train_args' is not an object", p);
    cJSON *co2 = cJSON_GetObjectItemCaseSensitive(j, "co2");
    if (co2 && !cJSON_IsObject(co2)) return loom_fail("%s: 'co2' is not an object", p);
    if (co2 && (get_int(p, "co2.", co2, "workers", 1, 1 << 20, &m->co2_workers) ||
                get_int(p, "co2.", co2, "tau", 1, INT_MAX, &m->co2_tau) ||
                get_int(p, "co2.", co2, "sharded", 0, 1, &m->co2_sharded)))
        return -1;
    m->co2_tp = m->co2_cp = m->co2_pp = 1; // absent: workers of one rank
    if (co2 && cJSON_GetObjectItemCaseSensitive(co2, "tp") &&
        get_int(p, "co2.", co2, "tp", 1, 1 << 20, &m->co2_tp))
        return -1;
    m->co2_tp2d = 0; // absent: 1D tensor parallelism (or none)
    if (co2 && cJSON_GetObjectItemCaseSensitive(co2, "tp_2d") &&
        get_int(p, "co2.", co2, "tp_2d", 0, 1, &m->co2_tp2d))
        return -1;
    if (co2 && cJSON_GetObjectItemCaseSensitive(co2, "cp") &&
        get_int(p, "co2.", co2, "cp", 1, 1 << 20, &m->co2_cp))
        return -1;
    if (co2 && cJSON_GetObjectItemCaseSensitive(co2, "pp") &&
        get_int(p, "co2.", co2, "pp", 1, 1 << 20, &m->co2_pp))
        return -1;
    cJSON *o = cJSON_GetObjectItemCaseSensitive(j, "data_order");
    if (o && (!cJSON_IsString(o) || strcmp(o->valuestring, "sequences")))
        return loom_fail("%s: 'data_order' must be \"sequences\" (the only data order this loom "
                         "reads; absent: written before it)",
                         p);
    m->data_order = o ? CKPT_ORDER_SEQUENCES : CKPT_ORDER_WINDOWS;
    if (a) m->train_args = cJSON_PrintUnformatted(a);
    return 0;
}

// Dynamic loss scaling's state (absent: none; optim/loss_scale.h): a power of two in [1, 2^48].
static int read_loss_scale(CkptManifest *mf, cJSON *j) {
    const char *p = mf->path;
    cJSON *ls = cJSON_GetObjectItemCaseSensitive(j, "loss_scale");
    mf->meta.loss_scale = 0, mf->meta.loss_scale_good = 0;
    if (!ls) return 0;
    if (!cJSON_IsObject(ls)) return loom_fail("%s: 'loss_scale' is not an object", p);
    double s;
    int e;
    if (get_num(p, "loss_scale.", ls, "scale", 1, 0x1p48, NULL, &s) ||
        get_int(p, "loss_scale.", ls, "good", 0, INT_MAX, &mf->meta.loss_scale_good))
        return -1;
    if (frexp(s, &e) != 0.5) return loom_fail("%s: 'loss_scale.scale' must be a power of two", p);
    mf->meta.loss_scale = s;
    return 0;
}

// ---------------------------------------------------------------- the shards

static int read_entry(CkptManifest *mf, cJSON *f, int i, CkptEntry *e) {
    const char *p = mf->path;
    char pre[40];
    snprintf(pre, sizeof pre, "shards[%d].", i);
    if (!cJSON_IsObject(f)) return loom_fail("%s: 'shards[%d]' is not an object", p, i);
    cJSON *file = cJSON_GetObjectItemCaseSensitive(f, "file");
    if (!cJSON_IsString(file)) return loom_fail("%s: '%sfile' is missing or not a string", p, pre);
    const char *s = file->valuestring;
    size_t len = strlen(s);
    if (!len || len >= sizeof e->file || s[0] == '.' || strchr(s, '/') || strstr(s, ".."))
        return loom_fail("%s: '%sfile' must name a file inside the checkpoint (got \"%.80s\")", p,
                         pre, s);
    memcpy(e->file, s, len + 1);
    double lo, hi, arrays, three = 3, P = (double)mf->nparams;
    if (get_num(p, pre, f, "lo", 0, P - 1, NULL, &lo) ||
        get_num(p, pre, f, "hi", 1, P, NULL, &hi) ||
        get_num(p, pre, f, "arrays", 3, 4, &three, &arrays)) // 3 before 2bw
        return -1;
    if (hi <= lo) return loom_fail("%s: '%shi' %.0f must be above 'lo' %.0f", p, pre, hi, lo);
    e->lo = (size_t)lo, e->hi = (size_t)hi, e->arrays = (int)arrays;
    cJSON *crc = cJSON_GetObjectItemCaseSensitive(f, "crc32");
    if (!cJSON_IsString(crc) || strlen(crc->valuestring) != 8 ||
        strspn(crc->valuestring, "0123456789abcdefABCDEF") != 8)
        return loom_fail("%s: '%scrc32' must be 8 hex digits", p, pre);
    e->crc = (uint32_t)strtoul(crc->valuestring, NULL, 16);
    return 0;
}

static int cmp_entry(const void *a, const void *b) {
    const CkptEntry *x = a, *y = b;
    if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
    return x->hi < y->hi ? -1 : x->hi > y->hi;
}

// The ranges must tile [0, nparams): no gap, no partial overlap; replicas of one range repeat it.
static int check_tiling(CkptManifest *mf) {
    qsort(mf->e, (size_t)mf->n, sizeof *mf->e, cmp_entry);
    size_t covered = 0;
    for (int i = 0; i < mf->n; i++) {
        const CkptEntry *e = &mf->e[i], *prev = i ? &mf->e[i - 1] : NULL;
        if (prev && e->lo == prev->lo && e->hi == prev->hi) continue;
        if (e->lo > covered)
            return loom_fail("%s: 'shards' leave parameters [%zu, %zu) uncovered (a shard missing "
                             "from the manifest?)",
                             mf->path, covered, e->lo);
        if (e->lo < covered)
            return loom_fail("%s: 'shards' overlap: %s [%zu, %zu) and %s [%zu, %zu)", mf->path,
                             prev->file, prev->lo, prev->hi, e->file, e->lo, e->hi);
        covered = e->hi;
    }
    if (covered != mf->nparams)
        return loom_fail("%s: 'shards' cover %zu of %zu parameters (a shard missing from the "
                         "manifest, or a model shape mismatch)",
                         mf->path, covered, mf->nparams);
    return 0;
}

// Every listed file exists as a regular file of exactly arrays·(hi-lo) float32 values.
static int check_files(CkptManifest *mf, const char *step_dir) {
    char path[4200];
    for (int i = 0; i < mf->n; i++) {
        const CkptEntry *e = &mf->e[i];
        size_t want;
        struct stat st;
        if (path_fmt(path, sizeof path, "%s/%s", step_dir, e->file)) return -1;
        if (__builtin_mul_overflow(e->hi - e->lo, (size_t)e->arrays * sizeof(float), &want))
            return loom_fail("%s: shard '%s' size overflows", mf->path, e->file);
        if (stat(path, &st)) return loom_fail("%s: cannot open: %s", path, strerror(errno));
        if (!S_ISREG(st.st_mode)) return loom_fail("%s: not a regular file", path);
        if ((uint64_t)st.st_size != want)
            return loom_fail("%s: %lld bytes, expected %zu for [%zu, %zu) x %d arrays (truncated "
                             "or wrong model shape)",
                             path, (long long)st.st_size, want, e->lo, e->hi, e->arrays);
    }
    return 0;
}

static int read_shards(CkptManifest *mf, cJSON *j, const char *step_dir) {
    cJSON *shards = cJSON_GetObjectItemCaseSensitive(j, "shards");
    if (!cJSON_IsArray(shards)) return loom_fail("%s: 'shards' is missing or not a list", mf->path);
    int n = cJSON_GetArraySize(shards);
    if (n < 1 || n > MAX_SHARDS)
        return loom_fail("%s: 'shards' lists %d files (1 to %d expected)", mf->path, n, MAX_SHARDS);
    mf->e = xcalloc((size_t)n, sizeof *mf->e);
    int i = 0;
    for (cJSON *f = shards->child; f; f = f->next, i++)
        if (read_entry(mf, f, i, &mf->e[i])) return -1;
    mf->n = n;
    return check_tiling(mf) || check_files(mf, step_dir) ? -1 : 0;
}

// ---------------------------------------------------------------- reading

static cJSON *parse_file(const char *path) {
    struct stat st;
    if (stat(path, &st)) {
        loom_fail("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > MAX_MANIFEST_BYTES) {
        loom_fail("%s: not a manifest (not a regular file of at most %d bytes)", path,
                  MAX_MANIFEST_BYTES);
        return NULL;
    }
    size_t len;
    char *txt = read_file(path, &len);
    if (!txt) return NULL;
    cJSON *j = cJSON_ParseWithLength(txt, len);
    free(txt);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        loom_fail("%s: corrupted manifest (not a JSON object)", path);
        return NULL;
    }
    return j;
}

int manifest_read(const char *step_dir, CkptManifest *mf) {
    memset(mf, 0, sizeof *mf);
    if (path_fmt(mf->path, sizeof mf->path, "%s/checkpoint.json", step_dir)) return -1;
    cJSON *j = parse_file(mf->path);
    if (!j) return -1;
    cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
    int rc = 0;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, CKPT_FORMAT))
        rc = loom_fail("%s: not a loom checkpoint manifest ('format' is not \"%s\")", mf->path,
                       CKPT_FORMAT);
    else if (read_model(mf, j) || read_position(mf, j) || read_extras(mf, j) ||
             read_loss_scale(mf, j) || read_shards(mf, j, step_dir))
        rc = -1;
    cJSON_Delete(j);
    if (rc) manifest_free(mf);
    return rc;
}

void manifest_free(CkptManifest *mf) {
    free(mf->meta.train_args);
    free(mf->e);
    mf->meta.train_args = NULL, mf->e = NULL, mf->n = 0;
}

int manifest_seq(const char *step_dir, int64_t *seq) {
    char path[4200];
    struct stat st;
    *seq = 0;
    if (path_fmt(path, sizeof path, "%s/checkpoint.json", step_dir) || lstat(path, &st) ||
        !S_ISREG(st.st_mode) || st.st_size > MAX_MANIFEST_BYTES)
        return 0;
    cJSON *j = parse_file(path);
    if (!j) return 0;
    cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
    cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "seq");
    int ours = cJSON_IsString(fmt) && !strcmp(fmt->valuestring, CKPT_FORMAT);
    if (ours && cJSON_IsNumber(s) && s->valuedouble >= 0 && s->valuedouble <= MAX_EXACT)
        *seq = (int64_t)s->valuedouble;
    cJSON_Delete(j);
    return ours;
}
