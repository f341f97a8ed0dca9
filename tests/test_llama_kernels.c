// test_llama_kernels.c — the CPU backend's LLaMA-block kernels: RMSNorm, rotary embeddings
// (Hugging Face's rotate-half convention), SwiGLU and grouped-query attention. Each forward
// against a plain double-precision reference written from the definitions, each backward
// against central differences of f = Σ out·R (float32, step 1e-2 on O(1) inputs), and
// grouped-query attention against the multi-head kernel run on K and V repeated per group
// (the stored-softmax path, T ≤ 96, and the blockwise one). Negative controls: the other RoPE
// convention (interleaved pairs) and a wrong group mapping are told apart.
#include <math.h>
#include <string.h>

#include "../src/backend/backend.h"
#include "../src/common.h"
#include "../src/rng.h"
#include "gradcheck.h"
#include "test.h"

static double maxdiff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

// ---------------------------------------------------------------- RMSNorm

typedef struct {
    int N, C;
    float *inp, *w, *out, *rstd, *R;
} NormCtx;

static double rms_f(void *v) {
    NormCtx *c = v;
    be->rmsnorm_forward(c->out, c->rstd, c->inp, c->w, c->N, c->C, 1e-5f);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}

TEST(rmsnorm) {
    NormCtx c = {.N = 7, .C = 24};
    size_t n = (size_t)c.N * c.C;
    c.inp = randv(n, 1), c.w = randv(c.C, 1), c.R = randv(n, 1);
    c.out = xalloc_floats(n), c.rstd = xalloc_floats(c.N);
    rms_f(&c);
    double worst = 0;
    for (int r = 0; r < c.N; r++) {
        double ss = 0;
        for (int i = 0; i < c.C; i++)
            ss += (double)c.inp[r * c.C + i] * c.inp[r * c.C + i];
        double rs = 1 / sqrt(ss / c.C + 1e-5);
        for (int i = 0; i < c.C; i++)
            worst = fmax(worst, fabs(c.out[r * c.C + i] - c.inp[r * c.C + i] * rs * c.w[i]));
    }
    CHECK(worst < 1e-5, "forward off the reference by %g", worst);
    float *dinp = xalloc_floats(n), *dw = xalloc_floats(c.C);
    be->rmsnorm_backward(dinp, dw, c.R, c.inp, c.w, c.rstd, c.N, c.C);
    CHECK(!fd_check("dinp", rms_f, &c, c.inp, dinp, n, 60, 2e-2, 2e-3), "rmsnorm dinp");
    CHECK(!fd_check("dw", rms_f, &c, c.w, dw, c.C, 24, 2e-2, 2e-3), "rmsnorm dw");
    free(c.inp), free(c.w), free(c.R), free(c.out), free(c.rstd), free(dinp), free(dw);
}

// ---------------------------------------------------------------- RoPE

enum { RB = 2, RT = 5, RNH = 4, RNKV = 2, RHS = 8 };
#define RW ((RNH + 2 * RNKV) * RHS)

typedef struct {
    float *x, *y, *R, inv[RHS / 2];
    int pos[RT];
} RopeCtx;

static double rope_f(void *v) {
    RopeCtx *c = v;
    memcpy(c->y, c->x, sizeof(float) * RB * RT * RW);
    be->rope_forward(c->y, c->pos, c->inv, RB, RT, RNH, RNKV, RHS);
    return dot(c->y, c->R, (size_t)RB * RT * RW);
}

// The reference: rotate-half (i pairs with i + hs/2) or, interleaved, 2i with 2i+1.
static double rope_ref_err(const RopeCtx *c, int interleaved) {
    double worst = 0;
    for (int b = 0; b < RB; b++)
        for (int t = 0; t < RT; t++)
            for (int h = 0; h < RNH + 2 * RNKV; h++) {
                const float *x = c->x + ((size_t)(b * RT + t)) * RW + h * RHS;
                const float *y = c->y + ((size_t)(b * RT + t)) * RW + h * RHS;
                for (int i = 0; i < RHS / 2; i++) {
                    int a = interleaved ? 2 * i : i, z = interleaved ? 2 * i + 1 : i + RHS / 2;
                    double ang = (double)c->pos[t] * c->inv[i], cs = cos(ang), sn = sin(ang);
                    double y1 = x[a], y2 = x[z]; // the value heads pass unrotated
                    if (h < RNH + RNKV) y1 = x[a] * cs - x[z] * sn, y2 = x[z] * cs + x[a] * sn;
                    worst = fmax(worst, fmax(fabs(y[a] - y1), fabs(y[z] - y2)));
                }
            }
    return worst;
}

