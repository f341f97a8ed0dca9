// test_llmc.c — weight import/export in llm.c's checkpoint format: round trips, the file layout
// against a reference built here (llm.c's group order and vocabulary padding), bf16 (version 5),
// malformed files (-1 naming the file, parameters untouched), and a larger model through both
// formats and across them.

#include "st_test.h"

// ---------------------------------------------------------------- llm.c checkpoints

static const char *llmc_names[16] = {
    "wte.weight",         "wpe.weight",       "ln_1.weight",        "ln_1.bias",
    "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
    "ln_2.weight",        "ln_2.bias",        "mlp.c_fc.weight",    "mlp.c_fc.bias",
    "mlp.c_proj.weight",  "mlp.c_proj.bias",  "ln_f.weight",        "ln_f.bias"};

// The expected llm.c file for model m (fp32, Vp = round_up(V, 128)), built here independently.
static uint8_t *llmc_reference(const GPT *m, size_t *len) {
    const GPTConfig *c = &m->cfg;
    int Vp = (c->V + 127) / 128 * 128;
    float *h = params_of(m);
    size_t cap = 1024 + 4 * (m->nparams + (size_t)(Vp - c->V) * c->C);
    uint8_t *b = xcalloc(cap, 1);
    int32_t hdr[8] = {20240326, 3, c->maxT, c->V, c->L, c->H, c->C, Vp};
    memcpy(b, hdr, sizeof hdr);
    size_t off = 1024;
    for (int g = 0; g < 16; g++) {
        int per_layer = g >= 2 && g <= 13;
        for (int l = 0; l < (per_layer ? c->L : 1); l++) {
            char nm[64];
            if (per_layer)
                snprintf(nm, sizeof nm, "h.%d.%s", l, llmc_names[g]);
            else
                snprintf(nm, sizeof nm, "%s", llmc_names[g]);
            const TensorSpec *t = gpt_find_tensor(m, nm);
            memcpy(b + off, h + t->off, 4 * t->n);
            off += 4 * t->n;
        }
        if (g == 0) off += 4 * (size_t)(Vp - c->V) * c->C; // zero padding rows
    }
    free(h);
    *len = off;
    return b;
}

