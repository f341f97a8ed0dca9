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
// Number of distinct windows of B·T+1 tokens (consecutive windows overlap by one token).
uint64_t dataset_num_windows(const DataSet *d, int B, int T);
// Copies window number `w` (modulo the number of windows): inputs = tokens [w·BT, w·BT+BT),
// targets shifted by one. With shuffle, window w of each epoch is a seeded permutation.
int dataset_window(DataSet *d, uint64_t w, int B, int T, int shuffle, uint64_t seed, int *inputs,
                   int *targets);
