// peak.c — the CPU's fp32 peak, measured: every OpenMP thread at once runs independent chains
// of fused multiply-adds on the widest vector the compiler targets (-march: AVX-512, AVX/FMA,
// SSE), so the FMA units stay busy whatever their latency; the peak is the sum of the threads'
// rates over their own CPU time. ~30 ms of CPU a thread; MFU is reported against it. The probe
// itself (cpu_probe_gflops) also runs cpu_bf16.c's bf16 chains.
#include <immintrin.h>
#include <omp.h>
#include <time.h>

#include "backend.h"
#include "cpu_impl.h"

// CHAINS ≥ FMA latency × FMA ports on current x86 cores (4 × 2), and the chains plus the two
// constants must fit the register file: 32 vector registers with AVX-512, 16 below it (16 chains
// there spilled to the stack, and the loads and stores halved the measured AVX2 peak).
#if defined(__AVX512F__)
enum { CHAINS = 16 };
#else
enum { CHAINS = 12 };
#endif

#if defined(__AVX512F__)
typedef __m512 vec;
#define LANES 16
#define SET1 _mm512_set1_ps
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SUM(v) _mm512_reduce_add_ps(v)
#elif defined(__AVX__)
typedef __m256 vec;
#define LANES 8
#define SET1 _mm256_set1_ps
#if defined(__FMA__)
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#else
#define FMA(a, b, c) _mm256_add_ps(_mm256_mul_ps(a, b), c)
#endif
static float SUM(vec v) {
    float f[8];
    _mm256_storeu_ps(f, v);
    return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}
#else // x86-64 baseline: SSE2, multiply then add (still 2 flops a lane)
typedef __m128 vec;
#define LANES 4
#define SET1 _mm_set1_ps
#define FMA(a, b, c) _mm_add_ps(_mm_mul_ps(a, b), c)
static float SUM(vec v) {
    float f[4];
    _mm_storeu_ps(f, v);
    return f[0] + f[1] + f[2] + f[3];
}
#endif

static float sink; // keeps the chains' results alive (every thread adds its own, atomically)

// CHAINS independent accumulators, `iters` rounds of x = x·m + a each (values stay bounded).
static float chains(long iters, float seed) {
    vec x[CHAINS], m = SET1(0.999f), a = SET1(1e-3f);
    for (int c = 0; c < CHAINS; c++)
        x[c] = SET1(seed + (float)c);
    for (long i = 0; i < iters; i++)
        for (int c = 0; c < CHAINS; c++)
            x[c] = FMA(x[c], m, a);
    float s = 0;
    for (int c = 0; c < CHAINS; c++)
        s += SUM(x[c]);
    return s;
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// This thread's GFLOP/s of `run` (flops_per_iter a round) over its own CPU time (so time the
// thread spends descheduled, when the cores are shared with other processes, does not count):
// calibrated to >= 2 ms a run, best of three ~8 ms runs.
static double thread_gflops(ProbeChains run, double flops_per_iter, float seed) {
    long iters = 1 << 10;
    float keep = 0;
    for (; iters < (1L << 40); iters *= 2) {
        double t0 = cpu_seconds();
        keep += run(iters, seed);
        if (cpu_seconds() - t0 >= 2e-3) break;
    }
    iters *= 4;
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = cpu_seconds();
        keep += run(iters, seed);
        double dt = cpu_seconds() - t0;
        double g = flops_per_iter * (double)iters / dt / 1e9;
        if (dt > 0 && g > best) best = g;
    }
#pragma omp atomic
    sink += keep;
    return best;
}

double cpu_probe_gflops(ProbeChains run, double flops_per_iter, int *threads) {
    double total = 0;
    int nth = 1;
#pragma omp parallel reduction(+ : total)
    {
        total += thread_gflops(run, flops_per_iter, (float)omp_get_thread_num());
#pragma omp single nowait
        nth = omp_get_num_threads();
    }
    *threads = nth;
    return total;
}

double backend_cpu_peak_gflops(int *threads) {
    return cpu_probe_gflops(chains, 2.0 * LANES * CHAINS, threads);
}
