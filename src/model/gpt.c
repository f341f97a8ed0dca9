// gpt.c — model construction (block list, tensor table, flat buffers), GPT-2 init, and the
// single-process forward/backward over all blocks (the workspace of activations: workspace.c).
#include "gpt.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common.h"
#include "../rng.h"
#include "block_impl.h"

int gpt_config_check(const GPTConfig *c) {
    if (c->L < 1 || c->L > GPT_MAX_LAYERS)
        return loom_fail("--layers must be in [1, %d] (got %d)", GPT_MAX_LAYERS, c->L);
    if (c->H < 1) return loom_fail("--heads must be >= 1 (got %d)", c->H);
    if (c->C < 1 || c->C > GPT_MAX_DIM)
        return loom_fail("--dim must be in [1, %d] (got %d)", GPT_MAX_DIM, c->C);
    if (c->C % c->H)
        return loom_fail("--dim %d is not divisible by --heads %d (head size must be whole)", c->C,
                         c->H);
    if (c->V < 2 || c->V > GPT_MAX_VOCAB)
        return loom_fail("--vocab must be in [2, %d] (got %d)", GPT_MAX_VOCAB, c->V);
    if (c->maxT < 1 || c->maxT > GPT_MAX_BLOCK)
        return loom_fail("--block-size must be in [1, %d] (got %d)", GPT_MAX_BLOCK, c->maxT);
    if (c->arch != ARCH_GPT2 && c->arch != ARCH_LLAMA)
        return loom_fail("--arch must be gpt2 or llama (got %d)", c->arch);
    return gpt_is_llama(c) ? llama_config_check(c) : 0;
}

// a*b+c in size_t; returns 0, or -1 when it overflows.
static int mul_add(size_t a, size_t b, size_t c, size_t *out) {
    if (b && a > (SIZE_MAX - c) / b) return -1;
    *out = a * b + c;
    return 0;
}

int gpt_param_count(const GPTConfig *c, size_t *n) {
    if (gpt_config_check(c)) return -1;
    if (gpt_is_llama(c)) return llama_param_count(c, n);
    size_t C = (size_t)c->C, per_layer, emb, total;
    // per layer: 2 LayerNorms (4C), qkv (3C·C + 3C), attn proj (C·C + C), fc (4C·C + 4C),
    // fc proj (4C·C + C) = 12C² + 13C; embeddings (V + maxT)·C; final LayerNorm 2C
    if (mul_add(12 * C, C, 13 * C, &per_layer) ||
        mul_add((size_t)c->V + (size_t)c->maxT, C, 2 * C, &emb) ||
        mul_add(per_layer, (size_t)c->L, emb, &total))
        return loom_fail("model shape L=%d C=%d V=%d maxT=%d: parameter count overflows", c->L,
                         c->C, c->V, c->maxT);
    *n = total;
    return 0;
}

// Bytes of physical memory, or 0 when unknown.
static size_t phys_mem_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psize <= 0) return 0;
    if ((unsigned long)pages > SIZE_MAX / (unsigned long)psize) return SIZE_MAX;
    return (size_t)pages * (size_t)psize;
}

// Adds a tensor of the whole shape (rows, cols), cut for tensor parallelism as `split` says.
static void add_tensor(GPT *m, size_t *off, const char *name, int rows, int cols, int conv,
                       float std, int split) {
    int tp = m->tp.n > 1 ? m->tp.n : 1;
    if (tp > 1 && split == TP_VOCAB)
        rows = m->tp.vrows;
    else if (tp > 1 && (split == TP_ROWS || split == TP_QKV))
        rows /= tp;
    else if (tp > 1 && split == TP_COLS)
        cols /= tp;
    else if (tp > 1 && split == TP_KVSHARE)
        rows /= m->cfg.KV; // one kv head
    if (tp == 1) split = TP_REPLICATED;
    TensorSpec *t = &m->tensors[m->ntensors++];
    t->split = split;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->off = *off;
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->n = (size_t)rows * (cols ? cols : 1);
    t->hf_conv1d = conv;
    t->init_std = std;
    *off += t->n;
}

void gpt_add_tensor(GPT *m, size_t *off, const char *name, int rows, int cols, float std,
                    int split) {
    add_tensor(m, off, name, rows, cols, 0, std, split);
}

