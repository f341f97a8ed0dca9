// compress.c — --outer-compress int8|topk (compress.h): the chunk-wise int8 quantization of a
// Δ, its top-k selection, their error feedback, and the swarm's side of them: the DELTA, DELTA8
// or DELTAS message of one piece of this peer's Δ, a received piece turned back into floats,
// and this peer's compressed contribution. (topk sends a piece's elements that are not zero,
// read from its Δ, which cq_topk_step zeroed elsewhere.) Pieces (SW_PIECE floats) are whole chunks,
// so piece k carries the codes of [k·SW_PIECE, ...) and the scales of its chunks, from scale
// k·SW_PIECE / CQ_CHUNK on.
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

// cq_ef_step over one span of whole chunks.
static void ef_span(float *x, float *e, size_t n, int8_t *q, float *scales) {
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

void cq_ef_step(float *x, float *e, size_t n, int8_t *q, float *scales) {
    for (size_t lo = 0; lo < n; lo += SPILL_CHUNK) { // (a span at a time: spill.h)
        size_t k = n - lo < SPILL_CHUNK ? n - lo : SPILL_CHUNK;
        ef_span(x + lo, e + lo, k, q + lo, scales + lo / CQ_CHUNK);
        spill_drop(x + lo, k * sizeof(float)), spill_drop(e + lo, k * sizeof(float));
        spill_drop(q + lo, k);
    }
}

// ---------------------------------------------------------------- the swarm's side

// s->sparse: the gaps from its start (at most 3 bytes each), the values or codes from byte
// SW_VALS (floats: at most half a piece of them).
#define SW_VALS (2 * SW_PIECE)
#define SW_SPARSE_BYTES (SW_VALS + 2 * SW_PIECE)

static int sparse2_msg(Swarm *s, const float *x, const float *lv, WireMsg *m);

static uint8_t *sparse_buf(Swarm *s) {
    if (!s->sparse) s->sparse = xmalloc(SW_SPARSE_BYTES);
    return s->sparse;
}

// topk: the piece's elements that are not zero as gaps and values in s->sparse, when there are
// at most half of them (then their 1 + 4 bytes each, or up to 3 + 4, cost less than the 4 bytes
// a float of the piece's other form), or, for a slice sum with --outer-compress-sums int8 (sum8),
// an eighth (the chunks rounded to codes are the denser ones; swarm_shard.c). Else 0.
int sw_sparse_msg(Swarm *s, const float *x, WireMsg *m, int sum8) {
    uint8_t *gap = sparse_buf(s);
    float *val = (float *)(gap + SW_VALS);
    uint32_t nnz = 0, most = sum8 ? m->n / 8 : m->n / 2, next = 0;
    size_t len = 0;
    for (uint32_t i = 0; i < m->n; i++)
        if (x[i] != 0) {
            if (nnz == most) return 0;
            len += wire_gap_put(gap + len, i - next), next = i + 1, val[nnz++] = x[i];
        }
    m->nnz = nnz, m->idx = gap, m->idx_len = (uint32_t)len, m->data = (const uint8_t *)val;
    return 1;
}

void sw_q8_msg(Swarm *s, const int8_t *q, WireMsg *m) {
    m->nnz = m->n, m->q8 = (const uint8_t *)q;
    uint8_t *gap = sparse_buf(s), *code = gap + SW_VALS;
    uint32_t nnz = 0, most = m->n / 2, next = 0;
    size_t len = 0;
    for (uint32_t i = 0; i < m->n; i++)
        if (q[i] != 0) {
            if (nnz == most) return;
            len += wire_gap_put(gap + len, i - next), next = i + 1, code[nnz++] = (uint8_t)q[i];
            if (4 + len + nnz >= m->n) return; // (all n codes are no more bytes)
        }
    m->nnz = nnz, m->idx = gap, m->idx_len = (uint32_t)len, m->q8 = code;
}

int sw_piece_msg(Swarm *s, const Contrib *c, size_t piece) {
    size_t off = piece * SW_PIECE;
    return sw_range_msg(s, c, off, s->P - off < SW_PIECE ? s->P - off : SW_PIECE, piece == 0);
}

int sw_range_msg(Swarm *s, const Contrib *c, size_t offset, size_t n, int losses) {
    WireMsg *m = s->out;
    m->offset = offset, m->total = s->P, m->n = (uint32_t)n;
    m->nloss = losses ? (uint32_t)c->nloss : 0;
    m->losses = (const uint8_t *)c->losses;
    if (s->c.compress == CQ_TOPK && s->c.topk_2bit && c->scales &&
        sparse2_msg(s, c->delta + m->offset, c->scales + 2 * (m->offset / CQ_CHUNK), m)) {
        spill_drop(c->delta + m->offset, n * sizeof(float));
        return WIRE_DELTAS2;
    }
    if (s->c.compress == CQ_TOPK && !s->c.topk_2bit &&
        sw_sparse_msg(s, c->delta + m->offset, m, 0)) {
        spill_drop(c->delta + m->offset, n * sizeof(float)); // (copied into s->sparse)
        return WIRE_DELTAS;
    }
    if (!c->q8) {
        m->data = (const uint8_t *)(c->delta + m->offset);
        return WIRE_DELTA;
    }
    m->data = (const uint8_t *)(c->scales + m->offset / CQ_CHUNK);
    sw_q8_msg(s, c->q8 + m->offset, m);
    return WIRE_DELTA8;
}

int sw_piece_ok(const Swarm *s, const WireMsg *m) {
    if (s->c.compress == CQ_TOPK)
        return m->type == (s->c.topk_2bit ? WIRE_DELTAS2 : WIRE_DELTAS) || m->type == WIRE_DELTA;
    return m->type == (s->c.compress == CQ_INT8 ? WIRE_DELTA8 : WIRE_DELTA);
}

void sw_piece_take(const WireMsg *m, float *dst) {
    WireGaps g;
    wire_gaps_begin(m, &g);
    if (m->type == WIRE_DELTAS || m->type == WIRE_SUMS) {
        memset(dst, 0, m->n * sizeof(float));
        for (uint32_t j = 0; j < m->nnz; j++)
            dst[wire_gaps_next(&g)] = wire_float(m->data, j);
        return;
    }
    if (m->type == WIRE_DELTAS2) { // (sign ? -level : level: the sender's bits, NaN too)
        memset(dst, 0, m->n * sizeof(float));
        for (uint32_t j = 0; j < m->nnz; j++) {
            uint32_t i = wire_gaps_next(&g), c = wire_code2(m, j);
            float v = wire_float(m->data, 2 * (i / CQ_CHUNK) + (c >> 1));
            dst[i] = c & 1 ? -v : v;
        }
        return;
    }
    if (!wire_is_q8(m->type)) {
        wire_floats(m->data, m->n, dst);
        return;
    }
    float scales[SW_PIECE / CQ_CHUNK];
    size_t ns = cq_nchunks(m->n);
    for (size_t k = 0; k < ns && k < SW_PIECE / CQ_CHUNK; k++)
        scales[k] = wire_float(m->data, k);
    if (!wire_q8_sparse(m)) {
        cq_dequantize((const int8_t *)m->q8, scales, m->n, dst);
        return;
    }
    for (uint32_t i = 0; i < m->n; i++) // (code 0 times the scale, as cq_dequantize: NaN stays)
        dst[i] = 0.0f * scales[i / CQ_CHUNK];
    for (uint32_t j = 0; j < m->nnz; j++) {
        uint32_t i = wire_gaps_next(&g);
        dst[i] = (float)(int8_t)m->q8[j] * scales[i / CQ_CHUNK];
    }
}

void swarm_contribute_ef(Swarm *s, int64_t r, float *delta, float *ef, const double *losses,
                         int nloss) {
    if (s->c.compress == CQ_TOPK && s->c.topk_2bit) {
        cq_topk_step(delta, ef, s->P, cq_topk_count(s->P, s->c.topk_frac));
        float *levels = xmalloc(2 * cq_nchunks(s->P) * sizeof(float));
        cq_topk2_step(delta, ef, s->P, levels);
        sw_contribute(s, r, delta, NULL, levels, losses, nloss); // (it owns levels now)
        return;
    }
    if (s->c.compress != CQ_INT8) {
        if (s->c.compress == CQ_TOPK)
            cq_topk_step(delta, ef, s->P, cq_topk_count(s->P, s->c.topk_frac));
        swarm_contribute(s, r, delta, losses, nloss);
        return;
    }
    int8_t *q = spill_alloc(s->P);
    float *scales = xmalloc(cq_nchunks(s->P) * sizeof(float));
    cq_ef_step(delta, ef, s->P, q, scales);
    sw_contribute(s, r, delta, q, scales, losses, nloss); // (it owns q and scales now)
}

// ---------------------------------------------------------------- topk

size_t cq_topk_count(size_t n, double frac) {
    double k = ceil(frac * (double)n);
    return k < 1 ? 1 : k > (double)n ? n : (size_t)k;
}

// The passes below walk x (and e) a span of SPILL_CHUNK floats at a time, each span dropped
// from the resident set behind them when they are spilled (spill.h): [lo, span_end(lo, n)).
static size_t span_end(size_t lo, size_t n) { return n - lo < SPILL_CHUNK ? n : lo + SPILL_CHUNK; }

static void drop(const float *x, size_t lo, size_t hi) {
    spill_drop(x + lo, (hi - lo) * sizeof(float));
}

// |x|'s bits: ordered as the magnitudes (NaNs above infinity).
static uint32_t mag(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u & 0x7fffffffu;
}

// The bucket of hist[0, nb) (highest first) that holds the k-th largest key, counting into *over
// the keys of the buckets above it.
static uint32_t kth_bucket(const size_t *hist, uint32_t nb, size_t k, size_t *over) {
    uint32_t b = nb - 1;
    while (b > 0 && *over + hist[b] < k)
        *over += hist[b--];
    return b;
}

// The k-th largest key of x[0, n) whose bits above shift + 8 are `prefix` (`over` keys lie above
// it), a radix select 8 bits a pass down to bit 0, and how many keys exceed it.
static uint32_t kth_key(const float *x, size_t n, size_t k, int shift, uint32_t prefix, size_t over,
                        size_t *above) {
    uint32_t mask = ~0u << (shift + 8);
    for (;; shift = shift > 8 ? shift - 8 : 0) { // (the last pass at bit 0 whatever the start)
        size_t hist[256] = {0};
        for (size_t lo = 0, hi; lo < n; lo = hi) {
            hi = span_end(lo, n);
            for (size_t i = lo; i < hi; i++) {
                uint32_t u = mag(x[i]);
                if ((u & mask) == prefix) hist[(u >> shift) & 255]++;
            }
            drop(x, lo, hi);
        }
        prefix |= kth_bucket(hist, 256, k, &over) << shift, mask |= 255u << shift;
        if (!shift) break;
    }
    *above = over;
    return prefix;
}

// The same on the keys themselves (u[0, n), gathered from x).
static uint32_t kth_of_keys(const uint32_t *u, size_t n, size_t k, int shift, uint32_t prefix,
                            size_t over, size_t *above) {
    uint32_t mask = ~0u << (shift + 8);
    for (;; shift = shift > 8 ? shift - 8 : 0) {
        size_t hist[256] = {0};
        for (size_t i = 0; i < n; i++)
            hist[(u[i] >> shift) & 255] += (u[i] & mask) == prefix;
        prefix |= kth_bucket(hist, 256, k, &over) << shift, mask |= 255u << shift;
        if (!shift) break;
    }
    *above = over;
    return prefix;
}

#define TOP_SHIFT 20 // the first pass buckets keys by their bits 30..20 (2048)
size_t cq_topk_gather_max = (size_t)1 << 22; // (16 MiB of keys)

// x ← x + e, and the k-th largest key of the sum with the count of keys above it: one pass
// that adds and counts the top bits, one that gathers the keys of the k-th's bucket, and the
// rest of the select on those (a pass over x per 8 bits when that bucket is huge).
static uint32_t add_and_select(float *x, const float *e, size_t n, size_t k, size_t *above) {
    size_t *hist = xcalloc((size_t)1 << (31 - TOP_SHIFT), sizeof *hist);
    for (size_t lo = 0, hi; lo < n; lo = hi) {
        hi = span_end(lo, n);
        for (size_t i = lo; i < hi; i++) {
            x[i] += e[i];
            hist[mag(x[i]) >> TOP_SHIFT]++;
        }
        drop(x, lo, hi), drop(e, lo, hi);
    }
    size_t over = 0;
    uint32_t b = kth_bucket(hist, 1u << (31 - TOP_SHIFT), k, &over);
    size_t nb = hist[b];
    free(hist);
    uint32_t prefix = b << TOP_SHIFT, mask = ~0u << TOP_SHIFT, t;
    size_t cap = cq_topk_gather_max; // (offloaded: within the spans --fast-mem counts)
    if (spill_active() && cap > SPILL_CHUNK) cap = SPILL_CHUNK;
    if (nb > cap) return kth_key(x, n, k, TOP_SHIFT - 8, prefix, over, above);
    uint32_t *cand = xmalloc((nb + 1) * sizeof *cand);
    size_t m = 0;
    for (size_t lo = 0, hi; lo < n; lo = hi) {
        hi = span_end(lo, n);
        for (size_t i = lo; i < hi; i++) {
            uint32_t u = mag(x[i]);
            if ((u & mask) == prefix) cand[m++] = u;
        }
        drop(x, lo, hi);
    }
    t = kth_of_keys(cand, m, k, TOP_SHIFT - 8, prefix, over, above);
    free(cand);
    return t;
}

void cq_topk_step(float *x, float *e, size_t n, size_t k) {
    size_t above;
    uint32_t t = add_and_select(x, e, n, k, &above);
    size_t ties = k - above; // keys equal to t kept, the lowest indices first
    for (size_t lo = 0, hi; lo < n; lo = hi) {
        hi = span_end(lo, n);
        for (size_t i = lo; i < hi; i++) {
            uint32_t u = mag(x[i]);
            int keep = u > t || (u == t && ties > 0);
            ties -= u == t && keep;
            e[i] = keep ? 0 : x[i];
            x[i] = keep && x[i] != 0 ? x[i] : 0.0f; // (+0: what a receiver of the pairs rebuilds)
        }
        drop(x, lo, hi), drop(e, lo, hi);
    }
}

// ---------------------------------------------------------------- topk's 2-bit values

// One chunk's kept values onto its two levels (cq_topk2_step).
static void two_levels(float *x, float *e, size_t n, float *lv) {
    double sum = 0, slo = 0, shi = 0;
    size_t k = 0, klo = 0;
    for (size_t i = 0; i < n; i++)
        if (x[i] != 0) sum += fabsf(x[i]), k++; // (a NaN is kept: x != 0)
    lv[0] = lv[1] = 0;
    if (!k) return;
    float mean = (float)(sum / (double)k), lo, hi;
    if (!isfinite(mean)) {
        lo = hi = NAN;
    } else {
        for (size_t i = 0; i < n; i++)
            if (x[i] != 0) {
                float a = fabsf(x[i]);
                if (a < mean)
                    slo += a, klo++;
                else
                    shi += a;
            }
        hi = (float)(shi / (double)(k - klo));
        lo = klo ? (float)(slo / (double)klo) : hi;
    }
    float mid = lo + (hi - lo) / 2;
    for (size_t i = 0; i < n; i++)
        if (x[i] != 0) {
            float v = copysignf(fabsf(x[i]) >= mid ? hi : lo, x[i]);
            e[i] = x[i] - v, x[i] = v;
        }
    lv[0] = lo, lv[1] = hi;
}

void cq_topk2_step(float *x, float *e, size_t n, float *levels) {
    for (size_t lo = 0, hi; lo < n; lo = hi) { // (a span at a time: spill.h)
        hi = span_end(lo, n);
        for (size_t at = lo; at < hi; at += CQ_CHUNK)
            two_levels(x + at, e + at, hi - at < CQ_CHUNK ? hi - at : CQ_CHUNK,
                       levels + 2 * (at / CQ_CHUNK));
        drop(x, lo, hi), drop(e, lo, hi);
    }
}

// A piece of a 2-bit topk Δ (x, its chunks' levels from lv) as DELTAS2 when at most half of it
// is kept: gaps, and per element 2 bits (the sign; 1 for hi) packed from each byte's low bits.
static int sparse2_msg(Swarm *s, const float *x, const float *lv, WireMsg *m) {
    uint8_t *gap = sparse_buf(s), *code = gap + SW_VALS;
    uint32_t nnz = 0, most = m->n / 2, next = 0;
    size_t len = 0;
    for (uint32_t i = 0; i < m->n; i++)
        if (x[i] != 0) {
            if (nnz == most) return 0;
            unsigned c =
                (signbit(x[i]) ? 1u : 0u) | (fabsf(x[i]) == lv[2 * (i / CQ_CHUNK) + 1] ? 2u : 0u);
            if (nnz % 4 == 0) code[nnz / 4] = 0;
            code[nnz / 4] |= (uint8_t)(c << (2 * (nnz % 4)));
            len += wire_gap_put(gap + len, i - next), next = i + 1, nnz++;
        }
    m->nnz = nnz, m->idx = gap, m->idx_len = (uint32_t)len, m->q8 = code;
    m->data = (const uint8_t *)lv;
    return 1;
}
