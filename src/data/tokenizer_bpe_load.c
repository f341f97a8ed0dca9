// tokenizer_bpe_load.c — opening GPT-2's BPE files (encoder.json + vocab.bpe, or Hugging Face's
// vocab.json + merges.txt) into the tokenizer of tokenizer_bpe.c: the byte-to-unicode alphabet,
// the vocabulary and the ranked merges, every field checked and named on error. Its builders
// (bpe_load_vocab, bpe_add_merge, bpe_finish) also serve tokenizer_hf.c.
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

long bpe_token_to_bytes(const char *path, const char *s, size_t n, uint8_t *out) {
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

int bpe_vocab_find(const Bpe *b, const VocabMap *m, const uint8_t *p, size_t n) {
    for (size_t i = hash_bytes(p, n) & m->mask;; i = (i + 1) & m->mask) {
        int id = m->slot[i];
        if (id < 0) return -1;
        if (b->off[id + 1] - b->off[id] == n && !memcmp(b->bytes + b->off[id], p, n)) return id;
    }
}

typedef struct { // the tokens of a vocabulary object as raw bytes, before they are put in order
    uint8_t *bytes;
    uint32_t *start, *len; // by id
    uint8_t *in_map;       // by id: 1 for a token of obj (merges may name it)
    size_t used;
} Gather;

// Reads obj's tokens into g (ids in 0..size-1, each once; with dense, obj has size entries).
static int vocab_gather(Gather *g, const cJSON *obj, const char *where, int size, int dense) {
    int n = cJSON_GetArraySize(obj);
    if (dense ? n < 256 || n > (1 << 24) : n < 256 || n > size)
        return loom_fail("%s: %d tokens; a byte-level BPE vocabulary has 256 to %d", where, n,
                         dense ? 1 << 24 : size);
    for (const cJSON *it = obj->child; it; it = it->next) {
        double v = it->valuedouble;
        if (!cJSON_IsNumber(it) || !(v >= 0 && v < size) || v != (double)(int)v)
            return loom_fail("%s: token \"%.60s\" has id %s; ids must be integers 0..%d", where,
                             it->string, cJSON_IsNumber(it) ? "out of range" : "not a number",
                             size - 1);
        int id = (int)v;
        if (g->in_map[id])
            return loom_fail("%s: id %d is used twice (\"%.60s\")", where, id, it->string);
        long m = bpe_token_to_bytes(where, it->string, strlen(it->string), g->bytes + g->used);
        if (m < 0) return -1;
        g->in_map[id] = 1;
        g->start[id] = (uint32_t)g->used;
        g->len[id] = (uint32_t)m;
        g->used += (size_t)m;
    }
    return 0;
}

// Adds the extra tokens to g; one may repeat a token of obj with the same id and bytes.
static int extra_gather(Gather *g, const char *where, const BpeExtra *extra, int nextra, int size) {
    for (int k = 0; k < nextra; k++) {
        const BpeExtra *e = &extra[k];
        if (e->id < 0 || e->id >= size || !e->n)
            return loom_fail("%s: token %d (\"%.*s\") is empty or out of range", where, e->id,
                             (int)(e->n < 60 ? e->n : 60), e->p);
        if (g->len[e->id]) {
            if (g->len[e->id] == e->n && !memcmp(g->bytes + g->start[e->id], e->p, e->n)) continue;
            return loom_fail("%s: id %d is both \"%.*s\" and \"%.*s\"", where, e->id,
                             (int)(e->n < 60 ? e->n : 60), e->p,
                             (int)(g->len[e->id] < 60 ? g->len[e->id] : 60),
                             g->bytes + g->start[e->id]);
        }
        memcpy(g->bytes + g->used, e->p, e->n);
        g->start[e->id] = (uint32_t)g->used;
        g->len[e->id] = (uint32_t)e->n;
        g->used += e->n;
    }
    return 0;
}

// Copies g into b->bytes/off in id order and puts obj's tokens in the map.
static int vocab_build(Bpe *b, VocabMap *map, const Gather *g, int size, const char *where) {
    b->vocab = size;
    b->bytes = xmalloc(g->used + 1);
    b->off = xmalloc(((size_t)size + 1) * sizeof(uint32_t));
    uint32_t at = 0;
    for (int id = 0; id < size; id++) {
        b->off[id] = at;
        memcpy(b->bytes + at, g->bytes + g->start[id], g->len[id]);
        at += g->len[id];
    }
    b->off[size] = at;
    map->mask = pow2_at_least(2 * (size_t)size) - 1;
    map->slot = xmalloc((map->mask + 1) * sizeof(int));
    memset(map->slot, 0xff, (map->mask + 1) * sizeof(int));
    for (int id = 0; id < size; id++) {
        if (!g->in_map[id]) continue;
        const uint8_t *p = b->bytes + b->off[id];
        size_t plen = b->off[id + 1] - b->off[id];
        if (bpe_vocab_find(b, map, p, plen) >= 0)
            return loom_fail("%s: token \"%.*s\" appears twice", where, (int)plen, p);
        size_t i = hash_bytes(p, plen) & map->mask;
        while (map->slot[i] >= 0)
            i = (i + 1) & map->mask;
        map->slot[i] = id;
    }
    return 0;
}

int bpe_load_vocab(Bpe *b, VocabMap *map, const cJSON *obj, const char *where, int size, int dense,
                   const BpeExtra *extra, int nextra) {
    if (!cJSON_IsObject(obj)) return loom_fail("%s: not a JSON object of token -> id", where);
    if (dense) size = cJSON_GetArraySize(obj);
    if (size < 1 || size > (1 << 24))
        return loom_fail("%s: %d ids; a vocabulary has 256 to 16777216", where, size);
    size_t cap = 0; // raw bytes are never longer than the token in the alphabet
    for (const cJSON *it = obj->child; it; it = it->next)
        cap += strlen(it->string);
    for (int k = 0; k < nextra; k++)
        cap += extra[k].n;
    Gather g = {.bytes = xmalloc(cap + 1),
                .start = xcalloc((size_t)size, sizeof(uint32_t)),
                .len = xcalloc((size_t)size, sizeof(uint32_t)),
                .in_map = xcalloc((size_t)size, 1)};
    // dense: size distinct ids in 0..size-1, so every id is present
    int rc = vocab_gather(&g, obj, where, size, dense);
    if (!rc) rc = extra_gather(&g, where, extra, nextra, size);
    if (!rc && cap >= UINT32_MAX) rc = loom_fail("%s: %zu bytes of tokens is too many", where, cap);
    if (!rc) rc = vocab_build(b, map, &g, size, where);
    free(g.bytes);
    free(g.start);
    free(g.len);
    free(g.in_map);
    return rc;
}

// Parses the token -> id JSON text of encoder.json into b->bytes/off/vocab and the map.
static int load_vocab(Bpe *b, VocabMap *map, const char *path) {
    cJSON *root = cJSON_ParseWithLength(b->vocab_text, b->vocab_len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return loom_fail("%s: not a JSON object of token -> id (malformed encoder.json?)", path);
    }
    int rc = bpe_load_vocab(b, map, root, path, 0, 1, NULL, 0);
    cJSON_Delete(root);
    return rc;
}

void bpe_merges_alloc(Bpe *b, size_t n) {
    b->merge_mask = pow2_at_least(2 * n) - 1;
    b->merges = xmalloc((b->merge_mask + 1) * sizeof(MergeSlot));
    for (size_t i = 0; i <= b->merge_mask; i++)
        b->merges[i].rank = -1;
}

int bpe_add_merge(Bpe *b, const VocabMap *map, const char *where, const char *a, size_t na,
                  const char *c, size_t nc, int rank) {
    uint8_t small[256], *buf = na + nc <= sizeof small ? small : xmalloc(na + nc);
    long la = bpe_token_to_bytes(where, a, na, buf);
    long lc = la < 0 ? -1 : bpe_token_to_bytes(where, c, nc, buf + la);
    int ia = -1, ic = -1, m = -1;
    if (la >= 0 && lc >= 0) {
        ia = bpe_vocab_find(b, map, buf, (size_t)la);
        ic = bpe_vocab_find(b, map, buf + la, (size_t)lc);
        m = bpe_vocab_find(b, map, buf, (size_t)(la + lc));
    }
    if (buf != small) free(buf);
    if (la < 0 || lc < 0) return -1;
    if (ia < 0 || ic < 0 || m < 0)
        return loom_fail("%s: merge \"%.*s %.*s\" %s a token that is not in the vocabulary", where,
                         (int)(na < 60 ? na : 60), a, (int)(nc < 60 ? nc : 60), c,
                         ia < 0 || ic < 0 ? "names" : "makes");
    // insert; a repeated pair takes the later rank, as GPT-2's dict(zip(...)) does
    uint64_t key = merge_key(ia, ic);
    size_t i = merge_index(key, b->merge_mask);
    while (b->merges[i].rank >= 0 && b->merges[i].key != key)
        i = (i + 1) & b->merge_mask;
    b->merges[i] = (MergeSlot){key, rank, m};
    return 0;
}

// Parses the merges file into the merge table (needs the vocabulary).
static int load_merges(Bpe *b, const VocabMap *map, const char *path) {
    char *text = b->merges_text;
    size_t nlines = 1;
    for (size_t i = 0; i < b->merges_len; i++)
        nlines += text[i] == '\n';
    if (nlines > (1u << 30)) // ranks and line numbers are int
        return loom_fail("%s: %zu lines is too many merges", path, nlines);
    bpe_merges_alloc(b, nlines);
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
        if (!sp || sp == line || sp == line + n - 1 || memchr(sp + 1, ' ', n - (sp + 1 - line)))
            return loom_fail("%s:%d: expected a merge \"a b\" (two tokens and one space), got "
                             "\"%.*s\"",
                             path, lineno, (int)(n < 60 ? n : 60), line);
        char where[4200];
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        size_t na = (size_t)(sp - line);
        rc = bpe_add_merge(b, map, where, line, na, sp + 1, n - na - 1, rank++);
    }
    return rc;
}

