// wire.c — the swarm's message codec (see wire.h): the byte layout below, its encoder and its
// decoder, and the checks both apply, so that what one peer sends the other accepts and every
// accepted message re-encodes to the same bytes. No sockets, no allocation; the decoder reads
// only inside its input and checks each length before it uses it.
//
// Layout. Integers are little-endian and fixed width (i64: two's complement); floats travel as
// their IEEE-754 binary32 bits (u32), doubles as their binary64 bits (u64).
//   header    "LMSW", version u16 (= WIRE_VERSION), type u16 (a WireType), round i64 (>= 0),
//             from: an id
//   id        length u8 (1..64) + that many bytes of [A-Za-z0-9._-]
//   ids       count u16 (<= 256) + that many ids, no two equal
//   address   length u16 (1..255) + that many printable non-space ASCII bytes (0x21..0x7e)
//   record    id, address, revision u64, first_round i64 (>= 0), cur_round i64 (>= 0),
//             flags u32
//   records   count u16 (<= 256) + that many records
//   text      length u32 (<= 16384) + that many bytes, none of them NUL
// After the header, by type:
//   HELLO     records (exactly 1: the sender's), text
//   WELCOME   records
//   REFUSE    text
//   GOSSIP    records
//   DELTA     offset u64, total u64, n u32 (1..2^18), nloss u32 (<= 4096), n floats,
//             nloss doubles
//   HAVE      hash u64, ids
//   COMMIT    attempt u32, hash u64, ids, ncut u16 (0 or ids' count - 1), ncut u32
//             (non-decreasing: chunk indices where slices 1.. start)
//   FETCH     what u32 (a WireArray), offset u64, total u64, n u32 (1..2^18)
//   DATA      what u32, offset u64, total u64, n u32 (<= 2^18), hash u64, n floats
//   BYE       nothing
//   DELTA8    offset u64, total u64, n u32 (1..2^18), nloss u32 (<= 4096),
//             ceil(n / 4096) floats (the scales), nnz u32: n, then n int8 codes; or <= n / 2,
//             then gaps, then those nnz codes (none 0; the others are 0), nloss doubles
//   DELTAS    offset u64, total u64, n u32 (1..2^18), nloss u32 (<= 4096), nnz u32 (<= n / 2),
//             gaps, nnz floats, nloss doubles
//   gaps      length u32 (nnz..3·nnz) + that many bytes: nnz indices (increasing, < n) as
//             gaps (wire.h), every byte used
//   DELTAS2   offset u64, total u64, n u32 (1..2^18), nloss u32 (<= 4096), 2 · ceil(n / 4096)
//             floats (each chunk's levels lo, hi), nnz u32 (<= n / 2), gaps, ceil(nnz / 4)
//             bytes of codes (2 bits an element from each byte's low bits; the last byte's
//             unused bits 0), nloss doubles
//   SUM       attempt u32, then DELTA's fields
//   SUMS      attempt u32, then DELTAS' fields
//   HOLD      attempt u32, hash u64, ids
// DELTA, DELTA8, FETCH and DATA need offset + n <= total; a DATA with n = 0 must have offset =
// total = 0 (the version is gone). Nothing may follow the last field. A message is at most
// WIRE_MSG_MAX bytes (the largest valid one, a full DELTA, is about 1.03 MiB).
#include "wire.h"
#include "wire_impl.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char *const type_names[WIRE_NTYPES] = {
    "?",    "HELLO", "WELCOME", "REFUSE", "GOSSIP", "DELTA", "HAVE", "COMMIT", "FETCH",
    "DATA", "BYE",   "DELTA8",  "DELTAS", "SUM",    "SUMS",  "HOLD", "SUM8",   "DELTAS2"};

const char *wire_type_name(int type) {
    return type > 0 && type < WIRE_NTYPES ? type_names[type] : "?";
}

int wire_id_char(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}
int wire_addr_char(unsigned char c) { return c > ' ' && c < 0x7f; }

// Never reads past s[max] (the arrays in PeerRecord and WireMsg hold max + 1 chars).
static int str_ok(const char *s, size_t max, int (*ok)(unsigned char)) {
    size_t n = 0;
    if (!s) return 0;
    while (n <= max && s[n] && ok((unsigned char)s[n]))
        n++;
    return n >= 1 && n <= max && !s[n];
}
int wire_id_ok(const char *s) { return str_ok(s, WIRE_ID_MAX, wire_id_char); }
int wire_addr_ok(const char *s) { return str_ok(s, WIRE_ADDR_MAX, wire_addr_char); }

