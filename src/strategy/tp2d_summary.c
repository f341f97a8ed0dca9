// tp2d_summary.c — strat_tp2d.c's end-of-run line: per rank, what the part holds and what the
// grid's collectives moved per layer and micro-batch, against SUMMA's table and 1D's.
#include <stdio.h>
#include <sys/resource.h>

#include "../common.h"
#include "tp2d_impl.h"

// What SUMMA moves into one rank per layer and micro-batch: each of a linear's 6 collectives
// (forward: broadcast X and W; backward: broadcast X and W again, reduce dX and dW) carries
// (q−1)/q of a row's or column's share (1/q) of X (B·T, K) or W (K, M), and the two split
// norms all-reduce row partials (B/q·T each; ring: 2(q−1)/q of them): a LayerNorm 2 forward and
// 2 backward, LLaMA's RMSNorm 1 and 2. --recompute runs the forward again in the backward: 2
// more broadcasts per linear, the forward's partials again. T: the tokens of a sequence the grid
// runs (--cp: its chunks). The linears (K, M): GPT-2's qkv, proj, fc, fcproj; LLaMA's q|k|v,
// o, gate|up, down.
static double summa_table(const StrategyConfig *c, const GPTConfig *g, int q, int T) {
    double BT = (double)c->batch * T, C = g->C, f = (q - 1.0) / q, sum = 0;
    double F = g->F, QKV = (g->H + 2.0 * g->KV) * (C / g->H);
    double KM[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
    double LM[4][2] = {{C, QKV}, {C, C}, {C, 2 * F}, {F, C}};
    int llama = gpt_is_llama(g), fw = llama ? 1 : 2, bw = 2;
    int ops = c->recompute ? 8 : 6, ln = (c->recompute ? 2 : 1) * fw + bw;
    for (int k = 0; k < 4; k++) {
        const double *km = llama ? LM[k] : KM[k];
        sum += ops * f * (BT * km[0] + km[0] * km[1]) / (2 * q);
    }
    return sum + 2 * ln * (BT / q) * 2 * f;
}

// Per rank: memory, and what the grid's collectives moved per layer and micro-batch (training
// only) against the table above and against 1D's 4 ring all-reduces of (B,T,C) over the same
// tp ranks; the embedding's and head's per micro-batch.
void tp2d_summary(Strategy *s, double exposed_s, double step_s) {
    T2 *t = s->impl;
    if (t->co2) tp_co2_summary(t->co2, s, exposed_s, step_s);
    if (!s->lead) return;
    if (t->sw) return tp2ds_report(t->sw); // what swapping held and moved (this rank)
    const StrategyConfig *c = s->cfg;
    const GPTConfig *g = &t->whole->cfg;
    int q = t->g.q, P = s->grid->tp;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double micro = (double)t->steps * c->grad_accum, L = g->L, MiB = 4.0 / 1048576;
    double Nl = (double)c->batch / q * t->T, Vq = gpt2d_vrows(g, q);
    double per = micro > 0 ? MiB / micro / L : 0,
           d1 = 4 * 2.0 * (P - 1) / P * c->batch * t->T * g->C, pb, gb; // held: bytes
    tp2dz_held(t->z, &t->part, t->gown ? t->hi - t->lo : 0, &pb, &gb);
    fprintf(
        stderr,
        "loom: tp %d (2d, %dx%d)%s x dp %d | per rank: a part of %.2f MiB (the embedding %.2f of "
        "it) of the whole model's %.2f MiB, holding params %.3f MiB and grads %.3f MiB, "
        "activations %.1f MiB (the head's logits %.1f of "
        "them), AdamW moments %.3f MiB (zero %d over dp %d), peak RSS %.1f MiB | received per "
        "layer and micro-batch %.3f MiB (broadcasts %.3f, reduce-scatters %.3f, norm "
        "all-reduces %.3f) against SUMMA's 6(q-1)/q per linear %.3f MiB; 1D tp %d would "
        "all-reduce 4 x 2(P-1)/P x (B,T,C) = %.3f MiB; embedding and head %.3f MiB per "
        "micro-batch\n",
        P, q, q, t->ring ? " x cp (its chunks)" : "", s->grid->dp, t->part.nparams * MiB,
        t->part.blocks[0].n * MiB, t->whole->nparams * MiB, pb / 1048576, gb / 1048576,
        t->ws.floats * MiB, Nl * Vq * MiB, 2.0 * (double)(t->hi - t->lo) * MiB, c->zero,
        s->grid->dp, ru.ru_maxrss / 1024.0, (t->bcast + t->rscat + t->allred + t->other) * per,
        t->bcast * per, t->rscat * per, t->allred * per, summa_table(c, g, q, t->T) * MiB, P,
        d1 * MiB, micro > 0 ? t->ends / micro * MiB : 0);
}
