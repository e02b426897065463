// cuda_backend: see cuda_backend.h. Kernels and the device forward pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- kernels ------------------------------------------------------------ */

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* 8 consecutive weights widened to f32 */
__device__ __forceinline__ void load8(const __nv_bfloat16 *p, float *w) {
    uint4 u = *reinterpret_cast<const uint4 *>(p);
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
    for (int i = 0; i < 4; i++) {
        float2 f = __bfloat1622float2(h[i]);
        w[2 * i] = f.x;
        w[2 * i + 1] = f.y;
    }
}
__device__ __forceinline__ void load8(const __half *p, float *w) {
    uint4 u = *reinterpret_cast<const uint4 *>(p);
    const __half2 *h = reinterpret_cast<const __half2 *>(&u);
    for (int i = 0; i < 4; i++) {
        float2 f = __half22float2(h[i]);
        w[2 * i] = f.x;
        w[2 * i + 1] = f.y;
    }
}
__device__ __forceinline__ void load8(const float *p, float *w) {
    float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
    w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
    w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
}
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
__device__ __forceinline__ float widen(float v) { return v; }

#define ATT_MAX_HD 256 /* largest head_dim the attention kernels take */
#define MM_NPW 4   /* outputs per block: each x load serves MM_NPW weight rows */
#define MM_WARPS 4 /* warps per block, splitting K */

template <int ROWS>
__device__ __forceinline__ void mm_group(float (&acc)[MM_NPW][ROWS], const float (&w)[MM_NPW][8],
                                         const float *__restrict__ x, int K, int m0, int rows, int g) {
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        if (r < rows) {
            const float *xr = x + (size_t)(m0 + r) * K + (size_t)g * 8;
            float4 a = *reinterpret_cast<const float4 *>(xr), b = *reinterpret_cast<const float4 *>(xr + 4);
#pragma unroll
            for (int j = 0; j < MM_NPW; j++) {
                float s = acc[j][r];
                s = fmaf(a.x, w[j][0], s); s = fmaf(a.y, w[j][1], s); s = fmaf(a.z, w[j][2], s);
                s = fmaf(a.w, w[j][3], s); s = fmaf(b.x, w[j][4], s); s = fmaf(b.y, w[j][5], s);
                s = fmaf(b.z, w[j][6], s); s = fmaf(b.w, w[j][7], s);
                acc[j][r] = s;
            }
        }
    }
}

/* y[m][n] = sum_k x[m][k] W[n][k] (+ b[n]). A block computes MM_NPW
   outputs for up to ROWS rows; its MM_WARPS warps split K: lane l of warp
   w takes the 8-element groups w*32 + l, then + 128, + 256, ... (and the
   tail elements past the last full group the same way), accumulating them
   in that order; each warp sums its lanes with a fixed butterfly and the
   warps' partials are added in warp order. The sequence of operations for
   one row never depends on the other rows, on ROWS or on the grid, so any
   batch width and any grouping of rows gives the same bits: the lossless
   guarantee of speculative decoding rests on this. Two groups are loaded
   before either is used, so each lane keeps 2 x MM_NPW 16-byte weight loads
   in flight. */
/* EPI: MM_STORE y = x.W^T (+b); MM_ADD y += x.W^T (+b) (the residual add
   fused); MM_SWIGLU: W holds the gate rows and W2 the up rows, a block
   computes gate and up for MM_NPW/2 outputs (each exactly as the plain
   kernel would) and writes silu(gate) * up. */
enum { MM_STORE, MM_ADD, MM_SWIGLU };

