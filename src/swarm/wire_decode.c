// wire_decode.c — the swarm's message decoder (wire.h: wire_decode): reads only inside its
// input, checks every length before it uses it, and applies the same checks as the encoder
// (wire_impl.h), so every accepted message re-encodes to the same bytes. The layout: wire.c.
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "wire.h"
#include "wire_impl.h"

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
    return q ? wire_get_le(q, k) : 0;
}

// Returns -1 with "truncated TYPE" after a short read, else with "TYPE: <reason>".
__attribute__((format(printf, 2, 3))) static int bad(Rd *r, const char *fmt, ...) {
    if (!r->err || !r->errn) return -1;
    if (r->trunc) return wire_say(r->err, r->errn, "truncated %s", r->t);
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
        if (get_str(r, p->id, WIRE_ID_MAX, 1, wire_id_char)) return bad(r, "record %zu: bad id", i);
        if (get_str(r, p->addr, WIRE_ADDR_MAX, 2, wire_addr_char))
            return bad(r, "record %zu: bad address", i);
        p->revision = get_u(r, 8);
        p->first_round = wire_to_i64(get_u(r, 8));
        p->cur_round = wire_to_i64(get_u(r, 8));
        p->flags = (uint32_t)get_u(r, 4);
    }
    m->nrec = (int)n;
    return r->trunc ? bad(r, "short") : 0;
}

static int get_ids(Rd *r, WireMsg *m) {
    size_t n = (size_t)get_u(r, 2);
    if (n > WIRE_MAX_PEERS) return bad(r, "%zu ids > %d", n, WIRE_MAX_PEERS);
    for (size_t i = 0; i < n; i++)
        if (get_str(r, m->ids[i], WIRE_ID_MAX, 1, wire_id_char)) return bad(r, "id %zu: bad id", i);
    m->nids = (int)n;
    return r->trunc ? bad(r, "short") : 0;
}

static int get_cut(Rd *r, WireMsg *m) {
    m->ncut = (uint32_t)get_u(r, 2); // (its count against the ids: wire_check)
    if (m->ncut >= WIRE_MAX_PEERS)
        return bad(r, "%u cuts > %d", (unsigned)m->ncut, WIRE_MAX_PEERS - 1);
    for (uint32_t i = 0; i < m->ncut && !r->trunc; i++)
        m->cut[i] = (uint32_t)get_u(r, 4);
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

// A sparse message's gaps after its nnz: their length (checked against nnz before anything is
// read) and bytes. (wire_check walks them.)
static int get_gaps(Rd *r, WireMsg *m) {
    if (r->trunc) return bad(r, "short");
    if (m->nnz > m->n / 2) return bad(r, "nnz %u > n / 2", (unsigned)m->nnz);
    m->idx_len = (uint32_t)get_u(r, 4);
    if (!r->trunc && (m->idx_len < m->nnz || m->idx_len > 3 * (uint64_t)m->nnz))
        return bad(r, "%u bytes of gaps for %u indices", (unsigned)m->idx_len, (unsigned)m->nnz);
    m->idx = get_bytes(r, m->idx_len);
    return 0;
}

// DELTA, DELTA8, DELTAS, FETCH, DATA: the fields in their order, the floats, codes, indices and
// losses as
// pointers into r.
static int get_range(Rd *r, WireMsg *m) {
    if (m->type == WIRE_SUM || m->type == WIRE_SUMS || m->type == WIRE_SUM8)
        m->attempt = (uint32_t)get_u(r, 4);
    if (!wire_is_delta(m)) m->what = (uint32_t)get_u(r, 4);
    m->offset = get_u(r, 8);
    m->total = get_u(r, 8);
    m->n = (uint32_t)get_u(r, 4);
    if (wire_is_delta(m)) m->nloss = (uint32_t)get_u(r, 4);
    if (m->type == WIRE_DATA) m->hash = get_u(r, 8);
    if (r->trunc) return bad(r, "short");
    if (m->n > WIRE_MAX_FLOATS) return bad(r, "n %u > %d", (unsigned)m->n, WIRE_MAX_FLOATS);
    if (m->nloss > WIRE_MAX_LOSSES)
        return bad(r, "nloss %u > %d", (unsigned)m->nloss, WIRE_MAX_LOSSES);
    if (m->type == WIRE_FETCH) return 0;
    if (wire_is_q8(m->type)) {
        m->data = get_bytes(r, wire_q8_scales(m->n) * 4);
        m->nnz = (uint32_t)get_u(r, 4);
        if (m->nnz != m->n && get_gaps(r, m)) return -1;
        m->q8 = get_bytes(r, m->nnz);
    } else if (m->type == WIRE_DELTAS2) {
        m->data = get_bytes(r, 2 * wire_q8_scales(m->n) * 4);
        m->nnz = (uint32_t)get_u(r, 4);
        if (get_gaps(r, m)) return -1;
        m->q8 = get_bytes(r, (m->nnz + 3) / 4);
    } else if (m->type == WIRE_DELTAS || m->type == WIRE_SUMS) {
        m->nnz = (uint32_t)get_u(r, 4);
        if (get_gaps(r, m)) return -1;
        m->data = get_bytes(r, (size_t)m->nnz * 4);
    } else {
        m->data = get_bytes(r, (size_t)m->n * 4);
    }
    if (wire_is_delta(m)) m->losses = get_bytes(r, (size_t)m->nloss * 8);
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
        if (get_ids(r, m)) return -1;
        return m->type == WIRE_COMMIT ? get_cut(r, m) : 0;
    case WIRE_DELTA:
    case WIRE_DELTA8:
    case WIRE_DELTAS:
    case WIRE_SUM:
    case WIRE_SUMS:
    case WIRE_SUM8:
    case WIRE_DELTAS2:
    case WIRE_FETCH:
    case WIRE_DATA: return get_range(r, m);
    default: return 0; // BYE
    }
}

