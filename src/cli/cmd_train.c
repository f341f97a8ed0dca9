// cmd_train.c — `loom train`: flags and config file → TrainArgs → train_run().
#include <stdio.h>
#include <string.h>

#include "../common.h"
#include "../model/gpt.h"
#include "../train/trainer.h"
#include "commands.h"
#include "options.h"

// The flags fill this (file scope, so the option table below is constant data).
static TrainArgs A;

static const Option OPTS[] = {
    {"init", OPT_STR, &A.init, "start from weights: Hugging Face GPT-2 .safetensors or llm.c .bin",
     NULL, 0, 0},
    {"layers", OPT_INT, &A.layers, "transformer layers L", NULL, 1, 1024},
    {"heads", OPT_INT, &A.heads, "attention heads H (also for --init files without n_head)", NULL,
     1, 1024},
    {"dim", OPT_INT, &A.dim, "channels C (divisible by --heads)", NULL, 1, 65536},
    {"vocab", OPT_INT, &A.vocab, "vocabulary size V (256 for byte data, 50257 for GPT-2 BPE)", NULL,
     2, GPT_MAX_VOCAB},
    {"block-size", OPT_INT, &A.block_size, "maximum sequence length (position embeddings)", NULL, 1,
     1 << 20},
    {"arch", OPT_STR, &A.arch,
     "model family: GPT-2's block or LLaMA's (RMSNorm, RoPE, GQA, SwiGLU)", "gpt2|llama", 0, 0},
    {"kv-heads", OPT_INT, &A.kv_heads, "llama: key/value heads, dividing --heads (0: --heads)",
     NULL, 0, 1024},
    {"ffn-dim", OPT_INT, &A.ffn_dim,
     "llama: SwiGLU hidden size (0: 8*dim/3 rounded up to a multiple of 64)", NULL, 0, 1 << 20},
    {"rope-theta", OPT_FLOAT, &A.rope_theta, "llama: RoPE base (0: 10000)", NULL, 0, 1e12},
    {"rope-scaling", OPT_STR, &A.rope_scaling,
     "llama: RoPE frequency scaling (llama3: Llama 3.1's, from the four flags below)",
     "none|llama3", 0, 0},
    {"rope-factor", OPT_FLOAT, &A.rope_factor, "llama3 scaling: factor (0: 8)", NULL, 0, 1e6},
    {"rope-low-freq-factor", OPT_FLOAT, &A.rope_low, "llama3 scaling: low_freq_factor (0: 1)", NULL,
     0, 1e6},
    {"rope-high-freq-factor", OPT_FLOAT, &A.rope_high, "llama3 scaling: high_freq_factor (0: 4)",
     NULL, 0, 1e6},
    {"rope-original-max-pos", OPT_INT, &A.rope_orig,
     "llama3 scaling: original_max_position_embeddings (0: 8192)", NULL, 0, 1 << 30},
    {"norm-eps", OPT_FLOAT, &A.norm_eps, "llama: RMSNorm epsilon (0: 1e-5)", NULL, 0, 1},
    {"tie-embeddings", OPT_ONOFF, &A.tie_embeddings,
     "llama: the head uses the token embedding (GPT-2's always does)", NULL, 0, 0},
    {"data", OPT_STR, &A.data, "training shards: a .bin file, a directory or a glob", NULL, 0, 0},
    {"val-data", OPT_STR, &A.val_data, "validation shards (file, directory or glob)", NULL, 0, 0},
    {"batch", OPT_INT, &A.batch, "micro-batch size B", NULL, 1, 1 << 20},
    {"seq", OPT_INT, &A.seq, "sequence length T (<= --block-size)", NULL, 1, 1 << 20},
    {"grad-accum", OPT_INT, &A.grad_accum, "micro-batches K per optimizer step", NULL, 1, 1 << 20},
    {"steps", OPT_INT, &A.steps, "optimizer steps", NULL, 0, 1 << 30},
    {"lr", OPT_FLOAT, &A.lr, "peak learning rate", NULL, 0, 10},
    {"lr-schedule", OPT_STR, &A.lr_schedule, "learning-rate schedule after warmup",
     "constant|cosine", 0, 0},
    {"warmup", OPT_INT, &A.warmup, "linear warmup steps", NULL, 0, 1 << 30},
    {"min-lr", OPT_FLOAT, &A.min_lr, "cosine floor", NULL, 0, 10},
    {"beta1", OPT_FLOAT, &A.beta1, "AdamW beta1", NULL, 0, 0.999999},
    {"beta2", OPT_FLOAT, &A.beta2, "AdamW beta2", NULL, 0, 0.999999},
    {"eps", OPT_FLOAT, &A.eps, "AdamW epsilon", NULL, 0, 1},
    {"weight-decay", OPT_FLOAT, &A.weight_decay, "decoupled weight decay (tensors with >= 2 dims)",
     NULL, 0, 10},
    {"grad-clip", OPT_FLOAT, &A.grad_clip, "global gradient-norm clip (0 = off)", NULL, 0, 1e9},
    {"seed", OPT_INT, &A.seed, "seed for init and shuffling", NULL, 0, 0},
    {"shuffle", OPT_ONOFF, &A.shuffle,
     "each row an independent sequence, seeded per-epoch order (off: in order)", NULL, 0, 0},
    {"threads", OPT_INT, &A.threads, "CPU threads for OpenMP and BLAS (0 = all cores)", NULL, 0,
     4096},
    {"device", OPT_STR, &A.device, "backend: cpu, emu (tests), cuda (a CUDA build)", NULL, 0, 0},
    {"dtype", OPT_STR, &A.dtype,
     "precision of the products: fp32, bf16 (a GPU, or a CPU with AVX512-BF16), or fp16 on a "
     "GPU (with --loss-scale dynamic); fp32 master weights and moments; default: the device's, "
     "bf16 on a GPU",
     "fp32|bf16|fp16", 0, 0},
    {"loss-scale", OPT_STR, &A.loss_scale,
     "gradient scaling, auto|off|dynamic|N: dynamic halves the scale and skips the step on "
     "overflow, doubles it after --loss-scale-interval clean steps; N: a static power of two; "
     "auto: dynamic with --dtype fp16, else off",
     NULL, 0, 0},
    {"loss-scale-init", OPT_FLOAT, &A.loss_scale_init, "dynamic loss scaling's first scale", NULL,
     1, 2.9e14},
    {"loss-scale-interval", OPT_INT, &A.loss_scale_interval,
     "clean steps before the dynamic loss scale doubles", NULL, 1, 1 << 30},
    {"recompute", OPT_FLAG, &A.recompute,
     "recompute each layer's forward during backward (less memory)", NULL, 0, 0},
    {"recompute-gelu", OPT_FLAG, &A.recompute_gelu,
     "GPT-2: keep no GELU output per layer, recompute it in the backward (16·B·T·C bytes less "
     "a layer, one more GELU a layer; exact)",
     NULL, 0, 0},
    {"metrics", OPT_STR, &A.metrics, "write one JSON line per step to this file", NULL, 0, 0},
    {"val-every", OPT_INT, &A.val_every, "evaluate --val-data every N steps (0 = at the end)", NULL,
     0, 1 << 30},
    {"val-windows", OPT_INT, &A.val_windows, "batches of validation data per evaluation", NULL, 1,
     1 << 20},
    {"save", OPT_STR, &A.save, "checkpoint directory (written at the end and every --save-every)",
     NULL, 0, 0},
    {"save-every", OPT_INT, &A.save_every, "checkpoint every N steps (0 = only at the end)", NULL,
     0, 1 << 30},
    {"keep", OPT_INT, &A.keep, "checkpoints to keep in --save (0 = all)", NULL, 0, 1 << 20},
    {"save-on-error", OPT_STR, &A.save_on_error,
     "a periodic save that fails: warn and go on, or stop (a failed final save always stops)",
     "continue|stop", 0, 0},
    {"resume", OPT_STR, &A.resume, "continue from a checkpoint directory", NULL, 0, 0},
    {"export", OPT_STR, &A.export_path,
     "write final weights as Hugging Face safetensors (LLaMA: a directory, config.json + "
     "model.safetensors, unless the path ends in .safetensors)",
     NULL, 0, 0},
    {"export-dtype", OPT_STR, &A.export_dtype,
     "tensor type of a LLaMA --export directory (bf16: rounded to nearest even)", "fp32|bf16", 0,
     0},
    {"on-nonfinite", OPT_STR, &A.on_nonfinite, "what a NaN/inf loss or gradient does", "stop|skip",
     0, 0},
    {"log-every", OPT_INT, &A.log_every, "log line interval when stderr is not a terminal", NULL, 1,
     1 << 30},
    {"progress", OPT_ONOFF, &A.progress, "progress line / periodic log", NULL, 0, 0},
    {"dp", OPT_INT, &A.dp, "data-parallel ranks (must equal the mpirun -np world size)", NULL, 1,
     1 << 20},
    {"zero", OPT_INT, &A.zero,
     "ZeRO stage: 1 shards optimizer state, 2 + gradients, 3 + parameters", NULL, 0, 3},
    {"bucket-mb", OPT_FLOAT, &A.bucket_mb, "gradient all-reduce bucket size in MiB (zero 0/1)",
     NULL, 1e-6, 1e6},
    {"comm-timeout", OPT_FLOAT, &A.comm_timeout,
     "seconds an operation may wait without progress before the job is aborted (0 = never)", NULL,
     0, 1e9},
    {"device-comm", OPT_STR, &A.device_comm,
     "collectives on device buffers: nccl (each rank its own GPU), host (through page-locked "
     "host stages and MPI), or auto (nccl where every rank can use it)",
     "auto|nccl|host", 0, 0},
    {"stop-grace", OPT_FLOAT, &A.stop_grace,
     "seconds a stop signal (SIGTERM, SIGINT, SIGUSR1) leaves to reach a step boundary and save "
     "(0 = no limit); a second signal exits at once",
     NULL, 0, 1e6},
    {"comm-thread", OPT_ONOFF, &A.comm_thread,
     "a progress thread drives non-blocking MPI operations every millisecond (off: only "
     "between kernels)",
     NULL, 0, 0},
    {"pp", OPT_INT, &A.pp, "pipeline stages (world size = dp x pp x tp x cp)", NULL, 1, 1 << 20},
    {"tp", OPT_INT, &A.tp,
     "tensor-parallel ranks (Megatron 1D: heads, MLP and vocabulary split; must divide --heads)",
     NULL, 1, 1 << 20},
    {"tp-mode", OPT_STR, &A.tp_mode,
     "tensor parallelism: Megatron 1D, or Colossal-AI 2D (SUMMA on a q x q grid, --tp q^2)",
     "1d|2d", 0, 0},
    {"sp", OPT_FLAG, &A.sp,
     "with --tp: sequence parallelism (LayerNorm/residual regions split along the sequence)", NULL,
     0, 0},
    {"cp", OPT_INT, &A.cp,
     "context-parallel ranks: ring attention over a sequence split into 2 x cp chunks", NULL, 1,
     1 << 20},
    {"schedule", OPT_STR, &A.schedule, "pipeline schedule", "gpipe|1f1b|2bw", 0, 0},
    {"stage-layers", OPT_STR, &A.stage_layers,
     "transformer layers per pipeline stage, e.g. 3,3 (default: balanced by cost)", NULL, 0, 0},
    {"plan", OPT_STR, &A.plan,
     "auto: profile, then pick dp/pp/batch/grad-accum/recompute for this job (global batch = "
     "batch x grad-accum x dp)",
     "auto", 0, 0},
    {"plan-mem-gb", OPT_FLOAT, &A.plan_mem_gb,
     "memory per rank for --plan auto (0: this machine's RAM / local ranks)", NULL, 0, 1e6},
    {"plan-bandwidth-gbps", OPT_FLOAT, &A.plan_bandwidth_gbps,
     "inter-rank bandwidth for --plan auto", NULL, 1e-6, 1e6},
    {"co2", OPT_FLAG, &A.co2,
     "CO2: local steps, outer all-reduce every --tau steps, one round stale, overlapped", NULL, 0,
     0},
    {"tau", OPT_INT, &A.tau, "CO2 inner steps per round", NULL, 1, 1 << 20},
    {"outer-lr", OPT_FLOAT, &A.outer_lr, "CO2 outer learning rate alpha", NULL, 0, 100},
    {"outer-momentum", OPT_FLOAT, &A.outer_momentum, "CO2 outer momentum beta", NULL, 0, 0.999999},
    {"gap-penalty", OPT_FLOAT, &A.gap_penalty, "CO2 staleness gap penalty lambda (constant mode)",
     NULL, 1e-6, 1e6},
    {"gap-mode", OPT_STR, &A.gap_mode,
     "CO2 gap penalty: the constant lambda, or adaptive per tensor", "constant|adaptive", 0, 0},
    {"outer-clip", OPT_FLOAT, &A.outer_clip,
     "CO2 element-wise clip of the outer momentum (0 = off)", NULL, 0, 1e9},
    {"offload", OPT_STR, &A.offload,
     "keep the training state in a slow tier and swap blocks through --fast-mem (host: GPU only)",
     "disk|host", 0, 0},
    {"offload-dir", OPT_STR, &A.offload_dir,
     "--offload disk (or host with --host-mem): directory for the scratch files (each rank its "
     "own subdirectory); loom peer without --offload: its outer state and the swarm's arrays "
     "live in files there",
     NULL, 0, 0},
    {"host-mem", OPT_STR, &A.host_mem,
     "--offload host: page-locked host memory per rank for the state, bytes or with K/M/G; "
     "with --offload-dir the rest of the state lives on disk below it",
     NULL, 0, 0},
    {"fast-mem", OPT_STR, &A.fast_mem,
     "--offload: fast memory per rank, bytes or with K/M/G (KiB/MiB/GiB)", NULL, 0, 0},
    {"offload-units", OPT_STR, &A.offload_units,
     "--offload: swap units as [[first,last],...] blocks (default: planned at start-up)", NULL, 0,
     0},
    {"offload-prefetch", OPT_INT, &A.offload_prefetch,
     "--offload with --offload-units: units read ahead", NULL, 1, 64},
    {"profile", OPT_STR, &A.profile,
     "--offload: block timings from `loom plan --save-profile` instead of measuring", NULL, 0, 0},
    {"dry-run", OPT_FLAG, &A.dry_run,
     "print the per-rank memory plan (dp 1/2/4 x ZeRO 0-3) and exit", NULL, 0, 0},
    {"dump-grads", OPT_STR, &A.dump_grads,
     "write the first step's gradients as safetensors (testing)", NULL, 0, 0},
    {"peak-gflops", OPT_FLOAT, &A.peak_gflops,
     "machine peak GFLOP/s for MFU (0: measure it, a short FMA probe)", NULL, 0, 1e9},
};

