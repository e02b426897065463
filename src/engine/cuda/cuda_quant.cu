// cuda_quant: the quantized weight formats on the device (tensor.h's GGUF
// block types and MLX affine; engine/quant.h states the formats and the
// CPU contract): their upload, the matmul over them and the embedding
// gather. The declarations are in cuda_ops.cuh, beside dmat.
//
// Three paths, by what the rows are:
//
// - Decode and verify rows, and every row outside the prefill groups:
//   one tensor-core kernel family for every width (k_qmma; its step forms,
//   whose loads are few and wide: k_qmma_sb for the K-quants' super-blocks
//   and MLX 4/8-bit, k_qmma_st for the 32-element block types staged
//   through shared memory; which one a matrix takes depends on its format
//   and K alone, never on the rows). Each block's
//   integers (exact in bf16) are mma.sync's weight operand, the f32
//   activations are cut into bf16 heads and tails, and each sub-block's
//   f32 sum is scaled by its f32 scale (and its min times the activations'
//   sum added) in an order fixed by K alone, stated above k_qmma: a row's
//   bits do not depend on the batch (tests/cuemu/quant.cc and tests/cuda
//   check every width). The scales and mins are ggml's f32 values (the
//   same roundings as quant_row_f32); the products are within 2^-17 of
//   exact, the sums f32, so a row is within about 1e-5 of sum |x w| of
//   the exact f32 dot product over quant_row_f32's weights.
// - The prefill groups (whole groups of BACKEND_GROUP_ROWS rows, cuBLAS:
//   cuda_gemm.cu): cu_qdequant_bf16 writes the matrix dequantized exactly
//   and rounded to nearest bf16 into the context's scratch, once per
//   matmul call; those rows see weights within 2^-9 of their size (the
//   documented exception of batch invariance, and of the 1e-4 bound: the
//   fixtures' figure is printed by cuda_quant_prefill_fixtures).
// - The embedding gather: deq8's exact f32 dequantization, bit-equal to
//   quant_row_f32 (dequantized in f32 with ggml's operations in its order,
//   never fused: __fmul_rn, __fsub_rn).
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

/* ---- the matmul: tensor cores over the blocks' integers -------------------- */

/* Every format's weight is, per sub-block j of 16 or 32 elements, an
   integer q times a scale d_j plus a min m_j (m_j = 0 where the format has
   none): Q8_0 q in -128..127, Q4_0 q - 8, Q5_0 q - 16, Q4_1 / Q5_1 d q + m,
   Q2_K (d sc) q - (dmin mn), Q3_K (d (sc - 32)) q, Q4_K / Q5_K (d sc) q -
   (dmin mn), Q6_K (d sc) (q - 32), MLX s q + b. d_j and m_j are the f32
   values ggml's dequantization computes (the same roundings: d sc is one
   __fmul_rn), the integers are at most 8 bits wide, so exact in bf16.

   A block of QK_WARPS warps owns 16 weight rows (a SwiGLU: 16 gate and the
   same 16 up rows) and 8 MT activation rows; K is cut into 32-element
   units, warp w taking units w, w + QK_WARPS, w + 2 QK_WARPS, ... in that
   order. Lane (g = lane / 4, t = lane % 4) holds of each unit elements 4t
   .. 4t+3 and 16+4t .. 16+4t+3 of weight rows g and g+8 (as bf16 integer
   pairs) and of activation row g of each 8-row tile (each f32 cut into a
   bf16 head and tail, bf16_cut2: within 2^-17 of it); mma.sync m16n8k16
   step s (0, 1) takes elements 16s .. 16s+15, lane t's 16s+4t .. 16s+4t+3
   as the fragment's k 2t, 2t+1, 2t+8, 2t+9 (one permutation of k for both
   operands), so a step is one 16-element sub-block.

   Per output element (weight row n, activation row m) the operations are,
   for each unit of its warp in order:
     formats with 32-element sub-blocks: S = 0 + head step 0 + tail step 0
       + head step 1 + tail step 1 (four mmas into one f32 accumulator);
       acc = fmaf(d, S, acc); with a min, X = the same four mmas with a
       weight operand of ones (the tensor core's sum of the row's 32
       activations as cut), acc = fmaf(m, X, acc);
     Q2_K, Q3_K, Q6_K (16-element sub-blocks): for s = 0, 1: S_s = 0 +
       head step s + tail step s; acc = fmaf(d_s, S_s, acc); Q2_K then X_s
       likewise and acc = fmaf(m_s, X_s, acc);
   then the QK_WARPS warps' accumulators added in warp order (0 + ... + 7
   left to right), then the bias, the residual add or the SwiGLU (the
   formulas of k_matmul's epilogue). An mma's output element depends only
   on its own weight row, activation row and accumulator, so nothing in
   that sequence depends on M, on the other rows of the launch, on MT or
   on the grid: a row's bits are the same in a verify of 16 as alone
   (tests/cuemu/quant.cc and tests/cuda check it at widths 1 to 16 and
   past). Compared with the exact sum over dequantized weights each
   product is within 2^-17 of its own size (the head and tail), the min's
   term within 2^-17 of |m| sum |x|; accumulation is f32.

   Weights are read once a launch for all its rows (up to 16 rows a block
   along y; wider launches, the rows past a prefill's cuBLAS groups, read
   them once per 16 rows), each lane loading its words of UN units ahead
   of their use, twice over (the next UN while the current UN compute),
   the first before the wait for the previous kernel (weights are never
   written by one). */

#define QK_WARPS 8 /* warps a block; the K split, so a row's order is fixed by K alone */

/* the words a lane reads of one 32-element unit of one weight row (qload):
   w, those that hold its 8 elements; s, the unit's scale fields */
struct qraw {
    uint32_t w[4], s[2];
};

/* a unit unpacked (qunpack): a[0..3] the bf16 pairs of elements (4t,
   4t+1), (4t+2, 4t+3), (16+4t, 16+4t+1), (16+4t+2, 16+4t+3); d[j], m[j]
   the scale and min of elements 16j .. 16j+15 */
struct qunit {
    uint32_t a[4];
    float d[2], m[2];
};

template <int QT> struct qfmt {
    static constexpr bool sub16 = QT == DT_Q2_K || QT == DT_Q3_K || QT == DT_Q6_K;
    static constexpr bool mins =
        QT > QT_MLX || QT == DT_Q4_1 || QT == DT_Q5_1 || QT == DT_Q2_K || QT == DT_Q4_K || QT == DT_Q5_K;
};

/* 4 bytes at a 2-byte aligned p */
__device__ __forceinline__ uint32_t q_u16p(const uint8_t *p) { return q_u16(p) | q_u16(p + 2) << 16; }
/* two integers as a bf16 pair (exact: |a|, |b| <= 256) */
__device__ __forceinline__ uint32_t q_pk(int a, int b) {
    const __nv_bfloat162 h = __floats2bfloat162_rn((float)a, (float)b);
    return *reinterpret_cast<const uint32_t *>(&h);
}
__device__ __forceinline__ float q_h(uint32_t v) { return __half2float(__ushort_as_half((unsigned short)(v & 0xffff))); }

