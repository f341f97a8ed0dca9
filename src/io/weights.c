// weights.c — init-file format detection and dispatch, streaming a model's tensors out of a
// located file, bounded file reads, the streaming atomic writer and float16/bfloat16 decoding
// shared by safetensors.c and llmc_checkpoint.c.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "weights.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common.h"
#include "hf_dir.h"
#include "llmc_checkpoint.h"
#include "safetensors.h"

#define LLMC_MAGIC 20240326u

// ---------------------------------------------------------------- format dispatch

int weights_detect(const char *path, WeightsFormat *fmt) {
    RFile f;
    if (rfile_open(&f, path)) return -1;
    uint8_t b[9] = {0};
    size_t n = f.size < sizeof b ? (size_t)f.size : sizeof b;
    int rc = rfile_read(&f, 0, b, n);
    rfile_close(&f);
    if (rc) return -1;
    if (n >= 4 && le32(b) == LLMC_MAGIC) {
        *fmt = WEIGHTS_LLMC;
        return 0;
    }
    if (n >= 9 && b[8] == '{') {
        *fmt = WEIGHTS_SAFETENSORS;
        return 0;
    }
    return loom_fail("%s: not a safetensors file or an llm.c checkpoint (%llu bytes, "
                     "unrecognised start)",
                     path, (unsigned long long)f.size);
}

int init_read_config(const char *path, int heads, GPTConfig *cfg) {
    WeightsFormat fmt = WEIGHTS_SAFETENSORS;
    if (hf_is_dir(path)) {
        GPTConfig c;
        if (hf_read_config(path, &c)) return -1;
        if (heads > 0 && heads != c.H)
            return loom_fail("%s: config.json has %d heads but --heads %d was given", path, c.H,
                             heads);
        *cfg = c;
        return 0;
    }
    if (weights_detect(path, &fmt)) return -1;
    if (fmt == WEIGHTS_SAFETENSORS) return st_read_config(path, heads, cfg);
    GPTConfig c;
    if (llmc_read_config(path, &c)) return -1;
    if (heads > 0 && heads != c.H)
        return loom_fail("%s: the checkpoint has %d heads but --heads %d was given", path, c.H,
                         heads);
    *cfg = c;
    return 0;
}

// Every tensor of m located in an init file of either format (src: m->ntensors entries).
static int locate(const GPT *m, const char *path, WeightsSrc *src) {
    WeightsFormat fmt = WEIGHTS_SAFETENSORS;
    if (weights_detect(path, &fmt)) return -1;
    return fmt == WEIGHTS_SAFETENSORS ? st_locate_gpt(m, path, src) : llmc_locate_gpt(m, path, src);
}

int gpt_check_init_file(const GPT *m, const char *path) {
    if (hf_is_dir(path)) return hf_check_dir(m, path);
    WeightsSrc *src = xcalloc((size_t)m->ntensors, sizeof *src);
    int rc = locate(m, path, src);
    free(src);
    return rc;
}

int weights_stream_file(const GPT *m, const char *path, WeightsLocateFn loc, size_t lo, size_t hi,
                        GptSink sink, void *ctx) {
    WeightsSrc *src = xcalloc((size_t)m->ntensors, sizeof *src);
    RFile f = {.fd = -1};
    int rc = loc(m, path, src) || rfile_open(&f, path)
                 ? -1
                 : weights_stream(m, &f, src, lo, hi, sink, ctx);
    rfile_close(&f);
    free(src);
    return rc;
}

int gpt_stream_init_file(const GPT *m, const char *path, size_t lo, size_t hi, GptSink sink,
                         void *ctx) {
    if (hf_is_dir(path)) return hf_stream_dir(m, path, lo, hi, sink, ctx);
    return weights_stream_file(m, path, locate, lo, hi, sink, ctx);
}

static int upload_sink(void *ctx, size_t at, size_t n, const float *src) {
    GPT *m = ctx;
    m->be->upload(m->params + at, src, n);
    return 0;
}

int weights_load(GPT *m, const char *path, WeightsLocateFn loc) {
    return weights_stream_file(m, path, loc, 0, m->nparams, upload_sink, m);
}

int gpt_load_init_file(GPT *m, const char *path) {
    if (hf_is_dir(path)) return hf_stream_dir(m, path, 0, m->nparams, upload_sink, m);
    return weights_load(m, path, locate);
}

// ---------------------------------------------------------------- streaming tensors

// Elements [e, e+n) of tensor t as stored (not transposed), piece by piece: raw bytes and the
// floats they decode to share the buffer.
static int stream_plain(const RFile *f, const TensorSpec *t, const WeightsSrc *w, size_t e,
                        size_t n, GptSink sink, void *ctx, float *buf) {
    size_t es = raw_float_size(w->type), piece = WEIGHTS_STREAM_FLOATS * 4 / (4 + es);
    uint8_t *raw = (uint8_t *)(buf + piece);
    for (size_t k = 0; k < n; k += piece) {
        size_t c = n - k < piece ? n - k : piece;
        if (rfile_read(f, w->off + (uint64_t)(e + k) * es, raw, c * es)) return -1;
        raw_to_f32(buf, raw, c, w->type);
        int rc = sink(ctx, t->off + e + k, c, buf);
        if (rc) return rc;
    }
    return 0;
}

