// offload_plan_run.c — the measurements the static analysis of block swapping runs on (the
// blocks' compute from a profile, the tier's bandwidth from tier_measure), what `loom train
// --offload` runs at start-up (within the budget: the profile, the probe, the warm-up and the
// fixed overhead it then measures, see offload_plan.h), the error for a budget nothing fits and
// the units as JSON.
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "../plan/profile.h"
#include "../testhooks.h"
#include "offload_plan.h"
#include "tier.h"

#define PROBE_BYTES ((size_t)256 << 20)

// The model computes on a device: --fast-mem bounds its memory (what the backend holds), and
// the tier's traffic costs the compute nothing.
static int on_device(const Backend *be) { return be && !be->host_memory; }

// The CPUs this process may run on.
static int cpus_available(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    return sched_getaffinity(0, sizeof set, &set) ? 1 : CPU_COUNT(&set);
}

// c's io_steal from its compute threads (set by whichever of the two measurements runs last).
static void set_steal(OffloadCosts *c) {
    c->io_steal = offload_io_steal(c->threads, cpus_available());
}

// The profile's row for shape s into c; a profile of another shape is an error.
static int costs_from(const Profile *pr, const GPT *m, const OffloadShape *s, const char *path,
                      OffloadCosts *c) {
    const GPTConfig *a = &pr->cfg, *b = &m->cfg;
    if (a->H != b->H || a->C != b->C || a->V != b->V || pr->T != s->T)
        return loom_fail("%s: a profile of heads %d, dim %d, vocab %d at --seq %d, not of this "
                         "model (heads %d, dim %d, vocab %d) at --seq %d",
                         path, a->H, a->C, a->V, pr->T, b->H, b->C, b->V, s->T);
    const ProfileRow *row = profile_row(pr, s->B);
    if (!row) {
        char have[128] = "";
        for (int i = 0; i < pr->nrows && strlen(have) < 100; i++)
            snprintf(have + strlen(have), sizeof have - strlen(have), "%s%d", i ? ", " : "",
                     pr->rows[i].b);
        return loom_fail("%s: no row for micro-batch %d (it has %s)", path, s->B, have);
    }
    for (int k = 0; k < 3; k++) {
        c->fwd[k] = row->fwd[k];
        c->bwd[k] = row->bwd[k] + (s->recompute && k == PROF_LAYER ? row->fwd[k] : 0);
    }
    c->update_s_per_param = pr->update_s_per_param;
    c->threads = pr->threads;
    set_steal(c);
    return 0;
}

static const char *threads_words(int threads, char *th) {
    if (threads > 0)
        snprintf(th, 32, "%d thread%s", threads, threads > 1 ? "s" : "");
    else
        snprintf(th, 32, "all cores");
    return th;
}

int offload_costs_measure(const GPT *m, const OffloadShape *s, int threads,
                          const char *profile_path, const char *save_path, size_t max_bytes,
                          OffloadCosts *c, FILE *log) {
    Profile pr;
    char th[32];
    heap_release(); // what the measurement frees goes back: the fixed overhead is measured next
    if (profile_path) {
        if (profile_load(&pr, profile_path)) return -1;
        if (log)
            fprintf(log, "loom: offload plan: block costs from %s (measured with %s)\n",
                    profile_path, threads_words(pr.threads, th));
        return costs_from(&pr, m, s, profile_path, c);
    }
    if (log)
        fprintf(log,
                "loom: offload plan: profiling a layer, the embedding and the head at micro-batch "
                "%d x %d, %s...\n",
                s->B, s->T, threads_words(threads, th));
    double t0 = now_sec();
    if (profile_measure_batch(&pr, m->be, &m->cfg, s->T, s->B, threads, max_bytes)) return -1;
    if (log) fprintf(log, "loom: offload plan: profiled in %.1f s\n", now_sec() - t0);
    if (save_path && profile_save(&pr, save_path)) return -1;
    return costs_from(&pr, m, s, "profile", c);
}

