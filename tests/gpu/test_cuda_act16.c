// test_cuda_act16.c — the products' inputs kept in bf16 (Backend.act16, cuda_act16.c), in
// --dtype bf16, against the same ops on fp32 buffers (every product rounds its fp32 operands to
// bf16 first, so both ways must give the same products):
//   * LayerNorm, GELU (forward and backward) and attention (forward and backward; flash, flash
//     with dQ by atomics, batched products) writing a marked output:
//     each element the bf16 rounding of the fp32 op's (within one bf16 unit: the two kernels
//     may contract differently), mean and rstd identical;
//   * the flash backward reading a marked out, the products (forward, dinp, dW, dbias) reading
//     a marked input or output gradient, and the classifier a marked input: equal to the same
//     op on fp32 buffers holding the same (bf16-representable) values, within 1e-6;
//   * the qkv product into a marked out (ACT16_QKV), and attention from a marked qkv equal to
//     it from an fp32 qkv of the same values (with the tiles by cp.async too:
//     LOOM_CUDA_FLASH_FWD=pipe, LOOM_CUDA_FLASH_BWD=pipe);
//   * a GPT-2 (head size 64, T 72: the flash path) with and without act16 (LOOM_CUDA_ACT16=0),
//     and with the qkv too (LOOM_CUDA_ACT16=qkv: within 1e-4 and 1e-2 of act16's):
//     the first-step loss within 1e-5, the gradients within 1e-2 norm-wise (the flash backward's
//     rowsum(dO ∘ O) reads the rounded O, the fc bias sums the rounded output gradient), and a
//     workspace smaller by the 16-bit tensors.
#include <stdint.h>

#include "gpu_test.h"

// Host arrays: got (bf16 values) within one bf16 unit of bf16(ref); prints the worst.
static int within_bf16(const char *what, const float *got, const float *ref, size_t n) {
    size_t bad = 0, exact = 0;
    for (size_t i = 0; i < n; i++) {
        float r = bf16_round(ref[i]);
        double lim = fabs((double)r) / 128 + 1e-30;
        if (got[i] == r) exact++;
        if (!(fabs((double)got[i] - r) <= lim)) bad++;
    }
    fprintf(stderr, "  %s: %zu of %zu equal to the fp32 result rounded, %zu outside one unit\n",
            what, exact, n, bad);
    return bad == 0 && exact * 100 >= n * 99;
}
static int same_dev(const char *what, const float *a, const float *b, size_t n) {
    float *hb = h_from_d(b, n);
    int ok = cmp_tol(what, a, hb, n, 1e-6, 1e-9);
    free(hb);
    return ok;
}
// Two marked tensors of n elements within one bf16 unit of each other (the kernels may contract
// differently)
static int near16(const char *what, const float *got, const float *ref, size_t n) {
    float *hg = h_from_act16(got, n), *hr = h_from_act16(ref, n);
    int ok = within_bf16(what, hg, hr, n);
    free(hg), free(hr);
    return ok;
}

