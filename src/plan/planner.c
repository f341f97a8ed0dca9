// planner.c — the PipeDream-2BW cost model and the search over (w, d, tp, cp, b, recompute)
// (see planner.h).
#include "planner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "../parallel/pipeline.h"
#include "layout_mem.h"

// Splits [embed, L layers, head] into d stages minimising the slowest (linear partition).
static void split(const double *cost, int nb, int d, int *start) {
    double *pre = xcalloc((size_t)nb + 1, sizeof(double));
    for (int i = 0; i < nb; i++)
        pre[i + 1] = pre[i] + cost[i];
    double *best = xcalloc((size_t)(d + 1) * (nb + 1), sizeof(double));
    int *cut = xcalloc((size_t)(d + 1) * (nb + 1), sizeof(int));
    for (int i = 0; i <= nb; i++)
        best[nb + 1 + i] = pre[i];
    for (int k = 2; k <= d; k++)
        for (int i = k; i <= nb; i++) {
            double *bk = &best[(size_t)k * (nb + 1) + i];
            *bk = INFINITY;
            for (int j = k - 1; j < i; j++) {
                double c = fmax(best[(size_t)(k - 1) * (nb + 1) + j], pre[i] - pre[j]);
                if (c < *bk) *bk = c, cut[(size_t)k * (nb + 1) + i] = j;
            }
        }
    start[d] = nb;
    for (int k = d, i = nb; k >= 2; k--)
        i = start[k - 1] = cut[(size_t)k * (nb + 1) + i];
    start[0] = 0;
    free(pre), free(best), free(cut);
}

void plan_input_defaults(PlanInput *in) {
    *in = (PlanInput){.workers = 1,
                      .mem_bytes = 8.0 * 1073741824.0,
                      .bandwidth = 1e9 / 8,
                      .intra_bandwidth = 40e9 / 8,
                      .latency = 1e-4,
                      .net_cpu_per_byte = 1e-9,
                      .node_size = 1,
                      .cpu_group = 0,
                      .cores = 0,
                      .global_batch = 8,
                      .bucket_bytes = 25.0 * 1048576};
}

// How much slower than profiled a block runs while `ranks` ranks of `threads` threads each have
// their own cores out of `cores`: 1 alone, the profile's busy factor with every core busy,
// linear between.
static double contention(double busy, int ranks, int threads, int cores) {
    double need = (double)ranks * threads;
    if (cores <= 0 || need <= threads) return 1.0;
    if (need >= cores) return busy;
    return 1.0 + (busy - 1.0) * (need - threads) / (cores - threads);
}

// Seconds a ring all-reduce of `bytes` over n ranks takes at bus bandwidth bw, and the bytes
// each rank sends plus receives.
static double ring_allreduce(double bytes, int n, double bw, double latency) {
    if (n <= 1) return 0;
    return 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * latency;
}
static double ring_traffic(double bytes, int n) { return n > 1 ? 4.0 * (n - 1) / n * bytes : 0; }

// What every part of one plan's evaluation shares.
typedef struct {
    const Profile *p;
    const PlanInput *in;
    const ProfileRow *row;
    int w, d, b, K, nb;
    int tp, cp, nr;  // tensor- and context-parallel ranks; nr = w·cp reduce gradients
    double f, share; // contention factor; > 1: time-shared cores
    double *fwd, *bwd, *cost, *wp; // per block: seconds per micro-batch, parameters (the part's)
    int dp_inter, pp_inter;        // the dp / pp links cross machines
    int cp_inter;                  // the cp ring crosses machines (tp stays within one)
    double dp_bw, pp_bw, cp_bw, P; // link bandwidths; total parameters (the tp part's)
} Eval;

