// test_cuda_ops.c — every CUDA backend op against the CPU backend in fp32, forward and
// backward, at odd shapes (no dimension a power of two or a multiple of the kernels' tiles):
// element-wise |gpu − cpu| ≤ 1e-5 + 1e-4·|cpu|. Outputs that an op overwrites are poisoned with
// NaN first; outputs it accumulates into start from the same random values on both sides. The
// last tests run the matrix products and attention in bf16 against the fp32 CPU, norm-wise.
#include "gpu_test.h"

typedef struct {
    int B, T, C, NH, V;
} Shape;
static const Shape SHAPES[] = {{3, 17, 40, 5, 101}, {2, 67, 96, 3, 517}};
enum { NSHAPES = sizeof SHAPES / sizeof SHAPES[0] };

// ------------------------------------------------------------------ vector ops

TEST(vector_ops) {
    size_t n = 3 * 65536 + 123;
    float *x = h_rand(n, 1), *y = h_rand(n, 1), *ref = xalloc_floats(n);
    float *dx = d_from(x, n), *dy = d_from(y, n), *dout = d_poison(n);
    gpu->copy(dout, dx, n);
    CHECK(cmp32("copy", dout, x, n), "copy");
    gpu->fill(dout, 0.37f, n), cpu->fill(ref, 0.37f, n);
    CHECK(cmp32("fill", dout, ref, n), "fill");
    memcpy(ref, y, n * 4), gpu->copy(dout, dy, n);
    cpu->axpby(ref, 0.3f, x, -1.7f, n), gpu->axpby(dout, 0.3f, dx, -1.7f, n);
    CHECK(cmp32("axpby", dout, ref, n), "axpby");
    cpu->scale(ref, -2.5f, n), gpu->scale(dout, -2.5f, n);
    CHECK(cmp32("scale", dout, ref, n), "scale");
    cpu->sub_scaled(ref, x, y, 0.7f, n), gpu->sub_scaled(dout, dx, dy, 0.7f, n);
    CHECK(cmp32("sub_scaled", dout, ref, n), "sub_scaled");
    cpu->copy_scaled(ref, y, 1.9f, n), gpu->copy_scaled(dout, dy, 1.9f, n);
    CHECK(cmp32("copy_scaled", dout, ref, n), "copy_scaled");
    cpu->clamp(ref, -0.5f, 0.8f, n), gpu->clamp(dout, -0.5f, 0.8f, n);
    CHECK(cmp32("clamp", dout, ref, n), "clamp");
    cpu->residual_forward(ref, x, y, n), gpu->residual_forward(dout, dx, dy, n);
    CHECK(cmp32("residual", dout, ref, n), "residual");
    free(x), free(y), free(ref);
    gpu->release(dx), gpu->release(dy), gpu->release(dout);
}

TEST(reductions) {
    size_t n = 5 * 4096 + 1234;
    float *x = h_rand(n, 2), *dx = d_from(x, n);
    double a = gpu->sumsq(dx, n), b = cpu->sumsq(x, n);
    CHECK(close_enough(a, b, 1e-12, 0), "sumsq %.17g vs %.17g", a, b);
    size_t chunks[] = {4096, 1000, 7};
    for (int c = 0; c < 3; c++) {
        size_t k = (n + chunks[c] - 1) / chunks[c];
        double *pa = calloc(k, sizeof(double)), *pb = calloc(k, sizeof(double));
        gpu->sumsq_chunks(dx, n, chunks[c], pa), cpu->sumsq_chunks(x, n, chunks[c], pb);
        for (size_t i = 0; i < k; i++)
            CHECK(close_enough(pa[i], pb[i], 1e-12, 0), "chunk %zu/%zu: %.17g vs %.17g", i,
                  chunks[c], pa[i], pb[i]);
        free(pa), free(pb);
    }
    CHECK(gpu->all_finite(dx, n) == 1, "finite data reported non-finite");
    float bad[2] = {NAN, INFINITY};
    for (int k = 0; k < 2; k++) {
        gpu->upload(dx + n - 17, &bad[k], 1);
        CHECK(gpu->all_finite(dx, n) == 0, "%g not found", bad[k]);
        gpu->upload(dx + n - 17, x + n - 17, 1);
    }
    free(x), gpu->release(dx);
}

// ------------------------------------------------------------------ embedding, layernorm

static int *rand_tokens(int n, int V) {
    int *t = xmalloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) // a few tokens repeat often: the scatter must add them all
        t[i] = (int)rng_below(&rng, (uint32_t)(i % 3 ? V : 5));
    return t;
}

