/* quant-bench: the quantized matmul (engine/quant.h through op_matmul) on
 * Qwen3-0.6B shapes with random weights: the 3072 x 1024 gate/up matrix
 * and the 151936 x 1024 LM head, per format, at M = 1, 2, 8, 16 (and 512 on
 * the small matrix), on 1 and 2 threads. Reports ms per call, GB/s of
 * weight bytes streamed (bytes of the matrix / time) and G weights x rows
 * per second (N * K * M / time: the compute rate at prefill widths), and
 * the same from the process's CPU time per thread (see cpu_now). The small
 * matrix is cycled through enough copies to exceed the L3, as in decode
 * where every weight byte comes from DRAM once per token (QBENCH_COPIES=1:
 * one copy, in cache, to time the kernel's instructions alone).
 *
 *   sh bench/build-tool.sh quant-bench && build/quant-bench [threads...]
 * or, against the release objects alone (no server libraries):
 *   make -j2 && cc -std=c11 -D_GNU_SOURCE -O2 -pthread -Isrc -o build/quant-bench bench/quant-bench.c \
 *     build/rel/src/engine/{quant,quant_avx2,quant_avx512,ops,ops_avx2,ops_avx512,threadpool,cpu,tensor}.o \
 *     build/rel/src/base/util.o -lm
 * Environment: QBENCH_LEVEL=0/1/2 (ops_set_level), QBENCH_FMTS=Q4_0,Q8_0,...
 * (Q4_0 Q8_0 Q4_K Q6_K MLX4 MLX8 by default; also Q4_1 Q5_0 Q5_1 Q2_K Q3_K
 * Q5_K MLX3 MLX6), QBENCH_M=1,2,8,16,512, QBENCH_HEAD=0 (skip the LM head),
 * QBENCH_COPIES=n (copies of a matrix cycled; default: enough for 64 MB),
 * QBENCH_REPS=n (exactly n timed calls).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/ops.h"
#include "engine/ops_internal.h"
#include "engine/quant.h"
#include "engine/threadpool.h"
#include "base/util.h"

static double clk(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double now(void) { return clk(CLOCK_MONOTONIC); }
/* CPU time of the process (all threads): on a shared machine, wall time
 * counts other processes' turns too; cpu-ms / threads estimates the time
 * on an idle machine where the kernel is not waiting for memory */
static double cpu_now(void) { return clk(CLOCK_PROCESS_CPUTIME_ID); }

static uint64_t rs = 88172645463325252ull;
static uint32_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 16);
}
static float frand(void) { return (float)(rnd() % 2000001) / 1000000.0f - 1.0f; }

typedef struct { const char *name; ds_dtype dt; int bits; } fmt;
static const fmt fmts[] = {
    {"Q4_0", DT_Q4_0, 0}, {"Q8_0", DT_Q8_0, 0}, {"Q4_K", DT_Q4_K, 0}, {"Q6_K", DT_Q6_K, 0}, {"MLX4", DT_MLX, 4},
    {"MLX8", DT_MLX, 8},  {"Q4_1", DT_Q4_1, 0}, {"Q5_0", DT_Q5_0, 0}, {"Q5_1", DT_Q5_1, 0}, {"Q2_K", DT_Q2_K, 0},
    {"Q3_K", DT_Q3_K, 0}, {"Q5_K", DT_Q5_K, 0}, {"MLX3", DT_MLX, 3},  {"MLX6", DT_MLX, 6},
};