// Appends GPT-2 block blk's tensors (Hugging Face GPT-2 names) at *off.
static void gpt2_add_tensors(GPT *m, const Block *blk, size_t *off) {
    const GPTConfig *cfg = &m->cfg;
    int C = cfg->C, l = blk->layer;
    float std = 0.02f, res_std = 0.02f / sqrtf(2.0f * cfg->L);
    char nm[64];
    if (blk->kind == BLOCK_EMBED) {
        add_tensor(m, off, "wte.weight", cfg->V, C, 0, std, TP_VOCAB);
        add_tensor(m, off, "wpe.weight", cfg->maxT, C, 0, std, TP_REPLICATED);
        return;
    }
    if (blk->kind == BLOCK_HEAD) {
        add_tensor(m, off, "ln_f.weight", C, 0, 0, -1.f, TP_REPLICATED);
        add_tensor(m, off, "ln_f.bias", C, 0, 0, 0.f, TP_REPLICATED);
        return;
    }
#define T_(suffix, r, c, conv, s, split)                                                           \
    snprintf(nm, sizeof nm, "h.%d.%s", l, suffix);                                                 \
    add_tensor(m, off, nm, r, c, conv, s, split)
    // order matters: layer_params() in block_layer.c walks the same sequence
    T_("ln_1.weight", C, 0, 0, -1.f, TP_REPLICATED);
    T_("ln_1.bias", C, 0, 0, 0.f, TP_REPLICATED);
    T_("attn.c_attn.weight", 3 * C, C, 1, std, TP_QKV);
    T_("attn.c_attn.bias", 3 * C, 0, 0, 0.f, TP_QKV);
    T_("attn.c_proj.weight", C, C, 1, res_std, TP_COLS);
    T_("attn.c_proj.bias", C, 0, 0, 0.f, TP_REPLICATED);
    T_("ln_2.weight", C, 0, 0, -1.f, TP_REPLICATED);
    T_("ln_2.bias", C, 0, 0, 0.f, TP_REPLICATED);
    T_("mlp.c_fc.weight", 4 * C, C, 1, std, TP_ROWS);
    T_("mlp.c_fc.bias", 4 * C, 0, 0, 0.f, TP_ROWS);
    T_("mlp.c_proj.weight", C, 4 * C, 1, res_std, TP_COLS);
    T_("mlp.c_proj.bias", C, 0, 0, 0.f, TP_REPLICATED);
#undef T_
}

int gpt_create_layout(GPT *m, const GPTConfig *cfg, const Backend *be) {
    return gpt_create_layout_tp(m, cfg, be, 1, 0);
}

int gpt_create_layout_tp(GPT *m, const GPTConfig *cfg, const Backend *be, int tp, int tpi) {
    size_t want;
    if (gpt_param_count(cfg, &want)) return -1;
    if (gpt_is_llama(cfg) && tp > 1 && llama_tp_check(cfg, tp)) return -1;
    if (tp < 1 || cfg->H % tp)
        return loom_fail("--tp %d must divide --heads %d (each rank holds whole heads)", tp,
                         cfg->H);
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->be = be;
    if (tp > 1) {
        int Vp = (cfg->V + 64 * tp - 1) / (64 * tp) * (64 * tp); // padded vocabulary
        m->tp = (TensorParallel){.n = tp, .i = tpi, .vrows = Vp / tp, .v0 = tpi * (Vp / tp)};
        m->tp.nv = cfg->V - m->tp.v0 < 0 ? 0 : cfg->V - m->tp.v0;
        if (m->tp.nv > m->tp.vrows) m->tp.nv = m->tp.vrows;
    }
    int L = cfg->L;
    m->nblocks = L + 2;
    m->blocks = xcalloc((size_t)m->nblocks, sizeof(Block));
    m->tensors = xcalloc((size_t)(2 + 12 * L + 2), sizeof(TensorSpec));
    size_t off = 0;
    for (int b = 0; b < m->nblocks; b++) {
        Block *blk = &m->blocks[b];
        blk->off = off;
        blk->t0 = m->ntensors;
        blk->kind = b == 0 ? BLOCK_EMBED : b == m->nblocks - 1 ? BLOCK_HEAD : BLOCK_LAYER;
        blk->layer = blk->kind == BLOCK_LAYER ? b - 1 : -1;
        if (gpt_is_llama(cfg))
            llama_add_tensors(m, blk, &off);
        else
            gpt2_add_tensors(m, blk, &off);
        blk->nt = m->ntensors - blk->t0;
        blk->n = off - blk->off;
    }
    m->nparams = off;
    if (tp == 1 && off != want)
        die(EXIT_IO, "gpt_create: laid out %zu parameters, expected %zu", off, want);
    size_t chunks = 0; // norm chunks (gpt_chunk_*): counted in size_t, kept where an int holds
    for (int b = 0; b < m->nblocks; b++) {
        m->blocks[b].chunk0 = (int)(chunks < INT_MAX ? chunks : INT_MAX);
        chunks += (m->blocks[b].n + GPT_CHUNK - 1) / GPT_CHUNK;
    }
    if (chunks > INT_MAX / 2) {
        loom_fail("model L=%d C=%d V=%d maxT=%d has %zu parameters: more than loom handles (its "
                  "gradient norm alone would keep %zu partial sums in memory)",
                  cfg->L, cfg->C, cfg->V, cfg->maxT, off, chunks);
        gpt_free(m);
        return -1;
    }
    m->nchunks = (int)chunks;
    gpt_own_all(m);
    return 0;
}

