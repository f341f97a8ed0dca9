// test_cuda_model.c — the whole model on the CUDA backend against the CPU backend, fp32, from
// the same initial weights and tokens (odd shapes: B=3, T=29, V=211):
//   * first-step loss within 1e-5 and every gradient tensor within 1e-4 of its largest
//     element (max |Δ| / max |g_cpu|, the metric of tests/t_torch_match.sh), with and without
//     recompute;
//   * a 10-step AdamW trajectory (2 micro-batches a step, weight decay, clipping through the
//     chunked gradient norm): every loss within 2e-4, final weights within 1e-4 absolute;
//   * bf16: the first-step loss within 1% and the gradient within 3e-2 norm-wise, with the
//     batched-product attention (head size 16) and with the flash kernels (head size 64);
//   * gpt_forward_backward (the head's gradient in its forward) equal to gpt_forward then
//     gpt_backward, bit for bit, in fp32 and bf16.
#include "../../src/model/gpt.h"
#include "../../src/optim/optim.h"
#include "gpu_test.h"

static const GPTConfig CFG = {.L = 2, .H = 4, .C = 64, .V = 211, .maxT = 40};
enum { B = 3, T = 29, STEPS = 10, ACCUM = 2 };

static int tok[STEPS * ACCUM + 1][B * T], tgt[STEPS * ACCUM + 1][B * T];

static void make_tokens(void) {
    for (int k = 0; k <= STEPS * ACCUM; k++)
        for (int i = 0; i < B * T; i++) {
            int a = (int)rng_below(&rng, CFG.V);
            tok[k][i] = a, tgt[k][i] = (a * 7 + 3) % CFG.V; // learnable
        }
}

static void model(GPT *m, Workspace *ws, const Backend *be, int recompute) {
    if (gpt_create(m, &CFG, be) || workspace_create(ws, m, B, T, recompute)) {
        fprintf(stderr, "model: %s\n", loom_errmsg());
        exit(1);
    }
    gpt_init_weights(m, 42);
}

static float *host_of(const GPT *m, const float *buf) {
    float *h = xalloc_floats(m->nparams);
    m->be->download(h, buf, m->nparams);
    return h;
}

static double first_step(GPT *m, Workspace *ws) {
    gpt_zero_grad(m);
    double loss = gpt_forward(m, ws, tok[0], tgt[0]);
    gpt_backward(m, ws, 1.0f / (B * T));
    return loss;
}

static void check_first_step(int recompute) {
    GPT mc, mg;
    Workspace wc, wg;
    model(&mc, &wc, cpu, 0), model(&mg, &wg, gpu, recompute);
    float *p = host_of(&mg, mg.params);
    CHECK(memcmp(p, mc.params, mc.nparams * sizeof(float)) == 0, "initial weights differ");
    double lc = first_step(&mc, &wc), lg = first_step(&mg, &wg);
    fprintf(stderr, "  first-step loss: cpu %.7f gpu %.7f\n", lc, lg);
    CHECK(fabs(lc - lg) <= 1e-5, "loss %.7f vs %.7f", lg, lc);
    float *g = host_of(&mg, mg.grads);
    double w = gpu_worst_tensor(&mc, g, mc.grads, recompute ? "grads (recompute)" : "grads");
    CHECK(w <= 1e-4, "gradient %.3g of its tensor's max", w);
    free(p), free(g);
    workspace_free(&wc, &mc), workspace_free(&wg, &mg), gpt_free(&mc), gpt_free(&mg);
}

TEST(first_step_grads) { check_first_step(0); }
TEST(first_step_grads_recompute) { check_first_step(1); }

