// comm_impl.h — what comm.c (the MPI side: operations, the job queue, heartbeat messages) and
// comm_watchdog.c (waits, the watchdog, busy sections; no MPI) share. Not for other files.
#pragma once
#include <stdatomic.h>
#include <stddef.h>

#include "comm.h"

// How far an operation has got, as comm_wait's watchdog sees it.
typedef struct {
    double progress; // last time the operation advanced (a piece completed; start otherwise)
    long pieces_done, pieces;
} CommProgress;

// comm.c
// A non-blocking send (send = 1) or receive of n floats; dies on n or tag out of MPI's range.
CommReq comm_p2p(const Comm *c, const float *buf, size_t n, int peer, int tag, int send);
// comm_test, also reporting the operation's progress (when it is not done yet).
int comm_test_progress(CommReq *r, CommProgress *pr);
// Receives the heartbeats waiting on c (comm_busy_begin on a peer); returns how many.
int comm_heartbeats_recv(const Comm *c);
// Sends one heartbeat to every other member of c.
void comm_heartbeats_send(const Comm *c);
// The world ranks of c's members other than this rank, e.g. "1 2 3" ("" if not known now).
void comm_other_members(const Comm *c, char *out, size_t n);
// MPI is up with more than one rank, and may be called from other threads (under the lock).
int comm_threads_ok(void);
// Point-to-point requests and collectives started and not collected yet (for tests).
int comm_outstanding(void);
// Layouts of reduce-scatters and all-gathers spanning more than n elements (default INT_MAX)
// are all-gathered through a stage buffer (for tests).
void comm_set_int_limit(size_t n);
// An operation failed: the handler hears it (and, over MPI, ends the job); -1 if it returns.
int comm_op_failed(int code, const char *msg);

// comm_stage.c: device buffers through host stages
// 1 when p is device memory of the backend given to comm_set_backend (the host cannot touch it).
int comm_dev(const void *p);
// bytes from dev (device or host memory) to host memory, and back; whole floats when device.
void comm_to_host(void *host, const void *dev, size_t bytes);
// A host stage of `bytes` (page-locked and pooled where the backend has a copy stream, else
// malloc'd), and its return.
void *comm_stage_alloc(size_t bytes);
void comm_stage_free(void *p);
void comm_to_dev(void *dev, const void *host, size_t bytes);
// dst = src, either of them device or host memory.
void comm_copy_any(void *dst, const void *src, size_t bytes);

// The backend given to comm_set_backend when its buffers are device memory (else NULL).
const struct Backend *comm_stage_backend(void);

// comm_devcoll.c: collectives between devices (comm_device_collectives)
// Every communicator made (comm_world's, comm_split's) is registered; once collectives between
// devices are on, registering opens c's device communicator (collective over c).
void comm_dc_register(Comm *c);
// The backend whose collectives are on (NULL: off).
const struct Backend *comm_dc_backend(void);
// c's device communicator when each of the n buffers (NULL ones skipped) is device memory, else
// NULL (the operation goes over MPI).
void *comm_dc_for(const Comm *c, const void *const *bufs, int n);
// Ends every device communicator that is open (the job is ending: comm_abort), or closes them
// (comm_finalize).
void comm_dc_abort_all(void);
void comm_dc_close_all(void);
// An operation on a device communicator failed with the library's error msg: reported as
// comm_check reports an MPI error (comm_op_failed); -1 if the handler returns.
int comm_dc_failed(const char *msg, const char *op, const Comm *c);

// comm_watchdog.c
extern double comm_timeout_s;
extern int comm_ctx_step;
extern const char *comm_ctx_what;
// LOOM_COMM_DELAY: the emulated link time of a collective of n elements (0: none).
double comm_link_delay(size_t n);
// The most elements one piece of a collective moves (LOOM_COMM_CHUNK, at most INT_MAX).
size_t comm_chunk_limit(void);
extern atomic_int comm_progress_on; // the progress thread runs (cleared: it stops)
void comm_stop_progress_thread(void);
