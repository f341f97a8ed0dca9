// test_cuda_fused.c — the CUDA backend's fused ops (cuda_fused.c, LOOM_CUDA_FUSE) against the
// ops they stand for, on the same GPU, and against the CPU:
//   * residual + LayerNorm (ln): the same bits as residual_forward then layernorm_forward, in
//     fp32 and in bf16 with a marked (16-bit) output, the residual written over its input;
//   * the MLP's up product with GELU in its epilogue (gelu), bf16: the pre-activation within
//     1e-5 of the unfused product's (the same bf16 operands, maybe another algorithm; 4e-3 when
//     it is marked 16-bit too, ACT16_FCH) and the marked GELU output within 4e-3 norm-wise (a
//     value may round to the next bf16), both within 1e-2 of the CPU's fp32; its backward with the
//     GELU derivative in the epilogue, dpre written over gin: dW and dbias as the unfused ops',
//     dpre within 4e-3 of theirs and 1e-2 of the CPU's;
//   * the bias gradient in the dW product's epilogue (bgrad): within 1e-3 of the column sums
//     (it sums the bf16-rounded output gradient), dW and dinp as without it;
//   * a GPT-2 first step with LOOM_CUDA_FUSE=all against none: loss within 1e-4, gradients
//     within 1e-2 norm-wise.
// An op that declines (not picked, or cuBLASLt without the plan) must return 0: a gelu that
// cuBLASLt cannot fuse here is reported as a skip.
#include "gpu_test.h"

static int same_bytes(const char *what, const float *a, const float *b, size_t nf) {
    float *ha = h_from_d(a, nf), *hb = h_from_d(b, nf);
    int ok = !memcmp(ha, hb, nf * sizeof(float));
    fprintf(stderr, "  %s: %s\n", what, ok ? "the same bits" : "DIFFERENT");
    free(ha), free(hb);
    return ok;
}
static float *d_copy(const float *d, size_t n) {
    float *c = gpu->alloc(n);
    gpu->copy(c, d, n);
    return c;
}

// ------------------------------------------------------------------ residual + LayerNorm

static void check_res_ln(int N, int C, int ln16) {
    size_t NC = (size_t)N * C, nf = ln16 ? gpt_act_floats(1, NC) : NC;
    float *a = h_rand(NC, 1), *x = h_rand(NC, 1), *w = h_rand(C, 1), *b = h_rand(C, 1);
    float *da = d_from(a, NC), *dx = d_from(x, NC), *dw = d_from(w, C), *db = d_from(b, C);
    float *r1 = d_copy(da, NC), *r2 = d_copy(da, NC);
    float *l1 = ln16 ? d_act16(NC) : d_poison(NC), *l2 = ln16 ? d_act16(NC) : d_poison(NC);
    float *m1 = d_poison(N), *m2 = d_poison(N), *s1 = d_poison(N), *s2 = d_poison(N);
    unsetenv("LOOM_CUDA_FUSE");
    CHECK(!gpu->residual_layernorm_forward(r2, l2, m2, s2, r2, dx, dw, db, N, C),
          "residual_layernorm_forward ran without LOOM_CUDA_FUSE=ln");
    gpu->residual_forward(r1, r1, dx, NC);
    gpu->layernorm_forward(l1, m1, s1, r1, dw, db, N, C);
    setenv("LOOM_CUDA_FUSE", "ln", 1);
    CHECK(gpu->residual_layernorm_forward(r2, l2, m2, s2, r2, dx, dw, db, N, C),
          "residual_layernorm_forward declined under LOOM_CUDA_FUSE=ln");
    unsetenv("LOOM_CUDA_FUSE");
    CHECK(same_bytes("residual", r2, r1, NC) && same_bytes("ln out", l2, l1, nf) &&
              same_bytes("ln mean", m2, m1, N) && same_bytes("ln rstd", s2, s1, N),
          "residual + LayerNorm N=%d C=%d %s", N, C, ln16 ? "bf16 out" : "fp32 out");
    free(a), free(x), free(w), free(b);
    float *d[] = {da, dx, dw, db, r1, r2, l1, l2, m1, m2, s1, s2};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        gpu->release(d[i]);
}

