// test_fuzz_regress.c — parser hardening regressions.
// 1. Every input that once crashed a parser under `make fuzz` is kept in
//    tests/data/fuzz_regress/<target>/ (in that fuzz target's input format, see
//    fuzz/fuzz_<target>.c) and replayed here through the same parser: it must fail cleanly
//    (-1, a message naming the file), or load when its name contains ".ok.".
// 2. Model shapes from file headers are bounded and a model too large for this machine is an
//    error before any allocation (hardening 2.2).
// 3. Directories and FIFOs given as files are clear errors, never a hang (hardening 2.13).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/backend/backend.h"
#include "../src/cli/options.h"
#include "../src/common.h"
#include "../src/data/shard.h"
#include "../src/data/tokenizer.h"
#include "../src/io/checkpoint.h"
#include "../src/io/llmc_checkpoint.h"
#include "../src/io/metrics_read.h"
#include "../src/io/plot.h"
#include "../src/io/safetensors.h"
#include "../src/io/weights.h"
#include "../src/model/gpt.h"
#include "test.h"

#define REGRESS_DIR "tests/data/fuzz_regress"
static char tmpdir[64];

// Writes data to tmpdir/name and returns the path (static buffer).
static const char *put(const char *name, const void *data, size_t n) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
    return path;
}

// ---------------------------------------------------------------- replaying fuzz inputs

// Each returns the parser's status for one fuzz input; *named gets the name the message must
// contain.
static int run_config(const uint8_t *d, size_t n, const char **named) {
    int layers = 0, steps = 0, shuffle = 0, recompute = 0;
    float lr = 0, beta1 = 0;
    char *schedule = NULL, *data = NULL;
    const Option opts[] = {
        {"layers", OPT_INT, &layers, "", NULL, 1, 1024},
        {"steps", OPT_INT, &steps, "", NULL, 0, 0},
        {"lr", OPT_FLOAT, &lr, "", NULL, 0, 10},
        {"beta1", OPT_FLOAT, &beta1, "", NULL, 0, 0},
        {"lr-schedule", OPT_STR, &schedule, "", "constant|cosine", 0, 0},
        {"data", OPT_STR, &data, "", NULL, 0, 0},
        {"shuffle", OPT_ONOFF, &shuffle, "", NULL, 0, 0},
        {"recompute", OPT_FLAG, &recompute, "", NULL, 0, 0},
    };
    *named = put("config.json", d, n);
    int rc = options_load_json(opts, sizeof opts / sizeof *opts, *named);
    free(schedule);
    free(data);
    return rc;
}

static int run_safetensors(const uint8_t *d, size_t n, const char **named) {
    *named = put("w.safetensors", d, n);
    GPTConfig cfg;
    size_t np;
    int rc = st_read_config(*named, 0, &cfg);
    if (!rc && !gpt_param_count(&cfg, &np) && np <= (1 << 20)) {
        GPT m;
        if (gpt_create(&m, &cfg, backend_cpu())) return -1;
        rc = st_load_gpt(&m, *named);
        gpt_free(&m);
    }
    return rc;
}

static int run_llmc(const uint8_t *d, size_t n, const char **named) {
    *named = put("model.bin", d, n);
    GPTConfig cfg;
    size_t np;
    int rc = llmc_read_config(*named, &cfg);
    if (!rc && !gpt_param_count(&cfg, &np) && np <= (1 << 20)) {
        GPT m;
        if (gpt_create(&m, &cfg, backend_cpu())) return -1;
        rc = llmc_load_gpt(&m, *named);
        gpt_free(&m);
    }
    return rc;
}

static int run_shard(const uint8_t *d, size_t n, const char **named) {
    if (n < 1) return 0;
    int vocab = 2 + d[0] * 257; // as fuzz_shard.c: 255 is 128256 (uint32 shards)
    if (vocab > 65536) vocab = d[0] == 255 ? 128256 : 65536;
    *named = put("shard.bin", d + 1, n - 1);
    DataSet ds;
    int rc = dataset_open(&ds, *named, vocab);
    if (!rc) dataset_close(&ds);
    return rc;
}

