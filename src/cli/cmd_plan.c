// cmd_plan.c — `loom plan`: profile the model's blocks on this machine (or read a saved
// profile) and print the best (width, depth, micro-batch, recompute) plans for a cluster.
// Launched under mpirun it also measures the links between the job's ranks and plans for
// them (rank 0 profiles and prints; the others take part in the measurement).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/backend.h"
#include "../common.h"
#include "../io/weights.h"
#include "../parallel/comm.h"
#include "../plan/commprobe.h"
#include "../plan/planner.h"
#include "commands.h"
#include "options.h"

static void print_plans(const Plan *pl, int n, FILE *f) {
    fprintf(f, "%4s %3s %3s %3s %4s %9s %-12s %10s %9s %10s %9s %9s %12s\n", "rank", "w", "d", "b",
            "K", "recompute", "stages", "tok/s", "step s", "compute s", "reduce s", "exposed s",
            "mem/worker");
    for (int i = 0; i < n; i++)
        fprintf(f, "%4d %3d %3d %3d %4d %9s %-12s %10.1f %9.3f %10.3f %9.3f %9.3f %9.1f MiB\n",
                i + 1, pl[i].w, pl[i].d, pl[i].b, pl[i].K, pl[i].recompute ? "on" : "off",
                pl[i].d > 1 ? pl[i].stage_layers : "-", pl[i].tokens_per_s, pl[i].step_s,
                pl[i].compute_s, pl[i].allreduce_s, pl[i].exposed_s, pl[i].mem_bytes / 1048576);
}

static int write_json(const char *path, const Plan *pl, int n) {
    FILE *f = fopen(path, "w");
    if (!f) return loom_fail("%s: cannot write", path);
    fprintf(f, "[\n");
    for (int i = 0; i < n; i++)
        fprintf(f,
                "  {\"w\": %d, \"d\": %d, \"micro_batch\": %d, \"grad_accum\": %d, \"recompute\": "
                "%s, \"stage_layers\": \"%s\", \"tokens_per_s\": %.6g, \"step_s\": %.9g, "
                "\"compute_s\": %.9g, \"allreduce_s\": %.9g, \"exposed_s\": %.9g, \"update_s\": "
                "%.9g, \"cpu_slowdown\": %.6g, \"mem_bytes\": %.0f}%s\n",
                pl[i].w, pl[i].d, pl[i].b, pl[i].K, pl[i].recompute ? "true" : "false",
                pl[i].stage_layers, pl[i].tokens_per_s, pl[i].step_s, pl[i].compute_s,
                pl[i].allreduce_s, pl[i].exposed_s, pl[i].update_s, pl[i].cpu_slow, pl[i].mem_bytes,
                i + 1 < n ? "," : "");
    fprintf(f, "]\n");
    fclose(f);
    return 0;
}

