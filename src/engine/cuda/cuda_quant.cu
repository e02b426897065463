// cuda_quant: the quantized weight formats on the device (tensor.h's GGUF
// block types and MLX affine; engine/quant.h states the formats and the
// CPU contract): their upload, the matmul over them and the embedding
// gather. The declarations are in cuda_ops.cuh, beside dmat.
//
// Numerics (the CPU contract of quant.h, on the GPU): a weight is
// dequantized exactly as its format defines it, in f32, with the f32
// operations in ggml's order and never fused (__fmul_rn, __fsub_rn: an FMA
// would round once where the format rounds twice), so a dequantized weight
// has the bits quant_row_f32 gives it. Activations stay f32. The dot
// product of a row is summed by one warp: lane l takes the 8-element
// chunks l, l + 32, l + 64, ... of the row in order, each chunk's 8
// products added in element order by fmaf, then the warp's 32 partials by
// the xor butterfly (warp_sum), then the bias. Nothing in that sequence
// depends on M, on the rows that share a launch, on the weight rows a
// warp takes or on the grid: a row's bits are the same in a batch of 16 as
// alone (batch invariance; tests/cuda and tests/cuemu/quant.cc check it).
//
// One kernel serves every batch width, decode and verify (1-16 rows) and
// prefill (more rows, in groups of 16 along the grid's y): each weight
// chunk is read once per launch for a group of up to 16 rows and applied to
// all of them. Prefill-sized batches thus read each weight ceil(M/16) times
// (from L2 where the matrix fits it) and run on FMA units: correct and
// batch-invariant, not fast. The faster prefill path (a weight tile
// dequantized to a bf16 head and tail in shared memory feeding the
// tensor-core mma, or whole matrices dequantized into a scratch for
// cuBLAS) may differ in bits only for rows past CU_CUT_ROWS; it is not
// written yet.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdio.h>
#include <string.h>

#include "engine/cuda/cuda_ops.cuh"

/* ---- geometry (host) ------------------------------------------------------ */

/* elements and bytes of a GGUF block (quant.h's quant_block_elems and
   quant_block_bytes, kept here so the backend does not depend on the CPU
   kernels' object) */
static int qk_elems(ds_dtype t) {
    switch (t) {
    case DT_Q8_0: case DT_Q4_0: case DT_Q4_1: case DT_Q5_0: case DT_Q5_1: return 32;
    case DT_Q2_K: case DT_Q3_K: case DT_Q4_K: case DT_Q5_K: case DT_Q6_K: return 256;
    default: return 0;
    }
}
static size_t qk_bytes(ds_dtype t) {
    switch (t) {
    case DT_Q8_0: return 34;
    case DT_Q4_0: return 18;
    case DT_Q4_1: return 20;
    case DT_Q5_0: return 22;
    case DT_Q5_1: return 24;
    case DT_Q2_K: return 84;
    case DT_Q3_K: return 110;
    case DT_Q4_K: return 144;
    case DT_Q5_K: return 176;
    case DT_Q6_K: return 210;
    default: return 0;
    }
}

size_t cu_q_row_bytes(ds_dtype dt, int bits, int K) {
    if (dt == DT_MLX) return (size_t)K * (size_t)bits / 8;
    const int qk = qk_elems(dt);
    return qk ? (size_t)(K / qk) * qk_bytes(dt) : 0;
}

static size_t sb_size(ds_dtype t) { return t == DT_F32 ? 4 : 2; }

dmat cu_qmat_rows(const dmat *W, int r0, int n) {
    dmat v = *W;
    v.N = n;
    v.t = NULL;
    v.nsub = 0;
    v.sub = NULL;
    v.p = (char *)W->p + (size_t)r0 * cu_q_row_bytes(W->dt, W->bits, W->K);
    if (W->dt == DT_MLX) {
        const size_t o = (size_t)r0 * (size_t)(W->K / W->group) * sb_size(W->sdt);
        v.sc = (char *)W->sc + o;
        v.bi = (char *)W->bi + o;
    }
    return v;
}

