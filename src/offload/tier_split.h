// tier_split.h — the split tier's internals (tier_split.c), called by tier.c's functions when a
// Tier is page-locked host memory above a disk under a device (tier_open_on with a directory
// and host_mem); nothing else includes this.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "tier.h"

typedef struct TierSplit TierSplit;

// front: the first `cut` bytes of the tier (a host tier); back: the other bytes (a disk tier
// under the device, its offset 0 the tier's `cut`). Takes both.
TierSplit *tier_split_open(Tier *front, Tier *back, size_t cut);
void tier_split_close(TierSplit *s); // after every request completed; closes both
uint64_t tier_split_submit(TierSplit *s, int write, size_t off, const void *buf, size_t n);
int tier_split_wait(TierSplit *s, uint64_t ticket, int upto); // upto: and every earlier one
int tier_split_done(TierSplit *s, uint64_t ticket, int upto);
int tier_split_drain(TierSplit *s);
double tier_split_waited(const TierSplit *s);
void tier_split_reset_waited(TierSplit *s);
void tier_split_bytes(const TierSplit *s, uint64_t *read, uint64_t *written);
const Tier *tier_split_back(const TierSplit *s); // the disk part
size_t tier_split_cut(const TierSplit *s);