TEST(llmc_round_trip) {
    GPT a, b;
    make_model(&a, &cfg0, 20);
    const char *p = tpath("rt.bin");
    CHECK(llmc_save_gpt(&a, p) == 0, "%s", loom_errmsg());
    size_t n, rn;
    uint8_t *f = (uint8_t *)read_file(p, &n);
    uint8_t *ref = llmc_reference(&a, &rn);
    CHECK(f && n == rn, "size %zu, want %zu", n, rn);
    CHECK(f && n == rn && !memcmp(f, ref, n), "file differs from the reference llm.c layout");
    GPTConfig c;
    CHECK(llmc_read_config(p, &c) == 0, "%s", loom_errmsg());
    CHECK(!memcmp(&c, &cfg0, sizeof c), "config L%d H%d C%d V%d T%d", c.L, c.H, c.C, c.V, c.maxT);
    make_model(&b, &cfg0, 21);
    CHECK(llmc_load_gpt(&b, p) == 0, "%s", loom_errmsg());
    CHECK(same_params(&a, &b), "params differ after save/load");
    gpt_free(&b);
    make_model(&b, &cfg0, 22);
    CHECK(init_read_config(p, 0, &c) == 0 && c.H == 2, "%s", loom_errmsg());
    CHECK(init_read_config(p, 2, &c) == 0, "%s", loom_errmsg());
    CHECK(init_read_config(p, 4, &c) == -1 && has_msg(p), "conflicting --heads must fail");
    CHECK(gpt_load_init_file(&b, p) == 0 && same_params(&a, &b), "%s", loom_errmsg());
    gpt_free(&b);

    // gpt_save_weights_file picks the format by extension
    const char *q = tpath("ext.bin"), *r = tpath("ext.safetensors");
    CHECK(gpt_save_weights_file(&a, q) == 0 && gpt_save_weights_file(&a, r) == 0, "%s",
          loom_errmsg());
    WeightsFormat wf;
    CHECK(weights_detect(q, &wf) == 0 && wf == WEIGHTS_LLMC, "detect .bin");
    CHECK(weights_detect(r, &wf) == 0 && wf == WEIGHTS_SAFETENSORS, "detect .safetensors");

    // Vp = 0 in the header means "no padding": rows [V, Vp) removed
    {
        int32_t *hdr = (int32_t *)ref;
        int Vp = hdr[7];
        size_t pad = 4 * (size_t)(Vp - cfg0.V) * cfg0.C,
               wte_end = 1024 + 4 * (size_t)cfg0.V * cfg0.C;
        uint8_t *nb = xmalloc(rn - pad);
        memcpy(nb, ref, wte_end);
        memcpy(nb + wte_end, ref + wte_end + pad, rn - wte_end - pad);
        ((int32_t *)nb)[7] = 0;
        const char *pv = tpath("vp0.bin");
        write_bytes(pv, nb, rn - pad);
        make_model(&b, &cfg0, 23);
        CHECK(llmc_load_gpt(&b, pv) == 0, "%s", loom_errmsg());
        CHECK(same_params(&a, &b), "Vp=0 params differ");
        gpt_free(&b);
        free(nb);
    }
    // nonzero junk in the padding rows is ignored
    {
        uint8_t *nb = xmalloc(rn);
        memcpy(nb, ref, rn);
        size_t wte_end = 1024 + 4 * (size_t)cfg0.V * cfg0.C;
        for (size_t i = wte_end; i < wte_end + 4 * 8; i++)
            nb[i] = 0x7f;
        const char *pj = tpath("padjunk.bin");
        write_bytes(pj, nb, rn);
        make_model(&b, &cfg0, 24);
        CHECK(llmc_load_gpt(&b, pj) == 0 && same_params(&a, &b), "%s", loom_errmsg());
        gpt_free(&b);
        free(nb);
    }
    free(f);
    free(ref);
    gpt_free(&a);
}

TEST(llmc_bf16) {
    GPT a, b;
    make_model(&a, &cfg0, 30);
    float *h = params_of(&a);
    for (size_t i = 0; i < a.nparams; i++) { // bf16-exact values
        uint32_t u;
        memcpy(&u, &h[i], 4);
        u &= 0xffff0000u;
        memcpy(&h[i], &u, 4);
    }
    be->upload(a.params, h, a.nparams);
    free(h);
    size_t rn;
    uint8_t *ref = llmc_reference(&a, &rn);
    size_t nf = (rn - 1024) / 4;
    uint8_t *v5 = xmalloc(1024 + 2 * nf);
    memcpy(v5, ref, 1024);
    ((int32_t *)v5)[1] = 5;
    for (size_t i = 0; i < nf; i++) {
        uint32_t u;
        memcpy(&u, ref + 1024 + 4 * i, 4);
        uint16_t hi = (uint16_t)(u >> 16);
        memcpy(v5 + 1024 + 2 * i, &hi, 2);
    }
    const char *p = tpath("v5.bin");
    write_bytes(p, v5, 1024 + 2 * nf);
    GPTConfig c;
    CHECK(llmc_read_config(p, &c) == 0 && !memcmp(&c, &cfg0, sizeof c), "%s", loom_errmsg());
    make_model(&b, &cfg0, 31);
    CHECK(llmc_load_gpt(&b, p) == 0, "%s", loom_errmsg());
    CHECK(same_params(&a, &b), "bf16 params differ");
    gpt_free(&b);
    // a version-5 header with fp32-sized data is a size error
    ((int32_t *)ref)[1] = 5;
    p = tpath("bad_v5size.bin");
    write_bytes(p, ref, rn);
    make_model(&b, &cfg0, 32);
    CHECK(llmc_load_gpt(&b, p) == -1 && has_msg(p), "v5 header, fp32 data");
    gpt_free(&b);
    free(v5);
    free(ref);
    gpt_free(&a);
}

