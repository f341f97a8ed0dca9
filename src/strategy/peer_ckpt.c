// peer_ckpt.c — a peer's checkpoint (see strat_peer.h): the save (the anchor and its moments
// through whole_save, and peer_state.bin: the outer momentum and the round's average) and the
// resume that reads them back at a round end.
#include <stdio.h>
#include <unistd.h>

#include "../common.h"
#include "../io/checkpoint.h"
#include "strat_peer.h"

// A peer's own state next to its checkpoint: the outer momentum and the average of the round
// just ended (waited for), so that a resumed peer — or a swarm restarted from it — continues
// exactly; the parameters there are the anchor, the moments this peer's own AdamW's.
static int write_peer_file(const char *step_dir, void *ctx) {
    Strategy *s = ctx;
    Peer *p = s->impl;
    char path[4300];
    if (path_fmt(path, sizeof path, "%s/peer_state.bin", step_dir)) return -1;
    float *arrays[2] = {p->mom, p->avg};
    size_t lens[2] = {s->model->nparams, s->model->nparams};
    if (p->ef && peer_ef_save(step_dir, p->ef, s->model->nparams)) return -1;
    return state_file_write_fn(path, "peer", 0, 1, lens, 2, peer_arrays_fetch, arrays);
}

int peer_save(Strategy *s, const char *dir, CkptMeta *meta, int final, CkptExtraFn extra,
              void *extra_ctx, int keep) {
    Peer *p = s->impl;
    if (!final && p->n[0] > 0) { // stopped mid-round: the round's start, its latest moments
        int at = (int)(p->round * s->cfg->tau);
        fprintf(stderr,
                "loom peer %s: stopped %d steps into round %lld: saving the state of its start "
                "(step %d; those steps are trained again on resume)\n",
                s->cfg->peer_id, p->n[0], (long long)p->round + 1, at);
        peer_x_set(s, p, p->anchor);
        if (p->w.failed) return -1;
        meta->step = at;
        int *t = p->w.sw ? swap_opt_t(p->w.sw) : &p->w.opt.t;
        if (*t > at) *t = at; // (whole_save records it; a count <= the step)
    }
    if (final || p->round < 1) // the final anchor (or nothing averaged yet): weights only
        return whole_save(s, &p->w, dir, meta, 1, extra, extra_ctx, NULL, NULL, keep);
    double mean[1];
    int rc = swarm_average(p->sw, p->round, p->avg, mean, 0, NULL);
    if (rc == SWARM_LOST) // the swarm moved on: this peer's state is not the swarm's
        return whole_save(s, &p->w, dir, meta, 1, extra, extra_ctx, NULL, NULL, keep);
    if (rc) return -1;
    meta->co2_workers = 1, meta->co2_tau = s->cfg->tau;
    return whole_save(s, &p->w, dir, meta, 1, extra, extra_ctx, write_peer_file, s, keep);
}

// --resume: the checkpoint's weights are the anchor a(r) and its moments this peer's (read by
// whole_create); a peer's checkpoint also holds m(r) and round r's average. Returns the round
// (the checkpoint's step / τ) or -1.
int64_t peer_resume(Strategy *s, Peer *p, int *has_avg) {
    const StrategyConfig *c = s->cfg;
    *has_avg = 0;
    if (s->start % c->tau)
        return loom_fail("%s: step %d is not a round end of --tau %d (a peer resumes at round "
                         "ends)",
                         s->resume_dir, s->start, c->tau);
    char path[4300];
    if (path_fmt(path, sizeof path, "%s/peer_state.bin", s->resume_dir)) return -1;
    if (access(path, F_OK) == 0) {
        float *arrays[2] = {p->mom, p->avg};
        size_t lens[2] = {s->model->nparams, s->model->nparams};
        if (state_file_read_fn(path, "peer", 0, 1, lens, 2, peer_arrays_store, arrays)) return -1;
        *has_avg = 1;
    } else {
        fprintf(stderr, "loom peer %s: %s holds no peer state: new rounds start from its weights\n",
                c->peer_id, s->resume_dir);
    }
    return s->start / c->tau;
}
