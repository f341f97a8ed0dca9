// pipeline_swap.h — the swapped pipeline stage (--offload disk with --pp, any schedule, ZeRO 0):
// the hooks strat_pipeline.c gives the pipeline (PipelineConfig.swap_ops), implemented with the
// offload layer's tier in pipeline_swap.c.
#pragma once
#include "../parallel/pipeline.h"
#include "part_io.h"
#include "strategy.h"

typedef struct PipeSwapOps PipeSwapOps;
extern const PipeSwapOps PIPE_SWAP_OPS;
// --offload, on stderr from every rank: its stage's slots, the planned bytes against
// --fast-mem, the tier's traffic and the process's peak RSS.
void pipeline_swap_report(const Pipeline *p);

// --offload, an export (pipeline_export.c): the whole model's (N floats) newest parameters on
// rank 0 of pp_comm into a scratch file under dir (tier rank `rank`), each stage's range sent
// window by window from its tier; then *src reads them from there, with the stage's idle slot
// as its scratch (*spill: the file, the caller frees it with part_spill_free). Collective over
// pp_comm. 1 (*src set on rank 0), or -1 (loom_errmsg).
int pipeline_swap_source(Pipeline *p, const Comm *pp_comm, size_t N, const char *dir, int rank,
                         PartSpill **spill, ParamSource *src);