// The probe's request (the executor reads a unit at a time; a one-layer unit's parameters are the
// typical request) and its file's size (`bytes`, 0: PROBE_BYTES; at least one request).
static size_t probe_piece(const GPT *m, size_t *bytes) {
    size_t piece = offload_pad(m->blocks[1].n) * sizeof(float);
    piece = (piece + TIER_ALIGN - 1) / TIER_ALIGN * TIER_ALIGN;
    *bytes = (*bytes ? *bytes : PROBE_BYTES) / TIER_ALIGN * TIER_ALIGN;
    if (*bytes < piece) *bytes = piece;
    return piece;
}

int offload_tier_costs(const GPT *m, const char *dir, size_t bytes, OffloadCosts *c, FILE *log) {
    size_t piece = probe_piece(m, &bytes);
    double t0 = now_sec();
    TierSpeed v;
    size_t chunk = offload_pad(offload_opt_chunk(m)) * sizeof(float);
    if (tier_measure(dir, m->be, bytes, piece, chunk, &v)) return -1;
    c->read_bps = v.read_bps, c->write_bps = v.write_bps;
    c->opt_read_bps = v.opt_read_bps, c->opt_write_bps = v.opt_write_bps;
    c->read_cpu = v.read_cpu, c->write_cpu = v.write_cpu;
    set_steal(c);
    if (on_device(m->be)) c->io_steal = 0; // a device computes: the I/O threads take no share
    if (log)
        fprintf(log,
                "loom: offload plan: tier %s: read %.3g GB/s, write %.3g GB/s, CPU %.2f / %.2f s "
                "per GB (%.1f MiB in requests of %.2f MiB); the optimizer's stream of %.2f MiB "
                "pieces: read %.3g GB/s, write %.3g GB/s (%.1f s)\n",
                dir ? dir : "host memory", c->read_bps * 1e-9, c->write_bps * 1e-9,
                c->read_cpu * 1e9, c->write_cpu * 1e9, bytes / 1048576.0, piece / 1048576.0,
                chunk / 1048576.0, c->opt_read_bps * 1e-9, c->opt_write_bps * 1e-9, now_sec() - t0);
    return 0;
}

// Rate r of a tier whose fraction f of the bytes moves at h and the rest at r: the two parts
// taken one after the other (they overlap in a run: an upper bound on the time).
static double blend(double f, double h, double r) {
    return h > 0 && r > 0 ? 1.0 / (f / h + (1.0 - f) / r) : r;
}

int offload_host_cache_costs(const GPT *m, const OffloadShape *s, size_t host_mem, size_t bytes,
                             OffloadCosts *c, FILE *log) {
    if (testhook_offload_fixed_costs()) return 0;
    OffloadCosts h = *c;
    if (offload_tier_costs(m, NULL, bytes, &h, log)) return -1;
    double P = (double)m->nparams, owned = s->zero && s->dp > 1 ? P / s->dp : P;
    double state = 4.0 * (P + 3.0 * owned + (s->co2 ? 3.0 * P : 0.0));
    double room = (double)host_mem - (double)tier_bounce_bytes();
    double f = room <= 0 ? 0 : room >= state ? 1 : room / state;
    c->read_bps = blend(f, h.read_bps, c->read_bps);
    c->write_bps = blend(f, h.write_bps, c->write_bps);
    c->opt_read_bps = blend(f, offload_opt_read_bps(&h), offload_opt_read_bps(c));
    c->opt_write_bps = blend(f, offload_opt_write_bps(&h), offload_opt_write_bps(c));
    c->read_cpu *= 1.0 - f, c->write_cpu *= 1.0 - f;
    if (log)
        fprintf(log,
                "loom: offload plan: --host-mem holds %.0f%% of the state: the tier's rates "
                "blended to read %.3g GB/s, write %.3g GB/s\n",
                100.0 * f, c->read_bps * 1e-9, c->write_bps * 1e-9);
    return 0;
}

int offload_interference_costs(const GPT *m, const char *dir, size_t bytes, OffloadCosts *c,
                               FILE *log) {
    if (testhook_offload_fixed_costs()) return 0; // io_slow as fixed_costs set it
    if (on_device(m->be)) { // a device computes: the tier's copies take none of its time
        c->io_slow = 0;
        return 0;
    }
    size_t piece = probe_piece(m, &bytes);
    double t0 = now_sec();
    if (offload_io_interference(m, dir, bytes, piece, &c->io_slow)) return -1;
    heap_release(); // what it allocated goes back before the plan's buffers exist
    if (log)
        fprintf(log,
                "loom: offload plan: the compute loses %.3g s per GB the tier moves beside it "
                "(%.1f s)\n",
                c->io_slow * 1e9, now_sec() - t0);
    return 0;
}

