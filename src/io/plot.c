// plot.c — loss-curve charts: series, "nice" axes, layout and legend. Cairo draws the
// anti-aliased lines and the text (fontconfig's sans-serif) and writes the file: an image
// surface saved as PNG, or an SVG surface (text as glyph outlines, the same in every viewer).
#include "plot.h"

#include <cairo-svg.h>
#include <cairo.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../common.h"
#include "plot_axis.h"
#include "plot_draw.h"

static const Rgb PALETTE[] = {{31, 119, 180},  {214, 39, 40},  {44, 160, 44},
                              {148, 103, 189}, {140, 86, 75},  {227, 119, 194},
                              {23, 190, 207},  {188, 189, 34}, {127, 127, 127}};
static const Rgb VAL_SINGLE = {255, 127, 14}; // validation colour when there is one log
static const Rgb WHITE = {255, 255, 255}, GRID = {232, 232, 232}, FRAME = {140, 140, 140},
                 TICK_TEXT = {60, 60, 60}, LABEL_TEXT = {40, 40, 40}, TITLE_TEXT = {20, 20, 20},
                 LEGEND_EDGE = {200, 200, 200};

// ---------------------------------------------------------------------------------------------
// Chart

typedef struct {
    const MetricsLog *log;
    char label[128];
    Rgb color, val_color;
    double *x, *xv; // x of the training and validation rows
    double *ys;     // smoothed loss (or NULL)
} Series;

typedef struct {
    cairo_t *cr;
    int w, h;
    int L, T, R, B; // plot rectangle, pixels
    Axis ax, ay;
    Series *sr;
    int ns, any_val;
} Chart;

// Pixel coordinates are clamped far outside the image but well inside int: a point off the
// chart (a smoothed value outside the raw range) still converts safely and is clipped.
static double clamp_px(double v) { return !(v > -1e5) ? -1e5 : v > 1e5 ? 1e5 : v; }
static double fx(const Chart *c, double x) {
    return clamp_px(c->L + axis_frac(&c->ax, x) * (c->R - c->L));
}
static double fy(const Chart *c, double y) {
    return clamp_px(c->B - axis_frac(&c->ay, y) * (c->B - c->T));
}
// Values a chart can hold: finite, |v| <= PLOT_MAX_ABS and, on a log axis, >= 1/PLOT_MAX_ABS;
// others are skipped like NaN, so axis arithmetic (ranges, log10, tick spacing) stays finite.
#define PLOT_MAX_ABS 1e100
static int val_ok(double v, int log) {
    return isfinite(v) && fabs(v) <= PLOT_MAX_ABS && (!log || v >= 1 / PLOT_MAX_ABS);
}
static int y_ok(const Chart *c, double y) { return val_ok(y, c->ay.log); }

// The last `k` components of a path (the whole path when it has fewer).
static const char *path_tail(const char *p, int k) {
    const char *end = p + strlen(p);
    while (end > p && end[-1] == '/')
        end--;
    const char *q = end;
    for (int i = 0; i < k; i++) {
        while (q > p && q[-1] != '/')
            q--;
        if (q == p) return p;
        if (i + 1 < k) q--;
    }
    return q;
}

// Legend names: file names, with as many parent directories as it takes to tell them apart.
static void make_labels(Series *sr, int n) {
    for (int k = 1; k <= 64; k++) {
        for (int i = 0; i < n; i++) {
            snprintf(sr[i].label, sizeof sr[i].label, "%s", path_tail(sr[i].log->path, k));
            size_t l = strlen(sr[i].label);
            while (l > 1 && sr[i].label[l - 1] == '/')
                sr[i].label[--l] = 0;
        }
        int dup = 0;
        for (int i = 0; i < n && !dup; i++)
            for (int j = i + 1; j < n; j++)
                if (!strcmp(sr[i].label, sr[j].label)) dup = 1;
        if (!dup) return;
    }
}

