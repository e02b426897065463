/* cuda-ops-bench: the CUDA matmul kernels on Qwen3-8B's bf16 shapes for the
 * row counts of decode and verification (1..16) and a prefill chunk:
 * microseconds per launch and the weight bandwidth that implies, for the
 * tensor-core kernel with its default tile counts (on row-major and on
 * tile-major weights) and at 1, 2 and 4 weight tiles per warp, for the FMA kernel, and for the prefill path (cuBLAS on
 * whole groups of rows). Weights are cycled through copies that miss L2, as in a forward
 * pass. Then the device sampler (src/engine/cuda/cuda_sample.cu) on Qwen3's vocabulary,
 * one row and a 16-draft verify's 17, flat and peaked logits, and against
 * the host path (readback and the host sampler) for vocabularies of 6,144
 * to 151,936 tokens (where CUDA_SAMPLE_MIN_VOCAB comes from). Built by
 * scripts/cuda-pack; run on the GPU machine:
 *   cuda-ops-bench [reps] [sample]   (sample: the sampler table only)
 *   cuda-ops-bench reps one MATRIX M  (one matrix (qkv, o, gate+up, down,
 *                                      lm_head) at M rows: for bench/cuda-mma-profile.sh;
 *                                      DSPARK_BENCH_TILES=1|2|4 forces the tile count,
 *                                      DSPARK_BENCH_COPIES=1 keeps one weight copy, hot
 *                                      in L2 where it fits, DSPARK_BENCH_NORM=1 folds an
 *                                      RMSNorm into qkv, gate+up and the LM head and has
 *                                      the SwiGLU write its pre-cut copy, as the forward;
 *                                      DSPARK_BENCH_NORM=cut runs that norm apart, as
 *                                      the forward does at 9-16 rows: its
 *                                      kernel writing pre-cut rows and scales, then the
 *                                      matmul from them) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_hooks.h"
#include "engine/sampler.h"
#include "base/util.h"

/* Where sampling on the device starts to pay (CUDA_SAMPLE_MIN_VOCAB): one
 * decode row of a trained model's shape (peaked, as cuda_bench_sample
 * makes it) for vocabularies from the bundled model's to Qwen3's, the
 * device sampler's kernel against the host path (the row's logits read
 * back, then sampler_sample), microseconds. */