/* unit u of row n (elements 32u .. 32u+31), lane quad position t */
template <int QT>
__device__ __forceinline__ void qload(const qw &w, int n, int u, int t, qraw &r) {
    const uint8_t *row = w.p + (size_t)n * w.rb;
    if constexpr (QT > QT_MLX) {
        /* B bits an element from the low bit up, a unit B words (4-byte
           aligned: K is a multiple of 32); the second word only where the
           4 elements straddle two (so never past the unit) */
        constexpr int B = QT - QT_MLX;
        const uint8_t *p = row + (size_t)u * 4 * B;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int b0 = (16 * h + 4 * t) * B, w0 = b0 >> 5;
            r.w[2 * h] = q_u32(p + 4 * w0);
            r.w[2 * h + 1] = (b0 & 31) + 4 * B > 32 ? q_u32(p + 4 * w0 + 4) : 0u;
        }
        const size_t gi = (size_t)n * w.gpr + (size_t)(32 * u) / w.group;
        r.s[0] = __float_as_uint(q_sb(w.sc, w.sdt, gi));
        r.s[1] = __float_as_uint(q_sb(w.bi, w.sdt, gi));
    } else if constexpr (QT == DT_Q8_0) {
        const uint8_t *b = row + (size_t)u * 34;
        r.w[0] = q_u16p(b + 2 + 4 * t), r.w[1] = q_u16p(b + 18 + 4 * t), r.s[0] = q_u16(b);
    } else if constexpr (QT == DT_Q4_0) { /* element e < 16: low nibble of qs[e]; e >= 16: high of qs[e - 16] */
        const uint8_t *b = row + (size_t)u * 18;
        r.w[0] = q_u16p(b + 2 + 4 * t), r.s[0] = q_u16(b);
    } else if constexpr (QT == DT_Q4_1) {
        const uint8_t *b = row + (size_t)u * 20;
        r.w[0] = q_u32(b + 4 + 4 * t), r.s[0] = q_u32(b);
    } else if constexpr (QT == DT_Q5_0) { /* bit 4 of element e: bit e of qh */
        const uint8_t *b = row + (size_t)u * 22;
        r.w[0] = q_u16p(b + 6 + 4 * t), r.w[1] = q_u16p(b + 2), r.s[0] = q_u16(b);
    } else if constexpr (QT == DT_Q5_1) {
        const uint8_t *b = row + (size_t)u * 24;
        r.w[0] = q_u32(b + 8 + 4 * t), r.w[1] = q_u32(b + 4), r.s[0] = q_u32(b);
    } else {
        /* super-blocks of 256: unit v = u % 8 of super-block u / 8 */
        const int v = u & 7;
        if constexpr (QT == DT_Q2_K) { /* element 32v + l: bits 2 (v % 4) of qs[32 (v / 4) + l]; sub-block 2v + l / 16 */
            const uint8_t *b = row + (size_t)(u >> 3) * 84, *qs = b + 16 + 32 * (v >> 2);
            r.w[0] = q_u32(qs + 4 * t), r.w[1] = q_u32(qs + 16 + 4 * t);
            r.s[0] = q_u16(b + 2 * v), r.s[1] = q_u32(b + 80);
        } else if constexpr (QT == DT_Q3_K) {
            /* as Q2_K, the third bit in hmask[l] bit v (clear: q - 4);
               scale bytes of sub-blocks 2v, 2v + 1: low 4 bits in
               scales[(2v) % 8 + j] (high nibble from sub-block 8), top 2 in
               scales[8 + (2v) % 4 + j] */
            const uint8_t *b = row + (size_t)(u >> 3) * 110, *qs = b + 32 + 32 * (v >> 2);
            r.w[0] = q_u16p(qs + 4 * t), r.w[1] = q_u16p(qs + 16 + 4 * t);
            r.w[2] = q_u16p(b + 4 * t), r.w[3] = q_u16p(b + 16 + 4 * t);
            r.s[0] = q_u16(b + 96 + (2 * v & 7)) | q_u16(b + 104 + (2 * v & 3)) << 16, r.s[1] = q_u16(b + 108);
        } else if constexpr (QT == DT_Q4_K || QT == DT_Q5_K) {
            /* sub-block v: nibble v % 2 of qs[32 (v / 2) + l]; Q5_K's bit 4:
               bit v of qh[l]; its 6-bit scale and min from scales[v],
               scales[v + 4] and (v >= 4) scales[v - 4] */
            const uint8_t *b = row + (size_t)(u >> 3) * (QT == DT_Q4_K ? 144 : 176);
            const uint8_t *qs = b + (QT == DT_Q4_K ? 16 : 48) + 32 * (v >> 1);
            r.w[0] = q_u32(qs + 4 * t), r.w[1] = q_u32(qs + 16 + 4 * t);
            if constexpr (QT == DT_Q5_K) r.w[2] = q_u32(b + 16 + 4 * t), r.w[3] = q_u32(b + 32 + 4 * t);
            r.s[0] = q_u32(b);
            r.s[1] = q_u8(b + 4 + v) | q_u8(b + 8 + v) << 8 | q_u8(b + 4 + (v & 3)) << 16;
        } else { /* Q6_K: element 32v + l: low 4 bits nibble (v % 4) / 2 of
                    ql[64 (v / 4) + 32 (v % 2) + l], top 2 bits 2 (v % 4) of
                    qh[32 (v / 4) + l]; int8 scales of sub-blocks 2v, 2v + 1 */
            const uint8_t *b = row + (size_t)(u >> 3) * 210, *ql = b + 64 * (v >> 2) + 32 * (v & 1),
                          *qh = b + 128 + 32 * (v >> 2);
            r.w[0] = q_u16p(ql + 4 * t), r.w[1] = q_u16p(ql + 16 + 4 * t);
            r.w[2] = q_u16p(qh + 4 * t), r.w[3] = q_u16p(qh + 16 + 4 * t);
            r.s[0] = q_u16(b + 192 + 2 * v), r.s[1] = q_u16(b + 208);
        }
    }
}

/* byte permute (prmt): byte i of the result is byte s >> 4i & 7 of the
   pair (b:a), a's bytes first */
__device__ __forceinline__ uint32_t q_prmt(uint32_t a, uint32_t b, uint32_t s) {
#ifdef DSPARK_CUEMU
    const uint64_t v = a | (uint64_t)b << 32;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)(v >> 8 * (s >> 4 * i & 7) & 255) << 8 * i;
    return r;
#else
    return __byte_perm(a, b, s);
#endif
}
/* a bf16 pair minus another (exact here: integers below 256) */
__device__ __forceinline__ uint32_t q_bsub(uint32_t a, uint32_t c) {
#ifdef DSPARK_CUEMU
    const __nv_bfloat162 r = __floats2bfloat162_rn(__uint_as_float(a << 16) - __uint_as_float(c << 16),
                                                   __uint_as_float(a & 0xffff0000u) - __uint_as_float(c & 0xffff0000u));
#else
    const __nv_bfloat162 r =
        __hsub2(*reinterpret_cast<const __nv_bfloat162 *>(&a), *reinterpret_cast<const __nv_bfloat162 *>(&c));
#endif
    return *reinterpret_cast<const uint32_t *>(&r);
}
/* four unsigned bytes below 128 (elements e .. e+3) less off, as two bf16
   pairs: each byte n becomes the bf16 with bits 0x43nn, 128 + n (exact:
   the unit in the last place of [128, 256) is 1), then 128 + off is
   subtracted, exactly */