// Long runs keep at most the first, lowest, highest and last point of each pixel column.
static size_t thin(double *px, double *py, size_t m) {
    size_t k = 0, a = 0;
    while (a < m) {
        long col = lrint(floor(px[a]));
        size_t b = a, lo = a, hi = a;
        while (b < m && lrint(floor(px[b])) == col) {
            if (py[b] < py[lo]) lo = b;
            if (py[b] > py[hi]) hi = b;
            b++;
        }
        size_t keep[4] = {a, lo < hi ? lo : hi, lo < hi ? hi : lo, b - 1};
        for (int q = 0; q < 4; q++)
            if (!q || keep[q] != keep[q - 1]) px[k] = px[keep[q]], py[k] = py[keep[q]], k++;
        a = b;
    }
    return k;
}

// Draw the finite runs of (x[i], y[i]) as polylines; a lone point as a dot.
static void draw_series(const Chart *c, const double *x, const double *y, size_t n, Rgb col,
                        double width, double alpha, int dashed) {
    double *px = xmalloc((n ? n : 1) * sizeof *px), *py = xmalloc((n ? n : 1) * sizeof *py);
    size_t i = 0;
    while (i < n) {
        while (i < n && !(y_ok(c, y[i]) && val_ok(x[i], 0)))
            i++;
        size_t m = 0;
        for (; i < n && y_ok(c, y[i]) && val_ok(x[i], 0); i++, m++)
            px[m] = fx(c, x[i]), py[m] = fy(c, y[i]);
        if (m > (size_t)(4 * (c->R - c->L))) m = thin(px, py, m);
        if (m == 1 && !dashed)
            draw_marker(c->cr, px[0], py[0], 3, col);
        else if (m)
            draw_polyline(c->cr, px, py, m, col, width, alpha, dashed);
    }
    free(px);
    free(py);
}

typedef struct {
    Rgb c;
    int dashed; // a validation entry: dashed line with a marker
    char text[160];
} LegendItem;

// Data points (training and validation rows, in pixels) inside a box.
static size_t points_in(const Chart *c, double x0, double y0, double x1, double y1) {
    size_t k = 0;
    for (int i = 0; i < c->ns; i++)
        for (int pass = 0; pass < 2; pass++) {
            const MetricsLog *m = c->sr[i].log;
            size_t n = pass ? m->n_val : m->n;
            const double *xs = pass ? c->sr[i].xv : c->sr[i].x, *ys = pass ? m->val_loss : m->loss;
            for (size_t j = 0; j < n; j++) {
                if (!y_ok(c, ys[j])) continue;
                double px = fx(c, xs[j]), py = fy(c, ys[j]);
                if (px >= x0 && px <= x1 && py >= y0 && py <= y1) k++;
            }
        }
    return k;
}

