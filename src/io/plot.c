// plot.c — loss-curve charts: layout and axes, an SVG writer, an RGB rasterizer with
// anti-aliased polylines and a built-in bitmap font, and a PNG encoder (fixed-Huffman deflate
// with LZ77 matching, CRC-32 and Adler-32 done here; no image or compression library).
#include "plot.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../common.h"

// ---------------------------------------------------------------------------------------------
// Bitmap font: 5 columns, 7 rows above the baseline plus 2 descender rows. One string per
// printable ASCII character (32..126), rows separated by spaces, '#' = ink; omitted trailing rows
// are blank. Glyphs are spaced proportionally (ink width + 1); digits keep the full 5 columns so
// numbers line up.
static const char *const FONT_SRC[95] = {
    /*   */ "",
    /* ! */ "..#.. ..#.. ..#.. ..#.. ..#.. ..... ..#..",
    /* " */ ".#.#. .#.#. .#.#.",
    /* # */ ".#.#. .#.#. ##### .#.#. ##### .#.#. .#.#.",
    /* $ */ "..#.. .#### #.#.. .###. ..#.# ####. ..#..",
    /* % */ "##... ##..# ...#. ..#.. .#... #..## ...##",
    /* & */ ".##.. #..#. #.#.. .#... #.#.# #..#. .##.#",
    /* ' */ "..#.. ..#.. ..#..",
    /* ( */ "...#. ..#.. .#... .#... .#... ..#.. ...#.",
    /* ) */ ".#... ..#.. ...#. ...#. ...#. ..#.. .#...",
    /* * */ "..... ..#.. #.#.# .###. #.#.# ..#.. .....",
    /* + */ "..... ..#.. ..#.. ##### ..#.. ..#.. .....",
    /* , */ "..... ..... ..... ..... ..... .##.. .##.. ..#.. .#...",
    /* - */ "..... ..... ..... ####. ..... ..... .....",
    /* . */ "..... ..... ..... ..... ..... .##.. .##..",
    /* / */ "....# ....# ...#. ..#.. .#... #.... #....",
    /* 0 */ ".###. #...# #..## #.#.# ##..# #...# .###.",
    /* 1 */ "..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###.",
    /* 2 */ ".###. #...# ....# ...#. ..#.. .#... #####",
    /* 3 */ "##### ...#. ..#.. ...#. ....# #...# .###.",
    /* 4 */ "...#. ..##. .#.#. #..#. ##### ...#. ...#.",
    /* 5 */ "##### #.... ####. ....# ....# #...# .###.",
    /* 6 */ "..##. .#... #.... ####. #...# #...# .###.",
    /* 7 */ "##### ....# ...#. ..#.. .#... .#... .#...",
    /* 8 */ ".###. #...# #...# .###. #...# #...# .###.",
    /* 9 */ ".###. #...# #...# .#### ....# ...#. .##..",
    /* : */ "..... .##.. .##.. ..... .##.. .##.. .....",
    /* ; */ "..... .##.. .##.. ..... .##.. .##.. ..#.. .#...",
    /* < */ "...#. ..#.. .#... #.... .#... ..#.. ...#.",
    /* = */ "..... ..... ##### ..... ##### ..... .....",
    /* > */ ".#... ..#.. ...#. ....# ...#. ..#.. .#...",
    /* ? */ ".###. #...# ....# ...#. ..#.. ..... ..#..",
    /* @ */ ".###. #...# ....# .##.# #.#.# #.#.# .###.",
    /* A */ ".###. #...# #...# ##### #...# #...# #...#",
    /* B */ "####. #...# #...# ####. #...# #...# ####.",
    /* C */ ".###. #...# #.... #.... #.... #...# .###.",
    /* D */ "###.. #..#. #...# #...# #...# #..#. ###..",
    /* E */ "##### #.... #.... ####. #.... #.... #####",
    /* F */ "##### #.... #.... ####. #.... #.... #....",
    /* G */ ".###. #...# #.... #.### #...# #...# .####",
    /* H */ "#...# #...# #...# ##### #...# #...# #...#",
    /* I */ ".###. ..#.. ..#.. ..#.. ..#.. ..#.. .###.",
    /* J */ "..### ...#. ...#. ...#. ...#. #..#. .##..",
    /* K */ "#...# #..#. #.#.. ##... #.#.. #..#. #...#",
    /* L */ "#.... #.... #.... #.... #.... #.... #####",
    /* M */ "#...# ##.## #.#.# #.#.# #...# #...# #...#",
    /* N */ "#...# #...# ##..# #.#.# #..## #...# #...#",
    /* O */ ".###. #...# #...# #...# #...# #...# .###.",
    /* P */ "####. #...# #...# ####. #.... #.... #....",
    /* Q */ ".###. #...# #...# #...# #.#.# #..#. .##.#",
    /* R */ "####. #...# #...# ####. #.#.. #..#. #...#",
    /* S */ ".#### #.... #.... .###. ....# ....# ####.",
    /* T */ "##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#..",
    /* U */ "#...# #...# #...# #...# #...# #...# .###.",
    /* V */ "#...# #...# #...# #...# #...# .#.#. ..#..",
    /* W */ "#...# #...# #...# #.#.# #.#.# #.#.# .#.#.",
    /* X */ "#...# #...# .#.#. ..#.. .#.#. #...# #...#",
    /* Y */ "#...# #...# .#.#. ..#.. ..#.. ..#.. ..#..",
    /* Z */ "##### ....# ...#. ..#.. .#... #.... #####",
    /* [ */ ".###. .#... .#... .#... .#... .#... .###.",
    /* \ */ "#.... #.... .#... ..#.. ...#. ....# ....#",
    /* ] */ ".###. ...#. ...#. ...#. ...#. ...#. .###.",
    /* ^ */ "..#.. .#.#. #...#",
    /* _ */ "..... ..... ..... ..... ..... ..... ..... #####",
    /* ` */ ".#... ..#..",
    /* a */ "..... ..... .###. ....# .#### #...# .####",
    /* b */ "#.... #.... #.##. ##..# #...# #...# ####.",
    /* c */ "..... ..... .###. #.... #.... #...# .###.",
    /* d */ "....# ....# .##.# #..## #...# #...# .####",
    /* e */ "..... ..... .###. #...# ##### #.... .###.",
    /* f */ "..##. .#..# .#... ###.. .#... .#... .#...",
    /* g */ "..... ..... .#### #...# #...# #...# .#### ....# .###.",
    /* h */ "#.... #.... #.##. ##..# #...# #...# #...#",
    /* i */ "..#.. ..... .##.. ..#.. ..#.. ..#.. .###.",
    /* j */ "...#. ..... ..##. ...#. ...#. ...#. ...#. #..#. .##..",
    /* k */ "#.... #.... #..#. #.#.. ##... #.#.. #..#.",
    /* l */ "#.... #.... #.... #.... #.... #.... .##..",
    /* m */ "..... ..... ##.#. #.#.# #.#.# #.#.# #.#.#",
    /* n */ "..... ..... #.##. ##..# #...# #...# #...#",
    /* o */ "..... ..... .###. #...# #...# #...# .###.",
    /* p */ "..... ..... ####. #...# #...# #...# ####. #.... #....",
    /* q */ "..... ..... .#### #...# #...# #...# .#### ....# ....#",
    /* r */ "..... ..... #.##. ##..# #.... #.... #....",
    /* s */ "..... ..... .###. #.... .###. ....# ####.",
    /* t */ ".#... .#... ###.. .#... .#... .#..# ..##.",
    /* u */ "..... ..... #...# #...# #...# #..## .##.#",
    /* v */ "..... ..... #...# #...# #...# .#.#. ..#..",
    /* w */ "..... ..... #...# #...# #.#.# #.#.# .#.#.",
    /* x */ "..... ..... #...# .#.#. ..#.. .#.#. #...#",
    /* y */ "..... ..... #...# #...# #...# #...# .#### ....# .###.",
    /* z */ "..... ..... ##### ...#. ..#.. .#... #####",
    /* { */ "...#. ..#.. ..#.. .#... ..#.. ..#.. ...#.",
    /* | */ "..#.. ..#.. ..#.. ..#.. ..#.. ..#.. ..#..",
    /* } */ ".#... ..#.. ..#.. ...#. ..#.. ..#.. .#...",
    /* ~ */ "..... ..... .#... #.#.# ...#. ..... .....",
};

