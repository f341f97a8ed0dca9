// pipeline_export.c — an export of a swapped pipeline (--pp with --offload) within --fast-mem:
// the whole model's newest parameters are sent to the pipeline's first rank stage by stage,
// window by window, each stage reading its range from its tier (PipeShard.fetch, one block in
// its update buffer), into a scratch file of that rank (part_spill_*); the export then reads
// the file tensor by tensor through the stage's idle slot (ParamSource). No rank holds more of
// the model than a window and a block.
#include <stdlib.h>

#include "../common.h"
#include "pipeline_swap.h"

// Every stage's range [r[2s], r[2s+1]) on every rank; 0, or -1 when they do not tile [0, N).
static int stage_ranges(const Comm *c, const PipeShard *sh, size_t N, double *r) {
    r[2 * c->rank] = (double)sh->lo, r[2 * c->rank + 1] = (double)sh->hi;
    comm_allreduce_f64(c, r, 2 * c->size);
    double at = 0;
    for (int s = 0; s < c->size; s++)
        at = r[2 * s] == at ? r[2 * s + 1] : -1;
    return at == (double)N ? 0 : loom_fail("offload: the pipeline's stages do not tile the model");
}

// Stage st's range [a, e) sent to rank 0, which files it (sp).
static int send_stage(const Comm *c, const PipeShard *sh, PartSpill *sp, float *win, int st,
                      size_t a, size_t e) {
    int bad = 0;
    for (size_t len; a < e; a += len) {
        len = part_spill_len(0, a, e); // (the file's chunks are windows)
        float *buf = sp ? part_spill_at(sp, a) : win;
        if (c->rank == st && sh->fetch(sh->fetch_ctx, 0, a, len, buf)) bad = 1;
        if (st != 0) comm_broadcast(c, buf, len * sizeof(float), st);
        if (sp && part_spill_put(sp, 0, a, len)) bad = 1;
    }
    return bad;
}

int pipeline_swap_source(Pipeline *p, const Comm *c, size_t N, const char *dir, int rank,
                         PartSpill **spill, ParamSource *src) {
    PipeShard sh;
    pipeline_shard(p, &sh);
    double *r = xcalloc(2 * (size_t)c->size, sizeof *r);
    int rc = stage_ranges(c, &sh, N, r);
    PartSpill *sp = !rc && c->rank == 0 ? part_spill_open(dir, rank, 0, N, 1) : NULL;
    double fail = rc || (c->rank == 0 && !sp); // agreed: every rank then runs every broadcast
    comm_allreduce_f64(c, &fail, 1);
    float *win = fail ? NULL : xalloc_floats(part_spill_len(0, 0, N));
    for (int st = 0; st < c->size && !fail; st++)
        if (send_stage(c, &sh, sp, win, st, (size_t)r[2 * st], (size_t)r[2 * st + 1])) rc = -1;
    free(win), free(r);
    double bad = rc != 0; // a stage that could not read its tier fails the export everywhere
    if (!fail) comm_allreduce_f64(c, &bad, 1);
    if (fail || bad) {
        part_spill_free(sp);
        return -1;
    }
    *spill = sp;
    if (sp)
        *src = (ParamSource){.fetch = part_spill_params,
                             .ctx = sp,
                             .scratch = sh.scratch,
                             .scratch_floats = sh.scratch_floats};
    return 1;
}