int cu_q_geometry(const tensor *t, char *err, size_t errlen) {
    if (t->ndim != 2 || t->shape[0] < 1 || t->shape[1] < 1 || t->shape[0] > INT32_MAX || t->shape[1] > INT32_MAX)
        return ds_err(err, errlen, "CUDA: %s: a quantized tensor must be a 2-D matrix", t->name);
    const int64_t N = t->shape[0], K = t->shape[1];
    int bits = 0;
    if (t->dtype == DT_MLX) {
        bits = t->q.bits;
        const int g = t->q.group;
        if (bits != 2 && bits != 3 && bits != 4 && bits != 5 && bits != 6 && bits != 8)
            return ds_err(err, errlen, "CUDA: %s: MLX bits %d (2, 3, 4, 5, 6 or 8 taken)", t->name, bits);
        if (g != 32 && g != 64 && g != 128)
            return ds_err(err, errlen, "CUDA: %s: MLX group %d (32, 64 or 128 taken)", t->name, g);
        if (K % g) return ds_err(err, errlen, "CUDA: %s: %lld columns, not a multiple of the group %d", t->name, (long long)K, g);
        if (!t->q.scales || !t->q.biases)
            return ds_err(err, errlen, "CUDA: %s: MLX scales or biases missing", t->name);
        if (t->q.sdtype != DT_F32 && t->q.sdtype != DT_F16 && t->q.sdtype != DT_BF16)
            return ds_err(err, errlen, "CUDA: %s: MLX scales in %s (f32, f16 or bf16 taken)", t->name,
                          dtype_name(t->q.sdtype));
    } else {
        const int qk = qk_elems(t->dtype);
        if (!qk) return ds_err(err, errlen, "CUDA: %s: dtype %s is no quantized format", t->name, dtype_name(t->dtype));
        if (K % qk)
            return ds_err(err, errlen, "CUDA: %s: %lld columns, not a multiple of %s's block of %d", t->name,
                          (long long)K, dtype_name(t->dtype), qk);
    }
    const size_t want = (size_t)N * cu_q_row_bytes(t->dtype, bits, (int)K);
    if (t->nbytes != want)
        return ds_err(err, errlen, "CUDA: %s: %zu bytes, %zu expected for %s [%lld][%lld]", t->name, t->nbytes, want,
                      dtype_name(t->dtype), (long long)N, (long long)K);
    return 0;
}

int cu_up_qmat(dev_pool *pl, dmat *d, const tensor *t, char *err, size_t errlen) {
    if (cu_q_geometry(t, err, errlen)) return -1;
    memset(d, 0, sizeof *d);
    d->dt = t->dtype;
    d->N = (int)t->shape[0];
    d->K = (int)t->shape[1];
    if (cu_dev_alloc(pl, &d->p, t->nbytes, err, errlen)) return -1;
    CK(cudaMemcpy(d->p, t->data, t->nbytes, cudaMemcpyHostToDevice));
    if (t->dtype != DT_MLX) return 0;
    d->bits = t->q.bits;
    d->group = t->q.group;
    d->sdt = t->q.sdtype;
    const size_t sb = (size_t)d->N * (size_t)(d->K / d->group) * sb_size(d->sdt);
    if (cu_dev_alloc(pl, &d->sc, sb, err, errlen) || cu_dev_alloc(pl, &d->bi, sb, err, errlen)) return -1;
    CK(cudaMemcpy(d->sc, t->q.scales, sb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d->bi, t->q.biases, sb, cudaMemcpyHostToDevice));
    return 0;
}

int cu_q_same_format(const dmat *a, const dmat *b) {
    return a->dt == b->dt && a->K == b->K &&
           (a->dt != DT_MLX || (a->bits == b->bits && a->group == b->group && a->sdt == b->sdt));
}

/* ---- dequantization (device) ---------------------------------------------- */

/* The kernels' format tag: the GGUF dtype, or QT_MLX + bits. */
#define QT_MLX 100

/* what a kernel reads of one matrix: its rows (rb bytes apart) and, for
   MLX, the scales and biases ([N][gpr] in sdt) and the group size */
struct qw {
    const uint8_t *p;
    size_t rb;
    const void *sc, *bi;
    int gpr, group, sdt;
};

static qw qw_of(const dmat *W) {
    qw q = {(const uint8_t *)W->p, cu_q_row_bytes(W->dt, W->bits, W->K), W->sc, W->bi, 0, 0, (int)W->sdt};
    if (W->dt == DT_MLX) {
        q.group = W->group;
        q.gpr = W->K / W->group;
    }
    return q;
}