template <typename T, int ROWS, int EPI>
__global__ void __launch_bounds__(32 * MM_WARPS) k_matmul(float *__restrict__ y, const float *__restrict__ x,
                                                          const T *__restrict__ W, const T *__restrict__ W2,
                                                          const float *__restrict__ bias, int M, int N, int K,
                                                          int vec) {
    __shared__ float part[MM_WARPS][MM_NPW][ROWS];
    const int NB = EPI == MM_SWIGLU ? MM_NPW / 2 : MM_NPW; /* outputs per block */
    int n0 = blockIdx.x * NB;
    int m0 = blockIdx.y * ROWS;
    int lane = threadIdx.x, warp = threadIdx.y;
    int rows = M - m0 < ROWS ? M - m0 : ROWS;
    float acc[MM_NPW][ROWS];
#pragma unroll
    for (int j = 0; j < MM_NPW; j++)
#pragma unroll
        for (int r = 0; r < ROWS; r++) acc[j][r] = 0.0f;
    const T *wr[MM_NPW];
#pragma unroll
    for (int j = 0; j < MM_NPW; j++) {
        int jj = EPI == MM_SWIGLU ? j % NB : j;
        const T *base = EPI == MM_SWIGLU && j >= NB ? W2 : W;
        wr[j] = base + (size_t)(n0 + jj < N ? n0 + jj : n0) * K;
    }
    int K8 = vec ? K / 8 : 0;
    const int S = 32 * MM_WARPS;
    int g = warp * 32 + lane;
    for (; g + S < K8; g += 2 * S) {
        float w0[MM_NPW][8], w1[MM_NPW][8];
#pragma unroll
        for (int j = 0; j < MM_NPW; j++) {
            load8(wr[j] + (size_t)g * 8, w0[j]);
            load8(wr[j] + (size_t)(g + S) * 8, w1[j]);
        }
        mm_group<ROWS>(acc, w0, x, K, m0, rows, g);
        mm_group<ROWS>(acc, w1, x, K, m0, rows, g + S);
    }
    if (g < K8) {
        float w0[MM_NPW][8];
#pragma unroll
        for (int j = 0; j < MM_NPW; j++) load8(wr[j] + (size_t)g * 8, w0[j]);
        mm_group<ROWS>(acc, w0, x, K, m0, rows, g);
    }
    for (int k = K8 * 8 + warp * 32 + lane; k < K; k += S) {
#pragma unroll
        for (int j = 0; j < MM_NPW; j++) {
            float w = widen(wr[j][k]);
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                if (r < rows) acc[j][r] = fmaf(x[(size_t)(m0 + r) * K + k], w, acc[j][r]);
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        if (r < rows) {
#pragma unroll
            for (int j = 0; j < MM_NPW; j++) {
                float sum = warp_sum(acc[j][r]);
                if (lane == 0) part[warp][j][r] = sum;
            }
        }
    }
    __syncthreads();
    int t = warp * 32 + lane;
    if (t < NB * rows) {
        int j = t % NB, r = t / NB;
        float sum = part[0][j][r];
#pragma unroll
        for (int w = 1; w < MM_WARPS; w++) sum += part[w][j][r];
        if (n0 + j < N) {
            float *dst = y + (size_t)(m0 + r) * N + n0 + j;
            if (EPI == MM_SWIGLU) {
                float u = part[0][j + NB][r];
#pragma unroll
                for (int w = 1; w < MM_WARPS; w++) u += part[w][j + NB][r];
                *dst = sum / (1.0f + expf(-sum)) * u;
            } else {
                float v = bias ? sum + bias[n0 + j] : sum;
                if (EPI == MM_ADD) *dst += v;
                else *dst = v;
            }
        }
    }
}

/* one block (256 threads) per row; fixed strided partial sums, then a fixed tree */
__global__ void k_rmsnorm(float *y, const float *x, const float *w, int D, float eps) {
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

/* One block of head_dim/2 threads per (row, head) over the q heads, then
   the k heads, then the v heads: q/k get their per-head RMSNorm (when
   qn/kn are given) and NeoX RoPE at the row's position; k and v are
   written into the cache at position *d_len + row. Thread i owns the pair
   (i, i + head_dim/2). */
__global__ void k_qkv_post(float *q, const float *k, const float *v, float *kc, float *vc, const float *qn,
                           const float *kn, const int *pos, const float *inv_freq, int nh, int nkv, int hd, int cap,
                           const int *d_len, float eps) {
    __shared__ float red[ATT_MAX_HD / 2];
    int m = blockIdx.x, t = blockIdx.y, half = hd / 2, i = threadIdx.x;
    int is_q = t < nh, is_k = !is_q && t < nh + nkv, h = is_q ? t : is_k ? t - nh : t - nh - nkv;
    size_t slot = ((size_t)h * cap + (size_t)(*d_len + m)) * hd;
    if (!is_q && !is_k) {
        const float *vr = v + ((size_t)m * nkv + h) * hd;
        vc[slot + i] = vr[i];
        vc[slot + i + half] = vr[i + half];
        return;
    }
    const float *src = is_q ? q + ((size_t)m * nh + h) * hd : k + ((size_t)m * nkv + h) * hd;
    float a = src[i], b = src[i + half];
    const float *w = is_q ? qn : kn;
    if (w) {
        red[i] = fmaf(a, a, b * b);
        __syncthreads();
        int p2 = 1;
        while (p2 < half) p2 <<= 1;
        for (int o = p2 / 2; o > 0; o >>= 1) { /* fixed tree, any half */
            if (i < o && i + o < half) red[i] += red[i + o];
            __syncthreads();
        }
        float r = 1.0f / sqrtf(red[0] / (float)hd + eps);
        a = w[i] * (a * r);
        b = w[i + half] * (b * r);
    }
    float ang = (float)pos[m] * inv_freq[i];
    float c = cosf(ang), sn = sinf(ang);
    float ra = a * c - b * sn, rb = b * c + a * sn;
    if (is_q) {
        float *dst = q + ((size_t)m * nh + h) * hd;
        dst[i] = ra;
        dst[i + half] = rb;
    } else {
        kc[slot + i] = ra;
        kc[slot + i + half] = rb;
    }
}

template <typename T>
__global__ void k_embed(float *out, const T *e, const int *tok, int H) {
    int m = blockIdx.x;
    const T *row = e + (size_t)tok[m] * H;
    for (int i = threadIdx.x; i < H; i += blockDim.x) out[(size_t)m * H + i] = widen(row[i]);
}

#define ATT_THREADS 128
#define ATT_WARPS (ATT_THREADS / 32)
#define ATT_ROWS 32 /* rows per attention launch (bounds the partials scratch) */

/* Split attention (flash-decoding), used by the forward pass. Positions are
   cut into chunks of ATT_CHUNK by absolute position; a block handles one
   (row, kv head, chunk) for all the query heads sharing that kv head (GQA:
   each K/V row is read once for the group), and writes per query head the
   chunk's max score, sum of exponentials and unnormalised output. A second
   kernel combines a row's chunks in chunk order. The chunking depends only
   on the row's own number of visible positions, so a row gives the same
   bits in any batch. The grid covers every chunk the cache could hold
   (blocks past the row's last position exit at once), so a captured graph
   replays at any cache length. */
#define ATT_CHUNK 128
#define ATT_MAX_G 8 /* query heads per kv head */

template <int G>
__global__ void __launch_bounds__(ATT_THREADS) k_attn_part(const float *q, const float *kc, const float *vc, float *opart,
                                                           float *mpart, float *spart, int nh, int nkv, int hd, int cap,
                                                           const int *d_len, int M, float scale, int nchunk, int m0) {
    __shared__ float sc[G][ATT_CHUNK];
    __shared__ float4 part[ATT_WARPS][G][ATT_MAX_HD / 4];
    int c = blockIdx.x % nchunk, kvh = (blockIdx.x / nchunk) % nkv, m = m0 + (int)blockIdx.x / (nchunk * nkv);
    int L = *d_len + m + 1;
    int p0 = c * ATT_CHUNK;
    if (p0 >= L) return;
    int np = L - p0 < ATT_CHUNK ? L - p0 : ATT_CHUNK;
    const float *kb = kc + ((size_t)kvh * cap + p0) * hd, *vb = vc + ((size_t)kvh * cap + p0) * hd;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, h4 = hd / 4;
    const float4 z4 = make_float4(0, 0, 0, 0);
    float4 qa[G], qb[G];
#pragma unroll
    for (int g = 0; g < G; g++) {
        const float4 *qr = reinterpret_cast<const float4 *>(q + ((size_t)m * nh + kvh * G + g) * hd);
        qa[g] = lane < h4 ? qr[lane] : z4;
        qb[g] = lane + 32 < h4 ? qr[lane + 32] : z4;
    }
    /* scores: warp w takes positions w, w+4, ...; lanes split head_dim */
#pragma unroll 2
    for (int p = warp; p < np; p += ATT_WARPS) {
        const float4 *kr = reinterpret_cast<const float4 *>(kb + (size_t)p * hd);
        float4 ka = lane < h4 ? kr[lane] : z4, kb4 = lane + 32 < h4 ? kr[lane + 32] : z4;
#pragma unroll
        for (int g = 0; g < G; g++) {
            float s = 0.0f;
            s = fmaf(qa[g].x, ka.x, s); s = fmaf(qa[g].y, ka.y, s); s = fmaf(qa[g].z, ka.z, s); s = fmaf(qa[g].w, ka.w, s);
            s = fmaf(qb[g].x, kb4.x, s); s = fmaf(qb[g].y, kb4.y, s); s = fmaf(qb[g].z, kb4.z, s); s = fmaf(qb[g].w, kb4.w, s);
            s = warp_sum(s);
            if (lane == 0) sc[g][p] = s * scale;
        }
    }
    __syncthreads();
    /* per head: max and sum of exponentials, one warp per head */
    for (int g = warp; g < G; g += ATT_WARPS) {
        float mx = -INFINITY;
        for (int p = lane; p < np; p += 32) mx = fmaxf(mx, sc[g][p]);
        mx = warp_max(mx);
        float sum = 0.0f;
        for (int p = lane; p < np; p += 32) {
            float e = expf(sc[g][p] - mx);
            sc[g][p] = e;
            sum += e;
        }
        sum = warp_sum(sum);
        if (lane == 0) {
            size_t slot = ((size_t)(m - m0) * nh + kvh * G + g) * nchunk + c;
            mpart[slot] = mx;
            spart[slot] = sum;
        }
    }
    __syncthreads();
    /* unnormalised outputs: warp w sums its positions for every head, each V row read once */
    float4 oa[G], ob[G];
#pragma unroll
    for (int g = 0; g < G; g++) oa[g] = ob[g] = z4;
#pragma unroll 2
    for (int p = warp; p < np; p += ATT_WARPS) {
        const float4 *vr = reinterpret_cast<const float4 *>(vb + (size_t)p * hd);
        float4 va = lane < h4 ? vr[lane] : z4, v2 = lane + 32 < h4 ? vr[lane + 32] : z4;
#pragma unroll
        for (int g = 0; g < G; g++) {
            float e = sc[g][p];
            oa[g].x = fmaf(e, va.x, oa[g].x); oa[g].y = fmaf(e, va.y, oa[g].y);
            oa[g].z = fmaf(e, va.z, oa[g].z); oa[g].w = fmaf(e, va.w, oa[g].w);
            ob[g].x = fmaf(e, v2.x, ob[g].x); ob[g].y = fmaf(e, v2.y, ob[g].y);
            ob[g].z = fmaf(e, v2.z, ob[g].z); ob[g].w = fmaf(e, v2.w, ob[g].w);
        }
    }
#pragma unroll
    for (int g = 0; g < G; g++) {
        if (lane < h4) part[warp][g][lane] = oa[g];
        if (lane + 32 < h4) part[warp][g][lane + 32] = ob[g];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < G * h4; i += ATT_THREADS) {
        int g = i / h4, j = i % h4;
        float4 a4 = part[0][g][j];
        for (int w = 1; w < ATT_WARPS; w++) {
            float4 b4 = part[w][g][j];
            a4.x += b4.x; a4.y += b4.y; a4.z += b4.z; a4.w += b4.w;
        }
        reinterpret_cast<float4 *>(opart + (((size_t)(m - m0) * nh + kvh * G + g) * nchunk + c) * hd)[j] = a4;
    }
}

/* grid (rows x heads); thread d combines the row's chunks in order */
__global__ void k_attn_combine(float *out, const float *opart, const float *mpart, const float *spart, int nh, int hd,
                               const int *d_len, int nchunk, int m0) {
    int m = m0 + (int)blockIdx.x / nh, h = blockIdx.x % nh;
    int L = *d_len + m + 1, nc = (L + ATT_CHUNK - 1) / ATT_CHUNK;
    size_t base = ((size_t)(m - m0) * nh + h) * nchunk;
    float mx = -INFINITY;
    for (int c = 0; c < nc; c++) mx = fmaxf(mx, mpart[base + c]);
    float s = 0.0f;
    for (int c = 0; c < nc; c++) s += expf(mpart[base + c] - mx) * spart[base + c];
    float inv = 1.0f / s;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
#pragma unroll 4
        for (int c = 0; c < nc; c++) acc = fmaf(expf(mpart[base + c] - mx), opart[(base + c) * hd + d], acc);
        out[((size_t)m * nh + h) * hd + d] = acc * inv;
    }
}

/* causal attention of M rows over the cache (length *d_len before them) */
static void attention(cudaStream_t st, float *out, const float *q, const float *kc, const float *vc, float *opart,
                      float *mpart, float *spart, int M, int nh, int nkv, int hd, int cap, const int *d_len,
                      float scale) {
    int G = nh / nkv, nchunk = (cap + ATT_CHUNK - 1) / ATT_CHUNK;
    for (int m0 = 0; m0 < M; m0 += ATT_ROWS) {
        int R = M - m0 < ATT_ROWS ? M - m0 : ATT_ROWS;
        dim3 grd(R * nkv * nchunk);
#define PART(g) k_attn_part<g><<<grd, ATT_THREADS, 0, st>>>(q, kc, vc, opart, mpart, spart, nh, nkv, hd, cap, d_len, M, \
                                                             scale, nchunk, m0)
        switch (G) {
        case 1: PART(1); break;
        case 2: PART(2); break;
        case 3: PART(3); break;
        case 4: PART(4); break;
        case 5: PART(5); break;
        case 6: PART(6); break;
        case 7: PART(7); break;
        default: PART(8); break;
        }
#undef PART
        k_attn_combine<<<R * nh, 128, 0, st>>>(out, opart, mpart, spart, nh, hd, d_len, nchunk, m0);
    }
}

