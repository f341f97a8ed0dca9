// test_plot.c — metrics log parsing, smoothing, token counts, axis ticks, SVG and PNG output
// of `loom plot`. The PNG checks use their own CRC-32, Adler-32 and inflate (stored and
// fixed-Huffman blocks), independent of the encoder under test.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/cli/commands.h"
#include "../src/common.h"
#include "../src/io/metrics_read.h"
#include "../src/io/plot.h"
#include "test.h"

static char tmpdir[256];

static const char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", tmpdir, name);
    return p;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

static const char *SAMPLE =
    "{\"step\": 0, \"loss\": 10.9, \"lr\": 0.0001, \"grad_norm\": 5.5, \"step_ms\": 250.0, "
    "\"tokens_per_s\": 32768.0, \"extra\": {\"nested\": [1, 2]}}\n"
    "\n"
    "{\"step\": 1, \"loss\": 9.5, \"lr\": 0.0002, \"grad_norm\": null, \"step_ms\": 256.0, "
    "\"tokens_per_s\": 32000.0}\r\n"
    "{\"event\": \"checkpoint\", \"path\": \"ckpt.bin\"}\n"
    "   {\"step\": 2, \"loss\": 8.25, \"lr\": 0.0003, \"grad_norm\": 2.0, \"step_ms\": 250.0, "
    "\"tokens_per_s\": 32768.0}  \n"
    "{\"step\": 2, \"val_loss\": 8.5}\n"
    "{\"step\": 3, \"loss\": 7.0, \"lr\": 0.0004, \"grad_norm\": \"nan\", \"step_ms\": 250.0, "
    "\"tokens_per_s\": 32768.0}\n"
    // a resumed run restarting after step 2: the old step 3 is superseded
    "{\"step\": 3, \"loss\": 7.5, \"lr\": 0.0004, \"grad_norm\": 1.5, \"step_ms\": 250.0, "
    "\"tokens_per_s\": 32768.0}\n"
    "{\"step\": 4, \"loss\": 6.0, \"lr\": 0.0005, \"grad_norm\": 1.25, \"step_ms\": 250.0, "
    "\"tokens_per_s\": 32768.0}\n"
    "{\"step\": 4, \"val_loss\": 6.5}"; // no final newline

TEST(parse_sample_values) {
    const char *p = tmp_path("sample.jsonl");
    write_text(p, SAMPLE);
    MetricsLog m;
    int rc = metrics_read(p, &m);
    CHECK(rc == 0, "metrics_read: %s", loom_errmsg());
    if (rc) return;
    CHECK(!strcmp(m.path, p), "path %s", m.path);
    CHECK(m.n == 5, "n = %zu", m.n);
    CHECK(m.n_val == 2, "n_val = %zu", m.n_val);
    static const double steps[5] = {0, 1, 2, 3, 4}, loss[5] = {10.9, 9.5, 8.25, 7.5, 6.0};
    for (size_t i = 0; i < 5 && i < m.n; i++) {
        CHECK(m.step[i] == steps[i], "step[%zu] = %g", i, m.step[i]);
        CHECK(m.loss[i] == loss[i], "loss[%zu] = %g", i, m.loss[i]);
    }
    if (m.n == 5) {
        CHECK(m.lr[0] == 0.0001 && m.lr[4] == 0.0005, "lr %g %g", m.lr[0], m.lr[4]);
        CHECK(m.grad_norm[0] == 5.5, "grad_norm[0] %g", m.grad_norm[0]);
        CHECK(isnan(m.grad_norm[1]), "null grad_norm -> NaN, got %g", m.grad_norm[1]);
        CHECK(m.grad_norm[3] == 1.5, "resumed step 3 keeps the new row, grad_norm %g",
              m.grad_norm[3]);
        CHECK(m.step_ms[1] == 256.0 && m.tokens_per_s[1] == 32000.0, "timing %g %g", m.step_ms[1],
              m.tokens_per_s[1]);
        CHECK(isnan(m.tokens[0]), "no tokens key -> NaN");
    }
    if (m.n_val == 2) {
        CHECK(m.val_step[0] == 2 && m.val_loss[0] == 8.5, "val0 %g %g", m.val_step[0],
              m.val_loss[0]);
        CHECK(m.val_step[1] == 4 && m.val_loss[1] == 6.5, "val1 %g %g", m.val_step[1],
              m.val_loss[1]);
    }
    // tokens: median of tokens_per_s * step_ms / 1000 = 8192 per step
    double xt[5], xv[2];
    CHECK(metrics_tokens(&m, xt, xv) == 0, "metrics_tokens: %s", loom_errmsg());
    CHECK(xt[0] == 0 && xt[4] == 4 * 8192.0, "tokens %g %g", xt[0], xt[4]);
    CHECK(xv[0] == 2 * 8192.0, "val tokens %g", xv[0]);
    metrics_free(&m);
    CHECK(m.n == 0 && m.step == NULL, "freed");
}