// Elements [e, e+n) of a tensor the file holds transposed: loom's rows [o0, o0+r) of (out, in)
// at a time, each filled column by column from the file's rows (one read of r values each).
static int stream_transposed(const RFile *f, const TensorSpec *t, const WeightsSrc *w, size_t e,
                             size_t n, GptSink sink, void *ctx, float *buf) {
    size_t out = (size_t)t->shape[0], in = (size_t)t->shape[1], es = raw_float_size(w->type);
    size_t rows = WEIGHTS_STREAM_FLOATS / (in + 2), last = (e + n - 1) / in;
    if (!rows) return loom_fail("%s: tensor '%s' has rows too long to stream", f->path, t->name);
    for (size_t o0 = e / in; o0 <= last; o0 += rows) {
        size_t r = last + 1 - o0 < rows ? last + 1 - o0 : rows;
        float *col = buf + r * in;
        uint8_t *raw = (uint8_t *)(col + r);
        for (size_t k = 0; k < in; k++) {
            if (rfile_read(f, w->off + ((uint64_t)k * out + o0) * es, raw, r * es)) return -1;
            raw_to_f32(col, raw, r, w->type);
            for (size_t j = 0; j < r; j++)
                buf[j * in + k] = col[j];
        }
        size_t s, len = range_isect(o0 * in, (o0 + r) * in, e, e + n, &s);
        int rc = sink(ctx, t->off + s, len, buf + (s - o0 * in));
        if (rc) return rc;
    }
    return 0;
}

int weights_stream(const GPT *m, const RFile *f, const WeightsSrc *src, size_t lo, size_t hi,
                   GptSink sink, void *ctx) {
    float *buf = xmalloc(WEIGHTS_STREAM_FLOATS * sizeof(float));
    int rc = 0;
    for (int i = 0; i < m->ntensors && !rc; i++) {
        const TensorSpec *t = &m->tensors[i];
        size_t s, n = range_isect(t->off, t->off + t->n, lo, hi, &s);
        if (!n) continue;
        rc = src[i].transposed && t->ndim == 2
                 ? stream_transposed(f, t, &src[i], s - t->off, n, sink, ctx, buf)
                 : stream_plain(f, t, &src[i], s - t->off, n, sink, ctx, buf);
    }
    free(buf);
    return rc;
}

int gpt_save_weights_file(const GPT *m, const char *path) {
    size_t n = strlen(path);
    if (n >= 4 && !strcmp(path + n - 4, ".bin")) return llmc_save_gpt(m, path);
    if (hf_export_is_dir(&m->cfg, path)) return hf_save_dir_model(m, path, 0);
    return st_save_gpt(m, path);
}

// ---------------------------------------------------------------- bounded reads

int rfile_open(RFile *f, const char *path) {
    f->path = path;
    f->size = 0;
    f->fd = open(path, O_RDONLY);
    if (f->fd < 0) return loom_fail("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(f->fd, &st) || !S_ISREG(st.st_mode)) {
        close(f->fd);
        f->fd = -1;
        return loom_fail("%s: not a regular file", path);
    }
    f->size = (uint64_t)st.st_size;
    return 0;
}

int rfile_read(const RFile *f, uint64_t off, void *buf, size_t n) {
    if (off > f->size || n > f->size - off)
        return loom_fail("%s: truncated: needs bytes [%llu, %llu) but the file has %llu", f->path,
                         (unsigned long long)off, (unsigned long long)off + n,
                         (unsigned long long)f->size);
    char *p = buf;
    while (n) {
        ssize_t r = pread(f->fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return loom_fail("%s: read error: %s", f->path, strerror(errno));
        if (r == 0) return loom_fail("%s: unexpected end of file (file changed?)", f->path);
        p += r;
        off += (uint64_t)r;
        n -= (size_t)r;
    }
    return 0;
}

void rfile_close(RFile *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
}

// ---------------------------------------------------------------- atomic streaming writes

int aout_write_f32_strided(AtomicOut *o, const float *x, size_t n, size_t stride) {
    uint8_t buf[4 * 4096];
    while (n && !o->failed) {
        size_t k = n < 4096 ? n : 4096;
        for (size_t i = 0; i < k; i++) {
            uint32_t u;
            memcpy(&u, &x[i * stride], 4);
            buf[4 * i] = (uint8_t)u;
            buf[4 * i + 1] = (uint8_t)(u >> 8);
            buf[4 * i + 2] = (uint8_t)(u >> 16);
            buf[4 * i + 3] = (uint8_t)(u >> 24);
        }
        aout_write(o, buf, 4 * k);
        x += k * stride;
        n -= k;
    }
    return o->failed ? -1 : 0;
}

int aout_write_f32(AtomicOut *o, const float *x, size_t n) {
    return aout_write_f32_strided(o, x, n, 1);
}

// ---------------------------------------------------------------- float decoding

float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0) {
        float f = (float)man * 0x1p-24f; // zero or subnormal: man · 2^-24, exact in float
        return sign ? -f : f;
    }
    if (exp == 31)
        bits = sign | 0x7f800000u | (man << 13); // inf / NaN (payload kept)
    else
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

void raw_to_f32(float *dst, const uint8_t *src, size_t n, RawFloat t) {
    switch (t) {
    case RAW_F32:
        for (size_t i = 0; i < n; i++) {
            uint32_t u = le32(src + 4 * i);
            memcpy(&dst[i], &u, 4);
        }
        break;
    case RAW_F16:
        for (size_t i = 0; i < n; i++)
            dst[i] = f16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
        break;
    case RAW_BF16:
        for (size_t i = 0; i < n; i++)
            dst[i] = bf16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
        break;
    }
}
