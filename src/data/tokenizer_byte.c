// tokenizer_byte.c — the byte tokenizer: vocab 256, token id = byte value, no end-of-text
// token. Saved as just the `kind` file.
#include <stdlib.h>

#include "../common.h"
#include "tokenizer.h"

// byte_values[i] == i: the bytes of token i
#define R4(i) i, i + 1, i + 2, i + 3
#define R16(i) R4(i), R4(i + 4), R4(i + 8), R4(i + 12)
#define R64(i) R16(i), R16(i + 16), R16(i + 32), R16(i + 48)
static const uint8_t byte_values[256] = {R64(0), R64(64), R64(128), R64(192)};

static void byte_encode(Tokenizer *t, const uint8_t *text, size_t len, TokenList *out) {
    (void)t;
    for (size_t i = 0; i < len; i++)
        token_list_push(out, text[i]);
}

static const uint8_t *byte_token_bytes(const Tokenizer *t, int id, size_t *len) {
    (void)t;
    *len = 1;
    return &byte_values[id];
}

static int byte_save(const Tokenizer *t, const char *dir) {
    (void)t;
    (void)dir;
    return 0;
}

static void byte_free(void *impl) { (void)impl; }

static const TokenizerOps byte_ops = {"byte", byte_encode, byte_token_bytes, byte_save, byte_free};

Tokenizer *tokenizer_open_byte(void) {
    Tokenizer *t = xcalloc(1, sizeof *t);
    *t = (Tokenizer){.ops = &byte_ops, .vocab_size = 256, .eot = -1, .impl = NULL};
    return t;
}
