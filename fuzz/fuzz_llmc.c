// fuzz_llmc.c — llm.c .bin checkpoints (src/io/llmc_checkpoint.c): llmc_read_config on the
// input as a file, then llmc_load_gpt into a model of the header's shape when it is small, and
// into a fixed small model; also init_read_config (format detection, src/io/weights.c).
#include "../src/backend/backend.h"
#include "../src/common.h"
#include "../src/io/llmc_checkpoint.h"
#include "../src/io/weights.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("model.bin", data, size);
    const Backend *be = backend_cpu();
    GPTConfig cfg;
    size_t np;
    if (llmc_read_config(path, &cfg) == 0 && gpt_param_count(&cfg, &np) == 0 && np <= (1 << 20)) {
        GPT m;
        if (gpt_create(&m, &cfg, be) == 0) {
            llmc_load_gpt(&m, path);
            gpt_free(&m);
        }
    }
    init_read_config(path, 0, &cfg);
    static const GPTConfig small = {.L = 1, .H = 2, .C = 4, .V = 8, .maxT = 4};
    GPT m;
    if (gpt_create(&m, &small, be) == 0) {
        llmc_load_gpt(&m, path);
        gpt_free(&m);
    }
    return 0;
}
