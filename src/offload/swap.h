// swap.h — the executor of block swapping: trains a whole model whose parameters, gradients
// and AdamW moments live in the slow tier (tier.h), with only the units computing and being
// read ahead, the activations and bounded streaming buffers in fast memory. The schedule is
// offload.h's; the numbers it allocates by are budget.c's. Used by the whole-model strategies
// (strategy/strat_whole.c): one process, data parallelism with ZeRO 0/1, CO2's workers.
//
// In the tier (one file per rank): the parameters of every block, each block starting on a
// TIER_ALIGN boundary (offload_pad); the gradients and both moments of the flat range this
// rank updates; the head's part H of the tied embedding's gradient between the turn and the
// end of the backward.
#pragma once
#include "../optim/optim.h"
#include "../parallel/co2.h"
#include "../parallel/comm.h"
#include "offload.h"

typedef struct Swapper Swapper;

typedef struct {
    int B, T, K, recompute;
    OptConfig opt;
    const Comm *comm; // the ranks a gradient is summed over (size 1: none); ZeRO shards over it
    int zero;         // 0, 1 (moments sharded; every tier keeps only its owned gradients) or 2
                      // (the same, the layers' gradients reduce-scattered instead of all-reduced)
    const char *dir;  // --offload-dir
    size_t host_mem;  // --host-mem (0: none): under a device, host memory above the disk tier
    size_t budget;    // --fast-mem, bytes: the whole process
    double overhead;  // of it, the fixed overhead (offload_overhead); the rest is the plan's
    const OffloadPlan *plan;
    const CO2Config *co2; // CO2's worker (unsharded outer state in the tier), or NULL
    const Comm *co2_comm; // CO2's workers (the round averages are taken over them)
    // AdamW per unit right after its backward, from the parameters and gradients in its slot
    // (only the moments are read): where nothing needs the whole gradient first — clipping
    // off, and a non-finite step stops the run (the update of later units cannot be undone).
    int fused;
    // Norm partials per tensor (m->ntensors doubles) instead of per chunk, for a tensor-parallel
    // part (ZeRO 0 only): its norm counts the replicated tensors on tp rank 0 only and is summed
    // tensor by tensor, as the in-memory strategy sums it (swap_tensor_sumsq).
    int tensor_norm;
    int tier_rank; // the rank in the scratch directory's name (0: the comm's rank)
} SwapConfig;

// The arrays of the tier a caller reads or writes (swap_store / swap_fetch).
enum { SWAP_PARAMS, SWAP_M, SWAP_V };

// Opens the tier, allocates the slots, the workspaces and the streaming buffers (exactly
// offload_fast_bytes; more than budget - overhead is an error naming the minimum). NULL +
// loom_errmsg.
Swapper *swap_create(GPT *m, const SwapConfig *c);
void swap_free(Swapper *s);
// The flat range whose gradients and moments this rank keeps and updates.
void swap_owned(const Swapper *s, size_t *lo, size_t *hi);
// Writes / reads n floats of flat range [at, at+n) of an array (moments: inside the owned
// range), host memory. 0 or -1 (loom_errmsg). Parameters written between steps (a peer's
// x ← a) are what the next step reads: every slot is emptied.
int swap_store(Swapper *s, int array, size_t at, size_t n, const float *src);
int swap_fetch(Swapper *s, int array, size_t at, size_t n, float *dst);
// Between steps: the largest slot as scratch memory for the caller (an export's tensors; at
// least one layer's parameters and gradients, 24·C² floats), its size in *floats; every slot is
// then empty (the next step reads its units again). Host memory: under a device (--offload
// host) a host buffer of that size instead. NULL when the tier failed.
float *swap_scratch(Swapper *s, size_t *floats);
// AdamW updates applied (the bias correction's count).
int *swap_opt_t(Swapper *s);

// Micro-batch j of the step (tokens and targets, B·T each) / validation window w.
typedef void (*SwapBatchFn)(void *ctx, int step, int j, int *inputs, int *targets);
typedef void (*SwapValFn)(void *ctx, int w, int *inputs, int *targets);

// The step's K micro-batches through every unit, gradients scaled by `scale`, summed over the
// ranks and written to the tier, norm partials taken. Returns 0 with this rank's mean loss in
// *loss, or -1 (loom_errmsg: the tier failed).
// lr: the step's learning rate, used by the fused update (SwapConfig.fused).
int swap_grads(Swapper *s, SwapBatchFn batch, void *ctx, int step, float scale, float lr,
               double *loss);
// Σ g² of the step's gradient (identical on every rank, the same bits as in memory).
double swap_grad_sumsq(Swapper *s);
// SwapConfig.tensor_norm: Σ g² of this part's tensors in tensor order (a tensor-parallel rank
// other than 0 leaves its replicated tensors out); the caller sums it over the groups.
double swap_tensor_sumsq(const Swapper *s);
// AdamW at learning rate lr with gradients scaled by grad_scale, streamed through the owned
// range (parameters all-gathered under ZeRO-1). 0 or -1.
int swap_update(Swapper *s, float lr, float grad_scale);
// Mean loss over validation windows 0..n-1 (K at a time through every unit). 0 or -1.
int swap_evaluate(Swapper *s, int n, SwapValFn val, void *ctx, double *loss);
// CO2 (swap_co2.c), the same rule as parallel/co2.h with the anchor, the outer momentum and
// both round averages in the tier, streamed in pieces; the average of a round's Δ runs piece by
// piece in the background (driven between blocks) during the next round.
// The anchor a(0) = the parameters now (after the fill, or a resumed round boundary).
int swap_co2_begin(Swapper *s);
// Ends round `round` (1-based: rounds ended so far, this one included).
int swap_co2_round_end(Swapper *s, int round);
// After the last round: applies the average in flight; the parameters become the anchor.
int swap_co2_finish(Swapper *s, int round);
// Waits for the average in flight (its result kept): a checkpoint's state is then the outer
// momentum and that average — tier regions read and written through swap_co2_fetch/store
// (array 0: momentum, 1: the average of round `round`, 2: the anchor).
int swap_co2_settle(Swapper *s);
int swap_co2_fetch(Swapper *s, int round, int array, size_t at, size_t n, float *dst);
int swap_co2_store(Swapper *s, int round, int array, size_t at, size_t n, const float *src);
// Seconds blocked on CO2's averages so far.
double swap_co2_exposed(const Swapper *s);

// Totals since the first step: steps, seconds in the update pass, seconds blocked on the tier,
// bytes read and written (validations and checkpoints included).
typedef struct {
    int steps;
    double update_s, wait_s, read_bytes, written_bytes;
} SwapStats;
void swap_stats(const Swapper *s, SwapStats *st);

// Seconds blocked on the tier since the last call.
double swap_io_wait(Swapper *s);
