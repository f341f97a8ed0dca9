// cmd_plan.c — `loom plan`: profile the model's blocks on this machine (or read a saved
// profile) and print the best (width, depth, tp, cp, micro-batch, recompute) plans for a
// cluster, each with its predicted step time and memory per rank.
// Launched under mpirun it also measures the links between the job's ranks and plans for
// them (rank 0 profiles and prints; the others take part in the measurement).
// `loom plan --offload disk` runs the static analysis of block swapping instead: the same model
// and batch flags as `loom train`, with its defaults; a table and one JSON line.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/backend.h"
#include "../common.h"
#include "../io/weights.h"
#include "../offload/offload_plan.h"
#include "../parallel/comm.h"
#include "../plan/commprobe.h"
#include "../plan/peer_plan.h"
#include "../plan/planner.h"
#include "../train/trainer.h"
#include "commands.h"
#include "options.h"

static void print_plans(const Plan *pl, int n, FILE *f) {
    fprintf(f, "%4s %3s %3s %3s %3s %3s %4s %9s %-12s %10s %9s %10s %9s %9s %9s %12s\n", "rank",
            "w", "d", "tp", "cp", "b", "K", "recompute", "stages", "tok/s", "step s", "compute s",
            "tp+cp s", "reduce s", "exposed s", "mem/worker");
    for (int i = 0; i < n; i++)
        fprintf(f,
                "%4d %3d %3d %3d %3d %3d %4d %9s %-12s %10.1f %9.3f %10.3f %9.3f %9.3f %9.3f "
                "%9.1f MiB\n",
                i + 1, pl[i].w, pl[i].d, pl[i].tp, pl[i].cp, pl[i].b, pl[i].K,
                pl[i].recompute ? "on" : "off", pl[i].d > 1 ? pl[i].stage_layers : "-",
                pl[i].tokens_per_s, pl[i].step_s, pl[i].compute_s, pl[i].tp_s + pl[i].cp_s,
                pl[i].allreduce_s, pl[i].exposed_s, pl[i].mem_bytes / 1048576);
}

static int write_json(const char *path, const Plan *pl, int n) {
    FILE *f = fopen(path, "w");
    if (!f) return loom_fail("%s: cannot write", path);
    fprintf(f, "[\n");
    for (int i = 0; i < n; i++)
        fprintf(f,
                "  {\"w\": %d, \"d\": %d, \"tp\": %d, \"cp\": %d, \"micro_batch\": %d, "
                "\"grad_accum\": %d, \"recompute\": "
                "%s, \"stage_layers\": \"%s\", \"tokens_per_s\": %.6g, \"step_s\": %.9g, "
                "\"compute_s\": %.9g, \"tp_s\": %.9g, \"cp_s\": %.9g, \"allreduce_s\": %.9g, "
                "\"exposed_s\": %.9g, \"update_s\": "
                "%.9g, \"cpu_slowdown\": %.6g, \"mem_bytes\": %.0f}%s\n",
                pl[i].w, pl[i].d, pl[i].tp, pl[i].cp, pl[i].b, pl[i].K,
                pl[i].recompute ? "true" : "false", pl[i].stage_layers, pl[i].tokens_per_s,
                pl[i].step_s, pl[i].compute_s, pl[i].tp_s, pl[i].cp_s, pl[i].allreduce_s,
                pl[i].exposed_s, pl[i].update_s, pl[i].cpu_slow, pl[i].mem_bytes,
                i + 1 < n ? "," : "");
    fprintf(f, "]\n");
    fclose(f);
    return 0;
}

