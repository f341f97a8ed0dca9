// strat_peer.c — loom peer: this process is one peer of a swarm (swarm/swarm.h). It trains its
// own copy of the whole model with its own AdamW for τ steps, then hands its Δ = a − x to the
// swarm, which averages the Δs of the round's peers in the background during the next round;
// one round later the average is applied with CO2's outer rule (parallel/co2.h:
// co2_outer_update) — the same rule, staleness and losses as --co2 under MPI, over whoever is in
// the round. Windows: the peer at position p of the round's N participants (sorted by id)
// reads what MPI rank p of N reads under --co2.
// A stop signal (stop.h) is this peer's own business: it stops at the next round end when the
// round's remaining steps fit well within the grace period, else at once; either way it saves
// the state of its last round end (a peer's work between round ends exists only in its local
// weights, which no resume uses) and leaves the swarm with a BYE. The peer's state: strat_peer.h;
// its checkpoint (save, resume): peer_ckpt.c.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common.h"
#include "../parallel/co2.h"
#include "../stop.h"
#include "../swarm/spill.h"
#include "../swarm/swarm.h"
#include "../testhooks.h"
#include "compose.h"
#include "strat_peer.h"
#include "strat_whole.h"

// Micro-batch j of step `step`: window base + (step − round start)·N·K + j·N + pos.
static void peer_train(void *ctx, int step, int j, int *inputs, int *targets) {
    Strategy *s = ctx;
    Peer *p = s->impl;
    uint64_t N = (uint64_t)p->N, K = (uint64_t)s->cfg->grad_accum;
    uint64_t r0 = (uint64_t)p->round * (uint64_t)s->cfg->tau; // first step of the round
    uint64_t w = p->base + ((uint64_t)step - r0) * N * K + (uint64_t)j * N + (uint64_t)p->pos;
    if (j == 0) testhook_fault(0, step + 1); // LOOM_FAULT_KILL=0:STEP (each peer is rank 0)
    p->orig->window(p->orig->ctx, w, inputs, targets);
}

static void peer_val(void *ctx, int w, int *inputs, int *targets) {
    Strategy *s = ctx;
    ((Peer *)s->impl)->orig->val(((Peer *)s->impl)->orig->ctx, w, inputs, targets);
}

static int peer_wants(const StrategyConfig *c) { return c->peer; }

static const Supports PEER_SUPPORTS = {
    .self = {F_PEER, F_COUNT},
    .features = FEAT(F_PEER) | FEAT(F_OFFLOAD) | FEAT(F_OFFLOAD_DEVICE) | FEAT(F_RECOMPUTE),
    .runs_with = "a peer trains a whole model, in memory or swapped (--offload), with "
                 "--recompute"};

static int peer_check(const StrategyConfig *c) {
    if (c->tau < 1 || c->tau > 4096) return loom_fail("--tau must be in 1..4096 for loom peer");
    if (!(c->topk_frac > 0 && c->topk_frac <= 1))
        return loom_fail("--topk-frac %g: must be in (0, 1]", c->topk_frac);
    if (c->topk_2bit && c->outer_compress != 2)
        return loom_fail("--topk-values 2bit needs --outer-compress topk");
    if (c->save_every > 0 && c->save_every % c->tau)
        return loom_fail("--save-every %d: a peer saves at round ends, so it must be a multiple "
                         "of --tau %d",
                         c->save_every, c->tau);
    return 0;
}

static int resync(Strategy *s, Peer *p);

static void drop3(const float *a, const float *b, const float *c, size_t lo, size_t hi) {
    spill_drop(a + lo, (hi - lo) * sizeof(float)), spill_drop(b + lo, (hi - lo) * sizeof(float));
    if (c) spill_drop(c + lo, (hi - lo) * sizeof(float));
}

// x ← src (see strat_peer.h).
void peer_x_set(Strategy *s, Peer *p, const float *src) {
    GPT *m = s->model;
    if (!p->w.sw) {
        peer_copy_whole(m, m->params, src);
        return;
    }
    for (size_t lo = 0, hi; lo < m->nparams && !p->w.failed; lo = hi) {
        hi = peer_span_end(m, lo);
        if (whole_swap_set_params(&p->w, src + lo, lo, hi - lo)) p->w.failed = 1;
        spill_drop(src + lo, (hi - lo) * sizeof(float));
    }
}

