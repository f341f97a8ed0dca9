// test_llama_model.c — the LLaMA family's model plumbing (src/model/llama_layout.c,
// block_llama.c): config defaults and the errors naming the flag, the tensor table (Hugging Face
// Llama names, q|k|v and gate|up back to back, the parameter count equal to the layout, tied and
// untied heads, lookups by name), and the whole model's gradient against central differences of
// its loss at a few parameters of every kind; recompute gives the same gradients bit for bit;
// tensor-parallel parts cut from and assembled into the whole layout.
#include <math.h>
#include <string.h>

#include "../src/backend/backend.h"
#include "../src/common.h"
#include "../src/model/gpt.h"
#include "../src/rng.h"
#include "gradcheck.h"
#include "test.h"

static GPTConfig llama(int L, int H, int KV, int C, int V, int tie) {
    GPTConfig c = {
        .L = L, .H = H, .C = C, .V = V, .maxT = 16, .arch = ARCH_LLAMA, .KV = KV, .tie = tie};
    gpt_config_defaults(&c);
    return c;
}

TEST(config_defaults_and_errors) {
    GPTConfig c = llama(2, 4, 0, 64, 256, 0);
    CHECK(c.KV == 4 && c.F == 192, "defaults KV %d F %d (want 4, 192)", c.KV, c.F);
    CHECK(c.rope_theta == 10000.f && c.norm_eps == 1e-5f, "theta %g eps %g", c.rope_theta,
          c.norm_eps);
    CHECK(gpt_config_check(&c) == 0, "a good shape refused: %s", loom_errmsg());
    c.KV = 3;
    CHECK(gpt_config_check(&c) && strstr(loom_errmsg(), "--kv-heads"), "KV 3 of H 4: %s",
          loom_errmsg());
    c = llama(2, 8, 8, 72, 256, 0); // head size 9
    CHECK(gpt_config_check(&c) && strstr(loom_errmsg(), "even"), "odd head size: %s",
          loom_errmsg());
}

TEST(tensor_table) {
    for (int tie = 0; tie <= 1; tie++) {
        GPTConfig c = llama(3, 4, 2, 64, 100, tie);
        GPT m;
        size_t n = 0;
        CHECK(gpt_param_count(&c, &n) == 0, "count: %s", loom_errmsg());
        CHECK(gpt_create_layout(&m, &c, backend_cpu()) == 0, "layout: %s", loom_errmsg());
        CHECK(m.nparams == n, "layout %zu != count %zu", m.nparams, n);
        CHECK(m.ntensors == 1 + 9 * 3 + 1 + !tie, "tie %d: %d tensors", tie, m.ntensors);
        const TensorSpec *q = gpt_find_tensor(&m, "model.layers.2.self_attn.q_proj.weight"),
                         *k = gpt_find_tensor(&m, "model.layers.2.self_attn.k_proj.weight"),
                         *v = gpt_find_tensor(&m, "model.layers.2.self_attn.v_proj.weight"),
                         *g = gpt_find_tensor(&m, "model.layers.2.mlp.gate_proj.weight"),
                         *u = gpt_find_tensor(&m, "model.layers.2.mlp.up_proj.weight"),
                         *h = gpt_find_tensor(&m, "lm_head.weight");
        CHECK(q && k && v && g && u, "a layer tensor not found by name");
        if (q && k && v && g && u) {
            CHECK(k->off == q->off + q->n && v->off == k->off + k->n, "q|k|v not back to back");
            CHECK(u->off == g->off + g->n, "gate|up not back to back");
            CHECK(k->shape[0] == 2 * 16 && k->shape[1] == 64, "k_proj %dx%d", k->shape[0],
                  k->shape[1]);
            CHECK(g->ndim == 2 && u->shape[0] == 192, "up_proj rows %d", u->shape[0]);
        }
        CHECK(tie ? !h : h && h->shape[0] == 100, "tie %d: lm_head %s", tie, h ? "present" : "no");
        CHECK(!gpt_find_tensor(&m, "h.0.ln_1.weight"), "a GPT-2 name found in a LLaMA model");
        gpt_free(&m);
    }
}

