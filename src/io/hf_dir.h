// hf_dir.h — Hugging Face Llama model directories, read and written: config.json (the shape)
// beside the weights, either one model.safetensors or shards named by
// model.safetensors.index.json ({"weight_map": {"<tensor>": "<shard file>", ...}}), tensors
// F32, BF16 or F16 under Hugging Face Llama names (the names of loom's LLaMA layout).
//
// Every function returns 0 on success or -1 with loom_errmsg() naming the file and the field,
// tensor or shard that is wrong.
#pragma once
#include <stddef.h>

#include "../model/gpt.h"

#define HF_CONFIG "config.json"
#define HF_WEIGHTS "model.safetensors"
#define HF_INDEX "model.safetensors.index.json"

// Whether path names an existing directory (an init path that is one is read as a Hugging
// Face directory; a checkpoint directory has no config.json).
int hf_is_dir(const char *path);
// Whether `loom export -o OUT` / `train --export OUT` of model cfg writes a directory: a LLaMA
// model and OUT not ending in ".safetensors" or ".bin" (GPT-2 always writes one file).
int hf_export_is_dir(const GPTConfig *cfg, const char *out);

// The shape in config.json's text (name: the file, for messages): model_type "llama";
// hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, vocab_size,
// max_position_embeddings required; num_key_value_heads (default: the heads), rms_norm_eps
// (1e-6), rope_theta (10000), tie_word_embeddings (false), rope_scaling (null; "llama3" with its
// four fields: Llama 3.1's frequency scaling). What loom does not implement is refused:
// head_dim other than hidden_size / heads, attention_bias or mlp_bias true, hidden_act other
// than silu, a rope_scaling type other than llama3 (or "default").
int hf_config_parse(const char *text, size_t len, const char *name, GPTConfig *cfg);
// hf_config_parse of DIR/config.json.
int hf_read_config(const char *dir, GPTConfig *cfg);

// Checks that DIR holds every tensor of m, of the right shape and a supported dtype, in
// model.safetensors or in the shards its index names (all present), reading no tensor data.
int hf_check_dir(const GPT *m, const char *dir);
// The flat range [lo, hi) of m's parameters from DIR, in ascending pieces to sink (checked
// first as hf_check_dir; returns the first non-zero sink result, or 0 / -1).
int hf_stream_dir(const GPT *m, const char *dir, size_t lo, size_t hi, GptSink sink, void *ctx);

// Writes DIR/config.json (model_type llama, architectures ["LlamaForCausalLM"], the shape,
// torch_dtype) and DIR/model.safetensors (F32, or BF16 rounded to nearest even when bf16),
// creating DIR when needed (an index left in it by a sharded model is removed: it would be read
// instead); the parameters read through src into buf (cap floats).
int hf_save_dir(const GPT *m, const char *dir, int bf16, GptSource src, void *ctx, float *buf,
                size_t cap);
// The same from m->params.
int hf_save_dir_model(const GPT *m, const char *dir, int bf16);