typedef struct {
    int layers, heads, dim, vocab, block, seq, workers;
    char *device;
    int gbatch, threads, maxb, top, node_size, cpu_group, cores, tau;
    float mem_gb, bw_gbps, intra_gbps, lat_ms, bucket_mb, probe_mb, topk_frac;
    char *init, *prof_in, *prof_out, *json, *peer_exchange, *outer_compress, *topk_values;
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
                    .probe_mb = 8.f,
                    .tau = 12,
                    .topk_frac = 0.02f,
                    .peer_exchange = "best",
                    .outer_compress = "best",
                    .topk_values = "fp32"};
    const Option opts[] = {
        {"init", OPT_STR, &a->init, "take the model shape from a weights file", NULL, 0, 0},
        {"layers", OPT_INT, &a->layers, "transformer layers", NULL, 1, 1024},
        {"heads", OPT_INT, &a->heads, "attention heads", NULL, 1, 1024},
        {"dim", OPT_INT, &a->dim, "channels", NULL, 1, 65536},
        {"vocab", OPT_INT, &a->vocab, "vocabulary size", NULL, 2, GPT_MAX_VOCAB},
        {"block-size", OPT_INT, &a->block, "maximum sequence length", NULL, 1, 1 << 20},
        {"seq", OPT_INT, &a->seq, "sequence length T", NULL, 1, 1 << 20},
        {"workers", OPT_INT, &a->workers, "ranks to plan for (w x d x tp x cp)", NULL, 1, 1 << 16},
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
        {"tau", OPT_INT, &a->tau, "local steps per round of the swarm compared (loom peer --tau)",
         NULL, 1, 4096},
        {"peer-exchange", OPT_STR, &a->peer_exchange,
         "the swarm's exchange (loom peer --peer-exchange; best: the fewer bytes)",
         "all|sharded|best", 0, 0},
        {"outer-compress", OPT_STR, &a->outer_compress,
         "the swarm's Δs on the wire (loom peer --outer-compress; best: the least compression "
         "that hides the exchange behind a round)",
         "none|int8|topk|best", 0, 0},
        {"topk-frac", OPT_FLOAT, &a->topk_frac, "--outer-compress topk: the share sent", NULL, 1e-6,
         1},
        {"topk-values", OPT_STR, &a->topk_values,
         "--outer-compress topk: the values sent as fp32 or 2 bits (loom peer --topk-values)",
         "fp32|2bit", 0, 0},
    };
    int n = (int)(sizeof opts / sizeof opts[0]);
    int rc = options_parse(opts, n, argc, argv,
                           "usage: loom plan [model flags] --workers N "
                           "--mem-gb M --bandwidth-gbps B --global-batch G",
                           NULL, 0, NULL);
    if (rc < 0) die(EXIT_USAGE, "plan: %s", loom_errmsg());
    a->workers_set = options_was_set(opts, n, "workers");
    a->node_size_set = options_was_set(opts, n, "node-size");
    if (!strcmp(a->topk_values, "2bit") && strcmp(a->outer_compress, "topk") &&
        strcmp(a->outer_compress, "best"))
        die(EXIT_USAGE, "plan: --topk-values 2bit needs --outer-compress topk (or best)");
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

// ---------------------------------------------------------------- --offload

typedef struct {
    TrainArgs t; // the model and batch flags, with train's defaults
    char *offload, *dir, *fast_mem, *units, *prof_in, *prof_out, *probe, *json;
    int prefetch, heads_set;
    float read_gbps, write_gbps; // given: the tier is not measured
    size_t budget, probe_bytes;
    double overhead, share; // the fixed overhead measured here; budget - overhead
} OffArgs;

static OffArgs O;

