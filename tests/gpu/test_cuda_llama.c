// test_cuda_llama.c — the CUDA backend's LLaMA-block ops and vocabulary-shard ops against the
// CPU backend in fp32, forward and backward, at odd shapes (odd head counts, half head sizes
// that are odd, T past the attention kernels' 128-row tiles and the CPU's stored-softmax
// limit): element-wise |gpu − cpu| ≤ 1e-5 + 1e-4·|cpu| (gpu_test.h). Outputs an op overwrites
// are poisoned with NaN first; outputs it accumulates into start from the same random values
// on both sides. Then a tiny LLaMA model's first step (loss, every gradient) on both devices,
// with kv-heads < heads, tied and untied.
#include "../../src/model/gpt.h"
#include "gpu_test.h"

TEST(rmsnorm) {
    static const int NC[][2] = {{51, 40}, {134, 96}, {7, 577}};
    for (int s = 0; s < 3; s++) {
        int N = NC[s][0], C = NC[s][1];
        size_t n = (size_t)N * C;
        float *x = h_rand(n, 2), *w = h_rand(C, 1), *o = xalloc_floats(n), *r = xalloc_floats(N);
        float *dx = d_from(x, n), *dw = d_from(w, C), *dO = d_poison(n), *dr = d_poison(N);
        cpu->rmsnorm_forward(o, r, x, w, N, C, 1e-5f);
        gpu->rmsnorm_forward(dO, dr, dx, dw, N, C, 1e-5f);
        CHECK(cmp32("rms out", dO, o, n) && cmp32("rms rstd", dr, r, N), "forward %dx%d", N, C);
        float *g = h_rand(n, 1), *gi = h_rand(n, 1), *gw = h_rand(C, 1); // dinp, dw accumulate
        float *dg = d_from(g, n), *dgi = d_from(gi, n), *dgw = d_from(gw, C);
        cpu->rmsnorm_backward(gi, gw, g, x, w, r, N, C);
        gpu->rmsnorm_backward(dgi, dgw, dg, dx, dw, dr, N, C);
        CHECK(cmp32("rms dinp", dgi, gi, n) && cmp32("rms dw", dgw, gw, C), "backward %dx%d", N, C);
        float *hp[] = {x, w, o, r, g, gi, gw};
        float *dp[] = {dx, dw, dO, dr, dg, dgi, dgw};
        for (int i = 0; i < 7; i++)
            free(hp[i]), gpu->release(dp[i]);
    }
}

typedef struct {
    int B, T, NH, NKV, hs;
} AShape;
// kv-heads < heads (groups of 3, 2, 4), = heads (the multi-head path), T past 96 and 128
static const AShape ASHAPES[] = {
    {3, 17, 6, 2, 10}, {2, 67, 6, 3, 16}, {1, 131, 4, 1, 24}, {2, 37, 5, 5, 8}};
enum { NASHAPES = sizeof ASHAPES / sizeof ASHAPES[0] };

TEST(rope) {
    for (int s = 0; s < NASHAPES; s++) {
        AShape S = ASHAPES[s];
        size_t n = (size_t)S.B * S.T * (S.NH + 2 * S.NKV) * S.hs;
        int *pos = xmalloc((size_t)S.T * sizeof(int)), half = S.hs / 2;
        float *freq = xalloc_floats((size_t)half);
        for (int t = 0; t < S.T; t++) // positions as a context-parallel chunk has them
            pos[t] = s % 2 ? 3 * t + 1000 : t;
        for (int i = 0; i < half; i++)
            freq[i] = powf(10000.f, -2.0f * i / S.hs);
        float *x = h_rand(n, 1), *dx = d_from(x, n); // pos, freq: host memory, as the model's
        cpu->rope_forward(x, pos, freq, S.B, S.T, S.NH, S.NKV, S.hs);
        gpu->rope_forward(dx, pos, freq, S.B, S.T, S.NH, S.NKV, S.hs);
        CHECK(cmp32("rope forward", dx, x, n), "shape %d", s);
        cpu->rope_backward(x, pos, freq, S.B, S.T, S.NH, S.NKV, S.hs);
        gpu->rope_backward(dx, pos, freq, S.B, S.T, S.NH, S.NKV, S.hs);
        CHECK(cmp32("rope backward", dx, x, n), "shape %d", s);
        free(pos), free(freq), free(x), gpu->release(dx);
    }
}

