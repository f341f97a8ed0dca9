// test_tokenizer_json.c — Hugging Face tokenizer.json (kind hf-bpe, src/data/tokenizer_hf.c):
// a small file built here with cJSON (GPT-2's byte alphabet, a few merges, added tokens):
// exact encodings, merges as strings and as pairs, ignore_merges, round trips of arbitrary
// bytes under both split patterns, Llama-3's pattern on tricky strings, added tokens with ids
// past the model vocabulary (the end-of-text choice, empty ids between), save and reload, and
// every refused field as an error naming the file and the field.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "../src/common.h"
#include "../src/data/bpe_impl.h"
#include "../src/data/tokenizer.h"
#include "test.h"

static char tmpdir[256];

// GPT-2's byte alphabet: raw bytes raw[0, n) -> the token as written in the file (UTF-8).
static void alpha_n(const char *raw, size_t n, char *out) {
    char *o = out;
    for (const uint8_t *p = (const uint8_t *)raw; p < (const uint8_t *)raw + n; p++) {
        int b = *p, c = b;
        if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))) {
            int k = 0;
            for (int x = 0; x < b; x++)
                k += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE));
            c = 256 + k;
        }
        if (c < 0x80)
            *o++ = (char)c;
        else
            *o++ = (char)(0xC0 | (c >> 6)), *o++ = (char)(0x80 | (c & 0x3F));
    }
    *o = 0;
}

static void alpha(const char *raw, char *out) { alpha_n(raw, strlen(raw), out); }

// Merges (raw tokens); merge i makes token 256 + i.
static const char *merges[][2] = {{"h", "e"},     {"l", "l"}, {"he", "ll"}, {"hell", "o"},
                                  {" ", "w"},     {"o", "r"}, {" w", "or"}, {"l", "d"},
                                  {" wor", "ld"}, {"a", "b"}, {"1", "2"},   {"'", "S"}};
#define NM (int)(sizeof merges / sizeof *merges)

// The test's tokenizer.json: 256 byte tokens, the merges, <|endoftext|> added at 256 + NM.
static cJSON *base(int pairs) {
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    cJSON *ml = cJSON_AddArrayToObject(model, "merges");
    char a[64], b[64], raw[160];
    for (int i = 0; i < 256; i++) {
        alpha_n((char[]){(char)i}, 1, a);
        cJSON_AddNumberToObject(vocab, a, i);
    }
    for (int i = 0; i < NM; i++) {
        snprintf(raw, sizeof raw, "%s%s", merges[i][0], merges[i][1]);
        alpha(raw, a);
        cJSON_AddNumberToObject(vocab, a, 256 + i);
        alpha(merges[i][0], a), alpha(merges[i][1], b);
        if (pairs) {
            const char *two[2] = {a, b};
            cJSON_AddItemToArray(ml, cJSON_CreateStringArray(two, 2));
        } else {
            snprintf(raw, sizeof raw, "%s %s", a, b);
            cJSON_AddItemToArray(ml, cJSON_CreateString(raw));
        }
    }
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens"), *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "id", 256 + NM);
    cJSON_AddStringToObject(t, "content", "<|endoftext|>");
    cJSON_AddItemToArray(added, t);
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON_AddFalseToObject(pre, "add_prefix_space");
    cJSON_AddNullToObject(root, "normalizer");
    return root;
}

static Tokenizer *open_json(cJSON *root) {
    char *text = cJSON_PrintUnformatted(root);
    Tokenizer *t = tokenizer_open_hf_mem("tok.json", text, strlen(text));
    free(text);
    return t;
}

static void encode(Tokenizer *t, const char *s, TokenList *l) {
    l->n = 0;
    tokenizer_encode(t, s, strlen(s), l);
}

static int ids_are(const TokenList *l, const int *want, size_t n) {
    if (l->n != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (l->ids[i] != want[i]) return 0;
    return 1;
}

// Sets the pre-tokenizer to Sequence [Split(pattern), ByteLevel(use_regex false)].
static void set_split(cJSON *root, const char *pattern) {
    cJSON_DeleteItemFromObject(root, "pre_tokenizer");
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "Sequence");
    cJSON *seq = cJSON_AddArrayToObject(pre, "pretokenizers"), *split = cJSON_CreateObject();
    cJSON_AddStringToObject(split, "type", "Split");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(split, "pattern"), "Regex", pattern);
    cJSON_AddStringToObject(split, "behavior", "Isolated");
    cJSON_AddFalseToObject(split, "invert");
    cJSON *bl = cJSON_CreateObject();
    cJSON_AddStringToObject(bl, "type", "ByteLevel");
    cJSON_AddFalseToObject(bl, "use_regex");
    cJSON_AddItemToArray(seq, split);
    cJSON_AddItemToArray(seq, bl);
}

