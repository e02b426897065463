// cuda_layer: see cuda_layer.cuh. A decoder layer's upload and its one
// enqueueing function, shared by the target's forward and the drafters'
// blocks.
#include <cuda_runtime.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/cuda_layer.cuh"

/* quantized q, k and v: one matrix of their rows where they share a
   format (the rows of a quantized format are independent: the blocks, or
   MLX's words, scales and biases, laid end to end), else a stack of the
   three as parts (dmat's nsub; a GGUF Q4_K_M file gives v another type
   than q and k in some layers) */
static int tensor_q_same(const tensor *a, const tensor *b) {
    return a->dtype == b->dtype && a->shape[1] == b->shape[1] &&
           (a->dtype != DT_MLX || (a->q.bits == b->q.bits && a->q.group == b->q.group && a->q.sdtype == b->q.sdtype));
}
static int up_qkv_quant(dev_pool *pl, dlayer *D, const tensor *const *t, char *err, size_t errlen) {
    dmat *W = &D->wqkv;
    memset(W, 0, sizeof *W);
    if (!tensor_q_same(t[0], t[1]) || !tensor_q_same(t[0], t[2])) {
        for (int i = 0; i < 3; i++)
            if (cu_up_qmat(pl, &D->qkv_part[i], t[i], err, errlen)) return -1;
        W->dt = D->qkv_part[0].dt;
        W->K = D->qkv_part[0].K;
        W->N = D->qkv_part[0].N + D->qkv_part[1].N + D->qkv_part[2].N;
        W->nsub = 3;
        W->sub = D->qkv_part;
        return 0;
    }
    for (int i = 0; i < 3; i++)
        if (cu_q_geometry(t[i], err, errlen)) return -1;
    W->dt = t[0]->dtype;
    W->K = (int)t[0]->shape[1];
    W->N = (int)(t[0]->shape[0] + t[1]->shape[0] + t[2]->shape[0]);
    if (W->dt == DT_MLX) W->bits = t[0]->q.bits, W->group = t[0]->q.group, W->sdt = t[0]->q.sdtype;
    const size_t rb = cu_q_row_bytes(W->dt, W->bits, W->K);
    const size_t sbr = W->dt == DT_MLX ? (size_t)(W->K / W->group) * (W->sdt == DT_F32 ? 4 : 2) : 0;
    if (cu_dev_alloc(pl, &W->p, rb * (size_t)W->N, err, errlen)) return -1;
    if (sbr && (cu_dev_alloc(pl, &W->sc, sbr * (size_t)W->N, err, errlen) ||
                cu_dev_alloc(pl, &W->bi, sbr * (size_t)W->N, err, errlen)))
        return -1;
    for (int i = 0, r = 0; i < 3; r += (int)t[i]->shape[0], i++) {
        const size_t n = (size_t)t[i]->shape[0];
        CK(cudaMemcpy((char *)W->p + rb * r, t[i]->data, rb * n, cudaMemcpyHostToDevice));
        if (sbr) {
            CK(cudaMemcpy((char *)W->sc + sbr * r, t[i]->q.scales, sbr * n, cudaMemcpyHostToDevice));
            CK(cudaMemcpy((char *)W->bi + sbr * r, t[i]->q.biases, sbr * n, cudaMemcpyHostToDevice));
        }
    }
    return 0;
}

/* q, k and v stacked into one matrix (and their biases into one vector,
   zeros for a missing one) so a single launch reads all three */
