// test_plot.c — metrics log parsing, smoothing, token counts, axis ticks, SVG and PNG output
// of `loom plot`. PNGs are read back with libpng (cairo writes them, libpng checks them):
// size, colour type and pixels (white background, the curves' colours, dark text).
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

#include <png.h>

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

static int count_str(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

// In cairo's SVG: a stroked line, a dashed one, and the white ring under each dot or marker.
#define STROKE "style=\"fill:none;stroke-width:"
#define DASHED "stroke-dasharray:6,4;"
#define DOT "fill:rgb(100%,100%,100%);fill-opacity:1;\" d=\"M "

TEST(nonfinite_values) {
    const char *t = "{\"step\":1,\"loss\":3.5,\"note\":\"nan inf\"}\n"
                    "{\"step\":2,\"loss\":null,\"lr\":\"inf\",\"grad_norm\":\"-inf\",\"ok\":true}\n"
                    "{\"step\":3,\"loss\":null,\"lr\":\"Infinity\",\"grad_norm\":null}\n"
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
        int n = count_str(s, STROKE);
        CHECK(n == 1, "one line for steps 4-5, got %d", n);
        CHECK(count_str(s, DOT) == 1, "isolated step 1 drawn as a dot");
    }
    free(buf);
    metrics_free(&m);
    const char *bad = "{\"step\":1,\"loss\":xnan}\n";
    CHECK(metrics_parse(bad, strlen(bad), "nf.jsonl", &m) == -1, "xnan accepted");
    // bare nan / inf are not JSON (test_metrics.c checks the message)
    bad = "{\"step\":2,\"loss\":nan}\n";
    CHECK(metrics_parse(bad, strlen(bad), "nf.jsonl", &m) == -1, "bare nan accepted");
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
    CHECK(!strncmp(s, "<?xml", 5) && strstr(s, "</svg>"), "svg document");
    CHECK(strstr(s, "width=\"1000px\" height=\"600px\"") != NULL, "default size in pixels");
    CHECK(count_str(s, "<") == count_str(s, ">"), "balanced angle brackets");
    // train line, dashed val line, legend samples (one solid, one dashed)
    CHECK(count_str(s, STROKE) == 4, "4 lines, got %d", count_str(s, STROKE));
    CHECK(count_str(s, DASHED) == 2, "2 dashed, got %d", count_str(s, DASHED));
    CHECK(count_str(s, DOT) == 3, "2 val markers + 1 legend marker, got %d", count_str(s, DOT));
    free(buf);

    // two logs: raw + smoothed + val per log, and a legend entry for each of those 4 curves
    MetricsLog two[2];
    CHECK(metrics_parse(SAMPLE, strlen(SAMPLE), "runs/a/metrics.jsonl", &two[0]) == 0, "a");
    CHECK(metrics_parse(SAMPLE, strlen(SAMPLE), "runs/b/metrics.jsonl", &two[1]) == 0, "b");
    o = (PlotOptions){.smooth = 3, .log_y = 1, .x = PLOT_X_TOKENS, .width = 800, .height = 500};
    rc = plot_render(two, 2, &o, PLOT_FMT_SVG, &buf, &len);
    CHECK(rc == 0, "%s", loom_errmsg());
    if (!rc) {
        s = (const char *)buf;
        CHECK(strstr(s, "width=\"800px\" height=\"500px\"") != NULL, "--size");
        CHECK(count_str(s, STROKE) == 2 * 3 + 4, "lines: %d", count_str(s, STROKE));
        CHECK(count_str(s, DASHED) == 2 + 2, "dashed: %d", count_str(s, DASHED));
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

// ---- PNG checks through libpng -----------------------------------------------------------------

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// Decode a PNG with libpng (not the cairo that wrote it); returns 8-bit RGB pixels or NULL.
static uint8_t *decode_png(const uint8_t *p, size_t n, int *w, int *h) {
    CHECK(n > 33 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8) && !memcmp(p + 12, "IHDR", 4),
          "PNG signature, IHDR first");
    if (n > 33) CHECK(p[24] == 8 && p[25] == 2 && p[28] == 0, "8-bit RGB, no interlace");
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, p, n)) {
        CHECK(0, "libpng: %s", im.message);
        return NULL;
    }
    im.format = PNG_FORMAT_RGB;
    uint8_t *px = malloc(PNG_IMAGE_SIZE(im));
    if (!png_image_finish_read(&im, NULL, px, 0, NULL)) {
        CHECK(0, "libpng: %s", im.message);
        free(px);
        return NULL;
    }
    *w = (int)im.width, *h = (int)im.height;
    return px;
}