TEST(encoder) {
    for (int s = 0; s < NSHAPES; s++) {
        Shape S = SHAPES[s];
        size_t BTC = (size_t)S.B * S.T * S.C, VC = (size_t)S.V * S.C, TC = (size_t)S.T * S.C;
        int *tok = rand_tokens(S.B * S.T, S.V);
        float *wte = h_rand(VC, 1), *wpe = h_rand(TC, 1), *out = xalloc_floats(BTC);
        float *dwte = d_from(wte, VC), *dwpe = d_from(wpe, TC), *dout = d_poison(BTC);
        cpu->encoder_forward(out, tok, wte, wpe, S.B, S.T, S.C);
        gpu->encoder_forward(dout, tok, dwte, dwpe, S.B, S.T, S.C);
        CHECK(cmp32("encoder_forward", dout, out, BTC), "shape %d", s);
        float *g = h_rand(BTC, 1), *dg = d_from(g, BTC); // dwte, dwpe accumulate onto wte, wpe
        cpu->encoder_backward(wte, wpe, g, tok, S.B, S.T, S.C);
        gpu->encoder_backward(dwte, dwpe, dg, tok, S.B, S.T, S.C);
        CHECK(cmp32("encoder_backward dwte", dwte, wte, VC), "shape %d", s);
        CHECK(cmp32("encoder_backward dwpe", dwpe, wpe, TC), "shape %d", s);
        free(tok), free(wte), free(wpe), free(out), free(g);
        gpu->release(dwte), gpu->release(dwpe), gpu->release(dout), gpu->release(dg);
    }
}

TEST(layernorm) {
    for (int s = 0; s < NSHAPES; s++) {
        Shape S = SHAPES[s];
        int N = S.B * S.T, C = S.C;
        size_t NC = (size_t)N * C;
        float *x = h_rand(NC, 2), *w = h_rand(C, 1), *b = h_rand(C, 1);
        float *o = xalloc_floats(NC), *mean = xalloc_floats(N), *rstd = xalloc_floats(N);
        float *dx = d_from(x, NC), *dw = d_from(w, C), *db = d_from(b, C);
        float *dO = d_poison(NC), *dmean = d_poison(N), *drstd = d_poison(N);
        cpu->layernorm_forward(o, mean, rstd, x, w, b, N, C);
        gpu->layernorm_forward(dO, dmean, drstd, dx, dw, db, N, C);
        CHECK(cmp32("ln out", dO, o, NC) && cmp32("ln mean", dmean, mean, N) &&
                  cmp32("ln rstd", drstd, rstd, N),
              "layernorm_forward shape %d", s);
        float *g = h_rand(NC, 1), *gi = h_rand(NC, 1), *gw = h_rand(C, 1), *gb = h_rand(C, 1);
        float *dg = d_from(g, NC), *dgi = d_from(gi, NC), *dgw = d_from(gw, C),
              *dgb = d_from(gb, C);
        cpu->layernorm_backward(gi, gw, gb, g, x, w, mean, rstd, N, C);
        gpu->layernorm_backward(dgi, dgw, dgb, dg, dx, dw, dmean, drstd, N, C);
        CHECK(cmp32("ln dinp", dgi, gi, NC) && cmp32("ln dw", dgw, gw, C) &&
                  cmp32("ln db", dgb, gb, C),
              "layernorm_backward shape %d", s);
        float *hp[] = {x, w, b, o, mean, rstd, g, gi, gw, gb};
        float *dp[] = {dx, dw, db, dO, dmean, drstd, dg, dgi, dgw, dgb};
        for (int i = 0; i < 10; i++)
            free(hp[i]), gpu->release(dp[i]);
    }
}

// ------------------------------------------------------------------ matmul

