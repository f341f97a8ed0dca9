// part_io.h — moving a rank's part of the model to and from the whole flat layout, written once
// for every holding that is a part: a Megatron 1D tensor-parallel part (strat_tp.c, and each
// pipeline stage of one: strat_pipeline.c) and a 2D grid part (strat_tp2d.c). A PartMap says
// how a part's elements map to the whole; the cuts (initial weights, --init, a resumed
// checkpoint streamed into host staging arrays in the part's layout) and the gathers (a whole
// array assembled from every part of the group: saves, exports) go through it.
#pragma once
#include "../offload/swap.h"
#include "../parallel/comm.h"
#include "strategy.h"

typedef struct {
    const GPT *whole, *part; // the whole model's layout, this rank's part's
    int ranks;               // parts in the group: tp (1D) or q·q (2D)
    int q, i, j;             // 2D: the grid's side and this rank's row and column (q 0: 1D)
    int me;                  // 1D: this rank's index in the group
} PartMap;

PartMap part_map_1d(const GPT *whole, const GPT *part, int tp, int tpi);
PartMap part_map_2d(const GPT *whole, const GPT *part, int q, int i, int j);

// The whole layout's [at, at+n) (src, host) cut into the part's layout (dst, host, the part's
// nparams floats): the elements this rank holds.
void part_from_whole(const PartMap *m, size_t at, size_t n, const float *src, float *dst);
// The same into dst holding the part's flat range from element `base` on (a whole block's range
// into the part's block: base = that block's offset).
void part_from_whole_at(const PartMap *m, size_t at, size_t n, const float *src, float *dst,
                        size_t base);
// Part `rank` of the group (src, host, its layout) into the whole flat array dst (host).
void part_to_whole(const PartMap *m, int rank, const float *src, float *dst);
// Part `rank`'s elements of the whole flat range [at, at+n) (src: its layout from element base
// on) into dst[0..n), the others left as they are: summed over the group's parts (zeros
// elsewhere), each whole element comes from exactly one part (2D: a replicated tensor from the
// grid's row 0).
void part_to_whole_range_at(const PartMap *m, int rank, const float *src, size_t base, size_t at,
                            size_t n, float *dst);

// Host staging arrays in the part's layout (CKPT_PARAMS .. CKPT_PREV) that a stream of the
// whole layout is cut into: a checkpoint_read_into store (CkptWant.store) and a params_stream
// sink (GptSink) over it.
typedef struct {
    PartMap map;
    float *stage[4];
} PartCut;
int part_cut_store(void *cut, int array, size_t at, size_t n, const float *src);
int part_cut_sink(void *cut, size_t at, size_t n, const float *src);
void part_cut_free(PartCut *c);

// Every part of src (this rank's: backend memory, or host memory when `host`) gathered over the
// group's communicator c and assembled into dst (host, the whole layout), on every rank.
int part_gather_whole(const PartMap *m, const Comm *c, const float *src, int host, float *dst);

// --offload (part_swap.c): a swapped part filled from s's whole layout (s->model), block by
// block: s's initial weights, or on resume (s->resume_dir) the checkpoint's parameters and
// moments. Each part block b's array k (0 parameters, 1 m, 2 v) is cut into stage (cap floats,
// at least the part's largest block) and handed to store. 0 or -1.
typedef int (*PartBlockStore)(void *ctx, int k, int b, const float *stage);
int part_fill_blocks(const Strategy *s, const PartMap *map, float *stage, size_t cap,
                     PartBlockStore store, void *ctx);
// The same into the swap executor's tier, through its largest slot.
int part_swap_fill(const Strategy *s, const PartMap *map, Swapper *sw);

// --offload, a checkpoint save or an export (part_swap_save.c): this rank's range of the whole
// flat layout (to < 0: range r of c->size equal ranges on rank r; else all of it on rank `to`),
// its first `arrays` arrays (parameters, m, v), assembled over c from every rank's tier (sw)
// block by block, through the largest slot and one window, into a scratch file under dir (tier
// rank `rank`). Collective over c (every rank of the writing group). NULL on failure
// (loom_errmsg). part_spill_shard: the shard to write, read from that file (CkptShard.fetch);
// part_spill_params: a GptSource over its parameters.
typedef struct PartSpill PartSpill;
PartSpill *part_swap_spill(const PartMap *m, const Comm *c, Swapper *sw, const char *dir, int rank,
                           int to, int arrays);
// The same from any part that reads its block b's array k (0 parameters, 1 m, 2 v) into a
// buffer on request (fetch: 0 or -1), through stage (cap floats, at least the part's largest
// block; NULL: a failure, agreed over c).
typedef int (*PartBlockFetch)(void *ctx, int k, int b, float *dst);
PartSpill *part_blocks_spill(const PartMap *m, const Comm *c, PartBlockFetch fetch, void *ctx,
                             float *stage, size_t cap, const char *dir, int rank, int to,
                             int arrays);
int part_spill_fetch(void *ctx, int array, size_t at, size_t n, float *dst);
int part_spill_params(void *ctx, size_t at, size_t n, float *dst);
CkptShard part_spill_shard(PartSpill *sp);
// The file by itself: rank `rank`'s scratch file under dir for `arrays` arrays of the flat range
// [lo, hi), filled in order through one buffer: part_spill_len, the length of the window from a
// (not past e) that stays inside one of the file's chunks (lo: the range the window is for);
// part_spill_at, where the window from a goes; part_spill_put, array k's window [a, a+len) is
// there (written out when its chunk is full). NULL / -1 on failure (loom_errmsg).
PartSpill *part_spill_open(const char *dir, int rank, size_t lo, size_t hi, int arrays);
size_t part_spill_len(size_t lo, size_t a, size_t e);
float *part_spill_at(PartSpill *sp, size_t a);
int part_spill_put(PartSpill *sp, int k, size_t a, size_t len);
void part_spill_free(PartSpill *sp);