static const Option OFF_OPTS[] = {
    {"offload", OPT_STR, &O.offload, "block swapping: disk (host: reserved for the GPU backend)",
     NULL, 0, 0},
    {"offload-dir", OPT_STR, &O.dir, "directory of the slow tier's scratch file", NULL, 0, 0},
    {"fast-mem", OPT_STR, &O.fast_mem, "fast memory per rank: bytes, or with K, M, G", NULL, 0, 0},
    {"init", OPT_STR, &O.t.init, "take the model shape from a weights file", NULL, 0, 0},
    {"layers", OPT_INT, &O.t.layers, "transformer layers L", NULL, 1, 1024},
    {"heads", OPT_INT, &O.t.heads, "attention heads H", NULL, 1, 1024},
    {"dim", OPT_INT, &O.t.dim, "channels C", NULL, 1, 65536},
    {"vocab", OPT_INT, &O.t.vocab, "vocabulary size V", NULL, 2, GPT_MAX_VOCAB},
    {"block-size", OPT_INT, &O.t.block_size, "maximum sequence length", NULL, 1, 1 << 20},
    {"batch", OPT_INT, &O.t.batch, "micro-batch size B", NULL, 1, 1 << 20},
    {"seq", OPT_INT, &O.t.seq, "sequence length T", NULL, 1, 1 << 20},
    {"grad-accum", OPT_INT, &O.t.grad_accum, "micro-batches K per optimizer step", NULL, 1,
     1 << 20},
    {"recompute", OPT_FLAG, &O.t.recompute, "recompute each layer's forward during backward", NULL,
     0, 0},
    {"threads", OPT_INT, &O.t.threads, "CPU threads (0 = all cores)", NULL, 0, 4096},
    {"device", OPT_STR, &O.t.device, "backend to profile: cpu", NULL, 0, 0},
    {"dp", OPT_INT, &O.t.dp, "data-parallel ranks (each swaps its own state)", NULL, 1, 1 << 20},
    {"zero", OPT_INT, &O.t.zero, "ZeRO stage (0 or 1: the update streams the owned part)", NULL, 0,
     1},
    {"grad-clip", OPT_FLOAT, &O.t.grad_clip,
     "as loom train's: 0 (with --on-nonfinite stop) fuses the update into the backward", NULL, 0,
     1e9},
    {"on-nonfinite", OPT_STR, &O.t.on_nonfinite, "as loom train's", "stop|skip", 0, 0},
    {"offload-units", OPT_STR, &O.units,
     "predict this grouping, e.g. [[0,3],[4,13]], instead of "
     "searching",
     NULL, 0, 0},
    {"offload-prefetch", OPT_INT, &O.prefetch, "prefetch depth with --offload-units", NULL, 1,
     OFFLOAD_MAX_PREFETCH},
    {"profile", OPT_STR, &O.prof_in, "read the block costs from this saved profile", NULL, 0, 0},
    {"save-profile", OPT_STR, &O.prof_out, "write the measured profile (JSON)", NULL, 0, 0},
    {"tier-probe", OPT_STR, &O.probe, "bytes written and read back to measure the tier", NULL, 0,
     0},
    {"tier-read-gbps", OPT_FLOAT, &O.read_gbps,
     "the tier's read bandwidth, GB/s (with --tier-write-gbps: not measured)", NULL, 0, 1e6},
    {"tier-write-gbps", OPT_FLOAT, &O.write_gbps, "the tier's write bandwidth, GB/s", NULL, 0, 1e6},
    {"json", OPT_STR, &O.json, "also write the JSON line to this file", NULL, 0, 0},
};

static void off_parse(int argc, char **argv) {
    train_args_defaults(&O.t);
    O.probe = "256M", O.prefetch = 1;
    int n = (int)(sizeof OFF_OPTS / sizeof OFF_OPTS[0]);
    int rc = options_parse(OFF_OPTS, n, argc, argv,
                           "usage: loom plan --offload disk --offload-dir DIR --fast-mem SIZE "
                           "[loom train's model and batch flags]",
                           NULL, 0, NULL);
    if (rc == 1) exit(0);
    if (rc) die(EXIT_USAGE, "plan: %s", loom_errmsg());
    O.heads_set = options_was_set(OFF_OPTS, n, "heads");
    if (strcmp(O.offload, "disk"))
        die(EXIT_USAGE, "plan: --offload %s: %s", O.offload,
            strcmp(O.offload, "host") ? "unknown tier (disk)"
                                      : "not planned here: `loom train --offload host` plans at "
                                        "start-up on its device (this command plans --offload "
                                        "disk)");
    if (!O.dir) die(EXIT_USAGE, "plan: --offload disk needs --offload-dir DIR (the slow tier)");
    if (!O.fast_mem)
        die(EXIT_USAGE, "plan: --offload needs --fast-mem SIZE (fast memory per rank)");
    if (offload_parse_size("--fast-mem", O.fast_mem, &O.budget) ||
        offload_parse_size("--tier-probe", O.probe, &O.probe_bytes))
        die_last(EXIT_USAGE);
    if ((O.read_gbps > 0) != (O.write_gbps > 0))
        die(EXIT_USAGE, "plan: --tier-read-gbps and --tier-write-gbps go together");
    if (options_was_set(OFF_OPTS, n, "offload-prefetch") && !O.units)
        die(EXIT_USAGE, "plan: --offload-prefetch goes with --offload-units (else it is searched)");
    if (O.t.seq > O.t.block_size && !O.t.init)
        die(EXIT_USAGE, "--seq %d is longer than --block-size %d", O.t.seq, O.t.block_size);
}

