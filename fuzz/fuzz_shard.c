// fuzz_shard.c — llm.c token shards, uint16 and uint32 (src/data/shard.c): dataset_open on the
// input as a file (vocab from the first byte, so the token range check is exercised), then a few
// windows, sequential and shuffled, when the stream is long enough.
#include "../src/common.h"
#include "../src/data/shard.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int vocab = 2 + data[0] * 257; // 2 .. 65537; 255: Llama-3's 128,256 (uint32 shards)
    if (vocab > 65536) vocab = data[0] == 255 ? 128256 : 65536;
    const char *path = fuzz_file("shard.bin", data + 1, size - 1);
    DataSet d;
    if (dataset_open(&d, path, vocab)) return 0;
    int B = 2, T = 3, in[6], tg[6];
    uint64_t nw = dataset_num_windows(&d, B, T);
    for (uint64_t w = 0; w < 4 && nw; w++) {
        dataset_window(&d, w * 7919, B, T, 0, 1, in, tg);
        dataset_window(&d, w * 7919, B, T, 1, 1, in, tg);
    }
    dataset_close(&d);
    return 0;
}