// d == 1: data parallelism alone (compute, all-reduce, what of it is exposed, update, memory).
static void eval_dp(const Eval *e, double *compute, double *reduce, double *exposed,
                    double *update) {
    const PlanInput *in = e->in;
    double work = 0;
    for (int i = 0; i < e->nb; i++)
        work += e->cost[i];
    work *= e->K;
    *reduce = ring_allreduce(e->P * 4, e->nr, e->dp_bw, in->latency);
    double comm_cpu = e->dp_inter ? ring_traffic(e->P * 4, e->nr) * in->net_cpu_per_byte : *reduce;
    *compute = e->share > 1 ? e->share * e->row->busy * (work + comm_cpu) : work * e->f + comm_cpu;
    *exposed = 0;
    if (e->nr > 1 && e->dp_inter) {
        // buckets of consecutive blocks in backward order (as data_parallel.c forms them),
        // each starting when its lowest block's backward of the last micro-batch is done
        double speed = *compute / work, t = 0, link = 0, cap = in->bucket_bytes / 4;
        for (int i = e->nb - 1; i >= 0;) {
            double size = e->wp[i];
            t += e->bwd[i] * speed;
            while (i - 1 >= 0 && size + e->wp[i - 1] <= cap)
                size += e->wp[--i], t += e->bwd[i] * speed;
            double begin = link > t ? link : t;
            link = begin + ring_allreduce(size * 4, e->nr, e->dp_bw, in->latency);
            i--;
        }
        *exposed = link > t ? link - t : 0;
    }
    *update = e->P * e->p->update_s_per_param * e->f;
}

// Tensor and context parallelism's blocking transfers per step (K micro-batches, L layers):
// 1D tp all-reduces 4 × (b,T/cp,C) per layer, forward and backward, over the tp ranks of one
// machine; the cp ring passes each rank's K/V chunk (b,T/cp,2C/tp) cp−1 hops forward and again
// in backward with its gradient (3(cp−1) hops). Neither is overlapped with compute here.
static void eval_tpcp(const Eval *e, double *tp_s, double *cp_s) {
    const PlanInput *in = e->in;
    double L = e->p->cfg.L, C = e->p->cfg.C, tok = (double)e->b * e->p->T / e->cp;
    *tp_s = e->K * L * 4 * ring_allreduce(tok * C * 4, e->tp, in->intra_bandwidth, in->latency);
    double hop = tok * 2 * C / e->tp * 4 / e->cp_bw + in->latency;
    *cp_s = e->K * L * 3.0 * (e->cp - 1) * hop;
}

// Memory per rank: the dry-run's (layout_mem.h) for this plan's layout.
static int plan_memory(const Eval *e, const char *stage_layers, int rc, double *mem) {
    const Backend *be = e->in->be ? e->in->be : backend_select("cpu", 1);
    LayoutShape s = {.dp = e->w,
                     .pp = e->d,
                     .schedule = SCHED_2BW,
                     .stage_layers = e->d > 1 ? stage_layers : NULL,
                     .tp = e->tp,
                     .cp = e->cp,
                     .B = e->b,
                     .T = e->p->T,
                     .K = e->K,
                     .recompute = rc};
    LayoutMemory m;
    if (!be || layout_memory(&e->p->cfg, be, &s, &m)) return -1;
    *mem = layout_total(&m);
    return 0;
}

// Stage s of a pipeline (d > 1): its time per micro-batch with transfers, its batch's
// reductions and their CPU cost.
static void eval_stage(const Eval *e, double t, double params, int s, double *period, double *red,
                       double *ccpu) {
    const PlanInput *in = e->in;
    const GPTConfig *c = &e->p->cfg;
    double V = c->V, C = c->C, boundary = e->b * (double)e->p->T / e->cp * C * 4.0;
    int d = e->d, links = (s > 0) + (s < d - 1); // boundaries: activations out, gradients back
    double p2p = links * (boundary / e->pp_bw + in->latency);
    *period = t * e->f + p2p;
    // a batch's reductions: the stage over its w replicas, the tied embedding between the
    // first and the last stage; and what moving all of it costs the CPU
    int tied = s == 0 || s == d - 1;
    double tie = tied ? ring_allreduce(V * C * 4, 2, e->pp_bw, in->latency) : 0;
    *red = ring_allreduce(params * 4, e->nr, e->dp_bw, in->latency) + tie;
    double net =
        (e->dp_inter ? ring_traffic(params * 4, e->nr) : 0) +
        (e->pp_inter ? (tied ? ring_traffic(V * C * 4, 2) : 0) + 2.0 * e->K * links * boundary : 0);
    double shm = (e->dp_inter ? 0 : ring_allreduce(params * 4, e->nr, e->dp_bw, in->latency)) +
                 (e->pp_inter ? 0 : tie + e->K * p2p);
    *ccpu = net * in->net_cpu_per_byte + shm;
}

