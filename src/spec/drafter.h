/* drafter: the neural drafters, DFlash (z-lab) and DSpark (DeepSpec), as
 * specified in reference/drafters.md. Both are small Qwen3-style decoder
 * stacks with the target's hidden size that draft a whole block in one
 * non-causal pass:
 *
 *   context  C_t = RMSNorm(fc . [target taps at t], hidden_norm) for every
 *            committed position t < s; per draft layer its keys
 *            RoPE(k_norm(k_proj C_t), t) and values v_proj C_t are cached
 *            (the block's own keys/values never are);
 *   block    [anchor, mask x (B-1)] at positions s .. s+B-1, embedded, run
 *            through the layers with every block row attending to all
 *            context rows and all block rows; h = RMSNorm(X, norm).
 *
 * DFlash (DFlashDraftModel, block 16): row j >= 1 drafts the token at
 * position s+j from the target's LM head; drafts are argmax (one-hot q,
 * the z-lab rule). The file has no embedding or LM head: the target's are
 * bound.
 * DSpark (Qwen3DSparkModel, block 7): row k drafts position s+k+1 from its
 * own LM head plus a rank-r Markov bias W2 . W1[previous token], chosen
 * left to right (argmax, or sampled from the filtered softmax when the
 * sampler samples, with q recorded for the accept rule); a confidence head
 * sigmoid(w . [h_k ; W1[prev]] + b) can stop the block early. markov_rank 0
 * is DeepSpec's DFlash-style variant (plain per-row logits). Its embed and
 * lm_head copies are bound to the target's tensors when byte-identical,
 * and the copies' memory is released.
 *
 * The block always runs at full width; only the proposal is cut to the cap.
 *
 * The drafter runs on its target's backend (backend.h): on a GPU target its
 * weights, context cache and forward pass go to the same GPU; the interface
 * and the bookkeeping here are the same.
 *
 * Loading checks every tensor name and shape, refuses configs we do not
 * implement (sliding-window or causal drafters, rope scaling, other Markov
 * head types), and checks the pairing with the target: hidden size, vocab,
 * mask id, target depth, tap layers. */
#ifndef DS_DRAFTER_H
#define DS_DRAFTER_H

#include <stddef.h>

#include "engine/model.h"
#include "engine/sampler.h"
#include "spec/spec.h"
#include "engine/threadpool.h"

#define DRAFTER_MAX_TAPS 16
#define DRAFTER_MAX_BLOCK (SPEC_MAX_DRAFT + 1)

typedef enum { DRAFTER_DFLASH = 0, DRAFTER_DSPARK } drafter_kind;

typedef struct {
    drafter_kind kind;
    model_config base;   /* the Qwen3 layer hyper-parameters (num_hidden_layers = draft depth) */
    int block_size;      /* B */
    int mask_token_id;
    int n_taps;
    int tap_layers[DRAFTER_MAX_TAPS]; /* target_layer_ids: 0-based target decoder layers */
    int num_target_layers;            /* 0 when the config does not say */
    int markov_rank;                  /* DSpark; 0 = no Markov head */
    int confidence;                   /* DSpark confidence head present */
    int confidence_with_markov;       /* its input is [h ; W1[prev]] (else h) */
} drafter_config;

typedef struct dmodel dmodel; /* weights: shared by every sequence */
typedef struct dstate dstate; /* one sequence's drafter cache and scratch */

/* Parses a drafter config.json text (ctx names the file in errors). */
int drafter_config_parse(drafter_config *c, const char *text, size_t n, const char *ctx, char *err, size_t errlen);
/* Loads dir (config.json + safetensors) as a drafter for target. */
int dmodel_load(dmodel **out, const char *dir, const model *target, const model_load_opts *opt, char *err,
                size_t errlen);
void dmodel_free(dmodel *dm);
const drafter_config *dmodel_cfg(const dmodel *dm);
/* "dflash", "dspark" or "dspark-r0" (markov_rank 0). */
const char *dmodel_kind_name(const dmodel *dm);
/* 1 when the embedding / LM head copies were bound to the target's. */
int dmodel_aliased(const dmodel *dm, int *embed, int *lm_head);

/* n_ctx: the target's context window (positions). smp: the sampler the
 * target samples with (DSpark samples its drafts with the same filters). */
int dstate_create(dstate **out, const dmodel *dm, int n_ctx, tpool *tp, sampler *smp, char *err, size_t errlen);
void dstate_free(dstate *ds);
/* DSpark: stop the block at the first position whose confidence is below
 * c (0 = always the full cap). */
void dstate_set_confidence_threshold(dstate *ds, float c);
/* Makes dst hold src's first n context positions and ids (two states of
 * one drafter; n at most src's context), as mctx_copy_prefix does for
 * the target, so a prompt's shared prefix needs no features again. 0, or
 * -1 with err filled (dst unchanged). */
int dstate_copy_prefix(dstate *dst, const dstate *src, int n, char *err, size_t errlen);
/* Context rows to host memory and back (mctx_save_rows' companion):
 * dstate_pos_bytes per position (0 where the backend cannot);
 * dstate_save_rows writes context positions [pos0, pos0+n) (below the
 * context length); dstate_load_rows puts such rows at [pos0, pos0+n)
 * (pos0 at most the context length, cut there first) with ids[0 ..
 * pos0+n) the ids of the whole context then held (ids[0 .. pos0) must be
 * those it holds). 0, or -1 with err filled. */
size_t dstate_pos_bytes(const dstate *ds);
int dstate_save_rows(dstate *ds, int pos0, int n, void *host, char *err, size_t errlen);
int dstate_load_rows(dstate *ds, const int *ids, int pos0, int n, const void *host, char *err, size_t errlen);
/* Context blocks by reference (seq.h's seq_block_* for a drafter state):
 * dstate_block_rows is the positions of a block (0 where the backend
 * copies rows instead: dstate_save_rows); dstate_block_take holds block b
 * (positions [b * rows, (b+1) * rows), below the context length) without
 * a copy; dstate_block_put makes such a block this state's block b (b *
 * rows at most its context length and its ids' count: cut there first)
 * with ids[0 .. (b+1) * rows) the ids of the whole context then held, as
 * dstate_load_rows does; a state that then writes into a position of a
 * block it shares copies that block's rows first, so what a block holds
 * never changes. dblock_free lets go. NULL / -1 with err filled. */
typedef struct dblock dblock;
int dstate_block_rows(const dstate *ds);
dblock *dstate_block_take(dstate *ds, int b, char *err, size_t errlen);
int dstate_block_put(dstate *ds, const int *ids, int b, const dblock *blk, char *err, size_t errlen);
void dblock_free(dblock *blk);
/* The spec-loop interface over ds. */
drafter dstate_drafter(dstate *ds);
/* Positions whose context features are cached. */
int dstate_ctx_len(const dstate *ds);
/* The ids of its context (prompt and emitted ids: *n of them, the first
 * dstate_ctx_len of which have cached rows). */
const int *dstate_ids(const dstate *ds, int *n);

#endif