// Δ = a − x, formed in avg's buffer (x read from the tier, or downloaded from the device, into
// it first). NULL: the tier failed.
static float *x_delta(Strategy *s, Peer *p) {
    GPT *m = s->model;
    for (size_t lo = 0, hi; lo < m->nparams; lo = hi) {
        hi = peer_span_end(m, lo);
        const float *x = m->params + lo;
        if (p->w.sw) {
            if (whole_swap_full_params(&p->w, p->avg + lo, lo, hi - lo)) return NULL;
            x = p->avg + lo;
        } else if (!m->be->host_memory) {
            m->be->download(p->avg + lo, x, hi - lo);
            x = p->avg + lo;
        }
        p->cc.be->sub_scaled(p->avg + lo, p->anchor + lo, x, 1.0f, hi - lo);
        drop3(p->avg, p->anchor, NULL, lo, hi);
    }
    return p->avg;
}

// m ← β·m + Δ̄/λ (clipped); a ← a − α·m over the whole model (co2.h's rule), span by span.
static void outer_update(Strategy *s, Peer *p) {
    GPT *m = s->model;
    size_t P = m->nparams;
    double *sq = NULL;
    if (p->cc.adaptive) {
        sq = xcalloc((size_t)2 * m->ntensors, sizeof(double));
        for (size_t lo = 0, hi; lo < P; lo = hi) {
            hi = peer_span_end(m, lo);
            co2_norms_add(m, p->cc.be, p->mom + lo, p->avg + lo, lo, hi, sq);
            drop3(p->mom, p->avg, NULL, lo, hi);
        }
    }
    for (size_t lo = 0, hi; lo < P; lo = hi) {
        hi = peer_span_end(m, lo);
        gpt_extra_range(m, EXTRA_CO2_ANCHOR, p->anchor + lo, lo, hi);
        gpt_extra_range(m, EXTRA_CO2_MOMENTUM, p->mom + lo, lo, hi);
        gpt_extra_range(m, EXTRA_CO2_AVERAGE, p->avg + lo, lo, hi);
        co2_outer_update(&p->cc, m, sq);
        drop3(p->anchor, p->mom, p->avg, lo, hi);
    }
    free(sq);
}

// Applies round r's average (the swarm's, waited for) under the state lock; the round's
// records (kept in [1]) go to the loop with the set's mean losses. Returns the wait or < 0.
static double apply_average(Strategy *s, Peer *p, int64_t r) {
    double mean[4096];
    int n = p->n[1];
    for (int i = 0; i < n; i++)
        mean[i] = p->rec[1][i].loss;
    SwarmRound info = {0};
    int rc = swarm_average(p->sw, r, p->avg, mean, n, &info);
    if (rc == SWARM_LOST) return resync(s, p) ? -1 : -2;
    if (rc) return -1;
    swarm_state_lock(p->sw);
    outer_update(s, p);
    swarm_state_unlock(p->sw, p->round, p->base);
    for (int i = 0; i < n; i++) {
        StepRecord *rec = &p->rec[1][i];
        snprintf(p->extra[i], sizeof p->extra[i],
                 "\"local_loss\":%.6f,\"round\":%lld,\"view\":%d,\"averaged\":%d,\"wait_ms\":%.1f,"
                 "\"sent_mb\":%.3f",
                 rec->loss, (long long)r, info.view, info.averaged, info.wait_s * 1e3,
                 info.sent / 1048576.0);
        rec->loss = mean[i];
        rec->extra = p->extra[i];
        strategy_emit(s, rec);
    }
    p->n[1] = 0;
    return info.wait_s;
}