static int vocab_sweep(int reps, sampler_params p1, sampler_params p2) {
    const int vs[] = {6144, 16384, 32768, 65536, 151936};
    const sampler_params *ps[] = {&p1, &p2};
    const char *pn[] = {"temperature 1.0", "top-p 0.95"};
    char err[256];
    printf("\n| vocabulary, one peaked row | setting | device sampler | readback | host sampler | host total |\n"
           "|---|---|---|---|---|---|\n");
    for (size_t v = 0; v < sizeof vs / sizeof vs[0]; v++) {
        int V = vs[v];
        float *l = xmalloc(sizeof(float) * V);
        uint32_t r = 1u;
        for (int i = 0; i < V; i++) {
            r = r * 1664525u + 1013904223u;
            float x = (float)(r >> 8) / 16777216.0f;
            l[i] = i % 5003 < 30 ? 8.0f + 8.0f * x : -8.0f * x;
        }
        double rb;
        if (cuda_bench_readback(V, 1, reps, &rb, err, sizeof err) != 0) return fprintf(stderr, "cuda-ops-bench: %s\n", err), 1;
        for (int k = 0; k < 2; k++) {
            double dev;
            if (cuda_bench_sample(V, 1, 1, ps[k], reps, &dev, err, sizeof err) != 0)
                return fprintf(stderr, "cuda-ops-bench: %s\n", err), 1;
            sampler *s;
            if (sampler_create(&s, ps[k], V, err, sizeof err) != 0) return fprintf(stderr, "cuda-ops-bench: %s\n", err), 1;
            volatile int sink = sampler_sample(s, l); /* warm */
            double t0 = ds_now();
            for (int i = 0; i < reps; i++) sink += sampler_sample(s, l);
            double host = (ds_now() - t0) * 1e6 / reps;
            (void)sink;
            sampler_free(s);
            printf("| %d | %s | %.1f | %.1f | %.1f | %.1f |\n", V, pn[k], dev, rb, host, rb + host);
            fflush(stdout);
        }
        free(l);
    }
    return 0;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 50;
    const struct {
        const char *name;
        int N, K, mode;
    } mats[] = {{"qkv 6144x4096", 6144, 4096, 0},      {"o 4096x4096 (+res)", 4096, 4096, 1},
                {"gate+up 2x12288x4096", 12288, 4096, 2}, {"down 4096x12288 (+res)", 4096, 12288, 1},
                {"lm_head 151936x4096", 151936, 4096, 0}};
    const int rows[] = {1, 2, 4, 8, 12, 16, 17, 64, 256};
    char err[256];
    if (argc > 4 && !strcmp(argv[2], "one")) { /* one matrix at one width, tile-major (for a profiler) */
        int M = atoi(argv[4]);
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
            if (strncmp(mats[i].name, argv[3], strlen(argv[3])) || M < 1 || M > 4096) continue;
            double us;
            const char *ft = getenv("DSPARK_BENCH_TILES"); /* a forced tile count (1, 2, 4) */
            if (cuda_bench_matmul(M, mats[i].N, mats[i].K, mats[i].mode, ft ? atoi(ft) : 0, 1, reps, &us, err,
                                  sizeof err) != 0)
                return fprintf(stderr, "cuda-ops-bench: %s\n", err), 1;
            printf("%s, %d rows, tile-major: %.1f us\n", mats[i].name, M, us);
            return 0;
        }
        fprintf(stderr, "cuda-ops-bench: no matrix named %s (qkv, o, gate+up, down, lm_head) or bad rows %s\n", argv[3],
                argv[4]);
        return 2;
    }
    printf("| matrix | kernel |");
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) printf(" M=%d |", rows[r]);
    printf(" GB/s at M=1 |\n|---|---|");
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) printf("---|");
    printf("---|\n");
    const int only_sampler = argc > 2 && !strcmp(argv[2], "sample");
    for (size_t i = 0; !only_sampler && i < sizeof mats / sizeof mats[0]; i++) {
        double bytes = 2.0 * mats[i].N * mats[i].K * (mats[i].mode == 2 ? 2 : 1);
        /* {fma / cuBLAS?, tiles, tile-major weights} */
        const int kinds[][3] = {{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 2, 0}, {0, 4, 0}, {3, 0, 0}, {4, 0, 0}};
        for (int k = 0; k < 7; k++) {
            int mode = kinds[k][0] ? kinds[k][0] : mats[i].mode;
            if (mode == 4 && mats[i].mode != 0) continue; /* the prefill path: plain stores only */
            if (mode == 3 && mats[i].mode == 2) continue; /* the FMA SwiGLU is timed in the forward */
            if (kinds[k][1] == 1 && mats[i].mode == 2) continue;
            if (kinds[k][0] == 3) printf("| %s | fma |", mats[i].name);
            else if (kinds[k][0] == 4) printf("| %s | prefill (cuBLAS from %d rows) |", mats[i].name, CUDA_GEMM_MIN_ROWS);
            else if (kinds[k][1] == 0)
                printf("| %s | mma (default tiles%s) |", mats[i].name, kinds[k][2] ? ", tile-major weights" : "");
            else printf("| %s | mma x%d |", mats[i].name, kinds[k][1]);
            double us1 = 0;
            for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
                double us;
                if (cuda_bench_matmul(rows[r], mats[i].N, mats[i].K, mode, kinds[k][1], kinds[k][2], reps, &us, err,
                                      sizeof err) != 0) {
                    fprintf(stderr, "cuda-ops-bench: %s\n", err);
                    return 1;
                }
                if (r == 0) us1 = us;
                printf(" %.1f |", us);
            }
            printf(" %.0f |\n", bytes / us1 / 1e3);
            fflush(stdout);
        }
    }
    const struct {
        const char *name;
        sampler_params p;
    } smp[] = {{"temperature 1.0", {.temperature = 1.0f, .top_p = 1.0f}},
               {"top-k 20", {.temperature = 0.7f, .top_k = 20, .top_p = 1.0f}},
               {"top-p 0.95", {.temperature = 0.7f, .top_p = 0.95f}},
               {"top-k 20, top-p 0.95", {.temperature = 0.6f, .top_k = 20, .top_p = 0.95f}},
               {"min-p 0.05", {.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.05f}}};
    printf("\n| device sampler, V 151936 | flat, 1 row | flat, 17 rows | peaked, 1 row | peaked, 17 rows |\n"
           "|---|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof smp / sizeof smp[0]; i++) {
        printf("| %s |", smp[i].name);
        for (int c = 0; c < 4; c++) {
            double us;
            if (cuda_bench_sample(151936, c % 2 ? 17 : 1, c / 2, &smp[i].p, reps, &us, err, sizeof err) != 0) {
                fprintf(stderr, "cuda-ops-bench: %s\n", err);
                return 1;
            }
            printf(" %.1f us |", us);
        }
        printf("\n");
        fflush(stdout);
    }
    return vocab_sweep(reps, smp[0].p, smp[2].p);
}
