// cpu_isa.c — which of the CPU's vector and matrix instructions this machine has, asked at run
// time (cpuid, and xgetbv for the operating system's part: a register state it does not save
// cannot be used), whatever loom was compiled for: AVX512-BF16 (vdpbf16ps; CPUID.(7,1):EAX bit
// 5, with AVX-512F and the ZMM/opmask state enabled in XCR0), AMX-BF16 (tdpbf16ps;
// CPUID.(7,0):EDX bit 22, with the tile state in XCR0), and AVX-512 as oneDNN's avx512_core
// kernels need it (F, DQ, BW, VL: CPUID.(7,0):EBX bits 16, 17, 30, 31), which picks the fp32
// matrix engine (cpu_gemm.c). The test hooks LOOM_CPU_NO_BF16=1 and LOOM_CPU_NO_AVX512=1
// (testhooks.h) make them absent, so what depends on them is testable anywhere.
#include <stdint.h>

#include "../testhooks.h"
#include "cpu_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

int cpu_bf16_isa(void) {
    if (testhook_cpu_no_bf16()) return 0;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(1, 0, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; // OSXSAVE
    uint64_t x = xcr0();
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    unsigned edx7 = d, avx512f = (b >> 16) & 1;
    int isa = 0;
    // AVX-512 state: opmask (bit 5), ZMM_Hi256 (6), Hi16_ZMM (7), plus SSE/AVX (1, 2)
    if (avx512f && (x & 0xe6) == 0xe6 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5)))
        isa |= CPU_ISA_AVX512_BF16;
    // AMX tile state: XTILECFG (bit 17) and XTILEDATA (18)
    if ((edx7 & (1u << 22)) && (x & (3ull << 17)) == (3ull << 17)) isa |= CPU_ISA_AMX_BF16;
    return isa;
}

int cpu_avx512(void) {
    if (testhook_cpu_no_avx512()) return 0;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(1, 0, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; // OSXSAVE
    if ((xcr0() & 0xe6) != 0xe6 || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    const unsigned need = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31); // F DQ BW VL
    return (b & need) == need;
}
#else
int cpu_bf16_isa(void) { return 0; }
int cpu_avx512(void) { return 0; }
#endif