TEST(rope) {
    RopeCtx c;
    size_t n = (size_t)RB * RT * RW;
    c.x = randv(n, 1), c.y = xalloc_floats(n), c.R = randv(n, 1);
    for (int i = 0; i < RHS / 2; i++)
        c.inv[i] = (float)pow(10000.0, -2.0 * i / RHS);
    for (int t = 0; t < RT; t++)
        c.pos[t] = 3 * t + 7; // positions need not start at 0 (a context-parallel chunk)
    rope_f(&c);
    double ok = rope_ref_err(&c, 0), other = rope_ref_err(&c, 1);
    CHECK(ok < 1e-5, "rotate-half forward off the reference by %g", ok);
    CHECK(other > 1e-2, "negative control: the interleaved convention passes too (%g)", other);
    // backward: the gradient of Σ y·R with respect to x is rope_backward(R)
    float *g = xalloc_floats(n);
    memcpy(g, c.R, n * sizeof(float));
    be->rope_backward(g, c.pos, c.inv, RB, RT, RNH, RNKV, RHS);
    CHECK(!fd_check("dx", rope_f, &c, c.x, g, n, 80, 1e-2, 1e-3), "rope backward");
    free(c.x), free(c.y), free(c.R), free(g);
}

// ---------------------------------------------------------------- SwiGLU

typedef struct {
    int N, F;
    float *inp, *out, *R;
} GluCtx;

static double glu_f(void *v) {
    GluCtx *c = v;
    be->swiglu_forward(c->out, c->inp, c->N, c->F);
    return dot(c->out, c->R, (size_t)c->N * c->F);
}

TEST(swiglu) {
    GluCtx c = {.N = 5, .F = 19};
    size_t n = (size_t)c.N * c.F;
    c.inp = randv(2 * n, 1.5f), c.out = xalloc_floats(n), c.R = randv(n, 1);
    glu_f(&c);
    double worst = 0;
    for (int r = 0; r < c.N; r++)
        for (int i = 0; i < c.F; i++) {
            double g = c.inp[r * 2 * c.F + i], u = c.inp[r * 2 * c.F + c.F + i];
            worst = fmax(worst, fabs(c.out[r * c.F + i] - g / (1 + exp(-g)) * u));
        }
    CHECK(worst < 1e-5, "forward off the reference by %g", worst);
    float *d = xalloc_floats(2 * n);
    be->swiglu_backward(d, c.inp, c.R, c.N, c.F);
    CHECK(!fd_check("dinp", glu_f, &c, c.inp, d, 2 * n, 80, 2e-2, 2e-3), "swiglu backward");
    free(c.inp), free(c.out), free(c.R), free(d);
}

// ---------------------------------------------------------------- grouped-query attention

// qkv (B,T,(NH+2·NKV)·hs) → the multi-head layout (B,T,3·NH·hs), K and V repeated per group
// (group map: query head h reads kv head h / (NH/NKV), or, wrong, h % NKV).
static float *repeat_kv(const float *qkv, int B, int T, int NH, int NKV, int hs, int wrong) {
    size_t W = (size_t)(NH + 2 * NKV) * hs, C = (size_t)NH * hs;
    float *m = xalloc_floats((size_t)B * T * 3 * C);
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int h = 0; h < NH; h++) {
            int kh = wrong ? h % NKV : h / (NH / NKV);
            const float *src = qkv + r * W;
            float *dst = m + r * 3 * C;
            memcpy(dst + h * hs, src + h * hs, hs * sizeof(float));
            memcpy(dst + C + h * hs, src + (NH + kh) * hs, hs * sizeof(float));
            memcpy(dst + 2 * C + h * hs, src + (NH + NKV + kh) * hs, hs * sizeof(float));
        }
    return m;
}

