// workspace.c — the workspace of activations (gpt.h's Workspace): how many floats a layer, the
// head and the scratch need for a layout (whole, a tensor-parallel part, a sequence-parallel
// part, a pipeline stage's range of blocks), and the buffers' creation, sharing and release.
#include "gpt.h"

#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "block_impl.h"

// A layer's saved activations; tp > 1: a tensor-parallel rank's (its heads and MLP columns),
// whose LayerNorm/residual regions hold R = B·T/tp rows with sequence parallelism (else B·T).
// att: what the backend's attention backward needs (the CPU: (B,NH,T) row statistics).
static size_t layer_act_floats_tp(const GPTConfig *c, const Backend *be, int tp, size_t R, int B,
                                  int T) {
    if (gpt_is_llama(c)) return llama_layer_act_floats(c, be, tp, R, B, T);
    size_t BT = (size_t)B * T, C = (size_t)c->C, Cl = C / (size_t)tp;
    int a16 = gpt_act16(c, be, tp); // ln1, ln2, atty and fch_gelu in 16 bits
    int q16 = gpt_act16_qkv(c, be, tp), f16 = gpt_act16_fch(c, be, tp); // and qkv, fch
    // ln1, res2, ln2 | qkv, atty, fch, fch_gelu | 2×(mean, rstd) | att
    return R * C + 2 * gpt_act_floats(a16, R * C) + gpt_act_floats(q16, BT * 3 * Cl) +
           gpt_act_floats(f16, BT * 4 * Cl) + gpt_act_floats(a16, BT * Cl) +
           gpt_act_floats(a16, BT * 4 * Cl) + 4 * R +
           be->attention_saved_floats(B, T, c->H / tp, c->C / c->H);
}

int gpt_act16(const GPTConfig *c, const Backend *be, int tp) {
    return be && be->act16 && be->act16_mark && tp == 1 && !gpt_is_llama(c);
}
int gpt_act16_qkv(const GPTConfig *c, const Backend *be, int tp) {
    return gpt_act16(c, be, tp) && (be->act16 & ACT16_QKV);
}
int gpt_act16_fch(const GPTConfig *c, const Backend *be, int tp) {
    return gpt_act16(c, be, tp) && (be->act16 & ACT16_FCH);
}
size_t gpt_act_floats(int act16, size_t n) { return act16 ? (n + 7) / 8 * 4 : n; }
static size_t layer_act_floats(const GPTConfig *c, const Backend *be, int B, int T) {
    return layer_act_floats_tp(c, be, 1, (size_t)B * T, B, T);
}

// The head's: lnf, mean, rstd (of R rows), logits/probs of `rows` vocabulary rows, losses (and,
// with tensor parallelism, the cross-entropy's per-row max and (sum, target logit) partials).
static size_t head_floats_tp(const GPTConfig *c, int rows, int tp, size_t R, int B, int T) {
    size_t BT = (size_t)B * T;
    return R * c->C + 2 * R + BT * (size_t)rows + BT + (tp > 1 ? 3 * BT : 0);
}
static size_t head_floats(const GPTConfig *c, int B, int T) {
    return head_floats_tp(c, c->V, 1, (size_t)B * T, B, T);
}

// The layer backward's and the head's scratch: (B,T,7C) for GPT-2; sp: a sequence-parallel part's.
static size_t scratch_floats(const GPTConfig *c, size_t BT, int sp) {
    return gpt_is_llama(c) ? llama_scratch_floats(c, BT, sp) : BT * 7 * (size_t)c->C;
}

size_t workspace_floats(const GPTConfig *c, const Backend *be, int B, int T, int recompute) {
    size_t BT = (size_t)B * T, C = (size_t)c->C;
    size_t slots = recompute ? 1 : (size_t)c->L;
    return (size_t)(c->L + 1) * BT * C + slots * layer_act_floats(c, be, B, T) +
           head_floats(c, B, T) + BT * C + scratch_floats(c, BT, 0);
}

static void mark_act16(const Workspace *ws, const GPT *m, int nl, int head);

size_t workspace_shared_floats(const GPTConfig *c, const Backend *be, int B, int T, int recompute) {
    size_t BT = (size_t)B * T;
    size_t datt16 = gpt_act16_qkv(c, be, 1) ? gpt_act_floats(1, BT * c->C) : 0; // (datt16_floats)
    return head_floats(c, B, T) + scratch_floats(c, BT, 0) + datt16 +
           (recompute ? layer_act_floats(c, be, B, T) : 0);
}

