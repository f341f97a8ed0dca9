// strat_whole.c — the pieces strat_dp.c and strat_co2.c share (see strat_whole.h).
#include "strat_whole.h"

#include <math.h>
#include <stdlib.h>

#include "../common.h"
#include "../optim/loss_scale.h"
#include "../testhooks.h"
#include "ckpt_save.h"

int whole_create(Strategy *s, Whole *w, const Comm *grad_comm, int zero) {
    const StrategyConfig *c = s->cfg;
    GPT *m = s->model;
    w->owner = s;
    if (c->offload) return whole_swap_create(s, w, grad_comm, zero);
    w->grad_ranks = grad_comm->size;
    if (zero < 3 && gpt_alloc_whole(m, 1, zero < 2)) return -1; // whole params (grads < ZeRO 2)
    w->dp = dp_create(m, grad_comm, zero, c->bucket_mb);
    size_t lo, hi;
    dp_owned_range(w->dp, &lo, &hi);
    adamw_create(&w->opt, m, &c->opt, lo, hi);
    float *params = zero >= 3 ? dp_shard_params(w->dp) : m->params;
    size_t plo = zero >= 3 ? lo : 0, phi = zero >= 3 ? hi : m->nparams;
    if (s->resume_dir) { // the parameters it keeps and its moments, in one read, streamed
        CkptWant want = {.lo = {plo, lo, lo, 0},
                         .hi = {phi, hi, hi, 0},
                         .dst = {params, w->opt.m, w->opt.v, NULL},
                         .be = m->be};
        if (checkpoint_read_into(s->resume_dir, m->nparams, &want)) return -1;
        w->opt.t = s->resume->opt_t;
    } else if (s->data->params(s->data->ctx, plo, phi, params)) {
        return -1;
    }
    if (workspace_create(&w->ws, m, c->batch, c->seq, c->recompute)) return -1;
    size_t BT = (size_t)c->batch * c->seq;
    w->inputs = xmalloc(BT * sizeof(int));
    w->targets = xmalloc(BT * sizeof(int));
    return 0;
}

void whole_free(Strategy *s, Whole *w) {
    swap_free(w->sw);
    w->sw = NULL;
    if (!w->dp) return; // swapping: nothing else was set up
    free(w->inputs), free(w->targets);
    workspace_free(&w->ws, s->model);
    adamw_free(&w->opt, s->model);
    dp_free(w->dp);
}

double whole_grads(Strategy *s, Whole *w, int step) {
    const StrategyConfig *c = s->cfg;
    if (w->sw) return whole_swap_grads(s, w, step);
    int K = c->grad_accum;
    float scale = 1.0f / (float)((size_t)c->batch * c->seq * K * w->grad_ranks);
    scale *= (float)loss_scale_factor(c->loss_scale); // a power of two: exact
    if (testhook_overflow(step + 1)) scale = INFINITY;
    dp_zero_grad(w->dp);
    double loss = 0;
    for (int j = 0; j < K; j++) {
        s->data->train(s->data->ctx, step, j, w->inputs, w->targets);
        dp_begin_micro(w->dp, j == K - 1);
        loss += gpt_forward_backward(s->model, &w->ws, w->inputs, w->targets, scale);
    }
    dp_finish_grads(w->dp);
    return loss / K;
}

void whole_update(Strategy *s, Whole *w, int step, double loss, StepRecord *r) {
    whole_update_sumsq(s, w, step, loss, w->sw ? swap_grad_sumsq(w->sw) : dp_grad_sumsq(w->dp), r);
}

void whole_update_sumsq(Strategy *s, Whole *w, int step, double loss, double sumsq, StepRecord *r) {
    // the gradients carry the loss scale S (1 without): the norm and the update see them / S,
    // exactly, S being a power of two
    double S = loss_scale_factor(s->cfg->loss_scale);
    r->norm = sqrt(sumsq) / S;
    r->lr = lr_at(&s->cfg->opt, step);
    r->applied = isfinite(loss) && isfinite(r->norm);
    float scale = clip_scale((float)r->norm, s->cfg->opt.grad_clip) / (float)S;
    if (w->sw)
        whole_swap_apply(w, r, scale);
    else if (r->applied)
        dp_optimizer_step(w->dp, &w->opt, r->lr, scale);
}

double whole_evaluate(Strategy *s, Whole *w) {
    if (w->sw) return whole_swap_evaluate(s, w);
    double sum = 0;
    int n = s->cfg->val_windows;
    for (int k = 0; k < n; k++) {
        s->data->val(s->data->ctx, k, w->inputs, w->targets);
        sum += gpt_forward(s->model, &w->ws, w->inputs, w->targets);
    }
    return n ? sum / n : NAN;
}

int whole_save(Strategy *s, Whole *w, const char *dir, CkptMeta *meta, int writes,
               CkptExtraFn extra, void *extra_ctx, CkptExtraFn rank_files, void *rank_ctx,
               int keep) {
    CkptShard sh;
    if (w->sw) {
        sh = whole_swap_shard(w);
        meta->opt_t = *swap_opt_t(w->sw);
    } else {
        size_t lo, hi;
        dp_owned_range(w->dp, &lo, &hi);
        sh = (CkptShard){.lo = lo,
                         .hi = hi,
                         .params = dp_owned_params(w->dp),
                         .m = w->opt.m,
                         .v = w->opt.v,
                         .be = s->model->be};
        meta->opt_t = w->opt.t;
    }
    return ckpt_save_collective(dir, s->grid->dp_comm, writes ? &sh : NULL, meta, extra, extra_ctx,
                                rank_files, rank_ctx, keep);
}

int whole_full_params(Strategy *s, Whole *w, float *host, int grads) {
    GPT *m = s->model;
    if (w->sw)
        return grads ? loom_fail("--dump-grads is not available with --offload")
                     : whole_swap_full_params(w, host, 0, m->nparams);
    if (grads)
        m->be->download(host, m->grads, m->nparams);
    else
        dp_full_params(w->dp, host); // collective for ZeRO-3
    return 0;
}