template <int OFF>
__device__ __forceinline__ void q_pk4(uint32_t u, uint32_t &p01, uint32_t &p23) {
    constexpr uint32_t c = 0x4300u | (uint32_t)OFF, cc = c | c << 16; /* bf16(128 + OFF), OFF < 128 */
    p01 = q_bsub(q_prmt(u, 0x43434343u, 0x4140), cc);
    p23 = q_bsub(q_prmt(u, 0x43434343u, 0x4342), cc);
}
/* 4 bits to the bit 0 of 4 bytes */
__device__ __forceinline__ uint32_t q_spread4(uint32_t h) { return (h & 15) * 0x00204081u & 0x01010101u; }

/* The raw words of unit u as bf16 integer pairs, scales and mins. The
   sub-8-bit formats pack their elements as bytes (u[0]: elements 4t ..
   4t+3, u[1]: 16+4t .. 16+4t+3, each less its format's offset OFF) and
   q_pk4 turns each into two pairs; Q8_0 and MLX 8-bit convert integers. */
template <int QT>
__device__ __forceinline__ qunit qunpack(const qraw &r, int u, int t) {
    constexpr bool wide = QT == DT_Q8_0 || QT == QT_MLX + 8;
    constexpr int OFF = QT == DT_Q4_0 ? 8 : QT == DT_Q5_0 ? 16 : QT == DT_Q3_K ? 4 : QT == DT_Q6_K ? 32 : 0;
    uint32_t ub[2] = {0, 0};
    int q[8]; /* (wide: elements 4t + i, i < 4; 16 + 4t + i - 4, i >= 4) */
    qunit o;
    o.m[0] = o.m[1] = 0.0f;
    if constexpr (QT > QT_MLX) {
        constexpr int B = QT - QT_MLX;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint64_t v = r.w[2 * h] | (uint64_t)r.w[2 * h + 1] << 32;
            const int o0 = ((16 * h + 4 * t) * B) & 31;
            if constexpr (B == 8) {
#pragma unroll
                for (int i = 0; i < 4; i++) q[4 * h + i] = (int)((v >> (o0 + 8 * i)) & 255);
            } else if constexpr (B == 4) { /* 4 nibbles: n0 n2 in bytes 0, 1 of the low mask, n1 n3 of the high */
                const uint32_t x = (uint32_t)(v >> o0);
                ub[h] = q_prmt(x & 0x0f0fu, x >> 4 & 0x0f0fu, 0x5140);
            } else {
#pragma unroll
                for (int i = 0; i < 4; i++) ub[h] |= (uint32_t)((v >> (o0 + B * i)) & ((1u << B) - 1)) << 8 * i;
            }
        }
        o.d[0] = o.d[1] = __uint_as_float(r.s[0]);
        o.m[0] = o.m[1] = __uint_as_float(r.s[1]);
    } else if constexpr (QT == DT_Q8_0) {
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = (int)(int8_t)(r.w[0] >> 8 * i), q[4 + i] = (int)(int8_t)(r.w[1] >> 8 * i);
        o.d[0] = o.d[1] = q_h(r.s[0]);
    } else if constexpr (QT == DT_Q4_0 || QT == DT_Q4_1 || QT == DT_Q5_0 || QT == DT_Q5_1) {
        ub[0] = r.w[0] & 0x0f0f0f0fu, ub[1] = r.w[0] >> 4 & 0x0f0f0f0fu;
        if constexpr (QT == DT_Q5_0 || QT == DT_Q5_1) {
            ub[0] |= q_spread4(r.w[1] >> 4 * t) << 4;
            ub[1] |= q_spread4(r.w[1] >> (16 + 4 * t)) << 4;
        }
        o.d[0] = o.d[1] = q_h(r.s[0]);
        if constexpr (QT == DT_Q4_1 || QT == DT_Q5_1) o.m[0] = o.m[1] = q_h(r.s[0] >> 16);
    } else {
        const int v = u & 7;
        if constexpr (QT == DT_Q2_K) {
            ub[0] = r.w[0] >> 2 * (v & 3) & 0x03030303u, ub[1] = r.w[1] >> 2 * (v & 3) & 0x03030303u;
            const float d = q_h(r.s[1]), dmin = q_h(r.s[1] >> 16);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const uint32_t sc = r.s[0] >> 8 * j & 255;
                o.d[j] = __fmul_rn(d, (float)(sc & 15));
                o.m[j] = -__fmul_rn(dmin, (float)(sc >> 4));
            }
        } else if constexpr (QT == DT_Q3_K) {
            /* q + 4: the two low bits, plus 4 where the hmask bit is set */
            ub[0] = (r.w[0] >> 2 * (v & 3) & 0x03030303u) | (r.w[2] >> v & 0x01010101u) << 2;
            ub[1] = (r.w[1] >> 2 * (v & 3) & 0x03030303u) | (r.w[3] >> v & 0x01010101u) << 2;
            const float d = q_h(r.s[1]);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int s = 2 * v + j;
                const uint32_t lo = r.s[0] >> 8 * j & 255, hi = r.s[0] >> (16 + 8 * j) & 255;
                const int lo4 = (int)(s < 8 ? lo & 15 : lo >> 4), hi2 = (int)(hi >> 2 * (s >> 2) & 3);
                o.d[j] = __fmul_rn(d, (float)((lo4 | hi2 << 4) - 32));
            }
        } else if constexpr (QT == DT_Q4_K || QT == DT_Q5_K) {
            const int sh = 4 * (v & 1);
            ub[0] = r.w[0] >> sh & 0x0f0f0f0fu, ub[1] = r.w[1] >> sh & 0x0f0f0f0fu;
            if constexpr (QT == DT_Q5_K) {
                ub[0] |= (r.w[2] >> v & 0x01010101u) << 4;
                ub[1] |= (r.w[3] >> v & 0x01010101u) << 4;
            }
            const uint32_t a = r.s[1] & 255, b4 = r.s[1] >> 8 & 255, c = r.s[1] >> 16 & 255;
            int sc, mn;
            if (v < 4) sc = (int)(a & 63), mn = (int)(b4 & 63);
            else sc = (int)((b4 & 15) | (c >> 6) << 4), mn = (int)((b4 >> 4) | (a >> 6) << 4);
            o.d[0] = o.d[1] = __fmul_rn(q_h(r.s[0]), (float)sc);
            o.m[0] = o.m[1] = -__fmul_rn(q_h(r.s[0] >> 16), (float)mn);
        } else { /* Q6_K */
            const int sl = 4 * ((v & 3) >> 1), sh = 2 * (v & 3);
            ub[0] = (r.w[0] >> sl & 0x0f0f0f0fu) | (r.w[2] >> sh & 0x03030303u) << 4;
            ub[1] = (r.w[1] >> sl & 0x0f0f0f0fu) | (r.w[3] >> sh & 0x03030303u) << 4;
            const float d = q_h(r.s[1]);
            o.d[0] = __fmul_rn(d, (float)(int8_t)(r.s[0] & 255));
            o.d[1] = __fmul_rn(d, (float)(int8_t)(r.s[0] >> 8 & 255));
        }
    }
    if constexpr (wide) {
#pragma unroll
        for (int i = 0; i < 4; i++) o.a[i] = q_pk(q[2 * i], q[2 * i + 1]);
    } else {
        q_pk4<OFF>(ub[0], o.a[0], o.a[1]);
        q_pk4<OFF>(ub[1], o.a[2], o.a[3]);
    }
    return o;
}

