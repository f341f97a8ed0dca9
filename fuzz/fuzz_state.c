// fuzz_state.c — CO2 per-rank state files (state_file_read in src/io/state_file.c). The first
// input byte picks what the reader expects (kind, rank, array lengths) and whether the harness
// rewrites the CRC field to match the rest (otherwise the fuzzer could rarely get past the
// checksum); the remaining bytes are the file.
#include "../src/common.h"
#include "../src/io/checkpoint.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1 << 16)) return 0;
    uint8_t sel = data[0];
    uint8_t *file = xmalloc(size);
    memcpy(file, data + 1, size - 1);
    size_t len = size - 1;
    enum { HDR = 8 + 16 + 3 * 4 + 4 }; // magic, kind, rank/nranks/narrays, crc
    if ((sel & 1) && len >= HDR) {
        uint32_t crc = crc32_update(0, file + HDR, len - HDR);
        memcpy(file + HDR - 4, &crc, 4);
    }
    const char *path = fuzz_file("co2_0.bin", file, len);
    free(file);
    static const size_t lens_tab[4][3] = {{3, 5, 0}, {0, 0, 0}, {1, 1, 1}, {16, 0, 2}};
    const size_t *lens = lens_tab[(sel >> 1) & 3];
    int n = 1 + ((sel >> 3) & 1) + ((sel >> 4) & 1);
    int rank = (sel >> 5) & 1, nranks = 2;
    const char *kind = (sel >> 6) & 1 ? "co2-sharded" : "co2";
    float a0[16], a1[16], a2[16];
    float *const arrays[3] = {a0, a1, a2};
    state_file_read(path, kind, rank, nranks, arrays, lens, n, NULL);
    return 0;
}
