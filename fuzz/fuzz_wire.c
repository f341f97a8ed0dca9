// fuzz_wire.c — the swarm's messages (src/swarm/wire_decode.c): wire_decode on the input as one
// message. A rejection must come with a reason. An accepted message has every float and double
// it carries read and every sparse index walked and used (ASan sees any pointer or index
// outside), and wire_encode of it must give back exactly the input (the encoding is canonical),
// with wire_size its length; else abort.
#include "../src/swarm/wire.h"
#include "fuzz_util.h"

static WireMsg msg; // ~120 KiB: kept off the stack
static uint8_t out[WIRE_MSG_MAX];
static float floats[WIRE_MAX_FLOATS];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[160] = "";
    if (wire_decode(data, size, &msg, err, sizeof err)) {
        if (!err[0]) abort();
        return 0;
    }
    WireGaps g;
    wire_gaps_begin(&msg, &g);
    if (wire_is_q8(msg.type)) { // the scales, every code, every index
        wire_floats(msg.data, wire_q8_scales(msg.n), floats);
        for (uint32_t j = 0; j < msg.nnz; j++)
            floats[wire_q8_sparse(&msg) ? wire_gaps_next(&g) : j] = (float)(int8_t)msg.q8[j];
    } else if (msg.type == WIRE_DELTAS2) { // the levels, every index and code
        wire_floats(msg.data, 2 * wire_q8_scales(msg.n), floats);
        for (uint32_t j = 0; j < msg.nnz; j++)
            floats[wire_gaps_next(&g)] += (float)wire_code2(&msg, j);
    } else if (msg.type == WIRE_DELTAS || msg.type == WIRE_SUMS) { // the values, every index
        wire_floats(msg.data, msg.nnz, floats);
        for (uint32_t j = 0; j < msg.nnz; j++)
            floats[wire_gaps_next(&g)] += 1.0f;
    } else if (msg.n && msg.type != WIRE_FETCH) {
        wire_floats(msg.data, msg.n, floats);
    }
    volatile double last = 0;
    for (uint32_t i = 0; i < msg.nloss; i++)
        last = wire_double(msg.losses, i);
    (void)last;
    size_t n = wire_encode(&msg, out, sizeof out);
    if (n != size || wire_size(&msg) != size || memcmp(out, data, size)) abort();
    return 0;
}
