// model_file.h — open a model from whatever the user points at: a checkpoint directory (its
// `latest` step or a step directory), a Hugging Face safetensors file or an llm.c .bin.
#pragma once
#include "../model/gpt.h"

// A directory with a config.json is a Hugging Face Llama directory (hf_dir.h).
// Creates m on backend be and loads its weights. `heads` as for --heads (0 = from the file).
// When step_dir is non-NULL it receives the resolved checkpoint step directory ("" for files).
int model_open(GPT *m, const Backend *be, const char *path, int heads, char *step_dir,
               size_t step_dir_len);
