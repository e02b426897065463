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
#include "engine/desc.h"
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
 * (at least; the default of cu_tuning's prefill_rows): activation scratch for
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
 * from CUDA_SAMPLE_MIN_VOCAB tokens on (cu_tuning's sample may force it
 * either way). */
int cuda_model_samples(const cuda_model *m);

/* Devices visible (0 when none or not built). */
int cuda_device_count(void);
/* "NVIDIA H200, 139.8 GiB, compute 9.0, driver 13.0, runtime 13.0" into out;
 * -1 with out holding the reason when the device cannot be queried. */
int cuda_describe(int gpu, char *out, size_t n);
/* The device's details for a report (engine/backend.h); leaves the current
 * device as it was. 0, or -1 with err filled. */
struct backend_device_info;
int cuda_device_info(int gpu, struct backend_device_info *out, char *err, size_t errlen);

/* w: the target's description (engine/desc.h; its files and row_major are
 * the CPU backend's concern) */

int cuda_model_create(cuda_model **out, const model_desc *w, int gpu, char *err, size_t errlen);
void cuda_model_free(cuda_model *m);

int cuda_ctx_create(cuda_ctx **out, cuda_model *m, int n_ctx, int max_batch, char *err, size_t errlen);
/* the device bytes cuda_ctx_create allocates for a context (the wider
   prefill scratch and the warpgroup attention's image included, as when
   they are made) */
size_t cuda_ctx_bytes(const cuda_model *m, int n_ctx, int max_batch);
/* the device's free and total memory now (the weights already there) */
int cuda_mem_info(const cuda_model *m, size_t *free_b, size_t *total_b);
void cuda_ctx_free(cuda_ctx *c);
int cuda_ctx_len(const cuda_ctx *c);
int cuda_ctx_capacity(const cuda_ctx *c);
void cuda_ctx_truncate(cuda_ctx *c, int len);
/* backend.ctx_copy */
int cuda_ctx_copy(cuda_ctx *dst, cuda_ctx *src, int n, char *err, size_t errlen);
/* backend.ctx_pos_bytes / ctx_save / ctx_load */
size_t cuda_ctx_pos_bytes(const cuda_model *m);
int cuda_ctx_save(cuda_ctx *c, int pos0, int n, void *host, char *err, size_t errlen);
int cuda_ctx_load(cuda_ctx *c, int pos0, int n, const void *host, char *err, size_t errlen);

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
 * when the model's tuning has chain 0 or the context traces its ops
 * (DSPARK_CUDA_TRACE=1). */
int cuda_chain_ok(const cuda_ctx *c);
int cuda_chain_start(cuda_ctx *c, int id, char *err, size_t errlen);
int cuda_chain_next(cuda_ctx *c, int more, int *id, char *err, size_t errlen);
void cuda_chain_end(cuda_ctx *c);

#ifdef __cplusplus
}
#endif

#endif
