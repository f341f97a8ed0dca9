// llmc_checkpoint.h — GPT-2 weights as the .bin checkpoints of llm.c (train_gpt2).
//
// File: 256 little-endian int32 header words
//   [0] 20240326 (magic)  [1] version: 3 = fp32 params, 5 = bf16 params
//   [2] maxT  [3] V  [4] L  [5] NH  [6] C  [7] Vp (vocabulary padded for kernels; 0 → V)
// then the parameters, each tensor stacked over all layers, in this order:
//   wte (Vp,C) wpe (maxT,C) ln1w (L,C) ln1b (L,C) qkvw (L,3C,C) qkvb (L,3C) attprojw (L,C,C)
//   attprojb (L,C) ln2w (L,C) ln2b (L,C) fcw (L,4C,C) fcb (L,4C) fcprojw (L,C,4C) fcprojb (L,C)
//   lnfw (C) lnfb (C)
// Linear weights are (out, in), as in loom. loom keeps the real vocabulary: rows [0,V) of wte;
// the padding rows are dropped on load and written as zeros on save.
//
// Tensors are matched to the model through the TensorSpec names (wte.weight, h.N.ln_1.weight,
// ...), never through loom's flat parameter order. The header is validated and the file size
// must be exactly what it implies; errors are -1 with "<path>: <what>" in loom_errmsg().
#pragma once
#include "../model/gpt.h"
#include "weights.h"

// The model shape in the checkpoint header.
int llmc_read_config(const char *path, GPTConfig *cfg);
// Locates every tensor of m in the file (a WeightsLocateFn, see weights.h); the header must
// match m->cfg. Nothing of the data is read.
int llmc_locate_gpt(const GPT *m, const char *path, WeightsSrc *src);
// Fills every tensor of m, streamed after llmc_locate_gpt has checked the file: on a malformed
// file m is left unchanged.
int llmc_load_gpt(GPT *m, const char *path);
// Writes version 3 (fp32) with Vp = V rounded up to a multiple of 128. Atomic, like
// st_save_gpt.
int llmc_save_gpt(const GPT *m, const char *path);
