// profile.c — measuring and storing per-block costs (see profile.h).
#include "profile.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common.h"
#include "../rng.h"

#define REPS 5

// Median of n values (sorts them).
static double median(double *t, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1], t[j - 1] = x;
        }
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

// One timing of block b's forward or backward.
static double time_block_once(GPT *m, Workspace *ws, int b, int backward, float *dx) {
    const Block *blk = &m->blocks[b];
    size_t n = (size_t)ws->B * ws->T * m->cfg.C;
    BlockIO io = {.tokens = ws->tokens,
                  .targets = ws->targets,
                  .dx = dx,
                  .wte = gpt_embed(m)->params,
                  .dwte = gpt_embed(m)->grads,
                  .grad_scale = 1e-3f};
    if (blk->kind != BLOCK_EMBED) io.x_in = workspace_stream(ws, m, b - 1);
    if (blk->kind != BLOCK_HEAD) io.x_out = workspace_stream(ws, m, b);
    if (backward) block_forward(m, blk, ws, &io); // backward needs this forward's state
    if (backward && blk->kind != BLOCK_HEAD) m->be->fill(dx, 1e-3f, n);
    double t0 = now_sec();
    if (backward)
        block_backward(m, blk, ws, &io);
    else
        block_forward(m, blk, ws, &io);
    return now_sec() - t0;
}

// How much slower a layer's forward+backward at micro-batch b runs when `copies` single-
// threaded copies run at once (one model and workspace each; BLAS calls inside the parallel
// region run on one thread) than when copy 0 runs alone: the median over REPS alternations of
// (mean time of the busy copies) / (time alone), so slow drifts of the machine cancel.
static double busy_factor(const Backend *be, const GPTConfig *one, int b, int T, int copies) {
    double *t = xcalloc((size_t)copies, sizeof(double)), ratio[REPS];
    GPT *ms = xcalloc((size_t)copies, sizeof(GPT));
    Workspace *wss = xcalloc((size_t)copies, sizeof(Workspace));
    float **dx = xcalloc((size_t)copies, sizeof(float *));
    for (int i = 0; i < copies; i++) {
        if (gpt_create(&ms[i], one, be) || workspace_create(&wss[i], &ms[i], b, T, 0))
            die_last(EXIT_USAGE);
        gpt_init_weights(&ms[i], 1);
        dx[i] = be->alloc((size_t)b * T * one->C);
    }
    for (int r = 0; r < REPS; r++) {
        double alone = time_block_once(&ms[0], &wss[0], 1, 0, dx[0]) +
                       time_block_once(&ms[0], &wss[0], 1, 1, dx[0]);
#pragma omp parallel num_threads(copies)
        {
            int i = omp_get_thread_num();
            t[i] = time_block_once(&ms[i], &wss[i], 1, 0, dx[i]) +
                   time_block_once(&ms[i], &wss[i], 1, 1, dx[i]);
        }
        double busy = 0;
        for (int i = 0; i < copies; i++)
            busy += t[i] / copies;
        ratio[r] = busy / alone;
    }
    for (int i = 0; i < copies; i++) {
        workspace_free(&wss[i], &ms[i]);
        gpt_free(&ms[i]);
        be->release(dx[i]);
    }
    free(t), free(ms), free(wss), free(dx);
    double f = median(ratio, REPS);
    return f > 1 ? f : 1;
}

// Embedding + one layer + head is enough: layers are identical.
static GPTConfig one_layer(const GPTConfig *cfg, int T) {
    GPTConfig one = *cfg;
    one.L = 1;
    if (one.maxT < T) one.maxT = T;
    return one;
}

size_t profile_batch_bytes(const Backend *be, const GPTConfig *cfg, int T, int b) {
    GPTConfig one = one_layer(cfg, T);
    GPT m;
    if (gpt_create_layout(&m, &one, be)) return SIZE_MAX;
    size_t floats = 2 * m.nparams + workspace_floats(&one, be, b, T, 0) + (size_t)b * T * one.C;
    gpt_free(&m);
    return floats * sizeof(float) + 2 * (size_t)b * T * sizeof(int);
}