__device__ __forceinline__ float q_f16(const uint8_t *p) { /* p 2-byte aligned */
    return __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short *>(p))));
}
__device__ __forceinline__ uint32_t q_u8(const uint8_t *p) { return __ldg(p); }
__device__ __forceinline__ uint32_t q_u16(const uint8_t *p) { return __ldg(reinterpret_cast<const unsigned short *>(p)); }
__device__ __forceinline__ uint32_t q_u32(const uint8_t *p) { return __ldg(reinterpret_cast<const unsigned *>(p)); }
/* 8 bytes at p (2-, 4- or 8-byte aligned, A) as two little-endian words */
template <int A>
__device__ __forceinline__ void q_ld8(const uint8_t *p, uint32_t &lo, uint32_t &hi) {
    if constexpr (A >= 8) {
        const uint2 v = __ldg(reinterpret_cast<const uint2 *>(p));
        lo = v.x, hi = v.y;
    } else if constexpr (A == 4) {
        lo = q_u32(p), hi = q_u32(p + 4);
    } else {
        lo = q_u16(p) | q_u16(p + 2) << 16;
        hi = q_u16(p + 4) | q_u16(p + 6) << 16;
    }
}
/* byte i (0..7) of the pair */
__device__ __forceinline__ uint32_t q_byte(uint32_t lo, uint32_t hi, int i) { return ((i < 4 ? lo : hi) >> (8 * (i & 3))) & 255u; }

/* w = d * q, w = d * q + m, w = d * q - m: the format's two roundings */
__device__ __forceinline__ float q_dq(float d, int q) { return __fmul_rn(d, (float)q); }
__device__ __forceinline__ float q_dqm(float d, int q, float m) { return __fadd_rn(__fmul_rn(d, (float)q), m); }
__device__ __forceinline__ float q_dqs(float d, int q, float m) { return __fsub_rn(__fmul_rn(d, (float)q), m); }

/* the 6-bit scale and min of sub-block s of a Q4_K / Q5_K super-block
   (their 12 scale bytes at s12) */
__device__ __forceinline__ void q_k4_sm(const uint8_t *s12, int s, int &sc, int &mn) {
    if (s < 4) {
        sc = (int)(q_u8(s12 + s) & 63);
        mn = (int)(q_u8(s12 + s + 4) & 63);
    } else {
        const uint32_t a = q_u8(s12 + s + 4);
        sc = (int)((a & 15) | (q_u8(s12 + s - 4) >> 6) << 4);
        mn = (int)((a >> 4) | (q_u8(s12 + s) >> 6) << 4);
    }
}

__device__ __forceinline__ float q_sb(const void *p, int sdt, size_t i) {
    if (sdt == DT_F32) return __ldg(reinterpret_cast<const float *>(p) + i);
    const unsigned short u = __ldg(reinterpret_cast<const unsigned short *>(p) + i);
    return sdt == DT_BF16 ? __uint_as_float((uint32_t)u << 16) : __half2float(__ushort_as_half(u));
}

