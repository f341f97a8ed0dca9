// cuda_nccl.c — the CUDA backend's collectives between devices (backend.h coll_*): NCCL, loaded
// when first asked for (dlopen of $LOOM_NCCL, else libnccl.so.2 on the loader's path and this
// binary's run path), so a CUDA build runs without it and comm then moves device buffers through
// host stages. The few NCCL types and constants used are declared here (NCCL's ABI: nccl.h
// 2.x), so building needs no NCCL either.
//
// Each communicator has a stream of its own (two communicators' ops never queue behind each
// other: ranks may start them in different orders) and a ring of events: an op (or a group)
// first waits for its fence, an event recorded on the compute stream when its collective
// started (a ring of them; one re-recorded since is a later point: a longer wait), so it moves
// what the kernels queued before that wrote and no later kernel holds it up; its ticket is an
// event recorded after it. Ops of one
// communicator complete in order, so a ticket whose event was re-recorded is answered by the
// later op (a longer wait). comm calls every op and test holding its lock; the progress thread
// tests too (each call makes the process's GPU the thread's device first). A write into device
// memory may replace parameters: the bf16 weight cache's generation is bumped when an op is
// queued and when it completes.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common.h"
#include "../backend.h"
#include "cuda_impl.h"

typedef struct ncclComm *ncclComm_t;
typedef struct {
    char internal[128];
} ncclUniqueId;
typedef int ncclResult_t;
enum { ncclSuccess = 0, ncclInProgress = 7 };
enum { ncclInt8 = 0, ncclFloat32 = 7, ncclFloat64 = 8 };
enum { ncclSum = 0, ncclMax = 2 };

#define RING 256
#define FENCES 1024

static struct {
    void *lib;
    ncclResult_t (*version)(int *);
    ncclResult_t (*get_id)(ncclUniqueId *);
    ncclResult_t (*init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*allreduce)(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*bcast)(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*reduce)(const void *, void *, size_t, int, int, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*async_error)(ncclComm_t, ncclResult_t *);
    ncclResult_t (*abort)(ncclComm_t);
    ncclResult_t (*destroy)(ncclComm_t);
    const char *(*error_string)(ncclResult_t);
} L;

char cu_nccl_name[64] = "NCCL";

typedef struct {
    ncclComm_t nc;
    cudaStream_t st;
    cudaEvent_t ring[RING];
    uint64_t next, done; // the last ticket handed out; every ticket <= done has completed
    int in_group, group_failed;
} Nc;

static int nccl_fail(ncclResult_t r, const char *what) {
    return loom_fail("NCCL %s: %s", what, L.error_string ? L.error_string(r) : "error");
}

// Loads the library once: 0, or -1 + loom_errmsg naming what was looked for.
static int load(void) {
    static int state; // 0: not tried, 1: loaded, -1: failed
    static char why[512];
    if (state) return state > 0 ? 0 : loom_fail("%s", why);
    const char *path =
        getenv("LOOM_NCCL") && *getenv("LOOM_NCCL") ? getenv("LOOM_NCCL") : "libnccl.so.2";
    L.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    struct {
        void **fn;
        const char *name;
    } syms[] = {{(void **)&L.version, "ncclGetVersion"},
                {(void **)&L.get_id, "ncclGetUniqueId"},
                {(void **)&L.init_rank, "ncclCommInitRank"},
                {(void **)&L.allreduce, "ncclAllReduce"},
                {(void **)&L.bcast, "ncclBroadcast"},
                {(void **)&L.reduce, "ncclReduce"},
                {(void **)&L.group_start, "ncclGroupStart"},
                {(void **)&L.group_end, "ncclGroupEnd"},
                {(void **)&L.async_error, "ncclCommGetAsyncError"},
                {(void **)&L.abort, "ncclCommAbort"},
                {(void **)&L.destroy, "ncclCommDestroy"},
                {(void **)&L.error_string, "ncclGetErrorString"}};
    const char *missing = NULL;
    for (size_t i = 0; L.lib && i < sizeof syms / sizeof syms[0] && !missing; i++)
        if (!(*syms[i].fn = dlsym(L.lib, syms[i].name))) missing = syms[i].name;
    if (!L.lib || missing) {
        snprintf(why, sizeof why,
                 "NCCL: %s%s%s (set LOOM_NCCL to the path of libnccl.so.2, e.g. the one in "
                 "PyTorch's nvidia/nccl/lib)",
                 L.lib ? "no " : "", L.lib ? missing : dlerror(), L.lib ? " in it" : "");
        state = -1;
        return loom_fail("%s", why);
    }
    int v = 0;
    L.version(&v); // 2.9 and later: major * 10000 + minor * 100 + patch
    snprintf(cu_nccl_name, sizeof cu_nccl_name, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    state = 1;
    return 0;
}

int cu_coll_usable(void) { return load(); }

// The host and the GPU's PCI bus id: the same physical GPU whatever CUDA_VISIBLE_DEVICES each
// process was given.
void cu_coll_device(char *key, size_t n) {
    char host[256] = "?", bus[64] = "?";
    gethostname(host, sizeof host - 1);
    cudaDeviceGetPCIBusId(bus, sizeof bus, cu_ctx.device);
    snprintf(key, n, "%s %s", host, bus);
}

int cu_coll_id(unsigned char *id) {
    if (load()) return -1;
    ncclUniqueId u;
    ncclResult_t r = L.get_id(&u);
    if (r != ncclSuccess) return nccl_fail(r, "ncclGetUniqueId");
    memcpy(id, u.internal, sizeof u.internal);
    return 0;
}

void *cu_coll_open(const unsigned char *id, int n, int rank) {
    if (load()) return NULL;
    cu_thread_device();
    Nc *c = xcalloc(1, sizeof *c);
    ncclUniqueId u;
    memcpy(u.internal, id, sizeof u.internal);
    ncclResult_t r = L.init_rank(&c->nc, n, u, rank);
    if (r != ncclSuccess) {
        free(c);
        nccl_fail(r, "ncclCommInitRank");
        return NULL;
    }
    CU(cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking));
    for (int i = 0; i < RING; i++)
        CU(cudaEventCreateWithFlags(&c->ring[i], cudaEventDisableTiming));
    return c;
}

