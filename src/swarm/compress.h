// compress.h — --outer-compress int8|topk (loom peer): the compression of a peer's outer Δ
// with error feedback, and how a compressed Δ travels (swarm/compress.c).
//
// A Δ of P floats is cut into chunks of CQ_CHUNK floats (the last one shorter); a chunk travels
// as its scale s = max|x| / 127 (fp32) and one int8 code per float, q = round(x / s) (ties away
// from zero; 0 where s = 0; a chunk that is not finite: s = NaN, codes 0). Its value is q·s,
// computed by cq_dequantize on the sender and on every receiver alike, so every peer sums the same
// bits. Error feedback: what the codes drop, e = (Δ + e) − dequant(quant(Δ + e)), is kept by the
// peer and added to its next Δ. topk sends instead the ⌈frac·P⌉ floats of Δ + e of largest
// magnitude, exact, as (index, value) pairs per piece (DELTAS); the rest is its error feedback.
// With --topk-values 2bit those values travel as 2 bits each on two levels per chunk (DELTAS2).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define CQ_CHUNK WIRE_Q8_CHUNK // 4096 floats: 16 KiB of Δ per scale (0.1 % overhead)

enum { CQ_NONE = 0, CQ_INT8 = 1, CQ_TOPK = 2 }; // --outer-compress none|int8|topk

// Chunks (scales) in n floats.
size_t cq_nchunks(size_t n);
// Codes and scales of x[0, n) (chunk k: x[k·CQ_CHUNK, ...)).
void cq_quantize(const float *x, size_t n, int8_t *q, float *scales);
// out[i] = q[i] · scales[i / CQ_CHUNK] for i < n.
void cq_dequantize(const int8_t *q, const float *scales, size_t n, float *out);
// Error feedback: x ← x + e, quantized into q / scales; then e ← x − dequant and x ← dequant
// (the Δ the swarm averages).
void cq_ef_step(float *x, float *e, size_t n, int8_t *q, float *scales);
// topk with error feedback: x ← x + e; the k elements of largest |x| (ties: the lower index;
// NaNs count as the largest) keep their value in x, the others move into e (x there is +0;
// e ← 0 where kept). k = cq_topk_count(n, frac).
void cq_topk_step(float *x, float *e, size_t n, size_t k);
size_t cq_topk_count(size_t n, double frac); // ⌈frac·n⌉, in 1..n
// --topk-values 2bit, after cq_topk_step: in each chunk, every kept value (x ≠ 0) becomes its
// sign times one of the chunk's two levels, lo = levels[2k] (the mean of the kept |x| below
// their mean) or hi = levels[2k + 1] (the mean of those at or above it), the nearer one (half-way:
// hi); e ← x − that value where x was kept (e was 0 there), x ← the value. A chunk with nothing
// kept has levels 0; one with a kept NaN or infinity has levels NaN (its kept values NaN, as
// int8's). levels: 2 · cq_nchunks(n) floats.
void cq_topk2_step(float *x, float *e, size_t n, float *levels);
// The k-th magnitude is found from one pass counting the top bits of every key and the keys of
// its bucket gathered, at most this many (more: a pass over x per 8 bits left). Tests lower it.
extern size_t cq_topk_gather_max;