#define QK_ONES 0x3f803f80u /* a bf16 pair of ones */

/* One 32-element unit u of the MT activation tiles against the unpacked
   units ra[v], rb[v] (weight rows g and g + 8 of each of the NW matrices),
   into acc, in the order stated above k_qmma. The lane's activation
   elements: e0 .. e0+3 (step 0) and e1 .. e1+3 (step 1) of each row, the
   same elements its weight pairs hold. */
template <int QT, int MT, int NW>
__device__ __forceinline__ void qmma_unit(float (&acc)[NW][MT][4], const float *__restrict__ x, int M, int K,
                                          int m0, int g, int e0, int e1, const qunit (&ra)[NW],
                                          const qunit (&rb)[NW]) {
    constexpr bool S16 = qfmt<QT>::sub16, MIN = qfmt<QT>::mins;
    /* the activations: [tile][step][k pair] heads and tails */
    uint32_t bh[MT][2][2], bl[MT][2][2];
#pragma unroll
    for (int j = 0; j < MT; j++) {
        const int m = m0 + 8 * j + g;
        float4 xa = make_float4(0, 0, 0, 0), xb = xa;
        if (m < M) {
            const float *xp = x + (size_t)m * K;
            xa = *reinterpret_cast<const float4 *>(xp + e0);
            xb = *reinterpret_cast<const float4 *>(xp + e1);
        }
        bf16x2_cut c = bf16_cut2(xa.x, xa.y);
        bh[j][0][0] = c.h, bl[j][0][0] = c.l;
        c = bf16_cut2(xa.z, xa.w);
        bh[j][0][1] = c.h, bl[j][0][1] = c.l;
        c = bf16_cut2(xb.x, xb.y);
        bh[j][1][0] = c.h, bl[j][1][0] = c.l;
        c = bf16_cut2(xb.z, xb.w);
        bh[j][1][1] = c.h, bl[j][1][1] = c.l;
    }
    /* the activation sums a min multiplies: per step (16-element
       sub-blocks) or over both */
    float xs[MT][2][4];
    if constexpr (MIN) {
#pragma unroll
        for (int j = 0; j < MT; j++)
#pragma unroll
            for (int s = 0; s < 2; s++) {
                float *z = xs[j][S16 ? s : 0];
                if (S16 || s == 0) z[0] = z[1] = z[2] = z[3] = 0.0f;
                mma_bf16(xs[j][S16 ? s : 0], QK_ONES, QK_ONES, QK_ONES, QK_ONES, bh[j][s][0], bh[j][s][1]);
                mma_bf16(xs[j][S16 ? s : 0], QK_ONES, QK_ONES, QK_ONES, QK_ONES, bl[j][s][0], bl[j][s][1]);
            }
    }
#pragma unroll
    for (int v = 0; v < NW; v++) {
        const qunit &A = ra[v], &B = rb[v];
#pragma unroll
        for (int j = 0; j < MT; j++) {
            float *a = acc[v][j];
            if constexpr (S16) {
#pragma unroll
                for (int s = 0; s < 2; s++) {
                    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    mma_bf16(c, A.a[2 * s], B.a[2 * s], A.a[2 * s + 1], B.a[2 * s + 1], bh[j][s][0], bh[j][s][1]);
                    mma_bf16(c, A.a[2 * s], B.a[2 * s], A.a[2 * s + 1], B.a[2 * s + 1], bl[j][s][0], bl[j][s][1]);
                    a[0] = fmaf(A.d[s], c[0], a[0]), a[1] = fmaf(A.d[s], c[1], a[1]);
                    a[2] = fmaf(B.d[s], c[2], a[2]), a[3] = fmaf(B.d[s], c[3], a[3]);
                    if constexpr (MIN) {
                        a[0] = fmaf(A.m[s], xs[j][s][0], a[0]), a[1] = fmaf(A.m[s], xs[j][s][1], a[1]);
                        a[2] = fmaf(B.m[s], xs[j][s][2], a[2]), a[3] = fmaf(B.m[s], xs[j][s][3], a[3]);
                    }
                }
            } else {
                float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int s = 0; s < 2; s++) {
                    mma_bf16(c, A.a[2 * s], B.a[2 * s], A.a[2 * s + 1], B.a[2 * s + 1], bh[j][s][0], bh[j][s][1]);
                    mma_bf16(c, A.a[2 * s], B.a[2 * s], A.a[2 * s + 1], B.a[2 * s + 1], bl[j][s][0], bl[j][s][1]);
                }
                a[0] = fmaf(A.d[0], c[0], a[0]), a[1] = fmaf(A.d[0], c[1], a[1]);
                a[2] = fmaf(B.d[0], c[2], a[2]), a[3] = fmaf(B.d[0], c[3], a[3]);
                if constexpr (MIN) {
                    a[0] = fmaf(A.m[0], xs[j][0][0], a[0]), a[1] = fmaf(A.m[0], xs[j][0][1], a[1]);
                    a[2] = fmaf(B.m[0], xs[j][0][2], a[2]), a[3] = fmaf(B.m[0], xs[j][0][3], a[3]);
                }
            }
        }
    }
}

template <int NW, int MT> __device__ __forceinline__ void qacc_zero(float (&acc)[NW][MT][4]) {
#pragma unroll
    for (int v = 0; v < NW; v++)
#pragma unroll
        for (int j = 0; j < MT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[v][j][e] = 0.0f;
}

/* The warps' accumulators summed in warp order, then the epilogue (the
   bias, the residual add or the SwiGLU: k_matmul's formulas), for weight
   rows n0 .. n0 + 15 and rows m0 .. m0 + 8 MT - 1. */
template <int MT, int EPI, int NW>
__device__ __forceinline__ void qmma_out(float (&acc)[NW][MT][4], float (&part)[QK_WARPS][NW][MT][4][32], float *y,
                                         int ldy, int M, int N, int n0, int m0, const float *bias) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int v = 0; v < NW; v++)
#pragma unroll
        for (int j = 0; j < MT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) part[warp][v][j][e][lane] = acc[v][j][e];
    __syncthreads();
    for (int idx = threadIdx.x; idx < MT * 128; idx += 32 * QK_WARPS) {
        const int j = idx >> 7, e = idx >> 5 & 3, l = idx & 31;
        const int n = n0 + (l >> 2) + 8 * (e >> 1), m = m0 + 8 * j + 2 * (l & 3) + (e & 1);
        if (n >= N || m >= M) continue;
        float s = part[0][0][j][e][l];
#pragma unroll
        for (int wi = 1; wi < QK_WARPS; wi++) s += part[wi][0][j][e][l];
        float *dst = y + (size_t)m * ldy + n;
        if constexpr (EPI == MM_SWIGLU) {
            float uu = part[0][NW - 1][j][e][l];
#pragma unroll
            for (int wi = 1; wi < QK_WARPS; wi++) uu += part[wi][NW - 1][j][e][l];
            *dst = s / (1.0f + expf(-s)) * uu;
        } else {
            const float v = bias ? s + bias[n] : s;
            if constexpr (EPI == MM_ADD) *dst += v;
            else *dst = v;
        }
    }
}

