// comm_stage.c — device buffers through host stages. MPI (Debian's Open MPI is not CUDA-aware)
// reads and writes host memory only, so a buffer of a backend whose memory the host cannot touch
// (a GPU's; Backend.owns says which pointers are its) is moved piece by piece: the piece is
// downloaded into a host stage, MPI moves the stage, and what arrived is uploaded back
// (device → host → MPI → host → device). The collectives (comm_jobs.c) and point-to-point
// messages (comm.c) ask comm_dev() of every buffer and stage those it owns; host buffers (the
// loss sums, the strategies' own host arrays) go to MPI as before.
//
// Where the backend has a copy stream (BACKEND_COPY_STREAM: CUDA), the stages are page-locked
// host memory from a pool that keeps what jobs release (page-locking is slow: a buffer is locked
// once and reused), and each copy runs on the copy stream after the kernels queued before it and
// is waited for at once: a download reads the finished values without holding up the kernels
// queued after it, and an upload is complete before the piece retires, so the kernels queued
// after comm_wait read the result. Without a copy stream the copies run on the backend's stream
// through upload and download (which order them the same way) and the stages are malloc'd.
// Copies may run on the progress thread: the backend's copy ops must be callable from any
// thread.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/backend.h"
#include "../common.h"
#include "../testhooks.h"
#include "comm_impl.h"

static const Backend *dev_be; // NULL, or a backend whose buffers are not host memory
static int copy_stream;       // dev_be has a copy stream: page-locked stages, copies on it

void comm_set_backend(const Backend *be) {
    dev_be = be && !be->host_memory && !testhook_comm_no_stage() ? be : NULL;
    copy_stream = dev_be && backend_supports(dev_be, BACKEND_COPY_STREAM);
}

const Backend *comm_stage_backend(void) { return dev_be; }

// ---- the stages' pool: page-locked buffers, each either lent to a job or free
typedef struct {
    void *p;
    size_t bytes;
    int lent;
} Stage;
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static Stage *pool;
static size_t npool, cappool;

void *comm_stage_alloc(size_t bytes) {
    if (!copy_stream) return xmalloc(bytes ? bytes : 1);
    size_t want = (size_t)64 << 10; // sizes in powers of two from 64 KiB: fewer distinct ones
    while (want < bytes)
        want *= 2;
    pthread_mutex_lock(&pool_mu);
    Stage *best = NULL;
    for (size_t i = 0; i < npool; i++)
        if (!pool[i].lent && pool[i].bytes >= want && (!best || pool[i].bytes < best->bytes))
            best = &pool[i];
    if (!best) {
        pool = xgrow(pool, npool, &cappool, 32, sizeof *pool);
        best = &pool[npool++];
        *best = (Stage){.p = dev_be->host_alloc(want), .bytes = want};
    }
    best->lent = 1;
    void *p = best->p;
    pthread_mutex_unlock(&pool_mu);
    return p;
}

void comm_stage_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&pool_mu);
    for (size_t i = 0; i < npool; i++)
        if (pool[i].p == p) {
            pool[i].lent = 0;
            pthread_mutex_unlock(&pool_mu);
            return;
        }
    pthread_mutex_unlock(&pool_mu);
    free(p); // malloc'd: no copy stream
}

int comm_dev(const void *p) { return p && dev_be && dev_be->owns && dev_be->owns(p); }

// The backend moves floats: every device buffer comm is given is a float (or double) array.
static size_t floats_of(size_t bytes, const char *what) {
    if (bytes % sizeof(float))
        die(EXIT_USAGE, "%s: %zu bytes of device memory, not whole floats", what, bytes);
    return bytes / sizeof(float);
}

void comm_to_host(void *host, const void *dev, size_t bytes) {
    if (!comm_dev(dev)) {
        memcpy(host, dev, bytes);
        return;
    }
    size_t n = floats_of(bytes, "comm: a device piece to the host");
    if (copy_stream)
        dev_be->copy_wait(dev_be->copy_async(host, dev, n * sizeof(float)));
    else
        dev_be->download(host, dev, n);
}

void comm_to_dev(void *dev, const void *host, size_t bytes) {
    if (!comm_dev(dev)) {
        memcpy(dev, host, bytes);
        return;
    }
    size_t n = floats_of(bytes, "comm: a host piece to the device");
    if (copy_stream)
        dev_be->copy_wait(dev_be->copy_async(dev, host, n * sizeof(float)));
    else
        dev_be->upload(dev, host, n);
}

void comm_copy_any(void *dst, const void *src, size_t bytes) {
    if (comm_dev(dst) || comm_dev(src))
        dev_be->copy(dst, src, floats_of(bytes, "comm: a copy on the device"));
    else
        memmove(dst, src, bytes);
}
