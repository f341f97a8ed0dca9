// profile.c — measuring and storing per-block costs (see profile.h).
#include "profile.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "../rng.h"

// Median of three timings of one block's forward or backward.
static double time_block(GPT *m, Workspace *ws, int b, int backward, float *dx) {
    double t[3];
    const Block *blk = &m->blocks[b];
    size_t n = (size_t)ws->B * ws->T * m->cfg.C;
    for (int r = 0; r < 3; r++) {
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
        t[r] = now_sec() - t0;
    }
    double a = t[0], b2 = t[1], c = t[2]; // median of three
    return a > b2 ? (b2 > c ? b2 : (a > c ? c : a)) : (a > c ? a : (b2 > c ? c : b2));
}

int profile_measure(Profile *p, const GPTConfig *cfg, int T, int max_b, int threads) {
    memset(p, 0, sizeof *p);
    p->cfg = *cfg;
    p->T = T;
    p->threads = threads;
    GPTConfig one = *cfg; // embedding + one layer + head is enough: layers are identical
    one.L = 1;
    if (one.maxT < T) one.maxT = T;
    GPT m;
    if (gpt_create(&m, &one, backend_cpu())) return -1;
    gpt_init_weights(&m, 1);
    Rng r;
    rng_seed(&r, 5, 5);
    for (int b = 1; b <= max_b && p->nrows < PROFILE_MAX_B; b *= 2) {
        Workspace ws;
        if (workspace_create(&ws, &m, b, T, 0)) return -1;
        for (int i = 0; i < b * T; i++) {
            ws.tokens[i] = (int)rng_below(&r, (uint32_t)cfg->V);
            ws.targets[i] = (int)rng_below(&r, (uint32_t)cfg->V);
        }
        float *dx = xalloc_floats((size_t)b * T * cfg->C);
        ProfileRow *row = &p->rows[p->nrows++];
        row->b = b;
        for (int k = 0; k < 3; k++) {
            int blk = k == PROF_EMBED ? 0 : k == PROF_LAYER ? 1 : 2;
            row->fwd[k] = time_block(&m, &ws, blk, 0, dx);
            row->bwd[k] = time_block(&m, &ws, blk, 1, dx);
        }
        free(dx);
        workspace_free(&ws, &m);
    }
    // the per-step optimizer work, per parameter: AdamW, zeroing the gradients, their norm
    size_t n = 1 << 22;
    float *w = xalloc_floats(n), *g = xalloc_floats(n), *mo = xalloc_floats(n), *v = xalloc_floats(n);
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = now_sec();
        m.be->adamw(w, g, mo, v, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, r + 1);
        m.be->fill(g, 0.f, n);
        (void)m.be->sumsq(g, n);
        double t = now_sec() - t0;
        best = t < best ? t : best;
    }
    p->update_s_per_param = best / (double)n;
    free(w), free(g), free(mo), free(v);
    gpt_free(&m);
    return 0;
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
        cJSON_AddItemToArray(rows, r);
    }
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    int rc = write_file_atomic(path, text, strlen(text));
    free(text);
    return rc;
}

static int num(cJSON *o, const char *k, double *out, const char *path) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) return loom_fail("%s: missing or non-numeric '%s'", path, k);
    *out = v->valuedouble;
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
    int rc = num(c, "layers", &v[0], path) || num(c, "heads", &v[1], path) ||
             num(c, "dim", &v[2], path) || num(c, "vocab", &v[3], path) ||
             num(c, "block_size", &v[4], path) || num(j, "seq", &v[5], path) ||
             num(j, "threads", &v[6], path);
    cJSON *up = cJSON_GetObjectItemCaseSensitive(j, "update_s_per_param");
    if (cJSON_IsNumber(up)) p->update_s_per_param = up->valuedouble;  // optional
    if (!rc) {
        p->cfg = (GPTConfig){
            .L = (int)v[0], .H = (int)v[1], .C = (int)v[2], .V = (int)v[3], .maxT = (int)v[4]};
        p->T = (int)v[5];
        p->threads = (int)v[6];
        const char *names[3] = {"embed", "layer", "head"};
        for (cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "rows")->child; r && !rc; r = r->next) {
            if (p->nrows >= PROFILE_MAX_B) break;
            ProfileRow *row = &p->rows[p->nrows++];
            double b = 0;
            rc = num(r, "micro_batch", &b, path);
            row->b = (int)b;
            for (int k = 0; k < 3 && !rc; k++) {
                char key[32];
                snprintf(key, sizeof key, "%s_fwd_s", names[k]);
                rc = num(r, key, &row->fwd[k], path);
                snprintf(key, sizeof key, "%s_bwd_s", names[k]);
                if (!rc) rc = num(r, key, &row->bwd[k], path);
            }
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