static const char llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

TEST(loads_and_encodes) {
    cJSON *root = base(0);
    Tokenizer *t = open_json(root);
    cJSON_Delete(root);
    CHECK(t, "%s", loom_errmsg());
    if (!t) return;
    CHECK(!strcmp(tokenizer_kind(t), "hf-bpe"), "kind %s", tokenizer_kind(t));
    CHECK(tokenizer_vocab_size(t) == 257 + NM && tokenizer_eot(t) == 256 + NM, "vocab %d eot %d",
          tokenizer_vocab_size(t), tokenizer_eot(t));
    TokenList l = {0};
    encode(t, "hello world", &l);
    CHECK(ids_are(&l, (int[]){256 + 3, 256 + 8}, 2), "hello world: %zu ids", l.n);
    encode(t, "IT'S", &l); // GPT-2's contractions are case-sensitive: "'" and "S" split
    CHECK(ids_are(&l, (int[]){'I', 'T', '\'', 'S'}, 4), "IT'S: %zu ids", l.n);
    encode(t, "<|endoftext|>", &l); // special tokens are ordinary text to encode
    CHECK(l.n > 1 && l.ids[0] == '<', "<|endoftext|> in the text: %zu ids", l.n);
    tokenizer_close(t);
    root = base(0);
    set_split(root, llama3); // Llama-3's contractions are not: "'S" is one piece, merged
    t = open_json(root);
    cJSON_Delete(root);
    CHECK(t, "%s", loom_errmsg());
    if (t) encode(t, "IT'S", &l);
    CHECK(t && ids_are(&l, (int[]){'I', 'T', 256 + 11}, 3), "Llama-3 IT'S: %zu ids", l.n);
    token_list_free(&l);
    tokenizer_close(t);
}

TEST(merges_as_pairs_equal_strings) {
    cJSON *r1 = base(0), *r2 = base(1);
    Tokenizer *a = open_json(r1), *b = open_json(r2);
    cJSON_Delete(r1);
    cJSON_Delete(r2);
    CHECK(a && b, "%s", loom_errmsg());
    if (!a || !b) return;
    const char *text = "hello world, hello  world!! 1212 abab IT'S \xff\xfe caf\xc3\xa9";
    TokenList la = {0}, lb = {0};
    encode(a, text, &la);
    encode(b, text, &lb);
    CHECK(la.n == lb.n && !memcmp(la.ids, lb.ids, la.n * sizeof(int)), "%zu vs %zu ids", la.n,
          lb.n);
    token_list_free(&la);
    token_list_free(&lb);
    tokenizer_close(a);
    tokenizer_close(b);
}

TEST(round_trip_any_bytes) {
    uint8_t buf[8192];
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < sizeof buf; i++) { // xorshift; every fourth byte ASCII text-like
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        buf[i] = i % 4 ? (uint8_t)s : (uint8_t)(" \n'a1S!\r"[s % 8]);
    }
    for (int k = 0; k < 2; k++) {
        cJSON *root = base(k);
        if (k) set_split(root, llama3);
        Tokenizer *t = open_json(root);
        cJSON_Delete(root);
        CHECK(t, "%s", loom_errmsg());
        if (!t) continue;
        TokenList l = {0};
        for (size_t n = 0; n <= sizeof buf; n += n < 64 ? 1 : 997) {
            l.n = 0;
            tokenizer_encode(t, buf, n, &l);
            size_t len = 0;
            char *back = tokenizer_decode(t, l.ids, l.n, &len);
            CHECK(back && len == n && !memcmp(back, buf, n), "pattern %d, %zu bytes", k, n);
            free(back);
        }
        token_list_free(&l);
        tokenizer_close(t);
    }
}

