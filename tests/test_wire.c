// test_wire.c — the swarm's message codec (src/swarm/wire.c):
//   * every type round-trips (encode, decode, compare, re-encode to the same bytes), with
//     representative content and the maximum counts (256 records of the longest ids and
//     addresses, 256 ids, 2^18 floats with 4096 losses, 16384 bytes of text);
//   * floats and doubles keep their exact bits: NaN payloads, signalling NaNs, -0.0,
//     infinities, subnormals;
//   * the layout is pinned by messages built byte by byte here (an independent writer), which
//     decode to the expected fields and equal the encoder's output;
//   * every prefix of every valid message is rejected as truncated; one trailing byte, any
//     change of one count byte, a wrong magic, version or type and an oversized input are
//     rejected; a table of malformed messages is rejected with the expected reason; any single
//     byte changed anywhere either is rejected or decodes to a message that re-encodes to
//     exactly those bytes (the encoding is canonical);
//   * the encoder refuses out-of-range fields (wire_size and wire_encode return 0);
//   * the fuzz seeds in fuzz/corpus/wire/ (written by fuzz/make_corpus.sh's Python, a third
//     writer of the layout) are all valid and canonical (run from the repository root).
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/common.h"
#include "../src/swarm/wire.h"
#include "test.h"

static WireMsg msg, back, back2;
static uint8_t buf[WIRE_MSG_MAX + 1], buf2[WIRE_MSG_MAX + 1];
static float fl[WIRE_MAX_FLOATS], fl_back[WIRE_MAX_FLOATS];
static double dl[WIRE_MAX_LOSSES];
static char err[256];

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) { return rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; }

static void base(WireMsg *m, int type) {
    memset(m, 0, sizeof *m);
    m->type = (uint16_t)type;
    m->round = 41;
    strcpy(m->from, "peer-A.1_x");
}

static void set_rec(PeerRecord *r, int i, int longest) {
    memset(r, 0, sizeof *r);
    if (longest) {
        memset(r->id, 'a' + i % 26, WIRE_ID_MAX);
        snprintf(r->id + WIRE_ID_MAX - 3, 4, "%03d", i);
        memset(r->addr, '~', WIRE_ADDR_MAX);
        snprintf(r->addr + WIRE_ADDR_MAX - 8, 9, "!:%06d", i);
    } else {
        snprintf(r->id, sizeof r->id, "node-%d", i);
        snprintf(r->addr, sizeof r->addr, "10.0.%d.%d:%d", i / 250, i % 250, 5555 + i);
    }
    r->revision = next_rand();
    r->first_round = i * 3;
    r->cur_round = (int64_t)(next_rand() >> 1);
    r->flags = (uint32_t)(i % 4);
}

// Floats and doubles whose bits must survive: NaNs with payloads (quiet and signalling, both
// signs), ±0, ±inf, subnormals, extremes, then random bit patterns.
static const uint32_t special_f[] = {0x7fc12345u, 0x7f800001u, 0xffbfffffu, 0xffffffffu,
                                     0x80000000u, 0x00000000u, 0x7f800000u, 0xff800000u,
                                     0x00000001u, 0x807fffffu, 0x7f7fffffu, 0x3f800000u};
static const uint64_t special_d[] = {0x7ff8000000000001ull, 0x7ff0000000000001ull,
                                     0xfff7ffffffffffffull, 0x8000000000000000ull,
                                     0x0000000000000001ull, 0xfff0000000000000ull};

static void fill_values(size_t n, size_t nloss) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u = i < 12 ? special_f[i] : (uint32_t)next_rand();
        memcpy(&fl[i], &u, 4);
    }
    for (size_t i = 0; i < nloss; i++) {
        uint64_t u = i < 6 ? special_d[i] : next_rand();
        memcpy(&dl[i], &u, 8);
    }
}

static int same_records(const WireMsg *a, const WireMsg *b) {
    if (a->nrec != b->nrec) return 0;
    for (int i = 0; i < a->nrec; i++) {
        const PeerRecord *x = &a->rec[i], *y = &b->rec[i];
        if (strcmp(x->id, y->id) || strcmp(x->addr, y->addr) || x->revision != y->revision ||
            x->first_round != y->first_round || x->cur_round != y->cur_round ||
            x->flags != y->flags)
            return 0;
    }
    return 1;
}

// The fields a's type carries are equal in b (floats and doubles bit for bit).
static int same_msg(const WireMsg *a, const WireMsg *b) {
    if (a->type != b->type || a->round != b->round || strcmp(a->from, b->from)) return 0;
    if (!same_records(a, b) || a->text_len != b->text_len || strcmp(a->text, b->text)) return 0;
    if (a->what != b->what || a->attempt != b->attempt || a->hash != b->hash) return 0;
    if (a->offset != b->offset || a->total != b->total || a->n != b->n || a->nloss != b->nloss)
        return 0;
    if (a->nids != b->nids) return 0;
    for (int i = 0; i < a->nids; i++)
        if (strcmp(a->ids[i], b->ids[i])) return 0;
    if (a->nnz != b->nnz) return 0;
    int sparse = b->type == WIRE_DELTAS || b->type == WIRE_SUMS || b->type == WIRE_DELTAS2 ||
                 wire_q8_sparse(b);
    if (sparse && (a->idx_len != b->idx_len || memcmp(a->idx, b->idx, a->idx_len))) return 0;
    if (b->type == WIRE_DELTAS2) { // the levels, then the codes
        size_t nl = 2 * wire_q8_scales(a->n);
        wire_floats(b->data, nl, fl_back);
        return !memcmp(a->data, fl_back, nl * 4) && !memcmp(a->q8, b->q8, (a->nnz + 3) / 4) &&
               (!a->nloss || !memcmp(a->losses, b->losses, 8 * (size_t)a->nloss));
    }
    for (uint32_t j = 0; j < a->nnz && !wire_is_q8(b->type); j++) { // DELTAS: the values
        float f = wire_float(b->data, j), g;
        memcpy(&g, a->data + 4 * (size_t)j, 4);
        if (memcmp(&f, &g, 4)) return 0;
    }
    if (a->n && wire_is_q8(b->type)) { // the scales, then the codes
        size_t ns = wire_q8_scales(a->n);
        wire_floats(b->data, ns, fl_back);
        if (memcmp(a->data, fl_back, ns * 4) || memcmp(a->q8, b->q8, a->nnz)) return 0;
    } else if (a->n && b->type != WIRE_FETCH && b->type != WIRE_DELTAS) {
        wire_floats(b->data, b->n, fl_back);
        if (memcmp(a->data, fl_back, (size_t)a->n * 4)) return 0;
        for (uint32_t i = 0; i < a->n; i += 997) {
            float f = wire_float(b->data, i), g;
            memcpy(&g, a->data + 4 * (size_t)i, 4);
            if (memcmp(&f, &g, 4)) return 0;
        }
    }
    for (uint32_t i = 0; i < a->nloss; i++) {
        double d = wire_double(b->losses, i);
        if (memcmp(&d, a->losses + 8 * (size_t)i, 8)) return 0;
    }
    return 1;
}

