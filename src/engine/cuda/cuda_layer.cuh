/* cuda_layer: one decoder layer of a description (engine/desc.h) on the
 * GPU, for the target's forward (cuda_backend.cu) and a drafter's block
 * (cuda_drafter.cu): the device copy of a layer's weights, its upload, and
 * the one function that enqueues a layer for M rows with the backend's
 * fused kernels. The callers keep what is not a layer: the embedding, the
 * taps, the final norm and the heads, a drafter's context ingest. */
#ifndef DS_CUDA_LAYER_CUH
#define DS_CUDA_LAYER_CUH

#include "engine/cuda/cuda_moe.cuh"
#include "engine/cuda/cuda_ops.cuh"

/* A layer's weights on the device: q, k and v stacked into one matrix
   [QD + 2 KD][H] (and their biases into one vector, zeros for a missing
   one; NULL when none has one), so one launch reads all three; the norms
   and biases f32 (NULL when absent); the layer's kinds from its wlayer. */
struct dlayer {
    dmat wqkv, wo, wg, wu, wd;
    dmat qkv_part[3]; /* quantized q, k, v apart (wqkv's parts when their formats differ) */
    /* 1: gate and up in different formats (an MLX per-module override):
       each its own matmul, then the SwiGLU apart; the rows' gate scratch
       holds both (cu_layer_gate_floats) */
    int gu_apart;
    float *attn_norm, *mlp_norm, *q_norm, *k_norm, *bqkv, *bo;
    /* [H] each: the norms of the attention's and the MLP's outputs before
       their residual adds (Gemma), or NULL; [hd/2]: the layer's own RoPE
       frequencies (Gemma's sliding layers), or NULL for the network's */
    float *post_attn_norm, *post_mlp_norm, *inv_freq;
    attn_kind attn;
    int window; /* ATTN_CAUSAL: the sliding window (desc.h wlayer.window), 0 = none */
    mlp_kind mlp;
    dmoe moe; /* MLP_MOE's experts (cuda_moe.cuh; wg, wu, wd then empty) */
};

/* L's weights into D, allocated in pl; who names the backend in errors */
int cu_up_layer(dev_pool *pl, dlayer *D, const wlayer *L, const model_config *c, int l, const char *who, char *err,
                size_t errlen);
/* floats of gate scratch a row needs for layers ls[0..n): the
   intermediate size, twice where a layer runs gate and up apart (gu_apart:
   their formats differ, or a quantized GELU MLP, whose kernels have the
   SwiGLU epilogue only) */
size_t cu_layer_gate_floats(const dlayer *ls, int n, int I);
/* the matrices of D that take tile-major copies (cu_tile_once), in out[5]
   (an MoE layer's stacked experts in place of gate, up and down) */
enum { CU_LAYER_MATS = 5 };
void cu_layer_mats(dlayer *D, dmat **out);

/* The scratch of the rows a layer runs over, and where their inputs are
   (device memory, sized for the caller's widest batch): x [rows][H] the
   hidden rows (updated in place); xb [rows][H] a norm's output where it is
   not folded; q [rows][QD] the roped queries; qkv [rows][QD + 2 KD] the
   stacked projection; att [rows][QD]; gate [rows][I]; part the split
   attention's partials (cu_attn_part_floats); att_c [CU_CUT_ROWS][QD],
   gate_c [CU_CUT_ROWS][I] the pre-cut inputs of o and down; norm_c
   [CU_CUT_ROWS][H] and norm_r [CU_CUT_ROWS] a norm run apart
   (cu_norm_split); qkv_cnt the fused q/k/v tail's counts
   (cu_qkv_tail_cnt, zeroed at allocation); pos [rows] the positions, d_len
   the cache length before the rows, cap the cache's capacity; gemm the
   cuBLAS groups and wg_img the warpgroup-mma prefill attention's scratch
   (NULL: none; then every row takes the kernels of decode rows); moe the
   experts' routing scratch (NULL for a network without experts). */