// The legend goes in the corner of the plot that covers the fewest data points (top right
// on ties, where a falling loss curve leaves room).
static void draw_legend(const Chart *c, const LegendItem *it, int n) {
    double th = draw_cap_height(ROLE_LEGEND), row = fmax(th * 1.9, 18), sample = 28, gap = 8,
           pad = 10;
    double tw = 0;
    for (int i = 0; i < n; i++)
        tw = fmax(tw, draw_text_width(c->cr, ROLE_LEGEND, it[i].text));
    int bw = (int)ceil(pad + sample + gap + tw + pad), bh = (int)ceil(2 * pad - th + n * row);
    int x0 = 0, y0 = 0;
    size_t best = (size_t)-1;
    for (int corner = 0; corner < 4; corner++) { // top right, top left, bottom left, bottom right
        int right = corner == 0 || corner == 3, top = corner < 2;
        int cx0 = right ? c->R - 12 - bw : c->L + 12, cy0 = top ? c->T + 12 : c->B - 12 - bh;
        if (cx0 < c->L + 4) cx0 = c->L + 4;
        size_t k = points_in(c, cx0 - 4, cy0 - 4, cx0 + bw + 4, cy0 + bh + 4);
        if (k < best) best = k, x0 = cx0, y0 = cy0;
    }
    cairo_rectangle(c->cr, x0, y0, bw, bh);
    draw_rgb(c->cr, WHITE, 0.88);
    cairo_fill(c->cr);
    draw_box(c->cr, x0, y0, x0 + bw, y0 + bh, LEGEND_EDGE);
    for (int i = 0; i < n; i++) {
        double cy = y0 + pad + th / 2 + i * row;
        double xs[2] = {x0 + pad, x0 + pad + sample}, ys[2] = {cy, cy};
        draw_polyline(c->cr, xs, ys, 2, it[i].c, it[i].dashed ? 1.5 : 2.0, 1, it[i].dashed);
        if (it[i].dashed) draw_marker(c->cr, x0 + pad + sample / 2, cy, 3.5, it[i].c);
        draw_text(c->cr, x0 + pad + sample + gap, cy, it[i].text, ROLE_LEGEND, ANCHOR_START, 0,
                  LABEL_TEXT);
    }
}

// One entry per curve ("NAME train", "NAME val"; just "train"/"val" for a single log); none
// for a single log without validation.
static void legend(Chart *c) {
    if (c->ns == 1 && !c->any_val) return;
    make_labels(c->sr, c->ns);
    LegendItem *it = xcalloc(2 * (size_t)c->ns, sizeof *it);
    int n = 0;
    for (int i = 0; i < c->ns; i++) {
        const Series *s = &c->sr[i];
        const char *name = c->ns == 1 ? "" : s->label, *sep = c->ns == 1 ? "" : " ";
        if (s->log->n) {
            it[n].c = s->color;
            snprintf(it[n++].text, sizeof it->text, "%s%s%s", name, c->any_val ? sep : "",
                     c->any_val ? "train" : "");
        }
        if (s->log->n_val) {
            it[n].c = s->val_color, it[n].dashed = 1;
            snprintf(it[n++].text, sizeof it->text, "%s%sval", name, sep);
        }
    }
    if (n) draw_legend(c, it, n);
    free(it);
}

// x values, smoothing, colours and the data range [x0, x1] x [y0, y1] of every log.
static int series_init(Chart *c, const MetricsLog *logs, const PlotOptions *o, double r[4]) {
    r[0] = r[2] = INFINITY, r[1] = r[3] = -INFINITY;
    for (int i = 0; i < c->ns; i++) {
        const MetricsLog *m = &logs[i];
        Series *s = &c->sr[i];
        s->log = m;
        s->color = PALETTE[i % (int)(sizeof PALETTE / sizeof PALETTE[0])];
        s->val_color = c->ns == 1 ? VAL_SINGLE : s->color;
        s->x = xmalloc((m->n ? m->n : 1) * sizeof(double));
        s->xv = xmalloc((m->n_val ? m->n_val : 1) * sizeof(double));
        if (o->x == PLOT_X_TOKENS) {
            if (metrics_tokens(m, s->x, s->xv)) return -1;
        } else {
            if (m->n) memcpy(s->x, m->step, m->n * sizeof(double));
            if (m->n_val) memcpy(s->xv, m->val_step, m->n_val * sizeof(double));
        }
        if (o->smooth > 1 && m->n) {
            s->ys = xmalloc(m->n * sizeof(double));
            metrics_smooth(m->loss, m->n, o->smooth, s->ys);
        }
        if (m->n_val) c->any_val = 1;
        for (int pass = 0; pass < 2; pass++) {
            size_t n = pass ? m->n_val : m->n;
            const double *xs = pass ? s->xv : s->x, *ys = pass ? m->val_loss : m->loss;
            for (size_t j = 0; j < n; j++) {
                if (!val_ok(ys[j], o->log_y) || !val_ok(xs[j], 0)) continue;
                r[0] = fmin(r[0], xs[j]), r[1] = fmax(r[1], xs[j]);
                r[2] = fmin(r[2], ys[j]), r[3] = fmax(r[3], ys[j]);
            }
        }
    }
    if (r[2] <= r[3]) return 0;
    const char *pos = o->log_y ? "positive " : "";
    if (c->ns == 1) return loom_fail("%s: no %sloss values to plot", logs[0].path, pos);
    return loom_fail("plot: no %sloss values to plot in any input", pos);
}