double offload_io_steal(int threads, int ncpu) {
    int io = tier_workers();
    if (ncpu < 1) ncpu = 1;
    if (threads <= 0 || threads > ncpu) threads = ncpu;
    double f = (double)(threads + io - ncpu) / io;
    return f < 0 ? 0 : f > 1 ? 1 : f;
}

// What the process holds before anything of the run is allocated (the allocator's free memory
// handed back first), or under a device what its backend holds.
static double held_now(const Backend *be) {
    if (on_device(be)) return (double)be->mem_used();
    heap_release();
    return (double)rss_bytes();
}

// LOOM_OFFLOAD_COSTS=fixed (a test hook: the suite's bit-for-bit comparisons hold for any plan,
// and a plan of fixed costs is the same on every run): the blocks at a nominal 10 GFLOP/s
// (backward 2x, plus the forward with --recompute), AdamW 2 ns a parameter, a tier of 1 GB/s
// that costs no CPU. Nothing is measured; the backend is warmed up as a profile's user does.
static void fixed_costs(const GPT *m, const OffloadShape *s, int threads, OffloadCosts *c) {
    double BT = (double)s->B * s->T, C = m->cfg.C, flops = 1e10;
    double f[3] = {BT * C * 4, 2 * BT * 12 * C * C + 4 * BT * s->T * C, 2 * BT * C * m->cfg.V};
    for (int k = 0; k < 3; k++)
        c->fwd[k] = f[k] / flops, c->bwd[k] = 2 * c->fwd[k] + (s->recompute && k == 1) * c->fwd[k];
    c->update_s_per_param = 2e-9, c->threads = threads;
    c->read_bps = c->write_bps = c->opt_read_bps = c->opt_write_bps = 1e9;
    c->read_cpu = c->write_cpu = c->io_steal = c->io_slow = 0;
}

int offload_startup_costs(const GPT *m, const OffloadShape *s, int threads, const char *dir,
                          size_t host_mem, size_t budget, const char *profile_path, OffloadCosts *c,
                          FILE *log) {
    double held = held_now(m->be), room = (double)budget - held;
    if (offload_plan_min_bytes(m, s, NULL) > room) return offload_plan_fail(m, s, budget, held, 0);
    if (testhook_offload_fixed_costs()) {
        fixed_costs(m, s, threads, c);
        if (log) fprintf(log, "loom: offload plan: fixed costs (LOOM_OFFLOAD_COSTS=fixed)\n");
        return profile_warmup(m->be, &m->cfg, s->T, s->B, (size_t)room);
    }
    if (offload_costs_measure(m, s, threads, profile_path, NULL, (size_t)room, c, log)) return -1;
    // the probe's buffers stay within half of what is left: nothing else is allocated yet
    size_t probe = (size_t)(room / 2) < PROBE_BYTES ? (size_t)(room / 2) : PROBE_BYTES;
    if (offload_tier_costs(m, dir, probe, c, log)) return -1;
    return dir && host_mem ? offload_host_cache_costs(m, s, host_mem, probe, c, log) : 0;
}

int offload_warmup(const GPT *m, const OffloadShape *s, size_t budget) {
    double held = held_now(m->be), room = (double)budget - held;
    if (offload_plan_min_bytes(m, s, NULL) > room) return offload_plan_fail(m, s, budget, held, 0);
    return profile_warmup(m->be, &m->cfg, s->T, s->B, (size_t)room);
}

double offload_overhead(const Backend *be) {
    return held_now(be) + (on_device(be) ? 0 : OFFLOAD_LATE_BYTES);
}

int offload_plan_share(const GPT *m, const OffloadShape *s, size_t budget, double overhead,
                       double *share) {
    *share = (double)budget - overhead;
    return offload_plan_min_bytes(m, s, NULL) > *share
               ? offload_plan_fail(m, s, budget, overhead, 1)
               : 0;
}