// Encodes m, decodes it, compares, re-encodes; then every prefix is rejected as truncated, one
// more byte as trailing, and a buffer one byte short makes the encoder refuse. Returns the length.
static size_t roundtrip(const WireMsg *m, const char *what) {
    size_t n = wire_size(m);
    CHECK(n > 0 && n <= WIRE_MSG_MAX, "%s: wire_size %zu", what, n);
    if (!n) return 0;
    CHECK(wire_encode(m, buf, n - 1) == 0, "%s: encoded into %zu bytes", what, n - 1);
    size_t k = wire_encode(m, buf, sizeof buf);
    CHECK(k == n, "%s: encoded %zu bytes, wire_size said %zu", what, k, n);
    int rc = wire_decode(buf, n, &back, err, sizeof err);
    CHECK(rc == 0, "%s: decode: %s", what, err);
    if (rc) return 0;
    CHECK(same_msg(m, &back), "%s: decoded fields differ", what);
    k = wire_encode(&back, buf2, sizeof buf2);
    CHECK(k == n && !memcmp(buf, buf2, n), "%s: re-encoding differs", what);
    size_t bad = 0, first = 0;
    for (size_t len = 0; len < n; len++) {
        err[0] = 0;
        if (wire_decode(buf, len, &back2, err, sizeof err) == 0 || !strstr(err, "truncated"))
            first = bad++ ? first : len;
    }
    CHECK(bad == 0, "%s: %zu prefixes not rejected as truncated, the first %zu bytes", what, bad,
          first);
    buf[n] = 0;
    CHECK(wire_decode(buf, n + 1, &back2, err, sizeof err) && strstr(err, "1 trailing bytes"),
          "%s: trailing byte: %s", what, err);
    return n;
}

TEST(roundtrip_every_type) {
    base(&msg, WIRE_HELLO);
    set_rec(&msg.rec[0], 7, 0);
    msg.nrec = 1;
    for (int i = 0; i < 255; i++)
        msg.text[i] = (char)(i + 1); // every byte but NUL
    msg.text_len = 255;
    roundtrip(&msg, "HELLO");
    msg.text_len = WIRE_TEXT_MAX;
    memset(msg.text, '\xff', WIRE_TEXT_MAX);
    roundtrip(&msg, "HELLO, longest text");
    msg.text_len = 0, msg.text[0] = 0;
    roundtrip(&msg, "HELLO, no text");

    base(&msg, WIRE_WELCOME);
    for (msg.nrec = 0; msg.nrec < 3; msg.nrec++)
        set_rec(&msg.rec[msg.nrec], msg.nrec, 0);
    roundtrip(&msg, "WELCOME");
    for (msg.nrec = 0; msg.nrec < WIRE_MAX_PEERS; msg.nrec++)
        set_rec(&msg.rec[msg.nrec], msg.nrec, 1);
    size_t n = roundtrip(&msg, "WELCOME, 256 longest records");
    CHECK(n == 17 + 10 + 2 + 256 * (31 + 64 + 255), "WELCOME size %zu", n);

    base(&msg, WIRE_REFUSE);
    strcpy(msg.text, "seq: 1024 here, 512 there\n\ttabs and UTF-8 \xce\xb1 are fine");
    msg.text_len = (uint32_t)strlen(msg.text);
    roundtrip(&msg, "REFUSE");

    base(&msg, WIRE_GOSSIP);
    roundtrip(&msg, "GOSSIP, empty");
    for (msg.nrec = 0; msg.nrec < 5; msg.nrec++)
        set_rec(&msg.rec[msg.nrec], msg.nrec * 50, msg.nrec & 1);
    msg.round = INT64_MAX;
    roundtrip(&msg, "GOSSIP");

    base(&msg, WIRE_BYE);
    msg.round = 0;
    CHECK(roundtrip(&msg, "BYE") == 17 + 10, "BYE size");
}

