// autoplan.c — `loom train --plan auto` (profile the model, measure this job's links, adopt the
// planner's best layout) and `--dry-run` (the per-rank memory plan), both before any training.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../backend/backend.h"
#include "../common.h"
#include "../io/weights.h"
#include "../parallel/data_parallel.h"
#include "../parallel/pipeline.h"
#include "../plan/commprobe.h"
#include "../plan/layout_mem.h"
#include "../plan/planner.h"
#include "trainer.h"

// --plan auto: rank 0 profiles the model and searches the plans for this job's ranks with
// global batch = --batch x --grad-accum x --dp; every rank adopts the best one.
void train_apply_auto_plan(TrainArgs *b) {
    Comm *world = comm_world(NULL, NULL);
    double msg[7] = {0};
    char layers[128] = "";
    Profile prof;
    PlanInput in;
    plan_input_defaults(&in);
    if (world->rank == 0) {
        GPTConfig cfg = {
            .L = b->layers, .H = b->heads, .C = b->dim, .V = b->vocab, .maxT = b->block_size};
        if (strcmp(b->arch, "gpt2"))
            die(EXIT_USAGE,
                "--plan auto with --arch %s: not available (the planner profiles "
                "GPT-2's block)",
                b->arch);
        if (b->init && init_read_config(b->init, b->heads, &cfg)) die_last(EXIT_INPUT);
        int threads = b->threads > 0 ? b->threads : 1;
        const Backend *be = backend_select(b->device, threads);
        if (!be) die_last(EXIT_USAGE);
        if (profile_measure(&prof, be, &cfg, b->seq, 8, threads)) die_last(EXIT_USAGE);
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
        const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        int local_n = local ? atoi(local) : 1;
        in.workers = world->size;
        in.mem_bytes = b->plan_mem_gb > 0 ? b->plan_mem_gb * 1073741824.0
                                          : (double)pages * psize / local_n * 0.8;
        in.bandwidth = b->plan_bandwidth_gbps * 1e9 / 8;
        in.node_size = local_n;
        in.global_batch = b->batch * b->grad_accum * b->dp;
        in.bucket_bytes = b->bucket_mb * 1048576.0;
        in.be = be;
    }
    if (world->size > 1) { // the job's real links (every rank takes part)
        CommProbe pr;
        comm_probe(world, 8 * 1048576.0, &pr);
        if (pr.local) {
            in.intra_bandwidth = pr.allreduce_bw;
        } else {
            in.bandwidth = pr.allreduce_bw;
            in.net_cpu_per_byte = pr.cpu_per_byte;
        }
        in.latency = pr.latency;
    }
    if (world->rank == 0) {
        Plan top[3];
        int k = plan_search(&prof, &in, top, 3);
        if (k < 1) die(EXIT_INPUT, "--plan auto: no plan fits the memory of this machine");
        const Plan best = top[0];
        msg[0] = best.w, msg[1] = best.d, msg[2] = best.b, msg[3] = best.K, msg[4] = best.recompute;
        msg[5] = best.tp, msg[6] = best.cp;
        snprintf(layers, sizeof layers, "%s", best.stage_layers);
        for (int i = 0; i < k; i++) // the chosen plan, then the runners-up
            fprintf(stderr,
                    "loom: --plan auto: %s dp %d x pp %d x tp %d x cp %d, micro-batch %d x %d, "
                    "recompute %s, stages %s: predicted %.0f tok/s (step %.3f s), %.1f MiB per "
                    "rank\n",
                    i ? "  next:" : "chosen:", top[i].w, top[i].d, top[i].tp, top[i].cp, top[i].b,
                    top[i].K, top[i].recompute ? "on" : "off",
                    top[i].d > 1 ? top[i].stage_layers : "-", top[i].tokens_per_s, top[i].step_s,
                    top[i].mem_bytes / 1048576);
    }
    comm_broadcast(world, msg, sizeof msg, 0);
    comm_broadcast(world, layers, sizeof layers, 0);
    b->dp = (int)msg[0], b->pp = (int)msg[1], b->batch = (int)msg[2];
    b->grad_accum = (int)msg[3], b->recompute = (int)msg[4];
    b->tp = (int)msg[5], b->cp = (int)msg[6];
    if (b->pp > 1) {
        b->schedule = "2bw";
        b->stage_layers = strdup(layers);
    }
}

