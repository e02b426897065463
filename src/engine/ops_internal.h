/* ops_internal: what ops.c (scalar paths, dispatch, threading) and
 * ops_avx2.c (AVX2+FMA+F16C kernels) and ops_avx512.c (AVX-512 matmul)
 * share. Not part of the public API;
 * tests include it to reach the kernels directly.
 *
 * The SIMD matmul and attention kernels are written so that the value of
 * one output does not depend on how the work was split: not on the thread
 * count, not on M (a row computed in a batch of 512 equals the same row
 * computed alone), not on which rows share a register block. Each matmul
 * output is one 8-lane fp32 FMA chain over k = 0..K-1 in order (lane k%8),
 * reduced by the fixed pairing of hsum4, plus the bias (the AVX-512 matmul
 * computes the very same chains, so levels 1 and 2 agree bit for bit); each attention
 * score is such a dot scaled, and each attention output element is one FMA
 * chain over cache positions in order. This makes verify rows bit-equal to
 * decode rows, which keeps speculative decoding exactly lossless. */
#ifndef DS_OPS_INTERNAL_H
#define DS_OPS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/ops.h"
#include "base/util.h"

#if !defined(DS_NO_SIMD) && (defined(__x86_64__) || defined(__i386__))
#define DS_HAVE_AVX2_PATH 1
#endif

/* The calling thread's scratch buffer: 64-byte aligned, at least `bytes`,
 * kept across calls and grown when needed (contents are not preserved on
 * growth), freed when the thread exits. One buffer per thread: a kernel
 * must request everything it needs in one call. */
void *ops_scratch(size_t bytes);

/* Matmul tiling shared by the dispatcher and the kernels. */
#define OPS_NC 64   /* W rows per work chunk when M >= 2 (and per packed tile) */
#define OPS_KC 512  /* K tile of the blocked loop (multiple of 8) */
/* Up to this M the AVX-512 matmul streams W in place (the pairs loop of
 * ops_avx512.c; beyond, the blocked loop): the dispatcher packs x for it
 * and hands out chunks sized as for M == 1. On a Zen 5 VM the pairs loop
 * is ahead of the blocked one up to M = 48-64. */
#ifndef OPS_PAIRS_MAX_M
#define OPS_PAIRS_MAX_M 48
#endif
/* On rows8 weights (tensor.h) the AVX-512 matmul reads 2 <= M <=
 * OPS_PAIRS_MAX_M rows either in place with ops_avx512.c's matmul_r8 (x
 * unpacked; the block read once per pass of up to 6 rows) or with the
 * pairs loop on half blocks (x packed in pairs; each half read once per
 * pass of up to 12 rows). Measured on a Zen 4 VM (docs/history/benchmarks-log.md,
 * "rows8 verify widths"): matmul_r8 up to 5 rows, where the two are level
 * on weights streamed from memory and matmul_r8 is ahead on small ones;
 * beyond, on matrices of more than OPS_R8_SMALL bytes (a 0.6B's and up),
 * the pairs loop, 20-30 % ahead at 6-16 rows; on smaller ones (a model
 * that stays in cache, as the bundled one) matmul_r8 up to 8 rows and
 * wherever it reads a block fewer times (13-18, 25-30, 37-42 rows), where
 * it was 25-40 % ahead end to end. */
#define OPS_R8_MAX_M 5
#define OPS_R8_SMALL (1u << 20)
static inline int ops_r8_in_place(int M, int N, int K, ds_dtype dt) {
    if (M <= OPS_R8_MAX_M) return 1;
    if ((size_t)N * (size_t)K * dtype_size(dt) > OPS_R8_SMALL || M > OPS_PAIRS_MAX_M) return 0;
    return M <= 8 || (M + 5) / 6 < 2 * (((M + 1) / 2 + 5) / 6);
}

/* Rows per query block in attention so that one block holds about 8
 * query vectors (block rows x heads per KV head). */
static inline int ops_attn_qb(int ratio) {
    int qb = 8 / (ratio > 0 ? ratio : 1);
    return qb < 1 ? 1 : qb;
}

/* One attention work item: query rows [m0, m0+qb) of every query head that
 * reads KV head g. */
typedef struct {
    float *out;
    const float *q;
    kv_view kv; /* the cache's rows in its storage (kv.h), page by page */
    int M, n_heads, n_kv_heads, head_dim, n_past;
    int full; /* 1: every row sees positions 0 .. n_past+M-1 (no causal mask) */
    int window; /* > 0 (causal only): row m sees positions from n_past + m - window + 1 on */
    float scale;
} attn_args;