// `loom peer`: every train flag plus the swarm's (swarm/swarm.h).
static const Option PEER_OPTS[] = {
    {"listen", OPT_STR, &A.listen, "this peer's address HOST:PORT (port 0: any free port)", NULL, 0,
     0},
    {"bootstrap", OPT_STR, &A.bootstrap,
     "live peers to join through, HOST:PORT[,...] (none: this peer starts a swarm)", NULL, 0, 0},
    {"secret", OPT_STR, &A.secret, "the swarm's secret key file (loom keygen -o FILE)", NULL, 0, 0},
    {"peer-id", OPT_STR, &A.peer_id, "this peer's unique name ([A-Za-z0-9._-], <= 64)", NULL, 0, 0},
    {"advertise", OPT_STR, &A.advertise, "the address other peers should use (default: --listen)",
     NULL, 0, 0},
    {"peer-timeout", OPT_FLOAT, &A.peer_timeout, "seconds a silent peer stays in the view", NULL,
     0.1, 3600},
    {"min-peers", OPT_INT, &A.min_peers, "peers in the view before the first step", NULL, 1, 4096},
    {"outer-compress", OPT_STR, &A.outer_compress,
     "the outer Δs on the wire: fp32, int8 per 4096 floats, or the largest --topk-frac (with "
     "error feedback)",
     "none|int8|topk", 0, 0},
    {"peer-exchange", OPT_STR, &A.peer_exchange,
     "how a round's Δs are averaged: every Δ to every peer, or reduce-scatter + all-gather of "
     "slices (about 2 model sizes sent per peer per round, whatever the swarm's size)",
     "all|sharded", 0, 0},
    {"outer-compress-sums", OPT_STR, &A.outer_compress_sums,
     "--peer-exchange sharded: the slice sums of the all-gather on the wire, fp32 or int8 per "
     "4096 floats (the owner applies the dequantized sum too; no error feedback); auto: int8 "
     "when --outer-compress is int8 or topk",
     "auto|none|int8", 0, 0},
    {"topk-frac", OPT_FLOAT, &A.topk_frac,
     "--outer-compress topk: the share of a Δ's floats sent, in (0, 1]", NULL, 0, 0},
    {"topk-values", OPT_STR, &A.topk_values,
     "--outer-compress topk: the values sent exact, or as a sign and one of two magnitudes per "
     "4096 floats (2 bits each; what that drops goes into the error feedback)",
     "fp32|2bit", 0, 0},
};