static int expect_bad_llmc(const char *label, const char *path, int cfg_ok) {
    GPT m;
    make_model(&m, &cfg0, 40);
    float *before = params_of(&m);
    int ok = 1;
    int rc = llmc_load_gpt(&m, path);
    if (rc != -1 || !has_msg(path)) {
        fprintf(stderr, "  [%s] llmc_load_gpt: rc %d, %s\n", label, rc, loom_errmsg());
        ok = 0;
    }
    if (getenv("LOOM_TEST_VERBOSE")) fprintf(stderr, "  [%s] %s\n", label, loom_errmsg());
    rc = gpt_load_init_file(&m, path);
    if (rc != -1 || !has_msg(path)) {
        fprintf(stderr, "  [%s] gpt_load_init_file: rc %d, %s\n", label, rc, loom_errmsg());
        ok = 0;
    }
    GPTConfig c;
    rc = llmc_read_config(path, &c);
    if (!cfg_ok && (rc != -1 || !has_msg(path))) {
        fprintf(stderr, "  [%s] llmc_read_config: rc %d, %s\n", label, rc, loom_errmsg());
        ok = 0;
    }
    float *after = params_of(&m);
    if (memcmp(before, after, m.nparams * sizeof(float))) {
        fprintf(stderr, "  [%s] a failed load modified the parameters\n", label);
        ok = 0;
    }
    free(before);
    free(after);
    gpt_free(&m);
    return ok;
}

TEST(llmc_malformed) {
    GPT a;
    make_model(&a, &cfg0, 41);
    size_t rn;
    uint8_t *ref = llmc_reference(&a, &rn);
    uint8_t *b = xmalloc(rn + 8);
    const char *p;
    char name[64];

    struct {
        const char *label;
        int word;
        int32_t value;
        int cfg_ok;
    } hdr_cases[] = {
        {"bad magic", 0, 20240327, 0},
        {"version 4", 1, 4, 0},
        {"version 0", 1, 0, 0},
        {"maxT 0", 2, 0, 0},
        {"V negative", 3, -5, 0},
        {"L 0", 4, 0, 0},
        {"NH 0", 5, 0, 0},
        {"C 0", 6, 0, 0},
        {"Vp < V", 7, 5, 0},
        {"Vp negative", 7, -128, 0},
        {"NH not dividing C", 5, 3, 0},
        {"NH differs from model", 5, 4, 1},
        {"L huge", 4, 0x7fffffff, 0},
        {"C huge", 6, 0x7fffffff, 0},
        {"maxT huge", 2, 0x7fffffff, 0},
        {"Vp huge", 7, 0x7fffffff, 0},
        {"L 1 (size mismatch)", 4, 1, 0},
        {"maxT 5 (size mismatch)", 2, 5, 0},
    };
    for (size_t i = 0; i < sizeof hdr_cases / sizeof hdr_cases[0]; i++) {
        memcpy(b, ref, rn);
        ((int32_t *)b)[hdr_cases[i].word] = hdr_cases[i].value;
        snprintf(name, sizeof name, "bad_hdr%zu.bin", i);
        p = tpath(name);
        write_bytes(p, b, rn);
        CHECK(expect_bad_llmc(hdr_cases[i].label, p, hdr_cases[i].cfg_ok), "%s",
              hdr_cases[i].label);
    }
    // a checkpoint of a different (valid) shape: config reads fine, load into cfg0 refuses
    {
        GPTConfig c2 = cfg0;
        c2.L = 1;
        GPT o;
        make_model(&o, &c2, 42);
        p = tpath("bad_othershape.bin");
        CHECK(llmc_save_gpt(&o, p) == 0, "%s", loom_errmsg());
        CHECK(expect_bad_llmc("different model shape", p, 1), "different model shape");
        gpt_free(&o);
    }
    size_t lens[] = {0, 3, 4, 100, 1023, 1024, 1028, rn / 2, rn - 1, rn + 1, rn + 8};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        memcpy(b, ref, rn);
        memset(b + rn, 0, 8);
        snprintf(name, sizeof name, "bad_len%zu.bin", lens[i]);
        p = tpath(name);
        write_bytes(p, b, lens[i]);
        char label[64];
        snprintf(label, sizeof label, "length %zu of %zu", lens[i], rn);
        CHECK(expect_bad_llmc(label, p, 0), "%s", label);
    }
    // every truncation of the header region, every 7th of the data
    int bad = 0;
    p = tpath("bad_trunc.bin");
    for (size_t len = 0; len < rn; len += len < 1100 ? 1 : 7) {
        write_bytes(p, ref, len);
        GPT m;
        make_model(&m, &cfg0, 43);
        if (llmc_load_gpt(&m, p) != -1 || !has_msg(p)) bad++;
        gpt_free(&m);
    }
    CHECK(bad == 0, "%d truncations not rejected", bad);
    p = tpath("does_not_exist.bin");
    CHECK(expect_bad_llmc("nonexistent", p, 0), "nonexistent");
    free(b);
    free(ref);
    gpt_free(&a);
}