static int up_qkv(dev_pool *pl, dlayer *D, const wlayer *L, const char *who, char *err, size_t errlen) {
    const tensor *t[3] = {L->wq, L->wk, L->wv};
    const float *b[3] = {L->bq, L->bk, L->bv};
    const int quant = dtype_is_quant(t[0]->dtype);
    for (int i = 1; i < 3; i++)
        if ((quant ? !dtype_is_quant(t[i]->dtype) : t[i]->dtype != t[0]->dtype) || t[i]->shape[1] != t[0]->shape[1])
            return ds_err(err, errlen, "%s: %s and %s differ in dtype or width", who, t[0]->name, t[i]->name);
    if (quant) {
        if (up_qkv_quant(pl, D, t, err, errlen)) return -1;
    } else {
        if (t[0]->dtype != DT_BF16 && t[0]->dtype != DT_F16 && t[0]->dtype != DT_F32)
            return ds_err(err, errlen, "%s: %s has dtype %s (bf16, f16 or f32 needed)", who, t[0]->name,
                          dtype_name(t[0]->dtype));
        size_t bytes = t[0]->nbytes + t[1]->nbytes + t[2]->nbytes;
        D->wqkv.dt = t[0]->dtype;
        D->wqkv.K = (int)t[0]->shape[1];
        D->wqkv.N = (int)(t[0]->shape[0] + t[1]->shape[0] + t[2]->shape[0]);
        if (cu_dev_alloc(pl, &D->wqkv.p, bytes, err, errlen)) return -1;
        size_t off = 0;
        for (int i = 0; i < 3; i++) {
            CK(cudaMemcpy((char *)D->wqkv.p + off, t[i]->data, t[i]->nbytes, cudaMemcpyHostToDevice));
            off += t[i]->nbytes;
        }
    }
    D->bqkv = NULL;
    if (!b[0] && !b[1] && !b[2]) return 0;
    float *h = (float *)xcalloc((size_t)D->wqkv.N, sizeof(float));
    for (int i = 0, o = 0; i < 3; o += (int)t[i]->shape[0], i++)
        if (b[i]) memcpy(h + o, b[i], sizeof(float) * (size_t)t[i]->shape[0]);
    int rc = cu_up_f32(pl, &D->bqkv, h, (size_t)D->wqkv.N, err, errlen);
    free(h);
    return rc;
}

int cu_up_layer(dev_pool *pl, dlayer *D, const wlayer *L, const model_config *c, int l, const char *who, char *err,
                size_t errlen) {
    const size_t H = (size_t)c->hidden_size, hd = (size_t)c->head_dim;
    D->attn = L->attn;
    D->mlp = L->mlp;
    /* (an MoE layer's experts in D->moe, its wg, wu, wd left empty) */
    const int moe = L->mlp == MLP_MOE;
    int rc = up_qkv(pl, D, L, who, err, errlen) || cu_up_mat(pl, &D->wo, L->wo, err, errlen) ||
             (moe ? cu_moe_up(pl, &D->moe, L->moe, c, l, who, err, errlen)
                  : cu_up_mat(pl, &D->wg, L->wg, err, errlen) || cu_up_mat(pl, &D->wu, L->wu, err, errlen) ||
                        cu_up_mat(pl, &D->wd, L->wd, err, errlen)) ||
             cu_up_f32(pl, &D->attn_norm, L->attn_norm, H, err, errlen) ||
             cu_up_f32(pl, &D->mlp_norm, L->mlp_norm, H, err, errlen) ||
             cu_up_f32(pl, &D->q_norm, L->q_norm, hd, err, errlen) ||
             cu_up_f32(pl, &D->k_norm, L->k_norm, hd, err, errlen) || cu_up_f32(pl, &D->bo, L->bo, H, err, errlen) ||
             cu_up_f32(pl, &D->post_attn_norm, L->post_attn_norm, H, err, errlen) ||
             cu_up_f32(pl, &D->post_mlp_norm, L->post_mlp_norm, H, err, errlen) ||
             cu_up_f32(pl, &D->inv_freq, L->inv_freq, hd / 2, err, errlen);
    if (rc) return -1;
    /* (the kernels take a window on causal rows only; a drafter's block
       layers have none) */
    D->window = wlayer_window(L);
    /* (the fused SwiGLU kernels read gate and up rows alike: one format;
       two formats, e.g. an MLX override leaving one unquantized, run apart) */
    if (D->wg.N != D->wu.N || D->wg.K != D->wu.K)
        return ds_err(err, errlen, "%s: layer %d: gate and up projections differ in shape", who, l);
    D->gu_apart = D->wg.dt != D->wu.dt || (dtype_is_quant(D->wg.dt) && !cu_q_same_format(&D->wg, &D->wu));
    /* (the quantized matmul's gated epilogue is SwiGLU's alone: a quantized
       GELU MLP runs gate and up apart, then cu_geglu_apart) */
    if (L->mlp == MLP_GEGLU && dtype_is_quant(D->wg.dt)) D->gu_apart = 1;
    return 0;
}

size_t cu_layer_gate_floats(const dlayer *ls, int n, int I) {
    int apart = 0;
    for (int i = 0; i < n; i++) apart |= ls[i].gu_apart;
    return (size_t)I * (apart ? 2 : 1);
}

void cu_layer_mats(dlayer *D, dmat **out) {
    const int moe = D->mlp == MLP_MOE;
    dmat *ls[CU_LAYER_MATS] = {&D->wqkv, &D->wo, moe ? &D->moe.gate : &D->wg, moe ? &D->moe.up : &D->wu,
                               moe ? &D->moe.down : &D->wd};
    memcpy(out, ls, sizeof ls);
}

