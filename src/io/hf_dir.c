// hf_dir.c — Hugging Face Llama directories' config.json, read (hf_config_parse: the shape, and
// refusals of what loom does not implement) and written, and whole directories written
// (hf_save_dir: config.json + model.safetensors). Reading the weights: hf_dir_load.c.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "hf_dir.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common.h"
#include "safetensors.h"
#include "weights.h"

int hf_is_dir(const char *path) {
    struct stat st;
    return !stat(path, &st) && S_ISDIR(st.st_mode);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int hf_export_is_dir(const GPTConfig *cfg, const char *out) {
    return gpt_is_llama(cfg) && !ends_with(out, ".safetensors") && !ends_with(out, ".bin");
}

// ---------------------------------------------------------------- reading config.json

// An integer field in [1, INT_MAX]: 0 when absent (or null) and not required.
static int cfg_int(const cJSON *root, const char *name, const char *key, int required, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *out = 0;
    if (!v || cJSON_IsNull(v))
        return required ? loom_fail("%s: required field \"%s\" is missing", name, key) : 0;
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (!(d >= 1 && d <= INT_MAX) || d != floor(d))
        return loom_fail("%s: \"%s\" must be a positive integer", name, key);
    *out = (int)d;
    return 0;
}

// A positive finite number field; dflt when absent or null.
static int cfg_num(const cJSON *root, const char *name, const char *key, double dflt, float *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        *out = (float)dflt;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite((float)v->valuedouble))
        return loom_fail("%s: \"%s\" must be a positive number", name, key);
    *out = (float)v->valuedouble;
    return 0;
}

// A boolean field: dflt when absent or null.
static int cfg_bool(const cJSON *root, const char *name, const char *key, int dflt, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *out = dflt;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return loom_fail("%s: \"%s\" must be true or false", name, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

// What loom's LLaMA block does not implement, refused by field.
static int cfg_unsupported(const cJSON *root, const char *name, const GPTConfig *c) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (!cJSON_IsString(v))
        return loom_fail("%s: \"model_type\" is missing or not a string (loom reads \"llama\")",
                         name);
    if (strcmp(v->valuestring, "llama"))
        return loom_fail("%s: \"model_type\" \"%.64s\" is not supported (loom reads \"llama\")",
                         name, v->valuestring);
    v = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (v && !cJSON_IsNull(v) && (!cJSON_IsString(v) || strcmp(v->valuestring, "silu")))
        return loom_fail("%s: \"hidden_act\" other than \"silu\" is not supported", name);
    const char *bias[2] = {"attention_bias", "mlp_bias"};
    for (int k = 0; k < 2; k++) {
        int on;
        if (cfg_bool(root, name, bias[k], 0, &on)) return -1;
        if (on) return loom_fail("%s: \"%s\" true is not supported (no biases)", name, bias[k]);
    }
    int hd;
    if (cfg_int(root, name, "head_dim", 0, &hd)) return -1;
    if (hd && c->H > 0 && (long long)hd * c->H != c->C)
        return loom_fail("%s: \"head_dim\" %d is not hidden_size / num_attention_heads = %d / %d: "
                         "not supported",
                         name, hd, c->C, c->H);
    return 0;
}

// "rope_scaling": null, absent or rope_type "default" (plain RoPE), or Llama 3.1's "llama3"
// with its four fields (required, as transformers requires them); any other type is refused.
static int cfg_rope_scaling(const cJSON *root, const char *name, GPTConfig *c) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (!r || cJSON_IsNull(r)) return 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "rope_type");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(r, "type");
    if (!cJSON_IsObject(r) || !cJSON_IsString(t))
        return loom_fail("%s: \"rope_scaling\" must be null or an object with a \"rope_type\"",
                         name);
    if (!strcmp(t->valuestring, "default")) return 0;
    if (strcmp(t->valuestring, "llama3"))
        return loom_fail("%s: \"rope_scaling\" type \"%.64s\" is not supported (loom implements "
                         "\"llama3\")",
                         name, t->valuestring);
    const char *k[3] = {"factor", "low_freq_factor", "high_freq_factor"};
    float *v[3] = {&c->rope_factor, &c->rope_low, &c->rope_high};
    for (int i = 0; i < 3; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(r, k[i]);
        if (!cJSON_IsNumber(x) || !(x->valuedouble > 0) || !isfinite((float)x->valuedouble))
            return loom_fail("%s: \"rope_scaling\".\"%s\" is missing or not a positive number",
                             name, k[i]);
        *v[i] = (float)x->valuedouble;
    }
    if (!(c->rope_factor >= 1.f) || !(c->rope_high > c->rope_low))
        return loom_fail("%s: \"rope_scaling\" needs \"factor\" >= 1 and \"high_freq_factor\" > "
                         "\"low_freq_factor\" (got %g, %g, %g)",
                         name, c->rope_factor, c->rope_high, c->rope_low);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(r, "original_max_position_embeddings");
    if (!cJSON_IsNumber(o) || !(o->valuedouble >= 1 && o->valuedouble <= INT_MAX) ||
        o->valuedouble != floor(o->valuedouble))
        return loom_fail("%s: \"rope_scaling\".\"original_max_position_embeddings\" is missing "
                         "or not a positive integer",
                         name);
    c->rope_orig = (int)o->valuedouble, c->rope_scaling = ROPE_LLAMA3;
    return 0;
}