TEST(roundtrip_arrays) {
    base(&msg, WIRE_DELTA);
    fill_values(WIRE_MAX_FLOATS, WIRE_MAX_LOSSES);
    msg.data = (const uint8_t *)fl, msg.losses = (const uint8_t *)dl;
    msg.n = 100, msg.nloss = 7, msg.offset = 5, msg.total = 105;
    roundtrip(&msg, "DELTA");
    msg.n = WIRE_MAX_FLOATS, msg.nloss = WIRE_MAX_LOSSES;
    msg.offset = UINT64_MAX - WIRE_MAX_FLOATS, msg.total = UINT64_MAX;
    size_t n = roundtrip(&msg, "DELTA, longest");
    CHECK(n == 17 + 10 + 24 + 4 * (size_t)WIRE_MAX_FLOATS + 8 * WIRE_MAX_LOSSES, "size %zu", n);
    msg.nloss = 0, msg.losses = NULL, msg.n = 1, msg.offset = 0, msg.total = 1;
    roundtrip(&msg, "DELTA, one float, no losses");

    base(&msg, WIRE_DELTA8); // scales: one per 4096 codes, the last chunk partial; all codes
    msg.data = (const uint8_t *)fl, msg.q8 = (const uint8_t *)dl, msg.losses = (const uint8_t *)dl;
    msg.n = msg.nnz = 4097, msg.nloss = 3, msg.offset = 4096, msg.total = 10000;
    n = roundtrip(&msg, "DELTA8");
    CHECK(n == 17 + 10 + 24 + 2 * 4 + 4 + 4097 + 3 * 8, "DELTA8 size %zu", n);
    msg.n = msg.nnz = WIRE_MAX_FLOATS, msg.nloss = WIRE_MAX_LOSSES, msg.offset = 0,
    msg.total = 1ull << 30;
    msg.q8 = (const uint8_t *)fl;
    n = roundtrip(&msg, "DELTA8, longest");
    CHECK(n == 17 + 10 + 24 + 64 * 4 + 4 + (size_t)WIRE_MAX_FLOATS + 8 * WIRE_MAX_LOSSES,
          "DELTA8 longest size %zu", n);

    // Sparse: gaps (LEB128, 1..3 bytes) for increasing indices < n, at most n / 2 of them.
    static uint8_t gaps[3 * WIRE_MAX_FLOATS / 2], codes[WIRE_MAX_FLOATS / 2];
    uint32_t at[] = {0, 127, 128, 128 + 1 + 16383, 128 + 1 + 16383 + 1 + 16384, 262143};
    size_t len = 0;
    for (int j = 0; j < 6; j++)
        len += wire_gap_put(gaps + len, at[j] - (j ? at[j - 1] + 1 : 0));
    CHECK(len == 1 + 1 + 1 + 2 + 3 + 3, "gap bytes %zu", len); // 0, 127, 0, 16383, 16384, 245375
    msg.n = WIRE_MAX_FLOATS, msg.nnz = 6, msg.idx = gaps, msg.idx_len = (uint32_t)len;
    memset(codes, 0x81, sizeof codes), msg.q8 = codes, msg.nloss = 1;
    n = roundtrip(&msg, "DELTA8, sparse");
    CHECK(n == 17 + 10 + 24 + 64 * 4 + 4 + 4 + len + 6 + 8, "DELTA8 sparse size %zu", n);
    WireGaps g;
    wire_gaps_begin(&back, &g);
    for (int j = 0; j < 6; j++)
        CHECK(wire_gaps_next(&g) == at[j], "gap walk %d", j);
    msg.nnz = 0, msg.idx_len = 0;
    roundtrip(&msg, "DELTA8, every code 0");
    msg.nnz = 6, msg.idx_len = (uint32_t)len, codes[3] = 0;
    CHECK(wire_size(&msg) == 0, "a sparse DELTA8 with a code 0 encodes");
    codes[3] = 0x81, msg.n = 262143, msg.total = 1ull << 30;
    CHECK(wire_size(&msg) == 0, "a sparse DELTA8 with an index >= n encodes");
    msg.n = 262144, msg.idx_len = (uint32_t)len - 1;
    CHECK(wire_size(&msg) == 0, "gaps one byte short encode");
    msg.idx_len = (uint32_t)len + 1, gaps[len] = 0;
    CHECK(wire_size(&msg) == 0, "a spare gap byte encodes");
    gaps[0] = 0x80, gaps[1] = 0x00;
    msg.nnz = 1, msg.idx_len = 2;
    CHECK(wire_size(&msg) == 0, "an overlong gap encodes");
    gaps[0] = 0xff, gaps[1] = 0xff, gaps[2] = 0xff, gaps[3] = 0x01, msg.idx_len = 3;
    CHECK(wire_size(&msg) == 0, "a gap of 4 bytes encodes");
    msg.n = 10, msg.total = 10, msg.nnz = 6;
    CHECK(wire_size(&msg) == 0, "a DELTA8 with 6 of 10 codes encodes");

    base(&msg, WIRE_DELTAS); // indices increasing, < n, at most n / 2 of them
    len = 0;
    for (uint32_t j = 0; j < WIRE_MAX_FLOATS / 2; j++)
        len += wire_gap_put(gaps + len, 1); // (indices 1, 3, 5, ...)
    msg.data = (const uint8_t *)fl, msg.idx = gaps, msg.idx_len = 5,
    msg.losses = (const uint8_t *)dl;
    msg.n = 10, msg.nnz = 5, msg.nloss = 2, msg.offset = 0, msg.total = 10;
    n = roundtrip(&msg, "DELTAS");
    CHECK(n == 17 + 10 + 32 + 5 * 5 + 2 * 8, "DELTAS size %zu", n);
    msg.nnz = 0, msg.idx_len = 0;
    roundtrip(&msg, "DELTAS, all zero");
    msg.n = WIRE_MAX_FLOATS, msg.nnz = WIRE_MAX_FLOATS / 2, msg.nloss = WIRE_MAX_LOSSES;
    msg.total = WIRE_MAX_FLOATS, msg.idx_len = (uint32_t)len;
    roundtrip(&msg, "DELTAS, longest");
    msg.n = 10, msg.nnz = 5, msg.total = 10, msg.nloss = 0, msg.idx_len = 5;
    CHECK(wire_size(&msg) > 0, "DELTAS valid");
    msg.nnz = 6, msg.idx_len = 6;
    CHECK(wire_size(&msg) == 0, "DELTAS with nnz > n / 2 encodes");
    msg.n = 3, msg.total = 3, msg.nnz = 1, msg.idx_len = 1, gaps[0] = 3;
    CHECK(wire_size(&msg) == 0, "DELTAS with an index >= n encodes");
    gaps[0] = 1;

    base(&msg, WIRE_DELTAS2); // two levels a chunk, gaps, 2 bits a value, the last byte padded
    msg.data = (const uint8_t *)fl, msg.idx = gaps, msg.q8 = codes,
    msg.losses = (const uint8_t *)dl;
    msg.n = 4097, msg.nnz = 5, msg.idx_len = 5, msg.nloss = 1, msg.offset = 0, msg.total = 4097;
    codes[0] = 0xe4, codes[1] = 0x03; // codes 0, 1, 2, 3, 3
    n = roundtrip(&msg, "DELTAS2");
    CHECK(n == 17 + 10 + 24 + 4 * 4 + 8 + 5 + 2 + 8, "DELTAS2 size %zu", n);
    CHECK(wire_code2(&back, 0) == 0 && wire_code2(&back, 1) == 1 && wire_code2(&back, 2) == 2 &&
              wire_code2(&back, 3) == 3 && wire_code2(&back, 4) == 3,
          "DELTAS2 codes");
    codes[1] = 0x13;
    CHECK(wire_size(&msg) == 0, "a DELTAS2 with unused code bits set encodes");
    codes[1] = 0x03, msg.nnz = 4, msg.idx_len = 4;
    roundtrip(&msg, "DELTAS2, a whole last byte");
    msg.nnz = 0, msg.idx_len = 0;
    roundtrip(&msg, "DELTAS2, nothing kept");
    msg.n = WIRE_MAX_FLOATS, msg.nnz = WIRE_MAX_FLOATS / 2, msg.total = WIRE_MAX_FLOATS;
    msg.idx_len = (uint32_t)len, msg.nloss = WIRE_MAX_LOSSES;
    memset(codes, 0xff, sizeof codes);
    roundtrip(&msg, "DELTAS2, longest");

    base(&msg, WIRE_DATA);
    msg.data = (const uint8_t *)fl;
    msg.what = WIRE_ARR_MOMENTUM, msg.hash = 0x0123456789abcdefull;
    msg.n = 12, msg.offset = 1000, msg.total = 1012;
    roundtrip(&msg, "DATA");
    msg.n = WIRE_MAX_FLOATS, msg.offset = 0, msg.total = 124439808;
    roundtrip(&msg, "DATA, longest");
    msg.n = 0, msg.offset = 0, msg.total = 0, msg.data = NULL;
    roundtrip(&msg, "DATA, gone");

    base(&msg, WIRE_FETCH);
    for (uint32_t w = 1; w < WIRE_ARR_MAX; w++) {
        msg.what = w, msg.n = WIRE_MAX_FLOATS, msg.offset = 1ull << 40, msg.total = 1ull << 41;
        roundtrip(&msg, "FETCH");
    }
}

