// cmd_export.c — `loom export CKPT -o OUT`: a checkpoint (or weights file) → Hugging Face
// safetensors (or an llm.c .bin when OUT ends in .bin); a LLaMA model to an OUT not ending in
// .safetensors or .bin → a Hugging Face directory (config.json + model.safetensors, F32 or
// --dtype bf16).
#include <stdio.h>
#include <string.h>

#include "../common.h"
#include "../io/hf_dir.h"
#include "../io/model_file.h"
#include "../io/weights.h"
#include "commands.h"
#include "options.h"

int cmd_export(int argc, char **argv) {
    char *out = NULL, *dtype = "fp32";
    int heads = 0;
    const Option opts[] = {
        {"output|o", OPT_STR, &out,
         "output: .safetensors (Hugging Face names) or .bin (llm.c); a LLaMA model to any other "
         "path: a Hugging Face directory",
         NULL, 0, 0},
        {"dtype", OPT_STR, &dtype, "tensor type of a LLaMA directory", "fp32|bf16", 0, 0},
        {"heads", OPT_INT, &heads, "head count for weights files without n_head", NULL, 0, 1024},
    };
    char *pos[1];
    int npos = 0;
    int rc = options_parse(
        opts, 3, argc, argv,
        "usage: loom export CHECKPOINT_DIR|WEIGHTS|HF_DIR -o OUT.safetensors|OUT.bin|OUT_DIR", pos,
        1, &npos);
    if (rc == 1) return 0;
    if (rc) die(EXIT_USAGE, "export: %s", loom_errmsg());
    if (npos != 1 || !out) die(EXIT_USAGE, "usage: loom export CHECKPOINT -o OUT.safetensors");
    GPT m;
    const Backend *be = backend_select("cpu", 0);
    if (!be || model_open(&m, be, pos[0], heads, NULL, 0)) die_last(EXIT_INPUT);
    int dir = hf_export_is_dir(&m.cfg, out), bf16 = !strcmp(dtype, "bf16");
    if (bf16 && !dir)
        die(EXIT_USAGE, "export: --dtype bf16 is written for a LLaMA model's directory only");
    if (dir ? hf_save_dir_model(&m, out, bf16) : gpt_save_weights_file(&m, out)) die_last(EXIT_IO);
    fprintf(stderr, "loom: wrote %s (%.2fM parameters)\n", out, m.nparams / 1e6);
    gpt_free(&m);
    return 0;
}
