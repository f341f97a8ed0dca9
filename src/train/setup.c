// setup.c — a training process's setup and teardown (see run.h).
#include <dirent.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common.h"
#include "../io/dirlock.h"
#include "../io/fsutil.h"
#include "../io/hf_dir.h"
#include "../io/weights.h"
#include "../offload/offload.h"
#include "../testhooks.h"
#include "run.h"

_Noreturn void run_fail(const Run *r, int code) {
    if (!r->world || r->world->rank == 0) fprintf(stderr, "loom: %s\n", loom_errmsg());
    fflush(stderr);
    // Most of these failures are every rank's (a refused configuration, a bad file): rank 0 says
    // why. mpirun ends the whole job as soon as one rank exits with an error, so the others give
    // rank 0 half a second to say it first (else a loaded machine can lose the message).
    if (r->world && r->world->size > 1 && r->world->rank != 0) usleep(500000);
    exit(code);
}

static void setup_grid(Run *r) {
    const TrainArgs *a = r->a;
    r->world = comm_world(NULL, NULL);
    comm_set_timeout(a->comm_timeout);
    if (a->comm_thread) comm_start_progress_thread(1e-3);
    if (grid_create(&r->grid, r->world, a->dp, a->pp, a->tp, a->cp)) {
        // every rank fails this check alike: they meet once rank 0 has said why, so mpirun
        // (which kills the job when the first rank exits) cannot cut its message off
        if (r->world->rank == 0) fprintf(stderr, "loom: %s\n", loom_errmsg());
        fflush(stderr);
        comm_barrier(r->world);
        exit(EXIT_USAGE);
    }
    r->lead = r->world->rank == 0;
}

// The model's layout; its parameters come later, range by range, through initial_params (so a
// rank that keeps a shard or a stage never holds the whole model).
static int setup_model(Run *r, const Backend *be) {
    const TrainArgs *a = r->a;
    GPTConfig cfg;
    if (!a->resume && train_model_config(a, &cfg)) return -2; // a usage error
    if (a->resume) {
        if (checkpoint_resolve(a->resume, r->resume_dir, sizeof r->resume_dir) ||
            checkpoint_read_meta(r->resume_dir, &r->resume))
            return -1;
        cfg = r->resume.cfg;
    } else if (a->init && init_read_config(a->init, a->heads, &cfg)) {
        return -1;
    } else if (a->init && !strcmp(a->arch, "llama") && !gpt_is_llama(&cfg)) {
        return loom_fail("--arch llama: %s holds a GPT-2 model (a LLaMA one is a Hugging Face "
                         "directory: config.json + model.safetensors)",
                         a->init);
    }
    if (strcmp(a->export_dtype, "fp32") &&
        !(a->export_path && hf_export_is_dir(&cfg, a->export_path))) {
        loom_fail("--export-dtype %s: only a LLaMA model's --export directory is written in BF16",
                  a->export_dtype);
        return -2;
    }
    if (gpt_create_layout(&r->model, &cfg, be)) return -1;
    if (a->recompute_gelu && (gpt_is_llama(&cfg) || !strcmp(a->tp_mode, "2d")))
        return loom_fail(
            "--recompute-gelu: GPT-2 blocks only, in every layout but --tp-mode 2d (%s "
            "keeps its MLP outputs)",
            gpt_is_llama(&cfg) ? "LLaMA's SwiGLU block" : "--tp-mode 2d");
    r->model.recompute_gelu = a->recompute_gelu;
    rng_seed(&r->rng, (uint64_t)a->seed, 7);
    if (a->resume) {
        r->rng.state = r->resume.rng_state, r->rng.inc = r->resume.rng_inc;
        r->start = r->resume.step;
        r->window0 = r->resume.data_window;
    } else if (a->init) { // checked whole now (every rank); read range by range later
        return gpt_check_init_file(&r->model, a->init);
    }
    return 0;
}

typedef struct {
    const GPT *m;
    float *dst;
    size_t lo;
} ToRange;

static int to_range(void *ctx, size_t at, size_t n, const float *src) {
    ToRange *t = ctx;
    t->m->be->upload(t->dst + (at - t->lo), src, n);
    return 0;
}