size_t workspace_own_floats(const GPTConfig *c, const Backend *be, int B, int T, int recompute) {
    size_t BT = (size_t)B * T, C = (size_t)c->C;
    return (size_t)(c->L + 3) * BT * C + BT * C +
           (recompute ? 0 : (size_t)c->L * layer_act_floats(c, be, B, T));
}

int workspace_create_sharing(Workspace *ws, const GPT *m, const Workspace *share) {
    const GPTConfig *c = &m->cfg;
    int B = share->B, T = share->T, rc = share->recompute;
    size_t BT = (size_t)B * T;
    *ws = *share;
    ws->shares = 1;
    ws->stream = m->be->alloc((size_t)(share->b1 - share->b0 + 1) * BT * c->C);
    ws->dstream = m->be->alloc(BT * c->C);
    if (!rc) ws->layer = m->be->alloc((size_t)c->L * ws->layer_stride);
    if (!rc) mark_act16(ws, m, c->L, 0);
    ws->tokens = xcalloc(BT, sizeof(int));
    ws->targets = xcalloc(BT, sizeof(int));
    ws->floats = workspace_own_floats(c, m->be, B, T, rc);
    return 0;
}

int workspace_create(Workspace *ws, const GPT *m, int B, int T, int recompute) {
    return workspace_create_range(ws, m, B, T, recompute, 0, m->nblocks);
}

int workspace_create_range(Workspace *ws, const GPT *m, int B, int T, int recompute, int b0,
                           int b1) {
    const GPTConfig *c = &m->cfg;
    if (T > c->maxT) return loom_fail("--seq %d is longer than --block-size %d", T, c->maxT);
    if (B < 1 || T < 1) return loom_fail("--batch and --seq must be >= 1");
    int tp = m->tp.n > 1 ? m->tp.n : 1, sp = tp > 1 && m->tp.sp;
    if (sp && T % tp)
        return loom_fail("--sp splits every sequence over the tensor-parallel group: --seq %d is "
                         "not divisible by --tp %d",
                         T, tp);
    memset(ws, 0, sizeof *ws);
    ws->B = B;
    ws->T = T;
    ws->recompute = recompute;
    ws->b0 = b0;
    ws->b1 = b1;
    // R: rows of the residual stream and LayerNorm regions (sequence parallelism: B·T/tp)
    size_t BT = (size_t)B * T, C = (size_t)c->C, R = sp ? BT / (size_t)tp : BT;
    // layers l live in blocks l+1; this workspace holds layers [b0-1, b1-1) ∩ [0, L)
    int l0 = b0 - 1 < 0 ? 0 : b0 - 1, l1 = b1 - 1 > c->L ? c->L : b1 - 1;
    int nl = l1 > l0 ? l1 - l0 : 0;
    size_t hf = b1 == m->nblocks ? workspace_head_floats(m, B, T) : 1;
    ws->layer0 = l0;
    ws->layer_stride = workspace_layer_floats(m, B, T);
    ws->stream = m->be->alloc((size_t)(b1 - b0 + 1) * R * C);
    ws->layer = m->be->alloc((recompute ? 1 : (size_t)(nl ? nl : 1)) * ws->layer_stride);
    ws->head = m->be->alloc(hf);
    ws->dstream = m->be->alloc(R * C);
    ws->scratch = m->be->alloc(workspace_scratch_floats(m, B, T));
    mark_act16(ws, m, nl, b1 == m->nblocks);
    if (gpt_is_llama(c)) {
        ws->rope_pos = xcalloc((size_t)T, sizeof(int));
        ws->rope_freq = xcalloc((size_t)(c->C / c->H / 2), sizeof(float));
        llama_rope_tables(ws->rope_pos, ws->rope_freq, c, T, &m->cp);
    }
    ws->tokens = xcalloc(BT, sizeof(int));
    ws->targets = xcalloc(BT, sizeof(int));
    ws->floats = workspace_range_floats(m, B, T, recompute, b0, b1);
    return 0;
}

// Rows of the residual stream and LayerNorm regions: B·T, or B·T/tp with sequence parallelism.
static size_t held_rows(const GPT *m, int B, int T) {
    size_t BT = (size_t)B * T;
    return m->tp.n > 1 && m->tp.sp ? BT / (size_t)m->tp.n : BT;
}

