// cuda_gemm: the layer matmuls of prefill-sized batches through cuBLAS
// (see cuda_ops.cuh, cu_gemm).
//
// cuBLAS multiplies operands of one type, and the weights are bf16 while
// the activations are f32. Rounding the activations to bf16 would lose 16
// of their 24 bits, so each activation row is written as two bf16 rows,
// head = bf16(v) and tail = bf16(v - head), which together hold v to about
// 2^-16 of its size; both go through one bf16 GEMM (tensor cores, f32
// accumulation, the products of bf16 values are exact in f32) as 2M rows
// that read each weight once, and an epilogue kernel adds each row's head
// and tail results and applies the bias, the residual add or the SwiGLU.
// An RMSNorm of the input is applied when the rows are split.
//
// The result is not bit-identical to the tensor-core kernel's that decode
// and verify use (the lossless guarantee needs those rows, not these):
// cuBLAS only takes whole groups of the tuning's gemm_rows rows, more than any
// verify, and each group is its own GEMM of one fixed size, so a row's bits
// depend on where its group starts in the forward call, never on how many
// rows the call has: speculative prefill in chunks of a multiple of the
// group and one plain forward of the whole prompt give the same cache.
//
// A quantized matrix (cuda_quant.cu) is first dequantized into the
// context's bf16 weight scratch (cu_qdequant_bf16: each weight exact in
// f32, then rounded to nearest bf16, so prefill groups of a quantized
// checkpoint see weights within 2^-9 of their size; decode and verify rows
// keep the exact weights), once per matmul call for all its groups, and
// the same GEMMs run on it. The scratch is sized at creation for the
// largest quantized matrix a layer has (wmax elements) and reused matrix
// by matmul: the stream orders each dequantization after the GEMMs that
// read the previous one.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>

#include "engine/cuda/cuda_ops.cuh"

struct cu_gemm {
    cublasHandle_t h;
    __nv_bfloat16 *xs; /* [2 rows][K]: heads, then tails */
    __nv_bfloat16 *wb; /* [wmax]: a quantized matrix in bf16 (NULL: wmax 0) */
    size_t wmax;
    float *c;          /* [2 rows][N] per product (two for SwiGLU) */
    int group, rows, kmax, nmax; /* group: rows a GEMM (0: none taken) */
    cublasStatus_t status; /* first failure of an enqueued GEMM */
};

int cu_gemm_takes(const cu_gemm *g, const dmat *W, int M) {
    const int r = g ? g->group : 0;
    if (r <= 0 || M < r || W->K > g->kmax || W->N > g->nmax) return 0;
    if (W->dt != DT_BF16 && !(dtype_is_quant(W->dt) && (size_t)W->N * (size_t)W->K <= g->wmax)) return 0;
    if (M > g->rows) M = g->rows;
    return M / r * r;
}

static const char *cublas_msg(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "error";
    }
}

int cu_gemm_create(cu_gemm **out, int group, int rows, int kmax, int nmax, size_t wmax, char *err, size_t errlen) {
    *out = NULL;
    cu_gemm *g = (cu_gemm *)calloc(1, sizeof *g);
    if (!g) return ds_err(err, errlen, "out of memory");
    g->group = group;
    g->rows = rows;
    g->kmax = kmax;
    g->nmax = nmax;
    g->wmax = wmax;
    cublasStatus_t s = cublasCreate(&g->h);
    if (s != CUBLAS_STATUS_SUCCESS) {
        free(g);
        return ds_err(err, errlen, "cuBLAS: cannot create a handle: %s", cublas_msg(s));
    }
    cudaError_t e = cudaMalloc((void **)&g->xs, sizeof(__nv_bfloat16) * 2 * (size_t)rows * kmax);
    if (e == cudaSuccess) e = cudaMalloc((void **)&g->c, sizeof(float) * 4 * (size_t)rows * nmax);
    if (e == cudaSuccess && wmax) e = cudaMalloc((void **)&g->wb, sizeof(__nv_bfloat16) * wmax);
    if (e != cudaSuccess) {
        cu_gemm_free(g);
        return ds_err(err, errlen, "CUDA: cannot allocate %.0f MiB of GEMM scratch: %s",
                      (4.0 * rows * kmax + 16.0 * rows * nmax + 2.0 * (double)wmax) / (1 << 20), cudaGetErrorString(e));
    }
    *out = g;
    return 0;
}

void cu_gemm_free(cu_gemm *g) {
    if (!g) return;
    if (g->h) cublasDestroy(g->h);
    cudaFree(g->xs);
    cudaFree(g->c);
    cudaFree(g->wb);
    free(g);
}

int cu_gemm_check(cu_gemm *g, char *err, size_t errlen) {
    if (!g || g->status == CUBLAS_STATUS_SUCCESS) return 0;
    cublasStatus_t s = g->status;
    g->status = CUBLAS_STATUS_SUCCESS;
    return ds_err(err, errlen, "cuBLAS GEMM failed: %s", cublas_msg(s));
}

#define SPLIT_THREADS 256

/* one block per row: v = x (or RMSNorm(x, gn): the sum of squares in a
   fixed order, strided per thread then a tree), written as bf16 head and
   tail rows; group q of G rows is [heads][tails] at xs + 2 G K q */