static const char *unit_what(const GPT *m, OffloadUnit u, char *buf, size_t n) {
    int e = u.first == 0, h = u.last == m->nblocks - 1;
    int l0 = e ? 0 : u.first - 1, l1 = h ? u.last - 2 : u.last - 1;
    char layers[32] = "";
    if (l1 > l0)
        snprintf(layers, sizeof layers, "layers %d-%d", l0, l1);
    else if (l1 == l0)
        snprintf(layers, sizeof layers, "layer %d", l0);
    snprintf(buf, n, "%s%s%s%s%s", e ? "embedding" : "", e && *layers ? " + " : "", layers,
             h && (e || *layers) ? " + " : "", h ? "head, wte, H" : "");
    return buf;
}

static void off_table(const GPT *m, const OffloadShape *s, const OffloadCosts *c,
                      const OffloadPlan *p) {
    printf("%4s %-7s %-28s %9s %9s %9s %10s %10s %8s\n", "unit", "blocks", "holds", "slot MiB",
           "fwd s", "bwd s", "read MiB", "write MiB", "I/O s");
    for (int u = 0; u < p->nunits; u++) {
        OffloadUnitCost uc;
        offload_unit_cost(m, s, c, p, u, &uc);
        char what[64], blocks[24];
        snprintf(blocks, sizeof blocks, "%d-%d", p->unit[u].first, p->unit[u].last);
        double rd = uc.read_fwd + uc.read_bwd + uc.read_update, wo = s->fused ? uc.write : 0;
        double io = offload_io_seconds(c, rd, uc.write, uc.read_update, wo);
        printf("%4d %-7s %-28s %9.1f %9.4g %9.4g %10.1f %10.1f %8.3g\n", u, blocks,
               unit_what(m, p->unit[u], what, sizeof what),
               4.0 * (double)offload_unit_floats(m, p->unit[u]) / 1048576.0, uc.fwd_s, uc.bwd_s,
               rd / 1048576.0, uc.write / 1048576.0, io);
    }
}

