// cmd_sample.c — `loom sample`: generate text from a checkpoint or weights file with
// temperature and top-k sampling; --dump-logits writes the logits of the prompt (testing).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "../data/tokenizer.h"
#include "../io/model_file.h"
#include "../rng.h"
#include "commands.h"
#include "options.h"

// Samples from the logits of one position: temperature, then top-k (0 = all).
static int sample_token(const float *logits, int V, float temperature, int top_k, Rng *rng) {
    if (temperature <= 0.f) { // greedy
        int best = 0;
        for (int j = 1; j < V; j++)
            best = logits[j] > logits[best] ? j : best;
        return best;
    }
    float *p = xmalloc((size_t)V * sizeof(float));
    float mx = -INFINITY;
    for (int j = 0; j < V; j++)
        mx = logits[j] > mx ? logits[j] : mx;
    float cutoff = -INFINITY;
    if (top_k > 0 && top_k < V) { // k-th largest logit by partial selection
        memcpy(p, logits, (size_t)V * sizeof(float));
        for (int i = 0; i < top_k; i++) {
            int best = i;
            for (int j = i + 1; j < V; j++)
                best = p[j] > p[best] ? j : best;
            float t = p[i];
            p[i] = p[best];
            p[best] = t;
        }
        cutoff = p[top_k - 1];
    }
    double sum = 0;
    for (int j = 0; j < V; j++) {
        p[j] = logits[j] >= cutoff ? expf((logits[j] - mx) / temperature) : 0.f;
        sum += p[j];
    }
    double r = rng_uniform(rng) * sum, acc = 0;
    int pick = V - 1;
    for (int j = 0; j < V; j++) {
        acc += p[j];
        if (acc > r && p[j] > 0) {
            pick = j;
            break;
        }
    }
    free(p);
    return pick;
}

static int parse_tokens(const char *s, TokenList *out, int V) {
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= V)
            return loom_fail("--prompt-tokens: '%s' is not a list of token ids in [0,%d)", s, V);
        token_list_push(out, (int)v);
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return loom_fail("--prompt-tokens: unexpected '%c'", *end);
    }
    return 0;
}

typedef struct {
    char *device, *dtype, *ckpt, *prompt, *prompt_tokens, *tok_dir, *dump;
    int heads, ntokens, top_k, seed, threads;
    float temperature;
} SampleArgs;

// Returns 0 to go on, 1 after --help.
static int sample_parse(int argc, char **argv, SampleArgs *a) {
    *a = (SampleArgs){
        .device = "cpu", .ntokens = 200, .top_k = 40, .seed = 1337, .temperature = 0.8f};
    const Option opts[] = {
        {"ckpt", OPT_STR, &a->ckpt, "checkpoint directory, .safetensors or llm.c .bin", NULL, 0, 0},
        {"prompt", OPT_STR, &a->prompt, "text to continue", NULL, 0, 0},
        {"prompt-tokens", OPT_STR, &a->prompt_tokens,
         "comma-separated token ids instead of --prompt", NULL, 0, 0},
        {"tokens", OPT_INT, &a->ntokens, "tokens to generate", NULL, 0, 1 << 24},
        {"temperature", OPT_FLOAT, &a->temperature, "sampling temperature (0 = greedy)", NULL, 0,
         100},
        {"top-k", OPT_INT, &a->top_k, "sample among the k most likely tokens (0 = all)", NULL, 0,
         1 << 24},
        {"seed", OPT_INT, &a->seed, "sampling seed", NULL, 0, 0},
        {"tokenizer", OPT_STR, &a->tok_dir,
         "tokenizer directory or tokenizer.json (default: the checkpoint's)", NULL, 0, 0},
        {"heads", OPT_INT, &a->heads, "head count for weights files without n_head", NULL, 0, 1024},
        {"threads", OPT_INT, &a->threads, "CPU threads (0 = all cores)", NULL, 0, 4096},
        {"device", OPT_STR, &a->device, "backend: cpu, emu (tests), cuda (a CUDA build)", NULL, 0,
         0},
        {"dtype", OPT_STR, &a->dtype, "precision: fp32, or bf16 on a GPU (default: the device's)",
         "fp32|bf16|fp16", 0, 0},
        {"dump-logits", OPT_STR, &a->dump,
         "write the prompt's logits (T,V) as raw float32 and exit", NULL, 0, 0},
    };
    int rc = options_parse(opts, (int)(sizeof opts / sizeof opts[0]), argc, argv,
                           "usage: loom sample --ckpt DIR|FILE --prompt TEXT", NULL, 0, NULL);
    if (rc < 0) die(EXIT_USAGE, "sample: %s", loom_errmsg());
    if (rc == 0 && !a->ckpt) die(EXIT_USAGE, "sample: --ckpt is required");
    return rc;
}

