// fuzz_hfconfig.c — a Hugging Face Llama directory's config.json (src/io/hf_dir.c): the input is
// the file's text, parsed with hf_config_parse; a shape it accepts must be a valid LLaMA shape
// (gpt_config_check) whose parameter count is computed or refused without overflow.
#include <stdio.h>
#include <stdlib.h>

#include "../src/common.h"
#include "../src/io/hf_dir.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    GPTConfig c;
    if (hf_config_parse((const char *)data, size, "config.json", &c)) return 0;
    size_t n;
    if (!gpt_is_llama(&c) || c.KV < 1 || c.H % c.KV || gpt_config_check(&c)) {
        fprintf(stderr, "fuzz_hfconfig: an accepted config is not a valid LLaMA shape\n");
        abort();
    }
    (void)gpt_param_count(&c, &n);
    return 0;
}
