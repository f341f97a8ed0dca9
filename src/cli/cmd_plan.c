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

typedef struct {
    int layers, heads, dim, vocab, block, seq, workers;
    char *device;
    int gbatch, threads, maxb, top, node_size, cpu_group, cores;
    float mem_gb, bw_gbps, intra_gbps, lat_ms, bucket_mb, probe_mb;
    char *init, *prof_in, *prof_out, *json;
    int workers_set, node_size_set; // given explicitly
} PlanArgs;

// Returns 0 to go on, 1 after --help.
static int plan_parse(int argc, char **argv, PlanArgs *a) {
    *a = (PlanArgs){.layers = 6,
                    .heads = 6,
                    .dim = 384,
                    .vocab = 50257,
                    .block = 256,
                    .seq = 256,
                    .workers = 2,
                    .device = "cpu",
                    .gbatch = 8,
                    .threads = 1,
                    .maxb = 8,
                    .top = 5,
                    .node_size = 1,
                    .mem_gb = 8.f,
                    .bw_gbps = 1.f,
                    .intra_gbps = 40.f,
                    .lat_ms = 0.1f,
                    .bucket_mb = 25.f,
                    .probe_mb = 8.f};
    const Option opts[] = {
        {"init", OPT_STR, &a->init, "take the model shape from a weights file", NULL, 0, 0},
        {"layers", OPT_INT, &a->layers, "transformer layers", NULL, 1, 1024},
        {"heads", OPT_INT, &a->heads, "attention heads", NULL, 1, 1024},
        {"dim", OPT_INT, &a->dim, "channels", NULL, 1, 65536},
        {"vocab", OPT_INT, &a->vocab, "vocabulary size", NULL, 2, 65536},
        {"block-size", OPT_INT, &a->block, "maximum sequence length", NULL, 1, 1 << 20},
        {"seq", OPT_INT, &a->seq, "sequence length T", NULL, 1, 1 << 20},
        {"workers", OPT_INT, &a->workers, "ranks to plan for (w x d)", NULL, 1, 1 << 16},
        {"mem-gb", OPT_FLOAT, &a->mem_gb, "memory per worker, GiB", NULL, 1e-3, 1e6},
        {"bandwidth-gbps", OPT_FLOAT, &a->bw_gbps,
         "bandwidth between machines, Gbit/s (measured instead under mpirun)", NULL, 1e-6, 1e6},
        {"intra-bandwidth-gbps", OPT_FLOAT, &a->intra_gbps,
         "shared-memory bandwidth between ranks of one machine, Gbit/s (measured under mpirun)",
         NULL, 1e-6, 1e6},
        {"latency-ms", OPT_FLOAT, &a->lat_ms, "per-message latency, ms", NULL, 0, 1e6},
        {"node-size", OPT_INT, &a->node_size, "ranks per machine (consecutive ranks share memory)",
         NULL, 1, 1 << 16},
        {"cpu-group", OPT_INT, &a->cpu_group,
         "ranks sharing one machine's cores (0: --node-size; more only when emulating several "
         "machines on one)",
         NULL, 0, 1 << 16},
        {"cores", OPT_INT, &a->cores, "cores per machine (0: the profiled machine's)", NULL, 0,
         1 << 20},
        {"bucket-mb", OPT_FLOAT, &a->bucket_mb,
         "data-parallel all-reduce bucket (train --bucket-mb)", NULL, 1e-6, 1e6},
        {"probe-mb", OPT_FLOAT, &a->probe_mb, "message size for measuring links under mpirun", NULL,
         1e-3, 1e4},
        {"global-batch", OPT_INT, &a->gbatch, "sequences per optimizer step", NULL, 1, 1 << 24},
        {"threads", OPT_INT, &a->threads, "threads per worker when profiling", NULL, 1, 4096},
        {"device", OPT_STR, &a->device, "backend to profile: cpu", NULL, 0, 0},
        {"max-micro-batch", OPT_INT, &a->maxb, "largest micro-batch to profile (powers of two)",
         NULL, 1, 4096},
        {"profile", OPT_STR, &a->prof_in, "read this saved profile instead of measuring", NULL, 0,
         0},
        {"save-profile", OPT_STR, &a->prof_out, "write the measured profile (JSON)", NULL, 0, 0},
        {"json", OPT_STR, &a->json, "write the best plans as JSON", NULL, 0, 0},
        {"top", OPT_INT, &a->top, "plans to show", NULL, 1, 512},
    };
    int n = (int)(sizeof opts / sizeof opts[0]);
    int rc = options_parse(opts, n, argc, argv,
                           "usage: loom plan [model flags] --workers N "
                           "--mem-gb M --bandwidth-gbps B --global-batch G",
                           NULL, 0, NULL);
    if (rc < 0) die(EXIT_USAGE, "plan: %s", loom_errmsg());
    a->workers_set = options_was_set(opts, n, "workers");
    a->node_size_set = options_was_set(opts, n, "node-size");
    return rc;
}