TEST(tokens_key_and_interpolation) {
    const char *t = "{\"step\":10,\"loss\":3,\"tokens\":1000}\n"
                    "{\"step\":20,\"loss\":2.5,\"tokens\":2000}\n"
                    "{\"step\":15,\"val_loss\":2.7}\n";
    MetricsLog m;
    CHECK(metrics_parse(t, strlen(t), "mem", &m) == 0, "%s", loom_errmsg());
    double xt[2], xv[1];
    CHECK(metrics_tokens(&m, xt, xv) == 0, "%s", loom_errmsg());
    CHECK(xt[0] == 1000 && xt[1] == 2000 && xv[0] == 1500, "%g %g %g", xt[0], xt[1], xv[0]);
    metrics_free(&m);
    const char *u = "{\"step\":1,\"loss\":3}\n";
    CHECK(metrics_parse(u, strlen(u), "notime", &m) == 0, "%s", loom_errmsg());
    CHECK(metrics_tokens(&m, xt, xv) == -1, "no token source must fail");
    CHECK(strstr(loom_errmsg(), "notime") != NULL, "message names the log: %s", loom_errmsg());
    metrics_free(&m);
}

TEST(nonfinite_values) {
    const char *t = "{\"step\":1,\"loss\":3.5,\"note\":\"nan inf\"}\n"
                    "{\"step\":2,\"loss\":nan,\"lr\":inf,\"grad_norm\":-inf,\"ok\":true}\n"
                    "{\"step\":3,\"loss\":-nan,\"lr\":\"Infinity\",\"grad_norm\":null}\n"
                    "{\"step\":4,\"loss\":3.0}\n"
                    "{\"step\":5,\"loss\":2.9}\n";
    MetricsLog m;
    int rc = metrics_parse(t, strlen(t), "nf.jsonl", &m);
    CHECK(rc == 0, "%s", loom_errmsg());
    if (rc) return;
    CHECK(m.n == 5, "n %zu", m.n);
    CHECK(isnan(m.loss[1]) && isinf(m.lr[1]) && m.lr[1] > 0 && isinf(m.grad_norm[1]) &&
              m.grad_norm[1] < 0,
          "%g %g %g", m.loss[1], m.lr[1], m.grad_norm[1]);
    CHECK(isnan(m.loss[2]) && isinf(m.lr[2]) && isnan(m.grad_norm[2]), "row 3");
    // the NaN rows split the training curve into two polylines (1 point -> marker, 2 points)
    uint8_t *buf = NULL;
    size_t len = 0;
    CHECK(plot_render(&m, 1, &(PlotOptions){0}, PLOT_FMT_SVG, &buf, &len) == 0, "%s",
          loom_errmsg());
    if (buf) {
        const char *s = (const char *)buf;
        int n = 0;
        for (const char *p = s; (p = strstr(p, "<polyline")); p++)
            n++;
        CHECK(n == 1, "one polyline for steps 4-5, got %d", n);
        CHECK(strstr(s, "<circle") != NULL, "isolated step 1 drawn as a dot");
    }
    free(buf);
    metrics_free(&m);
    const char *bad = "{\"step\":1,\"loss\":xnan}\n";
    CHECK(metrics_parse(bad, strlen(bad), "nf.jsonl", &m) == -1, "xnan accepted");
}

