// tokenizer_hf.c — Hugging Face's tokenizer.json (kind "hf-bpe") for byte-level BPE models:
// checks every field that changes how text becomes ids and loads model.vocab, model.merges and
// added_tokens into the tables of tokenizer_bpe.c (the same merge loop as the gpt2 kind).
//
// Accepted: "model": {"type": "BPE", "vocab": {token: id}, "merges": ["a b", ...] or
// [["a", "b"], ...], "ignore_merges": bool}, tokens in GPT-2's byte alphabet; a pre-tokenizer
// that is ByteLevel (use_regex true: GPT-2's pattern) or a Sequence of a Split with GPT-2's or
// Llama-3's pattern (behavior Isolated) and a ByteLevel with use_regex false; no normalizer
// (or an empty Sequence); a ByteLevel decoder or none. Refused, naming the field: other models,
// patterns or normalizers, byte_fallback, dropout, subword prefixes/suffixes, add_prefix_space.
// added_tokens get their ids (which may pass the model vocabulary; the vocabulary size is the
// highest id + 1, ids in neither are empty tokens); encode never produces them: text that
// spells "<|endoftext|>" is ordinary text, as in GPT-2's reference encoder. The post-processor
// (e.g. a BOS token) is not applied. The end-of-text id is the first of <|endoftext|>,
// <|end_of_text|>, </s> the file defines.
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "bpe_impl.h"

#define HF_MAX_IDS (1 << 21) // as the model's vocabulary cap (GPT_MAX_VOCAB)

static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char llama3_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int is_type(const cJSON *o, const char *type) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) && !strcmp(t->valuestring, type);
}

static const char *type_of(const cJSON *o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : "(none)";
}

// A ByteLevel pre-tokenizer at `field`; *regex gets use_regex (default true).
static int check_byte_level(const cJSON *o, const char *name, const char *field, int *regex) {
    if (!is_type(o, "ByteLevel"))
        return loom_fail("%s: %s: type \"%.60s\" is not supported (expected ByteLevel)", name,
                         field, type_of(o));
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "add_prefix_space")))
        return loom_fail("%s: %s.add_prefix_space is true (it adds a space to the text); only "
                         "false is supported",
                         name, field);
    *regex = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(o, "use_regex"));
    return 0;
}

// A Split pre-tokenizer at `field` with a known pattern: *pretok gets it.
static int check_split(const cJSON *o, const char *name, const char *field, int *pretok) {
    if (!is_type(o, "Split"))
        return loom_fail("%s: %s: type \"%.60s\" is not supported (expected Split then ByteLevel)",
                         name, field, type_of(o));
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(o, "pattern");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    const cJSON *beh = cJSON_GetObjectItemCaseSensitive(o, "behavior");
    if (!cJSON_IsString(re))
        return loom_fail("%s: %s.pattern: not a {\"Regex\": ...} pattern", name, field);
    if (!strcmp(re->valuestring, gpt2_pattern))
        *pretok = PRETOK_GPT2_U;
    else if (!strcmp(re->valuestring, llama3_pattern))
        *pretok = PRETOK_LLAMA3;
    else
        return loom_fail("%s: %s.pattern.Regex \"%.80s\" is not supported (GPT-2's and Llama-3's "
                         "split patterns are)",
                         name, field, re->valuestring);
    if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated"))
        return loom_fail("%s: %s.behavior: only \"Isolated\" is supported", name, field);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "invert")))
        return loom_fail("%s: %s.invert: only false is supported", name, field);
    return 0;
}

// The pre-tokenizer: *pretok gets its pattern.
static int check_pre_tokenizer(const cJSON *root, const char *name, int *pretok) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    int regex = 0;
    if (!cJSON_IsObject(p))
        return loom_fail("%s: pre_tokenizer: missing (a byte-level BPE has a ByteLevel one)", name);
    if (!is_type(p, "Sequence")) {
        if (check_byte_level(p, name, "pre_tokenizer", &regex)) return -1;
        if (!regex)
            return loom_fail("%s: pre_tokenizer.use_regex is false with no Split before it (no "
                             "split pattern): not supported",
                             name);
        *pretok = PRETOK_GPT2_U;
        return 0;
    }
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
    int n = cJSON_GetArraySize(seq);
    if (!cJSON_IsArray(seq) || n < 1 || n > 2)
        return loom_fail("%s: pre_tokenizer.pretokenizers: expected [ByteLevel] or [Split, "
                         "ByteLevel]",
                         name);
    if (n == 1) {
        if (check_byte_level(seq->child, name, "pre_tokenizer.pretokenizers[0]", &regex)) return -1;
        if (!regex)
            return loom_fail("%s: pre_tokenizer.pretokenizers[0].use_regex is false with no "
                             "Split before it (no split pattern): not supported",
                             name);
        *pretok = PRETOK_GPT2_U;
        return 0;
    }
    if (check_split(seq->child, name, "pre_tokenizer.pretokenizers[0]", pretok) ||
        check_byte_level(seq->child->next, name, "pre_tokenizer.pretokenizers[1]", &regex))
        return -1;
    if (regex)
        return loom_fail("%s: pre_tokenizer.pretokenizers[1].use_regex is true after a Split "
                         "(two split patterns): not supported",
                         name);
    return 0;
}

