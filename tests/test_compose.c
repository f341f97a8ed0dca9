// test_compose.c — which options combine is decided in one place (strategy/compose.h): the
// registry picks the strategy, the generic check refuses what it does not implement with one
// message naming both flags, pairs a strategy cannot run name both flags and its reason, and a
// backend that lacks a capability a feature needs is refused by capability (not by the device's
// name) — shown with a copy of the CPU backend whose ring-attention kernels are taken away.
#include <string.h>

#include "../src/backend/backend.h"
#include "../src/common.h"
#include "../src/strategy/compose.h"
#include "test.h"

static StrategyConfig base(void) {
    return (StrategyConfig){.batch = 4,
                            .seq = 16,
                            .grad_accum = 1,
                            .steps = 2,
                            .dp = 1,
                            .tp = 1,
                            .cp = 1,
                            .pp = 1,
                            .tau = 2,
                            .topk_frac = 0.02f, // loom peer's default (args.c)
                            .schedule = "1f1b",
                            .device = "cpu"};
}

// strategy_find's message for c on be (or "" when it is accepted), in out.
static const char *refusal(const StrategyConfig *c, const Backend *be, char *out, size_t n) {
    const StrategyOps *ops = strategy_find(c, be);
    snprintf(out, n, "%s", ops ? "" : loom_errmsg());
    return out;
}

#define REFUSED(c, be, text)                                                                       \
    do {                                                                                           \
        char m_[512];                                                                              \
        refusal(&(c), be, m_, sizeof m_);                                                          \
        CHECK(strstr(m_, text) != NULL, "want '%s', got '%s'", text, m_);                          \
    } while (0)
#define ACCEPTED(c, be)                                                                            \
    do {                                                                                           \
        char m_[512];                                                                              \
        CHECK(!refusal(&(c), be, m_, sizeof m_)[0], "refused: %s", m_);                            \
    } while (0)

TEST(features_and_flags) {
    StrategyConfig c = base();
    c.dp = 2, c.zero = 3, c.tp = 4, c.tp_2d = 1, c.recompute = 1;
    FeatureSet f = compose_features(&c);
    CHECK(f == (FEAT(F_DP) | FEAT(F_ZERO3) | FEAT(F_TP2D) | FEAT(F_RECOMPUTE)), "features %x", f);
    char b[64];
    CHECK(!strcmp(compose_flag(&c, F_TP2D, b, sizeof b), "--tp 4 --tp-mode 2d"), "%s", b);
    CHECK(!strcmp(compose_flag(&c, F_ZERO3, b, sizeof b), "--zero 3"), "%s", b);
}

