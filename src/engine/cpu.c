/* cpu: runtime CPU feature detection (see cpu.h). The AVX2 kernels need
 * three instruction-set features (AVX2, FMA, F16C) and, just as important,
 * an OS that saves the YMM registers on context switch (OSXSAVE + XCR0
 * bits 1 and 2); a CPU can report AVX2 while the OS has it switched off.
 * AVX-512 likewise needs XCR0 bits 5-7 (opmask, ZMM upper halves, ZMM16-31).
 * Results are computed once and cached in atomics, so any thread may call. */
#include "engine/cpu.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define DS_X86 1
#endif

#ifdef DS_X86
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    /* xgetbv with ecx = 0; written as asm so this file needs no -mxsave */
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static int detect_avx2(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!(fma && osxsave && avx && f16c)) return 0;
    if ((read_xcr0() & 6) != 6) return 0; /* XMM and YMM state enabled by the OS */
    if ((unsigned)__get_cpuid_max(0, NULL) < 7u) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (b >> 5) & 1; /* AVX2 */
}

/* AVX-512 F, DQ, BW, VL, plus the OS saving opmask and all ZMM state
 * (XCR0 bits 1, 2, 5, 6, 7) */
static int detect_avx512(void) {
    if (!detect_avx2()) return 0;
    if ((read_xcr0() & 0xE6) != 0xE6) return 0;
    unsigned a, b, c, d;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned need = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31); /* F, DQ, BW, VL */
    return (b & need) == need;
}
#endif

static atomic_int g_avx2 = -1, g_avx512 = -1;

int cpu_has_avx512(void) {
    int v = atomic_load_explicit(&g_avx512, memory_order_relaxed);
    if (v < 0) {
#ifdef DS_X86
        v = detect_avx512();
#else
        v = 0;
#endif
        atomic_store_explicit(&g_avx512, v, memory_order_relaxed);
    }
    return v;
}

int cpu_has_avx2(void) {
    int v = atomic_load_explicit(&g_avx2, memory_order_relaxed);
    if (v < 0) {
#ifdef DS_X86
        v = detect_avx2();
#else
        v = 0;
#endif
        atomic_store_explicit(&g_avx2, v, memory_order_relaxed);
    }
    return v;
}

int cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

static char g_name[49];
static atomic_int g_name_state; /* 0 not yet, 1 being written, 2 ready */

const char *cpu_name(void) {
    if (atomic_load_explicit(&g_name_state, memory_order_acquire) == 2) return g_name;
    int expect = 0;
    if (!atomic_compare_exchange_strong(&g_name_state, &expect, 1)) {
        /* another thread is filling it in; the wait is a few cpuid calls */
        while (atomic_load_explicit(&g_name_state, memory_order_acquire) != 2) {
        }
        return g_name;
    }
    char buf[49];
    memset(buf, 0, sizeof buf);
#ifdef DS_X86
    unsigned regs[12];
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002u + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
        memcpy(buf, regs, 48);
    }
#endif
    /* trim the leading/trailing spaces some vendors pad the string with */
    char *s = buf;
    while (*s == ' ') s++;
    size_t n = strlen(s);
    while (n && s[n - 1] == ' ') s[--n] = 0;
    if (!n) {
        s = "unknown";
        n = strlen(s);
    }
    memcpy(g_name, s, n + 1);
    atomic_store_explicit(&g_name_state, 2, memory_order_release);
    return g_name;
}

/* CPUID leaf 7 bits, for reports only (kernel choice goes through
   cpu_has_avx2 / cpu_has_avx512, which also check the OS state). */
int cpu_feature_list(cpu_feature *out, int cap) {
    int k = 0;
#define ADD(nm, v)                                                                                                   \
    do {                                                                                                             \
        if (k < cap) out[k++] = (cpu_feature){nm, (v) ? 1 : 0};                                                      \
    } while (0)
#ifdef DS_X86
    unsigned a = 0, b = 0, c = 0, d = 0, a1 = 0;
    int has7 = (unsigned)__get_cpuid_max(0, NULL) >= 7u;
    if (has7) __cpuid_count(7, 0, a, b, c, d);
    unsigned b1 = 0, c1 = 0, d1 = 0;
    if (has7) __cpuid_count(7, 1, a1, b1, c1, d1);
    int zmm = cpu_has_avx512(); /* the OS saves the AVX-512 state */
    int amx_os = 0;
    if (has7 && ((d >> 24) & 1)) {
        /* AMX tiles also need XCR0 bits 17 and 18 (Linux grants them on request) */
        amx_os = (read_xcr0() & (3u << 17)) == (3u << 17);
    }
    ADD("avx2", cpu_has_avx2());
    ADD("avx512f", zmm && ((b >> 16) & 1));
    ADD("avx512bw", zmm && ((b >> 30) & 1));
    ADD("avx512_vnni", zmm && ((c >> 11) & 1));
    ADD("avx512_bf16", zmm && ((a1 >> 5) & 1));
    ADD("avx_vnni", cpu_has_avx2() && ((a1 >> 4) & 1));
    ADD("amx_tile", amx_os);
#else
    ADD("avx2", 0);
    ADD("avx512f", 0);
#endif
#undef ADD
    return k;
}
