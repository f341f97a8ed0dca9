// strat_co2.h — what the CO2 strategy's files share: strat_co2.c (the steps, the round ends and
// the stop) and co2_ckpt.c (a worker's own state in checkpoints: at round ends, and mid-round
// when a stop cannot wait for the next round end); strat_tp_co2.c (CO2 over tp/cp workers)
// uses the checkpoint pieces declared at the end.
#pragma once
#include "../parallel/co2.h"
#include "co2_rounds.h"
#include "strat_whole.h"

typedef struct {
    Whole w;
    CO2 *co2;    // in memory; with --offload the outer state lives in w.sw's tier
    int rounds;  // rounds ended (--offload)
    Co2Rounds r; // the rounds' losses and the stop agreement (co2_rounds.h)
    int mid;     // the state file being written or read is a mid-round one (offload)
} Co2State;

// Resume: every worker's own state from its co2_<rank>.bin (exits with EXIT_INPUT when it is
// bad: the file is this worker's).
int co2_resume(Strategy *s, Co2State *o);
// The strategy's save (StrategyOps.save).
int co2_save(Strategy *s, const char *dir, CkptMeta *meta, int final, CkptExtraFn extra,
             void *extra_ctx, int keep);

// What CO2 over tensor- and context-parallel workers (strat_tp_co2.c) shares with the above:
// the file's kind; the arrays of a rank's file — the outer ones (co2_state, or with read the
// buffers to read them into, for round `round`), mid-round the anchor, the AdamW moments,
// mid-round the weights — returning the count; the checkpoint's CO2 layout against this run's
// (1: it holds no CO2 state, new rounds start from its weights; 0: the same layout; -1: another,
// loom_errmsg names what differs); the manifest's CO2 fields; the file writer (a CkptExtraFn on
// a CO2Files, every rank's co2_<rank>.bin).
const char *co2_kind(int sharded, int mid);
int co2_file_arrays(CO2 *co2, const AdamW *opt, GPT *m, int round, int mid, float **a, size_t *lens,
                    int read);
int co2_ckpt_layout(const Strategy *s);
void co2_ckpt_meta(const Strategy *s, CkptMeta *meta);
typedef struct {
    int rank, N, n;
    const float *arrays[CO2_STATE_MAX + 4];
    size_t lens[CO2_STATE_MAX + 4];
    const char *kind;
    const Backend *be;
} CO2Files;
int co2_write_file(const char *step_dir, void *ctx);
// Reads rank's co2_<rank>.bin of N (the run's resume checkpoint) into the k arrays; exits with
// EXIT_INPUT when it is bad (the file is this rank's).
void co2_read_file(const Strategy *s, int rank, int N, float *const *dev, const size_t *lens,
                   int k);
