// args.c — `loom train`'s flag defaults and their JSON record in checkpoints (see trainer.h).
#include <cjson/cJSON.h>
#include <string.h>

#include "../common.h"
#include "trainer.h"

#include "../model/gpt.h"

void train_args_defaults(TrainArgs *a) {
    memset(a, 0, sizeof *a);
    a->layers = 4, a->heads = 4, a->dim = 128, a->vocab = 256, a->block_size = 256;
    a->arch = "gpt2", a->kv_heads = 0, a->ffn_dim = 0, a->tie_embeddings = 0;
    a->rope_theta = 0.f, a->norm_eps = 0.f; // 0: LLaMA's defaults (10000, 1e-5)
    a->rope_scaling = "none", a->rope_factor = a->rope_low = a->rope_high = 0.f, a->rope_orig = 0;
    a->batch = 8, a->seq = 128, a->grad_accum = 1, a->steps = 100, a->shuffle = 0;
    a->lr = 3e-4f, a->min_lr = 0.f, a->beta1 = 0.9f, a->beta2 = 0.95f, a->eps = 1e-8f;
    a->weight_decay = 0.1f, a->grad_clip = 1.0f, a->lr_schedule = "cosine", a->warmup = 0;
    a->seed = 1337, a->threads = 0, a->recompute = 0, a->device = "cpu";
    a->on_nonfinite = "stop", a->save_on_error = "continue", a->export_dtype = "fp32";
    a->loss_scale = "auto", a->loss_scale_init = 65536.f, a->loss_scale_interval = 2000;
    a->save_every = 0, a->keep = 2, a->val_every = 0, a->val_windows = 8, a->log_every = 10;
    a->progress = 1, a->stop_grace = 25.f;
    a->peak_gflops = 0; // measure
    a->dp = 1, a->zero = 0, a->bucket_mb = 25.f, a->comm_timeout = 300.f;
    a->device_comm = "auto";
    a->comm_thread = 1;
    a->co2 = 0, a->tau = 12, a->outer_lr = 1.0f, a->outer_momentum = 0.5f, a->gap_penalty = 1.0f;
    a->outer_clip = 1.0f, a->gap_mode = "adaptive";
    a->pp = 1, a->tp = 1, a->cp = 1, a->sp = 0, a->tp_mode = "1d", a->schedule = "1f1b",
    a->stage_layers = NULL;
    a->plan = NULL, a->plan_mem_gb = 0, a->plan_bandwidth_gbps = 1.0f;
    a->offload_prefetch = 1;
    a->peer_timeout = 10.f, a->min_peers = 1, a->outer_compress = "none";
    a->outer_compress_sums = "auto";
    a->peer_exchange = "all";
    a->topk_frac = 0.02f, a->topk_values = "fp32";
}

int train_model_config(const TrainArgs *a, GPTConfig *cfg) {
    int arch = gpt_arch_parse(a->arch);
    if (arch < 0) return loom_fail("--arch must be gpt2 or llama (got '%s')", a->arch);
    *cfg = (GPTConfig){.L = a->layers,
                       .H = a->heads,
                       .C = a->dim,
                       .V = a->vocab,
                       .maxT = a->block_size,
                       .arch = arch};
    if (arch == ARCH_GPT2) {
        const char *f = a->kv_heads                       ? "--kv-heads"
                        : a->ffn_dim                      ? "--ffn-dim"
                        : a->rope_theta                   ? "--rope-theta"
                        : a->norm_eps                     ? "--norm-eps"
                        : strcmp(a->rope_scaling, "none") ? "--rope-scaling"
                                                          : NULL;
        if (f) return loom_fail("%s is a LLaMA option: it needs --arch llama", f);
        return a->init ? 0 : gpt_config_check(cfg); // --init: the file's shape, checked later
    }
    int scaled = !strcmp(a->rope_scaling, "llama3");
    if (!scaled && (a->rope_factor || a->rope_low || a->rope_high || a->rope_orig))
        return loom_fail("%s belongs to --rope-scaling llama3",
                         a->rope_factor ? "--rope-factor"
                         : a->rope_low  ? "--rope-low-freq-factor"
                         : a->rope_high ? "--rope-high-freq-factor"
                                        : "--rope-original-max-pos");
    if (a->init) return 0; // the shape comes from the directory's config.json, checked later
    cfg->KV = a->kv_heads, cfg->F = a->ffn_dim, cfg->tie = !!a->tie_embeddings;
    cfg->rope_theta = a->rope_theta, cfg->norm_eps = a->norm_eps;
    cfg->rope_scaling = scaled ? ROPE_LLAMA3 : ROPE_PLAIN, cfg->rope_factor = a->rope_factor;
    cfg->rope_low = a->rope_low, cfg->rope_high = a->rope_high, cfg->rope_orig = a->rope_orig;
    gpt_config_defaults(cfg);
    return gpt_config_check(cfg);
}

char *train_args_json(const TrainArgs *a) {
    cJSON *j = cJSON_CreateObject();
    const char *ints[] = {"batch", "seq",  "grad_accum", "steps", "shuffle", "warmup", "seed",
                          "dp",    "zero", "pp",         "tp",    "cp",      "sp"};
    int ivals[] = {a->batch, a->seq,  a->grad_accum, a->steps, a->shuffle, a->warmup, a->seed,
                   a->dp,    a->zero, a->pp,         a->tp,    a->cp,      a->sp};
    for (size_t i = 0; i < sizeof ivals / sizeof ivals[0]; i++)
        cJSON_AddNumberToObject(j, ints[i], ivals[i]);
    cJSON_AddNumberToObject(j, "lr", a->lr);
    cJSON_AddNumberToObject(j, "min_lr", a->min_lr);
    cJSON_AddStringToObject(j, "lr_schedule", a->lr_schedule);
    cJSON_AddStringToObject(j, "schedule", a->pp > 1 ? a->schedule : "none");
    cJSON_AddStringToObject(j, "device", a->device);
    cJSON_AddStringToObject(j, "tp_mode", a->tp_mode);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

int train_args_shuffle(const char *json) {
    cJSON *j = json ? cJSON_Parse(json) : NULL;
    cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "shuffle");
    int r = cJSON_IsNumber(v) ? v->valuedouble != 0 : -1;
    cJSON_Delete(j);
    return r;
}
