// test_cuda_nccl.c — collectives between devices on the GPU (src/backend/cuda/cuda_nccl.c under
// comm: comm_device_collectives' mode 1, --device-comm nccl) with one process: a one-member NCCL
// communicator still runs every operation (no size-1 shortcut), so this exercises the library
// path — loading, the unique id, init, each op and group on the communicator's stream after
// the compute stream, the event tickets — on one GPU. With one member every sum and broadcast
// leaves its buffer as it was and a reduce-scatter copies; the buffers are written by a kernel
// just before each operation, so an op that did not wait for the compute stream reads stale
// values. tests/test_devcoll.c proves comm's side with a stand-in library on 3 ranks.
// Skips without a GPU, or when NCCL does not load (LOOM_NCCL names libnccl.so.2).
#include "../../src/parallel/comm_impl.h"
#include "gpu_test.h"

TEST(one_member_nccl) {
    size_t n = 3000, m = 700;
    float *h = h_rand(n, 1.f), *hs = h_rand(m, 1.f);
    float *t = d_from(h, n), *ts = d_from(hs, m);
    float *d = d_poison(n), *ds = d_poison(m), *dr = d_poison(m), *dmax = d_poison(n);
    // the compute stream writes the inputs (copies queued on it) right before the operations
    gpu->copy(d, t, n), gpu->copy(dmax, t, n), gpu->copy(ds, ts, m);
    const Comm *W = comm_world(NULL, NULL);
    CHECK(comm_allreduce(W, d, n) == 0 && comm_allreduce_max(W, dmax, n) == 0, "sums");
    size_t cnt[1] = {m}, dsp[1] = {0};
    CommReq rs = comm_ireduce_scatter(W, ds, dr, cnt), ag = comm_iallgatherv(W, d, cnt, dsp);
    CHECK(comm_wait(&rs) == 0 && comm_wait(&ag) == 0, "layouts: %s", loom_errmsg());
    char bytes[4097];
    for (int i = 0; i < 4097; i++)
        bytes[i] = (char)(i * 13);
    float *db = gpu->alloc(1025);
    gpu->copy_wait(gpu->copy_async(db, bytes, sizeof bytes));
    comm_broadcast(W, db, sizeof bytes, 0);
    char back[4097];
    gpu->copy_wait(gpu->copy_async(back, db, sizeof back));
    float *r = h_from_d(d, n), *rm = h_from_d(dmax, n), *rr = h_from_d(dr, m);
    int bad = memcmp(back, bytes, sizeof bytes) != 0;
    for (size_t i = 0; i < n; i++)
        bad += r[i] != h[i] || rm[i] != h[i];
    for (size_t i = 0; i < m; i++)
        bad += rr[i] != hs[i];
    CHECK(bad == 0, "%d wrong values over one member", bad);
    free(h), free(hs), free(r), free(rm), free(rr);
    gpu->release(d), gpu->release(ds), gpu->release(dr), gpu->release(dmax), gpu->release(db);
    gpu->release(t), gpu->release(ts);
}

int main(void) {
    gpu_open("test_cuda_nccl", "cuda:fp32");
    comm_world(NULL, NULL);
    comm_set_backend(gpu);
    const char *engine = NULL;
    if (comm_device_collectives(1, &engine)) {
        printf("skip - test_cuda_nccl: %s\n", loom_errmsg());
        return 0;
    }
    printf("  %s\n", engine);
    RUN(one_member_nccl);
    comm_finalize();
    return test_summary();
}
