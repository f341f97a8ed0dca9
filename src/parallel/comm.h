// comm.h — the one thin communication layer over MPI (Open MPI). Nothing else in loom
// includes mpi.h. Every operation has a non-blocking form returning a CommReq; the blocking
// forms are the non-blocking ones plus comm_wait, so every wait runs under the watchdog.
//
// The watchdog (comm_wait) fires when the operation waited on makes no progress for
// --comm-timeout seconds: the rank prints the operation, step and the other ranks it waits on
// and the job ends (never a silent hang). What counts as progress is what Open MPI lets us
// observe: it has no byte counters for one operation (MPI_T has none per request in 4.1), but a
// request's completion is visible. So every collective is moved as a queue of pieces of at most
// LOOM_COMM_CHUNK elements (default 2^20 floats, 4 MiB; a broadcast 4 MiB of bytes), and a
// piece completing is progress. A slow link that keeps moving data never fires the watchdog as
// long as one piece moves within the timeout; a dead, stopped (SIGSTOP) or stuck peer, or ranks
// deadlocked in mismatched operations, make no progress and fire it. A piece count of an int
// also keeps collectives over > 2^31 elements within MPI's int counts (this MPI is 3.1: no
// large-count functions). Progress is also:
//   - a piece of a collective queued before it on the same communicator (it cannot start
//     before those have);
//   - a heartbeat from a peer in a busy section (comm_busy_begin): local work, such as
//     writing a checkpoint, that the other ranks' next operation waits for.
// A reduce-scatter or all-gather moves slices of every member's block per piece (layouts are
// size_t; one spanning more than 2^31 elements is gathered through a staging buffer, as MPI's
// displacements are ints). A point-to-point message is one piece: its deadline runs from its
// start.
//
// Without mpirun or srun (no OMPI_COMM_WORLD_SIZE / PMIX_RANK / PMI_RANK in the environment)
// MPI is never initialised and
// every communicator has one rank, so the same binary runs as a plain single process.
#pragma once
#include <stddef.h>

typedef struct {
    void *handle; // MPI_Comm (NULL for the single-process world)
    int rank, size;
    const char *name; // "world", "dp", "pp", "tp" (for watchdog messages)
    void *dc;         // its device communicator (comm_device_collectives), or NULL
} Comm;

typedef struct {
    void *handle; // MPI_Request (point to point), or the queued job of a collective (chunked = 1)
    int chunked;
    const char *op;
    const Comm *comm;
    double started;
    int status;       // once complete: 0, or -1 when the operation failed (see below)
    int contributors; // once complete: members whose data is in the result (the group's size
                      // as the operation saw it; read this, never a size cached earlier)
} CommReq;

// Failure reporting. An operation that fails (an MPI error, or the watchdog finding no
// progress) calls the failure handler with an exit code and a message naming the operation,
// communicator, peers and step. A handler that returns makes the operation complete with
// status -1 and the members that did contribute (a transport where peers may leave); the MPI
// implementation cannot go on after a failure, so the strategies over it end the job in their
// handler. With no handler installed the job ends (comm_abort).
typedef void (*CommFailureFn)(void *ctx, int code, const char *msg);
void comm_set_failure_handler(CommFailureFn fn, void *ctx);
// The world ranks that contributed to a completed operation (at most max); returns the count.
int comm_req_members(const CommReq *r, int *world_ranks, int max);

// Initialises MPI when launched by mpirun; returns the world communicator (size 1 otherwise).
Comm *comm_world(int *argc, char ***argv);
int comm_distributed(void);
void comm_finalize(void);
// The MPI library's version line (e.g. "Open MPI v4.1.4, package: ..."), for `loom --version`.
void comm_library_version(char *out, size_t n);
// Starts a thread that drives outstanding non-blocking operations every interval_s seconds
// (Open MPI progresses them only inside MPI calls). Returns 1 if it runs (MPI with > 1 rank).
int comm_start_progress_thread(double interval_s);
// Aborts every rank of the job with the given exit status after printing msg.
_Noreturn void comm_abort(int code, const char *msg);
// Splits `parent` into sub-communicators: ranks with the same color, ordered by key. Collective
// over parent; a rank passing a negative color joins none (the result has size 0).
Comm *comm_split(const Comm *parent, int color, int key, const char *name);

// Watchdog: seconds a wait may go without progress (0 = forever), and what the program is
// doing (printed when the watchdog fires).
void comm_set_timeout(double seconds);
void comm_set_context(int step, const char *what);
// A busy section: this rank does local work (e.g. writes a checkpoint) that the other members
// of c will wait for in their next operation on c. Until comm_busy_end a thread sends them a
// heartbeat every min(timeout/4, 1 s), which their watchdog counts as progress. One at a time.
void comm_busy_begin(const Comm *c);
void comm_busy_end(void);
// A token to every other member of c, sent and forgotten, and how many arrived here since the
// last call (consumed): a notice that needs no matching receive (a stop request, stop_agree.h).
// Tokens ride on c's heartbeat tag, so give notices a communicator of their own.
void comm_notify(const Comm *c);
int comm_notified(const Comm *c);
// The largest tag comm_isend/comm_irecv accept: MPI_TAG_UB less one (the top tag carries the
// heartbeats), at least 32766. LOOM_TAG_UB lowers it for tests.
int comm_tag_ub(void);

