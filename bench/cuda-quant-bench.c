/* cuda-quant-bench: the quantized decode matmul (src/engine/cuda/cuda_quant.cu)
 * on Qwen3-8B's shapes (the fused q/k/v 6144 x 4096, o 4096 x 4096, gate
 * and up 12288 x 4096 each, down 4096 x 12288, the LM head 151936 x 4096)
 * per format at 1, 8 and 16 rows: microseconds per launch and the weight
 * bandwidth that implies (bytes of blocks, or MLX words, scales and
 * biases, read once a launch), weights cycled through copies that miss
 * L2; and the bf16 tensor-core kernel's time on the same shapes for
 * reference. Built with CUDA=1 sh bench/build-tool.sh cuda-quant-bench;
 * run on the GPU machine:
 *   cuda-quant-bench [reps] [FORMAT ...]   (FORMAT: Q4_K, Q6_K, Q8_0, Q4_0,
 *                                            Q4_1, Q5_0, Q5_1, Q2_K, Q3_K,
 *                                            Q5_K, MLX2 .. MLX8; default
 *                                            Q4_K Q6_K Q8_0 Q4_0 MLX4 MLX8) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_hooks.h"
#include "base/util.h"

static const struct {
    const char *name;
    int N, K;
} shapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate|up", 12288, 4096}, {"down", 4096, 12288},
              {"lm_head", 151936, 4096}};

static int parse_fmt(const char *s, ds_dtype *dt, int *bits) {
    static const ds_dtype gg[] = {DT_Q8_0, DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q2_K, DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K};
    for (size_t i = 0; i < sizeof gg / sizeof gg[0]; i++)
        if (!strcmp(s, dtype_name(gg[i]))) return *dt = gg[i], *bits = 0, 0;
    if (!strncmp(s, "MLX", 3) && strchr("234568", s[3]) && s[3] && !s[4]) return *dt = DT_MLX, *bits = s[3] - '0', 0;
    return -1;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 50;
    const char *def[] = {"Q4_K", "Q6_K", "Q8_0", "Q4_0", "MLX4", "MLX8"};
    const char **fm = argc > 2 ? (const char **)argv + 2 : def;
    const int nf = argc > 2 ? argc - 2 : (int)(sizeof def / sizeof def[0]);
    const int rows[] = {1, 8, 16};
    char err[256];
    printf("| format | matrix | N x K | rows | us | weight GB/s |\n|---|---|---|---|---|---|\n");
    for (int f = 0; f < nf; f++) {
        ds_dtype dt;
        int bits;
        if (parse_fmt(fm[f], &dt, &bits)) {
            fprintf(stderr, "cuda-quant-bench: unknown format %s\n", fm[f]);
            return 2;
        }
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int r = 0; r < 3; r++) {
                double us = 0, wb = 0;
                if (cuda_bench_qmatmul(dt, bits, 64, rows[r], shapes[s].N, shapes[s].K, reps, &us, &wb, err, sizeof err)) {
                    fprintf(stderr, "cuda-quant-bench: %s\n", err);
                    return 1;
                }
                printf("| %s | %s | %d x %d | %d | %.1f | %.0f |\n", fm[f], shapes[s].name, shapes[s].N, shapes[s].K,
                       rows[r], us, wb / us / 1e3);
            }
    }
    printf("\n| bf16 (tensor-core kernel) | N x K | rows | us | weight GB/s |\n|---|---|---|---|---|\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int r = 0; r < 3; r++) {
            double us = 0;
            if (cuda_bench_matmul(rows[r], shapes[s].N, shapes[s].K, 0, 0, 1, reps, &us, err, sizeof err)) {
                fprintf(stderr, "cuda-quant-bench: %s\n", err);
                return 1;
            }
            printf("| %s | %d x %d | %d | %.1f | %.0f |\n", shapes[s].name, shapes[s].N, shapes[s].K, rows[r], us,
                   2.0 * shapes[s].N * shapes[s].K / us / 1e3);
        }
    return 0;
}
