// metrics_read.c — parse a metrics JSON Lines log (cJSON) into column arrays; token-count
// x values and moving-average smoothing for plotting.
#include "metrics_read.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../common.h"

void metrics_free(MetricsLog *m) {
    free(m->path);
    free(m->step);
    free(m->loss);
    free(m->lr);
    free(m->grad_norm);
    free(m->step_ms);
    free(m->tokens_per_s);
    free(m->tokens);
    free(m->val_step);
    free(m->val_loss);
    free(m->val_tokens);
    memset(m, 0, sizeof *m);
}

static double *grow(double *p, size_t cap) {
    double *q = realloc(p, cap * sizeof *q);
    if (!q) die(EXIT_IO, "out of memory reading metrics");
    return q;
}

static void reserve_train(MetricsLog *m) {
    if (m->n < m->cap) return;
    m->cap = m->cap ? 2 * m->cap : 256;
    m->step = grow(m->step, m->cap);
    m->loss = grow(m->loss, m->cap);
    m->lr = grow(m->lr, m->cap);
    m->grad_norm = grow(m->grad_norm, m->cap);
    m->step_ms = grow(m->step_ms, m->cap);
    m->tokens_per_s = grow(m->tokens_per_s, m->cap);
    m->tokens = grow(m->tokens, m->cap);
}

static void reserve_val(MetricsLog *m) {
    if (m->n_val < m->cap_val) return;
    m->cap_val = m->cap_val ? 2 * m->cap_val : 64;
    m->val_step = grow(m->val_step, m->cap_val);
    m->val_loss = grow(m->val_loss, m->cap_val);
    m->val_tokens = grow(m->val_tokens, m->cap_val);
}

// Value of `key` in object `o`: 1 = present (stored in *v; null is NaN, the writer's
// non-finite value; the strings "nan" / "inf" / "-inf" are read too), 0 = absent, -1 = not a
// number.
static int get_num(const cJSON *o, const char *key, double *v) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    *v = NAN;
    if (!it) return 0;
    if (cJSON_IsNumber(it)) {
        *v = it->valuedouble;
        return 1;
    }
    if (cJSON_IsNull(it)) return 1;
    if (cJSON_IsString(it)) {
        const char *s = it->valuestring;
        if (!strcasecmp(s, "nan") || !strcasecmp(s, "-nan") || !strcasecmp(s, "+nan")) return 1;
        if (!strcasecmp(s, "inf") || !strcasecmp(s, "+inf") || !strcasecmp(s, "infinity")) {
            *v = INFINITY;
            return 1;
        }
        if (!strcasecmp(s, "-inf") || !strcasecmp(s, "-infinity")) {
            *v = -INFINITY;
            return 1;
        }
    }
    return -1;
}

// Whether a line that is not JSON holds a bare nan / inf value (as printf writes them), for a
// message that says what is wrong.
static int has_bare_nonfinite(const char *line, size_t len) {
    static const char *tok[] = {":nan",  ":-nan",  ":inf",  ":-inf",
                                ": nan", ": -nan", ": inf", ": -inf"};
    for (size_t t = 0; t < sizeof tok / sizeof tok[0]; t++)
        if (memmem(line, len, tok[t], strlen(tok[t]))) return 1;
    return 0;
}

// Parse one line (`len` bytes at `line`, not NUL-terminated). Returns 0 or -1 with a message.
static int parse_line(MetricsLog *m, const char *line, size_t len, const char *name,
                      size_t lineno) {
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(line, len, &end, 0);
    int trailing = 0;
    if (o && end)
        for (const char *q = end; q < line + len; q++)
            if (*q != ' ' && *q != '\t') trailing = 1;
    if (!o || !cJSON_IsObject(o) || trailing) {
        cJSON_Delete(o);
        return loom_fail("%s:%zu: malformed line (expected a JSON object%s)", name, lineno,
                         has_bare_nonfinite(line, len)
                             ? "; bare nan / inf is not JSON: a value that is not finite is null"
                             : "");
    }
    static const char *keys[] = {"step",    "loss",         "lr",     "grad_norm",
                                 "step_ms", "tokens_per_s", "tokens", "val_loss"};
    enum { K_STEP, K_LOSS, K_LR, K_GN, K_MS, K_TPS, K_TOK, K_VAL, NKEYS };
    double v[NKEYS];
    int have[NKEYS];
    for (int k = 0; k < NKEYS; k++) {
        have[k] = get_num(o, keys[k], &v[k]);
        if (have[k] < 0) {
            cJSON_Delete(o);
            return loom_fail("%s:%zu: malformed line (\"%s\" is not a number)", name, lineno,
                             keys[k]);
        }
    }
    cJSON_Delete(o);
    if (!have[K_LOSS] && !have[K_VAL]) return 0; // some other kind of record
    if (!have[K_STEP] || !isfinite(v[K_STEP]))
        return loom_fail("%s:%zu: malformed line (\"%s\" without a numeric \"step\")", name, lineno,
                         have[K_LOSS] ? "loss" : "val_loss");
    double step = v[K_STEP];
    if (have[K_LOSS]) {
        while (m->n && m->step[m->n - 1] >= step)
            m->n--; // superseded by a resumed run
        reserve_train(m);
        size_t i = m->n++;
        m->step[i] = step;
        m->loss[i] = v[K_LOSS];
        m->lr[i] = v[K_LR];
        m->grad_norm[i] = v[K_GN];
        m->step_ms[i] = v[K_MS];
        m->tokens_per_s[i] = v[K_TPS];
        m->tokens[i] = v[K_TOK];
    }
    if (have[K_VAL]) {
        while (m->n_val && m->val_step[m->n_val - 1] >= step)
            m->n_val--;
        reserve_val(m);
        size_t i = m->n_val++;
        m->val_step[i] = step;
        m->val_loss[i] = v[K_VAL];
        m->val_tokens[i] = v[K_TOK];
    }
    return 0;
}