Tokenizer *bpe_finish(Bpe *b, VocabMap *map, const TokenizerOps *ops, int eot, const char *name) {
    int rc = 0;
    for (int byte = 0; byte < 256 && !rc; byte++) {
        uint8_t c = (uint8_t)byte;
        b->byte_tok[byte] = bpe_vocab_find(b, map, &c, 1);
        if (b->byte_tok[byte] < 0)
            rc = loom_fail("%s: no token for byte 0x%02x (not a byte-level BPE vocabulary)", name,
                           byte);
    }
    if (rc || !b->ignore_merges) {
        free(map->slot);
    } else {
        b->map = *map;
    }
    *map = (VocabMap){0};
    if (rc) {
        bpe_free(b);
        return NULL;
    }
    b->cache_mask = 4095;
    b->cache = xcalloc(b->cache_mask + 1, sizeof(CacheSlot));
    Tokenizer *t = xcalloc(1, sizeof *t);
    *t = (Tokenizer){.ops = ops, .vocab_size = b->vocab, .eot = eot, .impl = b};
    return t;
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
    if (!rc) rc = load_merges(b, &map, merges_name);
    if (rc) {
        free(map.slot);
        bpe_free(b);
        return NULL;
    }
    int eot = bpe_vocab_find(b, &map, (const uint8_t *)"<|endoftext|>", 13);
    return bpe_finish(b, &map, &bpe_ops, eot, vocab_name);
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
