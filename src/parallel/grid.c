// grid.c — rank ↔ coordinates and the per-axis communicators (see grid.h).
#include "grid.h"

#include "../common.h"

int grid_create(Grid *g, Comm *world, int dp, int pp, int tp, int cp) {
    if (dp < 1 || pp < 1 || tp < 1 || cp < 1)
        return loom_fail("--dp, --pp, --tp and --cp must be >= 1");
    if (dp * pp * tp * cp != world->size)
        return loom_fail("--dp %d x --pp %d x --tp %d x --cp %d = %d ranks, but the job has %d "
                         "(mpirun -np)",
                         dp, pp, tp, cp, dp * pp * tp * cp, world->size);
    g->dp = dp, g->pp = pp, g->tp = tp, g->cp = cp;
    g->world = world;
    int r = world->rank;
    g->tp_i = r % tp;
    g->cp_i = (r / tp) % cp;
    g->dp_i = (r / (tp * cp)) % dp;
    g->pp_i = r / (tp * cp * dp);
    // ranks sharing every other coordinate form an axis communicator
    int dpcp_i = g->dp_i * cp + g->cp_i;
    g->dp_comm = comm_split(world, (g->pp_i * cp + g->cp_i) * tp + g->tp_i, g->dp_i, "dp");
    g->pp_comm = comm_split(world, (g->dp_i * cp + g->cp_i) * tp + g->tp_i, g->pp_i, "pp");
    g->tp_comm = comm_split(world, (g->pp_i * dp + g->dp_i) * cp + g->cp_i, g->tp_i, "tp");
    g->cp_comm = comm_split(world, (g->pp_i * dp + g->dp_i) * tp + g->tp_i, g->cp_i, "cp");
    g->dpcp_comm = comm_split(world, g->pp_i * tp + g->tp_i, dpcp_i, "dpcp");
    return 0;
}