cu_cut cu_norm_apart(cu_go st, cu_gemm *g, uint32_t *norm_c, float *norm_r, int site, const float *in, int M,
                     const dmat *W, const float *gn, float eps) {
    if (!gn || !cu_norm_split(site, M) || !cu_layer_takes_cut(st.t, g, W, M) || !cu_norm_cut_ok(W->K))
        return cu_cut{};
    cu_norm_cut(st, norm_c, norm_r, in, gn, M, W->K, eps);
    return cu_cut{norm_c, NULL, norm_r};
}

/* one layer matmul of the rows (cu_layer_matmul, their cuBLAS groups and
   norm scratch) */
static int mm(cu_go st, const cu_layer_rows *r, int epi, float *y, const float *in, int M, const dmat *W,
              const dmat *W2, const float *bias, const float *gn, cu_cut cut = cu_cut{}) {
    return cu_layer_matmul(st, r->gemm, epi, y, in, M, W, W2, bias, gn, r->cfg->rms_norm_eps, r->xb, cut);
}

static cu_cut norm_apart(cu_go st, const cu_layer_rows *r, int site, const float *in, int M, const dmat *W,
                         const float *gn) {
    return cu_norm_apart(st, r->gemm, r->norm_c, r->norm_r, site, in, M, W, gn, r->cfg->rms_norm_eps);
}

static void mark(const cu_layer_how *how, int op) {
    if (how->mark) how->mark(how->mark_arg, op);
}