// GQA against MHA on repeated K/V at (B,T,NH,NKV,hs): out, and dq / dk, dv (the latter summed
// over each group). Returns the largest difference; wrong: the negative control's map.
static double gqa_vs_mha(int B, int T, int NH, int NKV, int hs, int wrong) {
    size_t W = (size_t)(NH + 2 * NKV) * hs, C = (size_t)NH * hs, BT = (size_t)B * T;
    float *qkv = randv(BT * W, 1), *dout = randv(BT * C, 1);
    float *mqkv = repeat_kv(qkv, B, T, NH, NKV, hs, wrong);
    size_t sa = be->attention_saved_floats(B, T, NH, hs);
    float *o1 = xalloc_floats(BT * C), *o2 = xalloc_floats(BT * C);
    float *a1 = xalloc_floats(sa), *a2 = xalloc_floats(sa);
    float *d1 = xalloc_floats(BT * W), *d2 = xalloc_floats(BT * 3 * C);
    be->gqa_attention_forward(o1, a1, qkv, B, T, NH, NKV, hs);
    be->attention_forward(o2, a2, mqkv, B, T, (int)C, NH);
    double worst = maxdiff(o1, o2, BT * C);
    be->gqa_attention_backward(d1, dout, qkv, o1, a1, B, T, NH, NKV, hs);
    be->attention_backward(d2, dout, mqkv, o2, a2, B, T, (int)C, NH);
    for (size_t r = 0; r < BT; r++) {
        const float *g = d1 + r * W, *m = d2 + r * 3 * C;
        worst = fmax(worst, maxdiff(g, m, C)); // dq
        for (int kh = 0; kh < NKV; kh++)
            for (int part = 1; part <= 2; part++)
                for (int i = 0; i < hs; i++) {
                    double s = 0;
                    for (int h = kh * (NH / NKV); h < (kh + 1) * (NH / NKV); h++)
                        s += m[part * C + h * hs + i];
                    double a = g[(NH + (part - 1) * NKV + kh) * hs + i];
                    worst = fmax(worst, fabs(a - s));
                }
    }
    free(qkv), free(dout), free(mqkv), free(o1), free(o2), free(a1), free(a2), free(d1), free(d2);
    return worst;
}

TEST(gqa_attention_matches_repeated_kv) {
    int shapes[][5] = {{2, 17, 4, 2, 8}, {1, 40, 6, 1, 16}, {2, 150, 4, 2, 16}, {1, 130, 8, 4, 8}};
    for (int k = 0; k < 4; k++) {
        int *s = shapes[k];
        double e = gqa_vs_mha(s[0], s[1], s[2], s[3], s[4], 0);
        CHECK(e < 2e-5, "B%d T%d NH%d NKV%d hs%d: off by %g", s[0], s[1], s[2], s[3], s[4], e);
    }
    double bad = gqa_vs_mha(2, 17, 4, 2, 8, 1);
    CHECK(bad > 1e-2, "negative control: a wrong group map passes (%g)", bad);
}

TEST(gqa_attention_mha_is_attention) { // NKV = NH: the GPT-2 kernel, bit for bit
    int B = 2, T = 100, NH = 4, hs = 8, C = NH * hs;
    size_t BT = (size_t)B * T, sa = be->attention_saved_floats(B, T, NH, hs);
    float *qkv = randv(BT * 3 * C, 1), *o1 = xalloc_floats(BT * C), *o2 = xalloc_floats(BT * C);
    float *a1 = xalloc_floats(sa), *a2 = xalloc_floats(sa);
    be->gqa_attention_forward(o1, a1, qkv, B, T, NH, NH, hs);
    be->attention_forward(o2, a2, qkv, B, T, C, NH);
    CHECK(!memcmp(o1, o2, BT * C * sizeof(float)), "outputs differ");
    free(qkv), free(o1), free(o2), free(a1), free(a2);
}

typedef struct {
    int B, T, NH, NKV, hs;
    float *qkv, *out, *att, *R;
} GqaCtx;

static double gqa_f(void *v) {
    GqaCtx *c = v;
    be->gqa_attention_forward(c->out, c->att, c->qkv, c->B, c->T, c->NH, c->NKV, c->hs);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->NH * c->hs);
}

TEST(gqa_attention_grad) {
    GqaCtx c = {.B = 1, .T = 6, .NH = 4, .NKV = 2, .hs = 4};
    size_t W = (size_t)(c.NH + 2 * c.NKV) * c.hs, n = (size_t)c.B * c.T * W;
    size_t no = (size_t)c.B * c.T * c.NH * c.hs;
    c.qkv = randv(n, 1), c.out = xalloc_floats(no), c.R = randv(no, 1);
    c.att = xalloc_floats(be->attention_saved_floats(c.B, c.T, c.NH, c.hs));
    gqa_f(&c);
    float *d = xalloc_floats(n);
    be->gqa_attention_backward(d, c.R, c.qkv, c.out, c.att, c.B, c.T, c.NH, c.NKV, c.hs);
    CHECK(!fd_check("dqkv", gqa_f, &c, c.qkv, d, n, (int)n, 2e-2, 2e-3), "gqa backward");
    free(c.qkv), free(c.out), free(c.R), free(c.att), free(d);
}

int main(void) {
    rng_seed(&rng, 11, 0);
    be = backend_cpu();
    CHECK(backend_supports(be, BACKEND_LLAMA), "the CPU backend lacks the LLaMA kernels");
    RUN(rmsnorm);
    RUN(rope);
    RUN(swiglu);
    RUN(gqa_attention_matches_repeated_kv);
    RUN(gqa_attention_mha_is_attention);
    RUN(gqa_attention_grad);
    return test_summary();
}
