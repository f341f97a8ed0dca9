// strat_peer.h — what strat_peer.c (loom peer) shares with its helper files.
#pragma once
#include "strategy.h"

// The run description a joiner must match (JSON, named as the flags: the swarm's REFUSE names
// the first field that differs); free() it. Whether the model is swapped (--offload) is not
// part of it: an offloaded peer and an in-memory one train the same swarm (peer_desc.c).
char *peer_run_desc(const Strategy *s);
// --outer-compress int8: the error-feedback buffer (P floats, host memory) as peer_ef.bin in a
// checkpoint's step directory (peer_ef.c). Loading from a directory without one zeroes ef and
// says so (a checkpoint of a run without compression).
int peer_ef_save(const char *step_dir, const float *ef, size_t P);
int peer_ef_load(const char *dir, float *ef, size_t P, const char *peer_id);