static void check_matmul(int N, int C, int OC, int with_bias, int with_dinp) {
    size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
    float *x = h_rand(NC, 1), *w = h_rand(OCC, 0.1f), *b = with_bias ? h_rand(OC, 1) : NULL;
    float *o = xalloc_floats(NO), *dx = d_from(x, NC), *dw = d_from(w, OCC);
    float *db = b ? d_from(b, OC) : NULL, *dO = d_poison(NO);
    cpu->matmul_forward(o, x, w, b, N, C, OC);
    gpu->matmul_forward(dO, dx, dw, db, N, C, OC);
    CHECK(cmp32("matmul out", dO, o, NO), "matmul_forward N=%d C=%d OC=%d bias=%d", N, C, OC,
          with_bias);
    float *g = h_rand(NO, 1), *gi = xalloc_floats(NC), *gw = h_rand(OCC, 1);
    float *gb = with_bias ? h_rand(OC, 1) : NULL;
    float *dg = d_from(g, NO), *dgi = with_dinp ? d_poison(NC) : NULL, *dgw = d_from(gw, OCC);
    float *dgb = gb ? d_from(gb, OC) : NULL;
    cpu->matmul_backward(with_dinp ? gi : NULL, gw, gb, g, x, w, N, C, OC);
    gpu->matmul_backward(dgi, dgw, dgb, dg, dx, dw, N, C, OC);
    if (with_dinp) CHECK(cmp32("matmul dinp", dgi, gi, NC), "dinp N=%d C=%d OC=%d", N, C, OC);
    CHECK(cmp32("matmul dw", dgw, gw, OCC), "dw N=%d C=%d OC=%d", N, C, OC);
    if (gb) CHECK(cmp32("matmul dbias", dgb, gb, OC), "dbias N=%d C=%d OC=%d", N, C, OC);
    free(x), free(w), free(b), free(o), free(g), free(gi), free(gw), free(gb);
    float *dp[] = {dx, dw, db, dO, dg, dgi, dgw, dgb};
    for (int i = 0; i < 8; i++)
        if (dp[i]) gpu->release(dp[i]);
}

TEST(matmul) {
    check_matmul(29, 37, 53, 1, 1);
    check_matmul(51, 40, 120, 1, 0);
    check_matmul(134, 96, 384, 0, 1);
    check_matmul(7, 160, 13, 1, 1);
    check_matmul(1, 3, 1, 1, 1);
}

// ------------------------------------------------------------------ attention

// att is each backend's own saved state (the CPU: row log-sum-exps; CUDA: the softmax or the
// flash path's statistics), so only out and dqkv are compared.
static void check_attention(Shape S, double rtol, double atol, int norm) {
    int B = S.B, T = S.T, C = S.C, NH = S.NH;
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C;
    size_t na = cpu->attention_saved_floats(B, T, NH, C / NH),
           nd = gpu->attention_saved_floats(B, T, NH, C / NH);
    float *qkv = h_rand(n3, 1), *out = xalloc_floats(n1), *att = xalloc_floats(na);
    float *dqkv = d_from(qkv, n3), *dO = d_poison(n1), *datt = d_poison(nd);
    cpu->attention_forward(out, att, qkv, B, T, C, NH);
    gpu->attention_forward(dO, datt, dqkv, B, T, C, NH);
    float *g = h_rand(n1, 1), *gq = xalloc_floats(n3), *dg = d_from(g, n1), *dgq = d_poison(n3);
    cpu->attention_backward(gq, g, qkv, out, att, B, T, C, NH);
    gpu->attention_backward(dgq, dg, dqkv, dO, datt, B, T, C, NH);
    if (norm) {
        CHECK(cmp_norm("bf16 attention out", dO, out, n1, rtol), "bf16 attention_forward");
        CHECK(cmp_norm("bf16 attention dqkv", dgq, gq, n3, rtol), "bf16 attention_backward");
    } else {
        CHECK(cmp_tol("attention out", dO, out, n1, rtol, atol),
              "attention_forward B=%d T=%d C=%d NH=%d", B, T, C, NH);
        CHECK(cmp_tol("attention dqkv", dgq, gq, n3, rtol, atol),
              "attention_backward B=%d T=%d C=%d NH=%d", B, T, C, NH);
    }
    free(qkv), free(out), free(att), free(g), free(gq);
    gpu->release(dqkv), gpu->release(dO), gpu->release(datt), gpu->release(dg);
    gpu->release(dgq);
}

TEST(attention) {
    for (int s = 0; s < NSHAPES; s++)
        check_attention(SHAPES[s], FP32_RTOL, FP32_ATOL, 0);
}

// ------------------------------------------------------------------ gelu, classifier, adamw

