// ckpt_save.c — the collective coordination of a checkpoint save (see ckpt_save.h).
#include "ckpt_save.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common.h"
#include "../testhooks.h"

// Rank 0's commit (manifest, rename, pruning), with the LOOM_SAVE_DELAY slow-disk test hook.
static int commit(const char *dir, const char *part, const CkptMeta *meta, const CkptShardInfo *si,
                  int n, CkptExtraFn extra, void *extra_ctx, int keep) {
    double d = testhook_save_delay(meta->step);
    struct timespec nap = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
    if (d > 0) nanosleep(&nap, NULL);
    return ckpt_commit(dir, part, meta, si, n, extra, extra_ctx, keep);
}

// Whether any rank of c failed (collective): the lowest failing rank's message (loom_errmsg)
// becomes every rank's, so that all report the same reason.
static int agree_failure(const Comm *c, int failed) {
    double *f = xcalloc((size_t)c->size, sizeof *f);
    f[c->rank] = failed != 0;
    comm_allreduce_f64(c, f, c->size);
    int first = -1;
    for (int q = c->size - 1; q >= 0; q--)
        if (f[q] != 0) first = q;
    free(f);
    if (first < 0) return 0;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", c->rank == first ? loom_errmsg() : "");
    comm_broadcast(c, msg, sizeof msg, first);
    loom_fail("%s", msg);
    return 1;
}

// Writes this rank's shard and files into part; its entry of info: written?, lo, hi, crc,
// arrays (doubles hold every value exactly). 0 or -1 (loom_errmsg).
static int write_mine(const Comm *c, const char *part, const CkptShard *mine, const CkptMeta *meta,
                      CkptExtraFn rank_files, void *rank_ctx, double *info) {
    int rc = 0;
    if (mine) {
        CkptShardInfo si;
        rc = ckpt_write_shard(part, c->rank, meta->step, mine, &si);
        double *e = info + 5 * c->rank;
        e[0] = 1, e[1] = (double)si.lo, e[2] = (double)si.hi, e[3] = si.crc, e[4] = si.arrays;
    }
    if (!rc && rank_files) rc = rank_files(part, rank_ctx);
    if (!rc && testhook_save_rank_fault(c->rank, meta->step))
        rc = loom_fail("%s: injected fault on rank %d (LOOM_FAULT_SAVE)", part, c->rank);
    return rc;
}

// Rank 0 commits what every rank wrote (info: write_mine's entries). 0 or -1.
static int commit_all(const Comm *c, const char *dir, const char *part, const double *info,
                      const CkptMeta *meta, CkptExtraFn extra, void *extra_ctx, int keep) {
    CkptShardInfo *si = xcalloc((size_t)c->size, sizeof *si);
    for (int q = 0; q < c->size; q++) {
        const double *e = info + 5 * q;
        si[q] = (CkptShardInfo){.written = e[0] != 0,
                                .lo = (size_t)e[1],
                                .hi = (size_t)e[2],
                                .crc = (uint32_t)e[3],
                                .arrays = (int)e[4]};
    }
    int rc = commit(dir, part, meta, si, c->size, extra, extra_ctx, keep);
    free(si);
    return rc;
}

// Every failure is agreed (agree_failure) before anyone goes on, so all ranks return the same
// status and reason; after a failure rank 0, which created the partial directory, removes it
// once every rank is done writing into it (the previous checkpoints and `latest` are untouched).
int ckpt_save_collective(const char *dir, const Comm *c, const CkptShard *mine,
                         const CkptMeta *meta, CkptExtraFn extra, void *extra_ctx,
                         CkptExtraFn rank_files, void *rank_ctx, int keep) {
    // Writing files is local work the other ranks wait for in their next collective on c: a
    // busy section, so their watchdog hears this rank is working (comm_busy_begin).
    char part[4200];
    comm_busy_begin(c);
    if (c->rank == 0) testhook_save_gate(meta->step);
    int made = c->rank == 0 && ckpt_begin(dir, meta->step, part, sizeof part) == 0;
    int rc =
        c->rank != 0 ? path_fmt(part, sizeof part, "%s/step_%08d.partial", dir, meta->step) : !made;
    comm_busy_end();
    if (agree_failure(c, rc)) { // also a barrier: the directory exists for everyone
        if (made) ckpt_discard(part);
        return -1;
    }
    double *info = xcalloc(5 * (size_t)c->size, sizeof(double));
    comm_busy_begin(c);
    rc = write_mine(c, part, mine, meta, rank_files, rank_ctx, info);
    comm_busy_end();
    comm_allreduce_f64(c, info, 5 * c->size);
    if (!agree_failure(c, rc)) { // every rank is done writing
        comm_busy_begin(c);
        rc = c->rank == 0 ? commit_all(c, dir, part, info, meta, extra, extra_ctx, keep) : 0;
        comm_busy_end();
        rc = agree_failure(c, rc);
    } else {
        rc = 1;
    }
    free(info);
    if (rc && c->rank == 0) {
        comm_busy_begin(c);
        ckpt_discard(part);
        comm_busy_end();
    }
    return rc ? -1 : 0;
}

int ckpt_tp_assemble(const Comm *c, const GPT *whole, const GPT *part, const float *src, size_t lo,
                     size_t hi, int to, float *dst) {
    const size_t W = (size_t)1 << 22;
    size_t *counts = xcalloc((size_t)c->size, sizeof *counts);
    float *win = xalloc_floats(hi - lo < W ? hi - lo + 1 : W), dummy = 0;
    int rc = 0;
    for (size_t a = lo; a < hi && !rc; a += W) {
        size_t len = hi - a < W ? hi - a : W;
        memset(win, 0, len * sizeof(float));
        gpt_tp_to_whole_range(whole, part, c->rank, src, a, len, win);
        counts[to] = len;
        CommReq q = comm_ireduce_scatter(c, win, c->rank == to ? dst + (a - lo) : &dummy, counts);
        rc = comm_wait(&q);
    }
    free(win), free(counts);
    return rc;
}

float *ckpt_tp_gather_parts(const Comm *c, const float *mine, size_t np) {
    size_t n = (size_t)c->size, *counts = xmalloc(2 * n * sizeof *counts), *displs = counts + n;
    float *all = xmalloc((n * np + 1) * sizeof(float));
    for (size_t r = 0; r < n; r++)
        counts[r] = np, displs[r] = r * np;
    memcpy(all + (size_t)c->rank * np, mine, np * sizeof(float));
    int rc = comm_allgatherv(c, all, counts, displs);
    free(counts);
    if (rc) free(all), all = NULL;
    return all;
}