// The model's options and the normalizer and decoder: only those that leave the text as is.
static int check_options(const cJSON *root, const cJSON *model, const char *name) {
    if (!is_type(model, "BPE") && cJSON_GetObjectItemCaseSensitive(model, "type"))
        return loom_fail("%s: model.type \"%.60s\" is not supported (only BPE)", name,
                         type_of(model));
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")))
        return loom_fail("%s: model.byte_fallback is true (a SentencePiece-style BPE): only "
                         "byte-level BPE is supported",
                         name);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(d) && d->valuedouble > 0)
        return loom_fail("%s: model.dropout is %g: only none is supported", name, d->valuedouble);
    static const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(model, affixes[k]);
        if (a && !cJSON_IsNull(a) && !(cJSON_IsString(a) && !*a->valuestring))
            return loom_fail("%s: model.%s is set: not supported", name, affixes[k]);
    }
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm) &&
        !(is_type(norm, "Sequence") &&
          !cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(norm, "normalizers"))))
        return loom_fail("%s: normalizer: type \"%.60s\" changes the text before tokenizing: "
                         "not supported (only none)",
                         name, type_of(norm));
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (dec && !cJSON_IsNull(dec) && !is_type(dec, "ByteLevel"))
        return loom_fail("%s: decoder: type \"%.60s\" is not supported (only ByteLevel)", name,
                         type_of(dec));
    return 0;
}

// added_tokens into extra (their contents, raw bytes); *max_id gets the highest id.
static int read_added(const cJSON *root, const char *name, BpeExtra **extra, int *n, int *max_id) {
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    *n = 0;
    if (!added || cJSON_IsNull(added)) return 0;
    if (!cJSON_IsArray(added)) return loom_fail("%s: added_tokens: not an array", name);
    *extra = xcalloc((size_t)cJSON_GetArraySize(added) + 1, sizeof(BpeExtra));
    int k = 0;
    for (const cJSON *a = added->child; a; a = a->next, k++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(a, "content");
        double v = cJSON_IsNumber(id) ? id->valuedouble : -1;
        if (!(v >= 0 && v < HF_MAX_IDS) || v != (double)(int)v)
            return loom_fail("%s: added_tokens[%d].id: not an integer in 0..%d", name, k,
                             HF_MAX_IDS - 1);
        if (!cJSON_IsString(c) || !*c->valuestring)
            return loom_fail("%s: added_tokens[%d].content: not a non-empty string", name, k);
        (*extra)[k] = (BpeExtra){(int)v, (const uint8_t *)c->valuestring, strlen(c->valuestring)};
        if ((int)v > *max_id) *max_id = (int)v;
    }
    *n = k;
    return 0;
}

// model.merges, as "a b" strings or ["a", "b"] pairs, in rank order.
static int read_merges(Bpe *b, const VocabMap *map, const cJSON *merges, const char *name) {
    if (!cJSON_IsArray(merges))
        return loom_fail("%s: model.merges: %s", name, merges ? "not an array" : "missing");
    int n = cJSON_GetArraySize(merges), k = 0;
    bpe_merges_alloc(b, (size_t)n + 1);
    for (const cJSON *m = merges->child; m; m = m->next, k++) {
        char where[4200];
        snprintf(where, sizeof where, "%s: model.merges[%d]", name, k);
        const char *a = NULL, *c = NULL;
        size_t na = 0, nc = 0;
        if (cJSON_IsString(m)) {
            a = m->valuestring;
            const char *sp = strchr(a, ' ');
            if (sp && sp > a && sp[1] && !strchr(sp + 1, ' '))
                na = (size_t)(sp - a), c = sp + 1, nc = strlen(c);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) {
            a = m->child->valuestring, c = m->child->next->valuestring;
            na = strlen(a), nc = strlen(c);
        }
        if (!c || !na || !nc)
            return loom_fail("%s: expected \"a b\" or [\"a\", \"b\"] (two non-empty tokens)",
                             where);
        if (bpe_add_merge(b, map, where, a, na, c, nc, k)) return -1;
    }
    return 0;
}

