// safetensors.h — GPT-2 weights in the safetensors format, named and laid out like Hugging
// Face's GPT-2 (Conv1D weights stored as (in, out), the transpose of loom's (out, in)).
//
// File: u64 little-endian header length N, N bytes of JSON
//   { "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//     "__metadata__": {"<key>": "<string>", ...} }
// then the data section; offsets are relative to its start.
//
// Reading accepts names with or without a "transformer." prefix, F32/F16/BF16 data, and
// ignores tensors loom does not use (h.N.attn.bias, h.N.attn.masked_bias, the tied
// lm_head.weight, ...). Every header is validated before any data is touched (header length,
// JSON, dtypes, integral shapes, offsets inside the data section, non-overlapping and equal to
// dtype size × element count); malformed files give -1 and "<path>: <what>" in loom_errmsg().
#pragma once
#include "../model/gpt.h"
#include "weights.h"

// The model shape stored in a safetensors file: C and V from wte.weight (V,C), maxT from
// wpe.weight, L from the h.N.* names, H from the "n_head" metadata. `heads`: the --heads the
// user gave (0 when none); it is required when the file has no "n_head", and an error when it
// contradicts "n_head". Other GPT-2 metadata (n_layer, n_embd, vocab_size, n_positions), when
// present, must agree with the tensors.
int st_read_config(const char *path, int heads, GPTConfig *cfg);

// Locates every tensor of m in the file (a WeightsLocateFn, see weights.h): present, of the
// right shape and a supported dtype; nothing of the data is read. Missing tensors, wrong
// shapes, unsupported dtypes and layers beyond m->cfg.L are errors naming the tensor and the
// file.
int st_locate_gpt(const GPT *m, const char *path, WeightsSrc *src);
// The same for the tensors i of m with file_of[i] == file only (one shard of a sharded
// model); the other entries of src are left alone.
int st_locate_tensors(const GPT *m, const char *path, const int *file_of, int file,
                      WeightsSrc *src);
// Fills every tensor of m from the file (transposing Conv1D weights, converting F16/BF16),
// streamed after st_locate_gpt has checked all of it: on a malformed file m's parameters are
// left unchanged.
int st_load_gpt(GPT *m, const char *path);

// Writes every tensor as F32 in Hugging Face GPT-2 layout (no prefix), with metadata
// {"format":"pt","n_head","n_layer","n_embd","vocab_size","n_positions"}; the header is padded
// with spaces to a multiple of 8 bytes. Atomic: the destination is replaced only when the whole
// file has been written and synced. The parameters are read from m->params piece by piece
// (no copy of the model).
int st_save_gpt(const GPT *m, const char *path);
// The same with the parameters read through src (flat offset at, n floats into dst) into buf,
// cap floats of it, at least st_save_floats(m): a model whose parameters are not in memory
// (block swapping's tier) is written tensor by tensor.
int st_save_gpt_fn(const GPT *m, const char *path, GptSource src, void *ctx, float *buf,
                   size_t cap);
// The same writing BF16 (round to nearest even; NaN stays NaN) when bf16 is non-zero.
int st_save_gpt_as(const GPT *m, const char *path, int bf16, GptSource src, void *ctx, float *buf,
                   size_t cap);
// Floats of the largest tensor the file holds transposed (read whole to be written row by row).
size_t st_save_floats(const GPT *m);

// The shape Hugging Face stores for t (its dimensions: 1 or 2).
static inline int st_hf_shape(const TensorSpec *t, uint64_t shape[2]) {
    if (t->ndim == 1) {
        shape[0] = (uint64_t)t->shape[0];
        return 1;
    }
    shape[0] = (uint64_t)t->shape[t->hf_conv1d ? 1 : 0];
    shape[1] = (uint64_t)t->shape[t->hf_conv1d ? 0 : 1];
    return 2;
}
