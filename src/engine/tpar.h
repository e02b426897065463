/* tpar: tensor parallelism's sharding plan, independent of any backend.
 * A model split over N ranks (--tensor-parallel N) gives each rank a
 * narrower copy of every layer, and a backend runs a rank's layer with the
 * kernels it already has, adding the collectives of coll.h between them.
 *
 * The plan (Megatron's split of a decoder layer):
 *   - q/k/v: output rows by whole attention heads. Rank r holds q heads
 *     [r*nh/N, (r+1)*nh/N) and, when N divides the KV heads, KV heads
 *     [r*nkv/N, (r+1)*nkv/N). When N > nkv and nkv divides N, each KV head
 *     is replicated on N/nkv ranks: rank r holds KV head r*nkv/N, the one
 *     its q heads read (its q heads lie in that head's group). Any other N
 *     is refused. q/k/v biases are sliced with their rows; q/k norms are
 *     per head and whole on every rank. Each rank's KV cache holds its own
 *     KV heads.
 *   - o: the input columns of the rank's q heads; each rank's product is a
 *     partial sum over its columns, summed over the ranks by an all-reduce
 *     (coll.h); the o bias, then Gemma's post-attention norm, apply to the
 *     reduced row.
 *   - gate/up: output rows [r*I/N, (r+1)*I/N) (MLP columns), down: the
 *     same input columns, a partial sum reduced like o; Gemma's post-MLP
 *     norm applies to the reduced row. An MoE layer splits each expert's
 *     intermediate columns the same way (moe_intermediate_size / N each);
 *     the router is whole on every rank, so every rank routes a row to the
 *     same experts, and a rank's partial is its slices' weighted sum in
 *     ascending expert order.
 *   - embedding and LM head: rows by vocabulary, rank r holding ids
 *     [r*V/N, (r+1)*V/N). A rank gathers the rows of the ids it holds and
 *     -0.0 elsewhere, and the all-reduce sums them exactly (v + -0 = v for
 *     every v, +0 included, in any order); the LM head's logits shards are
 *     joined by an all-gather, so a logit's bits are those of the whole
 *     matrix (a row's result never depends on the rows beside it).
 *   - norms, the residual stream and the final norm are whole on every
 *     rank, computed by each from the same reduced rows (the same bits).
 *
 * Column splits of o and down cut each row of the matrix: a quantized
 * matrix must be cut on its format's boundaries (GGUF blocks of 32 or 256
 * elements, MLX groups of 32, 64 or 128), so each rank's share of K must
 * be a multiple of that; tpar_model_make refuses otherwise, naming the
 * tensor, the block and the split. Row splits take whole rows, which
 * every format allows. Since the activation quantization of the CPU's
 * quantized matmul runs in blocks of 32 from column 0 (quant.h), a share
 * on a block boundary quantizes its x columns exactly as the whole row
 * does, and the ranks' partials differ from the whole product only in the
 * order of their f32 additions.
 *
 * What changes with N: only the reduction order of o and down (each
 * rank's partial is a fixed-order chain over its columns, then the
 * partials are summed in rank order 0 + 1 + ... + N-1). Everything else
 * (q/k/v, attention, gate/up, the logits given the final row) is the same
 * arithmetic at every N. So a row's bits never depend on the batch it is
 * in at a fixed N (speculative output equals plain decoding at that N),
 * and logits at different N agree to f32 rounding, not bit for bit. */
#ifndef DS_TPAR_H
#define DS_TPAR_H

#include <stddef.h>
#include <stdint.h>

#include "engine/config.h"
#include "engine/desc.h"

/* most ranks a model splits over */
#define TPAR_MAX_RANKS 64

typedef struct {
    int ranks;
    int heads, kv_heads; /* per rank: q heads, KV heads */
    int kv_share;        /* ranks that hold one KV head (N > n_kv_heads: N / n_kv_heads; else 1) */
    int inter;           /* per rank: dense MLP columns (intermediate_size / N; 0 without dense layers) */
    int moe_inter;       /* per rank: each expert's columns (moe_intermediate_size / N; 0 without experts) */
} tpar_plan;

/* The plan for config c over ranks ranks (1 included: the whole model).
 * 0, or -1 with err naming what does not split (the head counts, the MLP
 * widths, the vocabulary). */
int tpar_plan_make(tpar_plan *p, const model_config *c, int ranks, char *err, size_t errlen);
/* rank r's first q head and first KV head */
int tpar_q_head0(const tpar_plan *p, int r);
int tpar_kv_head0(const tpar_plan *p, const model_config *c, int r);
/* rank r's vocabulary ids [*v0, *v1) of a vocabulary of V */
void tpar_vocab(int ranks, int V, int r, int *v0, int *v1);

/* Whether a column split of W into `ranks` equal shares of its K falls on
 * its format's boundaries: 0, or -1 with err naming the tensor, its
 * format's block and the split. */
int tpar_check_cols(const tensor *W, int ranks, char *err, size_t errlen);

/* Rows [r0, r0 + nr) and columns [c0, c0 + nc) of matrix W as a tensor of
 * W's format in *out: a view into W's data where those bytes are one
 * contiguous run in W's layout (whole rows, and for the rows8 layout rows
 * from a multiple of 8, nr a multiple of 8), else a copy in memory
 * returned in *owned (free it; NULL for a view) laid out row-major, or in
 * rows8 when W is and the shard's shape allows. A quantized W must be cut
 * on its blocks (tpar_check_cols). 0, or -1 with err. */
int tpar_slice(tensor *out, void **owned, const tensor *W, int64_t r0, int64_t nr, int64_t c0, int64_t nc, char *err,
               size_t errlen);

/* One rank's share of a model: a description of the same kinds whose
 * config has the rank's head counts and MLP widths (hidden size and
 * vocabulary whole), its layers' slices (wo and wd, and each expert's
 * down, give partial sums: bo and the post norms are NULL here and apply
 * to the reduced rows, from the whole model's layers) and its vocabulary
 * rows of the embedding and LM head. */
typedef struct {
    model_config cfg;
    wlayer *layers;                /* [n_layers] */
    wmoe *moes;                    /* [n_layers] (MoE layers' experts; zeros elsewhere), or NULL */
    const tensor *embed, *lm_head; /* rows [v0, v1) */
    int v0, v1;
} tpar_rank;

typedef struct tpar_model tpar_model;
struct tpar_model {
    tpar_plan plan;
    const model_desc *d; /* the whole model (its bo, post norms, final norm, RoPE) */
    tpar_rank *rank;     /* [plan.ranks] */
    /* what the shards own */
    tensor *store;       /* the shard tensors */
    int n_store, cap_store;
    void **owned;
    int n_owned, cap_owned;
    const tensor **expert_ptrs; /* the ranks' wmoe pointer arrays */
};

/* Builds the ranks' shares of d (its tensors must outlive the result).
 * 0, or -1 with err naming what cannot split: the plan's refusals, a
 * quantized o / down (or an expert's down) whose split misses its blocks. */
int tpar_model_make(tpar_model **out, const model_desc *d, int ranks, char *err, size_t errlen);
void tpar_model_free(tpar_model *m);

#endif
