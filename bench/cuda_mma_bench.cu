// cuda_mma_bench: the matmul op benchmark (bench/cuda-ops-bench.c): one
// matrix's kernel alone, over enough weight copies that they do not stay
// in L2 between launches.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>

#include "engine/cuda/cuda_ops.cuh"
#include "cuda/cuda_hooks.h"

static int env_is(const char *name, const char *value) {
    const char *e = getenv(name);
    return e && !strcmp(e, value);
}

__global__ void k_fill_bf16(__nv_bfloat16 *p, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        h ^= h >> 29;
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 32;
        p[i] = __float2bfloat16(((float)(h & 0xffff) / 65536.0f - 0.5f) * 0.04f);
    }
}

extern "C" int cuda_bench_matmul(int M, int N, int K, int mode, int tiles, int tiled, int reps, double *us,
                                 char *err, size_t errlen) {
    size_t wn = (size_t)N * K;
    int nw = mode == 2 ? 2 : 1;
    /* enough weight copies that they do not stay in L2 between launches */
    int copies = (int)(((size_t)512 << 20) / (wn * 2 * nw)) + 1;
    if (copies > 64) copies = 64;
    /* DSPARK_BENCH_COPIES=n: n copies instead (1: a matrix that fits L2
       stays there, for timing the kernel apart from the memory) */
    const char *ec = getenv("DSPARK_BENCH_COPIES");
    if (ec) copies = atoi(ec) > 0 ? atoi(ec) : 1;
    /* DSPARK_BENCH_NORM=1: the plain-store and SwiGLU matmuls with an
       RMSNorm folded in and the SwiGLU writing its pre-cut copy too, as the
       forward runs the q/k/v projection, gate+up and the LM head (the
       kernel's own cost with the forward's epilogue, apart from the chain
       around it) */
    const int fwd = env_is("DSPARK_BENCH_NORM", "1") && (mode == 0 || mode == 2);
    /* DSPARK_BENCH_NORM=cut: the plain store and the SwiGLU with the norm
       run apart, as cu_norm_split has the forward run it: cu_norm_cut
       writing the pre-cut rows and scales, then the matmul from them (the
       SwiGLU writing its pre-cut copy), both timed */
    const int pcut = env_is("DSPARK_BENCH_NORM", "cut") && (mode == 0 || mode == 2) && M <= CU_CUT_ROWS &&
                     cu_norm_cut_ok(K);
    __nv_bfloat16 *w;
    float *x, *y, *gn = NULL, *rs = NULL;
    uint32_t *yc = NULL, *xc = NULL;
    CK(cudaMalloc((void **)&w, wn * 2 * nw * copies));
    CK(cudaMalloc((void **)&x, sizeof(float) * (size_t)M * K));
    CK(cudaMalloc((void **)&y, sizeof(float) * (size_t)M * N));
    if (pcut) {
        CK(cudaMalloc((void **)&xc, sizeof(uint32_t) * (size_t)M * K));
        CK(cudaMalloc((void **)&rs, sizeof(float) * (size_t)M));
    }
    if (fwd || pcut) {
        CK(cudaMalloc((void **)&gn, sizeof(float) * K));
        float *ones = (float *)xmalloc(sizeof(float) * K);
        for (int i = 0; i < K; i++) ones[i] = 1.0f;
        cudaError_t ce = cudaMemcpy(gn, ones, sizeof(float) * K, cudaMemcpyHostToDevice);
        free(ones);
        CK(ce);
        if (mode == 2) CK(cudaMalloc((void **)&yc, sizeof(uint32_t) * (size_t)M * N));
    }
    k_fill_bf16<<<1024, 256>>>(w, wn * nw * copies, 1);
    k_fill_bf16<<<256, 256>>>((__nv_bfloat16 *)x, (size_t)M * K * 2, 2); /* any finite bits */
    cudaMemset(y, 0, sizeof(float) * (size_t)M * N);
    dmat *Ws = (dmat *)xcalloc((size_t)copies * 2, sizeof(dmat)); /* per copy W, W2 */
    dev_pool pl = {};
    for (int c = 0; c < copies; c++) {
        Ws[2 * c] = dmat{w + wn * nw * c, DT_BF16, N, K, NULL};
        Ws[2 * c + 1] = dmat{w + wn * nw * c + wn, DT_BF16, N, K, NULL};
        if (tiled && (cu_tile_mat(&pl, &Ws[2 * c], err, errlen) || (nw == 2 && cu_tile_mat(&pl, &Ws[2 * c + 1], err, errlen))))
            return -1;
    }
    const int saved = cu_mma_tiles_force(tiles);
    cu_gemm *gm = NULL;
    if (mode == 4 && cu_gemm_create(&gm, cu_tuning_hooked()->gemm_rows, M, K, N, 0, err, errlen) != 0) return -1;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    const cu_go st = cu_go_on(s, cu_tuning_hooked()); /* (the hooks' tuning: cuda_hooks.h) */
    cudaDeviceSynchronize();
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int r = -3; r < reps; r++) {
        if (r == 0) cudaEventRecord(a, st);
        int c = (r + 3) % copies;
        const dmat &W = Ws[2 * c], &W2 = Ws[2 * c + 1];
        int Mg = mode == 4 ? cu_gemm_takes(gm, &W, M) : 0;
        if (Mg) cu_gemm_matmul(gm, st, MM_STORE, y, x, Mg, &W, NULL, NULL, NULL, 0);
        if (Mg == M) continue;
        if (pcut) {
            cu_norm_cut(st, xc, rs, x, gn, M, K, 1e-6f);
            cu_layer_matmul(st, NULL, mode == 2 ? MM_SWIGLU : MM_STORE, y, NULL, M, &W, &W2, NULL, gn, 1e-6f, NULL,
                            cu_cut{xc, yc, rs});
        } else if (mode == 3) cu_matmul_fma(st, y, x, M, &W);
        else if (mode == 2 && fwd) cu_matmul_swiglu_norm(st, y, x, M, &W, &W2, gn, 1e-6f, yc);
        else if (mode == 2) cu_matmul_swiglu(st, y, x, M, &W, &W2);
        else if (mode == 1) cu_matmul_add(st, y, x, M, &W, NULL);
        else if (fwd) cu_matmul_norm(st, y, x, M, &W, NULL, gn, 1e-6f);
        else cu_matmul(st, y, x, M, &W, NULL);
    }
    cudaEventRecord(b, st);
    cudaError_t e = cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cu_mma_tiles_force(saved);
    cu_pool_free(&pl);
    free(Ws);
    cu_gemm_free(gm);
    cudaStreamDestroy(s);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaFree(w);
    cudaFree(x);
    cudaFree(y);
    cudaFree(gn);
    cudaFree(yc);
    cudaFree(xc);
    cudaFree(rs);
    if (e != cudaSuccess) return ds_err(err, errlen, "CUDA: matmul benchmark: %s", cudaGetErrorString(e));
    *us = 1000.0 * ms / reps;
    return 0;
}