// Axes from the data range, then the plot rectangle from the text that goes around it.
static int layout(Chart *c, const PlotOptions *o, const double r[4]) {
    if (o->log_y)
        axis_log(&c->ay, r[2], r[3]);
    else
        axis_linear(&c->ay, r[2], r[3], 6, 1);
    axis_linear(&c->ax, r[0], r[1], 7, 0);
    double tw = 0;
    for (int i = 0; i < c->ay.nt; i++)
        tw = fmax(tw, draw_text_width(c->cr, ROLE_TICK, c->ay.label[i]));
    double tick_h = draw_cap_height(ROLE_TICK), lab_h = draw_cap_height(ROLE_LABEL);
    c->L = (int)ceil(14 + lab_h + 14 + tw + 10);
    c->R = c->w - 28;
    c->T = (int)ceil(16 + draw_cap_height(ROLE_TITLE) + 20);
    c->B = c->h - (int)ceil(10 + tick_h + 14 + lab_h + 14);
    if (c->R - c->L < 40 || c->B - c->T < 40)
        return loom_fail("plot: image too small (%dx%d)", c->w, c->h);
    return 0;
}

static void draw_grid(const Chart *c) {
    cairo_rectangle(c->cr, 0, 0, c->w, c->h);
    draw_rgb(c->cr, WHITE, 1);
    cairo_fill(c->cr);
    for (int i = 0; i < c->ay.nt; i++) {
        int y = (int)lrint(fy(c, c->ay.t[i]));
        if (y > c->T && y < c->B) draw_hvline(c->cr, c->L + 1, y, c->R - 1, y, GRID);
    }
    for (int i = 0; i < c->ax.nt; i++) {
        int x = (int)lrint(fx(c, c->ax.t[i]));
        if (x > c->L && x < c->R) draw_hvline(c->cr, x, c->T + 1, x, c->B - 1, GRID);
    }
}

// Training curves (raw faint behind the smoothed one), dashed validation curves, then the
// validation markers on top, unclipped.
static void draw_data(const Chart *c) {
    cairo_save(c->cr);
    cairo_rectangle(c->cr, c->L, c->T, c->R - c->L + 1, c->B - c->T + 1);
    cairo_clip(c->cr);
    for (int i = 0; i < c->ns; i++) {
        const Series *s = &c->sr[i];
        const MetricsLog *m = s->log;
        if (s->ys) {
            draw_series(c, s->x, m->loss, m->n, s->color, 1.0, 0.25, 0);
            draw_series(c, s->x, s->ys, m->n, s->color, 2.0, 1, 0);
        } else {
            draw_series(c, s->x, m->loss, m->n, s->color, m->n > 2000 ? 1.2 : 1.8, 1, 0);
        }
    }
    for (int i = 0; i < c->ns; i++) {
        const Series *s = &c->sr[i];
        draw_series(c, s->xv, s->log->val_loss, s->log->n_val, s->val_color, 1.6, 1, 1);
    }
    cairo_restore(c->cr);
    for (int i = 0; i < c->ns; i++) {
        const Series *s = &c->sr[i];
        const MetricsLog *m = s->log;
        if (m->n_val > 200) continue; // too many to mark; the dashed line shows them
        for (size_t j = 0; j < m->n_val; j++)
            if (y_ok(c, m->val_loss[j]) && val_ok(s->xv[j], 0))
                draw_marker(c->cr, fx(c, s->xv[j]), fy(c, m->val_loss[j]), 3.5, s->val_color);
    }
}

