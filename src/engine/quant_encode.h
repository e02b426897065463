/* quant_encode: f32 rows into the quantized weight formats of tensor.h,
 * the inverse direction of engine/quant.h.
 *
 * GGUF block types (ggml's layouts, byte for byte): Q8_0 and Q4_0 and Q5_0
 * (one f16 scale per 32 elements, codes rounded to nearest), Q4_K (super-
 * blocks of 256: eight 32-element sub-blocks each with a 6-bit scale and
 * 6-bit min found by a weighted least-squares search over candidate
 * scales) and Q6_K (sixteen 16-element sub-blocks, 8-bit scales, a search
 * over candidate scales weighted by x^2). These follow the rules of
 * llama.cpp's reference quantizer (its quantize_row_*_ref), so the error is
 * that quantizer's error.
 *
 * MLX affine (mlx.core.quantize's rule): per group of G elements, scale =
 * (max - min) / (2^bits - 1) (at least 1e-7), anchored at whichever of
 * min/max has the larger magnitude, that edge snapped so it is represented
 * exactly (scale = edge / round(edge / scale), bias = edge; zero then falls
 * on a code, up to float rounding; the far end may lose up to a step to the
 * clamp); q = clamp(round((x - bias) / scale), 0, 2^bits - 1), packed from
 * the low bits of each uint32 up.
 *
 * Every encoder is a pure function of its input row: the same row gives the
 * same bytes on every call and machine (no threads, no state). */
#ifndef DS_QUANT_ENCODE_H
#define DS_QUANT_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/tensor.h"

/* Whether t is a block type this file encodes (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K). */
int qenc_supported(ds_dtype t);
/* Elements and bytes of one block of t; 0 for types not encoded here. */
int qenc_block_elems(ds_dtype t);
size_t qenc_block_bytes(ds_dtype t);
/* Bytes of a row of K elements (K a multiple of the block), else 0. */
size_t qenc_row_bytes(ds_dtype t, int64_t K);

/* Encodes x[K] into dst[qenc_row_bytes(t, K)]. 0, or -1 when t is not
 * supported or K does not fit its block. x must be finite (the caller
 * checks its source: a NaN or infinity has no code). */
int qenc_row(ds_dtype t, const float *x, int64_t K, void *dst);
/* The exact dequantization of a row written by qenc_row (ggml's rule for
 * the type); the round trip's reference. */
int qenc_decode_row(ds_dtype t, const void *src, int64_t K, float *y);

/* MLX affine: x[K] (finite, K a multiple of group) into q[K * bits / 32] words and
 * scales[K / group], biases[K / group] (f32: the writer rounds them to the
 * checkpoint's dtype). bits in {4, 8}, group in {32, 64, 128}; 0 or -1. */
int qenc_mlx_row(const float *x, int64_t K, int bits, int group, uint32_t *q, float *scales, float *biases);
/* y[k] = scales[k / group] * q[k] + biases[k / group]. */
void qenc_mlx_decode_row(const uint32_t *q, const float *scales, const float *biases, int64_t K, int bits, int group,
                         float *y);

#endif