int wire_decode(const uint8_t *buf, size_t len, WireMsg *m, char *err, size_t errn) {
    if (len > WIRE_MSG_MAX)
        return wire_say(err, errn, "oversized: %zu bytes > %zu", len, WIRE_MSG_MAX);
    if (!buf) len = 0;
    Rd r = {buf, len, 0, 0, "header", err, errn};
    m->type = 0, m->round = 0, m->from[0] = 0, m->what = m->attempt = 0;
    m->offset = m->total = m->hash = 0, m->n = m->nloss = 0,
    m->data = m->losses = m->q8 = m->idx = NULL;
    m->nnz = m->idx_len = 0;
    m->nids = m->nrec = 0, m->text_len = 0, m->text[0] = 0, m->ncut = 0;
    const uint8_t *magic = get_bytes(&r, 4);
    if (magic && memcmp(magic, "LMSW", 4)) return wire_say(err, errn, "bad magic");
    unsigned version = (unsigned)get_u(&r, 2);
    if (!r.trunc && version != WIRE_VERSION)
        return wire_say(err, errn, "version %u, this loom speaks %d", version, WIRE_VERSION);
    m->type = (uint16_t)get_u(&r, 2);
    if (!r.trunc && (m->type < WIRE_HELLO || m->type >= WIRE_NTYPES))
        return wire_say(err, errn, "unknown type %u", (unsigned)m->type);
    m->round = wire_to_i64(get_u(&r, 8));
    if (!r.trunc) r.t = wire_type_name(m->type);
    if (r.at < len && buf[r.at] == 0) return bad(&r, "empty sender id");
    if (get_str(&r, m->from, WIRE_ID_MAX, 1, wire_id_char)) return bad(&r, "bad sender id");
    if (get_body(&r, m)) return -1;
    if (r.at != len) return bad(&r, "%zu trailing bytes", len - r.at);
    return wire_check(m, err, errn);
}
