// cuda_elem: the element-wise and per-row steps some families add around
// the matmuls (Gemma 3's: the embedding's scale, the norms of the
// attention's and the MLP's outputs before their residual adds, GELU-tanh
// gating run apart, the logits' soft-cap), declared in cuda_ops.cuh. Each
// follows its CPU op (engine/ops.c) operation by operation in f32, with
// the round-to-nearest intrinsics where nvcc would otherwise contract a
// product and a sum into one FMA the CPU does not make, and each value (or
// row) is computed from itself alone, so a row's bits never depend on its
// batch. Every kernel is a plain launch on the caller's stream (no host
// synchronisation, no allocation), so the forwards that CUDA graphs and
// chained decoding capture can hold them.
#include <cuda_runtime.h>

#include <math.h>

#include "engine/cuda/cuda_ops.cuh"

#define ELEM_THREADS 256
#define ELEM_MAX_BLOCKS 4096

/* blocks of ELEM_THREADS for n elements, each thread striding on past them */
static int elem_blocks(size_t n) {
    const size_t b = (n + ELEM_THREADS - 1) / ELEM_THREADS;
    return (int)(b < ELEM_MAX_BLOCKS ? b : ELEM_MAX_BLOCKS);
}

/* x[i] *= s (op_scale) */
__global__ void k_scale(float *x, float s, size_t n) {
    pdl_trigger();
    pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = __fmul_rn(x[i], s);
}

void cu_scale(cu_go st, float *x, float s, size_t n) {
    if (!n) return;
    launch(k_scale, elem_blocks(n), ELEM_THREADS, st, x, s, n);
}

/* one block a row: the sum of squares of y's row as k_rmsnorm sums it (a
   fixed strided partial a thread, then a fixed tree), r = 1/sqrt(mean +
   eps), and x[i] += w[i] * (y[i] * r): op_rmsnorm's formula, then op_add,
   each product and the sum rounded on its own */
__global__ void __launch_bounds__(ELEM_THREADS) k_rmsnorm_add(float *x, const float *y, const float *w, int D,
                                                              float eps) {
    pdl_trigger();
    pdl_wait();
    __shared__ float part[ELEM_THREADS];
    const float *yr = y + (size_t)blockIdx.x * D;
    float *xr = x + (size_t)blockIdx.x * D;
    float s = 0.0f;
    for (int i = threadIdx.x; i < D; i += ELEM_THREADS) s = fmaf(yr[i], yr[i], s);
    part[threadIdx.x] = s;
    __syncthreads();
    for (int o = ELEM_THREADS / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
        __syncthreads();
    }
    const float r = 1.0f / sqrtf(part[0] / (float)D + eps);
    for (int i = threadIdx.x; i < D; i += ELEM_THREADS) xr[i] = __fadd_rn(xr[i], __fmul_rn(w[i], __fmul_rn(yr[i], r)));
}

void cu_rmsnorm_add(cu_go st, float *x, const float *y, const float *w, int M, int D, float eps) {
    if (M <= 0) return;
    launch(k_rmsnorm_add, M, ELEM_THREADS, st, x, y, w, D, eps);
}

/* g[i] = gelu_tanh(g[i]) * u[i] (cu_geglu, op_geglu's formula) */
__global__ void k_geglu_apart(float *g, const float *u, size_t n) {
    pdl_trigger();
    pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        g[i] = cu_geglu(g[i], u[i]);
}

void cu_geglu_apart(cu_go st, float *g, const float *u, size_t n) {
    if (!n) return;
    launch(k_geglu_apart, elem_blocks(n), ELEM_THREADS, st, g, u, n);
}

/* x[i] = tanh(x[i] / cap) * cap (op_softcap) */
__global__ void k_softcap(float *x, float cap, size_t n) {
    pdl_trigger();
    pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = __fmul_rn(tanhf(__fdiv_rn(x[i], cap)), cap);
}

void cu_softcap(cu_go st, float *x, float cap, size_t n) {
    if (!n) return;
    launch(k_softcap, elem_blocks(n), ELEM_THREADS, st, x, cap, n);
}