struct cu_layer_rows {
    const model_config *cfg;
    float *x, *xb, *q, *qkv, *att, *gate, *part;
    uint32_t *att_c, *gate_c, *norm_c;
    float *norm_r;
    int *qkv_cnt;
    const int *pos, *d_len;
    const float *inv_freq;
    int cap;
    cu_gemm *gemm;
    float *wg_img;
    cu_moe_buf *moe;
    /* 1: the attention and MLP norms run by their own kernel (cu_rmsnorm
       into xb) ahead of plain matmuls, the drafters' arithmetic, which
       their golden outputs hold to 2e-5; 0: folded into the matmuls or run
       apart (the target's: faster, the same bits as each other but not as
       the separate norm) */
    int norm_first;
};

/* the ops of a layer, in the order they end (a trace's labels) */
enum { CU_LOP_QKV, CU_LOP_POST, CU_LOP_ATTN, CU_LOP_O, CU_LOP_GU, CU_LOP_DOWN };

/* A call's launch choices: spread, the decode attention's launch shape
   (cu_attn_spread_for; the same bits either way); omit, CU_OMIT_* kernels left
   out (cu_tuning.omit: 0 but for timing); mark (or NULL), called with mark_arg and a
   CU_LOP_* after each op is enqueued (the trace's events). */
struct cu_layer_how {
    int spread, omit;
    void (*mark)(void *arg, int op);
    void *mark_arg;
};

/* Enqueues layer L over M rows of r at positions r->pos: the attention
   norm and the q/k/v projection with its tail (q/k norms, RoPE, the keys
   and values stored in the cache kv at *d_len + row, in its storage), the
   attention under L->attn (ATTN_CAUSAL: row m sees positions up to *d_len
   + m, from its sliding window's start under L->window; ATTN_BLOCK: every
   row sees the cache and all M rows), the o projection and the residual
   add (through L->post_attn_norm when present), the MLP norm and gate/up
   with SwiGLU or GEGLU (L->mlp), the down projection and the residual add
   (through L->post_mlp_norm), into r->x (MLP_MOE: the
   experts' MLP of cuda_moe.cuh, which synchronises the stream). */
void cu_layer(cu_go st, const cu_layer_rows *r, const dlayer *L, cu_kv kv, int M,
              const cu_layer_how *how);

/* The RMSNorm (weights gn) of M rows `in` ahead of a matmul of W run by
   its own kernel where cu_norm_split says so for site (and the matmul
   can take its input pre-cut): the rows' pre-cut products and scales in
   norm_c and norm_r, returned as the matmul's cu_cut (in, r); else none
   (the norm folded into the matmul). The same bits either way. */
cu_cut cu_norm_apart(cu_go st, cu_gemm *g, uint32_t *norm_c, float *norm_r, int site, const float *in, int M,
                     const dmat *W, const float *gn, float eps);

/* A cached prefix between two caches laid out as `blocks` blocks of
   [capacity][row bytes] (a layer's K or V of one kv head, or their
   scales): the first n rows of each block, in one strided copy on the
   destination's stream, both streams drained before and the copy waited
   for, so nothing in flight reads or writes either cache meanwhile. */
int cu_copy_prefix_rows(void *dst, size_t dcap, cudaStream_t dst_st, const void *src, size_t scap,
                        cudaStream_t src_st, size_t row, int n, size_t blocks, char *err, size_t errlen);
/* Rows [pos0, pos0+n) of each of such a cache's `blocks` blocks and host
   memory laid out [blocks][n][row] (to_host 1: cache -> host, 0: back), in
   one strided copy on the cache's stream, drained before and waited for. */
int cu_rows_host(void *dev, size_t cap, cudaStream_t st, void *host, size_t row, int pos0, int n, size_t blocks,
                 int to_host, char *err, size_t errlen);

#endif