TEST(png_encoder_roundtrip) {
    // noise, flat runs and gradients
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
    uint8_t *back = png ? decode_png(png, len, &dw, &dh) : NULL;
    CHECK(back && dw == w && dh == h, "decoded %dx%d", dw, dh);
    if (back && dw == w && dh == h)
        CHECK(!memcmp(back, img, (size_t)w * h * 3), "pixels round-trip exactly");
    free(back);
    free(png);
    // a flat image compresses well
    memset(img, 200, (size_t)w * h * 3);
    CHECK(png_encode_rgb(img, w, h, &png, &len) == 0, "%s", loom_errmsg());
    CHECK(len < 400, "flat %dx%d image is %zu bytes", w, h, len);
    back = decode_png(png, len, &dw, &dh);
    CHECK(back && !memcmp(back, img, (size_t)w * h * 3), "flat image round-trips");
    free(back);
    free(png);
    CHECK(png_encode_rgb(img, 0, 5, &png, &len) == -1, "empty image refused");
    free(img);
}

// Pixels within 12 levels per channel of (r, g, b).
static size_t near_color(const uint8_t *px, int w, int h, int r, int g, int b) {
    size_t k = 0;
    for (size_t i = 0; i < (size_t)w * h; i++) {
        const uint8_t *q = px + 3 * i;
        k += abs(q[0] - r) <= 12 && abs(q[1] - g) <= 12 && abs(q[2] - b) <= 12;
    }
    return k;
}

static uint8_t *render_png(const MetricsLog *m, int n, const PlotOptions *o, int *w, int *h) {
    uint8_t *png = NULL;
    size_t len = 0;
    int rc = plot_render(m, n, o, PLOT_FMT_PNG, &png, &len);
    CHECK(rc == 0, "%s", loom_errmsg());
    if (rc) return NULL;
    CHECK(rd32(png + 16) == (uint32_t)o->width && rd32(png + 20) == (uint32_t)o->height,
          "IHDR %ux%u", rd32(png + 16), rd32(png + 20));
    uint8_t *px = decode_png(png, len, w, h);
    free(png);
    CHECK(px && *w == o->width && *h == o->height, "decoded %dx%d", *w, *h);
    return px && *w == o->width && *h == o->height ? px : (free(px), NULL);
}

TEST(png_chart) {
    MetricsLog m[2];
    const char *b = "{\"step\":0,\"loss\":8}\n{\"step\":2,\"loss\":9}\n{\"step\":4,\"loss\":8.5}\n"
                    "{\"step\":3,\"val_loss\":9.5}\n";
    CHECK(metrics_parse(SAMPLE, strlen(SAMPLE), "a/metrics.jsonl", &m[0]) == 0, "a");
    CHECK(metrics_parse(b, strlen(b), "b/metrics.jsonl", &m[1]) == 0, "b");
    PlotOptions o = {.width = 640, .height = 400, .smooth = 2};
    int w = 0, h = 0;
    uint8_t *px = render_png(m, 1, &o, &w, &h);
    if (px) {
        CHECK(px[0] == 255 && px[1] == 255 && px[2] == 255, "white corner");
        CHECK(near_color(px, w, h, 255, 255, 255) > (size_t)w * h / 2, "mostly white");
        size_t blue = near_color(px, w, h, 31, 119, 180),
               orange = near_color(px, w, h, 255, 127, 14);
        size_t red = near_color(px, w, h, 214, 39, 40), dark = near_color(px, w, h, 30, 30, 30);
        CHECK(blue > 100, "train line pixels: %zu", blue);
        CHECK(orange > 20, "validation pixels: %zu", orange);
        CHECK(red == 0, "no second-run colour: %zu", red);
        CHECK(dark > 200, "text pixels: %zu", dark);
    }
    free(px);
    // a second run gets the palette's second colour, for its train and val curves
    o = (PlotOptions){
        .width = 500, .height = 300, .log_y = 1, .title = "bad \xff\xfe utf-8 \xed\xa0\x80"};
    px = render_png(m, 2, &o, &w, &h);
    if (px) {
        size_t blue = near_color(px, w, h, 31, 119, 180), red = near_color(px, w, h, 214, 39, 40);
        CHECK(blue > 100 && red > 100, "both runs drawn: %zu blue, %zu red", blue, red);
        CHECK(near_color(px, w, h, 255, 127, 14) == 0, "no single-run val colour");
    }
    free(px);
    metrics_free(&m[0]);
    metrics_free(&m[1]);
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
    CHECK(data && strstr(data, "<svg") && strstr(data, "</svg>"), "SVG written");
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