// The per-parameter optimizer work is timed on arrays of this many floats each (four of them),
// fewer when max_bytes is smaller.
static size_t update_floats(size_t max_bytes) {
    size_t n = (size_t)1 << 22;
    while (max_bytes && n > ((size_t)1 << 16) && 4 * n * sizeof(float) > max_bytes)
        n /= 2;
    return n;
}

// Micro-batch sizes b0, 2·b0, 4·b0, ... up to max_b; contention: also the busy factors.
// max_bytes (0: no bound): what the measurement may allocate at once.
static int measure(Profile *p, const Backend *be, const GPTConfig *cfg, int T, int b0, int max_b,
                   int threads, int contention, size_t max_bytes) {
    memset(p, 0, sizeof *p);
    p->cfg = *cfg;
    p->T = T;
    p->threads = threads;
    p->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    GPTConfig one = one_layer(cfg, T);
    size_t need = profile_batch_bytes(be, cfg, T, b0);
    if (max_bytes && need > max_bytes)
        return loom_fail("profiling a layer, the embedding and the head at micro-batch %d x %d "
                         "needs %.1f MiB, more than the %.1f MiB it may use",
                         b0, T, need / 1048576.0, max_bytes / 1048576.0);
    GPT m;
    if (gpt_create(&m, &one, be)) return -1;
    gpt_init_weights(&m, 1);
    Rng r;
    rng_seed(&r, 5, 5);
    // one workspace per micro-batch size; every block's forward and backward is then timed
    // REPS times in rounds that interleave all of them (after a warm-up), so a short burst of
    // noise on the machine moves one sample of each median, not a whole row
    int nb = 0;
    Workspace ws[PROFILE_MAX_B];
    float *dx[PROFILE_MAX_B];
    for (int b = b0; b <= max_b && nb < PROFILE_MAX_B; b *= 2, nb++) {
        if (workspace_create(&ws[nb], &m, b, T, 0)) return -1;
        for (int i = 0; i < b * T; i++) {
            ws[nb].tokens[i] = (int)rng_below(&r, (uint32_t)cfg->V);
            ws[nb].targets[i] = (int)rng_below(&r, (uint32_t)cfg->V);
        }
        dx[nb] = be->alloc((size_t)b * T * cfg->C);
        p->rows[nb].b = b;
    }
    p->nrows = nb;
    for (double t0 = now_sec(); now_sec() - t0 < 0.5;) // warm-up: clocks, caches, page faults
        for (int i = 0; i < nb; i++)
            time_block_once(&m, &ws[i], 1, 1, dx[i]);
    double(*samples)[3][2][REPS] = xcalloc((size_t)nb, sizeof *samples);
    for (int rep = 0; rep < REPS; rep++)
        for (int i = 0; i < nb; i++)
            for (int k = 0; k < 3; k++)
                for (int bwd = 0; bwd < 2; bwd++)
                    samples[i][k][bwd][rep] = time_block_once(&m, &ws[i],
                                                              k == PROF_EMBED   ? 0
                                                              : k == PROF_LAYER ? 1
                                                                                : 2,
                                                              bwd, dx[i]);
    for (int i = 0; i < nb; i++) {
        ProfileRow *row = &p->rows[i];
        for (int k = 0; k < 3; k++) {
            row->fwd[k] = median(samples[i][k][0], REPS);
            row->bwd[k] = median(samples[i][k][1], REPS);
        }
        be->release(dx[i]);
        workspace_free(&ws[i], &m);
        // contention: every core runs a copy (single-threaded profiles only)
        int copies = threads == 1 ? p->cores : 1;
        row->busy = contention && copies > 1 ? busy_factor(be, &one, row->b, T, copies) : 1.0;
    }
    free(samples);
    gpt_free(&m);
    // the per-step optimizer work, per parameter: AdamW, zeroing the gradients, their norm
    size_t n = update_floats(max_bytes);
    float *w = be->alloc(n), *g = be->alloc(n), *mo = be->alloc(n), *v = be->alloc(n);
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = now_sec();
        be->adamw(w, g, mo, v, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, r + 1);
        be->fill(g, 0.f, n);
        (void)be->sumsq(g, n);
        double t = now_sec() - t0;
        best = t < best ? t : best;
    }
    p->update_s_per_param = best / (double)n;
    be->release(w), be->release(g), be->release(mo), be->release(v);
    return 0;
}

