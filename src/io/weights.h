// weights.h — weight files as a whole: picking the format of an init file by its content
// (safetensors or an llm.c checkpoint), and the small file helpers both format modules share:
// bounds-checked reads, a streaming atomic writer and little-endian float (de)coding.
//
// Every function returns 0 on success or -1 with loom_errmsg() set to "<path>: <what>".
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common.h"
#include "../model/gpt.h"

// ---------------------------------------------------------------- whole files, any format

typedef enum { WEIGHTS_SAFETENSORS = 1, WEIGHTS_LLMC = 2 } WeightsFormat;

// Looks at the first bytes: the llm.c magic 20240326, or a safetensors header ('{' at byte 8).
int weights_detect(const char *path, WeightsFormat *fmt);
// The model shape stored in an init file (a directory: a Hugging Face Llama directory, hf_dir.h,
// which the other functions below also accept). `heads`: the --heads the user gave, 0 when none;
// needed only for safetensors files without "n_head" metadata, and an error when it
// contradicts the head count the file records.
int init_read_config(const char *path, int heads, GPTConfig *cfg);
// Fills every parameter of m from an init file of either format (shapes must match m->cfg).
// The whole file is checked first (gpt_check_init_file), so a malformed one leaves m's
// parameters unchanged; the tensors are then streamed (gpt_stream_init_file).
int gpt_load_init_file(GPT *m, const char *path);
// Checks an init file against m's layout without reading its tensors: every tensor present,
// of the right shape and type, inside the file.
int gpt_check_init_file(const GPT *m, const char *path);
// The flat range [lo, hi) of m's parameters from an init file, to sink in ascending pieces of
// host memory through one buffer of WEIGHTS_STREAM_FLOATS floats (nothing the size of the
// model or of a tensor: a transposed tensor is read a group of rows at a time). Checked first as
// gpt_check_init_file; returns the first non-zero sink result, or 0 / -1.
int gpt_stream_init_file(const GPT *m, const char *path, size_t lo, size_t hi, GptSink sink,
                         void *ctx);
// Saves by extension: ".bin" → llm.c checkpoint (version 3, fp32), anything else → safetensors,
// except that a LLaMA model to a path not ending in ".safetensors" becomes a Hugging Face
// directory (hf_dir.h: config.json + model.safetensors, F32).
int gpt_save_weights_file(const GPT *m, const char *path);

// ---------------------------------------------------------------- helpers for the formats

// A file opened for bounded reads.
typedef struct {
    int fd;
    uint64_t size;
    const char *path;
} RFile;

int rfile_open(RFile *f, const char *path);
// Reads exactly n bytes at off; fails ("truncated") when [off, off+n) is not inside the file.
int rfile_read(const RFile *f, uint64_t off, void *buf, size_t n);
void rfile_close(RFile *f);

typedef enum { RAW_F32, RAW_F16, RAW_BF16 } RawFloat;
static inline size_t raw_float_size(RawFloat t) { return t == RAW_F32 ? 4 : 2; }

// Where a tensor of a model's layout is in a weights file: the byte offset of its data, the
// element type and whether the file holds the transpose (Hugging Face's Conv1D: (in, out) for
// loom's (out, in)). The formats fill one per m->tensors (st_locate_gpt, llmc_locate_gpt).
typedef struct {
    uint64_t off;
    RawFloat type;
    int transposed;
} WeightsSrc;
// Floats of the buffer weights_stream reads through.
#define WEIGHTS_STREAM_FLOATS ((size_t)1 << 20)
// Streams [lo, hi) of m's parameters from file f, its tensors located in src, to sink.
int weights_stream(const GPT *m, const RFile *f, const WeightsSrc *src, size_t lo, size_t hi,
                   GptSink sink, void *ctx);
// A format's locator: every tensor of m in the file at path, checked (0), or -1 naming the file
// and what is wrong; nothing of the tensors' data is read.
typedef int (*WeightsLocateFn)(const GPT *m, const char *path, WeightsSrc *src);
// Locates with loc, then streams [lo, hi) to sink / loads all of m's parameters.
int weights_stream_file(const GPT *m, const char *path, WeightsLocateFn loc, size_t lo, size_t hi,
                        GptSink sink, void *ctx);
int weights_load(GPT *m, const char *path, WeightsLocateFn loc);
// Decodes n little-endian values of type t into float32.
void raw_to_f32(float *dst, const uint8_t *src, size_t n, RawFloat t);
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t h);
static inline uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t le64(const uint8_t *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

// Writes n floats as little-endian float32 / n floats taken every `stride` floats of x.
int aout_write_f32(AtomicOut *o, const float *x, size_t n);
int aout_write_f32_strided(AtomicOut *o, const float *x, size_t n, size_t stride);
