// test_wire_layout.c — the swarm codec's byte layout (src/swarm/wire.c), checked against
// writers other than wire_encode: messages built byte by byte here (an independent writer)
// decode to the expected fields and equal the encoder's output; a wrong magic, version or type,
// a bad sender, an oversized input and a table of malformed messages built by the same writer
// (bad ids and addresses, too many records, ids or floats, bad offsets and totals, duplicate ids,
// bad cuts) are rejected with the expected reason; and the fuzz seeds in fuzz/corpus/wire/
// (written by fuzz/make_corpus.sh's Python, a third writer of the layout) are all valid and
// canonical (run from the repository root). Round trips are in test_wire.c, mutations in
// test_wire_invalid.c.
#include <dirent.h>

#include "wire_test.h"

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
    (void)set_rec, (void)fill_values; // wire_test.h's helpers this test does not need
    RUN(layout_pinned);
    RUN(malformed_rejected);
    RUN(fuzz_seeds_valid);
    return test_summary();
}
