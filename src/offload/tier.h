// tier.h — the slow tier of block swapping: one scratch file per rank on a local disk, read and
// written by a background I/O thread with direct I/O (O_DIRECT), so the page cache never
// quietly becomes the fast tier. Where the filesystem refuses O_DIRECT the tier falls back to
// buffered I/O that drops its pages after each request (posix_fadvise DONTNEED), with a
// warning. The fast tier is the caller's memory: buffers from tier_fast_alloc. Under a device
// (--offload host) the slow tier is host memory instead and the fast one device memory
// (tier_open_on), or host memory above a disk (--host-mem); the calls below are the same.
//
// The file lives in its own subdirectory of the --offload-dir (one per rank and process), is
// preallocated to its full size when opened (a disk too small is an error then, naming the
// directory), and is unlinked — with its subdirectory — right after it is opened: the scratch
// state disappears when the process exits, however it exits.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "../backend/backend.h"

// Offsets, lengths and buffer addresses of every request are multiples of this.
#define TIER_ALIGN ((size_t)4096)

typedef struct Tier Tier;

// Opens a fresh scratch file of `bytes` (a multiple of TIER_ALIGN) for `rank` under dir.
// Returns NULL with loom_errmsg naming dir when it is missing, not a directory, not writable,
// or has too little space.
Tier *tier_open(const char *dir, int rank, size_t bytes);
// The tier of a run whose fast memory is be's (tier_place.c): tier_open's when be is host memory
// (or NULL; host_mem is then 0). Under a device: dir NULL (--offload host) is `bytes` of the
// backend's page-locked host memory (tier_host.c), its requests the backend's copy stream
// (device buffers <-> host memory, ordered after the compute queued before them; no alignment
// rule), refused when host_mem (not 0) is less than bytes; a dir is tier_open's file with
// device buffers on the fast side, each I/O thread moving its pieces through a page-locked
// bounce buffer of its own (device <- host <- disk; the device buffers need not be aligned);
// a dir and host_mem (--host-mem) is both (tier_split.c): the first host_mem less
// tier_bounce_bytes() of the tier (rounded down to TIER_ALIGN) in page-locked host memory, the
// rest in the file, a request cut in two where it spans the cut (its wait waits for both), so
// that the page-locked memory the tier holds is at most host_mem; all of it in host memory
// when it fits. NULL + loom_errmsg as tier_open, or when the device has no copy stream, or
// host_mem is not more than the bounce buffers.
Tier *tier_open_on(const Backend *be, const char *dir, size_t host_mem, int rank, size_t bytes);
// Page-locked bytes a disk tier under a device moves its pieces through (all its I/O threads).
size_t tier_bounce_bytes(void);
// Bytes of the tier in host memory under a device and on disk (a disk tier: 0 and its size).
void tier_parts(const Tier *t, size_t *host, size_t *disk);
// The fast side's memory, which requests read into and write from: tier_alloc's host memory
// for a disk tier, the device's buffers (be->alloc, zeroed) for a host tier; and its backend
// (NULL: host memory, the caller's own).
void *tier_fast_alloc(const Tier *t, size_t bytes);
void tier_fast_free(const Tier *t, void *p);
const Backend *tier_fast_backend(const Tier *t);
// Stops the I/O thread (after the requests queued) and closes the file.
void tier_close(Tier *t);
// 1: direct I/O; 0: buffered fallback.
int tier_direct(const Tier *t);

// Queues a read of n bytes at file offset off into buf, or a write of buf; returns a ticket
// (> 0). Requests may complete in any order, except that a request never starts before every
// earlier request whose byte range overlaps its own has completed.
uint64_t tier_read_async(Tier *t, size_t off, void *buf, size_t n);
uint64_t tier_write_async(Tier *t, size_t off, const void *buf, size_t n);
// Waits for a ticket (0: returns at once). Returns 0, or -1 with loom_errmsg naming the
// directory and the system's reason (e.g. "No space left on device") when it failed; the
// time blocked is added to tier_waited.
int tier_wait(Tier *t, uint64_t ticket);
// 1 when the ticket's request has completed (or failed: tier_wait reports it), else 0; never
// blocks.
int tier_done(Tier *t, uint64_t ticket);
// 1 when every request with a ticket up to `ticket` has completed; never blocks.
int tier_done_upto(Tier *t, uint64_t ticket);
// Waits for every request with a ticket up to `ticket`; 0 or -1 as tier_wait.
int tier_wait_upto(Tier *t, uint64_t ticket);
// Waits for every request queued so far; 0 or -1 as tier_wait.
int tier_drain(Tier *t);
// Seconds callers have spent blocked in tier_wait/tier_drain since the last reset.
double tier_waited(const Tier *t);
void tier_reset_waited(Tier *t);
// Bytes read and written since opening.
void tier_bytes(const Tier *t, uint64_t *read, uint64_t *written);

// Host memory aligned for direct I/O (zeroed; a mapping of its own, in transparent huge pages
// where the system gives them: fewer segments per request, tier.c), and its release.
void *tier_alloc(size_t bytes);
void tier_free(void *p);

// The I/O threads of one tier.
int tier_workers(void);

// What tier_measure found: bytes per second of each direction, and the CPU seconds the
// process spent per byte meanwhile (its caller blocked: the I/O threads' system calls; small
// with direct I/O to a disk, about one core per stream on tmpfs, where the kernel copies).
// opt_read_bps and opt_write_bps are the two directions' rates in the optimizer's stream
// (swap_update.c's walk: pieces of one chunk, four read and three written per piece, two
// pieces in flight, into a small buffer): that pattern is timed as a whole and both rates
// are the large requests' scaled by one factor, so that moving its bytes at them takes the
// time measured. (On the project's virtio disk the stream moved its bytes up to twice as fast
// as the large requests' rates say: one number per direction does not describe this tier.)
typedef struct {
    double read_bps, write_bps;
    double read_cpu, write_cpu;
    double opt_read_bps, opt_write_bps;
} TierSpeed;

// Measures the tier under dir with the access patterns swapping uses: writes `bytes` in
// requests of `piece` bytes (twice: the second pass, an overwrite as in a run, is timed), then
// reads them back, through the same I/O threads and flags; then the optimizer's stream in
// pieces of `chunk` bytes over the same region (0: not timed, opt rates = the others).
// Returns 0 or -1 (loom_errmsg).
// The tier is tier_open_on(be, dir, 0, ...)'s (dir NULL: a host tier under the device be);
// the buffers are then device memory.
int tier_measure(const char *dir, const Backend *be, size_t bytes, size_t piece, size_t chunk,
                 TierSpeed *out);