void cu_layer(cu_go st, const cu_layer_rows *r, const dlayer *L, cu_kv kv, int M,
              const cu_layer_how *how) {
    const model_config *c = r->cfg;
    const int hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    /* the scores' scale: the config's (Gemma's query_pre_attn_scalar^-0.5) or 1/sqrt(hd) */
    const float eps = c->rms_norm_eps, scale = c->attn_scale > 0 ? c->attn_scale : 1.0f / sqrtf((float)hd);
    const int H = c->hidden_size, omit = how->omit, spread = how->spread, causal = L->attn == ATTN_CAUSAL;
    const int window = causal ? L->window : 0;
    /* (MLP_SWIGLU, MLP_GEGLU, or MLP_MOE below: cuda_glue.c admits no other) */
    /* decode and verify rows: the projection's matmul post-processes
       q, k and v itself (no kernel of its own between it and attention) */
    cu_qkv_tail tail = {cu_qkv_fused_args(r->q, r->qkv, kv, L->q_norm, L->k_norm, r->pos,
                                          L->inv_freq ? L->inv_freq : r->inv_freq, nh, nkv, hd, r->cap, r->d_len, eps),
                        r->qkv_cnt};
    if (!(omit & CU_OMIT_QKV)) {
        const float *in = r->x, *an = L->attn_norm;
        if (r->norm_first) {
            cu_rmsnorm(st, r->xb, r->x, an, M, c->hidden_size, eps);
            in = r->xb, an = NULL;
        }
        int fused = !cu_gemm_takes(r->gemm, &L->wqkv, M) &&
                    cu_matmul_norm_qkv(st, r->qkv, in, M, &L->wqkv, L->bqkv, an, eps, &tail);
        if (!fused) mm(st, r, MM_STORE, r->qkv, in, M, &L->wqkv, NULL, L->bqkv, an);
        mark(how, CU_LOP_QKV);
        if (!fused) cu_qkv_post_run(st, &tail.a, M);
        mark(how, CU_LOP_POST);
    }
    /* the cuBLAS groups' rows by the prefill kernel (causal only), the
       others as decode and verify rows */
    const int Mt = causal && r->gemm && cu_attn_tiled_ok(nh, nkv, hd) ? cu_gemm_takes(r->gemm, &L->wqkv, M) : 0;
    /* o and down take their inputs pre-cut where they can (decode and
       verify rows): the combine and the SwiGLU are asked for the copy */
    uint32_t *att_c = !Mt && !(omit & CU_OMIT_ATTN) && cu_layer_takes_cut(st.t, r->gemm, &L->wo, M) ? r->att_c : NULL;
    if (!(omit & CU_OMIT_ATTN)) {
        if (Mt)
            cu_attention_tiled(st, r->att, r->q, kv, r->part, r->wg_img, Mt, nh, nkv, hd, r->cap, r->d_len,
                               scale, window);
        if (Mt < M)
            cu_attention(st, r->att + (size_t)Mt * nh * hd, r->q + (size_t)Mt * nh * hd, kv, r->part, M - Mt, nh,
                         nkv, hd, r->cap, r->d_len, scale, causal, Mt, spread, window, att_c);
        mark(how, CU_LOP_ATTN);
    }
    /* the o projection right after attention (see cu_go's serial), its
       residual add fused, or (a norm of its output first) into xb, then
       normed and added */
    if (!(omit & CU_OMIT_O)) {
        if (L->post_attn_norm) {
            mm(cu_serial(st), r, MM_STORE, r->xb, r->att, M, &L->wo, NULL, L->bo, NULL, cu_cut{att_c, NULL, NULL});
            cu_rmsnorm_add(st, r->x, r->xb, L->post_attn_norm, M, H, eps);
        } else {
            mm(cu_serial(st), r, MM_ADD, r->x, r->att, M, &L->wo, NULL, L->bo, NULL, cu_cut{att_c, NULL, NULL});
        }
    }
    mark(how, CU_LOP_O);
    if (L->mlp == MLP_MOE) { /* the experts (cuda_moe.cuh): norm, routing, gate/up; down, the residual add */
        cu_moe_gate_up(st, r->moe, &L->moe, r->x, r->xb, L->mlp_norm, c->hidden_size, eps, M, omit);
        mark(how, CU_LOP_GU);
        cu_moe_down(st, r->moe, &L->moe, r->x, 1, c->hidden_size, M, omit);
        mark(how, CU_LOP_DOWN);
        return;
    }
    uint32_t *gate_c = cu_layer_takes_cut(st.t, r->gemm, &L->wd, M) ? r->gate_c : NULL;
    {
        cu_go gu = st;
        gu.two = cu_swiglu_two(st.t, spread); /* (see cu_go's two) */
        if (omit & CU_OMIT_GU) {
            gate_c = NULL;
        } else {
            const float *in = r->x, *mn = L->mlp_norm;
            if (r->norm_first) {
                cu_rmsnorm(gu, r->xb, r->x, mn, M, c->hidden_size, eps);
                in = r->xb, mn = NULL;
            }
            if (L->gu_apart) {
                /* gate into the scratch's first M rows, up after them; the
                   same launches at every width */
                float *up = r->gate + (size_t)M * L->wg.N;
                mm(gu, r, MM_STORE, r->gate, in, M, &L->wg, NULL, NULL, mn);
                mm(gu, r, MM_STORE, up, in, M, &L->wu, NULL, NULL, mn);
                if (L->mlp == MLP_GEGLU) cu_geglu_apart(gu, r->gate, up, (size_t)M * L->wg.N);
                else cu_swiglu_apart(gu, r->gate, up, (size_t)M * L->wg.N);
                gate_c = NULL;
            } else {
                cu_cut gc = norm_apart(gu, r, CU_NS_GU, in, M, &L->wg, mn);
                gc.out = gate_c;
                if (!mm(gu, r, L->mlp == MLP_GEGLU ? MM_GEGLU : MM_SWIGLU, r->gate, in, M, &L->wg, &L->wu, NULL, mn,
                        gc))
                    gate_c = NULL; /* (not written) */
            }
        }
    }
    mark(how, CU_LOP_GU);
    if (!(omit & CU_OMIT_DOWN)) {
        if (L->post_mlp_norm) { /* (as the o projection's) */
            mm(st, r, MM_STORE, r->xb, r->gate, M, &L->wd, NULL, NULL, NULL, cu_cut{gate_c, NULL, NULL});
            cu_rmsnorm_add(st, r->x, r->xb, L->post_mlp_norm, M, H, eps);
        } else {
            mm(st, r, MM_ADD, r->x, r->gate, M, &L->wd, NULL, NULL, NULL, cu_cut{gate_c, NULL, NULL});
        }
    }
    mark(how, CU_LOP_DOWN);
}

int cu_copy_prefix_rows(void *dst, size_t dcap, cudaStream_t dst_st, const void *src, size_t scap,
                        cudaStream_t src_st, size_t row, int n, size_t blocks, char *err,
                        size_t errlen) {
    CK(cudaStreamSynchronize(src_st));
    CK(cudaStreamSynchronize(dst_st));
    if (n <= 0) return 0;
    CK(cudaMemcpy2DAsync(dst, dcap * row, src, scap * row, (size_t)n * row, blocks, cudaMemcpyDeviceToDevice, dst_st));
    CK(cudaStreamSynchronize(dst_st));
    return 0;
}

