// cmd_plot.c — `loom plot`: draw the loss curves of one or more metrics logs as SVG or PNG.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "../io/metrics_read.h"
#include "../io/plot.h"
#include "commands.h"

static void plot_usage(FILE *f) {
    fputs("usage: loom plot METRICS.jsonl [MORE.jsonl ...] -o OUT.svg|OUT.png [options]\n"
          "\n"
          "Draws training loss (and validation loss, where logged) against step, one curve per\n"
          "metrics file. The output format follows the extension of OUT.\n"
          "\n"
          "options:\n"
          "  -o, --output FILE   output image, .svg or .png (required)\n"
          "  --title TEXT        chart title (default \"Training loss\")\n"
          "  --smooth N          centred moving average over N points (raw curve kept faint)\n"
          "  --x step|tokens     x axis: optimizer step (default) or tokens seen\n"
          "  --log-y             logarithmic loss axis\n"
          "  --size WxH          image size in pixels (default 1000x600)\n"
          "  -h, --help          show this help\n",
          f);
}

static int usage_error(const char *fmt, const char *arg) {
    fputs("loom plot: ", stderr);
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    plot_usage(stderr);
    return EXIT_USAGE;
}

static int parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

int cmd_plot(int argc, char **argv) {
    PlotOptions opt = {0};
    const char *out = NULL;
    const char **inputs = xcalloc((size_t)(argc > 0 ? argc : 1), sizeof *inputs);
    int ninputs = 0, only_files = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_files || a[0] != '-' || !a[1]) {
            inputs[ninputs++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_files = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            plot_usage(stdout);
            free(inputs);
            return 0;
        }
        if (!strcmp(a, "--log-y")) {
            opt.log_y = 1;
            continue;
        }
        // options taking a value: "--opt VALUE" or "--opt=VALUE"
        static const char *const names[] = {"-o",       "--output", "--title",
                                            "--smooth", "--x",      "--size"};
        const char *val = NULL;
        int which = -1;
        for (int k = 0; k < (int)(sizeof names / sizeof names[0]) && which < 0; k++) {
            size_t l = strlen(names[k]);
            if (!strcmp(a, names[k])) {
                if (i + 1 >= argc) {
                    free(inputs);
                    return usage_error("option %s needs a value", a);
                }
                which = k;
                val = argv[++i];
            } else if (!strncmp(a, names[k], l) && a[l] == '=' && k > 0) {
                which = k;
                val = a + l + 1;
            }
        }
        int rc = 0;
        switch (which) {
        case 0:
        case 1: out = val; break;
        case 2: opt.title = val; break;
        case 3:
            if (parse_int(val, 1, 1000000, &opt.smooth))
                rc = usage_error("--smooth wants a whole number of points >= 1, not '%s'", val);
            break;
        case 4:
            if (!strcmp(val, "step"))
                opt.x = PLOT_X_STEP;
            else if (!strcmp(val, "tokens"))
                opt.x = PLOT_X_TOKENS;
            else
                rc = usage_error("--x wants 'step' or 'tokens', not '%s'", val);
            break;
        case 5: {
            char w[16] = {0}, h[16] = {0};
            const char *x = strchr(val, 'x');
            if (!x || x == val || (size_t)(x - val) >= sizeof w || strlen(x + 1) >= sizeof h) {
                rc = usage_error("--size wants WIDTHxHEIGHT, not '%s'", val);
                break;
            }
            memcpy(w, val, (size_t)(x - val));
            strcpy(h, x + 1);
            if (parse_int(w, 300, 8192, &opt.width) || parse_int(h, 200, 8192, &opt.height))
                rc = usage_error("--size wants WIDTHxHEIGHT within 300x200..8192x8192, not '%s'",
                                 val);
            break;
        }
        default: rc = usage_error("unknown option '%s'", a);
        }
        if (rc) {
            free(inputs);
            return rc;
        }
    }
    if (!ninputs) {
        free(inputs);
        return usage_error("%s", "no metrics files given");
    }
    if (!out) {
        free(inputs);
        return usage_error("%s", "no output file given (-o OUT.svg or -o OUT.png)");
    }
    if (plot_format_for(out) == PLOT_FMT_NONE) {
        free(inputs);
        return usage_error("output '%s' must end in .svg or .png", out);
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
