/* cuda_ops: the device kernels of the CUDA backend behind host launchers
 * (cuda_ops.cu), shared by the target's forward pass (cuda_backend.cu) and
 * the drafters'. Launchers only enqueue on the given stream; callers check
 * cudaGetLastError after a sequence. Activations are f32; matrices (dmat)
 * are in their file dtype (bf16, f16 or f32), row-major [N][K].
 *
 * Every kernel computes a row with the same instruction sequence whatever
 * the number of rows in the launch, so a row inside a batch is bit-identical
 * to the row alone (the lossless guarantee of speculative decoding on the
 * GPU rests on this; tests/cuda checks it). */
#ifndef DS_CUDA_OPS_CUH
#define DS_CUDA_OPS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

extern "C" {
#include "cuda_backend.h"
#include "model.h"
#include "util.h"
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return ds_err(err, errlen, "CUDA: %s: %s", #call, cudaGetErrorString(e_)); \
    } while (0)

#define CK_LAUNCH()                                                                                \
    do {                                                                                           \
        cudaError_t e_ = cudaGetLastError();                                                       \
        if (e_ != cudaSuccess) return ds_err(err, errlen, "CUDA kernel launch: %s", cudaGetErrorString(e_)); \
    } while (0)

#define ATT_MAX_HD 256 /* largest head_dim the attention kernels take */
#define ATT_MAX_G 8    /* query heads per kv head */
#define ATT_CHUNK 64   /* positions per split-attention partial */
#define ATT_ROWS 32    /* rows per attention launch (bounds the partials scratch) */

/* floats of split-attention scratch for a cache of cap positions:
   partial outputs, maxima and sums */
static inline size_t cu_attn_part_floats(int nh, int hd, int cap) {
    return (size_t)ATT_ROWS * nh * ((cap + ATT_CHUNK - 1) / ATT_CHUNK) * (hd + 2);
}

struct dmat {
    void *p;
    ds_dtype dt;
    int N, K;
};

__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
__device__ __forceinline__ float widen(float v) { return v; }

/* 0 when DSPARK_CUDA_GRAPHS=0: forwards are launched kernel by kernel
   instead of replayed from captured graphs */
int cu_graphs_enabled(void);

/* The device allocations of one set of weights, freed together. */
struct dev_pool {
    void **p;
    int n, cap;
};
int cu_dev_alloc(dev_pool *pl, void **p, size_t n, char *err, size_t errlen);
/* n host floats to the device; a NULL src leaves *dst NULL */
int cu_up_f32(dev_pool *pl, float **dst, const float *src, size_t n, char *err, size_t errlen);
/* a bf16 / f16 / f32 matrix tensor to the device, in its dtype */
int cu_up_mat(dev_pool *pl, dmat *d, const tensor *t, char *err, size_t errlen);
void cu_pool_free(dev_pool *pl);

/* the target's device embedding and LM head (the same dmat when tied), and
   its GPU index: drafters on the same GPU bind them */
const dmat *cu_model_embed(const cuda_model *m);
const dmat *cu_model_lm_head(const cuda_model *m);
int cu_model_gpu(const cuda_model *m);

/* y[M][N] = x[M][K] . W^T (+ bias) */
void cu_matmul(cudaStream_t st, float *y, const float *x, int M, const dmat *W, const float *bias);
/* y[M][N] += x . W^T (+ bias): the residual add fused */
void cu_matmul_add(cudaStream_t st, float *y, const float *x, int M, const dmat *W, const float *bias);
/* y[M][N] = silu(x . Wg^T) * (x . Wu^T), each product exactly as cu_matmul's */
void cu_matmul_swiglu(cudaStream_t st, float *y, const float *x, int M, const dmat *Wg, const dmat *Wu);
/* 1 when W takes the tensor-core kernel, which can fold an RMSNorm of its
   input in (cu_matmul_norm, cu_matmul_swiglu_norm) */
int cu_fuses_norm(const dmat *W);
/* y = RMSNorm(x, gn, eps) . W^T (+ bias), without a separate norm pass */
void cu_matmul_norm(cudaStream_t st, float *y, const float *x, int M, const dmat *W, const float *bias,
                    const float *gn, float eps);
/* y = silu(RMSNorm(x) . Wg^T) * (RMSNorm(x) . Wu^T) */
void cu_matmul_swiglu_norm(cudaStream_t st, float *y, const float *x, int M, const dmat *Wg, const dmat *Wu,
                           const float *gn, float eps);
/* y = RMSNorm(x, w) per row of D */
void cu_rmsnorm(cudaStream_t st, float *y, const float *x, const float *w, int M, int D, float eps);
/* out[M][H] = E[tok[m]] widened */
void cu_embed(cudaStream_t st, float *out, const dmat *E, const int *tok, int M);
/* q[M][nh][hd], k/v[M][nkv][hd] of the rows at positions pos[]: q/k get
   their per-head RMSNorm (qn/kn, when not NULL) and NeoX RoPE; k (roped)
   and v are stored in the caches [nkv][cap][hd] at position *d_len + row. */
void cu_qkv_post(cudaStream_t st, float *q, const float *k, const float *v, float *kc, float *vc, const float *qn,
                 const float *kn, const int *pos, const float *inv_freq, int M, int nh, int nkv, int hd, int cap,
                 const int *d_len, float eps);
/* the same from one fused projection qkv[M][nh*hd + 2*nkv*hd] (q, k, v
   side by side per row), the roped q written to q[M][nh*hd] */
void cu_qkv_post_fused(cudaStream_t st, float *q, const float *qkv, float *kc, float *vc, const float *qn,
                       const float *kn, const int *pos, const float *inv_freq, int M, int nh, int nkv, int hd, int cap,
                       const int *d_len, float eps);
/* Attention of M query rows q[M][nh*hd] over caches [nkv][cap][hd] into
   out[M][nh*hd]. causal: row m sees positions 0 .. *d_len + m; else every
   row sees 0 .. *d_len + M - 1 (a drafter's block). part: scratch of
   cu_attn_part_floats(nh, hd, cap). */
void cu_attention(cudaStream_t st, float *out, const float *q, const float *kc, const float *vc, float *part, int M,
                  int nh, int nkv, int hd, int cap, const int *d_len, float scale, int causal);
/* out[m] = the first index of the largest of x[m][0..n) (op_argmax's rule) */
void cu_argmax(cudaStream_t st, int *out, const float *x, int M, int n);

#endif
