// cmd_plot.c — `loom plot`: draw the loss curves of one or more metrics logs as SVG or PNG.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "../io/metrics_read.h"
#include "../io/plot.h"
#include "commands.h"
#include "options.h"

#define USAGE                                                                                      \
    "usage: loom plot METRICS.jsonl [MORE.jsonl ...] -o OUT.svg|OUT.png [options]\n"               \
    "Draws training loss (and validation loss, where logged) against step, one curve per\n"        \
    "metrics file. The output format follows the extension of OUT."

static int plot_fail(const char *msg) {
    fprintf(stderr, "loom plot: %s\n%.*s (see --help)\n", msg, (int)strcspn(USAGE, "\n"), USAGE);
    return EXIT_USAGE;
}

// "WxH" within 300x200 .. 8192x8192.
static int parse_size(const char *s, int *w, int *h) {
    char *end;
    long a = strtol(s, &end, 10);
    if (end == s || *end != 'x') return -1;
    const char *p = end + 1;
    long b = strtol(p, &end, 10);
    if (end == p || *end || a < 300 || a > 8192 || b < 200 || b > 8192) return -1;
    *w = (int)a, *h = (int)b;
    return 0;
}

int cmd_plot(int argc, char **argv) {
    PlotOptions opt = {0};
    char *out = NULL, *x = "step", *size = NULL, *title = NULL;
    const Option opts[] = {
        {"output|o", OPT_STR, &out, "output image, .svg or .png (required)", NULL, 0, 0},
        {"title", OPT_STR, &title, "chart title (default \"Training loss\")", NULL, 0, 0},
        {"smooth", OPT_INT, &opt.smooth,
         "centred moving average over N points (raw curve kept faint; 0 = off)", NULL, 0, 1000000},
        {"x", OPT_STR, &x, "x axis: optimizer step or tokens seen", "step|tokens", 0, 0},
        {"log-y", OPT_FLAG, &opt.log_y, "logarithmic loss axis", NULL, 0, 0},
        {"size", OPT_STR, &size, "image size WIDTHxHEIGHT in pixels (default 1000x600)", NULL, 0,
         0},
    };
    int n = (int)(sizeof opts / sizeof opts[0]), ninputs = 0;
    char **inputs = xcalloc((size_t)(argc > 0 ? argc : 1), sizeof *inputs);
    int rc = options_parse(opts, n, argc, argv, USAGE, inputs, argc, &ninputs);
    if (rc == 1 || rc < 0) {
        free(inputs);
        return rc == 1 ? 0 : plot_fail(loom_errmsg());
    }
    opt.title = title;
    opt.x = strcmp(x, "tokens") ? PLOT_X_STEP : PLOT_X_TOKENS;
    const char *bad = !ninputs ? "no metrics files given"
                      : !out   ? "no output file given (-o OUT.svg)"
                      : plot_format_for(out) == PLOT_FMT_NONE
                          ? "the output must end in .svg or .png"
                      : size && parse_size(size, &opt.width, &opt.height)
                          ? "--size wants WIDTHxHEIGHT within 300x200..8192x8192"
                          : NULL;
    if (bad) {
        free(inputs);
        return plot_fail(bad);
    }
    MetricsLog *logs = xcalloc((size_t)ninputs, sizeof *logs);
    for (int i = 0; i < ninputs; i++)
        if (metrics_read(inputs[i], &logs[i])) die_last(EXIT_INPUT);
    uint8_t *buf = NULL;
    size_t len = 0;
    // Rendering fails only on its input (no loss values, no token counts).
    if (plot_render(logs, ninputs, &opt, plot_format_for(out), &buf, &len)) die_last(EXIT_INPUT);
    if (write_file_atomic(out, buf, len)) die_last(EXIT_IO);
    free(buf);
    for (int i = 0; i < ninputs; i++)
        metrics_free(&logs[i]);
    free(logs);
    free(inputs);
    return 0;
}
