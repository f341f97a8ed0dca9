// trainer.c — the single-process training loop (see trainer.h).
#include "trainer.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../backend/backend.h"
#include "../common.h"
#include "../data/shard.h"
#include "../io/checkpoint.h"
#include "../io/metrics.h"
#include "../io/safetensors.h"
#include "../io/weights.h"
#include "../model/gpt.h"
#include "../rng.h"
#include "optim.h"
#include "progress.h"

void train_args_defaults(TrainArgs *a) {
    memset(a, 0, sizeof *a);
    a->layers = 4, a->heads = 4, a->dim = 128, a->vocab = 256, a->block_size = 256;
    a->batch = 8, a->seq = 128, a->grad_accum = 1, a->steps = 100, a->shuffle = 0;
    a->lr = 3e-4f, a->min_lr = 0.f, a->beta1 = 0.9f, a->beta2 = 0.95f, a->eps = 1e-8f;
    a->weight_decay = 0.1f, a->grad_clip = 1.0f, a->lr_schedule = "cosine", a->warmup = 0;
    a->seed = 1337, a->threads = 0, a->recompute = 0;
    a->on_nonfinite = "stop";
    a->save_every = 0, a->keep = 2, a->val_every = 0, a->val_windows = 8, a->log_every = 10;
    a->progress = 1;
    a->peak_gflops = 290.f;
}

// Everything one training process holds.
typedef struct {
    const TrainArgs *a;
    GPT model;
    Workspace ws;
    AdamW opt;
    DataSet train, val;
    int has_val;
    int *inputs, *targets;
    Rng rng;
    char tokenizer_dir[4200];  // data's tokenizer directory, copied into checkpoints
} Trainer;

// ---------------------------------------------------------------- helpers

static int copy_tree(const char *src, const char *dst) {
    if (mkdir(dst, 0755) && errno != EEXIST) return loom_fail("%s: cannot create", dst);
    DIR *d = opendir(src);
    if (!d) return loom_fail("%s: cannot open: %s", src, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char s[4200], t[4200];
        snprintf(s, sizeof s, "%s/%s", src, e->d_name);
        snprintf(t, sizeof t, "%s/%s", dst, e->d_name);
        struct stat st;
        if (stat(s, &st)) continue;
        if (S_ISDIR(st.st_mode)) {
            rc = copy_tree(s, t);
            continue;
        }
        size_t len;
        char *buf = read_file(s, &len);
        if (!buf) rc = -1;
        else rc = write_file_atomic(t, buf, len);
        free(buf);
    }
    closedir(d);
    return rc;
}

static int save_extras(const char *step_dir, void *ctx) {
    Trainer *tr = ctx;
    if (!tr->tokenizer_dir[0]) return 0;
    char dst[4200];
    snprintf(dst, sizeof dst, "%s/tokenizer", step_dir);
    return copy_tree(tr->tokenizer_dir, dst);
}

