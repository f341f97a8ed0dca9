// strat_tp_co2.h — CO2 over tensor- and context-parallel workers (--dp W --tp T --co2, --sp,
// --dp W --cp C --co2), run by strat_tp.c: a worker is one tp × cp group, its ranks hold parts
// of one model copy; and over 2D grids (--tp q·q --tp-mode 2d --co2), run by strat_tp2d.c.
// strat_tp.c takes the inner steps with gradients summed within the worker (over cp, never over dp)
// and the worker's own norm; strat_tp_co2.c adds the rest.
#pragma once
#include "strat_whole.h"

typedef struct TpCo2 TpCo2;

// 1 when this rank's copy of part tensor t is one another rank of the tp group counts (the
// adaptive gap penalty's norms count each tensor once).
typedef int (*TpCo2Dup)(const GPT *part, int t, void *ctx);
// After the part and its AdamW (opt; its moments go in the state files) are set up (its
// parameters are a(0)): the outer state over dp_comm, for this rank's part; on resume, the
// rank's own CO2 state file. dup NULL: 1D's rule (replicated tensors counted on tp rank 0).
// NULL when that fails.
TpCo2 *tp_co2_create(Strategy *s, GPT *part, const AdamW *opt, TpCo2Dup dup, void *dup_ctx);
void tp_co2_free(TpCo2 *o);
// A step begins (the stop agreement's wait hook joins at its end).
void tp_co2_begin(TpCo2 *o, int step);
// After the inner update filled r (the worker's loss, norm, lr, applied; t0: the step's start):
// the round's records, the round end's outer all-reduce, the stop agreement. 0, or -1.
int tp_co2_step(TpCo2 *o, Strategy *s, int step, StepRecord *r, double t0);
// The records up to here; final: the parameters become the final anchor.
void tp_co2_drain(TpCo2 *o, Strategy *s, int final);
// Before a save (not the final one): the manifest's CO2 fields, and the rank's state file to
// write as ckpt_save_collective's rank_files (*fn, *ctx; valid until the next call).
void tp_co2_save_files(TpCo2 *o, Strategy *s, CkptMeta *meta, CkptExtraFn *fn, void **ctx);
void tp_co2_describe(const Strategy *s, char *buf, size_t n);
// The lead rank's line: exposed communication of the round ends, the outer state per rank.
void tp_co2_summary(const TpCo2 *o, const Strategy *s, double exposed_s, double step_s);
