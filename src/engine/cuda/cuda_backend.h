/* cuda_backend: the model's forward pass on an NVIDIA GPU (built by
 * `make cuda`; without it, cuda_none.c answers every call with a clear
 * "built without CUDA" error).
 *
 * The weights are copied to the device once (matmul weights in their file
 * dtype, bf16 / f16 / f32; norms, biases and RoPE frequencies as f32); a
 * context owns the device KV cache (f32, [layer][K|V][kv_head][pos][hd]) and
 * scratch for max_batch rows (more for prefill chunks: cuda_ctx_create).
 * cuda_forward runs model_forward's computation on the device and copies
 * back only the logits rows asked for and the taps.
 *
 * Numerics follow the CPU backend: f32 activations and accumulation, weights
 * widened in the kernels. Every kernel computes each row with the same
 * instruction sequence whatever the batch width (a warp per output with a
 * fixed lane split of K and a fixed shuffle tree; attention per (row, head)
 * over that row's own positions), so a row verified inside a k+1-row batch is
 * bit-identical to the same row decoded alone: greedy speculative decoding
 * on the GPU equals greedy plain decoding on the GPU. Prompt prefill is the
 * exception: each whole group of CUDA_GEMM_MIN_ROWS rows has its layer
 * matmuls done by cuBLAS (cuda_gemm.cu), within the golden tolerance but
 * not bit-identical to the kernels' rows; that width stays above every
 * verify width and a row's result depends only on its group. */
#ifndef DS_CUDA_BACKEND_H
#define DS_CUDA_BACKEND_H

#include <stddef.h>

#include "engine/config.h"
#include "engine/sampler.h"
#include "engine/tensor.h"
#include "engine/wbind.h"

