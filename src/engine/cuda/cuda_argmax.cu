// cuda_argmax: the device argmax of logits rows (a greedy step reads back
// only token ids): one block a row, or a row split over blocks with its
// last block merging their pairs (cu_argmax, declared in cuda_ops.cuh).
#include <cuda_runtime.h>

#include <math.h>

#include "engine/cuda/cuda_ops.cuh"

/* one block of 1024 threads per row; thread t scans elements in increasing
   order (float4 groups t, t+1024, ..., four loads in flight) keeping the
   first largest, then a fixed tree keeps the lower index on ties: the first
   largest of the row, op_argmax's answer */
#define ARGMAX_THREADS 1024
__device__ __forceinline__ void am_take(float &bv, int &bi, float v, int i) {
    if (bi < 0 || v > bv) bv = v, bi = i;
}
__global__ void __launch_bounds__(ARGMAX_THREADS) k_argmax(int *out, const float *x, int n) {
    pdl_trigger();
    pdl_wait();
    __shared__ float sv[ARGMAX_THREADS];
    __shared__ int si[ARGMAX_THREADS];
    const float *xr = x + (size_t)blockIdx.x * n;
    const int T = ARGMAX_THREADS, t = threadIdx.x;
    float bv = -INFINITY;
    int bi = -1;
    if (n % 4 == 0) {
        const float4 *x4 = reinterpret_cast<const float4 *>(xr);
        int n4 = n / 4, i = t;
        for (; i + 3 * T < n4; i += 4 * T) {
            float4 a = x4[i], b = x4[i + T], c = x4[i + 2 * T], d = x4[i + 3 * T];
            const float4 v[4] = {a, b, c, d};
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int e = 4 * (i + u * T);
                am_take(bv, bi, v[u].x, e);
                am_take(bv, bi, v[u].y, e + 1);
                am_take(bv, bi, v[u].z, e + 2);
                am_take(bv, bi, v[u].w, e + 3);
            }
        }
        for (; i < n4; i += T) {
            float4 a = x4[i];
            am_take(bv, bi, a.x, 4 * i);
            am_take(bv, bi, a.y, 4 * i + 1);
            am_take(bv, bi, a.z, 4 * i + 2);
            am_take(bv, bi, a.w, 4 * i + 3);
        }
    } else {
        for (int i = t; i < n; i += T) am_take(bv, bi, xr[i], i);
    }
    sv[t] = bv;
    si[t] = bi;
    __syncthreads();
    for (int o = T / 2; o > 0; o >>= 1) {
        if (t < o) {
            float v2 = sv[t + o];
            int i2 = si[t + o], i1 = si[t];
            if (i2 >= 0 && (i1 < 0 || v2 > sv[t] || (v2 == sv[t] && i2 < i1))) {
                sv[t] = v2;
                si[t] = i2;
            }
        }
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = si[0] < 0 ? 0 : si[0];
}

/* The split argmax (on unless the tuning's argmax_split is 0): a row's values in nb slices of about
   AM_SLICE, a block each (k_argmax with one block a row reads a 151,936-
   token row on one SM, about 10 us); each block leaves its slice's
   (largest, first index) in the scratch and counts itself, and the row's
   last block merges the nb pairs and resets the count. The merge takes
   the larger value, the smaller index on ties: without NaNs an order-free
   rule, so the answer is op_argmax's whatever the slices. Measured on an
   H200 (docs/history/benchmarks-log.md, "The prepared switches measured"): Qwen3-8B
   t(1) at 512 positions 4.38-4.42 -> 4.36-4.38 ms. */