/* y[m][n] (ldy apart) for weight rows n0 .. n0 + 15 (blockIdx.x) and rows
   m0 .. m0 + 8 MT - 1 (blockIdx.y) of the launch's M; EPI as k_matmul's.
   UN: units a warp loads ahead. See above for the order of the sums. */
template <int QT, int MT, int EPI, int UN>
__global__ void __launch_bounds__(32 * QK_WARPS) k_qmma(float *__restrict__ y, int ldy, const float *__restrict__ x,
                                                        int M, int N, int K, qw w, qw w2,
                                                        const float *__restrict__ bias) {
    constexpr int NW = EPI == MM_SWIGLU ? 2 : 1;
    __shared__ float part[QK_WARPS][NW][MT][4][32];
    pdl_trigger();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 16, m0 = blockIdx.y * 8 * MT, U = K / 32;
    /* (rows past N: computed from row N - 1, dropped) */
    const int na = n0 + g < N ? n0 + g : N - 1, nb = n0 + g + 8 < N ? n0 + g + 8 : N - 1;
    float acc[NW][MT][4];
    qacc_zero(acc);
    qraw cur[UN][NW][2];
    auto load = [&](qraw (&r)[UN][NW][2], int ub) {
#pragma unroll
        for (int i = 0; i < UN; i++) {
            const int u = ub + i * QK_WARPS;
            if (u >= U) break;
#pragma unroll
            for (int v = 0; v < NW; v++) {
                qload<QT>(v ? w2 : w, na, u, t, r[i][v][0]);
                qload<QT>(v ? w2 : w, nb, u, t, r[i][v][1]);
            }
        }
    };
    load(cur, warp);
    pdl_wait();
    for (int ub = warp; ub < U; ub += QK_WARPS * UN) {
        qraw nxt[UN][NW][2];
        if (ub + QK_WARPS * UN < U) load(nxt, ub + QK_WARPS * UN);
#pragma unroll
        for (int i = 0; i < UN; i++) {
            const int u = ub + i * QK_WARPS;
            if (u >= U) break;
            qunit ra[NW], rb[NW];
#pragma unroll
            for (int v = 0; v < NW; v++) ra[v] = qunpack<QT>(cur[i][v][0], u, t), rb[v] = qunpack<QT>(cur[i][v][1], u, t);
            qmma_unit<QT, MT, NW>(acc, x, M, K, m0, g, 32 * u + 4 * t, 32 * u + 16 + 4 * t, ra, rb);
        }
#pragma unroll
        for (int i = 0; i < UN; i++)
#pragma unroll
            for (int v = 0; v < NW; v++) cur[i][v][0] = nxt[i][v][0], cur[i][v][1] = nxt[i][v][1];
    }
    qmma_out<MT, EPI, NW>(acc, part, y, ldy, M, N, n0, m0, bias);
}

/* ---- Q4_K and Q5_K: whole super-blocks a warp ------------------------------ */

/* The same sums as k_qmma's over the same units, with two differences
   that make the loads few and wide: warp w takes the 256-element
   super-blocks w, w + QK_WARPS, ... (their 8 units in order), and lane t
   holds elements 8t .. 8t+3 (step 0) and 8t+4 .. 8t+7 (step 1) of each
   unit, so a super-block's row is one 16-byte load of its d, dmin and
   scales, four 8-byte loads of the nibbles (units 2i and 2i + 1 share
   qs[32 i ..]) and, for Q5_K, one 8-byte load of the fifth bits. A unit's
   32 elements keep one scale and min, so its sums are k_qmma's rule with
   the k positions permuted within the unit, alike for both operands; a
   row's bits depend on K alone, as there. */
struct qsbraw {
    uint32_t h[4], q[8], qh[2];
};

template <int QT>
__device__ __forceinline__ void qsbload(const qw &w, int n, int b, int t, qsbraw &r) {
    constexpr int BB = QT == DT_Q4_K ? 144 : 176, QS = QT == DT_Q4_K ? 16 : 48;
    const uint8_t *p = w.p + (size_t)n * w.rb + (size_t)b * BB; /* 16-byte aligned: 144 and 176 are multiples */
    const uint4 h = __ldg(reinterpret_cast<const uint4 *>(p));
    r.h[0] = h.x, r.h[1] = h.y, r.h[2] = h.z, r.h[3] = h.w;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint2 v = __ldg(reinterpret_cast<const uint2 *>(p + QS + 32 * i + 8 * t));
        r.q[2 * i] = v.x, r.q[2 * i + 1] = v.y;
    }
    if constexpr (QT == DT_Q5_K) {
        const uint2 v = __ldg(reinterpret_cast<const uint2 *>(p + 16 + 8 * t));
        r.qh[0] = v.x, r.qh[1] = v.y;
    }
}

/* unit v (0 .. 7) of a loaded super-block: a[0], a[1] elements 8t .. 8t+3,
   a[2], a[3] elements 8t+4 .. 8t+7, as bf16 integer pairs; its scale and
   min (ggml's: d sc and -(dmin mn), one rounding each) */
template <int QT>
__device__ __forceinline__ qunit qsbunit(const qsbraw &r, int v) {
    const int sh = 4 * (v & 1);
    uint32_t u0 = r.q[2 * (v >> 1)] >> sh & 0x0f0f0f0fu, u1 = r.q[2 * (v >> 1) + 1] >> sh & 0x0f0f0f0fu;
    if constexpr (QT == DT_Q5_K) {
        u0 |= (r.qh[0] >> v & 0x01010101u) << 4;
        u1 |= (r.qh[1] >> v & 0x01010101u) << 4;
    }
    /* the 12 scale bytes are bytes 4 .. 15 of the header */
    auto sb = [&](int i) { return r.h[(4 + i) >> 2] >> 8 * ((4 + i) & 3) & 255u; };
    int sc, mn;
    if (v < 4) sc = (int)(sb(v) & 63), mn = (int)(sb(v + 4) & 63);
    else sc = (int)((sb(v + 4) & 15) | (sb(v - 4) >> 6) << 4), mn = (int)((sb(v + 4) >> 4) | (sb(v) >> 6) << 4);
    qunit o;
    o.d[0] = o.d[1] = __fmul_rn(q_h(r.h[0]), (float)sc);
    o.m[0] = o.m[1] = -__fmul_rn(q_h(r.h[0] >> 16), (float)mn);
    q_pk4<0>(u0, o.a[0], o.a[1]);
    q_pk4<0>(u1, o.a[2], o.a[3]);
    return o;
}

/* Q6_K (210-byte super-blocks: 2-byte aligned, 4-byte aligned at even
   ones where a row's bytes are a multiple of 4): 16-element sub-blocks,
   so lane t keeps k_qmma's elements 4t .. 4t+3 and 16+4t .. 16+4t+3 of
   each unit; a super-block's row is its lane's 8 bytes of each of the
   four ql quarters (units v and v + 2 share one, nibble (v % 4) / 2), 8
   bytes of each qh half (units 4h .. 4h+3, two bits each), the 16 scale
   bytes and d: 33 two-byte loads, or 17 four-byte ones where aligned. */
struct qsb6raw {
    uint32_t ql[8], qh[4], sc[4], d;
};

