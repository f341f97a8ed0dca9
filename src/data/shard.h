// shard.h — llm.c token shards and the training data stream.
//
// File format (llm.c): a header of 256 int32 — [0] magic, [1] version, [2] token count —
// followed by that many tokens: uint16 (magic 20240520, version 1: vocabularies up to 65,536
// ids) or uint32 (magic 20240801, version 7: larger ones, Llama-3's 128,256). A data set is one
// or more shards (a file, a directory of *.bin, or a glob; either width, mixed) read as one
// concatenated token stream in sorted path order.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_MAGIC_U32 20240801
#define SHARD_VERSION_U32 7
#define SHARD_HEADER_INTS 256

// Write tokens as one shard (atomically) of `width` bytes a token (2 or 4); a 2-byte shard
// refuses a token ≥ 65,536. Returns 0 or -1 with loom_errmsg.
int shard_write(const char *path, const uint32_t *tokens, size_t n, int width);
// The width a vocabulary of `vocab` ids needs (2 up to 65,536, else 4).
int shard_width(int vocab);

typedef struct {
    int nfiles;
    char **paths;
    const unsigned char **tokens; // mmapped token arrays, one per file
    int *width;                   // their bytes per token (2 or 4)
    size_t *counts;               // tokens per file
    size_t *starts;               // offset of each file in the stream
    size_t total;                 // tokens in the stream
    void **maps;
    size_t *map_sizes;
    int vocab;
} DataSet;

// Opens and validates every shard (magic, version, size vs count, token ids < vocab).
int dataset_open(DataSet *d, const char *spec, int vocab);
void dataset_close(DataSet *d);
// The data order. Sequence i is tokens [i·T, i·T + T] of the stream (T+1 tokens, stride T:
// inputs the first T, targets shifted by one); there are ns = floor((total − 1) / T). Row b of
// data window w is global sequence g = w·B + b: epoch g / ns, index g mod ns, which with
// shuffle goes through a seeded permutation of the ns sequences, a new one per epoch (every
// sequence read once per epoch). Without shuffle window w < ns/B holds tokens [w·B·T,
// w·B·T + B·T] (one contiguous stretch); past the end the sequences continue modulo ns.
uint64_t dataset_num_sequences(const DataSet *d, int T);
// Whole windows of B sequences in one epoch: floor(ns / B) = floor((total − 1) / (B·T)).
uint64_t dataset_num_windows(const DataSet *d, int B, int T);
// Copies window `w` (B rows of T inputs and T targets). Returns 0, or -1 with loom_errmsg when
// the stream holds no sequence.
int dataset_window(DataSet *d, uint64_t w, int B, int T, int shuffle, uint64_t seed, int *inputs,
                   int *targets);
