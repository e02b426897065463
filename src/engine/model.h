/* model: a decoder-only transformer (qwen3, qwen2, llama) bound to its
 * safetensors weights as a description (desc.h), run by the backend of its
 * device (backend.h), and the one forward pass every caller uses.
 *
 * model_load validates config.json against the weight files: every tensor
 * the architecture needs must be present with the right shape and a float
 * dtype, and no unexpected tensor may be left over. A model_ctx is one
 * sequence: its KV cache plus all scratch, allocated at creation so the
 * token loop never mallocs.
 *
 * model_forward processes a batch of rows (tokens at positions), appends
 * them to the KV cache, returns logits for the rows asked for, and can copy
 * out the residual stream after chosen decoder layers (drafters read those:
 * tap layer l is HF's hidden_states[l+1]; l = -1 is the embedding output).
 * Row i of a batch attends to everything already cached plus rows 0..i. */
#ifndef DS_MODEL_H
#define DS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/config.h"
#include "engine/threadpool.h"

typedef struct model model;
typedef struct model_ctx model_ctx;
typedef struct sampler sampler;

/* most logits rows one forward samples (model_batch.smp): a verify of
   SPEC_MAX_DRAFT drafts and its anchor */
#define MODEL_SAMPLE_ROWS 65

typedef struct {
    int use_mmap; /* map the weight files instead of reading them into memory */
    /* "cpu", "cuda" or "cuda:N"; NULL: $DSPARK_DEVICE, else "cpu". On
       cuda the weights are also copied to the GPU and every context of the
       model runs its forward pass there. */
    const char *device;
    /* keep the CPU's matmul weights in the file's row-major layout instead
       of rows8 (cpu_backend.c; the same bits, for comparisons) */
    int row_major;
    /* the KV cache's storage of the model's contexts (kv.h): 32 (0 = 32,
       f32, exact), 16 (f16) or 8 (int8 with per-position scales); a
       backend without it refuses the load */
    int kv_bits;
    /* ranks the model's layers split over (engine/tpar.h; 0 or 1: none):
       on the CPU an emulation of the ranks in one process (a test of the
       sharding, not a speedup); a backend that splits no model refuses
       the load by name */
    int tensor_parallel;
} model_load_opts;

/* Whether path names a GGUF file (ends in .gguf): model_load reads it
 * as a whole checkpoint, the text layer its tokenizer and template. */
int model_path_is_gguf(const char *path);
/* Loads a checkpoint: a Hugging Face folder (config.json, safetensors;
 * float or MLX-quantized weights) or a GGUF file. opt may be NULL
 * (defaults: weights read into anonymous memory). */
int model_load(model **out, const char *dir, const model_load_opts *opt, char *err, size_t errlen);
void model_free(model *m);
const model_config *model_cfg(const model *m);
/* The token embedding [vocab][hidden] and the LM head [vocab][hidden] (the
 * same tensor when tied); drafters that borrow them bind these. */
const tensor *model_embed(const model *m);
const tensor *model_lm_head(const model *m);
/* The backend the model runs on and its copy of the model there; drafters
 * of the model run on the same backend beside it. */
const backend *model_backend(const model *m);
void *model_backend_model(const model *m);
/* What the model's backend does beyond the common contract. */
const backend_caps *model_caps(const model *m);
/* 1 when a sampled verify should ask this model for sampler_rows's answers
 * (model_batch.smp) rather than for the logits rows: on the CPU always (the
 * same host code, no copy), on a GPU when its sampler beats bringing the
 * rows back. */
int model_samples_rows(const model *m);
/* "cpu", or the GPU's description ("cuda:0: NVIDIA H200, ...") */
const char *model_device(const model *m);
/* 1 when the model's matmul weights are in the rows8 layout (tensor.h:
 * on the CPU, read into memory), whose verify costs differ */
int model_rows8(const model *m);
/* Total bytes of weight data the forward pass streams per token. */
size_t model_weight_bytes(const model *m);
/* The ranks the model's layers split over (1: none). */
int model_tensor_parallel(const model *m);
/* The KV storage of the model's contexts (32, 16 or 8). */
int model_kv_bits(const model *m);
/* 1 when the model's backend stores the KV cache in 16 and 8 bits too. */
int model_kv_low_bits(const model *m);
/* Memory facts for engine/memfit.h: a context's bytes (n_ctx positions,
 * max_batch rows) at kv_bits (0: the model's); the weight bytes mapped
 * from files (0 when read into memory: a mapping counts as available
 * memory but must stay resident); the free and total bytes of the
 * device memory the contexts go to, returning 1, or 0 when that is the
 * host's RAM (the caller reads /proc/meminfo). */
