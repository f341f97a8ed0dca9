// fuzz_offload.c — block swapping's user-supplied text: the first byte picks the parser, the rest
// is its input. 0: a --fast-mem size (offload_parse_size); 1: an --offload-units list
// (offload_plan_parse_units, against a 4-layer model's 6 blocks); 2: a saved profile, the
// JSON `loom train --offload --profile FILE` and `loom plan --profile FILE` read (profile_load).
#include "../src/backend/backend.h"
#include "../src/common.h"
#include "../src/offload/offload.h"
#include "../src/plan/profile.h"
#include "fuzz_util.h"

static GPT model;
static int ready;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    if (!ready) {
        GPTConfig c = {.L = 4, .H = 2, .C = 32, .V = 64, .maxT = 32};
        if (gpt_create_layout(&model, &c, backend_select("cpu", 1))) abort();
        ready = 1;
    }
    char *text = malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    if (data[0] % 3 == 0) {
        size_t bytes;
        offload_parse_size("--fast-mem", text, &bytes);
    } else if (data[0] % 3 == 1) {
        OffloadPlan p = {0};
        if (!offload_plan_parse_units(&model, text, &p)) {
            int next = 0; // a list it accepts covers the blocks in order
            for (int u = 0; u < p.nunits; u++) {
                if (p.unit[u].first != next || p.unit[u].last < p.unit[u].first) abort();
                next = p.unit[u].last + 1;
            }
            if (next != model.nblocks) abort();
        }
        offload_plan_free(&p);
    } else {
        Profile prof;
        profile_load(&prof, fuzz_file("profile.json", data + 1, size - 1));
    }
    free(text);
    return 0;
}