// The end of round r: hand the Δ over, apply the previous round's average (emitting that
// round's records), keep this round's records for its own average, x ← a. Returns 0, 1 when
// this peer re-synced with the swarm instead (the round's work is dropped), or -1.
static int round_end(Strategy *s, Peer *p, double *wait) {
    GPT *m = s->model;
    size_t P = m->nparams;
    *wait = 0;
    if (swarm_diverged(p->sw)) { // a commit carried another anchor hash than this peer's
        loom_fail("this peer's anchor differs from the swarm's");
        return resync(s, p) ? -1 : 1;
    }
    int64_t r = ++p->round;
    float *delta = x_delta(s, p);
    if (!delta) return -1;
    double loss[4096];
    for (int i = 0; i < p->n[0]; i++)
        loss[i] = p->rec[0][i].loss;
    swarm_contribute_ef(p->sw, r, delta, p->ef, loss, p->n[0]); // (int8, topk: Δ + ef compressed)
    p->base += (uint64_t)p->n[0] * (uint64_t)p->N * (uint64_t)s->cfg->grad_accum;
    if (r >= 2) {
        double w = apply_average(s, p, r - 1);
        if (w == -2) return 1; // re-synced: the swarm's state replaced this round
        if (w < 0) return -1;
        *wait = w;
    } else {
        swarm_state_lock(p->sw);
        swarm_state_unlock(p->sw, r, p->base);
    }
    StepRecord *t = p->rec[1];
    p->rec[1] = p->rec[0], p->n[1] = p->n[0];
    p->rec[0] = t, p->n[0] = 0;
    if (r == testhook_peer_diverge()) p->anchor[0] += 1e-3f; // LOOM_FAULT_DIVERGE
    swarm_anchor_hash(p->sw, r, swarm_hash(p->anchor, P));
    peer_x_set(s, p, p->anchor); // x ← a(r)
    p->begun = 0;
    return p->w.failed ? -1 : 0;
}

// This peer holds the swarm's state after round end st->round (a(b), m(b) in anchor / mom; a
// join or a re-sync): it computes from round b + 1 on, from x = a(b), and applies round b's
// average at the end of round b + 1 as every peer does. Steps before are the swarm's past.
static void adopt(Strategy *s, Peer *p, const SwarmState *st, const char *how) {
    const StrategyConfig *c = s->cfg;
    p->first_round = st->first_round;
    p->round = st->round;
    p->base = st->window;
    p->n[0] = p->n[1] = 0;
    p->begun = 0;
    peer_x_set(s, p, p->anchor);
    int64_t start = p->round * c->tau;
    s->next_step = start < c->steps ? (int)start : c->steps; // the swarm's clock
    fprintf(stderr, "loom peer %s: %s the swarm at round %lld (step %d)\n", c->peer_id, how,
            (long long)st->first_round, s->next_step);
}

// The swarm moved on while this peer could not follow: take its current state.
static int resync(Strategy *s, Peer *p) {
    SwarmState st;
    fprintf(stderr, "loom peer %s: %s; re-syncing\n", s->cfg->peer_id, loom_errmsg());
    if (swarm_resync(p->sw, p->anchor, p->mom, &st)) return -1;
    swarm_state_lock(p->sw);
    swarm_state_unlock(p->sw, st.round, st.window);
    adopt(s, p, &st, "re-synced with");
    return 0;
}

// A joiner holding a(b), m(b) while the swarm already computes round R > b applies the averages
// of rounds b … R − 1 (as every peer did) and enters at round R + 1, the next boundary: no peer
// waits for a round it would start late. Windows advance by each round's participants. If an
// average is no longer held, it enters where it stands (b + 1). The averages up to R − 2 are
// there at once; R − 1's is decided during round R, and it waits for that one only (had the
// others started R + 1 meanwhile, a second look at their round would have it wait for R's
// average, decided a round later, and so on: it enters R + 1 late instead).
static void catch_up(Strategy *s, Peer *p, SwarmState *st) {
    const StrategyConfig *c = s->cfg;
    int64_t b0 = st->round;
    int n, waited = 0;
    for (int64_t R; (R = swarm_catch_up(p->sw, st->round, &n)) > st->round + waited &&
                    (st->round + 1) * c->tau < c->steps;) {
        waited |= R == st->round + 1; // (R − 1's average: decided during round R)
        double none[1];
        if (getenv("LOOM_PEER_VERBOSE"))
            fprintf(stderr,
                    "loom peer %s: catching up: the swarm computes round %lld; round %lld's "
                    "average%s\n",
                    c->peer_id, (long long)R, (long long)st->round, waited ? " (waited for)" : "");
        if (swarm_average(p->sw, st->round, p->avg, none, 0, NULL)) break;
        outer_update(s, p);
        st->window += (uint64_t)c->tau * (uint64_t)(n > 0 ? n : 1) * (uint64_t)c->grad_accum;
        st->round++;
    }
    if (st->round > b0)
        fprintf(stderr,
                "loom peer %s: caught up from round %lld to %lld with the swarm's averages: it "
                "computes from the next round boundary\n",
                c->peer_id, (long long)b0, (long long)st->round);
}