enum { GLYPH_ROWS = 9, GLYPH_CAP = 7 };
typedef struct {
    uint8_t rows[GLYPH_ROWS]; // bit c (from 4 = left to 0 = right) set = ink
    int8_t left, right;       // ink columns; left > right for an empty glyph
} Glyph;
static Glyph glyphs[95];
static int glyphs_ready;

static void font_init(void) {
    if (glyphs_ready) return;
    for (int g = 0; g < 95; g++) {
        Glyph *gl = &glyphs[g];
        memset(gl, 0, sizeof *gl);
        const char *s = FONT_SRC[g];
        for (int r = 0; r < GLYPH_ROWS && *s; r++) {
            for (int c = 0; c < 5 && *s && *s != ' '; c++, s++)
                if (*s == '#') gl->rows[r] |= (uint8_t)(1u << (4 - c));
            while (*s && *s != ' ')
                s++;
            while (*s == ' ')
                s++;
        }
        gl->left = 5;
        gl->right = -1;
        for (int r = 0; r < GLYPH_ROWS; r++)
            for (int c = 0; c < 5; c++)
                if (gl->rows[r] >> (4 - c) & 1) {
                    if (c < gl->left) gl->left = (int8_t)c;
                    if (c > gl->right) gl->right = (int8_t)c;
                }
        if (g + 32 >= '0' && g + 32 <= '9') gl->left = 0, gl->right = 4;
    }
    glyphs_ready = 1;
}

// Next glyph of a UTF-8 string: ASCII as is, anything else (a whole multi-byte sequence) '?'.
static const Glyph *next_glyph(const char **s) {
    unsigned char c = (unsigned char)**s;
    (*s)++;
    if (c >= 0x80)
        while ((**s & 0xC0) == 0x80)
            (*s)++;
    if (c < 32 || c > 126) c = '?';
    return &glyphs[c - 32];
}

static int glyph_advance(const Glyph *g) { return g->left > g->right ? 3 : g->right - g->left + 2; }

// Width in font pixels, without the trailing gap.
static int font_text_width(const char *s) {
    font_init();
    int w = 0;
    while (*s)
        w += glyph_advance(next_glyph(&s));
    return w > 0 ? w - 1 : 0;
}

// ---------------------------------------------------------------------------------------------
// Drawing surface: either SVG text or an RGB raster.

typedef struct {
    uint8_t r, g, b;
} Rgb;

static const Rgb PALETTE[] = {{31, 119, 180},  {214, 39, 40},  {44, 160, 44},
                              {148, 103, 189}, {140, 86, 75},  {227, 119, 194},
                              {23, 190, 207},  {188, 189, 34}, {127, 127, 127}};
static const Rgb VAL_SINGLE = {255, 127, 14}; // validation colour when there is one log
static const Rgb WHITE = {255, 255, 255}, GRID = {232, 232, 232}, FRAME = {140, 140, 140},
                 TICK_TEXT = {60, 60, 60}, LABEL_TEXT = {40, 40, 40}, TITLE_TEXT = {20, 20, 20},
                 LEGEND_EDGE = {200, 200, 200};

typedef enum { ROLE_TICK, ROLE_LABEL, ROLE_LEGEND, ROLE_TITLE } TextRole;
enum { ANCHOR_START, ANCHOR_MIDDLE, ANCHOR_END };

typedef struct {
    int svg, w, h;
    // SVG text
    char *s;
    size_t len, cap;
    // raster
    uint8_t *px;
    float *cov;             // per-pixel coverage of the shape being drawn
    int bx0, by0, bx1, by1; // dirty box of cov (half-open)
    int cx0, cy0, cx1, cy1; // clip box (half-open)
} Surface;

static void sv_printf(Surface *S, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sv_printf(Surface *S, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(S->s + S->len, S->cap - S->len, fmt, ap);
        va_end(ap);
        if (n < 0) die(EXIT_IO, "plot: formatting failed");
        if ((size_t)n < S->cap - S->len) {
            S->len += (size_t)n;
            return;
        }
        S->cap = 2 * S->cap + (size_t)n + 1;
        char *p = realloc(S->s, S->cap);
        if (!p) die(EXIT_IO, "out of memory writing SVG");
        S->s = p;
    }
}

// XML-escaped text; invalid UTF-8 bytes and control characters become '?'.
static void sv_text_escaped(Surface *S, const char *t) {
    const unsigned char *p = (const unsigned char *)t;
    while (*p) {
        unsigned c = *p;
        if (c == '&')
            sv_printf(S, "&amp;");
        else if (c == '<')
            sv_printf(S, "&lt;");
        else if (c == '>')
            sv_printf(S, "&gt;");
        else if (c == '"')
            sv_printf(S, "&quot;");
        else if (c < 32 || c == 127)
            sv_printf(S, "?");
        else if (c < 0x80)
            sv_printf(S, "%c", c);
        else {
            int n = c >= 0xF0 && c < 0xF5 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
            int ok = n > 0;
            for (int k = 1; ok && k < n; k++)
                if ((p[k] & 0xC0) != 0x80) ok = 0;
            if (!ok) {
                sv_printf(S, "?");
            } else {
                sv_printf(S, "%.*s", n, (const char *)p);
                p += n - 1;
            }
        }
        p++;
    }
}

static void hexcolor(char buf[8], Rgb c) { snprintf(buf, 8, "#%02x%02x%02x", c.r, c.g, c.b); }

static int svg_font_px(TextRole r) {
    return r == ROLE_TITLE ? 20 : r == ROLE_LABEL ? 15 : r == ROLE_LEGEND ? 14 : 13;
}
static int raster_scale(TextRole r) { return r == ROLE_TITLE ? 3 : 2; }

