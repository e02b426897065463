/* cuda-quant-bench: the quantized matmuls (src/engine/cuda/cuda_quant.cu)
 * on Qwen3-8B's shapes (the fused q/k/v 6144 x 4096, o 4096 x 4096, gate
 * and up 12288 x 4096 each as one SwiGLU launch, down 4096 x 12288, the LM
 * head 151936 x 4096) per format at every width from 1 to 16 rows (decode
 * and the verify widths): microseconds per launch, the weight bandwidth
 * that implies (bytes of blocks, or MLX words, scales and biases, read
 * once a launch) and t(k)/t(1); weights cycled through copies that miss
 * L2. Then per format a layer's matmuls (q/k/v + o + gate/up + down) times
 * 36 plus the LM head, the matmul share of an 8B forward, with its
 * t(k)/t(1); the prefill path (cuBLAS groups on the matrix dequantized to
 * bf16) at 512 rows as tokens/s of the layer's matmuls; and the bf16
 * tensor-core kernel on the same shapes for reference. Built with
 * CUDA=1 sh bench/build-tool.sh cuda-quant-bench; run on the GPU machine:
 *   cuda-quant-bench [reps] [FORMAT ...]   (FORMAT: Q4_K, Q6_K, Q8_0, Q4_0,
 *                                            Q4_1, Q5_0, Q5_1, Q2_K, Q3_K,
 *                                            Q5_K, MLX2 .. MLX8 (group 64);
 *                                            default Q4_K Q6_K Q8_0 Q4_0
 *                                            MLX4 MLX8) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_hooks.h"
#include "base/util.h"

/* mode: 0 a plain matmul, 2 the SwiGLU of two N x K matrices */
static const struct {
    const char *name;
    int N, K, mode;
} shapes[] = {{"qkv", 6144, 4096, 0}, {"o", 4096, 4096, 0}, {"gate+up", 12288, 4096, 2}, {"down", 4096, 12288, 0},
              {"lm_head", 151936, 4096, 0}};
#define NSHAPE ((int)(sizeof shapes / sizeof shapes[0]))
#define LAYERS 36
#define WMAX 16

static int parse_fmt(const char *s, ds_dtype *dt, int *bits) {
    static const ds_dtype gg[] = {DT_Q8_0, DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q2_K, DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K};
    for (size_t i = 0; i < sizeof gg / sizeof gg[0]; i++)
        if (!strcmp(s, dtype_name(gg[i]))) return *dt = gg[i], *bits = 0, 0;
    if (!strncmp(s, "MLX", 3) && s[3] && strchr("234568", s[3]) && !s[4]) return *dt = DT_MLX, *bits = s[3] - '0', 0;
    return -1;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 50;
    const char *def[] = {"Q4_K", "Q6_K", "Q8_0", "Q4_0", "MLX4", "MLX8"};
    const char **fm = argc > 2 ? (const char **)argv + 2 : def;
    const int nf = argc > 2 ? argc - 2 : (int)(sizeof def / sizeof def[0]);
    char err[256];
    for (int f = 0; f < nf; f++) {
        ds_dtype dt;
        int bits;
        if (parse_fmt(fm[f], &dt, &bits)) {
            fprintf(stderr, "cuda-quant-bench: unknown format %s\n", fm[f]);
            return 2;
        }
        double t[NSHAPE][WMAX + 1], wb[NSHAPE];
        printf("\n## %s\n\n| matrix | N x K | rows | us | weight GB/s | t(k)/t(1) |\n|---|---|---:|---:|---:|---:|\n", fm[f]);
        for (int s = 0; s < NSHAPE; s++)
            for (int k = 1; k <= WMAX; k++) {
                if (cuda_bench_qmatmul(dt, bits, 64, k, shapes[s].N, shapes[s].K, shapes[s].mode, reps, &t[s][k], &wb[s],
                                       err, sizeof err)) {
                    fprintf(stderr, "cuda-quant-bench: %s\n", err);
                    return 1;
                }
                printf("| %s | %d x %d | %d | %.1f | %.0f | %.2f |\n", shapes[s].name, shapes[s].N, shapes[s].K, k,
                       t[s][k], wb[s] / t[s][k] / 1e3, t[s][k] / t[s][1]);
                fflush(stdout);
            }
        /* the matmul share of a 36-layer forward and its LM head */
        printf("\n| %s: 36 layers' matmuls + LM head | rows | ms | weight GB/s | t(k)/t(1) |\n|---|---:|---:|---:|---:|\n",
               fm[f]);
        double bytes = LAYERS * (wb[0] + wb[1] + wb[2] + wb[3]) + wb[4], t1 = 0;
        for (int k = 1; k <= WMAX; k++) {
            const double us = LAYERS * (t[0][k] + t[1][k] + t[2][k] + t[3][k]) + t[4][k];
            if (k == 1) t1 = us;
            printf("| | %d | %.3f | %.0f | %.2f |\n", k, us / 1e3, bytes / us / 1e3, us / t1);
        }
        /* prefill: 512 rows (four cuBLAS groups) of each layer matrix */
        double pre = 0;
        for (int s = 0; s < 4; s++) {
            double us = 0, b = 0;
            const int n = shapes[s].mode == 2 ? 2 : 1; /* (gate and up apart: two launches) */
            if (cuda_bench_qmatmul(dt, bits, 64, 512, shapes[s].N, shapes[s].K, 4, reps > 10 ? 10 : reps, &us, &b, err,
                                   sizeof err)) {
                fprintf(stderr, "cuda-quant-bench: %s\n", err);
                return 1;
            }
            pre += n * us;
        }
        printf("\n%s prefill path, 512 rows: a layer's matmuls %.0f us, %.0f tok/s for 36 layers' matmuls alone\n",
               fm[f], pre, 512.0 / (LAYERS * pre / 1e6));
    }
    printf("\n| bf16 (tensor-core kernel) | N x K | rows | us | weight GB/s |\n|---|---|---|---|---|\n");
    const int rows[] = {1, 8, 16};
    for (int s = 0; s < NSHAPE; s++)
        for (int r = 0; r < 3; r++) {
            double us = 0;
            if (cuda_bench_matmul(rows[r], shapes[s].N, shapes[s].K, shapes[s].mode, 0, 1, reps, &us, err, sizeof err)) {
                fprintf(stderr, "cuda-quant-bench: %s\n", err);
                return 1;
            }
            printf("| %s | %d x %d | %d | %.1f | %.0f |\n", shapes[s].name, shapes[s].N, shapes[s].K, rows[r], us,
                   2.0 * shapes[s].N * shapes[s].K * (shapes[s].mode == 2 ? 2 : 1) / us / 1e3);
        }
    return 0;
}