// The GELU output's floats that a GPT-2 layer keeps in the scratch instead (recompute_gelu)
static size_t gelu_scratch_floats(const GPT *m, int B, int T) {
    int tp = m->tp.n > 1 ? m->tp.n : 1;
    return m->recompute_gelu && !gpt_is_llama(&m->cfg)
               ? gpt_act_floats(gpt_act16(&m->cfg, m->be, tp), (size_t)B * T * 4 * (m->cfg.C / tp))
               : 0;
}

// With a 16-bit qkv (gpt_act16_qkv) the layer backward's d(attention output) is 16-bit too, in
// the scratch after the GELU output's: the attention's inputs then all come in one type.
static size_t datt16_floats(const GPT *m, int B, int T) {
    return gpt_act16_qkv(&m->cfg, m->be, m->tp.n > 1 ? m->tp.n : 1)
               ? gpt_act_floats(1, (size_t)B * T * m->cfg.C)
               : 0;
}

// The 16-bit tensors (gpt_act16) of the nl layers this workspace holds (one slot with
// recompute), of the head when it has it, and the scratch's, marked on the backend.
static void mark_act16(const Workspace *ws, const GPT *m, int nl, int head) {
    if (!gpt_act16(&m->cfg, m->be, m->tp.n > 1 ? m->tp.n : 1)) return;
    for (int l = 0; l < (ws->recompute && nl ? 1 : nl); l++)
        layer_act16_mark(m, ws, ws->layer0 + l);
    if (head) head_act16_mark(m, ws);
    float *d = workspace_datt16(ws, m);
    if (d) m->be->act16_mark(d, (size_t)ws->B * ws->T * m->cfg.C);
}

size_t workspace_layer_floats(const GPT *m, int B, int T) {
    return layer_act_floats_tp(&m->cfg, m->be, m->tp.n > 1 ? m->tp.n : 1, held_rows(m, B, T), B,
                               T) -
           gelu_scratch_floats(m, B, T);
}

// The scratch of a workspace of m: the layer backward's and the head's, the GELU output, and
// the 16-bit d(attention output)
size_t workspace_scratch_floats(const GPT *m, int B, int T) {
    return scratch_floats(&m->cfg, (size_t)B * T, m->tp.n > 1 && m->tp.sp) +
           gelu_scratch_floats(m, B, T) + datt16_floats(m, B, T);
}

float *workspace_gelu_scratch(const Workspace *ws, const GPT *m) {
    return ws->scratch + scratch_floats(&m->cfg, (size_t)ws->B * ws->T, m->tp.n > 1 && m->tp.sp);
}

float *workspace_datt16(const Workspace *ws, const GPT *m) {
    return datt16_floats(m, ws->B, ws->T)
               ? workspace_gelu_scratch(ws, m) + gelu_scratch_floats(m, ws->B, ws->T)
               : NULL;
}

size_t workspace_head_floats(const GPT *m, int B, int T) {
    return head_floats_tp(&m->cfg, gpt_logit_rows(m), m->tp.n > 1 ? m->tp.n : 1, held_rows(m, B, T),
                          B, T);
}

size_t workspace_range_floats(const GPT *m, int B, int T, int recompute, int b0, int b1) {
    const GPTConfig *c = &m->cfg;
    size_t C = (size_t)c->C, R = held_rows(m, B, T);
    int l0 = b0 - 1 < 0 ? 0 : b0 - 1, l1 = b1 - 1 > c->L ? c->L : b1 - 1;
    int nl = l1 > l0 ? l1 - l0 : 0;
    size_t hf = b1 == m->nblocks ? workspace_head_floats(m, B, T) : 1;
    return (size_t)(b1 - b0 + 1) * R * C +
           (recompute ? 1 : (size_t)(nl ? nl : 1)) * workspace_layer_floats(m, B, T) + hf + R * C +
           workspace_scratch_floats(m, B, T);
}

void workspace_free(Workspace *ws, const GPT *m) {
    const Backend *be = m->be;
    be->release(ws->stream);
    be->release(ws->dstream);
    if (!ws->shares || !ws->recompute) be->release(ws->layer);
    if (!ws->shares) {
        be->release(ws->head), be->release(ws->scratch);
        free(ws->rope_pos), free(ws->rope_freq);
    }
    free(ws->tokens);
    free(ws->targets);
    memset(ws, 0, sizeof *ws);
}

float *workspace_probs(const Workspace *ws, const GPT *m) {
    size_t R = workspace_rows(ws, m);
    return ws->head + R * m->cfg.C + 2 * R;
}

float *workspace_stream(const Workspace *ws, const GPT *m, int l) {
    return ws->stream + (size_t)(l - (ws->b0 - 1)) * workspace_rows(ws, m) * m->cfg.C;
}