// The blocks' profiled costs and the links of layout (w, d): fills e (caller frees its arrays).
static void eval_setup(Eval *e, int rc) {
    const PlanInput *in = e->in;
    const GPTConfig *c = &e->p->cfg;
    // CPU: ranks sharing cores run at the busy factor, and beyond one rank per core they
    // time-share (then the cores' total work bounds the step)
    int group = in->cpu_group > 0 ? in->cpu_group : in->node_size;
    if (group > in->workers) group = in->workers;
    if (group < 1) group = 1;
    int cores = in->cores > 0 ? in->cores : e->p->cores;
    e->f = contention(e->row->busy, group, e->p->threads, cores);
    e->share = cores > 0 ? (double)group * e->p->threads / cores : 0;
    int nb = e->nb, split = e->tp * e->cp;
    e->fwd = xcalloc((size_t)nb, sizeof(double)), e->bwd = xcalloc((size_t)nb, sizeof(double));
    e->cost = xcalloc((size_t)nb, sizeof(double)), e->wp = xcalloc((size_t)nb, sizeof(double));
    double wparams[3];
    layout_block_params(c, e->tp, wparams); // the tp part's (checked by the caller)
    for (int i = 0; i < nb; i++) { // profiled seconds per micro-batch, one rank alone, ÷ tp·cp
        int k = i == 0 ? PROF_EMBED : i == nb - 1 ? PROF_HEAD : PROF_LAYER;
        e->fwd[i] = e->row->fwd[k] / split;
        e->bwd[i] = (e->row->bwd[k] + (rc && k == PROF_LAYER ? e->row->fwd[k] : 0)) / split;
        e->cost[i] = e->fwd[i] + e->bwd[i];
        e->wp[i] = wparams[k];
        e->P += e->wp[i];
    }
    // links: tp ranks are consecutive (on one machine), cp neighbours tp apart, the dp
    // replicas of a stage span w·tp·cp ranks, pipeline neighbours w apart; network transfers
    // overlap compute but cost CPU per byte, shared-memory ones are CPU work
    int ns = in->node_size > 0 ? in->node_size : 1, span = e->w * split;
    e->dp_inter = span > ns || ns % span, e->pp_inter = span * e->d > ns;
    e->cp_inter = split > ns || ns % split;
    e->dp_bw = e->dp_inter ? in->bandwidth : in->intra_bandwidth;
    e->pp_bw = e->pp_inter ? in->bandwidth : in->intra_bandwidth;
    e->cp_bw = e->cp_inter ? in->bandwidth : in->intra_bandwidth;
}

// A layout the planner considers: tp divides the heads and the ranks of one machine, T divides
// into 2·cp chunks (with a pipeline too: every stage a tp part, its ring over cp).
static int layout_ok(const Profile *p, const PlanInput *in, int tp, int cp) {
    int ns = in->node_size > 0 ? in->node_size : 1;
    return tp >= 1 && cp >= 1 && !(p->cfg.H % tp) && !(ns % tp) && !(p->T % (2 * cp));
}

int plan_evaluate(const Profile *p, const PlanInput *in, int w, int d, int b, int rc, Plan *out) {
    return plan_evaluate_layout(p, in, w, d, 1, 1, b, rc, out);
}

