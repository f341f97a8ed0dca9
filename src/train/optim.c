// optim.c — AdamW over the model's tensor table, LR schedules and clipping (see optim.h).
#include "optim.h"

#include <math.h>
#include <string.h>

float lr_at(const OptConfig *c, int step) {
    if (c->warmup > 0 && step < c->warmup) return c->lr * (float)(step + 1) / (float)c->warmup;
    if (c->schedule == LR_CONSTANT) return c->lr;
    int decay = c->total_steps - c->warmup;
    double ratio = decay > 0 ? (double)(step - c->warmup) / decay : 1.0;
    if (ratio > 1.0) ratio = 1.0;
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return (float)(c->min_lr + coeff * (c->lr - c->min_lr));
}

void adamw_create(AdamW *o, const GPT *m, const OptConfig *cfg) {
    memset(o, 0, sizeof *o);
    o->cfg = *cfg;
    o->n = m->nparams;
    o->m = m->be->alloc(o->n);
    o->v = m->be->alloc(o->n);
}

void adamw_free(AdamW *o, const GPT *m) {
    m->be->release(o->m);
    m->be->release(o->v);
    memset(o, 0, sizeof *o);
}

float clip_scale(float grad_norm, float max_norm) {
    if (max_norm <= 0.f) return 1.0f;
    float s = max_norm / (grad_norm + 1e-6f); // same rule as torch.nn.utils.clip_grad_norm_
    return s < 1.0f ? s : 1.0f;
}

void adamw_step(AdamW *o, GPT *m, float lr, float grad_scale) {
    o->t++;
    const OptConfig *c = &o->cfg;
    for (int b = 0; b < m->nblocks; b++) { // block by block: each owns its slices
        const Block *blk = &m->blocks[b];
        for (int i = blk->t0; i < blk->t0 + blk->nt; i++) {
            const TensorSpec *t = &m->tensors[i];
            size_t in_block = t->off - blk->off;
            float wd = t->ndim >= 2 ? c->weight_decay : 0.f;
            m->be->adamw(blk->params + in_block, blk->grads + in_block, o->m + t->off,
                         o->v + t->off, t->n, lr, c->beta1, c->beta2, c->eps, wd, grad_scale, o->t);
        }
    }
}

void adamw_create_range(AdamW *o, const GPT *m, const OptConfig *cfg, size_t lo, size_t hi) {
    memset(o, 0, sizeof *o);
    o->cfg = *cfg;
    o->n = hi - lo;
    o->m = m->be->alloc(o->n);
    o->v = m->be->alloc(o->n);
}

void adamw_step_range(AdamW *o, const GPT *m, size_t lo, size_t hi, float *params, float *grads,
                      float lr, float grad_scale) {
    o->t++;
    const OptConfig *c = &o->cfg;
    for (int i = 0; i < m->ntensors; i++) {
        const TensorSpec *t = &m->tensors[i];
        size_t a = t->off > lo ? t->off : lo, b = t->off + t->n < hi ? t->off + t->n : hi;
        if (b <= a) continue;
        float wd = t->ndim >= 2 ? c->weight_decay : 0.f;
        m->be->adamw(params + (a - lo), grads + (a - lo), o->m + (a - lo), o->v + (a - lo), b - a,
                     lr, c->beta1, c->beta2, c->eps, wd, grad_scale, o->t);
    }
}
