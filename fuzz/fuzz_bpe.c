// fuzz_bpe.c — GPT-2 BPE files (src/data/tokenizer_bpe.c): the input is encoder.json, a NUL
// byte, then vocab.bpe (no NUL: the whole input is encoder.json and vocab.bpe is empty), loaded
// with tokenizer_open_gpt2_mem; a tokenizer that loads then encodes and decodes a fixed text
// and the input itself, which must round-trip.
#include <string.h>

#include "../src/common.h"
#include "../src/data/tokenizer.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t vlen = nul ? (size_t)(nul - data) : size;
    const uint8_t *merges = nul ? nul + 1 : data + size;
    size_t mlen = (size_t)(data + size - merges);
    Tokenizer *t = tokenizer_open_gpt2_mem("encoder.json", data, vlen, "vocab.bpe", merges, mlen);
    if (!t) return 0;
    static const char text[] =
        "Hello world, it's 2024!\n\n  caf\xc3\xa9 \xff\xfe tabs\tand  spaces";
    const void *texts[2] = {text, data};
    size_t lens[2] = {sizeof text - 1, size < 4096 ? size : 4096};
    for (int k = 0; k < 2; k++) {
        TokenList ids = {0};
        tokenizer_encode(t, texts[k], lens[k], &ids);
        size_t n = 0;
        char *back = tokenizer_decode(t, ids.ids, ids.n, &n);
        if (!back || n != lens[k] || memcmp(back, texts[k], n)) {
            fprintf(stderr, "fuzz_bpe: decode(encode(text)) != text\n");
            abort();
        }
        free(back);
        token_list_free(&ids);
    }
    tokenizer_close(t);
    return 0;
}