// Device buffers. MPI reads host memory only: after comm_set_backend(be) with a backend whose
// buffers are not host memory (a GPU's), every buffer an operation below is given that the
// backend owns (Backend.owns) moves through host stages, a piece at a time (comm_stage.c);
// host buffers go as they are. NULL (the default), or a host-memory backend: every buffer is
// host memory. Call it before the first operation on a device buffer.
struct Backend;
void comm_set_backend(const struct Backend *be);

// Collectives between devices (the backend's coll_* ops: NCCL under CUDA). mode 0: every device
// buffer moves through host stages (above); 1: through the backend's collectives (an error
// when it has none, or when this or another rank may not use them: processes sharing a
// device); -1 (auto): through them when every rank may and the job has more than one rank.
// Collective over the world: every rank calls it at the same point, after comm_set_backend; it
// opens a device communicator for every communicator made so far (in the order they were made)
// and comm_split opens one for each made later (mode 1 with one process: one member each).
// Then a collective on a communicator that has one, whose buffers are all device memory,
// queues its pieces there (the same pieces: the watchdog sees each complete; an asynchronous
// error of the library fails the operation); host buffers, barriers and point-to-point
// messages go over MPI as before. *engine (if not NULL): "nccl" or "host stages". 0 or -1
// (loom_errmsg).
int comm_device_collectives(int mode, const char **engine);

// Collectives on float32 buffers; sums. In-place where the signature has one buffer.
CommReq comm_iallreduce(const Comm *c, float *buf, size_t n);
// Collectives start in the order they are called: a later one on the same communicator starts
// once every piece of the earlier ones has started (the same order on every rank).
// The all-reduce of b0[0, n0) and then b1[0, n1), sent as a chain of all-reduces of `chunk`
// floats (at most LOOM_COMM_CHUNK), at most two in flight, started and completed by the
// progress thread (or by comm_test / comm_progress when there is none). Messages that share
// the link (a pipeline's activations) then queue behind a chunk rather than behind the whole
// buffer. comm_iallreduce is the same with the default chunk.
CommReq comm_iallreduce_chunked(const Comm *c, float *b0, size_t n0, float *b1, size_t n1,
                                size_t chunk);
// The same, with b0 cut at the ncut offsets cut[] (ascending; the job keeps a copy): no piece
// crosses a cut, and each range between cuts goes in chunks from its start, so the MPI calls
// are those of one chained all-reduce per range (each element at the same offset of the same
// message, whatever order the MPI library's algorithm adds by offset in).
CommReq comm_iallreduce_cut(const Comm *c, float *b0, size_t n0, const size_t *cut, int ncut,
                            float *b1, size_t n1, size_t chunk);
int comm_allreduce(const Comm *c, float *buf, size_t n);
// The element-wise maximum instead of the sum.
CommReq comm_iallreduce_max(const Comm *c, float *buf, size_t n);
int comm_allreduce_max(const Comm *c, float *buf, size_t n);
int comm_allreduce_f64(const Comm *c, double *buf, int n);
CommReq comm_iallreduce_f64(const Comm *c, double *buf, int n);
// Each rank r receives the sum of [displs[r], displs[r]+counts[r]) of every rank's send buffer
// into recv.
CommReq comm_ireduce_scatter(const Comm *c, const float *send, float *recv, const size_t *counts);
// In place: rank r contributes buf[displs[r] .. +counts[r]); all ranks end with all pieces.
CommReq comm_iallgatherv(const Comm *c, float *buf, const size_t *counts, const size_t *displs);
int comm_allgatherv(const Comm *c, float *buf, const size_t *counts, const size_t *displs);
void comm_broadcast(const Comm *c, void *buf, size_t bytes, int root);
void comm_barrier(const Comm *c);

// Point to point (pipeline stages). Tags in [0, comm_tag_ub()]; n < 2^31.
CommReq comm_isend(const Comm *c, const float *buf, size_t n, int peer, int tag);
CommReq comm_irecv(const Comm *c, float *buf, size_t n, int peer, int tag);

// Completion. comm_test returns 1 when done. comm_wait blocks under the watchdog and returns
// the operation's status (0, or -1 when it failed and the failure handler returned).
int comm_test(CommReq *r);
int comm_wait(CommReq *r);
// comm_wait, returning the seconds it blocked (0 for a request already done or null): what
// strategies count as exposed communication. age (if not NULL) gets how long the operation had
// been in flight when the wait began (0 for a null request), read from the same clock reading
// as the wait's start: the time it had to run in the background, behind computation.
double comm_wait_timed(CommReq *r, double *age);
// A function comm_wait calls while it waits (never from inside itself), so a strategy can
// advance its own background operations while the training thread is blocked (NULL: none).
void comm_set_wait_hook(void (*fn)(void *ctx), void *ctx);
// Drives outstanding non-blocking operations (Open MPI progresses them only inside MPI calls):
// call it often from compute loops. Cheap when nothing is outstanding.
void comm_progress(void);
