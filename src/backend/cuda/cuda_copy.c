// cuda_copy.c — the CUDA backend's copy stream (backend.h BACKEND_COPY_STREAM): page-locked host
// memory, and copies between host and device memory on a stream of their own, so that block
// swapping (offload/tier_host.c) moves a unit while the compute stream runs another.
//
// Order: each copy first waits (cudaStreamWaitEvent) for an event recorded on the compute stream
// when it is queued, so it reads what the ops queued before it wrote and overwrites nothing they
// still read; copies run in queue order on the one copy stream. A ticket is an event recorded
// after its copy, in a ring of RING events: a ticket whose event has been re-recorded for a later
// copy is waited for through that later one (every copy before it is then complete too).
#include <cuda_runtime.h>
#include <pthread.h>
#include <string.h>

#include "../../common.h"
#include "cuda_impl.h"

#define RING 1024

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t copy_stream;
static cudaEvent_t before, ring[RING];
static uint64_t issued, done; // tickets handed out; every ticket <= done has completed

static void start(void) {
    if (copy_stream) return;
    CU(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
    CU(cudaEventCreateWithFlags(&before, cudaEventDisableTiming));
    for (int i = 0; i < RING; i++)
        CU(cudaEventCreateWithFlags(&ring[i], cudaEventDisableTiming));
}

void *cu_host_alloc(size_t bytes) {
    void *p = NULL;
    if (!bytes) bytes = 1;
    cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess)
        die(EXIT_IO, "out of page-locked host memory allocating %zu bytes (%s)", bytes,
            cudaGetErrorString(e));
    memset(p, 0, bytes);
    return p;
}

void cu_host_free(void *p) {
    if (p) CU(cudaFreeHost(p));
}

uint64_t cu_copy_async(void *dst, const void *src, size_t bytes) {
    cu_thread_device();
    pthread_mutex_lock(&mu);
    start();
    CU(cudaEventRecord(before, cu_ctx.stream));
    CU(cudaStreamWaitEvent(copy_stream, before, 0));
    if (bytes) CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, copy_stream));
    uint64_t t = ++issued;
    CU(cudaEventRecord(ring[t % RING], copy_stream));
    cu_gen_bump(); // a device buffer may hold new parameters: cached bf16 copies are stale
    pthread_mutex_unlock(&mu);
    return t;
}

void cu_copy_wait(uint64_t t) {
    cu_thread_device();
    pthread_mutex_lock(&mu);
    if (t > done && t <= issued) {
        CU(cudaEventSynchronize(ring[t % RING]));
        done = t;
    }
    pthread_mutex_unlock(&mu);
}

int cu_copy_done(uint64_t t) {
    cu_thread_device();
    pthread_mutex_lock(&mu);
    int ok = t <= done || t > issued;
    if (!ok) {
        cudaError_t e = cudaEventQuery(ring[t % RING]);
        if (e != cudaErrorNotReady) CU(e), ok = 1, done = t;
    }
    pthread_mutex_unlock(&mu);
    return ok;
}
