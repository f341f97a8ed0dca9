// trainer.c — the training loop, single-process or data-parallel (see trainer.h).
#include "trainer.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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
#include "../parallel/co2.h"
#include "../parallel/data_parallel.h"
#include "../parallel/grid.h"
#include "../parallel/pipeline.h"
#include "../plan/commprobe.h"
#include "../plan/planner.h"
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
    a->dp = 1, a->zero = 0, a->bucket_mb = 25.f, a->comm_timeout = 300.f;
    a->comm_thread = 1;
    a->co2 = 0, a->tau = 12, a->outer_lr = 1.0f, a->outer_momentum = 0.5f, a->gap_penalty = 1.0f;
    a->outer_clip = 1.0f, a->gap_mode = "adaptive";
    a->pp = 1, a->schedule = "1f1b", a->stage_layers = NULL;
    a->plan = NULL, a->plan_mem_gb = 0, a->plan_bandwidth_gbps = 1.0f;
}

// Everything one training process holds.
typedef struct {
    const TrainArgs *a;
    Comm *world;
    Grid grid;
    int N, r; // data-parallel size and this rank's index
    int lead; // world rank 0: prints, writes metrics and exports
    GPT model;
    DataParallel *dp; // gradient reduction; over a one-rank communicator under CO2
    CO2 *co2;
    Workspace ws;
    AdamW opt;
    DataSet train, val;
    int has_val;
    int *inputs, *targets;
    Rng rng;
    char tokenizer_dir[4200]; // data's tokenizer directory, copied into checkpoints
    const char *resume_dir;   // the step directory resumed from (NULL: a fresh run)
    int resume_co2_workers, resume_co2_tau, resume_co2_sharded; // its CO2 state (0: none)
} Trainer;

// Stops the run: the lead rank prints, every rank exits with the same code.
static _Noreturn void fail(const Trainer *tr, int code) {
    if (!tr->world || tr->world->rank == 0) fprintf(stderr, "loom: %s\n", loom_errmsg());
    fflush(stderr);
    exit(code);
}

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
        if (!buf)
            rc = -1;
        else
            rc = write_file_atomic(t, buf, len);
        free(buf);
    }
    closedir(d);
    return rc;
}

static int save_extras(const char *step_dir, void *ctx) {
    Trainer *tr = ctx;
    if (!tr->tokenizer_dir[0]) return 0;
    char dst[4300];
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
             "\"lr\":%.9g,\"min_lr\":%.9g,\"lr_schedule\":\"%s\",\"warmup\":%d,\"seed\":%d,"
             "\"dp\":%d,\"zero\":%d,\"pp\":%d,\"schedule\":\"%s\"}",
             a->batch, a->seq, a->grad_accum, a->steps, a->shuffle, a->lr, a->min_lr,
             a->lr_schedule, a->warmup, a->seed, a->dp, a->zero, a->pp,
             a->pp > 1 ? a->schedule : "none");
    return s;
}

// The manifest of a checkpoint taken after `step` optimizer steps (train_args is allocated;
// the caller frees it).
static CkptMeta ckpt_meta(const Trainer *tr, int step, int opt_t) {
    const TrainArgs *a = tr->a;
    CkptMeta meta = {.cfg = tr->model.cfg,
                     .step = step,
                     .opt_t = opt_t,
                     .rng_state = tr->rng.state,
                     .rng_inc = tr->rng.inc,
                     .data_window = (uint64_t)step * a->grad_accum * tr->N};
    snprintf(meta.tokenizer, sizeof meta.tokenizer, "%s", tr->tokenizer_dir[0] ? "dir" : "");
    meta.train_args = args_json(a);
    return meta;
}

// A CO2 worker's own state, written next to the shards: its outer arrays (co2_state) and its
// inner AdamW moments, which differ between workers.
typedef struct {
    const Trainer *tr;
    int n;
    const float *arrays[CO2_STATE_MAX + 2];
    size_t lens[CO2_STATE_MAX + 2];
    const char *kind;
} CO2Files;

static int write_co2_files(const char *step_dir, void *ctx) {
    const CO2Files *f = ctx;
    char path[4300];
    snprintf(path, sizeof path, "%s/co2_%05d.bin", step_dir, f->tr->r);
    return state_file_write(path, f->kind, f->tr->r, f->tr->N, f->arrays, f->lens, f->n);
}

