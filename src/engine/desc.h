/* desc: a network as data. A target model and a neural drafter are both
 * described here: hyper-parameters (model_config), the layers' kinds and
 * options, and their weights as tensors that carry their format (tensor.h:
 * dtype, layout). A backend (backend.h) executes a description with its own
 * kernels and fusions; adding a family or a weight format means adding to
 * the description and to each backend's kernels, never writing another
 * layer loop.
 *
 * A layer is: RMSNorm -> q/k/v projections (optional biases; optional
 * per-head q/k RMSNorms before RoPE, the layer's own RoPE frequencies or
 * the network's) -> attention over the KV cache under its mask kind (and
 * its sliding window, if any) -> o projection -> (optional RMSNorm) ->
 * residual add; RMSNorm -> MLP of its kind -> (optional RMSNorm) ->
 * residual add. The network may scale its embedding (config embed_scale),
 * its attention scores (attn_scale) and soft-cap its logits
 * (final_softcap). Norm weights and biases are f32 copies owned by the
 * loader, with Gemma's (1 + w) already added; matmul weights stay in their
 * file format. */
#ifndef DS_DESC_H
#define DS_DESC_H

#include "engine/config.h"
#include "engine/tensor.h"

/* Which positions a layer's rows attend to. */
typedef enum {
    ATTN_CAUSAL = 0, /* row i sees every cached position and the batch's rows 0..i (targets) */
    ATTN_BLOCK,      /* every row sees the cached context and the whole batch (a drafter's block) */
} attn_kind;

typedef enum {
    MLP_SWIGLU = 0, /* down(silu(gate(x)) * up(x)) */
    MLP_MOE,        /* a router picks top_k experts per row, each a SwiGLU MLP; their outputs weighted and summed */
    MLP_GEGLU,      /* down(gelu_tanh(gate(x)) * up(x)) (Gemma) */
} mlp_kind;

/* MLP_MOE's experts (qwen3_moe). A row's router logits r = router . x go
   through a softmax (f32); its top_k experts (the largest probabilities,
   the lower index first among equals) are weighted by their probabilities,
   renormalized to sum 1 under norm_topk; the output is the sum over those
   experts, in ascending expert order, of weight * down_e(silu(gate_e(x)) *
   up_e(x)). */
typedef struct {
    int n_experts, top_k, norm_topk, inter; /* inter: each expert's width */
    const tensor *router;                   /* [E][H] */
    const tensor **gate, **up, **down;      /* [E] each: [inter][H], [inter][H], [H][inter] */
} wmoe;

/* One decoder layer. */
typedef struct {
    attn_kind attn;
    int window; /* ATTN_CAUSAL only: a row at position p sees p - window + 1 .. p; 0 = no window */
    mlp_kind mlp;
    const tensor *wq, *wk, *wv, *wo; /* [nh*hd][H], [nkv*hd][H] x2, [H][nh*hd] */
    const tensor *wg, *wu, *wd;      /* [I][H], [I][H], [H][I] (MLP_SWIGLU; NULL under MLP_MOE) */
    const wmoe *moe;                 /* MLP_MOE's experts, else NULL */
    float *attn_norm, *mlp_norm;     /* [H] */
    float *post_attn_norm, *post_mlp_norm; /* [H]: RMSNorms of the attention's and the MLP's outputs before
                                              their residual adds (Gemma), or NULL */
    const float *inv_freq;           /* [hd/2]: this layer's RoPE when it has its own (Gemma's sliding
                                        layers), else NULL (the network's) */
    float *q_norm, *k_norm;          /* [hd] (qk_norm) or NULL */
    float *bq, *bk, *bv, *bo;        /* [nh*hd], [nkv*hd] x2, [H] or NULL */
} wlayer;

/* The window a layer's KV cache keeps (kv.h kv_set_windows): a causal
 * layer's sliding window, 0 for none (a block layer sees its whole cache). */
static inline int wlayer_window(const wlayer *L) { return L->attn == ATTN_CAUSAL ? L->window : 0; }

/* A target model: embedding, layers, final norm, LM head. */
typedef struct {
    const model_config *cfg;
    const tensor *embed, *lm_head; /* [V][H] (the same tensor when tied) */
    const float *final_norm;       /* [H] */
    const float *inv_freq;         /* [hd/2] */
    const wlayer *layers;          /* [n_layers] */
    /* the loaded files, for a backend that lays the weights out anew in
       memory it owns (the CPU's rows8; not mapped files); row_major: keep
       the file's layout (for comparisons) */
    struct st_set *weights;
    int row_major;
    /* the KV cache's storage of every context (kv.h: 32 f32, 16 f16, 8 int8
       + scales; 0 = 32); a backend that lacks one refuses it at
       model_create */
    int kv_bits;
    /* ranks the layers split over (tpar.h; 0 or 1: none), run by the
       backend's tensor_parallel table */
    int tp_ranks;
} model_desc;

/* A neural drafter (reference/drafters.md): its context rows are
 * RMSNorm(fc . [target taps], hidden_norm), of which each layer caches
 * RoPE(k_norm(k_proj C)) and v_proj C; its block [anchor, mask x (B-1)]
 * runs through ATTN_BLOCK layers, the final norm and the LM head
 * (DSpark: plus the Markov bias W2 . W1[prev] and a confidence head). */
typedef struct {
    const model_config *cfg;   /* the drafter's layers (n_layers = draft depth) */
    int dspark;                /* 0: DFlash (mask rows 1.. draft), 1: DSpark (rows 0.. draft) */
    int block_size, mask_token_id, n_taps;
    int markov_rank;           /* DSpark's r, 0 = no Markov head */
    int conf_markov;           /* the confidence head reads [h ; W1[prev]] (else h) */
    const tensor *fc;          /* [H][n_taps*H] */
    const float *hidden_norm, *final_norm; /* [H] */
    const float *inv_freq;     /* [hd/2] */
    const wlayer *layers;      /* [n_layers] */
    /* the embedding / LM head [V][H]; alias_*: the target's own tensor
       (borrowed, or a byte-identical copy), which a backend that holds the
       target's copy reuses */
    const tensor *embed, *lm_head;
    int alias_embed, alias_head;
    const tensor *w1, *w2;     /* Markov head [V][r] each, or NULL */
    const tensor *conf_w;      /* confidence head [1][H(+r)], or NULL */
    float conf_b;
} drafter_desc;

#endif
