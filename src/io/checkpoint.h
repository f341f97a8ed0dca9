// checkpoint.h — full training state on disk: parameters, AdamW moments, step, schedule
// position, RNG state and data position, with a CRC-32 per file.
//
// Layout:  DIR/latest            one line: the name of the newest complete step directory
//          DIR/step_00000100/    checkpoint.json (manifest), shard_<rank>.bin, extras
// A shard file holds a contiguous range [lo, hi) of the flat layout: parameters, then AdamW m,
// then v (3·(hi-lo) float32), and for a PipeDream-2BW run also the previous weight version
// W(t−1) (4·(hi-lo); the manifest's "arrays"). Ranges are independent of how many ranks wrote
// them.
// A save writes DIR/step_N.partial/, fsyncs every file, renames it to DIR/step_N (an existing
// step_N is swapped out atomically, see install in checkpoint.c), then atomically replaces
// DIR/latest. A crash at any point leaves `latest` naming a complete checkpoint. The manifest
// records its save order ("seq"); pruning keeps the `keep` most recently saved checkpoints and
// always the one `latest` names, and touches only directories loom wrote.
#pragma once
#include <stdint.h>

#include "../model/gpt.h"

// What the data position counts (the manifest's "data_order"): windows of B sequences of T+1
// tokens, stride T, that --shuffle on permutes sequence by sequence ("sequences", what every
// manifest is written with); a manifest without the field was written before, when a window
// was B·T contiguous tokens and --shuffle on permuted whole windows (the same tokens without
// shuffle within the first epoch).
enum { CKPT_ORDER_WINDOWS = 0, CKPT_ORDER_SEQUENCES = 1 };

typedef struct {
    GPTConfig cfg;
    int step;  // optimizer steps completed
    int opt_t; // AdamW updates applied
    uint64_t rng_state, rng_inc;
    uint64_t data_window;     // next data window index (windows of B sequences)
    int data_order;           // read: CKPT_ORDER_SEQUENCES, or _WINDOWS (no "data_order")
    char tokenizer[16];       // "byte", "gpt2" or "" (unknown)
    char *train_args;         // JSON text of the flags that shaped the run (owned, may be NULL)
    int co2_workers, co2_tau; // > 0: every worker wrote its CO2 state (co2_<rank>.bin)
    int co2_sharded;          // that state is sharded (--zero 1/2)
    int co2_tp, co2_cp;       // a worker's tensor- and context-parallel ranks (0 or 1: one)
    int co2_tp2d;             // 1: those tp ranks are a 2D grid (--tp-mode 2d), each its block
    int co2_pp;               // a worker's pipeline stages (0 or 1: one)
    double loss_scale;        // > 0: dynamic loss scaling's scale (optim/loss_scale.h)
    int loss_scale_good;      // and its clean steps since the scale last changed
} CkptMeta;

// Writes extra files (e.g. the tokenizer) into the step directory before it is committed.
typedef int (*CkptExtraFn)(const char *step_dir, void *ctx);

// One rank's piece of the training state: the flat range [lo, hi) of the parameters and of
// both AdamW moments (host pointers, each hi-lo floats); prev: 2bw's previous weight version
// of the same range, or NULL.
// be: when set, the arrays are that backend's memory and are written through a bounded buffer
// (no host copy of the shard); NULL: host memory.
// fetch: when set, the arrays are read through it instead (array CKPT_PARAMS/M/V, flat offset
// at, n floats into dst; 0 or -1 with loom_errmsg) — a state kept in a slow tier.
typedef struct {
    size_t lo, hi;
    const float *params, *m, *v, *prev;
    const Backend *be;
    int (*fetch)(void *ctx, int array, size_t at, size_t n, float *dst);
    void *fetch_ctx;
} CkptShard;

