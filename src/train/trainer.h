// trainer.h — `loom train`: its flags (TrainArgs; defaults and the strategy configuration
// they make in args.c), the run (loop.c: setup, then batch → strategy step → metrics →
// validation → checkpoint), --plan auto and --dry-run (autoplan.c). The same loop runs as one
// process or as every rank of an MPI job; how a step is distributed is the strategy's
// (strategy/strategy.h).
#pragma once
#include "../model/gpt.h"

typedef struct {
    // model shape (ignored when --init or --resume supplies it)
    char *init;
    int layers, heads, dim, vocab, block_size;
    // the family: "gpt2" | "llama"; LLaMA's shape (0: its default; see GPTConfig)
    char *arch;
    int kv_heads, ffn_dim, tie_embeddings;
    float rope_theta, norm_eps;
    char *rope_scaling;                     // "none" | "llama3" (Llama 3.1's frequency scaling)
    float rope_factor, rope_low, rope_high; // its factors (0: Llama 3.1's 8, 1, 4)
    int rope_orig;                          // its original context (0: 8192)
    // data
    char *data, *val_data;
    int batch, seq, grad_accum, steps, shuffle;
    // optimizer
    float lr, min_lr, beta1, beta2, eps, weight_decay, grad_clip;
    char *lr_schedule;
    int warmup;
    // run
    int seed, threads, recompute;
    int recompute_gelu;      // GPT-2: GELU recomputed in the backward (GPT.recompute_gelu)
    char *device;            // backend: cpu (cuda with a CUDA build)
    char *dtype;             // precision (NULL: the device's default)
    char *loss_scale;        // "auto" | "off" | "dynamic" | a power of two (optim/loss_scale.h)
    float loss_scale_init;   // dynamic scaling's first scale (2^16)
    int loss_scale_interval; // clean steps before it doubles (2000)
    char *metrics, *save, *resume, *export_path, *on_nonfinite, *dump_grads;
    char *export_dtype;  // "fp32" | "bf16" (a LLaMA --export directory only)
    char *save_on_error; // a periodic save that fails: "continue" (warn, retry) or "stop"
    int save_every, keep, val_every, val_windows, log_every, progress;
    float stop_grace;  // seconds a stop signal leaves for the step boundary and the save
    float peak_gflops; // for MFU; 0: measured at the start (the backend's peak_gflops)
    // parallelism (the process grid; world size = dp, until pipeline/tensor parallelism)
    int dp, zero, dry_run;
    int pp;              // pipeline stages
    int tp;              // tensor-parallel ranks (Megatron 1D, or 2D SUMMA with tp_mode "2d")
    const char *tp_mode; // "1d" | "2d"
    int sp;              // sequence parallelism within tp
    int cp;              // context-parallel ranks (ring attention)
    char *schedule;      // gpipe | 1f1b | 2bw
    char *stage_layers;  // transformer layers per stage, e.g. "3,3" (NULL: balanced)
    char *plan;          // "auto": profile and pick dp/pp/batch/grad-accum/recompute
    float plan_mem_gb, plan_bandwidth_gbps;
    float bucket_mb, comm_timeout;
    const char *device_comm; // --device-comm: auto | nccl | host
    int comm_thread; // progress thread for non-blocking MPI operations
    // CO2: local steps + one-round-stale outer all-reduce (the dp ranks are its workers)
    int co2, tau;
    float outer_lr, outer_momentum, gap_penalty, outer_clip;
    char *gap_mode;
    // block swapping: the training state in a slow tier, --fast-mem of it in memory
    char *offload, *offload_dir, *fast_mem, *host_mem, *offload_units, *profile;
    int offload_prefetch;
    // loom peer: the swarm (swarm/), CO2's rule over its peers
    int peer, min_peers;
    char *listen, *bootstrap, *secret, *peer_id, *advertise;
    float peer_timeout;
    char *outer_compress;      // none|int8|topk
    char *outer_compress_sums; // auto|none|int8: the sharded all-gather's slice sums
    char *peer_exchange;       // all|sharded
    float topk_frac;
    char *topk_values; // fp32|2bit
} TrainArgs;

void train_args_defaults(TrainArgs *a);
// The model shape the flags ask for (arch, LLaMA's defaults filled in); -1 with loom_errmsg
// naming the flag when it is impossible (a LLaMA flag with --arch gpt2, --kv-heads not dividing
// --heads, an odd head size for RoPE, ...).
int train_model_config(const TrainArgs *a, GPTConfig *cfg);
// JSON text of the flags that shaped the run, for the checkpoint manifest (caller frees).
char *train_args_json(const TrainArgs *a);
// The "shuffle" of such a record: 0 or 1, or -1 when json is NULL or has no number there.
int train_args_shuffle(const char *json);
// --plan auto: profiles the model, searches the plans (dp, pp, tp, cp, micro-batch, recompute)
// for this job and adopts the best one.
void train_apply_auto_plan(TrainArgs *a);
// Runs training; returns a process exit status (0 on success) and prints errors itself.
int train_run(const TrainArgs *a);
// --dry-run: prints the per-rank memory plan for dp 1, 2, 4 (and --dp) × ZeRO 0–3, then this
// run's layout's (dp × pp × tp × cp, sp, 1D/2D; plan/layout_mem.h), and returns.
int train_dry_run(const TrainArgs *a);
