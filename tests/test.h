// test.h — a tiny test harness for the C unit tests. Each tests/test_*.c is one program:
//   TEST(name) { CHECK(cond, "fmt", ...); }  and  int main(void) { RUN(name); ...; return test_summary(); }
// It prints one "ok"/"FAIL" line per test and exits non-zero when any test failed.
// tests/run.sh counts the lines into the suite's "N passed, N failed" summary.
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int test_failed_count, test_passed_count, test_cur_failed;
static const char *test_cur_name;

#define TEST(name) static void name(void)
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
            test_cur_failed = 1;                                           \
        }                                                                  \
    } while (0)
#define RUN(name)                                                         \
    do {                                                                  \
        test_cur_name = #name;                                            \
        test_cur_failed = 0;                                              \
        name();                                                           \
        if (test_cur_failed) {                                            \
            test_failed_count++;                                          \
            printf("FAIL - %s\n", test_cur_name);                         \
        } else {                                                          \
            test_passed_count++;                                          \
            printf("ok - %s\n", test_cur_name);                           \
        }                                                                 \
        fflush(stdout);                                                   \
    } while (0)

static inline int test_summary(void) { return test_failed_count ? 1 : 0; }

// |a-b| <= atol + rtol*|b|
static inline int close_enough(double a, double b, double rtol, double atol) {
    return fabs(a - b) <= atol + rtol * fabs(b);
}
