// offload_plan.h — the static analysis of block swapping: predicts the seconds of one swapped
// optimizer step by an event simulation of the executor's schedule (offload.h, swap_step.c,
// swap_update.c), and searches the groupings of blocks into units and the prefetch depth for
// the fastest plan that fits a fast-memory budget. Memory and bytes moved are budget.c's
// (offload_fast_bytes, offload_io_bytes); the costs are measured (profile.h, tier_measure).
//
// The simulation: one compute stream and one I/O stream that serves requests in the order they
// are queued, reads at read_bps and writes at write_bps.
//   forward   unit 0's read is queued at the start; when unit u is ready (its reads done) the
//             reads of units up to u+prefetch are queued, then u computes K micro-batches.
//   turn      the last unit (its reads include the tied wte) computes K × (forward+backward);
//             its gradient and then H are written.
//   backward  units n-2 .. 0: a unit still in its slot from the forward is not read again;
//             when unit u is ready, the layers of unit u-prefetch are read into its slot,
//             after the compute stream has waited for that slot's previous writes (those of
//             unit u+2); u computes K backwards; unit 0 then reads H back (the compute stream
//             waits for it); each unit's gradient (the owned fraction under ZeRO-1) is written.
//   update    AdamW in pieces of at most offload_opt_chunk floats within a block, two
//             buffers: the next piece's reads are queued after the writes of the piece that
//             last used its buffer are done, then the current piece waits for its reads,
//             computes (update_s_per_param per parameter) and queues its writes; the step
//             ends when every write is done. These small requests move at the optimizer
//             stream's rates (opt_read_bps, opt_write_bps), measured on that pattern.
//   fused     (OffloadShape.fused) no gradient is written and there is no update pass: after
//             each unit's backward (the turn's included, before H is written) the same walk
//             runs over the unit's blocks reading only the owned moments (and the embedding's
//             parameters), and the compute stream waits for its last write.
// The tier's bandwidths are what it sustains when overwriting its blocks (tier_measure writes
// its region once before it times anything): the fill writes the whole scratch file before
// the first step, and a first write into preallocated blocks is slower.
// What I/O costs the compute: each request queued while the compute stream works adds its
// bytes × io_slow to that stream — the compute seconds lost per byte moved, measured by timing
// a product alone and while the tier streams (offload_interference.c); requests the compute
// stream waits for cost it nothing. Without that measurement (io_slow 0), io_steal × the
// tier's CPU seconds per byte (tmpfs: the kernel copies every byte; an OpenMP region waits for
// its slowest thread, so a core taken by a copy delays the whole region). The update pass, which
// mostly waits for its I/O, takes at least its AdamW plus its I/O's CPU spread over the compute
// threads (the threads share the CPUs there). Not modelled: communication (data-parallel
// all-reduces, ZeRO-1 gathers), page faults.
#pragma once
#include <stdio.h>

#include "offload.h"

typedef struct {
    // seconds per micro-batch of (B,T) of one block of each kind (PROF_EMBED, PROF_LAYER,
    // PROF_HEAD: layers are identical); a layer's backward includes its recomputed forward
    // with --recompute
    double fwd[3], bwd[3];
    double update_s_per_param;  // AdamW (with zeroing and norms) per owned parameter
    double read_bps, write_bps; // the slow tier, in requests of a unit's size
    // the same in the optimizer's stream (the update pass, the fused updates: pieces of
    // offload_opt_chunk floats, tier_measure); 0: read_bps and write_bps
    double opt_read_bps, opt_write_bps;
    // CPU seconds the tier's I/O threads spend per byte read and written (tier_measure), and
    // the share of them the compute stream loses: 1 when the compute threads occupy every CPU
    // the process may run on (offload_io_steal). 0: the tier costs no CPU (a manual tier)
    double read_cpu, write_cpu, io_steal;
    // compute seconds lost per byte the tier moves meanwhile, measured (offload_interference.c:
    // the I/O threads' CPU and what the machine spends beside it); when > 0 it is what the
    // compute stream is charged instead of io_steal × the CPU per byte
    double io_slow;
    int threads; // compute threads the costs were measured with
} OffloadCosts;