int metrics_parse(const char *text, size_t len, const char *name, MetricsLog *m) {
    memset(m, 0, sizeof *m);
    size_t namelen = strlen(name);
    m->path = xmalloc(namelen + 1);
    memcpy(m->path, name, namelen + 1);
    size_t lineno = 0, pos = 0;
    while (pos < len) {
        lineno++;
        const char *s = text + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t l = nl ? (size_t)(nl - s) : len - pos;
        pos += l + (nl ? 1 : 0);
        while (l && (s[l - 1] == '\r' || s[l - 1] == ' ' || s[l - 1] == '\t'))
            l--;
        size_t b = 0;
        while (b < l && (s[b] == ' ' || s[b] == '\t'))
            b++;
        if (b == l) continue; // blank line
        if (memchr(s + b, '\0', l - b)) {
            metrics_free(m);
            return loom_fail("%s:%zu: malformed line (NUL byte)", name, lineno);
        }
        if (parse_line(m, s + b, l - b, name, lineno)) {
            metrics_free(m);
            return -1;
        }
    }
    return 0;
}

int metrics_read(const char *path, MetricsLog *m) {
    memset(m, 0, sizeof *m);
    size_t len = 0;
    char *text = read_file(path, &len);
    if (!text) return -1; // read_file's message names the path
    int rc = metrics_parse(text, len, path, m);
    free(text);
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Linear interpolation of y(x) over increasing xs (clamped slope extension at the ends).
static double interp(const double *xs, const double *ys, size_t n, double x) {
    if (n == 1) return ys[0] * (xs[0] != 0 ? x / xs[0] : 1.0);
    size_t lo = 0, hi = n - 1;
    if (x <= xs[0])
        hi = 1;
    else if (x >= xs[n - 1])
        lo = n - 2;
    else {
        while (hi - lo > 1) {
            size_t mid = (lo + hi) / 2;
            if (xs[mid] <= x)
                lo = mid;
            else
                hi = mid;
        }
    }
    double dx = xs[hi] - xs[lo];
    if (dx == 0) return ys[lo];
    return ys[lo] + (ys[hi] - ys[lo]) * (x - xs[lo]) / dx;
}

int metrics_tokens(const MetricsLog *m, double *x_train, double *x_val) {
    int all_tokens = m->n > 0;
    for (size_t i = 0; i < m->n; i++)
        if (!isfinite(m->tokens[i])) all_tokens = 0;
    if (all_tokens) {
        memcpy(x_train, m->tokens, m->n * sizeof *x_train);
        for (size_t i = 0; i < m->n_val; i++)
            x_val[i] = isfinite(m->val_tokens[i])
                           ? m->val_tokens[i]
                           : interp(m->step, m->tokens, m->n, m->val_step[i]);
        return 0;
    }
    double *per = xmalloc((m->n ? m->n : 1) * sizeof *per);
    size_t k = 0;
    for (size_t i = 0; i < m->n; i++) {
        double t = m->tokens_per_s[i] * m->step_ms[i] / 1000.0;
        if (isfinite(t) && t > 0) per[k++] = t;
    }
    if (!k) {
        free(per);
        return loom_fail("%s: cannot count tokens (no \"tokens\", or \"tokens_per_s\" with "
                         "\"step_ms\", in the training rows)",
                         m->path);
    }
    qsort(per, k, sizeof *per, cmp_double);
    double tps = k % 2 ? per[k / 2] : 0.5 * (per[k / 2 - 1] + per[k / 2]);
    free(per);
    // Batches are a whole number of tokens; the timing columns are usually rounded.
    if (tps >= 100) tps = round(tps);
    for (size_t i = 0; i < m->n; i++)
        x_train[i] = m->step[i] * tps;
    for (size_t i = 0; i < m->n_val; i++)
        x_val[i] = isfinite(m->val_tokens[i]) ? m->val_tokens[i] : m->val_step[i] * tps;
    return 0;
}

void metrics_smooth(const double *y, size_t n, int window, double *out) {
    if (window <= 1 || n == 0) {
        if (n) memmove(out, y, n * sizeof *out);
        return;
    }
    // prefix sums of finite values and of their count
    double *sum = xmalloc((n + 1) * sizeof *sum);
    size_t *cnt = xmalloc((n + 1) * sizeof *cnt);
    sum[0] = 0;
    cnt[0] = 0;
    for (size_t i = 0; i < n; i++) {
        int ok = isfinite(y[i]);
        sum[i + 1] = sum[i] + (ok ? y[i] : 0.0);
        cnt[i + 1] = cnt[i] + (size_t)ok;
    }
    size_t before = (size_t)(window - 1) / 2, after = (size_t)window / 2;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(y[i])) {
            out[i] = y[i];
            continue;
        }
        size_t a = i >= before ? i - before : 0;
        size_t b = i + after + 1 < n ? i + after + 1 : n;
        out[i] = (sum[b] - sum[a]) / (double)(cnt[b] - cnt[a]);
    }
    free(sum);
    free(cnt);
}