static pthread_mutex_t fence_mu = PTHREAD_MUTEX_INITIALIZER;
static cudaEvent_t fences[FENCES];
static uint64_t nfences;

uint64_t cu_coll_fence(void) {
    cu_thread_device();
    pthread_mutex_lock(&fence_mu);
    if (!nfences)
        for (int i = 0; i < FENCES; i++)
            CU(cudaEventCreateWithFlags(&fences[i], cudaEventDisableTiming));
    uint64_t f = ++nfences;
    CU(cudaEventRecord(fences[f % FENCES], cu_ctx.stream));
    pthread_mutex_unlock(&fence_mu);
    return f;
}

// The communicator's stream waits for the compute stream's ops before the fence.
static void after_fence(Nc *c, uint64_t fence) {
    cu_thread_device();
    cu_gen_bump();
    pthread_mutex_lock(&fence_mu);
    CU(cudaStreamWaitEvent(c->st, fences[fence % FENCES], 0));
    pthread_mutex_unlock(&fence_mu);
}

// The ticket of the op just queued (0 inside a group), or 0 + loom_errmsg when it failed.
static uint64_t queued(Nc *c, ncclResult_t r, const char *what) {
    if (r != ncclSuccess) {
        nccl_fail(r, what);
        c->group_failed |= c->in_group; // the group's end reports it
        return 0;
    }
    if (c->in_group) return 0;
    uint64_t t = ++c->next;
    CU(cudaEventRecord(c->ring[t % RING], c->st));
    return t;
}

static int dtype_of(int dtype) {
    return dtype == COLL_F64 ? ncclFloat64 : dtype == COLL_BYTES ? ncclInt8 : ncclFloat32;
}

uint64_t cu_coll_allreduce(void *cp, uint64_t fence, void *buf, size_t n, int dtype, int op) {
    Nc *c = cp;
    if (!c->in_group) after_fence(c, fence);
    return queued(
        c,
        L.allreduce(buf, buf, n, dtype_of(dtype), op == COLL_MAX ? ncclMax : ncclSum, c->nc, c->st),
        "ncclAllReduce");
}

uint64_t cu_coll_bcast(void *cp, uint64_t fence, void *buf, size_t n, int dtype, int root) {
    Nc *c = cp;
    if (!c->in_group) after_fence(c, fence);
    return queued(c, L.bcast(buf, buf, n, dtype_of(dtype), root, c->nc, c->st), "ncclBroadcast");
}

uint64_t cu_coll_reduce(void *cp, const float *send, float *recv, size_t n, int root) {
    Nc *c = cp; // (in a group: coll_group_begin waited for the fence)
    return queued(c, L.reduce(send, recv, n, ncclFloat32, ncclSum, root, c->nc, c->st),
                  "ncclReduce");
}

void cu_coll_group_begin(void *cp, uint64_t fence) {
    Nc *c = cp;
    after_fence(c, fence);
    L.group_start();
    c->in_group = 1;
}

uint64_t cu_coll_group_end(void *cp) {
    Nc *c = cp;
    c->in_group = 0;
    uint64_t t = queued(c, L.group_end(), "ncclGroupEnd");
    if (c->group_failed) c->group_failed = 0, t = 0; // loom_errmsg: the op that failed
    return t;
}

int cu_coll_test(void *cp, uint64_t t) {
    Nc *c = cp;
    if (t <= c->done) return 1;
    cu_thread_device();
    cudaError_t e = cudaEventQuery(c->ring[t % RING]);
    if (e == cudaSuccess) {
        c->done = t;   // (t > done: tested above)
        cu_gen_bump(); // what landed may be parameters
        return 1;
    }
    if (e != cudaErrorNotReady) return loom_fail("NCCL op's completion: %s", cudaGetErrorString(e));
    ncclResult_t a = ncclSuccess;
    L.async_error(c->nc, &a);
    if (a != ncclSuccess && a != ncclInProgress) return nccl_fail(a, "asynchronous error");
    return 0;
}

void cu_coll_abort(void *cp) {
    Nc *c = cp;
    if (c && L.abort) L.abort(c->nc);
}

void cu_coll_close(void *cp) {
    Nc *c = cp;
    if (!c) return;
    cu_thread_device();
    CU(cudaStreamSynchronize(c->st));
    L.destroy(c->nc);
    for (int i = 0; i < RING; i++)
        CU(cudaEventDestroy(c->ring[i]));
    CU(cudaStreamDestroy(c->st));
    free(c);
}