TEST(swiglu) {
    static const int NF[][2] = {{51, 37}, {134, 97}};
    for (int s = 0; s < 2; s++) {
        int N = NF[s][0], F = NF[s][1];
        size_t n = (size_t)N * F;
        float *x = h_rand(2 * n, 2), *o = xalloc_floats(n), *g = h_rand(n, 1);
        float *gi = xalloc_floats(2 * n);
        float *dx = d_from(x, 2 * n), *dO = d_poison(n), *dg = d_from(g, n), *dgi = d_poison(2 * n);
        cpu->swiglu_forward(o, x, N, F), gpu->swiglu_forward(dO, dx, N, F);
        CHECK(cmp32("swiglu forward", dO, o, n), "%dx%d", N, F);
        cpu->swiglu_backward(gi, x, g, N, F), gpu->swiglu_backward(dgi, dx, dg, N, F);
        CHECK(cmp32("swiglu backward", dgi, gi, 2 * n), "%dx%d", N, F);
        free(x), free(o), free(g), free(gi);
        gpu->release(dx), gpu->release(dO), gpu->release(dg), gpu->release(dgi);
    }
}

TEST(gqa_attention) {
    for (int s = 0; s < NASHAPES; s++) {
        AShape S = ASHAPES[s];
        size_t W = (size_t)(S.NH + 2 * S.NKV) * S.hs, C = (size_t)S.NH * S.hs;
        size_t BT = (size_t)S.B * S.T, nq = BT * W, no = BT * C;
        size_t ac = cpu->attention_saved_floats(S.B, S.T, S.NH, S.hs),
               ag = gpu->attention_saved_floats(S.B, S.T, S.NH, S.hs);
        float *qkv = h_rand(nq, 1), *o = xalloc_floats(no), *att = xalloc_floats(ac);
        float *dqkv = d_from(qkv, nq), *dO = d_poison(no), *datt = d_poison(ag);
        cpu->gqa_attention_forward(o, att, qkv, S.B, S.T, S.NH, S.NKV, S.hs);
        gpu->gqa_attention_forward(dO, datt, dqkv, S.B, S.T, S.NH, S.NKV, S.hs);
        CHECK(cmp32("gqa forward", dO, o, no), "shape %d", s);
        float *g = h_rand(no, 1), *gq = xalloc_floats(nq), *dg = d_from(g, no), *dgq = d_poison(nq);
        cpu->gqa_attention_backward(gq, g, qkv, o, att, S.B, S.T, S.NH, S.NKV, S.hs);
        gpu->gqa_attention_backward(dgq, dg, dqkv, dO, datt, S.B, S.T, S.NH, S.NKV, S.hs);
        CHECK(cmp32("gqa backward", dgq, gq, nq), "shape %d (B %d T %d NH %d NKV %d hs %d)", s, S.B,
              S.T, S.NH, S.NKV, S.hs);
        free(qkv), free(o), free(att), free(g), free(gq);
        gpu->release(dqkv), gpu->release(dO), gpu->release(datt), gpu->release(dg),
            gpu->release(dgq);
    }
}

// ------------------------------------------------------------------ vocabulary shards

static int *tokens(int n, int V) {
    int *t = xmalloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) // repeats: the scatter must add them all
        t[i] = (int)rng_below(&rng, (uint32_t)(i % 3 ? V : 5));
    return t;
}

