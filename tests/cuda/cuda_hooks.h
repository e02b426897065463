/* cuda_hooks: the CUDA backend's entry points for the tests (tests/cuda)
 * and the op benchmarks (bench/), which production code neither declares
 * nor calls: the tuning that models take when created, single ops on host
 * arrays against the CPU ops, and the op timings. Defined in
 * tests/cuda/cuda_ops_test.cu, bench/cuda_mma_bench.cu and, where they
 * need the backend's own state, src/engine/cuda (cuda_backend.cu,
 * cuda_sample.cu, cuda_moe.cu). */
#ifndef DS_CUDA_HOOKS_H
#define DS_CUDA_HOOKS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/cuda/cuda_backend.h"
#include "engine/desc.h"
#include "engine/cuda/cuda_tuning.h"
#include "engine/sampler.h"
#include "engine/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the tuning ---- */
/* The tuning models created from now on take (cuda_tuning.h; the
 * defaults until set), which the single ops below launch under too: get
 * it, change fields, set it, before creating the model it is for. The
 * test binary starts from DSPARK_TEST_CUDA_TUNING (a cu_tuning_parse
 * spec) where set, the bench tools from DSPARK_BENCH_TUNING. */
void cuda_hook_tuning_get(cu_tuning *t);
void cuda_hook_tuning_set(const cu_tuning *t);
/* one field of it set to v, the value before returned (the tests' switches,
 * and those their attn_case_same_bits takes as int (*)(int)) */
int cuda_test_prefill_rows(int rows);   /* prefill_rows */
int cuda_test_argmax_split(int on);     /* argmax_split (-1: the default) */
int cuda_test_attention_spread(int on); /* att_spread */
int cuda_test_attention_early(int on);  /* att_early (-1: the default) */
int cuda_test_attention_wide(int on);   /* att_wide (-1: the default) */
int cuda_test_attention_wg(int on);     /* att_wg (-1: the default) */
int cuda_test_swiglu_two(int on);       /* swiglu2: the single matmuls run two SwiGLU blocks an SM when 1 */

/* ---- single ops on host arrays, for tests against the CPU ops ---- */
/* bytes from device memory at src into host memory at dst */
int cuda_test_read(void *dst, const void *src, size_t bytes, char *err, size_t errlen);
/* y[M][N] = x[M][K] . W[N][K]^T (+ bias[N]); W in dtype dt. */
int cuda_test_matmul(float *y, const float *x, int M, const void *w, ds_dtype dt, int N, int K, const float *bias,
                     char *err, size_t errlen);
/* the fused epilogues: mode 1 y += x.W^T (+ bias); mode 2 y = silu(x.W^T) * (x.W2^T); mode 3
 * y = gelu_tanh(x.W^T) * (x.W2^T) (op_geglu's) */
int cuda_test_matmul_fused(float *y, const float *x, int M, const void *w, const void *w2, ds_dtype dt, int N, int K,
                           const float *bias, int mode, char *err, size_t errlen);
/* the pre-cut paths (bf16 weights, 1-16 rows): mode 1 y += x.W^T (+ bias)
 * from x cut on the device, by cu_matmul_add_cut; mode 0 y = x.W^T (+
 * bias) from x cut, by cu_layer_matmul; mode 2 the SwiGLU (3 the GELU
 * gating) of RMSNorm(x, gn) into y and its pre-cut form into yc[M][N] (N a multiple
 * of 8, as the K of the matmul that would take it; word 2p the
 * bf16 heads of values 2p and 2p + 1, low half first, word 2p + 1 their
 * tails) */
int cuda_test_matmul_cut(float *y, uint32_t *yc, const float *x, int M, const void *w, const void *w2, int N, int K,
                         const float *bias, const float *gn, float eps, int mode, char *err, size_t errlen);
/* the folded norm run apart (cu_norm_cut, then the matmul from its pre-cut
 * rows and scales; bf16 weights, 1-16 rows): mode 0 y = RMSNorm(x,
 * gn).W^T (+ bias), mode 2 the SwiGLU (3 the GELU gating) with its pre-cut form into yc[M][N]
 * (cuda_test_matmul_cut's layout); the folded norm's bits */
int cuda_test_matmul_norm_apart(float *y, uint32_t *yc, const float *x, int M, const void *w, const void *w2, int N,
                                int K, const float *bias, const float *gn, float eps, int mode, char *err,
                                size_t errlen);
/* RMSNorm folded into the matmul: mode 0 y = RMSNorm(x, gn).W^T (+ bias);
 * mode 2 the SwiGLU (3 the GELU gating) of the normed input (K a multiple of 8, bf16 / f16) */
int cuda_test_matmul_norm(float *y, const float *x, int M, const void *w, const void *w2, ds_dtype dt, int N, int K,
                          const float *bias, const float *gn, float eps, int mode, char *err, size_t errlen);
/* the prefill path of bf16 matmuls: cuBLAS for each whole group of
 * the tuning's gemm_rows rows (CUDA_GEMM_MIN_ROWS), the kernels for the
 * rest; mode 0 store, 1 residual add, 2 SwiGLU, 3 GELU gating; gn (or NULL) an RMSNorm */