// The end-of-text id: the first of these names among the added tokens, then the vocabulary.
static int find_eot(const Bpe *b, const VocabMap *map, const BpeExtra *extra, int nextra) {
    static const char *names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(names[k]);
        for (int i = 0; i < nextra; i++)
            if (extra[i].n == n && !memcmp(extra[i].p, names[k], n)) return extra[i].id;
        // these names are printable ASCII: the same in GPT-2's byte alphabet
        int id = bpe_vocab_find(b, map, (const uint8_t *)names[k], n);
        if (id >= 0) return id;
    }
    return -1;
}

// The highest id of model.vocab (ids out of range are reported by bpe_load_vocab).
static int max_vocab_id(const cJSON *vocab) {
    int max = -1;
    for (const cJSON *it = vocab->child; it; it = it->next)
        if (cJSON_IsNumber(it) && it->valuedouble < HF_MAX_IDS && it->valuedouble > max)
            max = (int)it->valuedouble;
    return max;
}

// Loads the parsed file root into b; the tokenizer, or NULL (b freed).
static Tokenizer *hf_load(Bpe *b, const cJSON *root, const char *name) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    BpeExtra *extra = NULL;
    VocabMap map = {0};
    int nextra = 0, max_id = -1, rc = 0;
    char where[4200];
    snprintf(where, sizeof where, "%s: model.vocab", name);
    if (!cJSON_IsObject(model))
        rc = loom_fail("%s: model: missing or not an object (not a tokenizer.json?)", name);
    if (!rc) rc = check_options(root, model, name);
    if (!rc && !cJSON_IsObject(vocab))
        rc = loom_fail("%s: model.vocab: %s", name,
                       vocab ? "not an object of token -> id" : "missing");
    if (!rc) rc = check_pre_tokenizer(root, name, &b->pretok);
    if (!rc) rc = read_added(root, name, &extra, &nextra, &max_id);
    if (!rc) {
        int mv = max_vocab_id(vocab);
        int size = (mv > max_id ? mv : max_id) + 1;
        rc = bpe_load_vocab(b, &map, vocab, where, size < 256 ? 256 : size, 0, extra, nextra);
    }
    if (!rc) rc = read_merges(b, &map, cJSON_GetObjectItemCaseSensitive(model, "merges"), name);
    int eot = rc ? -1 : find_eot(b, &map, extra, nextra);
    free(extra);
    if (rc) {
        free(map.slot);
        bpe_free(b);
        return NULL;
    }
    b->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    return bpe_finish(b, &map, &hf_bpe_ops, eot, where);
}

Tokenizer *tokenizer_open_hf_mem(const char *name, const void *data, size_t len) {
    Bpe *b = xcalloc(1, sizeof *b);
    b->vocab_text = xmalloc(len + 1);
    memcpy(b->vocab_text, data, len);
    b->vocab_text[len] = 0;
    b->vocab_len = len;
    cJSON *root = cJSON_ParseWithLength(b->vocab_text, len);
    if (!cJSON_IsObject(root)) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= b->vocab_text && at <= b->vocab_text + len
                         ? (size_t)(at - b->vocab_text)
                         : 0;
        if (root)
            loom_fail("%s: not a JSON object (a tokenizer.json is one)", name);
        else
            loom_fail("%s: not JSON (a parse error near byte %zu)", name, off);
        cJSON_Delete(root);
        bpe_free(b);
        return NULL;
    }
    Tokenizer *t = hf_load(b, root, name);
    cJSON_Delete(root);
    return t;
}

Tokenizer *tokenizer_open_hf(const char *path) {
    char file[4096];
    size_t n = strlen(path);
    if (n >= 5 && !strcmp(path + n - 5, ".json")) {
        if (snprintf(file, sizeof file, "%s", path) >= (int)sizeof file) goto too_long;
    } else if (snprintf(file, sizeof file, "%s/tokenizer.json", path) >= (int)sizeof file) {
        goto too_long;
    }
    size_t len;
    char *text = read_file(file, &len);
    if (!text) return NULL;
    Tokenizer *t = tokenizer_open_hf_mem(file, text, len);
    free(text);
    return t;
too_long:
    loom_fail("%.200s...: path too long", path);
    return NULL;
}
