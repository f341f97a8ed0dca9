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
//   COMMIT    attempt u32, hash u64, ids
//   FETCH     what u32 (a WireArray), offset u64, total u64, n u32 (1..2^18)
//   DATA      what u32, offset u64, total u64, n u32 (<= 2^18), hash u64, n floats
//   BYE       nothing
//   DELTA8    offset u64, total u64, n u32 (1..2^18), nloss u32 (<= 4096),
//             ceil(n / 4096) floats (the scales), n int8 codes, nloss doubles
//   DELTAS    offset u64, total u64, n u32 (1..2^18), nloss u32 (<= 4096), nnz u32 (<= n / 2),
//             nnz u32 indices (increasing, < n), nnz floats, nloss doubles
//   SUM       attempt u32, then DELTA's fields
//   SUMS      attempt u32, then DELTAS' fields
//   HOLD      as COMMIT
// DELTA, DELTA8, FETCH and DATA need offset + n <= total; a DATA with n = 0 must have offset =
// total = 0 (the version is gone). Nothing may follow the last field. A message is at most
// WIRE_MSG_MAX bytes (the largest valid one, a full DELTA, is about 1.03 MiB).
#include "wire.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char *const type_names[WIRE_NTYPES] = {
    "?",     "HELLO", "WELCOME", "REFUSE", "GOSSIP", "DELTA", "HAVE", "COMMIT",
    "FETCH", "DATA",  "BYE",     "DELTA8", "DELTAS", "SUM",   "HOLD"};

const char *wire_type_name(int type) {
    return type > 0 && type < WIRE_NTYPES ? type_names[type] : "?";
}

static int id_char(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}
static int addr_char(unsigned char c) { return c > ' ' && c < 0x7f; }

// Never reads past s[max] (the arrays in PeerRecord and WireMsg hold max + 1 chars).
static int str_ok(const char *s, size_t max, int (*ok)(unsigned char)) {
    size_t n = 0;
    if (!s) return 0;
    while (n <= max && s[n] && ok((unsigned char)s[n]))
        n++;
    return n >= 1 && n <= max && !s[n];
}
int wire_id_ok(const char *s) { return str_ok(s, WIRE_ID_MAX, id_char); }
int wire_addr_ok(const char *s) { return str_ok(s, WIRE_ADDR_MAX, addr_char); }

