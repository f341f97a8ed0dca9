// fuzz_manifest.c — checkpoint manifests (checkpoint.json, src/io/checkpoint.c): the input as
// DIR/checkpoint.json, read with checkpoint_read_meta and then checkpoint_read_state for a
// small model (no shard files exist, so reading one must fail cleanly). Calls the public API
// only; that code is maintained separately, so crashes here are reported, not fixed.
#include "../src/common.h"
#include "../src/io/checkpoint.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_file("checkpoint.json", data, size);
    CkptMeta meta;
    if (checkpoint_read_meta(fuzz_dir(), &meta) == 0) checkpoint_meta_free(&meta);
    float p[64], m[64], v[64];
    checkpoint_read_state(fuzz_dir(), 64, 0, 64, p, 0, 64, m, v);
    return 0;
}
