// test_safetensors_bad.c — a battery of malformed safetensors files and configs, and files of no
// known format: each must return -1 with the file name in the message, never crash (run under
// ASan), and never touch the model's parameters.

#include "st_test.h"

// ---------------------------------------------------------------- malformed safetensors

// Loads path into a model of cfg0 whose params must survive untouched. expect_cfg_fail: the
// config reader must fail too (header-level damage). Returns 1 when everything held.
static int expect_bad(const char *label, const char *path, int expect_cfg_fail) {
    GPT m;
    make_model(&m, &cfg0, 99);
    float *before = params_of(&m);
    int ok = 1;
    loom_fail("(none)");
    int rc = st_load_gpt(&m, path);
    if (rc != -1) {
        fprintf(stderr, "  [%s] st_load_gpt returned %d, want -1\n", label, rc);
        ok = 0;
    } else if (!has_msg(path)) {
        fprintf(stderr, "  [%s] message lacks the file name: %s\n", label, loom_errmsg());
        ok = 0;
    }
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", loom_errmsg());
    rc = gpt_load_init_file(&m, path);
    if (rc != -1 || !has_msg(path)) {
        fprintf(stderr, "  [%s] gpt_load_init_file: rc %d, %s\n", label, rc, loom_errmsg());
        ok = 0;
    }
    float *after = params_of(&m);
    if (memcmp(before, after, m.nparams * sizeof(float))) {
        fprintf(stderr, "  [%s] a failed load modified the parameters\n", label);
        ok = 0;
    }
    GPTConfig c;
    rc = st_read_config(path, 2, &c);
    if (expect_cfg_fail && (rc != -1 || !has_msg(path))) {
        fprintf(stderr, "  [%s] st_read_config: rc %d, %s\n", label, rc, loom_errmsg());
        ok = 0;
    }
    if (getenv("LOOM_TEST_VERBOSE")) fprintf(stderr, "  [%s] %s\n", label, msg);
    free(before);
    free(after);
    gpt_free(&m);
    return ok;
}

// A valid document for cfg0 with metadata; tests mutate it.
static void good_doc(StDoc *d, const GPT *m) {
    doc_from_model(d, m, "", NULL);
    snprintf(d->meta, sizeof d->meta, "{\"format\":\"pt\",\"n_head\":\"2\"}");
}

// Writes the 8-byte length + header text + data (all given), for header-level damage.
static void write_raw_st(const char *path, uint64_t hlen, const char *hdr, size_t hdr_n,
                         const uint8_t *data, size_t data_n) {
    uint8_t *b = xmalloc(8 + hdr_n + data_n);
    for (int k = 0; k < 8; k++)
        b[k] = (uint8_t)(hlen >> (8 * k));
    memcpy(b + 8, hdr, hdr_n);
    if (data_n) memcpy(b + 8 + hdr_n, data, data_n);
    write_bytes(path, b, 8 + hdr_n + data_n);
    free(b);
}

