// fuzz_safetensors.c — safetensors weights (src/io/safetensors.c): st_read_config on the input
// as a file, then st_load_gpt into a fixed small model and, when the file's own shape is small,
// into a model of that shape, without and with --heads (what `loom train --init FILE` does).
#include "../src/backend/backend.h"
#include "../src/common.h"
#include "../src/io/safetensors.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("w.safetensors", data, size);
    const Backend *be = backend_cpu();
    GPTConfig cfg;
    size_t np;
    for (int heads = 0; heads <= 2; heads += 2) { // without and with --heads
        if (st_read_config(path, heads, &cfg) || gpt_param_count(&cfg, &np) || np > (1 << 20))
            continue;
        GPT m;
        if (gpt_create(&m, &cfg, be) == 0) {
            st_load_gpt(&m, path);
            gpt_free(&m);
        }
        break;
    }
    static const GPTConfig small = {.L = 2, .H = 2, .C = 8, .V = 11, .maxT = 4};
    GPT m;
    if (gpt_create(&m, &small, be) == 0) {
        st_load_gpt(&m, path);
        gpt_free(&m);
    }
    return 0;
}
