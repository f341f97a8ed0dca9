// compose.h — which combinations of options a run may use, decided in one place. A
// configuration asks for features (one per option of the parallelism axes: --dp, each ZeRO
// stage, --pp, --tp, 2D, --sp, --cp, --co2, --offload, --recompute, loom peer, --dump-grads);
// compose.c is the only file that maps flags to features and back to the flag a message names,
// and says which backend capabilities (backend_supports) each feature needs. A strategy
// declares what it implements (Supports: a feature set, and the pairs inside it that it cannot
// combine, each with its reason) and never names another strategy's flags: a feature it does
// not list is refused with one message naming both flags, so a new option is refused
// everywhere until a strategy says it supports it.
#pragma once
#include <stdint.h>

#include "../backend/backend.h"
#include "strategy.h"

typedef enum {
    F_DP,             // --dp > 1
    F_ZERO1,          // --zero 1
    F_ZERO2,          // --zero 2
    F_ZERO3,          // --zero 3
    F_PP,             // --pp > 1
    F_TP,             // --tp > 1, Megatron 1D
    F_TP2D,           // --tp-mode 2d
    F_SP,             // --sp
    F_CP,             // --cp > 1
    F_CO2,            // --co2
    F_OFFLOAD,        // --offload
    F_RECOMPUTE,      // --recompute
    F_PEER,           // loom peer
    F_DUMP_GRADS,     // --dump-grads
    F_OFFLOAD_DEVICE, // with F_OFFLOAD: the swap executor's fast memory is a device's (--offload
                      // host; --offload disk with a device backend, added by compose_check)
    F_COUNT
} Feature;
typedef uint32_t FeatureSet;
#define FEAT(f) ((FeatureSet)1 << (f))

typedef struct {
    Feature a, b;
    const char *why; // a and b together are not implemented: why (the message's reason)
} FeaturePair;

typedef struct Supports {
    Feature self[4];          // the features that select the strategy, in the order a message
                              // names the first one the run uses (F_COUNT ends the list)
    FeatureSet features;      // what it implements (self included)
    const FeaturePair *pairs; // combinations of those it cannot run (ends with why == NULL)
    const char *runs_with;    // what it runs with: the reason given for a feature it lacks
} Supports;

// The features a configuration asks for.
FeatureSet compose_features(const StrategyConfig *c);
// The flag that asks for feature f in this configuration, e.g. "--zero 3", "loom peer".
const char *compose_flag(const StrategyConfig *c, Feature f, char *buf, size_t n);
// 0 when the strategy described by s implements every feature c asks for (and every pair of
// them), and the backend has every capability those features need; else loom_fail naming the
// flags (and the device) and the reason, and -1.
int compose_check(const Supports *s, const StrategyConfig *c, const Backend *be);
