// test_gradcheck.c — finite-difference gradient checks of every CPU kernel's backward and of
// every block's backward (embedding, transformer layer with and without recompute, head).
// Each check uses f = Σ out·R for a fixed random R and compares the analytic gradient with a
// central difference (float32, step 1e-2 on O(1) inputs; tolerance stated per check).
#include <string.h>

#include "../src/backend/backend.h"
#include "../src/common.h"
#include "../src/model/gpt.h"
#include "../src/rng.h"
#include "gradcheck.h"
#include "test.h"

// ---------------------------------------------------------------- kernels

typedef struct {
    int N, C, OC;
    float *inp, *w, *b, *out, *R, *mean, *rstd;
} LinCtx;

static double ln_f(void *v) {
    LinCtx *c = v;
    be->layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}

TEST(layernorm_grad) {
    LinCtx c = {.N = 6, .C = 16};
    size_t n = (size_t)c.N * c.C;
    c.inp = randv(n, 1), c.w = randv(c.C, 1), c.b = randv(c.C, 1), c.R = randv(n, 1);
    c.out = xalloc_floats(n), c.mean = xalloc_floats(c.N), c.rstd = xalloc_floats(c.N);
    float *dinp = xalloc_floats(n), *dw = xalloc_floats(c.C), *db = xalloc_floats(c.C);
    ln_f(&c);
    be->layernorm_backward(dinp, dw, db, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    CHECK(!fd_check("dinp", ln_f, &c, c.inp, dinp, n, 40, 2e-2, 2e-3), "layernorm dinp");
    CHECK(!fd_check("dw", ln_f, &c, c.w, dw, c.C, 16, 2e-2, 2e-3), "layernorm dw");
    CHECK(!fd_check("db", ln_f, &c, c.b, db, c.C, 16, 2e-2, 2e-3), "layernorm db");
}

static double mm_f(void *v) {
    LinCtx *c = v;
    be->matmul_forward(c->out, c->inp, c->w, c->b, c->N, c->C, c->OC);
    return dot(c->out, c->R, (size_t)c->N * c->OC);
}

TEST(matmul_grad) {
    LinCtx c = {.N = 5, .C = 12, .OC = 9};
    c.inp = randv((size_t)c.N * c.C, 1), c.w = randv((size_t)c.OC * c.C, 1), c.b = randv(c.OC, 1);
    c.R = randv((size_t)c.N * c.OC, 1), c.out = xalloc_floats((size_t)c.N * c.OC);
    float *dinp = xalloc_floats((size_t)c.N * c.C), *dw = xalloc_floats((size_t)c.OC * c.C);
    float *db = xalloc_floats(c.OC);
    be->matmul_backward(dinp, dw, db, c.R, c.inp, c.w, c.N, c.C, c.OC);
    CHECK(!fd_check("dinp", mm_f, &c, c.inp, dinp, (size_t)c.N * c.C, 60, 1e-2, 1e-3), "dinp");
    CHECK(!fd_check("dw", mm_f, &c, c.w, dw, (size_t)c.OC * c.C, 60, 1e-2, 1e-3), "dw");
    CHECK(!fd_check("db", mm_f, &c, c.b, db, c.OC, 9, 1e-2, 1e-3), "db");
}

typedef struct {
    int B, T, C, NH;
    float *qkv, *out, *att, *R;
} AttCtx;

static double att_f(void *v) {
    AttCtx *c = v;
    be->attention_forward(c->out, c->att, c->qkv, c->B, c->T, c->C, c->NH);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}

// T = 7 runs the CPU's stored-softmax path, T = 100 its blockwise one (cpu_attention.c)
static void attention_grad_at(int B, int T, int C, int NH) {
    AttCtx c = {.B = B, .T = T, .C = C, .NH = NH};
    size_t nq = (size_t)c.B * c.T * 3 * c.C, no = (size_t)c.B * c.T * c.C;
    c.qkv = randv(nq, 1), c.R = randv(no, 1), c.out = xalloc_floats(no);
    c.att = xalloc_floats(be->attention_saved_floats(c.B, c.T, c.NH, c.C / c.NH));
    float *dqkv = xalloc_floats(nq);
    att_f(&c);
    be->attention_backward(dqkv, c.R, c.qkv, c.out, c.att, c.B, c.T, c.C, c.NH);
    CHECK(!fd_check("dqkv", att_f, &c, c.qkv, dqkv, nq, 150, 2e-2, 2e-3), "attention dqkv T=%d", T);
    // causality: output at t=0 must not depend on later positions' keys
    float before = c.out[0];
    c.qkv[(size_t)3 * 3 * c.C + c.C] += 5.f; // key of position 3, batch 0
    att_f(&c);
    CHECK(c.out[0] == before, "attention leaks future keys (T=%d)", T);
    free(c.qkv), free(c.R), free(c.out), free(c.att), free(dqkv);
}

TEST(attention_grad) {
    attention_grad_at(2, 7, 12, 3);
    attention_grad_at(2, 100, 12, 3);
}

typedef struct {
    size_t n;
    float *x, *out, *R;
} EwCtx;

static double gelu_f(void *v) {
    EwCtx *c = v;
    be->gelu_forward(c->out, c->x, c->n);
    return dot(c->out, c->R, c->n);
}

TEST(gelu_grad) {
    EwCtx c = {.n = 64};
    c.x = randv(c.n, 2), c.R = randv(c.n, 1), c.out = xalloc_floats(c.n);
    float *dx = xalloc_floats(c.n);
    be->gelu_backward(dx, c.x, c.R, c.n);
    CHECK(!fd_check("dx", gelu_f, &c, c.x, dx, c.n, 64, 1e-2, 1e-3), "gelu dx");
    // value check against the closed form at x = 1
    float one = 1.f, y;
    be->gelu_forward(&y, &one, 1);
    CHECK(fabsf(y - 0.841192f) < 1e-5f, "gelu(1) = %f", y);
}

typedef struct {
    int N, V;
    float *logits, *work, *losses;
    int *targets;
} XentCtx;

static double xent_f(void *v) {
    XentCtx *c = v;
    memcpy(c->work, c->logits, sizeof(float) * c->N * c->V);
    return be->softmax_xent_forward(c->work, c->losses, c->targets, c->N, c->V);
}

TEST(softmax_xent_grad) {
    XentCtx c = {.N = 4, .V = 13};
    size_t n = (size_t)c.N * c.V;
    c.logits = randv(n, 2), c.work = xalloc_floats(n), c.losses = xalloc_floats(c.N);
    c.targets = xcalloc(c.N, sizeof(int));
    for (int i = 0; i < c.N; i++)
        c.targets[i] = (int)rng_below(&rng, c.V);
    double loss = xent_f(&c);
    // reference loss in double
    double ref = 0;
    for (int i = 0; i < c.N; i++) {
        double mx = -1e30, s = 0;
        for (int j = 0; j < c.V; j++)
            mx = fmax(mx, c.logits[i * c.V + j]);
        for (int j = 0; j < c.V; j++)
            s += exp(c.logits[i * c.V + j] - mx);
        ref += log(s) + mx - c.logits[i * c.V + c.targets[i]];
    }
    CHECK(close_enough(loss, ref, 1e-5, 1e-5), "loss %f vs %f", loss, ref);
    be->softmax_xent_backward(c.work, c.targets, 1.0f, c.N, c.V);
    float *g = xalloc_floats(n);
    memcpy(g, c.work, sizeof(float) * n);
    CHECK(!fd_check("dlogits", xent_f, &c, c.logits, g, n, 52, 1e-2, 1e-3), "xent dlogits");
}

typedef struct {
    int B, T, C, V;
    int *inp;
    float *wte, *wpe, *out, *R;
} EncCtx;

static double enc_f(void *v) {
    EncCtx *c = v;
    be->encoder_forward(c->out, c->inp, c->wte, c->wpe, c->B, c->T, c->C);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}

TEST(encoder_grad) {
    EncCtx c = {.B = 2, .T = 5, .C = 8, .V = 6};
    size_t n = (size_t)c.B * c.T * c.C;
    c.inp = xcalloc((size_t)c.B * c.T, sizeof(int));
    for (int i = 0; i < c.B * c.T; i++)
        c.inp[i] = (int)rng_below(&rng, 4); // repeats
    c.wte = randv((size_t)c.V * c.C, 1), c.wpe = randv((size_t)c.T * c.C, 1);
    c.R = randv(n, 1), c.out = xalloc_floats(n);
    float *dwte = xalloc_floats((size_t)c.V * c.C), *dwpe = xalloc_floats((size_t)c.T * c.C);
    be->encoder_backward(dwte, dwpe, c.R, c.inp, c.B, c.T, c.C);
    CHECK(!fd_check("dwte", enc_f, &c, c.wte, dwte, (size_t)c.V * c.C, 48, 1e-2, 1e-3), "dwte");
    CHECK(!fd_check("dwpe", enc_f, &c, c.wpe, dwpe, (size_t)c.T * c.C, 40, 1e-2, 1e-3), "dwpe");
}

// ---------------------------------------------------------------- blocks

typedef struct {
    GPT *m;
    Workspace *ws;
    int b;
    float *x_in, *x_out, *R;
    size_t nout;
} BlockCtx;

static double block_f(void *v) {
    BlockCtx *c = v;
    const Block *blk = &c->m->blocks[c->b];
    BlockIO io = {.tokens = c->ws->tokens,
                  .targets = c->ws->targets,
                  .x_in = c->x_in,
                  .x_out = c->x_out,
                  .wte = gpt_embed(c->m)->params};
    block_forward(c->m, blk, c->ws, &io);
    if (blk->kind == BLOCK_HEAD) return io.loss_sum;
    return dot(c->x_out, c->R, c->nout);
}

static void check_blocks(int recompute) {
    GPTConfig cfg = {.L = 2, .H = 2, .C = 8, .V = 11, .maxT = 8};
    GPT m;
    CHECK(gpt_create(&m, &cfg, be) == 0, "create: %s", loom_errmsg());
    gpt_init_weights(&m, 7);
    for (size_t i = 0; i < m.nparams; i++)
        m.params[i] += 0.3f * rng_normal(&rng); // non-trivial LN
    Workspace ws;
    int B = 2, T = 5;
    CHECK(workspace_create(&ws, &m, B, T, recompute) == 0, "ws");
    for (int i = 0; i < B * T; i++) {
        ws.tokens[i] = (int)rng_below(&rng, cfg.V);
        ws.targets[i] = (int)rng_below(&rng, cfg.V);
    }
    size_t n = (size_t)B * T * cfg.C;
    for (int b = 0; b < m.nblocks; b++) {
        const Block *blk = &m.blocks[b];
        BlockCtx c = {.m = &m,
                      .ws = &ws,
                      .b = b,
                      .x_in = randv(n, 1),
                      .x_out = xalloc_floats(n),
                      .R = randv(n, 1),
                      .nout = n};
        gpt_zero_grad(&m);
        block_f(&c);
        float *dx = xalloc_floats(n);
        memcpy(dx, c.R, n * sizeof(float));
        BlockIO io = {.tokens = ws.tokens,
                      .targets = ws.targets,
                      .x_in = c.x_in,
                      .x_out = c.x_out,
                      .dx = dx,
                      .wte = gpt_embed(&m)->params,
                      .dwte = gpt_embed(&m)->grads,
                      .grad_scale = 1.0f};
        block_backward(&m, blk, &ws, &io);
        char what[64];
        snprintf(what, sizeof what, "block %d params", b);
        CHECK(!fd_check(what, block_f, &c, blk->params, blk->grads, blk->n, 120, 3e-2, 3e-3),
              "%s (recompute %d)", what, recompute);
        if (blk->kind != BLOCK_EMBED) {
            snprintf(what, sizeof what, "block %d dx_in", b);
            CHECK(!fd_check(what, block_f, &c, c.x_in, dx, n, 60, 3e-2, 3e-3), "%s", what);
        }
        if (blk->kind == BLOCK_HEAD) { // tied embedding gradient through the head
            float *wte = gpt_embed(&m)->params, *dwte = gpt_embed(&m)->grads;
            CHECK(!fd_check("head dwte", block_f, &c, wte, dwte, (size_t)cfg.V * cfg.C, 60, 3e-2,
                            3e-3),
                  "head dwte");
        }
        free(c.x_in), free(c.x_out), free(c.R), free(dx);
    }
    workspace_free(&ws, &m);
    gpt_free(&m);
}

TEST(block_grads) { check_blocks(0); }
TEST(block_grads_recompute) { check_blocks(1); }

// Whole model: gradient of the mean loss equals FD, and recompute gives identical gradients.
TEST(model_grad_and_recompute_identical) {
    GPTConfig cfg = {.L = 2, .H = 2, .C = 8, .V = 11, .maxT = 8};
    GPT a, b;
    gpt_create(&a, &cfg, be);
    gpt_create(&b, &cfg, be);
    gpt_init_weights(&a, 3);
    gpt_init_weights(&b, 3);
    Workspace wa, wb;
    int B = 2, T = 6;
    workspace_create(&wa, &a, B, T, 0);
    workspace_create(&wb, &b, B, T, 1);
    int tok[12], tgt[12];
    for (int i = 0; i < 12; i++)
        tok[i] = (int)rng_below(&rng, 11), tgt[i] = (int)rng_below(&rng, 11);
    double la = gpt_forward(&a, &wa, tok, tgt), lb = gpt_forward(&b, &wb, tok, tgt);
    CHECK(la == lb, "recompute changes the loss: %f vs %f", la, lb);
    gpt_backward(&a, &wa, 1.0f / (B * T));
    gpt_backward(&b, &wb, 1.0f / (B * T));
    CHECK(!memcmp(a.grads, b.grads, a.nparams * sizeof(float)), "recompute changes gradients");
    CHECK(fabs(la - log(11.0)) < 0.1, "initial loss %f should be near ln V = %f", la, log(11.0));
}

// GELU recomputed in the backward (GPT.recompute_gelu): the same loss and bit-identical
// gradients, alone and with layer recompute, and the workspace smaller by exactly L−1 GELU
// outputs (L kept per layer without it, one in the scratch with it).
TEST(recompute_gelu_identical) {
    GPTConfig cfg = {.L = 3, .H = 2, .C = 8, .V = 11, .maxT = 8};
    int B = 2, T = 6, tok[12], tgt[12];
    for (int i = 0; i < 12; i++)
        tok[i] = (int)rng_below(&rng, 11), tgt[i] = (int)rng_below(&rng, 11);
    GPT m[4];
    Workspace w[4];
    double loss[4];
    for (int k = 0; k < 4; k++) { // (gelu, layer recompute): 00 10 01 11
        gpt_create(&m[k], &cfg, be);
        gpt_init_weights(&m[k], 5);
        m[k].recompute_gelu = k & 1;
        workspace_create(&w[k], &m[k], B, T, k >> 1);
        loss[k] = gpt_forward(&m[k], &w[k], tok, tgt);
        gpt_backward(&m[k], &w[k], 1.0f / (B * T));
    }
    size_t gelu = (size_t)B * T * 4 * cfg.C;
    CHECK(w[0].floats - w[1].floats == (size_t)(cfg.L - 1) * gelu,
          "workspace %zu floats with recompute_gelu, %zu without (expected %zu less)", w[1].floats,
          w[0].floats, (size_t)(cfg.L - 1) * gelu);
    for (int k = 1; k < 4; k++) {
        CHECK(loss[k] == loss[0], "variant %d changes the loss: %f vs %f", k, loss[k], loss[0]);
        CHECK(!memcmp(m[k].grads, m[0].grads, m[0].nparams * sizeof(float)),
              "variant %d changes the gradients", k);
    }
    for (int k = 0; k < 4; k++)
        workspace_free(&w[k], &m[k]), gpt_free(&m[k]);
}

// The vocabulary-parallel cross-entropy and embedding (tensor parallelism): two shards of a
// vocabulary of 10 (6 rows each, the second with 2 rows of padding), their partials combined as
// the tensor-parallel group's all-reduces do, against the whole-vocabulary kernels; the loss's
// gradient is finite-differenced through the shard path.
enum { SH_N = 5, SH_V = 10, SH_R = 6 };
typedef struct {
    float *z; // (N,V) the whole logits
    int *tg;
    float *probs; // (2, N, R) the shards' probabilities after the forward
} ShardCtx;

static double shard_loss(void *v) {
    ShardCtx *c = v;
    float mx[2][SH_N], st[2][2 * SH_N], losses[SH_N];
    for (int k = 0; k < 2; k++) {
        float *p = c->probs + (size_t)k * SH_N * SH_R;
        for (int n = 0; n < SH_N; n++)
            for (int j = 0; j < SH_R; j++)
                p[n * SH_R + j] = k * SH_R + j < SH_V ? c->z[n * SH_V + k * SH_R + j] : 99.f;
        be->xent_shard_max(mx[k], p, SH_N, SH_R, k ? SH_V - SH_R : SH_R);
    }
    for (int n = 0; n < SH_N; n++) // the max across shards
        mx[0][n] = mx[1][n] = mx[0][n] > mx[1][n] ? mx[0][n] : mx[1][n];
    for (int k = 0; k < 2; k++)
        be->xent_shard_sum(st[k], c->probs + (size_t)k * SH_N * SH_R, mx[k], c->tg, k * SH_R, SH_N,
                           SH_R, k ? SH_V - SH_R : SH_R);
    for (int i = 0; i < 2 * SH_N; i++) // the sum across shards
        st[0][i] = st[1][i] = st[0][i] + st[1][i];
    double total = 0;
    for (int k = 0; k < 2; k++)
        total = be->xent_shard_finish(c->probs + (size_t)k * SH_N * SH_R, losses, mx[k], st[k],
                                      SH_N, SH_R, k ? SH_V - SH_R : SH_R);
    return total;
}

TEST(vocab_shards) {
    ShardCtx c = {.z = randv(SH_N * SH_V, 2), .tg = xcalloc(SH_N, sizeof(int))};
    c.probs = xalloc_floats(2 * SH_N * SH_R);
    int tg[SH_N] = {0, 9, 5, 6, 3};
    memcpy(c.tg, tg, sizeof tg);
    float *whole = xalloc_floats(SH_N * SH_V), losses[SH_N];
    memcpy(whole, c.z, SH_N * SH_V * sizeof(float));
    double want = be->softmax_xent_forward(whole, losses, c.tg, SH_N, SH_V);
    double got = shard_loss(&c);
    CHECK(fabs(got - want) < 1e-5, "shard loss %.7f vs whole %.7f", got, want);
    be->softmax_xent_backward(whole, c.tg, 0.5f, SH_N, SH_V);
    float *dz = xalloc_floats(SH_N * SH_V);
    double worst = 0;
    for (int k = 0; k < 2; k++) {
        float *p = c.probs + (size_t)k * SH_N * SH_R;
        be->xent_shard_backward(p, c.tg, k * SH_R, 0.5f, SH_N, SH_R, k ? SH_V - SH_R : SH_R);
        for (int n = 0; n < SH_N; n++)
            for (int j = 0; j < SH_R; j++) {
                int col = k * SH_R + j;
                if (col >= SH_V) {
                    CHECK(p[n * SH_R + j] == 0.f, "padding has a gradient");
                    continue;
                }
                dz[n * SH_V + col] = 2.f * p[n * SH_R + j]; // d(Σ losses)
                double e = fabs(p[n * SH_R + j] - whole[n * SH_V + col]);
                worst = e > worst ? e : worst;
            }
    }
    CHECK(worst < 1e-6, "shard dlogits differ from the whole kernel's by %g", worst);
    CHECK(!fd_check("dlogits", shard_loss, &c, c.z, dz, SH_N * SH_V, 50, 2e-2, 2e-3),
          "shard cross-entropy");
    // the embedding: two shards' outputs sum to the whole lookup (+ wpe once)
    int B = 1, T = 5, C = 3, tok[5] = {0, 9, 5, 6, 3};
    float *wte = randv(12 * C, 1), *wpe = randv(T * C, 1), out[15], part[15], sum[15] = {0};
    be->encoder_forward(out, tok, wte, wpe, B, T, C);
    for (int k = 0; k < 2; k++) {
        be->encoder_forward_shard(part, tok, wte + k * SH_R * C, k ? NULL : wpe, k * SH_R,
                                  k ? SH_V - SH_R : SH_R, B, T, C);
        for (int i = 0; i < 15; i++)
            sum[i] += part[i];
    }
    double ew = 0;
    for (int i = 0; i < 15; i++)
        ew = fabs(sum[i] - out[i]) > ew ? fabs(sum[i] - out[i]) : ew;
    CHECK(ew < 1e-6, "shard embeddings differ by %g", ew);
    float *dw1 = xalloc_floats(12 * C), *dw2 = xalloc_floats(12 * C), *dp = xalloc_floats(T * C);
    be->encoder_backward(dw1, dp, out, tok, B, T, C);
    for (int k = 0; k < 2; k++)
        be->encoder_backward_shard(dw2 + k * SH_R * C, NULL, out, tok, k * SH_R,
                                   k ? SH_V - SH_R : SH_R, B, T, C);
    CHECK(!memcmp(dw1, dw2, 12 * C * sizeof(float)), "shard embedding gradients differ");
    free(c.z), free(c.tg), free(c.probs), free(whole), free(dz), free(wte), free(wpe);
    free(dw1), free(dw2), free(dp);
}

int main(void) {
    rng_seed(&rng, 1234, 1);
    be = backend_cpu();
    RUN(layernorm_grad);
    RUN(matmul_grad);
    RUN(attention_grad);
    RUN(gelu_grad);
    RUN(softmax_xent_grad);
    RUN(encoder_grad);
    RUN(vocab_shards);
    RUN(block_grads);
    RUN(block_grads_recompute);
    RUN(model_grad_and_recompute_identical);
    RUN(recompute_gelu_identical);
    return test_summary();
}
