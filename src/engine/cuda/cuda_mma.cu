// cuda_mma: the matmul kernels (the tensor-core kernel with its epilogues,
// folded RMSNorm and q/k/v tail; the FMA kernel)
// and their launchers, declared in cuda_ops.cuh; the matmul op benchmark.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "engine/cuda/cuda_ops.cuh"

/* ---- the FMA kernel ------------------------------------------------------ */

/* 8 consecutive weights widened to f32 */
template <typename T> __device__ __forceinline__ void load8(const T *p, float *w) {
    uint4 u = *reinterpret_cast<const uint4 *>(p);
    const T *h = reinterpret_cast<const T *>(&u);
#pragma unroll
    for (int i = 0; i < 8; i++) w[i] = widen(h[i]);
}
__device__ __forceinline__ void load8(const float *p, float *w) {
    float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
    w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
    w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
}

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
   kernel would) and writes silu(gate) * up; MM_GEGLU the same with
   gelu_tanh (cu_geglu) (the enum is in cuda_ops.cuh). */

template <typename T, int ROWS, int EPI>
__global__ void __launch_bounds__(32 * MM_WARPS) k_matmul(float *__restrict__ y, const float *__restrict__ x,
                                                          const T *__restrict__ W, const T *__restrict__ W2,
                                                          const float *__restrict__ bias, int M, int N, int K,
                                                          int vec) {
    pdl_trigger();
    pdl_wait();
    __shared__ float part[MM_WARPS][MM_NPW][ROWS];
    const int NB = mm_gated(EPI) ? MM_NPW / 2 : MM_NPW; /* outputs per block */
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
        int jj = mm_gated(EPI) ? j % NB : j;
        const T *base = mm_gated(EPI) && j >= NB ? W2 : W;
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
            if (mm_gated(EPI)) {
                float u = part[0][j + NB][r];
#pragma unroll
                for (int w = 1; w < MM_WARPS; w++) u += part[w][j + NB][r];
                *dst = EPI == MM_GEGLU ? cu_geglu(sum, u) : sum / (1.0f + expf(-sum)) * u;
            } else {
                float v = bias ? sum + bias[n0 + j] : sum;
                if (EPI == MM_ADD) *dst += v;
                else *dst = v;
            }
        }
    }
}

/* ---- tensor-core matmul ---------------------------------------------------

   y[m][n] = sum_k x[m][k] W[n][k] on mma.sync: the weight tile is the A
   operand (16 outputs x the step's k), the activations the B operand (the
   step's k x 8 rows). bf16 weights go to m16n8k16 BF16 as they are; each
   f32 activation is cut into a bf16 head and a bf16 tail (bf16_cut2: x to
   within 2^-17 of its size, three instructions a value), each multiplied
   in its own mma. f16 weights go to m16n8k8 TF32 (exact there), the
   activation cut into a TF32 head and tail (tf32_cut: within 2^-21, two
   instructions a value). Either way a product is within 2^-17 (2^-21) of
   the f32 one and accumulation is f32: close to the numerics of the FMA
   kernel, with another summation order. (f32 weights would be rounded:
   they go to the FMA kernel.) The BF16 form issues half the mmas of the
   TF32 one for the same products and no weight conversions (two
   instructions a weight pair there), which the 9-16 rows of a verify,
   bound by the kernel's instructions, feel (docs/history/benchmarks-log.md).

   A warp owns TILES tiles of 16 weight rows and MT tiles of 8 activation
   rows; KS warps split K into chunks of 32 (warp w takes chunks w, w+KS,
   ...). Lane (g = lane/4, t = lane%4) loads 8 consecutive weights of rows
   g and g+8 of each tile (16 bytes each, coalesced per row) and the same 8
   k of activation row g; a TF32 step s (0..3) uses k = 8t+2s and 8t+2s+1
   as the fragment's columns t and t+4, a BF16 step s (0..1) k = 8t+4s ..
   8t+4s+3 as its k 2t, 2t+1, 2t+8, 2t+9 (any k permutation shared by A
   and B gives the same sum). Per output element the operations are: its
   warp's chunks in order, 2 or 4 steps each, head then tail, then the KS warps' partials
   added in warp order. Only KS and K fix that sequence, so the tile counts
   can follow the batch width and a row's bits never depend on the batch:
   KS is a function of the matrix shape alone (mma_ks). */

#define MMA_KS 8
/* k_norm_cut's threads, and the shared memory its row may take (the
   default limit: K up to 12,288) */
#define NORM_CUT_THREADS 512
#define NORM_CUT_SMEM (48 * 1024)
/* chunks in flight per warp (k_mma's U): register-capped kernels (two
   for four tiles, the SwiGLU's at 1-8 rows under cu_go's two: 128
   registers and no spills, where three would spill), up to
   two tiles x row groups, more tiles of one row group (the SwiGLU's four
   at 1-8 rows: three rather than two took t(1) of an 8B model from
   4.48-4.50 to 4.43-4.44 ms, docs/history/benchmarks-log.md), more row groups
   (overridable at build time for tuning runs) */
#ifndef MMA_U_CAPPED
#define MMA_U_CAPPED 3
#endif
#ifndef MMA_U_SMALL
#define MMA_U_SMALL 4
#endif
#ifndef MMA_U_WIDE
#define MMA_U_WIDE 3
#endif
#ifndef MMA_U_LARGE
#define MMA_U_LARGE 2
#endif

/* 8 raw 2-byte weights: one 16-byte load */
template <typename T> struct raw8 {
    uint4 u;
};
template <typename T> __device__ __forceinline__ void raw_load(raw8<T> &r, const T *p, bool ok) {
    r.u = ok ? __ldg(reinterpret_cast<const uint4 *>(p)) : make_uint4(0, 0, 0, 0);
}
/* weights 2s and 2s+1 of the 8 as TF32 bit patterns */
__device__ __forceinline__ void raw_pair(const raw8<__nv_bfloat16> &r, int s, uint32_t &a, uint32_t &b) {
    uint32_t w = (&r.u.x)[s];
    a = w << 16;
    b = w & 0xffff0000u;
}
__device__ __forceinline__ void raw_pair(const raw8<__half> &r, int s, uint32_t &a, uint32_t &b) {
    uint32_t w = (&r.u.x)[s];
    float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&w));
    a = __float_as_uint(f.x);
    b = __float_as_uint(f.y);
}