static void expect_parse_error(const char *text, const char *want) {
    const char *p = tmp_path("bad.jsonl");
    write_text(p, text);
    MetricsLog m;
    int rc = metrics_read(p, &m);
    CHECK(rc == -1, "malformed input accepted: %s", text);
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s%s", p, want);
    CHECK(strstr(loom_errmsg(), prefix) != NULL, "message '%s' lacks '%s'", loom_errmsg(), prefix);
    if (!rc) metrics_free(&m);
}

TEST(malformed_lines_rejected) {
    expect_parse_error(
        "{\"step\":0,\"loss\":1}\n{\"step\":1,\"loss\":0.9}\n{\"step\":2,\"loss\":\n", ":3:");
    expect_parse_error("{\"step\":0,\"loss\":1}\n\n[1,2,3]\n", ":3:");
    expect_parse_error("{\"step\":0,\"loss\":\"high\"}\n", ":1:");
    expect_parse_error("{\"step\":0,\"loss\":1}\n{\"loss\":1}\n", ":2:");
    expect_parse_error("{\"step\":0,\"loss\":1} trailing\n", ":1:");
    expect_parse_error("not json at all\n", ":1:");
    MetricsLog m;
    const char *missing = tmp_path("does-not-exist.jsonl");
    CHECK(metrics_read(missing, &m) == -1, "missing file accepted");
    CHECK(strstr(loom_errmsg(), missing) != NULL, "message names the file: %s", loom_errmsg());
}

TEST(smoothing) {
    double y[6] = {1, 2, 3, 4, NAN, 6}, out[6];
    metrics_smooth(y, 6, 3, out);
    const double want[6] = {1.5, 2, 3, 3.5, NAN, 6};
    for (int i = 0; i < 6; i++) {
        if (isnan(want[i]))
            CHECK(isnan(out[i]), "out[%d] = %g", i, out[i]);
        else
            CHECK(close_enough(out[i], want[i], 1e-12, 1e-12), "out[%d] = %g", i, out[i]);
    }
    metrics_smooth(y, 6, 1, out);
    CHECK(out[0] == 1 && out[5] == 6, "window 1 copies");
    double z[4] = {4, 0, 4, 0};
    metrics_smooth(z, 4, 4, z); // in place; window 4 = 1 before, 2 after
    CHECK(close_enough(z[0], 8.0 / 3, 1e-12, 0) && close_enough(z[1], 2, 1e-12, 0) &&
              close_enough(z[3], 2, 1e-12, 0),
          "%g %g %g %g", z[0], z[1], z[2], z[3]);
}

TEST(nice_ticks) {
    double t[32], st;
    int n = plot_nice_ticks(0, 3000, 7, t, 32, &st);
    CHECK(st == 500 && n == 7 && t[0] == 0 && t[6] == 3000, "n %d step %g", n, st);
    n = plot_nice_ticks(2.31, 11.2, 4, t, 32, &st);
    CHECK(st == 2 && n == 4 && t[0] == 4 && t[3] == 10, "n %d step %g first %g", n, st, t[0]);
    n = plot_nice_ticks(0.0013, 0.0071, 5, t, 32, &st);
    CHECK(close_enough(st, 0.001, 1e-9, 0) && n == 6 && close_enough(t[0], 0.002, 1e-9, 0),
          "n %d step %g", n, st);
    n = plot_nice_ticks(-1, 1, 4, t, 32, &st);
    CHECK(st == 0.5 && n == 5 && t[2] == 0, "n %d step %g", n, st);
}