// Writes the reason into why (when given) and returns -1.
int wire_say(char *why, size_t whyn, const char *fmt, ...) {
    if (why && whyn) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whyn, fmt, ap);
        va_end(ap);
    }
    return -1;
}

uint64_t wire_get_le(const uint8_t *p, int k) {
    uint64_t v = 0;
    for (int i = 0; i < k; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}
int64_t wire_to_i64(uint64_t u) { return u <= INT64_MAX ? (int64_t)u : -(int64_t)~u - 1; }

float wire_float(const uint8_t *p, size_t i) {
    uint32_t u = (uint32_t)wire_get_le(p + 4 * i, 4);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
double wire_double(const uint8_t *p, size_t i) {
    uint64_t u = wire_get_le(p + 8 * i, 8);
    double d;
    memcpy(&d, &u, 8);
    return d;
}
void wire_floats(const uint8_t *p, size_t n, float *dst) {
    for (size_t i = 0; i < n; i++)
        dst[i] = wire_float(p, i);
}

// ---------------------------------------------------------------- checks shared by both ends

static int check_ids(const WireMsg *m, const char *t, char *why, size_t whyn) {
    if (m->nids < 0 || m->nids > WIRE_MAX_PEERS)
        return wire_say(why, whyn, "%s: %d ids > %d", t, m->nids, WIRE_MAX_PEERS);
    for (int i = 0; i < m->nids; i++) {
        if (!wire_id_ok(m->ids[i])) return wire_say(why, whyn, "%s: id %d: bad id", t, i);
        for (int j = 0; j < i; j++)
            if (!strcmp(m->ids[i], m->ids[j]))
                return wire_say(why, whyn, "%s: duplicate id %s", t, m->ids[i]);
    }
    return 0;
}

// COMMIT: no cut, or one boundary between each two ids, non-decreasing.
static int check_cut(const WireMsg *m, const char *t, char *why, size_t whyn) {
    if (m->ncut && (m->nids < 1 || m->ncut != (uint32_t)(m->nids - 1)))
        return wire_say(why, whyn, "%s: %u cuts for %d ids", t, (unsigned)m->ncut, m->nids);
    for (uint32_t i = 1; i < m->ncut; i++)
        if (m->cut[i] < m->cut[i - 1])
            return wire_say(why, whyn, "%s: cut %u decreases", t, (unsigned)i);
    return 0;
}

static int check_records(const WireMsg *m, const char *t, char *why, size_t whyn) {
    if (m->nrec < 0 || m->nrec > WIRE_MAX_PEERS)
        return wire_say(why, whyn, "%s: %d records > %d", t, m->nrec, WIRE_MAX_PEERS);
    if (m->type == WIRE_HELLO && m->nrec != 1)
        return wire_say(why, whyn, "%s: %d records, not 1", t, m->nrec);
    for (int i = 0; i < m->nrec; i++) {
        const PeerRecord *p = &m->rec[i];
        if (!wire_id_ok(p->id)) return wire_say(why, whyn, "%s: record %d: bad id", t, i);
        if (!wire_addr_ok(p->addr)) return wire_say(why, whyn, "%s: record %d: bad address", t, i);
        if (p->first_round < 0 || p->cur_round < 0)
            return wire_say(why, whyn, "%s: record %d: negative round", t, i);
    }
    return 0;
}

size_t wire_q8_scales(size_t n) { return (n + WIRE_Q8_CHUNK - 1) / WIRE_Q8_CHUNK; }

int wire_is_delta(const WireMsg *m) {
    return m->type == WIRE_DELTA || m->type == WIRE_DELTA8 || m->type == WIRE_DELTAS ||
           m->type == WIRE_SUM || m->type == WIRE_SUMS || m->type == WIRE_SUM8 ||
           m->type == WIRE_DELTAS2;
}

int wire_is_q8(int type) { return type == WIRE_DELTA8 || type == WIRE_SUM8; }

unsigned wire_code2(const WireMsg *m, size_t j) { return (m->q8[j / 4] >> (2 * (j % 4))) & 3u; }

int wire_q8_sparse(const WireMsg *m) { return wire_is_q8(m->type) && m->nnz != m->n; }

size_t wire_gap_put(uint8_t *p, uint32_t gap) {
    size_t k = 0;
    for (; gap >= 128; gap >>= 7)
        p[k++] = (uint8_t)(gap | 128);
    p[k++] = (uint8_t)gap;
    return k;
}

// The gap at *at of p[0, len) into *v: 0, or -1 if it runs past len or 3 bytes or ends in a 0
// byte after its first.
static int gap_get(const uint8_t *p, size_t len, size_t *at, uint32_t *v) {
    *v = 0;
    for (int k = 0; k < 3 && *at < len; k++) {
        uint8_t b = p[(*at)++];
        *v |= (uint32_t)(b & 127) << (7 * k);
        if (!(b & 128)) return k && !b ? -1 : 0;
    }
    return -1;
}

void wire_gaps_begin(const WireMsg *m, WireGaps *g) {
    g->p = m->idx, g->len = m->idx_len, g->at = 0, g->next = 0;
}

uint32_t wire_gaps_next(WireGaps *g) {
    uint32_t v;
    gap_get(g->p, g->len, &g->at, &v); // (the message was checked: every gap is whole)
    uint32_t i = g->next + v;
    g->next = i + 1;
    return i;
}

// DELTAS, and DELTA8 with nnz < n: nnz <= n / 2, the gaps name nnz indices below n in exactly
// idx_len bytes; DELTA8's codes are not zero.
static int check_sparse(const WireMsg *m, const char *t, char *why, size_t whyn) {
    if (m->nnz > m->n / 2) return wire_say(why, whyn, "%s: nnz %u > n / 2", t, (unsigned)m->nnz);
    if (m->idx_len < m->nnz || m->idx_len > 3 * (uint64_t)m->nnz)
        return wire_say(why, whyn, "%s: %u bytes of gaps for %u indices", t, (unsigned)m->idx_len,
                        (unsigned)m->nnz);
    int coded = wire_is_q8(m->type) || m->type == WIRE_DELTAS2;
    if (m->nnz && (!m->idx || !(coded ? m->q8 : m->data)))
        return wire_say(why, whyn, "%s: no indices", t);
    size_t at = 0;
    uint64_t next = 0;
    for (uint32_t j = 0; j < m->nnz; j++) {
        uint32_t v;
        if (gap_get(m->idx, m->idx_len, &at, &v))
            return wire_say(why, whyn, "%s: bad gap %u", t, (unsigned)j);
        if ((next += v) >= m->n)
            return wire_say(why, whyn, "%s: index %llu at %u >= n", t, (unsigned long long)next,
                            (unsigned)j);
        next++;
        if (wire_is_q8(m->type) && m->q8[j] == 0)
            return wire_say(why, whyn, "%s: code %u is 0", t, (unsigned)j);
    }
    if (at != m->idx_len)
        return wire_say(why, whyn, "%s: %zu bytes after the gaps", t, m->idx_len - at);
    if (m->type == WIRE_DELTAS2 && m->nnz % 4 && m->q8[m->nnz / 4] >> (2 * (m->nnz % 4)))
        return wire_say(why, whyn, "%s: unused code bits set", t);
    return 0;
}

// DELTA, DELTA8, DELTAS, FETCH, DATA: the array, the counts, [offset, offset + n) inside total.
static int check_range(const WireMsg *m, const char *t, char *why, size_t whyn) {
    if (!wire_is_delta(m) && (m->what < 1 || m->what >= WIRE_ARR_MAX))
        return wire_say(why, whyn, "%s: unknown array %u", t, (unsigned)m->what);
    if (m->n > WIRE_MAX_FLOATS)
        return wire_say(why, whyn, "%s: n %u > %d", t, (unsigned)m->n, WIRE_MAX_FLOATS);
    if (wire_is_delta(m) && m->nloss > WIRE_MAX_LOSSES)
        return wire_say(why, whyn, "%s: nloss %u > %d", t, (unsigned)m->nloss, WIRE_MAX_LOSSES);
    if (m->n == 0 && (m->type != WIRE_DATA || m->offset || m->total))
        return wire_say(why, whyn, "%s: n 0", t);
    if (m->offset > m->total || m->n > m->total - m->offset)
        return wire_say(why, whyn, "%s: offset %llu + n %u > total %llu", t,
                        (unsigned long long)m->offset, (unsigned)m->n,
                        (unsigned long long)m->total);
    if (wire_is_delta(m) && m->nloss && !m->losses) return wire_say(why, whyn, "%s: no losses", t);
    if (m->type == WIRE_DELTAS || m->type == WIRE_SUMS) return check_sparse(m, t, why, whyn);
    if (m->type != WIRE_FETCH && m->n && !m->data) return wire_say(why, whyn, "%s: no data", t);
    if (m->type == WIRE_DELTAS2 || wire_q8_sparse(m)) return check_sparse(m, t, why, whyn);
    if (wire_is_q8(m->type) && m->n && !m->q8) return wire_say(why, whyn, "%s: no codes", t);
    return 0;
}

static int check_text(const WireMsg *m, const char *t, char *why, size_t whyn) {
    if (m->text_len > WIRE_TEXT_MAX)
        return wire_say(why, whyn, "%s: text %u > %d bytes", t, (unsigned)m->text_len,
                        WIRE_TEXT_MAX);
    if (memchr(m->text, 0, m->text_len)) return wire_say(why, whyn, "%s: NUL in text", t);
    return 0;
}

// Every rule of the layout that a decoded WireMsg can break: 0, or -1 with the reason in why.
int wire_check(const WireMsg *m, char *why, size_t whyn) {
    const char *t = wire_type_name(m->type);
    if (m->type < WIRE_HELLO || m->type >= WIRE_NTYPES)
        return wire_say(why, whyn, "unknown type %u", (unsigned)m->type);
    if (!m->from[0]) return wire_say(why, whyn, "%s: empty sender id", t);
    if (!wire_id_ok(m->from)) return wire_say(why, whyn, "%s: bad sender id", t);
    if (m->round < 0) return wire_say(why, whyn, "%s: round %lld < 0", t, (long long)m->round);
    switch (m->type) {
    case WIRE_HELLO: return check_records(m, t, why, whyn) || check_text(m, t, why, whyn) ? -1 : 0;
    case WIRE_WELCOME:
    case WIRE_GOSSIP: return check_records(m, t, why, whyn);
    case WIRE_REFUSE: return check_text(m, t, why, whyn);
    case WIRE_DELTA:
    case WIRE_DELTA8:
    case WIRE_DELTAS:
    case WIRE_SUM:
    case WIRE_SUMS:
    case WIRE_SUM8:
    case WIRE_DELTAS2:
    case WIRE_FETCH:
    case WIRE_DATA: return check_range(m, t, why, whyn);
    case WIRE_HAVE:
    case WIRE_HOLD: return check_ids(m, t, why, whyn);
    case WIRE_COMMIT: return check_ids(m, t, why, whyn) || check_cut(m, t, why, whyn) ? -1 : 0;
    default: return 0; // BYE
    }
}

// ---------------------------------------------------------------- encoding

typedef struct {
    uint8_t *p; // NULL: only count the bytes
    size_t at;
} Wr;

static void put_u(Wr *w, uint64_t v, int k) {
    if (w->p)
        for (size_t i = 0; i < (size_t)k; i++)
            w->p[w->at + i] = (uint8_t)(v >> (8 * i));
    w->at += (size_t)k;
}
static void put_bytes(Wr *w, const void *s, size_t k) {
    if (w->p && k) memcpy(w->p + w->at, s, k);
    w->at += k;
}
static void put_str(Wr *w, const char *s, int lenbytes) {
    size_t k = strlen(s);
    put_u(w, k, lenbytes);
    put_bytes(w, s, k);
}
// n host values of `size` bytes (4: float, 8: double) from src, as little-endian bits.
static void put_vals(Wr *w, const uint8_t *src, size_t n, int size) {
    if (!w->p) {
        w->at += n * (size_t)size;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t u = 0;
        if (size == 4) {
            uint32_t u32;
            memcpy(&u32, src + 4 * i, 4);
            u = u32;
        } else {
            memcpy(&u, src + 8 * i, 8);
        }
        put_u(w, u, size);
    }
}

static void put_records(Wr *w, const WireMsg *m) {
    put_u(w, (uint64_t)m->nrec, 2);
    for (int i = 0; i < m->nrec; i++) {
        const PeerRecord *p = &m->rec[i];
        put_str(w, p->id, 1);
        put_str(w, p->addr, 2);
        put_u(w, p->revision, 8);
        put_u(w, (uint64_t)p->first_round, 8);
        put_u(w, (uint64_t)p->cur_round, 8);
        put_u(w, p->flags, 4);
    }
}
static void put_ids(Wr *w, const WireMsg *m) {
    put_u(w, (uint64_t)m->nids, 2);
    for (int i = 0; i < m->nids; i++)
        put_str(w, m->ids[i], 1);
}
static void put_text(Wr *w, const WireMsg *m) {
    put_u(w, m->text_len, 4);
    put_bytes(w, m->text, m->text_len);
}

// Writes (or counts) a checked message.
static void emit(Wr *w, const WireMsg *m) {
    put_bytes(w, "LMSW", 4);
    put_u(w, WIRE_VERSION, 2);
    put_u(w, m->type, 2);
    put_u(w, (uint64_t)m->round, 8);
    put_str(w, m->from, 1);
    switch (m->type) {
    case WIRE_HELLO:
        put_records(w, m);
        put_text(w, m);
        break;
    case WIRE_WELCOME:
    case WIRE_GOSSIP: put_records(w, m); break;
    case WIRE_REFUSE: put_text(w, m); break;
    case WIRE_DELTA:
    case WIRE_DELTA8:
    case WIRE_DELTAS:
    case WIRE_SUM:
    case WIRE_SUMS:
    case WIRE_SUM8:
    case WIRE_DELTAS2:
        if (m->type == WIRE_SUM || m->type == WIRE_SUMS || m->type == WIRE_SUM8)
            put_u(w, m->attempt, 4);
        put_u(w, m->offset, 8);
        put_u(w, m->total, 8);
        put_u(w, m->n, 4);
        put_u(w, m->nloss, 4);
        if (wire_is_q8(m->type)) {
            put_vals(w, m->data, wire_q8_scales(m->n), 4);
            put_u(w, m->nnz, 4);
            if (wire_q8_sparse(m)) put_u(w, m->idx_len, 4), put_bytes(w, m->idx, m->idx_len);
            put_bytes(w, m->q8, m->nnz);
        } else if (m->type == WIRE_DELTAS2) {
            put_vals(w, m->data, 2 * wire_q8_scales(m->n), 4);
            put_u(w, m->nnz, 4);
            put_u(w, m->idx_len, 4);
            put_bytes(w, m->idx, m->idx_len);
            put_bytes(w, m->q8, (m->nnz + 3) / 4);
        } else if (m->type == WIRE_DELTAS || m->type == WIRE_SUMS) {
            put_u(w, m->nnz, 4);
            put_u(w, m->idx_len, 4);
            put_bytes(w, m->idx, m->idx_len);
            put_vals(w, m->data, m->nnz, 4);
        } else {
            put_vals(w, m->data, m->n, 4);
        }
        put_vals(w, m->losses, m->nloss, 8);
        break;
    case WIRE_HAVE:
    case WIRE_HOLD:
    case WIRE_COMMIT:
        if (m->type != WIRE_HAVE) put_u(w, m->attempt, 4);
        put_u(w, m->hash, 8);
        put_ids(w, m);
        if (m->type == WIRE_COMMIT) {
            put_u(w, m->ncut, 2);
            for (uint32_t i = 0; i < m->ncut; i++)
                put_u(w, m->cut[i], 4);
        }
        break;
    case WIRE_FETCH:
    case WIRE_DATA:
        put_u(w, m->what, 4);
        put_u(w, m->offset, 8);
        put_u(w, m->total, 8);
        put_u(w, m->n, 4);
        if (m->type == WIRE_DATA) {
            put_u(w, m->hash, 8);
            put_vals(w, m->data, m->n, 4);
        }
        break;
    default: break; // BYE
    }
}

size_t wire_size(const WireMsg *m) {
    if (!m || wire_check(m, NULL, 0)) return 0;
    Wr w = {NULL, 0};
    emit(&w, m);
    return w.at <= WIRE_MSG_MAX ? w.at : 0;
}

size_t wire_encode(const WireMsg *m, uint8_t *buf, size_t cap) {
    size_t n = wire_size(m);
    if (!n || !buf || n > cap) return 0;
    Wr w = {buf, 0};
    emit(&w, m);
    return n;
}
