// comm_stage.c — device buffers through host stages. MPI (Debian's Open MPI is not CUDA-aware)
// reads and writes host memory only, so a buffer of a backend whose memory the host cannot touch
// (a GPU's; Backend.owns says which pointers are its) is moved piece by piece: the piece is
// downloaded into a host stage, MPI moves the stage, and what arrived is uploaded back
// (device → host → MPI → host → device). The collectives (comm_jobs.c) and point-to-point
// messages (comm.c) ask comm_dev() of every buffer and stage those it owns; host buffers (the
// loss sums, the strategies' own host arrays) go to MPI as before.
//
// On a GPU the copies run on the backend's one stream, in the order they are issued: a piece's
// download follows every kernel the training thread queued before it started the operation (so
// it reads the finished values), and comm_wait returns only after the last upload was queued, so
// the kernels queued after it read the result. Copies may run on the progress thread: the
// backend's upload and download must be callable from any thread.
#include <string.h>

#include "../backend/backend.h"
#include "../common.h"
#include "../testhooks.h"
#include "comm_impl.h"

static const Backend *dev_be; // NULL, or a backend whose buffers are not host memory

void comm_set_backend(const Backend *be) {
    dev_be = be && !be->host_memory && !testhook_comm_no_stage() ? be : NULL;
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
    dev_be->download(host, dev, floats_of(bytes, "comm: a device piece to the host"));
}

void comm_to_dev(void *dev, const void *host, size_t bytes) {
    if (!comm_dev(dev)) {
        memcpy(dev, host, bytes);
        return;
    }
    dev_be->upload(dev, host, floats_of(bytes, "comm: a host piece to the device"));
}

void comm_copy_any(void *dst, const void *src, size_t bytes) {
    if (comm_dev(dst) || comm_dev(src))
        dev_be->copy(dst, src, floats_of(bytes, "comm: a copy on the device"));
    else
        memmove(dst, src, bytes);
}