TEST(roundtrip_ids) {
    base(&msg, WIRE_HAVE);
    msg.hash = UINT64_MAX;
    roundtrip(&msg, "HAVE, no ids");
    for (msg.nids = 0; msg.nids < WIRE_MAX_PEERS; msg.nids++) {
        memset(msg.ids[msg.nids], 'Z', WIRE_ID_MAX);
        snprintf(msg.ids[msg.nids] + WIRE_ID_MAX - 3, 4, "%03d", msg.nids);
    }
    roundtrip(&msg, "HAVE, 256 longest ids");
    base(&msg, WIRE_COMMIT);
    msg.attempt = 3, msg.hash = 42;
    const char *ids[] = {"a", "b.2", "peer-9", "Q_"};
    for (msg.nids = 0; msg.nids < 4; msg.nids++)
        strcpy(msg.ids[msg.nids], ids[msg.nids]);
    roundtrip(&msg, "COMMIT");
    msg.ncut = 3, msg.cut[0] = 0, msg.cut[1] = 7, msg.cut[2] = UINT32_MAX;
    roundtrip(&msg, "COMMIT with a cut");
    msg.ncut = 2;
    CHECK(wire_size(&msg) == 0, "a COMMIT with 2 cuts for 4 ids encodes");
    msg.ncut = 3, msg.cut[1] = UINT32_MAX, msg.cut[2] = 7;
    CHECK(wire_size(&msg) == 0, "a COMMIT with a decreasing cut encodes");
    msg.nids = 0, msg.ncut = UINT32_MAX;
    CHECK(wire_size(&msg) == 0, "a COMMIT with cuts and no ids encodes");
}

TEST(float_bits_exact) {
    fill_values(64, 16);
    base(&msg, WIRE_DELTA);
    msg.data = (const uint8_t *)fl, msg.losses = (const uint8_t *)dl;
    msg.n = 64, msg.nloss = 16, msg.total = 64;
    size_t n = wire_encode(&msg, buf, sizeof buf);
    CHECK(n && wire_decode(buf, n, &back, err, sizeof err) == 0, "decode: %s", err);
    float f[64];
    wire_floats(back.data, 64, f);
    CHECK(!memcmp(f, fl, sizeof f), "floats changed");
    for (int i = 0; i < 12; i++) { // on the wire: the bits, little-endian
        const uint8_t *p = back.data + 4 * i;
        uint32_t u = p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        CHECK(u == special_f[i], "float %d: %08x on the wire, want %08x", i, u, special_f[i]);
        float g = wire_float(back.data, (size_t)i);
        memcpy(&u, &g, 4);
        CHECK(u == special_f[i], "wire_float %d: %08x, want %08x", i, u, special_f[i]);
    }
    for (int i = 0; i < 6; i++) {
        double d = wire_double(back.losses, (size_t)i);
        uint64_t u;
        memcpy(&u, &d, 8);
        CHECK(u == special_d[i], "double %d: %016llx", i, (unsigned long long)u);
    }
    CHECK(signbit(wire_float(back.data, 4)) && wire_float(back.data, 4) == 0, "-0.0f");
    CHECK(signbit(wire_double(back.losses, 3)) && wire_double(back.losses, 3) == 0, "-0.0");
}

// ---------------------------------------------------------------- an independent writer

typedef struct {
    uint8_t b[4096];
    size_t n;
} Bytes;
static void le(Bytes *b, uint64_t v, int k) {
    for (int i = 0; i < k; i++)
        b->b[b->n++] = (uint8_t)(v >> (8 * i));
}
static void str(Bytes *b, const char *s, int lenbytes) {
    size_t k = strlen(s);
    le(b, k, lenbytes);
    memcpy(b->b + b->n, s, k);
    b->n += k;
}
static void header(Bytes *b, int type, int64_t round, const char *from) {
    b->n = 0;
    memcpy(b->b, "LMSW", 4), b->n = 4;
    le(b, WIRE_VERSION, 2), le(b, (uint64_t)type, 2), le(b, (uint64_t)round, 8);
    str(b, from, 1);
}
static void record(Bytes *b, const char *id, const char *addr, int64_t first) {
    str(b, id, 1), str(b, addr, 2);
    le(b, 9, 8), le(b, (uint64_t)first, 8), le(b, 12, 8), le(b, WIRE_PEER_DONE, 4);
}

