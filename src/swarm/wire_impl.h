// wire_impl.h — what the swarm codec's encoder (wire.c) and decoder (wire_decode.c) share: the
// character classes of ids and addresses, little-endian reads, and the checks both ends apply.
// Internal to src/swarm/wire*.c.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

int wire_id_char(unsigned char c);   // [A-Za-z0-9._-]
int wire_addr_char(unsigned char c); // printable non-space ASCII
// Writes the reason into why (when given) and returns -1.
__attribute__((format(printf, 3, 4))) int wire_say(char *why, size_t whyn, const char *fmt, ...);
uint64_t wire_get_le(const uint8_t *p, int k); // k little-endian bytes
int64_t wire_to_i64(uint64_t u);               // two's complement
// The checks of a whole message (the encoder refuses, the decoder rejects): 0, or -1 with why.
int wire_check(const WireMsg *m, char *why, size_t whyn);
