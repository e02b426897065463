/* quant: the quantized weight formats (tensor.h's DT_Q* block types of
 * GGUF and DT_MLX, MLX's affine rule): their geometry, their exact
 * dequantization, and the CPU matmul over them.
 *
 * Numerics: a weight is dequantized exactly as its format defines it, in
 * f32 (for MLX, scale * q + bias; for GGUF, ggml's rule for the type);
 * activations stay f32. The value of y[m][n] depends only on x[m] and
 * weight row n: never on M, on which rows share a call, on the chunk of
 * rows a thread takes, or on the kernel level chosen for the machine
 * being forced the same (batch invariance, docs/ARCHITECTURE.md).
 *
 * Per level (ops_level): 0 (quant.c) dequantizes row n exactly and sums
 * x[m][k] * w[k] in double in k order, rounded once to f32; 1 and 2
 * (quant_avx2.c, quant_avx512.c) factor each block's f32 scale out of an
 * f32 lane dot of x with the block's exactly widened integer elements
 * (y = sum_b scale_b * dot_b in 8 or 16 lanes, fixed final reduction), the
 * min / bias terms as their f32 value times the block's sum of x; except
 * that level 2 on Q4_0, Q4_K and Q6_K factors nothing out: it FMAs
 * the exactly dequantized f32 weights with x in 16 lanes (lane k % 16, k
 * increasing, one f32 rounding per product-add) and reduces the lanes in
 * a fixed order. The levels agree to rounding (tests/test_quant.c: within
 * 1e-5 of sum|x*w|), each level bit for bit with itself across M, chunks
 * and threads. */
#ifndef DS_QUANT_H
#define DS_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/tensor.h"

/* Elements and bytes of one block of a GGUF block type (Q8_0: 32 and 34;
 * the K types: 256 and their super-block sizes); 0 for other dtypes. */
int quant_block_elems(ds_dtype t);
size_t quant_block_bytes(ds_dtype t);

/* Bytes of one row of K elements of a quantized tensor's data (for DT_MLX
 * the packed words: K * bits / 32 * 4). */
size_t quant_row_bytes(ds_dtype t, int bits, int64_t K);

/* Checks a 2-D quantized tensor's geometry against its format: K a multiple
 * of the block (or of the MLX group), bits in {2,3,4,5,6,8}, group in
 * {32,64,128}, nbytes == N * row bytes, scales/biases present with a
 * float sdtype. 0 ok; -1 with err naming the tensor and what it found. */
int quant_check(const tensor *t, char *err, size_t errlen);

/* Row n of W (a quantized [N][K] tensor) dequantized into y[K]. */
void quant_row_f32(const tensor *W, int64_t n, float *y);

/* y[m * ldy + n] = dot(x[m][0..K), row n of W) (+ bias[n]) for n in
 * [n0, n1) and m in [0, M). W is a quantized [N][K] tensor; bias may be
 * NULL; x and y do not alias. Uses the machine's SIMD level (ops.h's
 * ops_level); each level's result for one (m, n) is independent of M and
 * of [n0, n1). Reentrant: threads call it on disjoint [n0, n1). */
void quant_matmul_rows(float *y, int ldy, const float *x, int M, int K, const tensor *W, const float *bias,
                       int64_t n0, int64_t n1);

#endif
