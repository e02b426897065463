/* cuda_drafter: the neural drafters' forward pass (drafter.h) on the GPU
 * that holds their target (built by `make cuda`; without it cuda_none.c
 * answers every call with a clear "built without CUDA" error).
 *
 * A cuda_dmodel is the drafter's weights on the device (matmul weights in
 * their file dtype, norms and RoPE frequencies as f32); the embedding and LM
 * head the drafter borrows or aliases are the target's device tensors, so
 * they are not copied again. A cuda_dstate is one sequence: the drafter's
 * context K/V cache (f32, [layer][K|V][kv_head][pos][hd]) and scratch.
 *
 * The computation is drafter.c's, step for step, on the launchers of
 * cuda_ops.cuh: ingest runs fc over the concatenated taps, hidden_norm and
 * per layer k_proj / k_norm / RoPE and v_proj into the cache; propose runs
 * the block [anchor, mask x (B-1)] non-causally over the context and the
 * block, the final norm and the LM head rows, and, when asked to, the
 * greedy choice on the device (DFlash: argmax per mask row; DSpark: left to
 * right, the Markov bias W2 . W1[prev] and the confidence head per row), so
 * a greedy round copies back only ids and confidences. Sampled DSpark rows
 * go one at a time (cuda_dstate_row) because each needs the previous drawn
 * id: their biased logits come back and the host sampler draws as on the
 * CPU. The logits rows stay on the device until a test asks for them.
 *
 * The numerics are those of the CPU drafter up to f32 rounding (the order of
 * the sums differs); the target's verification decides what is emitted, so
 * the speculative output is unaffected. The kernels are deterministic: the
 * same inputs give the same drafts. */
#ifndef DS_CUDA_DRAFTER_H
#define DS_CUDA_DRAFTER_H

#include <stddef.h>

#include "engine/config.h"
#include "engine/desc.h"
#include "engine/sampler.h"
#include "engine/tensor.h"
#include "engine/wbind.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cuda_model;
typedef struct cuda_dmodel cuda_dmodel;
typedef struct cuda_dstate cuda_dstate;


/* target: the target's device copy (its GPU, and its embedding / LM head
   where w leaves them NULL); may be NULL when w gives both, then gpu picks
   the device. */
int cuda_dmodel_create(cuda_dmodel **out, const drafter_desc *w, struct cuda_model *target, int gpu, char *err,
                       size_t errlen);
void cuda_dmodel_free(cuda_dmodel *m);

/* cap: cache positions (the context window plus one block). */
int cuda_dstate_create(cuda_dstate **out, cuda_dmodel *m, int cap, char *err, size_t errlen);
void cuda_dstate_free(cuda_dstate *s);
int cuda_dstate_len(const cuda_dstate *s);      /* positions with context K/V */
int cuda_dstate_capacity(const cuda_dstate *s);
void cuda_dstate_truncate(cuda_dstate *s, int len);
/* backend.dstate_copy */
int cuda_dstate_copy(cuda_dstate *dst, cuda_dstate *src, int n, char *err, size_t errlen);
/* backend.dstate_pos_bytes / dstate_save / dstate_load */
size_t cuda_dstate_pos_bytes(const cuda_dmodel *m);
int cuda_dstate_save(cuda_dstate *s, int pos0, int n, void *host, char *err, size_t errlen);
int cuda_dstate_load(cuda_dstate *s, int pos0, int n, const void *host, char *err, size_t errlen);

/* Context rows at positions pos0 .. pos0+n-1 (the cache is cut to pos0
   first; pos0 <= len and pos0 + n <= capacity): row i's features are
   taps[t][row0 + i][H] for each tap t of the host array taps[n_taps][rows][H]. */
int cuda_dstate_ingest(cuda_dstate *s, int pos0, int n, const float *taps, int rows, int row0, char *err,
                       size_t errlen);
/* The same from taps in device memory on the drafter's GPU (a target
 * forward's taps_resident buffer), copied there without the host; the
 * copy is complete when this returns. */
int cuda_dstate_ingest_dev(cuda_dstate *s, int pos0, int n, const float *taps, int rows, int row0, char *err,
                           size_t errlen);

/* The block at positions len .. len+B-1 with the anchor, and the LM head
   for n rows (DFlash: mask rows 1..n; DSpark: rows 0..n-1). chain: choose
   the n drafts greedily on the device into draft[n] (and, for DSpark with a
   confidence head, conf[n], each row's confidence given the drafts before
   it); otherwise only the head rows are computed (cuda_dstate_row
   continues). */
int cuda_dstate_propose(cuda_dstate *s, int anchor, int n, int chain, int *draft, float *conf, char *err,
                        size_t errlen);
/* DSpark, sampling (p->temperature > 0): as a chained propose, but draft j
   is drawn on the device by the device sampler (sampler_rows's draw rule)
   with u[j] from its row's distribution under p, which stays on the device
   for the verify (cuda_dstate_qrows). Every one of the n rows is drawn;
   the caller keeps those before the first low confidence. */
int cuda_dstate_propose_sampled(cuda_dstate *s, int anchor, int n, const sampler_params *p, const double *u,
                                int *draft, float *conf, char *err, size_t errlen);
/* The last sampled propose's draft distributions in device memory, as a
   verify's q reads them (cu_sample_args.q / qtot): the device sampler's
   scratch rows and their kept masses. */
void cuda_dstate_qrows(const cuda_dstate *s, const float **q, const unsigned long long **tot);
/* DSpark after a propose without chain: row j given the previous id
   (the anchor for j = 0): its confidence into *conf (when the head
   exists) and its logits z = head row j (+ W2 . W1[prev]) into z[V]. */
int cuda_dstate_row(cuda_dstate *s, int j, int prev, float *conf, float *z, char *err, size_t errlen);

/* Copies of the last propose's rows for tests and dstate_last: base[rows][V]
   the LM-head rows, z[rows][V] DSpark's biased rows (either may be NULL). */
int cuda_dstate_read_last(const cuda_dstate *s, float *base, float *z, int rows, char *err, size_t errlen);
/* The context features (after fc and hidden_norm) of the last ingested
   chunk into g[rows][H]; returns rows (at most cuda_dstate_ctx_chunk). */
int cuda_dstate_read_ctx(const cuda_dstate *s, float *g, char *err, size_t errlen);
/* Context rows ingested per device pass (the size of read_ctx's output). */
int cuda_dstate_ctx_chunk(void);

#ifdef __cplusplus
}
#endif

#endif
