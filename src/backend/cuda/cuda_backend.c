// cuda_backend.c — the CUDA backend's table (backend.h) and what is not a model kernel:
// start-up (device choice, stream, cuBLAS), device memory, the strategies' vector ops, the
// reductions the trainer reads on the host, scratch buffers, and the spec-sheet peak.
//
// A binary built with CUDA=1 starts anywhere: nothing touches the driver until --device cuda
// is chosen, and then a missing driver or GPU is an error with the reason, not a crash.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common.h"
#include "../backend.h"
#include "cuda_blas.h"
#include "cuda_impl.h"
#include "cuda_ops.h"

CuCtx cu_ctx = {.device = -1};

void cu_check(cudaError_t e, const char *what, const char *file, int line) {
    if (e == cudaSuccess) return;
    die(EXIT_IO, "CUDA error: %s (%s) in %s (%s:%d)", cudaGetErrorString(e), cudaGetErrorName(e),
        what, file, line);
}

// ------------------------------------------------------------------ scratch

static void *scr_ptr[SCR_SLOTS];
static size_t scr_size[SCR_SLOTS];

void *cu_scratch(int slot, size_t bytes) {
    if (bytes <= scr_size[slot]) return scr_ptr[slot];
    size_t want = bytes + bytes / 4; // grow geometrically
    cu_free(scr_ptr[slot]);          // waits for the stream: nothing can still read it
    scr_ptr[slot] = NULL, scr_size[slot] = 0;
    CU(cu_malloc(&scr_ptr[slot], want));
    scr_size[slot] = want;
    return scr_ptr[slot];
}

int *cu_ints(const int *host, size_t n) {
    int *dev = cu_scratch(SCR_INTS, (n ? n : 1) * sizeof(int));
    if (n) CU(cudaMemcpyAsync(dev, host, n * sizeof(int), cudaMemcpyHostToDevice, cu_ctx.stream));
    return dev;
}

// ------------------------------------------------------------------ memory

static float *cuda_alloc(size_t n) {
    void *p = NULL;
    size_t bytes = (n ? n : 1) * sizeof(float);
    cudaError_t e = cu_malloc(&p, bytes);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        die(EXIT_IO, "CUDA: cannot allocate %.2f GiB of device memory (%.2f GiB free of %.2f): %s",
            (double)bytes / (1 << 30), (double)fr / (1 << 30), (double)tot / (1 << 30),
            cudaGetErrorString(e));
    }
    CU(cudaMemsetAsync(p, 0, bytes, cu_ctx.stream));
    return p;
}
static void cuda_release(float *p) {
    cu_gen_bump();
    cu_bf16_flush(); // a cached copy may belong to this buffer
    if (p) cu_act16_drop(p, cu_mem_size(p));
    cu_free(p);
}
// 1 when p is device memory; a host pointer (one CUDA does not know, or pinned host memory) is 0,
// and the error an unknown pointer may leave is cleared so a later check does not see it.
static int cuda_owns(const void *p) {
    struct cudaPointerAttributes a;
    if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice;
}
void cu_thread_device(void) {
    static _Thread_local int set;
    if (!set && cu_ctx.device >= 0) CU(cudaSetDevice(cu_ctx.device)), set = 1;
}

static void cuda_upload(float *dst, const float *host_src, size_t n) {
    cu_thread_device(); // (comm's progress thread stages through these too)
    cu_gen_bump();
    if (n) CU(cudaMemcpyAsync(dst, host_src, n * sizeof(float), cudaMemcpyDefault, cu_ctx.stream));
}
static void cuda_download(float *host_dst, const float *src, size_t n) {
    if (!n) return;
    cu_thread_device();
    CU(cudaMemcpyAsync(host_dst, src, n * sizeof(float), cudaMemcpyDefault, cu_ctx.stream));
    CU(cudaStreamSynchronize(cu_ctx.stream));
}
static void cuda_copy(float *dst, const float *src, size_t n) {
    cu_gen_bump();
    if (n && dst != src)
        CU(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDefault, cu_ctx.stream));
}
static void cuda_copy_rows(float *dst, size_t ds, const float *src, size_t ss, size_t rows,
                           size_t cols) {
    cu_gen_bump();
    if (rows && cols)
        CU(cudaMemcpy2DAsync(dst, ds * sizeof(float), src, ss * sizeof(float), cols * sizeof(float),
                             rows, cudaMemcpyDefault, cu_ctx.stream));
}

