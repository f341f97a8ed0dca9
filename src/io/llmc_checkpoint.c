// llmc_checkpoint.c — reading and writing llm.c .bin checkpoints (see llmc_checkpoint.h).
// The parameter groups are listed once (llmc_groups) with their loom tensor names; offsets in
// the file are computed from the header, and every slice is matched to a TensorSpec by name.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "llmc_checkpoint.h"

#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "weights.h"

#define LLMC_MAGIC 20240326
#define LLMC_HEADER_BYTES 1024
#define LLMC_VOCAB_PAD 128

// The checkpoint's parameter groups in file order. per_layer: stacked over L layers, and the
// loom name is "h.<l>.<name>".
static const struct {
    const char *name;
    int per_layer;
} llmc_groups[] = {
    {"wte.weight", 0},         {"wpe.weight", 0},         {"ln_1.weight", 1},
    {"ln_1.bias", 1},          {"attn.c_attn.weight", 1}, {"attn.c_attn.bias", 1},
    {"attn.c_proj.weight", 1}, {"attn.c_proj.bias", 1},   {"ln_2.weight", 1},
    {"ln_2.bias", 1},          {"mlp.c_fc.weight", 1},    {"mlp.c_fc.bias", 1},
    {"mlp.c_proj.weight", 1},  {"mlp.c_proj.bias", 1},    {"ln_f.weight", 0},
    {"ln_f.bias", 0},
};
enum { NGROUPS = sizeof llmc_groups / sizeof llmc_groups[0] };

typedef struct {
    int version, maxT, V, L, NH, C, Vp;
    RawFloat dtype;
} LlmcHeader;

// Elements of group g in one layer (or in total for a non-layer group).
static uint64_t group_elems(int g, const LlmcHeader *h) {
    uint64_t C = (uint64_t)h->C;
    switch (g) {
    case 0: return (uint64_t)h->Vp * C;
    case 1: return (uint64_t)h->maxT * C;
    case 4: return 3 * C * C;
    case 5: return 3 * C;
    case 6: return C * C;
    case 10: return 4 * C * C;
    case 11: return 4 * C;
    case 12: return 4 * C * C;
    default: return C; // LayerNorm weights/biases, c_proj biases, ln_f
    }
}

static int tensor_name(char *buf, size_t cap, int g, int l) {
    if (llmc_groups[g].per_layer) return snprintf(buf, cap, "h.%d.%s", l, llmc_groups[g].name);
    return snprintf(buf, cap, "%s", llmc_groups[g].name);
}

static int read_header(const RFile *f, LlmcHeader *h) {
    const char *path = f->path;
    if (f->size < LLMC_HEADER_BYTES)
        return loom_fail("%s: too short for an llm.c checkpoint (%llu bytes; the header alone is "
                         "%d)",
                         path, (unsigned long long)f->size, LLMC_HEADER_BYTES);
    uint8_t b[LLMC_HEADER_BYTES];
    if (rfile_read(f, 0, b, sizeof b)) return -1;
    int32_t w[8];
    for (int i = 0; i < 8; i++)
        w[i] = (int32_t)le32(b + 4 * i);
    if (w[0] != LLMC_MAGIC)
        return loom_fail("%s: not an llm.c checkpoint (magic %d, expected %d)", path, w[0],
                         LLMC_MAGIC);
    if (w[1] != 3 && w[1] != 5)
        return loom_fail("%s: unsupported llm.c checkpoint version %d (3 = fp32, 5 = bf16)", path,
                         w[1]);
    static const char *fields[] = {"",           "",          "max_seq_len", "vocab_size",
                                   "num_layers", "num_heads", "channels"};
    for (int i = 2; i <= 6; i++)
        if (w[i] < 1)
            return loom_fail("%s: llm.c header field %s = %d must be positive", path, fields[i],
                             w[i]);
    h->version = w[1];
    h->maxT = w[2];
    h->V = w[3];
    h->L = w[4];
    h->NH = w[5];
    h->C = w[6];
    h->Vp = w[7] ? w[7] : w[3];
    if (h->Vp < h->V)
        return loom_fail("%s: llm.c header padded_vocab_size %d is smaller than vocab_size %d",
                         path, w[7], h->V);
    h->dtype = h->version == 3 ? RAW_F32 : RAW_BF16;
    // Expected size, with every step checked for overflow (header fields are < 2^31).
    uint64_t total = 0, lim = UINT64_MAX / 8;
    for (int g = 0; g < NGROUPS; g++) {
        uint64_t C = (uint64_t)h->C, e;
        if (g == 0 || g == 1)
            e = (g == 0 ? (uint64_t)h->Vp : (uint64_t)h->maxT) * C; // < 2^62
        else if (C > (1u << 30))
            e = lim; // 4·C² would overflow: certainly larger than any file
        else
            e = group_elems(g, h);
        if (llmc_groups[g].per_layer) e = e > lim / (uint64_t)h->L ? lim : e * (uint64_t)h->L;
        total = total > lim - e ? lim : total + e;
    }
    uint64_t want =
        total >= lim / 4 ? UINT64_MAX : LLMC_HEADER_BYTES + total * raw_float_size(h->dtype);
    if (f->size != want) {
        if (want == UINT64_MAX)
            return loom_fail("%s: llm.c header describes an impossibly large model (L=%d C=%d "
                             "V=%d maxT=%d)",
                             path, h->L, h->C, h->V, h->maxT);
        return loom_fail("%s: file is %llu bytes but its llm.c header (version %d, maxT=%d V=%d "
                         "Vp=%d L=%d NH=%d C=%d) implies %llu (%s)",
                         path, (unsigned long long)f->size, h->version, h->maxT, h->V, h->Vp, h->L,
                         h->NH, h->C, (unsigned long long)want,
                         f->size < want ? "truncated" : "trailing bytes");
    }
    return 0;
}

