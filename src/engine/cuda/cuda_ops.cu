// cuda_ops: the CUDA kernels and their launchers (cuda_ops.cuh) but the
// matmuls (cuda_mma.cu), attention (cuda_attn*.cu) and argmax
// (cuda_argmax.cu): RMSNorm, the embedding, the weight uploads and
// tile-major copies, and the chained decode step's input kernels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "engine/cuda/cuda_ops.cuh"

/* ---- kernels ------------------------------------------------------------ */


/* one block (256 threads) per row; fixed strided partial sums, then a
   fixed tree */
__global__ void k_rmsnorm(float *y, const float *x, const float *w, int D, float eps) {
    pdl_trigger();
    pdl_wait();
    __shared__ float part[256];
    const float *xr = x + (size_t)blockIdx.x * D;
    float *yr = y + (size_t)blockIdx.x * D;
    float s = 0.0f;
    for (int i = threadIdx.x; i < D; i += blockDim.x) s = fmaf(xr[i], xr[i], s);
    part[threadIdx.x] = s;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
        __syncthreads();
    }
    float r = 1.0f / sqrtf(part[0] / (float)D + eps);
    for (int i = threadIdx.x; i < D; i += blockDim.x) yr[i] = w[i] * (xr[i] * r);
}

int cu_code_arch(char *err, size_t errlen) {
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, k_rmsnorm);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* (not sticky: leave no error for the next call) */
        int dev = 0, cc = 0;
        cudaGetDevice(&dev);
        cc = cu_device_cc(dev);
        if (err)
            snprintf(err, errlen,
                     "CUDA: this build has no kernels for device %d (compute capability %d.%d): %s; rebuild with "
                     "`make cuda` on this machine (it targets the GPU nvidia-smi reports), or name the GPU's "
                     "architecture: make cuda CUDA_ARCH=-gencode=arch=compute_%d,code=sm_%d",
                     dev, cc / 10, cc % 10, cudaGetErrorString(e), cc, cc);
        return -1;
    }
    return fa.ptxVersion;
}

/* a block a row */
template <typename T>
__global__ void k_embed(float *out, const T *e, const int *tok, int H) {
    pdl_trigger();
    pdl_wait();
    int m = blockIdx.x;
    const T *row = e + (size_t)tok[m] * H;
    for (int i = threadIdx.x; i < H; i += blockDim.x) out[(size_t)m * H + i] = widen(row[i]);
}

/* ---- weight uploads -------------------------------------------------------- */

int cu_dev_alloc(dev_pool *pl, void **p, size_t n, char *err, size_t errlen) {
    CK(cudaMalloc(p, n ? n : 1));
    if (pl->n == pl->cap) {
        pl->cap = pl->cap ? pl->cap * 2 : 64;
        pl->p = (void **)xrealloc(pl->p, sizeof(void *) * (size_t)pl->cap);
    }
    pl->p[pl->n++] = *p;
    return 0;
}

int cu_up_f32(dev_pool *pl, float **dst, const float *src, size_t n, char *err, size_t errlen) {
    *dst = NULL;
    if (!src) return 0;
    if (cu_dev_alloc(pl, (void **)dst, sizeof(float) * n, err, errlen)) return -1;
    CK(cudaMemcpy(*dst, src, sizeof(float) * n, cudaMemcpyHostToDevice));
    return 0;
}

int cu_up_mat(dev_pool *pl, dmat *d, const tensor *t, char *err, size_t errlen) {
    if (dtype_is_quant(t->dtype)) return cu_up_qmat(pl, d, t, err, errlen);
    memset(d, 0, sizeof *d);
    if (t->dtype != DT_BF16 && t->dtype != DT_F16 && t->dtype != DT_F32)
        return ds_err(err, errlen, "CUDA: %s has dtype %s (bf16, f16 or f32 needed)", t->name, dtype_name(t->dtype));
    d->dt = t->dtype;
    d->N = (int)t->shape[0];
    d->K = t->ndim > 1 ? (int)t->shape[1] : 1;
    if (cu_dev_alloc(pl, &d->p, t->nbytes, err, errlen)) return -1;
    CK(cudaMemcpy(d->p, t->data, t->nbytes, cudaMemcpyHostToDevice));
    return 0;
}

static size_t g_tiled_bytes; /* tile-major copies made in this process */

/* one thread per 8 elements of the tile-major copy (see dmat) */
__global__ void k_tile(uint4 *__restrict__ t, const uint4 *__restrict__ w, int N, int K, size_t groups) {
    const int nc = (K + 31) / 32;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < groups; i += (size_t)gridDim.x * blockDim.x) {
        size_t tile = i / 64;
        int in = (int)(i % 64), R = (int)(tile / nc), c = (int)(tile % nc);
        int n = R * 16 + in / 4, k = c * 32 + (in % 4) * 8;
        t[i] = n < N && k < K ? w[((size_t)n * K + k) / 8] : make_uint4(0, 0, 0, 0);
    }
}

int cu_tiles_ok(const dmat *W) { return (W->dt == DT_BF16 || W->dt == DT_F16) && W->K % 8 == 0; }

size_t cu_tile_bytes(const dmat *W) {
    if (!cu_tiles_ok(W)) return 0;
    return (size_t)((W->N + 15) / 16) * (size_t)((W->K + 31) / 32) * 1024;
}

