// fuzz_tokjson.c — Hugging Face tokenizer.json (src/data/tokenizer_hf.c): the input is the
// file, loaded with tokenizer_open_hf_mem; a tokenizer that loads then encodes and decodes a
// fixed text and the input itself, which must round-trip, and every id's bytes are readable.
#include <string.h>

#include "../src/common.h"
#include "../src/data/tokenizer.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Tokenizer *t = tokenizer_open_hf_mem("tokenizer.json", data, size);
    if (!t) return 0;
    static const char text[] = "Hello world, IT'S 12345!\r\n\n  caf\xc3\xa9 \xff\xfe tabs\tand  "
                               "spaces \xc2\x85 \xef\xbb\xbf <|endoftext|>   ";
    const void *texts[2] = {text, data};
    size_t lens[2] = {sizeof text - 1, size < 4096 ? size : 4096};
    for (int k = 0; k < 2; k++) {
        TokenList ids = {0};
        tokenizer_encode(t, texts[k], lens[k], &ids);
        size_t n = 0;
        char *back = tokenizer_decode(t, ids.ids, ids.n, &n);
        if (!back || n != lens[k] || memcmp(back, texts[k], n)) {
            fprintf(stderr, "fuzz_tokjson: decode(encode(text)) != text\n");
            abort();
        }
        free(back);
        token_list_free(&ids);
    }
    size_t n;
    int eot = tokenizer_eot(t), v = tokenizer_vocab_size(t);
    if (eot >= v || !tokenizer_token(t, v - 1, &n) || tokenizer_token(t, v, &n)) abort();
    tokenizer_close(t);
    return 0;
}
