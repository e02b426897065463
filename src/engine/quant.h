/* quant: the quantized weight formats (tensor.h's DT_Q* block types of
 * GGUF and DT_MLX, MLX's affine rule): their geometry, their exact
 * dequantization, and the CPU matmul over them.
 *
 * Numerics. Weights are exact as their format defines them (ggml's rule
 * for GGUF, scale * q + bias for MLX). Activations become 16-bit integers
 * at every width (decode, verify and prefill alike): each row x[m][0..K)
 * is quantized on its own in blocks of 32:
 *   amax = max |x_i| over the block, d = amax / 32639.0f (one f32
 *   division), q_i = (int16) nearbyintf(x_i / d) (f32 division, round half
 *   to even), clamped to [-32639, 32639] (a no-op unless d is subnormal);
 *   d == 0 gives q = 0. x must be finite.
 * 32639 = 256 * 127 + 127 bounds q so that the integer dots below stay
 * exact in int32 for every format (quant_internal.h gives the bounds) and
 * q = 256 hi + lo with both int8 (an exact route through u8 x s8 dots).
 * Per element |x - d q| <= d / 2 = amax / 65278: the error of an int8
 * rule (d = amax / 127) divided by 257.
 * Every weight format is written per unit of 16 elements (its scale and
 * min are constant over a unit; an x block holds two units) as
 *   w = a * (u - off) + c,  u the unsigned stored integer:
 *   Q8_0  u = q + 128, off 128, a = d,            c = 0
 *   Q4_0  u = nibble,  off 8,   a = d,            c = 0
 *   Q4_1  u = nibble,  off 0,   a = d,            c = m
 *   Q5_0  u = 5 bits,  off 16,  a = d,            c = 0
 *   Q5_1  u = 5 bits,  off 0,   a = d,            c = m
 *   Q2_K  u = 2 bits,  off 0,   a = d * sc,       c = -(dmin * mn)
 *   Q3_K  u = 3 bits,  off 4,   a = d * (sc - 32), c = 0
 *   Q4_K  u = nibble,  off 0,   a = d * sc,       c = -(dmin * mn)
 *   Q5_K  u = 5 bits,  off 0,   a = d * sc,       c = -(dmin * mn)
 *   Q6_K  u = 6 bits,  off 32,  a = d * sc,       c = 0
 *   MLX   u = element, off 0,   a = scale,        c = bias
 * (a and c are the f32 values ggml's dequantization computes, so
 * a * (u - off) + c is bit-equal to quant_row_f32). Then, with dx the x
 * block's d, per unit s:
 *   y += a_s * dx * sum(q_w * q_x)  +  c_s * (dx * sum(q_x))
 * where each integer sum is exact (int32). The float combination differs
 * per level (ops_level) and is fixed for a level: the same for every M,
 * every [n0, n1), every thread split and both the one-row and the blocked
 * kernel, so y[m][n] depends only on x[m] and row n.
 *   level 0 (quant.c): per unit the exact integer sums, the terms
 *     (double)a * dx * isum + (double)c * (dx * xsum) (the latter's
 *     product in f32) summed in double in unit order, rounded once.
 *   level 1 (quant_avx2.c): 8 f32 lanes; per unit, lane i holds the exact
 *     integer dot of elements 2i, 2i+1 of the unit (vpmaddwd of the int16
 *     weights and q); acc = fma(float(lane), a * dx, acc) units in order;
 *     the min terms c * (dx * xsum) in a second 8-lane accumulator, unit s
 *     in lane s % 8; y = hsum(acc) + hsum(min acc) (fixed pairings), + bias.
 *   level 2 (quant_avx512.c): 16 f32 lanes per 64 elements; lane i holds
 *     the exact integer dot of elements 4i..4i+3 (two vpdpwssd of the
 *     int16 weights and q); acc = fma(float(lane),
 *     a_s * dx, acc) in element order; after each span of 256 elements
 *     acc = fma(c, dx * xsum, acc) with unit s of the span in lane s;
 *     y = fixed 16-lane reduction of acc, + bias.
 * The levels agree to f32 rounding (tests/test_quant.c bounds it against
 * the double dot of the dequantized weights with the dequantized x); the
 * quantized x is bit-equal at every level. */
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

