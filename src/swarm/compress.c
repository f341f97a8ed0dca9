// compress.c — --outer-compress int8 (compress.h): the chunk-wise int8 quantization of a Δ
// and its error feedback, and the swarm's side of it: the DELTA or DELTA8 message of one piece
// of this peer's Δ, a received piece turned back into floats, and this peer's quantized
// contribution. Pieces (SW_PIECE floats) are whole chunks, so piece k carries the codes of
// [k·SW_PIECE, ...) and the scales of its chunks, from scale k·SW_PIECE / CQ_CHUNK on.
#include "compress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "swarm_impl.h"

_Static_assert(SW_PIECE % CQ_CHUNK == 0, "a piece must be whole chunks");

size_t cq_nchunks(size_t n) { return wire_q8_scales(n); }

// One chunk: its scale, and its codes. A chunk holding a NaN or an infinity gets codes 0 and
// the scale NaN: every value of it is NaN, so the non-finite Δ stays visible to the outer step.
static float quantize_chunk(const float *x, size_t n, int8_t *q) {
    float mx = 0;
    int finite = 1;
    for (size_t i = 0; i < n; i++)
        mx = fmaxf(mx, fabsf(x[i])), finite &= isfinite(x[i]) != 0;
    float s = finite ? mx / 127.0f : NAN;
    for (size_t i = 0; i < n; i++) {
        float v = s > 0 ? x[i] / s : 0;
        q[i] = v >= 127.0f ? 127 : v <= -127.0f ? -127 : (int8_t)roundf(v);
    }
    return s;
}

void cq_quantize(const float *x, size_t n, int8_t *q, float *scales) {
    for (size_t k = 0, at = 0; at < n; k++, at += CQ_CHUNK)
        scales[k] = quantize_chunk(x + at, n - at < CQ_CHUNK ? n - at : CQ_CHUNK, q + at);
}

void cq_dequantize(const int8_t *q, const float *scales, size_t n, float *out) {
    for (size_t i = 0; i < n; i++)
        out[i] = (float)q[i] * scales[i / CQ_CHUNK];
}

void cq_ef_step(float *x, float *e, size_t n, int8_t *q, float *scales) {
    for (size_t i = 0; i < n; i++)
        x[i] += e[i];
    cq_quantize(x, n, q, scales);
    for (size_t at = 0; at < n; at += CQ_CHUNK) { // chunk by chunk, while x is in cache
        size_t k = n - at < CQ_CHUNK ? n - at : CQ_CHUNK;
        float d[CQ_CHUNK];
        cq_dequantize(q + at, scales + at / CQ_CHUNK, k, d);
        for (size_t i = 0; i < k; i++)
            e[at + i] = x[at + i] - d[i], x[at + i] = d[i];
    }
}

// ---------------------------------------------------------------- the swarm's side

int sw_piece_msg(Swarm *s, const Contrib *c, size_t piece) {
    WireMsg *m = s->out;
    m->offset = piece * SW_PIECE, m->total = s->P;
    m->n = (uint32_t)(s->P - m->offset < SW_PIECE ? s->P - m->offset : SW_PIECE);
    m->nloss = piece == 0 ? (uint32_t)c->nloss : 0;
    m->losses = (const uint8_t *)c->losses;
    if (!c->q8) {
        m->data = (const uint8_t *)(c->delta + m->offset);
        return WIRE_DELTA;
    }
    m->data = (const uint8_t *)(c->scales + m->offset / CQ_CHUNK);
    m->q8 = (const uint8_t *)(c->q8 + m->offset);
    return WIRE_DELTA8;
}

int sw_piece_ok(const Swarm *s, const WireMsg *m) {
    return (m->type == WIRE_DELTA8) == (s->c.compress == CQ_INT8);
}

void sw_piece_take(const WireMsg *m, float *dst) {
    if (m->type != WIRE_DELTA8) {
        wire_floats(m->data, m->n, dst);
        return;
    }
    float scales[SW_PIECE / CQ_CHUNK];
    size_t ns = cq_nchunks(m->n);
    for (size_t k = 0; k < ns && k < SW_PIECE / CQ_CHUNK; k++)
        scales[k] = wire_float(m->data, k);
    cq_dequantize((const int8_t *)m->q8, scales, m->n, dst);
}

void swarm_contribute_ef(Swarm *s, int64_t r, float *delta, float *ef, const double *losses,
                         int nloss) {
    if (s->c.compress != CQ_INT8) {
        swarm_contribute(s, r, delta, losses, nloss);
        return;
    }
    int8_t *q = xmalloc(s->P);
    float *scales = xmalloc(cq_nchunks(s->P) * sizeof(float));
    cq_ef_step(delta, ef, s->P, q, scales);
    sw_contribute(s, r, delta, q, scales, losses, nloss); // (it owns q and scales now)
}