int profile_warmup(const Backend *be, const GPTConfig *cfg, int T, int b, size_t max_bytes) {
    size_t need = profile_batch_bytes(be, cfg, T, b);
    if (max_bytes && need > max_bytes)
        return loom_fail("warming up a layer, the embedding and the head at micro-batch %d x %d "
                         "needs %.1f MiB, more than the %.1f MiB it may use",
                         b, T, need / 1048576.0, max_bytes / 1048576.0);
    GPTConfig one = one_layer(cfg, T);
    GPT m;
    Workspace ws;
    if (gpt_create(&m, &one, be)) return -1;
    if (workspace_create(&ws, &m, b, T, 0)) {
        gpt_free(&m);
        return -1;
    }
    float *dx = be->alloc((size_t)b * T * one.C);
    for (int blk = 0; blk < 3; blk++) // tokens and targets are zeros: any values run the same
        for (int bwd = 0; bwd < 2; bwd++)
            time_block_once(&m, &ws, blk, bwd, dx);
    be->release(dx);
    workspace_free(&ws, &m);
    gpt_free(&m);
    return 0;
}

int profile_measure(Profile *p, const Backend *be, const GPTConfig *cfg, int T, int max_b,
                    int threads) {
    return measure(p, be, cfg, T, 1, max_b, threads, 1, 0);
}

int profile_measure_batch(Profile *p, const Backend *be, const GPTConfig *cfg, int T, int b,
                          int threads, size_t max_bytes) {
    return measure(p, be, cfg, T, b, b, threads, 0, max_bytes);
}

int profile_save(const Profile *p, const char *path) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "loom-profile-1");
    cJSON *c = cJSON_AddObjectToObject(j, "model");
    cJSON_AddNumberToObject(c, "layers", p->cfg.L);
    cJSON_AddNumberToObject(c, "heads", p->cfg.H);
    cJSON_AddNumberToObject(c, "dim", p->cfg.C);
    cJSON_AddNumberToObject(c, "vocab", p->cfg.V);
    cJSON_AddNumberToObject(c, "block_size", p->cfg.maxT);
    cJSON_AddNumberToObject(j, "seq", p->T);
    cJSON_AddNumberToObject(j, "threads", p->threads);
    cJSON_AddNumberToObject(j, "cores", p->cores);
    cJSON_AddNumberToObject(j, "update_s_per_param", p->update_s_per_param);
    cJSON *rows = cJSON_AddArrayToObject(j, "rows");
    const char *names[3] = {"embed", "layer", "head"};
    for (int i = 0; i < p->nrows; i++) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddNumberToObject(r, "micro_batch", p->rows[i].b);
        for (int k = 0; k < 3; k++) {
            char key[32];
            snprintf(key, sizeof key, "%s_fwd_s", names[k]);
            cJSON_AddNumberToObject(r, key, p->rows[i].fwd[k]);
            snprintf(key, sizeof key, "%s_bwd_s", names[k]);
            cJSON_AddNumberToObject(r, key, p->rows[i].bwd[k]);
        }
        cJSON_AddNumberToObject(r, "busy_factor", p->rows[i].busy);
        cJSON_AddItemToArray(rows, r);
    }
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    int rc = write_file_atomic(path, text, strlen(text));
    free(text);
    return rc;
}

// A finite number >= 0 (and, for counts, a whole number that fits an int).
static int num(cJSON *o, const char *k, double *out, const char *path) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) return loom_fail("%s: missing or non-numeric '%s'", path, k);
    if (!isfinite(v->valuedouble) || v->valuedouble < 0)
        return loom_fail("%s: '%s' is %g (a finite number >= 0 expected)", path, k, v->valuedouble);
    *out = v->valuedouble;
    return 0;
}