/* Host copies of cache rows go through two pinned staging buffers shared
   by the process: the copy engine moves pinned memory at the link's speed,
   where a pageable 2-D copy (one segment of n rows per block) moves about a
   GB/s, and with two buffers the DMA of one chunk of blocks overlaps the
   host's memcpy of the other. One copy at a time holds them (stage_mu). A
   copy whose n rows are wider than a buffer, or a process that cannot pin
   memory, copies direct. */
#define STAGE_BYTES ((size_t)8 << 20)
static pthread_mutex_t stage_mu = PTHREAD_MUTEX_INITIALIZER;
static char *stage_buf[2];

static int stage_ready(void) {
    for (int i = 0; i < 2 && !stage_buf[i]; i++)
        if (cudaHostAlloc((void **)&stage_buf[i], STAGE_BYTES, cudaHostAllocPortable) != cudaSuccess) {
            cudaGetLastError();
            if (stage_buf[0]) cudaFreeHost(stage_buf[0]);
            stage_buf[0] = stage_buf[1] = NULL;
            return 0;
        }
    return 1;
}

/* blocks rows of w bytes at pitch bytes apart on the device, packed in host */
static int rows_staged(char *d, size_t pitch, cudaStream_t st, char *host, size_t w, size_t blocks, int to_host,
                       cudaEvent_t ev[2], char *err, size_t errlen) {
    const size_t per = STAGE_BYTES / w, chunks = (blocks + per - 1) / per;
#define CHUNK(c) const size_t b0 = (c) * per, nb = blocks - b0 < per ? blocks - b0 : per
    if (to_host) {
        for (size_t i = 0; i <= chunks; i++) {
            if (i < chunks) { /* chunk i's DMA, while chunk i-1 is copied on */
                CHUNK(i);
                CK(cudaMemcpy2DAsync(stage_buf[i & 1], w, d + b0 * pitch, pitch, w, nb, cudaMemcpyDeviceToHost, st));
                CK(cudaEventRecord(ev[i & 1], st));
            }
            if (i > 0) {
                CHUNK(i - 1);
                CK(cudaEventSynchronize(ev[(i - 1) & 1]));
                memcpy(host + b0 * w, stage_buf[(i - 1) & 1], nb * w);
            }
        }
        return 0;
    }
    for (size_t i = 0; i < chunks; i++) {
        CHUNK(i);
        if (i >= 2) CK(cudaEventSynchronize(ev[i & 1])); /* chunk i-2's DMA has read the buffer */
        memcpy(stage_buf[i & 1], host + b0 * w, nb * w);
        CK(cudaMemcpy2DAsync(d + b0 * pitch, pitch, stage_buf[i & 1], w, w, nb, cudaMemcpyHostToDevice, st));
        CK(cudaEventRecord(ev[i & 1], st));
    }
#undef CHUNK
    CK(cudaStreamSynchronize(st));
    return 0;
}

int cu_rows_host(void *dev, size_t cap, cudaStream_t st, void *host, size_t row, int pos0, int n, size_t blocks,
                 int to_host, char *err, size_t errlen) {
    CK(cudaStreamSynchronize(st));
    if (n <= 0) return 0;
    char *d = (char *)dev + (size_t)pos0 * row;
    const size_t w = (size_t)n * row;
    if (w <= STAGE_BYTES) {
        pthread_mutex_lock(&stage_mu);
        cudaEvent_t ev[2] = {NULL, NULL}; /* (made here: an event belongs to the current device) */
        int rc = -2;
        if (stage_ready() && cudaEventCreateWithFlags(&ev[0], cudaEventDisableTiming) == cudaSuccess &&
            cudaEventCreateWithFlags(&ev[1], cudaEventDisableTiming) == cudaSuccess)
            rc = rows_staged(d, cap * row, st, (char *)host, w, blocks, to_host, ev, err, errlen);
        else
            cudaGetLastError();
        for (int i = 0; i < 2; i++)
            if (ev[i]) cudaEventDestroy(ev[i]);
        pthread_mutex_unlock(&stage_mu);
        if (rc != -2) return rc;
    }
    if (to_host)
        CK(cudaMemcpy2DAsync(host, w, d, cap * row, w, blocks, cudaMemcpyDeviceToHost, st));
    else
        CK(cudaMemcpy2DAsync(d, cap * row, host, w, w, blocks, cudaMemcpyHostToDevice, st));
    CK(cudaStreamSynchronize(st));
    return 0;
}