// ------------------------------------------------------------------ reductions

static double cuda_sumsq(const float *x, size_t n) {
    if (!n) return 0.0;
    double *dev = cu_scratch(SCR_RED, K_SUMSQ_BLOCKS * sizeof(double)), part[K_SUMSQ_BLOCKS];
    k_sumsq_part(dev, x, n);
    CU(cudaMemcpyAsync(part, dev, sizeof part, cudaMemcpyDeviceToHost, cu_ctx.stream));
    CU(cudaStreamSynchronize(cu_ctx.stream));
    double acc = 0.0;
    for (int k = 0; k < K_SUMSQ_BLOCKS; k++)
        acc += part[k];
    return acc;
}

double cu_sum_losses(const float *losses, int N) {
    float *host = xmalloc((size_t)N * sizeof(float));
    CU(cudaMemcpyAsync(host, losses, (size_t)N * sizeof(float), cudaMemcpyDeviceToHost,
                       cu_ctx.stream));
    CU(cudaStreamSynchronize(cu_ctx.stream));
    double total = 0.0;
    for (int n = 0; n < N; n++)
        total += host[n];
    free(host);
    return total;
}

static void cuda_sumsq_chunks(const float *x, size_t n, size_t chunk, double *out) {
    size_t nk = (n + chunk - 1) / chunk;
    if (!nk) return;
    double *dev = cu_scratch(SCR_RED, nk * sizeof(double));
    cu_prof_begin(PROF_RED);
    k_sumsq_chunks(dev, x, n, chunk);
    cu_prof_end(PROF_RED);
    CU(cudaMemcpyAsync(out, dev, nk * sizeof(double), cudaMemcpyDeviceToHost, cu_ctx.stream));
    CU(cudaStreamSynchronize(cu_ctx.stream));
}

static int cuda_all_finite(const float *x, size_t n) {
    if (!n) return 1;
    int *flag = cu_scratch(SCR_RED, sizeof(int)), bad = 0;
    CU(cudaMemsetAsync(flag, 0, sizeof(int), cu_ctx.stream));
    k_nonfinite(flag, x, n);
    CU(cudaMemcpyAsync(&bad, flag, sizeof bad, cudaMemcpyDeviceToHost, cu_ctx.stream));
    CU(cudaStreamSynchronize(cu_ctx.stream));
    return !bad;
}

// ------------------------------------------------------------------ peak
// Spec-sheet dense rates per SM per clock (FLOPs; tensor cores with fp32 accumulation for
// bf16/fp16, the CUDA cores for fp32) times the SM count and the spec boost clock, as llm.c
// computes MFU: an H100 SXM gives 132 × 4096 × 1.83 GHz = 989 TFLOP/s bf16.

static double per_sm_clock(int major, int minor, int tensor) {
    int cc = major * 10 + minor;
    if (!tensor) return cc == 75 || cc == 80 || cc < 75 ? 128 : 256;
    if (cc == 80) return 2048;
    if (cc == 90) return 4096;
    if (cc == 100 || cc == 103 || cc == 110) return 8192;
    return 512; // Turing (fp16), consumer Ampere, Ada, Blackwell GeForce, Orin
}

static double boost_mhz(void) {
    static const struct {
        const char *name;
        double mhz;
    } known[] = {{"H100 80GB HBM3", 1830}, {"H100 SXM", 1830}, {"H200", 1830}, {"H100 PCIe", 1620},
                 {"H100 NVL", 1785},       {"A100", 1410},     {"GH200", 1830}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strstr(cu_ctx.name, known[i].name)) return known[i].mhz;
    int khz = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, cu_ctx.device) != cudaSuccess) khz = 0;
    return khz / 1000.0;
}

static double cuda_peak_gflops(int *threads) {
    if (threads) *threads = cu_ctx.sms;
    double rate = per_sm_clock(cu_ctx.cc_major, cu_ctx.cc_minor, cu_ctx.dtype != CU_FP32);
    return rate * cu_ctx.sms * boost_mhz() * 1e-3; // MHz·1e6 FLOP/s = 1e-3 GFLOP/s per MHz
}

// ------------------------------------------------------------------ table

#define EW(name, params, call)                                                                     \
    static void cuda_##name params {                                                               \
        cu_gen_bump();                                                                             \
        call;                                                                                      \
    }
