// tp2d_swap.h — block swapping of a 2D (SUMMA) tensor-parallel part (--tp q·q --tp-mode 2d
// --offload disk, ZeRO 0): each rank swaps its own part's blocks through its own disk tier
// (tp2d_swap.c). strat_tp2d.c drives it through its section hook and step.
#pragma once
#include "../model/gpt_2d.h"
#include "../parallel/comm.h"
#include "part_io.h"
#include "strategy.h"

typedef struct Tp2dSwap Tp2dSwap;

// Measures the fixed overhead, creates the activations (ws, as strat_tp2d.c's in-memory run),
// checks that they, the resident ends and one layer's slots fit --fast-mem (loom_fail naming the
// numbers), opens this rank's tier under --offload-dir and fills it (map: the part's; s's initial
// weights or its checkpoint). col, dp: the grid's column and the gradients' dp group. NULL + msg.
Tp2dSwap *tp2ds_create(const Strategy *s, GPT *part, const PartMap *map, const Tp2d *g, Work2d *ws,
                       const Comm *col, const Comm *dp);
void tp2ds_free(Tp2dSwap *w);
// A step's start (the resident gradients zeroed), a forward's start, micro-batch j's backward
// (last: the step's last micro-batch: each block's gradient is then summed down the column and
// over dp as the backward leaves it, and its per-tensor Σ g² taken) and its end.
void tp2ds_begin_step(Tp2dSwap *w);
void tp2ds_forward(Tp2dSwap *w);
void tp2ds_backward_begin(Tp2dSwap *w, int j, int last);
void tp2ds_backward_end(Tp2dSwap *w);
// The model enters block b (Tp2d.section): a layer's parameters (and in a backward its
// gradient so far) read into the slot, the previous layer's gradient written back.
void tp2ds_section(Tp2dSwap *w, int b);
// Σ g² of the step's reduced gradient over the part's tensors in tensor order, the column-
// replicated ones only when `replicas` (grid row 0).
double tp2ds_sumsq(const Tp2dSwap *w, int replicas);
// AdamW (step count ++t) block by block through the tier. 0 or -1.
int tp2ds_update(Tp2dSwap *w, float lr, float grad_scale);
// The part's whole array k (0 parameters, 1 m, 2 v) into host (part->nparams floats). 0 or -1.
int tp2ds_fetch(Tp2dSwap *w, int k, float *host);
// A save or an export: part_blocks_spill (part_io.h) over c (the grid, the tp group) from every
// rank's tier, through the update's moment buffer; tp2ds_scratch lends that buffer, or one of
// `need` floats when it is smaller (an export's whole tensor), *floats of it.
PartSpill *tp2ds_spill(Tp2dSwap *w, const PartMap *map, const Comm *c, int rank, int to,
                       int arrays);
float *tp2ds_scratch(Tp2dSwap *w, size_t need, size_t *floats);
int *tp2ds_opt_t(Tp2dSwap *w);
// 1 once the tier failed (loom_errmsg): the step returns -1.
int tp2ds_failed(const Tp2dSwap *w);
// The lead rank's line: slots, planned bytes against --fast-mem, the tier's traffic.
void tp2ds_report(const Tp2dSwap *w);