/* The activations of a matmul over W, quantized once per call (see the
 * numerics above): quant_act_bytes(M, K) bytes of caller memory, filled
 * from x[M][K] by quant_act_fill at the current ops_level, then read by
 * quant_matmul_act from any number of threads. */
size_t quant_act_bytes(int M, int K);
void quant_act_fill(void *act, const float *x, int M, int K, const tensor *W);
/* Bytes between two rows' activations: rows [m0, m1) of x fill from
 * act + m0 * quant_act_row_bytes(K) on, each row on its own (so threads
 * may fill disjoint row ranges). */
size_t quant_act_row_bytes(int K);

/* y[m * ldy + n] = dot(x[m], row n of W) (+ bias[n]) for n in [n0, n1) and
 * m in [0, M), x given as its quant_act_fill'ed activations (for this W).
 * Uses the machine's SIMD level (ops.h's ops_level); each level's result
 * for one (m, n) is independent of M and of [n0, n1). Reentrant: threads
 * call it on disjoint [n0, n1); it uses no ops_scratch. */
void quant_matmul_act(float *y, int ldy, const void *act, int M, int K, const tensor *W, const float *bias,
                      int64_t n0, int64_t n1);

/* quant_act_fill into the calling thread's ops_scratch, then
 * quant_matmul_act: the same bits as the two steps. */
void quant_matmul_rows(float *y, int ldy, const float *x, int M, int K, const tensor *W, const float *bias,
                       int64_t n0, int64_t n1);

/* The prefill family (rows of whole prefill groups only: backend.h,
 * cpu_backend.c). The same activations as above (each row quantized on
 * its own to 16-bit integers in blocks of 32) and the same exact integer
 * sum per unit, i = sum over the unit of (u - off) * q (int32); only the
 * float combination differs, fixed for every level: per (m, n), 16 f32
 * accumulators acc[s], s the unit's index within its span of 256
 * elements, start at 0, and per unit in span order
 *   acc[s] = fma(fl(fl((float)i) * a_s), dx, acc[s])
 *   acc[s] = fma(c_s, dx * xsum, acc[s])      (formats with a min term)
 * ((float)i rounds to nearest even past 2^24, dx * xsum is the f32
 * product), then y = (((acc0 + acc8) + (acc4 + acc12)) + ((acc2 + acc10) +
 * (acc6 + acc14))) + (((acc1 + acc9) + (acc5 + acc13)) + ((acc3 + acc11) +
 * (acc7 + acc15))), + bias. Every level computes exactly this, so the
 * family gives the same bits at every level, for every M, [n0, n1) and
 * thread: y[m][n] depends only on x[m] and row n, and differs from the
 * kernels above by f32 rounding alone (the same bound against the double
 * dot). Its gain is the kernel's shape, not its precision: one unit per
 * lane, so a span of 256 costs eight integer dots and one convert, product
 * and FMA per (m, n) where the kernels above convert every 64 elements
 * (quant_avx512.c). */
/* The family is worth running where the level-2 kernel runs (AVX-512 VNNI
 * at ops_level 2); elsewhere op_matmul_pre sends prefill rows to the
 * kernels above (batch-invariant, so the group rule holds trivially), and
 * the scalar family (level 0 and 1) serves as the reference. */
int quant_pre_fast(void);
size_t quant_pre_row_bytes(int K);
size_t quant_pre_bytes(int M, int K);
/* x[M][K] quantized by the prefill rule into act (rows on their own, so
   threads may fill disjoint row ranges at act + m0 * quant_pre_row_bytes) */
void quant_pre_fill(void *act, const float *x, int M, int K, const tensor *W);
/* bytes of the per-thread work memory quant_pre_matmul takes */
size_t quant_pre_work_bytes(int K);
/* y[m * ldy + n] for n in [n0, n1), m in [0, M) by the prefill family, from
 * quant_pre_fill'ed act; work: quant_pre_work_bytes(K) bytes of this
 * thread's (64-byte aligned). Reentrant on disjoint [n0, n1). */
void quant_pre_matmul(float *y, int ldy, const void *act, int M, int K, const tensor *W, const float *bias,
                      int64_t n0, int64_t n1, void *work);

#endif