int plan_evaluate_layout(const Profile *p, const PlanInput *in, int w, int d, int tp, int cp, int b,
                         int rc, Plan *out) {
    const ProfileRow *row = profile_row(p, b);
    if (!row || in->global_batch % (w * b) || !layout_ok(p, in, tp, cp)) return 0;
    Eval e = {.p = p, .in = in, .row = row, .w = w, .d = d, .b = b, .nb = p->cfg.L + 2};
    e.tp = tp, e.cp = cp, e.nr = w * cp;
    e.K = in->global_batch / (w * b);
    if ((d > 1 && e.K < d) || d > p->cfg.L || d > 64) return 0;
    eval_setup(&e, rc);
    int nb = e.nb, K = e.K, start[65];
    split(e.cost, nb, d, start);
    double worst_mem = 0, reduce = 0, update = 0, compute = 0, exposed = 0, tp_s = 0, cp_s = 0;
    eval_tpcp(&e, &tp_s, &cp_s); // a step's, all layers (a stage: its layers' share)
    if (d == 1) {
        eval_dp(&e, &compute, &reduce, &exposed, &update);
        compute += tp_s + cp_s;
    }
    double period = 0, work_sum = 0, comm_cpu_max = 0;
    char *sl = out->stage_layers;
    sl[0] = 0;
    for (int s = 0; s < d; s++) {
        double t = 0, params = 0;
        int layers = 0;
        for (int i = start[s]; i < start[s + 1]; i++) {
            t += e.cost[i];
            params += e.wp[i];
            layers += i > 0 && i < nb - 1;
        }
        if (d > 1) {
            if (s == d - 1) params += (double)p->cfg.V * p->cfg.C / tp; // the tied wte replica
            t += (tp_s + cp_s) * layers / ((double)K * p->cfg.L); // its layers' tp / cp transfers
            double per, red, ccpu;
            eval_stage(&e, t, params, s, &per, &red, &ccpu);
            period = fmax(period, per);
            comm_cpu_max = fmax(comm_cpu_max, ccpu);
            work_sum += K * t + ccpu;
            reduce = fmax(reduce, red);
            update = fmax(update, params * p->update_s_per_param * e.f);
        }
        snprintf(sl + strlen(sl), sizeof out->stage_layers - strlen(sl), "%s%d", s ? "," : "",
                 layers);
    }
    if (d > 1) {
        // 2BW, no flush: the slowest stage (with its transfers) sets the pace; time-shared
        // cores may bound it instead. Over the network a batch's reductions run during the
        // next batch (what outlasts it is exposed), in chunks that share each rank's link with
        // the activations the pipeline waits for: while they run, each such message queues
        // behind up to two 1 MiB chunks (pipeline.c). Over shared memory their cost is CPU
        // work, already in comm_cpu.
        compute = K * period + comm_cpu_max;
        if (e.share > 1) compute = fmax(compute, e.share * row->busy * work_sum / d);
        if (e.pp_inter || e.dp_inter) {
            double ahead = fmin(2.0 * 1048576 / in->bandwidth, reduce); // queued per message
            double hol = K * (d > 2 ? 2 : 1) * ahead;
            exposed =
                fmax(0, reduce - compute) + hol * (compute > 0 ? fmin(1, reduce / compute) : 1);
        }
    }
    free(e.fwd), free(e.bwd), free(e.cost), free(e.wp);
    if (plan_memory(&e, sl, rc, &worst_mem)) return 0;
    out->w = w, out->d = d, out->b = b, out->K = K, out->recompute = rc;
    out->tp = tp, out->cp = cp, out->tp_s = tp_s, out->cp_s = cp_s;
    out->compute_s = compute;
    out->allreduce_s = reduce;
    out->exposed_s = exposed;
    out->update_s = update;
    out->cpu_slow = e.share > 1 ? e.share * row->busy : e.f;
    out->step_s = compute + exposed + update;
    out->tokens_per_s = (double)in->global_batch * p->T / out->step_s;
    out->mem_bytes = worst_mem;
    return worst_mem <= in->mem_bytes;
}

static int by_throughput(const void *a, const void *b) {
    double x = ((const Plan *)a)->tokens_per_s, y = ((const Plan *)b)->tokens_per_s;
    return x < y ? 1 : x > y ? -1 : 0;
}

#define PLAN_CAP 4096

int plan_search(const Profile *p, const PlanInput *in, Plan *out, int max) {
    Plan *all = xcalloc(PLAN_CAP, sizeof(Plan));
    int n = 0, N = in->workers;
    for (int d = 1; d <= N; d++)
        for (int tp = 1; tp <= N / d; tp++)
            for (int cp = 1; cp <= N / (d * tp); cp++) {
                if (N % (d * tp * cp)) continue;
                int w = N / (d * tp * cp);
                for (int i = 0; i < p->nrows; i++)
                    for (int rc = 0; rc <= 1; rc++)
                        if (n < PLAN_CAP &&
                            plan_evaluate_layout(p, in, w, d, tp, cp, p->rows[i].b, rc, &all[n]))
                            n++;
            }
    qsort(all, (size_t)n, sizeof(Plan), by_throughput);
    int k = n < max ? n : max;
    memcpy(out, all, (size_t)k * sizeof(Plan));
    free(all);
    return k;
}