// with_co2: a CO2 run at a round boundary (not its end) also saves every worker's CO2 state,
// so that the resumed run continues exactly.
static int do_save(Trainer *tr, int step, int with_co2) {
    const TrainArgs *a = tr->a;
    size_t lo, hi;
    dp_owned_range(tr->dp, &lo, &hi);
    size_t n = hi - lo;
    const Backend *be = tr->model.be;
    float *p = xmalloc(n * sizeof(float) + 1), *m = xmalloc(n * sizeof(float) + 1),
          *v = xmalloc(n * sizeof(float) + 1);
    be->download(p, dp_owned_params(tr->dp), n);
    be->download(m, tr->opt.m, n);
    be->download(v, tr->opt.v, n);
    CkptShard shard = {.lo = lo, .hi = hi, .params = p, .m = m, .v = v};
    // zero 0 (and CO2, whose workers' strategy is unsharded): every rank holds the same full
    // parameters, so only the first writes them
    int writes = (a->zero > 0 && !a->co2) || tr->r == 0;
    CkptMeta meta = ckpt_meta(tr, step, tr->opt.t);
    CO2Files cf = {.tr = tr};
    float *host[CO2_STATE_MAX] = {0};
    if (with_co2) { // waits for the average in flight (kept, not applied)
        const float *dev[CO2_STATE_MAX];
        int k = co2_state(tr->co2, dev, cf.lens, &cf.kind);
        for (int i = 0; i < k; i++) {
            host[i] = xmalloc(cf.lens[i] * sizeof(float) + 1);
            be->download(host[i], dev[i], cf.lens[i]);
            cf.arrays[i] = host[i];
        }
        cf.arrays[k] = m, cf.arrays[k + 1] = v; // this worker's moments, full length
        cf.lens[k] = cf.lens[k + 1] = n;
        cf.n = k + 2;
        meta.co2_workers = tr->N, meta.co2_tau = a->tau, meta.co2_sharded = a->zero > 0;
    }
    int rc = checkpoint_save_with(a->save, tr->grid.dp_comm, writes ? &shard : NULL, &meta,
                                  save_extras, tr, with_co2 ? write_co2_files : NULL, &cf, a->keep);
    for (int i = 0; i < CO2_STATE_MAX; i++)
        free(host[i]);
    free(meta.train_args);
    free(p), free(m), free(v);
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

static int export_weights(Trainer *tr, const char *path, int grads) {
    GPT view = tr->model;
    float *host = xmalloc(tr->model.nparams * sizeof(float));
    if (grads)
        tr->model.be->download(host, tr->model.grads, tr->model.nparams);
    else
        dp_full_params(tr->dp, host); // collective for ZeRO-3
    view.params = host;
    int rc = tr->lead ? st_save_gpt(&view, path) : 0;
    free(host);
    return rc;
}

// Test hooks for fault handling: LOOM_FAULT_KILL=RANK:STEP makes that rank SIGKILL itself
// when the step starts (a crashed machine); LOOM_FAULT_HANG=RANK:STEP makes it stop
// responding (a stuck peer), which the others' watchdog must turn into a clean abort.
static void maybe_inject_fault(int rank, int step) {
    const char *names[2] = {"LOOM_FAULT_KILL", "LOOM_FAULT_HANG"};
    for (int k = 0; k < 2; k++) {
        const char *v = getenv(names[k]);
        int r, s;
        if (!v || sscanf(v, "%d:%d", &r, &s) != 2 || r != rank || s != step) continue;
        fprintf(stderr, "loom[rank %d]: %s at step %d\n", rank, names[k], step);
        fflush(stderr);
        if (k == 0) raise(SIGKILL);
        for (;;)
            pause();
    }
}

// One optimizer step's record, written once its (possibly asynchronously averaged) loss is known.
typedef struct {
    int step;
    double loss, lr, norm, dt, tps, mfu, exposed_ms;
} StepLog;

static void log_step(Trainer *tr, Progress *pg, Metrics *mt, const StepLog *l) {
    if (tr->lead)
        metrics_step(mt, l->step, l->loss, l->lr, l->norm, l->dt * 1e3, l->tps, l->mfu,
                     l->exposed_ms);
    progress_step(pg, l->step, l->loss, l->tps, l->mfu, l->dt);
}

// CO2 logs each inner step's worker-mean loss once it is known. A round's local losses are
// averaged by ONE small non-blocking all-reduce started at the round end, ahead of the outer
// average (so on a slow link it is never queued behind those megabytes), and the round's lines
// are written as soon as it lands: tested every step, waited for at the next round end. No
// step ever blocks on it.
typedef struct {
    StepLog *rec; // (tau) the round's lines
    double *loss; // (tau) local losses / N, then their sum over workers
    int n, inflight;
    CommReq req;
} RoundLosses;

static void round_losses_log(Trainer *tr, Progress *pg, Metrics *mt, RoundLosses *r, int wait) {
    if (!r->inflight) return;
    if (wait)
        comm_wait(&r->req);
    else if (!comm_test(&r->req))
        return;
    for (int i = 0; i < r->n; i++) {
        r->rec[i].loss = r->loss[i];
        log_step(tr, pg, mt, &r->rec[i]);
    }
    r->inflight = r->n = 0;
}

// End of a round: writes the previous round's lines (long since reduced), starts this one's.
static void round_losses_send(Trainer *tr, Progress *pg, Metrics *mt, RoundLosses rl[2]) {
    round_losses_log(tr, pg, mt, &rl[1], 1);
    RoundLosses t = rl[1];
    rl[1] = rl[0], rl[0] = t;
    rl[1].req = comm_iallreduce_f64(tr->grid.dp_comm, rl[1].loss, rl[1].n);
    rl[1].inflight = 1;
}

// ---------------------------------------------------------------- setup

// Creates the model with its initial or resumed parameters, then the data-parallel strategy
// (which may shard them) and the optimizer for the owned slice. Returns the first step.
static int setup_model(Trainer *tr, char *resume_dir, size_t n) {
    const TrainArgs *a = tr->a;
    GPTConfig cfg = {
        .L = a->layers, .H = a->heads, .C = a->dim, .V = a->vocab, .maxT = a->block_size};
    CkptMeta meta = {0};
    resume_dir[0] = 0;
    if (a->resume) {
        if (checkpoint_resolve(a->resume, resume_dir, n) || checkpoint_read_meta(resume_dir, &meta))
            return -1;
        tr->resume_co2_workers = meta.co2_workers, tr->resume_co2_tau = meta.co2_tau;
        tr->resume_co2_sharded = meta.co2_sharded;
        cfg = meta.cfg;
    } else if (a->init) {
        if (init_read_config(a->init, a->heads, &cfg)) return -1;
    }
    if (gpt_create(&tr->model, &cfg, backend_cpu())) return -1;
    GPT *m = &tr->model;
    rng_seed(&tr->rng, (uint64_t)a->seed, 7);
    int start = 0;
    if (a->resume) {
        float *host = xmalloc(m->nparams * sizeof(float));
        if (checkpoint_read_state(resume_dir, m->nparams, 0, m->nparams, host, 0, 0, NULL, NULL))
            return -1;
        m->be->upload(m->params, host, m->nparams);
        free(host);
        tr->rng.state = meta.rng_state;
        tr->rng.inc = meta.rng_inc;
        start = meta.step;
    } else if (a->init) {
        if (gpt_load_init_file(m, a->init)) return -1;
    } else {
        gpt_init_weights(m, (unsigned long long)a->seed);
    }
    if (a->pp > 1) { // the pipeline owns gradient reduction; AdamW moments span the layout
        OptConfig oc = {.lr = a->lr,
                        .min_lr = a->min_lr,
                        .beta1 = a->beta1,
                        .beta2 = a->beta2,
                        .eps = a->eps,
                        .weight_decay = a->weight_decay,
                        .grad_clip = a->grad_clip,
                        .schedule = strcmp(a->lr_schedule, "cosine") ? LR_CONSTANT : LR_COSINE,
                        .warmup = a->warmup,
                        .total_steps = a->steps};
        memset(&tr->opt, 0, sizeof tr->opt);
        tr->opt.cfg = oc; // the pipeline keeps the moments per stage (and reads them on resume)
        if (a->resume) tr->opt.t = meta.opt_t, checkpoint_meta_free(&meta);
        return start;
    }
    // CO2 workers never reduce gradients: their strategy runs over a communicator of one
    const Comm *grad_comm =
        a->co2 ? comm_split(tr->grid.dp_comm, tr->grid.dp_comm->rank, 0, "self") : tr->grid.dp_comm;
    tr->dp = dp_create(m, grad_comm, a->co2 ? 0 : a->zero, a->bucket_mb);
    size_t lo, hi;
    dp_owned_range(tr->dp, &lo, &hi);
    OptConfig oc = {.lr = a->lr,
                    .min_lr = a->min_lr,
                    .beta1 = a->beta1,
                    .beta2 = a->beta2,
                    .eps = a->eps,
                    .weight_decay = a->weight_decay,
                    .grad_clip = a->grad_clip,
                    .schedule = strcmp(a->lr_schedule, "cosine") ? LR_CONSTANT : LR_COSINE,
                    .warmup = a->warmup,
                    .total_steps = a->steps};
    adamw_create_range(&tr->opt, m, &oc, lo, hi);
    if (a->resume) {
        size_t k = hi - lo;
        float *mh = xmalloc(k * sizeof(float) + 1), *vh = xmalloc(k * sizeof(float) + 1);
        if (checkpoint_read_state(resume_dir, m->nparams, 0, 0, NULL, lo, hi, mh, vh)) return -1;
        m->be->upload(tr->opt.m, mh, k);
        m->be->upload(tr->opt.v, vh, k);
        free(mh), free(vh);
        tr->opt.t = meta.opt_t;
        checkpoint_meta_free(&meta);
    }
    return start;
}

// Resuming under --co2: a checkpoint saved mid-run by CO2 restores every worker's outer state
// and inner AdamW moments (same worker count, τ and --zero sharding); any other checkpoint
// (a non-CO2 run, or the end of a CO2 run, whose final anchor has every average applied)
// starts new CO2 rounds from its weights.
static int co2_resume(Trainer *tr, int start) {
    const TrainArgs *a = tr->a;
    if (tr->resume_co2_workers == 0) {
        if (tr->lead)
            fprintf(stderr,
                    "loom: %s holds no CO2 state (a non-CO2 run, or the end of a CO2 run): new "
                    "CO2 rounds start from its weights\n",
                    tr->resume_dir);
        return 0;
    }
    if (tr->resume_co2_workers != tr->N)
        return loom_fail("%s: holds the CO2 state of %d workers; resume it with --dp %d",
                         tr->resume_dir, tr->resume_co2_workers, tr->resume_co2_workers);
    if (tr->resume_co2_tau != a->tau || start % a->tau)
        return loom_fail("%s: CO2 state saved with --tau %d at step %d; resume it with --tau %d",
                         tr->resume_dir, tr->resume_co2_tau, start, tr->resume_co2_tau);
    if (tr->resume_co2_sharded != (a->zero > 0))
        return loom_fail("%s: CO2 state saved %s --zero ('%s'), this run needs '%s'; resume it %s "
                         "--zero",
                         tr->resume_dir, tr->resume_co2_sharded ? "with" : "without",
                         tr->resume_co2_sharded ? "co2-sharded" : "co2",
                         tr->resume_co2_sharded ? "co2" : "co2-sharded",
                         tr->resume_co2_sharded ? "with" : "without");
    float *dev[CO2_STATE_MAX], *host[CO2_STATE_MAX + 2];
    size_t lens[CO2_STATE_MAX + 2];
    const char *kind;
    int k = co2_state_buffers(tr->co2, start / a->tau, dev, lens, &kind);
    size_t P = tr->model.nparams;
    lens[k] = lens[k + 1] = P;
    for (int i = 0; i < k + 2; i++)
        host[i] = xmalloc(lens[i] * sizeof(float) + 1);
    char path[4300];
    snprintf(path, sizeof path, "%s/co2_%05d.bin", tr->resume_dir, tr->r);
    if (state_file_read(path, kind, tr->r, tr->N, host, lens, k + 2)) {
        // this worker's own file: say so here (fail() prints on rank 0 only); mpirun then
        // takes the other workers down
        fprintf(stderr, "loom: rank %d: %s\n", tr->r, loom_errmsg());
        fflush(stderr);
        exit(EXIT_INPUT);
    }
    const Backend *be = tr->model.be;
    for (int i = 0; i < k; i++)
        be->upload(dev[i], host[i], lens[i]);
    be->upload(tr->opt.m, host[k], P), be->upload(tr->opt.v, host[k + 1], P);
    for (int i = 0; i < k + 2; i++)
        free(host[i]);
    return 0;
}

static void setup_grid(Trainer *tr) {
    const TrainArgs *a = tr->a;
    tr->world = comm_world(NULL, NULL);
    comm_set_timeout(a->comm_timeout);
    if (a->comm_thread) comm_start_progress_thread(1e-3);
    if (grid_create(&tr->grid, tr->world, a->dp, a->pp, 1)) fail(tr, EXIT_USAGE);
    tr->N = tr->grid.dp;
    tr->r = tr->grid.dp_i;
    tr->lead = tr->world->rank == 0;
}

// ---------------------------------------------------------------- pipeline parallelism

typedef struct {
    Trainer *tr;
    Progress *pg;
    Metrics *mt;
} PipeCtx;

static void pipe_batch(void *ctx, int step, int j, int *inputs, int *targets) {
    Trainer *tr = ((PipeCtx *)ctx)->tr;
    const TrainArgs *a = tr->a;
    uint64_t N = (uint64_t)tr->N, K = (uint64_t)a->grad_accum;
    uint64_t w = (uint64_t)step * N * K + (uint64_t)j * N + (uint64_t)tr->r;
    if (j == 0) maybe_inject_fault(tr->world->rank, step + 1);
    dataset_window(&tr->train, w, a->batch, a->seq, a->shuffle, (uint64_t)a->seed, inputs, targets);
}

// Validation window w: the same windows the single-process evaluate() reads.
static void pipe_val_batch(void *ctx, int w, int *inputs, int *targets) {
    Trainer *tr = ((PipeCtx *)ctx)->tr;
    dataset_window(&tr->val, (uint64_t)w, tr->a->batch, tr->a->seq, 0, 0, inputs, targets);
}

static void pipe_val_report(void *ctx, int step, double loss) {
    PipeCtx *pc = ctx;
    if (!pc->tr->lead) return;
    metrics_val(pc->mt, step, loss);
    progress_note(pc->pg, "step %d: val loss %.4f", step, loss);
}

static int pipe_report(void *ctx, int step, double loss, double norm, float lr, double dt,
                       double exposed) {
    PipeCtx *pc = ctx;
    Trainer *tr = pc->tr;
    const TrainArgs *a = tr->a;
    if (!isfinite(loss) || !isfinite(norm)) {
        if (tr->lead)
            fprintf(stderr,
                    "\nloom: step %d: the loss or gradient is not finite (loss %g, grad "
                    "norm %g); stopping without applying it\n",
                    step, loss, norm);
        return EXIT_NUMERIC;
    }
    size_t tokens = (size_t)a->batch * a->seq * a->grad_accum * tr->N;
    double flops = gpt_flops_per_step(&tr->model.cfg, a->batch, a->seq) * a->grad_accum /
                   (double)(tr->grid.pp); // per rank
    StepLog rec = {.step = step,
                   .loss = loss,
                   .lr = lr,
                   .norm = norm,
                   .dt = dt,
                   .tps = tokens / dt,
                   .mfu = flops / dt / (a->peak_gflops * 1e9),
                   .exposed_ms = exposed * 1e3};
    log_step(tr, pc->pg, pc->mt, &rec);
    return 0;
}

// A pipeline checkpoint: every rank calls this at the same step, with its shard or NULL.
static int pipe_save_ckpt(void *ctx, int step, int opt_t, const PipeShard *sh) {
    PipeCtx *pc = ctx;
    Trainer *tr = pc->tr;
    const TrainArgs *a = tr->a;
    const Backend *be = tr->model.be;
    CkptShard shard = {0};
    float *host[4] = {NULL, NULL, NULL, NULL};
    if (sh) { // to host memory (a no-op copy on the CPU backend; needed for device backends)
        size_t n = sh->hi - sh->lo;
        const float *src[4] = {sh->params, sh->m, sh->v, sh->prev};
        for (int i = 0; i < 4; i++)
            if (src[i]) {
                host[i] = xmalloc(n * sizeof(float) + 1);
                be->download(host[i], src[i], n);
            }
        shard = (CkptShard){sh->lo, sh->hi, host[0], host[1], host[2], host[3]};
    }
    CkptMeta meta = ckpt_meta(tr, step, opt_t);
    int rc =
        checkpoint_save(a->save, tr->world, sh ? &shard : NULL, &meta, save_extras, tr, a->keep);
    free(meta.train_args);
    for (int i = 0; i < 4; i++)
        free(host[i]);
    if (rc) {
        progress_end(pc->pg);
        if (tr->lead) fprintf(stderr, "loom: checkpoint failed: %s\n", loom_errmsg());
        return EXIT_IO;
    }
    if (tr->lead && step == a->steps) fprintf(stderr, "loom: saved checkpoint to %s\n", a->save);
    return 0;
}

// Resume: a stage's AdamW moments and, for 2bw, the previous weight version.
static int pipe_load_ckpt(void *ctx, size_t lo, size_t hi, float *prev, size_t olo, size_t ohi,
                          float *m, float *v) {
    Trainer *tr = ((PipeCtx *)ctx)->tr;
    const Backend *be = tr->model.be;
    size_t P = tr->model.nparams, k = ohi - olo, n = hi - lo;
    float *mh = xmalloc(k * sizeof(float) + 1), *vh = xmalloc(k * sizeof(float) + 1);
    int rc = checkpoint_read_state(tr->resume_dir, P, 0, 0, NULL, olo, ohi, mh, vh);
    if (!rc) be->upload(m, mh, k), be->upload(v, vh, k);
    if (!rc && prev) {
        float *ph = xmalloc(n * sizeof(float) + 1);
        int got = checkpoint_read_prev(tr->resume_dir, P, lo, hi, ph);
        if (got < 0)
            rc = -1;
        else if (got == 0)
            be->upload(prev, ph, n);
        // got == 1: not a 2bw checkpoint; the previous version starts as the newest
        free(ph);
    }
    free(mh), free(vh);
    return rc;
}

static int train_pipeline(Trainer *tr, Metrics *mt, int start) {
    const TrainArgs *a = tr->a;
    Schedule sched = !strcmp(a->schedule, "gpipe") ? SCHED_GPIPE
                     : !strcmp(a->schedule, "2bw") ? SCHED_2BW
                                                   : SCHED_1F1B;
    PipelineConfig pc = {.schedule = sched,
                         .K = a->grad_accum,
                         .B = a->batch,
                         .T = a->seq,
                         .recompute = a->recompute,
                         .stage_layers = a->stage_layers,
                         .grad_clip = a->grad_clip,
                         .zero = a->zero,
                         .val_every = a->val_every,
                         .val_windows = 0,
                         .save_every = a->save ? a->save_every : 0};
    if (tr->has_val) { // as evaluate(): at most --val-windows windows of the validation data
        uint64_t nw = dataset_num_windows(&tr->val, a->batch, a->seq);
        pc.val_windows = a->val_windows < (int)nw ? a->val_windows : (int)nw;
    }
    Progress pg;
    progress_start(&pg, a->progress && tr->lead, start, a->steps, a->log_every);
    PipeCtx ctx = {.tr = tr, .pg = &pg, .mt = mt};
    PipelineIO io = {.ctx = &ctx,
                     .batch = pipe_batch,
                     .report = pipe_report,
                     .val_batch = tr->has_val ? pipe_val_batch : NULL,
                     .val_report = pipe_val_report,
                     .save = a->save ? pipe_save_ckpt : NULL,
                     .load = tr->resume_dir ? pipe_load_ckpt : NULL};
    int rc = pipeline_train(&tr->model, &tr->grid, &pc, &tr->opt, start, a->steps, &io);
    progress_end(&pg);
    if (rc < 0) fail(tr, tr->resume_dir ? EXIT_INPUT : EXIT_USAGE);
    if (rc) return rc;
    double wb, gb, ob, ab;
    pipeline_memory(&wb, &gb, &ob, &ab);
    if (tr->lead)
        fprintf(stderr,
                "loom: pipeline %d stages x dp %d (zero %d), schedule %s | peak %d micro-batches "
                "of activations held on stage 0 | stage 0 holds weights %.2f MiB, grads %.2f "
                "MiB, optimizer %.2f MiB, activations %.2f MiB (whole model %.2f MiB)\n",
                tr->grid.pp, tr->N, a->zero, a->schedule, pipeline_peak_inflight(), wb / 1048576,
                gb / 1048576, ob / 1048576, ab / 1048576, tr->model.nparams * 4.0 / 1048576);
    if (a->export_path) { // every stage contributes its blocks
        if (pipeline_gather_params(&tr->model, &tr->grid, a->stage_layers)) fail(tr, EXIT_USAGE);
        if (tr->lead) {
            if (st_save_gpt(&tr->model, a->export_path)) fail(tr, EXIT_IO);
            fprintf(stderr, "loom: exported %s\n", a->export_path);
        }
    }
    return 0;
}

// --plan auto: rank 0 profiles the model and searches the plans for this job's ranks with
// global batch = --batch x --grad-accum x --dp; every rank adopts the best one.
static void apply_auto_plan(TrainArgs *b) {
    Comm *world = comm_world(NULL, NULL);
    double msg[5] = {0};
    char layers[128] = "";
    Profile prof;
    PlanInput in;
    plan_input_defaults(&in);
    if (world->rank == 0) {
        GPTConfig cfg = {
            .L = b->layers, .H = b->heads, .C = b->dim, .V = b->vocab, .maxT = b->block_size};
        if (b->init && init_read_config(b->init, b->heads, &cfg)) die_last(EXIT_INPUT);
        int threads = b->threads > 0 ? b->threads : 1;
        backend_cpu_set_threads(threads);
        if (profile_measure(&prof, &cfg, b->seq, 8, threads)) die_last(EXIT_USAGE);
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
        const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        int local_n = local ? atoi(local) : 1;
        in.workers = world->size;
        in.mem_bytes = b->plan_mem_gb > 0 ? b->plan_mem_gb * 1073741824.0
                                          : (double)pages * psize / local_n * 0.8;
        in.bandwidth = b->plan_bandwidth_gbps * 1e9 / 8;
        in.node_size = local_n;
        in.global_batch = b->batch * b->grad_accum * b->dp;
        in.bucket_bytes = b->bucket_mb * 1048576.0;
    }
    if (world->size > 1) { // the job's real links (every rank takes part)
        CommProbe pr;
        comm_probe(world, 8 * 1048576.0, &pr);
        if (pr.local) {
            in.intra_bandwidth = pr.allreduce_bw;
        } else {
            in.bandwidth = pr.allreduce_bw;
            in.net_cpu_per_byte = pr.cpu_per_byte;
        }
        in.latency = pr.latency;
    }
    if (world->rank == 0) {
        Plan best;
        if (plan_search(&prof, &in, &best, 1) != 1)
            die(EXIT_INPUT, "--plan auto: no plan fits the memory of this machine");
        msg[0] = best.w, msg[1] = best.d, msg[2] = best.b, msg[3] = best.K, msg[4] = best.recompute;
        snprintf(layers, sizeof layers, "%s", best.stage_layers);
        fprintf(stderr,
                "loom: --plan auto: dp %d x pp %d, micro-batch %d x %d, recompute %s, "
                "stages %s: predicted %.0f tok/s\n",
                best.w, best.d, best.b, best.K, best.recompute ? "on" : "off",
                best.d > 1 ? best.stage_layers : "-", best.tokens_per_s);
    }
    comm_broadcast(world, msg, sizeof msg, 0);
    comm_broadcast(world, layers, sizeof layers, 0);
    b->dp = (int)msg[0], b->pp = (int)msg[1], b->batch = (int)msg[2];
    b->grad_accum = (int)msg[3], b->recompute = (int)msg[4];
    if (b->pp > 1) {
        b->schedule = "2bw";
        b->stage_layers = strdup(layers);
    }
}

int train_run(const TrainArgs *args) {
    TrainArgs planned = *args;
    if (args->plan) apply_auto_plan(&planned);
    const TrainArgs *a = &planned;
    Trainer tr = {.a = a};
    setup_grid(&tr);
    backend_cpu_set_threads(a->threads);
    if (!a->data) die(EXIT_USAGE, "--data is required (a shard file, directory or glob)");
    if (a->zero < 0 || a->zero > 3) die(EXIT_USAGE, "--zero must be 0, 1, 2 or 3");
    if (a->dump_grads && a->zero >= 2) die(EXIT_USAGE, "--dump-grads needs --zero 0 or 1");
    if (a->co2 && a->save && a->save_every > 0 && a->save_every % a->tau)
        die(EXIT_USAGE,
            "--save-every %d: under --co2 checkpoints are taken at round ends, so it must be a "
            "multiple of --tau %d",
            a->save_every, a->tau);
    if (a->co2 && a->zero > 2)
        die(EXIT_USAGE, "--co2 composes with --zero 1 or 2 (sharded outer state)");
    if (a->co2 && a->tau < 1) die(EXIT_USAGE, "--tau must be >= 1");
    if (a->pp > 1 && (a->co2 || a->dump_grads))
        die(EXIT_USAGE, "--pp does not combine with --co2/--dump-grads yet");
    if (a->pp > 1 && a->zero > 1)
        die(EXIT_USAGE,
            "--pp composes with --zero 1 (AdamW state sharded over each stage's dp "
            "replicas); --zero %d is not implemented inside a pipeline",
            a->zero);
    char resume_dir[4096];
    int start = setup_model(&tr, resume_dir, sizeof resume_dir);
    if (start < 0) fail(&tr, EXIT_INPUT);
    tr.resume_dir = resume_dir[0] ? resume_dir : NULL;
    const GPTConfig *cfg = &tr.model.cfg;
    if (dataset_open(&tr.train, a->data, cfg->V)) fail(&tr, EXIT_INPUT);
    if (a->val_data) {
        if (dataset_open(&tr.val, a->val_data, cfg->V)) fail(&tr, EXIT_INPUT);
        tr.has_val = 1;
    }
    if (a->pp == 1 && workspace_create(&tr.ws, &tr.model, a->batch, a->seq, a->recompute))
        fail(&tr, EXIT_USAGE);
    if (dataset_num_windows(&tr.train, a->batch, a->seq) == 0) {
        loom_fail("%s: %zu tokens is less than one batch of --batch*--seq+1 = %d", a->data,
                  tr.train.total, a->batch * a->seq + 1);
        fail(&tr, EXIT_INPUT);
    }
    find_tokenizer_dir(&tr);
    size_t BT = (size_t)a->batch * a->seq;
    tr.inputs = xmalloc(BT * sizeof(int));
    tr.targets = xmalloc(BT * sizeof(int));
    Metrics mt = {0};
    if (tr.lead && metrics_open(&mt, a->metrics, resume_dir[0] != 0)) fail(&tr, EXIT_IO);

    int K = a->grad_accum, N = tr.N;
    int gN = a->co2 ? 1 : N; // ranks a gradient is averaged over
    if (a->co2) {
        CO2Config cc = {.tau = a->tau,
                        .alpha = a->outer_lr,
                        .beta = a->outer_momentum,
                        .lambda = a->gap_penalty,
                        .phi = a->outer_clip,
                        .adaptive = !strcmp(a->gap_mode, "adaptive"),
                        .sharded = a->zero > 0};
        tr.co2 = co2_create(&tr.model, tr.grid.dp_comm, &cc);
        if (tr.resume_dir && co2_resume(&tr, start)) fail(&tr, EXIT_INPUT);
    } else if (tr.resume_dir && tr.resume_co2_workers > 0 && tr.lead) {
        fprintf(stderr,
                "loom: %s was saved mid-run by CO2; without --co2 training continues from its "
                "anchor with worker 0's AdamW moments (the average in flight is dropped)\n",
                tr.resume_dir);
    }
    // CO2: rl[0] collects the current round's losses, rl[1] is the previous round's, in flight
    RoundLosses rl[2] = {{0}};
    for (int i = 0; a->co2 && i < 2; i++) {
        rl[i].rec = xcalloc((size_t)a->tau, sizeof(StepLog));
        rl[i].loss = xcalloc((size_t)a->tau, sizeof(double));
    }
    double flops = gpt_flops_per_step(cfg, a->batch, a->seq) * K; // per rank
    if (tr.lead) {
        fprintf(
            stderr, "loom: model L%d H%d C%d V%d T%d, %.2fM params | batch %d x seq %d x accum %d",
            cfg->L, cfg->H, cfg->C, cfg->V, cfg->maxT, tr.model.nparams / 1e6, a->batch, a->seq, K);
        if (N > 1 || a->zero) fprintf(stderr, " x dp %d (zero %d)", N, a->zero);
        if (a->pp > 1) fprintf(stderr, " x pp %d (%s)", a->pp, a->schedule);
        if (a->co2) fprintf(stderr, " | co2 tau %d", a->tau);
        fprintf(stderr, " | %d steps%s%s\n", a->steps, resume_dir[0] ? " | resumed from " : "",
                resume_dir);
    }
    if (a->pp > 1) {
        int prc = train_pipeline(&tr, &mt, start);
        if (tr.lead) metrics_close(&mt);
        comm_finalize();
        return prc;
    }
    Progress pg;
    progress_start(&pg, a->progress && tr.lead, start, a->steps, a->log_every);
    int skipped = 0, rc = 0;
    double exposed_total = 0, step_total = 0;
    for (int step = start; step < a->steps; step++) {
        double t0 = now_sec();
        comm_set_context(step + 1, "training step");
        maybe_inject_fault(tr.world->rank, step + 1);
        dp_zero_grad(tr.dp);
        double loss = 0;
        for (int j = 0; j < K; j++) {
            // sequential order: step s, micro-batch j, data-parallel rank r of N
            uint64_t w = ((uint64_t)step * N + 0) * K + (uint64_t)j * N + tr.r;
            dataset_window(&tr.train, w, a->batch, a->seq, a->shuffle, (uint64_t)a->seed, tr.inputs,
                           tr.targets);
            dp_begin_micro(tr.dp, j == K - 1);
            loss += gpt_forward(&tr.model, &tr.ws, tr.inputs, tr.targets);
            gpt_backward(&tr.model, &tr.ws, 1.0f / (float)(BT * K * gN));
        }
        dp_finish_grads(tr.dp);
        loss /= K;
        if (N > 1 && !a->co2) {
            comm_allreduce_f64(tr.grid.dp_comm, &loss, 1);
            loss /= N;
        }
        if (a->dump_grads && step == start && export_weights(&tr, a->dump_grads, 1))
            fail(&tr, EXIT_IO);
        double norm = sqrt(dp_grad_sumsq(tr.dp));
        float lr = lr_at(&tr.opt.cfg, step);
        if (!isfinite(loss) || !isfinite(norm)) {
            if (a->co2) { // a local decision: take the other workers down with this one
                char msg[256];
                snprintf(msg, sizeof msg,
                         "step %d: the loss or gradient is not finite (loss %g, "
                         "grad norm %g); stopping the job",
                         step + 1, loss, norm);
                comm_abort(EXIT_NUMERIC, msg);
            }
            if (!strcmp(a->on_nonfinite, "skip")) {
                skipped++;
                if (tr.lead)
                    progress_note(&pg,
                                  "step %d: loss %g, grad norm %g is not finite; update skipped",
                                  step + 1, loss, norm);
                continue;
            }
            progress_end(&pg);
            if (tr.lead)
                fprintf(
                    stderr,
                    "loom: step %d: %s is %s (loss %g, grad norm %g); stopping without "
                    "applying it. Lower --lr, set --grad-clip, or pass --on-nonfinite skip.%s%s\n",
                    step + 1, isfinite(loss) ? "the gradient" : "the loss",
                    isnan(isfinite(loss) ? norm : loss) ? "NaN" : "infinite", loss, norm,
                    a->save ? " The last good checkpoint is in " : "", a->save ? a->save : "");
            rc = EXIT_NUMERIC;
            break;
        }
        dp_optimizer_step(tr.dp, &tr.opt, lr, clip_scale((float)norm, a->grad_clip));
        double co2_wait = 0;
        StepLog one, *rec = &one;
        if (a->co2) { // the round's end (or the run's: a final, partial round) is part of its step
            rec = &rl[0].rec[rl[0].n]; // (stays valid when the two rounds swap places)
            rl[0].loss[rl[0].n++] = loss / N;
            round_losses_log(&tr, &pg, &mt, &rl[1], 0);
            if ((step + 1) % a->tau == 0 || step + 1 == a->steps) {
                double e0 = co2_exposed(tr.co2);
                round_losses_send(&tr, &pg, &mt, rl); // ahead of the outer average
                co2_round_end(tr.co2);
                co2_wait = co2_exposed(tr.co2) - e0;
            }
        }
        double dt = now_sec() - t0;
        exposed_total += a->co2 ? co2_wait : dp_exposed_wait(tr.dp);
        step_total += dt;
        double tps = BT * K * N / dt, mfu = flops / dt / (a->peak_gflops * 1e9);
        *rec = (StepLog){.step = step + 1,
                         .loss = loss,
                         .lr = lr,
                         .norm = norm,
                         .dt = dt,
                         .tps = tps,
                         .mfu = mfu,
                         .exposed_ms = a->co2  ? co2_wait * 1e3
                                       : N > 1 ? dp_exposed_wait(tr.dp) * 1e3
                                               : -1};
        if (!a->co2) log_step(&tr, &pg, &mt, rec);
        // CO2 evaluates its final model (the anchor, after the last average) after the loop
        int last_co2 = a->co2 && step + 1 == a->steps;
        if (tr.has_val && a->val_every > 0 && (step + 1) % a->val_every == 0 && !last_co2) {
            double vl = evaluate(&tr);
            if (tr.lead) {
                metrics_val(&mt, step + 1, vl);
                progress_note(&pg, "step %d: val loss %.4f", step + 1, vl);
            }
        }
        if (a->save && a->save_every > 0 && (step + 1) % a->save_every == 0 &&
            step + 1 < a->steps) {
            comm_set_context(step + 1, "checkpoint");
            if (a->co2) round_losses_log(&tr, &pg, &mt, &rl[1], 1); // metrics up to here
            if (do_save(&tr, step + 1, a->co2)) {
                progress_end(&pg);
                if (tr.lead) fprintf(stderr, "loom: checkpoint failed: %s\n", loom_errmsg());
                rc = EXIT_IO;
                break;
            }
        }
    }
    if (a->co2 && !rc) {
        round_losses_log(&tr, &pg, &mt, &rl[1], 1);
        co2_finish(tr.co2); // x = the final anchor
    }
    for (int i = 0; a->co2 && i < 2; i++)
        free(rl[i].rec), free(rl[i].loss);
    progress_end(&pg);
    if (!rc) {
        comm_set_context(a->steps, "finishing");
        if (tr.has_val && (a->val_every <= 0 || a->steps % a->val_every || a->co2)) {
            double vl = evaluate(&tr);
            if (tr.lead) {
                metrics_val(&mt, a->steps, vl);
                fprintf(stderr, "loom: val loss %.4f\n", vl);
            }
        }
        if (skipped && tr.lead)
            fprintf(stderr, "loom: %d steps skipped for non-finite values\n", skipped);
        if (a->co2 && tr.lead && step_total > 0)
            fprintf(stderr,
                    "loom: co2 %d workers, tau %d | exposed communication %.1f%% of step "
                    "time | CO2 state %.1f MiB per worker\n",
                    N, a->tau, 100 * exposed_total / step_total, co2_memory(tr.co2) / 1048576);
        if (N > 1 && !a->co2 && tr.lead && step_total > 0) {
            double pb, gb, ob;
            dp_memory(tr.dp, &pb, &gb, &ob);
            struct rusage ru;
            getrusage(RUSAGE_SELF, &ru);
            fprintf(stderr,
                    "loom: dp %d zero %d | exposed communication %.1f%% of step time | per rank: "
                    "params %.1f MiB, grads %.1f MiB, optimizer %.1f MiB, peak RSS %.1f MiB\n",
                    N, a->zero, 100 * exposed_total / step_total, pb / 1048576, gb / 1048576,
                    ob / 1048576, ru.ru_maxrss / 1024.0);
        }
        if (a->save && do_save(&tr, a->steps > start ? a->steps : start, 0)) {
            if (tr.lead) fprintf(stderr, "loom: checkpoint failed: %s\n", loom_errmsg());
            rc = EXIT_IO;
        } else if (a->save && tr.lead) {
            fprintf(stderr, "loom: saved checkpoint to %s\n", a->save);
        }
        if (!rc && a->export_path) {
            if (export_weights(&tr, a->export_path, 0)) {
                fprintf(stderr, "loom: export failed: %s\n", loom_errmsg());
                rc = EXIT_IO;
            } else if (tr.lead) {
                fprintf(stderr, "loom: exported %s\n", a->export_path);
            }
        }
    }
    if (tr.lead) metrics_close(&mt);
    free(tr.inputs);
    free(tr.targets);
    workspace_free(&tr.ws, &tr.model);
    adamw_free(&tr.opt, &tr.model);
    dp_free(tr.dp);
    co2_free(tr.co2);
    gpt_free(&tr.model);
    dataset_close(&tr.train);
    if (tr.has_val) dataset_close(&tr.val);
    comm_finalize();
    return rc;
}

int train_dry_run(const TrainArgs *a) {
    GPTConfig cfg = {
        .L = a->layers, .H = a->heads, .C = a->dim, .V = a->vocab, .maxT = a->block_size};
    if (a->init && init_read_config(a->init, a->heads, &cfg)) die_last(EXIT_INPUT);
    if (gpt_config_check(&cfg)) die_last(EXIT_USAGE);
    double act = workspace_floats(&cfg, a->batch, a->seq, a->recompute) * 4.0;
    printf("memory plan per rank (MiB) for L%d H%d C%d V%d T%d, batch %d x seq %d%s\n", cfg.L,
           cfg.H, cfg.C, cfg.V, cfg.maxT, a->batch, a->seq, a->recompute ? ", recompute" : "");
    printf("%4s %5s %10s %10s %10s %12s %10s\n", "dp", "zero", "params", "grads", "optimizer",
           "activations", "total");
    int ns[4] = {1, 2, 4, a->dp}, count = a->dp == 1 || a->dp == 2 || a->dp == 4 ? 3 : 4;
    for (int i = 0; i < count; i++)
        for (int z = 0; z <= 3; z++) {
            double p, g, o;
            dp_memory_plan(&cfg, ns[i], z, &p, &g, &o);
            printf("%4d %5d %10.1f %10.1f %10.1f %12.1f %10.1f%s\n", ns[i], z, p / 1048576,
                   g / 1048576, o / 1048576, act / 1048576, (p + g + o + act) / 1048576,
                   ns[i] == a->dp && z == a->zero ? "   <- this run" : "");
        }
    return 0;
}