// Writes the reason into why (when given) and returns -1.
__attribute__((format(printf, 3, 4))) static int say(char *why, size_t whyn, const char *fmt, ...) {
    if (why && whyn) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whyn, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static uint64_t get_le(const uint8_t *p, int k) {
    uint64_t v = 0;
    for (int i = 0; i < k; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}
static int64_t to_i64(uint64_t u) { return u <= INT64_MAX ? (int64_t)u : -(int64_t)~u - 1; }

float wire_float(const uint8_t *p, size_t i) {
    uint32_t u = (uint32_t)get_le(p + 4 * i, 4);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
double wire_double(const uint8_t *p, size_t i) {
    uint64_t u = get_le(p + 8 * i, 8);
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
        return say(why, whyn, "%s: %d ids > %d", t, m->nids, WIRE_MAX_PEERS);
    for (int i = 0; i < m->nids; i++) {
        if (!wire_id_ok(m->ids[i])) return say(why, whyn, "%s: id %d: bad id", t, i);
        for (int j = 0; j < i; j++)
            if (!strcmp(m->ids[i], m->ids[j]))
                return say(why, whyn, "%s: duplicate id %s", t, m->ids[i]);
    }
    return 0;
}

static int check_records(const WireMsg *m, const char *t, char *why, size_t whyn) {
    if (m->nrec < 0 || m->nrec > WIRE_MAX_PEERS)
        return say(why, whyn, "%s: %d records > %d", t, m->nrec, WIRE_MAX_PEERS);
    if (m->type == WIRE_HELLO && m->nrec != 1)
        return say(why, whyn, "%s: %d records, not 1", t, m->nrec);
    for (int i = 0; i < m->nrec; i++) {
        const PeerRecord *p = &m->rec[i];
        if (!wire_id_ok(p->id)) return say(why, whyn, "%s: record %d: bad id", t, i);
        if (!wire_addr_ok(p->addr)) return say(why, whyn, "%s: record %d: bad address", t, i);
        if (p->first_round < 0 || p->cur_round < 0)
            return say(why, whyn, "%s: record %d: negative round", t, i);
    }
    return 0;
}

size_t wire_q8_scales(size_t n) { return (n + WIRE_Q8_CHUNK - 1) / WIRE_Q8_CHUNK; }

static int is_delta(const WireMsg *m) {
    return m->type == WIRE_DELTA || m->type == WIRE_DELTA8 || m->type == WIRE_DELTAS ||
           m->type == WIRE_SUM || m->type == WIRE_SUMS;
}

uint32_t wire_u32(const uint8_t *p, size_t i) { return (uint32_t)get_le(p + 4 * i, 4); }

// DELTAS: nnz <= n / 2, and the indices increase and stay below n.
static int check_sparse(const WireMsg *m, const char *t, char *why, size_t whyn) {
    if (m->nnz > m->n / 2) return say(why, whyn, "%s: nnz %u > n / 2", t, (unsigned)m->nnz);
    if (m->nnz && (!m->idx || !m->data)) return say(why, whyn, "%s: no indices", t);
    for (uint32_t j = 0; j < m->nnz; j++) {
        uint32_t i = wire_u32(m->idx, j);
        if (i >= m->n || (j && i <= wire_u32(m->idx, j - 1)))
            return say(why, whyn, "%s: index %u at %u out of order or >= n", t, (unsigned)i,
                       (unsigned)j);
    }
    return 0;
}

// DELTA, DELTA8, DELTAS, FETCH, DATA: the array, the counts, [offset, offset + n) inside total.
static int check_range(const WireMsg *m, const char *t, char *why, size_t whyn) {
    if (!is_delta(m) && (m->what < 1 || m->what >= WIRE_ARR_MAX))
        return say(why, whyn, "%s: unknown array %u", t, (unsigned)m->what);
    if (m->n > WIRE_MAX_FLOATS)
        return say(why, whyn, "%s: n %u > %d", t, (unsigned)m->n, WIRE_MAX_FLOATS);
    if (is_delta(m) && m->nloss > WIRE_MAX_LOSSES)
        return say(why, whyn, "%s: nloss %u > %d", t, (unsigned)m->nloss, WIRE_MAX_LOSSES);
    if (m->n == 0 && (m->type != WIRE_DATA || m->offset || m->total))
        return say(why, whyn, "%s: n 0", t);
    if (m->offset > m->total || m->n > m->total - m->offset)
        return say(why, whyn, "%s: offset %llu + n %u > total %llu", t,
                   (unsigned long long)m->offset, (unsigned)m->n, (unsigned long long)m->total);
    if (is_delta(m) && m->nloss && !m->losses) return say(why, whyn, "%s: no losses", t);
    if (m->type == WIRE_DELTAS || m->type == WIRE_SUMS) return check_sparse(m, t, why, whyn);
    if (m->type != WIRE_FETCH && m->n && !m->data) return say(why, whyn, "%s: no data", t);
    if (m->type == WIRE_DELTA8 && m->n && !m->q8) return say(why, whyn, "%s: no codes", t);
    return 0;
}

static int check_text(const WireMsg *m, const char *t, char *why, size_t whyn) {
    if (m->text_len > WIRE_TEXT_MAX)
        return say(why, whyn, "%s: text %u > %d bytes", t, (unsigned)m->text_len, WIRE_TEXT_MAX);
    if (memchr(m->text, 0, m->text_len)) return say(why, whyn, "%s: NUL in text", t);
    return 0;
}

// Every rule of the layout that a decoded WireMsg can break: 0, or -1 with the reason in why.
static int check(const WireMsg *m, char *why, size_t whyn) {
    const char *t = wire_type_name(m->type);
    if (m->type < WIRE_HELLO || m->type >= WIRE_NTYPES)
        return say(why, whyn, "unknown type %u", (unsigned)m->type);
    if (!m->from[0]) return say(why, whyn, "%s: empty sender id", t);
    if (!wire_id_ok(m->from)) return say(why, whyn, "%s: bad sender id", t);
    if (m->round < 0) return say(why, whyn, "%s: round %lld < 0", t, (long long)m->round);
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
    case WIRE_FETCH:
    case WIRE_DATA: return check_range(m, t, why, whyn);
    case WIRE_HAVE:
    case WIRE_HOLD:
    case WIRE_COMMIT: return check_ids(m, t, why, whyn);
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
        if (m->type == WIRE_SUM || m->type == WIRE_SUMS) put_u(w, m->attempt, 4);
        put_u(w, m->offset, 8);
        put_u(w, m->total, 8);
        put_u(w, m->n, 4);
        put_u(w, m->nloss, 4);
        if (m->type == WIRE_DELTA8) {
            put_vals(w, m->data, wire_q8_scales(m->n), 4);
            put_bytes(w, m->q8, m->n);
        } else if (m->type == WIRE_DELTAS || m->type == WIRE_SUMS) {
            put_u(w, m->nnz, 4);
            put_vals(w, m->idx, m->nnz, 4);
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
    if (!m || check(m, NULL, 0)) return 0;
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

// ---------------------------------------------------------------- decoding

typedef struct {
    const uint8_t *p;
    size_t n, at;
    int trunc;     // a read ran past the end: every later read fails too
    const char *t; // the type's name, for messages
    char *err;
    size_t errn;
} Rd;

// The next k bytes, or NULL (and r->trunc) when fewer are left.
static const uint8_t *get_bytes(Rd *r, size_t k) {
    if (r->trunc || k > r->n - r->at) {
        r->trunc = 1;
        return NULL;
    }
    r->at += k;
    return r->p + r->at - k;
}
static uint64_t get_u(Rd *r, int k) {
    const uint8_t *q = get_bytes(r, (size_t)k);
    return q ? get_le(q, k) : 0;
}

// Returns -1 with "truncated TYPE" after a short read, else with "TYPE: <reason>".
__attribute__((format(printf, 2, 3))) static int bad(Rd *r, const char *fmt, ...) {
    if (!r->err || !r->errn) return -1;
    if (r->trunc) return say(r->err, r->errn, "truncated %s", r->t);
    int k = snprintf(r->err, r->errn, "%s: ", r->t);
    if (k >= 0 && (size_t)k < r->errn) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err + k, r->errn - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return -1;
}

// A string of length 1..max (a lenbytes-byte length) whose bytes all pass ok, into out.
static int get_str(Rd *r, char *out, size_t max, int lenbytes, int (*ok)(unsigned char)) {
    size_t k = (size_t)get_u(r, lenbytes);
    const uint8_t *q = get_bytes(r, k);
    if (!q || k < 1 || k > max) return -1;
    for (size_t i = 0; i < k; i++)
        if (!ok(q[i])) return -1;
    memcpy(out, q, k);
    out[k] = 0;
    return 0;
}

static int get_records(Rd *r, WireMsg *m) {
    size_t n = (size_t)get_u(r, 2);
    if (n > WIRE_MAX_PEERS) return bad(r, "%zu records > %d", n, WIRE_MAX_PEERS);
    for (size_t i = 0; i < n; i++) {
        PeerRecord *p = &m->rec[i];
        if (get_str(r, p->id, WIRE_ID_MAX, 1, id_char)) return bad(r, "record %zu: bad id", i);
        if (get_str(r, p->addr, WIRE_ADDR_MAX, 2, addr_char))
            return bad(r, "record %zu: bad address", i);
        p->revision = get_u(r, 8);
        p->first_round = to_i64(get_u(r, 8));
        p->cur_round = to_i64(get_u(r, 8));
        p->flags = (uint32_t)get_u(r, 4);
    }
    m->nrec = (int)n;
    return r->trunc ? bad(r, "short") : 0;
}

static int get_ids(Rd *r, WireMsg *m) {
    size_t n = (size_t)get_u(r, 2);
    if (n > WIRE_MAX_PEERS) return bad(r, "%zu ids > %d", n, WIRE_MAX_PEERS);
    for (size_t i = 0; i < n; i++)
        if (get_str(r, m->ids[i], WIRE_ID_MAX, 1, id_char)) return bad(r, "id %zu: bad id", i);
    m->nids = (int)n;
    return r->trunc ? bad(r, "short") : 0;
}

static int get_text(Rd *r, WireMsg *m) {
    uint32_t k = (uint32_t)get_u(r, 4);
    if (k > WIRE_TEXT_MAX) return bad(r, "text %u > %d bytes", (unsigned)k, WIRE_TEXT_MAX);
    const uint8_t *q = get_bytes(r, k);
    if (!q) return bad(r, "short");
    if (memchr(q, 0, k)) return bad(r, "NUL in text");
    memcpy(m->text, q, k);
    m->text[k] = 0;
    m->text_len = k;
    return 0;
}

// DELTA, DELTA8, DELTAS, FETCH, DATA: the fields in their order, the floats, codes, indices and
// losses as
// pointers into r.
static int get_range(Rd *r, WireMsg *m) {
    if (m->type == WIRE_SUM || m->type == WIRE_SUMS) m->attempt = (uint32_t)get_u(r, 4);
    if (!is_delta(m)) m->what = (uint32_t)get_u(r, 4);
    m->offset = get_u(r, 8);
    m->total = get_u(r, 8);
    m->n = (uint32_t)get_u(r, 4);
    if (is_delta(m)) m->nloss = (uint32_t)get_u(r, 4);
    if (m->type == WIRE_DATA) m->hash = get_u(r, 8);
    if (r->trunc) return bad(r, "short");
    if (m->n > WIRE_MAX_FLOATS) return bad(r, "n %u > %d", (unsigned)m->n, WIRE_MAX_FLOATS);
    if (m->nloss > WIRE_MAX_LOSSES)
        return bad(r, "nloss %u > %d", (unsigned)m->nloss, WIRE_MAX_LOSSES);
    if (m->type == WIRE_FETCH) return 0;
    if (m->type == WIRE_DELTA8) {
        m->data = get_bytes(r, wire_q8_scales(m->n) * 4);
        m->q8 = get_bytes(r, m->n);
    } else if (m->type == WIRE_DELTAS || m->type == WIRE_SUMS) {
        m->nnz = (uint32_t)get_u(r, 4);
        if (m->nnz > m->n / 2 && !r->trunc) return bad(r, "nnz %u > n / 2", (unsigned)m->nnz);
        m->idx = get_bytes(r, (size_t)m->nnz * 4);
        m->data = get_bytes(r, (size_t)m->nnz * 4);
    } else {
        m->data = get_bytes(r, (size_t)m->n * 4);
    }
    if (is_delta(m)) m->losses = get_bytes(r, (size_t)m->nloss * 8);
    return r->trunc ? bad(r, "short") : 0;
}

static int get_body(Rd *r, WireMsg *m) {
    switch (m->type) {
    case WIRE_HELLO: return get_records(r, m) || get_text(r, m) ? -1 : 0;
    case WIRE_WELCOME:
    case WIRE_GOSSIP: return get_records(r, m);
    case WIRE_REFUSE: return get_text(r, m);
    case WIRE_HAVE:
    case WIRE_HOLD:
    case WIRE_COMMIT:
        if (m->type != WIRE_HAVE) m->attempt = (uint32_t)get_u(r, 4);
        m->hash = get_u(r, 8);
        return get_ids(r, m);
    case WIRE_DELTA:
    case WIRE_DELTA8:
    case WIRE_DELTAS:
    case WIRE_SUM:
    case WIRE_SUMS:
    case WIRE_FETCH:
    case WIRE_DATA: return get_range(r, m);
    default: return 0; // BYE
    }
}

int wire_decode(const uint8_t *buf, size_t len, WireMsg *m, char *err, size_t errn) {
    if (len > WIRE_MSG_MAX) return say(err, errn, "oversized: %zu bytes > %zu", len, WIRE_MSG_MAX);
    if (!buf) len = 0;
    Rd r = {buf, len, 0, 0, "header", err, errn};
    m->type = 0, m->round = 0, m->from[0] = 0, m->what = m->attempt = 0;
    m->offset = m->total = m->hash = 0, m->n = m->nloss = 0,
    m->data = m->losses = m->q8 = m->idx = NULL;
    m->nnz = 0;
    m->nids = m->nrec = 0, m->text_len = 0, m->text[0] = 0;
    const uint8_t *magic = get_bytes(&r, 4);
    if (magic && memcmp(magic, "LMSW", 4)) return say(err, errn, "bad magic");
    unsigned version = (unsigned)get_u(&r, 2);
    if (!r.trunc && version != WIRE_VERSION)
        return say(err, errn, "version %u, this loom speaks %d", version, WIRE_VERSION);
    m->type = (uint16_t)get_u(&r, 2);
    if (!r.trunc && (m->type < WIRE_HELLO || m->type >= WIRE_NTYPES))
        return say(err, errn, "unknown type %u", (unsigned)m->type);
    m->round = to_i64(get_u(&r, 8));
    if (!r.trunc) r.t = wire_type_name(m->type);
    if (r.at < len && buf[r.at] == 0) return bad(&r, "empty sender id");
    if (get_str(&r, m->from, WIRE_ID_MAX, 1, id_char)) return bad(&r, "bad sender id");
    if (get_body(&r, m)) return -1;
    if (r.at != len) return bad(&r, "%zu trailing bytes", len - r.at);
    return check(m, err, errn);
}