/* ---- host side ---------------------------------------------------------- */

#define GRAPH_ROWS 17 /* widest batch replayed from a graph: a verify of 16 drafts + the anchor */

struct dmat {
    void *p;
    ds_dtype dt;
    int N, K;
};

struct dlayer {
    dmat wq, wk, wv, wo, wg, wu, wd;
    float *attn_norm, *mlp_norm, *q_norm, *k_norm, *bq, *bk, *bv, *bo;
};

struct cuda_model {
    model_config cfg;
    int gpu;
    dmat embed, lm_head;
    float *final_norm, *inv_freq;
    dlayer *layers;
    void **allocs;
    int n_allocs, cap_allocs;
};

struct cuda_ctx {
    cuda_model *m;
    int cap, len, max_batch;
    float *kv;                       /* [layer][2][nkv][cap][hd] */
    float *x, *xb, *q, *att, *k, *v, *gate, *up, *logits;
    float *opart, *mpart, *spart; /* split attention partials */
    int *tok, *pos, *d_len;          /* device: ids, positions, cache length before the batch */
    int *h_in;                       /* pinned: [B] ids, [B] positions, [1] length */
    float *h_pinned;                 /* pinned host staging for logits */
    size_t pinned_floats;
    cudaStream_t st;
    /* CUDA graphs of whole forwards, by (rows, logits rows), for batches
       of up to GRAPH_ROWS rows without taps */
    cudaGraphExec_t graphs[GRAPH_ROWS + 1][GRAPH_ROWS + 1];
    int use_graphs;
};