static void off_report(const GPT *m, const OffloadShape *s, const OffloadCosts *c, OffloadPlan *p) {
    OffloadPrediction d;
    offload_predict(m, s, c, p, &d);
    double MiB = 1048576.0, slots = 4.0 * (double)offload_slots_floats(m, p);
    double ws = offload_workspace_bytes(m, s), tok = (double)s->B * s->T * s->K;
    off_table(m, s, c, p);
    printf("prefetch %d (%d slots): peak fast memory %.1f MiB of %.1f MiB (slots %.1f, "
           "activations and workspace %.1f, streaming buffers and norms %.1f)\n",
           p->prefetch, p->prefetch + 2, p->peak_fast_bytes / MiB, O.share / MiB, slots / MiB,
           ws / MiB, (p->peak_fast_bytes - slots - ws) / MiB);
    printf("per step: compute %.3f s; I/O %.1f MiB read + %.1f MiB written = %.1f MiB, I/O bound "
           "%.3f s (bytes / measured bandwidth)\n",
           d.compute_s, d.read_bytes / MiB, d.written_bytes / MiB, p->io_bytes_per_step / MiB,
           d.io_s);
    if (s->fused)
        printf("predicted %.3f s per step (each unit's update fused into the backward), %.1f "
               "tokens/s\n",
               d.step_s, tok / d.step_s);
    else
        printf("predicted %.3f s per step (the update pass %.3f s of it), %.1f tokens/s\n",
               d.step_s, d.update_s, tok / d.step_s);
    char *units = offload_units_json(p);
    char line[1024];
    int k = snprintf(
        line, sizeof line,
        "{\"predicted_step_ms\": %.6g, \"peak_fast_bytes\": %.0f, \"io_bytes_per_step\":"
        " %.0f, \"budget_bytes\": %zu, \"overhead_bytes\": %.0f, \"prefetch\": %d, "
        "\"read_bps\": %.6g, "
        "\"write_bps\": %.6g, \"opt_read_bps\": %.6g, \"opt_write_bps\": %.6g, "
        "\"read_cpu_s_per_gb\": %.4g, \"write_cpu_s_per_gb\": "
        "%.4g, \"io_steal\": %.3g, \"io_slow_s_per_gb\": %.4g, \"compute_ms\": %.6g, "
        "\"io_bound_ms\": %.6g, "
        "\"read_bytes\": %.0f, \"written_bytes\": %.0f, \"tokens_per_s\": %.6g, "
        "\"units\": ",
        p->predicted_step_ms, p->peak_fast_bytes, p->io_bytes_per_step, O.budget, O.overhead,
        p->prefetch, c->read_bps, c->write_bps, offload_opt_read_bps(c), offload_opt_write_bps(c),
        c->read_cpu * 1e9, c->write_cpu * 1e9, c->io_steal, c->io_slow * 1e9, 1e3 * d.compute_s,
        1e3 * d.io_s, d.read_bytes, d.written_bytes, tok / d.step_s);
    printf("%.*s%s}\n", k, line, units);
    fflush(stdout);
    FILE *f = O.json ? fopen(O.json, "w") : NULL;
    if (O.json && !f) die(EXIT_IO, "%s: cannot write", O.json);
    if (f) fprintf(f, "%.*s%s}\n", k, line, units), fclose(f);
    free(units);
}