template <typename T, int TILES, int MT> struct mma_chunk {
    raw8<T> wa[TILES], wb[TILES];
    float4 xa[MT], xb[MT];
};

/* chunk c32's weights: wa/wb point at the lane's first chunk, cs elements
   apart chunk to chunk (32 row-major, 512 tile-major) */
template <typename T, int TILES, int MT>
__device__ __forceinline__ void mma_load_w(mma_chunk<T, TILES, MT> &c, const T *const (&wa)[TILES],
                                           const T *const (&wb)[TILES], int K, int c32, int t, int cs) {
    bool ok = c32 * 32 + 8 * t < K;
    size_t o = (size_t)c32 * cs;
#pragma unroll
    for (int i = 0; i < TILES; i++) {
        raw_load(c.wa[i], wa[i] + o, ok);
        raw_load(c.wb[i], wb[i] + o, ok);
    }
}

__device__ __forceinline__ float4 mul4(float4 a, float4 b) { return make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w); }
__device__ __forceinline__ float sumsq8(float s, float4 a, float4 b) {
    s = fmaf(a.x, a.x, s); s = fmaf(a.y, a.y, s); s = fmaf(a.z, a.z, s); s = fmaf(a.w, a.w, s);
    s = fmaf(b.x, b.x, s); s = fmaf(b.y, b.y, s); s = fmaf(b.z, b.z, s); s = fmaf(b.w, b.w, s);
    return s;
}

/* the chunk's activations; with an RMSNorm folded in (gn), each value is
   multiplied by its norm weight and its square added to the row's ss */
template <typename T, int TILES, int MT>
__device__ __forceinline__ void mma_load_x(mma_chunk<T, TILES, MT> &c, float (&ss)[MT], const float *x,
                                           const float *gn, int K, int M, int m0, int c32, int g, int t) {
    int k = c32 * 32 + 8 * t;
    bool ok = k < K;
    float4 ga = make_float4(0, 0, 0, 0), gb = ga;
    if (gn && ok) {
        ga = *reinterpret_cast<const float4 *>(gn + k);
        gb = *reinterpret_cast<const float4 *>(gn + k + 4);
    }
#pragma unroll
    for (int j = 0; j < MT; j++) {
        int m = m0 + 8 * j + g;
        if (ok && m < M) {
            const float4 *p = reinterpret_cast<const float4 *>(x + (size_t)m * K + k);
            c.xa[j] = p[0];
            c.xb[j] = p[1];
            if (gn) {
                ss[j] = sumsq8(ss[j], c.xa[j], c.xb[j]);
                c.xa[j] = mul4(c.xa[j], ga);
                c.xb[j] = mul4(c.xb[j], gb);
            }
        } else {
            c.xa[j] = c.xb[j] = make_float4(0, 0, 0, 0);
        }
    }
}

template <bool PC, typename T, int TILES, int MT>
__device__ __forceinline__ void mma_run(float (&acc)[TILES][MT][4], const mma_chunk<T, TILES, MT> &c) {
    static_assert(!PC, "pre-cut inputs are bf16 operands");
#pragma unroll
    for (int s = 0; s < 4; s++) {
        uint32_t h0[MT], h1[MT], l0[MT], l1[MT];
#pragma unroll
        for (int j = 0; j < MT; j++) {
            const float *xv = s < 2 ? &c.xa[j].x : &c.xb[j].x;
            const tf32x2 c0 = tf32_cut(xv[2 * (s & 1)]), c1 = tf32_cut(xv[2 * (s & 1) + 1]);
            h0[j] = c0.h, l0[j] = c0.l, h1[j] = c1.h, l1[j] = c1.l;
        }
#pragma unroll
        for (int i = 0; i < TILES; i++) {
            uint32_t a0, a2, a1, a3;
            raw_pair(c.wa[i], s, a0, a2); /* row g: columns t and t+4 */
            raw_pair(c.wb[i], s, a1, a3); /* row g+8 */
#pragma unroll
            for (int j = 0; j < MT; j++) {
                mma_tf32(acc[i][j], a0, a1, a2, a3, h0[j], h1[j]);
                mma_tf32(acc[i][j], a0, a1, a2, a3, l0[j], l1[j]);
            }
        }
    }
}

/* bf16 weights: two m16n8k16 BF16 steps of 16 k per chunk, the weights as
   they are (step s takes the lane's pairs 2s and 2s + 1, k = 8t+4s .. 8t+4s+3,
   as the fragment's k 2t, 2t+1 and 2t+8, 2t+9) and the activations cut into
   bf16 heads and tails (bf16_cut2; PC: loaded so, bf16_cut_put's layout), head then
   tail */
template <bool PC, int TILES, int MT>
__device__ __forceinline__ void mma_run(float (&acc)[TILES][MT][4], const mma_chunk<__nv_bfloat16, TILES, MT> &c) {
#pragma unroll
    for (int s = 0; s < 2; s++) {
        uint32_t h0[MT], h1[MT], l0[MT], l1[MT];
#pragma unroll
        for (int j = 0; j < MT; j++) {
            const float4 v = s ? c.xb[j] : c.xa[j];
            if (PC) { /* pre-cut: heads and tails as loaded */
                h0[j] = __float_as_uint(v.x), l0[j] = __float_as_uint(v.y);
                h1[j] = __float_as_uint(v.z), l1[j] = __float_as_uint(v.w);
            } else {
                const bf16x2_cut p = bf16_cut2(v.x, v.y), q = bf16_cut2(v.z, v.w);
                h0[j] = p.h, l0[j] = p.l, h1[j] = q.h, l1[j] = q.l;
            }
        }
#pragma unroll
        for (int i = 0; i < TILES; i++) {
            const uint32_t *ra = &c.wa[i].u.x, *rb = &c.wb[i].u.x;
#pragma unroll
            for (int j = 0; j < MT; j++) {
                mma_bf16(acc[i][j], ra[2 * s], rb[2 * s], ra[2 * s + 1], rb[2 * s + 1], h0[j], h1[j]);
                mma_bf16(acc[i][j], ra[2 * s], rb[2 * s], ra[2 * s + 1], rb[2 * s + 1], l0[j], l1[j]);
            }
        }
    }
}

