// rng.c — PCG32 (O'Neill's permuted congruential generator) plus uniform/normal helpers.
#include "rng.h"

#include <math.h>

void rng_seed(Rng *r, uint64_t seed, uint64_t stream) {
    r->state = 0;
    r->inc = (stream << 1u) | 1u;
    rng_u32(r);
    r->state += seed;
    rng_u32(r);
}

uint32_t rng_u32(Rng *r) {
    uint64_t old = r->state;
    r->state = old * 6364136223846793005ULL + r->inc;
    uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = (uint32_t)(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31));
}

float rng_uniform(Rng *r) { return (rng_u32(r) >> 8) * (1.0f / 16777216.0f); }

float rng_normal(Rng *r) {
    // Box-Muller; one value per call keeps the state easy to reason about.
    float u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-12f) u1 = 1e-12f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.283185307179586f * u2);
}

uint32_t rng_below(Rng *r, uint32_t n) {
    // rejection sampling removes modulo bias
    uint32_t threshold = (uint32_t)(-n) % n;
    for (;;) {
        uint32_t x = rng_u32(r);
        if (x >= threshold) return x % n;
    }
}