// Frame, ticks and their labels, axis labels and the title.
static void draw_axes(const Chart *c, const PlotOptions *o) {
    draw_box(c->cr, c->L, c->T, c->R, c->B, FRAME);
    double tick_h = draw_cap_height(ROLE_TICK), lab_h = draw_cap_height(ROLE_LABEL);
    for (int i = 0; i < c->ay.nt; i++) {
        int y = (int)lrint(fy(c, c->ay.t[i]));
        draw_hvline(c->cr, c->L - 5, y, c->L - 1, y, FRAME);
        draw_text(c->cr, c->L - 9, y, c->ay.label[i], ROLE_TICK, ANCHOR_END, 0, TICK_TEXT);
    }
    for (int i = 0; i < c->ax.nt; i++) {
        int x = (int)lrint(fx(c, c->ax.t[i]));
        draw_hvline(c->cr, x, c->B + 1, x, c->B + 5, FRAME);
        draw_text(c->cr, x, c->B + 10 + tick_h / 2, c->ax.label[i], ROLE_TICK, ANCHOR_MIDDLE, 0,
                  TICK_TEXT);
    }
    char ylabel[96] = "loss";
    if (o->log_y || o->smooth > 1)
        snprintf(ylabel, sizeof ylabel, "loss (%s%s%.0d%s)", o->log_y ? "log scale" : "",
                 o->log_y && o->smooth > 1 ? ", " : "", o->smooth > 1 ? o->smooth : 0,
                 o->smooth > 1 ? "-point moving average" : "");
    const char *xlabel = o->x == PLOT_X_TOKENS ? "tokens" : "step";
    const char *title = o->title && *o->title ? o->title : "Training loss";
    draw_text(c->cr, (c->L + c->R) / 2.0, c->B + 10 + tick_h + 14 + lab_h / 2, xlabel, ROLE_LABEL,
              ANCHOR_MIDDLE, 0, LABEL_TEXT);
    draw_text(c->cr, 14 + lab_h / 2, (c->T + c->B) / 2.0, ylabel, ROLE_LABEL, ANCHOR_MIDDLE, 1,
              LABEL_TEXT);
    draw_text(c->cr, (c->L + c->R) / 2.0, 16 + draw_cap_height(ROLE_TITLE) / 2, title, ROLE_TITLE,
              ANCHOR_MIDDLE, 0, TITLE_TEXT);
}