// --tokenizer, else the checkpoint's tokenizer/, else bytes for a 256-token model (or NULL).
static Tokenizer *sample_tokenizer(const SampleArgs *a, const char *step_dir, int V) {
    Tokenizer *tok = NULL;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s%s", a->tok_dir ? a->tok_dir : step_dir,
             a->tok_dir ? "" : "/tokenizer");
    size_t n = a->tok_dir ? strlen(a->tok_dir) : 0;
    if (n >= 5 && !strcmp(a->tok_dir + n - 5, ".json")) {
        tok = tokenizer_open_hf(a->tok_dir);
        if (!tok) die_last(EXIT_INPUT);
    } else if (a->tok_dir || step_dir[0]) {
        tok = tokenizer_load_dir(dir);
        if (!tok && a->tok_dir) die_last(EXIT_INPUT);
    }
    if (!tok && V == 256) tok = tokenizer_open_byte();
    if (tok && tokenizer_vocab_size(tok) > V)
        die(EXIT_INPUT, "%s: tokenizer has %d tokens but the model's vocab is %d", dir,
            tokenizer_vocab_size(tok), V);
    return tok;
}

static void sample_prompt(const SampleArgs *a, Tokenizer *tok, int V, TokenList *ctx) {
    if (a->prompt_tokens) {
        if (parse_tokens(a->prompt_tokens, ctx, V)) die_last(EXIT_USAGE);
    } else if (a->prompt && *a->prompt) {
        if (!tok)
            die(EXIT_INPUT, "no tokenizer for --prompt (pass --tokenizer DIR or --prompt-tokens)");
        tokenizer_encode(tok, a->prompt, strlen(a->prompt), ctx);
    }
    if (ctx->n == 0)
        token_list_push(ctx, tok && tokenizer_eot(tok) >= 0 ? tokenizer_eot(tok) : '\n' % V);
}

// --dump-logits: the prompt's logits (T,V), downloaded from backend memory.
static void dump_logits(GPT *m, Workspace *ws, const TokenList *ctx, const char *path) {
    int V = m->cfg.V;
    if ((int)ctx->n > m->cfg.maxT)
        die(EXIT_USAGE, "prompt longer than the model's block size %d", m->cfg.maxT);
    ws->T = (int)ctx->n;
    gpt_forward(m, ws, ctx->ids, NULL);
    size_t nl = ctx->n * (size_t)V;
    float *logits = xmalloc(nl * sizeof(float));
    m->be->download(logits, workspace_probs(ws, m), nl);
    if (write_file_atomic(path, logits, nl * sizeof(float))) die_last(EXIT_IO);
    free(logits);
}

static void generate(const SampleArgs *a, GPT *m, Workspace *ws, Tokenizer *tok, TokenList *ctx) {
    int V = m->cfg.V, maxT = m->cfg.maxT;
    Rng rng;
    rng_seed(&rng, (uint64_t)a->seed, 3);
    if (a->prompt) fputs(a->prompt, stdout);
    float *logits = xmalloc((size_t)V * sizeof(float)); // the last position's, on the host
    for (int i = 0; i < a->ntokens; i++) {
        int T = (int)ctx->n < maxT ? (int)ctx->n : maxT;
        ws->T = T; // a workspace runs any T up to the one it was created for
        gpt_forward(m, ws, ctx->ids + ctx->n - T, NULL);
        m->be->download(logits, workspace_probs(ws, m) + (size_t)(T - 1) * V, (size_t)V);
        int next = sample_token(logits, V, a->temperature, a->top_k, &rng);
        token_list_push(ctx, next);
        if (next == tokenizer_eot(tok)) break;
        size_t len;
        const char *bytes = tokenizer_token(tok, next, &len);
        if (bytes) fwrite(bytes, 1, len, stdout);
        fflush(stdout);
    }
    fputc('\n', stdout);
    free(logits);
}

int cmd_sample(int argc, char **argv) {
    SampleArgs a;
    if (sample_parse(argc, argv, &a)) return 0;
    const Backend *be = backend_select_dtype(a.device, a.dtype, a.threads);
    if (!be) die_last(EXIT_USAGE);
    GPT m;
    char step_dir[4096];
    if (model_open(&m, be, a.ckpt, a.heads, step_dir, sizeof step_dir)) die_last(EXIT_INPUT);
    Tokenizer *tok = sample_tokenizer(&a, step_dir, m.cfg.V);
    TokenList ctx = {0};
    sample_prompt(&a, tok, m.cfg.V, &ctx);
    Workspace ws;
    m.want_logits = 1; // the logits of every position (a fused classifier keeps none otherwise)
    if (workspace_create(&ws, &m, 1, m.cfg.maxT, 0)) die_last(EXIT_USAGE);
    if (a.dump) {
        dump_logits(&m, &ws, &ctx, a.dump);
    } else {
        if (!tok) die(EXIT_INPUT, "no tokenizer to decode with (pass --tokenizer DIR)");
        generate(&a, &m, &ws, tok, &ctx);
    }
    token_list_free(&ctx);
    workspace_free(&ws, &m);
    tokenizer_close(tok);
    gpt_free(&m);
    return 0;
}
