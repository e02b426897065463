/* gemv-layout: why the CPU decode matmul (M = 1, bf16 weights) streams
 * weights at half the memory's pace on some machines, and what a weight
 * layout would change. One thread, one matrix of ~600 MB (past any L3),
 * best of 3 passes, GB/s of weights read:
 *
 *   read          a plain sum over the bytes (the memory's pace here)
 *   engine        op_matmul on one thread (the engine's decode kernel: 4
 *                 row-major rows at a time, software prefetch of the next
 *                 4 rows)
 *   rows4, rows8  the same arithmetic, 4 or 8 row-major rows per pass,
 *                 no prefetch
 *   lin4          4 rows, the next 4 rows' bytes prefetched in address
 *                 order (one line a step)
 *   inter4/8      4 or 8 rows stored interleaved ([k/8][row][8]: one
 *                 contiguous stream per pass), no prefetch
 *
 * Every variant computes each output as the engine does (one 8-lane FMA
 * chain over k in order, the same horizontal sum), so all must give the
 * engine's bits; a variant that does not is reported as MISMATCH. Only the
 * order in which the bytes are read differs.
 *
 * Built by hand (not by make):
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -mavx2 -mfma -mf16c -c src/engine/ops_avx2.c -o /tmp/ops_avx2.o -Isrc
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c \
 *       -c src/engine/ops_avx512.c -o /tmp/ops_avx512.o -Isrc
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -mavx2 -mfma -mf16c -pthread -Isrc bench/gemv-layout.c src/engine/ops.c \
 *       src/engine/threadpool.c src/engine/cpu.c src/base/util.c /tmp/ops_avx2.o /tmp/ops_avx512.o -o /tmp/gemv-layout -lm
 *   /tmp/gemv-layout [K...]            (default: 1024 3072, the 0.6B shapes)
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "engine/ops.h"
#include "engine/threadpool.h"

#define AI static inline __attribute__((always_inline))

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

AI __m256 ld8(const uint16_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* the engine's reduction of four 8-lane accumulators */
AI __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 t2 = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(t2), _mm256_extractf128_ps(t2, 1));
}

/* R rows per pass. layout 0: row-major (row j of the pass at j*K);
 * layout 1: interleaved ([k/8][j][8]). lin: prefetch the next pass's
 * bytes in address order, R/4 lines a step (row-major only). */
AI void gemv(const int R, const int layout, const int lin, float *y, const float *x, int K, int N,
             const uint16_t *W) {
    for (int n = 0; n < N; n += R) {
        const uint16_t *w = W + (size_t)n * K;
        const char *pf = (const char *)(w + (size_t)R * K);
        size_t line = 0;
        __m256 acc[8];
        for (int j = 0; j < R; j++) acc[j] = _mm256_setzero_ps();
        for (int k = 0; k < K; k += 8) {
            if (lin)
                for (int q = 0; q < R / 4; q++, line++)
                    _mm_prefetch((const char *)((uintptr_t)pf + 64 * line), _MM_HINT_T0);
            __m256 xv = _mm256_loadu_ps(x + k);
            for (int j = 0; j < R; j++) {
                const uint16_t *p = layout ? w + (size_t)k * R + 8 * j : w + (size_t)j * K + k;
                acc[j] = _mm256_fmadd_ps(xv, ld8(p), acc[j]);
            }
        }
        for (int j = 0; j < R; j += 4) _mm_storeu_ps(y + n + j, hsum4(acc[j], acc[j + 1], acc[j + 2], acc[j + 3]));
    }
}

static void rows4(float *y, const float *x, int K, int N, const uint16_t *W) { gemv(4, 0, 0, y, x, K, N, W); }
static void rows8(float *y, const float *x, int K, int N, const uint16_t *W) { gemv(8, 0, 0, y, x, K, N, W); }
static void lin4(float *y, const float *x, int K, int N, const uint16_t *W) { gemv(4, 0, 1, y, x, K, N, W); }
static void inter4(float *y, const float *x, int K, int N, const uint16_t *W) { gemv(4, 1, 0, y, x, K, N, W); }
static void inter8(float *y, const float *x, int K, int N, const uint16_t *W) { gemv(8, 1, 0, y, x, K, N, W); }

static tpool *g_tp;
static tensor g_t;
static void engine(float *y, const float *x, int K, int N, const uint16_t *W) {
    (void)K, (void)N, (void)W;
    op_matmul(g_tp, y, x, 1, &g_t, NULL);
}