/* (row m, head t) of cu_qkv_post by one warp, over the q heads, then the
   k heads, then the v heads: q/k get their per-head RMSNorm (when qn/kn
   are given) and NeoX RoPE at the row's position; k and v are written
   into the cache at position *d_len + m. Lane l owns the pairs (i, i +
   head_dim/2) for i = l, l + 32, ...; the norm's sum of squares adds the
   pairs' a*a + b*b by a fixed tree (from the next power of two, halving:
   element i takes i + o while both exist), in registers and then by
   shuffles. The inputs are read from L2 (ld.cg): the fused tail reads
   what other blocks of its kernel wrote. */
#define QKV_PAIRS (ATT_MAX_HD / 64) /* pairs per lane */

/* A row of n values into a 16- or 8-bit cache (kv.h's rules, cu_kv) by
   one warp: lane l holds element l + 32 j in x[j], and 0 past the row (a
   zero never raises the row's max |x|); the row goes to base + slot
   elements. bits 8: the max over the row (fmaxf: exact in any order, a NaN
   skipped as the CPU's fmaxf skips it) by a butterfly, the codes, and the
   scale at sc[sp]. */
__device__ __forceinline__ float kv_row_amax(float a) { return warp_max(a); }
template <int N>
__device__ __forceinline__ void kv_store_lanes(void *base, float *sc, int bits, size_t slot, size_t sp, int n,
                                               const float (&x)[N], int lane) {
    if (bits == 16) {
        uint16_t *d = static_cast<uint16_t *>(base) + slot;
#pragma unroll
        for (int j = 0; j < N; j++)
            if (lane + 32 * j < n) d[lane + 32 * j] = kv_f16_bits(x[j]);
        return;
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < N; j++) amax = fmaxf(amax, fabsf(x[j]));
    amax = kv_row_amax(amax);
    int8_t *d = static_cast<int8_t *>(base) + slot;
#pragma unroll
    for (int j = 0; j < N; j++)
        if (lane + 32 * j < n) d[lane + 32 * j] = kv_i8_code(x[j], amax);
    if (lane == 0) sc[sp] = kv_i8_scale(amax);
}
/* the same for the roped k row held as pairs: a[j] element lane + 32 j,
   b[j] element half + lane + 32 j (half = hd / 2) */
__device__ __forceinline__ void kv_store_pairs(void *base, float *sc, int bits, size_t slot, size_t sp, int half,
                                               const float (&a)[QKV_PAIRS], const float (&b)[QKV_PAIRS], int lane) {
    if (bits == 16) {
        uint16_t *d = static_cast<uint16_t *>(base) + slot;
#pragma unroll
        for (int j = 0; j < QKV_PAIRS; j++)
            if (lane + 32 * j < half) d[lane + 32 * j] = kv_f16_bits(a[j]), d[half + lane + 32 * j] = kv_f16_bits(b[j]);
        return;
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < QKV_PAIRS; j++) amax = fmaxf(amax, fmaxf(fabsf(a[j]), fabsf(b[j])));
    amax = kv_row_amax(amax);
    int8_t *d = static_cast<int8_t *>(base) + slot;
#pragma unroll
    for (int j = 0; j < QKV_PAIRS; j++)
        if (lane + 32 * j < half) d[lane + 32 * j] = kv_i8_code(a[j], amax), d[half + lane + 32 * j] = kv_i8_code(b[j], amax);
    if (lane == 0) sc[sp] = kv_i8_scale(amax);
}
__device__ __forceinline__ void qkv_post_item(const cu_qkv_args &a, int m, int t, int lane) {
    const int hd = a.hd, half = hd / 2;
    const int is_q = t < a.nh, is_k = !is_q && t < a.nh + a.nkv, h = is_q ? t : is_k ? t - a.nh : t - a.nh - a.nkv;
    const size_t slot = ((size_t)h * a.cap + (size_t)(*a.d_len + m)) * hd;
    if (!is_q && !is_k) {
        const float *vr = a.v + (size_t)m * a.ks + (size_t)h * hd;
        if (a.kv.bits == 32) {
            for (int i = lane; i < hd; i += 32) static_cast<float *>(a.kv.v)[slot + i] = __ldcg(vr + i);
            return;
        }
        /* a 16- or 8-bit cache: lane l holds elements l, l + 32, ... */
        float x[ATT_MAX_HD / 32];
#pragma unroll
        for (int j = 0; j < ATT_MAX_HD / 32; j++) x[j] = lane + 32 * j < hd ? __ldcg(vr + lane + 32 * j) : 0.0f;
        kv_store_lanes<ATT_MAX_HD / 32>(a.kv.v, a.kv.vs, a.kv.bits, slot, (size_t)h * a.cap + *a.d_len + m, hd,
                                               x, lane);
        return;
    }
    const float *src = is_q ? a.q + (size_t)m * a.qs + (size_t)h * hd : a.k + (size_t)m * a.ks + (size_t)h * hd;
    float va[QKV_PAIRS], vb[QKV_PAIRS], r[QKV_PAIRS];
#pragma unroll
    for (int j = 0; j < QKV_PAIRS; j++) {
        int i = lane + 32 * j;
        va[j] = i < half ? __ldcg(src + i) : 0.0f;
        vb[j] = i < half ? __ldcg(src + i + half) : 0.0f;
        r[j] = fmaf(va[j], va[j], vb[j] * vb[j]);
    }
    const float *w = is_q ? a.qn : a.kn;
    float rs = 1.0f;
    if (w) {
        int p2 = 1;
        while (p2 < half) p2 <<= 1;
        for (int o = p2 / 2; o > 0; o >>= 1) {
            if (o >= 32) { /* i and i + o in one lane: o is a multiple of 32 */
#pragma unroll
                for (int j = 0; j < QKV_PAIRS; j++) {
                    int i = lane + 32 * j, jo = j + o / 32;
                    float add = 0.0f;
#pragma unroll
                    for (int q = 0; q < QKV_PAIRS; q++) add = q == jo ? r[q] : add;
                    if (i < o && i + o < half) r[j] += add;
                }
            } else {
                float v = __shfl_down_sync(0xffffffffu, r[0], o);
                if (lane < o && lane + o < half) r[0] += v;
            }
        }
        rs = 1.0f / sqrtf(__shfl_sync(0xffffffffu, r[0], 0) / (float)hd + a.eps);
    }
    const float p = (float)a.pos[m];
#pragma unroll
    for (int j = 0; j < QKV_PAIRS; j++) {
        int i = lane + 32 * j;
        if (i >= half) break;
        float x = va[j], y = vb[j];
        if (w) {
            x = w[i] * (x * rs);
            y = w[i + half] * (y * rs);
        }
        float ang = p * a.inv_freq[i];
        float c = cosf(ang), sn = sinf(ang);
        float ra = fmaf(x, c, -(y * sn)), rb = fmaf(y, c, x * sn);
        if (is_q) {
            float *dst = a.qout + ((size_t)m * a.nh + h) * hd;
            dst[i] = ra;
            dst[i + half] = rb;
        } else if (a.kv.bits == 32) {
            static_cast<float *>(a.kv.k)[slot + i] = ra;
            static_cast<float *>(a.kv.k)[slot + i + half] = rb;
        } else {
            va[j] = ra, vb[j] = rb; /* stored below, once the row's max is known */
        }
    }
    if (!is_q && a.kv.bits != 32) {
        /* lane l holds elements l + 32 j (va) and half + l + 32 j (vb) */
#pragma unroll
        for (int j = 0; j < QKV_PAIRS; j++)
            if (lane + 32 * j >= half) va[j] = vb[j] = 0.0f;
        const size_t sp = (size_t)h * a.cap + *a.d_len + m;
        kv_store_pairs(a.kv.k, a.kv.ks, a.kv.bits, slot, sp, half, va, vb, lane);
    }
}

