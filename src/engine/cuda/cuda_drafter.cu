// cuda_drafter: see cuda_drafter.h. The drafters' weights and per-sequence
// state on the device, and their forward pass on the launchers of
// cuda_ops.cuh, plus the one kernel only drafters need: DSpark's confidence
// head (the tap concatenation happens while staging on the host).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/cuda_layer.cuh"
#include "engine/cuda/cuda_drafter.h"

#define CTX_ROWS 128  /* context rows per ingest pass (a prefill chunk of the spec loop) */
#define GRAPH_ROWS 17 /* ingest passes of up to this many rows (a round's commit) replay graphs */

namespace {


/* DSpark's confidence c = sigmoid(w . [h ; e] + b) for one row, one block
   of 256 threads: fixed strided partial sums, then a fixed tree (the same
   bits every time). R = 0 when the head reads h only. */
template <typename T>
__global__ void k_confidence(float *out, const float *h, const float *e, const T *w, int H, int R, float b) {
    __shared__ float part[256];
    float s = 0.0f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) s = fmaf(h[i], widen(w[i]), s);
    for (int i = threadIdx.x; i < R; i += blockDim.x) s = fmaf(e[i], widen(w[H + i]), s);
    part[threadIdx.x] = s;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = 1.0f / (1.0f + expf(-(part[0] + b)));
}

} // namespace

struct cuda_dmodel {
    model_config cfg;
    int gpu, dspark, B, mask_id, nt, R, conf_markov, has_conf;
    dmat fc;                                   /* [H][nt*H] */
    float *hidden_norm, *final_norm, *inv_freq; /* [H], [H], [hd/2] */
    dlayer *layers;                            /* uploaded as the target's (cu_up_layer) */
    dmat own_embed, own_head;                  /* uploaded only when not the target's */
    const dmat *embed, *lm_head;               /* [V][H]: own_* or the target's */
    dmat w1, w2, conf_w;                       /* [V][R], [V][R], [1][H(+R)] */
    float conf_b;
    cu_tuning tune; /* the target's (cu_tuning_hooked's without one) */
    dev_pool pool;  /* every device allocation of the weights */
    int tiles_done; /* the tile-major copies decided (dmodel_tiles) */
};

/* h_in / d_in layout: the block's ids, the positions, the cache length
   before the pass, DSpark's previous id (sampled rows) */
#define IN_POS(s) ((s)->m->B)
#define IN_LEN(s) ((s)->m->B + (s)->rows)
#define IN_PREV(s) (IN_LEN(s) + 1)
#define IN_INTS(s) (IN_PREV(s) + 1)

struct cuda_dstate {
    cuda_dmodel *m;
    int cap, len, rows, n_ctx_last;
    float *kv;                              /* [layer][2][nkv][cap][hd] */
    float *x, *xb, *q, *qkv, *att, *gate;   /* block scratch (cu_layer_rows) */
    float *k, *v;                           /* ingest rows' keys and values */
    uint32_t *att_c, *gate_c, *norm_c;      /* the block's pre-cut inputs of o and down, a norm run apart */
    float *norm_r;
    int *qkv_cnt;                           /* the fused q/k/v tail's counts */
    cu_layer_rows lrows;                    /* the block's rows for cu_layer */
    float *feat, *g;                        /* [CTX_ROWS][nt*H], [CTX_ROWS][H] */
    float *base, *z, *e, *conf;             /* [B][V] head rows, [B][V] biased rows, [R], [B] */
    float *part;                            /* split attention partials */
    int *d_in, *draft;                      /* IN_* layout; [B] greedy drafts */
    cu_am am;                               /* the split argmax's scratch, B rows */
    /* DSpark's sampled drafts: the device sampler's scratch rows (each
       row's filtered distribution, a verify's q) and kept masses, and its
       arguments (pinned, device) */
    float *qscr;
    unsigned long long *qtot;
    cu_sample_args *h_samp, *d_samp;
    int *h_in, *h_ids;                      /* pinned: IN_* layout; [B] drafts */
    float *h_feat, *h_out;                  /* pinned: [CTX_ROWS][nt*H]; [B] confidences + [V] one z row */
    cudaStream_t st;
    /* graphs: propose by (rows, chain), ingest by rows (<= GRAPH_ROWS) */
    cudaGraphExec_t *g_block, g_ingest[2][GRAPH_ROWS + 1]; /* [features uploaded from the host or on the device] */
    int use_graphs;
};

/* ---- weights --------------------------------------------------------------- */

static int up_layers(cuda_dmodel *m, const wlayer *src, char *err, size_t errlen) {
    for (int l = 0; l < m->cfg.n_layers; l++)
        if (cu_up_layer(&m->pool, &m->layers[l], &src[l], &m->cfg, l, "CUDA drafter", err, errlen)) return -1;
    return 0;
}