static int accepts(const Bytes *b) {
    err[0] = 0;
    return wire_decode(b->b, b->n, &back, err, sizeof err) == 0;
}
#define REJECT(b, want)                                                                            \
    CHECK(!accepts(b) && strstr(err, want), "want \"%s\", got \"%s\"", want,                       \
          err[0] ? err : "(accepted)")

TEST(layout_pinned) {
    Bytes b;
    header(&b, WIRE_BYE, 258, "ab");
    const uint8_t bye[] = {'L', 'M', 'S', 'W', 3, 0, 10, 0, 2, 1, 0, 0, 0, 0, 0, 0, 2, 'a', 'b'};
    CHECK(b.n == sizeof bye && !memcmp(b.b, bye, sizeof bye), "test writer");
    base(&msg, WIRE_BYE);
    msg.round = 258, strcpy(msg.from, "ab");
    CHECK(wire_encode(&msg, buf, sizeof buf) == sizeof bye && !memcmp(buf, bye, sizeof bye),
          "BYE bytes");

    header(&b, WIRE_GOSSIP, 5, "me");
    le(&b, 2, 2);
    record(&b, "x", "h:1", 0);
    record(&b, "y-2", "[::1]:5555", 4);
    CHECK(accepts(&b), "GOSSIP: %s", err);
    CHECK(back.nrec == 2 && !strcmp(back.rec[1].id, "y-2") &&
              !strcmp(back.rec[1].addr, "[::1]:5555") && back.rec[1].revision == 9 &&
              back.rec[1].first_round == 4 && back.rec[1].cur_round == 12 &&
              back.rec[1].flags == WIRE_PEER_DONE,
          "GOSSIP fields");
    CHECK(wire_encode(&back, buf, sizeof buf) == b.n && !memcmp(buf, b.b, b.n), "GOSSIP bytes");

    header(&b, WIRE_DATA, 3, "me");
    le(&b, WIRE_ARR_ANCHOR, 4), le(&b, 2, 8), le(&b, 4, 8), le(&b, 2, 4), le(&b, 77, 8);
    le(&b, 0x3f800000, 4), le(&b, 0xc0000000, 4);
    CHECK(accepts(&b) && back.what == WIRE_ARR_ANCHOR && back.offset == 2 && back.total == 4 &&
              back.n == 2 && back.hash == 77 && wire_float(back.data, 0) == 1.0f &&
              wire_float(back.data, 1) == -2.0f,
          "DATA: %s", err);

    header(&b, WIRE_COMMIT, 3, "me");
    le(&b, 6, 4), le(&b, 99, 8), le(&b, 2, 2), str(&b, "a", 1), str(&b, "b", 1), le(&b, 0, 2);
    CHECK(accepts(&b) && back.attempt == 6 && back.hash == 99 && back.nids == 2 &&
              !strcmp(back.ids[1], "b") && back.ncut == 0,
          "COMMIT: %s", err);
    header(&b, WIRE_COMMIT, 3, "me");
    le(&b, 6, 4), le(&b, 99, 8), le(&b, 2, 2), str(&b, "a", 1), str(&b, "b", 1);
    le(&b, 1, 2), le(&b, 1234, 4);
    CHECK(accepts(&b) && back.ncut == 1 && back.cut[0] == 1234, "COMMIT with a cut: %s", err);

    header(&b, WIRE_HELLO, 0, "me");
    le(&b, 1, 2), record(&b, "me", "127.0.0.1:9", 0), str(&b, "run", 4);
    CHECK(accepts(&b) && back.nrec == 1 && back.text_len == 3 && !strcmp(back.text, "run"),
          "HELLO: %s", err);
}