int cuda_test_matmul_prefill(float *y, const float *x, int M, const void *w, const void *w2, int N, int K,
                             const float *bias, const float *gn, float eps, int mode, char *err, size_t errlen);
/* RMSNorm(x, gn) . W^T + bias (W bf16 [(nh + 2 nkv) hd][K]) and the q/k/v
 * post-processing (per-head norms qn/kn, RoPE at pos, k and v into caches
 * of cap positions at len + row): q[M][nh*hd], kc/vc[nkv][cap][hd]; fused 1:
 * by the matmul's own tail (twice, the second from zeroed outputs), 0: the
 * separate kernel */
int cuda_test_qkv(float *q, float *kc, float *vc, const float *x, int M, const void *w, int K, const float *bias,
                  const float *gn, const float *qn, const float *kn, const int *pos, const float *inv_freq, int nh,
                  int nkv, int hd, int cap, int len, int fused, char *err, size_t errlen);
/* the same into a cache in `bits` (cuda_test_attention_kv's): kc/vc
 * [nkv][cap][hd] elements, ks/vs [nkv][cap] scales at 8 bits (else NULL) */
int cuda_test_qkv_kv(float *q, int bits, void *kc, void *vc, float *ks, float *vs, const float *x, int M,
                     const void *w, int K, const float *bias, const float *gn, const float *qn, const float *kn,
                     const int *pos, const float *inv_freq, int nh, int nkv, int hd, int cap, int len, int fused,
                     char *err, size_t errlen);
/* out[n] = sampler_rows's answers (sampler.h) for logits[n][V] under p
 * (temperature > 0), computed by the device sampler */
int cuda_test_sample_rows(int *out, const float *logits, int n, int V, const sampler_params *p, const int *draft,
                          const double *u, char *err, size_t errlen);
/* A sampled verify of drafts with distributions (DSpark's): drafts[n-1]
 * drawn by the device sampler from qlogits[n-1][V] under p with uq[n-1] (as
 * a GPU drafter draws them), then out[n] = the device sampler's answers for
 * logits[n][V] with u[n] against those drafts and their distributions
 * (spec_accept's rule: accepted when u < p(d) / q(d), else a draw from
 * max(0, p - q)) */
int cuda_test_sample_rows_q(int *drafts, int *out, const float *logits, const float *qlogits, int n, int V,
                            const sampler_params *p, const double *uq, const double *u, char *err, size_t errlen);
/* out[2i], out[2i + 1] for each x[i]: the TF32 head and tail the matmul
 * and the prefill attention multiply (tf32_cut), as bit patterns before
 * the tensor core drops their 13 low bits */
int cuda_test_tf32_cut(uint32_t *out, const float *x, int n, char *err, size_t errlen);
/* the bf16 heads and tails the matmul multiplies for bf16 weights
 * (bf16_cut2) of the pairs (x[2i], x[2i + 1]): out[2i] the two heads,
 * out[2i + 1] the two tails, each packed x[2i] in the low half */
int cuda_test_bf16_cut(uint32_t *out, const float *x, int n, char *err, size_t errlen);
/* out[m] = op_argmax(x[m], n) */
int cuda_test_argmax(int *out, const float *x, int M, int n, char *err, size_t errlen);
int cuda_test_rmsnorm(float *y, const float *x, const float *w, int M, int D, float eps, char *err, size_t errlen);
/* the steps around the matmuls some families add (cuda_elem.cu), in place
 * on x[M][D]: op 0 x *= s (op_scale), 1 x = tanh(x / s) * s (op_softcap),
 * 2 x = gelu_tanh(x) * y (op_geglu), 3 x[m] += RMSNorm(y[m], w[D]) with
 * eps s (op_rmsnorm then op_add) */
int cuda_test_elem(int op, float *x, const float *y, const float *w, int M, int D, float s, char *err, size_t errlen);
int cuda_test_rope(float *x, int M, int n_heads, int head_dim, const int *pos, const float *inv_freq, char *err,
                   size_t errlen);
/* the virtual architecture of the kernels running on the current device
 * (major * 10 + minor; 0 unknown), or -1 with err when the build has none
 * for it */
int cuda_test_code_arch(char *err, size_t errlen);
/* 1 when the build and the device both take clusters and programmatic
 * dependent launch (and the tuning's pdl is not 0) */
int cuda_test_hopper_paths(void);
/* whether the decode attention takes the spread shape at a cache length */
int cuda_test_attn_spread_for(int len);
/* whether the prefill attention's warpgroup-mma kernel runs for head dim
 * hd on this device and build (under the tuning's att_wg) */
int cuda_test_attn_wg_ready(int hd);
/* makes the next non-tiled cuda_test_attention calls also copy their
 * output's pre-cut form (cuda_test_matmul_cut's layout, M x nh*hd words)
 * into dst; NULL stops it */
void cuda_test_attention_cut(uint32_t *dst);
/* makes the next cuda_test_attention calls attend over a sliding window of
 * `window` positions (0: none; op_attention_kv's window), returning the
 * previous setting */