size_t model_ctx_bytes(const model *m, int n_ctx, int max_batch, int kv_bits);
size_t model_mapped_bytes(const model *m);
int model_device_mem(const model *m, size_t *free_b, size_t *total_b);

/* Context window used when the caller asks for 0: the model's maximum,
 * capped to what fits one context (engine/memfit.h; the commands say so
 * and choose the window themselves with memfit_model). */
int model_default_context(const model *m);

/* n_ctx: KV capacity in positions (0 = model_default_context); max_batch:
 * rows processed per internal chunk (longer batches are chunked). */
int mctx_create(model_ctx **out, const model *m, int n_ctx, int max_batch, tpool *tp, char *err,
                size_t errlen);
void mctx_free(model_ctx *c);
const model *mctx_model(const model_ctx *c);
int mctx_len(const model_ctx *c);      /* positions in the KV cache */
int mctx_capacity(const model_ctx *c);
void mctx_truncate(model_ctx *c, int len); /* roll back to len positions */
/* Empties the context and gives its KV cache's pages back to the system;
 * returns the bytes released (0 where the backend cannot: the GPU's
 * cache is not host memory). */
size_t mctx_release(model_ctx *c);
/* Makes dst hold src's positions [0, n) exactly as src holds them (two
 * contexts of one model, n at most src's length and dst's window), so a
 * prompt that shares a prefix with another sequence's need not compute it
 * again. 0, or -1 with err filled (dst unchanged): a backend without the
 * copy says so. */
int mctx_copy_prefix(model_ctx *dst, const model_ctx *src, int n, char *err, size_t errlen);
/* A prefix cache outside the contexts (the server's block cache): the
 * bytes one position's cache rows take in host memory (0 where the
 * backend cannot save them); mctx_save_rows writes positions
 * [pos0, pos0+n) (below mctx_len) to host, n * mctx_pos_bytes bytes;
 * mctx_load_rows puts such rows back at [pos0, pos0+n) of a context of
 * the same model (pos0 at most its length, where it is cut first), which
 * then reads exactly as the saved one did there. 0, or -1 with err
 * filled. */
size_t mctx_pos_bytes(const model_ctx *c);
/* The first position whose rows c holds in every layer (a model with
 * sliding layers gives older rows back, kv.h): rows below it cannot be
 * saved or copied. */
int mctx_kept_from(const model_ctx *c);
int mctx_save_rows(model_ctx *c, int pos0, int n, void *host, char *err, size_t errlen);
int mctx_load_rows(model_ctx *c, int pos0, int n, const void *host, char *err, size_t errlen);
/* The same without copies, where the backend shares its cache's memory
 * (the CPU's pages, kv.h): mctx_block_rows is the positions of a block (0:
 * the backend has none); mctx_block_take returns block b's rows (positions
 * [b * rows, (b+1) * rows), below mctx_len, at or above mctx_kept_from)
 * held by reference, or NULL with err filled; mctx_block_put makes them
 * block b of a context of the same model (b * rows at most its length,
 * where it is cut first) and sets its length to the block's end, so it
 * then reads as the context they came from did. A block stays valid
 * whatever the context it came from does next; mblock_free gives it back. */
typedef struct mblock mblock;
int mctx_block_rows(const model_ctx *c);
/* The contexts' cache in pages (the CPU's pool, kv.h): positions and bytes
 * of a page, pages held (resident) and how many of them are shared (by
 * several contexts, or a context and the prefix cache). 0, or -1 where the
 * backend's caches are not paged. */
typedef struct {
    int page_tokens;
    size_t page_bytes;
    int64_t held, shared;
} model_kv_pages;
int model_get_kv_pages(const model *m, model_kv_pages *st);
/* Pages a context of n positions holds at most (every layer's, sliding
 * layers no more than their window's: kv.h kv_bytes_resident); -1 where
 * the caches are not paged. */