/* random quantized [N][K] tensor with sane f16 scales (MLX: group 64, f16) */
static void make(tensor *t, const fmt *f, int N, int K) {
    memset(t, 0, sizeof *t);
    t->name = f->name;
    t->dtype = f->dt;
    t->ndim = 2;
    t->shape[0] = N;
    t->shape[1] = K;
    t->nbytes = (size_t)N * quant_row_bytes(f->dt, f->bits, K);
    uint8_t *d = xmalloc(t->nbytes);
    for (size_t i = 0; i < t->nbytes; i++) d[i] = (uint8_t)rnd();
    if (f->dt == DT_MLX) {
        size_t ng = (size_t)N * (size_t)(K / 64);
        uint16_t *sb = xmalloc(2 * ng * 2);
        for (size_t i = 0; i < 2 * ng; i++) sb[i] = ds_f32_to_f16(frand() * 0.05f);
        t->q.bits = f->bits;
        t->q.group = 64;
        t->q.sdtype = DT_F16;
        t->q.scales = sb;
        t->q.biases = sb + ng;
    } else {
        static const int offs[][2] = {{0, -1}, {0, -1}, {0, 2}, {0, -1}, {0, 2}, {80, 82}, {108, -1}, {0, 2}, {0, 2}, {208, -1}};
        const int *o = offs[f->dt - DT_Q8_0];
        size_t bb = quant_block_bytes(f->dt), nb = t->nbytes / bb;
        for (size_t b = 0; b < nb; b++)
            for (int j = 0; j < 2 && o[j] >= 0; j++) {
                uint16_t h = ds_f32_to_f16(frand() * 0.05f);
                memcpy(d + b * bb + (size_t)o[j], &h, 2);
            }
    }
    t->data = d;
    char err[256];
    if (quant_check(t, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
}

static size_t total_bytes(const tensor *t) {
    size_t b = t->nbytes;
    if (t->dtype == DT_MLX) b += 2 * (size_t)(t->shape[0] * (t->shape[1] / t->q.group)) * 2;
    return b;
}

static int parse_list(const char *s, int *v, int mx) {
    int n = 0;
    while (s && *s && n < mx) {
        v[n++] = atoi(s);
        s = strchr(s, ',');
        if (s) s++;
    }
    return n;
}

int main(int argc, char **argv) {
    int threads[4] = {1, 2}, nth = 2;
    if (argc > 1) {
        nth = 0;
        for (int i = 1; i < argc && nth < 4; i++) threads[nth++] = atoi(argv[i]);
    }
    if (getenv("QBENCH_LEVEL")) ops_set_level(atoi(getenv("QBENCH_LEVEL")));
    int Ms[8] = {1, 2, 8, 16, 512}, nM = 5;
    if (getenv("QBENCH_M")) nM = parse_list(getenv("QBENCH_M"), Ms, 8);
    const char *sel = getenv("QBENCH_FMTS");
    int head = getenv("QBENCH_HEAD") ? atoi(getenv("QBENCH_HEAD")) : 1;
    /* QBENCH_REPS=n: exactly n timed calls (for counting instructions or
       cycles with perf stat on a busy machine) */
    const int fixed = getenv("QBENCH_REPS") ? atoi(getenv("QBENCH_REPS")) : 0;
    printf("level %d (0 scalar, 1 AVX2, 2 AVX-512)\n", ops_level());
    printf("%-5s %-13s %4s %3s %10s %8s %8s %10s %8s %8s\n", "fmt", "shape", "M", "thr", "ms", "GB/s", "Gw/s", "cpu-ms/thr",
           "GB/s", "Gw/s");
    const int K = 1024, Ns[2] = {3072, 151936};
    float *x = xmalloc((size_t)512 * K * sizeof(float)), *y = xmalloc((size_t)16 * 151936 * sizeof(float));
    for (int i = 0; i < 512 * K; i++) x[i] = frand();
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
        if (sel ? !strstr(sel, fmts[f].name) : f >= 6) continue;
        for (int s = 0; s < 1 + (head != 0); s++) {
            const int N = Ns[s];
            tensor one;
            make(&one, &fmts[f], N, K);
            /* copies to exceed the L3 (64 MB streamed per cycle) */
            int ncop = (int)((64u << 20) / total_bytes(&one)) + 1;
            if (getenv("QBENCH_COPIES")) ncop = atoi(getenv("QBENCH_COPIES")) > 0 ? atoi(getenv("QBENCH_COPIES")) : 1;
            tensor *cop = xmalloc((size_t)ncop * sizeof(tensor));
            cop[0] = one;
            for (int c = 1; c < ncop; c++) make(&cop[c], &fmts[f], N, K);
            for (int ti = 0; ti < nth; ti++) {
                tpool *tp = threads[ti] > 1 ? tp_create(threads[ti]) : NULL;
                for (int mi = 0; mi < nM; mi++) {
                    const int M = Ms[mi];
                    if (M > 16 && N > 4096) continue;
                    float *yy = M > 16 ? xmalloc((size_t)M * N * sizeof(float)) : y;
                    op_matmul(tp, yy, x, M, &cop[0], NULL); /* warm-up */
                    int reps = 0;
                    double t0 = now(), c0 = cpu_now(), el;
                    do {
                        op_matmul(tp, yy, x, M, &cop[reps % ncop], NULL);
                        reps++;
                        el = now() - t0;
                    } while (fixed ? reps < fixed : el < 0.4 || reps < 3);
                    double ms = el / reps * 1e3, cms = (cpu_now() - c0) / reps * 1e3 / threads[ti];
                    const double gw = (double)N * K * M / 1e9;
                    printf("%-5s %6dx%-6d %4d %3d %10.3f %8.2f %8.2f %10.3f %8.2f %8.2f\n", fmts[f].name, N, K, M,
                           threads[ti], ms, total_bytes(&one) / (ms * 1e-3) / 1e9, gw / (ms * 1e-3), cms,
                           total_bytes(&one) / (cms * 1e-3) / 1e9, gw / (cms * 1e-3));
                    fflush(stdout);
                    if (yy != y) free(yy);
                }
                tp_free(tp);
            }
            for (int c = 0; c < ncop; c++) {
                free((void *)cop[c].data);
                free((void *)cop[c].q.scales);
            }
            free(cop);
        }
    }
    free(x);
    free(y);
    return 0;
}
