// test_safetensors.c — weight import/export in the safetensors format: round trips (save → load
// into a second model → bit-identical parameters), the on-disk layout checked against the
// independent writer of st_test.h (Hugging Face names, Conv1D transposes), "transformer."
// prefixes and ignored buffers, F16/BF16 decoding, a save that fails cleanly, and the CRC-32 the
// checkpoint manifests record. Malformed files: test_safetensors_bad.c; llm.c: test_llmc.c.

#include "st_test.h"

// ---------------------------------------------------------------- safetensors

TEST(st_round_trip) {
    GPT a, b;
    make_model(&a, &cfg0, 1);
    const char *p = tpath("rt.safetensors");
    CHECK(st_save_gpt(&a, p) == 0, "%s", loom_errmsg());
    GPTConfig c;
    CHECK(st_read_config(p, 0, &c) == 0, "%s", loom_errmsg());
    CHECK(!memcmp(&c, &cfg0, sizeof c), "config L%d H%d C%d V%d T%d", c.L, c.H, c.C, c.V, c.maxT);
    make_model(&b, &cfg0, 2);
    CHECK(!same_params(&a, &b), "different seeds should differ");
    CHECK(st_load_gpt(&b, p) == 0, "%s", loom_errmsg());
    CHECK(same_params(&a, &b), "params differ after save/load");

    // The file itself: header padded to 8, metadata, and the data section byte-identical to the
    // independent HF-layout writer above (names, order, Conv1D transposes).
    size_t n;
    uint8_t *f = (uint8_t *)read_file(p, &n);
    CHECK(f && n > 8, "read back");
    uint64_t hn = le64(f);
    CHECK(hn % 8 == 0 && 8 + hn <= n, "header length %llu", (unsigned long long)hn);
    char *hj = xmalloc(hn + 1);
    memcpy(hj, f + 8, hn);
    hj[hn] = 0;
    cJSON *root = cJSON_Parse(hj);
    CHECK(root != NULL, "header parses");
    cJSON *meta = cJSON_GetObjectItem(root, "__metadata__");
    const char *keys[] = {"format", "n_head", "n_layer", "n_embd", "vocab_size", "n_positions"};
    const char *vals[] = {"pt", "2", "2", "8", "11", "4"};
    for (int i = 0; i < 6; i++) {
        cJSON *v = cJSON_GetObjectItem(meta, keys[i]);
        CHECK(cJSON_IsString(v) && !strcmp(v->valuestring, vals[i]), "metadata %s", keys[i]);
    }
    cJSON *qkv = cJSON_GetObjectItem(root, "h.1.attn.c_attn.weight");
    cJSON *sh = cJSON_GetObjectItem(qkv, "shape");
    CHECK(cJSON_GetArraySize(sh) == 2 && cJSON_GetArrayItem(sh, 0)->valueint == 8 &&
              cJSON_GetArrayItem(sh, 1)->valueint == 24,
          "c_attn stored as (C, 3C)");
    cJSON *wte = cJSON_GetObjectItem(root, "wte.weight");
    sh = cJSON_GetObjectItem(wte, "shape");
    CHECK(cJSON_GetArrayItem(sh, 0)->valueint == 11 && cJSON_GetArrayItem(sh, 1)->valueint == 8,
          "wte stored as (V, C)");
    CHECK(cJSON_GetArraySize(root) == 1 + a.ntensors, "one entry per tensor + metadata");
    cJSON_Delete(root);
    free(hj);
    StDoc d;
    doc_from_model(&d, &a, "", NULL);
    size_t ref_n, ref_h;
    uint8_t *ref = doc_bytes(&d, &ref_n, &ref_h);
    CHECK(n - 8 - hn == ref_n - 8 - ref_h && !memcmp(f + 8 + hn, ref + 8 + ref_h, n - 8 - hn),
          "data section differs from the reference HF layout");
    free(ref);
    doc_free(&d);
    free(f);

    // no temporary files left behind; saving again replaces the file
    CHECK(st_save_gpt(&b, p) == 0, "%s", loom_errmsg());
    DIR *dd = opendir(dir);
    struct dirent *de;
    int tmps = 0;
    while ((de = readdir(dd)))
        if (strstr(de->d_name, ".tmp")) tmps++;
    closedir(dd);
    CHECK(tmps == 0, "%d temporary files left", tmps);
    gpt_free(&a);
    gpt_free(&b);
}

