// tokenizer_bpe.c — byte-level BPE (kinds gpt2 and hf-bpe): the rank-ordered merge loop, a
// per-word cache, encoding through the pre-tokenizer, and saving the files back (gpt2:
// encoder.json + vocab.bpe; hf-bpe: tokenizer.json). Loading is tokenizer_bpe_load.c and
// tokenizer_hf.c.
//
// Files. encoder.json maps token -> id, where a token's bytes are written with GPT-2's
// byte-to-unicode alphabet: the printable bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF stand for
// themselves and the other 68 bytes, in increasing order, are U+0100..U+0143 (so a space is
// "Ġ" U+0120). vocab.bpe has an optional "#version" line and then one merge "a b" per line;
// the line order is the merge rank (earlier merges first). Internally tokens are raw bytes.
//
// Encoding a text: the pre-tokenizer cuts it into words exactly as GPT-2's regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// does (first alternative that matches at each position, greedy), then each word starts as
// one token per byte and the adjacent pair with the lowest merge rank is merged (all of its
// occurrences, left to right) until no adjacent pair has a rank.
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "bpe_impl.h"

// ---------------------------------------------------------------------------------------------
// Hash tables (open addressing, power-of-two sizes).

static const MergeSlot *merge_find(const Bpe *b, int left, int right) {
    uint64_t key = merge_key(left, right);
    for (size_t i = merge_index(key, b->merge_mask);; i = (i + 1) & b->merge_mask) {
        const MergeSlot *s = &b->merges[i];
        if (s->rank < 0) return NULL;
        if (s->key == key) return s;
    }
}

// ---------------------------------------------------------------------------------------------
// The merge loop for one word.

static void heap_push(Bpe *b, size_t *n, Cand c) {
    Cand *h = b->heap;
    size_t i = (*n)++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (h[p].rank < c.rank || (h[p].rank == c.rank && h[p].left < c.left)) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static Cand heap_pop(Bpe *b, size_t *n) {
    Cand *h = b->heap, top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= *n) break;
        if (k + 1 < *n && (h[k + 1].rank < h[k].rank ||
                           (h[k + 1].rank == h[k].rank && h[k + 1].left < h[k].left)))
            k++;
        if (last.rank < h[k].rank || (last.rank == h[k].rank && last.left < h[k].left)) break;
        h[i] = h[k];
        i = k;
    }
    h[i] = last;
    return top;
}

// Queues the pair (sym[left], its right neighbour) if the merge table has it.
static void push_pair(Bpe *b, size_t *n, int left) {
    Sym *s = b->sym;
    int right = s[left].next;
    const MergeSlot *m = merge_find(b, s[left].id, s[right].id);
    if (m) heap_push(b, n, (Cand){m->rank, left});
}