TEST(st_malformed) {
    GPT src;
    make_model(&src, &cfg0, 10);
    StDoc d;
    size_t n, hn;
    good_doc(&d, &src);
    uint8_t *good = doc_bytes(&d, &n, &hn);
    doc_free(&d);
    const char *p;
    // the pristine file loads (guards against the battery passing for the wrong reason)
    p = tpath("good.safetensors");
    write_bytes(p, good, n);
    {
        GPT m;
        make_model(&m, &cfg0, 11);
        CHECK(st_load_gpt(&m, p) == 0, "%s", loom_errmsg());
        CHECK(same_params(&m, &src), "good file round trip");
        gpt_free(&m);
    }

    // --- file-level damage
    p = tpath("bad_empty.safetensors");
    write_bytes(p, "", 0);
    CHECK(expect_bad("empty", p, 1), "empty");
    p = tpath("bad_5bytes.safetensors");
    write_bytes(p, good, 5);
    CHECK(expect_bad("5 bytes", p, 1), "5 bytes");
    p = tpath("bad_lenonly.safetensors");
    write_bytes(p, good, 8);
    CHECK(expect_bad("length only", p, 1), "length only");
    p = tpath("bad_midheader.safetensors");
    write_bytes(p, good, 8 + hn / 2);
    CHECK(expect_bad("truncated mid-header", p, 1), "truncated mid-header");
    p = tpath("bad_lastbyte.safetensors");
    write_bytes(p, good, n - 1);
    CHECK(expect_bad("last byte missing", p, 1), "last byte missing");
    p = tpath("bad_hlen_big.safetensors");
    write_raw_st(p, hn + 1000000, (const char *)good + 8, hn, good + 8 + hn, n - 8 - hn);
    CHECK(expect_bad("header length > file", p, 1), "header length > file");
    p = tpath("bad_hlen_max.safetensors");
    write_raw_st(p, UINT64_MAX, (const char *)good + 8, hn, good + 8 + hn, n - 8 - hn);
    CHECK(expect_bad("header length 2^64-1", p, 1), "header length 2^64-1");
    p = tpath("bad_hlen_small.safetensors");
    write_raw_st(p, 1, (const char *)good + 8, hn, good + 8 + hn, n - 8 - hn);
    CHECK(expect_bad("header length 1", p, 1), "header length 1");
    p = tpath("bad_hlen_short.safetensors"); // header cut: JSON ends early, rest is "data"
    write_raw_st(p, hn - 16, (const char *)good + 8, hn, good + 8 + hn, n - 8 - hn);
    CHECK(expect_bad("header length too short", p, 1), "header length too short");

    // --- header text damage
    struct {
        const char *label, *hdr;
    } texts[] = {
        {"invalid JSON", "{\"wte.weight\": {\"dtype\": \"F32\", "},
        {"JSON array", "[1, 2, 3]"},
        {"JSON string", "\"hello\""},
        {"trailing garbage", "{} xyz"},
        {"entry not an object", "{\"wte.weight\": 3}"},
        {"metadata not an object", "{\"__metadata__\": [1]}"},
        {"empty object", "{}"},
        {"deep nesting",
         "{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]"
         "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}"},
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "bad_text%zu.safetensors", i);
        p = tpath(name);
        write_raw_st(p, strlen(texts[i].hdr), texts[i].hdr, strlen(texts[i].hdr), good, 64);
        CHECK(expect_bad(texts[i].label, p, 1), "%s", texts[i].label);
    }
    { // a NUL byte inside the header
        char *h = xmalloc(hn);
        memcpy(h, good + 8, hn);
        h[hn - 3] = 0;
        p = tpath("bad_nul.safetensors");
        write_raw_st(p, hn, h, hn, good + 8 + hn, n - 8 - hn);
        CHECK(expect_bad("NUL in header", p, 1), "NUL in header");
        free(h);
    }

    // --- per-tensor damage through the document builder
    struct {
        const char *label, *tensor, *field, *value;
        int cfg_fails;
    } muts[] = {
        {"dtype missing", "h.0.ln_1.bias", "dtype", "-", 1},
        {"dtype null", "h.0.ln_1.bias", "dtype", "null", 1},
        {"dtype not a string", "h.0.ln_1.bias", "dtype", "5", 1},
        {"unknown dtype", "h.0.ln_1.bias", "dtype", "\"Q7\"", 1},
        {"unsupported dtype I32", "h.0.ln_1.weight", "dtype", "\"I32\"", 0},
        {"unsupported dtype F64 (size mismatch)", "h.0.ln_1.weight", "dtype", "\"F64\"", 1},
        {"shape non-integer", "h.1.ln_2.bias", "shape", "[1.5]", 1},
        {"shape negative", "h.1.ln_2.bias", "shape", "[-8]", 1},
        {"shape string", "h.1.ln_2.bias", "shape", "[\"8\"]", 1},
        {"shape not an array", "h.1.ln_2.bias", "shape", "8", 1},
        {"shape overflow", "h.1.ln_2.bias", "shape", "[4294967296,4294967296,4294967296]", 1},
        {"shape 1e300", "h.1.ln_2.bias", "shape", "[1e300]", 1},
        {"shape too many dims", "h.1.ln_2.bias", "shape", "[1,1,1,1,1,1,1,1,1,8]", 1},
        {"shape wrong numel", "h.1.ln_2.bias", "shape", "[9]", 1},
        {"wrong shape, same numel", "h.0.attn.c_attn.weight", "shape", "[24,8]", 0},
        {"wrong shape 2-D bias", "ln_f.bias", "shape", "[1,8]", 0},
        {"wrong vocab", "wte.weight", "shape", "[8,11]", 0},
        {"offsets backwards", "ln_f.weight", "offs", "[32,0]", 1},
        {"offsets past the end", "ln_f.bias", "offs", "[100000,100032]", 1},
        {"offsets huge", "ln_f.bias", "offs", "[18446744073709551584,18446744073709551615]", 1},
        {"offsets three numbers", "ln_f.bias", "offs", "[0,16,32]", 1},
        {"offsets one number", "ln_f.bias", "offs", "[0]", 1},
        {"offsets not numbers", "ln_f.bias", "offs", "[\"0\",\"32\"]", 1},
        {"offsets missing", "ln_f.bias", "offs", "-", 1},
        {"offsets null", "ln_f.bias", "offs", "null", 1},
        {"shape missing", "ln_f.bias", "shape", "-", 1},
        {"offsets overlap", "ln_f.bias", "offs", "OVERLAP", 1},
        {"offsets length mismatch", "ln_f.bias", "offs", "SHORT", 1},
    };
    for (size_t i = 0; i < sizeof muts / sizeof muts[0]; i++) {
        good_doc(&d, &src);
        Ent *e = ent_find(&d, muts[i].tensor);
        char *fld = !strcmp(muts[i].field, "dtype")   ? e->dtype
                    : !strcmp(muts[i].field, "shape") ? e->shape
                                                      : e->offs;
        if (!strcmp(muts[i].value, "OVERLAP")) {
            // ln_f.bias claims the bytes of ln_f.weight (same size): compute them
            size_t off = 0;
            for (Ent *x = d.e; x != ent_find(&d, "ln_f.weight"); x++)
                off += x->nbytes;
            snprintf(fld, 64, "[%zu,%zu]", off, off + 32);
        } else if (!strcmp(muts[i].value, "SHORT")) {
            size_t off = 0;
            for (Ent *x = d.e; x != e; x++)
                off += x->nbytes;
            snprintf(fld, 64, "[%zu,%zu]", off, off + 28);
        } else {
            snprintf(fld, 64, "%s", muts[i].value);
        }
        char name[64];
        snprintf(name, sizeof name, "bad_mut%zu.safetensors", i);
        p = tpath(name);
        doc_write(&d, p);
        doc_free(&d);
        CHECK(expect_bad(muts[i].label, p, muts[i].cfg_fails), "%s", muts[i].label);
    }

    // --- whole tensors missing / extra / duplicated
    good_doc(&d, &src);
    Ent *e = ent_find(&d, "h.1.mlp.c_fc.bias");
    free(e->data);
    memmove(e, e + 1, (size_t)(d.e + d.n - (e + 1)) * sizeof *e);
    d.n--;
    p = tpath("bad_missing.safetensors");
    doc_write(&d, p);
    doc_free(&d);
    CHECK(expect_bad("missing tensor", p, 0), "missing tensor");
    CHECK(strstr(loom_errmsg(), "h.1.mlp.c_fc.bias") != NULL, "names the tensor: %s",
          loom_errmsg());

    good_doc(&d, &src);
    float z[8] = {0};
    ent_add(&d, "h.2.ln_1.weight", "F32", "[8]", z, 8);
    p = tpath("bad_extra_layer.safetensors");
    doc_write(&d, p);
    doc_free(&d);
    CHECK(expect_bad("layer beyond the model", p, 0), "extra layer");

    good_doc(&d, &src);
    ent_add(&d, "transformer.ln_f.bias", "F32", "[8]", z, 8);
    p = tpath("bad_duplicate.safetensors");
    doc_write(&d, p);
    doc_free(&d);
    CHECK(expect_bad("duplicate after prefix", p, 1), "duplicate");

    good_doc(&d, &src);
    snprintf(ent_find(&d, "wte.weight")->name, 64, "wte.weight_x");
    p = tpath("bad_no_wte.safetensors");
    doc_write(&d, p);
    doc_free(&d);
    CHECK(expect_bad("no wte", p, 1), "no wte");

    // --- exhaustive truncation: every header length, every 13th data length
    int bad_trunc = 0;
    p = tpath("bad_trunc.safetensors");
    for (size_t len = 0; len < n; len += len < 8 + hn + 8 ? 1 : 13) {
        write_bytes(p, good, len);
        GPT m;
        make_model(&m, &cfg0, 12);
        GPTConfig c;
        int r1 = st_load_gpt(&m, p), ok1 = r1 == -1 && has_msg(p);
        int r2 = st_read_config(p, 2, &c), ok2 = r2 == -1 ? has_msg(p) : 1;
        if (!ok1 || !ok2) {
            if (bad_trunc < 3)
                fprintf(stderr, "  truncated to %zu: load %d, config %d: %s\n", len, r1, r2,
                        loom_errmsg());
            bad_trunc++;
        }
        gpt_free(&m);
    }
    CHECK(bad_trunc == 0, "%d truncations not rejected", bad_trunc);

    // --- random byte corruption of the header: any result but a crash is acceptable, and a
    // failure must name the file
    uint8_t *fz = xmalloc(n);
    uint32_t s = 12345;
    int unnamed = 0;
    p = tpath("fuzz.safetensors");
    for (int it = 0; it < 400; it++) {
        memcpy(fz, good, n);
        int flips = 1 + it % 3;
        for (int k = 0; k < flips; k++) {
            s = s * 1103515245u + 12345u;
            size_t at = (s >> 8) % (8 + hn);
            s = s * 1103515245u + 12345u;
            fz[at] = (uint8_t)(s >> 16);
        }
        write_bytes(p, fz, n);
        GPT m;
        make_model(&m, &cfg0, 13);
        GPTConfig c;
        if (st_load_gpt(&m, p) && !has_msg(p)) unnamed++;
        if (st_read_config(p, 0, &c) && !has_msg(p)) unnamed++;
        gpt_free(&m);
    }
    CHECK(unnamed == 0, "%d fuzz failures without the file name", unnamed);
    free(fz);

    // --- nonexistent file
    p = tpath("does_not_exist.safetensors");
    CHECK(expect_bad("nonexistent", p, 1), "nonexistent");
    free(good);
    gpt_free(&src);
}