int64_t model_kv_pages_for(const model *m, int n);
mblock *mctx_block_take(model_ctx *c, int b, char *err, size_t errlen);
int mctx_block_put(model_ctx *c, int b, const mblock *blk, char *err, size_t errlen);
void mblock_free(mblock *blk);

/* Drafts' own distributions in the backend's memory, as its sampler left
 * them when it drew the drafts there (a GPU DSpark's sampled rows,
 * backend.dstate_qrows): its scratch rows of filtered numerators and their
 * kept masses. */
struct model_draft_q {
    const float *e;
    const unsigned long long *tot;
};

typedef struct model_batch_s {
    int n;                 /* rows */
    const int *tokens;     /* [n] token ids */
    const int *pos;        /* [n] RoPE positions; NULL = cache length + i */
    int n_logits;          /* rows whose logits are wanted */
    const int *logit_rows; /* [n_logits] row indices, ascending; NULL = the last n_logits rows */
    float *logits;         /* [n_logits][vocab] output; may be NULL when argmax is set */
    int *argmax;           /* [n_logits] output, or NULL: each logits row's first largest entry (op_argmax);
                              without logits a GPU reads back only these ids */
    /* or, with smp set: sampler_rows(smp, rows, n_logits, draft, u,
       sampled, 0) over the logits rows (a GPU samples on the device, every
       row, and reads back only these ids; at most MODEL_SAMPLE_ROWS rows) */
    sampler *smp;
    const int *draft;      /* [n_logits - 1] */
    const double *u;       /* [n_logits] */
    int *sampled;          /* [n_logits] output */
    /* NULL: the drafts are one-hot (sampler_rows's rule); else, on a
       backend sampling the rows, their distributions there: a draft is accepted
       when u < p(d) / q(d) and a rejected row draws from max(0, p - q)
       (spec_accept's rule) */
    const model_draft_q *draft_q;
    int n_taps;            /* layers to tap (0 = none) */
    const int *tap_layers; /* [n_taps] in -1 .. n_layers-1 */
    float *taps;           /* [n_taps][n][hidden] output */
    /* on a backend with resident taps (backend_caps.resident_taps layers
       at most): the taps stay in its memory (mctx_resident_taps, asked for
       n rows before a forward of more than MODEL_RESIDENT_TAP_ROWS) and
       taps is not used */
    int taps_resident;
} model_batch;

/* Chained greedy decoding, one row a step, where the backend has it
 * (backend_caps.chain): the next step runs while the host reads this one's
 * id (mctx_chain_next launches the step after the oldest one in flight,
 * then waits for that one's argmax; mctx_chain_end drops what is still in
 * flight). mctx_chain_ok is 0 elsewhere (the CPU), where the others fail. */
int mctx_chain_ok(const model_ctx *c);
int mctx_chain_start(model_ctx *c, int id, char *err, size_t errlen);
int mctx_chain_next(model_ctx *c, int more, int *id, char *err, size_t errlen);
void mctx_chain_end(model_ctx *c);

#define MODEL_RESIDENT_TAP_ROWS 17
#define MODEL_RESIDENT_TAPS 8

int model_forward(model_ctx *c, const model_batch *b, char *err, size_t errlen);

/* Most sequences one model_forward_multi takes. */
#define MODEL_MULTI_MAX 64
/* The forwards of several sequences of one model at once: bs[i] on cs[i]
 * (n distinct contexts). Its results (logits, ids, taps, the caches) are
 * bit-equal to model_forward(cs[i], &bs[i]) for i = 0 .. n-1 in turn, since
 * a row's bits never depend on the batch it is in; a backend with a
 * batched form (backend.forward_multi) runs all rows' matmuls as one
 * batch, which is what makes serving several requests cheaper than one
 * after another. Every batch is checked first: nothing runs when one is
 * bad (the error names the sequence). */
int model_forward_multi(model_ctx *const *cs, const model_batch *bs, int n, char *err, size_t errlen);

/* On a backend with resident taps: the buffer in its memory where a
 * forward of up to n rows with taps_resident leaves its taps,
 * [n_taps][*rows][hidden] (its first n rows), valid until the next such
 * forward. Batches of up to MODEL_RESIDENT_TAP_ROWS rows share one buffer
 * (a verify's, always there); wider ones another, which this call
 * allocates or grows (so ask before such a forward). NULL on the CPU, or
 * when the device has no room. */
const float *mctx_resident_taps(model_ctx *c, int n, int *rows);

#endif
