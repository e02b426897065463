// cuda-stream-probe: how fast the GPU streams a bf16 weight matrix under
// the access patterns a batch-1 matmul can use, each kernel reduced to its
// loads (the loaded words are xor-ed and one word per block is stored, so
// nothing is elided). The question it answers: is the tensor-core
// kernel's steady state (the LM head at one row: 3.8 TB/s, against 4.2-4.3
// for the FMA kernel and a plain copy) limited by the shape of its loads,
// which touch 16 rows x 64 bytes per warp instruction, rather than by the
// bytes in flight? Patterns, for an N x K row-major matrix (a tile-major
// copy for the last):
//   contiguous    grid-stride 16-byte loads, 4 in flight per thread
//   mma           k_mma's (src/engine/cuda/cuda_mma.cu, one 16-row tile a block, 8
//                 warps splitting K in 32-wide chunks, lane (g, t) loading
//                 rows g and g + 8 at k = 32 c + 8 t), 4 chunks in flight
//   mma 2/SM      the same with shared memory reserved so that two blocks
//                 fit an SM, as k_mma's registers allow
//   fma           k_matmul's (4 rows a block, 4 warps, lane l of warp w
//                 loading k = 8 (32 w + l) of each row, two groups in flight)
//   tiled         mma's fragments read from a tile-major layout (each 16 x
//                 32 chunk 1 KB contiguous, a warp's two loads 512 B each)
// Built by scripts/cuda-pack; run on the GPU machine:
//   cuda-stream-probe [reps]
// (K must be a multiple of 1024: the mma patterns take 4 chunks of 8 warps
// at a time without bounds checks.)
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "cuda-stream-probe: %s: %s\n", #x, cudaGetErrorString(e_));        \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

__device__ __forceinline__ uint32_t mix(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

__global__ void k_contig(uint32_t *out, const uint4 *w, size_t n16) {
    uint32_t acc = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x, i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 a = __ldg(w + i), b = __ldg(w + i + stride), c = __ldg(w + i + 2 * stride), d = __ldg(w + i + 3 * stride);
        acc ^= mix(a) ^ mix(b) ^ mix(c) ^ mix(d);
    }
    for (; i < n16; i += stride) acc ^= mix(__ldg(w + i));
    if (acc == 0x12345678u) out[blockIdx.x] = acc;
}

/* k_mma's addresses: block = 16 rows, warp w takes chunks w, w + 8, ... */
__global__ void __launch_bounds__(256, 1) k_mma_pattern(uint32_t *out, const uint16_t *w, int N, int K) {
    extern __shared__ uint32_t pad[]; /* occupancy only */
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int n0 = blockIdx.x * 16, nc = K / 32;
    const uint16_t *ra = w + (size_t)min(n0 + g, N - 1) * K, *rb = w + (size_t)min(n0 + g + 8, N - 1) * K;
    uint32_t acc = 0;
    for (int c = warp; c < nc; c += 4 * 8) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 4; u++) { /* K a multiple of 1024: every chunk exists */
            int k = (c + 8 * u) * 32 + 8 * t;
            v[2 * u] = __ldg(reinterpret_cast<const uint4 *>(ra + k));
            v[2 * u + 1] = __ldg(reinterpret_cast<const uint4 *>(rb + k));
        }
#pragma unroll
        for (int u = 0; u < 8; u++) acc ^= mix(v[u]);
    }
    if (acc == 0x12345678u) out[blockIdx.x] = acc + pad[0];
}

/* k_matmul's addresses: block = 4 rows, 4 warps, lane l of warp w: group 32 w + l, then + 128 */
__global__ void __launch_bounds__(128) k_fma_pattern(uint32_t *out, const uint16_t *w, int N, int K) {
    const int n0 = blockIdx.x * 4, K8 = K / 8;
    const uint16_t *r[4];
#pragma unroll
    for (int j = 0; j < 4; j++) r[j] = w + (size_t)min(n0 + j, N - 1) * K;
    uint32_t acc = 0;
    int g = threadIdx.x;
    for (; g + 128 < K8; g += 256) {
        uint4 v[8];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            v[2 * j] = __ldg(reinterpret_cast<const uint4 *>(r[j] + (size_t)g * 8));
            v[2 * j + 1] = __ldg(reinterpret_cast<const uint4 *>(r[j] + (size_t)(g + 128) * 8));
        }
#pragma unroll
        for (int u = 0; u < 8; u++) acc ^= mix(v[u]);
    }
    if (g < K8)
        for (int j = 0; j < 4; j++) acc ^= mix(__ldg(reinterpret_cast<const uint4 *>(r[j] + (size_t)g * 8)));
    if (acc == 0x12345678u) out[blockIdx.x] = acc;
}

