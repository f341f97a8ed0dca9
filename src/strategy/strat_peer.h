// strat_peer.h — what strat_peer.c (loom peer) shares with its helper files.
#pragma once
#include "strategy.h"

// The run description a joiner must match (JSON, named as the flags: the swarm's REFUSE names
// the first field that differs); free() it. Whether the model is swapped (--offload) is not
// part of it: an offloaded peer and an in-memory one train the same swarm (peer_desc.c).
char *peer_run_desc(const Strategy *s);
