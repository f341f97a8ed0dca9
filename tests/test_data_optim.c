// test_data_optim.c — the data order (windows of B sequences: without shuffle the contiguous
// B·T+1 tokens of before across shard boundaries, continuing modulo the sequences past an
// epoch; with shuffle every row an independent sequence of a seeded per-epoch permutation),
// shard validation (uint16 and uint32 shards, mixed in one stream), LR schedules and clipping.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/common.h"
#include "../src/data/shard.h"
#include "../src/optim/optim.h"
#include "test.h"

static char dir[64], big[64];
enum { BIG = 20000 }; // tokens in `big`, each token the value of its stream position

static void make_shards(void) {
    snprintf(dir, sizeof dir, "/tmp/loom_data_XXXXXX");
    if (!mkdtemp(dir)) abort();
    uint32_t a[100], b[61];
    for (int i = 0; i < 100; i++)
        a[i] = (uint32_t)i;
    for (int i = 0; i < 61; i++)
        b[i] = (uint32_t)(100 + i);
    char p[128];
    snprintf(p, sizeof p, "%s/s_000.bin", dir);
    shard_write(p, a, 100, 2);
    snprintf(p, sizeof p, "%s/s_001.bin", dir);
    shard_write(p, b, 61, 4); // a uint32 shard after a uint16 one: one stream
    // `big`: shards of 5000, 0, 3 (shorter than a sequence), 7000 and 7997 tokens
    snprintf(big, sizeof big, "/tmp/loom_data_XXXXXX");
    if (!mkdtemp(big)) abort();
    static uint32_t t[BIG];
    for (int i = 0; i < BIG; i++)
        t[i] = (uint32_t)i;
    size_t sizes[] = {5000, 0, 3, 7000, 7997}, at = 0;
    for (int f = 0; f < 5; f++) {
        snprintf(p, sizeof p, "%s/b_%03d.bin", big, f);
        shard_write(p, t + at, sizes[f], f == 3 ? 4 : 2); // one of them uint32
        at += sizes[f];
    }
}

TEST(sequential_windows_cross_shards) {
    DataSet d;
    CHECK(dataset_open(&d, dir, 200) == 0, "open dir: %s", loom_errmsg());
    CHECK(d.total == 161 && d.nfiles == 2, "total %zu files %d", d.total, d.nfiles);
    int B = 2, T = 10, in[20], tg[20];
    CHECK(dataset_num_windows(&d, B, T) == 8, "windows %llu",
          (unsigned long long)dataset_num_windows(&d, B, T));
    for (uint64_t w = 0; w < 10; w++) {
        dataset_window(&d, w, B, T, 0, 0, in, tg);
        int start = (int)(w % 8) * 20; // 16 sequences = 8 windows: epoch 2 starts at window 8
        int ok = 1;
        for (int i = 0; i < 20; i++)
            ok &= in[i] == start + i && tg[i] == start + i + 1;
        CHECK(ok, "window %llu starts at %d, expected %d", (unsigned long long)w, in[0], start);
    }
    dataset_close(&d);
}

TEST(shuffled_windows_are_a_seeded_permutation) {
    DataSet d;
    dataset_open(&d, dir, 200);
    int B = 1, T = 4, in[4], tg[4];
    uint64_t nw = dataset_num_windows(&d, B, T); // 40
    int seen[40] = {0}, order1[40], differs = 0, differs_epoch = 0;
    for (uint64_t w = 0; w < nw; w++) {
        dataset_window(&d, w, B, T, 1, 42, in, tg);
        int idx = in[0] / 4;
        seen[idx]++;
        order1[w] = idx;
        differs += idx != (int)w;
        CHECK(tg[0] == in[0] + 1, "targets shifted by one");
    }
    int all_once = 1;
    for (uint64_t i = 0; i < nw; i++)
        all_once &= seen[i] == 1;
    CHECK(all_once, "each window exactly once per epoch");
    CHECK(differs > 30, "order is shuffled (%d of 40 moved)", differs);
    for (uint64_t w = 0; w < nw; w++) { // same seed → same order; next epoch → another order
        dataset_window(&d, w, B, T, 1, 42, in, tg);
        CHECK(in[0] / 4 == order1[w], "deterministic");
        dataset_window(&d, w + nw, B, T, 1, 42, in, tg);
        differs_epoch += in[0] / 4 != order1[w];
    }
    CHECK(differs_epoch > 30, "epoch 2 differs from epoch 1 (%d)", differs_epoch);
    dataset_close(&d);
}