TEST(act16_writers) {
    int N = 67, C = 96;
    size_t NC = (size_t)N * C;
    float *x = h_rand(NC, 1), *w = h_rand(C, 1), *b = h_rand(C, 1);
    float *dx = d_from(x, NC), *dw = d_from(w, C), *db = d_from(b, C);
    float *o32 = d_poison(NC), *o16 = d_act16(NC), *m = d_poison(2 * (size_t)N),
          *m16 = d_poison(2 * (size_t)N);
    gpu->layernorm_forward(o32, m, m + N, dx, dw, db, N, C);
    gpu->layernorm_forward(o16, m16, m16 + N, dx, dw, db, N, C);
    float *g32 = h_from_d(o32, NC), *g16 = h_from_act16(o16, NC);
    CHECK(within_bf16("layernorm out", g16, g32, NC), "layernorm_forward into bf16");
    CHECK(same_dev("layernorm mean, rstd", m16, m, 2 * (size_t)N), "layernorm mean/rstd");
    free(g32), free(g16);
    size_t sizes[] = {NC, 1001}; // 1001: the scalar tail
    for (int k = 0; k < 2; k++) {
        size_t n = sizes[k];
        float *e32 = d_poison(n), *e16 = d_act16(n);
        gpu->gelu_forward(e32, dx, n), gpu->gelu_forward(e16, dx, n);
        float *h32 = h_from_d(e32, n), *h16 = h_from_act16(e16, n);
        CHECK(within_bf16("gelu out", h16, h32, n), "gelu_forward into bf16, n=%zu", n);
        free(h32), free(h16), gpu->release(e32), gpu->release(e16);
    }
    // GELU from a marked input (ACT16_FCH) against the fp32 one of the same values
    float *x32, *x16 = d_act16_from(x, NC, &x32), *g16a = d_act16(NC), *g16b = d_act16(NC);
    gpu->gelu_forward(g16a, x32, NC), gpu->gelu_forward(g16b, x16, NC);
    CHECK(near16("gelu out from a bf16 input", g16b, g16a, NC), "gelu_forward from bf16");
    float *gd2 = h_rand(NC, 1), *dgd2 = d_from(gd2, NC), *f32a = d_poison(NC), *f32b = d_poison(NC);
    gpu->gelu_backward(f32a, x32, dgd2, NC), gpu->gelu_backward(f32b, x16, dgd2, NC);
    CHECK(same_dev("gelu dinp from a bf16 input", f32b, f32a, NC), "gelu_backward from bf16");
    gpu->gelu_backward(g16a, x32, dgd2, NC), gpu->gelu_backward(g16b, x16, dgd2, NC);
    CHECK(near16("gelu dinp into bf16 from a bf16 input", g16b, g16a, NC),
          "gelu_backward from bf16 into bf16");
    free(gd2);
    float *gb[] = {x32, x16, g16a, g16b, dgd2, f32a, f32b};
    for (size_t i = 0; i < sizeof gb / sizeof gb[0]; i++)
        gpu->release(gb[i]);
    // GELU's backward into a marked dinp (the fc product's output gradient)
    float *gd = h_rand(NC, 1), *dgd = d_from(gd, NC), *b32 = d_poison(NC), *b16 = d_act16(NC);
    gpu->gelu_backward(b32, dx, dgd, NC), gpu->gelu_backward(b16, dx, dgd, NC);
    float *hb32 = h_from_d(b32, NC), *hb16 = h_from_act16(b16, NC);
    CHECK(within_bf16("gelu dinp", hb16, hb32, NC), "gelu_backward into bf16");
    free(gd), free(hb32), free(hb16), gpu->release(dgd), gpu->release(b32), gpu->release(b16);
    free(x), free(w), free(b);
    gpu->release(dx), gpu->release(dw), gpu->release(db), gpu->release(o32), gpu->release(o16);
    gpu->release(m), gpu->release(m16);
}

// Attention at (B, T, C, NH): the forward into a marked out (each element the rounded fp32 out),
// the backward reading it (equal to the fp32 backward on the rounded values) and writing a
// marked dqkv (each element the rounded fp32 dqkv).
static void check_attention16(int B, int T, int C, int NH, int atomics, const char *what) {
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C,
           na = gpu->attention_saved_floats(B, T, NH, C / NH);
    float *qkv = h_rand(n3, 1), *dqkv = d_from(qkv, n3);
    float *o32 = d_poison(n1), *o16 = d_act16(n1), *a32 = d_poison(na), *a16 = d_poison(na);
    gpu->attention_forward(o32, a32, dqkv, B, T, C, NH);
    gpu->attention_forward(o16, a16, dqkv, B, T, C, NH);
    float *h32 = h_from_d(o32, n1), *h16 = h_from_act16(o16, n1);
    CHECK(within_bf16("attention out", h16, h32, n1), "%s: attention_forward into bf16", what);
    CHECK(same_dev("attention saved state", a16, a32, na), "%s: attention saved state", what);
    // the backward reading bf16 O against fp32 O holding the same values
    float *r = h_round(h32, n1), *dor = d_from(r, n1), *g = h_rand(n1, 1), *dg = d_from(g, n1);
    float *q32 = d_poison(n3), *q16 = d_poison(n3), *qm = d_act16(n3);
    gpu->attention_backward(q32, dg, dqkv, dor, a32, B, T, C, NH);
    gpu->attention_backward(q16, dg, dqkv, o16, a16, B, T, C, NH);
    float *h = h_from_d(q32, n3); // (fp32 atomics add in any order: not bit for bit there)
    CHECK(cmp_tol("attention dqkv (bf16 out)", q16, h, n3, atomics ? 1e-4 : 1e-6,
                  atomics ? 1e-6 : 1e-9),
          "%s: backward from a bf16 out", what);
    free(h);
    gpu->attention_backward(qm, dg, dqkv, o16, a16, B, T, C, NH); // dqkv in bf16 too
    float *hq = h_from_d(q16, n3), *hm = h_from_act16(qm, n3);
    CHECK(within_bf16("attention dqkv into bf16", hm, hq, n3), "%s: backward into bf16", what);
    free(qkv), free(h32), free(h16), free(r), free(g), free(hq), free(hm);
    float *bufs[] = {dqkv, o32, o16, a32, a16, dor, dg, q32, q16, qm};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gpu->release(bufs[i]);
}

