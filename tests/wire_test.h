// wire_test.h — what the swarm codec's tests share (test_wire.c, test_wire_layout.c,
// test_wire_invalid.c): the message, decode and byte buffers they reuse, a xorshift generator,
// a message header (base), peer records (set_rec, representative or the longest allowed), and
// the float and double arrays filled with bit patterns that must survive the wire (fill_values).
#pragma once
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/common.h"
#include "../src/swarm/wire.h"
#include "test.h"

static WireMsg msg, back;
static uint8_t buf[WIRE_MSG_MAX + 1];
static float fl[WIRE_MAX_FLOATS];
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
