// co2.h — CO2: local updates with an asynchronous outer all-reduce fully overlapped with
// computation. Each worker trains its own copy x_r with its own inner AdamW for τ steps; at the
// end of round t it starts the non-blocking average of Δ_r(t) = a(t−1) − x_r and applies the
// average of the PREVIOUS round (one round stale), so the all-reduce runs while the next τ steps
// compute:
//     m ← β·m + Δ̄(t−1)/λ ;  m ← clip(m, −φ, φ) (φ > 0) ;  a(t) = a(t−1) − α·m   (t ≥ 2)
//     a(1) = a(0) ;  then every worker sets x_r ← a(t).
// After the last (possibly partial) round the in-flight average is applied the same way; the
// final anchor is the trained model.
//
// Sharded mode (--co2 with --zero 1/2): each worker holds 1/N of the anchor and of the outer
// momentum. Since Δ̄ = a(t−1) − mean_r x_r, the outer average becomes a reduce-scatter of the
// workers' x_r (each gets the mean of its slice) and an all-gather of the new anchor; both run
// in the background during the next round (the all-gather starts from the poll hook as soon as
// the reduce-scatter lands), on a communicator of their own so their order is the same on
// every worker. The adaptive gap penalty replaces the constant λ, per
// tensor, by λ_t = 1 + ‖a(t−1) − a(t−2)‖ / ‖Δ̄(t−1)‖ (= 1 + α‖m(t−1)‖/‖Δ̄(t−1)‖).
#pragma once
#include "../model/gpt.h"
#include "comm.h"

typedef struct {
    int tau;      // inner steps per round
    float alpha;  // outer learning rate
    float beta;   // outer momentum
    float lambda; // staleness gap penalty (constant mode)
    float phi;    // element-wise clip of the outer momentum (0 = off)
    int adaptive; // 1: adaptive gap penalty
    int sharded;  // 1: shard anchor and momentum across the workers
    // Unsharded, adaptive: called on this worker's per-tensor Σ m², Σ Δ̄² (2·ntensors) before
    // they are used, so that a worker holding parts of tensors (tensor parallelism) can make
    // them the whole tensors' (NULL: the worker holds whole tensors). Collective as it likes:
    // every rank calls it at the same round end.
    void (*norms)(void *ctx, double *sq, int ntensors);
    void *norms_ctx;
    // The backend of the arrays the rule updates when they are not the model's (loom peer on a
    // device: its outer state in host memory, backend_host()); NULL: the model's backend.
    const Backend *be;
} CO2Config;

typedef struct CO2 CO2;

// The outer rule on whatever the blocks' CO2 slots (gpt.h BlockExtra: anchor, momentum, the
// average to apply) point at — the whole model, a shard, or a piece a swapper streams:
// m ← β·m + Δ̄/λ, clipped; a ← a − α·m. sq: per-tensor ‖m‖², ‖Δ̄‖² (adaptive λ; else NULL).
void co2_outer_update(const CO2Config *c, const GPT *m, const double *sq);
// Adds Σ m² and Σ Δ̄² per tensor over flat [lo, hi) (mom, avg at element lo; lo and hi on
// norm-chunk boundaries) to sq (2·ntensors), one partial per tensor piece in each norm chunk,
// in order: the sums do not depend on how the range is cut into pieces.
// be: the backend of mom and avg (the model's, or backend_host() for host arrays).
void co2_norms_add(const GPT *m, const Backend *be, const float *mom, const float *avg, size_t lo,
                   size_t hi, double *sq);

// Takes the current parameters as a(0). c is the communicator of the workers. Installs a poll
// hook on m (chained to the hooks already there) that drives the outer collectives.
CO2 *co2_create(GPT *m, const Comm *c, const CO2Config *cfg);
void co2_free(CO2 *o);
// Ends a round: computes Δ, starts its average, applies the previous one, resets x ← a(t).
void co2_round_end(CO2 *o);
// After the last round: applies the in-flight average and leaves x = the final anchor.
void co2_finish(CO2 *o);
// Checkpointing at a round boundary (right after co2_round_end). co2_state waits for the outer
// collectives in flight (their results are kept, and applied when the rule applies them) and
// lists this worker's CO2 arrays: with the parameters (= the anchor a(t) there) and the
// worker's own AdamW moments they determine the rest of the run. On a fresh CO2 (created from
// the same anchor), co2_state_buffers(round) lists the same arrays to read into and continues
// as if round `round` had just ended. `kind` names the layout ("co2" or "co2-sharded").
// Both return the number of arrays (at most CO2_STATE_MAX); co2_rounds counts rounds ended.
#define CO2_STATE_MAX 4
int co2_state(CO2 *o, const float **arrays, size_t *lens, const char **kind);
int co2_state_buffers(CO2 *o, int round, float **arrays, size_t *lens, const char **kind);
int co2_rounds(const CO2 *o);
// Unsharded: the anchor a(t) (P floats, backend memory), which a mid-round checkpoint saves
// because the weights are then the worker's own; NULL when sharded (co2_state has its slices).
float *co2_anchor(CO2 *o);
// Seconds blocked waiting for averages so far (the exposed communication), and rounds done.
double co2_exposed(const CO2 *o);
// At the last round end: how long the outer collectives it waited for had been in flight when
// it began to wait (the least of them; 0: it waited for none). Unsharded, that is the age of
// the previous round's average: the time it had to land behind this round's computation.
double co2_overlap(const CO2 *o);
// Bytes CO2 adds per worker (unsharded: anchor, momentum, two Δ buffers; sharded: the x_r
// copy being reduced, the anchor being gathered, and four 1/N slices).
double co2_memory(const CO2 *o);
