// bpe_impl.h — what the byte-level BPE tokenizer's files share (internal to src/data/):
// tokenizer_bpe.c (the merge loop, the word cache, the tokenizer table), tokenizer_bpe_load.c
// (reading encoder.json and vocab.bpe, and the vocabulary / merge builders), tokenizer_hf.c
// (reading Hugging Face's tokenizer.json into the same tables) and bpe_pretok.c (the
// pre-tokenizers' split patterns and Unicode classes).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "tokenizer.h"

static inline uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; // FNV-1a
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static inline size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

typedef struct {
    uint64_t key; // (left id << 32) | right id
    int32_t rank; // -1: empty slot
    int32_t merged;
} MergeSlot;

typedef struct { // a cached word: its bytes and its token ids, stored in the cache arenas
    uint64_t hash;
    uint32_t key_off, key_len; // key_len 0: empty slot
    uint32_t ids_off, ids_len;
} CacheSlot;

#define CACHE_MAX_WORD 256          // longer words are not cached
#define CACHE_MAX_WORDS (1u << 20)  // the cache is cleared when it holds this many words
#define CACHE_MAX_BYTES (64u << 20) // or when its arenas grow past this
#define BPE_MAX_WORD (1u << 20)     // longer words are merged in pieces (bounds memory)

// A queued merge of sym[left] and its right neighbour. Ranks identify pairs, so the entry is
// still current iff the pair there now has this rank.
typedef struct {
    int32_t rank, left;
} Cand;

typedef struct {
    int id, prev, next; // id -1: merged into its left neighbour
} Sym;

typedef struct { // bytes -> id of the model vocabulary (the tokens merges may name)
    int *slot;   // token id or -1
    size_t mask;
} VocabMap;

// The pre-tokenizer's split pattern (bpe_pretok.c).
enum {
    PRETOK_GPT2,   // GPT-2's, with JavaScript's \s (the reference encoder's)
    PRETOK_GPT2_U, // GPT-2's, with Unicode White_Space as \s (Hugging Face's Rust library)
    PRETOK_LLAMA3, // Llama-3's (tiktoken cl100k-style), Unicode White_Space as \s
};

typedef struct {
    int vocab;
    int pretok;        // PRETOK_*
    int ignore_merges; // a word that is itself a vocabulary token is that token (Llama-3)
    VocabMap map;      // kept for ignore_merges
    uint8_t *bytes;    // token i is bytes[off[i] .. off[i+1])
    uint32_t *off;
    int byte_tok[256]; // the single-byte tokens
    MergeSlot *merges;
    size_t merge_mask;
    CacheSlot *cache;
    size_t cache_mask, cache_used;
    uint8_t *ckeys; // cache arenas
    size_t ckeys_n, ckeys_cap;
    int *cids;
    size_t cids_n, cids_cap;
    Sym *sym; // scratch for the merge loop
    Cand *heap, *batch;
    size_t sym_cap, heap_cap;
    char *vocab_text, *merges_text; // the files as read, written back by save (hf-bpe:
    size_t vocab_len, merges_len;   // tokenizer.json in vocab_text, no merges_text)
} Bpe;

static inline uint64_t merge_key(int a, int b) {
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}
static inline size_t merge_index(uint64_t key, size_t mask) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

// The end of the pre-token (word) that starts at byte i of s[0, n) under pattern pretok
// (bpe_pretok.c).
size_t bpe_pretoken_end(int pretok, const uint8_t *s, size_t n, size_t i);
// The code point of the UTF-8 sequence at s, or INVALID_CP; returns its length in bytes.
#define INVALID_CP 0xFFFFFFFFu
size_t bpe_utf8_next(const uint8_t *s, size_t n, uint32_t *cp);
void bpe_free(void *impl);
extern const TokenizerOps bpe_ops, hf_bpe_ops;

// ---- building the tables (tokenizer_bpe_load.c) ----
// The id of bytes p[0, n) in m, or -1.
int bpe_vocab_find(const Bpe *b, const VocabMap *m, const uint8_t *p, size_t n);
// Converts a token written in GPT-2's byte alphabet (UTF-8, s[0, n)) to raw bytes in out (room
// for n bytes). Returns the raw length, or -1 with a message naming `where`.
long bpe_token_to_bytes(const char *where, const char *s, size_t n, uint8_t *out);
typedef struct { // a token outside the model vocabulary (an added token): raw bytes
    int id;
    const uint8_t *p;
    size_t n;
} BpeExtra;
// Reads the JSON object obj (token in the alphabet -> id) into b->bytes/off and map, plus the
// extra tokens (not in map: merges never name them). size: the vocabulary size (ids
// 0..size-1); with dense, obj must hold every id once (size is its length); otherwise ids in
// neither obj nor extra are empty tokens. An extra token may repeat a vocabulary token with
// the same id and bytes. Messages start with `where` (e.g. "tokenizer.json: model.vocab").
int bpe_load_vocab(Bpe *b, VocabMap *map, const cJSON *obj, const char *where, int size, int dense,
                   const BpeExtra *extra, int nextra);
// Allocates the merge table for up to n merges.
void bpe_merges_alloc(Bpe *b, size_t n);
// Adds the merge (a, c) with this rank (tokens in the alphabet); errors name `where`.
int bpe_add_merge(Bpe *b, const VocabMap *map, const char *where, const char *a, size_t na,
                  const char *c, size_t nc, int rank);
// Finishes a loaded Bpe (single-byte tokens, cache) into a Tokenizer; frees b (and map) on
// failure. eot: the end-of-text id or -1.
Tokenizer *bpe_finish(Bpe *b, VocabMap *map, const TokenizerOps *ops, int eot, const char *name);