// A save, file by file (the collective coordination lives with the strategies, see
// strategy/ckpt_save.h): ckpt_begin creates DIR/step_N.partial (path into part); each rank with
// a shard writes it with ckpt_write_shard; one rank then writes the manifest listing info[0, n)
// (one entry per rank, `written` 0 for ranks without a shard), renames the directory to
// DIR/step_N, replaces `latest` and prunes to `keep` step directories (ckpt_commit). A rank
// whose range is empty writes no file (written 0).
typedef struct {
    int written;
    size_t lo, hi;
    uint32_t crc;
    int arrays;
} CkptShardInfo;
int ckpt_begin(const char *dir, int step, char *part, size_t n);
int ckpt_write_shard(const char *part, int rank, int step, const CkptShard *sh,
                     CkptShardInfo *info);
int ckpt_commit(const char *dir, const char *part, const CkptMeta *meta, const CkptShardInfo *info,
                int n, CkptExtraFn extra, void *extra_ctx, int keep);
// A save that failed (ckpt_commit's -1 included: it leaves the previous checkpoints and
// `latest` as they were, its own files in part): removes part, once no rank writes into it.
void ckpt_discard(const char *part);
// A rank's own state file (e.g. a CO2 worker's outer state and inner AdamW moments): a header
// naming its kind, the writer's rank and world size and each array's length, then the float32
// arrays, with a CRC-32 over all of it. Reading checks every one of those and names the file.
// Both stream the arrays through a bounded buffer; be: the arrays are that backend's memory
// (NULL: host memory).
int state_file_write(const char *path, const char *kind, int rank, int nranks,
                     const float *const *arrays, const size_t *lens, int n, const Backend *be);
int state_file_read(const char *path, const char *kind, int rank, int nranks, float *const *arrays,
                    const size_t *lens, int n, const Backend *be);
// The same through callbacks (array i, offset at inside it, n floats): state in a slow tier.
int state_file_write_fn(const char *path, const char *kind, int rank, int nranks,
                        const size_t *lens, int n,
                        int (*fetch)(void *ctx, int array, size_t at, size_t n, float *dst),
                        void *ctx);
int state_file_read_fn(const char *path, const char *kind, int rank, int nranks, const size_t *lens,
                       int n,
                       int (*store)(void *ctx, int array, size_t at, size_t n, const float *src),
                       void *ctx);
// Resolves DIR (with a `latest` file, which must name a step_<digits> directory inside DIR) or a
// step directory into the step directory path.
int checkpoint_resolve(const char *path, char *step_dir, size_t n);
// Reads and validates the whole manifest (every field, the shards tiling the model, the shard
// files' sizes; no tensors yet). Errors name the file and the field.
int checkpoint_read_meta(const char *step_dir, CkptMeta *meta);
void checkpoint_meta_free(CkptMeta *meta);
// Reads any layout into any other: parameters [plo, phi) into params and moments [olo, ohi)
// into m and v (either may be NULL / an empty range), after verifying every shard it touches
// against its checksum. This is what makes resuming on another dp size or ZeRO stage work.
int checkpoint_read_state(const char *step_dir, size_t nparams, size_t plo, size_t phi,
                          float *params, size_t olo, size_t ohi, float *m, float *v);
// What a rank reads back, straight into its own buffers: for each array of the shards (params,
// AdamW m, v, 2bw's previous version) the flat range [lo, hi) it wants (lo == hi: none) and
// where it goes (hi-lo floats; backend memory when be is set). The shard files are streamed
// through a bounded buffer, each read once and checked against its CRC-32.
enum { CKPT_PARAMS, CKPT_M, CKPT_V, CKPT_PREV };
// store: when set, what is read goes through it instead of dst (array, flat offset at, n floats).
typedef struct {
    size_t lo[4], hi[4];
    float *dst[4];
    const Backend *be;
    int (*store)(void *ctx, int array, size_t at, size_t n, const float *src);
    void *store_ctx;
    int no_prev; // out: a shard holding part of the CKPT_PREV range has no previous version
} CkptWant;
int checkpoint_read_into(const char *step_dir, size_t nparams, CkptWant *want);
// The previous weight version (2bw) of [lo, hi) into prev. Returns 0, 1 when the checkpoint
// does not hold one (it was not written by 2bw; prev is untouched), or -1 on an error.
int checkpoint_read_prev(const char *step_dir, size_t nparams, size_t lo, size_t hi, float *prev);
