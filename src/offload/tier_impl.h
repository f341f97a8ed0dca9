// tier_impl.h — what tier.c (the disk tier and the calls every tier answers), tier_place.c
// (which tier a run opens) and the two tiers under a device (tier_host.c, tier_split.c) share.
// Not for other files.
#pragma once
#include "tier.h"
#include "tier_host.h"
#include "tier_split.h"

// A scratch file's tier (tier_open's); dev: a disk under that device (its I/O threads move
// their pieces through page-locked bounce buffers of tier_bounce_bytes in all).
Tier *tier_open_disk(const char *dir, int rank, size_t bytes, const Backend *dev);
// A Tier whose every call goes to h / to sp (bytes: the tier's size; direct and dir: its disk
// part's).
Tier *tier_of_host(TierHost *h, size_t bytes);
Tier *tier_of_split(TierSplit *sp, size_t bytes, int direct, const char *dir);