static double train_step(GPT *m, Workspace *ws, AdamW *opt, int step) {
    double loss = 0;
    gpt_zero_grad(m);
    for (int j = 0; j < ACCUM; j++) {
        loss += gpt_forward(m, ws, tok[step * ACCUM + j], tgt[step * ACCUM + j]);
        gpt_backward(m, ws, 1.0f / (B * T * ACCUM));
    }
    double *part = calloc((size_t)m->nchunks, sizeof(double));
    gpt_chunk_sumsq(m, m->grads, 0, m->nparams, part);
    float norm = (float)sqrt(gpt_chunk_total(m, part));
    free(part);
    adamw_step(opt, m, 1e-3f, clip_scale(norm, 1.0f));
    return loss / ACCUM;
}

TEST(adamw_trajectory) {
    GPT mc, mg;
    Workspace wc, wg;
    model(&mc, &wc, cpu, 0), model(&mg, &wg, gpu, 0);
    OptConfig oc = {.lr = 1e-3f,
                    .beta1 = 0.9f,
                    .beta2 = 0.95f,
                    .eps = 1e-8f,
                    .weight_decay = 0.1f,
                    .grad_clip = 1.0f};
    AdamW ac, ag;
    adamw_create(&ac, &mc, &oc, 0, mc.nparams), adamw_create(&ag, &mg, &oc, 0, mg.nparams);
    double worst = 0;
    for (int s = 0; s < STEPS; s++) {
        double lc = train_step(&mc, &wc, &ac, s), lg = train_step(&mg, &wg, &ag, s);
        worst = fabs(lc - lg) > worst ? fabs(lc - lg) : worst;
        fprintf(stderr, "  step %d: cpu %.6f gpu %.6f\n", s + 1, lc, lg);
    }
    CHECK(worst <= 2e-4, "loss differs by %.3g", worst);
    float *p = host_of(&mg, mg.params);
    double dmax = 0;
    for (size_t i = 0; i < mc.nparams; i++) {
        double e = fabs((double)p[i] - mc.params[i]);
        dmax = e > dmax || e != e ? e : dmax;
    }
    fprintf(stderr, "  after %d steps: max |Δw| %.3g, max |Δloss| %.3g\n", STEPS, dmax, worst);
    CHECK(dmax <= 1e-4, "weights differ by %.3g", dmax);
    free(p);
    adamw_free(&ac, &mc), adamw_free(&ag, &mg);
    workspace_free(&wc, &mc), workspace_free(&wg, &mg), gpt_free(&mc), gpt_free(&mg);
}

TEST(bf16_first_step) {
    const Backend *g32 = gpu;
    gpu = backend_select("cuda:bf16", 0);
    CHECK(gpu != NULL, "cuda:bf16: %s", loom_errmsg());
    if (!gpu) {
        gpu = g32;
        return;
    }
    GPT mc, mg;
    Workspace wc, wg;
    model(&mc, &wc, cpu, 0), model(&mg, &wg, gpu, 0);
    double lc = first_step(&mc, &wc), lg = first_step(&mg, &wg);
    float *g = host_of(&mg, mg.grads);
    double r = rel_norm(g, mc.grads, mc.nparams);
    fprintf(stderr, "  bf16 first step: loss cpu %.6f gpu %.6f; gradient norm-wise %.3g\n", lc, lg,
            r);
    CHECK(fabs(lc - lg) <= 1e-2 * fabs(lc), "bf16 loss %.6f vs %.6f", lg, lc);
    CHECK(r <= 3e-2, "bf16 gradient %.3g norm-wise", r);
    free(g);
    workspace_free(&wc, &mc), workspace_free(&wg, &mg), gpt_free(&mc), gpt_free(&mg);
    gpu = backend_select("cuda:fp32", 0);
}