/* grid (rows, heads): one warp per (row, head) */
__global__ void k_qkv_post(cu_qkv_args a) {
    pdl_trigger();
    pdl_wait();
    qkv_post_item(a, blockIdx.x, blockIdx.y, threadIdx.x);
}

/* the fused projection's tail (cu_qkv_tail), after the block stored
   columns [n0, n0 + nc) of rows [m0, m0 + R): the block that completes a
   head (the last of its hd / nc blocks to count itself) resets the count
   and post-processes the head, a warp a row */
__device__ void qkv_tail(const cu_qkv_tail &t, int M, int m0, int R, int n0, int nc) {
    __shared__ int last;
    __threadfence(); /* this block's columns are visible before it counts */
    __syncthreads();
    const int head = n0 / t.a.hd;
    if (threadIdx.x == 0) {
        last = atomicAdd(t.cnt + head, 1) == t.a.hd / nc - 1;
        if (last) t.cnt[head] = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int warp = threadIdx.x / 32, nw = blockDim.x / 32, rows = M - m0 < R ? M - m0 : R;
    for (int r = warp; r < rows; r += nw) qkv_post_item(t.a, m0 + r, head, threadIdx.x % 32);
}

/* EPI as k_matmul's; MM_SWIGLU and MM_GEGLU: tiles 0..TILES/2-1 are gate
   rows, the others the up rows of the same outputs. gn (or NULL): the input is
   RMSNorm(x, gn) with eps, folded in as RMSNorm(x).W = r * ((gn . x).W)
   with r = 1/sqrt(mean(x^2) + eps): the warps square the raw values they
   load anyway, so the norm needs no kernel of its own, and every block
   computes r in the same fixed order (per lane in chunk order, lanes of a
   row by butterfly, warps in order). PC: the input pre-cut (cut.in), its
   rows scaled by cut.r when given (the norm run apart by k_norm_cut, which
   cuts the same products and sums r in the same order). */
template <typename T, int TILES, int MT, int EPI, int OCC, bool PC>
__global__ void __launch_bounds__(32 * MMA_KS, OCC) k_mma(float *__restrict__ y, const float *__restrict__ x,
                                                    const T *__restrict__ W, const T *__restrict__ W2,
                                                    const float *__restrict__ bias, int M, int N, int K,
                                                    const float *__restrict__ gn, float eps, cu_qkv_tail tail,
                                                    int tiled, cu_cut cut, int late) {
    constexpr int OT = mm_gated(EPI) ? TILES / 2 : TILES; /* output tiles */
    constexpr int NV = TILES * MT * 4;                      /* accumulators per lane */
    __shared__ float red[MMA_KS][NV][32];
    __shared__ float ssw[MMA_KS][MT * 8], rr[MT * 8];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int n0 = blockIdx.x * OT * 16, m0 = blockIdx.y * MT * 8;
    const int nc = (K + 31) / 32, cs = tiled ? 512 : 32;
    /* the activations' source (pre-cut: the words at the f32 row's offsets,
       loaded as they are) and whether they take a folded norm's weights */
    const float *const xs = PC ? reinterpret_cast<const float *>(cut.in) : x;
    const bool pnorm = !PC && gn;
    /* rows g and g+8 of each tile at the lane's columns 8t..8t+7 of chunk 0;
       rows past N read row N-1 (row-major) or the zero padding (dropped) */
    const T *wa[TILES], *wb[TILES];
#pragma unroll
    for (int i = 0; i < TILES; i++) {
        const T *base = mm_gated(EPI) && i >= OT ? W2 : W;
        if (tiled) {
            int R = n0 / 16 + i % OT, last = (N - 1) / 16;
            wa[i] = base + (size_t)(R < last ? R : last) * nc * 512 + g * 32 + 8 * t;
            wb[i] = wa[i] + 256;
        } else {
            int ra = n0 + 16 * (i % OT) + g, rb = ra + 8;
            wa[i] = base + (size_t)(ra < N ? ra : N - 1) * K + 8 * t;
            wb[i] = base + (size_t)(rb < N ? rb : N - 1) * K + 8 * t;
        }
    }
    float acc[TILES][MT][4];
#pragma unroll
    for (int i = 0; i < TILES; i++)
#pragma unroll
        for (int j = 0; j < MT; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;
    /* U chunks in flight per warp (three when registers are capped: with
       four the 9-16-row kernel capped for two blocks per SM spilled 84
       bytes, and three made it 6% faster); the first group's weights are
       requested before waiting for the previous kernel. U does not change
       the order in which a warp's chunks are accumulated. */
    constexpr int U = OCC >= 2      ? (TILES >= 4 ? 2 : MMA_U_CAPPED)
                      : TILES * MT <= 2 ? MMA_U_SMALL
                      : MT == 1         ? MMA_U_WIDE
                                        : MMA_U_LARGE;
    mma_chunk<T, TILES, MT> ch[U];
    float ss[MT];
#pragma unroll
    for (int j = 0; j < MT; j++) ss[j] = 0.0f;
    if (!late) pdl_trigger();
#pragma unroll
    for (int u = 0; u < U; u++) mma_load_w(ch[u], wa, wb, K, warp + u * MMA_KS, t, cs);
    pdl_wait();
    for (int c = warp;;) {
#pragma unroll
        for (int u = 0; u < U; u++) mma_load_x(ch[u], ss, xs, pnorm ? gn : nullptr, K, M, m0, c + u * MMA_KS, g, t);
#pragma unroll
        for (int u = 0; u < U; u++)
            if (c + u * MMA_KS < nc) mma_run<PC>(acc, ch[u]);
        c += U * MMA_KS;
        if (c >= nc) break;
#pragma unroll
        for (int u = 0; u < U; u++) mma_load_w(ch[u], wa, wb, K, c + u * MMA_KS, t, cs);
    }
    if (late) pdl_trigger(); /* (cu_go's late) */
    /* the block's sums: the partials added in warp order, the norm factor,
       the epilogue, and what it writes for others (the pre-cut copy, the
       q/k/v tail) */
#pragma unroll
    for (int i = 0; i < TILES; i++)
#pragma unroll
        for (int j = 0; j < MT; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) red[warp][(i * MT + j) * 4 + q][lane] = acc[i][j][q];
    /* the sums scaled by the rows' norm factors: folded here (gn), or run
       apart (cut.r: cu_norm_cut's, the same factors; read where used, as a
       flag kept live through the main loop cost the folded kernels registers) */
    auto scaled = [&] { return PC ? cut.r != nullptr : gn != nullptr; };
    if (!PC && gn) {
#pragma unroll
        for (int j = 0; j < MT; j++) {
            float v = ss[j];
            v += __shfl_xor_sync(0xffffffffu, v, 1);
            v += __shfl_xor_sync(0xffffffffu, v, 2);
            if (t == 0) ssw[warp][8 * j + g] = v;
        }
        __syncthreads();
        if (threadIdx.x < MT * 8) {
            float v = ssw[0][threadIdx.x];
#pragma unroll
            for (int w = 1; w < MMA_KS; w++) v += ssw[w][threadIdx.x];
            rr[threadIdx.x] = 1.0f / sqrtf(v / (float)K + eps);
        }
    } else if (PC && cut.r && threadIdx.x < MT * 8) { /* the norm run apart: cu_norm_cut's scales */
        rr[threadIdx.x] = m0 + (int)threadIdx.x < M ? cut.r[m0 + threadIdx.x] : 1.0f;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < OT * MT * 4 * 32; e += 32 * MMA_KS) {
        int l = e % 32, v = e / 32, q = v % 4, j = (v / 4) % MT, i = v / (4 * MT);
        int n = n0 + 16 * i + l / 4 + (q >> 1) * 8, m = m0 + 8 * j + 2 * (l % 4) + (q & 1);
        float s = red[0][v][l];
#pragma unroll
        for (int w = 1; w < MMA_KS; w++) s += red[w][v][l];
        if (n >= N || m >= M) continue;
        if (scaled()) s *= rr[m - m0];
        float *dst = y + (size_t)m * N + n;
        if (mm_gated(EPI)) {
            int vu = ((i + OT) * MT + j) * 4 + q;
            float u = red[0][vu][l];
#pragma unroll
            for (int w = 1; w < MMA_KS; w++) u += red[w][vu][l];
            if (scaled()) u *= rr[m - m0];
            const float v = EPI == MM_GEGLU ? cu_geglu(s, u) : s / (1.0f + expf(-s)) * u;
            *dst = v;
            if (cut.out) bf16_cut_put(cut.out + (size_t)m * N, n, v);
        } else {
            float r = bias ? s + bias[n] : s;
            if (EPI == MM_ADD) *dst += r;
            else *dst = r;
        }
    }
    if constexpr (EPI == MM_STORE)
        if (tail.cnt) qkv_tail(tail, M, m0, MT * 8, n0, OT * 16);
}

/* The folded norm run apart (cu_norm_cut): block m takes row m. Its
   threads load the row's 8-value groups (group p: k = 8p .. 8p+7, as lane
   t of a lane quad loads it in chunk p / 4 of k_mma), keep the raw values
   in shared memory and write the pre-cut products gn . x (bf16_cut2 of
   each pair, the operands k_mma cuts from the same products); then lane
   L = 4w + t of the first warp sums the squares of groups L, L + 32, ...:
   warp w's chunks w, w + MMA_KS, ... at quad slot t, so exactly the
   sequence lane (g, t) of warp w adds in k_mma; the quad by the same
   butterfly, the warps in order, and the same expression for r. */
__global__ void __launch_bounds__(NORM_CUT_THREADS) k_norm_cut(uint32_t *__restrict__ xc, float *__restrict__ r,
                                                               const float *__restrict__ x,
                                                               const float *__restrict__ gn, int K, float eps) {
    static_assert(MMA_KS * 4 == 32, "a warp's lanes are k_mma's warps x quad slots");
    DYN_SMEM(float4, row4); /* the raw row, K / 4 float4 */
    pdl_trigger();
    pdl_wait();
    const int G = K / 8;
    const float4 *xr = reinterpret_cast<const float4 *>(x + (size_t)blockIdx.x * K);
    const float4 *g4 = reinterpret_cast<const float4 *>(gn);
    uint4 *cr = reinterpret_cast<uint4 *>(xc + (size_t)blockIdx.x * K);
    for (int p = threadIdx.x; p < G; p += NORM_CUT_THREADS) {
        const float4 a = xr[2 * p], b = xr[2 * p + 1];
        row4[2 * p] = a;
        row4[2 * p + 1] = b;
        const float4 va = mul4(a, g4[2 * p]), vb = mul4(b, g4[2 * p + 1]);
        const bf16x2_cut c0 = bf16_cut2(va.x, va.y), c1 = bf16_cut2(va.z, va.w);
        const bf16x2_cut c2 = bf16_cut2(vb.x, vb.y), c3 = bf16_cut2(vb.z, vb.w);
        cr[2 * p] = make_uint4(c0.h, c0.l, c1.h, c1.l);
        cr[2 * p + 1] = make_uint4(c2.h, c2.l, c3.h, c3.l);
    }
    __syncthreads();
    if (threadIdx.x >= 32) return;
    const int L = threadIdx.x;
    float v = 0.0f;
    for (int p = L; p < G; p += 32) v = sumsq8(v, row4[2 * p], row4[2 * p + 1]);
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    float sum = __shfl_sync(0xffffffffu, v, 0);
#pragma unroll
    for (int w = 1; w < MMA_KS; w++) sum += __shfl_sync(0xffffffffu, v, 4 * w);
    if (L == 0) r[blockIdx.x] = 1.0f / sqrtf(sum / (float)K + eps);
}

/* ---- launchers ----------------------------------------------------------- */

int cu_norm_cut_ok(int K) { return K > 0 && K % 8 == 0 && (size_t)K * sizeof(float) <= NORM_CUT_SMEM; }
void cu_norm_cut(cu_go st, uint32_t *xc, float *r, const float *x, const float *gn, int M, int K, float eps) {
    launch_smem(k_norm_cut, M, NORM_CUT_THREADS, sizeof(float) * (size_t)K, st, xc, r, x, gn, K, eps);
}

int cu_norm_split(int site, int M) {
    return (site & (CU_NS_GU | CU_NS_LM)) && M >= CU_NS_ROWS && M <= CU_CUT_ROWS;
}

void cu_qkv_post(cu_go st, float *q, const float *k, const float *v, cu_kv kv, const float *qn,
                 const float *kn, const int *pos, const float *inv_freq, int M, int nh, int nkv, int hd, int cap,
                 const int *d_len, float eps) {
    cu_qkv_args a = {q, q, k, v, nh * hd, nkv * hd, kv, qn, kn, pos, inv_freq, nh, nkv, hd, cap, d_len, eps};
    cu_qkv_post_run(st, &a, M);
}

void cu_qkv_post_run(cu_go st, const cu_qkv_args *a, int M) {
    launch(k_qkv_post, dim3(M, a->nh + 2 * a->nkv), 32, st, *a);
}

cu_qkv_args cu_qkv_fused_args(float *q, const float *qkv, cu_kv kv, const float *qn, const float *kn,
                              const int *pos, const float *inv_freq, int nh, int nkv, int hd, int cap,
                              const int *d_len, float eps) {
    int qd = nh * hd, kd = nkv * hd, rs = qd + 2 * kd;
    return cu_qkv_args{q, qkv, qkv + qd, qkv + qd + kd, rs, rs, kv, qn, kn, pos, inv_freq, nh, nkv, hd, cap,
                       d_len, eps};
}

template <int ROWS, int EPI>
static void matmul_rows(cu_go st, float *y, const float *x, int M, const dmat *W, const dmat *W2,
                        const float *bias) {
    int nb = mm_gated(EPI) ? MM_NPW / 2 : MM_NPW;
    dim3 blk(32, MM_WARPS), grd((W->N + nb - 1) / nb, (M + ROWS - 1) / ROWS);
    int vec = W->K % 8 == 0;
    const void *p2 = W2 ? W2->p : NULL;
    switch (W->dt) {
    case DT_BF16:
        launch(k_matmul<__nv_bfloat16, ROWS, EPI>, grd, blk, st, y, x, (const __nv_bfloat16 *)W->p,
               (const __nv_bfloat16 *)p2, bias, M, W->N, W->K, vec);
        break;
    case DT_F16:
        launch(k_matmul<__half, ROWS, EPI>, grd, blk, st, y, x, (const __half *)W->p, (const __half *)p2, bias, M, W->N,
               W->K, vec);
        break;
    default:
        launch(k_matmul<float, ROWS, EPI>, grd, blk, st, y, x, (const float *)W->p, (const float *)p2, bias, M, W->N,
               W->K, vec);
        break;
    }
}

/* Weight tiles per warp of the tensor-core kernel: free to choose (they do
   not enter a row's operations), so they follow the batch width, from the
   per-matrix timings of bench/cuda-ops-bench.c on an H200: up to 8 rows one
   16-row tile (SwiGLU: two gate and two up tiles), 9-16 rows two (each
   activation load then serves twice the weights) but where one tile per
   block fits the grid in one wave at two blocks per SM (o and down of the
   Qwen3 shapes at 9-16 rows: 19-20 us and 49-51 us against 21 and 55-57
   with two tiles; qkv and the LM head, more than one wave, are slower that
   way). g_mma_tiles (1, 2 or 4) forces a count for the op benchmark; 0
   chooses. */
static int g_mma_tiles = 0;
int cu_mma_tiles_force(int n) {
    const int prev = g_mma_tiles;
    g_mma_tiles = n;
    return prev;
}

/* One tile of one row group per block: two blocks fit an SM (registers),
   or three with registers capped for it. A grid of more than two and up
   to three blocks per SM (the qkv projection of the Qwen3 shapes: 384 on
   132 SMs) runs as one wave of the capped kernel instead of one and a half
   waves; the others keep the uncapped one (measured faster for them). One
   tile of two row groups (9-16 rows, see mma_tiles) has its registers
   capped for two blocks per SM (152 would allow one). The choice depends
   on the weight's shape only, and none changes a row's operations. */
template <typename T, int TILES, int MT, int EPI, int OCC>
static void mma_go(dim3 grd, cu_go st, float *y, const float *x, const T *w, const T *w2, const float *bias,
                   int M, const dmat *W, const float *gn, float eps, const cu_qkv_tail &tl, int tiled, cu_cut cut) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value && MT <= 2)
        if (cut.in)
            return launch(k_mma<T, TILES, MT, EPI, OCC, true>, grd, 32 * MMA_KS, st, y, x, w, w2, bias, M, W->N, W->K,
                          gn, eps, tl, tiled, cut, cu_pdl_late(st));
    launch(k_mma<T, TILES, MT, EPI, OCC, false>, grd, 32 * MMA_KS, st, y, x, w, w2, bias, M, W->N, W->K, gn, eps, tl,
           tiled, cut, cu_pdl_late(st));
}