__device__ __forceinline__ uint32_t q_w32(const uint8_t *p, bool a4) { return a4 ? q_u32(p) : q_u16p(p); }

__device__ __forceinline__ void qsb6load(const qw &w, int n, int b, int t, qsb6raw &r) {
    const uint8_t *p = w.p + (size_t)n * w.rb + (size_t)b * 210;
    const bool a4 = !((uintptr_t)p & 3);
#pragma unroll
    for (int i = 0; i < 4; i++) { /* quarter i: bytes 32 i .. (h = i / 2, parity i % 2) */
        r.ql[2 * i] = q_w32(p + 32 * i + 4 * t, a4);
        r.ql[2 * i + 1] = q_w32(p + 32 * i + 16 + 4 * t, a4);
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        r.qh[2 * h] = q_w32(p + 128 + 32 * h + 4 * t, a4);
        r.qh[2 * h + 1] = q_w32(p + 128 + 32 * h + 16 + 4 * t, a4);
    }
#pragma unroll
    for (int i = 0; i < 4; i++) r.sc[i] = q_w32(p + 192 + 4 * i, a4);
    r.d = q_u16(p + 208);
}

__device__ __forceinline__ qunit qsb6unit(const qsb6raw &r, int v) {
    const int h = v >> 2, i4 = v & 3, q = 2 * h + (i4 & 1), sl = 4 * (i4 >> 1), sh = 2 * i4;
    const uint32_t u0 = (r.ql[2 * q] >> sl & 0x0f0f0f0fu) | (r.qh[2 * h] >> sh & 0x03030303u) << 4;
    const uint32_t u1 = (r.ql[2 * q + 1] >> sl & 0x0f0f0f0fu) | (r.qh[2 * h + 1] >> sh & 0x03030303u) << 4;
    const float d = q_h(r.d);
    qunit o;
    o.m[0] = o.m[1] = 0.0f;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int s = 2 * v + j; /* the unit's sub-blocks: scales[2v], scales[2v + 1] */
        o.d[j] = __fmul_rn(d, (float)(int8_t)(r.sc[s >> 2] >> 8 * (s & 3) & 255u));
    }
    q_pk4<32>(u0, o.a[0], o.a[1]);
    q_pk4<32>(u1, o.a[2], o.a[3]);
    return o;
}

/* MLX 4- and 8-bit: a step is 4 units (128 elements); within a group of
   P = group / 32 units lane t holds the group's elements 8P t .. 8P t +
   8P - 1 (P words at 4 bits, 2P at 8: one 4-, 8- or 16-byte load), unit
   j of the group taking the lane's elements 8j .. 8j+7 of those: every
   unit still lies inside one group (one scale and bias). */
template <int B, int P> struct qsbm {
    static constexpr int QT = QT_MLX + B, UPS = 4, WD = B / 4; /* WD: words a unit a lane */
    struct raw {
        uint32_t q[UPS * WD];
        float s[UPS / P], b[UPS / P];
    };
    static __device__ __forceinline__ void load(const qw &w, int n, int st, int t, int K, raw &r) {
        const uint8_t *row = w.p + (size_t)n * w.rb;
#pragma unroll
        for (int c = 0; c < UPS / P; c++) {
            const int e = 128 * st + 32 * P * c; /* the group's first element */
            if (e >= K) break;
            const uint8_t *p = row + (size_t)e * B / 8 + (size_t)t * P * WD * 4;
            constexpr int NWD = P * WD; /* words the lane holds of the group: 1, 2, 4 or 8 */
            if constexpr (NWD == 1) {
                r.q[c] = q_u32(p);
            } else if constexpr (NWD == 2) {
                const uint2 v = __ldg(reinterpret_cast<const uint2 *>(p));
                r.q[2 * c] = v.x, r.q[2 * c + 1] = v.y;
            } else {
#pragma unroll
                for (int h = 0; h < NWD / 4; h++) {
                    const uint4 v = __ldg(reinterpret_cast<const uint4 *>(p) + h);
                    r.q[NWD * c + 4 * h] = v.x, r.q[NWD * c + 4 * h + 1] = v.y;
                    r.q[NWD * c + 4 * h + 2] = v.z, r.q[NWD * c + 4 * h + 3] = v.w;
                }
            }
            const size_t gi = (size_t)n * w.gpr + (size_t)e / (32 * P);
            r.s[c] = q_sb(w.sc, w.sdt, gi);
            r.b[c] = q_sb(w.bi, w.sdt, gi);
        }
    }
    static __device__ __forceinline__ qunit unit(const raw &r, int v) {
        const int c = v / P, j = v % P;
        qunit o;
        o.d[0] = o.d[1] = r.s[c];
        o.m[0] = o.m[1] = r.b[c];
        if constexpr (B == 4) { /* one word: elements 0..7 of the unit's eight, nibbles from the low bit */
            const uint32_t x = r.q[P * c + j];
            const uint32_t lo = x & 0x0f0f0f0fu, hi = x >> 4 & 0x0f0f0f0fu; /* even, odd elements */
            q_pk4<0>(q_prmt(lo, hi, 0x5140), o.a[0], o.a[1]);
            q_pk4<0>(q_prmt(lo, hi, 0x7362), o.a[2], o.a[3]);
        } else { /* two words: bytes */
            const uint32_t x0 = r.q[2 * (P * c + j)], x1 = r.q[2 * (P * c + j) + 1];
            o.a[0] = q_pk((int)(x0 & 255), (int)(x0 >> 8 & 255)), o.a[1] = q_pk((int)(x0 >> 16 & 255), (int)(x0 >> 24));
            o.a[2] = q_pk((int)(x1 & 255), (int)(x1 >> 8 & 255)), o.a[3] = q_pk((int)(x1 >> 16 & 255), (int)(x1 >> 24));
        }
        return o;
    }
    /* unit v's lane elements within the step: group v / P's 8P t + 8 (v % P) */
    static __device__ __forceinline__ int e0(int t, int v) { return 32 * P * (v / P) + 8 * P * t + 8 * (v % P); }
    static __device__ __forceinline__ int e1(int t, int v) { return e0(t, v) + 4; }
};

/* the super-block kernels' per-format words and units: UPS units a step
   (a warp's share of K is steps w, w + QK_WARPS, ...), the lane's element
   offsets of unit v within its step */
template <int QT_> struct qsb {
    static constexpr int QT = QT_, UPS = 8;
    typedef qsbraw raw;
    static __device__ __forceinline__ void load(const qw &w, int n, int b, int t, int, raw &r) { qsbload<QT>(w, n, b, t, r); }
    static __device__ __forceinline__ qunit unit(const raw &r, int v) { return qsbunit<QT>(r, v); }
    static __device__ __forceinline__ int e0(int t, int v) { return 32 * v + 8 * t; }
    static __device__ __forceinline__ int e1(int t, int v) { return 32 * v + 8 * t + 4; }
};
template <> struct qsb<DT_Q6_K> {
    static constexpr int QT = DT_Q6_K, UPS = 8;
    typedef qsb6raw raw;
    static __device__ __forceinline__ void load(const qw &w, int n, int b, int t, int, raw &r) { qsb6load(w, n, b, t, r); }
    static __device__ __forceinline__ qunit unit(const raw &r, int v) { return qsb6unit(r, v); }
    static __device__ __forceinline__ int e0(int t, int v) { return 32 * v + 4 * t; }
    static __device__ __forceinline__ int e1(int t, int v) { return 32 * v + 16 + 4 * t; }
};