// Flags of `loom train` that mean nothing for a peer.
static int peer_flags_check(const Option *opts, int n) {
    const char *bad[] = {"dp",           "pp",          "tp",       "zero",
                         "cp",           "sp",          "tp-mode",  "co2",
                         "comm-timeout", "plan",        "schedule", "stage-layers",
                         "bucket-mb",    "comm-thread", "dry-run",  "device-comm"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (options_was_set(opts, n, bad[i]))
            return loom_fail("--%s has no meaning for loom peer (each peer is one process; the "
                             "swarm averages CO2-style over whoever is in the round)",
                             bad[i]);
    const char *need[] = {"listen", "secret", "peer-id"};
    char *vals[] = {A.listen, A.secret, A.peer_id};
    for (int i = 0; i < 3; i++)
        if (!vals[i]) return loom_fail("loom peer needs --%s", need[i]);
    return 0;
}

static int train_main(int argc, char **argv, int peer) {
    train_args_defaults(&A);
    enum { NT = sizeof OPTS / sizeof OPTS[0], NP = sizeof PEER_OPTS / sizeof PEER_OPTS[0] };
    static Option all[NT + NP];
    memcpy(all, OPTS, sizeof OPTS);
    memcpy(all + NT, PEER_OPTS, sizeof PEER_OPTS);
    const Option *opts = peer ? all : OPTS;
    int n = peer ? NT + NP : NT;
    const char *cmd = peer ? "loom peer" : "loom train";
    int rc = options_parse(opts, n, argc, argv,
                           peer ? "usage: loom peer --data SHARDS --listen HOST:PORT --secret FILE "
                                  "--peer-id NAME [--bootstrap HOST:PORT,...] [options]"
                                : "usage: loom train --data SHARDS [options]",
                           NULL, 0, NULL);
    if (rc == 1) return 0;
    if (!rc && peer) rc = peer_flags_check(opts, n);
    if (rc) {
        fprintf(stderr, "%s: %s\n", cmd, loom_errmsg());
        return EXIT_USAGE;
    }
    A.peer = peer;
    if (A.init && !options_was_set(opts, n, "heads")) A.heads = 0; // from the file's metadata
    if (A.seq > A.block_size && !A.init && !A.resume)
        die(EXIT_USAGE, "--seq %d is longer than --block-size %d", A.seq, A.block_size);
    if (A.dry_run) return train_dry_run(&A);
    return train_run(&A);
}

int cmd_train(int argc, char **argv) { return train_main(argc, argv, 0); }

int cmd_peer(int argc, char **argv) { return train_main(argc, argv, 1); }