// Approximate advance of a sans-serif glyph, in ems (for SVG layout only). Errs wide: viewers
// without Helvetica/Arial often fall back to the wider DejaVu Sans.
static double svg_char_em(unsigned char c) {
    if (c >= '0' && c <= '9') return 0.64;
    if (strchr("ijlI.,:;'|!", c)) return 0.3;
    if (strchr("frt()[]{}- /", c)) return 0.4;
    if (strchr("mwMW", c)) return 0.95;
    if (c >= 'A' && c <= 'Z') return 0.72;
    return 0.62;
}

static double text_width(const Surface *S, TextRole r, const char *t) {
    if (!S->svg) return font_text_width(t) * raster_scale(r);
    double em = 0;
    for (const unsigned char *p = (const unsigned char *)t; *p; p++)
        if ((*p & 0xC0) != 0x80) em += svg_char_em(*p);
    return em * svg_font_px(r);
}

// Height of capital letters.
static double text_height(const Surface *S, TextRole r) {
    return S->svg ? 0.72 * svg_font_px(r) : GLYPH_CAP * raster_scale(r);
}

// raster helpers ------------------------------------------------------------------------------

static void put_px(Surface *S, int x, int y, Rgb c, double a) {
    if (x < 0 || y < 0 || x >= S->w || y >= S->h || a <= 0) return;
    uint8_t *p = S->px + 3 * ((size_t)y * S->w + x);
    if (a >= 1) {
        p[0] = c.r, p[1] = c.g, p[2] = c.b;
        return;
    }
    p[0] = (uint8_t)lrint(p[0] + (c.r - p[0]) * a);
    p[1] = (uint8_t)lrint(p[1] + (c.g - p[1]) * a);
    p[2] = (uint8_t)lrint(p[2] + (c.b - p[2]) * a);
}

static void fill_box(Surface *S, int x0, int y0, int x1, int y1, Rgb c, double a) {
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > S->w) x1 = S->w;
    if (y1 > S->h) y1 = S->h;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++)
            put_px(S, x, y, c, a);
}

static void cov_reset_box(Surface *S) { S->bx0 = S->w, S->by0 = S->h, S->bx1 = 0, S->by1 = 0; }

// Composite the accumulated coverage with colour c and opacity alpha, then clear it.
static void cov_flush(Surface *S, Rgb c, double alpha) {
    for (int y = S->by0; y < S->by1; y++)
        for (int x = S->bx0; x < S->bx1; x++) {
            float *v = &S->cov[(size_t)y * S->w + x];
            if (*v > 0) put_px(S, x, y, c, *v * alpha);
            *v = 0;
        }
    cov_reset_box(S);
}

// Add a thick segment (round caps) to the coverage buffer, clipped to the clip box.
static void cov_segment(Surface *S, double x0, double y0, double x1, double y1, double hw) {
    double m = hw + 1;
    int ix0 = (int)floor(fmin(x0, x1) - m), ix1 = (int)ceil(fmax(x0, x1) + m);
    int iy0 = (int)floor(fmin(y0, y1) - m), iy1 = (int)ceil(fmax(y0, y1) + m);
    if (ix0 < S->cx0) ix0 = S->cx0;
    if (iy0 < S->cy0) iy0 = S->cy0;
    if (ix1 > S->cx1) ix1 = S->cx1;
    if (iy1 > S->cy1) iy1 = S->cy1;
    if (ix0 >= ix1 || iy0 >= iy1) return;
    double dx = x1 - x0, dy = y1 - y0, L2 = dx * dx + dy * dy;
    for (int y = iy0; y < iy1; y++) {
        double py = y + 0.5;
        for (int x = ix0; x < ix1; x++) {
            double px = x + 0.5;
            double t = L2 > 0 ? ((px - x0) * dx + (py - y0) * dy) / L2 : 0;
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            double ex = px - (x0 + t * dx), ey = py - (y0 + t * dy);
            double d = sqrt(ex * ex + ey * ey);
            double c = hw + 0.5 - d;
            if (c <= 0) continue;
            if (c > 1) c = 1;
            float *v = &S->cov[(size_t)y * S->w + x];
            if (c > *v) *v = (float)c;
        }
    }
    if (ix0 < S->bx0) S->bx0 = ix0;
    if (iy0 < S->by0) S->by0 = iy0;
    if (ix1 > S->bx1) S->bx1 = ix1;
    if (iy1 > S->by1) S->by1 = iy1;
}

static void raster_disk(Surface *S, double cx, double cy, double r, Rgb c) {
    int x0 = (int)floor(cx - r - 1), x1 = (int)ceil(cx + r + 1);
    int y0 = (int)floor(cy - r - 1), y1 = (int)ceil(cy + r + 1);
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            double d = hypot(x + 0.5 - cx, y + 0.5 - cy);
            double a = r + 0.5 - d;
            if (a > 0) put_px(S, x, y, c, a > 1 ? 1 : a);
        }
}

// primitives on either surface -----------------------------------------------------------------

static void draw_rect(Surface *S, int x0, int y0, int x1, int y1, Rgb fill, double alpha) {
    if (S->svg) {
        char f[8];
        hexcolor(f, fill);
        sv_printf(S, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"", x0, y0,
                  x1 - x0, y1 - y0, f);
        if (alpha < 1) sv_printf(S, " fill-opacity=\"%.2f\"", alpha);
        sv_printf(S, "/>\n");
    } else {
        fill_box(S, x0, y0, x1, y1, fill, alpha);
    }
}

// A crisp 1-pixel horizontal (y0 == y1) or vertical line through pixel row/column y0 or x0.
static void draw_hvline(Surface *S, int x0, int y0, int x1, int y1, Rgb c) {
    if (S->svg) {
        char f[8];
        hexcolor(f, c);
        if (y0 == y1)
            sv_printf(S, "<line x1=\"%d\" y1=\"%d.5\" x2=\"%d\" y2=\"%d.5\" stroke=\"%s\"/>\n", x0,
                      y0, x1 + 1, y1, f);
        else
            sv_printf(S, "<line x1=\"%d.5\" y1=\"%d\" x2=\"%d.5\" y2=\"%d\" stroke=\"%s\"/>\n", x0,
                      y0, x1, y1 + 1, f);
    } else {
        fill_box(S, x0, y0, x1 + 1, y1 + 1, c, 1);
    }
}

static void draw_polyline(Surface *S, const double *xs, const double *ys, size_t n, Rgb c,
                          double width, double alpha, int dashed) {
    if (n == 0) return;
    if (S->svg) {
        char f[8];
        hexcolor(f, c);
        sv_printf(S,
                  "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.2g\" "
                  "stroke-linejoin=\"round\" stroke-linecap=\"round\"",
                  f, width);
        if (alpha < 1) sv_printf(S, " stroke-opacity=\"%.2f\"", alpha);
        if (dashed) sv_printf(S, " stroke-dasharray=\"6 4\"");
        sv_printf(S, " points=\"");
        for (size_t i = 0; i < n; i++)
            sv_printf(S, "%s%.1f,%.1f", i ? " " : "", xs[i], ys[i]);
        sv_printf(S, "\"/>\n");
        return;
    }
    double hw = width / 2;
    if (n == 1) cov_segment(S, xs[0], ys[0], xs[0], ys[0], hw);
    if (!dashed) {
        for (size_t i = 1; i < n; i++)
            cov_segment(S, xs[i - 1], ys[i - 1], xs[i], ys[i], hw);
    } else {
        const double on = 6, off = 4;
        double phase = 0; // position within the current on+off period
        for (size_t i = 1; i < n; i++) {
            double x0 = xs[i - 1], y0 = ys[i - 1], dx = xs[i] - x0, dy = ys[i] - y0;
            double L = hypot(dx, dy), t = 0;
            while (t < L) {
                double left = phase < on ? on - phase : on + off - phase;
                double step = fmin(left, L - t);
                if (phase < on && L > 0)
                    cov_segment(S, x0 + dx * t / L, y0 + dy * t / L, x0 + dx * (t + step) / L,
                                y0 + dy * (t + step) / L, hw);
                t += step;
                phase += step;
                if (phase >= on + off) phase -= on + off;
            }
        }
    }
    cov_flush(S, c, alpha);
}

