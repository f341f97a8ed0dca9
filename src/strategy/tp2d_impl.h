// tp2d_impl.h — what strat_tp2d.c (2D SUMMA tensor parallelism x dp) keeps per rank, shared
// with tp2d_comm.c (the grid's collectives) and tp2d_summary.c (its end-of-run line).
#pragma once
#include "../model/gpt_2d.h"
#include "../parallel/ring_attention.h"
#include "part_io.h"
#include "strat_tp_co2.h"
#include "strategy.h"
#include "tp2d_swap.h"
#include "tp2d_zero.h"

typedef struct {
    const GPT *whole; // the whole model's layout (s->model: no buffers)
    GPT part;         // this rank's part
    Tp2d g;
    Work2d ws;
    AdamW opt;
    const Strategy *outer;
    const Comm *axis[2]; // row, column
    PartCut cut;         // the part's map; host parameters, m, v cut from the whole (start-up)
    // the moments' shards over dp (ZeRO 1-3; one shard of everything otherwise): dp rank r owns
    // [displs[r], displs[r] + counts[r]) of the part's flat layout, this rank [lo, hi)
    int nshard;
    size_t lo, hi, *counts, *displs;
    float *gown; // (hi-lo) this rank's reduced gradients (the reduce-scatter's receive buffer)
    Tp2dZero *z; // ZeRO 2/3: the gradients (and parameters) sharded over dp (tp2d_zero.c)
    int *inputs, *targets;
    // what the layers' collectives moved in training steps: floats this rank received in
    // broadcasts, reduce-scatters, all-reduces (ring) and anything else (none in a layer); the
    // embedding's and head's together; the time spent in all of them
    double bcast, rscat, allred, other, ends, comm_s;
    int counting, steps, section; // section: the block the model is in (model/gpt_2d.h)
    const Comm *gdp;              // the gradients' dp group: dp_comm; --co2: this rank alone
    TpCo2 *co2;                   // --co2: every grid a worker (strat_tp_co2.c)
    Tp2dSwap *sw;                 // --offload: the part's blocks through this rank's tier
    PartSpill *spill;             // --offload: the whole model assembled for an export
    // --cp: the ring, whole sequences before the rank's chunks are cut (B,T); T: the tokens of
    // a sequence this rank runs (seq/cp)
    CpRing *ring;
    int *seq_in, *seq_tg, T;
} T2;

// The grid's collectives and section hook (tp2d_comm.c) into t->g, for rank (i, j) of q x q.
void tp2d_grid(T2 *t, int q, int i, int j);
// The lead rank's end-of-run line (StrategyOps.summary).
void tp2d_summary(Strategy *s, double exposed_s, double step_s);
