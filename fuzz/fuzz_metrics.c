// fuzz_metrics.c — metrics logs (src/io/metrics_read.c): metrics_read on the input as a file,
// then what `loom plot` does with the columns (metrics_tokens, metrics_smooth).
#include "../src/common.h"
#include "../src/io/metrics_read.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("metrics.jsonl", data, size);
    MetricsLog m;
    if (metrics_read(path, &m)) return 0;
    double *xt = xmalloc((m.n + 1) * sizeof(double)), *xv = xmalloc((m.n_val + 1) * sizeof(double));
    double *sm = xmalloc((m.n + 1) * sizeof(double));
    metrics_tokens(&m, xt, xv);
    metrics_smooth(m.loss, m.n, 1 + (int)(size % 9), sm);
    free(xt);
    free(xv);
    free(sm);
    metrics_free(&m);
    return 0;
}
