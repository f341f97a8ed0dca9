// layout_mem.c — a rank's memory under a parallel layout (see layout_mem.h).
#include "layout_mem.h"

#include <math.h>
#include <string.h>

#include "../common.h"
#include "../model/gpt_2d.h"
#include "../parallel/data_parallel.h"
#include "../parallel/pipeline.h"

static int layout_check(const GPTConfig *c, const LayoutShape *s, int *q) {
    if (s->dp < 1 || s->pp < 1 || s->tp < 1 || s->cp < 1 || s->B < 1 || s->T < 1 || s->K < 1)
        return loom_fail("layout dp %d pp %d tp %d cp %d, micro-batch %d x %d, grad-accum %d: "
                         "every count must be >= 1",
                         s->dp, s->pp, s->tp, s->cp, s->B, s->T, s->K);
    *q = 1;
    if (s->tp_2d) {
        *q = (int)lround(sqrt((double)s->tp));
        if (*q < 2 || *q * *q != s->tp)
            return loom_fail("--tp-mode 2d needs --tp q*q >= 4 (got --tp %d)", s->tp);
        if (c->H % *q || c->C % *q)
            return loom_fail(
                "--tp-mode 2d with --tp %d: q = %d must divide --heads %d and --dim %d", s->tp, *q,
                c->H, c->C);
        if (s->sp) return loom_fail("--sp goes with --tp-mode 1d");
    }
    if (s->sp && s->tp < 2)
        return loom_fail("--sp splits the sequence over the tensor-parallel group: it needs --tp "
                         ">= 2 (got --tp %d)",
                         s->tp);
    if (s->T % (2 * s->cp))
        return loom_fail("--cp %d cuts every sequence into 2 x %d chunks: --seq %d is not "
                         "divisible by %d",
                         s->cp, s->cp, s->T, 2 * s->cp);
    if (s->T > c->maxT) return loom_fail("--seq %d is longer than --block-size %d", s->T, c->maxT);
    return 0;
}

// Activation floats of one micro-batch on blocks [b0, b1) of m (the part), T tokens per rank.
static double stage_acts(const GPT *m, const LayoutShape *s, int q, int T, int b0, int b1) {
    const GPTConfig *c = &m->cfg;
    double BT = (double)s->B * T, C = c->C;
    double f = (double)workspace_range_floats(m, s->B, T, s->recompute, b0, b1);
    int l0 = b0 - 1 < 0 ? 0 : b0 - 1, l1 = b1 - 1 > c->L ? c->L : b1 - 1, nl = l1 - l0;
    double slots = s->recompute || nl < 1 ? 1 : nl;
    if (s->tp_2d) // each layer's saved activations over the q×q grid
        f -= slots * (double)workspace_layer_floats(m, s->B, T) * (1 - 1.0 / (q * q));
    if (s->cp > 1) // the ring's buffers (ring_attention.c): K/V, dK/dV and the arriving
        // accumulators, two of each (B,T,2C/tp), and one chunk pair's partial out and LSE
        f += 6 * BT * 2 * C / s->tp + BT * C / s->tp + BT * (double)(c->H / s->tp);
    return f;
}

// Stage s's (pp > 1) weights, gradients and moments as pipeline.c and pipeline_zero.c allocate
// them; n: the parameters of its blocks, maxb its largest block, embed stage 0's embedding
// block, wte: the tied table's part (the last stage keeps a replica, whole at every stage).
static void stage_state(const LayoutShape *s, int st, double n, double maxb, double embed,
                        double wte, int W, double *p, double *g, double *o) {
    int replica = st == s->pp - 1 && st != 0, nver = s->schedule == SCHED_2BW ? 2 : 1;
    int shard = s->zero >= 1 && W > 1;
    double held = n + (replica ? wte : 0), rep = replica ? wte : 0;
    double own = shard ? ceil(n / W) : n, wown = replica ? (shard ? ceil(wte / W) : wte) : 0;
    *p = 4.0 * held * nver;
    *g = 4.0 * held * (nver == 2 ? 2 : 1);
    // ZeRO-2: the shard, a block in flight and its piece, stage 0's embedding (2bw: two shards,
    // two embedding and two wte gradients); ZeRO-3: the weight shard (2bw: one per version and
    // two wte replicas), one gathered block
    if (shard && s->zero >= 2)
        *g = 4.0 * (nver * (own + (st == 0 ? embed : 0) + rep) + maxb + fmin(maxb, own));
    if (shard && s->zero >= 3) *p = 4.0 * (nver * (own + rep) + maxb);
    *o = 8.0 * (own + wown);
}