TEST(format_from_extension) {
    CHECK(plot_format_for("loss.svg") == PLOT_FMT_SVG, "svg");
    CHECK(plot_format_for("out/LOSS.PNG") == PLOT_FMT_PNG, "png");
    CHECK(plot_format_for("loss.jpg") == PLOT_FMT_NONE, "jpg");
    CHECK(plot_format_for("loss") == PLOT_FMT_NONE, "none");
    CHECK(plot_format_for("a.png/loss") == PLOT_FMT_NONE, "dir");
    CHECK(plot_format_for(".png") == PLOT_FMT_NONE, "hidden file");
}

// number of "x,y" pairs in each points="..." attribute, in order
static int polyline_counts(const char *svg, int *counts, int max) {
    int n = 0;
    for (const char *p = svg; (p = strstr(p, "<polyline")) && n < max; p++) {
        const char *a = strstr(p, "points=\"");
        if (!a) break;
        a += 8;
        int k = 0;
        const char *e = strchr(a, '"');
        for (const char *q = a; q < e; q++)
            if (*q == ',') k++;
        counts[n++] = k;
    }
    return n;
}

static int count_str(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

TEST(svg_output) {
    MetricsLog m;
    CHECK(metrics_parse(SAMPLE, strlen(SAMPLE), "runs/a/metrics.jsonl", &m) == 0, "%s",
          loom_errmsg());
    PlotOptions o = {.title = "Loss <a&b>"};
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = plot_render(&m, 1, &o, PLOT_FMT_SVG, &buf, &len);
    CHECK(rc == 0, "%s", loom_errmsg());
    if (rc) return;
    const char *s = (const char *)buf;
    CHECK(strlen(s) == len, "NUL-terminated, length %zu", len);
    CHECK(strstr(s, "<svg") && strstr(s, "</svg>"), "svg element");
    CHECK(count_str(s, "<") == count_str(s, ">"), "balanced angle brackets");
    CHECK(strstr(s, "Loss &lt;a&amp;b&gt;") != NULL, "escaped title");
    int c[16];
    int np = polyline_counts(s, c, 16);
    // train line (5 points), val line (2 points), legend samples (2 points each)
    CHECK(np >= 2 && c[0] == 5, "train polyline has %d points", np ? c[0] : -1);
    CHECK(np >= 2 && c[1] == 2, "val polyline has %d points", np > 1 ? c[1] : -1);
    CHECK(count_str(s, "<circle") == 3, "2 val markers + 1 legend marker, got %d",
          count_str(s, "<circle"));
    free(buf);

    // two logs with the same file name get distinguishing labels; smoothing adds a line each
    MetricsLog two[2];
    CHECK(metrics_parse(SAMPLE, strlen(SAMPLE), "runs/a/metrics.jsonl", &two[0]) == 0, "a");
    CHECK(metrics_parse(SAMPLE, strlen(SAMPLE), "runs/b/metrics.jsonl", &two[1]) == 0, "b");
    o = (PlotOptions){.smooth = 3, .log_y = 1, .x = PLOT_X_TOKENS};
    rc = plot_render(two, 2, &o, PLOT_FMT_SVG, &buf, &len);
    CHECK(rc == 0, "%s", loom_errmsg());
    if (!rc) {
        s = (const char *)buf;
        CHECK(strstr(s, ">a/metrics.jsonl train<") && strstr(s, ">b/metrics.jsonl val<"),
              "legend labels");
        np = polyline_counts(s, c, 16);
        CHECK(np == 2 * 3 + 4, "raw+smoothed+val per log + 4 legend samples, got %d", np);
        free(buf);
    }
    metrics_free(&two[0]);
    metrics_free(&two[1]);
    metrics_free(&m);

    // nothing to draw
    const char *empty = "{\"event\":\"start\"}\n";
    CHECK(metrics_parse(empty, strlen(empty), "empty.jsonl", &m) == 0, "%s", loom_errmsg());
    CHECK(plot_render(&m, 1, &(PlotOptions){0}, PLOT_FMT_SVG, &buf, &len) == -1, "empty log");
    CHECK(strstr(loom_errmsg(), "empty.jsonl") != NULL, "%s", loom_errmsg());
    metrics_free(&m);
}

// ---- independent PNG reader -------------------------------------------------------------------

static uint32_t ref_crc32(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return ~c;
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

typedef struct {
    const uint8_t *p;
    size_t n, pos; // pos in bits
} Bits;

static int bit1(Bits *b) {
    if (b->pos >= 8 * b->n) return -1;
    int v = b->p[b->pos >> 3] >> (b->pos & 7) & 1;
    b->pos++;
    return v;
}

static long bitsn(Bits *b, int n) { // LSB first
    long v = 0;
    for (int i = 0; i < n; i++) {
        int x = bit1(b);
        if (x < 0) return -1;
        v |= (long)x << i;
    }
    return v;
}

static long huff_bits(Bits *b, long code, int n) { // append n bits MSB-first
    for (int i = 0; i < n; i++) {
        int x = bit1(b);
        if (x < 0) return -1;
        code = code << 1 | x;
    }
    return code;
}

static int fixed_litlen(Bits *b) {
    long c = huff_bits(b, 0, 7);
    if (c < 0) return -1;
    if (c <= 23) return 256 + (int)c;
    c = huff_bits(b, c, 1);
    if (c < 0) return -1;
    if (c >= 0x30 && c <= 0xBF) return (int)c - 0x30;
    if (c >= 0xC0 && c <= 0xC7) return 280 + (int)c - 0xC0;
    c = huff_bits(b, c, 1);
    if (c < 0x190 || c > 0x1FF) return -1;
    return 144 + (int)c - 0x190;
}

// zlib inflate supporting stored and fixed-Huffman blocks. Returns output length or -1.
static long ref_inflate(const uint8_t *in, size_t n, uint8_t *out, size_t cap) {
    static const int lbase[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                  31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
    static const int lext[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
    static const int dbase[30] = {1,    2,    3,    4,    5,    7,    9,    13,    17,    25,
                                  33,   49,   65,   97,   129,  193,  257,  385,   513,   769,
                                  1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
    static const int dext[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
    if (n < 6 || (in[0] & 15) != 8 || ((in[0] << 8) | in[1]) % 31 || (in[1] & 32)) return -1;
    Bits b = {in + 2, n - 6, 0};
    size_t o = 0;
    int final = 0;
    while (!final) {
        final = bit1(&b);
        long type = bitsn(&b, 2);
        if (final < 0 || type < 0) return -1;
        if (type == 0) {
            b.pos = (b.pos + 7) & ~(size_t)7;
            size_t k = b.pos / 8;
            if (k + 4 > b.n) return -1;
            unsigned len = b.p[k] | b.p[k + 1] << 8, nlen = b.p[k + 2] | b.p[k + 3] << 8;
            if ((len ^ 0xFFFF) != nlen || k + 4 + len > b.n || o + len > cap) return -1;
            memcpy(out + o, b.p + k + 4, len);
            o += len;
            b.pos = 8 * (k + 4 + len);
        } else if (type == 1) {
            for (;;) {
                int sym = fixed_litlen(&b);
                if (sym < 0 || sym > 285) return -1;
                if (sym < 256) {
                    if (o >= cap) return -1;
                    out[o++] = (uint8_t)sym;
                } else if (sym == 256) {
                    break;
                } else {
                    long e = bitsn(&b, lext[sym - 257]);
                    long dc = huff_bits(&b, 0, 5);
                    if (e < 0 || dc < 0 || dc > 29) return -1;
                    long len = lbase[sym - 257] + e, de = bitsn(&b, dext[dc]);
                    if (de < 0) return -1;
                    long dist = dbase[dc] + de;
                    if ((size_t)dist > o || o + (size_t)len > cap) return -1;
                    for (long i = 0; i < len; i++, o++)
                        out[o] = out[o - (size_t)dist];
                }
            }
        } else {
            return -1; // dynamic Huffman: not produced by our encoder
        }
    }
    uint32_t a = 1, s2 = 0;
    for (size_t i = 0; i < o; i++) {
        a = (a + out[i]) % 65521;
        s2 = (s2 + a) % 65521;
    }
    if (rd32(in + n - 4) != (s2 << 16 | a)) return -1;
    return (long)o;
}

// Parse and check a PNG (8-bit RGB); returns the decoded pixels (malloc'd) or NULL.
static uint8_t *ref_decode_png(const uint8_t *p, size_t n, int *w, int *h) {
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    CHECK(n > 8 && !memcmp(p, sig, 8), "PNG signature");
    if (n <= 8 || memcmp(p, sig, 8)) return NULL;
    size_t pos = 8, zn = 0;
    uint8_t *z = malloc(n);
    int saw_ihdr = 0, saw_iend = 0, bad = 0;
    while (pos + 12 <= n && !saw_iend) {
        uint32_t len = rd32(p + pos);
        if (pos + 12 + len > n) {
            bad = 1;
            break;
        }
        const uint8_t *type = p + pos + 4, *data = p + pos + 8;
        uint32_t crc = rd32(data + len);
        CHECK(crc == ref_crc32(type, 4 + len), "chunk %.4s CRC", (const char *)type);
        if (crc != ref_crc32(type, 4 + len)) bad = 1;
        if (!memcmp(type, "IHDR", 4)) {
            CHECK(pos == 8 && len == 13, "IHDR first, 13 bytes");
            *w = (int)rd32(data);
            *h = (int)rd32(data + 4);
            CHECK(data[8] == 8 && data[9] == 2 && data[10] == 0 && data[11] == 0 && data[12] == 0,
                  "8-bit RGB, no interlace");
            saw_ihdr = 1;
        } else if (!memcmp(type, "IDAT", 4)) {
            memcpy(z + zn, data, len);
            zn += len;
        } else if (!memcmp(type, "IEND", 4)) {
            saw_iend = 1;
        }
        pos += 12 + len;
    }
    CHECK(saw_ihdr && saw_iend && !bad && pos == n, "chunk structure");
    if (!saw_ihdr || bad || *w <= 0 || *h <= 0) {
        free(z);
        return NULL;
    }
    size_t stride = (size_t)*w * 3, rawlen = (stride + 1) * (size_t)*h;
    uint8_t *raw = malloc(rawlen + 1);
    long got = ref_inflate(z, zn, raw, rawlen + 1);
    free(z);
    CHECK(got == (long)rawlen, "IDAT inflates to %zu bytes (got %ld)", rawlen, got);
    if (got != (long)rawlen) {
        free(raw);
        return NULL;
    }
    uint8_t *px = malloc(stride * (size_t)*h);
    for (int y = 0; y < *h; y++) {
        const uint8_t *r = raw + (size_t)y * (stride + 1);
        uint8_t *cur = px + (size_t)y * stride, *up = y ? cur - stride : NULL;
        CHECK(r[0] <= 4, "filter type %d", r[0]);
        for (size_t i = 0; i < stride; i++) {
            int a = i >= 3 ? cur[i - 3] : 0, b = up ? up[i] : 0, c = i >= 3 && up ? up[i - 3] : 0;
            int pred = 0;
            switch (r[0]) {
            case 1: pred = a; break;
            case 2: pred = b; break;
            case 3: pred = (a + b) >> 1; break;
            case 4: {
                int q = a + b - c, pa = abs(q - a), pb = abs(q - b), pc = abs(q - c);
                pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
            } break;
            }
            cur[i] = (uint8_t)(r[i + 1] + pred);
        }
    }
    free(raw);
    return px;
}

TEST(png_encoder_roundtrip) {
    // noise, flat runs and gradients exercise every filter type and long/short matches
    int w = 97, h = 41;
    uint8_t *img = malloc((size_t)w * h * 3);
    uint32_t s = 12345;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                s = s * 1664525u + 1013904223u;
                uint8_t v = y < 10   ? (uint8_t)(s >> 24)
                            : y < 20 ? 255
                                     : (uint8_t)(x * 2 + y + c * 7);
                if (y >= 30 && x > 50) v = (uint8_t)((x / 4) * 17);
                img[((size_t)y * w + x) * 3 + c] = v;
            }
    uint8_t *png = NULL;
    size_t len = 0;
    CHECK(png_encode_rgb(img, w, h, &png, &len) == 0, "%s", loom_errmsg());
    int dw = 0, dh = 0;
    uint8_t *back = png ? ref_decode_png(png, len, &dw, &dh) : NULL;
    CHECK(back && dw == w && dh == h, "decoded %dx%d", dw, dh);
    if (back && dw == w && dh == h)
        CHECK(!memcmp(back, img, (size_t)w * h * 3), "pixels round-trip exactly");
    free(back);
    free(png);
    // a flat image compresses well (LZ77 matches work)
    memset(img, 200, (size_t)w * h * 3);
    CHECK(png_encode_rgb(img, w, h, &png, &len) == 0, "%s", loom_errmsg());
    CHECK(len < 400, "flat %dx%d image is %zu bytes", w, h, len);
    back = ref_decode_png(png, len, &dw, &dh);
    CHECK(back && !memcmp(back, img, (size_t)w * h * 3), "flat image round-trips");
    free(back);
    free(png);
    free(img);
}

TEST(png_chart) {
    MetricsLog m;
    CHECK(metrics_parse(SAMPLE, strlen(SAMPLE), "metrics.jsonl", &m) == 0, "%s", loom_errmsg());
    PlotOptions o = {.width = 640, .height = 400, .smooth = 2};
    uint8_t *png = NULL;
    size_t len = 0;
    int rc = plot_render(&m, 1, &o, PLOT_FMT_PNG, &png, &len);
    CHECK(rc == 0, "%s", loom_errmsg());
    metrics_free(&m);
    if (rc) return;
    CHECK(len > 8 && rd32(png + 8) == 13 && !memcmp(png + 12, "IHDR", 4), "IHDR first");
    CHECK(rd32(png + 16) == 640 && rd32(png + 20) == 400, "IHDR %ux%u", rd32(png + 16),
          rd32(png + 20));
    int w = 0, h = 0;
    uint8_t *px = ref_decode_png(png, len, &w, &h);
    CHECK(px != NULL && w == 640 && h == 400, "decoded %dx%d", w, h);
    if (px) {
        CHECK(px[0] == 255 && px[1] == 255 && px[2] == 255, "white corner");
        size_t blue = 0, orange = 0, dark = 0;
        for (size_t i = 0; i < (size_t)w * h; i++) {
            const uint8_t *q = px + 3 * i;
            if (q[0] == 31 && q[1] == 119 && q[2] == 180) blue++;
            if (q[0] == 255 && q[1] == 127 && q[2] == 14) orange++;
            if (q[0] < 80 && q[1] < 80 && q[2] < 80) dark++;
        }
        CHECK(blue > 100, "train line pixels: %zu", blue);
        CHECK(orange > 20, "validation pixels: %zu", orange);
        CHECK(dark > 200, "text pixels: %zu", dark);
    }
    free(px);
    free(png);
}

// Run cmd_plot in a child process (it may exit via die()); returns the exit status and
// leaves its stderr in `errbuf`.
static int run_cli(char **argv, int argc, char *errbuf, size_t cap) {
    const char *errpath = tmp_path("stderr.txt");
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(errpath, "w", stderr)) _exit(99);
        if (!freopen("/dev/null", "w", stdout)) _exit(99);
        int rc = cmd_plot(argc, argv);
        fflush(stderr);
        _exit(rc);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    errbuf[0] = 0;
    FILE *f = fopen(errpath, "r");
    if (f) {
        size_t k = fread(errbuf, 1, cap - 1, f);
        errbuf[k] = 0;
        fclose(f);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

TEST(cli_exit_codes) {
    char err[4096];
    const char *good = tmp_path("good.jsonl"), *bad = tmp_path("broken.jsonl");
    const char *png = tmp_path("out.png"), *svg = tmp_path("out.svg");
    write_text(good, SAMPLE);
    write_text(bad, "{\"step\":0,\"loss\":1}\n{\"step\":1,\"loss\":0.9}\n{oops}\n");
    char *a1[] = {"plot", (char *)good, "-o", (char *)png, "--smooth", "2", "--log-y", NULL};
    CHECK(run_cli(a1, 7, err, sizeof err) == 0, "plot to PNG: %s", err);
    size_t len = 0;
    char *data = read_file(png, &len);
    CHECK(data && len > 8 && !memcmp(data, "\x89PNG", 4), "PNG written");
    free(data);
    char *a2[] = {"plot", (char *)good, "--x", "tokens", "--title=My run", "-o", (char *)svg, NULL};
    CHECK(run_cli(a2, 7, err, sizeof err) == 0, "plot to SVG: %s", err);
    data = read_file(svg, &len);
    CHECK(data && strstr(data, "<svg") && strstr(data, ">My run<"), "SVG written");
    free(data);

    char *a3[] = {"plot", (char *)good, (char *)bad, "-o", (char *)png, NULL};
    CHECK(run_cli(a3, 5, err, sizeof err) == EXIT_INPUT, "malformed line: exit 3");
    char want[600];
    snprintf(want, sizeof want, "%s:3:", bad);
    CHECK(strstr(err, want) != NULL, "stderr names file:line: %s", err);
    const char *missing = tmp_path("missing.jsonl");
    char *a4[] = {"plot", (char *)missing, "-o", (char *)png, NULL};
    CHECK(run_cli(a4, 4, err, sizeof err) == EXIT_INPUT, "missing file: exit 3");
    CHECK(strstr(err, missing) != NULL, "stderr names the file: %s", err);

    char *u1[] = {"plot", (char *)good, "-o", "loss.jpg", NULL};
    char *u2[] = {"plot", (char *)good, NULL};
    char *u3[] = {"plot", (char *)good, "-o", (char *)png, "--smooth", "zero", NULL};
    char *u4[] = {"plot", (char *)good, "-o", (char *)png, "--x", "time", NULL};
    char *u5[] = {"plot", (char *)good, "-o", (char *)png, "--bogus", NULL};
    char *u6[] = {"plot", "-o", (char *)png, NULL};
    char *u7[] = {"plot", (char *)good, "-o", NULL};
    CHECK(run_cli(u1, 4, err, sizeof err) == EXIT_USAGE && strstr(err, "usage:"), "bad ext");
    CHECK(run_cli(u2, 2, err, sizeof err) == EXIT_USAGE, "no -o");
    CHECK(run_cli(u3, 6, err, sizeof err) == EXIT_USAGE, "bad --smooth");
    CHECK(run_cli(u4, 6, err, sizeof err) == EXIT_USAGE, "bad --x");
    CHECK(run_cli(u5, 5, err, sizeof err) == EXIT_USAGE, "unknown flag");
    CHECK(run_cli(u6, 3, err, sizeof err) == EXIT_USAGE, "no inputs");
    CHECK(run_cli(u7, 3, err, sizeof err) == EXIT_USAGE, "-o without value");
    char *h[] = {"plot", "--help", NULL};
    CHECK(run_cli(h, 2, err, sizeof err) == 0, "--help");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/loom_test_plot.%d", (int)getpid());
    if (mkdir(tmpdir, 0700)) {
        perror(tmpdir);
        return 1;
    }
    RUN(parse_sample_values);
    RUN(tokens_key_and_interpolation);
    RUN(nonfinite_values);
    RUN(malformed_lines_rejected);
    RUN(smoothing);
    RUN(nice_ticks);
    RUN(format_from_extension);
    RUN(svg_output);
    RUN(png_encoder_roundtrip);
    RUN(png_chart);
    RUN(cli_exit_codes);
    static const char *const made[] = {"sample.jsonl", "bad.jsonl", "stderr.txt", "good.jsonl",
                                       "broken.jsonl", "out.png",   "out.svg"};
    for (size_t i = 0; i < sizeof made / sizeof made[0]; i++)
        unlink(tmp_path(made[i]));
    if (rmdir(tmpdir)) perror(tmpdir);
    return test_summary();
}