TEST(act16_attention) {
    check_attention16(2, 130, 128, 2, 0, "flash"); // head size 64, T > 64: the flash kernels
    setenv("LOOM_CUDA_FLASH_DQ", "atomic", 1);     // dQ by atomics: into fp32 scratch, rounded
    check_attention16(2, 130, 128, 2, 1, "flash, dQ by atomics");
    unsetenv("LOOM_CUDA_FLASH_DQ");
    check_attention16(2, 40, 32, 2, 0, "batched products"); // head size 16
}

// A marked qkv (ACT16_QKV): attention forward and backward from it equal to the same ops on an
// fp32 qkv holding the same (bf16-representable) values: the flash kernels load the same bf16
// tiles either way, the batched products read it converted back to fp32 exactly.
static void check_qkv16(int B, int T, int C, int NH, int atomics, const char *what) {
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C,
           na = gpu->attention_saved_floats(B, T, NH, C / NH);
    float *qkv = h_rand(n3, 1), *q32, *q16 = d_act16_from(qkv, n3, &q32);
    float *oa = d_poison(n1), *ob = d_poison(n1), *aa = d_poison(na), *ab = d_poison(na);
    gpu->attention_forward(oa, aa, q32, B, T, C, NH);
    gpu->attention_forward(ob, ab, q16, B, T, C, NH);
    CHECK(same_dev("attention out (bf16 qkv)", ob, oa, n1) &&
              same_dev("attention saved state (bf16 qkv)", ab, aa, na),
          "%s: attention_forward from a bf16 qkv", what);
    // the backward from every mix of an fp32 and a marked qkv and dout of the same values (the
    // kernels take both in one type: cuda_ops.c converts the other)
    float *g = h_rand(n1, 1), *gr = h_round(g, n1), *g32, *g16 = d_act16_from(g, n1, &g32);
    float *da = d_poison(n3), *db = d_poison(n3);
    gpu->attention_backward(da, g32, q32, oa, aa, B, T, C, NH);
    float *h = h_from_d(da, n3); // (fp32 atomics add in any order: not bit for bit there)
    const float *qs[] = {q16, q16, q32}, *gs[] = {g32, g16, g16};
    static const char *mix[] = {"bf16 qkv", "bf16 qkv and dout", "bf16 dout"};
    for (int k = 0; k < 3; k++) {
        gpu->fill(db, NAN, n3);
        gpu->attention_backward(db, gs[k], qs[k], k == 2 ? oa : ob, k == 2 ? aa : ab, B, T, C, NH);
        CHECK(cmp_tol(mix[k], db, h, n3, atomics ? 1e-4 : 1e-6, atomics ? 1e-6 : 1e-9),
              "%s: attention_backward from a %s", what, mix[k]);
    }
    free(h);
    free(qkv), free(g), free(gr);
    float *bufs[] = {q32, q16, oa, ob, aa, ab, g32, g16, da, db};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gpu->release(bufs[i]);
}

