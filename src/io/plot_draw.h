// plot_draw.h — drawing primitives for plot.c (internal to src/io/).
#pragma once
#include <cairo.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t r, g, b;
} Rgb;

typedef enum { ROLE_TICK, ROLE_LABEL, ROLE_LEGEND, ROLE_TITLE } TextRole;
enum { ANCHOR_START, ANCHOR_MIDDLE, ANCHOR_END };

void draw_rgb(cairo_t *cr, Rgb c, double alpha);
double draw_font_px(TextRole r);
double draw_cap_height(TextRole r);
double draw_text_width(cairo_t *cr, TextRole r, const char *t);
void draw_text(cairo_t *cr, double x, double y, const char *t, TextRole role, int anchor,
               int vertical, Rgb c);
void draw_hvline(cairo_t *cr, int x0, int y0, int x1, int y1, Rgb c);
void draw_box(cairo_t *cr, int x0, int y0, int x1, int y1, Rgb c);
void draw_polyline(cairo_t *cr, const double *xs, const double *ys, size_t n, Rgb c, double width,
                   double alpha, int dashed);
void draw_marker(cairo_t *cr, double x, double y, double r, Rgb c);
