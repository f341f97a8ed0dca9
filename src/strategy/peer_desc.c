// peer_desc.c — what a peer must share with the swarm it joins (strat_peer.h): the run
// description a joiner sends in its HELLO and the swarm compares field by field.
#include <cjson/cJSON.h>

#include "strat_peer.h"

// The protocol a peer speaks (the wire format has its own version, wire.h) and what a data window
// holds (2: B sequences; 1 was B·T contiguous tokens), so peers of either kind refuse each other.
#define PEER_PROTOCOL 2

// What a joiner must share with the swarm, named as the flags (REFUSE names the first that
// differs).
char *peer_run_desc(const Strategy *s) {
    const StrategyConfig *c = s->cfg;
    const GPTConfig *g = &s->model->cfg;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "loom-peer-protocol", PEER_PROTOCOL);
    const char *in[] = {"layers", "heads", "dim", "vocab",      "block-size",
                        "tau",    "batch", "seq", "grad-accum", "steps"};
    int iv[] = {g->L, g->H, g->C, g->V, g->maxT, c->tau, c->batch, c->seq, c->grad_accum, c->steps};
    for (size_t i = 0; i < sizeof iv / sizeof iv[0]; i++)
        cJSON_AddNumberToObject(j, in[i], iv[i]);
    cJSON_AddStringToObject(j, "arch", gpt_arch_name(g->arch));
    if (gpt_is_llama(g)) { // the family's shape, named as its flags
        const char *ln[] = {"kv-heads", "ffn-dim", "tie-embeddings"};
        int lv[] = {g->KV, g->F, g->tie};
        for (size_t i = 0; i < sizeof lv / sizeof lv[0]; i++)
            cJSON_AddNumberToObject(j, ln[i], lv[i]);
        cJSON_AddNumberToObject(j, "rope-theta", g->rope_theta);
        cJSON_AddNumberToObject(j, "norm-eps", g->norm_eps);
        cJSON_AddStringToObject(j, "rope-scaling", g->rope_scaling ? "llama3" : "none");
        if (g->rope_scaling) {
            const char *rn[] = {"rope-factor", "rope-low-freq-factor", "rope-high-freq-factor"};
            float rv[] = {g->rope_factor, g->rope_low, g->rope_high};
            for (size_t i = 0; i < sizeof rv / sizeof rv[0]; i++)
                cJSON_AddNumberToObject(j, rn[i], rv[i]);
            cJSON_AddNumberToObject(j, "rope-original-max-pos", g->rope_orig);
        }
    }
    const char *fn[] = {"outer-lr", "outer-momentum", "gap-penalty", "outer-clip",
                        "lr",       "min-lr",         "beta1",       "beta2",
                        "eps",      "weight-decay",   "grad-clip"};
    float fv[] = {c->outer_lr, c->outer_momentum,   c->gap_penalty,  c->outer_clip,
                  c->opt.lr,   c->opt.min_lr,       c->opt.beta1,    c->opt.beta2,
                  c->opt.eps,  c->opt.weight_decay, c->opt.grad_clip};
    for (size_t i = 0; i < sizeof fv / sizeof fv[0]; i++)
        cJSON_AddNumberToObject(j, fn[i], fv[i]);
    const char *cq[] = {"none", "int8", "topk"};
    cJSON_AddStringToObject(j, "outer-compress", cq[c->outer_compress]);
    if (c->outer_compress == 2) cJSON_AddNumberToObject(j, "topk-frac", c->topk_frac);
    if (c->outer_compress == 2)
        cJSON_AddStringToObject(j, "topk-values", c->topk_2bit ? "2bit" : "fp32");
    cJSON_AddStringToObject(j, "peer-exchange", c->peer_exchange ? "sharded" : "all");
    if (c->peer_exchange)
        cJSON_AddStringToObject(j, "outer-compress-sums", c->sums_int8 ? "int8" : "none");
    cJSON_AddStringToObject(j, "gap-mode", c->gap_adaptive ? "adaptive" : "constant");
    cJSON_AddStringToObject(j, "lr-schedule", c->opt.schedule == LR_COSINE ? "cosine" : "constant");
    cJSON_AddNumberToObject(j, "warmup", c->opt.warmup);
    cJSON_AddStringToObject(j, "tokenizer", c->tokenizer ? c->tokenizer : "none");
    cJSON_AddStringToObject(j, "shuffle", c->shuffle ? "on" : "off"); // the windows' contents
    if (c->shuffle) cJSON_AddNumberToObject(j, "seed", c->seed);
    char *t = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return t;
}