// Llama-3's pattern: each case is the text with '|' between the expected pieces.
TEST(llama3_split_on_tricky_strings) {
    static const char *cases[] = {
        "I|'M| YOU|'RE| WE|'VE| THEY|'LL| SHE|'D| IT|'S| DON|'T", // contractions, any case
        "it|'\xc5\xbf| x|'ll| '|quoted", // 'ſ folds to 's; ' then letters is [^..]?\p{L}+
        "1| |12| |123| |123|4| |123|45", // digit runs of 1-5 in groups of at most 3
        "a|1|b|22|c|333|d|444|4",
        "hello|!!!\n\n|world|...\r\n|x", // punctuation takes the newlines after it
        "(ok|)?\r\n\r\n| | next",        // one non-letter joins the letters after it
        " \n \n| | x",                   // \s*[\r\n]+ ends at the run's last newline
        "end|   ",                       // trailing spaces: one piece at the end
        "a| | b|\t|\tc", // \s+(?!\S) leaves one whitespace to the next piece; \t joins letters
        "x|\xc2\xa0y| |123| \xe2\x80\x94\n",
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char text[128];
        size_t n = 0, ends[64], ne = 0;
        for (const char *p = cases[c]; *p; p++)
            if (*p == '|')
                ends[ne++] = n;
            else
                text[n++] = *p;
        ends[ne++] = n;
        int ok = 1;
        size_t i = 0;
        for (size_t k = 0; k < ne && ok; k++) {
            size_t e = bpe_pretoken_end(PRETOK_LLAMA3, (const uint8_t *)text, n, i);
            ok = e == ends[k];
            i = e;
        }
        CHECK(ok, "case %zu: \"%s\"", c, cases[c]);
    }
}

TEST(ignore_merges_takes_whole_words) {
    for (int ignore = 0; ignore < 2; ignore++) {
        cJSON *root = base(0), *model = cJSON_GetObjectItem(root, "model");
        cJSON_AddNumberToObject(cJSON_GetObjectItem(model, "vocab"), "abc", 300); // no merge
        cJSON_AddBoolToObject(model, "ignore_merges", ignore);
        Tokenizer *t = open_json(root);
        cJSON_Delete(root);
        CHECK(t, "%s", loom_errmsg());
        if (!t) continue;
        TokenList l = {0};
        encode(t, "abc", &l);
        if (ignore)
            CHECK(ids_are(&l, (int[]){300}, 1), "ignore_merges: %zu ids", l.n);
        else
            CHECK(ids_are(&l, (int[]){256 + 9, 'c'}, 2), "merges: %zu ids", l.n);
        token_list_free(&l);
        tokenizer_close(t);
    }
}

static void add_token(cJSON *root, int id, const char *content) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "id", id);
    cJSON_AddStringToObject(t, "content", content);
    cJSON_AddTrueToObject(t, "special");
    cJSON_AddItemToArray(cJSON_GetObjectItem(root, "added_tokens"), t);
}

TEST(added_tokens_past_the_vocabulary) {
    cJSON *root = base(0);
    cJSON_DeleteItemFromObject(root, "added_tokens");
    cJSON_AddArrayToObject(root, "added_tokens");
    add_token(root, 128001, "</s>");
    add_token(root, 128000, "<|begin_of_text|>");
    Tokenizer *t = open_json(root);
    CHECK(t && tokenizer_eot(t) == 128001 && tokenizer_vocab_size(t) == 128002, "%s",
          t ? "eot or vocab" : loom_errmsg());
    tokenizer_close(t);
    add_token(root, 128002, "<|end_of_text|>"); // preferred to </s>
    t = open_json(root);
    CHECK(t && tokenizer_eot(t) == 128002 && tokenizer_vocab_size(t) == 128003, "%s",
          t ? "eot or vocab" : loom_errmsg());
    if (!t) return;
    size_t n = 99;
    const char *s = tokenizer_token(t, 128000, &n);
    CHECK(s && n == 17 && !memcmp(s, "<|begin_of_text|>", 17), "token 128000");
    CHECK(tokenizer_token(t, 5000, &n) && n == 0, "an id in no list is an empty token");
    // save and reload: the same kind, vocabulary and ids
    char dir[300];
    snprintf(dir, sizeof dir, "%s/saved", tmpdir);
    CHECK(!tokenizer_save(t, dir), "%s", loom_errmsg());
    Tokenizer *u = tokenizer_load_dir(dir);
    CHECK(u && !strcmp(tokenizer_kind(u), "hf-bpe") && tokenizer_vocab_size(u) == 128003 &&
              tokenizer_eot(u) == 128002,
          "%s", u ? "reloaded differently" : loom_errmsg());
    if (u) {
        TokenList a = {0}, b = {0};
        encode(t, "hello world IT'S", &a);
        encode(u, "hello world IT'S", &b);
        CHECK(a.n == b.n && !memcmp(a.ids, b.ids, a.n * sizeof(int)), "ids after reload");
        token_list_free(&a);
        token_list_free(&b);
    }
    tokenizer_close(u);
    tokenizer_close(t);
    cJSON_Delete(root);
    // no end-of-text name: no separator
    root = base(0);
    cJSON_DeleteItemFromObject(root, "added_tokens");
    t = open_json(root);
    CHECK(t && tokenizer_eot(t) == -1, "%s", t ? "eot without a name" : loom_errmsg());
    tokenizer_close(t);
    cJSON_Delete(root);
}

