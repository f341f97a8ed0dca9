// strat_cp.h — context parallelism (--cp, ring attention) as strat_tp.c (and strat_pipeline.c,
// each stage's part) runs it: the flags it refuses, and the run summary's line. The ring itself
// is parallel/ring_attention.c, the embedding at global positions and the cut of sequences into
// chunks model/block_cp.c.
#pragma once
#include "../parallel/ring_attention.h"
#include "strat_whole.h"

// The flags --cp cannot run with, and a sequence the ring cannot cut: loom_fail, -1; else 0.
int cp_check(const StrategyConfig *c);
// This rank's two chunks of every whole sequence (seq_in/seq_tg, (B,T)) into inputs/targets
// (B, T/cp): what a context-parallel rank of the tp or pipeline strategy reads.
void cp_take_batch(const Strategy *s, const int *seq_in, const int *seq_tg, int *inputs,
                   int *targets);
// A rank's K/V block must fit one message: loom_fail, -1; else 0.
int cp_check_shape(const Strategy *s);
// The validation loss of the ring: every rank's mean over its chunks (inner: the strategy as
// strat_whole sees the rank's part), averaged over cp; the ring's traffic is not counted.
double cp_evaluate(Strategy *inner, Whole *w, CpRing *r);
// The lead rank's line: per-rank activation memory and what went around the ring per layer.
void cp_summary(const Strategy *s, const CpRing *r, size_t ws_floats, int steps);
