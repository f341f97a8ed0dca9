// comm_devcoll.c — collectives between devices (comm.h comm_device_collectives): a device
// communicator of the backend's collective library (Backend.coll_*: NCCL under CUDA) beside
// each MPI communicator, its unique id made by the communicator's rank 0 and broadcast over MPI.
// comm_jobs.c queues a collective's pieces on it when every buffer of the job is device memory;
// this file opens, finds, aborts and closes them. No MPI calls here (the broadcast and the
// agreement are comm.h's own operations).
//
// Opening is collective over each communicator (the library's init waits for every member), so
// every rank opens them in one order: the order the communicators were made, which MPI's
// comm_split already makes the same on every rank; each rank opens those it is a member of.
#include <stdlib.h>
#include <string.h>

#include "../backend/backend.h"
#include "../common.h"
#include "comm_impl.h"

static const Backend *cbe; // the backend whose collectives are on
static int single;         // mode 1: one-member communicators get one too (no size-1 shortcut)
static Comm **reg;         // every communicator made, in order
static size_t nreg, capreg;

// Opens c's device communicator: rank 0 makes the id, the others receive it (and whether
// making it failed). 0 or -1 (loom_errmsg).
static int open_dc(Comm *c) {
    if (c->dc || c->size < 1 || (c->size == 1 && !single)) return 0;
    unsigned char msg[1 + COLL_ID_BYTES] = {0};
    if (c->rank == 0 && cbe->coll_id(msg + 1)) msg[0] = 1;
    comm_broadcast(c, msg, sizeof msg, 0);
    if (msg[0])
        return c->rank == 0 ? -1
                            : loom_fail("%s communicator: its rank 0 could not make a %s id",
                                        c->name, cbe->coll_name);
    c->dc = cbe->coll_open(msg + 1, c->size, c->rank);
    return c->dc ? 0 : -1;
}

void comm_dc_register(Comm *c) {
    reg = xgrow(reg, nreg, &capreg, 16, sizeof *reg);
    reg[nreg++] = c;
    if (cbe && open_dc(c))
        die(EXIT_IO, "%s communicator: %s: %s", c->name, cbe->coll_name, loom_errmsg());
}

// Two ranks of the world on one physical device (the library needs a device each): 1 with
// loom_errmsg naming them, else 0. Every rank gathers every rank's device name, so all decide
// alike.
enum { KEY_FLOATS = 32 }; // 128 bytes of name per rank
static int shared_device(const Backend *be, const Comm *world) {
    size_t n = (size_t)world->size, *counts = xmalloc(n * sizeof *counts);
    float *keys = xcalloc(n * KEY_FLOATS, sizeof *keys);
    for (size_t r = 0; r < n; r++)
        counts[r] = KEY_FLOATS;
    be->coll_device((char *)(keys + (size_t)world->rank * KEY_FLOATS), KEY_FLOATS * 4 - 1);
    int rc = comm_allgatherv(world, keys, counts, NULL) ? -1 : 0;
    for (size_t a = 0; !rc && a < n; a++)
        for (size_t b = a + 1; !rc && b < n; b++) {
            const char *ka = (const char *)(keys + a * KEY_FLOATS);
            if (!strncmp(ka, (const char *)(keys + b * KEY_FLOATS), KEY_FLOATS * 4))
                rc = loom_fail("ranks %zu and %zu share one device (%.*s): %s needs a device "
                               "per rank (--device-comm host stages through host memory)",
                               a, b, KEY_FLOATS * 4, ka, be->coll_name);
        }
    free(counts), free(keys);
    return rc ? 1 : 0;
}

int comm_device_collectives(int mode, const char **engine) {
    const Backend *be = comm_stage_backend();
    Comm *world = nreg ? reg[0] : NULL;
    if (engine) *engine = "host stages";
    // (auto without the library: every rank runs the same backend, nothing to agree on)
    int lib = be && backend_supports(be, BACKEND_COLLECTIVES);
    if (!mode || !world || (mode < 0 && (world->size < 2 || !lib))) return 0;
    // every rank must agree: one that may not use them turns them off for all (auto) or fails
    float bad = !lib ? 2.f : be->coll_usable() ? 1.f : 0.f;
    char why[512] = "";
    if (bad == 1.f) snprintf(why, sizeof why, "%s", loom_errmsg());
    if (world->size > 1 && comm_allreduce_max(world, &bad, 1)) return -1;
    if (bad > 0 && mode < 0) return 0;
    if (bad > 0)
        return loom_fail("--device-comm nccl: %s",
                         bad == 2.f ? "the backend has no collective library between devices "
                                      "(NCCL comes with --device cuda)"
                         : *why     ? why
                                    : "another rank cannot use it (see its message)");
    if (world->size > 1 && shared_device(be, world)) {
        if (mode < 0) return 0;
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", loom_errmsg());
        return loom_fail("--device-comm nccl: %s", msg);
    }
    cbe = be, single = mode > 0;
    for (size_t i = 0; i < nreg; i++)
        if (open_dc(reg[i])) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", loom_errmsg());
            return loom_fail("%s communicator: %s: %s", reg[i]->name, cbe->coll_name, msg);
        }
    if (engine) *engine = cbe->coll_name;
    return 0;
}

const Backend *comm_dc_backend(void) { return cbe; }

int comm_dc_failed(const char *msg, const char *op, const Comm *c) {
    char full[1400];
    snprintf(full, sizeof full, "%s on %s communicator (%s) failed at step %d (%s): %s", op,
             c->name, cbe ? cbe->coll_name : "device collectives", comm_ctx_step, comm_ctx_what,
             msg);
    return comm_op_failed(6, full);
}

void *comm_dc_for(const Comm *c, const void *const *bufs, int n) {
    if (!cbe || !c || !c->dc) return NULL;
    int any = 0;
    for (int i = 0; i < n; i++) {
        if (!bufs[i]) continue;
        if (!comm_dev(bufs[i])) return NULL;
        any = 1;
    }
    return any ? c->dc : NULL;
}

void comm_dc_abort_all(void) {
    for (size_t i = 0; cbe && i < nreg; i++)
        if (reg[i]->dc) cbe->coll_abort(reg[i]->dc), reg[i]->dc = NULL;
}

void comm_dc_close_all(void) {
    for (size_t i = 0; cbe && i < nreg; i++)
        if (reg[i]->dc) cbe->coll_close(reg[i]->dc), reg[i]->dc = NULL;
    cbe = NULL;
}
