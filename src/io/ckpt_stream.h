// ckpt_stream.h — streaming a checkpoint shard's arrays into a file (checkpoint.c's shards,
// state_file.c's per-rank state files). Internal to src/io/.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "weights.h"

// Floats moved per piece when a shard is streamed to or from backend memory.
#define CKPT_STREAM_FLOATS ((size_t)1 << 20)

// Appends n floats of src (backend memory when sh->be is set; sh->fetch's pieces of array a when
// set) to o through buf (CKPT_STREAM_FLOATS floats), updating crc. 0 or -1.
int ckpt_write_array(AtomicOut *o, const CkptShard *sh, int a, const float *src, size_t n,
                     uint32_t *crc, float *buf);
