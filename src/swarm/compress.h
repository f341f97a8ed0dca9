// compress.h — --outer-compress int8 (loom peer): the quantization of a peer's outer Δ with
// error feedback, and how a quantized Δ travels (swarm/compress.c).
//
// A Δ of P floats is cut into chunks of CQ_CHUNK floats (the last one shorter); a chunk travels
// as its scale s = max|x| / 127 (fp32) and one int8 code per float, q = round(x / s) (ties away
// from zero; 0 where s = 0; a chunk that is not finite: s = NaN, codes 0). Its value is q·s,
// computed by cq_dequantize on the sender and on every receiver alike, so every peer sums the same
// bits. Error feedback: what the codes drop, e = (Δ + e) − dequant(quant(Δ + e)), is kept by the
// peer and added to its next Δ.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define CQ_CHUNK WIRE_Q8_CHUNK // 4096 floats: 16 KiB of Δ per scale (0.1 % overhead)

enum { CQ_NONE = 0, CQ_INT8 = 1 }; // --outer-compress none|int8

// Chunks (scales) in n floats.
size_t cq_nchunks(size_t n);
// Codes and scales of x[0, n) (chunk k: x[k·CQ_CHUNK, ...)).
void cq_quantize(const float *x, size_t n, int8_t *q, float *scales);
// out[i] = q[i] · scales[i / CQ_CHUNK] for i < n.
void cq_dequantize(const int8_t *q, const float *scales, size_t n, float *out);
// Error feedback: x ← x + e, quantized into q / scales; then e ← x − dequant and x ← dequant
// (the Δ the swarm averages).
void cq_ef_step(float *x, float *e, size_t n, int8_t *q, float *scales);
