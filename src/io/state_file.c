// state_file.c — a rank's own state file beside a checkpoint's shards (checkpoint.h: CO2's outer
// state, a pipeline's previous weight version, a peer's buffers...): a header naming its kind,
// rank and rank count, the arrays' lengths, and a CRC-32 over all of it, written through the
// same atomic path as the shards and checked whole before any of it is used.
#include "checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "ckpt_stream.h"
#include "weights.h"

#define STATE_MAGIC "LOOMST1"
typedef struct {
    char magic[8], kind[16];
    int32_t rank, nranks, narrays;
    uint32_t crc; // over the lengths and the arrays
} StateHeader;

static int state_write(const char *path, const char *kind, int rank, int nranks,
                       const float *const *arrays, const size_t *lens, int n,
                       const CkptShard *via) {
    StateHeader h = {.rank = rank, .nranks = nranks, .narrays = n};
    memcpy(h.magic, STATE_MAGIC, 8);
    snprintf(h.kind, sizeof h.kind, "%s", kind);
    uint64_t *ln = xcalloc((size_t)n + 1, sizeof *ln);
    for (int i = 0; i < n; i++)
        ln[i] = lens[i];
    AtomicOut o;
    if (aout_open(&o, path)) return free(ln), -1;
    // the header's CRC covers what follows it: written last, over the placeholder
    aout_write(&o, &h, sizeof h);
    aout_write(&o, ln, (size_t)n * sizeof *ln);
    uint32_t crc = crc32_update(0, ln, (size_t)n * sizeof *ln);
    float *buf = via->be || via->fetch ? xmalloc(CKPT_STREAM_FLOATS * sizeof(float)) : NULL;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        rc = ckpt_write_array(&o, via, i, arrays ? arrays[i] : NULL, lens[i], &crc, buf);
    free(buf), free(ln);
    if (rc) {
        aout_abort(&o);
        return -1;
    }
    h.crc = crc;
    if (!o.failed && (fseek(o.fp, 0, SEEK_SET) || fwrite(&h, sizeof h, 1, o.fp) != 1)) {
        aout_abort(&o);
        return loom_fail("%s: write failed: %s", path, strerror(errno));
    }
    return aout_commit(&o);
}

int state_file_write(const char *path, const char *kind, int rank, int nranks,
                     const float *const *arrays, const size_t *lens, int n, const Backend *be) {
    CkptShard via = {.be = be};
    return state_write(path, kind, rank, nranks, arrays, lens, n, &via);
}

int state_file_write_fn(const char *path, const char *kind, int rank, int nranks,
                        const size_t *lens, int n,
                        int (*fetch)(void *ctx, int array, size_t at, size_t n, float *dst),
                        void *ctx) {
    CkptShard via = {.fetch = fetch, .fetch_ctx = ctx};
    return state_write(path, kind, rank, nranks, NULL, lens, n, &via);
}

// The header and array lengths of a state file, checked against what the reader expects.
static int state_check(const RFile *f, const char *kind, int rank, int nranks, const size_t *lens,
                       int n, uint32_t *crc) {
    const char *path = f->path;
    StateHeader h;
    uint64_t want = sizeof h + (uint64_t)n * sizeof(uint64_t);
    for (int i = 0; i < n; i++)
        want += lens[i] * sizeof(float);
    if (f->size < sizeof h || rfile_read(f, 0, &h, sizeof h) || memcmp(h.magic, STATE_MAGIC, 8))
        return loom_fail("%s: not a loom state file", path);
    h.kind[sizeof h.kind - 1] = 0;
    if (strcmp(h.kind, kind))
        return loom_fail("%s: holds '%s' state, '%s' expected", path, h.kind, kind);
    if (h.rank != rank || h.nranks != nranks)
        return loom_fail("%s: written by rank %d of %d, read by rank %d of %d", path, h.rank,
                         h.nranks, rank, nranks);
    if (h.narrays != n || f->size != want)
        return loom_fail("%s: %" PRIu64 " bytes with %d arrays; %" PRIu64 " bytes with %d arrays "
                         "expected (model shape or layout differs)",
                         path, f->size, h.narrays, want, n);
    uint64_t *ln = xcalloc((size_t)n + 1, sizeof *ln);
    int rc = rfile_read(f, sizeof h, ln, (size_t)n * sizeof *ln);
    for (int i = 0; i < n && !rc; i++)
        if (ln[i] != lens[i])
            rc = loom_fail("%s: array %d has %llu values, %zu expected", path, i,
                           (unsigned long long)ln[i], lens[i]);
    *crc = crc32_update(0, ln, (size_t)n * sizeof *ln);
    free(ln);
    return rc;
}

static int state_read(const char *path, const char *kind, int rank, int nranks,
                      float *const *arrays, const size_t *lens, int n, const CkptWant *via) {
    const Backend *be = via->be;
    RFile f;
    if (rfile_open(&f, path)) return -1;
    uint32_t crc = 0;
    StateHeader h;
    int rc = state_check(&f, kind, rank, nranks, lens, n, &crc);
    if (!rc) rc = rfile_read(&f, 0, &h, sizeof h);
    uint64_t off = sizeof h + (uint64_t)n * sizeof(uint64_t);
    float *buf = xmalloc(CKPT_STREAM_FLOATS * sizeof(float));
    for (int i = 0; i < n && !rc; i++)
        for (size_t k = 0; k < lens[i] && !rc; k += CKPT_STREAM_FLOATS) { // streamed, then checked
            size_t c = lens[i] - k < CKPT_STREAM_FLOATS ? lens[i] - k : CKPT_STREAM_FLOATS;
            if ((rc = rfile_read(&f, off, buf, c * sizeof(float)))) break;
            crc = crc32_update(crc, buf, c * sizeof(float));
            if (via->store)
                rc = via->store(via->store_ctx, i, k, c, buf);
            else if (be)
                be->upload(arrays[i] + k, buf, c);
            else
                memcpy(arrays[i] + k, buf, c * sizeof(float));
            off += c * sizeof(float);
        }
    free(buf);
    rfile_close(&f);
    if (!rc && crc != h.crc) rc = loom_fail("%s: checksum mismatch (corrupted file)", path);
    return rc;
}

int state_file_read(const char *path, const char *kind, int rank, int nranks, float *const *arrays,
                    const size_t *lens, int n, const Backend *be) {
    CkptWant via = {.be = be};
    return state_read(path, kind, rank, nranks, arrays, lens, n, &via);
}

int state_file_read_fn(const char *path, const char *kind, int rank, int nranks, const size_t *lens,
                       int n,
                       int (*store)(void *ctx, int array, size_t at, size_t n, const float *src),
                       void *ctx) {
    CkptWant via = {.store = store, .store_ctx = ctx};
    return state_read(path, kind, rank, nranks, NULL, lens, n, &via);
}