static int header_config(const char *path, const LlmcHeader *h, GPTConfig *cfg) {
    GPTConfig c = {.L = h->L, .H = h->NH, .C = h->C, .V = h->V, .maxT = h->maxT};
    if (gpt_config_check(&c)) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", loom_errmsg());
        return loom_fail("%s: unusable model shape (L=%d H=%d C=%d V=%d maxT=%d): %s", path, c.L,
                         c.H, c.C, c.V, c.maxT, msg);
    }
    *cfg = c;
    return 0;
}

int llmc_read_config(const char *path, GPTConfig *cfg) {
    RFile f;
    if (rfile_open(&f, path)) return -1;
    LlmcHeader h;
    int rc = read_header(&f, &h);
    rfile_close(&f);
    if (rc) return -1;
    return header_config(path, &h, cfg);
}

int llmc_locate_gpt(const GPT *m, const char *path, WeightsSrc *src) {
    RFile f;
    if (rfile_open(&f, path)) return -1;
    LlmcHeader h;
    GPTConfig c;
    int rc = read_header(&f, &h) || header_config(path, &h, &c) ? -1 : 0;
    rfile_close(&f);
    if (rc) return -1;
    const GPTConfig *mc = &m->cfg;
    if (c.L != mc->L || c.H != mc->H || c.C != mc->C || c.V != mc->V || c.maxT != mc->maxT)
        return loom_fail("%s: checkpoint shape (L=%d H=%d C=%d V=%d maxT=%d) does not match the "
                         "model (L=%d H=%d C=%d V=%d maxT=%d)",
                         path, c.L, c.H, c.C, c.V, c.maxT, mc->L, mc->H, mc->C, mc->V, mc->maxT);
    size_t es = raw_float_size(h.dtype);
    uint64_t off = LLMC_HEADER_BYTES;
    int found = 0;
    for (int g = 0; g < NGROUPS; g++) {
        uint64_t per = group_elems(g, &h);
        int nl = llmc_groups[g].per_layer ? h.L : 1;
        for (int l = 0; l < nl; l++) {
            char name[64];
            tensor_name(name, sizeof name, g, l);
            const TensorSpec *t = gpt_find_tensor(m, name);
            // wte keeps only the real vocabulary: the first V of Vp rows
            uint64_t want = g == 0 ? (uint64_t)h.V * (uint64_t)h.C : per;
            if (!t || t->n != want)
                return loom_fail("%s: model tensor '%s' %s", path, name,
                                 t ? "has an unexpected size" : "does not exist");
            src[t - m->tensors] =
                (WeightsSrc){.off = off + (uint64_t)l * per * es, .type = h.dtype, .transposed = 0};
            found++;
        }
        off += (uint64_t)nl * per * es;
    }
    if (found != m->ntensors)
        return loom_fail("%s: the checkpoint holds %d of the model's %d tensors", path, found,
                         m->ntensors);
    return 0;
}

int llmc_load_gpt(GPT *m, const char *path) { return weights_load(m, path, llmc_locate_gpt); }

int llmc_save_gpt(const GPT *m, const char *path) {
    const GPTConfig *c = &m->cfg;
    LlmcHeader h = {.version = 3,
                    .maxT = c->maxT,
                    .V = c->V,
                    .L = c->L,
                    .NH = c->H,
                    .C = c->C,
                    .dtype = RAW_F32};
    h.Vp = (c->V + LLMC_VOCAB_PAD - 1) / LLMC_VOCAB_PAD * LLMC_VOCAB_PAD;
    int32_t w[256] = {LLMC_MAGIC, 3, h.maxT, h.V, h.L, h.NH, h.C, h.Vp};
    uint8_t hb[LLMC_HEADER_BYTES];
    for (int i = 0; i < 256; i++)
        for (int k = 0; k < 4; k++)
            hb[4 * i + k] = (uint8_t)((uint32_t)w[i] >> (8 * k));
    // Resolve every slice before creating the file, so a mismatch leaves nothing behind.
    const TensorSpec **ts = xmalloc((size_t)NGROUPS * (size_t)c->L * sizeof *ts);
    for (int g = 0; g < NGROUPS; g++) {
        int nl = llmc_groups[g].per_layer ? c->L : 1;
        for (int l = 0; l < nl; l++) {
            char name[64];
            tensor_name(name, sizeof name, g, l);
            const TensorSpec *t = gpt_find_tensor(m, name);
            uint64_t want = g == 0 ? (uint64_t)c->V * (uint64_t)c->C : group_elems(g, &h);
            if (!t || t->n != want) {
                free(ts);
                return loom_fail("%s: model tensor '%s' %s", path, name,
                                 t ? "has an unexpected size" : "does not exist");
            }
            ts[g * c->L + l] = t;
        }
    }
    float *host = xmalloc(m->nparams * sizeof(float));
    m->be->download(host, m->params, m->nparams);
    AtomicOut o;
    if (aout_open(&o, path)) {
        free(ts);
        free(host);
        return -1;
    }
    aout_write(&o, hb, sizeof hb);
    for (int g = 0; g < NGROUPS && !o.failed; g++) {
        int nl = llmc_groups[g].per_layer ? c->L : 1;
        for (int l = 0; l < nl; l++) {
            const TensorSpec *t = ts[g * c->L + l];
            aout_write_f32(&o, host + t->off, t->n);
        }
        if (g == 0) aout_write_zeros(&o, (size_t)(h.Vp - h.V) * (size_t)h.C * 4);
    }
    free(ts);
    free(host);
    return aout_commit(&o);
}
