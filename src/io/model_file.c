// model_file.c — model_open(): checkpoint directory, Hugging Face Llama directory (config.json
// beside the weights) or weights file → GPT (see model_file.h).
#include "model_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "../common.h"
#include "checkpoint.h"
#include "hf_dir.h"
#include "weights.h"

int model_open(GPT *m, const Backend *be, const char *path, int heads, char *step_dir,
               size_t step_dir_len) {
    struct stat st;
    if (stat(path, &st)) return loom_fail("%s: no such checkpoint or weights file", path);
    if (step_dir && step_dir_len) step_dir[0] = 0;
    char cfg_path[4200];
    struct stat cst;
    int hf = S_ISDIR(st.st_mode) &&
             !path_fmt(cfg_path, sizeof cfg_path, "%s/%s", path, HF_CONFIG) &&
             !stat(cfg_path, &cst); // a Hugging Face directory: read as an init file below
    if (S_ISDIR(st.st_mode) && !hf) {
        char dir[4096];
        CkptMeta meta;
        if (checkpoint_resolve(path, dir, sizeof dir) || checkpoint_read_meta(dir, &meta))
            return -1;
        checkpoint_meta_free(&meta);
        if (gpt_create(m, &meta.cfg, be)) return -1;
        float *host = xmalloc(m->nparams * sizeof(float));
        int rc = checkpoint_read_state(dir, m->nparams, 0, m->nparams, host, 0, 0, NULL, NULL);
        if (!rc) be->upload(m->params, host, m->nparams);
        free(host);
        if (rc) return -1;
        if (step_dir) snprintf(step_dir, step_dir_len, "%s", dir);
        return 0;
    }
    GPTConfig cfg;
    if (init_read_config(path, heads, &cfg) || gpt_create(m, &cfg, be)) return -1;
    return gpt_load_init_file(m, path);
}
