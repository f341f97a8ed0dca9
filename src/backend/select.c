// select.c — the one place a backend is chosen from --device (and --dtype; see backend.h), and
// what a chosen backend can do (backend_supports: its optional kernel groups, host memory), and
// which backends are built in.
#include <stdio.h>
#include <string.h>

#include "../common.h"
#include "backend.h"
#include "cpu_impl.h"

const Backend *backend_host(void) { return backend_cpu(); }

const Backend *backend_select(const char *device, int threads) {
    return backend_select_dtype(device, NULL, threads);
}

// --dtype bf16 on the CPU: its products (cpu_bf16.c) need AVX512-BF16 or AMX-BF16
// (cpu_isa.c, at run time); without them the error names both.
static const Backend *cpu_bf16(void) {
    if (cpu_bf16_isa()) return backend_cpu_bf16();
    loom_fail("--dtype bf16: this CPU has neither AVX512-BF16 nor AMX-BF16, the instructions "
              "the CPU backend's bf16 products need (use --dtype fp32, or --device cuda)");
    return NULL;
}

const Backend *backend_select_dtype(const char *device, const char *dtype, int threads) {
    char name[32] = "cpu";
    if (device) {
        const char *colon = strchr(device, ':');
        size_t len = colon ? (size_t)(colon - device) : strlen(device);
        if (len >= sizeof name) len = sizeof name - 1;
        memcpy(name, device, len), name[len] = 0;
        if (colon && dtype && strcmp(dtype, colon + 1)) {
            loom_fail("--device '%s' and --dtype %s disagree", device, dtype);
            return NULL;
        }
        if (colon) dtype = colon + 1;
    }
    if (!strcmp(name, "cpu")) {
        int bf = dtype && !strcmp(dtype, "bf16");
        if (dtype && !bf && strcmp(dtype, "fp32")) {
            loom_fail("--dtype %s: the CPU backend computes in fp32 or bf16 (use --dtype fp32, or "
                      "--device cuda)",
                      dtype);
            return NULL;
        }
        const Backend *be = bf ? cpu_bf16() : backend_cpu();
        if (!be || cpu_gemm_init()) return NULL;
        backend_cpu_set_threads(threads);
        return be;
    }
    if (!strcmp(name, "emu")) { // the CPU's kernels behind device addresses (emu.c)
        if (dtype && strcmp(dtype, "fp32")) {
            loom_fail("--dtype %s: the emu backend computes in fp32 only (use --dtype fp32, or "
                      "--device cuda)",
                      dtype);
            return NULL;
        }
        if (cpu_gemm_init()) return NULL;
        backend_cpu_set_threads(threads);
        return backend_emu();
    }
    if (!strcmp(name, "cuda")) {
#ifdef LOOM_CUDA
        return backend_cuda(dtype);
#else
        loom_fail("--device cuda: this loom was built without the CUDA backend (make CUDA=1)");
        return NULL;
#endif
    }
#ifdef LOOM_CUDA
    loom_fail("--device '%s': unknown device (cpu, emu, cuda)", device);
#else
    loom_fail("--device '%s': unknown device (cpu, emu)", device);
#endif
    return NULL;
}

int backend_supports(const Backend *be, BackendCap cap) {
    switch (cap) {
    case BACKEND_HOST_MEMORY: return be->host_memory;
    case BACKEND_VOCAB_SHARDS:
        return be->encoder_forward_shard && be->encoder_backward_shard && be->xent_shard_max &&
               be->xent_shard_sum && be->xent_shard_finish && be->xent_shard_backward;
    case BACKEND_RING_ATTENTION:
        return be->attn_chunk_forward && be->attn_chunk_merge && be->attn_chunk_backward;
    case BACKEND_SPLIT_LAYERNORM:
        return be->ln_split_stats && be->ln_split_apply && be->ln_split_bwd_stats &&
               be->ln_split_backward;
    case BACKEND_LLAMA:
        return be->rmsnorm_forward && be->rmsnorm_backward && be->rope_forward &&
               be->rope_backward && be->swiglu_forward && be->swiglu_backward &&
               be->gqa_attention_forward && be->gqa_attention_backward;
    case BACKEND_COPY_STREAM:
        return be->host_alloc && be->host_free && be->copy_async && be->copy_wait &&
               be->copy_done && be->mem_used;
    case BACKEND_COLLECTIVES:
        return be->coll_usable && be->coll_device && be->coll_id && be->coll_open &&
               be->coll_fence && be->coll_allreduce &&
               be->coll_bcast && be->coll_reduce && be->coll_group_begin && be->coll_group_end &&
               be->coll_test && be->coll_abort && be->coll_close;
    default: return 0;
    }
}

const char *backend_cap_name(BackendCap cap) {
    static const char *names[BACKEND_NCAPS] = {
        "host-memory buffers",
        "the vocabulary-shard kernels (encoder and cross-entropy shards)",
        "ring attention's chunk kernels",
        "the split LayerNorm kernels",
        "the LLaMA block's kernels (RMSNorm, RoPE, SwiGLU, grouped-query attention)",
        "a copy stream between host and device memory",
        "a collective library between devices (NCCL)"};
    return cap < BACKEND_NCAPS ? names[cap] : "?";
}

#ifdef LOOM_CUDA
const char *backend_names(void) { return "cpu emu cuda"; }
#else
const char *backend_names(void) { return "cpu emu"; }
void backend_cuda_versions(char *out, size_t n) { snprintf(out, n, "%s", ""); }
#endif