int cuda_test_attention_window(int window);
/* op_attention's contract: q[M][nh*hd]; k/v caches [nkv][cap][hd] holding
 * n_past + M positions; row i sees positions 0 .. n_past + i. tiled: the
 * prefill kernel (head_dim <= 128) instead of decode and verify's. */
int cuda_test_attention(float *out, const float *q, int M, int nh, int nkv, int hd, const float *kc, const float *vc,
                        int cap, int n_past, float scale, int tiled, char *err, size_t errlen);
/* the same over a cache in `bits` (cu_kv: 32 float, 16 f16 bits, 8 int8
 * with ks/vs [nkv][cap] scales, NULL otherwise) */
int cuda_test_attention_kv(float *out, const float *q, int M, int nh, int nkv, int hd, int bits, const void *kc,
                           const void *vc, const float *ks, const float *vs, int cap, int n_past, float scale,
                           int tiled, char *err, size_t errlen);
int cuda_test_embed(float *out, const void *e, ds_dtype dt, int V, int H, const int *tok, int M, char *err,
                    size_t errlen);
/* the quantized matmul (W, W2 quantized tensors of one format; engine/quant.h)
 * through cu_matmul (mode 0, + bias), cu_matmul_add (1, y read) or
 * cu_matmul_swiglu (2); with gn (or NULL), through cu_layer_matmul with an
 * RMSNorm of x (eps); group (0: none): through cu_layer_matmul with cuBLAS
 * groups of that many rows (the matrix dequantized to bf16 for them). Fails
 * where a fused path's predicate takes W. */
int cuda_test_qmatmul(float *y, const float *x, int M, const tensor *W, const tensor *W2, const float *bias,
                      const float *gn, float eps, int mode, int group, char *err, size_t errlen);
/* out[M][H] = rows tok[m] of the quantized E, dequantized on the device */
int cuda_test_qembed(float *out, const tensor *E, const int *tok, int M, char *err, size_t errlen);
/* the experts' MLP of an MoE layer (cuda_moe.cu: the router, the
 * routing, each chosen expert's gate/up and down over its gathered rows,
 * the combine) over M rows: x[M][H] += moe(RMSNorm(x, gn, eps)), the
 * experts e's tensors in any format the kernels take; tiled: the experts
 * from tile-major copies; sel (or NULL): each row's experts as the device
 * chose them, ascending, [M][e->top_k] */
int cuda_test_moe(float *x, int M, const wmoe *e, int H, const float *gn, float eps, int tiled, int *sel, char *err,
                  size_t errlen);

/* Rows [pos0, pos0+n) of `blocks` device arrays of cap rows of `row` bytes
 * (a cache's layout) out to host and back through cu_rows_host (the pinned
 * staging): fills the device arrays with a pattern, saves the rows, checks
 * them, loads other bytes into those rows and reads every array back to
 * check that those rows, and no others, changed. 0, or -1 with err. */
int cuda_test_rows_host(size_t row, size_t cap, size_t blocks, int pos0, int n, char *err, size_t errlen);

/* ---- op benchmark (bench/cuda-ops-bench.c) ---- */
/* Mean microseconds of one M x N x K bf16 matmul launch over reps, weights
 * cycled through enough copies to miss L2. mode 0 store, 1 residual add,
 * 2 SwiGLU (two N x K matrices), 3 the FMA kernel, 4 the prefill path
 * (cuBLAS for whole groups of CUDA_GEMM_MIN_ROWS rows); tiles: weight tiles per
 * warp of the tensor-core kernel (1, 2 or 4); tiled: it reads tile-major
 * copies of the weights. */
int cuda_bench_matmul(int M, int N, int K, int mode, int tiles, int tiled, int reps, double *us, char *err,
                      size_t errlen);
/* Mean microseconds of the device sampler over rows logits rows of V tokens
 * (peaked: a trained model's shape; else flat, a random model's), every row
 * rejecting its draft so that each draws. */
int cuda_bench_sample(int V, int rows, int peaked, const sampler_params *p, int reps, double *us, char *err,
                      size_t errlen);
/* Mean wall-clock microseconds to copy rows logits rows of V floats from
 * the device into pinned host memory and wait for them (what the host
 * sampler needs first), over reps copies. */
int cuda_bench_readback(int V, int rows, int reps, double *us, char *err, size_t errlen);

/* Mean microseconds of one M x N x K quantized matmul launch over reps, W
 * random bytes of format dt (bits, group: MLX's, bf16 scales), cycled
 * through enough copies to miss L2: mode 0 y = x.W^T, 2 the SwiGLU of two
 * such matrices (gate and up, as the forward runs them), 4 the prefill
 * path (cuBLAS groups on the matrix dequantized to bf16, each launch
 * dequantizing it); *wbytes: the bytes of weights (and MLX scales and
 * biases) a launch reads (bench/cuda-quant-bench.c). */
int cuda_bench_qmatmul(ds_dtype dt, int bits, int group, int M, int N, int K, int mode, int reps, double *us,
                       double *wbytes, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