#ifdef __cplusplus
extern "C" {
#endif

/* rows per cuBLAS group: a forward's layer matmuls use cuBLAS for each
 * whole group of this many rows from the call's first row; above
 * SPEC_MAX_DRAFT + 1 and dividing spec's prefill chunk (spec.c checks) */
#define CUDA_GEMM_MIN_ROWS 128
/* rows per prefill chunk of a context whose max_batch holds a cuBLAS group
 * (at least; DSPARK_CUDA_PREFILL_ROWS overrides it): activation scratch for
 * that many rows, logits for max_batch (cuda_backend.cu says why) */
#define CUDA_PREFILL_ROWS 1024

typedef struct cuda_model cuda_model;
typedef struct cuda_ctx cuda_ctx;
struct model_batch_s;

/* Vocabularies from this size on are sampled on the device by default
 * (model_samples_rows); below it the host samples the rows faster than
 * the device's kernel runs (with top-p 0.95, readback included, the host
 * is faster up to 16,384 tokens and the device from 32,768:
 * cuda-ops-bench's sampler sweep). */
#define CUDA_SAMPLE_MIN_VOCAB 32768
/* 1 when sampled verifies of this model are sampled on the device:
 * DSPARK_CUDA_SAMPLE=1 always, =0 never, else from CUDA_SAMPLE_MIN_VOCAB
 * tokens on. */
int cuda_model_samples(const cuda_model *m);

/* Devices visible (0 when none or not built). */
int cuda_device_count(void);
/* "NVIDIA H200, 139.8 GiB, compute 9.0, driver 13.0, runtime 13.0" into out;
 * -1 with out holding the reason when the device cannot be queried. */
int cuda_describe(int gpu, char *out, size_t n);

typedef struct {
    const model_config *cfg;
    const tensor *embed, *lm_head; /* [V][H] (the same tensor when tied) */
    const float *final_norm;       /* [H] */
    const float *inv_freq;         /* [hd/2] */
    const wlayer *layers;          /* [n_layers] */
} cuda_weights;

int cuda_model_create(cuda_model **out, const cuda_weights *w, int gpu, char *err, size_t errlen);
void cuda_model_free(cuda_model *m);

int cuda_ctx_create(cuda_ctx **out, cuda_model *m, int n_ctx, int max_batch, char *err, size_t errlen);
void cuda_ctx_free(cuda_ctx *c);
int cuda_ctx_len(const cuda_ctx *c);
int cuda_ctx_capacity(const cuda_ctx *c);
void cuda_ctx_truncate(cuda_ctx *c, int len);

/* mctx_resident_taps (model.h) on the device: up to GRAPH_ROWS rows in the
 * verify graphs' buffer, more in one allocated (or grown) here; NULL when
 * that fails. */
const float *cuda_ctx_taps(cuda_ctx *c, int n, int *rows);
/* model_forward on the device (b is a model_batch, already validated). */
int cuda_forward(cuda_ctx *c, const void *b, char *err, size_t errlen);

/* Chained greedy decoding, one row a step (plain decoding): each step's
 * input is the previous step's argmax, read on the device, so the next step
 * is launched before the host reads this one's id and the GPU does not wait
 * for the host between steps. cuda_chain_start enqueues the forward of id
 * at the cache's end; cuda_chain_next, when more, first enqueues the step
 * after the last one launched, then waits for the oldest step in flight
 * and gives its argmax (the same id cuda_forward's argmax gives for that
 * row); cuda_chain_end waits for what is still in flight and drops it from
 * the cache. Positions in the cache count the steps whose ids were read;
 * any other call on the context ends the chain first. cuda_chain_ok: 0
 * when DSPARK_CUDA_CHAIN=0 or the context traces its ops. */
int cuda_chain_ok(const cuda_ctx *c);
int cuda_chain_start(cuda_ctx *c, int id, char *err, size_t errlen);
int cuda_chain_next(cuda_ctx *c, int more, int *id, char *err, size_t errlen);
void cuda_chain_end(cuda_ctx *c);

/* ---- single ops on host arrays, for tests against the CPU ops ---- */
/* sets the rows of a context's prefill scratch (CUDA_PREFILL_ROWS) for the
 * contexts created next; returns the previous setting */
int cuda_test_prefill_rows(int rows);
/* bytes from device memory at src into host memory at dst */
int cuda_test_read(void *dst, const void *src, size_t bytes, char *err, size_t errlen);
/* y[M][N] = x[M][K] . W[N][K]^T (+ bias[N]); W in dtype dt. */
int cuda_test_matmul(float *y, const float *x, int M, const void *w, ds_dtype dt, int N, int K, const float *bias,
                     char *err, size_t errlen);
/* the fused epilogues: mode 1 y += x.W^T (+ bias); mode 2 y = silu(x.W^T) * (x.W2^T) */
int cuda_test_matmul_fused(float *y, const float *x, int M, const void *w, const void *w2, ds_dtype dt, int N, int K,
                           const float *bias, int mode, char *err, size_t errlen);
/* the pre-cut paths (bf16 weights, 1-16 rows): mode 1 y += x.W^T (+ bias)
 * from x cut on the device, by cu_matmul_add_cut; mode 2 the SwiGLU of
 * RMSNorm(x, gn) into y and its pre-cut form into yc[M][N] (N a multiple
 * of 8, as the K of the matmul that would take it; word 2p the
 * bf16 heads of values 2p and 2p + 1, low half first, word 2p + 1 their
 * tails) */
int cuda_test_matmul_cut(float *y, uint32_t *yc, const float *x, int M, const void *w, const void *w2, int N, int K,
                         const float *bias, const float *gn, float eps, int mode, char *err, size_t errlen);
/* the folded norm run apart (cu_norm_cut, then the matmul from its pre-cut
 * rows and scales; bf16 weights, 1-16 rows): mode 0 y = RMSNorm(x,
 * gn).W^T (+ bias), mode 2 the SwiGLU with its pre-cut form into yc[M][N]
 * (cuda_test_matmul_cut's layout); the folded norm's bits */
int cuda_test_matmul_norm_apart(float *y, uint32_t *yc, const float *x, int M, const void *w, const void *w2, int N,
                                int K, const float *bias, const float *gn, float eps, int mode, char *err,
                                size_t errlen);
/* RMSNorm folded into the matmul: mode 0 y = RMSNorm(x, gn).W^T (+ bias);
 * mode 2 the SwiGLU of the normed input (K a multiple of 8, bf16 / f16) */
int cuda_test_matmul_norm(float *y, const float *x, int M, const void *w, const void *w2, ds_dtype dt, int N, int K,
                          const float *bias, const float *gn, float eps, int mode, char *err, size_t errlen);
/* the prefill path of bf16 matmuls: cuBLAS for each whole group of
 * CUDA_GEMM_MIN_ROWS rows (or DSPARK_CUDA_GEMM_ROWS), the kernels for the
 * rest; mode 0 store, 1 residual add, 2 SwiGLU; gn (or NULL) an RMSNorm */
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
/* sets whether the device argmax takes its split kernel (1 or -1, the
 * default unless DSPARK_CUDA_ARGMAX_SPLIT=0, on; 0 off); returns the
 * previous setting */
int cuda_test_argmax_split(int on);
int cuda_test_rmsnorm(float *y, const float *x, const float *w, int M, int D, float eps, char *err, size_t errlen);
int cuda_test_rope(float *x, int M, int n_heads, int head_dim, const int *pos, const float *inv_freq, char *err,
                   size_t errlen);
/* sets cu_attention's launch shape override (1 spread, 0 not, -1 by cache
 * length as DSPARK_CUDA_ATT_SPREAD unset; the same bits either way);
 * returns the previous setting */
int cuda_test_attention_spread(int on);
/* sets whether the decode attention requests its first chunk before
 * waiting for the previous kernel (1 on, 0 off, -1 the default; the same
 * bits either way); returns the previous setting */
int cuda_test_attention_early(int on);
/* sets whether the decode attention's verify widths run on twice the warps
 * (1 or -1, the default, on; 0 off; the same bits either way); returns the
 * previous setting */
int cuda_test_attention_wide(int on);
/* sets whether this thread's bf16 SwiGLU matmuls of 1-8 rows run two blocks
   an SM (cu_swiglu_two; the same bits either way); returns the previous
   setting */
int cuda_test_swiglu_two(int on);
/* the virtual architecture of the kernels running on the current device
 * (major * 10 + minor; 0 unknown), or -1 with err when the build has none
 * for it */
int cuda_test_code_arch(char *err, size_t errlen);
/* 1 when the build and the device both take clusters and programmatic
 * dependent launch (and DSPARK_CUDA_PDL is not 0) */
int cuda_test_hopper_paths(void);
/* whether the decode attention takes the spread shape at a cache length */
int cuda_test_attn_spread_for(int len);
/* the prefill attention's warpgroup-mma kernel: the switch (1 on, 0 off, -1
   the default; returns the setting before) and whether it runs for head
   dim hd on this device and build */
int cuda_test_attention_wg(int on);
int cuda_test_attn_wg_ready(int hd);
/* makes the next non-tiled cuda_test_attention calls also copy their
 * output's pre-cut form (cuda_test_matmul_cut's layout, M x nh*hd words)
 * into dst; NULL stops it */
void cuda_test_attention_cut(uint32_t *dst);
/* op_attention's contract: q[M][nh*hd]; k/v caches [nkv][cap][hd] holding
 * n_past + M positions; row i sees positions 0 .. n_past + i. tiled: the
 * prefill kernel (head_dim <= 128) instead of decode and verify's. */
int cuda_test_attention(float *out, const float *q, int M, int nh, int nkv, int hd, const float *kc, const float *vc,
                        int cap, int n_past, float scale, int tiled, char *err, size_t errlen);
int cuda_test_embed(float *out, const void *e, ds_dtype dt, int V, int H, const int *tok, int M, char *err,
                    size_t errlen);

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

#ifdef __cplusplus
}
#endif

#endif
