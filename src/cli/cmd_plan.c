// cmd_plan.c — `loom plan`: profile the model's blocks on this machine (or read a saved
// profile) and print the best (width, depth, micro-batch, recompute) plans for a cluster.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/backend.h"
#include "../common.h"
#include "../io/weights.h"
#include "../plan/planner.h"
#include "commands.h"
#include "options.h"

static void print_plans(const Plan *pl, int n, int T, FILE *f) {
    fprintf(f, "%4s %3s %3s %3s %4s %9s %-12s %10s %9s %10s %11s %12s\n", "rank", "w", "d", "b",
            "K", "recompute", "stages", "tok/s", "step s", "compute s", "allreduce s",
            "mem/worker");
    for (int i = 0; i < n; i++)
        fprintf(f, "%4d %3d %3d %3d %4d %9s %-12s %10.1f %9.3f %10.3f %11.3f %9.1f MiB\n", i + 1,
                pl[i].w, pl[i].d, pl[i].b, pl[i].K, pl[i].recompute ? "on" : "off",
                pl[i].d > 1 ? pl[i].stage_layers : "-", pl[i].tokens_per_s, pl[i].step_s,
                pl[i].compute_s, pl[i].allreduce_s, pl[i].mem_bytes / 1048576);
    (void)T;
}

static int write_json(const char *path, const Plan *pl, int n) {
    FILE *f = fopen(path, "w");
    if (!f) return loom_fail("%s: cannot write", path);
    fprintf(f, "[\n");
    for (int i = 0; i < n; i++)
        fprintf(f,
                "  {\"w\": %d, \"d\": %d, \"micro_batch\": %d, \"grad_accum\": %d, \"recompute\": "
                "%s, \"stage_layers\": \"%s\", \"tokens_per_s\": %.6g, \"step_s\": %.9g, "
                "\"compute_s\": %.9g, \"allreduce_s\": %.9g, \"update_s\": %.9g, \"mem_bytes\": %.0f}%s\n",
                pl[i].w, pl[i].d, pl[i].b, pl[i].K, pl[i].recompute ? "true" : "false",
                pl[i].stage_layers, pl[i].tokens_per_s, pl[i].step_s, pl[i].compute_s,
                pl[i].allreduce_s, pl[i].update_s, pl[i].mem_bytes, i + 1 < n ? "," : "");
    fprintf(f, "]\n");
    fclose(f);
    return 0;
}

int cmd_plan(int argc, char **argv) {
    int layers = 6, heads = 6, dim = 384, vocab = 50257, block = 256, seq = 256, workers = 2;
    int gbatch = 8, threads = 1, maxb = 8, top = 5;
    float mem_gb = 8.f, bw_gbps = 1.f, lat_ms = 0.1f, cores = 0.f;
    char *init = NULL, *prof_in = NULL, *prof_out = NULL, *json = NULL;
    const Option opts[] = {
        {"init", OPT_STR, &init, "take the model shape from a weights file", NULL, 0, 0},
        {"layers", OPT_INT, &layers, "transformer layers", NULL, 1, 1024},
        {"heads", OPT_INT, &heads, "attention heads", NULL, 1, 1024},
        {"dim", OPT_INT, &dim, "channels", NULL, 1, 65536},
        {"vocab", OPT_INT, &vocab, "vocabulary size", NULL, 2, 65536},
        {"block-size", OPT_INT, &block, "maximum sequence length", NULL, 1, 1 << 20},
        {"seq", OPT_INT, &seq, "sequence length T", NULL, 1, 1 << 20},
        {"workers", OPT_INT, &workers, "ranks to plan for (w x d)", NULL, 1, 1 << 16},
        {"mem-gb", OPT_FLOAT, &mem_gb, "memory per worker, GiB", NULL, 1e-3, 1e6},
        {"bandwidth-gbps", OPT_FLOAT, &bw_gbps, "inter-worker bandwidth, Gbit/s", NULL, 1e-6, 1e6},
        {"latency-ms", OPT_FLOAT, &lat_ms, "per-message latency, ms", NULL, 0, 1e6},
        {"global-batch", OPT_INT, &gbatch, "sequences per optimizer step", NULL, 1, 1 << 24},
        {"cores", OPT_FLOAT, &cores, "cores the workers share (0: each worker has its own)", NULL,
         0, 1e6},
        {"threads", OPT_INT, &threads, "threads per worker when profiling", NULL, 1, 4096},
        {"max-micro-batch", OPT_INT, &maxb, "largest micro-batch to profile (powers of two)", NULL,
         1, 4096},
        {"profile", OPT_STR, &prof_in, "read this saved profile instead of measuring", NULL, 0, 0},
        {"save-profile", OPT_STR, &prof_out, "write the measured profile (JSON)", NULL, 0, 0},
        {"json", OPT_STR, &json, "write the best plans as JSON", NULL, 0, 0},
        {"top", OPT_INT, &top, "plans to show", NULL, 1, 512},
    };
    int n = (int)(sizeof opts / sizeof opts[0]);
    int rc = options_parse(opts, n, argc, argv,
                           "usage: loom plan [model flags] --workers N "
                           "--mem-gb M --bandwidth-gbps B --global-batch G",
                           NULL, 0, NULL);
    if (rc == 1) return 0;
    if (rc) die(EXIT_USAGE, "plan: %s", loom_errmsg());
    Profile prof;
    if (prof_in) {
        if (profile_load(&prof, prof_in)) die_last(EXIT_INPUT);
    } else {
        GPTConfig cfg = {.L = layers, .H = heads, .C = dim, .V = vocab, .maxT = block};
        if (init && init_read_config(init, 0, &cfg)) die_last(EXIT_INPUT);
        if (gpt_config_check(&cfg)) die_last(EXIT_USAGE);
        backend_cpu_set_threads(threads);
        fprintf(stderr, "loom: profiling L%d H%d C%d V%d at T %d, %d thread(s)...\n", cfg.L, cfg.H,
                cfg.C, cfg.V, seq, threads);
        if (profile_measure(&prof, &cfg, seq, maxb, threads)) die_last(EXIT_USAGE);
        if (prof_out && profile_save(&prof, prof_out)) die_last(EXIT_IO);
    }
    PlanInput in = {.workers = workers,
                    .mem_bytes = mem_gb * 1073741824.0,
                    .bandwidth = bw_gbps * 1e9 / 8,
                    .latency = lat_ms * 1e-3,
                    .global_batch = gbatch,
                    .cores = cores};
    Plan *pl = xcalloc((size_t)top, sizeof(Plan));
    int k = plan_search(&prof, &in, pl, top);
    printf("plans for %d workers, %.1f GiB each, %.3g Gbit/s, global batch %d x T %d "
           "(model L%d C%d V%d; 2BW schedule when d > 1)\n",
           workers, mem_gb, bw_gbps, gbatch, prof.T, prof.cfg.L, prof.cfg.C, prof.cfg.V);
    if (!k) die(EXIT_INPUT, "no plan fits %.1f GiB per worker", mem_gb);
    print_plans(pl, k, prof.T, stdout);
    printf("best: loom train --dp %d --pp %d --batch %d --grad-accum %d%s%s%s\n", pl[0].w, pl[0].d,
           pl[0].b, pl[0].K, pl[0].d > 1 ? " --schedule 2bw --stage-layers " : "",
           pl[0].d > 1 ? pl[0].stage_layers : "", pl[0].recompute ? " --recompute" : "");
    if (json && write_json(json, pl, k)) die_last(EXIT_IO);
    free(pl);
    return 0;
}