static int render(cairo_t *cr, int w, int h, const MetricsLog *logs, int nlogs,
                  const PlotOptions *o) {
    if (nlogs <= 0) return loom_fail("plot: no metrics logs given");
    Chart c = {.cr = cr, .w = w, .h = h, .ns = nlogs};
    c.sr = xcalloc((size_t)nlogs, sizeof *c.sr);
    double range[4];
    int rc = series_init(&c, logs, o, range);
    if (!rc) rc = layout(&c, o, range);
    if (!rc) {
        draw_grid(&c);
        draw_data(&c);
        draw_axes(&c, o);
        legend(&c);
    }
    for (int i = 0; i < nlogs; i++) {
        free(c.sr[i].x);
        free(c.sr[i].xv);
        free(c.sr[i].ys);
    }
    free(c.sr);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Output

typedef struct {
    uint8_t *p;
    size_t len, cap;
} Buf;

static cairo_status_t buf_write(void *closure, const unsigned char *data, unsigned int n) {
    Buf *b = closure;
    if (b->len + n + 1 > b->cap) { // + 1: room for the SVG's terminating NUL
        size_t cap = 2 * (b->len + n + 1);
        uint8_t *p = realloc(b->p, cap);
        if (!p) return CAIRO_STATUS_NO_MEMORY;
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    return CAIRO_STATUS_SUCCESS;
}

// Finish the surface (an SVG surface writes its document now) and hand over the bytes.
static int finish(cairo_surface_t *s, int png, Buf *b, uint8_t **out, size_t *len) {
    cairo_status_t st = png ? cairo_surface_write_to_png_stream(s, buf_write, b) : 0;
    cairo_surface_finish(s);
    if (!st) st = cairo_surface_status(s);
    cairo_surface_destroy(s);
    if (st || !b->p) {
        free(b->p);
        return loom_fail("plot: cairo: %s", cairo_status_to_string(st));
    }
    b->p[b->len] = 0;
    *out = b->p;
    *len = b->len;
    return 0;
}

int png_encode_rgb(const uint8_t *rgb, int w, int h, uint8_t **out, size_t *len) {
    if (w <= 0 || h <= 0 || w > 32767 || h > 32767)
        return loom_fail("png: bad image size %dx%d", w, h);
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
    uint8_t *data = cairo_image_surface_get_data(s);
    if (!data) {
        cairo_surface_destroy(s);
        return loom_fail("png: cannot make a %dx%d image", w, h);
    }
    int stride = cairo_image_surface_get_stride(s);
    for (int y = 0; y < h; y++) {
        uint32_t *row = (uint32_t *)(void *)(data + (size_t)y * stride); // native-endian xRGB
        const uint8_t *p = rgb + (size_t)y * w * 3;
        for (int x = 0; x < w; x++, p += 3)
            row[x] = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
    }
    cairo_surface_mark_dirty(s);
    Buf b = {0};
    return finish(s, 1, &b, out, len);
}

PlotFormat plot_format_for(const char *path) {
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash) || dot == path || dot[-1] == '/') return PLOT_FMT_NONE;
    if (!strcasecmp(dot, ".svg")) return PLOT_FMT_SVG;
    if (!strcasecmp(dot, ".png")) return PLOT_FMT_PNG;
    return PLOT_FMT_NONE;
}

int plot_render(const MetricsLog *logs, int nlogs, const PlotOptions *opt, PlotFormat fmt,
                uint8_t **out, size_t *len) {
    PlotOptions o = *opt;
    if (o.width <= 0) o.width = 1000;
    if (o.height <= 0) o.height = 600;
    if (o.width > 8192 || o.height > 8192)
        return loom_fail("plot: image size %dx%d too large (max 8192)", o.width, o.height);
    if (fmt != PLOT_FMT_SVG && fmt != PLOT_FMT_PNG) return loom_fail("plot: unknown format");
    Buf b = {0};
    cairo_surface_t *s;
    if (fmt == PLOT_FMT_SVG) {
        s = cairo_svg_surface_create_for_stream(buf_write, &b, o.width, o.height);
        cairo_svg_surface_set_document_unit(s, CAIRO_SVG_UNIT_PX);
    } else {
        s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, o.width, o.height);
    }
    cairo_t *cr = cairo_create(s);
    int rc = render(cr, o.width, o.height, logs, nlogs, &o);
    cairo_status_t st = cairo_status(cr);
    cairo_destroy(cr);
    if (!rc && st) rc = loom_fail("plot: cairo: %s", cairo_status_to_string(st));
    if (rc) {
        cairo_surface_destroy(s);
        free(b.p);
        return -1;
    }
    return finish(s, fmt == PLOT_FMT_PNG, &b, out, len);
}

int plot_write(const char *path, const MetricsLog *logs, int nlogs, const PlotOptions *opt) {
    PlotFormat fmt = plot_format_for(path);
    if (fmt == PLOT_FMT_NONE) return loom_fail("%s: output must end in .svg or .png", path);
    uint8_t *buf = NULL;
    size_t len = 0;
    if (plot_render(logs, nlogs, opt, fmt, &buf, &len)) return -1;
    int rc = write_file_atomic(path, buf, len);
    free(buf);
    return rc;
}
