// grid.h — the process grid: world = dp × pp × tp, each rank's coordinates and one
// communicator per axis, built once. Rank layout: tp varies fastest, then dp, then pp
// (rank = (pp_i · dp + dp_i) · tp + tp_i), so tensor-parallel groups sit on one machine and
// pipeline stages span machines.
#pragma once
#include "comm.h"

typedef struct {
    int dp, pp, tp;       // axis sizes
    int dp_i, pp_i, tp_i; // this rank's coordinates
    Comm *world, *dp_comm, *pp_comm, *tp_comm;
} Grid;

// Fails (loom_errmsg) when dp·pp·tp differs from the world size.
int grid_create(Grid *g, Comm *world, int dp, int pp, int tp);