// StrategyData.params: the initial parameters of [lo, hi) of a fresh run — the --init file's,
// or GPT-2's random initialisation — into dst (a resumed strategy streams its checkpoint).
static int initial_params(void *ctx, size_t lo, size_t hi, float *dst) {
    Run *r = ctx;
    const GPT *m = &r->model;
    ToRange t = {m, dst, lo};
    if (r->a->init) return gpt_stream_init_file(m, r->a->init, lo, hi, to_range, &t);
    gpt_init_range(m, (unsigned long long)r->a->seed, lo, hi, dst);
    return 0;
}

// StrategyData.params_stream: the same values in ascending pieces of host memory (the file's
// through one bounded buffer: nothing the size of the model is read at once).
static int initial_params_stream(void *ctx, size_t lo, size_t hi, GptSink sink, void *sctx) {
    Run *r = ctx;
    const GPT *m = &r->model;
    if (r->a->init) return gpt_stream_init_file(m, r->a->init, lo, hi, sink, sctx);
    return gpt_init_stream(m, (unsigned long long)r->a->seed, lo, hi, sink, sctx);
}

// The tokenizer directory written by `loom prepare` next to the shards, if any.
static void find_tokenizer_dir(Run *r) {
    r->tokenizer_dir[0] = 0;
    if (!r->train.nfiles) return;
    char buf[4096], cand[4200];
    snprintf(buf, sizeof buf, "%s", r->train.paths[0]);
    snprintf(cand, sizeof cand, "%s/tokenizer", dirname(buf));
    struct stat st;
    if (stat(cand, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(r->tokenizer_dir, sizeof r->tokenizer_dir, "%s", cand);
}

// What identifies the data's tokenizer (loom peer refuses a peer with another): a CRC-32 over
// the names and contents of the files in the tokenizer directory `loom prepare` wrote next to
// the shards, in name order; "none" without one (byte-level or bare shards).
static void tokenizer_id(Run *r) {
    snprintf(r->tokenizer_fp, sizeof r->tokenizer_fp, "none");
    if (!r->tokenizer_dir[0]) return;
    struct dirent **names;
    int n = scandir(r->tokenizer_dir, &names, NULL, alphasort);
    if (n < 0) return;
    uint32_t crc = 0;
    for (int i = 0; i < n; i++) {
        char path[4500];
        size_t len;
        char *buf = NULL;
        if (names[i]->d_name[0] != '.' &&
            !path_fmt(path, sizeof path, "%s/%s", r->tokenizer_dir, names[i]->d_name) &&
            (buf = read_file(path, &len))) {
            crc = crc32_update(crc, names[i]->d_name, strlen(names[i]->d_name));
            crc = crc32_update(crc, buf, len);
        }
        free(buf);
        free(names[i]);
    }
    free(names);
    snprintf(r->tokenizer_fp, sizeof r->tokenizer_fp, "crc32:%08x", crc);
}

uint64_t run_data_window(const Run *r, int step) {
    uint64_t NK = (uint64_t)r->grid.dp * (uint64_t)r->a->grad_accum;
    return r->window0 + (uint64_t)(step - r->start) * NK;
}

// Micro-batch j of step `step` for this data-parallel rank: windows in sequential order from
// the resumed position, step s, micro-batch j, rank q of N (a test hook may kill, hang or stop
// the rank as the step starts, or make it enter a barrier the other ranks never enter).
static void train_batch(void *ctx, int step, int j, int *inputs, int *targets) {
    Run *r = ctx;
    const TrainArgs *a = r->a;
    uint64_t N = (uint64_t)r->grid.dp;
    if (j == 0 && testhook_fault(r->world->rank, step + 1)) comm_barrier(r->world);
    uint64_t w = run_data_window(r, step) + (uint64_t)j * N + (uint64_t)r->grid.dp_i;
    dataset_window(&r->train, w, a->batch, a->seq, a->shuffle, (uint64_t)a->seed, inputs, targets);
}

static void train_window(void *ctx, uint64_t w, int *inputs, int *targets) {
    Run *r = ctx;
    const TrainArgs *a = r->a;
    dataset_window(&r->train, w, a->batch, a->seq, a->shuffle, (uint64_t)a->seed, inputs, targets);
}

static void val_batch(void *ctx, int w, int *inputs, int *targets) {
    Run *r = ctx;
    dataset_window(&r->val, (uint64_t)w, r->a->batch, r->a->seq, 0, 0, inputs, targets);
}

static void strategy_config(Run *r) {
    const TrainArgs *a = r->a;
    int nw = 0;
    if (r->has_val) {
        uint64_t have = dataset_num_windows(&r->val, a->batch, a->seq);
        nw = a->val_windows < (int64_t)have ? a->val_windows : (int)have;
    }
    r->sc = (StrategyConfig){
        .batch = a->batch,
        .seq = a->seq,
        .grad_accum = a->grad_accum,
        .steps = a->steps,
        .recompute = a->recompute,
        .opt = {.lr = a->lr,
                .min_lr = a->min_lr,
                .beta1 = a->beta1,
                .beta2 = a->beta2,
                .eps = a->eps,
                .weight_decay = a->weight_decay,
                .grad_clip = a->grad_clip,
                .schedule = strcmp(a->lr_schedule, "cosine") ? LR_CONSTANT : LR_COSINE,
                .warmup = a->warmup,
                .total_steps = a->steps},
        .val_windows = nw,
        .save_every = a->save ? a->save_every : 0,
        .dp = a->dp,
        .zero = a->zero,
        .bucket_mb = a->bucket_mb,
        .dump_grads = a->dump_grads != NULL,
        .llama = gpt_is_llama(&r->model.cfg),
        .co2 = a->co2,
        .tau = a->tau,
        .gap_adaptive = !strcmp(a->gap_mode, "adaptive"),
        .outer_lr = a->outer_lr,
        .outer_momentum = a->outer_momentum,
        .gap_penalty = a->gap_penalty,
        .outer_clip = a->outer_clip,
        .tp = a->tp,
        .tp_2d = !strcmp(a->tp_mode, "2d"),
        .sp = a->sp,
        .cp = a->cp,
        .pp = a->pp,
        .schedule = a->schedule,
        .stage_layers = a->stage_layers,
        .offload = a->offload != NULL,
        .offload_host = a->offload && !strcmp(a->offload, "host"),
        .offload_dir = a->offload_dir,
        .offload_units = a->offload_units,
        .offload_profile = a->profile,
        .fast_mem = r->fast_mem,
        .host_mem = r->host_mem,
        .offload_prefetch = a->offload_prefetch,
        .threads = a->threads,
        .nonfinite_skip = !strcmp(a->on_nonfinite, "skip"),
        .peer = a->peer,
        .min_peers = a->min_peers,
        .peer_id = a->peer_id,
        .listen = a->listen,
        .advertise = a->advertise,
        .bootstrap = a->bootstrap,
        .secret = a->secret,
        .peer_timeout = a->peer_timeout,
        .outer_compress = !strcmp(a->outer_compress, "int8")   ? 1
                          : !strcmp(a->outer_compress, "topk") ? 2
                                                               : 0,
        .topk_frac = a->topk_frac,
        .topk_2bit = !strcmp(a->topk_values, "2bit"),
        .sums_int8 = !strcmp(a->outer_compress_sums, "int8") ||
                     (!strcmp(a->outer_compress_sums, "auto") && strcmp(a->outer_compress, "none")),
        .peer_exchange = !strcmp(a->peer_exchange, "sharded"),
        .device = a->device,
        .tokenizer = r->tokenizer_fp,
        .shuffle = a->shuffle,
        .seed = a->seed};
    r->data = (StrategyData){.ctx = r,
                             .train = train_batch,
                             .val = val_batch,
                             .params = initial_params,
                             .params_stream = initial_params_stream,
                             .window = train_window};
}

static void setup_data(Run *r) {
    const TrainArgs *a = r->a;
    int V = r->model.cfg.V;
    if (dataset_open(&r->train, a->data, V)) run_fail(r, EXIT_INPUT);
    if (a->val_data) {
        if (dataset_open(&r->val, a->val_data, V)) run_fail(r, EXIT_INPUT);
        r->has_val = 1;
    }
    if (dataset_num_windows(&r->train, a->batch, a->seq) == 0) {
        loom_fail("%s: %zu tokens is less than one batch of --batch*--seq+1 = %d", a->data,
                  r->train.total, a->batch * a->seq + 1);
        run_fail(r, EXIT_INPUT);
    }
    find_tokenizer_dir(r);
    tokenizer_id(r);
}

// A checkpoint written before the data order was sequences (its manifest has no "data_order")
// counted windows of B·T contiguous tokens, and --shuffle on permuted those windows. Without
// shuffle on either side its position reads the same tokens as before within the first epoch
// (and past it when the windows fill the epoch exactly); otherwise the lead rank says, once,
// what the position means now.
static void note_old_data_order(const Run *r) {
    const TrainArgs *a = r->a;
    if (!r->lead || !r->resume_dir[0] || r->resume.data_order == CKPT_ORDER_SEQUENCES) return;
    int was = train_args_shuffle(r->resume.train_args);
    uint64_t B = (uint64_t)a->batch, ns = dataset_num_sequences(&r->train, a->seq);
    uint64_t w = r->window0, epoch = w * B / ns, at = w * B % ns;
    if (!a->shuffle && was != 1 && (w < ns / B || ns % B == 0)) return;
    fprintf(stderr,
            "loom: note: %s was written before the rows of a micro-batch became independent "
            "sequences (its run had --shuffle %s, this one has --shuffle %s): its data position, "
            "%" PRIu64 " windows, now counts windows of %d sequences (T+1 = %d tokens)%s, so this "
            "run goes on in epoch %" PRIu64 " at sequence %" PRIu64 " of %" PRIu64
            "; the rest of that epoch follows the new order, not the one the checkpoint's run "
            "was reading (some sequences may be read twice, others not until the next epoch)\n",
            r->resume_dir,
            was < 0 ? "unknown"
            : was   ? "on"
                    : "off",
            a->shuffle ? "on" : "off", w, a->batch, a->seq + 1,
            a->shuffle ? " of the per-epoch sequence permutation" : "", epoch + 1, at, ns);
}

void run_peak(Run *r) {
    const Backend *be = r->model.be;
    r->peak_gflops = r->a->peak_gflops > 0 ? r->a->peak_gflops : NAN;
    if (r->a->peak_gflops > 0 || !r->lead) return;
    int threads = 0;
    r->peak_gflops = be->peak_gflops(&threads);
    fprintf(stderr, "loom: peak %s %.1f GFLOP/s measured on %d thread%s (MFU is against it)\n",
            be->precision ? be->precision : "fp32", r->peak_gflops, threads,
            threads == 1 ? "" : "s");
}

// --offload's flags: the kind, its directory and the fast-memory budget.
static int check_offload(Run *r) {
    const TrainArgs *a = r->a;
    if (!a->offload) { // a peer's outer state may live in files with the model in memory
        if (a->fast_mem || a->offload_units || a->host_mem || (a->offload_dir && !a->peer))
            return loom_fail(
                a->peer ? "--fast-mem, --host-mem and --offload-units need --offload disk or host"
                        : "--offload-dir, --fast-mem, --host-mem and "
                          "--offload-units need --offload disk or host");
        return 0;
    }
    if (!strcmp(a->offload, "host")) { // device <- host, or device <- host <- disk
        if (a->host_mem && offload_parse_size("--host-mem", a->host_mem, &r->host_mem)) return -1;
        if (a->offload_dir && !a->host_mem)
            return loom_fail("--offload host --offload-dir %s needs --host-mem SIZE: how much "
                             "of the state page-locked host memory holds above the disk",
                             a->offload_dir);
        if (a->host_mem && !r->host_mem) return loom_fail("--host-mem must be more than 0");
    } else if (a->host_mem) {
        return loom_fail("--host-mem bounds --offload host's host memory: for device <- host <- "
                         "disk use --offload host --offload-dir DIR --host-mem SIZE");
    } else if (strcmp(a->offload, "disk")) {
        return loom_fail("--offload '%s': unknown tier (disk, host)", a->offload);
    } else if (!a->offload_dir) {
        return loom_fail("--offload disk needs --offload-dir DIR");
    }
    if (!a->fast_mem) return loom_fail("--offload needs --fast-mem SIZE (per rank)");
    return offload_parse_size("--fast-mem", a->fast_mem, &r->fast_mem);
}

// The run owns its --save directory until it exits (io/dirlock.h): world rank 0, which commits
// every save, takes the lock before anything is written there; the other ranks write only into
// a step's partial directory once rank 0 has created it, under that lock, and learn rank 0's
// verdict from a broadcast, so that every rank exits cleanly with the same status: EXIT_USAGE when
// another run holds the directory, EXIT_IO when it cannot be created or locked.
static void lock_save_dir(Run *r) {
    int code = 0;
    if (r->lead && r->a->save) {
        r->save_lock = dirlock_take(r->a->save);
        code = r->save_lock == -2 ? EXIT_USAGE : r->save_lock < 0 ? EXIT_IO : 0;
    }
    comm_broadcast(r->world, &code, sizeof code, 0);
    if (code) { // every rank knows: all leave MPI cleanly, so mpirun ends no rank early
        if (r->lead) fprintf(stderr, "loom: %s\n", loom_errmsg());
        fflush(stderr);
        comm_finalize();
        exit(code);
    }
}

// --loss-scale: the scaler (on by default with fp16 products), the layouts it runs with, and on
// resume the scale and clean-step count the checkpoint carries.
static int setup_loss_scale(Run *r) {
    const TrainArgs *a = r->a;
    const char *prec = r->model.be->precision;
    int fp16 = prec && !strcmp(prec, "fp16");
    if (loss_scale_init(&r->ls, a->loss_scale, a->loss_scale_init, a->loss_scale_interval, fp16))
        return -1;
    if (!r->ls.on) return 0;
    const char *f = a->tp > 1    ? "--tp"
                    : a->pp > 1  ? "--pp"
                    : a->cp > 1  ? "--cp"
                    : a->co2     ? "--co2"
                    : a->offload ? "--offload"
                    : a->peer    ? "loom peer"
                                 : NULL;
    if (f)
        return loom_fail("--loss-scale%s runs with one process, --dp and --zero; not with %s yet",
                         fp16 ? " (dynamic with --dtype fp16)" : "", f);
    if (r->resume_dir[0] && r->resume.loss_scale > 0 && r->ls.dynamic)
        r->ls.scale = r->resume.loss_scale, r->ls.good = r->resume.loss_scale_good;
    r->sc.loss_scale = &r->ls;
    return 0;
}

void run_setup(Run *r) {
    const TrainArgs *a = r->a;
    r->save_lock = -1;
    setup_grid(r);
    if (check_offload(r)) run_fail(r, EXIT_USAGE);
    const Backend *be = backend_select_dtype(a->device, a->dtype, a->threads);
    if (!be) run_fail(r, EXIT_USAGE);
    comm_set_backend(be); // device buffers cross MPI through host stages, or NCCL:
    int dc = !strcmp(a->device_comm, "nccl") ? 1 : !strcmp(a->device_comm, "host") ? 0 : -1;
    const char *engine;
    if (comm_device_collectives(dc, &engine)) run_fail(r, EXIT_USAGE);
    if (r->lead && !be->host_memory && r->world->size > 1)
        fprintf(stderr, "loom: collectives on device buffers: %s\n", engine);
    if (!a->data) {
        loom_fail("--data is required (a shard file, directory or glob)");
        run_fail(r, EXIT_USAGE);
    }
    int rc = setup_model(r, be);
    if (rc) run_fail(r, rc == -2 ? EXIT_USAGE : EXIT_INPUT);
    setup_data(r);
    note_old_data_order(r);
    strategy_config(r);
    if (setup_loss_scale(r)) run_fail(r, EXIT_USAGE);
    lock_save_dir(r);
    if (r->lead && metrics_open(&r->mt, a->metrics, r->resume_dir[0] != 0)) run_fail(r, EXIT_IO);
}

void run_teardown(Run *r) {
    if (r->lead) metrics_close(&r->mt);
    dirlock_release(r->save_lock);
    r->save_lock = -1;
    gpt_free(&r->model);
    dataset_close(&r->train);
    if (r->has_val) dataset_close(&r->val);
    if (r->resume_dir[0]) checkpoint_meta_free(&r->resume);
    comm_finalize();
}

CkptMeta run_ckpt_meta(const Run *r, int step) {
    const TrainArgs *a = r->a;
    CkptMeta meta = {.cfg = r->model.cfg,
                     .step = step,
                     .rng_state = r->rng.state,
                     .rng_inc = r->rng.inc,
                     .data_window = run_data_window(r, step)};
    snprintf(meta.tokenizer, sizeof meta.tokenizer, "%s", r->tokenizer_dir[0] ? "dir" : "");
    meta.train_args = train_args_json(a);
    if (r->ls.on && r->ls.dynamic) meta.loss_scale = r->ls.scale, meta.loss_scale_good = r->ls.good;
    return meta;
}

int run_save_extras(const char *step_dir, void *ctx) {
    const Run *r = ctx;
    if (!r->tokenizer_dir[0]) return 0;
    char dst[4300];
    return path_fmt(dst, sizeof dst, "%s/tokenizer", step_dir) ? -1
                                                               : copy_tree(r->tokenizer_dir, dst);
}