// The file with one change: a field set to a JSON value (path "a.b", NULL value: removed).
static int refused(const char *path, const char *json, const char *want) {
    cJSON *root = base(0), *o = root;
    char key[64];
    const char *p = path, *dot;
    while ((dot = strchr(p, '.'))) {
        snprintf(key, sizeof key, "%.*s", (int)(dot - p), p);
        o = cJSON_GetObjectItem(o, key);
        p = dot + 1;
    }
    cJSON_DeleteItemFromObject(o, p);
    if (json) cJSON_AddItemToObject(o, p, cJSON_Parse(json));
    Tokenizer *t = open_json(root);
    cJSON_Delete(root);
    int ok = !t && strstr(loom_errmsg(), "tok.json") && strstr(loom_errmsg(), want);
    if (!ok) fprintf(stderr, "    %s: got %s\n", path, t ? "a tokenizer" : loom_errmsg());
    tokenizer_close(t);
    return ok;
}

TEST(bad_files_name_the_file_and_field) {
    CHECK(!tokenizer_open_hf_mem("tok.json", "{\"model\": ", 10) &&
              strstr(loom_errmsg(), "tok.json: not JSON"),
          "%s", loom_errmsg());
    CHECK(!tokenizer_open_hf_mem("tok.json", "[1]", 3) && strstr(loom_errmsg(), "tok.json"), "%s",
          loom_errmsg());
    CHECK(refused("model.vocab", NULL, "model.vocab: missing"), "no vocab");
    CHECK(refused("model.merges", "[\"h e\", \"q \xc4\xa0z\"]", "model.merges[1]: merge"),
          "unknown token in a merge");
    CHECK(refused("model.merges", "[\"h e\", [\"l\"]]", "model.merges[1]: expected"),
          "a one-token pair");
    CHECK(refused("model.merges", NULL, "model.merges: missing"), "no merges");
    CHECK(refused("model.byte_fallback", "true", "model.byte_fallback"), "byte_fallback");
    CHECK(refused("model.type", "\"WordPiece\"", "model.type"), "not BPE");
    CHECK(refused("model.vocab", "{\"a\": 0}", "model.vocab"), "too few tokens");
    CHECK(refused("model.dropout", "0.1", "model.dropout"), "dropout");
    CHECK(refused("model.continuing_subword_prefix", "\"##\"", "continuing_subword_prefix"),
          "subword prefix");
    CHECK(refused("normalizer", "{\"type\": \"NFC\"}", "normalizer"), "a normalizer");
    CHECK(refused("decoder", "{\"type\": \"WordPiece\"}", "decoder"), "a decoder");
    CHECK(refused("pre_tokenizer", NULL, "pre_tokenizer"), "no pre-tokenizer");
    CHECK(refused("pre_tokenizer.add_prefix_space", "true", "pre_tokenizer.add_prefix_space"),
          "add_prefix_space");
    CHECK(refused("pre_tokenizer.use_regex", "false", "pre_tokenizer.use_regex"),
          "ByteLevel without a pattern");
    CHECK(refused("pre_tokenizer",
                  "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                  "\"pattern\": {\"Regex\": \"\\\\w+\"}, \"behavior\": \"Isolated\"}, "
                  "{\"type\": \"ByteLevel\", \"use_regex\": false}]}",
                  "pre_tokenizer.pretokenizers[0].pattern.Regex"),
          "an unknown pattern");
    CHECK(refused("pre_tokenizer", "{\"type\": \"Whitespace\"}", "pre_tokenizer"),
          "another pre-tokenizer");
    CHECK(refused("added_tokens", "[{\"id\": 104, \"content\": \"<x>\"}]", "id 104"),
          "an added token over a vocabulary token");
    CHECK(refused("added_tokens", "[{\"id\": -1, \"content\": \"<x>\"}]", "added_tokens[0].id"),
          "a negative id");
    CHECK(
        refused("added_tokens", "[{\"id\": 9999999, \"content\": \"<x>\"}]", "added_tokens[0].id"),
        "an id past the cap");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/loom_test_tokjson.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(loads_and_encodes);
    RUN(merges_as_pairs_equal_strings);
    RUN(round_trip_any_bytes);
    RUN(llama3_split_on_tricky_strings);
    RUN(ignore_merges_takes_whole_words);
    RUN(added_tokens_past_the_vocabulary);
    RUN(bad_files_name_the_file_and_field);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_summary();
}