static double read_pass(const uint16_t *W, size_t bytes) {
    const __m256i *p = (const __m256i *)W;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    double t = now();
    for (size_t i = 0; i + 4 <= bytes / 32; i += 4) {
        s0 = _mm256_add_epi32(s0, _mm256_load_si256(p + i));
        s1 = _mm256_add_epi32(s1, _mm256_load_si256(p + i + 1));
        s2 = _mm256_add_epi32(s2, _mm256_load_si256(p + i + 2));
        s3 = _mm256_add_epi32(s3, _mm256_load_si256(p + i + 3));
    }
    t = now() - t;
    int o[8];
    _mm256_storeu_si256((__m256i *)o, _mm256_add_epi32(_mm256_add_epi32(s0, s1), _mm256_add_epi32(s2, s3)));
    if (o[0] == 0x7fffffff) printf(" "); /* keeps the sum live */
    return t;
}

static uint16_t *map_bytes(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("gemv-layout: mmap");
        exit(1);
    }
    madvise(p, bytes, MADV_HUGEPAGE); /* as the engine's weights */
    return p;
}

static void run(int K) {
    int N = (int)(((size_t)600 << 20) / 2 / (size_t)K);
    N -= N % 8;
    size_t E = (size_t)N * K, bytes = E * 2;
    uint16_t *W = map_bytes(bytes), *W4 = map_bytes(bytes), *W8 = map_bytes(bytes);
    uint64_t r = 88172645463325252ULL;
    for (size_t i = 0; i < E; i++) { /* bf16 of magnitude ~0.01-0.1, either sign */
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        W[i] = (uint16_t)(0x3c00 + (r >> 40) % 0x180) | (uint16_t)((r >> 20 & 1) << 15);
    }
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            W4[(size_t)(n / 4) * 4 * K + (size_t)(k / 8) * 32 + (n % 4) * 8 + k % 8] = W[(size_t)n * K + k];
            W8[(size_t)(n / 8) * 8 * K + (size_t)(k / 8) * 64 + (n % 8) * 8 + k % 8] = W[(size_t)n * K + k];
        }
    float *x = aligned_alloc(64, sizeof(float) * (size_t)K), *y = malloc(sizeof(float) * N),
          *y0 = malloc(sizeof(float) * N);
    for (int i = 0; i < K; i++) x[i] = (float)((i * 37) % 101 - 50) / 64.0f;
    g_t = (tensor){.name = "w", .file = "probe", .dtype = DT_BF16, .ndim = 2, .shape = {N, K}, .data = W, .nbytes = bytes};
    engine(y0, x, K, N, W);

    double best = 1e9;
    for (int t = 0; t < 3; t++) {
        double s = read_pass(W, bytes);
        best = s < best ? s : best;
    }
    printf("K=%-5d N=%-6d read     %6.2f GB/s\n", K, N, (double)bytes / best / 1e9);
    struct {
        const char *name;
        void (*f)(float *, const float *, int, int, const uint16_t *);
        const uint16_t *w;
    } v[] = {{"engine", engine, W}, {"rows4", rows4, W}, {"rows8", rows8, W},
             {"lin4", lin4, W},     {"inter4", inter4, W4}, {"inter8", inter8, W8}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        best = 1e9;
        for (int t = 0; t < 3; t++) {
            memset(y, 0, sizeof(float) * N);
            double s = now();
            v[i].f(y, x, K, N, v[i].w);
            s = now() - s;
            best = s < best ? s : best;
        }
        printf("K=%-5d N=%-6d %-8s %6.2f GB/s%s\n", K, N, v[i].name, (double)bytes / best / 1e9,
               memcmp(y, y0, sizeof(float) * N) ? "  MISMATCH" : "");
    }
    munmap(W, bytes), munmap(W4, bytes), munmap(W8, bytes);
    free(x), free(y), free(y0);
}

int main(int argc, char **argv) {
    g_tp = tp_create(1);
    printf("cpu: %s\n", ops_simd_active() ? "SIMD kernels" : "scalar kernels");
    if (argc < 2) {
        run(1024);
        run(3072);
    }
    for (int i = 1; i < argc; i++) {
        int K = atoi(argv[i]);
        if (K < 8 || K % 8) {
            fprintf(stderr, "gemv-layout: K must be a positive multiple of 8 (got %s)\n", argv[i]);
            return 1;
        }
        run(K);
    }
    tp_free(g_tp);
    return 0;
}
