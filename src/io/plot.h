// plot.h — draw loss curves from metrics logs as SVG or PNG (cairo).
//
// One chart: training loss against step (or tokens) for each log, one colour per log, labelled
// with the file name (parent directories are added when names collide); validation losses as
// dashed lines with markers; optional centred moving-average smoothing (the raw curve is kept,
// faint, behind the smoothed one); "nice" axis ticks; optional log-scale y; title and legend.
// Cairo draws anti-aliased lines and text in fontconfig's sans-serif (invalid UTF-8 bytes draw
// as '?') and writes the file; in the SVG, text is glyph outlines.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "metrics_read.h"

typedef enum { PLOT_X_STEP = 0, PLOT_X_TOKENS = 1 } PlotX;
typedef enum { PLOT_FMT_NONE = -1, PLOT_FMT_SVG = 0, PLOT_FMT_PNG = 1 } PlotFormat;

typedef struct {
    const char *title; // NULL or "" → "Training loss"
    int smooth;        // moving-average window in points; <= 1: none
    PlotX x;
    int log_y;
    int width, height; // pixels (SVG: user units); 0 → 1000 x 600
} PlotOptions;

// Output format from the file name's extension (.svg / .png, any case), or PLOT_FMT_NONE.
PlotFormat plot_format_for(const char *path);

// Render the chart. On success *out is a malloc'd buffer of *len bytes (the SVG text is also
// NUL-terminated). Returns 0, or -1 with loom_errmsg (no data to draw, no token counts, ...).
int plot_render(const MetricsLog *logs, int nlogs, const PlotOptions *opt, PlotFormat fmt,
                uint8_t **out, size_t *len);
// plot_render + write_file_atomic, with the format chosen by plot_format_for(path).
int plot_write(const char *path, const MetricsLog *logs, int nlogs, const PlotOptions *opt);

// Encode 8-bit RGB pixels (rows top to bottom, 3*w bytes each) as a PNG file (8-bit RGB).
// Returns 0 and a malloc'd buffer, or -1 with loom_errmsg.
int png_encode_rgb(const uint8_t *rgb, int w, int h, uint8_t **out, size_t *len);

// Up to `max` tick values covering [lo, hi] at a 1/2/2.5/5 x 10^k spacing, about `target`
// of them; the chosen spacing goes to *step. Used for the axes; exposed for the tests.
int plot_nice_ticks(double lo, double hi, int target, double *ticks, int max, double *step);
