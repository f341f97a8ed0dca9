// ckpt_save.h — a checkpoint save as a collective: every rank of `c` calls it; ranks with a
// shard write it in parallel, every rank may write files of its own (rank_files), and rank 0
// writes the manifest and commits the step directory (io/checkpoint.h does the file work).
// All ranks return the same status.
#pragma once
#include "../io/checkpoint.h"
#include "../model/gpt.h"
#include "../parallel/comm.h"

// Tensor parallelism: one array of the whole layout's range [lo, hi) assembled on rank `to` of
// tp_comm (into dst there, hi-lo floats; other ranks may pass NULL). Every rank of the group
// fills windows of the range with what its part holds (src: host, the part's layout;
// replicated tensors from tp rank 0 only) and a reduce-scatter sums each window into `to`, so
// no rank holds more of the whole model than the range. Collective over tp_comm.
int ckpt_tp_assemble(const Comm *tp_comm, const GPT *whole, const GPT *part, const float *src,
                     size_t lo, size_t hi, int to, float *dst);

// Tensor parallelism: every rank's np floats (mine: host) gathered over tp_comm into a new host
// array of size·np floats, rank r's at r·np (the caller frees it); NULL if the gather failed.
float *ckpt_tp_gather_parts(const Comm *tp_comm, const float *mine, size_t np);

int ckpt_save_collective(const char *dir, const Comm *c, const CkptShard *mine,
                         const CkptMeta *meta, CkptExtraFn extra, void *extra_ctx,
                         CkptExtraFn rank_files, void *rank_ctx, int keep);