TEST(gelu) {
    size_t n = 4 * 51 * 40 + 3;
    float *x = h_rand(n, 3), *o = xalloc_floats(n), *dx = d_from(x, n), *dO = d_poison(n);
    cpu->gelu_forward(o, x, n), gpu->gelu_forward(dO, dx, n);
    CHECK(cmp32("gelu out", dO, o, n), "gelu_forward");
    float *g = h_rand(n, 1), *dg = d_from(g, n), *dgi = d_poison(n), *gi = xalloc_floats(n);
    cpu->gelu_backward(gi, x, g, n), gpu->gelu_backward(dgi, dx, dg, n);
    CHECK(cmp32("gelu dinp", dgi, gi, n), "gelu_backward");
    gpu->gelu_backward(dg, dx, dg, n); // in place, as the model calls it
    CHECK(cmp32("gelu dinp in place", dg, gi, n), "gelu_backward in place");
    free(x), free(o), free(g), free(gi);
    gpu->release(dx), gpu->release(dO), gpu->release(dg), gpu->release(dgi);
}

TEST(softmax_xent) {
    for (int s = 0; s < NSHAPES; s++) {
        Shape S = SHAPES[s];
        int N = S.B * S.T, V = S.V;
        size_t NV = (size_t)N * V;
        float *lg = h_rand(NV, 4), *loss = xalloc_floats(N), *dlg = d_from(lg, NV);
        float *dloss = d_poison(N);
        int *tg = rand_tokens(N, V);
        double a = gpu->softmax_xent_forward(dlg, dloss, tg, N, V);
        double b = cpu->softmax_xent_forward(lg, loss, tg, N, V);
        CHECK(close_enough(a, b, 1e-5, 0), "loss sum %.9g vs %.9g", a, b);
        CHECK(cmp32("xent probs", dlg, lg, NV) && cmp32("xent losses", dloss, loss, N),
              "softmax_xent_forward shape %d", s);
        float scale = 1.0f / (float)N;
        cpu->softmax_xent_backward(lg, tg, scale, N, V);
        gpu->softmax_xent_backward(dlg, tg, scale, N, V);
        CHECK(cmp32("xent dlogits", dlg, lg, NV), "softmax_xent_backward shape %d", s);
        free(lg), free(loss), free(tg), gpu->release(dlg), gpu->release(dloss);
    }
}

// The fused classifier against the CPU's logits product + softmax_xent + matmul_backward: the
// loss sum, the losses, dx and dwte (accumulated onto a random start). N > 2048 makes the
// chunks of rows run (a partial last one). fp32 element-wise (rtol, atol), bf16 norm-wise
// (rtol, atol 0), where the logits and dlogits are bf16 too.
static void check_classifier(int N, int C, int V, double rtol, double atol) {
    size_t NC = (size_t)N * C, VC = (size_t)V * C, NV = (size_t)N * V;
    float *x = h_rand(NC, 1), *w = h_rand(VC, 0.2f), *lg = xalloc_floats(NV);
    float *loss = xalloc_floats(N), *gx = xalloc_floats(NC), *gw = h_rand(VC, 1);
    float *dx = d_from(x, NC), *dw = d_from(w, VC), *dloss = d_poison(N), *dgx = d_poison(NC);
    float *dgw = d_from(gw, VC);
    int *tg = rand_tokens(N, V);
    float scale = 1.0f / (float)N;
    cpu->matmul_forward(lg, x, w, NULL, N, C, V);
    double b = cpu->softmax_xent_forward(lg, loss, tg, N, V);
    cpu->softmax_xent_backward(lg, tg, scale, N, V);
    cpu->matmul_backward(gx, gw, NULL, lg, x, w, N, C, V);
    double a0 = gpu->classifier(dloss, NULL, NULL, dx, dw, tg, 0.f, N, C, V);
    double a = gpu->classifier(dloss, dgx, dgw, dx, dw, tg, scale, N, C, V);
    int ok = atol > 0 ? cmp_tol("classifier losses", dloss, loss, N, rtol, atol) &&
                            cmp_tol("classifier dx", dgx, gx, NC, rtol, atol) &&
                            cmp_tol("classifier dwte", dgw, gw, VC, rtol, atol)
                      : cmp_norm("classifier losses", dloss, loss, N, rtol) &&
                            cmp_norm("classifier dx", dgx, gx, NC, rtol) &&
                            cmp_norm("classifier dwte", dgw, gw, VC, rtol);
    CHECK(ok && a0 == a && close_enough(a, b, rtol, 0),
          "classifier N=%d C=%d V=%d: loss %.9g %.9g vs %.9g", N, C, V, a0, a, b);
    free(x), free(w), free(lg), free(loss), free(gx), free(gw), free(tg);
    gpu->release(dx), gpu->release(dw), gpu->release(dloss), gpu->release(dgx), gpu->release(dgw);
}

