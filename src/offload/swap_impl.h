// swap_impl.h — the executor's state, shared by swap.c (layout, slots, moving data),
// swap_step.c (forward/backward schedule) and swap_update.c (norm and AdamW pass).
#pragma once
#include "swap.h"
#include "tier.h"

enum {
    REGION_PARAMS,
    REGION_GRADS,
    REGION_M,
    REGION_V,
    REGION_H,
    // CO2 (swap_co2.c): the anchor, the outer momentum, the two round averages (Δ)
    REGION_ANCHOR,
    REGION_MOM,
    REGION_D0,
    REGION_D1,
    NREGIONS
};
enum { SLOT_WRITES = 3 };

typedef struct {
    float *buf;
    size_t floats;
    int unit;       // the unit whose parameters are (or are being read) here, -1: none
    int params_ok;  // those parameters are intact (the embedding's backward overwrites them)
    uint64_t rd[2]; // reads in flight into the slot
    uint64_t wr[SLOT_WRITES]; // writes in flight out of it
    uint64_t wr_upto;         // fused update: every write up to this ticket reads the slot
} Slot;

struct Swapper {
    GPT *m;
    SwapConfig c;
    OffloadPlan plan;
    Tier *tier;
    size_t *poff;            // (nblocks+1) padded offset of each block in the parameter region
    size_t plo, phi;         // the owned range [lo, hi) at padded offsets
    size_t lo, hi;           // the owned flat range
    size_t region[NREGIONS]; // byte offset of each region in the tier
    int S;                   // slots
    Slot *slot;
    Workspace *ws;  // (K): ws[0] owns head/scratch, the others share them
    size_t chunk;   // offload_opt_chunk
    float *stream;  // 8·chunk floats: update pieces, bounce buffer
    double *part;   // (nchunks) norm partials of the step's gradient
    double *tsum;   // (ntensors) the same per tensor (SwapConfig.tensor_norm), else NULL
    size_t *bound;  // (N+1) shard bounds over the ranks (ZeRO-1 and 2)
    size_t *pbound; // (N+1) the same at padded offsets
    int N, rank, t;
    double waited;
    struct SwapCO2 *co2; // CO2's outer state and its background average (swap_co2.c)
    int fused;           // AdamW per unit right after its backward (swap.h SwapConfig.fused)
    float lr;            // this step's learning rate (fused)
    int steps;           // swap_grads calls
    uint64_t base_read, base_written; // tier bytes before the first step (the fill, a resume)
    double update_s;                  // seconds in swap_update
    double wait_total;                // seconds blocked on the tier (swap_io_wait's sum)
    float *host_scratch;              // under a device (--offload host): swap_scratch's host memory
};

// CO2 (swap_co2.c): set up / free, and the poll that drives the background average.
void swap_co2_setup(Swapper *s);
void swap_co2_free(Swapper *s);
void swap_co2_poll(Swapper *s);

// Padded offset of flat offset x (inside block b).
static inline size_t swap_padpos(const Swapper *s, int b, size_t x) {
    return s->poff[b] + (x - s->m->blocks[b].off);
}
// The block holding flat offset x.
int swap_block_at(const Swapper *s, size_t x);
// The end of the streaming piece that starts at flat offset x: at most s->chunk floats, never
// across a block, never past `end` (the update pass and CO2's passes walk the same pieces).
size_t swap_piece_end(const Swapper *s, size_t x, size_t end);
// Byte offset in the tier of flat offset x of region r (grads/m/v: inside the owned range).
size_t swap_tier_off(const Swapper *s, int r, size_t x);

// Reads (write 0) or writes n floats of region r at flat offset at, host memory, through the
// bounce buffer (any alignment). 0 or -1.
int swap_move(Swapper *s, int r, size_t at, size_t n, float *host, int write);
// Slot handling (swap.c).
Slot *swap_slot_of(Swapper *s, int u);
// Points the unit's blocks at its slot (params, grads, the head's wte and H).
void swap_point_unit(Swapper *s, int u);
// Starts reading unit u's parameters into its slot (layers_only: what a backward needs) unless
// they are there; waits for the slot's writes first. 0 or -1.
int swap_fetch_unit(Swapper *s, int u, int layers_only);
// Waits until unit u's reads are done. 0 or -1.
int swap_ready(Swapper *s, int u);
// The head's tied wte (in the head unit's slot) and its H buffer.
float *swap_wte(Swapper *s, int u);
float *swap_hbuf(Swapper *s, int u);
int swap_wait_slot_writes(Swapper *s, Slot *sl);
// Fused mode: AdamW on unit u's owned part from its slot (parameters, gradients), the moments
// streamed, parameters and moments written (swap_update.c). 0 or -1.
int swap_update_unit(Swapper *s, int u);