// --dry-run: this run's own layout (dp x pp x tp x cp, ZeRO, sp, 1D/2D), per rank.
static void dry_run_layout(const TrainArgs *a, const GPTConfig *cfg, const Backend *be) {
    int tp2d = a->tp_mode && !strcmp(a->tp_mode, "2d");
    LayoutShape s = {.dp = a->dp,
                     .zero = a->zero,
                     .pp = a->pp,
                     .schedule = !strcmp(a->schedule, "gpipe") ? SCHED_GPIPE
                                 : !strcmp(a->schedule, "2bw") ? SCHED_2BW
                                                               : SCHED_1F1B,
                     .stage_layers = a->stage_layers,
                     .tp = a->tp,
                     .tp_2d = tp2d,
                     .sp = a->sp,
                     .cp = a->cp,
                     .B = a->batch,
                     .T = a->seq,
                     .K = a->grad_accum,
                     .recompute = a->recompute};
    LayoutMemory m;
    if (layout_memory(cfg, be, &s, &m)) die_last(EXIT_USAGE);
    char stage[32] = "";
    if (a->pp > 1) snprintf(stage, sizeof stage, " (stage %d, the largest)", m.stage);
    printf("this run's layout: dp %d x pp %d x tp %d (%s%s) x cp %d, zero %d: %d ranks, %zu "
           "parameters per tensor-parallel part\n",
           a->dp, a->pp, a->tp, tp2d ? "2d" : "1d", a->sp ? ", sp" : "", a->cp, a->zero,
           a->dp * a->pp * a->tp * a->cp, m.part_params);
    printf("per rank%s: params %.2f MiB, grads %.2f MiB, optimizer %.2f MiB, activations %.2f "
           "MiB, total %.2f MiB\n",
           stage, m.params / 1048576, m.grads / 1048576, m.opt / 1048576, m.acts / 1048576,
           layout_total(&m) / 1048576);
}

int train_dry_run(const TrainArgs *a) {
    GPTConfig cfg;
    if (train_model_config(a, &cfg)) die_last(EXIT_USAGE);
    if (a->init && init_read_config(a->init, a->heads, &cfg)) die_last(EXIT_INPUT);
    if (gpt_config_check(&cfg)) die_last(EXIT_USAGE);
    // the activations depend on the device (what its attention keeps for the backward)
    const Backend *be = backend_select_dtype(a->device, a->dtype, 0);
    if (!be) die_last(EXIT_USAGE);
    double act = workspace_floats(&cfg, be, a->batch, a->seq, a->recompute) * 4.0;
    printf("memory plan per rank (MiB) for L%d H%d C%d V%d T%d, batch %d x seq %d%s\n", cfg.L,
           cfg.H, cfg.C, cfg.V, cfg.maxT, a->batch, a->seq, a->recompute ? ", recompute" : "");
    printf("%4s %5s %10s %10s %10s %12s %10s\n", "dp", "zero", "params", "grads", "optimizer",
           "activations", "total");
    int ns[4] = {1, 2, 4, a->dp}, count = a->dp == 1 || a->dp == 2 || a->dp == 4 ? 3 : 4;
    for (int i = 0; i < count; i++)
        for (int z = 0; z <= 3; z++) {
            double p, g, o;
            dp_memory_plan(&cfg, ns[i], z, &p, &g, &o);
            printf("%4d %5d %10.1f %10.1f %10.1f %12.1f %10.1f%s\n", ns[i], z, p / 1048576,
                   g / 1048576, o / 1048576, act / 1048576, (p + g + o + act) / 1048576,
                   ns[i] == a->dp && z == a->zero ? "   <- this run's dp and zero" : "");
        }
    dry_run_layout(a, &cfg, be);
    return 0;
}