static int peer_create(Strategy *s) {
    const StrategyConfig *c = s->cfg;
    Peer *p = xcalloc(1, sizeof *p);
    s->impl = p;
    size_t P = s->model->nparams;
    if (peer_place(s, p)) return -1;
    GPT *m = s->model;
    p->cc = whole_co2_config(c);
    // the backend of the peer's own arrays (outer state, the swarm's Δs and averages: host
    // memory or files): the model's when its buffers are host memory, else the CPU's (the model
    // on a device: a round end downloads x, x_delta, and uploads the new anchor, copy_whole)
    p->cc.be = m->be->host_memory ? m->be : backend_host();
    for (int i = 0; i < 2; i++)
        p->rec[i] = xcalloc((size_t)c->tau, sizeof(StepRecord));
    p->extra = xcalloc((size_t)c->tau, sizeof *p->extra);
    p->desc = peer_run_desc(s);
    SwarmConfig sc = {.id = c->peer_id,
                      .listen = c->listen,
                      .advertise = c->advertise,
                      .bootstrap = c->bootstrap,
                      .secret = c->secret,
                      .peer_timeout = c->peer_timeout,
                      .P = P,
                      .tau = c->tau,
                      .run_desc = p->desc,
                      .compress = c->outer_compress,
                      .topk_frac = c->topk_frac,
                      .topk_2bit = c->topk_2bit,
                      .exchange = c->peer_exchange,
                      .sums_int8 = c->sums_int8 && c->peer_exchange,
                      .verbose = getenv("LOOM_PEER_VERBOSE") != NULL};
    SwarmState st;
    int joined;
    p->sw = swarm_open(&sc, p->anchor, p->mom, &st, &joined);
    if (!p->sw) return -1;
    // (with --listen HOST:0, the port the system picked: what --bootstrap needs)
    fprintf(stderr, "loom peer %s: others reach it at %s\n", c->peer_id, swarm_address(p->sw));
    if (joined) {
        catch_up(s, p, &st);
        swarm_enter(p->sw, &st);
        adopt(s, p, &st, "joined");
        s->start = s->next_step, s->next_step = -1;
    } else { // a new swarm, from this peer's initial or resumed state
        int has_avg = 0;
        int64_t r = s->resume_dir ? peer_resume(s, p, &has_avg) : 0;
        if (r < 0) return -1;
        p->round = r, p->first_round = r + 1;
        p->base = s->resume_dir ? s->resume->data_window : 0;
        swarm_start_state(p->sw, r, p->base, has_avg ? p->avg : NULL);
    }
    // (its own error feedback, whether it restarts the swarm or joins it: what it dropped)
    if (p->ef && s->resume_dir && peer_ef_load(s->resume_dir, p->ef, P, c->peer_id)) return -1;
    swarm_share_state(p->sw, p->anchor, p->mom);
    swarm_state_lock(p->sw);
    swarm_state_unlock(p->sw, p->round, p->base);
    if (c->min_peers > 1) {
        fprintf(stderr, "loom peer %s: waiting for %d peers\n", c->peer_id, c->min_peers);
        if (swarm_wait_peers(p->sw, c->min_peers, 600))
            return loom_fail("--min-peers %d: fewer peers joined within 600 s", c->min_peers);
    }
    p->orig = s->data;
    p->data = *s->data;
    p->data.ctx = s, p->data.train = peer_train, p->data.val = peer_val;
    s->data = &p->data;
    return 0;
}

static int peer_step(Strategy *s, int step, int boundary) {
    (void)boundary;
    Peer *p = s->impl;
    const StrategyConfig *c = s->cfg;
    if (!p->begun) {
        swarm_round_begin(p->sw, p->round + 1, &p->pos, &p->N);
        if (p->pos < 0) p->pos = 0, p->N = p->N > 0 ? p->N : 1; // not counted yet: a guess
        p->begun = 1;
    }
    double t0 = now_sec();
    double loss = whole_grads(s, &p->w, step);
    StepRecord r = {.step = step + 1, .loss = loss};
    if (p->w.failed) return -1;
    whole_update(s, &p->w, step, loss, &r);
    if (p->w.failed) return -1;
    if (!r.applied) { // this peer stops; the swarm goes on without it
        r.must_stop = 1;
        strategy_emit(s, &r);
        return 0;
    }
    uint64_t r0 = (uint64_t)p->round * (uint64_t)c->tau;
    r.window = p->base + ((uint64_t)step + 1 - r0) * (uint64_t)p->N * (uint64_t)c->grad_accum;
    StepRecord *rec = &p->rec[0][p->n[0]++];
    double wait = 0;
    if (((step + 1) % c->tau == 0 || step + 1 == c->steps)) {
        *rec = r; // (round_end moves it with the round's records)
        int rc = round_end(s, p, &wait);
        if (rc < 0) return -1;
        if (rc) return 0; // re-synced: this round's records are gone
        rec = &p->rec[1][p->n[1] - 1];
    }
    r.seconds = now_sec() - t0;
    r.exposed = wait;
    *rec = r;
    p->step_s = p->step_s > 0 ? 0.8 * p->step_s + 0.2 * r.seconds : r.seconds;
    if (stop_signal()) { // at a round end, or when the rest of the round would not fit the grace
        int left = (int)((p->round + 1) * c->tau) - (step + 1);
        if (p->n[0] == 0 || left * p->step_s > stop_grace_left() / 2) s->stop = 1;
    }
    return 0;
}