TEST(fused_residual_layernorm) {
    check_res_ln(134, 96, 0); // fp32 (the cuda:fp32 backend)
    check_res_ln(51, 40, 0);
    const Backend *g32 = gpu;
    gpu = backend_select("cuda:bf16", 0);
    check_res_ln(134, 96, 0);
    if (gpu->act16) check_res_ln(134, 96, 1);
    gpu = g32;
}

// ------------------------------------------------------------------ GELU in the epilogues

enum { GN = 130, GC = 96, GF = 384, GO = 72 }; // rows, model width, MLP width, down width

// 1 when cuBLASLt fuses the up product and GELU here (bf16, into a marked out as the model's),
// with an fp32 pre-activation or (pre16) a marked one
static int gelu_fuses(int pre16) {
    float *x = d_poison((size_t)GN * GC), *w = d_poison((size_t)GF * GC), *b = d_poison(GF);
    float *o = d_act16((size_t)GN * GF),
          *pre = pre16 ? d_act16((size_t)GN * GF) : gpu->alloc((size_t)GN * GF);
    gpu->fill(x, 0.5f, (size_t)GN * GC), gpu->fill(w, 0.1f, (size_t)GF * GC), gpu->fill(b, 0, GF);
    setenv("LOOM_CUDA_FUSE", "gelu", 1);
    int ok = gpu->matmul_gelu_forward(o, pre, x, w, b, GN, GC, GF);
    unsetenv("LOOM_CUDA_FUSE");
    float *d[] = {x, w, b, o, pre};
    for (int i = 0; i < 5; i++)
        gpu->release(d[i]);
    return ok;
}