/* As k_qmma, a warp a step of F::UPS units at a time (a K-quant's
   super-block); PF: the next step's words loaded while the current one
   computes (one matrix: the registers of a SwiGLU's two would spill). */
template <class F, int MT, int EPI>
__global__ void __launch_bounds__(32 * QK_WARPS) k_qmma_sb(float *__restrict__ y, int ldy,
                                                           const float *__restrict__ x, int M, int N, int K, qw w,
                                                           qw w2, const float *__restrict__ bias) {
    constexpr int NW = EPI == MM_SWIGLU ? 2 : 1, UPS = F::UPS;
    constexpr bool PF = NW == 1;
    __shared__ float part[QK_WARPS][NW][MT][4][32];
    pdl_trigger();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 16, m0 = blockIdx.y * 8 * MT, SB = (K + 32 * UPS - 1) / (32 * UPS);
    const int na = n0 + g < N ? n0 + g : N - 1, nb = n0 + g + 8 < N ? n0 + g + 8 : N - 1;
    float acc[NW][MT][4];
    qacc_zero(acc);
    typedef typename F::raw raw;
    raw cur[NW][2];
    auto load = [&](raw (&r)[NW][2], int b) {
#pragma unroll
        for (int v = 0; v < NW; v++) {
            F::load(v ? w2 : w, na, b, t, K, r[v][0]);
            F::load(v ? w2 : w, nb, b, t, K, r[v][1]);
        }
    };
    if (warp < SB) load(cur, warp);
    pdl_wait();
    for (int b = warp; b < SB; b += QK_WARPS) {
        raw nxt[NW][2];
        if constexpr (PF) {
            if (b + QK_WARPS < SB) load(nxt, b + QK_WARPS);
        }
        const int k0 = 32 * UPS * b;
#pragma unroll
        for (int v = 0; v < UPS; v++) {
            if (k0 + 32 * v >= K) break; /* (a last step of fewer units: whole groups) */
            qunit ra[NW], rb[NW];
#pragma unroll
            for (int i = 0; i < NW; i++) ra[i] = F::unit(cur[i][0], v), rb[i] = F::unit(cur[i][1], v);
            qmma_unit<F::QT, MT, NW>(acc, x, M, K, m0, g, k0 + F::e0(t, v), k0 + F::e1(t, v), ra, rb);
        }
        if constexpr (PF) {
#pragma unroll
            for (int i = 0; i < NW; i++) cur[i][0] = nxt[i][0], cur[i][1] = nxt[i][1];
        } else if (b + QK_WARPS < SB) {
            load(cur, b + QK_WARPS);
        }
    }
    qmma_out<MT, EPI, NW>(acc, part, y, ldy, M, N, n0, m0, bias);
}

/* ---- the 32-element block formats: a warp's step staged in shared memory --- */

/* Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 blocks are 34, 18, 20, 22 and 24 bytes, so
   a lane's few bytes of a block sit at 2-byte alignment in rows that the
   8 rows of one load instruction spread over 8 cache lines. Instead the
   warp copies its step (8 blocks of each of its 16 rows, 16-byte aligned
   when K is a multiple of 256) with 16-byte loads into its slice of shared
   memory and every lane reads its words there (k_qmma's words, k_qmma's
   lane mapping); the next step's copy is loaded into registers while the
   current one computes. The sums are k_qmma's over the units in this
   order: warp w takes the steps w, w + QK_WARPS, ... (their 8 units in
   order), so a row's bits still depend on K alone. */
template <int QT> struct qst {
    static constexpr int BB = QT == DT_Q8_0 ? 34 : QT == DT_Q4_0 ? 18 : QT == DT_Q4_1 ? 20 : QT == DT_Q5_0 ? 22 : 24;
    static constexpr int C = BB / 2;                            /* 16-byte chunks of a row's step (8 BB bytes) */
    static constexpr int SW = (2 * BB) % 8 == 4 ? 2 * BB : 2 * BB + 4; /* its words in shared memory: 4 mod 8,
                                                                  so rows g = 0..7 start 4g banks apart */
    static constexpr int CPL = (16 * C + 31) / 32;             /* chunks a lane copies */
};

/* k_qmma's words of a block at b (shared memory, 2-byte aligned) */
template <int QT>
__device__ __forceinline__ void qload_sh(const uint8_t *b, int t, qraw &r) {
    auto u16 = [](const uint8_t *p) { return (uint32_t) * reinterpret_cast<const unsigned short *>(p); };
    auto u16p = [&](const uint8_t *p) { return u16(p) | u16(p + 2) << 16; };
    auto u32 = [](const uint8_t *p) { return *reinterpret_cast<const uint32_t *>(p); };
    if constexpr (QT == DT_Q8_0) {
        r.w[0] = u16p(b + 2 + 4 * t), r.w[1] = u16p(b + 18 + 4 * t), r.s[0] = u16(b);
    } else if constexpr (QT == DT_Q4_0) {
        r.w[0] = u16p(b + 2 + 4 * t), r.s[0] = u16(b);
    } else if constexpr (QT == DT_Q4_1) {
        r.w[0] = u32(b + 4 + 4 * t), r.s[0] = u32(b);
    } else if constexpr (QT == DT_Q5_0) {
        r.w[0] = u16p(b + 6 + 4 * t), r.w[1] = u16p(b + 2), r.s[0] = u16(b);
    } else {
        r.w[0] = u32(b + 8 + 4 * t), r.w[1] = u32(b + 4), r.s[0] = u32(b);
    }
}

template <int QT, int MT, int EPI>
__global__ void __launch_bounds__(32 * QK_WARPS) k_qmma_st(float *__restrict__ y, int ldy,
                                                           const float *__restrict__ x, int M, int N, int K, qw w,
                                                           qw w2, const float *__restrict__ bias) {
    typedef qst<QT> S;
    constexpr int NW = EPI == MM_SWIGLU ? 2 : 1;
    __shared__ float part[QK_WARPS][NW][MT][4][32];
    __shared__ uint4 stage[QK_WARPS][NW][16][S::SW / 4];
    pdl_trigger();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 16, m0 = blockIdx.y * 8 * MT, SB = K / 256;
    float acc[NW][MT][4];
    qacc_zero(acc);
    uint4 cp[NW][S::CPL];
    /* chunk i of the warp's copy: row i / C (past N: row N - 1), chunk i % C */
    auto load = [&](int b) {
#pragma unroll
        for (int v = 0; v < NW; v++)
#pragma unroll
            for (int k = 0; k < S::CPL; k++) {
                const int i = lane + 32 * k;
                if (i < 16 * S::C) {
                    const int r = i / S::C, c = i % S::C, n = n0 + r < N ? n0 + r : N - 1;
                    const qw &q = v ? w2 : w;
                    cp[v][k] = __ldg(reinterpret_cast<const uint4 *>(q.p + (size_t)n * q.rb + (size_t)b * 8 * S::BB) + c);
                }
            }
    };
    if (warp < SB) load(warp);
    pdl_wait();
    for (int b = warp; b < SB; b += QK_WARPS) {
        __syncwarp();
#pragma unroll
        for (int v = 0; v < NW; v++)
#pragma unroll
            for (int k = 0; k < S::CPL; k++) {
                const int i = lane + 32 * k;
                if (i < 16 * S::C) stage[warp][v][i / S::C][i % S::C] = cp[v][k];
            }
        __syncwarp();
        if (b + QK_WARPS < SB) load(b + QK_WARPS);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            qunit ra[NW], rb[NW];
            const int u = 8 * b + i;
#pragma unroll
            for (int v = 0; v < NW; v++) {
                qraw xa, xb;
                qload_sh<QT>(reinterpret_cast<const uint8_t *>(stage[warp][v][g]) + i * S::BB, t, xa);
                qload_sh<QT>(reinterpret_cast<const uint8_t *>(stage[warp][v][g + 8]) + i * S::BB, t, xb);
                ra[v] = qunpack<QT>(xa, u, t), rb[v] = qunpack<QT>(xb, u, t);
            }
            qmma_unit<QT, MT, NW>(acc, x, M, K, m0, g, 32 * u + 4 * t, 32 * u + 16 + 4 * t, ra, rb);
        }
    }
    qmma_out<MT, EPI, NW>(acc, part, y, ldy, M, N, n0, m0, bias);
}

