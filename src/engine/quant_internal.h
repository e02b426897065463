/* quant_internal: what quant.c (geometry, exact dequantization, the
 * activation quantizer, the scalar matmul, dispatch) and the SIMD quant
 * kernels (quant_avx2.c, quant_avx512.c) share. Not part of the public API;
 * tests include it to reach the kernels directly. */
#ifndef DS_QUANT_INTERNAL_H
#define DS_QUANT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/ops_internal.h"
#include "engine/quant.h"

/* One GGUF block (quant_block_bytes(t) bytes at blk, any alignment)
 * dequantized exactly into y[quant_block_elems(t)]. */
typedef void (*quant_deq_fn)(const uint8_t *blk, float *y);
quant_deq_fn quant_deq_block(ds_dtype t); /* NULL for non-GGUF types */

/* MLX: the unsigned element e (0-based within the row) of a packed row. */
static inline uint32_t quant_mlx_elem(const uint8_t *row, int bits, int64_t e) {
    /* element e occupies bits [e*bits, e*bits+bits) of the row's bytes read
     * as one little-endian bit stream (see quant.c); 8 bytes cover it */
    int64_t bit = e * bits;
    const uint8_t *p = row + (bit >> 3);
    uint32_t v = 0;
    int nb = ((int)(bit & 7) + bits + 7) >> 3; /* bytes the element touches, <= 2 */
    for (int i = 0; i < nb; i++) v |= (uint32_t)p[i] << (8 * i);
    return (v >> (bit & 7)) & ((1u << bits) - 1u);
}

/* MLX: element i of a scales/biases array in sdtype (F32, F16 or BF16). */
float quant_mlx_sb(const void *p, ds_dtype sdt, size_t i);

/* f16 at p (any alignment) as f32 */
static inline float quant_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return ds_f16_to_f32(h);
}

/* ------------------------------------------------ quantized activations
 *
 * The activation buffer of quant_act_fill, per x row m (row stride
 * quant_act_stride(K) bytes; Kp = K rounded up to a multiple of QSPAN, the
 * padding zero in every array so kernels may read whole spans):
 *   q    int16[Kp]     the quantized row (quant.h's rule, |q| <= 32639)
 *   qp   int16[Kp]     q reordered per 64 elements for level 2: words
 *                      2i, 2i+1 hold elements 4i, 4i+1 and words 32 + 2i,
 *                      33 + 2i elements 4i+2, 4i+3 (i < 16), so two
 *                      vpdpwssd give lane i the dot of elements 4i..4i+3
 *   cor  int32[Kp/4]   -off * (sum of q over elements 4i..4i+3), off the
 *                      weight format's offset (quant_offset)
 *   dxl  f32  [Kp/4]   d of the element 4i's x block (per 4-element lane)
 *   dsx  f32  [Kp/16]  d * (float)(sum of q over elements 16u..16u+15)
 *   dxu  f32  [Kp/16]  d of unit u's x block
 *   xs   int32[Kp/16]  sum of q over elements 16u..16u+15
 *   d    f32  [Kp/32]  the x block's scale
 * A "unit" is 16 elements: every format's weight scale and min are
 * constant over a unit, and an x block holds two. Bounds (all in int32):
 * a 4-element lane of (u - off) * q is at most 4 * 255 * 32639 < 2^25 in
 * magnitude (MLX 8-bit; Q8_0 4 * 128 * 32639 < 2^24), a unit's
 * 16 * 255 * 32639 < 2^27, xs 16 * 32639 < 2^19 (exact in f32). */
#define QSPAN 256 /* elements per span: a K-quant super-block, 16 units */
#define QX_MAX 32639 /* the largest |q| (quant.h) */
typedef struct {
    int16_t *q, *qp;
    int32_t *cor;
    float *dxl, *dsx, *dxu;
    int32_t *xs;
    float *d;
} quant_xrow;

static inline int quant_kp(int K) { return (K + QSPAN - 1) / QSPAN * QSPAN; }
static inline size_t quant_act_stride(int K) {
    const size_t kp = (size_t)quant_kp(K);
    return 2 * kp + 2 * kp + kp + kp + kp / 4 + kp / 4 + kp / 4 + kp / 8;
}
static inline quant_xrow quant_xrow_at(const void *act, int K, int m) {
    const size_t kp = (size_t)quant_kp(K);
    uint8_t *p = (uint8_t *)act + (size_t)m * quant_act_stride(K);
    quant_xrow r = {.q = (int16_t *)p,
                    .qp = (int16_t *)(p + 2 * kp),
                    .cor = (int32_t *)(p + 4 * kp),
                    .dxl = (float *)(p + 5 * kp),
                    .dsx = (float *)(p + 6 * kp),
                    .xs = (int32_t *)(p + 6 * kp + kp / 4),
                    .dxu = (float *)(p + 6 * kp + kp / 2),
                    .d = (float *)(p + 6 * kp + 3 * kp / 4)};
    return r;
}

/* The offset of W's format: the weight integer is q = u - off with u the
 * unsigned element a kernel unpacks (Q8_0 128, Q4_0 8, Q5_0 16, Q3_K 4,
 * Q6_K 32, others 0). */
int quant_offset(const tensor *W);

/* One x block of 32 quantized (the rule of quant.h): q[32], returns d.
 * The scalar reference every level's quantizer equals bit for bit. */
