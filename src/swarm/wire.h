// wire.h — the swarm's messages (loom peer): one ZeroMQ message = one frame of bytes,
// little-endian, versioned, every length checked and bounded. wire.c encodes and decodes; it
// never trusts a length: a message that is short, long, of an unknown type or version, or holds
// out-of-range counts, ids or text is rejected with a reason (the caller counts it and goes on).
//
// Layout: a header — magic "LMSW", version u16, type u16, round i64, from (u8 length + the id's
// bytes) — followed by the type's fields (wire.c has the exact order). Floats travel as
// IEEE-754 binary32 and doubles as binary64, little-endian.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define WIRE_VERSION 3 // 2: COMMIT carries the slices' cut; 3: sparse indices as gaps, sparse codes
#define WIRE_ID_MAX 64 // peer id: 1..64 bytes of [A-Za-z0-9._-]
#define WIRE_ADDR_MAX 255         // tcp address "HOST:PORT", printable ASCII, no spaces
#define WIRE_MAX_PEERS 256        // records / ids in one message
#define WIRE_MAX_FLOATS (1 << 18) // floats in one DELTA or DATA message (1 MiB)
#define WIRE_MAX_LOSSES 4096      // doubles in one DELTA's losses (τ ≤ 4096)
#define WIRE_TEXT_MAX 16384       // HELLO's run description, REFUSE's reason
#define WIRE_Q8_CHUNK 4096        // DELTA8: elements per scale (swarm/compress.h)
// No valid message is longer than this (the decoder rejects longer input as oversized).
#define WIRE_MSG_MAX ((size_t)WIRE_MAX_FLOATS * 4 + WIRE_MAX_LOSSES * 8 + 128 * 1024)

typedef enum {
    WIRE_HELLO = 1, // join request: rec[0] = the sender's record, text = its run description
    WIRE_WELCOME,   // join accepted: rec[] = the responder's view (itself included)
    WIRE_REFUSE,    // join refused: text = why (names the field that differs)
    WIRE_GOSSIP,    // rec[] = records (the sender's view)
    WIRE_DELTA,     // one piece of the sender's Δ of `round`: data = n floats at offset of total;
                    // losses = the round's local losses (nloss doubles; in every piece)
    WIRE_HAVE,      // the sender holds the whole Δ of `round` from ids[]; hash = its anchor's
    WIRE_COMMIT,    // the average of `round` is over ids[] (sorted); attempt; hash = anchor's;
                    // --peer-exchange sharded: cut = where slice i + 1 starts, in chunks
    WIRE_FETCH,     // request: array `what` of version `round`, [offset, offset + n) of total
    WIRE_DATA,      // reply to FETCH: data = n floats at offset of total; hash = whole array's;
                    // n = 0 with offset = total = 0: the responder no longer has that version
    WIRE_BYE,       // the sender leaves the swarm
    WIRE_DELTA8,    // DELTA quantized (--outer-compress int8): n elements at offset of total as
                    // ceil(n / WIRE_Q8_CHUNK) float scales (data) and nnz int8 codes (q8): all n
                    // (nnz = n), or (nnz <= n / 2) the codes not zero at the indices idx; losses
    WIRE_DELTAS,    // DELTA sparse (--outer-compress topk): of the n elements at offset, nnz
                    // (<= n / 2) are not zero: their indices (idx, increasing, < n) and values
                    // (data); losses
    WIRE_SUM,       // --peer-exchange sharded: the sum of one slice of the round's set's Δs
                    // (from its owner) as DELTA's fields after attempt (the commit it follows);
                    // losses: the set's mean losses (swarm_shard.c)
    WIRE_SUMS,      // SUM sparse (--outer-compress topk): attempt, then DELTAS' fields
    WIRE_HOLD,      // --peer-exchange sharded, as COMMIT: ids = the owners whose slice sums of
                    // commit `attempt` the sender holds (attempt 0: ids = itself, its Δ is ready)
    WIRE_SUM8,      // SUM quantized (--outer-compress int8 or topk): attempt, then DELTA8's
                    // fields; the owner applies the dequantized values too (swarm_shard.c)
    WIRE_DELTAS2,   // DELTAS with 2-bit values (--topk-values 2bit): n elements at offset, two
                    // levels per WIRE_Q8_CHUNK (data: lo, hi, ...), nnz (<= n / 2) not zero at
                    // idx, each ±lo or ±hi as 2 bits (q8: wire_code2); losses
    WIRE_NTYPES
} WireType;

// Arrays a FETCH / DATA names.
typedef enum {
    WIRE_ARR_ANCHOR = 1, // the anchor a(round) (a joiner's download)
    WIRE_ARR_MOMENTUM,   // the outer momentum m(round)
    WIRE_ARR_AVERAGE,    // the committed average Δ̄ of `round`
    WIRE_ARR_META,       // the snapshot's small numbers as floats-in-bytes (see swarm_join.c)
    WIRE_ARR_DELTA,      // pieces of the responder's own Δ of `round` (answered with DELTA)
    WIRE_ARR_MAX
} WireArray;

#define WIRE_PEER_DONE 1u // flags: the peer finished its steps (it lingers to serve)
#define WIRE_PEER_LEFT 2u // the peer said BYE

