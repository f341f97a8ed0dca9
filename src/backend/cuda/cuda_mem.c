// cuda_mem.c — the CUDA backend's device memory: every cudaMalloc and cudaFree of the backend
// (the model's buffers, scratch, bf16 weight copies, the cuBLASLt workspace) goes through here,
// so the bytes it holds and their high-water mark are known (cudaMemGetInfo has no high-water
// mark, and counts the context and other processes too).
#include <stdlib.h>

#include "../../common.h"
#include "cuda_impl.h"

typedef struct {
    void *p;
    size_t bytes;
} Held;

static Held *held;
static size_t nheld, capheld, now, peak;

cudaError_t cu_malloc(void **p, size_t bytes) {
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) return e;
    held = xgrow(held, nheld, &capheld, 256, sizeof *held);
    held[nheld++] = (Held){*p, bytes};
    now += bytes;
    if (now > peak) peak = now;
    return e;
}

void cu_free(void *p) {
    if (!p) return;
    for (size_t i = nheld; i-- > 0;) // recent allocations are freed first
        if (held[i].p == p) {
            now -= held[i].bytes;
            held[i] = held[--nheld];
            break;
        }
    CU(cudaFree(p));
}

size_t cu_mem_size(const void *p) {
    for (size_t i = nheld; i-- > 0;)
        if (held[i].p == p) return held[i].bytes;
    return 0;
}

size_t cu_mem_held(void) { return now; }
size_t cu_mem_peak(void) { return peak; }
