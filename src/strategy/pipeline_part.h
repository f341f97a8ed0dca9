// pipeline_part.h — what strat_pipeline.c and pipeline_part.c (a stage that runs a tensor- or
// context-parallel part of its blocks) share. Not for other files.
#pragma once
#include "../parallel/pipeline.h"
#include "part_io.h"
#include "strat_cp.h"
#include "strat_pp_co2.h"
#include "strategy.h"

typedef struct {
    Pipeline *p;
    PipelineConfig pc;
    PipelineIO io;
    Strategy *s;
    GPT part;     // tp > 1 or cp > 1: this rank's tensor-parallel part, which the stage runs
    GPT *m;       // the model the stage runs: s->model, or &part
    PartCut cut;  // the part's map; start-up and saves: host arrays in its layout
    CpRing *ring; // cp > 1: the ring of this stage's cp ranks
    int *seq_in, *seq_tg; // cp > 1: whole sequences (B,T) before the rank's chunks are cut
    int steps;
    PpCo2 *co2;       // --co2: every pipeline a worker (strat_pp_co2.c)
    PartSpill *spill; // --offload: the whole model assembled for an export (pp_param_source)
} PipeState;

// The gradient group (dp, or dp x cp: the ranks holding the same part of the stage).
const Comm *ppart_grad_comm(const Grid *g);
// Installs the tp group's collectives in ps->part (sp: --sp, the regions hold the rank's rows).
void ppart_install_tp(PipeState *ps, int sp);
// PipelineIO.params and .load for a part: the whole layout's range read and cut.
int ppart_params(void *ctx, size_t lo, size_t hi, float *dst);
int ppart_load(void *ctx, size_t lo, size_t hi, float *params, float *prev, size_t olo, size_t ohi,
               float *m, float *v);
// A checkpoint in the whole layout, assembled over tp (Strategy.save of a part's stage).
int ppart_save(Strategy *s, const char *dir, CkptMeta *meta, CkptExtraFn extra, void *extra_ctx,
               int keep);
// The whole model's weights into host: every stage gathered over pp, the parts over tp.
int ppart_full_params(PipeState *ps, float *host);
// Frees the host arrays of ps->cut.
void ppart_stage_free(PipeState *ps);