TEST(unsupported_features_name_both_flags) {
    const Backend *cpu = backend_cpu();
    StrategyConfig c = base();
    // a 2D tensor-parallel part swaps its blocks with ZeRO 0 only, without CO2
    c.tp = 4, c.offload = 1, c.tp_2d = 1;
    ACCEPTED(c, cpu);
    c.dp = 2, c.zero = 2;
    REFUSED(c, cpu, "--offload with --zero 2: a 2D tensor-parallel part swaps its blocks");
    c.zero = 0, c.co2 = 1;
    REFUSED(c, cpu, "--offload with --co2: CO2's workers over 2D grids keep their outer state");
    // a 1D tensor- or context-parallel part swaps its blocks with ZeRO 0 only
    c = base(), c.tp = 2, c.offload = 1;
    ACCEPTED(c, cpu);
    c.dp = 2, c.zero = 1;
    REFUSED(c, cpu, "--offload with --zero 1: a tensor- or context-parallel part swaps");
    c = base(), c.cp = 2, c.offload = 1, c.dp = 2, c.co2 = 1;
    REFUSED(c, cpu, "--offload with --co2: CO2's workers over tensor- or context-parallel");
    // CO2 over tensor- and context-parallel workers runs with its outer state unsharded only
    c = base(), c.dp = 2, c.tp = 2, c.co2 = 1;
    ACCEPTED(c, cpu);
    c.sp = 1;
    ACCEPTED(c, cpu);
    c = base(), c.dp = 2, c.cp = 2, c.co2 = 1;
    ACCEPTED(c, cpu);
    c.zero = 1;
    REFUSED(c, cpu, "--co2 with --zero 1: CO2 over tensor- or context-parallel workers keeps");
    c = base(), c.dp = 2, c.tp = 2, c.co2 = 1, c.dump_grads = 1;
    REFUSED(c, cpu, "--co2 with --dump-grads: CO2's workers never sum their gradients");
    c = base(), c.tp = 2, c.co2 = 1, c.tau = 0;
    REFUSED(c, cpu, "--tau must be >= 1");
    // CO2 over pipeline workers: plain stages under gpipe or 1f1b, its outer state unsharded
    c = base(), c.dp = 2, c.pp = 2, c.co2 = 1;
    ACCEPTED(c, cpu);
    c.zero = 1;
    REFUSED(c, cpu, "--co2 with --zero 1: CO2 over pipeline workers keeps every stage's outer");
    c = base(), c.dp = 2, c.pp = 2, c.tp = 2, c.co2 = 1;
    REFUSED(c, cpu, "--co2 with --tp 2: CO2 over pipeline workers runs plain stages");
    c = base(), c.dp = 2, c.pp = 2, c.co2 = 1, c.schedule = "2bw";
    REFUSED(c, cpu, "--co2 with --schedule 2bw: 2bw applies every update one batch late");
    c = base(), c.dp = 2, c.tp = 4, c.tp_2d = 1, c.zero = 3; // 2D parts sharded over dp: runs
    ACCEPTED(c, cpu);
    c.co2 = 1, c.zero = 0; // CO2 over 2D grids: runs, its outer state unsharded
    ACCEPTED(c, cpu);
    c.zero = 1;
    REFUSED(c, cpu, "--co2 with --zero 1: CO2 over 2D grids keeps its outer state unsharded");
    c = base(), c.pp = 2, c.offload = 1, c.dp = 2, c.recompute = 1; // swapped stages: run
    ACCEPTED(c, cpu);
    c.schedule = "gpipe";
    ACCEPTED(c, cpu);
    c.schedule = "2bw"; // both weight versions in each stage's tier
    ACCEPTED(c, cpu);
    c = base(), c.pp = 2, c.offload = 1, c.dp = 2, c.zero = 1;
    REFUSED(c, cpu, "--offload with --zero 1: a swapped pipeline stage keeps its whole gradient");
    c = base(), c.pp = 2, c.offload = 1, c.tp = 2;
    REFUSED(c, cpu, "--offload with --tp 2: a swapped pipeline stage runs plain blocks");
    c = base(), c.pp = 2, c.offload = 1, c.dp = 2, c.co2 = 1;
    REFUSED(c, cpu, "--offload with --co2: CO2's pipeline workers keep their stages in memory");
    c = base(), c.tp = 4, c.tp_2d = 1, c.cp = 2; // 2D over a cp ring: runs with ZeRO 0
    ACCEPTED(c, cpu);
    c.dp = 2, c.zero = 1;
    REFUSED(c, cpu, "--cp 2 with --zero 1: 2D tensor parallelism over a context-parallel ring");
    c.zero = 0, c.co2 = 1;
    REFUSED(c, cpu, "--cp 2 with --co2: 2D tensor parallelism over a context-parallel ring");
    c.co2 = 0, c.offload = 1;
    REFUSED(c, cpu, "--cp 2 with --offload: 2D tensor parallelism over a context-parallel ring");
    c = base(), c.peer = 1, c.dump_grads = 1;
    REFUSED(c, cpu,
            "loom peer with --dump-grads: not available (a peer trains a whole model, in "
            "memory or swapped (--offload)");
    c = base(), c.peer = 1, c.offload = 1, c.recompute = 1; // a swapped peer: runs
    ACCEPTED(c, cpu);
}

TEST(pairs_a_strategy_cannot_run) {
    const Backend *cpu = backend_cpu();
    StrategyConfig c = base();
    c.dp = 2, c.zero = 3, c.offload = 1;
    REFUSED(c, cpu, "--offload with --zero 3: block swapping keeps");
    c.zero = 2; // gradients reduce-scattered unit by unit: runs
    ACCEPTED(c, cpu);
    c = base(), c.dp = 2, c.co2 = 1, c.zero = 1, c.offload = 1;
    REFUSED(c, cpu, "--offload with --zero 1: CO2's sharded outer state");
    c = base(), c.dp = 2, c.co2 = 1, c.offload = 1; // unsharded: runs
    ACCEPTED(c, cpu);
    c = base(), c.pp = 2, c.tp = 2, c.cp = 2, c.sp = 1, c.seq = 32, c.zero = 1;
    ACCEPTED(c, cpu);
    c = base(), c.dp = 2, c.tp = 2, c.zero = 3; // ZeRO-3 over a tensor-parallel part
    ACCEPTED(c, cpu);
    c = base(), c.dp = 2, c.cp = 2, c.zero = 3;
    ACCEPTED(c, cpu);
    c = base(), c.dp = 2, c.pp = 2, c.tp = 2, c.zero = 3; // ZeRO-3 inside pipeline stages
    ACCEPTED(c, cpu);
    c.schedule = "2bw"; // each version's shard kept, blocks gathered from the one in use: runs
    ACCEPTED(c, cpu);
    c = base(), c.tp = 2, c.zero = 3, c.dump_grads = 1;
    REFUSED(c, cpu, "--dump-grads with --zero 3: the first step's gradients are gathered");
}