TEST(st_config_errors) {
    GPT src;
    make_model(&src, &cfg0, 14);
    StDoc d;
    GPTConfig c;
    struct {
        const char *label, *meta;
        int heads;
    } cases[] = {
        {"n_head not a number", "{\"n_head\":\"abc\"}", 0},
        {"n_head zero", "{\"n_head\":\"0\"}", 0},
        {"n_head as JSON number", "{\"n_head\":2}", 0},
        {"n_head not dividing C", "{\"n_head\":\"3\"}", 0},
        {"n_layer contradicts", "{\"n_head\":\"2\",\"n_layer\":\"3\"}", 0},
        {"n_embd contradicts", "{\"n_head\":\"2\",\"n_embd\":\"16\"}", 0},
        {"vocab_size contradicts", "{\"n_head\":\"2\",\"vocab_size\":\"12\"}", 0},
        {"n_positions contradicts", "{\"n_head\":\"2\",\"n_positions\":\"5\"}", 0},
        {"--heads contradicts", "{\"n_head\":\"2\"}", 4},
        {"no n_head, no --heads", "{\"format\":\"pt\"}", 0},
        {"no metadata, no --heads", "", 0},
        {"--heads not dividing C", "", 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        doc_from_model(&d, &src, "", NULL);
        snprintf(d.meta, sizeof d.meta, "%s", cases[i].meta);
        char name[64];
        snprintf(name, sizeof name, "badcfg%zu.safetensors", i);
        const char *p = tpath(name);
        doc_write(&d, p);
        doc_free(&d);
        int rc = st_read_config(p, cases[i].heads, &c);
        CHECK(rc == -1 && has_msg(p), "%s: rc %d: %s", cases[i].label, rc, loom_errmsg());
        if (getenv("LOOM_TEST_VERBOSE"))
            fprintf(stderr, "  [%s] %s\n", cases[i].label, loom_errmsg());
    }
    // a vocabulary loom cannot hold (> GPT_MAX_VOCAB tokens) is refused, naming the file
    memset(&d, 0, sizeof d);
    size_t bigV = GPT_MAX_VOCAB + 1;
    float *z = xcalloc(bigV * 8, sizeof(float));
    char shape[32];
    snprintf(shape, sizeof shape, "[%zu,8]", bigV);
    ent_add(&d, "wte.weight", "F32", shape, z, bigV * 8);
    ent_add(&d, "wpe.weight", "F32", "[4,8]", z, 32);
    ent_add(&d, "h.0.ln_1.weight", "F32", "[8]", z, 8);
    snprintf(d.meta, sizeof d.meta, "{\"n_head\":\"2\"}");
    const char *p = tpath("badcfg_bigvocab.safetensors");
    doc_write(&d, p);
    doc_free(&d);
    free(z);
    CHECK(st_read_config(p, 0, &c) == -1 && has_msg(p) && strstr(loom_errmsg(), "vocab"),
          "vocab > GPT_MAX_VOCAB: %s", loom_errmsg());
    gpt_free(&src);
}

TEST(detect_unknown_format) {
    const char *p = tpath("garbage.dat");
    write_bytes(p, "hello, this is not a model file at all", 38);
    WeightsFormat f;
    GPTConfig c;
    GPT m;
    make_model(&m, &cfg0, 50);
    CHECK(weights_detect(p, &f) == -1 && has_msg(p), "detect garbage");
    CHECK(init_read_config(p, 2, &c) == -1 && has_msg(p), "config garbage");
    CHECK(gpt_load_init_file(&m, p) == -1 && has_msg(p), "load garbage");
    p = tpath("tiny.dat");
    write_bytes(p, "ab", 2);
    CHECK(gpt_load_init_file(&m, p) == -1 && has_msg(p), "load 2 bytes");
    CHECK(gpt_load_init_file(&m, dir) == -1 && has_msg(dir), "load a directory");
    gpt_free(&m);
}

int main(void) {
    if (st_test_begin()) return 1;
    RUN(st_malformed);
    RUN(st_config_errors);
    RUN(detect_unknown_format);
    return st_test_end();
}
