// optim.c — AdamW over the model's tensor table, LR schedules and clipping (see optim.h).
#include "optim.h"

#include <math.h>
#include <string.h>

#include "../common.h"

float lr_at(const OptConfig *c, int step) {
    if (c->warmup > 0 && step < c->warmup) return c->lr * (float)(step + 1) / (float)c->warmup;
    if (c->schedule == LR_CONSTANT) return c->lr;
    int decay = c->total_steps - c->warmup;
    double ratio = decay > 0 ? (double)(step - c->warmup) / decay : 1.0;
    if (ratio > 1.0) ratio = 1.0;
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return (float)(c->min_lr + coeff * (c->lr - c->min_lr));
}

float clip_scale(float grad_norm, float max_norm) {
    if (max_norm <= 0.f) return 1.0f;
    float s = max_norm / (grad_norm + 1e-6f); // same rule as torch.nn.utils.clip_grad_norm_
    return s < 1.0f ? s : 1.0f;
}

void adamw_create(AdamW *o, GPT *m, const OptConfig *cfg, size_t lo, size_t hi) {
    memset(o, 0, sizeof *o);
    o->cfg = *cfg;
    o->lo = lo, o->hi = hi;
    o->m = m->be->alloc(hi - lo);
    o->v = m->be->alloc(hi - lo);
    for (int b = 0; b < m->nblocks; b++) {
        BlockState *st = &m->blocks[b].state;
        size_t s, n = range_isect(m->blocks[b].off, m->blocks[b].off + m->blocks[b].n, lo, hi, &s);
        st->m = n ? o->m + (s - lo) : NULL;
        st->v = n ? o->v + (s - lo) : NULL;
    }
}

void adamw_free(AdamW *o, GPT *m) {
    if (o->m) m->be->release(o->m);
    if (o->v) m->be->release(o->v);
    for (int b = 0; b < m->nblocks; b++)
        m->blocks[b].state.m = m->blocks[b].state.v = NULL;
    memset(o, 0, sizeof *o);
}

// Each tensor's share of [lo, hi), with weight decay on the matrices only: in one call per
// PIECES tensors where the backend has adamw_multi (one launch on a GPU), else one a tensor.
enum { PIECES = 64 };
void adamw_update_range(const GPT *m, const OptConfig *c, int t, size_t lo, size_t hi, float *w,
                        const float *g, float *mo, float *vo, float lr, float grad_scale) {
    const Backend *be = m->be;
    AdamwPiece pc[PIECES];
    int np = 0;
    for (int i = 0; i < m->ntensors; i++) {
        const TensorSpec *ts = &m->tensors[i];
        size_t a, n = range_isect(ts->off, ts->off + ts->n, lo, hi, &a);
        if (!n) continue;
        float wd = ts->ndim >= 2 ? c->weight_decay : 0.f;
        if (!be->adamw_multi) {
            be->adamw(w + (a - lo), g + (a - lo), mo + (a - lo), vo + (a - lo), n, lr, c->beta1,
                      c->beta2, c->eps, wd, grad_scale, t);
            continue;
        }
        pc[np++] = (AdamwPiece){a - lo, n, wd};
        if (np == PIECES) {
            be->adamw_multi(w, g, mo, vo, pc, np, lr, c->beta1, c->beta2, c->eps, grad_scale, t);
            np = 0;
        }
    }
    if (np) be->adamw_multi(w, g, mo, vo, pc, np, lr, c->beta1, c->beta2, c->eps, grad_scale, t);
}

void adamw_step_blocks(const OptConfig *c, int t, GPT *m, float lr, float grad_scale) {
    for (int b = 0; b < m->nblocks; b++) { // block by block, through the re-pointable pointers
        const BlockState *st = &m->blocks[b].state;
        if (st->own_lo == st->own_hi) continue;
        adamw_update_range(m, c, t, st->own_lo, st->own_hi, st->own_params, st->own_grads, st->m,
                           st->v, lr, grad_scale);
    }
}

void adamw_step(AdamW *o, GPT *m, float lr, float grad_scale) {
    o->t++;
    adamw_step_blocks(&o->cfg, o->t, m, lr, grad_scale);
}
