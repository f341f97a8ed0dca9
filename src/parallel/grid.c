// grid.c — rank ↔ coordinates and the per-axis communicators (see grid.h).
#include "grid.h"

#include "../common.h"

int grid_create(Grid *g, Comm *world, int dp, int pp, int tp) {
    if (dp < 1 || pp < 1 || tp < 1) return loom_fail("--dp, --pp and --tp must be >= 1");
    if (dp * pp * tp != world->size)
        return loom_fail("--dp %d x --pp %d x --tp %d = %d ranks, but the job has %d (mpirun -np)",
                         dp, pp, tp, dp * pp * tp, world->size);
    g->dp = dp, g->pp = pp, g->tp = tp;
    g->world = world;
    int r = world->rank;
    g->tp_i = r % tp;
    g->dp_i = (r / tp) % dp;
    g->pp_i = r / (tp * dp);
    // ranks sharing the other two coordinates form an axis communicator
    g->dp_comm = comm_split(world, g->pp_i * tp + g->tp_i, g->dp_i, "dp");
    g->pp_comm = comm_split(world, g->dp_i * tp + g->tp_i, g->pp_i, "pp");
    g->tp_comm = comm_split(world, g->pp_i * dp + g->dp_i, g->tp_i, "tp");
    return 0;
}