TEST(classifier) {
    check_classifier(37, 48, 211, FP32_RTOL, FP32_ATOL);
    check_classifier(2100, 64, 211, FP32_RTOL, FP32_ATOL);
}

TEST(adamw) {
    size_t n = 100003;
    float *p = h_rand(n, 1), *m = h_rand(n, 0.1f), *v = h_rand(n, 0.1f), *g = h_rand(n, 1);
    for (size_t i = 0; i < n; i++)
        v[i] = v[i] * v[i];
    float *dp = d_from(p, n), *dm = d_from(m, n), *dv = d_from(v, n), *dg = d_from(g, n);
    int ts[] = {1, 7};
    for (int k = 0; k < 2; k++) {
        cpu->adamw(p, g, m, v, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, ts[k]);
        gpu->adamw(dp, dg, dm, dv, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, ts[k]);
    }
    CHECK(cmp32("adamw param", dp, p, n) && cmp32("adamw m", dm, m, n) &&
              cmp32("adamw v", dv, v, n),
          "adamw");
    // adamw_multi: pieces with and without weight decay, a gap between two, in one launch; the
    // same bits as adamw piece by piece
    AdamwPiece pc[] = {{0, 5, 0.1f}, {5, 40000, 0.f}, {40005, 3, 0.1f}, {40100, 59903, 0.1f}};
    float *ep = d_from(p, n), *em = d_from(m, n), *ev = d_from(v, n);
    gpu->upload(dp, p, n), gpu->upload(dm, m, n), gpu->upload(dv, v, n);
    for (int k = 0; k < 4; k++)
        gpu->adamw(dp + pc[k].off, dg + pc[k].off, dm + pc[k].off, dv + pc[k].off, pc[k].n, 3e-3f,
                   0.9f, 0.95f, 1e-8f, pc[k].wd, 0.5f, 8);
    gpu->adamw_multi(ep, dg, em, ev, pc, 4, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.5f, 8);
    float *h1 = h_from_d(dp, n), *h2 = h_from_d(ep, n), *m1 = h_from_d(dm, n);
    float *m2 = h_from_d(em, n);
    CHECK(!memcmp(h1, h2, n * 4) && !memcmp(m1, m2, n * 4), "adamw_multi vs adamw per piece");
    free(h1), free(h2), free(m1), free(m2);
    gpu->release(ep), gpu->release(em), gpu->release(ev);
    free(p), free(m), free(v), free(g);
    gpu->release(dp), gpu->release(dm), gpu->release(dv), gpu->release(dg);
}

// ------------------------------------------------------------------ bf16

// bf16, bias-free, OC % 8 != 0: the padded products (forward, dinp, dW accumulated)
static void check_bf16_padded(int N, int C, int OC) {
    size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
    float *x = h_rand(NC, 1), *w = h_rand(OCC, 0.1f), *o = xalloc_floats(NO), *g = h_rand(NO, 1);
    float *gi = xalloc_floats(NC), *gw = h_rand(OCC, 1);
    float *dx = d_from(x, NC), *dw = d_from(w, OCC), *dO = d_poison(NO), *dg = d_from(g, NO);
    float *dgi = d_poison(NC), *dgw = d_from(gw, OCC);
    cpu->matmul_forward(o, x, w, NULL, N, C, OC), gpu->matmul_forward(dO, dx, dw, NULL, N, C, OC);
    cpu->matmul_backward(gi, gw, NULL, g, x, w, N, C, OC);
    gpu->matmul_backward(dgi, dgw, NULL, dg, dx, dw, N, C, OC);
    CHECK(cmp_norm("bf16 padded matmul out", dO, o, NO, 1e-2) &&
              cmp_norm("bf16 padded matmul dinp", dgi, gi, NC, 1e-2) &&
              cmp_norm("bf16 padded matmul dw", dgw, gw, OCC, 1e-2),
          "bf16 padded matmul N=%d C=%d OC=%d", N, C, OC);
    free(x), free(w), free(o), free(g), free(gi), free(gw);
    float *dp[] = {dx, dw, dO, dg, dgi, dgw};
    for (int i = 0; i < 6; i++)
        gpu->release(dp[i]);
}