// The optimizer stream's rates (opt_read_bps, opt_write_bps, or the large requests' where 0).
static inline double offload_opt_read_bps(const OffloadCosts *c) {
    return c->opt_read_bps > 0 ? c->opt_read_bps : c->read_bps;
}
static inline double offload_opt_write_bps(const OffloadCosts *c) {
    return c->opt_write_bps > 0 ? c->opt_write_bps : c->write_bps;
}

// Seconds the tier takes for rd bytes read and wr written, of which ro and wo in the optimizer's
// stream (at its rates) and the rest in a unit's requests.
static inline double offload_io_seconds(const OffloadCosts *c, double rd, double wr, double ro,
                                        double wo) {
    return (rd - ro) / c->read_bps + (wr - wo) / c->write_bps + ro / offload_opt_read_bps(c) +
           wo / offload_opt_write_bps(c);
}

// The share of the tier's CPU time the compute stream loses with `threads` compute threads
// (0: one per CPU) on ncpu CPUs: the I/O threads that do not find an idle CPU.
double offload_io_steal(int threads, int ncpu);

// What the simulation of one step found (seconds, bytes).
typedef struct {
    double step_s;
    double compute_s; // the compute stream's work: blocks and AdamW
    double update_s;  // the update pass, from its start to its last write
    double io_s;      // the I/O stream's work: bytes / rates (the optimizer stream's at its own)
    double read_bytes, written_bytes;
} OffloadPrediction;

// Seconds of one step of plan p (simulated); fills p's predicted_step_ms, peak_fast_bytes
// (offload_fast_bytes) and io_bytes_per_step (offload_io_bytes), and d when not NULL.
double offload_predict(const GPT *m, const OffloadShape *s, const OffloadCosts *c, OffloadPlan *p,
                       OffloadPrediction *d);

// Per unit: compute seconds of K micro-batches and the bytes it moves in a step.
typedef struct {
    double fwd_s, bwd_s;       // the turn unit: its forward and its backward
    double read_fwd, read_bwd; // parameters read for the forward (the last unit: + the tied
                               // wte) and re-read for the backward (0 while still resident)
    double write;              // its gradient written (the owned fraction); fused: its
                               // parameters and owned moments
    double read_update;        // fused: its owned moments (and the embedding's parameters) read
} OffloadUnitCost;
void offload_unit_cost(const GPT *m, const OffloadShape *s, const OffloadCosts *c,
                       const OffloadPlan *p, int u, OffloadUnitCost *out);

#define OFFLOAD_MAX_PREFETCH 4

typedef struct {
    int max_prefetch; // depths 1..max_prefetch are searched (<= OFFLOAD_MAX_PREFETCH)
    int polish;       // refine the dynamic programme's candidates by local search
} OffloadSearchOpts;

// The plan with the least predicted step time whose offload_fast_bytes fit budget: dynamic
// programming over contiguous groupings for each prefetch depth, the candidates simulated and
// refined by local search. On success out is overwritten with a new plan (not freed first; the
// caller offload_plan_free's it), at least two units and prefetch >= 1. 0, or -1 with loom_fail
// naming the least fast memory any plan needs for this model and batch and what it is made of.
int offload_plan_search(const GPT *m, const OffloadShape *s, const OffloadCosts *c, double budget,
                        OffloadPlan *out);
int offload_plan_search_opts(const GPT *m, const OffloadShape *s, const OffloadCosts *c,
                             double budget, const OffloadSearchOpts *o, OffloadPlan *out);
// The least offload_fast_bytes of any plan (searched the same way), and that plan when out is
// not NULL. The search finds a plan for every budget of at least this.
double offload_plan_min_bytes(const GPT *m, const OffloadShape *s, OffloadPlan *out);
// loom_fail (-1): budget less overhead is below what any plan needs; the message names the
// least (offload_plan_min_bytes), what it is made of and, with an overhead (0: none), the
// --fast-mem it takes: overhead is the fixed overhead (measured = 1, offload_overhead) or what
// the process holds before its backend has run (0: a lower bound).
int offload_plan_fail(const GPT *m, const OffloadShape *s, size_t budget, double overhead,
                      int measured);

// Block costs for shape s from a saved profile (profile_path: `loom plan --save-profile`; its
// model's heads, dim, vocab and seq must match and it must hold a row for micro-batch B) or,
// when profile_path is NULL, measured now on m's backend with `threads` threads (0: all) and
// saved to save_path when not NULL; max_bytes (0: no bound) bounds what the measurement
// allocates (profile_measure_batch). Fills c's block and update costs. 0 or -1 (loom_errmsg).
int offload_costs_measure(const GPT *m, const OffloadShape *s, int threads,
                          const char *profile_path, const char *save_path, size_t max_bytes,
                          OffloadCosts *c, FILE *log);
