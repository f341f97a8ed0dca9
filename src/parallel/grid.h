// grid.h — the process grid: world = dp × pp × tp × cp, each rank's coordinates and one
// communicator per axis, built once. Rank layout: tp varies fastest, then cp, then dp, then pp
// (rank = ((pp_i · dp + dp_i) · cp + cp_i) · tp + tp_i), so tensor-parallel groups sit on one
// machine, context-parallel rings next to them, and pipeline stages span machines.
#pragma once
#include "comm.h"

typedef struct {
    int dp, pp, tp, cp;         // axis sizes
    int dp_i, pp_i, tp_i, cp_i; // this rank's coordinates
    Comm *world, *dp_comm, *pp_comm, *tp_comm, *cp_comm;
    // ranks holding the same parameters (same pp_i and tp_i): dp × cp, rank dp_i · cp + cp_i
    Comm *dpcp_comm;
} Grid;

// Fails (loom_errmsg) when dp·pp·tp·cp differs from the world size.
int grid_create(Grid *g, Comm *world, int dp, int pp, int tp, int cp);