/* mma's fragments from a tile-major copy: tile T's chunk c (16 rows x 32 k,
   1 KB) at (T * nc + c) KB, lane l reading bytes 16 l and 512 + 16 l */
__global__ void __launch_bounds__(256, 1) k_tiled_pattern(uint32_t *out, const uint16_t *w, int N, int K) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nc = K / 32;
    const uint4 *tile = reinterpret_cast<const uint4 *>(w) + (size_t)blockIdx.x * nc * 64;
    uint32_t acc = 0;
    for (int c = warp; c < nc; c += 4 * 8) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const uint4 *q = tile + (size_t)(c + 8 * u) * 64;
            v[2 * u] = __ldg(q + lane);
            v[2 * u + 1] = __ldg(q + 32 + lane);
        }
#pragma unroll
        for (int u = 0; u < 8; u++) acc ^= mix(v[u]);
    }
    (void)N;
    if (acc == 0x12345678u) out[blockIdx.x] = acc;
}

struct shape {
    const char *name;
    int N, K;
};

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 20;
    if (reps < 1) reps = 1;
    int dev = 0, sms = 0, optin = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    /* two blocks of the mma pattern per SM: each takes just over a third of the SM's shared memory */
    int pad2 = optin / 2 - 8192;
    CK(cudaFuncSetAttribute(k_mma_pattern, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    const shape shapes[] = {{"lm_head 151936x4096", 151936, 4096}, {"gate 12288x4096", 12288, 4096},
                            {"o 4096x4096", 4096, 4096}};
    printf("| matrix | pattern | us per pass | GB/s |\n|---|---|---:|---:|\n");
    for (const shape &s : shapes) {
        size_t bytes = (size_t)s.N * s.K * 2;
        int copies = (int)(((size_t)1 << 30) / bytes) + 1; /* cycled so no pass finds the last in L2 */
        if (copies > 64) copies = 64;
        uint16_t *w;
        uint32_t *out;
        CK(cudaMalloc(&w, bytes * copies));
        CK(cudaMemset(w, 0x5a, bytes * copies));
        CK(cudaMalloc(&out, sizeof(uint32_t) * 1024 * 1024));
        for (int p = 0; p < 5; p++) {
            const char *names[] = {"contiguous", "mma", "mma 2/SM", "fma", "tiled"};
            cudaEvent_t a, b;
            CK(cudaEventCreate(&a));
            CK(cudaEventCreate(&b));
            for (int r = -3; r < reps; r++) {
                if (r == 0) CK(cudaEventRecord(a));
                const uint16_t *m = w + (size_t)((r + 3) % copies) * s.N * s.K;
                switch (p) {
                case 0: k_contig<<<4 * sms, 256>>>(out, reinterpret_cast<const uint4 *>(m), bytes / 16); break;
                case 1: k_mma_pattern<<<(s.N + 15) / 16, 256>>>(out, m, s.N, s.K); break;
                case 2: k_mma_pattern<<<(s.N + 15) / 16, 256, pad2>>>(out, m, s.N, s.K); break;
                case 3: k_fma_pattern<<<(s.N + 3) / 4, 128>>>(out, m, s.N, s.K); break;
                default: k_tiled_pattern<<<(s.N + 15) / 16, 256>>>(out, m, s.N, s.K); break;
                }
            }
            CK(cudaEventRecord(b));
            CK(cudaEventSynchronize(b));
            CK(cudaGetLastError());
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, a, b));
            double us = 1e3 * ms / reps;
            printf("| %s | %s | %.1f | %.0f |\n", s.name, names[p], us, bytes / us / 1e3);
            CK(cudaEventDestroy(a));
            CK(cudaEventDestroy(b));
        }
        CK(cudaFree(w));
        CK(cudaFree(out));
    }
    return 0;
}
