// tokenizer_bpe_load.c — opening GPT-2's BPE files (encoder.json + vocab.bpe, or Hugging Face's
// vocab.json + merges.txt) into the tokenizer of tokenizer_bpe.c: the byte-to-unicode alphabet,
// the vocabulary and the ranked merges, every field checked and named on error.
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "bpe_impl.h"

// ---------------------------------------------------------------------------------------------
// Loading.

// GPT-2's byte-to-unicode alphabet, inverted: code point -> byte, or -1.
static int alphabet_byte(uint32_t c) {
    if ((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))
        return (int)c;
    // the other bytes, 0..32, 127..160 and 173, are U+0100 + their index in that list
    if (c < 0x100 || c >= 0x100 + 68) return -1;
    int k = (int)(c - 0x100);
    return k < 33 ? k : k < 67 ? 127 + (k - 33) : 173;
}

// Converts a token written in the alphabet (UTF-8, s[0, n)) to raw bytes in out (room for n
// bytes; the raw form is never longer). Returns the raw length, or -1 with a message.
static long token_to_bytes(const char *path, const char *s, size_t n, uint8_t *out) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        size_t adv = bpe_utf8_next((const uint8_t *)s + i, n - i, &c);
        int byte = alphabet_byte(c);
        if (c == INVALID_CP)
            return loom_fail("%s: token \"%.*s\" is not valid UTF-8", path, (int)n, s);
        if (byte < 0)
            return loom_fail("%s: token \"%.*s\" contains U+%04X, which is not in GPT-2's "
                             "byte alphabet (not a byte-level BPE file?)",
                             path, (int)n, s, (unsigned)c);
        out[k++] = (uint8_t)byte;
        i += adv;
    }
    if (!k) return loom_fail("%s: empty token", path);
    return (long)k;
}

typedef struct { // bytes -> id, used while loading
    int *slot;   // token id or -1
    size_t mask;
} VocabMap;

static int vocab_find(const Bpe *b, const VocabMap *m, const uint8_t *p, size_t n) {
    for (size_t i = hash_bytes(p, n) & m->mask;; i = (i + 1) & m->mask) {
        int id = m->slot[i];
        if (id < 0) return -1;
        if (b->off[id + 1] - b->off[id] == n && !memcmp(b->bytes + b->off[id], p, n)) return id;
    }
}

// Parses the token -> id JSON object into b->bytes/off/vocab and the map.
static int load_vocab(Bpe *b, VocabMap *map, const char *path) {
    cJSON *root = cJSON_ParseWithLength(b->vocab_text, b->vocab_len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return loom_fail("%s: not a JSON object of token -> id (malformed encoder.json?)", path);
    }
    int n = cJSON_GetArraySize(root);
    if (n < 256 || n > (1 << 24)) {
        cJSON_Delete(root);
        return loom_fail("%s: %d tokens; a byte-level BPE vocabulary has 256 to 16777216", path, n);
    }
    // token bytes, first in file order, then copied into id order
    size_t cap = 0;
    for (cJSON *it = root->child; it; it = it->next)
        cap += strlen(it->string);
    uint8_t *tmp = xmalloc(cap + 1);
    uint32_t *tmp_off = xmalloc((size_t)n * sizeof(uint32_t)), *len = xcalloc(n, sizeof(uint32_t));
    int *order = xmalloc((size_t)n * sizeof(int)); // order[id] = position in the file
    for (int i = 0; i < n; i++)
        order[i] = -1;
    size_t used = 0;
    int k = 0, rc = 0;
    for (cJSON *it = root->child; it && !rc; it = it->next, k++) {
        double v = it->valuedouble;
        if (!cJSON_IsNumber(it) || !(v >= 0 && v < n) || v != (double)(int)v) {
            rc = loom_fail("%s: token \"%.60s\" has id %s; ids must be integers 0..%d", path,
                           it->string, cJSON_IsNumber(it) ? "out of range" : "not a number", n - 1);
            break;
        }
        int id = (int)v;
        if (order[id] >= 0) {
            rc = loom_fail("%s: id %d is used twice (\"%.60s\")", path, id, it->string);
            break;
        }
        long m = token_to_bytes(path, it->string, strlen(it->string), tmp + used);
        if (m < 0) {
            rc = -1;
            break;
        }
        order[id] = k;
        tmp_off[k] = (uint32_t)used;
        len[id] = (uint32_t)m;
        used += (size_t)m;
    }
    cJSON_Delete(root);
    if (!rc) { // n distinct ids in 0..n-1: every id is present
        b->vocab = n;
        b->bytes = xmalloc(used + 1);
        b->off = xmalloc(((size_t)n + 1) * sizeof(uint32_t));
        uint32_t at = 0;
        for (int id = 0; id < n; id++) {
            b->off[id] = at;
            memcpy(b->bytes + at, tmp + tmp_off[order[id]], len[id]);
            at += len[id];
        }
        b->off[n] = at;
        map->mask = pow2_at_least(2 * (size_t)n) - 1;
        map->slot = xmalloc((map->mask + 1) * sizeof(int));
        memset(map->slot, 0xff, (map->mask + 1) * sizeof(int));
        for (int id = 0; id < n && !rc; id++) {
            const uint8_t *p = b->bytes + b->off[id];
            size_t plen = b->off[id + 1] - b->off[id];
            if (vocab_find(b, map, p, plen) >= 0) {
                rc = loom_fail("%s: token \"%.*s\" appears twice", path, (int)plen, p);
                break;
            }
            size_t i = hash_bytes(p, plen) & map->mask;
            while (map->slot[i] >= 0)
                i = (i + 1) & map->mask;
            map->slot[i] = id;
        }
    }
    free(tmp);
    free(tmp_off);
    free(len);
    free(order);
    return rc;
}