TEST(vocab_shards) {
    enum { B = 3, T = 17, C = 40, VT = 101, V0 = 30, NV = 45, ROWS = 48 }; // 3 padding rows
    size_t BTC = (size_t)B * T * C, RC = (size_t)ROWS * C, TC = (size_t)T * C;
    int *tok = tokens(B * T, VT), N = B * T;
    for (int wp = 0; wp < 2; wp++) { // with and without a position table
        float *wte = h_rand(RC, 1), *wpe = wp ? h_rand(TC, 1) : NULL, *o = xalloc_floats(BTC);
        float *dwte = d_from(wte, RC), *dwpe = wp ? d_from(wpe, TC) : NULL, *dO = d_poison(BTC);
        cpu->encoder_forward_shard(o, tok, wte, wpe, V0, NV, B, T, C);
        gpu->encoder_forward_shard(dO, tok, dwte, dwpe, V0, NV, B, T, C);
        CHECK(cmp32("encoder_forward_shard", dO, o, BTC), "wpe %d", wp);
        float *g = h_rand(BTC, 1), *dg = d_from(g, BTC);
        cpu->encoder_backward_shard(wte, wpe, g, tok, V0, NV, B, T, C);
        gpu->encoder_backward_shard(dwte, dwpe, dg, tok, V0, NV, B, T, C);
        CHECK(cmp32("encoder_backward_shard dwte", dwte, wte, RC), "wpe %d", wp);
        if (wp) CHECK(cmp32("encoder_backward_shard dwpe", dwpe, wpe, TC), "dwpe");
        free(wte), free(wpe), free(o), free(g);
        gpu->release(dwte), gpu->release(dO), gpu->release(dg);
        if (dwpe) gpu->release(dwpe);
    }
    // the cross-entropy over one shard of ROWS logit columns (NV real), as one rank computes it
    size_t NR = (size_t)N * ROWS;
    float *lg = h_rand(NR, 3), *mx = xalloc_floats(N), *st = xalloc_floats(2 * (size_t)N),
          *ls = xalloc_floats(N);
    float *dlg = d_from(lg, NR), *dmx = d_poison(N), *dst = d_poison(2 * (size_t)N),
          *dls = d_poison(N);
    cpu->xent_shard_max(mx, lg, N, ROWS, NV), gpu->xent_shard_max(dmx, dlg, N, ROWS, NV);
    CHECK(cmp32("xent_shard_max", dmx, mx, N), "max");
    cpu->xent_shard_sum(st, lg, mx, tok, V0, N, ROWS, NV);
    gpu->xent_shard_sum(dst, dlg, dmx, tok, V0, N, ROWS, NV);
    CHECK(cmp32("xent_shard_sum", dst, st, 2 * (size_t)N), "sum");
    double a = cpu->xent_shard_finish(lg, ls, mx, st, N, ROWS, NV),
           b = gpu->xent_shard_finish(dlg, dls, dmx, dst, N, ROWS, NV);
    CHECK(close_enough(b, a, 1e-5, 1e-5), "Σ losses %.9g vs %.9g", b, a);
    CHECK(cmp32("xent_shard_finish probs", dlg, lg, NR) && cmp32("losses", dls, ls, N), "finish");
    cpu->xent_shard_backward(lg, tok, V0, 0.37f, N, ROWS, NV);
    gpu->xent_shard_backward(dlg, tok, V0, 0.37f, N, ROWS, NV);
    CHECK(cmp32("xent_shard_backward", dlg, lg, NR), "backward");
    free(tok), free(lg), free(mx), free(st), free(ls);
    gpu->release(dlg), gpu->release(dmx), gpu->release(dst), gpu->release(dls);
}

// ------------------------------------------------------------------ a tiny LLaMA, first step

enum { MB = 3, MT = 29 };

static void llama_first_step(int KV, int tie, int recompute) {
    GPTConfig cfg = {
        .L = 2, .H = 6, .C = 96, .V = 211, .maxT = 40, .arch = ARCH_LLAMA, .KV = KV, .tie = tie};
    gpt_config_defaults(&cfg);
    int tk[MB * MT], tg[MB * MT];
    for (int i = 0; i < MB * MT; i++)
        tk[i] = (int)rng_below(&rng, cfg.V), tg[i] = (tk[i] * 7 + 3) % cfg.V;
    GPT m[2];
    Workspace ws[2];
    double loss[2];
    const Backend *bes[2] = {cpu, gpu};
    for (int k = 0; k < 2; k++) {
        if (gpt_create(&m[k], &cfg, bes[k]) ||
            workspace_create(&ws[k], &m[k], MB, MT, k ? recompute : 0)) {
            CHECK(0, "model: %s", loom_errmsg());
            return;
        }
        gpt_init_weights(&m[k], 42);
        gpt_zero_grad(&m[k]);
        loss[k] = gpt_forward(&m[k], &ws[k], tk, tg);
        gpt_backward(&m[k], &ws[k], 1.0f / (MB * MT));
    }
    float *g = xalloc_floats(m[1].nparams);
    gpu->download(g, m[1].grads, m[1].nparams);
    fprintf(stderr, "  llama KV %d tie %d recompute %d: loss cpu %.7f gpu %.7f\n", KV, tie,
            recompute, loss[0], loss[1]);
    CHECK(fabs(loss[0] - loss[1]) <= 1e-5, "loss %.7f vs %.7f", loss[1], loss[0]);
    double w = gpu_worst_tensor(&m[0], g, m[0].grads, "grads");
    CHECK(w <= 1e-4, "KV %d tie %d: gradient %.3g of its tensor's max", KV, tie, w);
    free(g);
    for (int k = 0; k < 2; k++)
        workspace_free(&ws[k], &m[k]), gpt_free(&m[k]);
}

TEST(llama_model_first_step) {
    llama_first_step(2, 0, 0); // grouped-query attention, untied head
    llama_first_step(2, 1, 1); // tied, recomputed in the backward
    llama_first_step(6, 0, 0); // kv-heads = heads
}

int main(void) {
    gpu_open("test_cuda_llama", "cuda:fp32");
    RUN(rmsnorm);
    RUN(rope);
    RUN(swiglu);
    RUN(gqa_attention);
    RUN(vocab_shards);
    RUN(llama_model_first_step);
    return test_summary();
}
