// test_safetensors.c — weight import/export: safetensors and llm.c checkpoints.
// Round trips (save → load into a second model → bit-identical parameters), the on-disk layout
// checked against an independent writer in this file (Hugging Face names, Conv1D transposes,
// llm.c group order and vocabulary padding), "transformer." prefixes and ignored buffers,
// F16/BF16 decoding, llm.c bf16 (version 5), format detection, and a battery of malformed
// files — each must return -1 with the file name in the message, never crash (run under ASan),
// and never touch the model's parameters.
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

static char dir[64];
static const Backend *be;
static const GPTConfig cfg0 = {.L = 2, .H = 2, .C = 8, .V = 11, .maxT = 4};

static const char *tpath(const char *name) {
    static char buf[8][256];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

static void make_model(GPT *m, const GPTConfig *c, unsigned long long seed) {
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

static float *params_of(const GPT *m) {
    float *h = xmalloc(m->nparams * sizeof(float));
    be->download(h, m->params, m->nparams);
    return h;
}

static int same_params(const GPT *a, const GPT *b) {
    if (a->nparams != b->nparams) return 0;
    float *x = params_of(a), *y = params_of(b);
    int same = !memcmp(x, y, a->nparams * sizeof(float));
    free(x);
    free(y);
    return same;
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static size_t has_msg(const char *path) { return strstr(loom_errmsg(), path) != NULL; }

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

static uint16_t f32_to_f16(float f) { // exact for normal values with ≤ 11 significant bits
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t s = (uint16_t)((u >> 16) & 0x8000);
    if ((u & 0x7fffffff) == 0) return s;
    int e = (int)((u >> 23) & 0xff) - 127 + 15;
    return (uint16_t)(s | (e << 10) | ((u >> 13) & 0x3ff));
}

static void ent_add(StDoc *d, const char *name, const char *dtype, const char *shape,
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

static Ent *ent_find(StDoc *d, const char *name) {
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->e[i].name, name)) return &d->e[i];
    return NULL;
}

static void doc_free(StDoc *d) {
    for (int i = 0; i < d->n; i++)
        free(d->e[i].data);
    d->n = 0;
}

// The model in Hugging Face layout, computed here (not by the code under test). dtype_of(i)
// picks each tensor's dtype.
static void doc_from_model(StDoc *d, const GPT *m, const char *prefix,
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
static uint8_t *doc_bytes(const StDoc *d, size_t *len, size_t *hdr_len) {
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

static void doc_write(const StDoc *d, const char *path) {
    size_t n;
    uint8_t *b = doc_bytes(d, &n, NULL);
    write_bytes(path, b, n);
    free(b);
}

// ---------------------------------------------------------------- safetensors

TEST(st_round_trip) {
    GPT a, b;
    make_model(&a, &cfg0, 1);
    const char *p = tpath("rt.safetensors");
    CHECK(st_save_gpt(&a, p) == 0, "%s", loom_errmsg());
    GPTConfig c;
    CHECK(st_read_config(p, 0, &c) == 0, "%s", loom_errmsg());
    CHECK(!memcmp(&c, &cfg0, sizeof c), "config L%d H%d C%d V%d T%d", c.L, c.H, c.C, c.V, c.maxT);
    make_model(&b, &cfg0, 2);
    CHECK(!same_params(&a, &b), "different seeds should differ");
    CHECK(st_load_gpt(&b, p) == 0, "%s", loom_errmsg());
    CHECK(same_params(&a, &b), "params differ after save/load");

    // The file itself: header padded to 8, metadata, and the data section byte-identical to the
    // independent HF-layout writer above (names, order, Conv1D transposes).
    size_t n;
    uint8_t *f = (uint8_t *)read_file(p, &n);
    CHECK(f && n > 8, "read back");
    uint64_t hn = le64(f);
    CHECK(hn % 8 == 0 && 8 + hn <= n, "header length %llu", (unsigned long long)hn);
    char *hj = xmalloc(hn + 1);
    memcpy(hj, f + 8, hn);
    hj[hn] = 0;
    cJSON *root = cJSON_Parse(hj);
    CHECK(root != NULL, "header parses");
    cJSON *meta = cJSON_GetObjectItem(root, "__metadata__");
    const char *keys[] = {"format", "n_head", "n_layer", "n_embd", "vocab_size", "n_positions"};
    const char *vals[] = {"pt", "2", "2", "8", "11", "4"};
    for (int i = 0; i < 6; i++) {
        cJSON *v = cJSON_GetObjectItem(meta, keys[i]);
        CHECK(cJSON_IsString(v) && !strcmp(v->valuestring, vals[i]), "metadata %s", keys[i]);
    }
    cJSON *qkv = cJSON_GetObjectItem(root, "h.1.attn.c_attn.weight");
    cJSON *sh = cJSON_GetObjectItem(qkv, "shape");
    CHECK(cJSON_GetArraySize(sh) == 2 && cJSON_GetArrayItem(sh, 0)->valueint == 8 &&
              cJSON_GetArrayItem(sh, 1)->valueint == 24,
          "c_attn stored as (C, 3C)");
    cJSON *wte = cJSON_GetObjectItem(root, "wte.weight");
    sh = cJSON_GetObjectItem(wte, "shape");
    CHECK(cJSON_GetArrayItem(sh, 0)->valueint == 11 && cJSON_GetArrayItem(sh, 1)->valueint == 8,
          "wte stored as (V, C)");
    CHECK(cJSON_GetArraySize(root) == 1 + a.ntensors, "one entry per tensor + metadata");
    cJSON_Delete(root);
    free(hj);
    StDoc d;
    doc_from_model(&d, &a, "", NULL);
    size_t ref_n, ref_h;
    uint8_t *ref = doc_bytes(&d, &ref_n, &ref_h);
    CHECK(n - 8 - hn == ref_n - 8 - ref_h && !memcmp(f + 8 + hn, ref + 8 + ref_h, n - 8 - hn),
          "data section differs from the reference HF layout");
    free(ref);
    doc_free(&d);
    free(f);

    // no temporary files left behind; saving again replaces the file
    CHECK(st_save_gpt(&b, p) == 0, "%s", loom_errmsg());
    DIR *dd = opendir(dir);
    struct dirent *de;
    int tmps = 0;
    while ((de = readdir(dd)))
        if (strstr(de->d_name, ".tmp")) tmps++;
    closedir(dd);
    CHECK(tmps == 0, "%d temporary files left", tmps);
    gpt_free(&a);
    gpt_free(&b);
}

TEST(st_save_fails_cleanly) {
    GPT a;
    make_model(&a, &cfg0, 1);
    const char *p = tpath("no/such/dir/x.safetensors");
    CHECK(st_save_gpt(&a, p) == -1, "save into a missing directory must fail");
    CHECK(has_msg(p), "message names the file: %s", loom_errmsg());
    CHECK(access(p, F_OK) != 0, "no file created");
    const char *q = tpath("no/such/dir/x.bin");
    CHECK(llmc_save_gpt(&a, q) == -1, "llm.c save into a missing directory must fail");
    CHECK(has_msg(q), "message names the file: %s", loom_errmsg());
    gpt_free(&a);
}

TEST(st_prefix_and_extra_buffers) {
    GPT a, b;
    make_model(&a, &cfg0, 3);
    StDoc d;
    doc_from_model(&d, &a, "transformer.", NULL);
    // HF GPT-2 buffers and the tied head, which loom must ignore
    float mask[16], mb = -1e4f;
    for (int i = 0; i < 16; i++)
        mask[i] = (float)((i % 4) <= (i / 4));
    float *lm = xmalloc(11 * 8 * sizeof(float));
    for (int i = 0; i < 88; i++)
        lm[i] = 42.f;
    ent_add(&d, "transformer.h.0.attn.bias", "F32", "[1,1,4,4]", mask, 16);
    ent_add(&d, "transformer.h.1.attn.bias", "F32", "[1,1,4,4]", mask, 16);
    ent_add(&d, "transformer.h.0.attn.masked_bias", "F32", "[]", &mb, 1);
    ent_add(&d, "lm_head.weight", "F32", "[11,8]", lm, 88);
    free(lm);
    snprintf(d.meta, sizeof d.meta, "{\"format\":\"pt\"}");
    const char *p = tpath("prefix.safetensors");
    doc_write(&d, p);
    GPTConfig c;
    CHECK(st_read_config(p, 0, &c) == -1, "no n_head and no --heads must fail");
    CHECK(has_msg(p) && strstr(loom_errmsg(), "--heads"), "message: %s", loom_errmsg());
    CHECK(st_read_config(p, 2, &c) == 0, "%s", loom_errmsg());
    CHECK(!memcmp(&c, &cfg0, sizeof c), "config L%d H%d C%d V%d T%d", c.L, c.H, c.C, c.V, c.maxT);
    CHECK(init_read_config(p, 2, &c) == 0 && c.L == 2, "%s", loom_errmsg());
    make_model(&b, &cfg0, 4);
    CHECK(st_load_gpt(&b, p) == 0, "%s", loom_errmsg());
    CHECK(same_params(&a, &b), "params differ");
    gpt_free(&b);
    make_model(&b, &cfg0, 5);
    CHECK(gpt_load_init_file(&b, p) == 0, "%s", loom_errmsg());
    CHECK(same_params(&a, &b), "params differ (gpt_load_init_file)");
    doc_free(&d);

    // unprefixed names, with the metadata the peer writes ({"format","n_head"})
    doc_from_model(&d, &a, "", NULL);
    snprintf(d.meta, sizeof d.meta, "{\"format\":\"pt\",\"n_head\":\"2\"}");
    p = tpath("peerlike.safetensors");
    doc_write(&d, p);
    CHECK(st_read_config(p, 0, &c) == 0 && c.H == 2, "%s", loom_errmsg());
    CHECK(st_read_config(p, 2, &c) == 0, "agreeing --heads is fine: %s", loom_errmsg());
    CHECK(st_read_config(p, 4, &c) == -1 && has_msg(p), "conflicting --heads must fail");
    doc_free(&d);
    gpt_free(&a);
    gpt_free(&b);
}

static const char *mixed_dtype(int i) {
    static const char *t[] = {"F16", "BF16", "F32"};
    return t[i % 3];
}

TEST(st_half_precision) {
    GPT a, b;
    make_model(&a, &cfg0, 6);
    // values exactly representable in both F16 and BF16: k/16 for k in [-8, 8]
    float *h = params_of(&a);
    for (size_t i = 0; i < a.nparams; i++)
        h[i] = (float)((int)(i % 17) - 8) / 16.f;
    be->upload(a.params, h, a.nparams);
    free(h);
    const char *names[3] = {"f16.safetensors", "bf16.safetensors", "mixed.safetensors"};
    for (int k = 0; k < 3; k++) {
        StDoc d;
        if (k < 2) {
            const char *want = k == 0 ? "F16" : "BF16";
            memset(&d, 0, sizeof d);
            StDoc tmp;
            doc_from_model(&tmp, &a, "", NULL); // F32 reference entries → re-encode
            for (int i = 0; i < tmp.n; i++) {
                float *x = xmalloc(tmp.e[i].nbytes);
                memcpy(x, tmp.e[i].data, tmp.e[i].nbytes);
                ent_add(&d, tmp.e[i].name, want, tmp.e[i].shape, x, tmp.e[i].nbytes / 4);
                free(x);
            }
            doc_free(&tmp);
        } else {
            doc_from_model(&d, &a, "", mixed_dtype);
        }
        snprintf(d.meta, sizeof d.meta, "{\"n_head\":\"2\"}");
        const char *p = tpath(names[k]);
        doc_write(&d, p);
        make_model(&b, &cfg0, 7);
        CHECK(st_load_gpt(&b, p) == 0, "%s: %s", names[k], loom_errmsg());
        CHECK(same_params(&a, &b), "%s: params differ", names[k]);
        gpt_free(&b);
        doc_free(&d);
    }

    // F16 special values: ±0, subnormals, max, inf, NaN; BF16 likewise
    uint16_t f16[8] = {0x3C00, 0xC000, 0x8000, 0x0001, 0x03FF, 0x7BFF, 0x7C00, 0x7E00};
    float f16_want[8] = {1.f, -2.f, -0.f, 0x1p-24f, 1023 * 0x1p-24f, 65504.f, INFINITY, NAN};
    uint16_t bf[8] = {0x3F80, 0xC000, 0x8000, 0x0001, 0x7F7F, 0xFF80, 0x7FC0, 0x3E80};
    float bf_want[8] = {1.f, -2.f, -0.f, 0x1p-133f, 0x1.fep127f, -INFINITY, NAN, 0.25f};
    for (int i = 0; i < 8; i++) {
        float x = f16_to_f32(f16[i]), y = bf16_to_f32(bf[i]);
        CHECK(isnan(f16_want[i]) ? isnan(x)
                                 : (x == f16_want[i] && signbit(x) == signbit(f16_want[i])),
              "f16 %04x -> %g, want %g", f16[i], x, f16_want[i]);
        CHECK(isnan(bf_want[i]) ? isnan(y) : (y == bf_want[i] && signbit(y) == signbit(bf_want[i])),
              "bf16 %04x -> %g, want %g", bf[i], y, bf_want[i]);
    }
    // and through a file: ln_f.bias (C=8) stored as raw F16 bits
    {
        StDoc d;
        doc_from_model(&d, &a, "", NULL);
        Ent *e = ent_find(&d, "ln_f.bias");
        free(e->data);
        e->data = xmalloc(16);
        memcpy(e->data, f16, 16);
        e->nbytes = 16;
        snprintf(e->dtype, sizeof e->dtype, "\"F16\"");
        const char *p = tpath("f16special.safetensors");
        doc_write(&d, p);
        make_model(&b, &cfg0, 8);
        CHECK(st_load_gpt(&b, p) == 0, "%s", loom_errmsg());
        float *hb = params_of(&b);
        const TensorSpec *t = gpt_find_tensor(&b, "ln_f.bias");
        for (int i = 0; i < 8; i++) {
            float x = hb[t->off + i];
            CHECK(isnan(f16_want[i]) ? isnan(x) : x == f16_want[i], "ln_f.bias[%d] = %g", i, x);
        }
        free(hb);
        gpt_free(&b);
        doc_free(&d);
    }
    gpt_free(&a);
}

// ---------------------------------------------------------------- malformed safetensors

// Loads path into a model of cfg0 whose params must survive untouched. expect_cfg_fail: the
// config reader must fail too (header-level damage). Returns 1 when everything held.
static int expect_bad(const char *label, const char *path, int expect_cfg_fail) {
    GPT m;
    make_model(&m, &cfg0, 99);
    float *before = params_of(&m);
    int ok = 1;
    loom_fail("(none)");
    int rc = st_load_gpt(&m, path);
    if (rc != -1) {
        fprintf(stderr, "  [%s] st_load_gpt returned %d, want -1\n", label, rc);
        ok = 0;
    } else if (!has_msg(path)) {
        fprintf(stderr, "  [%s] message lacks the file name: %s\n", label, loom_errmsg());
        ok = 0;
    }
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", loom_errmsg());
    rc = gpt_load_init_file(&m, path);
    if (rc != -1 || !has_msg(path)) {
        fprintf(stderr, "  [%s] gpt_load_init_file: rc %d, %s\n", label, rc, loom_errmsg());
        ok = 0;
    }
    float *after = params_of(&m);
    if (memcmp(before, after, m.nparams * sizeof(float))) {
        fprintf(stderr, "  [%s] a failed load modified the parameters\n", label);
        ok = 0;
    }
    GPTConfig c;
    rc = st_read_config(path, 2, &c);
    if (expect_cfg_fail && (rc != -1 || !has_msg(path))) {
        fprintf(stderr, "  [%s] st_read_config: rc %d, %s\n", label, rc, loom_errmsg());
        ok = 0;
    }
    if (getenv("LOOM_TEST_VERBOSE")) fprintf(stderr, "  [%s] %s\n", label, msg);
    free(before);
    free(after);
    gpt_free(&m);
    return ok;
}

// A valid document for cfg0 with metadata; tests mutate it.
static void good_doc(StDoc *d, const GPT *m) {
    doc_from_model(d, m, "", NULL);
    snprintf(d->meta, sizeof d->meta, "{\"format\":\"pt\",\"n_head\":\"2\"}");
}

// Writes the 8-byte length + header text + data (all given), for header-level damage.
static void write_raw_st(const char *path, uint64_t hlen, const char *hdr, size_t hdr_n,
                         const uint8_t *data, size_t data_n) {
    uint8_t *b = xmalloc(8 + hdr_n + data_n);
    for (int k = 0; k < 8; k++)
        b[k] = (uint8_t)(hlen >> (8 * k));
    memcpy(b + 8, hdr, hdr_n);
    if (data_n) memcpy(b + 8 + hdr_n, data, data_n);
    write_bytes(path, b, 8 + hdr_n + data_n);
    free(b);
}

TEST(st_malformed) {
    GPT src;
    make_model(&src, &cfg0, 10);
    StDoc d;
    size_t n, hn;
    good_doc(&d, &src);
    uint8_t *good = doc_bytes(&d, &n, &hn);
    doc_free(&d);
    const char *p;
    // the pristine file loads (guards against the battery passing for the wrong reason)
    p = tpath("good.safetensors");
    write_bytes(p, good, n);
    {
        GPT m;
        make_model(&m, &cfg0, 11);
        CHECK(st_load_gpt(&m, p) == 0, "%s", loom_errmsg());
        CHECK(same_params(&m, &src), "good file round trip");
        gpt_free(&m);
    }

    // --- file-level damage
    p = tpath("bad_empty.safetensors");
    write_bytes(p, "", 0);
    CHECK(expect_bad("empty", p, 1), "empty");
    p = tpath("bad_5bytes.safetensors");
    write_bytes(p, good, 5);
    CHECK(expect_bad("5 bytes", p, 1), "5 bytes");
    p = tpath("bad_lenonly.safetensors");
    write_bytes(p, good, 8);
    CHECK(expect_bad("length only", p, 1), "length only");
    p = tpath("bad_midheader.safetensors");
    write_bytes(p, good, 8 + hn / 2);
    CHECK(expect_bad("truncated mid-header", p, 1), "truncated mid-header");
    p = tpath("bad_lastbyte.safetensors");
    write_bytes(p, good, n - 1);
    CHECK(expect_bad("last byte missing", p, 1), "last byte missing");
    p = tpath("bad_hlen_big.safetensors");
    write_raw_st(p, hn + 1000000, (const char *)good + 8, hn, good + 8 + hn, n - 8 - hn);
    CHECK(expect_bad("header length > file", p, 1), "header length > file");
    p = tpath("bad_hlen_max.safetensors");
    write_raw_st(p, UINT64_MAX, (const char *)good + 8, hn, good + 8 + hn, n - 8 - hn);
    CHECK(expect_bad("header length 2^64-1", p, 1), "header length 2^64-1");
    p = tpath("bad_hlen_small.safetensors");
    write_raw_st(p, 1, (const char *)good + 8, hn, good + 8 + hn, n - 8 - hn);
    CHECK(expect_bad("header length 1", p, 1), "header length 1");
    p = tpath("bad_hlen_short.safetensors"); // header cut: JSON ends early, rest is "data"
    write_raw_st(p, hn - 16, (const char *)good + 8, hn, good + 8 + hn, n - 8 - hn);
    CHECK(expect_bad("header length too short", p, 1), "header length too short");

    // --- header text damage
    struct {
        const char *label, *hdr;
    } texts[] = {
        {"invalid JSON", "{\"wte.weight\": {\"dtype\": \"F32\", "},
        {"JSON array", "[1, 2, 3]"},
        {"JSON string", "\"hello\""},
        {"trailing garbage", "{} xyz"},
        {"entry not an object", "{\"wte.weight\": 3}"},
        {"metadata not an object", "{\"__metadata__\": [1]}"},
        {"empty object", "{}"},
        {"deep nesting",
         "{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]"
         "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}"},
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "bad_text%zu.safetensors", i);
        p = tpath(name);
        write_raw_st(p, strlen(texts[i].hdr), texts[i].hdr, strlen(texts[i].hdr), good, 64);
        CHECK(expect_bad(texts[i].label, p, 1), "%s", texts[i].label);
    }
    { // a NUL byte inside the header
        char *h = xmalloc(hn);
        memcpy(h, good + 8, hn);
        h[hn - 3] = 0;
        p = tpath("bad_nul.safetensors");
        write_raw_st(p, hn, h, hn, good + 8 + hn, n - 8 - hn);
        CHECK(expect_bad("NUL in header", p, 1), "NUL in header");
        free(h);
    }

    // --- per-tensor damage through the document builder
    struct {
        const char *label, *tensor, *field, *value;
        int cfg_fails;
    } muts[] = {
        {"dtype missing", "h.0.ln_1.bias", "dtype", "-", 1},
        {"dtype null", "h.0.ln_1.bias", "dtype", "null", 1},
        {"dtype not a string", "h.0.ln_1.bias", "dtype", "5", 1},
        {"unknown dtype", "h.0.ln_1.bias", "dtype", "\"Q7\"", 1},
        {"unsupported dtype I32", "h.0.ln_1.weight", "dtype", "\"I32\"", 0},
        {"unsupported dtype F64 (size mismatch)", "h.0.ln_1.weight", "dtype", "\"F64\"", 1},
        {"shape non-integer", "h.1.ln_2.bias", "shape", "[1.5]", 1},
        {"shape negative", "h.1.ln_2.bias", "shape", "[-8]", 1},
        {"shape string", "h.1.ln_2.bias", "shape", "[\"8\"]", 1},
        {"shape not an array", "h.1.ln_2.bias", "shape", "8", 1},
        {"shape overflow", "h.1.ln_2.bias", "shape", "[4294967296,4294967296,4294967296]", 1},
        {"shape 1e300", "h.1.ln_2.bias", "shape", "[1e300]", 1},
        {"shape too many dims", "h.1.ln_2.bias", "shape", "[1,1,1,1,1,1,1,1,1,8]", 1},
        {"shape wrong numel", "h.1.ln_2.bias", "shape", "[9]", 1},
        {"wrong shape, same numel", "h.0.attn.c_attn.weight", "shape", "[24,8]", 0},
        {"wrong shape 2-D bias", "ln_f.bias", "shape", "[1,8]", 0},
        {"wrong vocab", "wte.weight", "shape", "[8,11]", 0},
        {"offsets backwards", "ln_f.weight", "offs", "[32,0]", 1},
        {"offsets past the end", "ln_f.bias", "offs", "[100000,100032]", 1},
        {"offsets huge", "ln_f.bias", "offs", "[18446744073709551584,18446744073709551615]", 1},
        {"offsets three numbers", "ln_f.bias", "offs", "[0,16,32]", 1},
        {"offsets one number", "ln_f.bias", "offs", "[0]", 1},
        {"offsets not numbers", "ln_f.bias", "offs", "[\"0\",\"32\"]", 1},
        {"offsets missing", "ln_f.bias", "offs", "-", 1},
        {"offsets null", "ln_f.bias", "offs", "null", 1},
        {"shape missing", "ln_f.bias", "shape", "-", 1},
        {"offsets overlap", "ln_f.bias", "offs", "OVERLAP", 1},
        {"offsets length mismatch", "ln_f.bias", "offs", "SHORT", 1},
    };
    for (size_t i = 0; i < sizeof muts / sizeof muts[0]; i++) {
        good_doc(&d, &src);
        Ent *e = ent_find(&d, muts[i].tensor);
        char *fld = !strcmp(muts[i].field, "dtype")   ? e->dtype
                    : !strcmp(muts[i].field, "shape") ? e->shape
                                                      : e->offs;
        if (!strcmp(muts[i].value, "OVERLAP")) {
            // ln_f.bias claims the bytes of ln_f.weight (same size): compute them
            size_t off = 0;
            for (Ent *x = d.e; x != ent_find(&d, "ln_f.weight"); x++)
                off += x->nbytes;
            snprintf(fld, 64, "[%zu,%zu]", off, off + 32);
        } else if (!strcmp(muts[i].value, "SHORT")) {
            size_t off = 0;
            for (Ent *x = d.e; x != e; x++)
                off += x->nbytes;
            snprintf(fld, 64, "[%zu,%zu]", off, off + 28);
        } else {
            snprintf(fld, 64, "%s", muts[i].value);
        }
        char name[64];
        snprintf(name, sizeof name, "bad_mut%zu.safetensors", i);
        p = tpath(name);
        doc_write(&d, p);
        doc_free(&d);
        CHECK(expect_bad(muts[i].label, p, muts[i].cfg_fails), "%s", muts[i].label);
    }

    // --- whole tensors missing / extra / duplicated
    good_doc(&d, &src);
    Ent *e = ent_find(&d, "h.1.mlp.c_fc.bias");
    free(e->data);
    memmove(e, e + 1, (size_t)(d.e + d.n - (e + 1)) * sizeof *e);
    d.n--;
    p = tpath("bad_missing.safetensors");
    doc_write(&d, p);
    doc_free(&d);
    CHECK(expect_bad("missing tensor", p, 0), "missing tensor");
    CHECK(strstr(loom_errmsg(), "h.1.mlp.c_fc.bias") != NULL, "names the tensor: %s",
          loom_errmsg());

    good_doc(&d, &src);
    float z[8] = {0};
    ent_add(&d, "h.2.ln_1.weight", "F32", "[8]", z, 8);
    p = tpath("bad_extra_layer.safetensors");
    doc_write(&d, p);
    doc_free(&d);
    CHECK(expect_bad("layer beyond the model", p, 0), "extra layer");

    good_doc(&d, &src);
    ent_add(&d, "transformer.ln_f.bias", "F32", "[8]", z, 8);
    p = tpath("bad_duplicate.safetensors");
    doc_write(&d, p);
    doc_free(&d);
    CHECK(expect_bad("duplicate after prefix", p, 1), "duplicate");

    good_doc(&d, &src);
    snprintf(ent_find(&d, "wte.weight")->name, 64, "wte.weight_x");
    p = tpath("bad_no_wte.safetensors");
    doc_write(&d, p);
    doc_free(&d);
    CHECK(expect_bad("no wte", p, 1), "no wte");

    // --- exhaustive truncation: every header length, every 13th data length
    int bad_trunc = 0;
    p = tpath("bad_trunc.safetensors");
    for (size_t len = 0; len < n; len += len < 8 + hn + 8 ? 1 : 13) {
        write_bytes(p, good, len);
        GPT m;
        make_model(&m, &cfg0, 12);
        GPTConfig c;
        int r1 = st_load_gpt(&m, p), ok1 = r1 == -1 && has_msg(p);
        int r2 = st_read_config(p, 2, &c), ok2 = r2 == -1 ? has_msg(p) : 1;
        if (!ok1 || !ok2) {
            if (bad_trunc < 3)
                fprintf(stderr, "  truncated to %zu: load %d, config %d: %s\n", len, r1, r2,
                        loom_errmsg());
            bad_trunc++;
        }
        gpt_free(&m);
    }
    CHECK(bad_trunc == 0, "%d truncations not rejected", bad_trunc);

    // --- random byte corruption of the header: any result but a crash is acceptable, and a
    // failure must name the file
    uint8_t *fz = xmalloc(n);
    uint32_t s = 12345;
    int unnamed = 0;
    p = tpath("fuzz.safetensors");
    for (int it = 0; it < 400; it++) {
        memcpy(fz, good, n);
        int flips = 1 + it % 3;
        for (int k = 0; k < flips; k++) {
            s = s * 1103515245u + 12345u;
            size_t at = (s >> 8) % (8 + hn);
            s = s * 1103515245u + 12345u;
            fz[at] = (uint8_t)(s >> 16);
        }
        write_bytes(p, fz, n);
        GPT m;
        make_model(&m, &cfg0, 13);
        GPTConfig c;
        if (st_load_gpt(&m, p) && !has_msg(p)) unnamed++;
        if (st_read_config(p, 0, &c) && !has_msg(p)) unnamed++;
        gpt_free(&m);
    }
    CHECK(unnamed == 0, "%d fuzz failures without the file name", unnamed);
    free(fz);

    // --- nonexistent file
    p = tpath("does_not_exist.safetensors");
    CHECK(expect_bad("nonexistent", p, 1), "nonexistent");
    free(good);
    gpt_free(&src);
}

TEST(st_config_errors) {
    GPT src;
    make_model(&src, &cfg0, 14);
    StDoc d;
    GPTConfig c;
    struct {
        const char *label, *meta;
        int heads;
    } cases[] = {
        {"n_head not a number", "{\"n_head\":\"abc\"}", 0},
        {"n_head zero", "{\"n_head\":\"0\"}", 0},
        {"n_head as JSON number", "{\"n_head\":2}", 0},
        {"n_head not dividing C", "{\"n_head\":\"3\"}", 0},
        {"n_layer contradicts", "{\"n_head\":\"2\",\"n_layer\":\"3\"}", 0},
        {"n_embd contradicts", "{\"n_head\":\"2\",\"n_embd\":\"16\"}", 0},
        {"vocab_size contradicts", "{\"n_head\":\"2\",\"vocab_size\":\"12\"}", 0},
        {"n_positions contradicts", "{\"n_head\":\"2\",\"n_positions\":\"5\"}", 0},
        {"--heads contradicts", "{\"n_head\":\"2\"}", 4},
        {"no n_head, no --heads", "{\"format\":\"pt\"}", 0},
        {"no metadata, no --heads", "", 0},
        {"--heads not dividing C", "", 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        doc_from_model(&d, &src, "", NULL);
        snprintf(d.meta, sizeof d.meta, "%s", cases[i].meta);
        char name[64];
        snprintf(name, sizeof name, "badcfg%zu.safetensors", i);
        const char *p = tpath(name);
        doc_write(&d, p);
        doc_free(&d);
        int rc = st_read_config(p, cases[i].heads, &c);
        CHECK(rc == -1 && has_msg(p), "%s: rc %d: %s", cases[i].label, rc, loom_errmsg());
        if (getenv("LOOM_TEST_VERBOSE"))
            fprintf(stderr, "  [%s] %s\n", cases[i].label, loom_errmsg());
    }
    // a vocabulary loom cannot hold (> GPT_MAX_VOCAB tokens) is refused, naming the file
    memset(&d, 0, sizeof d);
    size_t bigV = GPT_MAX_VOCAB + 1;
    float *z = xcalloc(bigV * 8, sizeof(float));
    char shape[32];
    snprintf(shape, sizeof shape, "[%zu,8]", bigV);
    ent_add(&d, "wte.weight", "F32", shape, z, bigV * 8);
    ent_add(&d, "wpe.weight", "F32", "[4,8]", z, 32);
    ent_add(&d, "h.0.ln_1.weight", "F32", "[8]", z, 8);
    snprintf(d.meta, sizeof d.meta, "{\"n_head\":\"2\"}");
    const char *p = tpath("badcfg_bigvocab.safetensors");
    doc_write(&d, p);
    doc_free(&d);
    free(z);
    CHECK(st_read_config(p, 0, &c) == -1 && has_msg(p) && strstr(loom_errmsg(), "vocab"),
          "vocab > GPT_MAX_VOCAB: %s", loom_errmsg());
    gpt_free(&src);
}

// ---------------------------------------------------------------- llm.c checkpoints

static const char *llmc_names[16] = {
    "wte.weight",         "wpe.weight",       "ln_1.weight",        "ln_1.bias",
    "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
    "ln_2.weight",        "ln_2.bias",        "mlp.c_fc.weight",    "mlp.c_fc.bias",
    "mlp.c_proj.weight",  "mlp.c_proj.bias",  "ln_f.weight",        "ln_f.bias"};

// The expected llm.c file for model m (fp32, Vp = round_up(V, 128)), built here independently.
static uint8_t *llmc_reference(const GPT *m, size_t *len) {
    const GPTConfig *c = &m->cfg;
    int Vp = (c->V + 127) / 128 * 128;
    float *h = params_of(m);
    size_t cap = 1024 + 4 * (m->nparams + (size_t)(Vp - c->V) * c->C);
    uint8_t *b = xcalloc(cap, 1);
    int32_t hdr[8] = {20240326, 3, c->maxT, c->V, c->L, c->H, c->C, Vp};
    memcpy(b, hdr, sizeof hdr);
    size_t off = 1024;
    for (int g = 0; g < 16; g++) {
        int per_layer = g >= 2 && g <= 13;
        for (int l = 0; l < (per_layer ? c->L : 1); l++) {
            char nm[64];
            if (per_layer)
                snprintf(nm, sizeof nm, "h.%d.%s", l, llmc_names[g]);
            else
                snprintf(nm, sizeof nm, "%s", llmc_names[g]);
            const TensorSpec *t = gpt_find_tensor(m, nm);
            memcpy(b + off, h + t->off, 4 * t->n);
            off += 4 * t->n;
        }
        if (g == 0) off += 4 * (size_t)(Vp - c->V) * c->C; // zero padding rows
    }
    free(h);
    *len = off;
    return b;
}

TEST(llmc_round_trip) {
    GPT a, b;
    make_model(&a, &cfg0, 20);
    const char *p = tpath("rt.bin");
    CHECK(llmc_save_gpt(&a, p) == 0, "%s", loom_errmsg());
    size_t n, rn;
    uint8_t *f = (uint8_t *)read_file(p, &n);
    uint8_t *ref = llmc_reference(&a, &rn);
    CHECK(f && n == rn, "size %zu, want %zu", n, rn);
    CHECK(f && n == rn && !memcmp(f, ref, n), "file differs from the reference llm.c layout");
    GPTConfig c;
    CHECK(llmc_read_config(p, &c) == 0, "%s", loom_errmsg());
    CHECK(!memcmp(&c, &cfg0, sizeof c), "config L%d H%d C%d V%d T%d", c.L, c.H, c.C, c.V, c.maxT);
    make_model(&b, &cfg0, 21);
    CHECK(llmc_load_gpt(&b, p) == 0, "%s", loom_errmsg());
    CHECK(same_params(&a, &b), "params differ after save/load");
    gpt_free(&b);
    make_model(&b, &cfg0, 22);
    CHECK(init_read_config(p, 0, &c) == 0 && c.H == 2, "%s", loom_errmsg());
    CHECK(init_read_config(p, 2, &c) == 0, "%s", loom_errmsg());
    CHECK(init_read_config(p, 4, &c) == -1 && has_msg(p), "conflicting --heads must fail");
    CHECK(gpt_load_init_file(&b, p) == 0 && same_params(&a, &b), "%s", loom_errmsg());
    gpt_free(&b);

    // gpt_save_weights_file picks the format by extension
    const char *q = tpath("ext.bin"), *r = tpath("ext.safetensors");
    CHECK(gpt_save_weights_file(&a, q) == 0 && gpt_save_weights_file(&a, r) == 0, "%s",
          loom_errmsg());
    WeightsFormat wf;
    CHECK(weights_detect(q, &wf) == 0 && wf == WEIGHTS_LLMC, "detect .bin");
    CHECK(weights_detect(r, &wf) == 0 && wf == WEIGHTS_SAFETENSORS, "detect .safetensors");

    // Vp = 0 in the header means "no padding": rows [V, Vp) removed
    {
        int32_t *hdr = (int32_t *)ref;
        int Vp = hdr[7];
        size_t pad = 4 * (size_t)(Vp - cfg0.V) * cfg0.C,
               wte_end = 1024 + 4 * (size_t)cfg0.V * cfg0.C;
        uint8_t *nb = xmalloc(rn - pad);
        memcpy(nb, ref, wte_end);
        memcpy(nb + wte_end, ref + wte_end + pad, rn - wte_end - pad);
        ((int32_t *)nb)[7] = 0;
        const char *pv = tpath("vp0.bin");
        write_bytes(pv, nb, rn - pad);
        make_model(&b, &cfg0, 23);
        CHECK(llmc_load_gpt(&b, pv) == 0, "%s", loom_errmsg());
        CHECK(same_params(&a, &b), "Vp=0 params differ");
        gpt_free(&b);
        free(nb);
    }
    // nonzero junk in the padding rows is ignored
    {
        uint8_t *nb = xmalloc(rn);
        memcpy(nb, ref, rn);
        size_t wte_end = 1024 + 4 * (size_t)cfg0.V * cfg0.C;
        for (size_t i = wte_end; i < wte_end + 4 * 8; i++)
            nb[i] = 0x7f;
        const char *pj = tpath("padjunk.bin");
        write_bytes(pj, nb, rn);
        make_model(&b, &cfg0, 24);
        CHECK(llmc_load_gpt(&b, pj) == 0 && same_params(&a, &b), "%s", loom_errmsg());
        gpt_free(&b);
        free(nb);
    }
    free(f);
    free(ref);
    gpt_free(&a);
}

TEST(llmc_bf16) {
    GPT a, b;
    make_model(&a, &cfg0, 30);
    float *h = params_of(&a);
    for (size_t i = 0; i < a.nparams; i++) { // bf16-exact values
        uint32_t u;
        memcpy(&u, &h[i], 4);
        u &= 0xffff0000u;
        memcpy(&h[i], &u, 4);
    }
    be->upload(a.params, h, a.nparams);
    free(h);
    size_t rn;
    uint8_t *ref = llmc_reference(&a, &rn);
    size_t nf = (rn - 1024) / 4;
    uint8_t *v5 = xmalloc(1024 + 2 * nf);
    memcpy(v5, ref, 1024);
    ((int32_t *)v5)[1] = 5;
    for (size_t i = 0; i < nf; i++) {
        uint32_t u;
        memcpy(&u, ref + 1024 + 4 * i, 4);
        uint16_t hi = (uint16_t)(u >> 16);
        memcpy(v5 + 1024 + 2 * i, &hi, 2);
    }
    const char *p = tpath("v5.bin");
    write_bytes(p, v5, 1024 + 2 * nf);
    GPTConfig c;
    CHECK(llmc_read_config(p, &c) == 0 && !memcmp(&c, &cfg0, sizeof c), "%s", loom_errmsg());
    make_model(&b, &cfg0, 31);
    CHECK(llmc_load_gpt(&b, p) == 0, "%s", loom_errmsg());
    CHECK(same_params(&a, &b), "bf16 params differ");
    gpt_free(&b);
    // a version-5 header with fp32-sized data is a size error
    ((int32_t *)ref)[1] = 5;
    p = tpath("bad_v5size.bin");
    write_bytes(p, ref, rn);
    make_model(&b, &cfg0, 32);
    CHECK(llmc_load_gpt(&b, p) == -1 && has_msg(p), "v5 header, fp32 data");
    gpt_free(&b);
    free(v5);
    free(ref);
    gpt_free(&a);
}

static int expect_bad_llmc(const char *label, const char *path, int cfg_ok) {
    GPT m;
    make_model(&m, &cfg0, 40);
    float *before = params_of(&m);
    int ok = 1;
    int rc = llmc_load_gpt(&m, path);
    if (rc != -1 || !has_msg(path)) {
        fprintf(stderr, "  [%s] llmc_load_gpt: rc %d, %s\n", label, rc, loom_errmsg());
        ok = 0;
    }
    if (getenv("LOOM_TEST_VERBOSE")) fprintf(stderr, "  [%s] %s\n", label, loom_errmsg());
    rc = gpt_load_init_file(&m, path);
    if (rc != -1 || !has_msg(path)) {
        fprintf(stderr, "  [%s] gpt_load_init_file: rc %d, %s\n", label, rc, loom_errmsg());
        ok = 0;
    }
    GPTConfig c;
    rc = llmc_read_config(path, &c);
    if (!cfg_ok && (rc != -1 || !has_msg(path))) {
        fprintf(stderr, "  [%s] llmc_read_config: rc %d, %s\n", label, rc, loom_errmsg());
        ok = 0;
    }
    float *after = params_of(&m);
    if (memcmp(before, after, m.nparams * sizeof(float))) {
        fprintf(stderr, "  [%s] a failed load modified the parameters\n", label);
        ok = 0;
    }
    free(before);
    free(after);
    gpt_free(&m);
    return ok;
}

TEST(llmc_malformed) {
    GPT a;
    make_model(&a, &cfg0, 41);
    size_t rn;
    uint8_t *ref = llmc_reference(&a, &rn);
    uint8_t *b = xmalloc(rn + 8);
    const char *p;
    char name[64];

    struct {
        const char *label;
        int word;
        int32_t value;
        int cfg_ok;
    } hdr_cases[] = {
        {"bad magic", 0, 20240327, 0},
        {"version 4", 1, 4, 0},
        {"version 0", 1, 0, 0},
        {"maxT 0", 2, 0, 0},
        {"V negative", 3, -5, 0},
        {"L 0", 4, 0, 0},
        {"NH 0", 5, 0, 0},
        {"C 0", 6, 0, 0},
        {"Vp < V", 7, 5, 0},
        {"Vp negative", 7, -128, 0},
        {"NH not dividing C", 5, 3, 0},
        {"NH differs from model", 5, 4, 1},
        {"L huge", 4, 0x7fffffff, 0},
        {"C huge", 6, 0x7fffffff, 0},
        {"maxT huge", 2, 0x7fffffff, 0},
        {"Vp huge", 7, 0x7fffffff, 0},
        {"L 1 (size mismatch)", 4, 1, 0},
        {"maxT 5 (size mismatch)", 2, 5, 0},
    };
    for (size_t i = 0; i < sizeof hdr_cases / sizeof hdr_cases[0]; i++) {
        memcpy(b, ref, rn);
        ((int32_t *)b)[hdr_cases[i].word] = hdr_cases[i].value;
        snprintf(name, sizeof name, "bad_hdr%zu.bin", i);
        p = tpath(name);
        write_bytes(p, b, rn);
        CHECK(expect_bad_llmc(hdr_cases[i].label, p, hdr_cases[i].cfg_ok), "%s",
              hdr_cases[i].label);
    }
    // a checkpoint of a different (valid) shape: config reads fine, load into cfg0 refuses
    {
        GPTConfig c2 = cfg0;
        c2.L = 1;
        GPT o;
        make_model(&o, &c2, 42);
        p = tpath("bad_othershape.bin");
        CHECK(llmc_save_gpt(&o, p) == 0, "%s", loom_errmsg());
        CHECK(expect_bad_llmc("different model shape", p, 1), "different model shape");
        gpt_free(&o);
    }
    size_t lens[] = {0, 3, 4, 100, 1023, 1024, 1028, rn / 2, rn - 1, rn + 1, rn + 8};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        memcpy(b, ref, rn);
        memset(b + rn, 0, 8);
        snprintf(name, sizeof name, "bad_len%zu.bin", lens[i]);
        p = tpath(name);
        write_bytes(p, b, lens[i]);
        char label[64];
        snprintf(label, sizeof label, "length %zu of %zu", lens[i], rn);
        CHECK(expect_bad_llmc(label, p, 0), "%s", label);
    }
    // every truncation of the header region, every 7th of the data
    int bad = 0;
    p = tpath("bad_trunc.bin");
    for (size_t len = 0; len < rn; len += len < 1100 ? 1 : 7) {
        write_bytes(p, ref, len);
        GPT m;
        make_model(&m, &cfg0, 43);
        if (llmc_load_gpt(&m, p) != -1 || !has_msg(p)) bad++;
        gpt_free(&m);
    }
    CHECK(bad == 0, "%d truncations not rejected", bad);
    p = tpath("does_not_exist.bin");
    CHECK(expect_bad_llmc("nonexistent", p, 0), "nonexistent");
    free(b);
    free(ref);
    gpt_free(&a);
}

TEST(detect_unknown_format) {
    const char *p = tpath("garbage.dat");
    write_bytes(p, "hello, this is not a model file at all", 38);
    WeightsFormat f;
    GPTConfig c;
    GPT m;
    make_model(&m, &cfg0, 50);
    CHECK(weights_detect(p, &f) == -1 && has_msg(p), "detect garbage");
    CHECK(init_read_config(p, 2, &c) == -1 && has_msg(p), "config garbage");
    CHECK(gpt_load_init_file(&m, p) == -1 && has_msg(p), "load garbage");
    p = tpath("tiny.dat");
    write_bytes(p, "ab", 2);
    CHECK(gpt_load_init_file(&m, p) == -1 && has_msg(p), "load 2 bytes");
    CHECK(gpt_load_init_file(&m, dir) == -1 && has_msg(dir), "load a directory");
    gpt_free(&m);
}

// The checksum the checkpoint manifests record: the standard CRC-32 check value, and a CRC
// continued over two pieces equals the CRC of the whole (checkpoint files are hashed that way).
TEST(crc32_values) {
    const char *s = "123456789";
    CHECK(crc32_update(0, s, 9) == 0xCBF43926u, "crc32(123456789) = %08x", crc32_update(0, s, 9));
    CHECK(crc32_update(0, s, 0) == 0, "empty");
    CHECK(crc32_update(crc32_update(0, s, 4), s + 4, 5) == 0xCBF43926u, "continued");
    CHECK(crc32_update(0, "The quick brown fox jumps over the lazy dog", 43) == 0x414FA339u, "fox");
}

// A model shaped like a real small GPT (C=64, L=3, V=300): layout mistakes that cancel on tiny
// square-ish shapes (e.g. transposes of C×C) still show up as value mismatches here.
TEST(larger_model_round_trips) {
    GPTConfig c = {.L = 3, .H = 4, .C = 64, .V = 300, .maxT = 32};
    GPT a, b;
    make_model(&a, &c, 60);
    const char *p = tpath("big.safetensors"), *q = tpath("big.bin");
    CHECK(st_save_gpt(&a, p) == 0 && llmc_save_gpt(&a, q) == 0, "%s", loom_errmsg());
    GPTConfig r;
    CHECK(init_read_config(p, 0, &r) == 0 && !memcmp(&r, &c, sizeof r), "st config");
    CHECK(init_read_config(q, 0, &r) == 0 && !memcmp(&r, &c, sizeof r), "llmc config");
    make_model(&b, &c, 61);
    CHECK(gpt_load_init_file(&b, p) == 0 && same_params(&a, &b), "st: %s", loom_errmsg());
    gpt_free(&b);
    make_model(&b, &c, 62);
    CHECK(gpt_load_init_file(&b, q) == 0 && same_params(&a, &b), "llmc: %s", loom_errmsg());
    gpt_free(&b);
    // cross-format: safetensors → model → llm.c → model
    make_model(&b, &c, 63);
    CHECK(st_load_gpt(&b, p) == 0 && llmc_save_gpt(&b, q) == 0, "%s", loom_errmsg());
    gpt_free(&b);
    make_model(&b, &c, 64);
    CHECK(llmc_load_gpt(&b, q) == 0 && same_params(&a, &b), "cross-format");
    size_t rn, fn;
    uint8_t *ref = llmc_reference(&a, &rn), *f = (uint8_t *)read_file(q, &fn);
    CHECK(f && rn == fn && !memcmp(ref, f, rn), "llm.c layout (larger model)");
    free(ref);
    free(f);
    StDoc d;
    doc_from_model(&d, &a, "", NULL);
    size_t dn, dh;
    uint8_t *db = doc_bytes(&d, &dn, &dh);
    f = (uint8_t *)read_file(p, &fn);
    uint64_t hn = le64(f);
    CHECK(fn - 8 - hn == dn - 8 - dh && !memcmp(f + 8 + hn, db + 8 + dh, dn - 8 - dh),
          "safetensors layout (larger model)");
    free(db);
    free(f);
    doc_free(&d);
    gpt_free(&b);
    gpt_free(&a);
}

static void rm_dir(void) {
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

int main(void) {
    be = backend_cpu();
    snprintf(dir, sizeof dir, "/tmp/loom_test_st_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(st_round_trip);
    RUN(st_save_fails_cleanly);
    RUN(st_prefix_and_extra_buffers);
    RUN(st_half_precision);
    RUN(st_malformed);
    RUN(st_config_errors);
    RUN(llmc_round_trip);
    RUN(llmc_bf16);
    RUN(llmc_malformed);
    RUN(detect_unknown_format);
    RUN(crc32_values);
    RUN(larger_model_round_trips);
    if (!test_failed_count)
        rm_dir();
    else
        fprintf(stderr, "files kept in %s\n", dir);
    return test_summary();
}