// Parses the merges file into the merge table (needs the vocabulary).
static int load_merges(Bpe *b, const VocabMap *map, const char *path) {
    char *text = b->merges_text;
    size_t nlines = 1;
    for (size_t i = 0; i < b->merges_len; i++)
        nlines += text[i] == '\n';
    if (nlines > (1u << 30)) // ranks and line numbers are int
        return loom_fail("%s: %zu lines is too many merges", path, nlines);
    b->merge_mask = pow2_at_least(2 * nlines) - 1;
    b->merges = xmalloc((b->merge_mask + 1) * sizeof(MergeSlot));
    for (size_t i = 0; i <= b->merge_mask; i++)
        b->merges[i].rank = -1;
    uint8_t *buf = xmalloc(b->merges_len + 1);
    int rank = 0, lineno = 0, rc = 0;
    for (size_t pos = 0; pos < b->merges_len && !rc;) {
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', b->merges_len - pos);
        size_t n = nl ? (size_t)(nl - line) : b->merges_len - pos;
        pos += n + 1;
        lineno++;
        if (n && line[n - 1] == '\r') n--;
        if (!n || (lineno == 1 && n >= 8 && !memcmp(line, "#version", 8))) continue;
        const char *sp = memchr(line, ' ', n);
        if (!sp || sp == line || sp == line + n - 1 || memchr(sp + 1, ' ', n - (sp + 1 - line))) {
            rc = loom_fail("%s:%d: expected a merge \"a b\" (two tokens and one space), got "
                           "\"%.*s\"",
                           path, lineno, (int)(n < 60 ? n : 60), line);
            break;
        }
        size_t na = (size_t)(sp - line);
        char where[4200];
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        long la = token_to_bytes(where, line, na, buf);
        long lb = la < 0 ? -1 : token_to_bytes(where, sp + 1, n - na - 1, buf + la);
        if (la < 0 || lb < 0) {
            rc = -1;
            break;
        }
        int a = vocab_find(b, map, buf, (size_t)la);
        int c = vocab_find(b, map, buf + la, (size_t)lb);
        int m = vocab_find(b, map, buf, (size_t)(la + lb));
        if (a < 0 || c < 0 || m < 0) {
            rc = loom_fail("%s:%d: merge \"%.*s\" uses or makes a token that is not in the "
                           "vocabulary",
                           path, lineno, (int)(n < 60 ? n : 60), line);
            break;
        }
        // insert; a repeated pair takes the later rank, as GPT-2's dict(zip(...)) does
        uint64_t key = merge_key(a, c);
        size_t i = merge_index(key, b->merge_mask);
        while (b->merges[i].rank >= 0 && b->merges[i].key != key)
            i = (i + 1) & b->merge_mask;
        b->merges[i] = (MergeSlot){key, rank++, m};
    }
    free(buf);
    return rc;
}