static int dev_alloc(cuda_model *m, void **p, size_t n, char *err, size_t errlen) {
    CK(cudaMalloc(p, n ? n : 1));
    if (m->n_allocs == m->cap_allocs) {
        m->cap_allocs = m->cap_allocs ? m->cap_allocs * 2 : 64;
        m->allocs = (void **)xrealloc(m->allocs, sizeof(void *) * (size_t)m->cap_allocs);
    }
    m->allocs[m->n_allocs++] = *p;
    return 0;
}

static int up_f32(cuda_model *m, float **dst, const float *src, size_t n, char *err, size_t errlen) {
    *dst = NULL;
    if (!src) return 0;
    if (dev_alloc(m, (void **)dst, sizeof(float) * n, err, errlen)) return -1;
    CK(cudaMemcpy(*dst, src, sizeof(float) * n, cudaMemcpyHostToDevice));
    return 0;
}

static int up_mat(cuda_model *m, dmat *d, const tensor *t, char *err, size_t errlen) {
    if (t->dtype != DT_BF16 && t->dtype != DT_F16 && t->dtype != DT_F32)
        return ds_err(err, errlen, "CUDA backend: %s has dtype %s (bf16, f16 or f32 needed)", t->name,
                      dtype_name(t->dtype));
    d->dt = t->dtype;
    d->N = (int)t->shape[0];
    d->K = t->ndim > 1 ? (int)t->shape[1] : 1;
    if (dev_alloc(m, &d->p, t->nbytes, err, errlen)) return -1;
    CK(cudaMemcpy(d->p, t->data, t->nbytes, cudaMemcpyHostToDevice));
    return 0;
}


extern "C" int cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