// The tokenizer directory written by `loom prepare` next to the shards, if any.
static void find_tokenizer_dir(Trainer *tr) {
    tr->tokenizer_dir[0] = 0;
    if (!tr->train.nfiles) return;
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", tr->train.paths[0]);
    char cand[4200];
    snprintf(cand, sizeof cand, "%s/tokenizer", dirname(buf));
    struct stat st;
    if (stat(cand, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(tr->tokenizer_dir, sizeof tr->tokenizer_dir, "%s", cand);
}

static char *args_json(const TrainArgs *a) {
    char *s = xmalloc(1024);
    snprintf(s, 1024,
             "{\"batch\":%d,\"seq\":%d,\"grad_accum\":%d,\"steps\":%d,\"shuffle\":%d,"
             "\"lr\":%.9g,\"min_lr\":%.9g,\"lr_schedule\":\"%s\",\"warmup\":%d,\"seed\":%d}",
             a->batch, a->seq, a->grad_accum, a->steps, a->shuffle, a->lr, a->min_lr,
             a->lr_schedule, a->warmup, a->seed);
    return s;
}

static int do_save(Trainer *tr, int step) {
    const TrainArgs *a = tr->a;
    CkptMeta meta = {.cfg = tr->model.cfg, .step = step, .opt_t = tr->opt.t,
                     .rng_state = tr->rng.state, .rng_inc = tr->rng.inc,
                     .data_window = (uint64_t)step * a->grad_accum};
    snprintf(meta.tokenizer, sizeof meta.tokenizer, "%s", tr->tokenizer_dir[0] ? "dir" : "");
    meta.train_args = args_json(a);
    int rc = checkpoint_save(a->save, &tr->model, &tr->opt, &meta, save_extras, tr, a->keep);
    free(meta.train_args);
    return rc;
}

static double evaluate(Trainer *tr) {
    const TrainArgs *a = tr->a;
    double sum = 0;
    uint64_t nw = dataset_num_windows(&tr->val, a->batch, a->seq);
    int n = a->val_windows < (int)nw ? a->val_windows : (int)nw;
    for (int w = 0; w < n; w++) {
        dataset_window(&tr->val, (uint64_t)w, a->batch, a->seq, 0, 0, tr->inputs, tr->targets);
        sum += gpt_forward(&tr->model, &tr->ws, tr->inputs, tr->targets);
    }
    return n ? sum / n : NAN;
}

// ---------------------------------------------------------------- setup

static int setup_model(Trainer *tr, const char **resume_dir, char *step_dir, size_t n) {
    const TrainArgs *a = tr->a;
    GPTConfig cfg = {.L = a->layers, .H = a->heads, .C = a->dim, .V = a->vocab,
                     .maxT = a->block_size};
    CkptMeta meta = {0};
    *resume_dir = NULL;
    if (a->resume) {
        if (checkpoint_resolve(a->resume, step_dir, n) || checkpoint_read_meta(step_dir, &meta))
            return -1;
        cfg = meta.cfg;
        *resume_dir = step_dir;
    } else if (a->init) {
        if (init_read_config(a->init, a->heads, &cfg)) return -1;
    }
    if (gpt_create(&tr->model, &cfg, backend_cpu())) return -1;
    OptConfig oc = {.lr = a->lr, .min_lr = a->min_lr, .beta1 = a->beta1, .beta2 = a->beta2,
                    .eps = a->eps, .weight_decay = a->weight_decay, .grad_clip = a->grad_clip,
                    .schedule = strcmp(a->lr_schedule, "cosine") ? LR_CONSTANT : LR_COSINE,
                    .warmup = a->warmup, .total_steps = a->steps};
    adamw_create(&tr->opt, &tr->model, &oc);
    rng_seed(&tr->rng, (uint64_t)a->seed, 7);
    if (a->resume) {
        if (checkpoint_load(step_dir, &tr->model, &tr->opt)) return -1;
        tr->opt.t = meta.opt_t;
        tr->rng.state = meta.rng_state;
        tr->rng.inc = meta.rng_inc;
        int step = meta.step;
        checkpoint_meta_free(&meta);
        return step;
    }
    if (a->init) {
        if (gpt_load_init_file(&tr->model, a->init)) return -1;
    } else {
        gpt_init_weights(&tr->model, (unsigned long long)a->seed);
    }
    return 0;
}

int train_run(const TrainArgs *a) {
    Trainer tr = {.a = a};
    backend_cpu_set_threads(a->threads);
    if (!a->data) die(EXIT_USAGE, "--data is required (a shard file, directory or glob)");
    if (a->steps < 0) die(EXIT_USAGE, "--steps must be >= 0");
    char step_dir[4096];
    const char *resume_dir;
    int start = setup_model(&tr, &resume_dir, step_dir, sizeof step_dir);
    if (start < 0) die_last(EXIT_INPUT);
    const GPTConfig *cfg = &tr.model.cfg;
    if (dataset_open(&tr.train, a->data, cfg->V)) die_last(EXIT_INPUT);
    if (a->val_data) {
        if (dataset_open(&tr.val, a->val_data, cfg->V)) die_last(EXIT_INPUT);
        tr.has_val = 1;
    }
    if (workspace_create(&tr.ws, &tr.model, a->batch, a->seq, a->recompute)) die_last(EXIT_USAGE);
    if (dataset_num_windows(&tr.train, a->batch, a->seq) == 0)
        die(EXIT_INPUT, "%s: %zu tokens is less than one batch of --batch*--seq+1 = %d", a->data,
            tr.train.total, a->batch * a->seq + 1);
    find_tokenizer_dir(&tr);
    size_t BT = (size_t)a->batch * a->seq;
    tr.inputs = xmalloc(BT * sizeof(int));
    tr.targets = xmalloc(BT * sizeof(int));
    Metrics mt;
    if (metrics_open(&mt, a->metrics, resume_dir != NULL)) die_last(EXIT_IO);

    const Backend *be = tr.model.be;
    int K = a->grad_accum;
    double flops = gpt_flops_per_step(cfg, a->batch, a->seq) * K;
    fprintf(stderr,
            "loom: model L%d H%d C%d V%d T%d, %.2fM params | batch %d x seq %d x accum %d | "
            "%d steps%s%s\n",
            cfg->L, cfg->H, cfg->C, cfg->V, cfg->maxT, tr.model.nparams / 1e6, a->batch, a->seq,
            K, a->steps, resume_dir ? " | resumed from " : "", resume_dir ? resume_dir : "");
    Progress pg;
    progress_start(&pg, a->progress, start, a->steps, a->log_every);
    int skipped = 0, rc = 0;
    for (int step = start; step < a->steps; step++) {
        double t0 = now_sec();
        gpt_zero_grad(&tr.model);
        double loss = 0;
        for (int j = 0; j < K; j++) {
            uint64_t w = (uint64_t)step * K + j;  // sequential order, one data-parallel rank
            dataset_window(&tr.train, w, a->batch, a->seq, a->shuffle, (uint64_t)a->seed,
                           tr.inputs, tr.targets);
            loss += gpt_forward(&tr.model, &tr.ws, tr.inputs, tr.targets);
            gpt_backward(&tr.model, &tr.ws, 1.0f / (float)(BT * K));
        }
        loss /= K;
        if (a->dump_grads && step == start) {  // debugging/tests: first step's gradients
            GPT view = tr.model;
            view.params = tr.model.grads;
            if (st_save_gpt(&view, a->dump_grads)) die_last(EXIT_IO);
        }
        double norm = sqrt(be->sumsq(tr.model.grads, tr.model.nparams));
        float lr = lr_at(&tr.opt.cfg, step);
        if (!isfinite(loss) || !isfinite(norm)) {
            if (!strcmp(a->on_nonfinite, "skip")) {
                skipped++;
                progress_note(&pg, "step %d: loss %g, grad norm %g is not finite; update skipped",
                              step + 1, loss, norm);
                continue;
            }
            progress_end(&pg);
            fprintf(stderr,
                    "loom: step %d: %s is %s (loss %g, grad norm %g); stopping without applying "
                    "it. Lower --lr, set --grad-clip, or pass --on-nonfinite skip.%s%s\n",
                    step + 1, isfinite(loss) ? "the gradient" : "the loss",
                    isnan(isfinite(loss) ? norm : loss) ? "NaN" : "infinite", loss, norm,
                    a->save ? " The last good checkpoint is in " : "", a->save ? a->save : "");
            rc = EXIT_NUMERIC;
            break;
        }
        adamw_step(&tr.opt, &tr.model, lr, clip_scale((float)norm, a->grad_clip));
        double dt = now_sec() - t0;
        double tps = BT * K / dt, mfu = flops / dt / (a->peak_gflops * 1e9);
        metrics_step(&mt, step + 1, loss, lr, norm, dt * 1e3, tps, mfu);
        progress_step(&pg, step + 1, loss, tps, mfu, dt);
        if (tr.has_val && a->val_every > 0 && (step + 1) % a->val_every == 0) {
            double vl = evaluate(&tr);
            metrics_val(&mt, step + 1, vl);
            progress_note(&pg, "step %d: val loss %.4f", step + 1, vl);
        }
        if (a->save && a->save_every > 0 && (step + 1) % a->save_every == 0 &&
            step + 1 < a->steps) {
            if (do_save(&tr, step + 1)) {
                progress_end(&pg);
                fprintf(stderr, "loom: checkpoint failed: %s\n", loom_errmsg());
                rc = EXIT_IO;
                break;
            }
        }
    }
    progress_end(&pg);
    if (!rc) {
        if (tr.has_val && (a->val_every <= 0 || a->steps % a->val_every)) {
            double vl = evaluate(&tr);
            metrics_val(&mt, a->steps, vl);
            fprintf(stderr, "loom: val loss %.4f\n", vl);
        }
        if (skipped) fprintf(stderr, "loom: %d steps skipped for non-finite values\n", skipped);
        if (a->save && do_save(&tr, a->steps > start ? a->steps : start)) {
            fprintf(stderr, "loom: checkpoint failed: %s\n", loom_errmsg());
            rc = EXIT_IO;
        } else if (a->save) {
            fprintf(stderr, "loom: saved checkpoint to %s\n", a->save);
        }
        if (!rc && a->export_path) {
            if (st_save_gpt(&tr.model, a->export_path)) {
                fprintf(stderr, "loom: export failed: %s\n", loom_errmsg());
                rc = EXIT_IO;
            } else {
                fprintf(stderr, "loom: exported %s\n", a->export_path);
            }
        }
    }
    metrics_close(&mt);
    free(tr.inputs);
    free(tr.targets);
    workspace_free(&tr.ws, &tr.model);
    adamw_free(&tr.opt, &tr.model);
    gpt_free(&tr.model);
    dataset_close(&tr.train);
    if (tr.has_val) dataset_close(&tr.val);
    return rc;
}
