// test_data_optim.c — data windows (sequential order across shard boundaries, shuffled order
// is a seeded per-epoch permutation), shard validation, LR schedules and clipping.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/common.h"
#include "../src/data/shard.h"
#include "../src/optim/optim.h"
#include "test.h"

static char dir[64];

static void make_shards(void) {
    snprintf(dir, sizeof dir, "/tmp/loom_data_XXXXXX");
    if (!mkdtemp(dir)) abort();
    uint16_t a[100], b[61];
    for (int i = 0; i < 100; i++)
        a[i] = (uint16_t)i;
    for (int i = 0; i < 61; i++)
        b[i] = (uint16_t)(100 + i);
    char p[128];
    snprintf(p, sizeof p, "%s/s_000.bin", dir);
    shard_write(p, a, 100);
    snprintf(p, sizeof p, "%s/s_001.bin", dir);
    shard_write(p, b, 61);
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
        int start = (int)(w % 8) * 20; // wraps after 8 windows
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

TEST(vocab_and_glob_checks) {
    DataSet d;
    char g[128];
    snprintf(g, sizeof g, "%s/s_*.bin", dir);
    CHECK(dataset_open(&d, g, 200) == 0, "glob");
    dataset_close(&d);
    CHECK(dataset_open(&d, g, 150) != 0, "token 160 >= vocab 150 must fail");
    CHECK(strstr(loom_errmsg(), "s_001.bin") != NULL, "message names the file: %s", loom_errmsg());
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
    RUN(vocab_and_glob_checks);
    RUN(lr_schedules);
    RUN(clipping);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return test_summary();
}