template <class F, int EPI>
static void qmm_launch_sb(cu_go st, float *y, int ldy, const float *x, int M, int N, int K, const qw &w, const qw &w2,
                          const float *bias) {
    const dim3 blk(32 * QK_WARPS);
    if (M <= 8) launch(k_qmma_sb<F, 1, EPI>, dim3((N + 15) / 16, 1), blk, st, y, ldy, x, M, N, K, w, w2, bias);
    else launch(k_qmma_sb<F, 2, EPI>, dim3((N + 15) / 16, (M + 15) / 16), blk, st, y, ldy, x, M, N, K, w, w2, bias);
}

/* one row tile of 8 up to 8 rows (a decode, a verify of up to 7 drafts),
   two up to 16 and beyond (each block 16 rows along y); units loaded
   ahead: two (one for a SwiGLU's two matrices). None of it enters a
   row's sums. */
template <int QT, int EPI>
static void qmm_launch(cu_go st, float *y, int ldy, const float *x, int M, int N, int K, const qw &w, const qw &w2,
                       const float *bias) {
    constexpr int UN = EPI == MM_SWIGLU ? 1 : 2;
    const dim3 blk(32 * QK_WARPS);
    if constexpr (QT == DT_Q4_K || QT == DT_Q5_K || QT == DT_Q6_K)
        return qmm_launch_sb<qsb<QT>, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
    if constexpr (QT == DT_Q8_0 || QT == DT_Q4_0 || QT == DT_Q4_1 || QT == DT_Q5_0 || QT == DT_Q5_1) {
        if (K % 256 == 0) { /* (whole steps, 16-byte aligned rows) */
            if (M <= 8) launch(k_qmma_st<QT, 1, EPI>, dim3((N + 15) / 16, 1), blk, st, y, ldy, x, M, N, K, w, w2, bias);
            else launch(k_qmma_st<QT, 2, EPI>, dim3((N + 15) / 16, (M + 15) / 16), blk, st, y, ldy, x, M, N, K, w, w2, bias);
            return;
        }
    }
    if constexpr (QT == QT_MLX + 4 || QT == QT_MLX + 8) {
        constexpr int B = QT - QT_MLX;
        if (w.group == 32) return qmm_launch_sb<qsbm<B, 1>, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
        if (w.group == 64) return qmm_launch_sb<qsbm<B, 2>, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
        return qmm_launch_sb<qsbm<B, 4>, EPI>(st, y, ldy, x, M, N, K, w, w2, bias);
    }
    if (M <= 8) launch(k_qmma<QT, 1, EPI, UN>, dim3((N + 15) / 16, 1), blk, st, y, ldy, x, M, N, K, w, w2, bias);
    else launch(k_qmma<QT, 2, EPI, UN>, dim3((N + 15) / 16, (M + 15) / 16), blk, st, y, ldy, x, M, N, K, w, w2, bias);
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

/* ---- the prefill groups' weights: the matrix in bf16 --------------------- */

/* out[n][k] = bf16(W[n][k]), rounded to nearest even from the exact f32
   dequantization (deq8: quant_row_f32's bits), a thread an 8-element
   chunk at a time over the whole matrix */
template <int QT>
__global__ void k_qdeq_bf16(__nv_bfloat16 *__restrict__ out, qw w, int N, int K) {
    pdl_trigger();
    pdl_wait();
    const int C = K / 8;
    const size_t all = (size_t)N * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < all; i += (size_t)gridDim.x * blockDim.x) {
        const int n = (int)(i / C), c = (int)(i % C);
        float v[8];
        deq8<QT>(w, n, c, v);
        uint32_t p[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
            p[j] = *reinterpret_cast<const uint32_t *>(&h);
        }
        *reinterpret_cast<uint4 *>(out + i * 8) = make_uint4(p[0], p[1], p[2], p[3]);
    }
}

template <int QT> static void qdeq_go(cu_go st, __nv_bfloat16 *out, const dmat *W) {
    const size_t chunks = (size_t)W->N * (W->K / 8);
    const size_t want = (chunks + 255) / 256, cap = (size_t)sm_count() * 8;
    launch(k_qdeq_bf16<QT>, (int)(want < cap ? want : cap), 256, st, out, qw_of(W), W->N, W->K);
}

void cu_qdequant_bf16(cu_go st, __nv_bfloat16 *out, const dmat *W) {
    if (W->nsub) {
        for (int i = 0; i < W->nsub; i++) {
            cu_qdequant_bf16(st, out, &W->sub[i]);
            out += (size_t)W->sub[i].N * W->sub[i].K;
        }
        return;
    }
    switch (W->dt) {
    case DT_Q8_0: return qdeq_go<DT_Q8_0>(st, out, W);
    case DT_Q4_0: return qdeq_go<DT_Q4_0>(st, out, W);
    case DT_Q4_1: return qdeq_go<DT_Q4_1>(st, out, W);
    case DT_Q5_0: return qdeq_go<DT_Q5_0>(st, out, W);
    case DT_Q5_1: return qdeq_go<DT_Q5_1>(st, out, W);
    case DT_Q2_K: return qdeq_go<DT_Q2_K>(st, out, W);
    case DT_Q3_K: return qdeq_go<DT_Q3_K>(st, out, W);
    case DT_Q4_K: return qdeq_go<DT_Q4_K>(st, out, W);
    case DT_Q5_K: return qdeq_go<DT_Q5_K>(st, out, W);
    case DT_Q6_K: return qdeq_go<DT_Q6_K>(st, out, W);
    case DT_MLX:
        switch (W->bits) {
        case 2: return qdeq_go<QT_MLX + 2>(st, out, W);
        case 3: return qdeq_go<QT_MLX + 3>(st, out, W);
        case 4: return qdeq_go<QT_MLX + 4>(st, out, W);
        case 5: return qdeq_go<QT_MLX + 5>(st, out, W);
        case 6: return qdeq_go<QT_MLX + 6>(st, out, W);
        default: return qdeq_go<QT_MLX + 8>(st, out, W);
        }
    default: return;
    }
}