EW(fill, (float *x, float v, size_t n), k_fill(x, v, n))
EW(scale, (float *x, float s, size_t n), k_scale(x, s, n))
EW(axpby, (float *y, float a, const float *x, float b, size_t n), k_axpby(y, a, x, b, n))
EW(sub_scaled, (float *o, const float *a, const float *b, float s, size_t n),
   k_sub_scaled(o, a, b, s, n))
EW(copy_scaled, (float *d, const float *s_, float s, size_t n), k_copy_scaled(d, s_, s, n))
EW(clamp, (float *x, float lo, float hi, size_t n), k_clamp(x, lo, hi, n))

static void cuda_adamw_gen(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                           float beta1, float beta2, float eps, float wd, float gscale, int t) {
    cu_gen_bump();
    cuda_adamw(param, grad, m, v, n, lr, beta1, beta2, eps, wd, gscale, t);
}
static void cuda_adamw_multi_gen(float *param, const float *grad, float *m, float *v,
                                 const AdamwPiece *pc, int np, float lr, float beta1, float beta2,
                                 float eps, float gscale, int t) {
    cu_gen_bump();
    const char *e = getenv("LOOM_CUDA_ADAMW_MULTI"); // 0: one launch a piece, as before
    if (e && !strcmp(e, "0"))
        for (int k = 0; k < np; k++)
            cuda_adamw(param + pc[k].off, grad + pc[k].off, m + pc[k].off, v + pc[k].off, pc[k].n,
                       lr, beta1, beta2, eps, pc[k].wd, gscale, t);
    else
        cuda_adamw_multi(param, grad, m, v, pc, np, lr, beta1, beta2, eps, gscale, t);
}

static Backend CUDA = {
    // .precision is set with the dtype (backend_cuda)
    .name = "cuda",
    .owns = cuda_owns,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .upload = cuda_upload,
    .download = cuda_download,
    .fill = cuda_fill,
    .copy = cuda_copy,
    .copy_rows = cuda_copy_rows,
    .scale = cuda_scale,
    .sumsq = cuda_sumsq,
    .all_finite = cuda_all_finite,
    .sumsq_chunks = cuda_sumsq_chunks,
    .axpby = cuda_axpby,
    .sub_scaled = cuda_sub_scaled,
    .copy_scaled = cuda_copy_scaled,
    .clamp = cuda_clamp,
    .encoder_forward = cuda_encoder_forward,
    .encoder_backward = cuda_encoder_backward,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .matmul_forward = cuda_matmul_forward,
    .matmul_backward = cuda_matmul_backward,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .attention_saved_floats = cuda_attention_saved_floats,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .residual_forward = cuda_residual_forward,
    .matmul_gelu_forward = cuda_matmul_gelu_forward,
    .matmul_gelu_backward = cuda_matmul_gelu_backward,
    .residual_layernorm_forward = cuda_residual_layernorm_forward,
    .softmax_xent_forward = cuda_softmax_xent_forward,
    .softmax_xent_backward = cuda_softmax_xent_backward,
    .classifier = cuda_classifier,
    .rmsnorm_forward = cuda_rmsnorm_forward,
    .rmsnorm_backward = cuda_rmsnorm_backward,
    .rope_forward = cuda_rope_forward,
    .rope_backward = cuda_rope_backward,
    .swiglu_forward = cuda_swiglu_forward,
    .swiglu_backward = cuda_swiglu_backward,
    .gqa_attention_forward = cuda_gqa_attention_forward,
    .gqa_attention_backward = cuda_gqa_attention_backward,
    .encoder_forward_shard = cuda_encoder_forward_shard,
    .encoder_backward_shard = cuda_encoder_backward_shard,
    .xent_shard_max = cuda_xent_shard_max,
    .xent_shard_sum = cuda_xent_shard_sum,
    .xent_shard_finish = cuda_xent_shard_finish,
    .xent_shard_backward = cuda_xent_shard_backward,
    .adamw = cuda_adamw_gen,
    .adamw_multi = cuda_adamw_multi_gen,
    .peak_gflops = cuda_peak_gflops,
    .mem_peak = cu_mem_peak,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .copy_async = cu_copy_async,
    .copy_wait = cu_copy_wait,
    .copy_done = cu_copy_done,
    .mem_used = cu_mem_held,
    .coll_name = cu_nccl_name,
    .coll_usable = cu_coll_usable,
    .coll_device = cu_coll_device,
    .coll_id = cu_coll_id,
    .coll_open = cu_coll_open,
    .coll_fence = cu_coll_fence,
    .coll_allreduce = cu_coll_allreduce,
    .coll_bcast = cu_coll_bcast,
    .coll_reduce = cu_coll_reduce,
    .coll_group_begin = cu_coll_group_begin,
    .coll_group_end = cu_coll_group_end,
    .coll_test = cu_coll_test,
    .coll_abort = cu_coll_abort,
    .coll_close = cu_coll_close,
};

