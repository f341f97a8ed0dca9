// pipeline_swap.h — the swapped pipeline stage (--offload disk with --pp, any schedule, ZeRO 0):
// the hooks strat_pipeline.c gives the pipeline (PipelineConfig.swap_ops), implemented with the
// offload layer's tier in pipeline_swap.c.
#pragma once
#include "../parallel/pipeline.h"

typedef struct PipeSwapOps PipeSwapOps;
extern const PipeSwapOps PIPE_SWAP_OPS;
// --offload, on stderr from every rank: its stage's slots, the planned bytes against
// --fast-mem, the tier's traffic and the process's peak RSS.
void pipeline_swap_report(const Pipeline *p);