static void draw_marker(Surface *S, double x, double y, double r, Rgb c) {
    if (S->svg) {
        char f[8];
        hexcolor(f, c);
        sv_printf(S,
                  "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\" stroke=\"#ffffff\" "
                  "stroke-width=\"1.5\"/>\n",
                  x, y, r, f);
    } else {
        raster_disk(S, x, y, r + 1.5, WHITE);
        raster_disk(S, x, y, r, c);
    }
}

// Text with its anchor point at (x, y) = (start/middle/end, middle of the capital height);
// vertical text reads bottom to top.
static void draw_text(Surface *S, double x, double y, const char *t, TextRole role, int anchor,
                      int vertical, Rgb c) {
    if (S->svg) {
        char f[8];
        hexcolor(f, c);
        int fs = svg_font_px(role);
        double off = 0.36 * fs; // baseline below the middle of the capitals
        static const char *const anchors[] = {"start", "middle", "end"};
        if (vertical)
            sv_printf(S,
                      "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" x=\"0\" y=\"%.1f\" "
                      "font-size=\"%d\" text-anchor=\"%s\" fill=\"%s\"%s>",
                      x, y, off, fs, anchors[anchor], f,
                      role == ROLE_TITLE ? " font-weight=\"bold\"" : "");
        else
            sv_printf(S,
                      "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%d\" text-anchor=\"%s\" "
                      "fill=\"%s\"%s>",
                      x, y + off, fs, anchors[anchor], f,
                      role == ROLE_TITLE ? " font-weight=\"bold\"" : "");
        sv_text_escaped(S, t);
        sv_printf(S, "</text>\n");
        return;
    }
    font_init();
    int s = raster_scale(role);
    int w = font_text_width(t) * s;
    // u runs along the text, v down across it (v = 0 at the top of the capitals)
    int u0 = anchor == ANCHOR_START ? 0 : anchor == ANCHOR_MIDDLE ? -w / 2 : -w;
    int v0 = -(GLYPH_CAP * s) / 2;
    int ox = (int)lrint(x), oy = (int)lrint(y);
    int pen = u0;
    int bold = role == ROLE_TITLE;
    const char *p = t;
    while (*p) {
        const Glyph *g = next_glyph(&p);
        if (g->left <= g->right) {
            for (int r = 0; r < GLYPH_ROWS; r++)
                for (int col = g->left; col <= g->right; col++) {
                    if (!(g->rows[r] >> (4 - col) & 1)) continue;
                    int u = pen + (col - g->left) * s, v = v0 + r * s;
                    int du = s + bold;
                    if (!vertical)
                        fill_box(S, ox + u, oy + v, ox + u + du, oy + v + s, c, 1);
                    else
                        fill_box(S, ox + v, oy - u - du, ox + v + s, oy - u, c, 1);
                }
        }
        pen += glyph_advance(g) * s;
    }
}

// ---------------------------------------------------------------------------------------------
// Axes

int plot_nice_ticks(double lo, double hi, int target, double *ticks, int max, double *step) {
    if (!(hi > lo) || target < 1) {
        if (step) *step = 0;
        if (max > 0) ticks[0] = lo;
        return max > 0 ? 1 : 0;
    }
    double raw = (hi - lo) / target;
    double mag = pow(10, floor(log10(raw))), f = raw / mag;
    double m = f < 1.5 ? 1 : f < 2.25 ? 2 : f < 3.5 ? 2.5 : f < 7.5 ? 5 : 10;
    double st = m * mag;
    if (step) *step = st;
    double eps = 1e-9 * (hi - lo);
    int n = 0;
    for (double k = ceil((lo - eps) / st); n < max; k++) {
        double v = k * st;
        if (v > hi + eps) break;
        ticks[n++] = fabs(v) < eps ? 0 : v;
    }
    return n;
}

enum { MAX_TICKS = 32 };

typedef struct {
    double lo, hi; // axis range (data units)
    int log;
    int nt;
    double t[MAX_TICKS];
    char label[MAX_TICKS][24];
} Axis;

// Decimals (at most 6) needed to print x exactly.
static int decimals_for(double x) {
    int d = 0;
    while (d < 6 && fabs(x * pow(10, d) - round(x * pow(10, d))) > 1e-6 * fmax(1, fabs(x)))
        d++;
    return d;
}

// Tick labels: value / unit, with the decimals the tick spacing needs (evenly spaced ticks:
// "0.5 1.0 1.5") or each value needs (log ticks, step = 0), and a k/M/B suffix.
static void axis_labels(Axis *a, double step) {
    double big = 0;
    for (int i = 0; i < a->nt; i++)
        big = fmax(big, fabs(a->t[i]));
    double unit = 1;
    const char *suf = "";
    if (big >= 1e9)
        unit = 1e9, suf = "B";
    else if (big >= 1e6)
        unit = 1e6, suf = "M";
    else if (big >= 1e4)
        unit = 1e3, suf = "k";
    for (int i = 0; i < a->nt; i++) {
        double x = a->t[i] / unit;
        int d = decimals_for(step > 0 ? step / unit : x);
        if (fabs(x) < 1e-12) x = 0;
        snprintf(a->label[i], sizeof a->label[i], "%.*f%s", x == 0 ? 0 : d, x, x == 0 ? "" : suf);
    }
}

static void axis_linear(Axis *a, double lo, double hi, int target, int snap_always) {
    a->log = 0;
    if (!(hi > lo)) {
        double d = fabs(lo) > 0 ? 0.5 * fabs(lo) : 1;
        lo -= d, hi += d;
    }
    double st;
    plot_nice_ticks(lo, hi, target, a->t, MAX_TICKS, &st);
    double flo = floor(lo / st + 1e-9) * st, fhi = ceil(hi / st - 1e-9) * st;
    // y axes snap outward to whole ticks; x axes only when that adds little empty space
    if (snap_always || lo - flo <= 0.05 * (hi - lo)) lo = flo;
    if (snap_always || fhi - hi <= 0.03 * (hi - lo)) hi = fhi;
    a->lo = lo, a->hi = hi;
    a->nt = plot_nice_ticks(lo, hi, target, a->t, MAX_TICKS, &st);
    axis_labels(a, st);
}