// bf16 where attention takes the flash kernels (head size 64, T > 64)
TEST(bf16_flash_model) {
    const Backend *g32 = gpu;
    gpu = backend_select("cuda:bf16", 0);
    if (!gpu) {
        gpu = g32;
        CHECK(0, "cuda:bf16: %s", loom_errmsg());
        return;
    }
    GPTConfig cfg = {.L = 2, .H = 2, .C = 128, .V = 211, .maxT = 128};
    enum { FB = 2, FT = 100 };
    int tk[FB * FT], tg[FB * FT];
    for (int i = 0; i < FB * FT; i++)
        tk[i] = (int)rng_below(&rng, cfg.V), tg[i] = (tk[i] * 5 + 1) % cfg.V;
    GPT m[2];
    Workspace ws[2];
    double loss[2];
    const Backend *bes[2] = {cpu, gpu};
    for (int k = 0; k < 2; k++) {
        if (gpt_create(&m[k], &cfg, bes[k]) || workspace_create(&ws[k], &m[k], FB, FT, 0)) {
            CHECK(0, "model: %s", loom_errmsg());
            return;
        }
        gpt_init_weights(&m[k], 9);
        gpt_zero_grad(&m[k]);
        loss[k] = gpt_forward(&m[k], &ws[k], tk, tg);
        gpt_backward(&m[k], &ws[k], 1.0f / (FB * FT));
    }
    float *g = host_of(&m[1], m[1].grads);
    double r = rel_norm(g, m[0].grads, m[0].nparams);
    fprintf(stderr, "  bf16 flash model: loss cpu %.6f gpu %.6f; gradient norm-wise %.3g\n",
            loss[0], loss[1], r);
    CHECK(fabs(loss[0] - loss[1]) <= 1e-2 * fabs(loss[0]), "loss %.6f vs %.6f", loss[1], loss[0]);
    CHECK(r <= 3e-2, "bf16 flash gradient %.3g norm-wise", r);
    free(g);
    for (int k = 0; k < 2; k++)
        workspace_free(&ws[k], &m[k]), gpt_free(&m[k]);
    gpu = backend_select("cuda:fp32", 0);
}

// gpt_forward_backward (the fused classifier's gradient computed in the head's forward) against
// gpt_forward then gpt_backward on the same GPU model: the same loss and gradients, bit for bit
// (the same classifier call, made one pass earlier), over two accumulated micro-batches; fp32
// and bf16.
static void check_forward_backward(const char *device) {
    const Backend *g32 = gpu;
    gpu = backend_select(device, 0);
    if (!gpu) {
        gpu = g32;
        CHECK(0, "%s: %s", device, loom_errmsg());
        return;
    }
    GPT m[2];
    Workspace ws[2];
    double loss[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        model(&m[k], &ws[k], gpu, 0);
        gpt_zero_grad(&m[k]);
        for (int j = 0; j < 2; j++)
            if (k) {
                loss[k] += gpt_forward_backward(&m[k], &ws[k], tok[j], tgt[j], 0.5f / (B * T));
            } else {
                loss[k] += gpt_forward(&m[k], &ws[k], tok[j], tgt[j]);
                gpt_backward(&m[k], &ws[k], 0.5f / (B * T));
            }
    }
    float *a = host_of(&m[0], m[0].grads), *b = host_of(&m[1], m[1].grads);
    size_t diff = 0;
    for (size_t i = 0; i < m[0].nparams; i++)
        diff += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    fprintf(stderr, "  %s: loss %.9f vs %.9f (forward_backward); %zu of %zu gradients differ\n",
            device, loss[0], loss[1], diff, m[0].nparams);
    CHECK(loss[0] == loss[1] && diff == 0, "%s: gpt_forward_backward differs", device);
    free(a), free(b);
    for (int k = 0; k < 2; k++)
        workspace_free(&ws[k], &m[k]), gpt_free(&m[k]);
    gpu = backend_select("cuda:fp32", 0);
}

TEST(forward_backward_head_in_forward) {
    check_forward_backward("cuda:fp32");
    check_forward_backward("cuda:bf16");
}

int main(void) {
    gpu_open("test_cuda_model", "cuda:fp32");
    make_tokens();
    RUN(first_step_grads);
    RUN(first_step_grads_recompute);
    RUN(adamw_trajectory);
    RUN(bf16_first_step);
    RUN(bf16_flash_model);
    RUN(forward_backward_head_in_forward);
    return test_summary();
}
