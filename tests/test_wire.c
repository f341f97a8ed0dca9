// test_wire.c — the swarm's message codec (src/swarm/wire.c) on valid messages:
//   * every type round-trips (encode, decode, compare, re-encode to the same bytes), with
//     representative content and the maximum counts (256 records of the longest ids and
//     addresses, 256 ids, 2^18 floats with 4096 losses, 16384 bytes of text), and each round
//     trip also rejects every prefix as truncated and one trailing byte, and the encoder refuses
//     a buffer one byte short;
//   * the sparse types' gap coding (LEB128 gaps of 1..3 bytes, the gap walk) and the fields a
//     sparse or 2-bit message must not carry (a code 0, an index >= n, a gap byte short or
//     spare, an overlong gap, too many kept values, unused code bits), like a COMMIT whose cuts
//     do not fit its ids, are refused by the encoder;
//   * floats and doubles keep their exact bits: NaN payloads, signalling NaNs, -0.0,
//     infinities, subnormals.
// The layout pinned by an independent writer and the table of malformed messages are in
// test_wire_layout.c; mutated bytes, the encoder's other refusals and the id and address checks
// in test_wire_invalid.c; what the three share in wire_test.h.
#include "wire_test.h"

static WireMsg back2;
static uint8_t buf2[WIRE_MSG_MAX + 1];
static float fl_back[WIRE_MAX_FLOATS];

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

int main(void) {
    RUN(roundtrip_every_type);
    RUN(roundtrip_arrays);
    RUN(roundtrip_ids);
    RUN(float_bits_exact);
    return test_summary();
}
