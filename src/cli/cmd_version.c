// cmd_version.c — `loom --version` (or `loom version`): what this binary is, for bug reports and
// for telling builds apart on a cluster. One "key: value" line each: the version (the VERSION
// file), the git commit it was built from, the compiler, the code-generation flags and the
// instruction sets they enabled, the backends built in, and the libraries it runs with — their
// versions as the libraries report them at run time (a shared library can be newer than the
// headers it was built against; where the two differ, both are shown).
//
// The version, commit and flags come from build_info.h, which the Makefile generates into
// $(BUILD)/gen/ (scripts/build_info.sh). The libraries' own calls: OpenBLAS through the CPU
// backend (the one place cblas.h is included), MPI through comm.c (the one place mpi.h is).
#include <cairo.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>
#include <zmq.h>

#include "../backend/backend.h"
#include "../common.h"
#include "../parallel/comm.h"
#include "build_info.h" // generated: $(BUILD)/gen/build_info.h
#include "commands.h"
#include "options.h"

#if defined(__clang__)
#define LOOM_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define LOOM_COMPILER "gcc " __VERSION__
#else
#define LOOM_COMPILER "unknown"
#endif

// The instruction-set extensions the compiler was allowed to use (-march and friends).
static const char *isa(void) {
    return ""
#if defined(__x86_64__)
           "x86-64"
#elif defined(__aarch64__)
           "aarch64"
#endif
#ifdef __SSE4_2__
           " sse4.2"
#endif
#ifdef __AVX__
           " avx"
#endif
#ifdef __AVX2__
           " avx2"
#endif
#ifdef __FMA__
           " fma"
#endif
#ifdef __AVX512F__
           " avx512f"
#endif
#ifdef __AVX512BF16__
           " avx512bf16"
#endif
#ifdef __ARM_NEON
           " neon"
#endif
        ;
}

// s on one line, without surrounding spaces (libraries' strings may carry both).
static void one_line(char *s) {
    for (char *p = s; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t') *p = ' ';
    size_t n = strlen(s);
    while (n && s[n - 1] == ' ')
        s[--n] = 0;
    char *lead = s + strspn(s, " ");
    memmove(s, lead, strlen(lead) + 1);
}

static void field(const char *key, const char *value) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", value && *value ? value : "unknown");
    one_line(buf);
    printf("%-10s %s\n", key, buf);
}

// A run-time version, with the headers' version appended when they differ.
static void lib_field(const char *key, const char *run, const char *built) {
    char buf[256];
    if (!strcmp(run, built))
        snprintf(buf, sizeof buf, "%s", run);
    else
        snprintf(buf, sizeof buf, "%s (built against %s)", run, built);
    field(key, buf);
}

#define STR_(x) #x
#define STR(x) STR_(x)

int cmd_version(int argc, char **argv) {
    int rc = options_parse(NULL, 0, argc, argv, "usage: loom version (or loom --version)", NULL, 0,
                           NULL);
    if (rc == 1) return 0;
    if (rc) {
        fprintf(stderr, "loom version: %s\n", loom_errmsg());
        return EXIT_USAGE;
    }
    char buf[1024];
    printf("loom %s\n", LOOM_VERSION);
    field("commit:", LOOM_GIT_COMMIT);
    snprintf(buf, sizeof buf, "%s (%s)", LOOM_COMPILER, LOOM_BUILD_CC);
    field("compiler:", buf);
    field("flags:", LOOM_BUILD_FLAGS);
    field("isa:", isa());
#ifdef _OPENMP
    field("openmp:", STR(_OPENMP));
#endif
    field("backends:", backend_names());
    if (strstr(backend_names(), "cuda")) {
        char cu[512];
        backend_cuda_versions(cu, sizeof cu);
        snprintf(buf, sizeof buf, "%s; nvcc %s", cu, LOOM_BUILD_NVCC);
        field("cuda:", buf);
    }
    field("openblas:", backend_blas_version());
    field("matmul:", backend_cpu_matmul());
    comm_library_version(buf, sizeof buf);
    field("mpi:", buf);
    int z[3];
    char zv[40];
    zmq_version(&z[0], &z[1], &z[2]);
    snprintf(zv, sizeof zv, "%d.%d.%d", z[0], z[1], z[2]);
    lib_field("zeromq:", zv,
              STR(ZMQ_VERSION_MAJOR) "." STR(ZMQ_VERSION_MINOR) "." STR(ZMQ_VERSION_PATCH));
    lib_field("cjson:", cJSON_Version(),
              STR(CJSON_VERSION_MAJOR) "." STR(CJSON_VERSION_MINOR) "." STR(CJSON_VERSION_PATCH));
    lib_field("zlib:", zlibVersion(), ZLIB_VERSION);
    lib_field("cairo:", cairo_version_string(), CAIRO_VERSION_STRING);
    return 0;
}