/* the shapes the attention and q/k kernels take */
static int check_shapes(const model_config *c, char *err, size_t errlen) {
    if (c->n_heads % c->n_kv_heads || c->n_heads / c->n_kv_heads > ATT_MAX_G)
        return ds_err(err, errlen, "CUDA drafter: %d query heads per kv head is not supported (at most %d)",
                      c->n_heads / c->n_kv_heads, ATT_MAX_G);
    if (c->head_dim % 4 || c->head_dim > ATT_MAX_HD)
        return ds_err(err, errlen, "CUDA drafter: head_dim %d is not supported (a multiple of 4, at most %d)",
                      c->head_dim, ATT_MAX_HD);
    return 0;
}

extern "C" int cuda_dmodel_create(cuda_dmodel **out, const drafter_desc *w, struct cuda_model *target, int gpu,
                                  char *err, size_t errlen) {
    *out = NULL;
    if (target) gpu = cu_model_gpu(target);
    /* an aliased embedding / LM head is the target's device copy */
    const tensor *emb = w->alias_embed && target ? NULL : w->embed, *head = w->alias_head && target ? NULL : w->lm_head;
    if ((!emb || !head) && !target)
        return ds_err(err, errlen, "CUDA drafter: no embedding / LM head (neither its own nor the target's)");
    if (check_shapes(w->cfg, err, errlen) != 0) return -1;
    CK(cudaSetDevice(gpu));
    cuda_dmodel *m = (cuda_dmodel *)xcalloc(1, sizeof *m);
    m->cfg = *w->cfg;
    m->gpu = gpu;
    m->dspark = w->dspark;
    m->B = w->block_size;
    m->mask_id = w->mask_token_id;
    m->nt = w->n_taps;
    m->R = w->w1 && w->w2 ? w->markov_rank : 0;
    m->conf_markov = m->R > 0 && w->conf_markov;
    m->has_conf = w->conf_w != NULL;
    m->conf_b = w->conf_b;
    m->tune = target ? *cu_model_tune(target) : *cu_tuning_hooked();
    const model_config *c = &m->cfg;
    size_t H = (size_t)c->hidden_size, hd = (size_t)c->head_dim;
    m->layers = (dlayer *)xcalloc((size_t)c->n_layers, sizeof(dlayer));
    int rc = cu_up_mat(&m->pool, &m->fc, w->fc, err, errlen) || cu_up_f32(&m->pool, &m->hidden_norm, w->hidden_norm, H, err, errlen) ||
             cu_up_f32(&m->pool, &m->final_norm, w->final_norm, H, err, errlen) ||
             cu_up_f32(&m->pool, &m->inv_freq, w->inv_freq, hd / 2, err, errlen) || up_layers(m, w->layers, err, errlen);
    if (!rc && emb) {
        rc = cu_up_mat(&m->pool, &m->own_embed, emb, err, errlen);
        m->embed = &m->own_embed;
    } else if (!rc) {
        m->embed = cu_model_embed(target);
    }
    if (!rc && head) {
        if (head == emb) m->own_head = m->own_embed;
        else rc = cu_up_mat(&m->pool, &m->own_head, head, err, errlen);
        m->lm_head = &m->own_head;
    } else if (!rc) {
        m->lm_head = cu_model_lm_head(target);
    }
    if (!rc && m->R) rc = cu_up_mat(&m->pool, &m->w1, w->w1, err, errlen) || cu_up_mat(&m->pool, &m->w2, w->w2, err, errlen);
    if (!rc && m->has_conf) rc = cu_up_mat(&m->pool, &m->conf_w, w->conf_w, err, errlen);
    if (rc) {
        cuda_dmodel_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

extern "C" void cuda_dmodel_free(cuda_dmodel *m) {
    if (!m) return;
    cu_pool_free(&m->pool);
    free(m->layers);
    free(m);
}

/* ---- state ------------------------------------------------------------------ */

extern "C" int cuda_dstate_create(cuda_dstate **out, cuda_dmodel *m, int cap, char *err, size_t errlen) {
    *out = NULL;
    CK(cudaSetDevice(m->gpu));
    const model_config *c = &m->cfg;
    const int B = m->B;
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size, V = (size_t)c->vocab_size;
    size_t QD = (size_t)c->n_heads * c->head_dim, KD = (size_t)c->n_kv_heads * c->head_dim;
    cuda_dstate *s = (cuda_dstate *)xcalloc(1, sizeof *s);
    s->m = m;
    s->cap = cap;
    s->rows = B > CTX_ROWS ? B : CTX_ROWS;
    size_t R = (size_t)s->rows, kvf = (size_t)c->n_layers * 2 * KD * (size_t)cap;
    cudaError_t e = cudaMalloc((void **)&s->kv, sizeof(float) * kvf);
    if (e != cudaSuccess) {
        free(s);
        return ds_err(err, errlen, "CUDA: cannot allocate the drafter's %.2f GiB cache for %d positions: %s%s",
                      (double)sizeof(float) * kvf / (1 << 30), cap, cudaGetErrorString(e), cu_tiles_hint());
    }
    float **bufs[] = {&s->x, &s->xb, &s->q, &s->qkv, &s->att, &s->k, &s->v, &s->gate, &s->feat,
                      &s->g, &s->base, &s->z, &s->e, &s->conf, &s->part, &s->norm_r};
    size_t sizes[] = {B * H, B * H, B * QD, B * (QD + 2 * KD), B * QD, R * KD, R * KD, B * I,
                      (size_t)CTX_ROWS * m->nt * H, (size_t)CTX_ROWS * H, B * V, m->R ? B * V : 1,
                      m->R ? (size_t)m->R : 1, (size_t)B, cu_attn_part_floats(c->n_heads, c->head_dim, cap),
                      CU_CUT_ROWS};
    int ok = 1;
    for (size_t i = 0; ok && i < sizeof sizes / sizeof sizes[0]; i++)
        ok = cudaMalloc((void **)bufs[i], sizeof(float) * sizes[i]) == cudaSuccess;
    const size_t ncnt = (size_t)cu_qkv_tail_cnt(c->n_heads, c->n_kv_heads);
    ok = ok && cudaMalloc((void **)&s->att_c, sizeof(uint32_t) * CU_CUT_ROWS * QD) == cudaSuccess &&
         cudaMalloc((void **)&s->gate_c, sizeof(uint32_t) * CU_CUT_ROWS * I) == cudaSuccess &&
         cudaMalloc((void **)&s->norm_c, sizeof(uint32_t) * CU_CUT_ROWS * H) == cudaSuccess &&
         cudaMalloc((void **)&s->qkv_cnt, sizeof(int) * ncnt) == cudaSuccess &&
         cudaMemset(s->qkv_cnt, 0, sizeof(int) * ncnt) == cudaSuccess;
    ok = ok && cudaMalloc((void **)&s->d_in, sizeof(int) * IN_INTS(s)) == cudaSuccess &&
         cudaMalloc((void **)&s->draft, sizeof(int) * B) == cudaSuccess &&
         (!m->dspark || (cudaMalloc((void **)&s->qscr, sizeof(float) * B * cu_sample_stride((int)V)) == cudaSuccess &&
                         cudaMalloc((void **)&s->qtot, sizeof(unsigned long long) * B) == cudaSuccess &&
                         cudaMalloc((void **)&s->d_samp, sizeof(cu_sample_args)) == cudaSuccess &&
                         cudaMallocHost((void **)&s->h_samp, sizeof(cu_sample_args)) == cudaSuccess)) &&
         cudaMallocHost((void **)&s->h_in, sizeof(int) * IN_INTS(s)) == cudaSuccess &&
         cudaMallocHost((void **)&s->h_ids, sizeof(int) * B) == cudaSuccess &&
         cudaMallocHost((void **)&s->h_feat, sizeof(float) * CTX_ROWS * m->nt * H) == cudaSuccess &&
         cudaMallocHost((void **)&s->h_out, sizeof(float) * (B + V)) == cudaSuccess &&
         cudaStreamCreateWithFlags(&s->st, cudaStreamNonBlocking) == cudaSuccess;
    if (!ok) {
        cuda_dstate_free(s);
        cudaGetLastError();
        return ds_err(err, errlen, "CUDA: cannot allocate the drafter's scratch%s", cu_tiles_hint());
    }
    if (cu_am_create(&s->am, B, (int)V, err, errlen) != 0) {
        cuda_dstate_free(s);
        return -1;
    }
    s->g_block = (cudaGraphExec_t *)xcalloc((size_t)(B + 1) * 3, sizeof(cudaGraphExec_t));
    s->use_graphs = m->tune.graphs;
    /* the block's rows for cu_layer: no cuBLAS groups (B rows are decode-sized) */
    cu_layer_rows *r = &s->lrows;
    r->cfg = &m->cfg;
    r->x = s->x, r->xb = s->xb, r->q = s->q, r->qkv = s->qkv, r->att = s->att, r->gate = s->gate, r->part = s->part;
    r->att_c = s->att_c, r->gate_c = s->gate_c, r->norm_c = s->norm_c, r->norm_r = s->norm_r;
    r->qkv_cnt = s->qkv_cnt;
    r->pos = s->d_in + IN_POS(s), r->d_len = s->d_in + IN_LEN(s), r->inv_freq = m->inv_freq, r->cap = cap;
    r->gemm = NULL, r->wg_img = NULL;
    r->norm_first = 1;
    *out = s;
    return 0;
}

extern "C" void cuda_dstate_free(cuda_dstate *s) {
    if (!s) return;
    cudaSetDevice(s->m->gpu);
    if (s->st) cudaStreamSynchronize(s->st);
    float *bufs[] = {s->kv, s->x, s->xb, s->q, s->qkv, s->att, s->k, s->v, s->gate, s->feat, s->g, s->base, s->z,
                     s->e, s->conf, s->part, s->norm_r};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
    cudaFree(s->att_c);
    cudaFree(s->gate_c);
    cudaFree(s->norm_c);
    cudaFree(s->qkv_cnt);
    cu_am_free(&s->am);
    cudaFree(s->d_in);
    cudaFree(s->draft);
    cudaFree(s->qscr);
    cudaFree(s->qtot);
    cudaFree(s->d_samp);
    if (s->h_samp) cudaFreeHost(s->h_samp);
    if (s->h_in) cudaFreeHost(s->h_in);
    if (s->h_ids) cudaFreeHost(s->h_ids);
    if (s->h_feat) cudaFreeHost(s->h_feat);
    if (s->h_out) cudaFreeHost(s->h_out);
    if (s->g_block)
        for (int i = 0; i < (s->m->B + 1) * 3; i++)
            if (s->g_block[i]) cudaGraphExecDestroy(s->g_block[i]);
    for (int i = 0; i <= GRAPH_ROWS; i++)
        for (int h = 0; h < 2; h++)
            if (s->g_ingest[h][i]) cudaGraphExecDestroy(s->g_ingest[h][i]);
    free(s->g_block);
    if (s->st) cudaStreamDestroy(s->st);
    free(s);
}

extern "C" int cuda_dstate_len(const cuda_dstate *s) { return s->len; }
extern "C" int cuda_dstate_capacity(const cuda_dstate *s) { return s->cap; }
extern "C" void cuda_dstate_truncate(cuda_dstate *s, int len) {
    if (len < s->len) s->len = len < 0 ? 0 : len;
}
/* As cuda_ctx_copy, for the f32 cache [layer][2][nkv][cap][hd]. */
extern "C" int cuda_dstate_copy(cuda_dstate *dst, cuda_dstate *src, int n, char *err, size_t errlen) {
    if (dst == src || dst->m != src->m || n < 0 || n > src->len || n > dst->cap)
        return ds_err(err, errlen, "drafter cache copy: %d positions do not fit (source holds %d, destination takes %d)",
                      n, src->len, dst->cap);
    const model_config *c = &src->m->cfg;
    const size_t blocks = (size_t)c->n_layers * 2 * (size_t)c->n_kv_heads, row = sizeof(float) * (size_t)c->head_dim;
    CK(cudaSetDevice(src->m->gpu));
    if (cu_copy_prefix_rows(dst->kv, dst->cap, dst->st, src->kv, src->cap, src->st, row, n, blocks, err, errlen))
        return -1;
    dst->len = n;
    dst->n_ctx_last = 0;
    return 0;
}
extern "C" size_t cuda_dstate_pos_bytes(const cuda_dmodel *m) {
    return (size_t)2 * (size_t)m->cfg.n_layers * (size_t)m->cfg.n_kv_heads * (size_t)m->cfg.head_dim * sizeof(float);
}
/* As cuda_ctx_save / cuda_ctx_load, for the f32 context cache. */
static int dstate_rows_host(cuda_dstate *s, int pos0, int n, void *host, int to_host, char *err, size_t errlen) {
    const model_config *c = &s->m->cfg;
    const size_t blocks = (size_t)c->n_layers * 2 * (size_t)c->n_kv_heads, row = sizeof(float) * (size_t)c->head_dim;
    CK(cudaSetDevice(s->m->gpu));
    return cu_rows_host(s->kv, s->cap, s->st, host, row, pos0, n, blocks, to_host, err, errlen);
}
extern "C" int cuda_dstate_save(cuda_dstate *s, int pos0, int n, void *host, char *err, size_t errlen) {
    if (pos0 < 0 || n < 0 || pos0 + n > s->len)
        return ds_err(err, errlen, "drafter cache save: positions %d..%d (the context holds %d)", pos0, pos0 + n, s->len);
    return dstate_rows_host(s, pos0, n, host, 1, err, errlen);
}
extern "C" int cuda_dstate_load(cuda_dstate *s, int pos0, int n, const void *host, char *err, size_t errlen) {
    if (pos0 < 0 || n < 0 || pos0 > s->len || n > s->cap - pos0)
        return ds_err(err, errlen, "drafter cache load: positions %d..%d (the context holds %d, takes %d)", pos0,
                      pos0 + n, s->len, s->cap);
    s->len = pos0;
    if (dstate_rows_host(s, pos0, n, (void *)host, 0, err, errlen)) return -1;
    s->len = pos0 + n;
    s->n_ctx_last = 0;
    return 0;
}
extern "C" int cuda_dstate_ctx_chunk(void) { return CTX_ROWS; }

/* ---- enqueued passes (also captured as graphs: every input is read from
   the pinned staging buffers at replay) -------------------------------------- */

static float *layer_k(const cuda_dstate *s, int l) {
    const model_config *c = &s->m->cfg;
    return s->kv + (size_t)l * 2 * (size_t)c->n_kv_heads * c->head_dim * (size_t)s->cap;
}
static float *layer_v(const cuda_dstate *s, int l) {
    const model_config *c = &s->m->cfg;
    return layer_k(s, l) + (size_t)c->n_kv_heads * c->head_dim * (size_t)s->cap;
}

/* M context rows: C = RMSNorm(fc . F, hidden_norm); per layer the keys
   RoPE(k_norm(k_proj C)) and values v_proj C stored at *d_len + row. */
/* chain 1: the features are in s->feat already (cuda_dstate_ingest_dev) */
static void enqueue_ingest(cuda_dstate *s, int M, int chain) {
    const cuda_dmodel *m = s->m;
    const model_config *c = &m->cfg;
    const int H = c->hidden_size, nkv = c->n_kv_heads, hd = c->head_dim, QD = c->n_heads * hd, KD = nkv * hd;
    const cu_go st = cu_go_on(s->st, &s->m->tune);
    int *pos = s->d_in + IN_POS(s), *d_len = s->d_in + IN_LEN(s);
    cudaMemcpyAsync(s->d_in, s->h_in, sizeof(int) * IN_INTS(s), cudaMemcpyHostToDevice, st);
    if (!chain) cudaMemcpyAsync(s->feat, s->h_feat, sizeof(float) * (size_t)M * m->nt * H, cudaMemcpyHostToDevice, st);
    cu_matmul(st, s->g, s->feat, M, &m->fc, NULL);
    cu_rmsnorm(st, s->g, s->g, m->hidden_norm, M, H, c->rms_norm_eps);
    for (int l = 0; l < c->n_layers; l++) {
        const dlayer *L = &m->layers[l];
        /* the k and v rows of the stacked projection, read in place (no
           biases: drafter_load refuses them) */
        const dmat wk = cu_mat_rows(&L->wqkv, QD, KD), wv = cu_mat_rows(&L->wqkv, QD + KD, KD);
        cu_matmul(st, s->k, s->g, M, &wk, NULL);
        cu_matmul(st, s->v, s->g, M, &wv, NULL);
        /* no query heads: k_norm, RoPE and the store only */
        cu_qkv_post(st, NULL, s->k, s->v, cu_kv_f32(layer_k(s, l), layer_v(s, l)), NULL, L->k_norm, pos, m->inv_freq, M, 0, nkv,
                    hd, s->cap, d_len, c->rms_norm_eps);
    }
}

/* chain: 0 the rows only (the host continues), CHAIN_GREEDY the drafts by
   argmax on the device, CHAIN_SAMPLED (DSpark) drawn there by the device
   sampler with the arguments in d_samp */
enum { CHAIN_GREEDY = 1, CHAIN_SAMPLED = 2 };

/* DSpark row j after the head: e = W1[*prev]; its confidence; its logits
   z_j = base_j + W2 . e (the head row itself without a Markov head); with
   a chain, draft[j] = argmax z_j or a draw from it (the next row's prev),
   a draw leaving its filtered row in qscr row j and its mass in qtot[j]. */
static void enqueue_dspark_row(cuda_dstate *s, int j, const int *prev, int chain) {
    const cuda_dmodel *m = s->m;
    const int H = m->cfg.hidden_size, V = m->cfg.vocab_size;
    const cu_go st = cu_go_on(s->st, &s->m->tune);
    float *bj = s->base + (size_t)j * V, *zj = m->R ? s->z + (size_t)j * V : bj;
    if (m->R) cu_embed(st, s->e, &m->w1, prev, 1);
    if (m->has_conf) {
        const float *h = s->xb + (size_t)j * H;
        int r = m->conf_markov ? m->R : 0;
        switch (m->conf_w.dt) {
        case DT_BF16:
            k_confidence<<<1, 256, 0, st>>>(s->conf + j, h, s->e, (const __nv_bfloat16 *)m->conf_w.p, H, r, m->conf_b);
            break;
        case DT_F16:
            k_confidence<<<1, 256, 0, st>>>(s->conf + j, h, s->e, (const __half *)m->conf_w.p, H, r, m->conf_b);
            break;
        default:
            k_confidence<<<1, 256, 0, st>>>(s->conf + j, h, s->e, (const float *)m->conf_w.p, H, r, m->conf_b);
            break;
        }
    }
    if (m->R) cu_matmul(st, zj, s->e, 1, &m->w2, bj); /* the head row enters as the bias */
    if (chain == CHAIN_SAMPLED)
        cu_sample_rows(st, s->draft + j, zj, s->qscr + j * cu_sample_stride(V), 1, V, s->d_samp, s->qtot + j, j);
    else if (chain)
        cu_argmax(st, s->draft + j, zj, 1, V, &s->am);
}

/* The block [anchor, mask x (B-1)] at positions *d_len.. through the
   layers (its keys/values stored right after the context, uncommitted;
   every row sees the context and the whole block), the final norm and the
   LM head for n rows; with chain, the greedy drafts and (DSpark) the
   confidences, copied to the pinned outputs. */
static void enqueue_block(cuda_dstate *s, int n, int chain) {
    const cuda_dmodel *m = s->m;
    const model_config *c = &m->cfg;
    const int B = m->B, H = c->hidden_size;
    const float eps = c->rms_norm_eps;
    const cu_go st = cu_go_on(s->st, &s->m->tune);
    int *tok = s->d_in;
    cudaMemcpyAsync(s->d_in, s->h_in, sizeof(int) * IN_INTS(s), cudaMemcpyHostToDevice, st);
    if (chain == CHAIN_SAMPLED) cudaMemcpyAsync(s->d_samp, s->h_samp, sizeof *s->h_samp, cudaMemcpyHostToDevice, st);
    cu_embed(st, s->x, m->embed, tok, B);
    /* the decode attention's default shape unless forced: the block's
       graphs are not keyed by the cache length */
    const cu_layer_how how = {cu_attn_spread_for(st.t, 0), 0, NULL, NULL};
    for (int l = 0; l < c->n_layers; l++) cu_layer(st, &s->lrows, &m->layers[l], cu_kv_f32(layer_k(s, l), layer_v(s, l)), B, &how);
    cu_rmsnorm(st, s->xb, s->x, m->final_norm, B, H, eps);
    if (!m->dspark) {
        /* mask row j (1..B-1) drafts the token at position s+j */
        cu_matmul(st, s->base, s->xb + H, n, m->lm_head, NULL);
        if (chain) cu_argmax(st, s->draft, s->base, n, c->vocab_size, &s->am);
    } else {
        cu_matmul(st, s->base, s->xb, n, m->lm_head, NULL);
        if (chain)
            for (int j = 0; j < n; j++) enqueue_dspark_row(s, j, j ? s->draft + j - 1 : tok, chain);
    }
    if (chain) {
        cudaMemcpyAsync(s->h_ids, s->draft, sizeof(int) * (size_t)n, cudaMemcpyDeviceToHost, st);
        if (m->has_conf) cudaMemcpyAsync(s->h_out, s->conf, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost, st);
    }
}

typedef void (*enqueue_fn)(cuda_dstate *s, int n, int chain);

/* Runs f(s, n, chain) from the graph in *slot, captured on first use, or
   directly when graphs are off or capture fails (then they stay off for
   this state). */
static void run_pass(cuda_dstate *s, cudaGraphExec_t *slot, enqueue_fn f, int n, int chain) {
    if (s->use_graphs && slot && !*slot) {
        cudaGraph_t graph = NULL;
        int ok = cudaStreamBeginCapture(s->st, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
        if (ok) {
            f(s, n, chain);
            ok = cudaStreamEndCapture(s->st, &graph) == cudaSuccess && graph;
        }
        ok = ok && cudaGraphInstantiate(slot, graph, 0) == cudaSuccess;
        if (graph) cudaGraphDestroy(graph);
        if (!ok) {
            cudaGetLastError();
            *slot = NULL;
            s->use_graphs = 0;
        }
    }
    if (s->use_graphs && slot && *slot) cudaGraphLaunch(*slot, s->st);
    else f(s, n, chain);
}

static int finish(cuda_dstate *s, char *err, size_t errlen) {
    CK_LAUNCH();
    CK(cudaStreamSynchronize(s->st));
    return 0;
}

/* ---- entry points ------------------------------------------------------------ */

/* ingest's rows i .. i+M-1 of n from pos0 on: the positions, then fc and
   the layers over s->feat (from h_feat, or already there: dev) */
static int ingest_rows(cuda_dstate *s, int pos0, int i, int M, int dev, char *err, size_t errlen) {
    for (int r = 0; r < M; r++) s->h_in[IN_POS(s) + r] = pos0 + i + r;
    s->h_in[IN_LEN(s)] = pos0 + i;
    run_pass(s, M <= GRAPH_ROWS ? &s->g_ingest[dev][M] : NULL, enqueue_ingest, M, dev);
    if (finish(s, err, errlen) != 0) return -1; /* the staging buffers are reused next chunk */
    s->len = pos0 + i + M;
    s->n_ctx_last = M;
    return 0;
}

/* tile-major copies of what goes through the matmul kernels (see dmat),
   decided by the drafter's first pass */
static int dmodel_tiles(cuda_dmodel *m, char *err, size_t errlen) {
    if (__atomic_load_n(&m->tiles_done, __ATOMIC_ACQUIRE)) return 0;
    const model_config *c = &m->cfg;
    int n = 0;
    dmat **mats = (dmat **)xmalloc(sizeof(dmat *) * (size_t)(CU_LAYER_MATS * c->n_layers + 3));
    mats[n++] = &m->fc;
    if (m->lm_head == &m->own_head) mats[n++] = &m->own_head; /* a borrowed head is the target's to copy */
    if (m->R) mats[n++] = &m->w2;                             /* w1 is only gathered from */
    for (int l = 0; l < c->n_layers; l++, n += CU_LAYER_MATS) cu_layer_mats(&m->layers[l], mats + n);
    int rc = cu_tile_once(&m->tiles_done, &m->pool, mats, n, err, errlen);
    free(mats);
    return rc;
}

static int ingest_check(cuda_dstate *s, int pos0, int n, char *err, size_t errlen) {
    if (pos0 < 0 || pos0 > s->len || pos0 + n > s->cap)
        return ds_err(err, errlen, "CUDA drafter: context rows %d..%d do not follow the %d cached (capacity %d)", pos0,
                      pos0 + n, s->len, s->cap);
    CK(cudaSetDevice(s->m->gpu));
    if (dmodel_tiles(s->m, err, errlen) != 0) return -1;
    s->len = pos0;
    return 0;
}

extern "C" int cuda_dstate_ingest(cuda_dstate *s, int pos0, int n, const float *taps, int rows, int row0, char *err,
                                  size_t errlen) {
    const int H = s->m->cfg.hidden_size, nt = s->m->nt;
    if (ingest_check(s, pos0, n, err, errlen) != 0) return -1;
    for (int i = 0; i < n; i += CTX_ROWS) {
        int M = n - i < CTX_ROWS ? n - i : CTX_ROWS;
        /* the rows' taps side by side: the input of fc */
        for (int r = 0; r < M; r++)
            for (int t = 0; t < nt; t++)
                memcpy(s->h_feat + ((size_t)r * nt + t) * H, taps + ((size_t)t * rows + (size_t)(row0 + i + r)) * H,
                       sizeof(float) * (size_t)H);
        if (ingest_rows(s, pos0, i, M, 0, err, errlen) != 0) return -1;
    }
    return 0;
}

extern "C" int cuda_dstate_ingest_dev(cuda_dstate *s, int pos0, int n, const float *taps, int rows, int row0,
                                      char *err, size_t errlen) {
    const int H = s->m->cfg.hidden_size, nt = s->m->nt;
    if (ingest_check(s, pos0, n, err, errlen) != 0) return -1;
    for (int i = 0; i < n; i += CTX_ROWS) {
        int M = n - i < CTX_ROWS ? n - i : CTX_ROWS;
        /* each tap's rows into its column block of fc's input, on the device */
        for (int t = 0; t < nt; t++)
            CK(cudaMemcpy2DAsync(s->feat + (size_t)t * H, sizeof(float) * (size_t)nt * H,
                                 taps + ((size_t)t * rows + (size_t)(row0 + i)) * H, sizeof(float) * (size_t)H,
                                 sizeof(float) * (size_t)H, (size_t)M, cudaMemcpyDeviceToDevice, s->st));
        if (ingest_rows(s, pos0, i, M, 1, err, errlen) != 0) return -1;
    }
    return 0;
}

static int propose(cuda_dstate *s, int anchor, int n, int chain, int *draft, float *conf, char *err,
                   size_t errlen) {
    const cuda_dmodel *m = s->m;
    const int B = m->B, rows = m->dspark ? B : B - 1;
    if (n < 1 || n > rows || s->len + B > s->cap)
        return ds_err(err, errlen, "CUDA drafter: cannot draft %d rows at position %d (capacity %d)", n, s->len,
                      s->cap);
    CK(cudaSetDevice(m->gpu));
    if (dmodel_tiles(s->m, err, errlen) != 0) return -1;
    s->h_in[0] = anchor;
    for (int i = 1; i < B; i++) s->h_in[i] = m->mask_id;
    for (int i = 0; i < B; i++) s->h_in[IN_POS(s) + i] = s->len + i;
    s->h_in[IN_LEN(s)] = s->len;
    run_pass(s, &s->g_block[n * 3 + chain], enqueue_block, n, chain);
    if (finish(s, err, errlen) != 0) return -1;
    if (chain) {
        memcpy(draft, s->h_ids, sizeof(int) * (size_t)n);
        if (conf && m->has_conf) memcpy(conf, s->h_out, sizeof(float) * (size_t)n);
    }
    return 0;
}

extern "C" int cuda_dstate_propose(cuda_dstate *s, int anchor, int n, int chain, int *draft, float *conf, char *err,
                                   size_t errlen) {
    return propose(s, anchor, n, chain ? CHAIN_GREEDY : 0, draft, conf, err, errlen);
}

extern "C" int cuda_dstate_propose_sampled(cuda_dstate *s, int anchor, int n, const sampler_params *p,
                                           const double *u, int *draft, float *conf, char *err, size_t errlen) {
    if (!s->m->dspark || p->temperature <= 0.0f)
        return ds_err(err, errlen, "CUDA drafter: sampled drafts are DSpark's, with a temperature");
    if (n < 1 || n > s->m->B) return ds_err(err, errlen, "CUDA drafter: cannot draft %d rows", n);
    cu_sample_args_draws(s->h_samp, p, u, n);
    return propose(s, anchor, n, CHAIN_SAMPLED, draft, conf, err, errlen);
}

extern "C" void cuda_dstate_qrows(const cuda_dstate *s, const float **q, const unsigned long long **tot) {
    *q = s->qscr;
    *tot = s->qtot;
}

extern "C" int cuda_dstate_row(cuda_dstate *s, int j, int prev, float *conf, float *z, char *err, size_t errlen) {
    const cuda_dmodel *m = s->m;
    const int B = m->B, V = m->cfg.vocab_size;
    if (!m->dspark || j < 0 || j >= B) return ds_err(err, errlen, "CUDA drafter: no DSpark row %d", j);
    CK(cudaSetDevice(m->gpu)); /* (after the block's propose, which made the tile-major copies) */
    s->h_in[IN_PREV(s)] = prev;
    CK(cudaMemcpyAsync(s->d_in + IN_PREV(s), s->h_in + IN_PREV(s), sizeof(int), cudaMemcpyHostToDevice, s->st));
    enqueue_dspark_row(s, j, s->d_in + IN_PREV(s), 0);
    const float *zj = (m->R ? s->z : s->base) + (size_t)j * V;
    CK(cudaMemcpyAsync(s->h_out + B, zj, sizeof(float) * (size_t)V, cudaMemcpyDeviceToHost, s->st));
    if (m->has_conf) CK(cudaMemcpyAsync(s->h_out, s->conf + j, sizeof(float), cudaMemcpyDeviceToHost, s->st));
    if (finish(s, err, errlen) != 0) return -1;
    if (conf && m->has_conf) *conf = s->h_out[0];
    memcpy(z, s->h_out + B, sizeof(float) * (size_t)V);
    return 0;
}

extern "C" int cuda_dstate_read_last(const cuda_dstate *s, float *base, float *z, int rows, char *err,
                                     size_t errlen) {
    const cuda_dmodel *m = s->m;
    size_t n = (size_t)rows * m->cfg.vocab_size;
    if (rows <= 0) return 0;
    CK(cudaSetDevice(m->gpu));
    if (base) CK(cudaMemcpyAsync(base, s->base, sizeof(float) * n, cudaMemcpyDeviceToHost, s->st));
    if (z && m->R) CK(cudaMemcpyAsync(z, s->z, sizeof(float) * n, cudaMemcpyDeviceToHost, s->st));
    CK(cudaStreamSynchronize(s->st));
    return 0;
}

extern "C" int cuda_dstate_read_ctx(const cuda_dstate *s, float *g, char *err, size_t errlen) {
    const cuda_dmodel *m = s->m;
    if (s->n_ctx_last <= 0) return 0;
    CK(cudaSetDevice(m->gpu));
    CK(cudaMemcpyAsync(g, s->g, sizeof(float) * (size_t)s->n_ctx_last * m->cfg.hidden_size, cudaMemcpyDeviceToHost,
                       s->st));
    CK(cudaStreamSynchronize(s->st));
    return s->n_ctx_last;
}
