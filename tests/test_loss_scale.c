// test_loss_scale.c — dynamic loss scaling's rule (src/optim/loss_scale.c), alone:
//   * auto is dynamic with fp16 products and off otherwise; off scales by 1 and never skips;
//   * dynamic: an overflow halves the scale and counts a skip, `interval` clean steps in a row
//     double it (an overflow restarts the count), a scale of 1 that still overflows is not an
//     overflow of scaling (the caller's --on-nonfinite decides), the scale stays at most 2^48;
//   * a static scale never changes and never skips;
//   * values that are not powers of two in [1, 2^48], and an interval under 1, are refused
//     naming the flag.
#include <string.h>

#include "../src/common.h"
#include "../src/optim/loss_scale.h"
#include "test.h"

TEST(auto_and_off) {
    LossScale ls;
    CHECK(loss_scale_init(&ls, "auto", 65536, 2000, 1) == 0 && ls.on && ls.dynamic &&
              ls.scale == 65536,
          "auto with fp16: dynamic at 65536");
    CHECK(loss_scale_init(&ls, "auto", 65536, 2000, 0) == 0 && !ls.on, "auto without fp16: off");
    CHECK(loss_scale_factor(&ls) == 1.0 && loss_scale_factor(NULL) == 1.0, "off scales by 1");
    CHECK(loss_scale_after_step(&ls, 0) == 0 && ls.skipped == 0, "off: nothing is an overflow");
}

TEST(dynamic_rule) {
    LossScale ls;
    CHECK(loss_scale_init(&ls, "dynamic", 8, 3, 0) == 0, "%s", loom_errmsg());
    CHECK(loss_scale_after_step(&ls, 0) == 1 && ls.scale == 4 && ls.skipped == 1, "halved");
    loss_scale_after_step(&ls, 1), loss_scale_after_step(&ls, 1);
    CHECK(ls.scale == 4 && ls.good == 2, "two clean steps: not yet (scale %g)", ls.scale);
    loss_scale_after_step(&ls, 0); // an overflow restarts the count
    loss_scale_after_step(&ls, 1), loss_scale_after_step(&ls, 1);
    CHECK(ls.scale == 2 && ls.good == 2, "the count restarted (scale %g, good %d)", ls.scale,
          ls.good);
    loss_scale_after_step(&ls, 1);
    CHECK(ls.scale == 4 && ls.good == 0, "3 clean steps doubled it (scale %g)", ls.scale);
    loss_scale_after_step(&ls, 0), loss_scale_after_step(&ls, 0);
    CHECK(ls.scale == 1 && ls.skipped == 4, "down to 1 (scale %g, %d skips)", ls.scale, ls.skipped);
    CHECK(loss_scale_after_step(&ls, 0) == 0 && ls.scale == 1 && ls.skipped == 4,
          "at 1 a non-finite step is not an overflow of scaling");
    CHECK(loss_scale_init(&ls, "dynamic", 0x1p48, 1, 0) == 0, "%s", loom_errmsg());
    loss_scale_after_step(&ls, 1);
    CHECK(ls.scale == 0x1p48, "capped at 2^48 (got %g)", ls.scale);
}

TEST(static_scale) {
    LossScale ls;
    CHECK(loss_scale_init(&ls, "1024", 65536, 1, 0) == 0 && ls.on && !ls.dynamic, "static");
    CHECK(loss_scale_after_step(&ls, 0) == 0 && loss_scale_after_step(&ls, 1) == 0 &&
              ls.scale == 1024 && ls.skipped == 0,
          "a static scale never changes (%g)", ls.scale);
}

TEST(refused) {
    LossScale ls;
    const char *bad[] = {"3", "0.5", "0", "-4", "1e300", "2^10", "dynamicx", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(loss_scale_init(&ls, bad[i], 65536, 1, 0) != 0 &&
                  strstr(loom_errmsg(), "--loss-scale"),
              "'%s' accepted or unnamed: %s", bad[i], loom_errmsg());
    CHECK(loss_scale_init(&ls, "dynamic", 3, 1, 0) != 0 &&
              strstr(loom_errmsg(), "--loss-scale-init"),
          "init 3: %s", loom_errmsg());
    CHECK(loss_scale_init(&ls, "dynamic", 0x1p49, 1, 0) != 0, "init 2^49 accepted");
    CHECK(loss_scale_init(&ls, "dynamic", 65536, 0, 0) != 0 &&
              strstr(loom_errmsg(), "--loss-scale-interval"),
          "interval 0: %s", loom_errmsg());
}

int main(void) {
    RUN(auto_and_off);
    RUN(dynamic_rule);
    RUN(static_scale);
    RUN(refused);
    return test_summary();
}
