// test_act16_layout.c — the model's side of 16-bit activations (Backend.act16) without a GPU:
// a stand-in backend (the CPU's table with act16 set and act16_mark recording the marks) and a
// GPT-2 workspace, then
//   * every mark lies inside the buffer that holds it (a layer's slot, the head, the scratch);
//   * no two marked tensors overlap (each takes n/2 floats, gpt_act_floats);
//   * the marks are the ones the layout promises: ln_1, the attention output, ln_2 and the GELU
//     output of every layer and the head's ln_f; with ACT16_QKV also every layer's qkv and the
//     scratch's d(attention output); with ACT16_FCH every layer's GELU input; with
//     --recompute-gelu the GELU output in the scratch;
//   * the workspace's floats shrink by exactly the layers' 16-bit tensors' halves (less the
//     scratch's d(attention output), which only exists with ACT16_QKV).
// Nothing runs on these buffers: a CPU kernel would read a 16-bit tensor as fp32.
#include "../src/backend/backend.h"
#include "../src/common.h"
#include "../src/model/gpt.h"
#include "test.h"

enum { MAXM = 256 };
static struct {
    const float *p;
    size_t n;
} marks[MAXM];
static int nmarks;
static void record(const float *p, size_t n) {
    for (int i = 0; i < nmarks; i++)
        if (marks[i].p == p) return; // (marked again by a sharing workspace: one mark)
    if (nmarks < MAXM) marks[nmarks].p = p, marks[nmarks++].n = n;
}

static const GPTConfig CFG = {.L = 3, .H = 2, .C = 64, .V = 97, .maxT = 40};
enum { B = 2, T = 24 };

// A workspace on a CPU table whose act16 is `bits` (0: none); its floats, its marks in `marks`
static size_t layout(int bits, int recompute_gelu, int *ok) {
    static Backend be;
    be = *backend_cpu();
    be.act16 = bits;
    be.act16_mark = bits ? record : NULL;
    GPT m;
    Workspace ws;
    nmarks = 0;
    *ok = gpt_create(&m, &CFG, &be) == 0;
    m.recompute_gelu = recompute_gelu;
    *ok = *ok && workspace_create(&ws, &m, B, T, 0) == 0;
    if (!*ok) return 0;
    size_t floats = ws.floats;
    struct {
        const float *lo;
        size_t n;
    } bufs[] = {{ws.layer, (size_t)CFG.L * ws.layer_stride},
                {ws.head, workspace_head_floats(&m, B, T)},
                {ws.scratch, workspace_scratch_floats(&m, B, T)}};
    for (int i = 0; i < nmarks; i++) {
        size_t nf = gpt_act_floats(1, marks[i].n);
        int inside = 0;
        for (int k = 0; k < 3; k++)
            inside |= marks[i].p >= bufs[k].lo && marks[i].p + nf <= bufs[k].lo + bufs[k].n;
        CHECK(inside, "mark %d (%zu elements) outside every buffer", i, marks[i].n);
        for (int j = 0; j < i; j++) {
            size_t mf = gpt_act_floats(1, marks[j].n);
            CHECK(marks[i].p + nf <= marks[j].p || marks[j].p + mf <= marks[i].p,
                  "marks %d and %d overlap", i, j);
        }
    }
    workspace_free(&ws, &m), gpt_free(&m);
    return floats;
}

TEST(marks_and_sizes) {
    size_t BT = (size_t)B * T, C = (size_t)CFG.C, L = (size_t)CFG.L;
    int ok;
    size_t f0 = layout(0, 0, &ok);
    CHECK(ok && nmarks == 0, "no act16: %d marks", nmarks);
    size_t f1 = layout(ACT16_INPUTS, 0, &ok);
    CHECK(ok && nmarks == (int)(4 * L + 1), "act16: %d marks, expected %zu", nmarks, 4 * L + 1);
    // ln1, atty, ln2 (C each) and the GELU output (4C) a layer: half of each (ln_f is marked in
    // a head laid out for fp32)
    size_t half1 = L * (7 * BT * C / 2);
    CHECK(f0 - f1 == half1, "act16: %zu floats fewer, expected %zu", f0 - f1, half1);
    size_t f2 = layout(ACT16_INPUTS | ACT16_QKV, 0, &ok);
    CHECK(ok && nmarks == (int)(5 * L + 2), "act16 + qkv: %d marks, expected %zu", nmarks,
          5 * L + 2);
    size_t half2 = L * (3 * BT * C / 2) - BT * C / 2; // qkv's halves, less the d(atty) scratch
    CHECK(f1 - f2 == half2, "act16 + qkv: %zu floats fewer, expected %zu", f1 - f2, half2);
    size_t f3 = layout(ACT16_INPUTS | ACT16_FCH, 0, &ok);
    CHECK(ok && nmarks == (int)(5 * L + 1), "act16 + fch: %d marks, expected %zu", nmarks,
          5 * L + 1);
    CHECK(f1 - f3 == L * (4 * BT * C / 2), "act16 + fch: %zu floats fewer", f1 - f3);
    size_t f4 = layout(ACT16_INPUTS | ACT16_QKV | ACT16_FCH, 0, &ok);
    CHECK(ok && nmarks == (int)(6 * L + 2), "all: %d marks, expected %zu", nmarks, 6 * L + 2);
    CHECK(f1 - f4 == half2 + L * (4 * BT * C / 2), "all: %zu floats fewer", f1 - f4);
    layout(ACT16_INPUTS | ACT16_QKV, 1, &ok); // one GELU output in the scratch, before d(atty)
    CHECK(ok && nmarks == (int)(4 * L + 3), "with --recompute-gelu: %d marks, expected %zu", nmarks,
          4 * L + 3);
}

int main(void) {
    RUN(marks_and_sizes);
    return test_summary();
}
