// checkpoint.h — full training state on disk: parameters, AdamW moments, step, schedule
// position, RNG state and data position, with a CRC-32 per file.
//
// Layout:  DIR/latest            one line: the name of the newest complete step directory
//          DIR/step_00000100/    checkpoint.json (manifest), model.bin, optim.bin, extras
// A save writes DIR/step_N.partial/, fsyncs every file, renames it to DIR/step_N, then
// atomically replaces DIR/latest. A crash at any point leaves the previous checkpoint intact.
#pragma once
#include <stdint.h>

#include "../model/gpt.h"
#include "../train/optim.h"

typedef struct {
    GPTConfig cfg;
    int step;               // optimizer steps completed
    int opt_t;              // AdamW updates applied
    uint64_t rng_state, rng_inc;
    uint64_t data_window;   // next data window index
    char tokenizer[16];     // "byte", "gpt2" or "" (unknown)
    char *train_args;       // JSON text of the flags that shaped the run (owned, may be NULL)
} CkptMeta;

// Writes extra files (e.g. the tokenizer) into the step directory before it is committed.
typedef int (*CkptExtraFn)(const char *step_dir, void *ctx);

int checkpoint_save(const char *dir, const GPT *m, const AdamW *opt, const CkptMeta *meta,
                    CkptExtraFn extra, void *extra_ctx, int keep);
// Resolves DIR (with a `latest` file) or a step directory into the step directory path.
int checkpoint_resolve(const char *path, char *step_dir, size_t n);
// Reads and validates the manifest (no tensors yet).
int checkpoint_read_meta(const char *step_dir, CkptMeta *meta);
void checkpoint_meta_free(CkptMeta *meta);
// Loads parameters (and, when opt != NULL, the AdamW moments) after verifying checksums.
int checkpoint_load(const char *step_dir, GPT *m, AdamW *opt);
