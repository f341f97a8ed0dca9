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

// The model shape stored in a safetensors file: C and V from wte.weight (V,C), maxT from
// wpe.weight, L from the h.N.* names, H from the "n_head" metadata. `heads`: the --heads the
// user gave (0 when none); it is required when the file has no "n_head", and an error when it
// contradicts "n_head". Other GPT-2 metadata (n_layer, n_embd, vocab_size, n_positions), when
// present, must agree with the tensors.
int st_read_config(const char *path, int heads, GPTConfig *cfg);

// Fills every tensor of m from the file (transposing Conv1D weights, converting F16/BF16).
// Missing tensors, wrong shapes, unsupported dtypes and layers beyond m->cfg.L are errors
// naming the tensor and the file. On failure m's parameters are left unchanged.
int st_load_gpt(GPT *m, const char *path);

// Writes every tensor as F32 in Hugging Face GPT-2 layout (no prefix), with metadata
// {"format":"pt","n_head","n_layer","n_embd","vocab_size","n_positions"}; the header is padded
// with spaces to a multiple of 8 bytes. Atomic: the destination is replaced only when the whole
// file has been written and synced.
int st_save_gpt(const GPT *m, const char *path);