static int run_bpe(const uint8_t *d, size_t n, const char **named) {
    const uint8_t *nul = memchr(d, 0, n);
    size_t vlen = nul ? (size_t)(nul - d) : n;
    const uint8_t *m = nul ? nul + 1 : d + n;
    *named = "encoder.json";
    Tokenizer *t =
        tokenizer_open_gpt2_mem("encoder.json", d, vlen, "vocab.bpe", m, (size_t)(d + n - m));
    if (!t) {
        if (strstr(loom_errmsg(), "vocab.bpe")) *named = "vocab.bpe";
        return -1;
    }
    TokenList ids = {0};
    tokenizer_encode(t, d, n, &ids);
    size_t len = 0;
    char *back = tokenizer_decode(t, ids.ids, ids.n, &len);
    int ok = back && len == n && !memcmp(back, d, n);
    free(back);
    token_list_free(&ids);
    tokenizer_close(t);
    return ok ? 0 : -2;
}

static int run_tokjson(const uint8_t *d, size_t n, const char **named) {
    *named = "tokenizer.json";
    Tokenizer *t = tokenizer_open_hf_mem("tokenizer.json", d, n);
    if (!t) return -1;
    TokenList ids = {0};
    tokenizer_encode(t, d, n, &ids);
    size_t len = 0;
    char *back = tokenizer_decode(t, ids.ids, ids.n, &len);
    int ok = back && len == n && !memcmp(back, d, n);
    free(back);
    token_list_free(&ids);
    tokenizer_close(t);
    return ok ? 0 : -2;
}

static int run_metrics(const uint8_t *d, size_t n, const char **named) {
    *named = put("metrics.jsonl", d, n);
    MetricsLog m;
    int rc = metrics_read(*named, &m);
    if (rc) return rc;
    // then `loom plot`, with fuzz_metrics' options
    PlotOptions opt = {.title = "fuzz",
                       .smooth = (int)(n % 5),
                       .x = n & 1 ? PLOT_X_TOKENS : PLOT_X_STEP,
                       .log_y = (n >> 1) & 1,
                       .width = 240,
                       .height = 160};
    uint8_t *out = NULL;
    size_t len = 0;
    rc = plot_render(&m, 1, &opt, (n >> 2) & 1 ? PLOT_FMT_PNG : PLOT_FMT_SVG, &out, &len);
    free(out);
    metrics_free(&m);
    return rc;
}

static int run_state(const uint8_t *d, size_t n, const char **named) {
    if (n < 1) return 0;
    uint8_t sel = d[0];
    uint8_t *file = xmalloc(n);
    memcpy(file, d + 1, n - 1);
    size_t len = n - 1, hdr = 8 + 16 + 3 * 4 + 4;
    if ((sel & 1) && len >= hdr) {
        uint32_t crc = crc32_update(0, file + hdr, len - hdr);
        memcpy(file + hdr - 4, &crc, 4);
    }
    *named = put("co2_0.bin", file, len);
    free(file);
    static const size_t lens_tab[4][3] = {{3, 5, 0}, {0, 0, 0}, {1, 1, 1}, {16, 0, 2}};
    float a0[16], a1[16], a2[16];
    float *const arrays[3] = {a0, a1, a2};
    return state_file_read(*named, (sel >> 6) & 1 ? "co2-sharded" : "co2", (sel >> 5) & 1, 2,
                           arrays, lens_tab[(sel >> 1) & 3],
                           1 + ((sel >> 3) & 1) + ((sel >> 4) & 1), NULL);
}

static const struct {
    const char *target;
    int (*run)(const uint8_t *, size_t, const char **);
} targets[] = {
    {"config", run_config}, {"safetensors", run_safetensors},
    {"llmc", run_llmc},     {"shard", run_shard},
    {"bpe", run_bpe},       {"metrics", run_metrics},
    {"state", run_state},   {"tokjson", run_tokjson},
};

TEST(fuzz_regressions_fail_cleanly) {
    int replayed = 0;
    for (size_t k = 0; k < sizeof targets / sizeof *targets; k++) {
        char dpath[256];
        snprintf(dpath, sizeof dpath, "%s/%s", REGRESS_DIR, targets[k].target);
        DIR *dir = opendir(dpath);
        if (!dir) continue;
        struct dirent *e;
        while ((e = readdir(dir))) {
            if (e->d_name[0] == '.') continue;
            char fpath[600];
            snprintf(fpath, sizeof fpath, "%s/%s", dpath, e->d_name);
            size_t n;
            char *data = read_file(fpath, &n);
            CHECK(data, "%s", loom_errmsg());
            if (!data) continue;
            const char *named = "";
            int rc = targets[k].run((const uint8_t *)data, n, &named);
            if (strstr(e->d_name, ".ok."))
                CHECK(rc == 0, "%s: should load, got %d: %s", fpath, rc, loom_errmsg());
            else
                CHECK(rc == -1 && strstr(loom_errmsg(), named),
                      "%s: want a clean error naming '%s', got %d: %s", fpath, named, rc,
                      loom_errmsg());
            free(data);
            replayed++;
        }
        closedir(dir);
    }
    CHECK(replayed > 0, "no inputs found under %s (run from the repository root)", REGRESS_DIR);
}

