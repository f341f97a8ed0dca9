// cmd_train.c — `loom train`: flags and config file → TrainArgs → train_run().
#include <stdio.h>

#include "../common.h"
#include "../train/trainer.h"
#include "commands.h"
#include "options.h"

int cmd_train(int argc, char **argv) {
    TrainArgs a;
    train_args_defaults(&a);
    const Option opts[] = {
        {"init", OPT_STR, &a.init,
         "start from weights: Hugging Face GPT-2 .safetensors or llm.c .bin", NULL, 0, 0},
        {"layers", OPT_INT, &a.layers, "transformer layers L", NULL, 1, 1024},
        {"heads", OPT_INT, &a.heads, "attention heads H (also for --init files without n_head)",
         NULL, 1, 1024},
        {"dim", OPT_INT, &a.dim, "channels C (divisible by --heads)", NULL, 1, 65536},
        {"vocab", OPT_INT, &a.vocab, "vocabulary size V (256 for byte data, 50257 for GPT-2 BPE)",
         NULL, 2, 65536},
        {"block-size", OPT_INT, &a.block_size, "maximum sequence length (position embeddings)",
         NULL, 1, 1 << 20},
        {"data", OPT_STR, &a.data, "training shards: a .bin file, a directory or a glob", NULL, 0,
         0},
        {"val-data", OPT_STR, &a.val_data, "validation shards (file, directory or glob)", NULL, 0,
         0},
        {"batch", OPT_INT, &a.batch, "micro-batch size B", NULL, 1, 1 << 20},
        {"seq", OPT_INT, &a.seq, "sequence length T (<= --block-size)", NULL, 1, 1 << 20},
        {"grad-accum", OPT_INT, &a.grad_accum, "micro-batches K per optimizer step", NULL, 1,
         1 << 20},
        {"steps", OPT_INT, &a.steps, "optimizer steps", NULL, 0, 1 << 30},
        {"lr", OPT_FLOAT, &a.lr, "peak learning rate", NULL, 0, 10},
        {"lr-schedule", OPT_STR, &a.lr_schedule, "learning-rate schedule after warmup",
         "constant|cosine", 0, 0},
        {"warmup", OPT_INT, &a.warmup, "linear warmup steps", NULL, 0, 1 << 30},
        {"min-lr", OPT_FLOAT, &a.min_lr, "cosine floor", NULL, 0, 10},
        {"beta1", OPT_FLOAT, &a.beta1, "AdamW beta1", NULL, 0, 0.999999},
        {"beta2", OPT_FLOAT, &a.beta2, "AdamW beta2", NULL, 0, 0.999999},
        {"eps", OPT_FLOAT, &a.eps, "AdamW epsilon", NULL, 0, 1},
        {"weight-decay", OPT_FLOAT, &a.weight_decay,
         "decoupled weight decay (tensors with >= 2 dims)", NULL, 0, 10},
        {"grad-clip", OPT_FLOAT, &a.grad_clip, "global gradient-norm clip (0 = off)", NULL, 0, 1e9},
        {"seed", OPT_INT, &a.seed, "seed for init and shuffling", NULL, 0, 0},
        {"shuffle", OPT_ONOFF, &a.shuffle, "seeded, resumable shuffling of data windows", NULL, 0,
         0},
        {"threads", OPT_INT, &a.threads, "CPU threads for OpenMP and BLAS (0 = all cores)", NULL, 0,
         4096},
        {"device", OPT_STR, &a.device, "backend: cpu (cuda in a CUDA build)", NULL, 0, 0},
        {"recompute", OPT_FLAG, &a.recompute,
         "recompute each layer's forward during backward (less memory)", NULL, 0, 0},
        {"metrics", OPT_STR, &a.metrics, "write one JSON line per step to this file", NULL, 0, 0},
        {"val-every", OPT_INT, &a.val_every, "evaluate --val-data every N steps (0 = at the end)",
         NULL, 0, 1 << 30},
        {"val-windows", OPT_INT, &a.val_windows, "batches of validation data per evaluation", NULL,
         1, 1 << 20},
        {"save", OPT_STR, &a.save,
         "checkpoint directory (written at the end and every --save-every)", NULL, 0, 0},
        {"save-every", OPT_INT, &a.save_every, "checkpoint every N steps (0 = only at the end)",
         NULL, 0, 1 << 30},
        {"keep", OPT_INT, &a.keep, "checkpoints to keep in --save (0 = all)", NULL, 0, 1 << 20},
        {"resume", OPT_STR, &a.resume, "continue from a checkpoint directory", NULL, 0, 0},
        {"export", OPT_STR, &a.export_path, "write final weights as Hugging Face safetensors", NULL,
         0, 0},
        {"on-nonfinite", OPT_STR, &a.on_nonfinite, "what a NaN/inf loss or gradient does",
         "stop|skip", 0, 0},
        {"log-every", OPT_INT, &a.log_every, "log line interval when stderr is not a terminal",
         NULL, 1, 1 << 30},
        {"progress", OPT_ONOFF, &a.progress, "progress line / periodic log", NULL, 0, 0},
        {"dp", OPT_INT, &a.dp, "data-parallel ranks (must equal the mpirun -np world size)", NULL,
         1, 1 << 20},
        {"zero", OPT_INT, &a.zero,
         "ZeRO stage: 1 shards optimizer state, 2 + gradients, 3 + parameters", NULL, 0, 3},
        {"bucket-mb", OPT_FLOAT, &a.bucket_mb, "gradient all-reduce bucket size in MiB (zero 0/1)",
         NULL, 1e-6, 1e6},
        {"comm-timeout", OPT_FLOAT, &a.comm_timeout,
         "seconds an operation may wait without progress before the job is aborted (0 = never)",
         NULL, 0, 1e9},
        {"comm-thread", OPT_ONOFF, &a.comm_thread,
         "a progress thread drives non-blocking MPI operations every millisecond (off: only "
         "between kernels)",
         NULL, 0, 0},
        {"pp", OPT_INT, &a.pp, "pipeline stages (world size = dp x pp)", NULL, 1, 1 << 20},
        {"schedule", OPT_STR, &a.schedule, "pipeline schedule", "gpipe|1f1b|2bw", 0, 0},
        {"stage-layers", OPT_STR, &a.stage_layers,
         "transformer layers per pipeline stage, e.g. 3,3 (default: balanced by cost)", NULL, 0, 0},
        {"plan", OPT_STR, &a.plan,
         "auto: profile, then pick dp/pp/batch/grad-accum/recompute for this job (global batch = "
         "batch x grad-accum x dp)",
         "auto", 0, 0},
        {"plan-mem-gb", OPT_FLOAT, &a.plan_mem_gb,
         "memory per rank for --plan auto (0: this machine's RAM / local ranks)", NULL, 0, 1e6},
        {"plan-bandwidth-gbps", OPT_FLOAT, &a.plan_bandwidth_gbps,
         "inter-rank bandwidth for --plan auto", NULL, 1e-6, 1e6},
        {"co2", OPT_FLAG, &a.co2,
         "CO2: local steps, outer all-reduce every --tau steps, one round stale, overlapped", NULL,
         0, 0},
        {"tau", OPT_INT, &a.tau, "CO2 inner steps per round", NULL, 1, 1 << 20},
        {"outer-lr", OPT_FLOAT, &a.outer_lr, "CO2 outer learning rate alpha", NULL, 0, 100},
        {"outer-momentum", OPT_FLOAT, &a.outer_momentum, "CO2 outer momentum beta", NULL, 0,
         0.999999},
        {"gap-penalty", OPT_FLOAT, &a.gap_penalty,
         "CO2 staleness gap penalty lambda (constant mode)", NULL, 1e-6, 1e6},
        {"gap-mode", OPT_STR, &a.gap_mode,
         "CO2 gap penalty: the constant lambda, or adaptive per tensor", "constant|adaptive", 0, 0},
        {"outer-clip", OPT_FLOAT, &a.outer_clip,
         "CO2 element-wise clip of the outer momentum (0 = off)", NULL, 0, 1e9},
        {"dry-run", OPT_FLAG, &a.dry_run,
         "print the per-rank memory plan (dp 1/2/4 x ZeRO 0-3) and exit", NULL, 0, 0},
        {"dump-grads", OPT_STR, &a.dump_grads,
         "write the first step's gradients as safetensors (testing)", NULL, 0, 0},
        {"peak-gflops", OPT_FLOAT, &a.peak_gflops, "machine peak GFLOP/s for MFU", NULL, 1e-3, 1e9},
    };
    int n = (int)(sizeof opts / sizeof opts[0]);
    int rc = options_parse(opts, n, argc, argv, "usage: loom train --data SHARDS [options]", NULL,
                           0, NULL);
    if (rc == 1) return 0;
    if (rc) {
        fprintf(stderr, "loom train: %s\n", loom_errmsg());
        return EXIT_USAGE;
    }
    if (a.init && !options_was_set(opts, n, "heads")) a.heads = 0; // from the file's metadata
    if (a.seq > a.block_size && !a.init && !a.resume)
        die(EXIT_USAGE, "--seq %d is longer than --block-size %d", a.seq, a.block_size);
    if (a.dry_run) return train_dry_run(&a);
    return train_run(&a);
}