// Rank 0's profile: read from --profile, or measured (and saved with --save-profile).
static void plan_profile(const PlanArgs *a, Profile *prof) {
    if (a->prof_in) {
        if (profile_load(prof, a->prof_in)) die_last(EXIT_INPUT);
        return;
    }
    GPTConfig cfg = {.L = a->layers, .H = a->heads, .C = a->dim, .V = a->vocab, .maxT = a->block};
    if (a->init && init_read_config(a->init, 0, &cfg)) die_last(EXIT_INPUT);
    if (gpt_config_check(&cfg)) die_last(EXIT_USAGE);
    const Backend *be = backend_select(a->device, a->threads);
    if (!be) die_last(EXIT_USAGE);
    fprintf(stderr, "loom: profiling L%d H%d C%d V%d at T %d, %d thread(s)...\n", cfg.L, cfg.H,
            cfg.C, cfg.V, a->seq, a->threads);
    if (profile_measure(prof, be, &cfg, a->seq, a->maxb, a->threads)) die_last(EXIT_USAGE);
    if (a->prof_out && profile_save(prof, a->prof_out)) die_last(EXIT_IO);
}

// Under mpirun every rank measures the job's links; returns 0 on the non-lead ranks (done).
static int plan_links(const PlanArgs *a, Comm *world, PlanInput *in) {
    comm_barrier(world);
    CommProbe pr;
    comm_probe(world, a->probe_mb * 1048576.0, &pr);
    comm_finalize();
    if (world->rank != 0) return 0;
    if (pr.local) {
        in->intra_bandwidth = pr.allreduce_bw;
        if (!a->node_size_set) in->node_size = world->size;
    } else {
        in->bandwidth = pr.allreduce_bw;
        in->net_cpu_per_byte = pr.cpu_per_byte;
    }
    in->latency = pr.latency;
    fprintf(stderr,
            "loom: measured %d ranks %s: all-reduce bus bandwidth %.3g Gbit/s, point-to-point "
            "%.3g Gbit/s, latency %.3g ms, %.3g ns of CPU per byte moved\n",
            world->size, pr.local ? "on one machine (shared memory)" : "across machines",
            pr.allreduce_bw * 8e-9, pr.p2p_bw * 8e-9, pr.latency * 1e3, pr.cpu_per_byte * 1e9);
    return 1;
}

int cmd_plan(int argc, char **argv) {
    PlanArgs a;
    if (plan_parse(argc, argv, &a)) return 0;
    Comm *world = comm_world(NULL, NULL);
    int lead = world->rank == 0;
    if (world->size > 1 && !a.workers_set) a.workers = world->size;
    Profile prof;
    if (lead) plan_profile(&a, &prof); // the other ranks only help measure the links
    PlanInput in;
    plan_input_defaults(&in);
    in.workers = a.workers, in.mem_bytes = a.mem_gb * 1073741824.0;
    in.bandwidth = a.bw_gbps * 1e9 / 8, in.intra_bandwidth = a.intra_gbps * 1e9 / 8;
    in.latency = a.lat_ms * 1e-3, in.node_size = a.node_size, in.cpu_group = a.cpu_group;
    in.cores = a.cores, in.global_batch = a.gbatch, in.bucket_bytes = a.bucket_mb * 1048576.0;
    if (world->size > 1 && !plan_links(&a, world, &in)) return 0;
    Plan *pl = xcalloc((size_t)a.top, sizeof(Plan));
    int k = plan_search(&prof, &in, pl, a.top);
    printf("plans for %d workers (%d per machine), %.1f GiB each, %.3g Gbit/s between machines, "
           "%.3g within, global batch %d x T %d (model L%d C%d V%d; 2BW schedule when d > 1)\n",
           a.workers, in.node_size, a.mem_gb, in.bandwidth * 8e-9, in.intra_bandwidth * 8e-9,
           a.gbatch, prof.T, prof.cfg.L, prof.cfg.C, prof.cfg.V);
    if (!k) die(EXIT_INPUT, "no plan fits %.1f GiB per worker", a.mem_gb);
    print_plans(pl, k, stdout);
    printf("best: loom train --dp %d --pp %d --batch %d --grad-accum %d%s%s%s\n", pl[0].w, pl[0].d,
           pl[0].b, pl[0].K, pl[0].d > 1 ? " --schedule 2bw --stage-layers " : "",
           pl[0].d > 1 ? pl[0].stage_layers : "", pl[0].recompute ? " --recompute" : "");
    if (a.json && write_json(a.json, pl, k)) die_last(EXIT_IO);
    free(pl);
    return 0;
}
