// cmd_export.c — `loom export CKPT -o OUT`: a checkpoint (or weights file) → Hugging Face
// safetensors (or an llm.c .bin when OUT ends in .bin).
#include <stdio.h>

#include "../common.h"
#include "../io/model_file.h"
#include "../io/weights.h"
#include "commands.h"
#include "options.h"

int cmd_export(int argc, char **argv) {
    char *out = NULL;
    int heads = 0;
    const Option opts[] = {
        {"output|o", OPT_STR, &out,
         "output file: .safetensors (Hugging Face GPT-2) or .bin (llm.c)", NULL, 0, 0},
        {"heads", OPT_INT, &heads, "head count for weights files without n_head", NULL, 0, 1024},
    };
    char *pos[1];
    int npos = 0;
    int rc = options_parse(opts, 2, argc, argv,
                           "usage: loom export CHECKPOINT_DIR|WEIGHTS -o OUT.safetensors|OUT.bin",
                           pos, 1, &npos);
    if (rc == 1) return 0;
    if (rc) die(EXIT_USAGE, "export: %s", loom_errmsg());
    if (npos != 1 || !out) die(EXIT_USAGE, "usage: loom export CHECKPOINT -o OUT.safetensors");
    GPT m;
    const Backend *be = backend_select("cpu", 0);
    if (!be || model_open(&m, be, pos[0], heads, NULL, 0)) die_last(EXIT_INPUT);
    if (gpt_save_weights_file(&m, out)) die_last(EXIT_IO);
    fprintf(stderr, "loom: wrote %s (%.2fM parameters)\n", out, m.nparams / 1e6);
    gpt_free(&m);
    return 0;
}