TEST(malformed_rejected) {
    Bytes b;
    header(&b, WIRE_BYE, 1, "me");
    CHECK(accepts(&b), "BYE: %s", err);
    b.b[0] = 'X';
    REJECT(&b, "bad magic");
    header(&b, WIRE_BYE, 1, "me");
    b.b[4] = 1;
    REJECT(&b, "version 1, this loom speaks 3");
    b.b[4] = 0, b.b[5] = 1;
    REJECT(&b, "version 256, this loom speaks 3");
    header(&b, 0, 1, "me");
    REJECT(&b, "unknown type 0");
    header(&b, WIRE_NTYPES, 1, "me");
    REJECT(&b, "unknown type 18"); // (WIRE_NTYPES)
    header(&b, 0xffff, 1, "me");
    REJECT(&b, "unknown type 65535");
    header(&b, WIRE_BYE, -1, "me");
    REJECT(&b, "BYE: round -1 < 0");
    header(&b, WIRE_BYE, 1, "");
    REJECT(&b, "empty sender id");
    header(&b, WIRE_BYE, 1, "a/b");
    REJECT(&b, "bad sender id");
    header(&b, WIRE_BYE, 1, "me");
    b.b[16] = WIRE_ID_MAX + 1;
    REJECT(&b, "truncated BYE");
    char longid[WIRE_ID_MAX + 2] = {0};
    memset(longid, 'a', WIRE_ID_MAX + 1);
    header(&b, WIRE_BYE, 1, longid);
    REJECT(&b, "BYE: bad sender id");
    CHECK(wire_decode(buf, WIRE_MSG_MAX + 1, &back, err, sizeof err) && strstr(err, "oversized"),
          "oversized: %s", err);
    CHECK(wire_decode(NULL, 0, &back, err, sizeof err) && strstr(err, "truncated header"), "NULL");

    header(&b, WIRE_GOSSIP, 1, "me"), le(&b, 1, 2), record(&b, "x y", "h:1", 0);
    REJECT(&b, "GOSSIP: record 0: bad id");
    header(&b, WIRE_GOSSIP, 1, "me"), le(&b, 1, 2), record(&b, "x", "h :1", 0);
    REJECT(&b, "GOSSIP: record 0: bad address");
    header(&b, WIRE_GOSSIP, 1, "me"), le(&b, 1, 2), record(&b, "x", "", 0);
    REJECT(&b, "GOSSIP: record 0: bad address");
    header(&b, WIRE_WELCOME, 1, "me"), le(&b, 2, 2), record(&b, "x", "h:1", 0);
    record(&b, "y", "h:2", -5);
    REJECT(&b, "WELCOME: record 1: negative round");
    header(&b, WIRE_GOSSIP, 1, "me"), le(&b, WIRE_MAX_PEERS + 1, 2);
    REJECT(&b, "GOSSIP: 257 records > 256");
    header(&b, WIRE_HELLO, 1, "me"), le(&b, 2, 2), record(&b, "x", "h:1", 0);
    record(&b, "y", "h:2", 0), le(&b, 0, 4);
    REJECT(&b, "HELLO: 2 records, not 1");
    header(&b, WIRE_HELLO, 1, "me"), le(&b, 0, 2), le(&b, 0, 4);
    REJECT(&b, "HELLO: 0 records, not 1");
    header(&b, WIRE_REFUSE, 1, "me"), str(&b, "a\001b", 4);
    CHECK(accepts(&b), "REFUSE with a control byte: %s", err);
    b.b[b.n - 2] = 0;
    REJECT(&b, "REFUSE: NUL in text");
    header(&b, WIRE_REFUSE, 1, "me"), le(&b, WIRE_TEXT_MAX + 1, 4);
    REJECT(&b, "REFUSE: text 16385 > 16384 bytes");

    header(&b, WIRE_DELTA, 1, "me"), le(&b, 0, 8), le(&b, 1ull << 20, 8);
    le(&b, WIRE_MAX_FLOATS + 1, 4), le(&b, 0, 4);
    REJECT(&b, "DELTA: n 262145 > 262144");
    header(&b, WIRE_DELTA, 1, "me"), le(&b, 0, 8), le(&b, 1, 8), le(&b, 1, 4);
    le(&b, WIRE_MAX_LOSSES + 1, 4);
    REJECT(&b, "DELTA: nloss 4097 > 4096");
    header(&b, WIRE_DELTA, 1, "me"), le(&b, 0, 8), le(&b, 8, 8), le(&b, 0, 4), le(&b, 0, 4);
    REJECT(&b, "DELTA: n 0");
    header(&b, WIRE_DELTA, 1, "me"), le(&b, 0, 8), le(&b, 0, 8), le(&b, 0, 4), le(&b, 0, 4);
    REJECT(&b, "DELTA: n 0");
    header(&b, WIRE_DELTA, 1, "me"), le(&b, 7, 8), le(&b, 8, 8), le(&b, 2, 4), le(&b, 0, 4);
    le(&b, 0, 8);
    REJECT(&b, "DELTA: offset 7 + n 2 > total 8");
    header(&b, WIRE_DELTA, 1, "me"), le(&b, UINT64_MAX, 8), le(&b, UINT64_MAX, 8);
    le(&b, 2, 4), le(&b, 0, 4), le(&b, 0, 8);
    REJECT(&b, "> total"); // offset + n wraps around
    header(&b, WIRE_DATA, 1, "me"), le(&b, 1, 4), le(&b, 0, 8), le(&b, 0, 8), le(&b, 0, 4);
    le(&b, 0, 8);
    CHECK(accepts(&b) && back.n == 0 && back.total == 0, "DATA gone: %s", err);
    header(&b, WIRE_DATA, 1, "me"), le(&b, 1, 4), le(&b, 0, 8), le(&b, 5, 8), le(&b, 0, 4);
    le(&b, 0, 8);
    REJECT(&b, "DATA: n 0");
    header(&b, WIRE_DATA, 1, "me"), le(&b, 2, 4), le(&b, 5, 8), le(&b, 5, 8), le(&b, 0, 4);
    le(&b, 0, 8);
    REJECT(&b, "DATA: n 0");
    header(&b, WIRE_FETCH, 1, "me"), le(&b, 0, 4), le(&b, 0, 8), le(&b, 8, 8), le(&b, 8, 4);
    REJECT(&b, "FETCH: unknown array 0");
    header(&b, WIRE_FETCH, 1, "me"), le(&b, WIRE_ARR_MAX, 4), le(&b, 0, 8), le(&b, 8, 8);
    le(&b, 8, 4);
    REJECT(&b, "FETCH: unknown array 6");
    header(&b, WIRE_FETCH, 1, "me"), le(&b, 1, 4), le(&b, 0, 8), le(&b, 8, 8), le(&b, 0, 4);
    REJECT(&b, "FETCH: n 0");
    header(&b, WIRE_FETCH, 1, "me"), le(&b, 1, 4), le(&b, 0, 8), le(&b, 8, 8), le(&b, 9, 4);
    REJECT(&b, "FETCH: offset 0 + n 9 > total 8");

    header(&b, WIRE_HAVE, 1, "me"), le(&b, 0, 8), le(&b, 3, 2);
    str(&b, "a", 1), str(&b, "b", 1), str(&b, "a", 1);
    REJECT(&b, "HAVE: duplicate id a");
    header(&b, WIRE_COMMIT, 1, "me"), le(&b, 1, 4), le(&b, 0, 8), le(&b, 2, 2);
    str(&b, "peer", 1), str(&b, "peer", 1), le(&b, 0, 2);
    REJECT(&b, "COMMIT: duplicate id peer");
    header(&b, WIRE_COMMIT, 1, "me"), le(&b, 1, 4), le(&b, 0, 8), le(&b, 1, 2), str(&b, "", 1);
    le(&b, 0, 2);
    REJECT(&b, "COMMIT: id 0: bad id");
    header(&b, WIRE_COMMIT, 1, "me"), le(&b, 1, 4), le(&b, 0, 8), le(&b, 2, 2);
    str(&b, "a", 1), str(&b, "b", 1), le(&b, 2, 2), le(&b, 1, 4), le(&b, 2, 4);
    REJECT(&b, "COMMIT: 2 cuts for 2 ids");
    header(&b, WIRE_COMMIT, 1, "me"), le(&b, 1, 4), le(&b, 0, 8), le(&b, 3, 2);
    str(&b, "a", 1), str(&b, "b", 1), str(&b, "c", 1), le(&b, 2, 2), le(&b, 9, 4), le(&b, 8, 4);
    REJECT(&b, "COMMIT: cut 1 decreases");
    header(&b, WIRE_COMMIT, 1, "me"), le(&b, 1, 4), le(&b, 0, 8), le(&b, 2, 2);
    str(&b, "a", 1), str(&b, "b", 1);
    REJECT(&b, "truncated COMMIT");
    header(&b, WIRE_HAVE, 1, "me"), le(&b, 0, 8), le(&b, WIRE_MAX_PEERS + 1, 2);
    REJECT(&b, "HAVE: 257 ids > 256");
}

