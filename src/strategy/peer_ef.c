// peer_ef.c — a peer's error-feedback buffer (--outer-compress int8|topk, swarm/compress.h)
// in its checkpoint: peer_ef.bin next to peer_state.bin, one array of P floats, so that a
// resumed peer adds to its next Δ exactly what its last compression dropped.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common.h"
#include "../io/checkpoint.h"
#include "../swarm/spill.h"
#include "strat_peer.h"

int peer_ef_save(const char *step_dir, const float *ef, size_t P) {
    char path[4300];
    if (path_fmt(path, sizeof path, "%s/peer_ef.bin", step_dir)) return -1;
    float *arrays[1] = {(float *)ef};
    return state_file_write_fn(path, "peer-ef", 0, 1, &P, 1, peer_arrays_fetch, arrays);
}

int peer_ef_load(const char *dir, float *ef, size_t P, const char *peer_id) {
    char path[4300];
    if (path_fmt(path, sizeof path, "%s/peer_ef.bin", dir)) return -1;
    if (access(path, F_OK)) {
        memset(ef, 0, P * sizeof(float));
        fprintf(stderr,
                "loom peer %s: %s holds no error feedback (peer_ef.bin): --outer-compress "
                "starts with none\n",
                peer_id, dir);
        return 0;
    }
    float *arrays[1] = {ef};
    return state_file_read_fn(path, "peer-ef", 0, 1, &P, 1, peer_arrays_store, arrays);
}

// The state files' windows, from and into the arrays (ctx: float *[]); each window of a spilled
// array leaves the resident set once copied (swarm/spill.h).
int peer_arrays_fetch(void *ctx, int array, size_t at, size_t n, float *dst) {
    const float *a = ((float **)ctx)[array] + at;
    memcpy(dst, a, n * sizeof(float));
    spill_drop(a, n * sizeof(float));
    return 0;
}

int peer_arrays_store(void *ctx, int array, size_t at, size_t n, const float *src) {
    float *a = ((float **)ctx)[array] + at;
    memcpy(a, src, n * sizeof(float));
    spill_drop(a, n * sizeof(float));
    return 0;
}