// A backend is asked what it can do: the same configuration runs on the CPU and is refused,
// naming the missing kernels, on a copy without ring attention's chunk kernels.
TEST(backend_capabilities) {
    Backend lacking = *backend_cpu();
    lacking.name = "lacking";
    lacking.attn_chunk_merge = NULL;
    CHECK(backend_supports(backend_cpu(), BACKEND_RING_ATTENTION), "the CPU has ring attention");
    CHECK(!backend_supports(&lacking, BACKEND_RING_ATTENTION), "a missing kernel is seen");
    CHECK(backend_supports(&lacking, BACKEND_VOCAB_SHARDS), "the other groups are still there");
    StrategyConfig c = base();
    c.cp = 2, c.device = "lacking";
    ACCEPTED(c, backend_cpu());
    REFUSED(c, &lacking,
            "--cp 2 with --device lacking: the lacking backend lacks ring "
            "attention's chunk kernels");
    lacking.host_memory = 0; // a peer on a device keeps its outer state in host memory itself
    c = base(), c.peer = 1, c.device = "lacking";
    ACCEPTED(c, &lacking);
    c.offload = 1;
    REFUSED(c, &lacking,
            "--offload disk on a device with --device lacking: the lacking backend lacks a copy "
            "stream");
    c.peer = 0, c.tp = 4, c.tp_2d = 1, c.device = "emu"; // a 2D part, a disk under emu: runs
    ACCEPTED(c, backend_emu());
    // --offload host: the device's copy stream instead of host memory; one process, dp, CO2
    const Backend *emu = backend_emu();
    c = base(), c.offload = 1, c.offload_host = 1, c.device = "emu";
    ACCEPTED(c, emu);
    c.dp = 2, c.zero = 2;
    ACCEPTED(c, emu);
    c = base(), c.offload = 1, c.offload_host = 1, c.dp = 2, c.co2 = 1, c.device = "emu";
    ACCEPTED(c, emu);
    c = base(), c.offload = 1, c.offload_host = 1;
    REFUSED(c, backend_cpu(),
            "--offload host with --device cpu: the cpu backend lacks a copy stream between host "
            "and device memory");
    c = base(), c.offload = 1, c.offload_host = 1, c.tp = 2, c.sp = 1, c.device = "emu";
    ACCEPTED(c, emu); // a part's blocks through the same executor
    c = base(), c.offload = 1, c.offload_host = 1, c.pp = 2, c.device = "emu";
    ACCEPTED(c, emu); // a stage's blocks swapped (pipeline_swap.c)
    c = base(), c.offload = 1, c.offload_host = 1, c.tp = 4, c.tp_2d = 1, c.device = "emu";
    ACCEPTED(c, emu); // a 2D part's layers swapped (tp2d_swap.c)
    c = base(), c.offload = 1, c.offload_host = 1, c.peer = 1, c.device = "emu";
    ACCEPTED(c, emu);
    c.recompute = 1;
    ACCEPTED(c, emu);
}

// --arch llama asks for the LLaMA block's kernels and the vocabulary shards (its embedding),
// not for host memory: a device backend with both (CUDA) runs it, with tensor parallelism too
// (its collectives reach device buffers through comm's host stages); --offload there needs the
// device's copy stream.
TEST(llama_by_capability) {
    Backend dev = *backend_cpu();
    dev.name = "dev", dev.host_memory = 0;
    StrategyConfig c = base();
    c.llama = 1, c.device = "dev";
    ACCEPTED(c, &dev);
    c.tp = 2;
    ACCEPTED(c, &dev);
    c.tp = 1, c.offload = 1;
    REFUSED(c, &dev,
            "--offload disk on a device with --device dev: the dev backend lacks a copy stream");
    c.offload = 0, dev.gqa_attention_backward = NULL;
    REFUSED(c, &dev, "--arch llama with --device dev: the dev backend lacks");
    dev.gqa_attention_backward = backend_cpu()->gqa_attention_backward, dev.xent_shard_sum = NULL;
    REFUSED(c, &dev, "--arch llama with --device dev: the dev backend lacks");
}

int main(void) {
    RUN(features_and_flags);
    RUN(unsupported_features_name_both_flags);
    RUN(pairs_a_strategy_cannot_run);
    RUN(backend_capabilities);
    RUN(llama_by_capability);
    return test_summary();
}
