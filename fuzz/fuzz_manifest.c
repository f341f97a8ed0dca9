// fuzz_manifest.c — libFuzzer target for the checkpoint manifest reader (src/io/ckpt_manifest.c
// through checkpoint_read_meta / checkpoint_read_state / checkpoint_read_prev). Each input is
// written as checkpoint.json into a temporary step directory that also holds three tiny shard
// files of a 30-parameter model (layers 1, heads 1, dim 1, vocab 2, block_size 1):
//   shard_00000.bin  [0, 16)  3 arrays, float i*0.5    crc32 dba48ec6
//   shard_00001.bin  [16, 30) 3 arrays, float i*-0.25 crc32 fb95a21c (the first is -0.0)
//   shard_00002.bin  [16, 30) 4 arrays, float i*0.125  crc32 f54a8255
// so valid manifests (the seeds in fuzz/corpus/manifest/) reach the shard reading code.
// Whatever the input, the readers must return 0 or -1 with a message: never crash, leak or
// read out of bounds.
// Build and run (the fuzz/ Makefile target lives elsewhere; this is the manual equivalent):
//   clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
//     fuzz/fuzz_manifest.c src/io/checkpoint.c src/io/ckpt_manifest.c src/common.c \
//     src/testhooks.c src/rng.c src/model/*.c -lcjson -lm -o build/fuzz_manifest
//   build/fuzz_manifest -max_total_time=60 fuzz/corpus/manifest
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/io/checkpoint.h"

static char dir[64];

static void write_floats(const char *name, int n, float scale) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    for (int i = 0; i < n; i++) {
        float x = (float)i * scale;
        fwrite(&x, sizeof x, 1, f);
    }
    fclose(f);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    snprintf(dir, sizeof dir, "/tmp/fuzz_manifest.XXXXXX");
    if (!mkdtemp(dir)) abort();
    write_floats("shard_00000.bin", 48, 0.5f);
    write_floats("shard_00001.bin", 42, -0.25f);
    write_floats("shard_00002.bin", 56, 0.125f);
    return 0;
}

// Every reader over the whole model and over partial ranges, as resuming strategies call them.
static void read_all(size_t n) {
    float *p = calloc(n + 1, sizeof(float)), *m = calloc(n + 1, sizeof(float));
    float *v = calloc(n + 1, sizeof(float)), *prev = calloc(n + 1, sizeof(float));
    checkpoint_read_state(dir, n, 0, n, p, 0, n, m, v);
    checkpoint_read_state(dir, n, n / 3, n / 2, p, n / 4, n, m, v);
    checkpoint_read_prev(dir, n, 0, n, prev);
    checkpoint_read_prev(dir, n, n / 2, n, prev);
    free(p), free(m), free(v), free(prev);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[128];
    snprintf(path, sizeof path, "%s/checkpoint.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    fwrite(data, 1, size, f);
    fclose(f);
    CkptMeta meta;
    if (checkpoint_read_meta(dir, &meta) == 0) {
        size_t n;
        if (gpt_param_count(&meta.cfg, &n) == 0 && n <= (1u << 16)) read_all(n);
        checkpoint_meta_free(&meta);
    }
    read_all(30); // the state readers validate on their own too (a caller's nparams)
    return 0;
}