// A model shaped like a real small GPT (C=64, L=3, V=300): layout mistakes that cancel on tiny
// square-ish shapes (e.g. transposes of C×C) still show up as value mismatches here.
TEST(larger_model_round_trips) {
    GPTConfig c = {.L = 3, .H = 4, .C = 64, .V = 300, .maxT = 32};
    GPT a, b;
    make_model(&a, &c, 60);
    const char *p = tpath("big.safetensors"), *q = tpath("big.bin");
    CHECK(st_save_gpt(&a, p) == 0 && llmc_save_gpt(&a, q) == 0, "%s", loom_errmsg());
    GPTConfig r;
    CHECK(init_read_config(p, 0, &r) == 0 && !memcmp(&r, &c, sizeof r), "st config");
    CHECK(init_read_config(q, 0, &r) == 0 && !memcmp(&r, &c, sizeof r), "llmc config");
    make_model(&b, &c, 61);
    CHECK(gpt_load_init_file(&b, p) == 0 && same_params(&a, &b), "st: %s", loom_errmsg());
    gpt_free(&b);
    make_model(&b, &c, 62);
    CHECK(gpt_load_init_file(&b, q) == 0 && same_params(&a, &b), "llmc: %s", loom_errmsg());
    gpt_free(&b);
    // cross-format: safetensors → model → llm.c → model
    make_model(&b, &c, 63);
    CHECK(st_load_gpt(&b, p) == 0 && llmc_save_gpt(&b, q) == 0, "%s", loom_errmsg());
    gpt_free(&b);
    make_model(&b, &c, 64);
    CHECK(llmc_load_gpt(&b, q) == 0 && same_params(&a, &b), "cross-format");
    size_t rn, fn;
    uint8_t *ref = llmc_reference(&a, &rn), *f = (uint8_t *)read_file(q, &fn);
    CHECK(f && rn == fn && !memcmp(ref, f, rn), "llm.c layout (larger model)");
    free(ref);
    free(f);
    StDoc d;
    doc_from_model(&d, &a, "", NULL);
    size_t dn, dh;
    uint8_t *db = doc_bytes(&d, &dn, &dh);
    f = (uint8_t *)read_file(p, &fn);
    uint64_t hn = le64(f);
    CHECK(fn - 8 - hn == dn - 8 - dh && !memcmp(f + 8 + hn, db + 8 + dh, dn - 8 - dh),
          "safetensors layout (larger model)");
    free(db);
    free(f);
    doc_free(&d);
    gpt_free(&b);
    gpt_free(&a);
}

int main(void) {
    if (st_test_begin()) return 1;
    RUN(llmc_round_trip);
    RUN(llmc_bf16);
    RUN(llmc_malformed);
    RUN(larger_model_round_trips);
    return st_test_end();
}