template <typename T, int TILES, int MT, int EPI>
static void mma_launch(cu_go st, float *y, const float *x, int M, const dmat *W, const dmat *W2,
                       const float *bias, const float *gn, float eps, const cu_qkv_tail *tail, cu_cut cut) {
    const cu_qkv_tail tl = tail ? *tail : cu_qkv_tail{};
    constexpr int OT = mm_gated(EPI) ? TILES / 2 : TILES;
    dim3 grd((W->N + OT * 16 - 1) / (OT * 16), (M + MT * 8 - 1) / (MT * 8));
    int blocks = (int)(grd.x * grd.y), sms = sm_count();
    /* the tile-major copies when every matrix of the product has one */
    const int tiled = W->t && (!W2 || W2->t);
    const T *w = (const T *)(tiled ? W->t : W->p), *w2 = W2 ? (const T *)(tiled ? W2->t : W2->p) : NULL;
    /* (see cu_go's two; f16 weights would spill there; GELU's gating keeps
       the one-block kernel, measured for SwiGLU alone) */
    if constexpr (TILES == 4 && MT == 1 && EPI == MM_SWIGLU && std::is_same<T, __nv_bfloat16>::value)
        if (st.two)
            return mma_go<T, TILES, MT, EPI, 2>(grd, st, y, x, w, w2, bias, M, W, gn, eps, tl, tiled, cut);
    if constexpr (TILES == 1 && MT == 2) /* registers capped for two blocks per SM (see mma_tiles) */
        return mma_go<T, TILES, MT, EPI, 2>(grd, st, y, x, w, w2, bias, M, W, gn, eps, tl, tiled, cut);
    if constexpr (TILES * MT == 1) /* (the capped kernel exists for one tile only: others would spill) */
        if (blocks > 2 * sms && blocks <= 3 * sms)
            return mma_go<T, TILES, MT, EPI, 3>(grd, st, y, x, w, w2, bias, M, W, gn, eps, tl, tiled, cut);
    mma_go<T, TILES, MT, EPI, 1>(grd, st, y, x, w, w2, bias, M, W, gn, eps, tl, tiled, cut);
}