// After the last round: its average, applied; x = the final anchor.
static void peer_drain(Strategy *s, int final) {
    Peer *p = s->impl;
    if (!final || p->round < 1) return;
    double w = apply_average(s, p, p->round);
    if (w == -2) w = apply_average(s, p, p->round); // re-synced at the end: its last average
    if (w < 0) {
        fprintf(stderr, "loom peer %s: %s\n", s->cfg->peer_id, loom_errmsg());
        exit(EXIT_IO);
    }
    p->drain_s = w;
    peer_x_set(s, p, p->anchor);
    if (p->w.failed) {
        fprintf(stderr, "loom peer %s: %s\n", s->cfg->peer_id, loom_errmsg());
        exit(EXIT_IO);
    }
}

static double peer_evaluate(Strategy *s) { return whole_evaluate(s, &((Peer *)s->impl)->w); }

static int peer_full_params(Strategy *s, float *host, int grads) {
    return whole_full_params(s, &((Peer *)s->impl)->w, host, grads);
}

static int peer_param_source(Strategy *s, ParamSource *src) {
    return whole_param_source(&((Peer *)s->impl)->w, src);
}

static uint64_t peer_window(Strategy *s, int step) {
    Peer *p = s->impl;
    (void)step;
    return p->base;
}

static void peer_describe(const Strategy *s, char *buf, size_t n) {
    const Peer *p = s->impl;
    SwarmStats st = swarm_stats(p->sw);
    snprintf(buf, n, "peer %s: swarm of %d, tau %d", s->cfg->peer_id, st.view, s->cfg->tau);
}

static void peer_summary(Strategy *s, double exposed_s, double step_s) {
    Peer *p = s->impl;
    SwarmStats st = swarm_stats(p->sw);
    if (p->w.sw) whole_swap_summary(&p->w);
    fprintf(stderr,
            "loom peer %s: waited %.1f%% of step time for averages, and %.1f s for the last one | "
            "sent %.1f MiB, received %.1f MiB | rejected %ld messages, %ld handshakes | %ld "
            "connections lost | %ld anchor mismatches\n",
            s->cfg->peer_id, step_s > 0 ? 100 * exposed_s / step_s : 0, p->drain_s,
            st.sent / 1048576.0, st.received / 1048576.0, st.rejected, st.denied, st.lost,
            st.diverged);
}

static void peer_destroy(Strategy *s) {
    Peer *p = s->impl;
    if (!p) return;
    if (p->sw) {
        swarm_finish(p->sw, 3 * s->cfg->peer_timeout);
        swarm_close(p->sw);
    }
    whole_free(s, &p->w);
    spill_free(p->anchor), spill_free(p->mom), spill_free(p->avg), spill_free(p->ef);
    for (int i = 0; i < 2; i++)
        free(p->rec[i]);
    free(p->extra), free(p->desc);
    if (p->orig) s->data = p->orig;
    free(p);
    s->impl = NULL;
}

static void peer_failed(Strategy *s, int code, const char *msg) {
    (void)s;
    die(code, "%s", msg);
}

const StrategyOps STRATEGY_PEER = {.name = "peer",
                                   .wants = peer_wants,
                                   .supports = &PEER_SUPPORTS,
                                   .check = peer_check,
                                   .create = peer_create,
                                   .step = peer_step,
                                   .drain = peer_drain,
                                   .evaluate = peer_evaluate,
                                   .save = peer_save,
                                   .full_params = peer_full_params,
                                   .param_source = peer_param_source,
                                   .comm_failed = peer_failed,
                                   .describe = peer_describe,
                                   .summary = peer_summary,
                                   .destroy = peer_destroy,
                                   .data_window = peer_window};
