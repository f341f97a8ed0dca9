// plot_draw.c — the drawing primitives of loom's charts on a cairo context: colours, text
// (fontconfig's sans-serif, invalid UTF-8 shown as '?') and crisp lines, boxes, polylines and
// markers (see plot_draw.h).
#include <math.h>
#include <string.h>

#include "plot_draw.h"

void draw_rgb(cairo_t *cr, Rgb c, double alpha) {
    cairo_set_source_rgba(cr, c.r / 255.0, c.g / 255.0, c.b / 255.0, alpha);
}

// ---------------------------------------------------------------------------------------------
// Text

double draw_font_px(TextRole r) {
    return r == ROLE_TITLE ? 20 : r == ROLE_LABEL ? 15 : r == ROLE_LEGEND ? 14 : 13;
}
double draw_cap_height(TextRole r) { return 0.72 * draw_font_px(r); }

// Length of the valid UTF-8 sequence at p that cairo accepts (no overlong forms, surrogates or
// non-characters), or 0.
static int utf8_len(const unsigned char *p) {
    const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    unsigned c = p[0];
    int n = c < 0x80             ? 1
            : (c & 0xE0) == 0xC0 ? 2
            : (c & 0xF0) == 0xE0 ? 3
            : (c & 0xF8) == 0xF0 ? 4
                                 : 0;
    uint32_t v = c & (0x7Fu >> n);
    for (int k = 1; k < n; k++) {
        if ((p[k] & 0xC0) != 0x80) return 0;
        v = v << 6 | (p[k] & 0x3Fu);
    }
    if (!n || v < least[n] || v > 0x10FFFF || (v & 0xFFFFF800u) == 0xD800) return 0;
    if ((v >= 0xFDD0 && v <= 0xFDEF) || (v & 0xFFFE) == 0xFFFE) return 0;
    return n;
}

// t as cairo takes it: invalid UTF-8 bytes and control characters become '?'; cut to `cap`.
static void clean_text(const char *t, char *out, size_t cap) {
    const unsigned char *p = (const unsigned char *)t;
    size_t o = 0;
    while (*p && o + 5 < cap) {
        int n = utf8_len(p);
        if (!n || (n == 1 && (*p < 32 || *p == 127))) {
            out[o++] = '?';
            p++;
        } else {
            memcpy(out + o, p, (size_t)n);
            o += (size_t)n, p += n;
        }
    }
    out[o] = 0;
}

double draw_text_width(cairo_t *cr, TextRole r, const char *t) {
    char buf[512];
    clean_text(t, buf, sizeof buf);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                           r == ROLE_TITLE ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, draw_font_px(r));
    cairo_text_extents_t e;
    cairo_text_extents(cr, buf, &e);
    return e.x_advance;
}

// Text with its anchor point at (x, y) = (start/middle/end, middle of the capital height);
// vertical text reads bottom to top.
void draw_text(cairo_t *cr, double x, double y, const char *t, TextRole role, int anchor,
               int vertical, Rgb c) {
    char buf[512];
    clean_text(t, buf, sizeof buf);
    double w = draw_text_width(cr, role, buf); // also selects the font
    cairo_save(cr);
    cairo_translate(cr, x, y);
    if (vertical) cairo_rotate(cr, -M_PI / 2);
    cairo_move_to(cr, -w * anchor / 2, draw_cap_height(role) / 2);
    draw_rgb(cr, c, 1);
    cairo_show_text(cr, buf);
    cairo_restore(cr);
}

// ---------------------------------------------------------------------------------------------
// Shapes

// A crisp 1-pixel line through pixel row y0 (horizontal) or column x0 (vertical), ends included.
void draw_hvline(cairo_t *cr, int x0, int y0, int x1, int y1, Rgb c) {
    cairo_rectangle(cr, x0, y0, x1 - x0 + 1, y1 - y0 + 1);
    draw_rgb(cr, c, 1);
    cairo_fill(cr);
}

void draw_box(cairo_t *cr, int x0, int y0, int x1, int y1, Rgb c) {
    draw_hvline(cr, x0, y0, x1, y0, c);
    draw_hvline(cr, x0, y1, x1, y1, c);
    draw_hvline(cr, x0, y0, x0, y1, c);
    draw_hvline(cr, x1, y0, x1, y1, c);
}

void draw_polyline(cairo_t *cr, const double *xs, const double *ys, size_t n, Rgb c, double width,
                   double alpha, int dashed) {
    const double dash[2] = {6, 4};
    if (!n) return;
    cairo_new_path(cr);
    cairo_move_to(cr, xs[0], ys[0]);
    for (size_t i = n > 1; i < n; i++) // one point: a zero-length segment, drawn as a dot
        cairo_line_to(cr, xs[i], ys[i]);
    cairo_set_line_width(cr, width);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
    cairo_set_dash(cr, dash, dashed ? 2 : 0, 0);
    draw_rgb(cr, c, alpha);
    cairo_stroke(cr);
}

// A dot of radius r with a white ring around it.
void draw_marker(cairo_t *cr, double x, double y, double r, Rgb c) {
    cairo_new_path(cr);
    cairo_arc(cr, x, y, r + 1.5, 0, 2 * M_PI);
    draw_rgb(cr, (Rgb){255, 255, 255}, 1);
    cairo_fill(cr);
    cairo_arc(cr, x, y, r, 0, 2 * M_PI);
    draw_rgb(cr, c, 1);
    cairo_fill(cr);
}