template <typename T, int TILES, int EPI>
static void mma_rows(cu_go st, float *y, const float *x, int M, const dmat *W, const dmat *W2,
                     const float *bias, const float *gn, float eps, const cu_qkv_tail *tail, cu_cut cut) {
    if (M <= 8) mma_launch<T, TILES, 1, EPI>(st, y, x, M, W, W2, bias, gn, eps, tail, cut);
    else if (M <= 16) mma_launch<T, TILES, 2, EPI>(st, y, x, M, W, W2, bias, gn, eps, tail, cut);
    else mma_launch<T, 2, 4, EPI>(st, y, x, M, W, W2, bias, gn, eps, tail, cut); /* reduction scratch bounds TILES x MT */
}

/* the tile count mma_tiles takes for M rows of W */
static int mma_tile_count(int M, const dmat *W, int gated) {
    if (g_mma_tiles) return g_mma_tiles;
    /* 9-16 rows of a matrix whose 16-row tiles fit one wave at two blocks
       per SM (o and down of the Qwen3 shapes): one tile per block, the
       register-capped kernel, twice the blocks of two tiles in flight */
    if (!gated && M > 8 && M <= 16 && (W->N + 15) / 16 <= 2 * sm_count()) return 1;
    return gated ? (M <= 8 ? 4 : 2) : (M <= 8 ? 1 : 2);
}