// Tensor-parallel parts (tp_layout.c): the shapes a rank holds, kv heads split (tp 2 of KV 2)
// or shared (tp 4 of KV 2: one kv head on 2 ranks, counted on the first), and the whole flat
// layout cut into parts and assembled back: by copies (every element comes back), and by
// summing every rank's window (gpt_tp_to_whole_range: each element exactly once).
static void tp_roundtrip(const GPTConfig *c, int tp) {
    GPT whole, part[4];
    CHECK(gpt_create_layout(&whole, c, backend_cpu()) == 0, "whole: %s", loom_errmsg());
    size_t n = whole.nparams;
    float *src = xalloc_floats(n), *cp = xcalloc(n, sizeof(float)), *sum = xcalloc(n, 4);
    float *win = xalloc_floats(n);
    for (size_t i = 0; i < n; i++)
        src[i] = (float)(i % 9973) + 1.f;
    for (int r = 0; r < tp; r++) {
        CHECK(gpt_create_layout_tp(&part[r], c, backend_cpu(), tp, r) == 0, "tp %d rank %d: %s", tp,
              r, loom_errmsg());
        float *mine = xcalloc(part[r].nparams, sizeof(float));
        gpt_tp_from_whole(&whole, &part[r], 0, n, src, mine);
        gpt_tp_to_whole(&whole, &part[r], r, mine, cp);
        memset(win, 0, n * sizeof(float));
        gpt_tp_to_whole_range(&whole, &part[r], r, mine, 0, n, win);
        for (size_t i = 0; i < n; i++)
            sum[i] += win[i];
        free(mine);
    }
    size_t bad_cp = 0, bad_sum = 0;
    for (size_t i = 0; i < n; i++)
        bad_cp += cp[i] != src[i], bad_sum += sum[i] != src[i];
    CHECK(!bad_cp && !bad_sum, "tp %d KV %d: %zu elements not copied back, %zu not summed once", tp,
          c->KV, bad_cp, bad_sum);
    const TensorSpec *k = gpt_find_tensor(&part[tp - 1], "model.layers.1.self_attn.k_proj.weight"),
                     *o = gpt_find_tensor(&part[0], "model.layers.0.self_attn.o_proj.weight"),
                     *u = gpt_find_tensor(&part[0], "model.layers.0.mlp.up_proj.weight");
    int kvl = c->KV % tp ? 1 : c->KV / tp, shared = c->KV % tp != 0;
    CHECK(k && k->shape[0] == kvl * 16 && k->split == (shared ? TP_KVSHARE : TP_ROWS),
          "tp %d: k_proj %d rows", tp, k ? k->shape[0] : -1);
    CHECK(o && o->shape[1] == 64 / tp && u && u->shape[0] == c->F / tp, "o_proj / up_proj cut");
    int t = (int)(k - part[tp - 1].tensors), counted = 0;
    for (int r = 0; r < tp; r++)
        counted += gpt_tp_counts(&part[r], t, r);
    CHECK(counted == (shared ? c->KV : tp), "k_proj counted on %d ranks", counted);
    for (int r = 0; r < tp; r++)
        gpt_free(&part[r]);
    gpt_free(&whole);
    free(src), free(cp), free(sum), free(win);
}

TEST(tensor_parallel_layout) {
    for (int tie = 0; tie <= 1; tie++) {
        GPTConfig c = llama(2, 4, 2, 64, 100, tie);
        c.F = 96;
        tp_roundtrip(&c, 2);
        tp_roundtrip(&c, 4);
    }
    GPT m;
    GPTConfig c = llama(2, 6, 3, 96, 100, 0);
    CHECK(gpt_create_layout_tp(&m, &c, backend_cpu(), 2, 0) && strstr(loom_errmsg(), "kv"),
          "tp 2 of KV 3: %s", loom_errmsg());
}

typedef struct {
    GPT *m;
    Workspace *ws;
    int *tok, *tgt;
} LossCtx;

static double loss_of(void *p) {
    LossCtx *c = p;
    return gpt_forward(c->m, c->ws, c->tok, c->tgt);
}

// The gradient of the mean loss at the start of each named tensor, and recompute's bit for bit.
TEST(model_gradient) {
    GPTConfig c = llama(2, 4, 2, 32, 50, 0);
    c.F = 48;
    GPT m;
    Workspace ws, wr;
    CHECK(gpt_create(&m, &c, be) == 0, "create: %s", loom_errmsg());
    gpt_init_weights(&m, 5);
    for (size_t i = 0; i < m.nparams; i++) // O(1) weights: differences well above rounding
        m.params[i] += 0.3f * rng_normal(&rng);
    int B = 2, T = 8, tok[16], tgt[16];
    for (int i = 0; i < B * T; i++)
        tok[i] = (int)rng_below(&rng, 50), tgt[i] = (int)rng_below(&rng, 50);
    workspace_create(&ws, &m, B, T, 0);
    workspace_create(&wr, &m, B, T, 1);
    gpt_zero_grad(&m);
    gpt_forward(&m, &wr, tok, tgt);
    gpt_backward(&m, &wr, 1.0f / (B * T));
    float *g_rc = xalloc_floats(m.nparams), *g = xalloc_floats(m.nparams);
    memcpy(g_rc, m.grads, m.nparams * sizeof(float));
    gpt_zero_grad(&m);
    gpt_forward(&m, &ws, tok, tgt);
    gpt_backward(&m, &ws, 1.0f / (B * T));
    memcpy(g, m.grads, m.nparams * sizeof(float));
    CHECK(!memcmp(g, g_rc, m.nparams * sizeof(float)), "recompute changes the gradients");
    LossCtx lc = {&m, &ws, tok, tgt};
    for (int t = 0; t < m.ntensors; t++) {
        const TensorSpec *s = &m.tensors[t];
        size_t n = s->n < 64 ? s->n : 64; // the first rows' worth of each tensor
        CHECK(!fd_check(s->name, loss_of, &lc, m.params + s->off, g + s->off, n, 6, 3e-2, 3e-4),
              "%s", s->name);
    }
    free(g), free(g_rc);
    workspace_free(&ws, &m);
    workspace_free(&wr, &m);
    gpt_free(&m);
}

int main(void) {
    (void)randv, (void)dot; // gradcheck.h's helpers this test does not need
    be = backend_cpu();
    rng_seed(&rng, 17, 3);
    RUN(config_defaults_and_errors);
    RUN(tensor_table);
    RUN(tensor_parallel_layout);
    RUN(model_gradient);
    return test_summary();
}
