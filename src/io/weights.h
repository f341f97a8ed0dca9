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
// The model shape stored in an init file. `heads`: the --heads the user gave, 0 when none;
// needed only for safetensors files without "n_head" metadata, and an error when it
// contradicts the head count the file records.
int init_read_config(const char *path, int heads, GPTConfig *cfg);
// Fills every parameter of m from an init file of either format (shapes must match m->cfg).
// On failure m's parameters are left unchanged.
int gpt_load_init_file(GPT *m, const char *path);
// Saves by extension: ".bin" → llm.c checkpoint (version 3, fp32), anything else → safetensors.
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
// Decodes n little-endian values of type t into float32.
void raw_to_f32(float *dst, const uint8_t *src, size_t n, RawFloat t);
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t h);
static inline uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t le64(const uint8_t *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

// Writes n floats as little-endian float32.
int aout_write_f32(AtomicOut *o, const float *x, size_t n);