static int cfg_fields(const cJSON *root, const char *name, GPTConfig *c) {
    if (cfg_int(root, name, "hidden_size", 1, &c->C) ||
        cfg_int(root, name, "num_hidden_layers", 1, &c->L) ||
        cfg_int(root, name, "num_attention_heads", 1, &c->H) ||
        cfg_int(root, name, "num_key_value_heads", 0, &c->KV) ||
        cfg_int(root, name, "intermediate_size", 1, &c->F) ||
        cfg_int(root, name, "vocab_size", 1, &c->V) ||
        cfg_int(root, name, "max_position_embeddings", 1, &c->maxT) ||
        cfg_num(root, name, "rms_norm_eps", 1e-6, &c->norm_eps) ||
        cfg_num(root, name, "rope_theta", 10000, &c->rope_theta) ||
        cfg_bool(root, name, "tie_word_embeddings", 0, &c->tie))
        return -1;
    if (!c->KV) c->KV = c->H;
    return cfg_unsupported(root, name, c) || cfg_rope_scaling(root, name, c) ? -1 : 0;
}

int hf_config_parse(const char *text, size_t len, const char *name, GPTConfig *cfg) {
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) return loom_fail("%s: not valid JSON", name);
    GPTConfig c = {.arch = ARCH_LLAMA};
    int rc = cJSON_IsObject(root) ? cfg_fields(root, name, &c)
                                  : loom_fail("%s: not a JSON object", name);
    cJSON_Delete(root);
    if (rc) return -1;
    if (gpt_config_check(&c)) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", loom_errmsg());
        return loom_fail("%s: unusable model shape (L=%d H=%d KV=%d C=%d F=%d V=%d maxT=%d): %s",
                         name, c.L, c.H, c.KV, c.C, c.F, c.V, c.maxT, msg);
    }
    *cfg = c;
    return 0;
}

int hf_read_config(const char *dir, GPTConfig *cfg) {
    char path[4200];
    if (path_fmt(path, sizeof path, "%s/%s", dir, HF_CONFIG)) return -1;
    size_t len;
    char *text = read_file(path, &len);
    if (!text)
        return loom_fail("%s: cannot read %s (a Hugging Face Llama directory needs one)", path,
                         HF_CONFIG);
    int rc = hf_config_parse(text, len, path, cfg);
    free(text);
    return rc;
}

// ---------------------------------------------------------------- writing