#define AM_THREADS 256
#define AM_SLICE 2048
#define AM_MAX_SLICES 128
__device__ __forceinline__ void am_merge(float &bv, int &bi, float v, int i) {
    if (i >= 0 && (bi < 0 || v > bv || (v == bv && i < bi))) bv = v, bi = i;
}
/* the block's pair by shuffles, then its warps' in shared memory: thread 0's */
__device__ __forceinline__ void am_block(float &bv, int &bi) {
    __shared__ float wv[AM_THREADS / 32];
    __shared__ int wi[AM_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, bv, o);
        const int i = __shfl_xor_sync(0xffffffffu, bi, o);
        am_merge(bv, bi, v, i);
    }
    if (threadIdx.x % 32 == 0) wv[threadIdx.x / 32] = bv, wi[threadIdx.x / 32] = bi;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int w = 1; w < AM_THREADS / 32; w++) am_merge(bv, bi, wv[w], wi[w]);
}
static int am_slices(int n) {
    const int nb = (n + AM_SLICE - 1) / AM_SLICE;
    return nb < 1 ? 1 : nb > AM_MAX_SLICES ? AM_MAX_SLICES : nb;
}
/* grid (nb, rows): block (b, m) takes values [b * span, (b + 1) * span) of
   row m (span a multiple of 4) */
__global__ void __launch_bounds__(AM_THREADS) k_argmax_split(int *out, const float *x, int n, int span, cu_am a) {
    pdl_trigger();
    pdl_wait();
    const int m = blockIdx.y, b = blockIdx.x, nb = gridDim.x, lo = b * span, hi = lo + span < n ? lo + span : n;
    const float *xr = x + (size_t)m * n;
    float bv = -INFINITY;
    int bi = -1;
    if (n % 4 == 0) { /* (lo is a multiple of 4 too) */
        const float4 *x4 = reinterpret_cast<const float4 *>(xr);
        for (int i = lo / 4 + threadIdx.x; i < hi / 4; i += AM_THREADS) {
            const float4 v = x4[i];
            am_merge(bv, bi, v.x, 4 * i);
            am_merge(bv, bi, v.y, 4 * i + 1);
            am_merge(bv, bi, v.z, 4 * i + 2);
            am_merge(bv, bi, v.w, 4 * i + 3);
        }
    } else {
        for (int i = lo + threadIdx.x; i < hi; i += AM_THREADS) am_merge(bv, bi, xr[i], i);
    }
    am_block(bv, bi);
    __shared__ int last;
    if (threadIdx.x == 0) {
        a.v[(size_t)m * a.nb + b] = bv;
        a.i[(size_t)m * a.nb + b] = bi;
        __threadfence(); /* the pair is visible before the count */
        last = atomicAdd(a.cnt + m, 1u) == (unsigned)nb - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    bv = -INFINITY, bi = -1;
    for (int k = threadIdx.x; k < nb; k += AM_THREADS)
        am_merge(bv, bi, __ldcg(a.v + (size_t)m * a.nb + k), __ldcg(a.i + (size_t)m * a.nb + k));
    __syncthreads(); /* (am_block's shared memory, used again) */
    am_block(bv, bi);
    if (threadIdx.x == 0) {
        out[m] = bi < 0 ? 0 : bi;
        a.cnt[m] = 0;
    }
}

int cu_am_create(cu_am *a, int rows, int n, char *err, size_t errlen) {
    *a = cu_am{};
    const int nb = am_slices(n);
    if (rows < 1 || nb < 2) return 0; /* (one block a row: k_argmax) */
    CK(cudaMalloc((void **)&a->v, sizeof(float) * (size_t)rows * nb));
    CK(cudaMalloc((void **)&a->i, sizeof(int) * (size_t)rows * nb));
    CK(cudaMalloc((void **)&a->cnt, sizeof(unsigned) * (size_t)rows));
    CK(cudaMemset(a->cnt, 0, sizeof(unsigned) * (size_t)rows));
    a->rows = rows;
    a->nb = nb;
    return 0;
}
void cu_am_free(cu_am *a) {
    cudaFree(a->v);
    cudaFree(a->i);
    cudaFree(a->cnt);
    *a = cu_am{};
}


void cu_argmax(cu_go st, int *out, const float *x, int M, int n, const cu_am *a) {
    const int nb = am_slices(n);
    if (st.t->argmax_split && a && a->nb >= nb && nb >= 2 && M <= a->rows) {
        const int span = ((n + nb - 1) / nb + 3) / 4 * 4;
        return launch(k_argmax_split, dim3((unsigned)((n + span - 1) / span), (unsigned)M), AM_THREADS, st, out, x, n,
                      span, *a);
    }
    launch(k_argmax, M, ARGMAX_THREADS, st, out, x, n);
}