TEST(st_save_fails_cleanly) {
    GPT a;
    make_model(&a, &cfg0, 1);
    const char *p = tpath("no/such/dir/x.safetensors");
    CHECK(st_save_gpt(&a, p) == -1, "save into a missing directory must fail");
    CHECK(has_msg(p), "message names the file: %s", loom_errmsg());
    CHECK(access(p, F_OK) != 0, "no file created");
    const char *q = tpath("no/such/dir/x.bin");
    CHECK(llmc_save_gpt(&a, q) == -1, "llm.c save into a missing directory must fail");
    CHECK(has_msg(q), "message names the file: %s", loom_errmsg());
    gpt_free(&a);
}

TEST(st_prefix_and_extra_buffers) {
    GPT a, b;
    make_model(&a, &cfg0, 3);
    StDoc d;
    doc_from_model(&d, &a, "transformer.", NULL);
    // HF GPT-2 buffers and the tied head, which loom must ignore
    float mask[16], mb = -1e4f;
    for (int i = 0; i < 16; i++)
        mask[i] = (float)((i % 4) <= (i / 4));
    float *lm = xmalloc(11 * 8 * sizeof(float));
    for (int i = 0; i < 88; i++)
        lm[i] = 42.f;
    ent_add(&d, "transformer.h.0.attn.bias", "F32", "[1,1,4,4]", mask, 16);
    ent_add(&d, "transformer.h.1.attn.bias", "F32", "[1,1,4,4]", mask, 16);
    ent_add(&d, "transformer.h.0.attn.masked_bias", "F32", "[]", &mb, 1);
    ent_add(&d, "lm_head.weight", "F32", "[11,8]", lm, 88);
    free(lm);
    snprintf(d.meta, sizeof d.meta, "{\"format\":\"pt\"}");
    const char *p = tpath("prefix.safetensors");
    doc_write(&d, p);
    GPTConfig c;
    CHECK(st_read_config(p, 0, &c) == -1, "no n_head and no --heads must fail");
    CHECK(has_msg(p) && strstr(loom_errmsg(), "--heads"), "message: %s", loom_errmsg());
    CHECK(st_read_config(p, 2, &c) == 0, "%s", loom_errmsg());
    CHECK(!memcmp(&c, &cfg0, sizeof c), "config L%d H%d C%d V%d T%d", c.L, c.H, c.C, c.V, c.maxT);
    CHECK(init_read_config(p, 2, &c) == 0 && c.L == 2, "%s", loom_errmsg());
    make_model(&b, &cfg0, 4);
    CHECK(st_load_gpt(&b, p) == 0, "%s", loom_errmsg());
    CHECK(same_params(&a, &b), "params differ");
    gpt_free(&b);
    make_model(&b, &cfg0, 5);
    CHECK(gpt_load_init_file(&b, p) == 0, "%s", loom_errmsg());
    CHECK(same_params(&a, &b), "params differ (gpt_load_init_file)");
    doc_free(&d);

    // unprefixed names, with the metadata the peer writes ({"format","n_head"})
    doc_from_model(&d, &a, "", NULL);
    snprintf(d.meta, sizeof d.meta, "{\"format\":\"pt\",\"n_head\":\"2\"}");
    p = tpath("peerlike.safetensors");
    doc_write(&d, p);
    CHECK(st_read_config(p, 0, &c) == 0 && c.H == 2, "%s", loom_errmsg());
    CHECK(st_read_config(p, 2, &c) == 0, "agreeing --heads is fine: %s", loom_errmsg());
    CHECK(st_read_config(p, 4, &c) == -1 && has_msg(p), "conflicting --heads must fail");
    doc_free(&d);
    gpt_free(&a);
    gpt_free(&b);
}

static const char *mixed_dtype(int i) {
    static const char *t[] = {"F16", "BF16", "F32"};
    return t[i % 3];
}