/* random bytes (the quantized benchmark's weights: any bits time alike) */
__global__ void k_fill_bytes(uint32_t *p, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        h ^= h >> 29;
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 32;
        p[i] = (uint32_t)h;
    }
}

extern "C" int cuda_bench_qmatmul(ds_dtype dt, int bits, int group, int M, int N, int K, int mode, int reps, double *us,
                                  double *wbytes, char *err, size_t errlen) {
    const size_t rb = cu_q_row_bytes(dt, bits, K);
    if (!rb || (dt == DT_MLX && K % group)) return ds_err(err, errlen, "quantized benchmark: no such format");
    const size_t wb = rb * (size_t)N, sbb = dt == DT_MLX ? (size_t)N * (K / group) * 2 : 0;
    const size_t per = (wb + 2 * sbb + 255) / 256 * 256;
    int copies = (int)(((size_t)512 << 20) / per) + 1;
    if (copies > 64) copies = 64;
    const char *ec = getenv("DSPARK_BENCH_COPIES");
    if (ec) copies = atoi(ec) > 0 ? atoi(ec) : 1;
    uint8_t *w;
    float *x, *y;
    if (mode == 2 && copies < 2) copies = 2; /* (the SwiGLU's up rows: the next copy) */
    CK(cudaMalloc((void **)&w, per * copies));
    CK(cudaMalloc((void **)&x, sizeof(float) * (size_t)M * K));
    CK(cudaMalloc((void **)&y, sizeof(float) * (size_t)M * N));
    k_fill_bytes<<<1024, 256>>>((uint32_t *)w, per * copies / 4, 7);
    k_fill_bf16<<<256, 256>>>((__nv_bfloat16 *)x, (size_t)M * K * 2, 2);
    /* (MLX: bf16 scales and biases of any finite bits) */
    dmat *Ws = (dmat *)xcalloc((size_t)copies, sizeof(dmat));
    for (int c = 0; c < copies; c++) {
        dmat &W = Ws[c];
        W.p = w + per * c;
        W.dt = dt;
        W.N = N;
        W.K = K;
        if (dt == DT_MLX) {
            W.bits = bits, W.group = group, W.sdt = DT_BF16;
            W.sc = w + per * c + wb;
            W.bi = w + per * c + wb + sbb;
            k_fill_bf16<<<256, 256>>>((__nv_bfloat16 *)W.sc, sbb, 3 + c);
        }
    }
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    const cu_go st = cu_go_on(s, cu_tuning_hooked());
    /* mode 4: the prefill path, cuBLAS groups of the tuning's gemm_rows on
       the matrix dequantized to bf16 (the rows past the last group by the
       decode kernels) */
    cu_gemm *gm = NULL;
    if (mode == 4 && cu_gemm_create(&gm, cu_tuning_hooked()->gemm_rows, M, K, N, (size_t)N * K, err, errlen) != 0)
        return -1;
    cudaDeviceSynchronize();
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int r = -3; r < reps; r++) {
        if (r == 0) cudaEventRecord(a, st);
        const dmat *W = &Ws[(r + 3) % copies];
        if (mode == 2) cu_matmul_swiglu(st, y, x, M, W, &Ws[(r + 4) % copies]);
        else if (mode == 4) cu_layer_matmul(st, gm, MM_STORE, y, x, M, W, NULL, NULL, NULL, 0.0f, NULL, cu_cut{});
        else cu_matmul(st, y, x, M, W, NULL);
    }
    cudaEventRecord(b, st);
    cudaError_t e = cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    free(Ws);
    cu_gemm_free(gm);
    cudaStreamDestroy(s);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaFree(w);
    cudaFree(x);
    cudaFree(y);
    if (e != cudaSuccess) return ds_err(err, errlen, "CUDA: quantized matmul benchmark: %s", cudaGetErrorString(e));
    *us = 1000.0 * ms / reps;
    *wbytes = (double)(wb + 2 * sbb) * (mode == 2 ? 2 : 1);
    return 0;
}
