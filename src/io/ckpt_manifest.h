// ckpt_manifest.h — a checkpoint's manifest (checkpoint.json): the text ckpt_commit writes, and
// the reader that validates ALL of it (every field's type and range, the shards tiling the
// parameters, every shard file's size) before any of it is used. Internal to src/io/.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"

#define CKPT_FORMAT "loom-checkpoint-2"

// One shard file: the flat range [lo, hi) with `arrays` float32 arrays of hi-lo values each.
typedef struct {
    char file[64];
    size_t lo, hi;
    uint32_t crc;
    int arrays;
} CkptEntry;

typedef struct {
    char path[4200]; // step_dir/checkpoint.json, for messages
    CkptMeta meta;   // meta.train_args is owned
    int64_t seq;     // save order within the checkpoint directory (0: not recorded)
    size_t nparams;  // of meta.cfg's model shape
    CkptEntry *e;    // sorted by (lo, hi); several replicas may list the same range
    int n;
} CkptManifest;

// Reads and validates step_dir/checkpoint.json and the sizes of the shard files it lists.
// Returns 0, or -1 with loom_errmsg naming the file and the field.
int manifest_read(const char *step_dir, CkptManifest *mf);
void manifest_free(CkptManifest *mf);
// The manifest of a save listing info[0, n) (entries with `written` 0 or an empty range left
// out); the caller frees the text.
char *manifest_text(const CkptMeta *meta, int64_t seq, const CkptShardInfo *info, int n);
// 1 when step_dir holds a loom manifest (*seq: its save order, 0 when not recorded), else 0:
// a directory loom did not write, which pruning leaves alone.
int manifest_seq(const char *step_dir, int64_t *seq);