int cu_tile_mat(dev_pool *pl, dmat *W, char *err, size_t errlen) {
    size_t bytes = cu_tile_bytes(W);
    if (!bytes || W->t) return 0;
    void *t = NULL;
    if (cu_dev_alloc(pl, &t, bytes, err, errlen)) return -1;
    {
        const cu_tuning d = cu_tuning_defaults(); /* (k_tile waits for nothing: launched as a plain launch) */
        launch(k_tile, 1024, 256, cu_serial(cu_go_on(0, &d)), (uint4 *)t, (const uint4 *)W->p, W->N, W->K,
               bytes / 16);
    }
    CK(cudaGetLastError());
    W->t = t;
    __atomic_add_fetch(&g_tiled_bytes, bytes, __ATOMIC_RELAXED);
    return 0;
}

int cu_room_for(size_t bytes) {
    size_t fr = 0, total = 0;
    if (cudaMemGetInfo(&fr, &total) != cudaSuccess) return 0;
    size_t keep = total / 16 > ((size_t)2 << 30) ? total / 16 : (size_t)2 << 30;
    return fr > bytes && fr - bytes >= keep;
}

int cu_tiles_wanted(size_t bytes) {
    const char *e = getenv("DSPARK_CUDA_TILED");
    if (e && (!strcmp(e, "0") || !strcmp(e, "1"))) return e[0] == '1';
    if (e && *e) {
        static int said = 0; /* (said once: every set of weights asks) */
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "dspark: DSPARK_CUDA_TILED=%s: not 0 or 1; the copies made where memory allows\n", e);
    }
    return cu_room_for(bytes);
}

const char *cu_tiles_hint(void) {
    static char h[160];
    size_t b = __atomic_load_n(&g_tiled_bytes, __ATOMIC_RELAXED);
    if (!b) return "";
    snprintf(h, sizeof h, " (the weights' tile-major copies hold %.2f GiB; DSPARK_CUDA_TILED=0 leaves them out)",
             (double)b / (1 << 30));
    return h;
}

int cu_tile_once(int *done, dev_pool *pl, dmat *const *mats, int n, char *err, size_t errlen) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    if (__atomic_load_n(done, __ATOMIC_ACQUIRE)) return 0;
    pthread_mutex_lock(&mu);
    int rc = 0;
    if (!*done) {
        size_t bytes = 0;
        for (int i = 0; i < n; i++)
            if (mats[i] && !mats[i]->t) bytes += cu_tile_bytes(mats[i]); /* a repeat counted twice: a safe overestimate */
        /* a copy that cannot be made (memory taken meanwhile) ends the
           copying: each matmul reads whichever layout its matrix has */
        if (bytes && cu_tiles_wanted(bytes))
            for (int i = 0; i < n; i++)
                if (mats[i] && cu_tile_mat(pl, mats[i], err, errlen)) {
                    cudaError_t e = cudaGetLastError();
                    if (e != cudaSuccess && e != cudaErrorMemoryAllocation) rc = -1;
                    break;
                }
        /* the forwards' streams do not wait for the legacy stream the copies ran on */
        cudaError_t e = cudaDeviceSynchronize();
        if (!rc && e != cudaSuccess) rc = ds_err(err, errlen, "CUDA: tile-major weight copies: %s", cudaGetErrorString(e));
        if (!rc) __atomic_store_n(done, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

void cu_pool_free(dev_pool *pl) {
    for (int i = 0; i < pl->n; i++) cudaFree(pl->p[i]);
    free(pl->p);
    pl->p = NULL;
    pl->n = pl->cap = 0;
}

/* ---- launchers ----------------------------------------------------------- */

/* A chained decode step's inputs (cu_chain_set, cu_chain_next). Neither
   kernel lets the next one start early (no pdl_trigger): kernels later in
   a forward may read positions and the cache length before their own
   pdl_wait, so these writes must have landed before the next kernel
   starts. */
__global__ void k_chain_set(int *ids, int *pos, int *len, int id, int at) {
    pdl_wait();
    ids[0] = id;
    pos[0] = at;
    len[0] = at;
}
__global__ void k_chain_next(int *tok, int *pos, int *len, const int *ids) {
    pdl_wait();
    tok[0] = ids[0];
    pos[0] += 1;
    len[0] += 1;
}

void cu_chain_set(cu_go st, int *ids, int *pos, int *len, int id, int at) {
    launch(k_chain_set, 1, 1, st, ids, pos, len, id, at);
}
void cu_chain_next(cu_go st, int *tok, int *pos, int *len, const int *ids) {
    launch(k_chain_next, 1, 1, st, tok, pos, len, ids);
}

void cu_rmsnorm(cu_go st, float *y, const float *x, const float *w, int M, int D, float eps) {
    launch(k_rmsnorm, M, 256, st, y, x, w, D, eps);
}

void cu_embed(cu_go st, float *out, const dmat *E, const int *tok, int M) {
    int H = E->K;
    if (dtype_is_quant(E->dt)) return cu_qembed(st, out, E, tok, M);
    switch (E->dt) {
    case DT_BF16: launch(k_embed<__nv_bfloat16>, M, 256, st, out, (const __nv_bfloat16 *)E->p, tok, H); break;
    case DT_F16: launch(k_embed<__half>, M, 256, st, out, (const __half *)E->p, tok, H); break;
    default: launch(k_embed<float>, M, 256, st, out, (const float *)E->p, tok, H); break;
    }
}
