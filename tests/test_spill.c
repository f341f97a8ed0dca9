// test_spill.c — arrays in files (src/swarm/spill.c), what an offloaded peer's outer state and
// the swarm's arrays live in:
//   * before spill_setup an array is zeroed host memory and spill_drop leaves it (and any
//     malloc'd buffer) untouched — dropping anonymous memory would zero it; a large one (an
//     anonymous mapping) is resident only where touched, and a drop after spill_setup leaves
//     it untouched too;
//   * after it, an array is a zeroed file mapping; touching 16 MiB of it raises the resident
//     set by about that much (the negative control: without a drop it stays up), spill_drop
//     takes it out again and every value reads back; spill_copy between two such arrays keeps
//     the resident set within a few spans; spans that are not page-aligned are dropped without
//     losing their neighbours' data;
//   * spill_discard hands a large host array's whole pages in a range back (they read as
//     zeros; the partial pages at its ends and the rest keep their values);
//   * the files are unlinked (the directory stays empty) and spill_free unmaps them;
//   * a directory that does not exist is a clear error (exit 5) when an array is made.
#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/common.h"
#include "../src/swarm/spill.h"
#include "test.h"

#define MB (1024.0 * 1024.0)

static double rss_mib(void) {
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = -1;
    fclose(f);
    return res * (double)sysconf(_SC_PAGESIZE) / MB;
}

static void fill(float *x, size_t n, float base) {
    for (size_t i = 0; i < n; i++)
        x[i] = base + (float)i;
}

static int same(const float *x, size_t n, float base) {
    for (size_t i = 0; i < n; i++)
        if (x[i] != base + (float)i) return 0;
    return 1;
}

static int zeros(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (x[i] != 0) return 0;
    return 1;
}

TEST(host_memory_before_setup) {
    CHECK(!spill_active(), "no directory yet");
    float *a = spill_floats(1000);
    CHECK(zeros(a, 1000), "zeroed");
    fill(a, 1000, 1);
    spill_drop(a, 1000 * sizeof(float));
    CHECK(same(a, 1000, 1), "a drop of host memory changed it");
    float *m = malloc(1 << 20);
    fill(m, (1 << 20) / 4, 2);
    spill_drop(m, 1 << 20);
    CHECK(same(m, (1 << 20) / 4, 2), "a drop of malloc'd memory changed it");
    spill_free(a), spill_free(m), spill_free(NULL);
}

// A large host array (an anonymous mapping) made before spill_setup and dropped after it keeps
// its values (MADV_DONTNEED would zero it), and costs resident pages only where it was touched.
static float *early;
enum { EARLY = 8 << 20 }; // floats: 32 MiB

TEST(large_host_array) {
    double r0 = rss_mib();
    early = spill_floats(EARLY);
    CHECK(rss_mib() - r0 < 4, "an untouched 32 MiB array is resident: %.1f MiB", rss_mib() - r0);
    CHECK(zeros(early + EARLY / 2, 4096) && zeros(early + EARLY - 4096, 4096), "zeroed");
    fill(early, 1 << 20, 3); // 4 MiB of it
    double r = rss_mib() - r0;
    CHECK(r > 3 && r < 9, "4 MiB written of 32 MiB: %.1f MiB resident", r);
}

// spill_discard of a large host array (before spill_setup): the whole pages inside the range
// go back (resident set down, they read as zeros), the partial pages at its ends and every
// value outside it stay; a malloc'd buffer is left alone.
TEST(discard_host_pages) {
    enum { N = 4 << 20 }; // floats: 16 MiB
    float *a = spill_floats(N);
    fill(a, N, 5);
    double r0 = rss_mib();
    size_t lo = 1000, hi = N - 3000; // (not page-aligned: the pages at both ends stay)
    spill_discard(a + lo, (hi - lo) * sizeof(float));
    double r = r0 - rss_mib();
    CHECK(r > 15 && r < 16.1, "discarding 16 MiB less two partial pages freed %.1f MiB", r);
    CHECK(same(a, 1024, 5), "the first page (partly inside) lost values");
    CHECK(same(a + N - 3072, 3072, 5 + (float)(N - 3072)), "the last pages lost values");
    CHECK(zeros(a + 1024, N - 4096), "discarded pages read as zeros");
    spill_discard(a, 0), spill_discard(NULL, 64);
    float *m = malloc(1 << 20);
    fill(m, (1 << 20) / 4, 2);
    spill_discard(m, 1 << 20);
    CHECK(same(m, (1 << 20) / 4, 2), "a discard of malloc'd memory changed it");
    spill_free(a), free(m);
}

static char dir[] = "/tmp/loom-test-spill-XXXXXX";

static int dir_entries(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

TEST(files_leave_the_resident_set) {
    CHECK(spill_setup(dir) == 0 && spill_active(), "setup");
    size_t n = 16 * SPILL_CHUNK; // 16 MiB
    float *a = spill_floats(n), *b = spill_floats(n);
    CHECK(dir_entries() == 0, "the spill files are visible: %d", dir_entries());
    CHECK(zeros(a, n), "zeroed");
    spill_drop(a, n * sizeof(float));
    double r0 = rss_mib();
    fill(a, n, 3);
    double r1 = rss_mib();
    CHECK(r1 - r0 > 12, "touching 16 MiB raised the RSS by %.1f MiB only", r1 - r0);
    double r1b = rss_mib(); // (the negative control: nothing drops it by itself)
    CHECK(r1b - r0 > 12, "the RSS fell without a drop: %.1f MiB", r1b - r0);
    spill_drop(a, n * sizeof(float));
    double r2 = rss_mib();
    CHECK(r2 - r0 < 1, "after the drop %.1f MiB stay resident", r2 - r0);
    CHECK(same(a, n, 3), "the data did not survive the drop");
    spill_drop(a, n * sizeof(float));
    spill_copy(b, a, n);
    double r3 = rss_mib();
    CHECK(r3 - r0 < 3, "spill_copy left %.1f MiB resident", r3 - r0);
    CHECK(same(b, n, 3), "spill_copy's result");
    // a span that starts and ends inside pages: its neighbours keep their values
    fill(b, n, 5);
    spill_drop(b + 1000, 7777 * sizeof(float));
    CHECK(same(b, n, 5), "an unaligned drop lost data");
    spill_free(a), spill_free(b);
    CHECK(dir_entries() == 0, "files left: %d", dir_entries());
    spill_drop(early, EARLY * sizeof(float)); // (made before spill_setup: host memory)
    CHECK(same(early, 1 << 20, 3) && zeros(early + (1 << 20), 4096),
          "a drop after spill_setup changed a host array made before it");
    spill_free(early);
}

TEST(missing_directory_is_a_clear_error) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        spill_setup("/nonexistent/loom-spill");
        spill_floats(100);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == EXIT_IO, "status %d", st);
}

int main(void) {
    RUN(host_memory_before_setup);
    RUN(large_host_array);
    RUN(discard_host_pages);
    if (!mkdtemp(dir)) return 1;
    RUN(files_leave_the_resident_set);
    RUN(missing_directory_is_a_clear_error);
    rmdir(dir);
    return test_summary();
}