float quant_x_block(const float *x, int16_t *q);
/* Row m's q and d (K/32 blocks) filled, then its other arrays (qp and
 * the sums) derived from them; the SIMD levels quantize with their own code (bit-equal) and share
 * the derivation. */
void quant_x_derive(quant_xrow r, int K, int off);
#ifdef DS_HAVE_AVX2_PATH
void avx2_quant_x(const float *x, int K, int16_t *q, float *d);
void avx512_quant_x(const float *x, int K, int16_t *q, float *d);
#endif

/* One span of a weight row unpacked for the integer dot: u[k] the unsigned
 * element k of the span (q = u - off), a[s] / c[s] the f32 scale and min of
 * unit s (w = a * q + c exactly: quant.h lists them per format). Units past
 * the row's end (K not a multiple of QSPAN) get u = 0, a = c = 0. The
 * generic path of every level; the AVX-512 kernels unpack the main formats
 * themselves into the same values. */
void quant_unpack_span(const tensor *W, int64_t n, int span, uint8_t u[QSPAN], float a[16], float c[16]);
/* W's format has a min / bias term (c not all zero by construction) */
int quant_has_min(const tensor *W);

/* The scalar kernel (level 0) alone, whatever ops_level says. */
void quant_matmul_scalar(float *y, int ldy, const void *act, int M, int K, const tensor *W, const float *bias,
                         int64_t n0, int64_t n1);

#ifdef DS_HAVE_AVX2_PATH
/* quant_matmul_act at level 1 (AVX2+FMA+F16C); quant_avx2.c states its
 * numerics. Also run at level 2 where the machine lacks AVX-512 VNNI. */
void avx2_quant_matmul(float *y, int ldy, const void *act, int M, int K, const tensor *W, const float *bias,
                       int64_t n0, int64_t n1);
/* quant_matmul_act at level 2 (AVX-512 VNNI + VBMI), every format: the
 * main ones with their own unpacking, the others through
 * quant_unpack_span (generic != 0 forces that for all, for tests: the
 * results are bit-equal). avx512_quant_ok: the machine has VNNI and VBMI. */
int avx512_quant_ok(void);
void avx512_quant_matmul(float *y, int ldy, const void *act, int M, int K, const tensor *W, const float *bias,
                         int64_t n0, int64_t n1, int generic);
#endif

/* ------------------------------------------------ the prefill family
 *
 * Activations of quant_pre_fill, per x row m (row stride
 * quant_pre_stride(K) bytes; Kp = quant_kp(K), padding zero):
 *   q    int16[Kp]     the row quantized as quant_act_fill does (quant.h's
 *                      16-bit rule, blocks of 32), each span of 256 stored
 *                      unit-major in eight steps of 32 values: element
 *                      16s + 2t + b of the span (unit s < 16, step t < 8,
 *                      b < 2) at index 32t + 2s + b, so 32-bit lane s of a
 *                      step holds two elements of unit s (quant_pre_pos)
 *   cor  int32[Kp/16]  -off * (sum of the unit's q), off the weight
 *                      format's offset (quant_offset)
 *   dx   f32  [Kp/16]  the d of the unit's block
 *   dsx  f32  [Kp/16]  d * (float)(sum of the unit's q)
 * Bounds: a unit's sum of u * q is at most 16 * 255 * 32639 < 2^27 in
 * magnitude and cor's 16 * 128 * 32639 < 2^26, so every partial sum of
 * a lane stays inside int32. */
typedef struct {
    int16_t *q;
    int32_t *cor;
    float *dx, *dsx;
} quant_prow;

static inline size_t quant_pre_stride(int K) {
    const size_t kp = (size_t)quant_kp(K);
    return 2 * kp + 3 * (kp / 16) * 4;
}
static inline quant_prow quant_prow_at(const void *act, int K, int m) {
    const size_t kp = (size_t)quant_kp(K);
    uint8_t *p = (uint8_t *)act + (size_t)m * quant_pre_stride(K);
    quant_prow r = {.q = (int16_t *)p,
                    .cor = (int32_t *)(p + 2 * kp),
                    .dx = (float *)(p + 2 * kp + kp / 4),
                    .dsx = (float *)(p + 2 * kp + kp / 2)};
    return r;
}
/* the index of element e (0-based in the row) in a quant_prow's q */
static inline int quant_pre_pos(int e) {
    return (e & ~255) | ((e >> 1) & 7) << 5 | ((e >> 4) & 15) << 1 | (e & 1);
}

/* Row m's q, cor, dx and dsx from x[K] (scalar; K % 32 == 0) */
void quant_pre_row_scalar(quant_prow r, const float *x, int K, int off);
/* The prefill kernel at level 0, whatever ops_level says. */
void quant_pre_matmul_scalar(float *y, int ldy, const void *act, int M, int K, const tensor *W, const float *bias,
                             int64_t n0, int64_t n1);
#ifdef DS_HAVE_AVX2_PATH
/* quant_pre_row_scalar at level 2 (bit-equal) */
void avx512_pre_row(quant_prow r, const float *x, int K, int off);
/* quant_pre_matmul at level 2 (needs avx512_quant_ok()); work: the
 * caller's quant_pre_work_bytes(K) bytes, 64-byte aligned */
void avx512_pre_matmul(float *y, int ldy, const void *act, int M, int K, const tensor *W, const float *bias,
                       int64_t n0, int64_t n1, void *work);
#endif

#endif