// ---------------------------------------------------------------- 2.2: shapes from headers

TEST(shape_bounds) {
    GPTConfig ok = {.L = 2, .H = 2, .C = 8, .V = 11, .maxT = 4};
    size_t n = 0;
    CHECK(gpt_param_count(&ok, &n) == 0 && n == (11 + 4) * 8 + 2 * (12 * 64 + 13 * 8) + 16, "%zu",
          n);
    GPTConfig bad[] = {
        {.L = GPT_MAX_LAYERS + 1, .H = 1, .C = 8, .V = 11, .maxT = 4},
        {.L = 1, .H = 1, .C = GPT_MAX_DIM + 1, .V = 11, .maxT = 4},
        {.L = 1, .H = 1, .C = 8, .V = 11, .maxT = GPT_MAX_BLOCK + 1},
        {.L = 0x7fffffff, .H = 1, .C = 0x7fffffff, .V = 65536, .maxT = 0x7fffffff},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(gpt_config_check(&bad[i]) == -1, "shape %zu accepted", i);
        GPT m;
        CHECK(gpt_create(&m, &bad[i], backend_cpu()) == -1, "shape %zu created", i);
    }
    // in bounds, no overflow, but ~2^56 parameters: refused before allocating
    GPTConfig huge = {.L = GPT_MAX_LAYERS, .H = 1, .C = GPT_MAX_DIM, .V = 65536, .maxT = 1024};
    CHECK(gpt_param_count(&huge, &n) == 0, "%s", loom_errmsg());
    GPT m;
    CHECK(gpt_create(&m, &huge, backend_cpu()) == -1 && strstr(loom_errmsg(), "memory"), "%s",
          loom_errmsg());
}

static const char *llmc_header(int L, int H, int C, int V, int T) {
    uint8_t h[1024] = {0};
    int32_t w[8] = {20240326, 3, T, V, L, H, C, 0};
    memcpy(h, w, sizeof w);
    return put("huge.bin", h, sizeof h);
}

TEST(huge_llmc_header_is_an_error) {
    GPTConfig cfg;
    const char *p = llmc_header(0x7fffffff, 1, 0x7fffffff, 50257, 0x7fffffff);
    CHECK(llmc_read_config(p, &cfg) == -1 && strstr(loom_errmsg(), p), "%s", loom_errmsg());
    p = llmc_header(GPT_MAX_LAYERS + 1, 1, 8, 16, 4);
    CHECK(llmc_read_config(p, &cfg) == -1 && strstr(loom_errmsg(), p), "%s", loom_errmsg());
}

TEST(huge_safetensors_shape_is_an_error) {
    // a well-formed file whose layer names imply 70001 layers: over GPT_MAX_LAYERS
    const char *hdr = "{\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,32]},"
                      "\"wpe.weight\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[32,64]},"
                      "\"h.70000.ln_1.bias\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[64,"
                      "64]},\"__metadata__\":{\"n_head\":\"1\"}}";
    size_t k = strlen(hdr);
    uint8_t buf[600] = {0};
    uint64_t hn = (uint64_t)k;
    memcpy(buf, &hn, 8);
    memcpy(buf + 8, hdr, k);
    const char *p = put("huge.safetensors", buf, 8 + k + 64);
    GPTConfig cfg;
    CHECK(st_read_config(p, 0, &cfg) == -1 && strstr(loom_errmsg(), p) &&
              strstr(loom_errmsg(), "--layers must be in"),
          "%s", loom_errmsg());
}

