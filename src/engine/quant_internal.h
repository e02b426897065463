/* quant_internal: what quant.c (geometry, exact dequantization, scalar
 * matmul, dispatch) and the SIMD quant kernels (quant_avx2.c) share. Not
 * part of the public API; tests include it to reach the kernels directly. */
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

/* The scalar kernel (level 0) alone, whatever ops_level says. */
void quant_matmul_scalar(float *y, int ldy, const float *x, int M, int K, const tensor *W, const float *bias,
                         int64_t n0, int64_t n1);

#ifdef DS_HAVE_AVX2_PATH
/* quant_matmul_rows at level 1 (AVX2+FMA+F16C); quant_avx2.c states its
 * numerics. Also run at level 2 until an AVX-512 kernel exists. */
void avx2_quant_matmul_rows(float *y, int ldy, const float *x, int M, int K, const tensor *W, const float *bias,
                            int64_t n0, int64_t n1);
#endif

#endif
