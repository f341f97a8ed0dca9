// cuda_prof.c — an opt-in per-op GPU time breakdown of the CUDA backend: with LOOM_CUDA_PROFILE
// set, every op of cuda_ops.c is bracketed by CUDA events, and at exit the device time per op
// kind (sum, calls, share) is printed to stderr. Off (the default) an op pays one branch.
#include <stdio.h>
#include <stdlib.h>

#include "../../common.h"
#include "cuda_impl.h"

static const char *const NAMES[PROF_OPS] = {"encoder_forward",
                                            "encoder_backward",
                                            "layernorm_forward",
                                            "layernorm_backward",
                                            "matmul_forward",
                                            "matmul_backward",
                                            "attention_forward",
                                            "attention_backward",
                                            "gelu_forward",
                                            "gelu_backward",
                                            "residual_forward",
                                            "softmax_xent_forward",
                                            "softmax_xent_backward",
                                            "adamw",
                                            "reductions",
                                            "rmsnorm_forward",
                                            "rmsnorm_backward",
                                            "rope",
                                            "swiglu_forward",
                                            "swiglu_backward"};

typedef struct {
    cudaEvent_t a, b;
    int op;
} Mark;

static int on = -1;
static Mark *marks;
static size_t nmarks, cap;
static int open_op = -1;

static void report(void) {
    double ms[PROF_OPS] = {0}, total = 0;
    long calls[PROF_OPS] = {0};
    cudaDeviceSynchronize();
    for (size_t i = 0; i < nmarks; i++) {
        float t = 0;
        if (cudaEventElapsedTime(&t, marks[i].a, marks[i].b) == cudaSuccess)
            ms[marks[i].op] += t, calls[marks[i].op]++, total += t;
    }
    fprintf(stderr, "loom cuda profile (device time per op kind, whole run):\n");
    for (int k = 0; k < PROF_OPS; k++)
        if (calls[k])
            fprintf(stderr, "  %-22s %10.1f ms %7ld calls %5.1f%%\n", NAMES[k], ms[k], calls[k],
                    100 * ms[k] / (total > 0 ? total : 1));
    fprintf(stderr, "  %-22s %10.1f ms\n", "total", total);
}

void cu_prof_begin(int op) {
    if (on < 0) {
        on = getenv("LOOM_CUDA_PROFILE") != NULL;
        if (on) atexit(report);
    }
    if (!on || open_op >= 0) return; // nested ops count in the outer one
    marks = xgrow(marks, nmarks, &cap, 4096, sizeof *marks);
    Mark *m = &marks[nmarks];
    CU(cudaEventCreate(&m->a));
    CU(cudaEventCreate(&m->b));
    m->op = op;
    CU(cudaEventRecord(m->a, cu_ctx.stream));
    open_op = op;
}

void cu_prof_end(int op) {
    if (on <= 0 || open_op != op) return;
    CU(cudaEventRecord(marks[nmarks].b, cu_ctx.stream));
    nmarks++;
    open_op = -1;
}