/* Elements 8c .. 8c + 7 of row n of w, dequantized exactly into v. */
template <int QT>
__device__ __forceinline__ void deq8(const qw &w, int n, int c, float (&v)[8]) {
    const uint8_t *row = w.p + (size_t)n * w.rb;
    if constexpr (QT > QT_MLX) {
        constexpr int B = QT - QT_MLX;
        const uint8_t *p = row + (size_t)c * B; /* the chunk's B bytes: its 8 elements from the low bit up */
        uint64_t bitsv;
        if constexpr (B == 8) {
            const uint2 t = __ldg(reinterpret_cast<const uint2 *>(p));
            bitsv = t.x | (uint64_t)t.y << 32;
        } else if constexpr (B == 4) {
            bitsv = q_u32(p);
        } else if constexpr (B == 2) {
            bitsv = q_u16(p);
        } else if constexpr (B == 6) {
            bitsv = q_u16(p) | (uint64_t)q_u16(p + 2) << 16 | (uint64_t)q_u16(p + 4) << 32;
        } else {
            bitsv = 0;
#pragma unroll
            for (int i = 0; i < B; i++) bitsv |= (uint64_t)q_u8(p + i) << (8 * i);
        }
        const size_t g = (size_t)n * w.gpr + (size_t)(8 * c) / w.group;
        const float s = q_sb(w.sc, w.sdt, g), b = q_sb(w.bi, w.sdt, g);
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = q_dqm(s, (int)((bitsv >> (B * j)) & ((1u << B) - 1)), b);
    } else if constexpr (QT == DT_Q8_0 || QT == DT_Q4_0 || QT == DT_Q4_1 || QT == DT_Q5_0 || QT == DT_Q5_1) {
        /* 32-element blocks: chunk c is part c % 4 of block c / 4 */
        constexpr int BB = QT == DT_Q8_0 ? 34 : QT == DT_Q4_0 ? 18 : QT == DT_Q4_1 ? 20 : QT == DT_Q5_0 ? 22 : 24;
        const uint8_t *b = row + (size_t)(c >> 2) * BB;
        const int part = c & 3;
        const float d = q_f16(b);
        if constexpr (QT == DT_Q8_0) {
            uint32_t lo, hi;
            q_ld8<2>(b + 2 + 8 * part, lo, hi);
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = q_dq(d, (int)(int8_t)q_byte(lo, hi, j));
        } else {
            /* nibbles: element e < 16 the low nibble of qs[e], e >= 16 the
               high nibble of qs[e - 16]; the 5-bit types' bit 4 is bit e of qh */
            constexpr int QS = QT == DT_Q4_0 ? 2 : QT == DT_Q4_1 ? 4 : QT == DT_Q5_0 ? 6 : 8;
            uint32_t lo, hi;
            q_ld8<QT == DT_Q4_1 || QT == DT_Q5_1 ? 4 : 2>(b + QS + 8 * (part & 1), lo, hi);
            const int sh = (part >> 1) * 4;
            uint32_t qh = 0;
            if constexpr (QT == DT_Q5_0) qh = q_u16(b + 2) | q_u16(b + 4) << 16;
            if constexpr (QT == DT_Q5_1) qh = q_u32(b + 4);
            float m = 0.0f;
            if constexpr (QT == DT_Q4_1 || QT == DT_Q5_1) m = q_f16(b + 2);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                int q = (int)((q_byte(lo, hi, j) >> sh) & 15);
                if constexpr (QT == DT_Q5_0 || QT == DT_Q5_1) q |= (int)((qh >> (8 * part + j)) & 1) << 4;
                if constexpr (QT == DT_Q4_0) v[j] = q_dq(d, q - 8);
                else if constexpr (QT == DT_Q5_0) v[j] = q_dq(d, q - 16);
                else v[j] = q_dqm(d, q, m);
            }
        }
    } else {
        /* 256-element super-blocks: chunk c is part c % 32 of block c / 32 */
        constexpr int BB = QT == DT_Q2_K ? 84 : QT == DT_Q3_K ? 110 : QT == DT_Q4_K ? 144 : QT == DT_Q5_K ? 176 : 210;
        const uint8_t *b = row + (size_t)(c >> 5) * BB;
        const int e0 = (c & 31) * 8; /* the chunk's first element in the block */
        if constexpr (QT == DT_Q2_K || QT == DT_Q3_K) {
            /* element e: h = e / 128, j = e / 32 % 4, l = e % 32; bits 2j of
               qs[32h + l]; sub-block 8h + 2j + l / 16 */
            const int h = e0 >> 7, j = (e0 >> 5) & 3, l0 = e0 & 31, s = h * 8 + j * 2 + (l0 >> 4);
            uint32_t lo, hi;
            q_ld8<QT == DT_Q2_K ? 4 : 2>(b + (QT == DT_Q2_K ? 16 : 32) + h * 32 + l0, lo, hi);
            if constexpr (QT == DT_Q2_K) {
                const uint32_t sc = q_u8(b + s);
                const float dl = __fmul_rn(q_f16(b + 80), (float)(sc & 15)), ml = __fmul_rn(q_f16(b + 82), (float)(sc >> 4));
#pragma unroll
                for (int i = 0; i < 8; i++) v[i] = q_dqs(dl, (int)((q_byte(lo, hi, i) >> (2 * j)) & 3), ml);
            } else {
                /* 6-bit signed scales: low 4 bits from scales[s % 8] (low or
                   high nibble), top 2 from scales[8 + s % 4] */
                const uint8_t *s12 = b + 96;
                const int lo4 = (int)(s < 8 ? q_u8(s12 + s) & 15 : q_u8(s12 + s - 8) >> 4);
                const int hi2 = (int)((q_u8(s12 + 8 + (s & 3)) >> (2 * (s >> 2))) & 3);
                const float dl = __fmul_rn(q_f16(b + 108), (float)((lo4 | hi2 << 4) - 32));
                uint32_t mlo, mhi;
                q_ld8<2>(b + l0, mlo, mhi);
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    int q = (int)((q_byte(lo, hi, i) >> (2 * j)) & 3);
                    if (!((q_byte(mlo, mhi, i) >> (h * 4 + j)) & 1)) q -= 4;
                    v[i] = q_dq(dl, q);
                }
            }
        } else if constexpr (QT == DT_Q4_K || QT == DT_Q5_K) {
            /* sub-block s = e / 32: nibble (s % 2) of qs[32 (s / 2) + e % 32];
               Q5_K's bit 4: bit s of qh[e % 32] */
            const int s = e0 >> 5, l0 = e0 & 31;
            int sc, mn;
            q_k4_sm(b + 4, s, sc, mn);
            const uint32_t dd = q_u32(b);
            const float d = __half2float(__ushort_as_half((unsigned short)(dd & 0xffff)));
            const float dmin = __half2float(__ushort_as_half((unsigned short)(dd >> 16)));
            const float dl = __fmul_rn(d, (float)sc), ml = __fmul_rn(dmin, (float)mn);
            constexpr int QS = QT == DT_Q4_K ? 16 : 48;
            uint32_t lo, hi, hlo = 0, hhi = 0;
            q_ld8<8>(b + QS + 32 * (s >> 1) + l0, lo, hi);
            if constexpr (QT == DT_Q5_K) q_ld8<8>(b + 16 + l0, hlo, hhi);
            const int sh = (s & 1) * 4;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                int q = (int)((q_byte(lo, hi, i) >> sh) & 15);
                if constexpr (QT == DT_Q5_K) q |= (int)((q_byte(hlo, hhi, i) >> s) & 1) << 4;
                v[i] = q_dqs(dl, q, ml);
            }
        } else { /* Q6_K */
            /* element e: h = e / 128, i = e / 32 % 4, l = e % 32; the low 4
               bits nibble i / 2 of ql[64h + l + 32 (i % 2)], the top 2 bits
               2i of qh[32h + l]; w = (d sc[e / 16]) (q - 32) */
            const int h = e0 >> 7, i4 = (e0 >> 5) & 3, l0 = e0 & 31;
            uint32_t lo, hi, hlo, hhi;
            q_ld8<2>(b + 64 * h + l0 + 32 * (i4 & 1), lo, hi);
            q_ld8<2>(b + 128 + 32 * h + l0, hlo, hhi);
            const float dl = __fmul_rn(q_f16(b + 208), (float)(int8_t)q_u8(b + 192 + (e0 >> 4)));
            const int sh = 4 * (i4 >> 1);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int q = (int)((q_byte(lo, hi, i) >> sh) & 15) | (int)((q_byte(hlo, hhi, i) >> (2 * i4)) & 3) << 4;
                v[i] = q_dq(dl, q - 32);
            }
        }
    }
}