// The GPU of this process: the local rank's (mpirun / srun / torchrun), modulo the count.
static int local_device(int count) {
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v) % count;
    }
    return 0;
}

static int cuda_start(void) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorInsufficientDriver)
        return loom_fail("--device cuda: no usable NVIDIA GPU: no NVIDIA driver found (or one "
                         "older than this CUDA %d.%d runtime)",
                         CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    if (e != cudaSuccess || count == 0)
        return loom_fail("--device cuda: no usable NVIDIA GPU (%s)",
                         e != cudaSuccess ? cudaGetErrorString(e) : "no device found");
    cu_ctx.device = local_device(count);
    struct cudaDeviceProp p;
    CU(cudaSetDevice(cu_ctx.device));
    CU(cudaGetDeviceProperties(&p, cu_ctx.device));
    snprintf(cu_ctx.name, sizeof cu_ctx.name, "%s", p.name);
    cu_ctx.sms = p.multiProcessorCount;
    cu_ctx.cc_major = p.major, cu_ctx.cc_minor = p.minor;
    CU(cudaStreamCreateWithFlags(&cu_ctx.stream, cudaStreamNonBlocking));
    cb_init();
    return 0;
}

const Backend *backend_cuda(const char *dtype) {
    CuDtype dt = CU_BF16; // the GPU's default
    if (dtype && !strcmp(dtype, "fp32"))
        dt = CU_FP32;
    else if (dtype && !strcmp(dtype, "fp16"))
        dt = CU_FP16; // the linear layers on fp16 operands (k_half.cu); the train loop
                      // scales the loss (optim/loss_scale.h)
    else if (dtype && strcmp(dtype, "bf16")) {
        loom_fail("--dtype '%s': unknown (bf16, fp16 or fp32)", dtype);
        return NULL;
    }
    if (cu_ctx.device < 0 && cuda_start()) return NULL;
    if (dt == CU_BF16 && cu_ctx.cc_major < 8) {
        loom_fail("--dtype bf16: %s (compute capability %d.%d) has no bf16; use fp32", cu_ctx.name,
                  cu_ctx.cc_major, cu_ctx.cc_minor);
        return NULL;
    }
    if (dt == CU_FP16 && cu_ctx.cc_major < 7) {
        loom_fail("--dtype fp16: %s (compute capability %d.%d) has no fp16 tensor cores; use fp32",
                  cu_ctx.name, cu_ctx.cc_major, cu_ctx.cc_minor);
        return NULL;
    }
    if (cu_ctx.dtype != dt) cu_bf16_flush(); // cached copies are of the other half type
    cu_ctx.dtype = dt;
    CUDA.precision = dt == CU_BF16 ? "bf16" : dt == CU_FP16 ? "fp16" : "fp32";
    // the products' inputs in bf16 (the flash kernels, LayerNorm and GELU write them so)
    CUDA.act16 = dt == CU_BF16 ? cu_act16_enabled() : 0;
    CUDA.act16_mark = CUDA.act16 ? cu_act16_mark : NULL;
    return &CUDA;
}

const char *backend_cuda_device_name(void) { return cu_ctx.device < 0 ? NULL : cu_ctx.name; }

// The runtime this binary carries (linked statically), the installed driver's CUDA version (0:
// no driver) and the cuBLASLt library found at run time. Touches no device.
void backend_cuda_versions(char *out, size_t n) {
    int rt = 0, drv = 0, lt[3] = {0, 0, 0};
    cudaRuntimeGetVersion(&rt);
    char dv[32] = "none";
    if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0)
        snprintf(dv, sizeof dv, "%d.%d", drv / 1000, drv % 1000 / 10);
    cublasLtGetProperty(MAJOR_VERSION, &lt[0]);
    cublasLtGetProperty(MINOR_VERSION, &lt[1]);
    cublasLtGetProperty(PATCH_LEVEL, &lt[2]);
    snprintf(out, n, "runtime %d.%d, driver %s, cuBLASLt %d.%d.%d", rt / 1000, rt % 1000 / 10, dv,
             lt[0], lt[1], lt[2]);
}