// The tier's bandwidth under dir (NULL: host memory under m's device) with the executor's access
// pattern: `bytes` (0: 256 MiB) written and read back in requests of the size of a typical unit
// of m. 0 or -1.
int offload_tier_costs(const GPT *m, const char *dir, size_t bytes, OffloadCosts *c, FILE *log);
// device <- host <- disk (--host-mem): c holds the disk's rates under the device; the host
// tier under m's device is measured the same way (a probe of `bytes`) and each rate becomes the
// two parts' moved one after the other, host_mem less the bounce buffers holding its share of
// this rank's state (parameters, gradients and moments, CO2's three arrays; the front of the
// tier, where the parameters are, is host memory: unit reads are faster than the blend says).
// The fixed-costs test hook leaves c as it is. 0 or -1.
int offload_host_cache_costs(const GPT *m, const OffloadShape *s, size_t host_mem, size_t bytes,
                             OffloadCosts *c, FILE *log);
// The compute seconds lost per byte the tier under dir moves meanwhile (offload_interference.c),
// with a scratch file of `bytes` in requests of `piece`; 0 or -1 (loom_errmsg).
// offload_interference_costs: that into c->io_slow, with a layer's parameters as the piece and
// `bytes` (0: the probe's default) as the file. It runs after the fixed overhead is measured
// (its buffers are transient, and it starts the backend's threads, which the start-up checks
// count only after the warm-up).
int offload_io_interference(const GPT *m, const char *dir, size_t bytes, size_t piece,
                            double *s_per_byte);
int offload_interference_costs(const GPT *m, const char *dir, size_t bytes, OffloadCosts *c,
                               FILE *log);

// What `loom train --offload` runs at start-up, every step within --fast-mem (budget): the
// whole process's resident memory stays under it, from the start to the end of the run.
//   1. offload_startup_costs (the rank that plans): the block costs, measured (a one-layer copy
//      of the model, in what the process does not yet hold of the budget) or from
//      profile_path, and the tier under dir (buffers of at most half of that; with host_mem
//      under a device, the host memory above it too: offload_host_cache_costs).
//   2. offload_warmup (every other rank, and one whose costs came from a file): one forward and
//      backward of each block kind on the same copy, so the backend's threads and BLAS buffers
//      exist as they will during the steps.
//   3. offload_overhead: the fixed overhead, what the process then holds that block swapping
//      cannot move (the binary and its libraries, MPI, the backend's threads, their stacks and
//      BLAS buffers), measured (resident memory, the allocator's free memory handed back first)
//      plus OFFLOAD_LATE_BYTES for what starts after the measurement (the tier's I/O threads,
//      a checkpoint's file buffers, small allocations).
//   4. offload_plan_share: what is left to the plan, budget - overhead (an error naming the
//      numbers when it is below the least plan), and offload_plan_for_run: the search in it.
// Under a device (m's backend not host memory: --offload host, or a disk under the device) the
// budget is device memory: what is held is the backend's mem_used (no late bytes: the tier's
// buffers are host memory), the tier is measured through the copy stream (dir NULL: host
// memory) and its interference with the compute is taken as none (the copy engines move it).
// Each returns 0 or -1 with loom_errmsg; progress lines go to log (NULL: silent).
#define OFFLOAD_LATE_BYTES ((double)(8 << 20))
int offload_startup_costs(const GPT *m, const OffloadShape *s, int threads, const char *dir,
                          size_t host_mem, size_t budget, const char *profile_path, OffloadCosts *c,
                          FILE *log);
int offload_warmup(const GPT *m, const OffloadShape *s, size_t budget);
double offload_overhead(const Backend *be); // be NULL or host memory: the process's RSS
int offload_plan_share(const GPT *m, const OffloadShape *s, size_t budget, double overhead,
                       double *share);
int offload_plan_for_run(const GPT *m, const OffloadShape *s, const OffloadCosts *c, double share,
                         OffloadPlan *out, FILE *log);

// "[[0,3],[4,7]]" for plan p (caller frees).
char *offload_units_json(const OffloadPlan *p);