/* ---- the matmul ------------------------------------------------------------ */

#define QM_WARPS 4 /* warps a block; each takes R weight rows (and their up rows for SwiGLU) */

/* y[m][n] (ldy apart) for the rows m0 .. m0 + MT - 1 of the launch (M in
   all) and weight rows n of warp's R: MM_STORE y = x.W^T (+ b), MM_ADD
   y += x.W^T (+ b), MM_SWIGLU y = silu(x.W^T) * (x.W2^T) (the formulas of
   k_matmul's epilogue). See the top of the file for the summation order. */
template <int QT, int R, int MT, int EPI>
__global__ void __launch_bounds__(32 * QM_WARPS) k_qmm(float *__restrict__ y, int ldy, const float *__restrict__ x,
                                                       int M, int N, int K, qw w, qw w2,
                                                       const float *__restrict__ bias) {
    pdl_trigger();
    pdl_wait();
    constexpr int NR = EPI == MM_SWIGLU ? 2 * R : R;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n0 = (blockIdx.x * QM_WARPS + warp) * R, m0 = blockIdx.y * MT;
    if (n0 >= N) return; /* (no barrier follows) */
    const int rows = M - m0 < MT ? M - m0 : MT;
    float acc[NR][MT];
#pragma unroll
    for (int r = 0; r < NR; r++)
#pragma unroll
        for (int m = 0; m < MT; m++) acc[r][m] = 0.0f;
    const int C = K / 8;
#pragma unroll(MT <= 2 ? 2 : 1)
    for (int c = lane; c < C; c += 32) {
        float wv[NR][8];
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const int n = n0 + r % R < N ? n0 + r % R : N - 1; /* (a row past N: computed, dropped) */
            deq8<QT>(r < R ? w : w2, n, c, wv[r]);
        }
#pragma unroll
        for (int m = 0; m < MT; m++) {
            if (m < rows) {
                const float4 *xp = reinterpret_cast<const float4 *>(x + (size_t)(m0 + m) * K + (size_t)c * 8);
                const float4 a = xp[0], b = xp[1];
                const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
                for (int r = 0; r < NR; r++)
#pragma unroll
                    for (int j = 0; j < 8; j++) acc[r][m] = fmaf(xv[j], wv[r][j], acc[r][m]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < MT; m++) {
        if (m >= rows) continue;
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float s = warp_sum(acc[r][m]);
            float u = 0.0f;
            if constexpr (EPI == MM_SWIGLU) u = warp_sum(acc[R + r][m]);
            const int n = n0 + r;
            if (lane != 0 || n >= N) continue;
            float *dst = y + (size_t)(m0 + m) * ldy + n;
            if constexpr (EPI == MM_SWIGLU) {
                *dst = s / (1.0f + expf(-s)) * u;
            } else {
                const float v = bias ? s + bias[n] : s;
                if constexpr (EPI == MM_ADD) *dst += v;
                else *dst = v;
            }
        }
    }
}

/* weight rows a warp takes and rows of x a block: one weight row a warp at
   one row of x (the most warps streaming), two from 2 rows on (each x load
   serves two rows); 8 or 16 rows of x a block (the registers of 16 x 2 x 2
   accumulators for a SwiGLU fit). None of it enters a row's sums. */
template <int QT, int EPI>
static void qmm_launch(cu_go st, float *y, int ldy, const float *x, int M, int N, int K, const qw &w, const qw &w2,
                       const float *bias) {
    const dim3 blk(32 * QM_WARPS);
    if (M == 1) {
        const dim3 grd((N + QM_WARPS - 1) / QM_WARPS, 1);
        launch(k_qmm<QT, 1, 1, EPI>, grd, blk, st, y, ldy, x, M, N, K, w, w2, bias);
    } else if (M <= 8) {
        const dim3 grd((N + 2 * QM_WARPS - 1) / (2 * QM_WARPS), 1);
        launch(k_qmm<QT, 2, 8, EPI>, grd, blk, st, y, ldy, x, M, N, K, w, w2, bias);
    } else {
        const dim3 grd((N + 2 * QM_WARPS - 1) / (2 * QM_WARPS), (M + 15) / 16);
        launch(k_qmm<QT, 2, 16, EPI>, grd, blk, st, y, ldy, x, M, N, K, w, w2, bias);
    }
}

template <int EPI>
static void qmm_type(cu_go st, float *y, int ldy, const float *x, int M, const dmat *W, const dmat *W2,
                     const float *bias) {
    const qw w = qw_of(W), w2 = W2 ? qw_of(W2) : w;
    const int N = W->N, K = W->K;
    switch (W->dt) {
    case DT_Q8_0: return qmm_launch<DT_Q8_0, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
    case DT_Q4_0: return qmm_launch<DT_Q4_0, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
    case DT_Q4_1: return qmm_launch<DT_Q4_1, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
    case DT_Q5_0: return qmm_launch<DT_Q5_0, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
    case DT_Q5_1: return qmm_launch<DT_Q5_1, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
    case DT_Q2_K: return qmm_launch<DT_Q2_K, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
    case DT_Q3_K: return qmm_launch<DT_Q3_K, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
    case DT_Q4_K: return qmm_launch<DT_Q4_K, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
    case DT_Q5_K: return qmm_launch<DT_Q5_K, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
    case DT_Q6_K: return qmm_launch<DT_Q6_K, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
    case DT_MLX:
        switch (W->bits) {
        case 2: return qmm_launch<QT_MLX + 2, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
        case 3: return qmm_launch<QT_MLX + 3, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
        case 4: return qmm_launch<QT_MLX + 4, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
        case 5: return qmm_launch<QT_MLX + 5, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
        case 6: return qmm_launch<QT_MLX + 6, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
        default: return qmm_launch<QT_MLX + 8, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
        }
    default: return; /* (cu_up_qmat admits no other) */
    }
}

void cu_qmatmul(cu_go st, int epi, float *y, const float *x, int M, const dmat *W, const dmat *W2,
                const float *bias) {
    if (M < 1) return;
    if (W->nsub) {
        /* a stack of parts in different formats (never a SwiGLU's): each
           part's columns of y in turn, the same kernels as a matrix alone */
        int c0 = 0;
        for (int i = 0; i < W->nsub; i++) {
            const dmat *P = &W->sub[i];
            if (epi == MM_ADD) qmm_type<MM_ADD>(st, y + c0, W->N, x, M, P, NULL, bias ? bias + c0 : NULL);
            else qmm_type<MM_STORE>(st, y + c0, W->N, x, M, P, NULL, bias ? bias + c0 : NULL);
            c0 += P->N;
        }
        return;
    }
    if (epi == MM_SWIGLU) qmm_type<MM_SWIGLU>(st, y, W->N, x, M, W, W2, NULL);
    else if (epi == MM_ADD) qmm_type<MM_ADD>(st, y, W->N, x, M, W, NULL, bias);
    else qmm_type<MM_STORE>(st, y, W->N, x, M, W, NULL, bias);
}

/* ---- a SwiGLU apart ----------------------------------------------------------- */

__global__ void k_swiglu_apart(float *g, const float *u, size_t n) {
    pdl_trigger();
    pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float a = g[i];
        g[i] = __fdiv_rn(a, __fadd_rn(1.0f, expf(-a))) * u[i];
    }
}