TEST(st_half_precision) {
    GPT a, b;
    make_model(&a, &cfg0, 6);
    // values exactly representable in both F16 and BF16: k/16 for k in [-8, 8]
    float *h = params_of(&a);
    for (size_t i = 0; i < a.nparams; i++)
        h[i] = (float)((int)(i % 17) - 8) / 16.f;
    be->upload(a.params, h, a.nparams);
    free(h);
    const char *names[3] = {"f16.safetensors", "bf16.safetensors", "mixed.safetensors"};
    for (int k = 0; k < 3; k++) {
        StDoc d;
        if (k < 2) {
            const char *want = k == 0 ? "F16" : "BF16";
            memset(&d, 0, sizeof d);
            StDoc tmp;
            doc_from_model(&tmp, &a, "", NULL); // F32 reference entries → re-encode
            for (int i = 0; i < tmp.n; i++) {
                float *x = xmalloc(tmp.e[i].nbytes);
                memcpy(x, tmp.e[i].data, tmp.e[i].nbytes);
                ent_add(&d, tmp.e[i].name, want, tmp.e[i].shape, x, tmp.e[i].nbytes / 4);
                free(x);
            }
            doc_free(&tmp);
        } else {
            doc_from_model(&d, &a, "", mixed_dtype);
        }
        snprintf(d.meta, sizeof d.meta, "{\"n_head\":\"2\"}");
        const char *p = tpath(names[k]);
        doc_write(&d, p);
        make_model(&b, &cfg0, 7);
        CHECK(st_load_gpt(&b, p) == 0, "%s: %s", names[k], loom_errmsg());
        CHECK(same_params(&a, &b), "%s: params differ", names[k]);
        gpt_free(&b);
        doc_free(&d);
    }

    // F16 special values: ±0, subnormals, max, inf, NaN; BF16 likewise
    uint16_t f16[8] = {0x3C00, 0xC000, 0x8000, 0x0001, 0x03FF, 0x7BFF, 0x7C00, 0x7E00};
    float f16_want[8] = {1.f, -2.f, -0.f, 0x1p-24f, 1023 * 0x1p-24f, 65504.f, INFINITY, NAN};
    uint16_t bf[8] = {0x3F80, 0xC000, 0x8000, 0x0001, 0x7F7F, 0xFF80, 0x7FC0, 0x3E80};
    float bf_want[8] = {1.f, -2.f, -0.f, 0x1p-133f, 0x1.fep127f, -INFINITY, NAN, 0.25f};
    for (int i = 0; i < 8; i++) {
        float x = f16_to_f32(f16[i]), y = bf16_to_f32(bf[i]);
        CHECK(isnan(f16_want[i]) ? isnan(x)
                                 : (x == f16_want[i] && signbit(x) == signbit(f16_want[i])),
              "f16 %04x -> %g, want %g", f16[i], x, f16_want[i]);
        CHECK(isnan(bf_want[i]) ? isnan(y) : (y == bf_want[i] && signbit(y) == signbit(bf_want[i])),
              "bf16 %04x -> %g, want %g", bf[i], y, bf_want[i]);
    }
    // and through a file: ln_f.bias (C=8) stored as raw F16 bits
    {
        StDoc d;
        doc_from_model(&d, &a, "", NULL);
        Ent *e = ent_find(&d, "ln_f.bias");
        free(e->data);
        e->data = xmalloc(16);
        memcpy(e->data, f16, 16);
        e->nbytes = 16;
        snprintf(e->dtype, sizeof e->dtype, "\"F16\"");
        const char *p = tpath("f16special.safetensors");
        doc_write(&d, p);
        make_model(&b, &cfg0, 8);
        CHECK(st_load_gpt(&b, p) == 0, "%s", loom_errmsg());
        float *hb = params_of(&b);
        const TensorSpec *t = gpt_find_tensor(&b, "ln_f.bias");
        for (int i = 0; i < 8; i++) {
            float x = hb[t->off + i];
            CHECK(isnan(f16_want[i]) ? isnan(x) : x == f16_want[i], "ln_f.bias[%d] = %g", i, x);
        }
        free(hb);
        gpt_free(&b);
        doc_free(&d);
    }
    gpt_free(&a);
}

// The checksum the checkpoint manifests record: the standard CRC-32 check value, and a CRC
// continued over two pieces equals the CRC of the whole (checkpoint files are hashed that way).
TEST(crc32_values) {
    const char *s = "123456789";
    CHECK(crc32_update(0, s, 9) == 0xCBF43926u, "crc32(123456789) = %08x", crc32_update(0, s, 9));
    CHECK(crc32_update(0, s, 0) == 0, "empty");
    CHECK(crc32_update(crc32_update(0, s, 4), s + 4, 5) == 0xCBF43926u, "continued");
    CHECK(crc32_update(0, "The quick brown fox jumps over the lazy dog", 43) == 0x414FA339u, "fox");
}

int main(void) {
    if (st_test_begin()) return 1;
    RUN(st_round_trip);
    RUN(st_save_fails_cleanly);
    RUN(st_prefix_and_extra_buffers);
    RUN(st_half_precision);
    RUN(crc32_values);
    return st_test_end();
}