typedef struct {
    char id[WIRE_ID_MAX + 1];
    char addr[WIRE_ADDR_MAX + 1];
    uint64_t revision;   // its owner bumps it on every change; gossip keeps the highest
    int64_t first_round; // first round it contributes a Δ to (0: not yet joined)
    int64_t cur_round;   // the round it computes now
    uint32_t flags;      // WIRE_PEER_*
} PeerRecord;

typedef struct {
    uint16_t type; // WireType
    int64_t round;
    char from[WIRE_ID_MAX + 1];
    uint32_t what;          // FETCH, DATA: WireArray
    uint32_t attempt;       // COMMIT, SUM, HOLD
    uint64_t offset, total; // DELTA, FETCH, DATA: elements [offset, offset + n) of total
    uint32_t n;             // DELTA, FETCH, DATA: floats (DELTA, DATA: in data)
    const uint8_t *data;    // DELTA, DATA: n little-endian floats inside the decoded buffer
                            // (DELTA8: its wire_q8_scales(n) scales)
    const uint8_t *q8;      // DELTA8: n int8 codes inside the decoded buffer
    uint32_t nnz;           // DELTAS: elements not zero (data holds their nnz values); DELTA8:
                            // codes carried (n: all; fewer: those not zero, at idx)
    const uint8_t *idx;     // their indices (from offset) as gaps (below), idx_len bytes
    uint32_t idx_len;       // bytes of idx
    uint32_t nloss;         // DELTA
    const uint8_t *losses;  // DELTA: nloss little-endian doubles inside the decoded buffer
    uint64_t hash;          // HAVE, COMMIT, DATA
    int nids;               // HAVE, COMMIT
    char ids[WIRE_MAX_PEERS][WIRE_ID_MAX + 1];
    uint32_t ncut;                // COMMIT: 0 (slices of equal floats), or nids - 1 boundaries:
    uint32_t cut[WIRE_MAX_PEERS]; // slice i + 1 starts at chunk cut[i] (non-decreasing)
    int nrec;                     // HELLO (1), WELCOME, GOSSIP
    PeerRecord rec[WIRE_MAX_PEERS];
    uint32_t text_len;            // HELLO, REFUSE
    char text[WIRE_TEXT_MAX + 1]; // NUL-terminated copy
} WireMsg;                        // large (~122 KiB): keep one per thread, not on small stacks

// 1 if s is a valid peer id (1..WIRE_ID_MAX bytes of [A-Za-z0-9._-]).
int wire_id_ok(const char *s);
// 1 if s is a valid address (1..WIRE_ADDR_MAX printable non-space ASCII bytes).
int wire_addr_ok(const char *s);
// Bytes m encodes to (0 if a field is out of range: counts, ids, addresses, text).
size_t wire_size(const WireMsg *m);
// Encodes m into buf (cap bytes; data/losses are read from m->data / m->losses as host floats
// and doubles, written little-endian). Only the fields m's type carries are read. Returns the
// length, or 0 if it does not fit or a field is out of range. A decoded message re-encodes to
// exactly the bytes it came from (on a little-endian host, where its data are host floats).
size_t wire_encode(const WireMsg *m, uint8_t *buf, size_t cap);
// Decodes buf[0, len) into m (m->data / m->losses point into buf; counts and numbers the type
// does not carry are 0). Returns 0, or -1 with a one-line reason in err (e.g. "bad magic",
// "DELTA: n 300000 > 262144", "truncated GOSSIP"), and then m's contents are unspecified.
int wire_decode(const uint8_t *buf, size_t len, WireMsg *m, char *err, size_t errn);
// Reads element i of a decoded float / double array (unaligned, little-endian).
float wire_float(const uint8_t *p, size_t i);
double wire_double(const uint8_t *p, size_t i);
// Copies n decoded floats into dst (host order).
void wire_floats(const uint8_t *p, size_t n, float *dst);
// DELTA8 / SUM8: the scales a message of n elements carries (one per WIRE_Q8_CHUNK, the last
// partial).
size_t wire_q8_scales(size_t n);
// Sparse indices travel as gaps: the first index is its gap, each next one is the previous + 1
// + its gap; a gap is LEB128 (7 bits a byte, the lowest first, the high bit set on every byte
// but the last; 1..3 bytes, no final 0 byte after the first). wire_gap_put writes one at p (3
// bytes of room) and returns its bytes; a walk reads a checked message's indices in order.
size_t wire_gap_put(uint8_t *p, uint32_t gap);
typedef struct {
    const uint8_t *p;
    size_t len;    // bytes of gaps
    size_t at;     // bytes read
    uint32_t next; // the lowest index the next gap can name
} WireGaps;
void wire_gaps_begin(const WireMsg *m, WireGaps *g);
uint32_t wire_gaps_next(WireGaps *g);
// DELTAS2: element j's code, 2 bits (bit 0: negative; bit 1: the chunk's hi level, else lo).
unsigned wire_code2(const WireMsg *m, size_t j);
// 1 if a DELTA8 / SUM8 carries only its codes that are not zero (nnz < n).
int wire_q8_sparse(const WireMsg *m);
// DELTA, DELTA8, DELTAS, SUM, SUMS or SUM8: a range of a Δ or of a slice sum, with losses.
int wire_is_delta(const WireMsg *m);
// DELTA8 or SUM8: int8 codes with a scale per WIRE_Q8_CHUNK.
int wire_is_q8(int type);
// Name of a type ("DELTA"; "?" if unknown), for messages and counters.
const char *wire_type_name(int type);
