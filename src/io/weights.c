// weights.c — init-file format detection and dispatch, bounded file reads, the streaming
// atomic writer and float16/bfloat16 decoding shared by safetensors.c and llmc_checkpoint.c.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "weights.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common.h"
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

int gpt_load_init_file(GPT *m, const char *path) {
    WeightsFormat fmt = WEIGHTS_SAFETENSORS;
    if (weights_detect(path, &fmt)) return -1;
    return fmt == WEIGHTS_SAFETENSORS ? st_load_gpt(m, path) : llmc_load_gpt(m, path);
}

int gpt_save_weights_file(const GPT *m, const char *path) {
    size_t n = strlen(path);
    if (n >= 4 && !strcmp(path + n - 4, ".bin")) return llmc_save_gpt(m, path);
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

int aout_write_f32(AtomicOut *o, const float *x, size_t n) {
    uint8_t buf[4 * 4096];
    while (n && !o->failed) {
        size_t k = n < 4096 ? n : 4096;
        for (size_t i = 0; i < k; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            buf[4 * i] = (uint8_t)u;
            buf[4 * i + 1] = (uint8_t)(u >> 8);
            buf[4 * i + 2] = (uint8_t)(u >> 16);
            buf[4 * i + 3] = (uint8_t)(u >> 24);
        }
        aout_write(o, buf, 4 * k);
        x += k;
        n -= k;
    }
    return o->failed ? -1 : 0;
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