/* Cache rows [t0, t0+n) of KV head g, K (which 0) or V (1), widened to
   f32 in dst[n][hd] (exactly: f16 widens exactly, int8 is q * scale, one
   rounding): the kernels then run their f32 arithmetic on them, so a
   stored row reads the same whichever kernel or task reads it. The rows
   lie in one page (t0 and n within a tile of 64 positions). */
void ops_kv_rows(float *dst, const attn_args *a, int which, int g, int t0, int n);

/* scalar kernels (ops.c) */
/* the first position query row m sees (its sliding window's start, else 0) */
static inline int ops_attn_lo(const attn_args *a, int m) {
    const int lo = a->window > 0 ? a->n_past + m - a->window + 1 : 0;
    return lo > 0 ? lo : 0;
}
void scalar_attn_task(const attn_args *a, int g, int m0, int qb);
/* op_argmax without SIMD: the first index of the largest value (NaNs never
 * win, but x[0] does when it is NaN) */
int scalar_argmax(const float *x, int n);

/* Kernel level: 0 scalar, 1 AVX2 (+FMA+F16C), 2 AVX-512 (F/BW/VL/DQ; the
 * matmul runs ops_avx512.c, the other ops the AVX2 kernels). ops_set_level
 * clamps to what this build and CPU have, returns the previous level;
 * ops_level reports the current one. For tests comparing the paths. */
int ops_set_level(int level);
int ops_level(void);
int ops_max_level(void);

#ifdef DS_HAVE_AVX2_PATH
/* Columns [n0, n1) of y (W rows n0..n1-1) for all M rows of x. Small M
 * and large M take different loops with the same per-output arithmetic;
 * the dispatcher hands out chunks of at most OPS_NC rows when M >= 2.
 * r8: W is in the rows8 layout (tensor.h; then n0, n1 and K are multiples
 * of 8), read with the same arithmetic. */
void avx2_matmul_rows(float *y, const float *x, int M, int K, int N, const void *W, ds_dtype dt, int r8,
                      const float *bias, int n0, int n1);
/* head_dim must be a multiple of 8 */
void avx2_attn_task(const attn_args *a, int g, int m0, int qb);
void avx2_rmsnorm(float *y, const float *x, const float *w, int M, int D, float eps);
void avx2_swiglu(float *y, const float *gate, const float *up, int n);
int avx2_argmax(const float *x, int n);
double avx2_exp_sum(float *e, const float *x, int n, float mx, float scale);
void avx2_add(float *y, const float *x, int n);
void avx2_to_f32(float *y, const void *x, ds_dtype dt, int64_t n);
/* y[i] = exp(x[i]), relative error below 1e-6; exposed for tests */
void avx2_exp(float *y, const float *x, int n);

/* The AVX2 direct loop alone (W read in place, any M); the AVX-512
 * matmul uses it for M == 1. */
void avx2_matmul_direct(float *y, const float *x, int M, int K, int N, const void *W, ds_dtype dt, int r8,
                        const float *bias, int n0, int n1);
/* AVX-512 matmul (ops_avx512.c): the same contract as avx2_matmul_rows
 * and bit for bit the same results (every output the same 8-lane chain). */
void avx512_matmul_rows(float *y, const float *x, int M, int K, int N, const void *W, ds_dtype dt, int r8,
                        const float *bias, int n0, int n1);
/* Its small-M loop (2 <= M <= OPS_PAIRS_MAX_M) in two parts, so that the
 * dispatcher packs x once per op_matmul rather than once per chunk:
 * avx512_pack_pairs writes x (M rows of K) to xp, avx512_pairs_floats(M, K)
 * floats, 64-byte aligned, and avx512_matmul_pairs computes W rows
 * [n0, n1) from it (without ops_scratch). rows8 weights (r8) take it at
 * the widths ops_r8_in_place leaves to it, on half blocks. */
size_t avx512_pairs_floats(int M, int K);
void avx512_pack_pairs(float *xp, const float *x, int M, int K);
void avx512_matmul_pairs(float *y, const float *xp, int M, int K, int N, const void *W, ds_dtype dt, int r8,
                         const float *bias, int n0, int n1);
#endif

#endif
