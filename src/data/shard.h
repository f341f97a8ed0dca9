// shard.h — llm.c token shards and the training data stream.
//
// File format (llm.c): a header of 256 int32 — [0] magic 20240520, [1] version 1, [2] token
// count — followed by that many uint16 tokens. A data set is one or more shards (a file, a
// directory of *.bin, or a glob) read as one concatenated token stream in sorted path order.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256

// Write tokens as one shard (atomically). Returns 0 or -1 with loom_errmsg.
int shard_write(const char *path, const uint16_t *tokens, size_t n);

typedef struct {
    int nfiles;
    char **paths;
    const uint16_t **tokens; // mmapped token arrays, one per file
    size_t *counts;          // tokens per file
    size_t *starts;          // offset of each file in the stream
    size_t total;            // tokens in the stream
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