static void axis_log(Axis *a, double lo, double hi) {
    a->log = 1;
    if (!(hi > lo)) lo /= 2, hi *= 2;
    double l0 = log10(lo), l1 = log10(hi), pad = 0.04 * (l1 - l0);
    a->lo = pow(10, l0 - pad), a->hi = pow(10, l1 + pad);
    static const double sets[3][9] = {{1}, {1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
    static const int set_n[3] = {1, 3, 9};
    for (int s = 0; s < 3; s++) {
        int n = 0, every = 1;
        for (;;) {
            n = 0;
            int k0 = (int)floor(log10(a->lo)), k1 = (int)ceil(log10(a->hi));
            for (int k = k0; k <= k1 && n < MAX_TICKS; k++) {
                if ((k - k0) % every) continue;
                for (int j = 0; j < set_n[s] && n < MAX_TICKS; j++) {
                    double v = sets[s][j] * pow(10, k);
                    if (v >= a->lo * (1 - 1e-9) && v <= a->hi * (1 + 1e-9)) a->t[n++] = v;
                }
            }
            if (n <= 10) break;
            every++;
        }
        if (n >= 4) {
            a->nt = n;
            axis_labels(a, 0);
            return;
        }
    }
    // a narrow range: evenly spaced values, placed on the log scale
    double st;
    a->nt = plot_nice_ticks(a->lo, a->hi, 5, a->t, MAX_TICKS, &st);
    axis_labels(a, st);
}

static double axis_frac(const Axis *a, double v) {
    if (a->log) return (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
    return (v - a->lo) / (a->hi - a->lo);
}

// ---------------------------------------------------------------------------------------------
// Chart

typedef struct {
    const MetricsLog *log;
    char label[128];
    Rgb color, val_color;
    double *x, *xv; // x of the training and validation rows
    double *ys;     // smoothed loss (or NULL)
} Series;

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

static void make_labels(Series *sr, int n) {
    for (int k = 1; k <= 64; k++) {
        for (int i = 0; i < n; i++) {
            const char *t = path_tail(sr[i].log->path, k);
            snprintf(sr[i].label, sizeof sr[i].label, "%s", t);
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

typedef struct {
    int L, T, R, B; // plot rectangle, pixels
    Axis ax, ay;
} Frame;

// Pixel coordinates are clamped far outside the image but well inside int: a point off the
// chart (a smoothed value outside the raw range) still converts safely and is clipped.
static double clamp_px(double v) { return !(v > -1e5) ? -1e5 : v > 1e5 ? 1e5 : v; }
static double fx(const Frame *f, double x) {
    return clamp_px(f->L + axis_frac(&f->ax, x) * (f->R - f->L));
}
static double fy(const Frame *f, double y) {
    return clamp_px(f->B - axis_frac(&f->ay, y) * (f->B - f->T));
}

// Values a chart can hold: finite, |v| <= PLOT_MAX_ABS and, on a log axis, >= 1/PLOT_MAX_ABS;
// others are skipped like NaN, so axis arithmetic (ranges, log10, tick spacing) stays finite.
#define PLOT_MAX_ABS 1e100
static int x_ok(double x) { return isfinite(x) && fabs(x) <= PLOT_MAX_ABS; }
static int val_ok(double y, int log) {
    return isfinite(y) && fabs(y) <= PLOT_MAX_ABS && (!log || y >= 1 / PLOT_MAX_ABS);
}
static int y_ok(const Frame *f, double y) { return val_ok(y, f->ay.log); }

// Draw the finite runs of (x[i], y[i]) as polylines; long runs in SVG are thinned to at most
// first/min/max/last per pixel column.
static void draw_series_line(Surface *S, const Frame *f, const double *x, const double *y, size_t n,
                             Rgb c, double width, double alpha, int dashed) {
    double *px = xmalloc((n ? n : 1) * sizeof *px), *py = xmalloc((n ? n : 1) * sizeof *py);
    size_t i = 0;
    while (i < n) {
        while (i < n && !(y_ok(f, y[i]) && x_ok(x[i])))
            i++;
        size_t m = 0;
        while (i < n && y_ok(f, y[i]) && x_ok(x[i])) {
            px[m] = fx(f, x[i]);
            py[m] = fy(f, y[i]);
            m++, i++;
        }
        if (!m) continue;
        if (S->svg && m > (size_t)(4 * (f->R - f->L))) {
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
                for (int q = 0; q < 4; q++) {
                    if (q && keep[q] == keep[q - 1]) continue;
                    px[k] = px[keep[q]], py[k] = py[keep[q]];
                    k++;
                }
                a = b;
            }
            m = k;
        }
        if (m == 1 && !dashed)
            draw_marker(S, px[0], py[0], 3, c);
        else
            draw_polyline(S, px, py, m, c, width, alpha, dashed);
    }
    free(px);
    free(py);
}

typedef struct {
    Rgb c;
    int kind; // 0 line, 1 dashed line with marker
    const char *text;
} LegendItem;

// Data points (training and validation rows, in pixels) inside a box.
static size_t points_in(const Frame *f, const Series *sr, int ns, double x0, double y0, double x1,
                        double y1) {
    size_t k = 0;
    for (int i = 0; i < ns; i++)
        for (int pass = 0; pass < 2; pass++) {
            const MetricsLog *m = sr[i].log;
            size_t n = pass ? m->n_val : m->n;
            const double *xs = pass ? sr[i].xv : sr[i].x, *ys = pass ? m->val_loss : m->loss;
            for (size_t j = 0; j < n; j++) {
                if (!y_ok(f, ys[j]) || !x_ok(xs[j])) continue;
                double px = fx(f, xs[j]), py = fy(f, ys[j]);
                if (px >= x0 && px <= x1 && py >= y0 && py <= y1) k++;
            }
        }
    return k;
}

// The legend goes in the corner of the plot that covers the fewest data points (top right
// on ties, where a falling loss curve leaves room).
static void draw_legend(Surface *S, const Frame *f, const LegendItem *it, int n, const Series *sr,
                        int ns) {
    if (n == 0) return;
    double th = text_height(S, ROLE_LEGEND);
    double row = fmax(th * 1.9, 18), sample = 28, gap = 8, pad = 10;
    double tw = 0;
    for (int i = 0; i < n; i++)
        tw = fmax(tw, text_width(S, ROLE_LEGEND, it[i].text));
    int bw = (int)ceil(pad + sample + gap + tw + pad), bh = (int)ceil(2 * pad - th + n * row);
    int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
    size_t best = (size_t)-1;
    for (int corner = 0; corner < 4; corner++) { // top right, top left, bottom left, bottom right
        int right = corner == 0 || corner == 3, top = corner < 2;
        int cx0 = right ? f->R - 12 - bw : f->L + 12, cy0 = top ? f->T + 12 : f->B - 12 - bh;
        if (cx0 < f->L + 4) cx0 = f->L + 4;
        size_t k = points_in(f, sr, ns, cx0 - 4, cy0 - 4, cx0 + bw + 4, cy0 + bh + 4);
        if (k < best) {
            best = k;
            x0 = cx0, y0 = cy0, x1 = cx0 + bw, y1 = cy0 + bh;
        }
    }
    draw_rect(S, x0, y0, x1, y1, WHITE, 0.88);
    draw_hvline(S, x0, y0, x1, y0, LEGEND_EDGE);
    draw_hvline(S, x0, y1, x1, y1, LEGEND_EDGE);
    draw_hvline(S, x0, y0, x0, y1, LEGEND_EDGE);
    draw_hvline(S, x1, y0, x1, y1, LEGEND_EDGE);
    int saved[4] = {S->cx0, S->cy0, S->cx1, S->cy1};
    S->cx0 = 0, S->cy0 = 0, S->cx1 = S->w, S->cy1 = S->h;
    for (int i = 0; i < n; i++) {
        double cy = y0 + pad + th / 2 + i * row;
        double xs[2] = {x0 + pad, x0 + pad + sample}, ys[2] = {cy, cy};
        draw_polyline(S, xs, ys, 2, it[i].c, it[i].kind ? 1.5 : 2.0, 1, it[i].kind);
        if (it[i].kind) draw_marker(S, x0 + pad + sample / 2, cy, 3.5, it[i].c);
        draw_text(S, x0 + pad + sample + gap, cy, it[i].text, ROLE_LEGEND, ANCHOR_START, 0,
                  LABEL_TEXT);
    }
    S->cx0 = saved[0], S->cy0 = saved[1], S->cx1 = saved[2], S->cy1 = saved[3];
}

static int render(Surface *S, const MetricsLog *logs, int nlogs, const PlotOptions *opt) {
    if (nlogs <= 0) return loom_fail("plot: no metrics logs given");
    Series *sr = xcalloc((size_t)nlogs, sizeof *sr);
    int rc = -1, any_val = 0;
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int i = 0; i < nlogs; i++) {
        const MetricsLog *m = &logs[i];
        Series *s = &sr[i];
        s->log = m;
        s->color = PALETTE[i % (int)(sizeof PALETTE / sizeof PALETTE[0])];
        s->val_color = nlogs == 1 ? VAL_SINGLE : s->color;
        s->x = xmalloc((m->n ? m->n : 1) * sizeof(double));
        s->xv = xmalloc((m->n_val ? m->n_val : 1) * sizeof(double));
        if (opt->x == PLOT_X_TOKENS) {
            if (metrics_tokens(m, s->x, s->xv)) goto done;
        } else {
            if (m->n) memcpy(s->x, m->step, m->n * sizeof(double));
            if (m->n_val) memcpy(s->xv, m->val_step, m->n_val * sizeof(double));
        }
        if (opt->smooth > 1 && m->n) {
            s->ys = xmalloc(m->n * sizeof(double));
            metrics_smooth(m->loss, m->n, opt->smooth, s->ys);
        }
        if (m->n_val) any_val = 1;
        for (int pass = 0; pass < 2; pass++) {
            size_t n = pass ? m->n_val : m->n;
            const double *xs = pass ? s->xv : s->x, *ys = pass ? m->val_loss : m->loss;
            for (size_t j = 0; j < n; j++) {
                if (!val_ok(ys[j], opt->log_y) || !x_ok(xs[j])) continue;
                xmin = fmin(xmin, xs[j]), xmax = fmax(xmax, xs[j]);
                ymin = fmin(ymin, ys[j]), ymax = fmax(ymax, ys[j]);
            }
        }
    }
    if (!(ymin <= ymax)) {
        if (nlogs == 1)
            loom_fail("%s: no %sloss values to plot", logs[0].path, opt->log_y ? "positive " : "");
        else
            loom_fail("plot: no %sloss values to plot in any input", opt->log_y ? "positive " : "");
        goto done;
    }

    // layout --------------------------------------------------------------------------------
    Frame f;
    if (opt->log_y)
        axis_log(&f.ay, ymin, ymax);
    else
        axis_linear(&f.ay, ymin, ymax, 6, 1);
    axis_linear(&f.ax, xmin, xmax, 7, 0);
    const char *title = opt->title && *opt->title ? opt->title : "Training loss";
    char ylabel[96];
    snprintf(ylabel, sizeof ylabel, "%s%s%s", opt->log_y || opt->smooth > 1 ? "loss (" : "loss",
             opt->log_y ? "log scale" : "", opt->log_y && opt->smooth > 1 ? ", " : "");
    if (opt->smooth > 1)
        snprintf(ylabel + strlen(ylabel), sizeof ylabel - strlen(ylabel), "%d-point moving average",
                 opt->smooth);
    if (opt->log_y || opt->smooth > 1) strncat(ylabel, ")", sizeof ylabel - strlen(ylabel) - 1);
    const char *xlabel = opt->x == PLOT_X_TOKENS ? "tokens" : "step";

    double tick_h = text_height(S, ROLE_TICK), lab_h = text_height(S, ROLE_LABEL);
    double tw = 0;
    for (int i = 0; i < f.ay.nt; i++)
        tw = fmax(tw, text_width(S, ROLE_TICK, f.ay.label[i]));
    f.L = (int)ceil(14 + lab_h + 14 + tw + 10);
    f.R = S->w - 28;
    f.T = (int)ceil(16 + text_height(S, ROLE_TITLE) + 20);
    f.B = S->h - (int)ceil(10 + tick_h + 14 + lab_h + 14);
    if (f.R - f.L < 40 || f.B - f.T < 40) {
        loom_fail("plot: image too small (%dx%d)", S->w, S->h);
        goto done;
    }

    // background, grid ------------------------------------------------------------------------
    draw_rect(S, 0, 0, S->w, S->h, WHITE, 1);
    for (int i = 0; i < f.ay.nt; i++) {
        int y = (int)lrint(fy(&f, f.ay.t[i]));
        if (y > f.T && y < f.B) draw_hvline(S, f.L + 1, y, f.R - 1, y, GRID);
    }
    for (int i = 0; i < f.ax.nt; i++) {
        int x = (int)lrint(fx(&f, f.ax.t[i]));
        if (x > f.L && x < f.R) draw_hvline(S, x, f.T + 1, x, f.B - 1, GRID);
    }

    // data --------------------------------------------------------------------------------------
    S->cx0 = f.L, S->cy0 = f.T, S->cx1 = f.R + 1, S->cy1 = f.B + 1;
    if (S->svg)
        sv_printf(S,
                  "<clipPath id=\"plotarea\"><rect x=\"%d\" y=\"%d\" width=\"%d\" "
                  "height=\"%d\"/></clipPath>\n<g clip-path=\"url(#plotarea)\">\n",
                  f.L, f.T, f.R - f.L + 1, f.B - f.T + 1);
    for (int i = 0; i < nlogs; i++) {
        const Series *s = &sr[i];
        const MetricsLog *m = s->log;
        if (s->ys) {
            draw_series_line(S, &f, s->x, m->loss, m->n, s->color, 1.0, 0.25, 0);
            draw_series_line(S, &f, s->x, s->ys, m->n, s->color, 2.0, 1, 0);
        } else {
            draw_series_line(S, &f, s->x, m->loss, m->n, s->color, m->n > 2000 ? 1.2 : 1.8, 1, 0);
        }
    }
    for (int i = 0; i < nlogs; i++) {
        const Series *s = &sr[i];
        const MetricsLog *m = s->log;
        if (!m->n_val) continue;
        draw_series_line(S, &f, s->xv, m->val_loss, m->n_val, s->val_color, 1.6, 1, 1);
    }
    if (S->svg) sv_printf(S, "</g>\n");
    S->cx0 = 0, S->cy0 = 0, S->cx1 = S->w, S->cy1 = S->h;
    for (int i = 0; i < nlogs; i++) { // markers on top, unclipped
        const Series *s = &sr[i];
        const MetricsLog *m = s->log;
        if (m->n_val > 200) continue; // too many to mark; the dashed line shows them
        for (size_t j = 0; j < m->n_val; j++)
            if (y_ok(&f, m->val_loss[j]) && x_ok(s->xv[j]))
                draw_marker(S, fx(&f, s->xv[j]), fy(&f, m->val_loss[j]), 3.5, s->val_color);
    }

    // frame, ticks, labels ----------------------------------------------------------------------
    draw_hvline(S, f.L, f.T, f.R, f.T, FRAME);
    draw_hvline(S, f.L, f.B, f.R, f.B, FRAME);
    draw_hvline(S, f.L, f.T, f.L, f.B, FRAME);
    draw_hvline(S, f.R, f.T, f.R, f.B, FRAME);
    for (int i = 0; i < f.ay.nt; i++) {
        int y = (int)lrint(fy(&f, f.ay.t[i]));
        draw_hvline(S, f.L - 5, y, f.L - 1, y, FRAME);
        draw_text(S, f.L - 9, y, f.ay.label[i], ROLE_TICK, ANCHOR_END, 0, TICK_TEXT);
    }
    for (int i = 0; i < f.ax.nt; i++) {
        int x = (int)lrint(fx(&f, f.ax.t[i]));
        draw_hvline(S, x, f.B + 1, x, f.B + 5, FRAME);
        draw_text(S, x, f.B + 10 + tick_h / 2, f.ax.label[i], ROLE_TICK, ANCHOR_MIDDLE, 0,
                  TICK_TEXT);
    }
    draw_text(S, (f.L + f.R) / 2.0, f.B + 10 + tick_h + 14 + lab_h / 2, xlabel, ROLE_LABEL,
              ANCHOR_MIDDLE, 0, LABEL_TEXT);
    draw_text(S, 14 + lab_h / 2, (f.T + f.B) / 2.0, ylabel, ROLE_LABEL, ANCHOR_MIDDLE, 1,
              LABEL_TEXT);
    draw_text(S, (f.L + f.R) / 2.0, 16 + text_height(S, ROLE_TITLE) / 2, title, ROLE_TITLE,
              ANCHOR_MIDDLE, 0, TITLE_TEXT);

    // legend ------------------------------------------------------------------------------------
    make_labels(sr, nlogs);
    LegendItem *items = xcalloc(2 * (size_t)nlogs, sizeof *items);
    char(*texts)[160] = xcalloc(2 * (size_t)nlogs, sizeof *texts);
    int ni = 0;
    for (int i = 0; i < nlogs; i++) {
        const char *name = sr[i].label;
        if (sr[i].log->n) {
            snprintf(texts[ni], sizeof texts[ni], "%s%s", name, any_val ? " train" : "");
            items[ni] = (LegendItem){sr[i].color, 0, texts[ni]};
            ni++;
        }
        if (sr[i].log->n_val) {
            snprintf(texts[ni], sizeof texts[ni], "%s val", name);
            items[ni] = (LegendItem){sr[i].val_color, 1, texts[ni]};
            ni++;
        }
    }
    if (nlogs == 1 && any_val) { // one log: "train" / "val" say it all
        for (int i = 0; i < ni; i++)
            items[i].text = items[i].kind ? "val" : "train";
    }
    if (nlogs > 1 || any_val) draw_legend(S, &f, items, ni, sr, nlogs);
    free(items);
    free(texts);
    rc = 0;
done:
    for (int i = 0; i < nlogs; i++) {
        free(sr[i].x);
        free(sr[i].xv);
        free(sr[i].ys);
    }
    free(sr);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// PNG encoder

typedef struct {
    uint8_t *buf;
    size_t len, cap;
    uint64_t acc; // pending bits, LSB first
    int nacc;
} BitWriter;

static void bw_byte(BitWriter *w, uint8_t b) {
    if (w->len == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 1 << 16;
        uint8_t *p = realloc(w->buf, w->cap);
        if (!p) die(EXIT_IO, "out of memory encoding PNG");
        w->buf = p;
    }
    w->buf[w->len++] = b;
}

static void bw_bits(BitWriter *w, uint32_t v, int n) { // n <= 32, LSB first
    w->acc |= (uint64_t)v << w->nacc;
    w->nacc += n;
    while (w->nacc >= 8) {
        bw_byte(w, (uint8_t)w->acc);
        w->acc >>= 8;
        w->nacc -= 8;
    }
}

static void bw_flush(BitWriter *w) {
    if (w->nacc > 0) bw_byte(w, (uint8_t)w->acc);
    w->acc = 0;
    w->nacc = 0;
}

// Huffman codes are sent most-significant bit first.
static void bw_code(BitWriter *w, uint32_t code, int n) {
    uint32_t r = 0;
    for (int i = 0; i < n; i++)
        r |= ((code >> i) & 1u) << (n - 1 - i);
    bw_bits(w, r, n);
}

static void put_literal(BitWriter *w, int v) { // fixed code for literal/length symbol v
    if (v < 144)
        bw_code(w, 0x30u + (uint32_t)v, 8);
    else if (v < 256)
        bw_code(w, 0x190u + (uint32_t)(v - 144), 9);
    else if (v < 280)
        bw_code(w, (uint32_t)(v - 256), 7);
    else
        bw_code(w, 0xC0u + (uint32_t)(v - 280), 8);
}

static const uint16_t LEN_BASE[29] = {3,  4,  5,  6,   7,   8,   9,   10,  11, 13,
                                      15, 17, 19, 23,  27,  31,  35,  43,  51, 59,
                                      67, 83, 99, 115, 131, 163, 195, 227, 258};
static const uint8_t LEN_EXTRA[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                      2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const uint16_t DIST_BASE[30] = {
    1,   2,   3,   4,   5,   7,    9,    13,   17,   25,   33,   49,   65,    97,    129,
    193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const uint8_t DIST_EXTRA[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                       6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

static void put_match(BitWriter *w, int len, int dist) {
    int li = 28;
    while (LEN_BASE[li] > len)
        li--;
    put_literal(w, 257 + li);
    if (LEN_EXTRA[li]) bw_bits(w, (uint32_t)(len - LEN_BASE[li]), LEN_EXTRA[li]);
    int di = 29;
    while (DIST_BASE[di] > dist)
        di--;
    bw_code(w, (uint32_t)di, 5);
    if (DIST_EXTRA[di]) bw_bits(w, (uint32_t)(dist - DIST_BASE[di]), DIST_EXTRA[di]);
}

// zlib stream (RFC 1950) holding one fixed-Huffman deflate block (RFC 1951) with greedy
// LZ77 matching over a 32 KiB window (hash chains on 3-byte prefixes).
static void zlib_compress(const uint8_t *in, size_t n, BitWriter *w) {
    enum { WIN = 32768, HBITS = 15, MAXCHAIN = 48, MINM = 3, MAXM = 258 };
    int32_t *head = xmalloc(sizeof(int32_t) << HBITS);
    int32_t *prev = xmalloc(sizeof(int32_t) * WIN);
    for (int i = 0; i < 1 << HBITS; i++)
        head[i] = -1;
    bw_byte(w, 0x78); // deflate, 32 KiB window
    bw_byte(w, 0x01); // no dictionary, fastest-level hint; (0x78 * 256 + 0x01) % 31 == 0
    bw_bits(w, 1, 1); // BFINAL
    bw_bits(w, 1, 2); // BTYPE = 01, fixed Huffman
#define HASH3(p)                                                                                   \
    ((((uint32_t)(p)[0] << 10) ^ ((uint32_t)(p)[1] << 5) ^ (p)[2]) & ((1u << HBITS) - 1))
    size_t i = 0;
    while (i < n) {
        int best = 0, bdist = 0;
        if (i + MINM <= n) {
            uint32_t h = HASH3(in + i);
            int32_t cand = head[h];
            size_t maxl = n - i < MAXM ? n - i : MAXM;
            for (int chain = 0; cand >= 0 && chain < MAXCHAIN; chain++) {
                size_t c = (size_t)cand;
                if (i - c > WIN - 1) break;
                if (in[c + (size_t)best] == in[i + (size_t)best]) {
                    size_t l = 0;
                    while (l < maxl && in[c + l] == in[i + l])
                        l++;
                    if ((int)l > best) {
                        best = (int)l;
                        bdist = (int)(i - c);
                        if (l == maxl) break;
                    }
                }
                int32_t nx = prev[c % WIN];
                if (nx >= cand) break; // stale entry from an older window
                cand = nx;
            }
        }
        size_t adv = best >= MINM ? (size_t)best : 1;
        if (best >= MINM)
            put_match(w, best, bdist);
        else
            put_literal(w, in[i]);
        for (size_t k = 0; k < adv; k++, i++) {
            if (i + MINM <= n) {
                uint32_t h = HASH3(in + i);
                prev[i % WIN] = head[h];
                head[h] = (int32_t)i;
            }
        }
    }
#undef HASH3
    put_literal(w, 256); // end of block
    bw_flush(w);
    uint32_t a = 1, b = 0; // Adler-32
    for (size_t k = 0; k < n; k++) {
        a = (a + in[k]) % 65521;
        b = (b + a) % 65521;
    }
    uint32_t ad = b << 16 | a;
    for (int s = 24; s >= 0; s -= 8)
        bw_byte(w, (uint8_t)(ad >> s));
    free(head);
    free(prev);
}

static void be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
    p[3] = (uint8_t)v;
}

static void png_chunk(BitWriter *o, const char type[4], const uint8_t *data, size_t n) {
    uint8_t hdr[8];
    be32(hdr, (uint32_t)n);
    memcpy(hdr + 4, type, 4);
    for (int k = 0; k < 8; k++)
        bw_byte(o, hdr[k]);
    for (size_t k = 0; k < n; k++)
        bw_byte(o, data[k]);
    uint32_t crc = crc32_update(0, type, 4);
    crc = crc32_update(crc, data, n);
    uint8_t c[4];
    be32(c, crc);
    for (int k = 0; k < 4; k++)
        bw_byte(o, c[k]);
}

static int paeth(int a, int b, int c) {
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

int png_encode_rgb(const uint8_t *rgb, int w, int h, uint8_t **out, size_t *len) {
    if (w <= 0 || h <= 0 || w > (1 << 24) / 3 || h > (1 << 24))
        return loom_fail("png: bad image size %dx%d", w, h);
    size_t stride = (size_t)w * 3, rowlen = stride + 1;
    uint8_t *raw = xmalloc(rowlen * (size_t)h), *cand = xmalloc(rowlen);
    // per row, the filter (RFC 2083 types 0-4) with the smallest sum of |signed residuals|
    for (int y = 0; y < h; y++) {
        const uint8_t *cur = rgb + (size_t)y * stride, *up = y ? cur - stride : NULL;
        uint8_t *dst = raw + (size_t)y * rowlen;
        long best = -1;
        for (int ft = 0; ft < 5; ft++) {
            long sum = 0;
            cand[0] = (uint8_t)ft;
            for (size_t i = 0; i < stride; i++) {
                int a = i >= 3 ? cur[i - 3] : 0, b = up ? up[i] : 0,
                    c = i >= 3 && up ? up[i - 3] : 0, pred = 0;
                switch (ft) {
                case 1: pred = a; break;
                case 2: pred = b; break;
                case 3: pred = (a + b) / 2; break;
                case 4: pred = paeth(a, b, c); break;
                }
                uint8_t r = (uint8_t)(cur[i] - pred);
                cand[i + 1] = r;
                sum += r < 128 ? r : 256 - r;
            }
            if (best < 0 || sum < best) {
                best = sum;
                memcpy(dst, cand, rowlen);
            }
        }
    }
    free(cand);
    BitWriter z = {0}, o = {0};
    zlib_compress(raw, rowlen * (size_t)h, &z);
    free(raw);
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    for (int k = 0; k < 8; k++)
        bw_byte(&o, sig[k]);
    uint8_t ihdr[13];
    be32(ihdr, (uint32_t)w);
    be32(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8;  // bit depth
    ihdr[9] = 2;  // colour type: RGB
    ihdr[10] = 0; // deflate
    ihdr[11] = 0; // adaptive filtering
    ihdr[12] = 0; // no interlace
    png_chunk(&o, "IHDR", ihdr, sizeof ihdr);
    static const char sw[] = "Software\0loom";
    png_chunk(&o, "tEXt", (const uint8_t *)sw, sizeof sw - 1);
    png_chunk(&o, "IDAT", z.buf, z.len);
    png_chunk(&o, "IEND", NULL, 0);
    free(z.buf);
    *out = o.buf;
    *len = o.len;
    return 0;
}

// ---------------------------------------------------------------------------------------------

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
    Surface S = {0};
    S.svg = fmt == PLOT_FMT_SVG;
    S.w = o.width, S.h = o.height;
    S.cx1 = S.w, S.cy1 = S.h;
    if (S.svg) {
        S.cap = 1 << 16;
        S.s = xmalloc(S.cap);
        sv_printf(&S,
                  "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                  "viewBox=\"0 0 %d %d\" font-family=\"Helvetica, Arial, sans-serif\">\n",
                  S.w, S.h, S.w, S.h);
        if (render(&S, logs, nlogs, &o)) {
            free(S.s);
            return -1;
        }
        sv_printf(&S, "</svg>\n");
        *out = (uint8_t *)S.s;
        *len = S.len;
        return 0;
    }
    S.px = xmalloc((size_t)S.w * S.h * 3);
    memset(S.px, 255, (size_t)S.w * S.h * 3);
    S.cov = xcalloc((size_t)S.w * S.h, sizeof(float));
    cov_reset_box(&S);
    int rc = render(&S, logs, nlogs, &o);
    if (!rc) rc = png_encode_rgb(S.px, S.w, S.h, out, len);
    free(S.px);
    free(S.cov);
    return rc;
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