// bf16 backward with a bias: dinp, dW and dbias (accumulated) near the CPU's
static void check_bf16_bias_backward(int N, int C, int OC) {
    size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
    float *x = h_rand(NC, 1), *w = h_rand(OCC, 0.1f), *g = h_rand(NO, 1);
    float *w0 = h_rand(OCC, 1), *b0 = h_rand(OC, 1); // dW and dbias accumulate onto these
    float *gi = xalloc_floats(NC), *gw = xalloc_floats(OCC), *gb = xalloc_floats(OC);
    memcpy(gw, w0, OCC * sizeof(float)), memcpy(gb, b0, OC * sizeof(float));
    cpu->matmul_backward(gi, gw, gb, g, x, w, N, C, OC);
    float *dx = d_from(x, NC), *dw = d_from(w, OCC), *dg = d_from(g, NO);
    float *dgi = d_poison(NC), *dgw = d_from(w0, OCC), *dgb = d_from(b0, OC);
    gpu->matmul_backward(dgi, dgw, dgb, dg, dx, dw, N, C, OC);
    CHECK(cmp_norm("bf16 matmul dinp", dgi, gi, NC, 1e-2) &&
              cmp_norm("bf16 matmul dw", dgw, gw, OCC, 1e-2) &&
              cmp_norm("bf16 matmul dbias", dgb, gb, OC, 1e-5),
          "bf16 matmul_backward with bias N=%d C=%d OC=%d", N, C, OC);
    free(x), free(w), free(g), free(w0), free(b0), free(gi), free(gw), free(gb);
    float *dp[] = {dx, dw, dg, dgi, dgw, dgb};
    for (int i = 0; i < 6; i++)
        gpu->release(dp[i]);
}

// bf16 operands (8 bits of mantissa) with fp32 accumulation: norm-wise within 1e-2 of fp32
// (2e-2 for the flash attention, whose P and dS are rounded to bf16 too).
TEST(bf16_products) {
    const Backend *g32 = gpu;
    gpu = backend_select("cuda:bf16", 0);
    CHECK(gpu != NULL, "cuda:bf16: %s", loom_errmsg());
    if (!gpu) {
        gpu = g32;
        return;
    }
    int N = 134, C = 96, OC = 384;
    float *x = h_rand((size_t)N * C, 1), *w = h_rand((size_t)OC * C, 0.1f), *b = h_rand(OC, 1);
    float *o = xalloc_floats((size_t)N * OC), *dx = d_from(x, (size_t)N * C);
    float *dw = d_from(w, (size_t)OC * C), *db = d_from(b, OC), *dO = d_poison((size_t)N * OC);
    cpu->matmul_forward(o, x, w, b, N, C, OC);
    gpu->matmul_forward(dO, dx, dw, db, N, C, OC);
    CHECK(cmp_norm("bf16 matmul out", dO, o, (size_t)N * OC, 1e-2), "bf16 matmul_forward");
    check_bf16_bias_backward(N, C, OC);
    check_bf16_bias_backward(4100, 64, 200);
    check_bf16_padded(134, 96, 211);          // an output width that is not a multiple of 8
    check_bf16_padded(4100, 64, 211);         // rows in chunks of 2048, a partial last one
    check_classifier(2100, 64, 211, 1e-2, 0); // bf16 logits, padded vocabulary, two chunks
    check_attention(SHAPES[1], 1e-2, 0, 1);   // head size 32: batched products
    // head size 64, T > 64: the flash kernels (a partial last tile, then whole tiles), dQ by
    // its own pass and by fp32 atomics, each with K and V in shared memory and in registers
    for (int v = 0; v < 4; v++) {
        if (v & 1) setenv("LOOM_CUDA_FLASH_DQ", "atomic", 1);
        if (v & 2) setenv("LOOM_CUDA_FLASH_BWD", "regs", 1);
        check_attention((Shape){2, 131, 128, 2, 50}, 2e-2, 0, 1);
        check_attention((Shape){1, 128, 192, 3, 50}, 2e-2, 0, 1);
        unsetenv("LOOM_CUDA_FLASH_DQ"), unsetenv("LOOM_CUDA_FLASH_BWD");
    }
    free(x), free(w), free(b), free(o);
    gpu->release(dx), gpu->release(dw), gpu->release(db), gpu->release(dO);
    gpu = backend_select("cuda:fp32", 0);
}

int main(void) {
    gpu_open("test_cuda_ops", "cuda:fp32");
    RUN(vector_ops);
    RUN(reductions);
    RUN(encoder);
    RUN(layernorm);
    RUN(matmul);
    RUN(attention);
    RUN(gelu);
    RUN(softmax_xent);
    RUN(classifier);
    RUN(adamw);
    RUN(bf16_products);
    return test_summary();
}
