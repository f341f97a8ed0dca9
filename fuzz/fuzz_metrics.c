// fuzz_metrics.c — metrics logs (src/io/metrics_read.c): metrics_read on the input as a file,
// then what `loom plot` does with it: metrics_tokens, metrics_smooth and plot_render (SVG, or a
// small PNG; step or token x axis, linear or log y, chosen by the input's size).
#include "../src/common.h"
#include "../src/io/metrics_read.h"
#include "../src/io/plot.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("metrics.jsonl", data, size);
    MetricsLog m;
    if (metrics_read(path, &m)) return 0;
    double *xt = xmalloc((m.n + 1) * sizeof(double)), *xv = xmalloc((m.n_val + 1) * sizeof(double));
    double *sm = xmalloc((m.n + 1) * sizeof(double));
    metrics_tokens(&m, xt, xv);
    metrics_smooth(m.loss, m.n, 1 + (int)(size % 9), sm);
    PlotOptions opt = {.title = "fuzz",
                       .smooth = (int)(size % 5),
                       .x = size & 1 ? PLOT_X_TOKENS : PLOT_X_STEP,
                       .log_y = (size >> 1) & 1,
                       .width = 240,
                       .height = 160};
    uint8_t *out = NULL;
    size_t len = 0;
    if (plot_render(&m, 1, &opt, (size >> 2) & 1 ? PLOT_FMT_PNG : PLOT_FMT_SVG, &out, &len) == 0)
        free(out);
    free(xt);
    free(xv);
    free(sm);
    metrics_free(&m);
    return 0;
}
