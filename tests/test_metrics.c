// test_metrics.c — the metrics JSON Lines writer: non-finite values written as null (JSON),
// read back by the strict reader as NaN; bare nan / inf rejected with a message that says why;
// a failed write (ENOSPC on /dev/full) reported once, naming the file, and every later write
// failing too; a failed save's record is JSON whatever its reason holds, and the reader skips it.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/common.h"
#include "../src/io/metrics.h"
#include "../src/io/metrics_read.h"
#include "test.h"

static char *slurp(const char *path) {
    size_t len = 0;
    return read_file(path, &len);
}

TEST(nonfinite_written_as_null) {
    char path[] = "/tmp/loom_metrics_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    close(fd);
    Metrics mt;
    CHECK(metrics_open(&mt, path, 0) == 0, "%s", loom_errmsg());
    MetricsStep a = {.step = 1,
                     .loss = 3.5,
                     .lr = 1e-3,
                     .grad_norm = 0.5,
                     .step_ms = 10,
                     .tokens = 64,
                     .tokens_per_s = 6400,
                     .mfu = 0.1,
                     .exposed_ms = -1,
                     .io_ms = -1};
    MetricsStep b = a;
    b.step = 2, b.loss = NAN, b.grad_norm = INFINITY, b.mfu = -INFINITY, b.exposed_ms = 1.5,
    b.overlap_ms = 120.25;
    CHECK(metrics_step(&mt, &a) == 0, "step 1: %s", loom_errmsg());
    CHECK(metrics_step(&mt, &b) == 0, "step 2: %s", loom_errmsg());
    CHECK(metrics_val(&mt, 2, NAN) == 0, "val: %s", loom_errmsg());
    metrics_close(&mt);
    char *text = slurp(path);
    CHECK(text != NULL, "read back");
    if (!text) return;
    const char *want = "{\"step\":1,\"loss\":3.5,\"lr\":0.001,\"grad_norm\":0.5,\"step_ms\":10.000,"
                       "\"tokens\":64,\"tokens_per_s\":6400.0,\"mfu\":0.1000}\n"
                       "{\"step\":2,\"loss\":null,\"lr\":0.001,\"grad_norm\":null,\"step_ms\":"
                       "10.000,\"tokens\":64,\"tokens_per_s\":6400.0,\"mfu\":null,"
                       "\"comm_exposed_ms\":1.500,\"comm_overlap_ms\":120.250}\n"
                       "{\"step\":2,\"val_loss\":null}\n";
    CHECK(!strcmp(text, want), "got:\n%s", text);
    CHECK(!strstr(text, "nan") && !strstr(text, "inf"), "bare non-finite token:\n%s", text);
    MetricsLog m;
    int rc = metrics_parse(text, strlen(text), path, &m);
    CHECK(rc == 0, "strict reader: %s", loom_errmsg());
    if (!rc) {
        CHECK(m.n == 2 && m.n_val == 1, "rows %zu %zu", m.n, m.n_val);
        if (m.n == 2 && m.n_val == 1)
            CHECK(m.loss[0] == 3.5 && isnan(m.loss[1]) && isnan(m.grad_norm[1]) &&
                      m.tokens[1] == 64 && isnan(m.val_loss[0]),
                  "values %g %g %g", m.loss[1], m.grad_norm[1], m.val_loss[0]);
        metrics_free(&m);
    }
    free(text);
    unlink(path);
}

TEST(bare_nonfinite_rejected) {
    const char *lines[] = {"{\"step\":1,\"loss\":nan}\n", "{\"step\":1,\"loss\":-nan}\n",
                           "{\"step\":1,\"loss\":1,\"grad_norm\":inf}\n",
                           "{\"step\":1,\"loss\":1,\"mfu\": -inf}\n"};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        MetricsLog m;
        int rc = metrics_parse(lines[i], strlen(lines[i]), "old.jsonl", &m);
        CHECK(rc == -1, "accepted %s", lines[i]);
        if (rc == -1)
            CHECK(strstr(loom_errmsg(), "old.jsonl:1: malformed line") &&
                      strstr(loom_errmsg(), "is null"),
                  "message: %s", loom_errmsg());
        else
            metrics_free(&m);
    }
}

// /dev/full: opening works, every write fails with ENOSPC — the disk-full case.
TEST(write_failure_reported) {
    Metrics mt;
    if (metrics_open(&mt, "/dev/full", 0)) {
        printf("skip - write_failure_reported: %s\n", loom_errmsg());
        return;
    }
    MetricsStep a = {.step = 1, .loss = 3.5, .exposed_ms = -1, .io_ms = -1};
    CHECK(metrics_step(&mt, &a) == -1, "write to /dev/full succeeded");
    CHECK(strstr(loom_errmsg(), "/dev/full: cannot write metrics: No space left on device"),
          "message: %s", loom_errmsg());
    loom_fail("something else");
    CHECK(metrics_step(&mt, &a) == -1, "second write succeeded");
    CHECK(metrics_val(&mt, 1, 2.0) == -1, "val write succeeded");
    CHECK(!strcmp(loom_errmsg(), "something else"), "reported twice: %s", loom_errmsg());
    metrics_close(&mt);
}

// A failed checkpoint save: {"step","save_failed":"<reason>"}, the reason escaped (quotes,
// backslashes, control bytes, bytes that are not UTF-8) and kept when it is valid UTF-8; the
// reader takes the rows around it and skips it (it has no loss).
TEST(save_failed_record) {
    char path[] = "/tmp/loom_metrics_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    close(fd);
    Metrics mt;
    CHECK(metrics_open(&mt, path, 0) == 0, "%s", loom_errmsg());
    MetricsStep a = {.step = 4, .loss = 3.5, .exposed_ms = -1, .io_ms = -1}, b = a;
    b.step = 5, b.loss = 3.25;
    CHECK(metrics_step(&mt, &a) == 0, "step: %s", loom_errmsg());
    CHECK(metrics_save_failed(&mt, 4, "ck/\"d\\\xc3\xa9\x01\xff: No space left\n") == 0, "%s",
          loom_errmsg());
    CHECK(metrics_step(&mt, &b) == 0, "step: %s", loom_errmsg());
    metrics_close(&mt);
    char *text = slurp(path);
    CHECK(text != NULL, "read back");
    if (!text) return;
    const char *want = "{\"step\":4,\"save_failed\":\"ck/\\\"d\\\\\xc3\xa9\\u0001\\u00ff: No space "
                       "left\\u000a\"}\n";
    CHECK(strstr(text, want) != NULL, "got:\n%s", text);
    MetricsLog m;
    int rc = metrics_parse(text, strlen(text), path, &m);
    CHECK(rc == 0, "reader: %s", loom_errmsg());
    if (!rc) {
        CHECK(m.n == 2 && m.n_val == 0 && m.step[0] == 4 && m.step[1] == 5 && m.loss[1] == 3.25,
              "rows %zu %zu", m.n, m.n_val);
        metrics_free(&m);
    }
    free(text);
    unlink(path);
}

int main(void) {
    RUN(nonfinite_written_as_null);
    RUN(save_failed_record);
    RUN(bare_nonfinite_rejected);
    RUN(write_failure_reported);
    return test_summary();
}
