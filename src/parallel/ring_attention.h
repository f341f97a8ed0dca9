// ring_attention.h — ring attention over the context-parallel communicator (--cp): the
// attention hooks of a context-parallel model (ContextParallel in model/gpt.h).
#pragma once
#include "../model/gpt.h"
#include "comm.h"

typedef struct CpRing CpRing;

// A ring over cp (this rank cp->rank of cp->size) running be's attn_chunk_* kernels.
CpRing *cp_ring_create(const Comm *cp, const Backend *be);
// Points m's attention at the ring (m->cp: n, i, the hooks).
void cp_ring_install(GPT *m, CpRing *r);
// Floats this rank has sent around the ring, and the ring's attention calls (forward and
// backward, recomputed forwards included; paused passes not counted).
void cp_ring_counts(const CpRing *r, double *floats, double *calls);
// paused = 1: stop counting (a validation pass), 0: count again.
void cp_ring_pause(CpRing *r, int paused);
void cp_ring_free(CpRing *r);