template <typename T, int EPI>
static void mma_tiles(cu_go st, float *y, const float *x, int M, const dmat *W, const dmat *W2,
                      const float *bias, const float *gn, float eps, const cu_qkv_tail *tail = NULL,
                      cu_cut cut = cu_cut{}) {
    int tiles = mma_tile_count(M, W, mm_gated(EPI));
    if (tiles >= 4) mma_rows<T, 4, EPI>(st, y, x, M, W, W2, bias, gn, eps, tail, cut);
    else if constexpr (!mm_gated(EPI)) {
        if (tiles == 1) mma_rows<T, 1, EPI>(st, y, x, M, W, W2, bias, gn, eps, tail, cut);
        else mma_rows<T, 2, EPI>(st, y, x, M, W, W2, bias, gn, eps, tail, cut);
    } else
        mma_rows<T, 2, EPI>(st, y, x, M, W, W2, bias, gn, eps, tail, cut);
}

/* bf16 / f16 weights with K a multiple of 8 (16-byte rows): the
   tensor-core kernel; otherwise (f32 weights, which TF32 would round, or
   odd widths) the FMA kernel, 8 rows per pass or 16. Which one is a
   function of the matrix alone, so every batch width computes a row the
   same way. */
static int fma_forced(const cu_tuning *t) { return t->fma; } /* the FMA kernel everywhere (for comparisons) */

/* the FMA kernel, 8 rows per pass up to 8 rows, else 16 */
template <int EPI>
static void fma_rows(cu_go st, float *y, const float *x, int M, const dmat *W, const dmat *W2,
                     const float *bias) {
    if (M <= 8) matmul_rows<8, EPI>(st, y, x, M, W, W2, bias);
    else matmul_rows<16, EPI>(st, y, x, M, W, W2, bias);
}

template <int EPI>
static void matmul_epi(cu_go st, float *y, const float *x, int M, const dmat *W, const dmat *W2,
                       const float *bias) {
    if constexpr (EPI == MM_GEGLU)
        if (dtype_is_quant(W->dt)) { /* (cu_up_layer runs a quantized GELU MLP apart: never reached) */
            fprintf(stderr, "dspark: CUDA: the quantized matmul has no GELU-gated epilogue (%s)\n", dtype_name(W->dt));
            abort();
        }
    if (dtype_is_quant(W->dt)) cu_qmatmul(st, EPI, y, x, M, W, W2, bias); /* (cuda_quant.cu) */
    else if (!fma_forced(st.t) && W->K % 8 == 0 && W->dt == DT_BF16) mma_tiles<__nv_bfloat16, EPI>(st, y, x, M, W, W2, bias, NULL, 0);
    else if (!fma_forced(st.t) && W->K % 8 == 0 && W->dt == DT_F16) mma_tiles<__half, EPI>(st, y, x, M, W, W2, bias, NULL, 0);
    else fma_rows<EPI>(st, y, x, M, W, W2, bias);
}

int cu_fuses_norm(const cu_tuning *t, const dmat *W) {
    return !fma_forced(t) && W->K % 8 == 0 && (W->dt == DT_BF16 || W->dt == DT_F16);
}

/* bf16 weights from a pre-cut input c.in (c.r: the scales of a norm run
   apart; c.out: a gated epilogue's pre-cut copy of its output) */
static void mma_from_cut(cu_go st, int epi, float *y, int M, const dmat *W, const dmat *W2, const float *bias,
                         cu_cut c) {
    if (epi == MM_SWIGLU) mma_tiles<__nv_bfloat16, MM_SWIGLU>(st, y, NULL, M, W, W2, NULL, NULL, 0.0f, NULL, c);
    else if (epi == MM_GEGLU) mma_tiles<__nv_bfloat16, MM_GEGLU>(st, y, NULL, M, W, W2, NULL, NULL, 0.0f, NULL, c);
    else if (epi == MM_ADD) mma_tiles<__nv_bfloat16, MM_ADD>(st, y, NULL, M, W, NULL, bias, NULL, 0.0f, NULL, c);
    else mma_tiles<__nv_bfloat16, MM_STORE>(st, y, NULL, M, W, NULL, bias, NULL, 0.0f, NULL, c);
}