static int cmd_plan_offload(int argc, char **argv) {
    off_parse(argc, argv);
    GPTConfig cfg = {
        .L = O.t.layers, .H = O.t.heads, .C = O.t.dim, .V = O.t.vocab, .maxT = O.t.block_size};
    if (O.t.init && init_read_config(O.t.init, O.heads_set ? O.t.heads : 0, &cfg))
        die_last(EXIT_INPUT);
    if (O.t.seq > cfg.maxT)
        die(EXIT_USAGE, "--seq %d is longer than the model's %d", O.t.seq, cfg.maxT);
    const Backend *be = backend_select(O.t.device, O.t.threads);
    GPT m;
    if (!be || gpt_create_layout(&m, &cfg, be)) die_last(EXIT_USAGE);
    OffloadShape s = {.B = O.t.batch,
                      .T = O.t.seq,
                      .K = O.t.grad_accum,
                      .recompute = O.t.recompute,
                      .dp = O.t.dp,
                      .zero = O.t.zero,
                      .fused = O.t.grad_clip <= 0 && strcmp(O.t.on_nonfinite, "skip")};
    OffloadPlan p = {0};
    if (O.units && offload_plan_parse_units(&m, O.units, &p)) die_last(EXIT_USAGE);
    p.prefetch = O.prefetch;
    OffloadCosts c = {0};
    c.read_bps = O.read_gbps * 1e9, c.write_bps = O.write_gbps * 1e9;
    // as `loom train --offload` measures: the first product after heap_release (the profile's
    // blocks), the fixed overhead after the blocks have run, what I/O costs the compute last
    if (!(O.read_gbps > 0) && offload_tier_costs(&m, O.dir, O.probe_bytes, &c, stderr))
        die_last(EXIT_IO);
    if (offload_costs_measure(&m, &s, O.t.threads, O.prof_in, O.prof_out, 0, &c, stderr))
        die_last(O.prof_in ? EXIT_INPUT : EXIT_USAGE);
    // the fixed overhead as `loom train` measures it: after the blocks have run once here
    if (O.prof_in && offload_warmup(&m, &s, O.budget)) die_last(EXIT_INPUT);
    O.overhead = offload_overhead(NULL); // the CPU's: this command plans --offload disk
    if (!(O.read_gbps > 0) && offload_interference_costs(&m, O.dir, O.probe_bytes, &c, stderr))
        die_last(EXIT_IO);
    if (offload_plan_share(&m, &s, O.budget, O.overhead, &O.share)) die_last(EXIT_INPUT);
    printf("offload plan: L%d H%d C%d V%d (%.4gM parameters), micro-batch %d x T %d, grad-accum "
           "%d, recompute %s, dp %d, zero %d, update %s; tier %s: read %.3g GB/s, write %.3g "
           "GB/s (the optimizer's stream: %.3g / %.3g GB/s), CPU %.2f / %.2f s per GB (%.0f%% of "
           "it taken from the compute)\n",
           cfg.L, cfg.H, cfg.C, cfg.V, m.nparams / 1e6, s.B, s.T, s.K, s.recompute ? "on" : "off",
           s.dp, s.zero, s.fused ? "fused into the backward" : "streamed after the backward", O.dir,
           c.read_bps * 1e-9, c.write_bps * 1e-9, offload_opt_read_bps(&c) * 1e-9,
           offload_opt_write_bps(&c) * 1e-9, c.read_cpu * 1e9, c.write_cpu * 1e9, 100 * c.io_steal);
    printf("per micro-batch: embedding %.4g + %.4g s, layer %.4g + %.4g s, head %.4g + %.4g s "
           "(forward + backward%s); AdamW %.3g ns per parameter\n",
           c.fwd[0], c.bwd[0], c.fwd[1], c.bwd[1], c.fwd[2], c.bwd[2],
           s.recompute ? ", with the recomputed forward" : "", c.update_s_per_param * 1e9);
    printf("fixed overhead %.1f MiB (this process, measured after the blocks ran: the binary and "
           "its libraries, the backend's threads and BLAS buffers; an MPI rank holds more): %.1f "
           "MiB of --fast-mem %s left to block swapping\n",
           O.overhead / 1048576.0, O.share / 1048576.0, O.fast_mem);
    if (O.units) {
        double need = offload_fast_bytes(&m, &s, &p);
        if (p.nunits < 2) die(EXIT_USAGE, "--offload-units: at least two units");
        if (need > O.share)
            die(EXIT_INPUT,
                "--offload-units at prefetch %d needs %.1f MiB of fast memory, more than the "
                "%.1f MiB --fast-mem %s leaves after the fixed overhead",
                p.prefetch, need / 1048576.0, O.share / 1048576.0, O.fast_mem);
    } else if (offload_plan_search(&m, &s, &c, O.share, &p))
        die_last(EXIT_INPUT);
    off_report(&m, &s, &c, &p);
    offload_plan_free(&p);
    gpt_free(&m);
    return 0;
}