int offload_plan_for_run(const GPT *m, const OffloadShape *s, const OffloadCosts *c, double share,
                         OffloadPlan *out, FILE *log) {
    if (offload_plan_search(m, s, c, share, out)) return -1;
    if (log) {
        char *units = offload_units_json(out);
        fprintf(log,
                "loom: offload plan: units %s, prefetch %d: %.1f MiB of the %.1f MiB left to "
                "swapping, %.1f MiB moved per step, predicted %.3f s per step\n",
                units, out->prefetch, out->peak_fast_bytes / 1048576.0, share / 1048576.0,
                out->io_bytes_per_step / 1048576.0, out->predicted_step_ms / 1e3);
        free(units);
    }
    return 0;
}

static const char *size_str(double b, char *buf) { return offload_size_str(b, buf, 32); }

// What a unit holds, in words.
static const char *unit_words(const GPT *m, OffloadUnit u) {
    int e = u.first == 0, h = u.last == m->nblocks - 1;
    return e && h ? "the whole model"
           : h    ? "with the head: its tied wte and the wte gradient H"
           : e    ? "with the embedding"
                  : "transformer layers";
}

int offload_plan_fail(const GPT *m, const OffloadShape *s, size_t budget, double overhead,
                      int measured) {
    OffloadPlan p = {0};
    double least = offload_plan_min_bytes(m, s, &p), big = 0;
    double part[3] = {0, offload_workspace_bytes(m, s),
                      4.0 * (s->co2 ? 10 : 8) * (double)offload_opt_chunk(m) + OFFLOAD_IO_BYTES};
    const char *what[3] = {"slots for the units in flight (the model's largest blocks)",
                           "activations and workspace (--batch, --seq, --grad-accum, --recompute)",
                           "streaming buffers (fixed)"};
    int bu = 0, most = 0;
    if (p.nunits) part[0] = 4.0 * (double)offload_slots_floats(m, &p);
    for (int u = 0; u < p.nunits; u++) {
        double f = 4.0 * (double)offload_unit_floats(m, p.unit[u]);
        if (f > big) big = f, bu = u;
    }
    for (int i = 1; i < 3; i++)
        if (part[i] > part[most]) most = i;
    char b[8][32], held[256] = "";
    if (overhead > 0 && measured)
        snprintf(held, sizeof held,
                 ", and the process holds a fixed overhead of %s besides (the binary, its "
                 "libraries and MPI, the backend's threads and BLAS buffers): --fast-mem must be "
                 "at least %s",
                 size_str(overhead, b[6]), size_str(overhead + least, b[7]));
    else if (overhead > 0)
        snprintf(held, sizeof held,
                 ", and the process already holds %s before its backend has run: --fast-mem must "
                 "be more than %s",
                 size_str(overhead, b[6]), size_str(overhead + least, b[7]));
    int rc = loom_fail(
        "--fast-mem %s is too small for this model with --batch %d --seq %d --grad-accum %d%s: "
        "block swapping needs at least %s here (slots for the units in flight %s [the "
        "largest: blocks %d-%d, %s, %s]; activations and workspace %s; streaming buffers %s; "
        "the most of it: the %s)%s",
        size_str((double)budget, b[0]), s->B, s->T, s->K, s->recompute ? " --recompute" : "",
        size_str(least, b[1]), size_str(part[0], b[2]), p.nunits ? p.unit[bu].first : 0,
        p.nunits ? p.unit[bu].last : 0, p.nunits ? unit_words(m, p.unit[bu]) : "-",
        size_str(big, b[3]), size_str(part[1], b[4]), size_str(part[2], b[5]), what[most], held);
    offload_plan_free(&p);
    return rc;
}

char *offload_units_json(const OffloadPlan *p) {
    size_t cap = 2 + (size_t)p->nunits * 26, len = 0;
    char *t = xmalloc(cap);
    len += (size_t)snprintf(t, cap, "[");
    for (int u = 0; u < p->nunits; u++)
        len += (size_t)snprintf(t + len, cap - len, "%s[%d,%d]", u ? "," : "", p->unit[u].first,
                                p->unit[u].last);
    snprintf(t + len, cap - len, "]");
    return t;
}
