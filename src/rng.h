// rng.h — a small deterministic random number generator (PCG32) whose whole state is two
// integers, so checkpoints can store it and resumed runs draw the same numbers.
#pragma once
#include <stdint.h>

typedef struct {
    uint64_t state, inc;
} Rng;

void rng_seed(Rng *r, uint64_t seed, uint64_t stream);
uint32_t rng_u32(Rng *r);
float rng_uniform(Rng *r);              // [0, 1)
float rng_normal(Rng *r);               // N(0, 1)
uint32_t rng_below(Rng *r, uint32_t n); // uniform in [0, n)