// pre16: the pre-activation marked 16-bit as well (ACT16_FCH: the epilogue's aux in bf16)
static void check_fused_gelu(int pre16) {
    size_t NC = (size_t)GN * GC, NF = (size_t)GN * GF, FC = (size_t)GF * GC, NO = (size_t)GN * GO;
    float *x = h_rand(NC, 1), *w = h_rand(FC, 0.1f), *b = h_rand(GF, 1);
    float *pre = xalloc_floats(NF), *gl = xalloc_floats(NF);
    cpu->matmul_forward(pre, x, w, b, GN, GC, GF), cpu->gelu_forward(gl, pre, NF);
    float *dx = d_from(x, NC), *dw = d_from(w, FC), *db = d_from(b, GF);
    float *p1 = pre16 ? d_act16(NF) : d_poison(NF), *p2 = pre16 ? d_act16(NF) : d_poison(NF);
    float *g1 = d_act16(NF), *g2 = d_act16(NF);
    gpu->matmul_forward(p1, dx, dw, db, GN, GC, GF), gpu->gelu_forward(g1, p1, NF);
    setenv("LOOM_CUDA_FUSE", "gelu", 1);
    CHECK(gpu->matmul_gelu_forward(g2, p2, dx, dw, db, GN, GC, GF), "forward declined");
    float *hp1 = pre16 ? h_from_act16(p1, NF) : h_from_d(p1, NF);
    float *hp2 = pre16 ? h_from_act16(p2, NF) : h_from_d(p2, NF);
    float *hg1 = h_from_act16(g1, NF), *hg2 = h_from_act16(g2, NF);
    double rp = rel_norm(hp2, hp1, NF), rpc = rel_norm(hp2, pre, NF);
    double rg = rel_norm(hg2, hg1, NF), rc = rel_norm(hg2, gl, NF);
    fprintf(stderr,
            "  %s pre: %.3g from the unfused ops', %.3g from the CPU's; gelu out: %.3g, %.3g\n",
            pre16 ? "bf16" : "fp32", rp, rpc, rg, rc);
    CHECK(rp <= (pre16 ? 4e-3 : 1e-5) && rpc <= 1e-2 && rg <= 4e-3 && rc <= 1e-2,
          "matmul_gelu_forward (%s pre)", pre16 ? "bf16" : "fp32");
    // the down product y (N,GO) = gin·wpᵀ + bp, backward from dout; dpre over gin
    float *wp = h_rand((size_t)GO * GF, 0.1f), *dout = h_rand(NO, 1);
    float *gw0 = h_rand((size_t)GO * GF, 1), *gb0 = h_rand(GO, 1);
    float *cg = xalloc_floats(NF), *cdp = xalloc_floats(NF), *cgw = xalloc_floats((size_t)GO * GF);
    float *cgb = xalloc_floats(GO);
    memcpy(cgw, gw0, (size_t)GO * GF * 4), memcpy(cgb, gb0, GO * 4);
    cpu->matmul_backward(cg, cgw, cgb, dout, gl, wp, GN, GF, GO);
    cpu->gelu_backward(cdp, pre, cg, NF);
    float *dwp = d_from(wp, (size_t)GO * GF), *ddo = d_from(dout, NO), *big = d_poison(NF);
    float *gw1 = d_from(gw0, (size_t)GO * GF), *gw2 = d_from(gw0, (size_t)GO * GF);
    float *gb1 = d_from(gb0, GO), *gb2 = d_from(gb0, GO);
    unsetenv("LOOM_CUDA_FUSE");
    gpu->copy(g2, g1, gpt_act_floats(1, NF)); // both backwards from the same gin and pre
    gpu->matmul_backward(big, gw1, gb1, ddo, g1, dwp, GN, GF, GO);
    gpu->gelu_backward(g1, p1, big, NF);
    setenv("LOOM_CUDA_FUSE", "gelu", 1);
    CHECK(gpu->matmul_gelu_backward(g2, gw2, gb2, ddo, g2, p1, dwp, GN, GF, GO),
          "backward declined");
    unsetenv("LOOM_CUDA_FUSE");
    float *hgw1 = h_from_d(gw1, (size_t)GO * GF), *hgb1 = h_from_d(gb1, GO);
    float *hd1 = h_from_act16(g1, NF), *hd2 = h_from_act16(g2, NF);
    double rd = rel_norm(hd2, hd1, NF), rdc = rel_norm(hd2, cdp, NF);
    fprintf(stderr, "  dpre: %.3g from the unfused ops', %.3g from the CPU's\n", rd, rdc);
    CHECK(cmp_norm("dW vs unfused", gw2, hgw1, (size_t)GO * GF, 1e-6) &&
              cmp_norm("dbias vs unfused", gb2, hgb1, GO, 1e-6) &&
              cmp_norm("dW vs cpu", gw2, cgw, (size_t)GO * GF, 1e-2) &&
              cmp_norm("dbias vs cpu", gb2, cgb, GO, 1e-5) && rd <= 4e-3 && rdc <= 1e-2,
          "matmul_gelu_backward (%s pre)", pre16 ? "bf16" : "fp32");
    float *h[] = {x,   w,   b,  pre, gl,  hp1, hp2,  hg1,  hg2, wp, dout,
                  gw0, gb0, cg, cdp, cgw, cgb, hgw1, hgb1, hd1, hd2};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
        free(h[i]);
    float *d[] = {dx, dw, db, p1, p2, g1, g2, dwp, ddo, big, gw1, gw2, gb1, gb2};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        gpu->release(d[i]);
}

TEST(fused_gelu) { check_fused_gelu(0); }
TEST(fused_gelu_bf16_pre) { check_fused_gelu(1); }

// ------------------------------------------------------------------ the bias gradient

