// ckpt_save.h — a checkpoint save as a collective: every rank of `c` calls it; ranks with a
// shard write it in parallel, every rank may write files of its own (rank_files), and rank 0
// writes the manifest and commits the step directory (io/checkpoint.h does the file work).
// All ranks return the same status.
#pragma once
#include "../io/checkpoint.h"
#include "../parallel/comm.h"

int ckpt_save_collective(const char *dir, const Comm *c, const CkptShard *mine,
                         const CkptMeta *meta, CkptExtraFn extra, void *extra_ctx,
                         CkptExtraFn rank_files, void *rank_ctx, int keep);