extern "C" int cuda_describe(int gpu, char *out, size_t n) {
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, gpu);
    if (e != cudaSuccess) {
        snprintf(out, n, "cannot query CUDA device %d: %s", gpu, cudaGetErrorString(e));
        return -1;
    }
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    snprintf(out, n, "%s, %.1f GiB, compute %d.%d, %d SMs, driver %d.%d, runtime %d.%d", p.name,
             (double)p.totalGlobalMem / (1 << 30), p.major, p.minor, p.multiProcessorCount, drv / 1000,
             (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
    return 0;
}

extern "C" int cuda_model_create(cuda_model **out, const cuda_weights *w, int gpu, char *err, size_t errlen) {
    *out = NULL;
    int ndev = cuda_device_count();
    if (ndev <= 0) return ds_err(err, errlen, "no CUDA device is visible");
    if (gpu < 0 || gpu >= ndev) return ds_err(err, errlen, "CUDA device %d does not exist (%d visible)", gpu, ndev);
    CK(cudaSetDevice(gpu));
    if (w->cfg->n_heads % w->cfg->n_kv_heads || w->cfg->n_heads / w->cfg->n_kv_heads > ATT_MAX_G)
        return ds_err(err, errlen, "CUDA backend: %d query heads per kv head is not supported (at most %d)",
                      w->cfg->n_heads / w->cfg->n_kv_heads, ATT_MAX_G);
    if (w->cfg->head_dim % 4 || w->cfg->head_dim > ATT_MAX_HD)
        return ds_err(err, errlen, "CUDA backend: head_dim %d is not supported (a multiple of 4, at most %d)",
                      w->cfg->head_dim, ATT_MAX_HD);
    cuda_model *m = (cuda_model *)xcalloc(1, sizeof *m);
    m->cfg = *w->cfg;
    m->gpu = gpu;
    const model_config *c = &m->cfg;
    int H = c->hidden_size, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    int rc = up_mat(m, &m->embed, w->embed, err, errlen);
    if (!rc) {
        if (w->lm_head == w->embed) m->lm_head = m->embed;
        else rc = up_mat(m, &m->lm_head, w->lm_head, err, errlen);
    }
    if (!rc) rc = up_f32(m, &m->final_norm, w->final_norm, (size_t)H, err, errlen);
    if (!rc) rc = up_f32(m, &m->inv_freq, w->inv_freq, (size_t)hd / 2, err, errlen);
    m->layers = (dlayer *)xcalloc((size_t)c->n_layers, sizeof(dlayer));
    for (int l = 0; !rc && l < c->n_layers; l++) {
        const wlayer *L = &w->layers[l];
        dlayer *D = &m->layers[l];
        rc = up_mat(m, &D->wq, L->wq, err, errlen) || up_mat(m, &D->wk, L->wk, err, errlen) ||
             up_mat(m, &D->wv, L->wv, err, errlen) || up_mat(m, &D->wo, L->wo, err, errlen) ||
             up_mat(m, &D->wg, L->wg, err, errlen) || up_mat(m, &D->wu, L->wu, err, errlen) ||
             up_mat(m, &D->wd, L->wd, err, errlen) ||
             up_f32(m, &D->attn_norm, L->attn_norm, (size_t)H, err, errlen) ||
             up_f32(m, &D->mlp_norm, L->mlp_norm, (size_t)H, err, errlen) ||
             up_f32(m, &D->q_norm, L->q_norm, (size_t)hd, err, errlen) ||
             up_f32(m, &D->k_norm, L->k_norm, (size_t)hd, err, errlen) ||
             up_f32(m, &D->bq, L->bq, (size_t)nh * hd, err, errlen) ||
             up_f32(m, &D->bk, L->bk, (size_t)nkv * hd, err, errlen) ||
             up_f32(m, &D->bv, L->bv, (size_t)nkv * hd, err, errlen) ||
             up_f32(m, &D->bo, L->bo, (size_t)H, err, errlen);
        rc = rc ? -1 : 0;
        if (!rc && (D->wg.dt != D->wu.dt || D->wg.N != D->wu.N))
            rc = ds_err(err, errlen, "CUDA backend: layer %d: gate and up projections differ in dtype or shape", l);
    }
    if (rc) {
        cuda_model_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

extern "C" void cuda_model_free(cuda_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_allocs; i++) cudaFree(m->allocs[i]);
    free(m->allocs);
    free(m->layers);
    free(m);
}

static int ensure_pinned(cuda_ctx *x, size_t floats, char *err, size_t errlen);

extern "C" int cuda_ctx_create(cuda_ctx **out, cuda_model *m, int n_ctx, int max_batch, char *err, size_t errlen) {
    *out = NULL;
    CK(cudaSetDevice(m->gpu));
    const model_config *c = &m->cfg;
    size_t B = (size_t)max_batch, H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t QD = (size_t)c->n_heads * c->head_dim, KD = (size_t)c->n_kv_heads * c->head_dim;
    cuda_ctx *x = (cuda_ctx *)xcalloc(1, sizeof *x);
    x->m = m;
    x->cap = n_ctx;
    x->max_batch = max_batch;
    size_t kvf = (size_t)c->n_layers * 2 * KD * (size_t)n_ctx;
    cudaError_t e = cudaMalloc((void **)&x->kv, sizeof(float) * kvf);
    if (e != cudaSuccess) {
        free(x);
        return ds_err(err, errlen, "CUDA: cannot allocate the %.2f GiB KV cache for %d positions: %s",
                      (double)sizeof(float) * kvf / (1 << 30), n_ctx, cudaGetErrorString(e));
    }
    size_t nchunk = (size_t)(n_ctx + ATT_CHUNK - 1) / ATT_CHUNK;
    size_t parts = (size_t)ATT_ROWS * (size_t)c->n_heads * nchunk;
    float **bufs[] = {&x->x, &x->xb, &x->q, &x->att, &x->k, &x->v, &x->gate, &x->up, &x->logits,
                      &x->opart, &x->mpart, &x->spart};
    size_t sizes[] = {B * H, B * H, B * QD, B * QD, B * KD, B * KD, B * I, B * I, B * (size_t)c->vocab_size,
                      parts * (size_t)c->head_dim, parts, parts};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        e = cudaMalloc((void **)bufs[i], sizeof(float) * sizes[i]);
        if (e != cudaSuccess) {
            cuda_ctx_free(x);
            return ds_err(err, errlen, "CUDA: cannot allocate scratch: %s", cudaGetErrorString(e));
        }
    }
    if (cudaMalloc((void **)&x->tok, sizeof(int) * B) != cudaSuccess ||
        cudaMalloc((void **)&x->pos, sizeof(int) * B) != cudaSuccess ||
        cudaMalloc((void **)&x->d_len, sizeof(int)) != cudaSuccess ||
        cudaMallocHost((void **)&x->h_in, sizeof(int) * (2 * B + 1)) != cudaSuccess ||
        cudaStreamCreateWithFlags(&x->st, cudaStreamNonBlocking) != cudaSuccess) {
        cuda_ctx_free(x);
        return ds_err(err, errlen, "CUDA: cannot allocate scratch");
    }
    size_t lf = (size_t)(GRAPH_ROWS > max_batch ? GRAPH_ROWS : max_batch) * (size_t)c->vocab_size;
    if (ensure_pinned(x, lf, err, errlen) != 0) {
        cuda_ctx_free(x);
        return -1;
    }
    const char *g = getenv("DSPARK_CUDA_GRAPHS");
    x->use_graphs = !(g && !strcmp(g, "0"));
    *out = x;
    return 0;
}

extern "C" void cuda_ctx_free(cuda_ctx *x) {
    if (!x) return;
    cudaFree(x->kv);
    float *bufs[] = {x->x, x->xb, x->q, x->att, x->k, x->v, x->gate, x->up, x->logits,
                     x->opart, x->mpart, x->spart};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
    cudaFree(x->tok);
    cudaFree(x->pos);
    cudaFree(x->d_len);
    for (int i = 0; i <= GRAPH_ROWS; i++)
        for (int j = 0; j <= GRAPH_ROWS; j++)
            if (x->graphs[i][j]) cudaGraphExecDestroy(x->graphs[i][j]);
    if (x->st) cudaStreamDestroy(x->st);
    if (x->h_pinned) cudaFreeHost(x->h_pinned);
    if (x->h_in) cudaFreeHost(x->h_in);
    free(x);
}

extern "C" int cuda_ctx_len(const cuda_ctx *x) { return x->len; }
extern "C" int cuda_ctx_capacity(const cuda_ctx *x) { return x->cap; }
extern "C" void cuda_ctx_truncate(cuda_ctx *x, int len) {
    if (len < x->len) x->len = len < 0 ? 0 : len;
}

/* launches (no error checks inside: the caller checks after a sequence) */

template <int ROWS, int EPI>
static void matmul_rows(cudaStream_t st, float *y, const float *x, int M, const dmat *W, const dmat *W2,
                        const float *bias) {
    int nb = EPI == MM_SWIGLU ? MM_NPW / 2 : MM_NPW;
    dim3 blk(32, MM_WARPS), grd((W->N + nb - 1) / nb, (M + ROWS - 1) / ROWS);
    int vec = W->K % 8 == 0;
    const void *p2 = W2 ? W2->p : NULL;
    switch (W->dt) {
    case DT_BF16:
        k_matmul<__nv_bfloat16, ROWS, EPI><<<grd, blk, 0, st>>>(y, x, (const __nv_bfloat16 *)W->p,
                                                                (const __nv_bfloat16 *)p2, bias, M, W->N, W->K, vec);
        break;
    case DT_F16:
        k_matmul<__half, ROWS, EPI><<<grd, blk, 0, st>>>(y, x, (const __half *)W->p, (const __half *)p2, bias, M, W->N,
                                                         W->K, vec);
        break;
    default:
        k_matmul<float, ROWS, EPI><<<grd, blk, 0, st>>>(y, x, (const float *)W->p, (const float *)p2, bias, M, W->N,
                                                        W->K, vec);
        break;
    }
}

/* up to 8 rows: the 8-row kernel; more: 16 rows per pass over the weights
   (a verify of up to 15 drafts reads each weight once). Both compute every
   row with the same operations. */
template <int EPI>
static void matmul_epi(cudaStream_t st, float *y, const float *x, int M, const dmat *W, const dmat *W2,
                       const float *bias) {
    if (M <= 8) matmul_rows<8, EPI>(st, y, x, M, W, W2, bias);
    else matmul_rows<16, EPI>(st, y, x, M, W, W2, bias);
}

static void matmul(cudaStream_t st, float *y, const float *x, int M, const dmat *W, const float *bias) {
    matmul_epi<MM_STORE>(st, y, x, M, W, NULL, bias);
}

static void rmsnorm(cudaStream_t st, float *y, const float *x, const float *w, int M, int D, float eps) {
    k_rmsnorm<<<M, 256, 0, st>>>(y, x, w, D, eps);
}

static void embed(cudaStream_t st, float *out, const dmat *E, const int *tok, int M) {
    int H = E->K;
    switch (E->dt) {
    case DT_BF16: k_embed<__nv_bfloat16><<<M, 256, 0, st>>>(out, (const __nv_bfloat16 *)E->p, tok, H); break;
    case DT_F16: k_embed<__half><<<M, 256, 0, st>>>(out, (const __half *)E->p, tok, H); break;
    default: k_embed<float><<<M, 256, 0, st>>>(out, (const float *)E->p, tok, H); break;
    }
}

static int ensure_pinned(cuda_ctx *x, size_t floats, char *err, size_t errlen) {
    if (x->pinned_floats >= floats) return 0;
    if (x->h_pinned) cudaFreeHost(x->h_pinned);
    x->h_pinned = NULL;
    x->pinned_floats = 0;
    CK(cudaMallocHost((void **)&x->h_pinned, sizeof(float) * floats));
    x->pinned_floats = floats;
    return 0;
}

/* Taps go straight into the caller's (pageable) buffer; the chunk's stream
   synchronisation completes them. */
static void copy_taps(cuda_ctx *x, const model_batch *b, int layer, int row0, int M) {
    int H = x->m->cfg.hidden_size;
    for (int t = 0; t < b->n_taps; t++) {
        if (b->tap_layers[t] != layer) continue;
        float *dst = b->taps + ((size_t)t * (size_t)b->n + (size_t)row0) * (size_t)H;
        cudaMemcpyAsync(dst, x->x, sizeof(float) * (size_t)M * H, cudaMemcpyDeviceToHost, x->st);
    }
}

/* Enqueues one chunk of M rows whose ids, positions and cache length are in
   h_in (pinned): the uploads, every layer, and, when n_sel > 0, the final
   norm and LM head for the chunk's last n_sel rows with the logits copied
   to h_pinned. taps (NULL inside graphs) copies tapped layers to the host. */
static void enqueue_chunk(cuda_ctx *x, int M, int n_sel, const model_batch *b, int row0) {
    cuda_model *m = x->m;
    const model_config *c = &m->cfg;
    const int H = c->hidden_size, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    const float eps = c->rms_norm_eps, scale = 1.0f / sqrtf((float)hd);
    cudaStream_t st = x->st;
    int B = x->max_batch;
    cudaMemcpyAsync(x->tok, x->h_in, sizeof(int) * M, cudaMemcpyHostToDevice, st);
    cudaMemcpyAsync(x->pos, x->h_in + B, sizeof(int) * M, cudaMemcpyHostToDevice, st);
    cudaMemcpyAsync(x->d_len, x->h_in + 2 * B, sizeof(int), cudaMemcpyHostToDevice, st);
    embed(st, x->x, &m->embed, x->tok, M);
    if (b) copy_taps(x, b, -1, row0, M);
    size_t KD = (size_t)nkv * hd;
    for (int l = 0; l < c->n_layers; l++) {
        const dlayer *L = &m->layers[l];
        float *kc = x->kv + (size_t)l * 2 * KD * x->cap, *vc = kc + KD * x->cap;
        rmsnorm(st, x->xb, x->x, L->attn_norm, M, H, eps);
        matmul(st, x->q, x->xb, M, &L->wq, L->bq);
        matmul(st, x->k, x->xb, M, &L->wk, L->bk);
        matmul(st, x->v, x->xb, M, &L->wv, L->bv);
        k_qkv_post<<<dim3(M, nh + 2 * nkv), hd / 2, 0, st>>>(x->q, x->k, x->v, kc, vc, L->q_norm, L->k_norm, x->pos,
                                                            m->inv_freq, nh, nkv, hd, x->cap, x->d_len, eps);
        attention(st, x->att, x->q, kc, vc, x->opart, x->mpart, x->spart, M, nh, nkv, hd, x->cap, x->d_len, scale);
        matmul_epi<MM_ADD>(st, x->x, x->att, M, &L->wo, NULL, L->bo);
        rmsnorm(st, x->xb, x->x, L->mlp_norm, M, H, eps);
        matmul_epi<MM_SWIGLU>(st, x->gate, x->xb, M, &L->wg, &L->wu, NULL);
        matmul_epi<MM_ADD>(st, x->x, x->gate, M, &L->wd, NULL, NULL);
        if (b) copy_taps(x, b, l, row0, M);
    }
    if (n_sel) {
        int V = c->vocab_size;
        rmsnorm(st, x->xb, x->x + (size_t)(M - n_sel) * H, m->final_norm, n_sel, H, eps);
        matmul(st, x->logits, x->xb, n_sel, &m->lm_head, NULL);
        cudaMemcpyAsync(x->h_pinned, x->logits, sizeof(float) * (size_t)n_sel * V, cudaMemcpyDeviceToHost, st);
    }
}

/* The graph for (M, n_sel), captured on first use; NULL when capture fails
   (graphs are then switched off for this context). */
static cudaGraphExec_t graph_for(cuda_ctx *x, int M, int n_sel) {
    cudaGraphExec_t *g = &x->graphs[M][n_sel];
    if (*g) return *g;
    cudaGraph_t graph = NULL;
    if (cudaStreamBeginCapture(x->st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) goto fail;
    enqueue_chunk(x, M, n_sel, NULL, 0);
    if (cudaStreamEndCapture(x->st, &graph) != cudaSuccess || !graph) goto fail;
    if (cudaGraphInstantiate(g, graph, 0) != cudaSuccess) goto fail;
    cudaGraphDestroy(graph);
    return *g;
fail:
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    *g = NULL;
    x->use_graphs = 0;
    return NULL;
}

/* The chunk's logits rows: which of them the batch asked for, as a count of
   trailing rows (graphs and the gather-free path need them at the end); -1
   when the selection is not a contiguous tail of the chunk. */
static int tail_rows(const model_batch *b, int row0, int M, int next_logit, int *n_sel) {
    int n = 0;
    for (int i = next_logit; i < b->n_logits; i++) {
        int r = b->logit_rows ? b->logit_rows[i] : b->n - b->n_logits + i;
        if (r >= row0 + M) break;
        n++;
    }
    *n_sel = n;
    for (int i = 0; i < n; i++) {
        int r = b->logit_rows ? b->logit_rows[next_logit + i] : b->n - b->n_logits + next_logit + i;
        if (r != row0 + M - n + i) return -1;
    }
    return 0;
}

static int forward_chunk(cuda_ctx *x, const model_batch *b, int row0, int M, int *next_logit, char *err,
                         size_t errlen) {
    const model_config *c = &x->m->cfg;
    int B = x->max_batch, V = c->vocab_size, H = c->hidden_size;
    for (int i = 0; i < M; i++) {
        x->h_in[i] = b->tokens[row0 + i];
        x->h_in[B + i] = b->pos ? b->pos[row0 + i] : x->len + i;
    }
    x->h_in[2 * B] = x->len;
    int n_sel;
    if (tail_rows(b, row0, M, *next_logit, &n_sel) != 0) {
        /* rare: logits of rows that are not the chunk's tail; run the layers,
           then the head row by row (each row alone gives the same bits) */
        enqueue_chunk(x, M, 0, b, row0);
        CK(cudaStreamSynchronize(x->st));
        for (int i = 0; i < n_sel; i++) {
            int r = b->logit_rows[*next_logit + i] - row0;
            rmsnorm(x->st, x->xb, x->x + (size_t)r * H, x->m->final_norm, 1, H, c->rms_norm_eps);
            matmul(x->st, x->logits, x->xb, 1, &x->m->lm_head, NULL);
            CK(cudaMemcpyAsync(b->logits + (size_t)(*next_logit + i) * V, x->logits, sizeof(float) * V,
                               cudaMemcpyDeviceToHost, x->st));
        }
        CK(cudaStreamSynchronize(x->st));
        CK_LAUNCH();
        *next_logit += n_sel;
        x->len += M;
        return 0;
    }
    cudaGraphExec_t g = x->use_graphs && M <= GRAPH_ROWS && b->n_taps == 0 ? graph_for(x, M, n_sel) : NULL;
    if (g) CK(cudaGraphLaunch(g, x->st));
    else enqueue_chunk(x, M, n_sel, b, row0);
    CK_LAUNCH();
    CK(cudaStreamSynchronize(x->st));
    if (n_sel) memcpy(b->logits + (size_t)*next_logit * V, x->h_pinned, sizeof(float) * (size_t)n_sel * V);
    *next_logit += n_sel;
    x->len += M;
    return 0;
}

extern "C" int cuda_forward(cuda_ctx *x, const void *bv, char *err, size_t errlen) {
    const model_batch *b = (const model_batch *)bv;
    if (x->len + b->n > x->cap)
        return ds_err(err, errlen, "context window full: %d cached + %d new positions exceed the %d-position window",
                      x->len, b->n, x->cap);
    CK(cudaSetDevice(x->m->gpu));
    int next_logit = 0, len0 = x->len;
    for (int row0 = 0; row0 < b->n; row0 += x->max_batch) {
        int M = b->n - row0 < x->max_batch ? b->n - row0 : x->max_batch;
        if (forward_chunk(x, b, row0, M, &next_logit, err, errlen) != 0) {
            x->len = len0;
            return -1;
        }
    }
    return 0;
}

/* ---- single ops for tests ------------------------------------------------ */

template <typename T> static int dup_to_dev(T **d, const T *h, size_t n, char *err, size_t errlen) {
    CK(cudaMalloc((void **)d, sizeof(T) * (n ? n : 1)));
    if (h && n) CK(cudaMemcpy(*d, h, sizeof(T) * n, cudaMemcpyHostToDevice));
    return 0;
}

extern "C" int cuda_test_matmul(float *y, const float *x, int M, const void *w, ds_dtype dt, int N, int K,
                                const float *bias, char *err, size_t errlen) {
    float *dx, *dy, *db = NULL;
    void *dw;
    size_t wb = (size_t)N * K * dtype_size(dt);
    if (dup_to_dev(&dx, x, (size_t)M * K, err, errlen) || dup_to_dev(&dy, (float *)NULL, (size_t)M * N, err, errlen))
        return -1;
    CK(cudaMalloc(&dw, wb));
    CK(cudaMemcpy(dw, w, wb, cudaMemcpyHostToDevice));
    if (bias && dup_to_dev(&db, bias, (size_t)N, err, errlen)) return -1;
    dmat W = {dw, dt, N, K};
    matmul(0, dy, dx, M, &W, db);
    CK_LAUNCH();
    CK(cudaMemcpy(y, dy, sizeof(float) * (size_t)M * N, cudaMemcpyDeviceToHost));
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dw);
    cudaFree(db);
    return 0;
}

extern "C" int cuda_test_rmsnorm(float *y, const float *x, const float *w, int M, int D, float eps, char *err,
                                 size_t errlen) {
    float *dx, *dw;
    if (dup_to_dev(&dx, x, (size_t)M * D, err, errlen) || dup_to_dev(&dw, w, (size_t)D, err, errlen)) return -1;
    rmsnorm(0, dx, dx, dw, M, D, eps);
    CK_LAUNCH();
    CK(cudaMemcpy(y, dx, sizeof(float) * (size_t)M * D, cudaMemcpyDeviceToHost));
    cudaFree(dx);
    cudaFree(dw);
    return 0;
}

/* RoPE as the forward applies it: k_qkv_post on query heads only, no norm */
extern "C" int cuda_test_rope(float *x, int M, int n_heads, int head_dim, const int *pos, const float *inv_freq,
                              char *err, size_t errlen) {
    float *dx, *df;
    int *dp;
    if (dup_to_dev(&dx, x, (size_t)M * n_heads * head_dim, err, errlen) ||
        dup_to_dev(&df, inv_freq, (size_t)head_dim / 2, err, errlen) || dup_to_dev(&dp, pos, (size_t)M, err, errlen))
        return -1;
    k_qkv_post<<<dim3(M, n_heads), head_dim / 2>>>(dx, NULL, NULL, NULL, NULL, NULL, NULL, dp, df, n_heads, 0, head_dim,
                                                   0, dp, 0.0f);
    CK_LAUNCH();
    CK(cudaMemcpy(x, dx, sizeof(float) * (size_t)M * n_heads * head_dim, cudaMemcpyDeviceToHost));
    cudaFree(dx);
    cudaFree(df);
    cudaFree(dp);
    return 0;
}

extern "C" int cuda_test_attention(float *out, const float *q, int M, int nh, int nkv, int hd, const float *kc,
                                   const float *vc, int cap, int n_past, float scale, char *err, size_t errlen) {
    float *dq, *dk, *dv, *dout;
    int *dlen;
    if (dup_to_dev(&dlen, &n_past, 1, err, errlen)) return -1;
    if (dup_to_dev(&dq, q, (size_t)M * nh * hd, err, errlen) || dup_to_dev(&dk, kc, (size_t)nkv * cap * hd, err, errlen) ||
        dup_to_dev(&dv, vc, (size_t)nkv * cap * hd, err, errlen) ||
        dup_to_dev(&dout, (float *)NULL, (size_t)M * nh * hd, err, errlen))
        return -1;
    size_t nchunk = (size_t)(cap + ATT_CHUNK - 1) / ATT_CHUNK, parts = (size_t)ATT_ROWS * nh * nchunk;
    float *op, *mp, *sp;
    if (dup_to_dev(&op, (float *)NULL, parts * hd, err, errlen) || dup_to_dev(&mp, (float *)NULL, parts, err, errlen) ||
        dup_to_dev(&sp, (float *)NULL, parts, err, errlen))
        return -1;
    attention(0, dout, dq, dk, dv, op, mp, sp, M, nh, nkv, hd, cap, dlen, scale);
    CK_LAUNCH();
    cudaFree(op);
    cudaFree(mp);
    cudaFree(sp);
    CK_LAUNCH();
    CK(cudaMemcpy(out, dout, sizeof(float) * (size_t)M * nh * hd, cudaMemcpyDeviceToHost));
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dout);
    cudaFree(dlen);
    return 0;
}