TEST(many_safetensors_entries_are_fast) {
    // 200k zero-sized tensors (a 13 MB header): the duplicate check was O(n^2), minutes
    enum { N = 200000 };
    size_t cap = (size_t)N * 64 + 64, k = 8;
    char *buf = xmalloc(cap);
    buf[k++] = '{';
    for (int i = 0; i < N; i++)
        k += (size_t)snprintf(buf + k, cap - k,
                              "%s\"x%d\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}",
                              i ? "," : "", i);
    k += (size_t)snprintf(buf + k, cap - k,
                          ",\"x7\":{\"dtype\":\"F32\",\"shape\":[0],"
                          "\"data_offsets\":[0,0]}}");
    uint64_t hn = k - 8;
    memcpy(buf, &hn, 8);
    const char *p = put("many.safetensors", buf, k);
    free(buf);
    GPTConfig cfg;
    double t0 = now_sec();
    CHECK(st_read_config(p, 0, &cfg) == -1 && strstr(loom_errmsg(), "'x7' appears twice"), "%s",
          loom_errmsg());
    CHECK(now_sec() - t0 < 10, "took %.1f s", now_sec() - t0);
}

TEST(deep_models_load_fast) {
    // 65536 layers of C=1 is a 6.5 MB llm.c file; loading looked every tensor up linearly
    // (786k x 786k name comparisons: hours). Now a lookup is a few comparisons.
    GPTConfig c = {.L = GPT_MAX_LAYERS, .H = 1, .C = 1, .V = 2, .maxT = 1};
    GPT m;
    CHECK(gpt_create(&m, &c, backend_cpu()) == 0, "%s", loom_errmsg());
    if (!m.params) return;
    char path[128];
    snprintf(path, sizeof path, "%s/deep.bin", tmpdir);
    double t0 = now_sec();
    CHECK(llmc_save_gpt(&m, path) == 0 && llmc_load_gpt(&m, path) == 0, "%s", loom_errmsg());
    CHECK(now_sec() - t0 < 30, "llm.c save+load took %.1f s", now_sec() - t0);
    unlink(path);
    gpt_free(&m);
    c.L = 16384; // safetensors: a 19 MB header
    CHECK(gpt_create(&m, &c, backend_cpu()) == 0, "%s", loom_errmsg());
    snprintf(path, sizeof path, "%s/deep.safetensors", tmpdir);
    t0 = now_sec();
    CHECK(st_save_gpt(&m, path) == 0 && st_load_gpt(&m, path) == 0, "%s", loom_errmsg());
    CHECK(now_sec() - t0 < 30, "safetensors save+load took %.1f s", now_sec() - t0);
    unlink(path);
    gpt_free(&m);
}

// ---------------------------------------------------------------- 2.13: not regular files

TEST(directories_and_fifos_are_errors) {
    char fifo[128], dir[128], sub[160];
    snprintf(fifo, sizeof fifo, "%s/fifo", tmpdir);
    snprintf(dir, sizeof dir, "%s/shards", tmpdir);
    snprintf(sub, sizeof sub, "%s/sub.bin", dir);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    CHECK(mkdir(dir, 0700) == 0 && mkdir(sub, 0700) == 0, "mkdir");
    size_t n;
    CHECK(!read_file(fifo, &n) && strstr(loom_errmsg(), "FIFO"), "%s", loom_errmsg());
    CHECK(!read_file(tmpdir, &n) && strstr(loom_errmsg(), "directory"), "%s", loom_errmsg());
    DataSet d;
    CHECK(dataset_open(&d, fifo, 256) == -1 && strstr(loom_errmsg(), "not a regular file"), "%s",
          loom_errmsg());
    // a directory of shards whose only *.bin entry is itself a directory
    CHECK(dataset_open(&d, dir, 256) == -1 && strstr(loom_errmsg(), "sub.bin"), "%s",
          loom_errmsg());
    MetricsLog m;
    CHECK(metrics_read(fifo, &m) == -1 && strstr(loom_errmsg(), fifo), "%s", loom_errmsg());
    CHECK(!tokenizer_open_gpt2_files(fifo, fifo) && strstr(loom_errmsg(), fifo), "%s",
          loom_errmsg());
    unlink(fifo);
    rmdir(sub);
    rmdir(dir);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/loom_fuzzregress_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    RUN(fuzz_regressions_fail_cleanly);
    RUN(shape_bounds);
    RUN(huge_llmc_header_is_an_error);
    RUN(huge_safetensors_shape_is_an_error);
    RUN(many_safetensors_entries_are_fast);
    RUN(deep_models_load_fast);
    RUN(directories_and_fifos_are_errors);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) fprintf(stderr, "cleanup failed\n");
    return test_summary();
}