int cmd_plan(int argc, char **argv) {
    int layers = 6, heads = 6, dim = 384, vocab = 50257, block = 256, seq = 256, workers = 2;
    char *device = "cpu";
    int gbatch = 8, threads = 1, maxb = 8, top = 5, node_size = 1, cpu_group = 0, cores = 0;
    float mem_gb = 8.f, bw_gbps = 1.f, intra_gbps = 40.f, lat_ms = 0.1f, bucket_mb = 25.f;
    float probe_mb = 8.f;
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
        {"bandwidth-gbps", OPT_FLOAT, &bw_gbps,
         "bandwidth between machines, Gbit/s (measured instead under mpirun)", NULL, 1e-6, 1e6},
        {"intra-bandwidth-gbps", OPT_FLOAT, &intra_gbps,
         "shared-memory bandwidth between ranks of one machine, Gbit/s (measured under mpirun)",
         NULL, 1e-6, 1e6},
        {"latency-ms", OPT_FLOAT, &lat_ms, "per-message latency, ms", NULL, 0, 1e6},
        {"node-size", OPT_INT, &node_size, "ranks per machine (consecutive ranks share memory)",
         NULL, 1, 1 << 16},
        {"cpu-group", OPT_INT, &cpu_group,
         "ranks sharing one machine's cores (0: --node-size; more only when emulating several "
         "machines on one)",
         NULL, 0, 1 << 16},
        {"cores", OPT_INT, &cores, "cores per machine (0: the profiled machine's)", NULL, 0,
         1 << 20},
        {"bucket-mb", OPT_FLOAT, &bucket_mb, "data-parallel all-reduce bucket (train --bucket-mb)",
         NULL, 1e-6, 1e6},
        {"probe-mb", OPT_FLOAT, &probe_mb, "message size for measuring links under mpirun", NULL,
         1e-3, 1e4},
        {"global-batch", OPT_INT, &gbatch, "sequences per optimizer step", NULL, 1, 1 << 24},
        {"threads", OPT_INT, &threads, "threads per worker when profiling", NULL, 1, 4096},
        {"device", OPT_STR, &device, "backend to profile: cpu", NULL, 0, 0},
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
    Comm *world = comm_world(NULL, NULL);
    int lead = world->rank == 0;
    if (world->size > 1 && !options_was_set(opts, n, "workers")) workers = world->size;
    Profile prof;
    if (!lead) {
        // the other ranks wait for rank 0's profile, then help measure the links
    } else if (prof_in) {
        if (profile_load(&prof, prof_in)) die_last(EXIT_INPUT);
    } else {
        GPTConfig cfg = {.L = layers, .H = heads, .C = dim, .V = vocab, .maxT = block};
        if (init && init_read_config(init, 0, &cfg)) die_last(EXIT_INPUT);
        if (gpt_config_check(&cfg)) die_last(EXIT_USAGE);
        const Backend *be = backend_select(device, threads);
        if (!be) die_last(EXIT_USAGE);
        fprintf(stderr, "loom: profiling L%d H%d C%d V%d at T %d, %d thread(s)...\n", cfg.L, cfg.H,
                cfg.C, cfg.V, seq, threads);
        if (profile_measure(&prof, be, &cfg, seq, maxb, threads)) die_last(EXIT_USAGE);
        if (prof_out && profile_save(&prof, prof_out)) die_last(EXIT_IO);
    }
    PlanInput in;
    plan_input_defaults(&in);
    in.workers = workers, in.mem_bytes = mem_gb * 1073741824.0, in.bandwidth = bw_gbps * 1e9 / 8;
    in.intra_bandwidth = intra_gbps * 1e9 / 8, in.latency = lat_ms * 1e-3;
    in.node_size = node_size, in.cpu_group = cpu_group, in.cores = cores;
    in.global_batch = gbatch, in.bucket_bytes = bucket_mb * 1048576.0;
    if (world->size > 1) { // measure this job's links
        comm_barrier(world);
        CommProbe pr;
        comm_probe(world, probe_mb * 1048576.0, &pr);
        comm_finalize();
        if (!lead) return 0;
        if (pr.local) {
            in.intra_bandwidth = pr.allreduce_bw;
            if (!options_was_set(opts, n, "node-size")) in.node_size = world->size;
        } else {
            in.bandwidth = pr.allreduce_bw;
            in.net_cpu_per_byte = pr.cpu_per_byte;
        }
        in.latency = pr.latency;
        fprintf(stderr,
                "loom: measured %d ranks %s: all-reduce bus bandwidth %.3g Gbit/s, point-to-point "
                "%.3g Gbit/s, latency %.3g ms, %.3g ns of CPU per byte moved\n",
                world->size, pr.local ? "on one machine (shared memory)" : "across machines",
                pr.allreduce_bw * 8e-9, pr.p2p_bw * 8e-9, pr.latency * 1e3, pr.cpu_per_byte * 1e9);
    }
    Plan *pl = xcalloc((size_t)top, sizeof(Plan));
    int k = plan_search(&prof, &in, pl, top);
    printf("plans for %d workers (%d per machine), %.1f GiB each, %.3g Gbit/s between machines, "
           "%.3g within, global batch %d x T %d (model L%d C%d V%d; 2BW schedule when d > 1)\n",
           workers, in.node_size, mem_gb, in.bandwidth * 8e-9, in.intra_bandwidth * 8e-9, gbatch,
           prof.T, prof.cfg.L, prof.cfg.C, prof.cfg.V);
    if (!k) die(EXIT_INPUT, "no plan fits %.1f GiB per worker", mem_gb);
    print_plans(pl, k, stdout);
    printf("best: loom train --dp %d --pp %d --batch %d --grad-accum %d%s%s%s\n", pl[0].w, pl[0].d,
           pl[0].b, pl[0].K, pl[0].d > 1 ? " --schedule 2bw --stage-layers " : "",
           pl[0].d > 1 ? pl[0].stage_layers : "", pl[0].recompute ? " --recompute" : "");
    if (json && write_json(json, pl, k)) die_last(EXIT_IO);
    free(pl);
    return 0;
}
