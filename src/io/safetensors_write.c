// safetensors_write.c — writing GPT-2 weights as safetensors (see safetensors.h), tensor by
// tensor from any source of the flat parameters through one bounded buffer.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "safetensors.h"
#include "weights.h"

// The JSON header: __metadata__ (the config as strings, as transformers writes it), then each
// tensor's dtype, shape and byte range; space-padded to a multiple of 8 bytes.
static char *st_header(const GPT *m, int bf16, size_t *len) {
    const GPTConfig *c = &m->cfg;
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "__metadata__");
    const char *keys[5] = {"n_head", "n_layer", "n_embd", "vocab_size", "n_positions"};
    const char *lkeys[5] = {"num_attention_heads", "num_hidden_layers", "hidden_size", "vocab_size",
                            "max_position_embeddings"}; // LlamaConfig's names
    int llama = gpt_is_llama(c), vals[5] = {c->H, c->L, c->C, c->V, c->maxT};
    cJSON_AddStringToObject(meta, "format", "pt");
    char v[32];
    for (int k = 0; k < 5; k++) {
        snprintf(v, sizeof v, "%d", vals[k]);
        cJSON_AddStringToObject(meta, llama ? lkeys[k] : keys[k], v);
    }
    if (llama) {
        cJSON_AddStringToObject(meta, "model_type", "llama");
        snprintf(v, sizeof v, "%d", c->KV);
        cJSON_AddStringToObject(meta, "num_key_value_heads", v);
        snprintf(v, sizeof v, "%d", c->F);
        cJSON_AddStringToObject(meta, "intermediate_size", v);
        snprintf(v, sizeof v, "%.9g", c->rope_theta);
        cJSON_AddStringToObject(meta, "rope_theta", v);
        snprintf(v, sizeof v, "%.9g", c->norm_eps);
        cJSON_AddStringToObject(meta, "rms_norm_eps", v);
        cJSON_AddStringToObject(meta, "tie_word_embeddings", c->tie ? "true" : "false");
        if (c->rope_scaling == ROPE_LLAMA3) { // config.json's object, as a string
            char rs[256];
            snprintf(rs, sizeof rs,
                     "{\"rope_type\": \"llama3\", \"factor\": %.9g, \"low_freq_factor\": %.9g, "
                     "\"high_freq_factor\": %.9g, \"original_max_position_embeddings\": %d}",
                     c->rope_factor, c->rope_low, c->rope_high, c->rope_orig);
            cJSON_AddStringToObject(meta, "rope_scaling", rs);
        }
    }
    uint64_t off = 0, es = bf16 ? 2 : 4; // offsets and shapes are exact as doubles (below 2^53)
    for (int i = 0; i < m->ntensors; i++) {
        const TensorSpec *t = &m->tensors[i];
        uint64_t shape[2];
        int nd = st_hf_shape(t, shape);
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        cJSON_AddStringToObject(e, "dtype", bf16 ? "BF16" : "F32");
        cJSON *sh = cJSON_AddArrayToObject(e, "shape"),
              *r = cJSON_AddArrayToObject(e, "data_offsets");
        for (int d = 0; d < nd; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shape[d]));
        cJSON_AddItemToArray(r, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(r, cJSON_CreateNumber((double)(off + es * t->n)));
        off += es * t->n;
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) die(EXIT_IO, "out of memory writing a safetensors header");
    size_t n = strlen(text), padded = (n + 7) / 8 * 8;
    char *h = xmalloc(padded);
    memcpy(h, text, n);
    memset(h + n, ' ', padded - n);
    cJSON_free(text);
    *len = padded;
    return h;
}

size_t st_save_floats(const GPT *m) {
    size_t big = 1;
    for (int i = 0; i < m->ntensors; i++)
        if (m->tensors[i].ndim == 2 && m->tensors[i].hf_conv1d && m->tensors[i].n > big)
            big = m->tensors[i].n;
    return big;
}

// float32 → bfloat16, rounded to nearest even; a NaN stays a (quiet) NaN.
static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(u >> 16 | 0x40);
    u += 0x7fffu + (u >> 16 & 1);
    return (uint16_t)(u >> 16);
}

// n floats as little-endian BF16 (through a small stack buffer).
static void aout_write_bf16(AtomicOut *o, const float *x, size_t n) {
    uint8_t b[4096];
    for (size_t a = 0; a < n && !o->failed; a += sizeof b / 2) {
        size_t k = n - a < sizeof b / 2 ? n - a : sizeof b / 2;
        for (size_t j = 0; j < k; j++) {
            uint16_t h = f32_to_bf16(x[a + j]);
            b[2 * j] = (uint8_t)h, b[2 * j + 1] = (uint8_t)(h >> 8);
        }
        aout_write(o, b, 2 * k);
    }
}

// Tensor t, read through src into buf (cap floats) and written in the file's layout.
static int write_tensor(AtomicOut *o, const TensorSpec *t, int bf16, GptSource src, void *ctx,
                        float *buf, size_t cap) {
    if (t->ndim == 2 && t->hf_conv1d) { // HF row k: column k of loom's (out, in)
        if (bf16) return loom_fail("%s: BF16 export of GPT-2's transposed tensors", o->path);
        if (src(ctx, t->off, t->n, buf)) return -1;
        size_t out = (size_t)t->shape[0], in = (size_t)t->shape[1];
        for (size_t k = 0; k < in && !o->failed; k++)
            aout_write_f32_strided(o, buf + k, out, in);
        return 0;
    }
    for (size_t a = 0; a < t->n && !o->failed; a += cap) {
        size_t n = t->n - a < cap ? t->n - a : cap;
        if (src(ctx, t->off + a, n, buf)) return -1;
        if (bf16)
            aout_write_bf16(o, buf, n);
        else
            aout_write_f32(o, buf, n);
    }
    return 0;
}

int st_save_gpt_as(const GPT *m, const char *path, int bf16, GptSource src, void *ctx, float *buf,
                   size_t cap) {
    if (cap < st_save_floats(m))
        return loom_fail("%s: a buffer of %zu floats cannot hold the largest transposed tensor "
                         "(%zu floats)",
                         path, cap, st_save_floats(m));
    size_t hlen;
    char *hdr = st_header(m, bf16, &hlen);
    uint8_t lenb[8];
    for (int k = 0; k < 8; k++)
        lenb[k] = (uint8_t)((uint64_t)hlen >> (8 * k));
    AtomicOut o;
    if (aout_open(&o, path)) {
        free(hdr);
        return -1;
    }
    aout_write(&o, lenb, 8);
    aout_write(&o, hdr, hlen);
    free(hdr);
    for (int i = 0; i < m->ntensors && !o.failed; i++)
        if (write_tensor(&o, &m->tensors[i], bf16, src, ctx, buf, cap)) {
            aout_abort(&o);
            return -1;
        }
    return aout_commit(&o);
}

int st_save_gpt_fn(const GPT *m, const char *path, GptSource src, void *ctx, float *buf,
                   size_t cap) {
    return st_save_gpt_as(m, path, 0, src, ctx, buf, cap);
}

static int download_src(void *ctx, size_t at, size_t n, float *dst) {
    const GPT *m = ctx;
    m->be->download(dst, m->params + at, n);
    return 0;
}

int st_save_gpt(const GPT *m, const char *path) {
    size_t cap = st_save_floats(m);
    if (cap < WEIGHTS_STREAM_FLOATS) cap = WEIGHTS_STREAM_FLOATS;
    float *buf = xmalloc(cap * sizeof(float));
    int rc = st_save_gpt_fn(m, path, download_src, (void *)m, buf, cap);
    free(buf);
    return rc;
}