// The qkv product into a marked out (bf16 from the product: each element the fp32 product
// rounded, within one unit), and the attention reading a marked qkv
TEST(act16_qkv) {
    int N = 130, C = 96, OC = 288;
    size_t NC = (size_t)N * C, NO = (size_t)N * OC;
    float *x = h_rand(NC, 1), *w = h_rand((size_t)OC * C, 0.1f), *b = h_rand(OC, 1);
    float *dx = d_from(x, NC), *dw = d_from(w, (size_t)OC * C), *db = d_from(b, OC);
    float *o32 = d_poison(NO), *o16 = d_act16(NO);
    gpu->matmul_forward(o32, dx, dw, db, N, C, OC);
    gpu->matmul_forward(o16, dx, dw, db, N, C, OC);
    float *h32 = h_from_d(o32, NO), *h16 = h_from_act16(o16, NO);
    CHECK(within_bf16("qkv product out", h16, h32, NO), "matmul_forward into bf16 (with a bias)");
    free(x), free(w), free(b), free(h32), free(h16);
    gpu->release(dx), gpu->release(dw), gpu->release(db), gpu->release(o32), gpu->release(o16);
    // the attention output's gradient into a marked dinp (the proj backward under ACT16_QKV)
    float *g = h_rand((size_t)N * OC, 1), *dg = d_from(g, (size_t)N * OC);
    float *w2 = h_rand((size_t)OC * C, 0.1f), *dw2 = d_from(w2, (size_t)OC * C);
    float *gw1 = d_from(w2, (size_t)OC * C), *gw2 = d_from(w2, (size_t)OC * C);
    float *i32 = d_poison(NC), *i16 = d_act16(NC), *x2 = h_rand(NC, 1), *dx2 = d_from(x2, NC);
    gpu->matmul_backward(i32, gw1, NULL, dg, dx2, dw2, N, C, OC);
    gpu->matmul_backward(i16, gw2, NULL, dg, dx2, dw2, N, C, OC);
    float *hi32 = h_from_d(i32, NC), *hi16 = h_from_act16(i16, NC);
    CHECK(within_bf16("matmul dinp into bf16", hi16, hi32, NC), "matmul_backward into bf16");
    free(g), free(w2), free(x2), free(hi32), free(hi16);
    float *bufs[] = {dg, dw2, gw1, gw2, i32, i16, dx2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gpu->release(bufs[i]);
    check_qkv16(2, 130, 128, 2, 0, "flash");
    setenv("LOOM_CUDA_FLASH_FWD", "pipe", 1); // the tiles copied in by cp.async
    setenv("LOOM_CUDA_FLASH_BWD", "pipe", 1);
    check_qkv16(2, 130, 128, 2, 0, "flash, pipelined");
    check_qkv16(1, 256, 192, 3, 0, "flash, pipelined, whole tiles");
    unsetenv("LOOM_CUDA_FLASH_FWD"), unsetenv("LOOM_CUDA_FLASH_BWD");
    setenv("LOOM_CUDA_FLASH_DQ", "atomic", 1);
    check_qkv16(2, 130, 128, 2, 1, "flash, dQ by atomics");
    unsetenv("LOOM_CUDA_FLASH_DQ");
    check_qkv16(2, 40, 32, 2, 0, "batched products");
}

// matmul_backward from (da, xa) and from (db, xb), each into fresh dinp and into dW, dbias
// starting from the host's w, bias: every output equal within 1e-6.
static int same_backward(const char *what, const float *da, const float *xa, const float *db,
                         const float *xb, const float *w, const float *bias, const float *dwt,
                         int N, int C, int OC) {
    size_t NC = (size_t)N * C, WC = (size_t)OC * C;
    float *ia = d_poison(NC), *ib = d_poison(NC), *wa = d_from(w, WC), *wb = d_from(w, WC);
    float *ba = d_from(bias, OC), *bb = d_from(bias, OC);
    gpu->matmul_backward(ia, wa, ba, da, xa, dwt, N, C, OC);
    gpu->matmul_backward(ib, wb, bb, db, xb, dwt, N, C, OC);
    char n1[64], n2[64], n3[64];
    snprintf(n1, sizeof n1, "matmul dinp%s", what), snprintf(n2, sizeof n2, "matmul dw%s", what);
    snprintf(n3, sizeof n3, "matmul dbias%s", what);
    int ok = same_dev(n1, ib, ia, NC) && same_dev(n2, wb, wa, WC) && same_dev(n3, bb, ba, OC);
    float *bufs[] = {ia, ib, wa, wb, ba, bb};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gpu->release(bufs[i]);
    return ok;
}

TEST(act16_readers) {
    int N = 130, C = 96, OC = 72, V = 211;
    size_t NC = (size_t)N * C, NO = (size_t)N * OC;
    float *x = h_rand(NC, 1), *w = h_rand((size_t)OC * C, 0.1f), *bias = h_rand(OC, 1);
    float *x32, *x16 = d_act16_from(x, NC, &x32);
    float *dw = d_from(w, (size_t)OC * C), *db = d_from(bias, OC);
    float *o32 = d_poison(NO), *o16 = d_poison(NO);
    gpu->matmul_forward(o32, x32, dw, db, N, C, OC);
    gpu->matmul_forward(o16, x16, dw, db, N, C, OC);
    float *h = h_from_d(o32, NO);
    CHECK(cmp_tol("matmul out (bf16 inp)", o16, h, NO, 1e-6, 1e-9), "matmul_forward from bf16");
    free(h);
    float *g = h_rand(NO, 1), *dg = d_from(g, NO);
    CHECK(same_backward("", dg, x32, dg, x16, w, bias, dw, N, C, OC), "matmul_backward from bf16");
    // a marked dout (bf16 values) against an fp32 dout of the same values
    float *g32, *g16 = d_act16_from(g, NO, &g32);
    CHECK(same_backward(" (bf16 dout)", g32, x32, g16, x16, w, bias, dw, N, C, OC),
          "matmul_backward from a bf16 dout");
    gpu->release(g32), gpu->release(g16);
    // the classifier: losses and gradients from a marked x
    float *wte = h_rand((size_t)V * C, 0.1f), *dwte = d_from(wte, (size_t)V * C);
    int *tg = xcalloc((size_t)N, sizeof(int));
    for (int i = 0; i < N; i++)
        tg[i] = (int)rng_below(&rng, V);
    float *l32 = d_poison(N), *l16 = d_poison(N), *dx32 = d_poison(NC), *dx16 = d_poison(NC);
    float *gw32 = d_from(wte, (size_t)V * C), *gw16 = d_from(wte, (size_t)V * C);
    double s32 = gpu->classifier(l32, dx32, gw32, x32, dwte, tg, 0.5f, N, C, V);
    double s16 = gpu->classifier(l16, dx16, gw16, x16, dwte, tg, 0.5f, N, C, V);
    CHECK(fabs(s32 - s16) <= 1e-6 * fabs(s32), "classifier loss %.9g vs %.9g", s16, s32);
    CHECK(same_dev("classifier dx", dx16, dx32, NC) &&
              same_dev("classifier dwte", gw16, gw32, (size_t)V * C),
          "classifier from bf16");
    free(x), free(w), free(bias), free(g), free(wte), free(tg);
    float *bufs[] = {x32, x16, dw, db, o32, o16, dg, dwte, l32, l16, dx32, dx16, gw32, gw16};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gpu->release(bufs[i]);
}

// ------------------------------------------------------------------ the model

static const GPTConfig CFG = {.L = 2, .H = 2, .C = 128, .V = 211, .maxT = 80};
enum { B = 3, T = 72 };

TEST(act16_model) {
    GPT shape;
    CHECK(gpt_create(&shape, &CFG, cpu) == 0, "model: %s", loom_errmsg());
    size_t np = shape.nparams;
    float *g16 = xalloc_floats(np), *g32 = xalloc_floats(np);
    size_t f16, f32;
    double l16 = gpu_first_step(&CFG, B, T, g16, &f16);
    setenv("LOOM_CUDA_ACT16", "0", 1);
    gpu = backend_select("cuda:bf16", 0);
    CHECK(gpu && !gpu->act16, "LOOM_CUDA_ACT16=0 left act16 on");
    double l32 = gpu_first_step(&CFG, B, T, g32, &f32);
    unsetenv("LOOM_CUDA_ACT16");
    gpu = backend_select("cuda:bf16", 0);
    fprintf(stderr,
            "  first-step loss: act16 %.9f fp32 activations %.9f; workspace %zu vs %zu floats\n",
            l16, l32, f16, f32);
    CHECK(fabs(l16 - l32) <= 1e-5 * fabs(l32), "loss %.9f vs %.9f", l16, l32);
    double r = rel_norm(g16, g32, np);
    fprintf(stderr, "  gradients: relative norm difference %.3g (bound 1e-2)\n", r);
    CHECK(r <= 1e-2, "gradients %.3g apart", r);
    // ln_1, ln_2, the attention output and the GELU output of 2 layers at half size
    size_t BT = (size_t)B * T, C = (size_t)CFG.C, saved = 2 * (BT * C * 7 - 7 * BT * C / 2);
    CHECK(f32 - f16 == saved, "the workspace is %zu floats smaller, expected %zu", f32 - f16,
          saved);
    // LOOM_CUDA_ACT16=qkv: the qkv product's output in 16 bits too (ACT16_QKV)
    float *gq = xalloc_floats(np);
    size_t fq;
    setenv("LOOM_CUDA_ACT16", "qkv", 1);
    gpu = backend_select("cuda:bf16", 0);
    CHECK(gpu && (gpu->act16 & ACT16_QKV), "LOOM_CUDA_ACT16=qkv left ACT16_QKV off");
    double lq = gpu_first_step(&CFG, B, T, gq, &fq);
    unsetenv("LOOM_CUDA_ACT16");
    gpu = backend_select("cuda:bf16", 0);
    double rq = rel_norm(gq, g16, np);
    fprintf(stderr, "  qkv in bf16 too: loss %.9f, gradients %.3g from act16's; %zu floats\n", lq,
            rq, fq);
    CHECK(fabs(lq - l16) <= 1e-4 * fabs(l16) && rq <= 1e-2, "qkv in bf16: loss %.9f vs %.9f", lq,
          l16);
    // two layers' qkv at half size, less the scratch's 16-bit d(attention output)
    CHECK(f16 - fq == 2 * (3 * BT * C / 2) - BT * C / 2,
          "qkv in bf16: the workspace is %zu floats smaller", f16 - fq);
    // LOOM_CUDA_ACT16=all: the GELU input (fch) in 16 bits too (ACT16_FCH)
    size_t fa;
    setenv("LOOM_CUDA_ACT16", "all", 1);
    gpu = backend_select("cuda:bf16", 0);
    CHECK(gpu && (gpu->act16 & ACT16_FCH) && (gpu->act16 & ACT16_QKV), "LOOM_CUDA_ACT16=all");
    double la = gpu_first_step(&CFG, B, T, gq, &fa);
    unsetenv("LOOM_CUDA_ACT16");
    gpu = backend_select("cuda:bf16", 0);
    double ra = rel_norm(gq, g16, np);
    fprintf(stderr, "  qkv and fch in bf16 too: loss %.9f, gradients %.3g from act16's\n", la, ra);
    CHECK(fabs(la - l16) <= 1e-4 * fabs(l16) && ra <= 1e-2, "all in bf16: loss %.9f vs %.9f", la,
          l16);
    CHECK(fq - fa == 2 * (4 * BT * C / 2), "fch in bf16: %zu floats fewer", fq - fa);
    free(gq);
    free(g16), free(g32), gpt_free(&shape);
}

int main(void) {
    gpu_open("test_cuda_act16", "cuda:bf16");
    if (!gpu->act16) {
        printf("skip - test_cuda_act16: this backend keeps every activation in fp32 (act16 off)\n");
        return 0;
    }
    RUN(act16_writers);
    RUN(act16_attention);
    RUN(act16_readers);
    RUN(act16_qkv);
    RUN(act16_model);
    return test_summary();
}