// Without shuffle, window w of the first epoch is the old window: tokens [w·B·T, w·B·T + B·T]
// as B·T inputs and targets shifted by one (expected bytes from the positions alone), across
// empty and short shards; past the epoch the sequences continue modulo ns.
TEST(shuffle_off_reads_the_contiguous_windows) {
    DataSet d;
    CHECK(dataset_open(&d, big, 65536) == 0, "open: %s", loom_errmsg());
    int shapes[][2] = {{1, 7}, {3, 10}, {8, 64}, {5, 1}, {2, 333}};
    static int in[8 * 64 * 2], tg[8 * 64 * 2];
    for (int k = 0; k < 5; k++) {
        int B = shapes[k][0], T = shapes[k][1], bad = 0;
        uint64_t nw = dataset_num_windows(&d, B, T), ns = dataset_num_sequences(&d, T);
        CHECK(nw == (BIG - 1) / (uint64_t)(B * T) && ns == (BIG - 1) / (uint64_t)T,
              "B%d T%d: %llu windows, %llu sequences", B, T, (unsigned long long)nw,
              (unsigned long long)ns);
        for (uint64_t w = 0; w < nw; w++) {
            dataset_window(&d, w, B, T, 0, 0, in, tg);
            for (int i = 0; i < B * T; i++)
                bad += in[i] != (int)(w * B * T) + i || tg[i] != (int)(w * B * T) + i + 1;
        }
        CHECK(!bad, "B%d T%d: %d tokens differ from the contiguous windows", B, T, bad);
        dataset_window(&d, nw, B, T, 0, 0, in, tg); // the first window past the epoch
        for (int b = 0; b < B; b++) {
            uint64_t idx = (nw * B + b) % ns;
            CHECK(in[b * T] == (int)(idx * T) && tg[b * T + T - 1] == (int)(idx * T + T),
                  "B%d T%d: row %d past the epoch starts at %d, expected sequence %llu", B, T, b,
                  in[b * T], (unsigned long long)idx);
        }
    }
    dataset_close(&d);
}

// The global sequence index of row b of window w with shuffle on (checking the row's content).
static long row_sequence(const int *in, const int *tg, int b, int T) {
    long s = in[b * T];
    if (s % T) return -1;
    for (int t = 0; t < T; t++)
        if (in[b * T + t] != s + t || tg[b * T + t] != s + t + 1) return -1;
    return s / T;
}

// With shuffle, every row is a sequence of a seeded permutation: each read exactly once per
// epoch (an epoch of 2499 sequences ends inside a window of 8), the rows of a window are not
// neighbours in the text, the same seed gives the same order and another seed another.
TEST(shuffled_rows_are_independent_sequences) {
    DataSet d;
    dataset_open(&d, big, 65536);
    int B = 8, T = 8, in[64], tg[64], bad = 0, adjacent = 0, pairs = 0, same = 0, other = 0;
    uint64_t ns = dataset_num_sequences(&d, T), nwin = (2 * ns + B - 1) / B; // two epochs
    CHECK(ns == 2499 && ns % B, "%llu sequences", (unsigned long long)ns);
    int *seen = xcalloc(2 * ns, sizeof(int));
    long *order = xmalloc(nwin * B * sizeof(long));
    for (uint64_t w = 0; w < nwin; w++) {
        dataset_window(&d, w, B, T, 1, 42, in, tg);
        for (int b = 0; b < B; b++) {
            uint64_t g = w * B + b;
            long s = row_sequence(in, tg, b, T);
            order[g] = s;
            if (s < 0) {
                bad++;
                continue;
            }
            if (g < 2 * ns) seen[(g / ns) * ns + (uint64_t)s]++;
            if (b) pairs++, adjacent += labs(s - order[g - 1]) == 1;
        }
    }
    CHECK(!bad, "%d rows are not whole sequences", bad);
    int once = 1;
    for (uint64_t i = 0; i < 2 * ns; i++)
        once &= seen[i] == 1;
    CHECK(once, "every sequence exactly once in each of two epochs");
    CHECK(adjacent * 50 < pairs, "%d of %d neighbouring rows are neighbouring sequences", adjacent,
          pairs);
    for (uint64_t w = 0; w < nwin; w += 7) {
        dataset_window(&d, w, B, T, 1, 42, in, tg);
        for (int b = 0; b < B; b++)
            same += row_sequence(in, tg, b, T) == order[w * B + b];
        dataset_window(&d, w, B, T, 1, 43, in, tg);
        for (int b = 0; b < B; b++)
            other += row_sequence(in, tg, b, T) == order[w * B + b];
    }
    uint64_t checked = (nwin + 6) / 7 * B;
    CHECK(same == (int)checked, "seed 42 again: %d of %llu rows the same", same,
          (unsigned long long)checked);
    CHECK(other * 20 < (int)checked, "seed 43: %d of %llu rows the same", other,
          (unsigned long long)checked);
    free(seen);
    free(order);
    dataset_close(&d);
}