// Valid small messages of every type, encoded into out[i] (lengths in len[i]); returns count.
static int small_messages(uint8_t out[][1024], size_t *len) {
    int k = 0;
    fill_values(8, 3);
    for (int t = WIRE_HELLO; t < WIRE_NTYPES; t++) {
        base(&msg, t);
        msg.nrec = t == WIRE_HELLO ? 1 : 3;
        for (int i = 0; i < msg.nrec; i++)
            set_rec(&msg.rec[i], i, 0);
        strcpy(msg.text, "run: seq 64");
        msg.text_len = 11;
        msg.data = (const uint8_t *)fl, msg.losses = (const uint8_t *)dl;
        msg.q8 = (const uint8_t *)dl;              // (DELTA8's codes)
        static const uint8_t gaps3[3] = {0, 2, 3}; // (indices 0, 3, 7)
        msg.nnz = t == WIRE_DELTAS || t == WIRE_SUMS || t == WIRE_DELTAS2 ? 3
                  : wire_is_q8(t)                                         ? 8
                                                                          : 0;
        if (t == WIRE_DELTAS2) msg.q8 = (const uint8_t *)"\x39"; // (codes 1, 2, 3)
        msg.idx = gaps3, msg.idx_len = 3;
        msg.n = 8, msg.nloss = 3, msg.offset = 8, msg.total = 24, msg.what = WIRE_ARR_AVERAGE;
        msg.nids = 3;
        strcpy(msg.ids[0], "a"), strcpy(msg.ids[1], "bb"), strcpy(msg.ids[2], "c");
        msg.ncut = t == WIRE_COMMIT ? 2 : 0, msg.cut[0] = 3, msg.cut[1] = 300;
        len[k] = wire_encode(&msg, out[k], 1024);
        CHECK(len[k] > 0, "%s does not encode", wire_type_name(t));
        k++;
    }
    return k;
}

// Count fields changed by any xor of one byte: rejected. Any byte anywhere changed to any
// value: rejected, or accepted and canonical (re-encodes to exactly the changed bytes).
TEST(mutations) {
    static uint8_t m[WIRE_NTYPES][1024], x[1024];
    size_t len[WIRE_NTYPES];
    int nm = small_messages(m, len), noncanonical = 0, accepted = 0;
    const size_t hdr = 17 + strlen("peer-A.1_x");
    // where each type's counts are: {offset after the header, bytes}
    const struct {
        int type;
        size_t at, k;
    } counts[] = {
        {WIRE_HELLO, 0, 2},   {WIRE_WELCOME, 0, 2}, {WIRE_GOSSIP, 0, 2},  {WIRE_REFUSE, 0, 4},
        {WIRE_DELTA, 16, 4},  {WIRE_DELTA, 20, 4},  {WIRE_HAVE, 8, 2},    {WIRE_COMMIT, 12, 2},
        {WIRE_COMMIT, 21, 2}, {WIRE_DATA, 20, 4},   {WIRE_DELTA8, 16, 4}, {WIRE_DELTA8, 20, 4},
        {WIRE_DELTAS, 20, 4}, {WIRE_DELTAS, 24, 4}, {WIRE_SUM, 20, 4},    {WIRE_SUM, 24, 4},
        {WIRE_HOLD, 12, 2},   {WIRE_SUM8, 20, 4},   {WIRE_SUM8, 24, 4},   {WIRE_DELTAS, 28, 4},
        {WIRE_DELTA8, 28, 4}, {WIRE_SUM8, 32, 4},   {WIRE_SUMS, 32, 4},   {WIRE_DELTAS2, 32, 4},
        {WIRE_DELTAS2, 36, 4}};
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
        int i = counts[c].type - 1;
        for (size_t j = 0; j < counts[c].k; j++)
            for (int v = 1; v < 256; v++) {
                memcpy(x, m[i], len[i]);
                x[hdr + counts[c].at + j] ^= (uint8_t)v;
                CHECK(wire_decode(x, len[i], &back, err, sizeof err) != 0,
                      "%s: count byte %zu ^ %d accepted", wire_type_name(i + 1), j, v);
            }
    }
    for (int i = 0; i < nm; i++)
        for (size_t at = 0; at < len[i]; at++)
            for (int v = 1; v < 256; v++) {
                memcpy(x, m[i], len[i]);
                x[at] ^= (uint8_t)v;
                if (wire_decode(x, len[i], &back, err, sizeof err)) continue;
                accepted++;
                size_t n = wire_encode(&back, buf, sizeof buf);
                if (n != len[i] || memcmp(buf, x, n)) noncanonical++;
            }
    CHECK(noncanonical == 0, "%d of %d accepted changes re-encode differently", noncanonical,
          accepted);
}

