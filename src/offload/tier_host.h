// tier_host.h — the host-memory tier's internals (tier_host.c), called by tier.c's functions
// when a Tier is host memory under a device, and by tier_place.c, which opens it (alone, or as
// the front part of a split tier); only the tier's files include this.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "../backend/backend.h"

typedef struct TierHost TierHost;

TierHost *tier_host_open(const Backend *be, size_t bytes); // be has a copy stream (tier_place.c)
void tier_host_close(TierHost *h);                         // after every request completed
uint64_t tier_host_submit(TierHost *h, int write, size_t off, const void *buf, size_t n);
int tier_host_wait(TierHost *h, uint64_t ticket); // and every earlier one
int tier_host_done(TierHost *h, uint64_t ticket);
uint64_t tier_host_last(const TierHost *h);
double *tier_host_waited(TierHost *h);
void tier_host_bytes(const TierHost *h, uint64_t *read, uint64_t *written);
const Backend *tier_host_backend(const TierHost *h);