static int count(cJSON *o, const char *k, double *out, const char *path) {
    if (num(o, k, out, path)) return -1;
    if (*out > INT_MAX || *out != (double)(int)*out)
        return loom_fail("%s: '%s' is %g (a whole number expected)", path, k, *out);
    return 0;
}

int profile_load(Profile *p, const char *path) {
    memset(p, 0, sizeof *p);
    size_t len;
    char *txt = read_file(path, &len);
    if (!txt) return -1;
    cJSON *j = cJSON_ParseWithLength(txt, len);
    free(txt);
    cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
    if (!j || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "loom-profile-1")) {
        cJSON_Delete(j);
        return loom_fail("%s: not a loom profile (written by loom plan --save-profile)", path);
    }
    cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "model");
    double v[8] = {0};
    int rc = count(c, "layers", &v[0], path) || count(c, "heads", &v[1], path) ||
             count(c, "dim", &v[2], path) || count(c, "vocab", &v[3], path) ||
             count(c, "block_size", &v[4], path) || count(j, "seq", &v[5], path) ||
             count(j, "threads", &v[6], path);
    cJSON *up = cJSON_GetObjectItemCaseSensitive(j, "update_s_per_param");
    if (!rc && up && num(j, "update_s_per_param", &p->update_s_per_param, path)) rc = -1;
    cJSON *cores = cJSON_GetObjectItemCaseSensitive(j, "cores");
    if (!rc && cores && count(j, "cores", &v[7], path)) rc = -1;
    p->cores = rc ? 0 : (int)v[7]; // optional: 0 = unknown
    cJSON *rows = cJSON_GetObjectItemCaseSensitive(j, "rows");
    if (!rc && !cJSON_IsArray(rows)) rc = loom_fail("%s: missing 'rows' (a list)", path);
    if (!rc) {
        p->cfg = (GPTConfig){
            .L = (int)v[0], .H = (int)v[1], .C = (int)v[2], .V = (int)v[3], .maxT = (int)v[4]};
        p->T = (int)v[5];
        p->threads = (int)v[6];
        char why[512] = "seq is not in [1, block_size]";
        if (gpt_config_check(&p->cfg)) snprintf(why, sizeof why, "%s", loom_errmsg());
        if (strcmp(why, "seq is not in [1, block_size]") || p->T < 1 || p->T > p->cfg.maxT)
            rc = loom_fail("%s: model out of range: %s", path, why);
    }
    if (!rc) {
        const char *names[3] = {"embed", "layer", "head"};
        for (cJSON *r = rows->child; r && !rc; r = r->next) {
            if (p->nrows >= PROFILE_MAX_B) break;
            ProfileRow *row = &p->rows[p->nrows++];
            double b = 0;
            rc = count(r, "micro_batch", &b, path);
            if (!rc && b < 1) rc = loom_fail("%s: micro_batch %g (>= 1 expected)", path, b);
            row->b = rc ? 0 : (int)b;
            for (int k = 0; k < 3 && !rc; k++) {
                char key[32];
                snprintf(key, sizeof key, "%s_fwd_s", names[k]);
                rc = num(r, key, &row->fwd[k], path);
                snprintf(key, sizeof key, "%s_bwd_s", names[k]);
                if (!rc) rc = num(r, key, &row->bwd[k], path);
            }
            cJSON *busy = cJSON_GetObjectItemCaseSensitive(r, "busy_factor");
            row->busy = cJSON_IsNumber(busy) && busy->valuedouble >= 1 ? busy->valuedouble : 1.0;
        }
    }
    cJSON_Delete(j);
    if (!rc && !p->nrows) rc = loom_fail("%s: no profile rows", path);
    return rc ? -1 : 0;
}

const ProfileRow *profile_row(const Profile *p, int b) {
    for (int i = 0; i < p->nrows; i++)
        if (p->rows[i].b == b) return &p->rows[i];
    return NULL;
}