extern "C" int cuda_test_embed(float *out, const void *e, ds_dtype dt, int V, int H, const int *tok, int M, char *err,
                               size_t errlen) {
    void *de;
    int *dt_;
    float *dout;
    size_t eb = (size_t)V * H * dtype_size(dt);
    CK(cudaMalloc(&de, eb));
    CK(cudaMemcpy(de, e, eb, cudaMemcpyHostToDevice));
    if (dup_to_dev(&dt_, tok, (size_t)M, err, errlen) || dup_to_dev(&dout, (float *)NULL, (size_t)M * H, err, errlen))
        return -1;
    dmat E = {de, dt, V, H};
    embed(0, dout, &E, dt_, M);
    CK_LAUNCH();
    CK(cudaMemcpy(out, dout, sizeof(float) * (size_t)M * H, cudaMemcpyDeviceToHost));
    cudaFree(de);
    cudaFree(dt_);
    cudaFree(dout);
    return 0;
}

/* mode 1: y[M][N] += x . W^T (+ bias); mode 2: y = silu(x . W^T) * (x . W2^T) */
extern "C" int cuda_test_matmul_fused(float *y, const float *x, int M, const void *w, const void *w2, ds_dtype dt,
                                      int N, int K, const float *bias, int mode, char *err, size_t errlen) {
    float *dx, *dy, *db = NULL;
    void *dw, *dw2 = NULL;
    size_t wb = (size_t)N * K * dtype_size(dt);
    if (dup_to_dev(&dx, x, (size_t)M * K, err, errlen) || dup_to_dev(&dy, y, (size_t)M * N, err, errlen)) return -1;
    CK(cudaMalloc(&dw, wb));
    CK(cudaMemcpy(dw, w, wb, cudaMemcpyHostToDevice));
    if (w2) {
        CK(cudaMalloc(&dw2, wb));
        CK(cudaMemcpy(dw2, w2, wb, cudaMemcpyHostToDevice));
    }
    if (bias && dup_to_dev(&db, bias, (size_t)N, err, errlen)) return -1;
    dmat W = {dw, dt, N, K}, W2 = {dw2, dt, N, K};
    if (mode == 1) matmul_epi<MM_ADD>(0, dy, dx, M, &W, NULL, db);
    else matmul_epi<MM_SWIGLU>(0, dy, dx, M, &W, &W2, NULL);
    CK_LAUNCH();
    CK(cudaMemcpy(y, dy, sizeof(float) * (size_t)M * N, cudaMemcpyDeviceToHost));
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dw);
    cudaFree(dw2);
    cudaFree(db);
    return 0;
}
