// fuzz_config.c — JSON config files (`--config FILE`, src/cli/options.c): options_parse on
// argv {"train", "--config", FILE} with a table holding every option type (ranged and
// unranged integers and floats, strings with and without choices, on/off, flags).
#include "../src/cli/options.h"
#include "../src/common.h"
#include "fuzz_util.h"

static int layers, steps, shuffle, recompute;
static float lr, beta1;
static char *schedule, *data_spec;
static const char default_schedule[] = "cosine";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("config.json", data, size);
    const Option opts[] = {
        {"layers", OPT_INT, &layers, "", NULL, 1, 1024},
        {"steps", OPT_INT, &steps, "", NULL, 0, 0},
        {"lr", OPT_FLOAT, &lr, "", NULL, 0, 10},
        {"beta1", OPT_FLOAT, &beta1, "", NULL, 0, 0},
        {"lr-schedule", OPT_STR, &schedule, "", "constant|cosine", 0, 0},
        {"data", OPT_STR, &data_spec, "", NULL, 0, 0},
        {"shuffle", OPT_ONOFF, &shuffle, "", NULL, 0, 0},
        {"recompute", OPT_FLAG, &recompute, "", NULL, 0, 0},
    };
    int n = sizeof opts / sizeof opts[0];
    schedule = (char *)default_schedule;
    data_spec = NULL;
    char *argv[] = {"train", "--config", (char *)path, NULL};
    options_parse(opts, n, 3, argv, "usage", NULL, 0, NULL);
    if (schedule != default_schedule) free(schedule);
    free(data_spec);
    return 0;
}