// Builds the tokenizer from b->vocab_text and b->merges_text (owned by b); frees b on failure.
static Tokenizer *bpe_open(Bpe *b, const char *vocab_name, const char *merges_name) {
    VocabMap map = {0};
    int rc = 0;
    // token offsets are 32-bit: the raw bytes of all tokens (never more than the file) must fit
    if (b->vocab_len >= UINT32_MAX)
        rc =
            loom_fail("%s: %zu bytes is too large for a vocabulary file", vocab_name, b->vocab_len);
    if (!rc) rc = load_vocab(b, &map, vocab_name);
    for (int byte = 0; byte < 256 && !rc; byte++) {
        uint8_t c = (uint8_t)byte;
        b->byte_tok[byte] = vocab_find(b, &map, &c, 1);
        if (b->byte_tok[byte] < 0)
            rc = loom_fail("%s: no token for byte 0x%02x (not a byte-level BPE vocabulary)",
                           vocab_name, byte);
    }
    if (!rc) rc = load_merges(b, &map, merges_name);
    int eot = rc ? -1 : vocab_find(b, &map, (const uint8_t *)"<|endoftext|>", 13);
    free(map.slot);
    if (rc) {
        bpe_free(b);
        return NULL;
    }
    b->cache_mask = 4095;
    b->cache = xcalloc(b->cache_mask + 1, sizeof(CacheSlot));
    Tokenizer *t = xcalloc(1, sizeof *t);
    *t = (Tokenizer){.ops = &bpe_ops, .vocab_size = b->vocab, .eot = eot, .impl = b};
    return t;
}

Tokenizer *tokenizer_open_gpt2_files(const char *vocab_json, const char *merges) {
    Bpe *b = xcalloc(1, sizeof *b);
    b->vocab_text = read_file(vocab_json, &b->vocab_len);
    if (b->vocab_text) b->merges_text = read_file(merges, &b->merges_len);
    if (!b->merges_text) {
        bpe_free(b);
        return NULL;
    }
    return bpe_open(b, vocab_json, merges);
}

Tokenizer *tokenizer_open_gpt2_mem(const char *vocab_name, const void *vocab, size_t vocab_len,
                                   const char *merges_name, const void *merges, size_t merges_len) {
    Bpe *b = xcalloc(1, sizeof *b);
    b->vocab_text = xmalloc(vocab_len + 1);
    memcpy(b->vocab_text, vocab, vocab_len);
    b->vocab_text[vocab_len] = 0;
    b->vocab_len = vocab_len;
    b->merges_text = xmalloc(merges_len + 1);
    memcpy(b->merges_text, merges, merges_len);
    b->merges_text[merges_len] = 0;
    b->merges_len = merges_len;
    return bpe_open(b, vocab_name, merges_name);
}

Tokenizer *tokenizer_open_gpt2(const char *dir) {
    static const char *pairs[][2] = {{"encoder.json", "vocab.bpe"}, {"vocab.json", "merges.txt"}};
    char v[4096], m[4096];
    for (int i = 0; i < 2; i++) {
        if (snprintf(v, sizeof v, "%s/%s", dir, pairs[i][0]) >= (int)sizeof v ||
            snprintf(m, sizeof m, "%s/%s", dir, pairs[i][1]) >= (int)sizeof m) {
            loom_fail("%.200s...: path too long", dir);
            return NULL;
        }
        FILE *f = fopen(v, "rb");
        if (!f) continue;
        fclose(f);
        return tokenizer_open_gpt2_files(v, m);
    }
    loom_fail("%s: no encoder.json or vocab.json here (GPT-2 BPE needs encoder.json + vocab.bpe, "
              "or vocab.json + merges.txt)",
              dir);
    return NULL;
}