TEST(encoder_refuses) {
    base(&msg, WIRE_GOSSIP);
    msg.nrec = 1;
    set_rec(&msg.rec[0], 1, 0);
    CHECK(wire_size(&msg) > 0, "valid GOSSIP");
#define REFUSES(change, undo)                                                                      \
    do {                                                                                           \
        change;                                                                                    \
        CHECK(wire_size(&msg) == 0 && wire_encode(&msg, buf, sizeof buf) == 0, "%s", #change);     \
        undo;                                                                                      \
        CHECK(wire_size(&msg) > 0, "after %s", #undo);                                             \
    } while (0)
    REFUSES(msg.nrec = WIRE_MAX_PEERS + 1, msg.nrec = 1);
    REFUSES(msg.nrec = -1, msg.nrec = 1);
    REFUSES(msg.type = 0, msg.type = WIRE_GOSSIP);
    REFUSES(msg.type = WIRE_NTYPES, msg.type = WIRE_GOSSIP);
    REFUSES(msg.round = -1, msg.round = 0);
    REFUSES(msg.from[0] = 0, msg.from[0] = 'p');
    REFUSES(msg.from[1] = '*', msg.from[1] = 'e');
    REFUSES(memset(msg.from, 'a', sizeof msg.from), strcpy(msg.from, "p"));
    REFUSES(msg.rec[0].addr[2] = ' ', msg.rec[0].addr[2] = '.');
    REFUSES(msg.rec[0].addr[0] = 0, msg.rec[0].addr[0] = '1');
    REFUSES(memset(msg.rec[0].addr, 'a', sizeof msg.rec[0].addr), strcpy(msg.rec[0].addr, "h:1"));
    REFUSES(msg.rec[0].id[0] = '\n', msg.rec[0].id[0] = 'n');
    REFUSES(msg.rec[0].cur_round = -2, msg.rec[0].cur_round = 2);
    set_rec(&msg.rec[1], 2, 0);
    msg.nrec = 2;
    REFUSES(msg.type = WIRE_HELLO, msg.type = WIRE_GOSSIP);
    REFUSES(msg.nrec = 0; msg.type = WIRE_HELLO, msg.type = WIRE_GOSSIP);

    base(&msg, WIRE_REFUSE);
    REFUSES(msg.text_len = WIRE_TEXT_MAX + 1, msg.text_len = 0);
    REFUSES(msg.text_len = 3, msg.text_len = 0); // NULs in text
    fill_values(16, 2);
    base(&msg, WIRE_DELTA);
    msg.data = (const uint8_t *)fl, msg.losses = (const uint8_t *)dl;
    msg.n = 16, msg.total = 16, msg.nloss = 2;
    CHECK(wire_size(&msg) > 0, "valid DELTA");
    REFUSES(msg.n = 0, msg.n = 16);
    REFUSES(msg.n = WIRE_MAX_FLOATS + 1, msg.n = 16);
    REFUSES(msg.nloss = WIRE_MAX_LOSSES + 1, msg.nloss = 2);
    REFUSES(msg.offset = 1, msg.offset = 0);
    REFUSES(msg.offset = UINT64_MAX, msg.offset = 0);
    REFUSES(msg.data = NULL, msg.data = (const uint8_t *)fl);
    REFUSES(msg.losses = NULL, msg.losses = (const uint8_t *)dl);
    base(&msg, WIRE_FETCH);
    msg.what = WIRE_ARR_META, msg.n = 4, msg.total = 4;
    CHECK(wire_size(&msg) > 0, "valid FETCH");
    REFUSES(msg.what = 0, msg.what = WIRE_ARR_META);
    REFUSES(msg.what = WIRE_ARR_MAX, msg.what = WIRE_ARR_META);
    REFUSES(msg.total = 3, msg.total = 4);
    base(&msg, WIRE_HAVE);
    msg.nids = 2, strcpy(msg.ids[0], "a"), strcpy(msg.ids[1], "b");
    CHECK(wire_size(&msg) > 0, "valid HAVE");
    REFUSES(strcpy(msg.ids[1], "a"), strcpy(msg.ids[1], "b"));
    REFUSES(msg.ids[1][0] = 0, msg.ids[1][0] = 'b');
    REFUSES(msg.nids = WIRE_MAX_PEERS + 1, msg.nids = 2);
    CHECK(wire_encode(NULL, buf, sizeof buf) == 0 && wire_size(NULL) == 0, "NULL message");
}

TEST(names_and_ids) {
    CHECK(!strcmp(wire_type_name(WIRE_DELTA), "DELTA") && !strcmp(wire_type_name(0), "?") &&
              !strcmp(wire_type_name(WIRE_NTYPES), "?") && !strcmp(wire_type_name(-1), "?"),
          "type names");
    char id[WIRE_ID_MAX + 2];
    memset(id, 'a', sizeof id - 1), id[sizeof id - 1] = 0;
    CHECK(!wire_id_ok(id), "65-byte id accepted");
    id[WIRE_ID_MAX] = 0;
    CHECK(wire_id_ok(id), "64-byte id refused");
    CHECK(wire_id_ok("A-z.0_9") && !wire_id_ok("") && !wire_id_ok(NULL) && !wire_id_ok("a:b") &&
              !wire_id_ok("\xc3\xa9"),
          "ids");
    CHECK(wire_addr_ok("tcp://10.0.0.1:5555") && wire_addr_ok("[::1]:1") && !wire_addr_ok("") &&
              !wire_addr_ok("a b") && !wire_addr_ok("a\x7f") && !wire_addr_ok("\xc3\xa9"),
          "addresses");
}

TEST(fuzz_seeds_valid) {
    const char *dir = "fuzz/corpus/wire";
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s (run from the repository root)", dir);
    if (!d) return;
    int seen = 0, types = 0, sparse8 = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t n = 0;
        uint8_t *p = (uint8_t *)read_file(path, &n);
        CHECK(p != NULL, "%s: %s", path, loom_errmsg());
        if (!p) continue;
        int rc = wire_decode(p, n, &back, err, sizeof err);
        CHECK(rc == 0, "%s: %s", path, err);
        if (!rc) {
            types |= 1 << back.type, sparse8 += wire_q8_sparse(&back);
            CHECK(wire_encode(&back, buf, sizeof buf) == n && !memcmp(buf, p, n), "%s: re-encoding",
                  path);
        }
        free(p);
        seen++;
    }
    closedir(d);
    CHECK(types == ((1 << WIRE_NTYPES) - 2), "%d files, not every type (mask %x)", seen, types);
    CHECK(sparse8 == 2, "%d seeds with sparse codes, want 2", sparse8);
}

int main(void) {
    RUN(roundtrip_every_type);
    RUN(roundtrip_arrays);
    RUN(roundtrip_ids);
    RUN(float_bits_exact);
    RUN(layout_pinned);
    RUN(malformed_rejected);
    RUN(mutations);
    RUN(encoder_refuses);
    RUN(names_and_ids);
    RUN(fuzz_seeds_valid);
    return test_summary();
}
