// test_wire_invalid.c — the swarm codec (src/swarm/wire.c) against invalid input on both
// sides: in valid small messages of every type, any change of one count byte is rejected, and
// any single byte changed anywhere either is rejected or decodes to a message that re-encodes to
// exactly those bytes (the encoding is canonical); the encoder refuses out-of-range fields
// (wire_size and wire_encode return 0) and accepts them again once undone; and the type names and
// the id and address checks (wire_id_ok, wire_addr_ok) draw the lines they document. Round trips
// are in test_wire.c, the layout and the malformed-message table in test_wire_layout.c.
#include "wire_test.h"

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

int main(void) {
    RUN(mutations);
    RUN(encoder_refuses);
    RUN(names_and_ids);
    return test_summary();
}
