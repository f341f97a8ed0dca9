// offload_sim.h — what offload_sim.c (the event simulation of one swapped step) shares with
// the search in offload_plan.c: the numbers of one model, shape and costs, and the simulation.
#pragma once
#include "offload_plan.h"

#define NEG (-1e300) // "long ago": before anything

static inline double dmax(double a, double b) { return a > b ? a : b; }

// What the simulation and the search need of one model, shape and costs.
typedef struct {
    const GPT *m;
    const OffloadShape *s;
    const OffloadCosts *c;
    int nb;
    double *pf, *pb;        // (nb+1) prefix sums: compute seconds of K micro-batches
    double *pp, *pl;        // (nb+1) prefix sums: padded parameter floats (all; layers only)
    double wte;             // padded floats of the tied wte (and of H)
    double own;             // the fraction of each gradient and moment this rank keeps
    double upd_cpu, upd_io; // the update pass ends max(cpu + upd_cpu, io + upd_io)
    double upd_work;        // its AdamW seconds
    double fixed;           // fast bytes besides the slots
    double *U;              // (nb*nb) offload_unit_floats of [a, b] (search only)
    double *F;              // (2*nb*nb) fused_end of [a, b] from (0, NEG) and (NEG, 0) (search)
    double *t;              // simulation scratch
} Ctx;

// Fills x for m, s and c; table: also the per-unit tables the search reads (U, F).
void offload_sim_init(Ctx *x, const GPT *m, const OffloadShape *s, const OffloadCosts *c,
                      int table);
void offload_sim_free(Ctx *x);
// One step of units un[0..n-1] at prefetch p; its seconds (work: the compute stream's work
// and where it ends before the update pass, when not NULL).
double offload_sim_step(const Ctx *x, const OffloadUnit *un, int n, int p, double *work);
// p's predicted time, fast bytes and bytes moved (d: the details, when not NULL).
void offload_sim_fill(const Ctx *x, OffloadPlan *p, OffloadPrediction *d);