void gpt_free(GPT *m) {
    if (m->params) m->be->release(m->params);
    if (m->grads) m->be->release(m->grads);
    free(m->blocks);
    free(m->tensors);
    memset(m, 0, sizeof *m);
}

int gpt_alloc_whole(GPT *m, int params, int grads) {
    // float32 each; refuse before allocating what cannot fit in this machine's memory
    size_t want = m->nparams * (size_t)(!!params + !!grads), mem = phys_mem_bytes();
    const GPTConfig *c = &m->cfg;
    if (want > SIZE_MAX / sizeof(float) || (mem && want * sizeof(float) > mem))
        return loom_fail("model L=%d H=%d C=%d V=%d maxT=%d has %zu parameters: %.1f GiB for its "
                         "whole %s, more than this machine's %.1f GiB of memory",
                         c->L, c->H, c->C, c->V, c->maxT, m->nparams,
                         (double)want * sizeof(float) / (1 << 30),
                         params && grads ? "parameters and gradients"
                         : params        ? "parameters"
                                         : "gradients",
                         (double)mem / (1 << 30));
    if (params && !m->params) m->params = m->be->alloc(m->nparams);
    if (grads && !m->grads) m->grads = m->be->alloc(m->nparams);
    gpt_own_all(m);
    return 0;
}

int gpt_create(GPT *m, const GPTConfig *cfg, const Backend *be) {
    if (gpt_create_layout(m, cfg, be)) return -1;
    if (gpt_alloc_whole(m, 1, 1)) {
        gpt_free(m);
        return -1;
    }
    return 0;
}

int gpt_init_stream(const GPT *m, unsigned long long seed, size_t lo, size_t hi, GptSink sink,
                    void *ctx) {
    Rng r;
    rng_seed(&r, seed, 0x9e3779b97f4a7c15ULL);
    enum { CHUNK = 1 << 20 }; // staged in pieces: no second parameter-sized buffer at start-up
    float *host = xmalloc(CHUNK * sizeof(float));
    int rc = 0;
    for (int i = 0; i < m->ntensors && !rc; i++) { // every value is drawn, those in [lo, hi) kept
        const TensorSpec *t = &m->tensors[i];
        if (t->off >= hi) break;
        for (size_t k0 = 0; k0 < t->n && !rc; k0 += CHUNK) {
            size_t n = t->n - k0 < CHUNK ? t->n - k0 : CHUNK;
            for (size_t k = 0; k < n; k++)
                host[k] = t->init_std > 0   ? t->init_std * rng_normal(&r)
                          : t->init_std < 0 ? 1.f
                                            : 0.f;
            size_t s, len = range_isect(t->off + k0, t->off + k0 + n, lo, hi, &s);
            if (len) rc = sink(ctx, s, len, host + (s - t->off - k0));
        }
    }
    free(host);
    return rc;
}

typedef struct {
    const GPT *m;
    float *dst;
    size_t lo;
} UploadSink;

static int upload_sink(void *ctx, size_t at, size_t n, const float *src) {
    UploadSink *u = ctx;
    u->m->be->upload(u->dst + (at - u->lo), src, n);
    return 0;
}

void gpt_init_range(const GPT *m, unsigned long long seed, size_t lo, size_t hi, float *dst) {
    UploadSink u = {m, dst, lo};
    gpt_init_stream(m, seed, lo, hi, upload_sink, &u);
}

void gpt_init_weights(GPT *m, unsigned long long seed) {
    gpt_init_range(m, seed, 0, m->nparams, m->params);
}

const TensorSpec *gpt_find_tensor(const GPT *m, const char *name) {
    // "h.<l>.*" is in layer l's block; anything else in the embedding or the head: a lookup
    // costs a few comparisons however deep the model (loaders look up every tensor)
    int b0 = 0, b1 = m->nblocks;
    const char *pre = gpt_is_llama(&m->cfg) ? "model.layers." : "h.";
    size_t np = strlen(pre);
    if (!strncmp(name, pre, np) && name[np] >= '0' && name[np] <= '9') {
        long l = 0;
        const char *p = name + np;
        while (*p >= '0' && *p <= '9' && l <= m->cfg.L)
            l = l * 10 + (*p++ - '0');
        if (*p != '.' || l >= m->cfg.L || l >= m->nblocks - 2) return NULL;
        b0 = (int)l + 1, b1 = b0 + 1;
    }
    for (int b = b0; b < b1; b++) {
        if (b1 - b0 > 1 && b > 0 && b < m->nblocks - 1) b = m->nblocks - 1; // skip the layers
        const Block *blk = &m->blocks[b];
        for (int i = blk->t0; i < blk->t0 + blk->nt; i++)
            if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
    }
    return NULL;
}