__global__ void __launch_bounds__(SPLIT_THREADS) k_split_bf16(__nv_bfloat16 *xs, const float *x, const float *gn,
                                                              int G, int K, float eps) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[SPLIT_THREADS];
    const int m = blockIdx.x, t = threadIdx.x;
    const float *xr = x + (size_t)m * K;
    float r = 1.0f;
    if (gn) {
        float s = 0.0f;
        for (int k = t; k < K; k += SPLIT_THREADS) s = fmaf(xr[k], xr[k], s);
        red[t] = s;
        __syncthreads();
        for (int w = SPLIT_THREADS / 2; w > 0; w >>= 1) {
            if (t < w) red[t] += red[t + w];
            __syncthreads();
        }
        r = 1.0f / sqrtf(red[0] / (float)K + eps);
    }
    __nv_bfloat16 *hi = xs + ((size_t)(m / G) * 2 * G + m % G) * K, *lo = hi + (size_t)G * K;
    for (int k = t; k < K; k += SPLIT_THREADS) {
        float v = gn ? xr[k] * r * gn[k] : xr[k];
        __nv_bfloat16 h = __float2bfloat16_rn(v);
        hi[k] = h;
        lo[k] = __float2bfloat16_rn(v - __bfloat162float(h));
    }
}

/* y[m][n] (epilogue) = the head product + the tail product of row m, in
   the groups' layout [q][heads | tails][N] */
template <int EPI>
__global__ void k_gemm_epi(float *y, const float *c, const float *c2, const float *bias, int M, int N, int G) {
    pdl_trigger();
    pdl_wait();
    size_t n_all = (size_t)M * N, gn = (size_t)G * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_all; i += (size_t)gridDim.x * blockDim.x) {
        size_t q = i / gn, o = q * 2 * gn + i % gn; /* row's head; its tail is G rows on */
        float s = c[o] + c[o + gn];
        if (mm_gated(EPI)) {
            float u = c2[o] + c2[o + gn];
            y[i] = EPI == MM_GEGLU ? cu_geglu(s, u) : s / (1.0f + expf(-s)) * u;
        } else {
            if (bias) s += bias[i % N];
            if (EPI == MM_ADD) y[i] += s;
            else y[i] = s;
        }
    }
}

/* per group q: c[q][2G][N] = xs[q][2G][K] . W^T; column-major for cuBLAS,
   C (N x 2G) = op(W) (N x K) . xs (K x 2G). One GEMM of 2G rows per group,
   whatever M, so cuBLAS sees one problem size. */
static void gemm(cu_gemm *g, float *c, const dmat *W, const void *wp, int M, int G) {
    const float one = 1.0f, zero = 0.0f;
    for (int q = 0; q < M / G; q++) {
        cublasStatus_t s = cublasGemmEx(g->h, CUBLAS_OP_T, CUBLAS_OP_N, W->N, 2 * G, W->K, &one, wp, CUDA_R_16BF,
                                        W->K, g->xs + (size_t)q * 2 * G * W->K, CUDA_R_16BF, W->K, &zero,
                                        c + (size_t)q * 2 * G * W->N, CUDA_R_32F, W->N, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS && g->status == CUBLAS_STATUS_SUCCESS) g->status = s;
    }
}

/* the bf16 weights a GEMM of W reads: W's own, or a quantized W
   dequantized into the scratch (see the top of the file) */
static const void *weights(cu_gemm *g, cu_go st, const dmat *W) {
    if (!dtype_is_quant(W->dt)) return W->p;
    cu_qdequant_bf16(st, g->wb, W);
    return g->wb;
}

void cu_gemm_matmul(cu_gemm *g, cu_go st, int epi, float *y, const float *x, int M, const dmat *W,
                    const dmat *W2, const float *bias, const float *gn, float eps) {
    cublasStatus_t s = cublasSetStream(g->h, st);
    if (s != CUBLAS_STATUS_SUCCESS && g->status == CUBLAS_STATUS_SUCCESS) g->status = s;
    const int G = g->group; /* M is a multiple (cu_gemm_takes) */
    launch(k_split_bf16, M, SPLIT_THREADS, st, g->xs, x, gn, G, W->K, eps);
    float *c2 = g->c + 2 * (size_t)M * W->N;
    gemm(g, g->c, W, weights(g, st, W), M, G);
    if (mm_gated(epi)) gemm(g, c2, W2, weights(g, st, W2), M, G);
    size_t n = (size_t)M * W->N;
    int blocks = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
    const float *c0 = g->c;
    if (epi == MM_SWIGLU) launch(k_gemm_epi<MM_SWIGLU>, blocks, 256, st, y, c0, (const float *)c2, bias, M, W->N, G);
    else if (epi == MM_GEGLU) launch(k_gemm_epi<MM_GEGLU>, blocks, 256, st, y, c0, (const float *)c2, bias, M, W->N, G);
    else if (epi == MM_ADD) launch(k_gemm_epi<MM_ADD>, blocks, 256, st, y, c0, (const float *)NULL, bias, M, W->N, G);
    else launch(k_gemm_epi<MM_STORE>, blocks, 256, st, y, c0, (const float *)NULL, bias, M, W->N, G);
}