void cu_swiglu_apart(cu_go st, float *g, const float *u, size_t n) {
    if (!n) return;
    size_t blocks = (n + 255) / 256;
    launch(k_swiglu_apart, (int)(blocks < 4096 ? blocks : 4096), 256, st, g, u, n);
}

/* ---- the embedding gather ---------------------------------------------------- */

/* a block a row: out[m] = row tok[m] of E dequantized (the same values as
   the matmul's weights) */
template <int QT>
__global__ void k_qembed(float *out, qw e, const int *tok, int H) {
    pdl_trigger();
    pdl_wait();
    const int m = blockIdx.x, t = tok[m];
    float *o = out + (size_t)m * H;
    for (int c = threadIdx.x; c < H / 8; c += blockDim.x) {
        float v[8];
        deq8<QT>(e, t, c, v);
#pragma unroll
        for (int j = 0; j < 8; j++) o[8 * c + j] = v[j];
    }
}

void cu_qembed(cu_go st, float *out, const dmat *E, const int *tok, int M) {
    const qw e = qw_of(E);
    const int H = E->K;
    switch (E->dt) {
    case DT_Q8_0: return launch(k_qembed<DT_Q8_0>, M, 128, st, out, e, tok, H);
    case DT_Q4_0: return launch(k_qembed<DT_Q4_0>, M, 128, st, out, e, tok, H);
    case DT_Q4_1: return launch(k_qembed<DT_Q4_1>, M, 128, st, out, e, tok, H);
    case DT_Q5_0: return launch(k_qembed<DT_Q5_0>, M, 128, st, out, e, tok, H);
    case DT_Q5_1: return launch(k_qembed<DT_Q5_1>, M, 128, st, out, e, tok, H);
    case DT_Q2_K: return launch(k_qembed<DT_Q2_K>, M, 128, st, out, e, tok, H);
    case DT_Q3_K: return launch(k_qembed<DT_Q3_K>, M, 128, st, out, e, tok, H);
    case DT_Q4_K: return launch(k_qembed<DT_Q4_K>, M, 128, st, out, e, tok, H);
    case DT_Q5_K: return launch(k_qembed<DT_Q5_K>, M, 128, st, out, e, tok, H);
    case DT_Q6_K: return launch(k_qembed<DT_Q6_K>, M, 128, st, out, e, tok, H);
    case DT_MLX:
        switch (E->bits) {
        case 2: return launch(k_qembed<QT_MLX + 2>, M, 128, st, out, e, tok, H);
        case 3: return launch(k_qembed<QT_MLX + 3>, M, 128, st, out, e, tok, H);
        case 4: return launch(k_qembed<QT_MLX + 4>, M, 128, st, out, e, tok, H);
        case 5: return launch(k_qembed<QT_MLX + 5>, M, 128, st, out, e, tok, H);
        case 6: return launch(k_qembed<QT_MLX + 6>, M, 128, st, out, e, tok, H);
        default: return launch(k_qembed<QT_MLX + 8>, M, 128, st, out, e, tok, H);
        }
    default: return;
    }
}