// ---------------------------------------------------------------- whole model

static float *stream_at(const Workspace *ws, const GPT *m, int l) {
    return workspace_stream(ws, m, l);
}

// gscale: the backward that follows and its scale (gpt_forward_backward), or NULL
static double forward(GPT *m, Workspace *ws, const int *tokens, const int *targets,
                      const float *gscale) {
    size_t BT = (size_t)ws->B * ws->T;
    memcpy(ws->tokens, tokens, BT * sizeof(int));
    if (targets) memcpy(ws->targets, targets, BT * sizeof(int));
    const BlockHooks *h = m->hooks;
    double loss = 0.0;
    for (int b = 0; b < m->nblocks; b++) {
        if (h && h->before) h->before(h->ctx, b, 0);
        const Block *blk = &m->blocks[b];
        BlockIO io = {.tokens = ws->tokens, .targets = targets ? ws->targets : NULL};
        if (blk->kind != BLOCK_EMBED) io.x_in = stream_at(ws, m, b - 1);
        if (blk->kind != BLOCK_HEAD) io.x_out = stream_at(ws, m, b);
        if (blk->kind == BLOCK_HEAD) io.wte = gpt_embed(m)->params;
        if (blk->kind == BLOCK_HEAD && gscale) {
            io.grad_next = 1, io.grad_scale = *gscale;
            io.dwte = m->head_dwte ? m->head_dwte : gpt_embed(m)->grads;
        }
        block_forward(m, blk, ws, &io);
        if (blk->kind == BLOCK_HEAD && targets) loss = io.loss_sum / (double)BT;
        if (h && h->after) h->after(h->ctx, b, 0);
    }
    return loss;
}

double gpt_forward(GPT *m, Workspace *ws, const int *tokens, const int *targets) {
    return forward(m, ws, tokens, targets, NULL);
}

double gpt_forward_backward(GPT *m, Workspace *ws, const int *tokens, const int *targets,
                            float grad_scale) {
    static int env = -1;
    if (env < 0) {
        const char *e = getenv("LOOM_HEAD_GRAD_IN_FORWARD");
        env = !(e && !strcmp(e, "0"));
    }
    double loss = forward(m, ws, tokens, targets, env && targets ? &grad_scale : NULL);
    gpt_backward(m, ws, grad_scale);
    return loss;
}

void gpt_fold_head(GPT *m, float *dwte) {
    size_t n = (size_t)gpt_vocab_rows(m) * m->cfg.C;
    m->be->axpby(dwte, 1.0f, m->head_dwte, 1.0f, n); // E + H
    m->be->fill(m->head_dwte, 0.f, n);
}

void gpt_backward(GPT *m, Workspace *ws, float grad_scale) {
    const BlockHooks *h = m->hooks;
    for (int b = m->nblocks - 1; b >= 0; b--) {
        if (h && h->before) h->before(h->ctx, b, 1);
        const Block *blk = &m->blocks[b];
        BlockIO io = {.tokens = ws->tokens, .targets = ws->targets, .dx = ws->dstream};
        if (blk->kind != BLOCK_EMBED) io.x_in = stream_at(ws, m, b - 1);
        if (blk->kind != BLOCK_HEAD) io.x_out = stream_at(ws, m, b);
        if (blk->kind == BLOCK_HEAD) {
            io.wte = gpt_embed(m)->params;
            io.dwte = m->head_dwte ? m->head_dwte : gpt_embed(m)->grads;
            io.grad_scale = grad_scale;
        }
        block_backward(m, blk, ws, &io);
        if (b == 0 && m->head_dwte && m->fold_head) gpt_fold_head(m, blk->grads);
        if (h && h->after) h->after(h->ctx, b, 1);
    }
}

void gpt_zero_grad(GPT *m) { m->be->fill(m->grads, 0.f, m->nparams); }

double gpt_flops_per_step(const GPTConfig *c, int B, int T) {
    if (gpt_is_llama(c)) return llama_flops_per_step(c, B, T);
    double C = c->C, L = c->L, V = c->V, BT = (double)B * T;
    double matmul_params = L * 12.0 * C * C + V * C; // weights used in matmuls
    double attn = L * 2.0 * 2.0 * T * C; // QKᵀ and att·V per token (full, as computed)
    return 6.0 * matmul_params * BT + 3.0 * attn * BT;
}