// x as the shortest decimal that reads back as the same float.
static cJSON *float_item(float x) {
    char s[32];
    if (x == floorf(x) && fabsf(x) < 1e9f) { // an integral value as transformers writes it
        snprintf(s, sizeof s, "%.1f", (double)x);
        return cJSON_CreateRaw(s);
    }
    for (int p = 1; p <= 9; p++) {
        snprintf(s, sizeof s, "%.*g", p, (double)x);
        if ((float)strtod(s, NULL) == x) break;
    }
    return cJSON_CreateRaw(s);
}

static char *config_text(const GPTConfig *c, int bf16) {
    cJSON *j = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(j, "model_type", "llama");
    const char *keys[8] = {"hidden_size",         "intermediate_size",      "num_hidden_layers",
                           "num_attention_heads", "num_key_value_heads",    "head_dim",
                           "vocab_size",          "max_position_embeddings"};
    int vals[8] = {c->C, c->F, c->L, c->H, c->KV, c->C / c->H, c->V, c->maxT};
    for (int k = 0; k < 8; k++)
        cJSON_AddNumberToObject(j, keys[k], vals[k]);
    cJSON_AddItemToObject(j, "rms_norm_eps", float_item(c->norm_eps));
    cJSON_AddItemToObject(j, "rope_theta", float_item(c->rope_theta));
    if (c->rope_scaling == ROPE_LLAMA3) {
        cJSON *r = cJSON_AddObjectToObject(j, "rope_scaling");
        cJSON_AddStringToObject(r, "rope_type", "llama3");
        cJSON_AddItemToObject(r, "factor", float_item(c->rope_factor));
        cJSON_AddItemToObject(r, "low_freq_factor", float_item(c->rope_low));
        cJSON_AddItemToObject(r, "high_freq_factor", float_item(c->rope_high));
        cJSON_AddNumberToObject(r, "original_max_position_embeddings", c->rope_orig);
    } else {
        cJSON_AddNullToObject(j, "rope_scaling");
    }
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tie);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddBoolToObject(j, "attention_bias", 0);
    cJSON_AddBoolToObject(j, "mlp_bias", 0);
    cJSON_AddStringToObject(j, "torch_dtype", bf16 ? "bfloat16" : "float32");
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) die(EXIT_IO, "out of memory writing config.json");
    return text;
}

int hf_save_dir(const GPT *m, const char *dir, int bf16, GptSource src, void *ctx, float *buf,
                size_t cap) {
    if (!gpt_is_llama(&m->cfg))
        return loom_fail("%s: a Hugging Face directory is written for LLaMA models only", dir);
    if (mkdir(dir, 0755) && errno != EEXIST)
        return loom_fail("%s: cannot create: %s", dir, strerror(errno));
    if (!hf_is_dir(dir)) return loom_fail("%s: exists and is not a directory", dir);
    char path[4200];
    if (path_fmt(path, sizeof path, "%s/%s", dir, HF_WEIGHTS) ||
        st_save_gpt_as(m, path, bf16, src, ctx, buf, cap))
        return -1;
    // an index left by an earlier, sharded model would be read instead of the new file
    if (path_fmt(path, sizeof path, "%s/%s", dir, HF_INDEX) || (unlink(path) && errno != ENOENT))
        return loom_fail("%s: cannot remove the stale index: %s", path, strerror(errno));
    char *text = config_text(&m->cfg, bf16);
    size_t n = strlen(text);
    text[n] = '\n'; // replaces the terminator: written by length
    int rc = path_fmt(path, sizeof path, "%s/%s", dir, HF_CONFIG) ||
             write_file_atomic(path, text, n + 1);
    cJSON_free(text);
    return rc ? -1 : 0;
}

static int download_src(void *ctx, size_t at, size_t n, float *dst) {
    const GPT *m = ctx;
    m->be->download(dst, m->params + at, n);
    return 0;
}

int hf_save_dir_model(const GPT *m, const char *dir, int bf16) {
    float *buf = xmalloc(WEIGHTS_STREAM_FLOATS * sizeof(float));
    int rc = hf_save_dir(m, dir, bf16, download_src, (void *)m, buf, WEIGHTS_STREAM_FLOATS);
    free(buf);
    return rc;
}