// 2D tensor parallelism's part (strat_tp2d.c, tp2d_zero.c) of P parameters and largest layer
// maxb on a q×q grid, over W replicas: ZeRO 1 keeps a reduced slice beside the whole gradient;
// ZeRO 2 the gradient slice, the embedding block's (wte's V/q × C/q block, wpe's C/q columns),
// the final LayerNorm's and one layer's transient gradients and a receive buffer; ZeRO 3 the
// parameter slice and those three blocks gathered. No whole wte gradient of the head's (2D's
// head writes into the embedding block's).
static void tp2d_state(const GPTConfig *c, int q, double P, double maxb, int W, int zero, double *p,
                       double *g, double *o) {
    double embed = ((double)gpt2d_vrows(c, q) + c->maxT) * (c->C / q), head = 2.0 * (c->C / q);
    double own = zero >= 1 && W > 1 ? ceil(P / W) : P, ends = embed + head + maxb;
    *p = 4.0 * (zero >= 3 ? own + ends : P);
    *g = 4.0 * (zero >= 2 ? own + ends + fmin(fmax(embed, maxb), own) : P + (own < P ? own : 0));
    *o = 8.0 * own;
}

// The parameters of blocks [b0, b1) of m (2D: each layer's ÷ q²); *max_block: the largest.
static double range_params(const GPT *m, int q, int b0, int b1, double *max_block) {
    double n = 0;
    *max_block = 0;
    for (int b = b0; b < b1; b++) {
        double nb = (double)m->blocks[b].n;
        if (m->blocks[b].kind == BLOCK_LAYER) nb = ceil(nb / ((double)q * q));
        n += nb;
        if (nb > *max_block) *max_block = nb;
    }
    return n;
}

int layout_memory(const GPTConfig *c, const Backend *be, const LayoutShape *s, LayoutMemory *out) {
    int q = 1;
    if (layout_check(c, s, &q)) return -1;
    GPT m;
    if (gpt_create_layout_tp(&m, c, be, s->tp_2d ? 1 : s->tp, 0)) return -1;
    m.tp.sp = s->sp; // the workspace's sizes hold sequence parallelism's rows
    memset(out, 0, sizeof *out);
    double maxb, P = range_params(&m, q, 0, m.nblocks, &maxb);
    double wte = (double)gpt_vocab_rows(&m) * c->C;
    int W = s->dp * s->cp, T = s->T / s->cp; // ZeRO shards over dp x cp; tokens per rank
    out->part_params = (size_t)P;
    double best = -1;
    for (int st = 0; st < s->pp; st++) {
        int b0 = 0, b1 = m.nblocks;
        if (s->pp > 1 && pipeline_partition(&m, s->pp, st, s->stage_layers, &b0, &b1)) {
            gpt_free(&m);
            return -1;
        }
        double p, g, o, n = range_params(&m, q, b0, b1, &maxb);
        int inflight = s->pp == 1 ? 1 : s->schedule == SCHED_GPIPE ? s->K : s->pp - st;
        if (s->pp == 1 && s->tp_2d)
            tp2d_state(c, q, P, maxb, W, s->zero, &p, &g, &o);
        else if (s->pp == 1)
            dp_memory_model((size_t)P, (size_t)range_params(&m, q, 0, 1, &(double){0}), (size_t)wte,
                            (size_t)maxb, W, s->zero, &p, &g, &o);
        else
            stage_state(s, st, n, maxb, range_params(&m, q, 0, 1, &(double){0}),
                        gpt_tied(c) ? wte : 0, W, &p, &g, &o); // untied: no replica
        double a = 4.0 * inflight * stage_acts(&m, s, q, T, b0, b1);
        if (p + g + o + a > best) {
            best = p + g + o + a;
            *out = (LayoutMemory){.params = p,
                                  .grads = g,
                                  .opt = o,
                                  .acts = a,
                                  .stage = st,
                                  .part_params = out->part_params};
        }
    }
    gpt_free(&m);
    return 0;
}

int layout_block_params(const GPTConfig *c, int tp, double out[3]) {
    GPT m;
    if (gpt_create_layout_tp(&m, c, NULL, tp, 0)) return -1;
    out[0] = (double)m.blocks[0].n;
    out[1] = c->L > 0 ? (double)m.blocks[1].n : 0;
    out[2] = (double)m.blocks[m.nblocks - 1].n;
    gpt_free(&m);
    return 0;
}
