// compose.c — features of a configuration, their flags, and the one composition check (see
// compose.h).
#include "compose.h"

#include <stdio.h>

#include "../common.h"

FeatureSet compose_features(const StrategyConfig *c) {
    FeatureSet f = 0;
    if (c->dp > 1) f |= FEAT(F_DP);
    if (c->zero == 1) f |= FEAT(F_ZERO1);
    if (c->zero == 2) f |= FEAT(F_ZERO2);
    if (c->zero >= 3) f |= FEAT(F_ZERO3);
    if (c->pp > 1) f |= FEAT(F_PP);
    if (c->tp > 1 && !c->tp_2d) f |= FEAT(F_TP);
    if (c->tp_2d) f |= FEAT(F_TP2D);
    if (c->sp) f |= FEAT(F_SP);
    if (c->cp > 1) f |= FEAT(F_CP);
    if (c->co2) f |= FEAT(F_CO2);
    if (c->offload) f |= FEAT(F_OFFLOAD);
    if (c->offload && c->offload_host) f |= FEAT(F_OFFLOAD_DEVICE);
    if (c->recompute) f |= FEAT(F_RECOMPUTE);
    if (c->peer) f |= FEAT(F_PEER);
    if (c->dump_grads) f |= FEAT(F_DUMP_GRADS);
    return f;
}

const char *compose_flag(const StrategyConfig *c, Feature f, char *buf, size_t n) {
    switch (f) {
    case F_DP: snprintf(buf, n, "--dp %d", c->dp); break;
    case F_ZERO1:
    case F_ZERO2:
    case F_ZERO3: snprintf(buf, n, "--zero %d", c->zero); break;
    case F_PP: snprintf(buf, n, "--pp %d", c->pp); break;
    case F_TP: snprintf(buf, n, "--tp %d", c->tp); break;
    case F_TP2D: snprintf(buf, n, "--tp %d --tp-mode 2d", c->tp); break;
    case F_SP: snprintf(buf, n, "--sp"); break;
    case F_CP: snprintf(buf, n, "--cp %d", c->cp); break;
    case F_CO2: snprintf(buf, n, "--co2"); break;
    case F_OFFLOAD: snprintf(buf, n, c->offload_host ? "--offload host" : "--offload"); break;
    case F_OFFLOAD_DEVICE:
        snprintf(buf, n, c->offload_host ? "--offload host" : "--offload disk on a device");
        break;
    case F_RECOMPUTE: snprintf(buf, n, "--recompute"); break;
    case F_PEER: snprintf(buf, n, "loom peer"); break;
    case F_DUMP_GRADS: snprintf(buf, n, "--dump-grads"); break;
    default: snprintf(buf, n, "?");
    }
    return buf;
}

// What the backend must offer for a feature (BACKEND_NCAPS ends each list): a part of a tensor
// needs the vocabulary shards (its collectives and checkpoints reach device buffers through the
// backend and comm's host stages: t_device_staged.sh); ring
// attention its chunk kernels; 2D the split LayerNorm; the swap executor (offload/) with a disk
// tier runs the kernels on its host slots; on a device (--offload host, or a disk tier with a
// device backend: F_OFFLOAD_DEVICE) on device slots, filled by the backend's copy stream
// (F_OFFLOAD's own need is then not asked).
static const BackendCap NEEDS[F_COUNT][3] = {
    [F_DP] = {BACKEND_NCAPS},
    [F_ZERO1] = {BACKEND_NCAPS},
    [F_ZERO2] = {BACKEND_NCAPS},
    [F_ZERO3] = {BACKEND_NCAPS},
    [F_PP] = {BACKEND_NCAPS},
    [F_TP] = {BACKEND_VOCAB_SHARDS, BACKEND_NCAPS},
    [F_TP2D] = {BACKEND_VOCAB_SHARDS, BACKEND_SPLIT_LAYERNORM, BACKEND_NCAPS},
    [F_SP] = {BACKEND_VOCAB_SHARDS, BACKEND_NCAPS},
    [F_CP] = {BACKEND_RING_ATTENTION, BACKEND_NCAPS},
    [F_CO2] = {BACKEND_NCAPS},
    [F_OFFLOAD] = {BACKEND_HOST_MEMORY, BACKEND_NCAPS},
    [F_RECOMPUTE] = {BACKEND_NCAPS},
    [F_PEER] = {BACKEND_NCAPS},
    [F_DUMP_GRADS] = {BACKEND_NCAPS},
    [F_OFFLOAD_DEVICE] = {BACKEND_COPY_STREAM, BACKEND_NCAPS},
};

// The flag that selected the strategy (the first of its own features the run uses).
static const char *who(const Supports *s, const StrategyConfig *c, FeatureSet want, char *buf,
                       size_t n) {
    for (int i = 0; i < 4 && s->self[i] != F_COUNT; i++)
        if (want & FEAT(s->self[i])) return compose_flag(c, s->self[i], buf, n);
    return NULL;
}

// The LLaMA block runs with every option (1D and 2D tensor parallelism, sp, cp, dp, ZeRO, pp,
// CO2, offload, recompute, peers); it needs the backend's LLaMA and vocabulary-shard kernels.
static int llama_check(const StrategyConfig *c, FeatureSet want, const Backend *be) {
    (void)want;
    // the embedding without positions is the vocabulary-shard kernel over the whole vocabulary
    const BackendCap need[2] = {BACKEND_LLAMA, BACKEND_VOCAB_SHARDS};
    for (int k = 0; k < 2 && be; k++)
        if (!backend_supports(be, need[k]))
            return loom_fail("--arch llama with --device %s: the %s backend lacks %s", c->device,
                             be->name, backend_cap_name(need[k]));
    return 0;
}

int compose_check(const Supports *s, const StrategyConfig *c, const Backend *be) {
    FeatureSet want = compose_features(c);
    if (be && !be->host_memory && (want & FEAT(F_OFFLOAD))) want |= FEAT(F_OFFLOAD_DEVICE);
    char a[48], b[48];
    if (c->llama && llama_check(c, want, be)) return -1;
    const char *me = who(s, c, want, a, sizeof a);
    for (int f = 0; f < F_COUNT; f++) {
        if (!(want & FEAT(f)) || (s->features & FEAT(f))) continue;
        compose_flag(c, (Feature)f, b, sizeof b);
        return me ? loom_fail("%s with %s: not available (%s)", me, b, s->runs_with)
                  : loom_fail("%s: not available (%s)", b, s->runs_with);
    }
    for (const FeaturePair *p = s->pairs; p && p->why; p++)
        if ((want & FEAT(p->a)) && (want & FEAT(p->b)))
            return loom_fail("%s with %s: %s", compose_flag(c, p->a, a, sizeof a),
                             compose_flag(c, p->b, b, sizeof b), p->why);
    for (int f = 0; f < F_COUNT && be; f++)
        for (int k = 0;
             (want & FEAT(f)) && k < 3 && !(f == F_OFFLOAD && (want & FEAT(F_OFFLOAD_DEVICE))) &&
             NEEDS[f][k] != BACKEND_NCAPS;
             k++)
            if (!backend_supports(be, NEEDS[f][k]))
                return loom_fail("%s with --device %s: the %s backend lacks %s",
                                 compose_flag(c, (Feature)f, a, sizeof a), c->device, be->name,
                                 backend_cap_name(NEEDS[f][k]));
    return 0;
}