// Runs BPE on w[0, n), 2 <= n <= BPE_MAX_WORD; the result is the list b->sym[0],
// b->sym[0].next, ...
static void bpe_merge_word(Bpe *b, const uint8_t *w, size_t n) {
    if (n > b->sym_cap) {
        free(b->sym);
        free(b->heap);
        free(b->batch);
        b->sym_cap = n > 2 * b->sym_cap ? n : 2 * b->sym_cap;
        b->heap_cap = 3 * b->sym_cap; // n-1 initial pairs + at most 2 per merge
        b->sym = xmalloc(b->sym_cap * sizeof(Sym));
        b->heap = xmalloc(b->heap_cap * sizeof(Cand));
        b->batch = xmalloc(b->heap_cap * sizeof(Cand));
    }
    Sym *s = b->sym;
    for (size_t i = 0; i < n; i++)
        s[i] = (Sym){b->byte_tok[w[i]], (int)i - 1, (int)i + 1};
    s[n - 1].next = -1;
    size_t nh = 0;
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(b, &nh, (int)i);
    while (nh) {
        // All current occurrences of the best pair are merged left to right before any pair
        // they create is considered (as GPT-2 does); pairs created here never have this rank.
        int32_t rank = b->heap[0].rank;
        size_t nb = 0;
        while (nh && b->heap[0].rank == rank)
            b->batch[nb++] = heap_pop(b, &nh);
        for (size_t k = 0; k < nb; k++) {
            int l = b->batch[k].left, r = s[l].next;
            if (s[l].id < 0 || r < 0) continue; // stale: merged away meanwhile
            const MergeSlot *m = merge_find(b, s[l].id, s[r].id);
            if (!m || m->rank != rank) continue; // stale: a neighbour changed
            s[l].id = m->merged;
            s[l].next = s[r].next;
            if (s[r].next >= 0) s[s[r].next].prev = l;
            s[r].id = -1;
            if (s[l].prev >= 0) push_pair(b, &nh, s[l].prev);
            if (s[l].next >= 0) push_pair(b, &nh, l);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The word cache.

static void cache_clear(Bpe *b) {
    memset(b->cache, 0, (b->cache_mask + 1) * sizeof(CacheSlot));
    b->cache_used = b->ckeys_n = b->cids_n = 0;
}

static const CacheSlot *cache_find(const Bpe *b, const uint8_t *w, size_t n, uint64_t h) {
    for (size_t i = h & b->cache_mask;; i = (i + 1) & b->cache_mask) {
        const CacheSlot *c = &b->cache[i];
        if (!c->key_len) return NULL;
        if (c->hash == h && c->key_len == n && !memcmp(b->ckeys + c->key_off, w, n)) return c;
    }
}

static void cache_put_slot(Bpe *b, CacheSlot c) {
    size_t i = c.hash & b->cache_mask;
    while (b->cache[i].key_len)
        i = (i + 1) & b->cache_mask;
    b->cache[i] = c;
}

static void cache_insert(Bpe *b, const uint8_t *w, size_t n, uint64_t h, const int *ids,
                         size_t nids) {
    if (b->cache_used >= CACHE_MAX_WORDS || b->ckeys_n + n > CACHE_MAX_BYTES ||
        (b->cids_n + nids) * sizeof(int) > CACHE_MAX_BYTES)
        cache_clear(b);
    if (2 * (b->cache_used + 1) > b->cache_mask + 1) { // grow to keep the load under 1/2
        size_t old_n = b->cache_mask + 1;
        CacheSlot *old = b->cache;
        b->cache_mask = 2 * old_n - 1;
        b->cache = xcalloc(2 * old_n, sizeof(CacheSlot));
        for (size_t i = 0; i < old_n; i++)
            if (old[i].key_len) cache_put_slot(b, old[i]);
        free(old);
    }
    if (b->ckeys_n + n > b->ckeys_cap) {
        b->ckeys_cap = 2 * (b->ckeys_n + n);
        b->ckeys = realloc(b->ckeys, b->ckeys_cap);
        if (!b->ckeys) die(EXIT_IO, "out of memory growing the BPE cache");
    }
    if (b->cids_n + nids > b->cids_cap) {
        b->cids_cap = 2 * (b->cids_n + nids);
        b->cids = realloc(b->cids, b->cids_cap * sizeof(int));
        if (!b->cids) die(EXIT_IO, "out of memory growing the BPE cache");
    }
    memcpy(b->ckeys + b->ckeys_n, w, n);
    memcpy(b->cids + b->cids_n, ids, nids * sizeof(int));
    cache_put_slot(
        b, (CacheSlot){h, (uint32_t)b->ckeys_n, (uint32_t)n, (uint32_t)b->cids_n, (uint32_t)nids});
    b->ckeys_n += n;
    b->cids_n += nids;
    b->cache_used++;
}

// ---------------------------------------------------------------------------------------------
// Encode, decode, save, free.

static void encode_word(Bpe *b, const uint8_t *w, size_t n, TokenList *out) {
    while (n > BPE_MAX_WORD) { // only in pathological input, e.g. a megabyte of letters
        encode_word(b, w, BPE_MAX_WORD, out);
        w += BPE_MAX_WORD;
        n -= BPE_MAX_WORD;
    }
    if (n == 1) {
        token_list_push(out, b->byte_tok[w[0]]);
        return;
    }
    int whole = b->ignore_merges ? bpe_vocab_find(b, &b->map, w, n) : -1;
    if (whole >= 0) { // the word is a token: no merges (Hugging Face's ignore_merges)
        token_list_push(out, whole);
        return;
    }
    uint64_t h = 0;
    if (n <= CACHE_MAX_WORD) {
        h = hash_bytes(w, n);
        const CacheSlot *c = cache_find(b, w, n, h);
        if (c) {
            for (uint32_t i = 0; i < c->ids_len; i++)
                token_list_push(out, b->cids[c->ids_off + i]);
            return;
        }
    }
    bpe_merge_word(b, w, n);
    size_t first = out->n;
    for (int i = 0; i >= 0; i = b->sym[i].next)
        token_list_push(out, b->sym[i].id);
    if (n <= CACHE_MAX_WORD) cache_insert(b, w, n, h, out->ids + first, out->n - first);
}

static void bpe_encode(Tokenizer *t, const uint8_t *text, size_t len, TokenList *out) {
    Bpe *b = t->impl;
    for (size_t i = 0; i < len;) {
        size_t end = bpe_pretoken_end(b->pretok, text, len, i);
        encode_word(b, text + i, end - i, out);
        i = end;
    }
}

static const uint8_t *bpe_token_bytes(const Tokenizer *t, int id, size_t *len) {
    const Bpe *b = t->impl;
    *len = b->off[id + 1] - b->off[id];
    return b->bytes + b->off[id];
}

static int bpe_save(const Tokenizer *t, const char *dir) {
    const Bpe *b = t->impl;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/encoder.json", dir) >= (int)sizeof path)
        return loom_fail("%.200s...: path too long", dir);
    if (write_file_atomic(path, b->vocab_text, b->vocab_len)) return -1;
    snprintf(path, sizeof path, "%s/vocab.bpe", dir); // shorter than the one above
    return write_file_atomic(path, b->merges_text, b->merges_len);
}

// hf-bpe: the tokenizer.json as read
static int hf_save(const Tokenizer *t, const char *dir) {
    const Bpe *b = t->impl;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/tokenizer.json", dir) >= (int)sizeof path)
        return loom_fail("%.200s...: path too long", dir);
    return write_file_atomic(path, b->vocab_text, b->vocab_len);
}

void bpe_free(void *impl) {
    Bpe *b = impl;
    if (!b) return;
    free(b->map.slot);
    free(b->bytes);
    free(b->off);
    free(b->merges);
    free(b->cache);
    free(b->ckeys);
    free(b->cids);
    free(b->sym);
    free(b->heap);
    free(b->batch);
    free(b->vocab_text);
    free(b->merges_text);
    free(b);
}

const TokenizerOps bpe_ops = {"gpt2", bpe_encode, bpe_token_bytes, bpe_save, bpe_free};
const TokenizerOps hf_bpe_ops = {"hf-bpe", bpe_encode, bpe_token_bytes, hf_save, bpe_free};
