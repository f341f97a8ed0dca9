// ckpt_save.c — the collective coordination of a checkpoint save (see ckpt_save.h).
#include "ckpt_save.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common.h"
#include "../testhooks.h"

// Rank 0's commit (manifest, rename, pruning), with the LOOM_SAVE_DELAY slow-disk test hook.
static double commit(const char *dir, const char *part, const CkptMeta *meta,
                     const CkptShardInfo *si, int n, CkptExtraFn extra, void *extra_ctx, int keep) {
    double d = testhook_save_delay(meta->step);
    struct timespec nap = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
    if (d > 0) nanosleep(&nap, NULL);
    return ckpt_commit(dir, part, meta, si, n, extra, extra_ctx, keep);
}

int ckpt_save_collective(const char *dir, const Comm *c, const CkptShard *mine,
                         const CkptMeta *meta, CkptExtraFn extra, void *extra_ctx,
                         CkptExtraFn rank_files, void *rank_ctx, int keep) {
    // Writing files is local work the other ranks wait for in their next collective on c: a
    // busy section, so their watchdog hears this rank is working (comm_busy_begin).
    char part[4200];
    comm_busy_begin(c);
    double ok = c->rank != 0
                    ? path_fmt(part, sizeof part, "%s/step_%08d.partial", dir, meta->step) == 0
                    : ckpt_begin(dir, meta->step, part, sizeof part) == 0;
    comm_busy_end();
    comm_allreduce_f64(c, &ok, 1); // also a barrier: the directory exists for everyone
    if (ok < c->size)
        return c->rank == 0 ? -1 : loom_fail("%s: checkpoint directory not created", dir);
    // per rank: written?, lo, hi, crc, arrays (doubles hold every value exactly)
    double *info = xcalloc(5 * (size_t)c->size, sizeof(double));
    double wrote_ok = 1;
    comm_busy_begin(c);
    if (mine) {
        CkptShardInfo si;
        if (ckpt_write_shard(part, c->rank, meta->step, mine, &si)) wrote_ok = 0;
        double *e = info + 5 * c->rank;
        e[0] = 1, e[1] = (double)si.lo, e[2] = (double)si.hi, e[3] = si.crc, e[4] = si.arrays;
    }
    if (rank_files && rank_files(part, rank_ctx)) wrote_ok = 0;
    comm_busy_end();
    comm_allreduce_f64(c, info, 5 * c->size);
    comm_allreduce_f64(c, &wrote_ok, 1);
    double rc = 0;
    if (wrote_ok < c->size) {
        rc = -1;
    } else if (c->rank == 0) {
        CkptShardInfo *si = xcalloc((size_t)c->size, sizeof *si);
        for (int q = 0; q < c->size; q++) {
            const double *e = info + 5 * q;
            si[q] = (CkptShardInfo){.written = e[0] != 0,
                                    .lo = (size_t)e[1],
                                    .hi = (size_t)e[2],
                                    .crc = (uint32_t)e[3],
                                    .arrays = (int)e[4]};
        }
        comm_busy_begin(c);
        rc = commit(dir, part, meta, si, c->size, extra, extra_ctx, keep);
        comm_busy_end();
        free(si);
    }
    free(info);
    comm_broadcast(c, &rc, sizeof rc, 0);
    if (rc && c->rank != 0) loom_fail("%s: checkpoint failed on another rank", part);
    if (rc && wrote_ok < c->size && c->rank == 0 && !mine)
        loom_fail("%s: a rank failed to write its shard", part);
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
