// select.c — the one place a backend is chosen from --device (see backend.h).
#include <string.h>

#include "../common.h"
#include "backend.h"

const Backend *backend_select(const char *device, int threads) {
    if (!device || !strcmp(device, "cpu")) {
        backend_cpu_set_threads(threads);
        return backend_cpu();
    }
    if (!strcmp(device, "cuda")) {
        loom_fail("--device cuda: this loom was built without the CUDA backend (make CUDA=1)");
        return NULL;
    }
    loom_fail("--device '%s': unknown device (cpu%s)", device, "");
    return NULL;
}