// The same workers as a swarm of `loom peer`s (peer_plan.h), and which of the two to run.
static void print_peer_choice(const Profile *prof, const PlanInput *in, int tau,
                              const PeerWire *wire, const Plan *best) {
    static const char *EX[] = {"all", "sharded"}, *COMP[] = {"none", "int8", "topk"};
    PeerPlan pp;
    if (!plan_peers(prof, in, tau, wire, &pp)) {
        printf("peers: %d x loom peer do not fit the memory (each holds the model and its "
               "outer state)\n",
               in->workers);
        return;
    }
    char topk[64] = "";
    if (pp.compress == PEER_COMP_TOPK)
        snprintf(topk, sizeof topk, " --topk-frac %g%s", wire->topk_frac,
                 wire->topk_2bit ? " --topk-values 2bit" : "");
    printf("peers: %d x loom peer --tau %d --batch %d --grad-accum %d%s --peer-exchange %s "
           "--outer-compress %s%s: %.1f tok/s (step %.3f s, the Δ exchange %.3f MiB sent per "
           "peer, %.3f s per round%s), %.1f MiB each\n",
           pp.peers, pp.tau, pp.b, pp.K, pp.recompute ? " --recompute" : "", EX[pp.exchange],
           COMP[pp.compress], topk, pp.tokens_per_s, pp.step_s, pp.sent_bytes / 1048576,
           pp.exchange_s,
           pp.exchange_s > pp.tau * pp.step_s ? ", longer than the round: exposed" : ", hidden",
           pp.mem_bytes / 1048576);
    int peers = pp.tokens_per_s > best->tokens_per_s;
    printf("choice: %s (%.2fx the other)\n",
           peers                          ? "peers (loom peer)"
           : best->d > 1                  ? "pipeline (the best plan above)"
           : best->tp > 1 || best->cp > 1 ? "tensor/context parallel (the best plan above)"
                                          : "data parallel (the best plan above)",
           peers ? pp.tokens_per_s / best->tokens_per_s : best->tokens_per_s / pp.tokens_per_s);
}

int cmd_plan(int argc, char **argv) {
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--offload") || !strncmp(argv[i], "--offload=", 10))
            return cmd_plan_offload(argc, argv);
    PlanArgs a;
    if (plan_parse(argc, argv, &a)) return 0;
    PeerWire wire = {.exchange = !strcmp(a.peer_exchange, "all")       ? PEER_EX_ALL
                                 : !strcmp(a.peer_exchange, "sharded") ? PEER_EX_SHARDED
                                                                       : PEER_EX_ANY,
                     .compress = !strcmp(a.outer_compress, "none")   ? PEER_COMP_NONE
                                 : !strcmp(a.outer_compress, "int8") ? PEER_COMP_INT8
                                 : !strcmp(a.outer_compress, "topk") ? PEER_COMP_TOPK
                                                                     : PEER_COMP_ANY,
                     .topk_frac = a.topk_frac,
                     .topk_2bit = !strcmp(a.topk_values, "2bit")};
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
    in.be = backend_select(a.device, 1); // for the activations' size (its attention's state)
    if (!in.be) die_last(EXIT_USAGE);
    if (world->size > 1 && !plan_links(&a, world, &in)) return 0;
    Plan *pl = xcalloc((size_t)a.top, sizeof(Plan));
    int k = plan_search(&prof, &in, pl, a.top);
    printf("plans for %d workers (%d per machine), %.1f GiB each, %.3g Gbit/s between machines, "
           "%.3g within, global batch %d x T %d (model L%d C%d V%d; 2BW schedule when d > 1)\n",
           a.workers, in.node_size, a.mem_gb, in.bandwidth * 8e-9, in.intra_bandwidth * 8e-9,
           a.gbatch, prof.T, prof.cfg.L, prof.cfg.C, prof.cfg.V);
    if (!k) die(EXIT_INPUT, "no plan fits %.1f GiB per worker", a.mem_gb);
    print_plans(pl, k, stdout);
    printf("best: loom train --dp %d --pp %d --tp %d --cp %d --batch %d --grad-accum %d%s%s%s\n",
           pl[0].w, pl[0].d, pl[0].tp, pl[0].cp, pl[0].b, pl[0].K,
           pl[0].d > 1 ? " --schedule 2bw --stage-layers " : "",
           pl[0].d > 1 ? pl[0].stage_layers : "", pl[0].recompute ? " --recompute" : "");
    print_peer_choice(&prof, &in, a.tau, &wire, &pl[0]);
    if (a.json && write_json(a.json, pl, k)) die_last(EXIT_IO);
    free(pl);
    return 0;
}
