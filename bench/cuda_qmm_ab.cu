/* cuda_qmm_ab: the quantized matmul (src/engine/cuda/cuda_quant.cu) alone,
 * built from one source tree by bench/cuda-qmm-build.sh, so two trees'
 * kernels can be timed on one card in one call and their outputs compared
 * bit for bit. Qwen3-8B's shapes (fused q/k/v, o, the gate+up SwiGLU, down,
 * the LM head) at 1, 2, 4, 8, 9 and 16 rows: us a launch and the weight
 * bytes streamed per second, the weights cycled through copies that miss
 * L2; then per format the 36 layers' matmuls plus the LM head, with
 * t(k)/t(1). The weights are fixed pseudo-random bytes (every f16 field
 * finite) and the activations a fixed pattern, so two builds see the same
 * inputs; the outputs at 1, 9 and 16 rows go to DIR for `cmp`.
 *   cuda_qmm_ab DIR [REPS=20] [FORMATS, e.g. Q4_K,MLX4] */
#include "engine/cuda/cuda_ops.cu"
#include "engine/cuda/cuda_quant.cu"

#include <stdlib.h>

#include <vector>

static __global__ void k_fill(uint32_t *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        h *= 3266489917u;
        h ^= h >> 16;
        p[i] = h & 0x3f3f3f3fu; /* (every byte below 64: f16 fields finite, below 2) */
    }
}
static __global__ void k_fill_x(float *p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = (float)((int)((i * 7919u) % 2001u) - 1000) * 1e-3f;
}
static __global__ void k_fill_sb(uint16_t *p, size_t n) { /* MLX bf16 scales and biases, about 0.008 */
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = (uint16_t)(0x3c00u + i % 97);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    const int reps = argc > 2 ? atoi(argv[2]) : 20;
    const struct {
        const char *n;
        ds_dtype dt;
        int bits;
    } F[] = {{"Q4_K", DT_Q4_K, 0}, {"Q8_0", DT_Q8_0, 0}, {"Q6_K", DT_Q6_K, 0},
             {"Q4_0", DT_Q4_0, 0}, {"MLX4", DT_MLX, 4},  {"MLX8", DT_MLX, 8}};
    const struct {
        const char *n;
        int N, K, swiglu;
    } S[] = {{"qkv", 6144, 4096, 0}, {"o", 4096, 4096, 0}, {"gate+up", 12288, 4096, 1}, {"down", 4096, 12288, 0},
             {"lm_head", 151936, 4096, 0}};
    const int Ms[] = {1, 2, 4, 8, 9, 16}, NM = 6, group = 64;
    const cu_tuning tn = cu_tuning_defaults();
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    const cu_go st = cu_go_on(s, &tn);
    for (const auto &f : F) {
        if (argc > 3 && !strstr(argv[3], f.n)) continue;
        double layer[NM] = {0}, lm[NM] = {0}, bl = 0, bh = 0;
        for (const auto &sh : S) {
            const size_t rb = cu_q_row_bytes(f.dt, f.bits, sh.K), wb = rb * sh.N;
            const size_t sbb = f.dt == DT_MLX ? (size_t)sh.N * (sh.K / group) * 2 : 0;
            const size_t per = (wb + 2 * sbb + 255) / 256 * 256;
            int copies = (int)(((size_t)1024 << 20) / per) + 2;
            if (copies > 64) copies = 64;
            uint8_t *w;
            float *x, *y;
            if (cudaMalloc((void **)&w, per * copies) || cudaMalloc((void **)&x, sizeof(float) * 16 * sh.K) ||
                cudaMalloc((void **)&y, sizeof(float) * 16 * sh.N)) {
                fprintf(stderr, "cuda_qmm_ab: out of device memory\n");
                return 1;
            }
            k_fill<<<1024, 256>>>((uint32_t *)w, per * copies / 4, 12345u);
            k_fill_x<<<256, 256>>>(x, (size_t)16 * sh.K);
            std::vector<dmat> Ws(copies);
            for (int c = 0; c < copies; c++) {
                dmat &W = Ws[c];
                memset(&W, 0, sizeof W);
                W.p = w + per * c, W.dt = f.dt, W.N = sh.N, W.K = sh.K;
                if (f.dt == DT_MLX) {
                    W.bits = f.bits, W.group = group, W.sdt = DT_BF16;
                    W.sc = w + per * c + wb, W.bi = w + per * c + wb + sbb;
                    k_fill_sb<<<256, 256>>>((uint16_t *)W.sc, sbb); /* (scales and biases, adjacent) */
                }
            }
            cudaDeviceSynchronize();
            auto go = [&](int M, int c) {
                if (sh.swiglu) cu_qmatmul(st, MM_SWIGLU, y, x, M, &Ws[c % copies], &Ws[(c + 1) % copies], NULL);
                else cu_qmatmul(st, MM_STORE, y, x, M, &Ws[c % copies], NULL, NULL);
            };
            for (int mi = 0; mi < NM; mi++) {
                const int M = Ms[mi];
                cudaEvent_t a, b;
                cudaEventCreate(&a);
                cudaEventCreate(&b);
                for (int r = -3; r < reps; r++) {
                    if (r == 0) cudaEventRecord(a, s);
                    go(M, r + 3);
                }
                cudaEventRecord(b, s);
                cudaEventSynchronize(b);
                float ms = 0;
                cudaEventElapsedTime(&ms, a, b);
                const double us = 1000.0 * ms / reps, bytes = (double)(wb + 2 * sbb) * (sh.swiglu ? 2 : 1);
                if (!strcmp(sh.n, "lm_head")) lm[mi] = us, bh = bytes;
                else layer[mi] += us, bl += mi ? 0 : bytes;
                printf("%s %-8s M=%2d %9.1f us %7.0f GB/s\n", f.n, sh.n, M, us, bytes / us / 1e3);
                if (M == 1 || M == 9 || M == 16) {
                    go(M, 0);
                    std::vector<float> h((size_t)M * sh.N);
                    cudaMemcpyAsync(h.data(), y, sizeof(float) * h.size(), cudaMemcpyDeviceToHost, s);
                    cudaStreamSynchronize(s);
                    char fn[512];
                    snprintf(fn, sizeof fn, "%s/y-%s-%s-%d.bin", dir, f.n, sh.n, M);
                    FILE *fp = fopen(fn, "wb");
                    if (fp) fwrite(h.data(), sizeof(float), h.size(), fp), fclose(fp);
                }
                cudaEventDestroy(a);
                cudaEventDestroy(b);
            }
            const cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) {
                fprintf(stderr, "cuda_qmm_ab: %s\n", cudaGetErrorString(e));
                return 1;
            }
            cudaFree(w);
            cudaFree(x);
            cudaFree(y);
        }
        for (int mi = 0; mi < NM; mi++) {
            const double ms = (36 * layer[mi] + lm[mi]) / 1e3, ms1 = (36 * layer[0] + lm[0]) / 1e3;
            printf("%s TOTAL M=%2d %.3f ms %.0f GB/s t/t1 %.2f\n", f.n, Ms[mi], ms, (36 * bl + bh) / ms / 1e6, ms / ms1);
        }
    }
    return 0;
}
