// offload.h — block swapping (ATOM, part 1): what a run that keeps its training state in a slow
// tier (tier.h) holds in fast memory, what it moves per step, and the plan that groups blocks
// into swap units. The executor (swap.h) allocates exactly what offload_fast_bytes counts; the
// static analysis (offload_plan.h) searches groupings with the same numbers.
//
// The schedule of one optimizer step with K micro-batches (swap_step.c):
//   forward   units 0 .. n-2 in order: unit u's parameters are read while unit u-1 computes
//             (up to `prefetch` units ahead; unit u lives in slot u mod (prefetch+2): one
//             computing, `prefetch` being read, one writing its gradient back); each
//             unit runs its blocks for micro-batches 1..K, keeping each block's output (the
//             residual stream) per micro-batch — with --recompute nothing else; without it
//             every layer's activations per micro-batch.
//   turn      the last unit (it holds the head; the head also reads the tied wte): for each
//             micro-batch its forward then its backward; its gradients and the head's part of
//             the tied embedding's gradient (H, its own buffer) are then written.
//   backward  units n-2 .. 0: units still in their slots from the forward are not read again;
//             gradients are zeroed in the slot, micro-batches 1..K run in ascending order, the
//             gradient's norm partials are taken (and, with data parallelism, the unit's
//             gradient is all-reduced) and the gradient is written. The embedding's backward
//             reads no parameters, so its gradient overlays its parameters in the slot; after
//             it, H is streamed back from the tier and added once (the same order as the
//             in-memory path: embedding part + head part, see gpt.h head_dwte).
//   update    (clipping off and a non-finite step stopping the run: "fused") each unit's AdamW
//             runs right after its backward from its slot, only the moments streamed: the
//             gradient never leaves fast memory. Otherwise, with the global norm known
//             (clipping and the non-finite check need all of it),
//             AdamW streams parameters, gradients and both moments through fast memory in
//             pieces of offload_opt_chunk floats, double-buffered, and writes parameters and
//             moments back.
#pragma once
#include <stddef.h>

#include "../model/gpt.h"

// Bytes of the one streaming buffer a checkpoint's save or resume, CO2's state files and the
// initial parameters (random or --init) pass through while the executor is idle (io/, model/:
// 2^20 floats each); counted in offload_fast_bytes.
#define OFFLOAD_IO_BYTES ((double)(4 << 20))

// Floats per optimizer streaming piece (each of parameters, gradients, m, v; two in flight):
// 2^18 (1 MiB), or the largest block rounded up to the tier's alignment when that is smaller.
size_t offload_opt_chunk(const GPT *m);

typedef struct {
    int first, last; // blocks, inclusive
} OffloadUnit;

typedef struct {
    int nunits;
    OffloadUnit *unit; // (nunits), owned; consecutive, covering blocks 0 .. nblocks-1
    int prefetch;      // units read ahead of the one computing (>= 1)
    // what the static analysis predicts (0 when not planned)
    double predicted_step_ms;
    double peak_fast_bytes;
    double io_bytes_per_step;
} OffloadPlan;

// The run a budget is for.
typedef struct {
    int B, T, K, recompute;
    int dp, zero; // data-parallel ranks and ZeRO stage (0 or 1): what the update streams
    int co2;      // a CO2 worker: its background average keeps two pieces in flight
    int fused;    // AdamW per unit right after its backward (swap.h SwapConfig.fused): no
                  // gradient written, no update pass
} OffloadShape;

// "12.3 MiB" / "1.25 GiB" into buf; returns buf.
const char *offload_size_str(double bytes, char *buf, size_t n);
// Floats of the tied embedding's wte (V·C, the first floats of the embedding block).
size_t offload_wte_floats(const GPT *m);
// Floats n rounded up to the tier's alignment (every block starts aligned in the tier).
size_t offload_pad(size_t n);
// Floats unit u needs in its slot: each layer its parameters and gradients; the embedding one
// region (parameters in the forward, its gradient in the backward, which reads no parameters);
// the head its own parameters and gradients plus the tied wte and the head's wte gradient H.
size_t offload_unit_floats(const GPT *m, OffloadUnit u);
// Floats of all slots (prefetch+2 of them): slot i holds the largest unit u with u ≡ i.
size_t offload_slots_floats(const GPT *m, const OffloadPlan *p);
// Activation and workspace bytes for K micro-batches of (B,T) (gpt.h workspaces).
double offload_workspace_bytes(const GPT *m, const OffloadShape *s);
// Everything the executor allocates in fast memory for this plan: slots, workspace,
// optimizer streaming buffers, norm partials and the micro-batches' tokens; and
// OFFLOAD_IO_BYTES for what streams state in and out while it is idle.
double offload_fast_bytes(const GPT *m, const OffloadShape *s, const OffloadPlan *p);
// What the plan of one block per unit with prefetch 1 needs (a bound on the least; the least
// itself is searched: offload_plan_min_bytes, offload_plan.h).
double offload_min_bytes(const GPT *m, const OffloadShape *s);
// Bytes read from and written to the tier per optimizer step by this rank (fused: no gradient
// out, only the moments in for the update).
void offload_io_bytes(const GPT *m, const OffloadShape *s, const OffloadPlan *p, double *read,
                      double *written);

// Plans: one unit per block (prefetch 1), and freeing.
void offload_plan_per_block(const GPT *m, OffloadPlan *p);
void offload_plan_free(OffloadPlan *p);
// "[[0,3],[4,7],...]" into p (checked against m). 0 or -1 (loom_errmsg).
int offload_plan_parse_units(const GPT *m, const char *text, OffloadPlan *p);

// SIZE in bytes, or with a K/M/G suffix (KiB/MiB/GiB); 0 or -1 (loom_errmsg names flag).
int offload_parse_size(const char *flag, const char *text, size_t *bytes);