static void check_bgrad(int N, int C, int OC) {
    size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
    float *x = h_rand(NC, 1), *w = h_rand(OCC, 0.1f), *g = h_rand(NO, 1);
    float *w0 = h_rand(OCC, 1), *b0 = h_rand(OC, 1);
    float *dx = d_from(x, NC), *dw = d_from(w, OCC), *dg = d_from(g, NO);
    float *i1 = d_poison(NC), *i2 = d_poison(NC), *gw1 = d_from(w0, OCC), *gw2 = d_from(w0, OCC);
    float *gb1 = d_from(b0, OC), *gb2 = d_from(b0, OC);
    gpu->matmul_backward(i1, gw1, gb1, dg, dx, dw, N, C, OC);
    setenv("LOOM_CUDA_FUSE", "bgrad", 1);
    gpu->matmul_backward(i2, gw2, gb2, dg, dx, dw, N, C, OC);
    unsetenv("LOOM_CUDA_FUSE");
    float *hi = h_from_d(i1, NC), *hw = h_from_d(gw1, OCC), *hb = h_from_d(gb1, OC);
    CHECK(cmp_norm("bgrad dinp", i2, hi, NC, 1e-6) && cmp_norm("bgrad dW", gw2, hw, OCC, 1e-6) &&
              cmp_norm("bgrad dbias", gb2, hb, OC, 1e-3),
          "the bias gradient in the dW product's epilogue N=%d C=%d OC=%d", N, C, OC);
    free(x), free(w), free(g), free(w0), free(b0), free(hi), free(hw), free(hb);
    float *d[] = {dx, dw, dg, i1, i2, gw1, gw2, gb1, gb2};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        gpu->release(d[i]);
}

TEST(fused_bgrad) {
    check_bgrad(130, 96, 72);
    check_bgrad(4100, 64, 200);
}

// ------------------------------------------------------------------ the model

TEST(fused_model) {
    static const GPTConfig cfg = {.L = 2, .H = 2, .C = 128, .V = 211, .maxT = 80};
    GPT shape;
    CHECK(gpt_create(&shape, &cfg, cpu) == 0, "model: %s", loom_errmsg());
    size_t np = shape.nparams, f0, f1;
    float *g0 = xalloc_floats(np), *g1 = xalloc_floats(np);
    unsetenv("LOOM_CUDA_FUSE");
    double l0 = gpu_first_step(&cfg, 3, 72, g0, &f0);
    setenv("LOOM_CUDA_FUSE", "all", 1);
    double l1 = gpu_first_step(&cfg, 3, 72, g1, &f1);
    unsetenv("LOOM_CUDA_FUSE");
    double r = rel_norm(g1, g0, np);
    fprintf(stderr, "  first step: loss %.9f fused, %.9f not; gradients %.3g apart\n", l1, l0, r);
    CHECK(fabs(l1 - l0) <= 1e-4 * fabs(l0) && r <= 1e-2 && f0 == f1, "GPT-2 first step");
    free(g0), free(g1), gpt_free(&shape);
}

int main(void) {
    gpu_open("test_cuda_fused", "cuda:fp32");
    RUN(fused_residual_layernorm);
    gpu = backend_select("cuda:bf16", 0);
    if (!gpu) {
        printf("skip - test_cuda_fused bf16: %s\n", loom_errmsg());
        return test_summary();
    }
    if (!gpu->act16)
        printf("skip - fused_gelu: this backend keeps every activation in fp32 (act16 off)\n");
    else {
        if (gelu_fuses(0))
            RUN(fused_gelu);
        else
            printf("skip - fused_gelu: cuBLASLt has no fused GELU plan with an fp32 input here\n");
        if (gelu_fuses(1))
            RUN(fused_gelu_bf16_pre);
        else
            printf("skip - fused_gelu_bf16_pre: cuBLASLt has no fused GELU plan with a bf16 "
                   "input here\n");
    }
    RUN(fused_bgrad);
    RUN(fused_model);
    return test_summary();
}
