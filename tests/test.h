// test.h — a tiny test harness for the C unit tests. Each tests/test_*.c is one program:
//   TEST(name) { CHECK(cond, "fmt", ...); }  and  int main(void) { RUN(name); ...; return
//   test_summary(); }
// It prints one "ok"/"FAIL" line per test and exits non-zero when any test failed.
// tests/run.sh counts the lines into the suite's "N passed, N failed" summary.
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int test_failed_count, test_passed_count, test_cur_failed;
static const char *test_cur_name;

#define TEST(name) static void name(void)
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);             \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            test_cur_failed = 1;                                                                   \
        }                                                                                          \
    } while (0)
#define RUN(name)                                                                                  \
    do {                                                                                           \
        test_cur_name = #name;                                                                     \
        test_cur_failed = 0;                                                                       \
        name();                                                                                    \
        if (test_cur_failed) {                                                                     \
            test_failed_count++;                                                                   \
            printf("FAIL - %s\n", test_cur_name);                                                  \
        } else {                                                                                   \
            test_passed_count++;                                                                   \
            printf("ok - %s\n", test_cur_name);                                                    \
        }                                                                                          \
        fflush(stdout);                                                                            \
    } while (0)

static inline int test_summary(void) { return test_failed_count ? 1 : 0; }

// |a-b| <= atol + rtol*|b|
static inline int close_enough(double a, double b, double rtol, double atol) {
    return fabs(a - b) <= atol + rtol * fabs(b);
}

// Runs this program again under mpirun on np ranks (root allowed, one OpenMP thread a rank, at
// most timeout_s seconds) with env's words before it ("A=1 B=2", or "-u A" to drop one: env(1)'s
// arguments) and every A=... of them exported to the ranks, as are the variables named in pass
// ("C D"); returns its exit status (0: every rank passed). The MPI tests' parent half.
static inline int test_mpirun_self(int np, const char *env, const char *pass, int timeout_s) {
    char exe[4096], xs[2048] = "", cmd[8192], w[256];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    for (int k = 0; k < 2; k++) // env's names, then pass's
        for (const char *p = k ? pass : env; p && sscanf(p, " %255s", w) == 1;) {
            p = strstr(p, w) + strlen(w);
            char *eq = strchr(w, '=');
            if (k || eq) {
                if (eq) *eq = 0;
                size_t used = strlen(xs);
                snprintf(xs + used, sizeof xs - used, " -x %s", w);
            }
        }
    snprintf(cmd, sizeof cmd,
             "env %s OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
             "timeout %d mpirun --oversubscribe --bind-to none --mca btl self,vader,tcp -np %d -x "
             "OMP_NUM_THREADS%s '%s'",
             env ? env : "", timeout_s, np, xs, exe);
    fflush(stdout);
    return system(cmd);
}