int cu_matmul_norm_qkv(cu_go st, float *y, const float *x, int M, const dmat *W, const float *bias,
                       const float *gn, float eps, const cu_qkv_tail *t) {
    if (!st.t->qkv_tail || !cu_fuses_norm(st.t, W) || M < 1 || M > 16 || t->a.hd % (16 * mma_tile_count(M, W, 0)) ||
        t->a.hd > ATT_MAX_HD)
        return 0;
    if (W->dt == DT_BF16) mma_tiles<__nv_bfloat16, MM_STORE>(st, y, x, M, W, NULL, bias, gn, eps, t);
    else mma_tiles<__half, MM_STORE>(st, y, x, M, W, NULL, bias, gn, eps, t);
    return 1;
}

template <int EPI>
static void matmul_norm(cu_go st, float *y, const float *x, int M, const dmat *W, const dmat *W2,
                        const float *bias, const float *gn, float eps, cu_cut cut = cu_cut{}) {
    if (W->dt == DT_BF16) mma_tiles<__nv_bfloat16, EPI>(st, y, x, M, W, W2, bias, gn, eps, NULL, cut);
    else mma_tiles<__half, EPI>(st, y, x, M, W, W2, bias, gn, eps, NULL, cut);
}
void cu_matmul_norm(cu_go st, float *y, const float *x, int M, const dmat *W, const float *bias,
                    const float *gn, float eps) {
    matmul_norm<MM_STORE>(st, y, x, M, W, NULL, bias, gn, eps);
}
void cu_matmul_swiglu_norm(cu_go st, float *y, const float *x, int M, const dmat *Wg, const dmat *Wu,
                           const float *gn, float eps, uint32_t *yc) {
    matmul_norm<MM_SWIGLU>(st, y, x, M, Wg, Wu, NULL, gn, eps, cu_cut{NULL, yc});
}

int cu_takes_cut(const cu_tuning *t, const dmat *W, int M) {
    return !fma_forced(t) && W->K % 8 == 0 && W->dt == DT_BF16 && M >= 1 && M <= CU_CUT_ROWS;
}
int cu_layer_takes_cut(const cu_tuning *t, cu_gemm *g, const dmat *W, int M) {
    return t->cut && cu_takes_cut(t, W, M) && !cu_gemm_takes(g, W, M);
}
int cu_matmul_add_cut(cu_go st, float *y, const uint32_t *xc, int M, const dmat *W, const float *bias) {
    if (!cu_takes_cut(st.t, W, M)) return -1;
    mma_from_cut(st, MM_ADD, y, M, W, NULL, bias, cu_cut{xc, NULL, NULL});
    return 0;
}
int cu_matmul_cut(cu_go st, float *y, const uint32_t *xc, int M, const dmat *W, const float *r) {
    if (!cu_takes_cut(st.t, W, M)) return -1;
    mma_from_cut(st, MM_STORE, y, M, W, NULL, NULL, cu_cut{xc, NULL, r});
    return 0;
}

int cu_layer_matmul(cu_go st, cu_gemm *g, int epi, float *y, const float *x, int M, const dmat *W,
                    const dmat *W2, const float *bias, const float *gn, float eps, float *xb, cu_cut cut) {
    /* a pre-cut input: a plain product's or a residual add's (no norm), or
       a norm run apart by cu_norm_cut (its scales in cut.r) */
    if (cut.in && (gn ? cut.r != NULL : !mm_gated(epi)) && cu_layer_takes_cut(st.t, g, W, M)) {
        const cu_cut c = {cut.in, mm_gated(epi) ? cut.out : NULL, gn ? cut.r : NULL};
        mma_from_cut(st, epi, y, M, W, W2, bias, c);
        return c.out != NULL;
    }
    int Mg = cu_gemm_takes(g, W, M);
    if (Mg) cu_gemm_matmul(g, st, epi, y, x, Mg, W, W2, bias, gn, eps);
    if (Mg == M) return 0;
    y += (size_t)Mg * W->N;
    x += (size_t)Mg * W->K;
    M -= Mg;
    if (gn && cu_fuses_norm(st.t, W)) {
        uint32_t *yc = mm_gated(epi) && !Mg ? cut.out : NULL; /* (its rows would start past the groups') */
        if (epi == MM_SWIGLU) cu_matmul_swiglu_norm(st, y, x, M, W, W2, gn, eps, yc);
        else if (epi == MM_GEGLU) matmul_norm<MM_GEGLU>(st, y, x, M, W, W2, NULL, gn, eps, cu_cut{NULL, yc});
        else cu_matmul_norm(st, y, x, M, W, bias, gn, eps);
        return yc != NULL;
    }
    if (gn) {
        cu_rmsnorm(st, xb, x, gn, M, W->K, eps);
        x = xb;
    }
    if (epi == MM_SWIGLU) cu_matmul_swiglu(st, y, x, M, W, W2);
    else if (epi == MM_GEGLU) matmul_epi<MM_GEGLU>(st, y, x, M, W, W2, NULL);
    else if (epi == MM_ADD) cu_matmul_add(st, y, x, M, W, bias);
    else cu_matmul(st, y, x, M, W, bias);
    return 0;
}

void cu_matmul(cu_go st, float *y, const float *x, int M, const dmat *W, const float *bias) {
    matmul_epi<MM_STORE>(st, y, x, M, W, NULL, bias);
}
void cu_matmul_add(cu_go st, float *y, const float *x, int M, const dmat *W, const float *bias) {
    matmul_epi<MM_ADD>(st, y, x, M, W, NULL, bias);
}
void cu_matmul_swiglu(cu_go st, float *y, const float *x, int M, const dmat *Wg, const dmat *Wu) {
    matmul_epi<MM_SWIGLU>(st, y, x, M, Wg, Wu, NULL);
}

/* the FMA kernel alone (the op benchmark's mode 3) */
void cu_matmul_fma(cu_go st, float *y, const float *x, int M, const dmat *W) {
    fma_rows<MM_STORE>(st, y, x, M, W, NULL, NULL);
}