TEST(vocab_and_glob_checks) {
    DataSet d;
    char g[128];
    snprintf(g, sizeof g, "%s/s_*.bin", dir);
    CHECK(dataset_open(&d, g, 200) == 0, "glob");
    dataset_close(&d);
    CHECK(dataset_open(&d, g, 150) != 0, "token 160 >= vocab 150 must fail");
    CHECK(strstr(loom_errmsg(), "s_001.bin") != NULL, "message names the file: %s", loom_errmsg());
}

TEST(uint32_shards) { // llm.c's 20240801 / version 7 format: ids past 65,535
    char p[128];
    snprintf(p, sizeof p, "%s/wide.bin", dir);
    uint32_t t[9] = {0, 70000, 128255, 5, 65536, 65535, 1, 100000, 2};
    CHECK(shard_write(p, t, 9, 2) != 0 && strstr(loom_errmsg(), "32-bit"),
          "a uint16 shard must refuse token 70000: %s", loom_errmsg());
    CHECK(shard_write(p, t, 9, 4) == 0, "write: %s", loom_errmsg());
    CHECK(shard_width(128256) == 4 && shard_width(65536) == 2 && shard_width(50257) == 2,
          "shard_width");
    DataSet d;
    CHECK(dataset_open(&d, p, 128256) == 0, "open: %s", loom_errmsg());
    int in[8], tg[8];
    CHECK(dataset_window(&d, 0, 1, 8, 0, 1, in, tg) == 0, "window");
    for (int i = 0; i < 8; i++)
        CHECK(in[i] == (int)t[i] && tg[i] == (int)t[i + 1], "token %d: %d/%d", i, in[i], tg[i]);
    dataset_close(&d);
    CHECK(dataset_open(&d, p, 100000) != 0 && strstr(loom_errmsg(), "128255"),
          "token 128255 >= vocab 100000 must fail: %s", loom_errmsg());
    FILE *f = fopen(p, "r+b"); // version 1 with the uint32 magic: refused, naming both
    int32_t v = 1;
    fseek(f, 4, SEEK_SET), fwrite(&v, 4, 1, f), fclose(f);
    CHECK(dataset_open(&d, p, 128256) != 0 && strstr(loom_errmsg(), "version 1"), "bad version: %s",
          loom_errmsg());
    unlink(p);
}

TEST(lr_schedules) {
    OptConfig c = {
        .lr = 1.0f, .min_lr = 0.1f, .schedule = LR_COSINE, .warmup = 10, .total_steps = 110};
    CHECK(close_enough(lr_at(&c, 0), 0.1, 1e-6, 0), "warmup start %f", lr_at(&c, 0));
    CHECK(close_enough(lr_at(&c, 9), 1.0, 1e-6, 0), "warmup end %f", lr_at(&c, 9));
    CHECK(close_enough(lr_at(&c, 10), 1.0, 1e-6, 0), "cosine start");
    CHECK(close_enough(lr_at(&c, 60), 0.55, 1e-5, 0), "cosine midpoint %f", lr_at(&c, 60));
    CHECK(close_enough(lr_at(&c, 110), 0.1, 1e-6, 0), "cosine floor %f", lr_at(&c, 110));
    c.schedule = LR_CONSTANT;
    CHECK(lr_at(&c, 50) == 1.0f && lr_at(&c, 4) == 0.5f, "constant with warmup");
}

TEST(clipping) {
    CHECK(clip_scale(10.f, 0.f) == 1.f, "off");
    CHECK(clip_scale(0.5f, 1.f) == 1.f, "under the limit");
    CHECK(close_enough(clip_scale(4.f, 1.f), 0.25, 1e-5, 0), "scaled to the limit");
}

int main(void) {
    make_shards();
    RUN(sequential_windows_cross_shards);
    RUN(shuffled_windows_are_a_seeded_permutation);
    RUN(shuffle_off_reads_the_contiguous_windows);
    RUN(shuffled_rows_are_independent_sequences);
    RUN(vocab_and_glob_checks);
    RUN(uint32_shards);
    RUN(lr_schedules);
    RUN(clipping);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir, big);
    if (system(cmd)) return 1;
    return test_summary();
}
