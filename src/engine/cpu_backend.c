/* cpu_backend: the descriptions of desc.h run on the CPU with the kernels
 * of ops.h (threadpool, AVX2 / AVX-512 / scalar, chosen at run time). One
 * layer function, cpu_layer, runs every decoder layer of a target and of a
 * drafter's block; the mask kind says which positions a row sees.
 *
 * Weights: the matmul weights a model reads into memory take the rows8
 * layout at load (tensor.h; model_create), in which the decode matmul
 * streams a block of 8 rows as one run with 8 independent chains (on a
 * Zen 4 host 28-30 GB/s a thread where four row-major rows read 12-16:
 * docs/history/benchmarks-log.md, bench/gemv-layout.c). The results are the same
 * bits. A tied embedding is the LM head, so it is laid out for it
 * (op_embed reads either layout); an untied one is only gathered and stays
 * row-major, as do mapped files and shapes that are not multiples of 8.
 *
 * Scratch is allocated with each context and drafter state, so the token
 * loop does not allocate. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "engine/backend.h"
#include "engine/cpu_internal.h"
#include "engine/kv.h"
#include "engine/model.h"
#include "engine/moe.h"
#include "engine/ops.h"
#include "engine/safetensors.h"

/* the activation scratch (cpu_internal.h) */
typedef cpu_scratch scratch;

static void scratch_init(scratch *s, const model_config *c, size_t B) {
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    if (c->moe_experts > 0 && (size_t)c->moe_intermediate_size > I) I = (size_t)c->moe_intermediate_size;
    memset(s, 0, sizeof *s);
    if (c->moe_experts > 0) {
        size_t E = (size_t)c->moe_experts, K = (size_t)c->moe_top_k;
        s->rp = xaligned(sizeof(float) * B * E);
        s->sw = xaligned(sizeof(float) * B * K);
        s->ex = xaligned(sizeof(float) * B * H);
        s->ey = xaligned(sizeof(float) * B * H);
        s->acc = xaligned(sizeof(float) * B * H);
        s->sel = xmalloc(sizeof(int) * B * K);
        s->who = xmalloc(sizeof(int) * B);
    }
    size_t QD = (size_t)c->n_heads * (size_t)c->head_dim, KD = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    s->x = xaligned(sizeof(float) * B * H);
    s->xb = xaligned(sizeof(float) * B * H);
    s->q = xaligned(sizeof(float) * B * QD);
    s->att = xaligned(sizeof(float) * B * QD);
    s->k = xaligned(sizeof(float) * B * KD);
    s->v = xaligned(sizeof(float) * B * KD);
    s->gate = xaligned(sizeof(float) * B * I);
    s->up = xaligned(sizeof(float) * B * I);
    s->pos = xmalloc(sizeof(int) * B);
}

static void scratch_free(scratch *s) {
    float *b[] = {s->x, s->xb, s->q, s->att, s->k, s->v, s->gate, s->up, s->rp, s->sw, s->ex, s->ey, s->acc};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) free(b[i]);
    free(s->pos);
    free(s->sel);
    free(s->who);
}

/* y = x W^T (+ b) over M rows, the first Mpre of them (rows of prefill
   groups) through the prefill family (op_matmul_pre), the others exact */
static void mm(tpool *tp, float *y, const float *x, int M, int Mpre, const tensor *W, const float *b) {
    if (Mpre > 0) op_matmul_pre(tp, y, x, Mpre, W, b);
    if (M > Mpre)
        op_matmul(tp, y + (size_t)Mpre * (size_t)W->shape[0], x + (size_t)Mpre * (size_t)W->shape[1], M - Mpre, W, b);
}

/* A layer in three parts, so that the multi form (cpu_forward_multi) runs
   the matmuls over every sequence's rows and the attention per sequence.
   layer_qkv: the attention norm, q/k/v, the q/k norms and RoPE of the M
   rows in s->x at positions s->pos; rows [0, Mpre) take the prefill family
   in their matmuls. */
static void layer_qkv(tpool *tp, scratch *s, const wlayer *L, const model_config *c, const float *inv_freq, int M,
                      int Mpre) {
    const int H = c->hidden_size, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    const float eps = c->rms_norm_eps;
    op_rmsnorm(s->xb, s->x, L->attn_norm, M, H, eps);
    mm(tp, s->q, s->xb, M, Mpre, L->wq, L->bq);
    mm(tp, s->k, s->xb, M, Mpre, L->wk, L->bk);
    mm(tp, s->v, s->xb, M, Mpre, L->wv, L->bv);
    if (L->q_norm) {
        op_rmsnorm(s->q, s->q, L->q_norm, M * nh, hd, eps);
        op_rmsnorm(s->k, s->k, L->k_norm, M * nkv, hd, eps);
    }
    if (L->inv_freq) inv_freq = L->inv_freq; /* the layer's own RoPE (Gemma's sliding layers) */
    op_rope(s->q, M, nh, hd, s->pos, inv_freq);
    op_rope(s->k, M, nkv, hd, s->pos, inv_freq);
}

/* layer_attn: rows [off, off+M) of one sequence: their K/V stored at the
   end of its cache kv (kv_len; the caller commits them or not), and row i
   attending to the n_past cached positions and, under ATTN_CAUSAL, rows
   0..i, under ATTN_BLOCK all M rows */
static void layer_attn(tpool *tp, scratch *s, const wlayer *L, const model_config *c, kv_cache *kv, int l, int off,
                       int M, int n_past) {
    const int hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    const size_t QD = (size_t)nh * (size_t)hd, KD = (size_t)nkv * (size_t)hd;
    kv_store(kv, l, s->k + (size_t)off * KD, s->v + (size_t)off * KD, M);
    kv_view w = kv_layer(kv, l);
    op_attention_kv(tp, s->att + (size_t)off * QD, s->q + (size_t)off * QD, M, nh, nkv, hd, &w, n_past,
                    c->attn_scale > 0 ? c->attn_scale : 1.0f / sqrtf((float)hd), L->attn == ATTN_BLOCK, L->window);
}

/* MLP_MOE over the M rows of s->xb into s->xb (desc.h wmoe's rule). Each
   expert's rows are gathered in row order and run through its matmuls
   (grouped: one matmul an expert over all its rows), those of rows
   [0, Mpre) (whole prefill groups) through the prefill family as in the
   dense layers, the others exact: the family's bits for a row depend on
   that row alone (quant.h), so a row's bits are those it has in any batch
   and with any other rows routed beside it. The router stays exact (the
   same choice of experts in prefill and decode). Each row sums its experts
   in ascending order. */
static void moe_mlp(tpool *tp, scratch *s, const wmoe *e, int M, int Mpre, int H) {
    const int E = e->n_experts, K = e->top_k, Im = e->inter;
    op_matmul(tp, s->rp, s->xb, M, e->router, NULL);
    for (int i = 0; i < M; i++)
        moe_route(s->rp + (size_t)i * E, E, K, e->norm_topk, s->sel + (size_t)i * K, s->sw + (size_t)i * K);
    memset(s->acc, 0, sizeof(float) * (size_t)M * (size_t)H);
    for (int x = 0; x < E; x++) {
        int n = 0, npre = 0;
        for (int i = 0; i < M; i++)
            for (int k = 0; k < K; k++)
                if (s->sel[(size_t)i * K + k] == x) {
                    s->who[n] = i * K + k; /* row and slot */
                    memcpy(s->ex + (size_t)n * H, s->xb + (size_t)i * H, sizeof(float) * (size_t)H);
                    n++;
                    npre += i < Mpre; /* (the prefill rows come first: rows in order) */
                }
        if (!n) continue;
        mm(tp, s->gate, s->ex, n, npre, e->gate[x], NULL);
        mm(tp, s->up, s->ex, n, npre, e->up[x], NULL);
        op_swiglu(s->gate, s->gate, s->up, n * Im);
        mm(tp, s->ey, s->gate, n, npre, e->down[x], NULL);
        for (int j = 0; j < n; j++) {
            const int i = s->who[j] / K;
            const float wk = s->sw[s->who[j]];
            float *a = s->acc + (size_t)i * H;
            const float *y = s->ey + (size_t)j * H;
            for (int h = 0; h < H; h++) {
                float t = wk * y[h];
                a[h] += t;
            }
        }
    }
    memcpy(s->xb, s->acc, sizeof(float) * (size_t)M * (size_t)H);
}

/* layer_out: the o projection, the residual, the MLP (MLP_SWIGLU or
   MLP_MOE) and its residual over the M rows */
static void layer_out(tpool *tp, scratch *s, const wlayer *L, const model_config *c, int M, int Mpre) {
    const int H = c->hidden_size, I = c->intermediate_size;
    const float eps = c->rms_norm_eps;
    mm(tp, s->xb, s->att, M, Mpre, L->wo, L->bo);
    if (L->post_attn_norm) op_rmsnorm(s->xb, s->xb, L->post_attn_norm, M, H, eps);
    op_add(s->x, s->xb, M * H);
    op_rmsnorm(s->xb, s->x, L->mlp_norm, M, H, eps);
    if (L->mlp == MLP_MOE) {
        moe_mlp(tp, s, L->moe, M, Mpre, H);
    } else {
        mm(tp, s->gate, s->xb, M, Mpre, L->wg, NULL);
        mm(tp, s->up, s->xb, M, Mpre, L->wu, NULL);
        if (L->mlp == MLP_GEGLU) op_geglu(s->gate, s->gate, s->up, M * I);
        else op_swiglu(s->gate, s->gate, s->up, M * I);
        mm(tp, s->xb, s->gate, M, Mpre, L->wd, NULL);
    }
    if (L->post_mlp_norm) op_rmsnorm(s->xb, s->xb, L->post_mlp_norm, M, H, eps);
    op_add(s->x, s->xb, M * H);
}

/* Layer l of a network over M rows of one sequence in s->x at positions
   s->pos (layer_qkv, layer_attn, layer_out). Rows [0, Mpre) take the
   prefill family in their matmuls (0 for a drafter's passes). */
static void cpu_layer(tpool *tp, scratch *s, const wlayer *L, const model_config *c, const float *inv_freq,
                      kv_cache *kv, int l, int M, int Mpre, int n_past) {
    layer_qkv(tp, s, L, c, inv_freq, M, Mpre);
    layer_attn(tp, s, L, c, kv, l, 0, M, n_past);
    layer_out(tp, s, L, c, M, Mpre);
}

/* Layers and kinds this backend runs. */
static int check_layers(const model_config *c, const wlayer *layers, char *err, size_t errlen) {
    for (int l = 0; l < c->n_layers; l++)
        if ((layers[l].mlp != MLP_SWIGLU && layers[l].mlp != MLP_GEGLU && !(layers[l].mlp == MLP_MOE && layers[l].moe)) ||
            (layers[l].attn != ATTN_CAUSAL && layers[l].attn != ATTN_BLOCK))
            return ds_err(err, errlen, "CPU backend: layer %d has a kind it does not run", l);
    return 0;
}

/* ---- targets ------------------------------------------------------------- */

/* The multi form's scratch (cpu_forward_multi): one a model, since the
   rows of several contexts go through it together. Grown when a multi
   forward first needs more rows (then kept), and taken under mu, so
   multi forwards of one model run one at a time (each context's single
   forwards never touch it). */
typedef struct {
    pthread_mutex_t mu;
    scratch s;     /* rows rows */
    int rows;
    float **dst;   /* [rows] where each selected row's logits go */
    float *logits; /* [MULTI_HEAD_ROWS][vocab]: the LM head's rows before they go to dst */
} cpu_multi;

typedef struct {
    model_desc d;
    int quant; /* a layer matmul is quantized: the prefill family runs */
    int *window; /* [n_layers]: each layer's sliding window, 0 for none (kv.h kv_set_windows) */
    kv_pool *pool; /* the contexts' KV pages: contexts share a prefix's pages */
    cpu_multi *multi;
} cpu_model;

/* rows of a prefill group (BACKEND_GROUP_ROWS; tests set 1 so that every
   row of the short golden fixtures takes the family) */
static int g_group_rows = BACKEND_GROUP_ROWS;
void cpu_test_group_rows(int g) { g_group_rows = g > 0 ? g : BACKEND_GROUP_ROWS; }

typedef struct {
    const cpu_model *m;
    kv_cache *kv;
    tpool *tp;
    int max_batch;
    scratch s;            /* max_batch rows */
    float *logit_scratch; /* logits of argmax-only forwards */
    size_t n_logit_scratch;
} cpu_ctx;

static int cpu_describe(int device, char *out, size_t n) {
    (void)device;
    snprintf(out, n, "cpu");
    return 0;
}

/* the rows8 layout for every matmul weight and a tied LM head */
/* The matrices of layer l (NULLs skipped by the callers): its seven, then
   an MoE layer's router and experts. Returns how many it wrote (at most
   layer_mat_count's). */
static int layer_mats(const wlayer *L, const tensor **w) {
    const tensor *lw[] = {L->wq, L->wk, L->wv, L->wo, L->wg, L->wu, L->wd};
    int n = 0;
    for (size_t i = 0; i < sizeof lw / sizeof lw[0]; i++)
        if (lw[i]) w[n++] = lw[i];
    if (L->moe) {
        w[n++] = L->moe->router;
        for (int e = 0; e < L->moe->n_experts; e++)
            w[n++] = L->moe->gate[e], w[n++] = L->moe->up[e], w[n++] = L->moe->down[e];
    }
    return n;
}
static int layer_mat_count(const wlayer *L) { return 7 + (L->moe ? 1 + 3 * L->moe->n_experts : 0); }

void cpu_layout(const model_desc *d) {
    if (!d->weights || d->row_major) return;
    size_t cap = 1;
    for (int l = 0; l < d->cfg->n_layers; l++) cap += (size_t)layer_mat_count(&d->layers[l]);
    const tensor **w = xmalloc(sizeof *w * cap);
    int n = 0;
    for (int l = 0; l < d->cfg->n_layers; l++) n += layer_mats(&d->layers[l], w + n);
    w[n++] = d->lm_head;
    st_set_rows8(d->weights, w, n);
    free(w);
}

static int cpu_model_create(void **out, const model_desc *d, int device, char *err, size_t errlen) {
    (void)device;
    *out = NULL;
    if (cpu_check_desc(d, err, errlen) != 0) return -1;
    cpu_layout(d);
    cpu_model *m = xcalloc(1, sizeof *m);
    m->d = *d;
    m->multi = xcalloc(1, sizeof *m->multi);
    pthread_mutex_init(&m->multi->mu, NULL);
    m->pool = kv_pool_new(d->cfg->n_kv_heads, d->cfg->head_dim, d->kv_bits ? d->kv_bits : 32);
    m->window = xcalloc((size_t)d->cfg->n_layers, sizeof(int));
    for (int l = 0; l < d->cfg->n_layers; l++) m->window[l] = wlayer_window(&d->layers[l]);
    for (int l = 0; l < d->cfg->n_layers; l++) {
        const tensor **lw = xmalloc(sizeof *lw * (size_t)layer_mat_count(&d->layers[l]));
        const int n = layer_mats(&d->layers[l], lw);
        for (int i = 0; i < n; i++) m->quant |= dtype_is_quant(lw[i]->dtype);
        free(lw);
    }
    *out = m;
    return 0;
}

static void cpu_model_free(void *bm) {
    cpu_model *m = bm;
    if (!m) return;
    pthread_mutex_destroy(&m->multi->mu);
    if (m->multi->rows) scratch_free(&m->multi->s);
    free(m->multi->dst);
    free(m->multi->logits);
    free(m->multi);
    free(m->window);
    kv_pool_unref(m->pool);
    free(m);
}

static void cpu_model_caps(const void *bm, backend_caps *caps) {
    const cpu_model *m = bm;
    /* quantized layers: whole groups of rows take the int8 prefill family
       (quant.h); float weights have none */
    *caps = (backend_caps){.kv_low_bits = 1, .group_rows = m->quant ? BACKEND_GROUP_ROWS : 0};
}

static int cpu_samples_rows(const void *bm) {
    (void)bm;
    return 1; /* the same host code either way, no copy */
}

static int cpu_ctx_create(void **out, void *bm, int n_ctx, int max_batch, tpool *tp, char *err, size_t errlen) {
    *out = NULL;
    const cpu_model *m = bm;
    const model_config *c = m->d.cfg;
    cpu_ctx *x = xcalloc(1, sizeof *x);
    if (kv_create(&x->kv, m->pool, c->n_layers, c->n_kv_heads, c->head_dim, n_ctx, m->d.kv_bits ? m->d.kv_bits : 32, err,
                  errlen) != 0) {
        free(x);
        return -1;
    }
    kv_set_windows(x->kv, m->window); /* sliding layers keep their window */
    x->m = m;
    x->tp = tp;
    x->max_batch = max_batch;
    scratch_init(&x->s, c, (size_t)max_batch);
    *out = x;
    return 0;
}

static void cpu_ctx_free(void *bc) {
    cpu_ctx *x = bc;
    if (!x) return;
    kv_free(x->kv);
    scratch_free(&x->s);
    free(x->logit_scratch);
    free(x);
}

static int cpu_ctx_len(const void *bc) { return kv_len(((const cpu_ctx *)bc)->kv); }
static int cpu_ctx_capacity(const void *bc) { return kv_capacity(((const cpu_ctx *)bc)->kv); }
static void cpu_ctx_truncate(void *bc, int len) { kv_truncate(((cpu_ctx *)bc)->kv, len); }
/* the mapping of kv.c (filled on demand, so an upper bound), the scratch
   of scratch_init and the logits rows of an argmax forward */
static size_t cpu_ctx_bytes(const void *bm, int n_ctx, int max_batch) {
    const cpu_model *m = bm;
    const model_config *c = m->d.cfg;
    size_t B = (size_t)(max_batch > 0 ? max_batch : 64), H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t QD = (size_t)c->n_heads * (size_t)c->head_dim, KD = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    size_t scr = sizeof(float) * B * (2 * H + 2 * QD + 2 * KD + 2 * I) + sizeof(int) * B;
    return kv_bytes_resident(c->n_layers, c->n_kv_heads, c->head_dim, m->d.kv_bits ? m->d.kv_bits : 32, m->window,
                             n_ctx) +
           scr + sizeof(float) * (size_t)MODEL_SAMPLE_ROWS * (size_t)c->vocab_size;
}
static size_t cpu_ctx_release(void *bc) { return kv_release(((cpu_ctx *)bc)->kv); }
static int kv_copy_err(kv_cache *dst, const kv_cache *src, int n, const char *what, char *err, size_t errlen) {
    if (kv_copy_prefix(dst, src, n) != 0)
        return ds_err(err, errlen, "%s copy: %d positions do not fit (source holds %d, destination takes %d)", what, n,
                      kv_len(src), kv_capacity(dst));
    return 0;
}
static int cpu_ctx_copy(void *dst, const void *src, int n, char *err, size_t errlen) {
    return kv_copy_err(((cpu_ctx *)dst)->kv, ((const cpu_ctx *)src)->kv, n, "cache", err, errlen);
}

/* rows between a cache and host memory (backend.ctx_save / ctx_load) */
static int kv_rows_err(kv_cache *kv, int pos0, int n, void *host, int save, const char *what, char *err,
                       size_t errlen) {
    if ((save ? kv_save_rows(kv, pos0, n, host) : kv_load_rows(kv, pos0, n, host)) != 0)
        return ds_err(err, errlen, "%s %s: positions %d..%d do not fit (it holds %d, takes %d)", what,
                      save ? "save" : "load", pos0, pos0 + n, kv_len(kv), kv_capacity(kv));
    return 0;
}
static size_t cpu_ctx_pos_bytes(const void *bm) {
    const cpu_model *m = bm;
    const model_config *c = m->d.cfg;
    return kv_bytes_per_pos(c->n_layers, c->n_kv_heads, c->head_dim, m->d.kv_bits ? m->d.kv_bits : 32);
}
static int cpu_ctx_kept_from(const void *bc) { return kv_kept_from(((const cpu_ctx *)bc)->kv); }
static int cpu_ctx_save(void *bc, int pos0, int n, void *host, char *err, size_t errlen) {
    return kv_rows_err(((cpu_ctx *)bc)->kv, pos0, n, host, 1, "cache", err, errlen);
}
/* a block by reference: one page a layer (kv.h kv_pages_take) */
typedef struct {
    int n;
    kv_page *pages[];
} cpu_block;
static void *kv_block_take(kv_cache *kv, int b) {
    cpu_block *k = xmalloc(sizeof *k + sizeof(kv_page *) * (size_t)kv_layers(kv));
    k->n = kv_layers(kv);
    if (kv_pages_take(kv, b, k->pages) != 0) {
        free(k);
        return NULL;
    }
    return k;
}
static int kv_block_put(kv_cache *kv, int b, const void *h, const char *what, char *err, size_t errlen) {
    const cpu_block *k = h;
    if (k->n != kv_layers(kv) || kv_pages_put(kv, b, k->pages) != 0)
        return ds_err(err, errlen, "%s block %d: its pages do not fit this context (it holds %d, takes %d)", what, b,
                      kv_len(kv), kv_capacity(kv));
    return 0;
}
static void *cpu_ctx_block_take(void *bc, int b) { return kv_block_take(((cpu_ctx *)bc)->kv, b); }
static int cpu_ctx_block_put(void *bc, int b, const void *h, char *err, size_t errlen) {
    return kv_block_put(((cpu_ctx *)bc)->kv, b, h, "cache", err, errlen);
}
static void cpu_kv_pages(const void *bm, size_t *page_bytes, int64_t *held, int64_t *shared) {
    kv_pool_stats st;
    kv_pool_get_stats(((const cpu_model *)bm)->pool, &st);
    *page_bytes = st.page_bytes, *held = st.pages, *shared = st.shared;
}
static void cpu_block_drop(void *h) {
    cpu_block *k = h;
    kv_pages_drop(k->pages, k->n);
    free(k);
}
static int cpu_ctx_load(void *bc, int pos0, int n, const void *host, char *err, size_t errlen) {
    return kv_rows_err(((cpu_ctx *)bc)->kv, pos0, n, (void *)host, 0, "cache", err, errlen);
}

static void tap_copy(const model_batch *b, const float *x, int layer, int row0, int M, int H) {
    for (int t = 0; t < b->n_taps; t++) {
        if (b->tap_layers[t] != layer) continue;
        float *dst = b->taps + ((size_t)t * (size_t)b->n + (size_t)row0) * (size_t)H;
        memcpy(dst, x, sizeof(float) * (size_t)M * (size_t)H);
    }
}

/* One chunk of at most max_batch rows: rows [row0, row0+M) of the batch,
   those before row pre_end (the end of its whole prefill groups) through
   the prefill family. */
static void forward_chunk(cpu_ctx *x, const model_batch *b, int row0, int M, int pre_end, int *next_logit) {
    const model_desc *d = &x->m->d;
    const model_config *c = d->cfg;
    const int H = c->hidden_size;
    const int n_past = kv_len(x->kv);
    scratch *s = &x->s;

    for (int i = 0; i < M; i++) s->pos[i] = b->pos ? b->pos[row0 + i] : n_past + i;
    op_embed(s->x, d->embed, b->tokens + row0, M);
    if (c->embed_scale > 0) op_scale(s->x, c->embed_scale, M * H);
    tap_copy(b, s->x, -1, row0, M, H);
    const int Mpre = pre_end <= row0 ? 0 : pre_end - row0 < M ? pre_end - row0 : M;
    for (int l = 0; l < c->n_layers; l++) {
        cpu_layer(x->tp, s, &d->layers[l], c, d->inv_freq, x->kv, l, M, Mpre, n_past);
        tap_copy(b, s->x, l, row0, M, H);
    }
    kv_commit(x->kv, M);

    /* logits for the requested rows of this chunk: gather, norm, LM head */
    int n_sel = 0, first = *next_logit;
    while (*next_logit < b->n_logits) {
        int r = b->logit_rows ? b->logit_rows[*next_logit] : b->n - b->n_logits + *next_logit;
        if (r >= row0 + M) break;
        memcpy(s->xb + (size_t)n_sel * (size_t)H, s->x + (size_t)(r - row0) * (size_t)H, sizeof(float) * (size_t)H);
        n_sel++;
        (*next_logit)++;
    }
    if (n_sel) {
        op_rmsnorm(s->xb, s->xb, d->final_norm, n_sel, H, c->rms_norm_eps);
        float *lg = b->logits + (size_t)first * (size_t)c->vocab_size;
        op_matmul(x->tp, lg, s->xb, n_sel, d->lm_head, NULL);
        if (c->final_softcap > 0) op_softcap(lg, c->final_softcap, n_sel * c->vocab_size);
    }
}

/* the logits rows of a forward that asks for argmax or samples only: the
   context's scratch, grown to n rows when first needed */
static float *ctx_logits(cpu_ctx *x, int n) {
    size_t need = (size_t)n * (size_t)x->m->d.cfg->vocab_size;
    if (x->n_logit_scratch < need) {
        free(x->logit_scratch);
        x->logit_scratch = xmalloc(sizeof(float) * need);
        x->n_logit_scratch = need;
    }
    return x->logit_scratch;
}

/* the answers of a forward's logits rows lg: argmax ids or samples */
static void answers(const cpu_model *m, const model_batch *b, const float *lg) {
    const int V = m->d.cfg->vocab_size;
    for (int i = 0; b->argmax && i < b->n_logits; i++) b->argmax[i] = op_argmax(lg + (size_t)i * V, V);
    if (b->smp) sampler_rows(b->smp, lg, b->n_logits, b->draft, b->u, b->sampled, 0);
}

static int cpu_forward(void *bc, const model_batch *b, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    cpu_ctx *x = bc;
    model_batch bb = *b;
    if (b->n_logits && !b->logits) bb.logits = ctx_logits(x, b->n_logits); /* argmax or samples only */
    int next_logit = 0;
    /* whole groups counted from the forward's first row (backend.h) */
    const int pre_end = x->m->quant ? b->n / g_group_rows * g_group_rows : 0;
    for (int row0 = 0; row0 < b->n; row0 += x->max_batch) {
        int M = b->n - row0 < x->max_batch ? b->n - row0 : x->max_batch;
        forward_chunk(x, &bb, row0, M, pre_end, &next_logit);
    }
    answers(x->m, b, bb.logits);
    return 0;
}

/* ---- several sequences at once ------------------------------------------- */

/* The multi form runs in steps of at most max(MULTI_ROWS, the widest
   max_batch of its contexts) rows: each step takes rows from every
   sequence with rows left (the sequences with the fewest first, so that
   decode and verify rows share the first step), runs every matmul over
   all of the step's rows at once and the KV stores and attention per
   sequence. A sequence's rows in one step are all of the prefill family
   (before its own pre_end, whole groups counted from its batch's first
   row) or all exact: the step's prefill rows are laid first, so mm()
   sends them through op_matmul_pre as one block. Each row's arithmetic is
   that of the single forward (every kernel's row depends only on itself,
   attention on its sequence's cache), so the results are cpu_forward's
   on each sequence in turn, bit for bit. The LM head runs over the step's
   selected rows MULTI_HEAD_ROWS at a time into the multi scratch, copied
   to each sequence's logits rows (its buffer, or its context's scratch
   for argmax and samples). */
#define MULTI_ROWS 256
#define MULTI_HEAD_ROWS 32

/* a sequence's rows [row0, row0 + M) at rows [off, off + M) of a step */
typedef struct {
    cpu_ctx *x;
    const model_batch *b;
    float *lg; /* its logits rows */
    int *next_logit;
    int row0, M, off, n_past;
} mseg;

/* the segments of a step whose attention runs one sequence a thread
   (MULTI_ATT_ROWS rows or fewer: a decode row or a verify, whose kernel
   alone would split a few heads over the pool) */
#define MULTI_ATT_ROWS 16
typedef struct {
    scratch *s;
    const wlayer *L;
    const model_config *c;
    const mseg *sg;
    int ns, l;
} att_job;

static void att_worker(void *p, int ith, int nth) {
    const att_job *j = p;
    for (int k = ith; k < j->ns; k += nth) { /* (each sequence's own cache and rows) */
        const mseg *g = &j->sg[k];
        if (g->M <= MULTI_ATT_ROWS) layer_attn(NULL, j->s, j->L, j->c, g->x->kv, j->l, g->off, g->M, g->n_past);
    }
}

/* every segment's KV store and attention in layer l: the short ones one
   sequence a thread, the others each over the pool (a row's bits are the
   same either way: its attention is one fixed-order chain) */
static void multi_attn(tpool *tp, scratch *s, const wlayer *L, const model_config *c, const mseg *sg, int ns, int l) {
    int n_short = 0;
    for (int k = 0; k < ns; k++) n_short += sg[k].M <= MULTI_ATT_ROWS;
    if (n_short > 1) {
        att_job j = {s, L, c, sg, ns, l};
        tp_run(tp, att_worker, &j);
    }
    for (int k = 0; k < ns; k++)
        if (n_short <= 1 || sg[k].M > MULTI_ATT_ROWS)
            layer_attn(tp, s, L, c, sg[k].x->kv, l, sg[k].off, sg[k].M, sg[k].n_past);
}

static void multi_step(cpu_multi *mu, tpool *tp, const cpu_model *m, mseg *sg, int ns, int M, int Mpre) {
    const model_desc *d = &m->d;
    const model_config *c = d->cfg;
    const int H = c->hidden_size, V = c->vocab_size;
    scratch *s = &mu->s;
    for (int k = 0; k < ns; k++) {
        const mseg *g = &sg[k];
        for (int i = 0; i < g->M; i++) s->pos[g->off + i] = g->b->pos ? g->b->pos[g->row0 + i] : g->n_past + i;
        op_embed(s->x + (size_t)g->off * H, d->embed, g->b->tokens + g->row0, g->M);
        if (c->embed_scale > 0) op_scale(s->x + (size_t)g->off * H, c->embed_scale, g->M * H);
        tap_copy(g->b, s->x + (size_t)g->off * H, -1, g->row0, g->M, H);
    }
    for (int l = 0; l < c->n_layers; l++) {
        const wlayer *L = &d->layers[l];
        layer_qkv(tp, s, L, c, d->inv_freq, M, Mpre);
        multi_attn(tp, s, L, c, sg, ns, l);
        layer_out(tp, s, L, c, M, Mpre);
        for (int k = 0; k < ns; k++) tap_copy(sg[k].b, s->x + (size_t)sg[k].off * H, l, sg[k].row0, sg[k].M, H);
    }
    /* the selected rows of every sequence, gathered, then the LM head */
    int n_sel = 0;
    for (int k = 0; k < ns; k++) {
        const mseg *g = &sg[k];
        kv_commit(g->x->kv, g->M);
        const model_batch *b = g->b;
        while (*g->next_logit < b->n_logits) {
            int i = *g->next_logit, r = b->logit_rows ? b->logit_rows[i] : b->n - b->n_logits + i;
            if (r >= g->row0 + g->M) break;
            memcpy(s->xb + (size_t)n_sel * H, s->x + (size_t)(g->off + r - g->row0) * H, sizeof(float) * (size_t)H);
            mu->dst[n_sel++] = g->lg + (size_t)i * V;
            (*g->next_logit)++;
        }
    }
    if (!n_sel) return;
    op_rmsnorm(s->xb, s->xb, d->final_norm, n_sel, H, c->rms_norm_eps);
    for (int r0 = 0; r0 < n_sel; r0 += MULTI_HEAD_ROWS) {
        int n = n_sel - r0 < MULTI_HEAD_ROWS ? n_sel - r0 : MULTI_HEAD_ROWS;
        op_matmul(tp, mu->logits, s->xb + (size_t)r0 * H, n, d->lm_head, NULL);
        if (c->final_softcap > 0) op_softcap(mu->logits, c->final_softcap, n * V);
        for (int i = 0; i < n; i++) memcpy(mu->dst[r0 + i], mu->logits + (size_t)i * V, sizeof(float) * (size_t)V);
    }
}

static int cpu_forward_multi(void *const *bcs, const model_batch *bs, int n, char *err, size_t errlen) {
    if (n <= 0 || n > MODEL_MULTI_MAX)
        return ds_err(err, errlen, "forward: %d sequences, 1..%d in one multi forward", n, MODEL_MULTI_MAX);
    cpu_ctx *x0 = bcs[0];
    const cpu_model *m = x0->m;
    const model_config *c = m->d.cfg;
    int R = MULTI_ROWS;
    for (int i = 0; i < n; i++) {
        const cpu_ctx *x = bcs[i];
        if (x->m != m) return ds_err(err, errlen, "forward: sequence %d belongs to another model", i);
        if (x->max_batch > R) R = x->max_batch;
    }
    float *lg[MODEL_MULTI_MAX];
    int done[MODEL_MULTI_MAX], pre_end[MODEL_MULTI_MAX], next_logit[MODEL_MULTI_MAX];
    for (int i = 0; i < n; i++) {
        const model_batch *b = &bs[i];
        lg[i] = b->logits ? b->logits : b->n_logits ? ctx_logits(bcs[i], b->n_logits) : NULL;
        done[i] = next_logit[i] = 0;
        pre_end[i] = m->quant ? b->n / g_group_rows * g_group_rows : 0;
    }
    cpu_multi *mu = m->multi;
    pthread_mutex_lock(&mu->mu);
    if (mu->rows < R) {
        if (mu->rows) scratch_free(&mu->s);
        scratch_init(&mu->s, c, (size_t)R);
        free(mu->dst);
        mu->dst = xmalloc(sizeof *mu->dst * (size_t)R);
        mu->rows = R;
    }
    if (!mu->logits) mu->logits = xaligned(sizeof(float) * MULTI_HEAD_ROWS * (size_t)c->vocab_size);
    for (;;) {
        /* the sequences with rows left, fewest first (insertion sort: n <= 64) */
        int ord[MODEL_MULTI_MAX], no = 0;
        for (int i = 0; i < n; i++) {
            int left = bs[i].n - done[i], j = no++;
            if (!left) {
                no--;
                continue;
            }
            while (j > 0 && bs[ord[j - 1]].n - done[ord[j - 1]] > left) ord[j] = ord[j - 1], j--;
            ord[j] = i;
        }
        if (!no) break;
        mseg sg[MODEL_MULTI_MAX];
        int ns = 0, budget = R, Mpre = 0;
        for (int k = 0; k < no && budget > 0; k++) {
            int i = ord[k], t = bs[i].n - done[i];
            if (t > budget) t = budget;
            const int pre = done[i] < pre_end[i];
            if (pre && t > pre_end[i] - done[i]) t = pre_end[i] - done[i];
            cpu_ctx *x = bcs[i];
            sg[ns++] = (mseg){x, &bs[i], lg[i], &next_logit[i], done[i], t, pre, kv_len(x->kv)};
            done[i] += t;
            budget -= t;
            if (pre) Mpre += t;
        }
        /* offsets: the prefill-family segments (off holds 1 for them so far) first */
        int at_pre = 0, at_exact = Mpre;
        for (int k = 0; k < ns; k++) {
            int *at = sg[k].off ? &at_pre : &at_exact;
            sg[k].off = *at;
            *at += sg[k].M;
        }
        multi_step(mu, x0->tp, m, sg, ns, at_exact, Mpre);
    }
    pthread_mutex_unlock(&mu->mu);
    for (int i = 0; i < n; i++) answers(m, &bs[i], lg[i]);
    return 0;
}

/* ---- drafters ------------------------------------------------------------ */

#define CTX_CHUNK 64 /* context rows ingested per pass */

typedef struct {
    drafter_desc d;
    kv_pool *pool; /* its states' context pages: states share a prefix's pages, blocks keep them */
} cpu_dmodel;

typedef struct {
    const cpu_dmodel *dm;
    tpool *tp;
    kv_cache *kv; /* context K/V at committed positions; a block's rows sit past kv_len, never committed */
    scratch s;    /* max(B, CTX_CHUNK) rows */
    float *feat, *g, *cin, *e, *bias, *base, *zl; /* bias [V] */
    int *tok;                                     /* [B] */
    int n_lastctx;
} cpu_dstate;

static int cpu_dmodel_create(void **out, const drafter_desc *d, void *target_bm, char *err, size_t errlen) {
    (void)target_bm;
    *out = NULL;
    if (check_layers(d->cfg, d->layers, err, errlen) != 0) return -1;
    cpu_dmodel *m = xcalloc(1, sizeof *m);
    m->d = *d;
    /* f32, as each state's cache (cpu_dstate_create) */
    m->pool = kv_pool_new(d->cfg->n_kv_heads, d->cfg->head_dim, 32);
    *out = m;
    return 0;
}

static void cpu_dmodel_free(void *bdm) {
    cpu_dmodel *m = bdm;
    if (m) kv_pool_unref(m->pool);
    free(m);
}

static int cpu_dstate_create(void **out, void *bdm, int cap, tpool *tp, char *err, size_t errlen) {
    *out = NULL;
    const cpu_dmodel *dm = bdm;
    const drafter_desc *d = &dm->d;
    const model_config *b = d->cfg;
    cpu_dstate *s = xcalloc(1, sizeof *s);
    /* the drafter's cache stays f32 whatever the target's --kv-bits: it is
       a few layers deep, and its drafts never change what is emitted */
    if (kv_create(&s->kv, dm->pool, b->n_layers, b->n_kv_heads, b->head_dim, cap, 32, err, errlen) != 0) {
        free(s);
        return -1;
    }
    const int B = d->block_size;
    size_t H = (size_t)b->hidden_size, V = (size_t)b->vocab_size, R = (size_t)d->markov_rank;
    s->dm = dm;
    s->tp = tp;
    scratch_init(&s->s, b, (size_t)(B > CTX_CHUNK ? B : CTX_CHUNK));
    s->feat = xaligned(sizeof(float) * (size_t)CTX_CHUNK * (size_t)d->n_taps * H);
    s->g = xaligned(sizeof(float) * (size_t)CTX_CHUNK * H);
    s->cin = xaligned(sizeof(float) * (H + R + 1));
    s->e = xaligned(sizeof(float) * (R + 1));
    s->bias = xaligned(sizeof(float) * V);
    s->tok = xmalloc(sizeof(int) * (size_t)B);
    s->base = xaligned(sizeof(float) * (size_t)B * V);
    s->zl = xaligned(sizeof(float) * (size_t)B * V);
    *out = s;
    return 0;
}

static void cpu_dstate_free(void *bs) {
    cpu_dstate *s = bs;
    if (!s) return;
    kv_free(s->kv);
    scratch_free(&s->s);
    float *b[] = {s->feat, s->g, s->cin, s->e, s->bias, s->base, s->zl};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) free(b[i]);
    free(s->tok);
    free(s);
}

static int cpu_dstate_len(const void *bs) { return kv_len(((const cpu_dstate *)bs)->kv); }
static int cpu_dstate_capacity(const void *bs) { return kv_capacity(((const cpu_dstate *)bs)->kv); }
static void cpu_dstate_truncate(void *bs, int len) { kv_truncate(((cpu_dstate *)bs)->kv, len); }
static int cpu_dstate_copy(void *dst, const void *src, int n, char *err, size_t errlen) {
    return kv_copy_err(((cpu_dstate *)dst)->kv, ((const cpu_dstate *)src)->kv, n, "drafter cache", err, errlen);
}

static size_t cpu_dstate_pos_bytes(const void *bdm) {
    const model_config *b = ((const cpu_dmodel *)bdm)->d.cfg;
    return kv_bytes_per_pos(b->n_layers, b->n_kv_heads, b->head_dim, 32);
}
static int cpu_dstate_save(void *bs, int pos0, int n, void *host, char *err, size_t errlen) {
    return kv_rows_err(((cpu_dstate *)bs)->kv, pos0, n, host, 1, "drafter cache", err, errlen);
}
static int cpu_dstate_load(void *bs, int pos0, int n, const void *host, char *err, size_t errlen) {
    cpu_dstate *s = bs;
    if (kv_rows_err(s->kv, pos0, n, (void *)host, 0, "drafter cache", err, errlen) != 0) return -1;
    s->n_lastctx = 0; /* (no chunk was ingested) */
    return 0;
}
static void *cpu_dstate_block_take(void *bs, int b) { return kv_block_take(((cpu_dstate *)bs)->kv, b); }
static int cpu_dstate_block_put(void *bs, int b, const void *h, char *err, size_t errlen) {
    cpu_dstate *s = bs;
    if (kv_block_put(s->kv, b, h, "drafter cache", err, errlen) != 0) return -1;
    s->n_lastctx = 0; /* (no chunk was ingested) */
    return 0;
}

/* Context K/V for m rows at positions pos0..: C = RMSNorm(fc . F,
   hidden_norm); per layer RoPE(k_norm(k_proj C)) and v_proj C. */
static void ingest_chunk(cpu_dstate *s, int pos0, int m, const float *taps, int rows, int row0) {
    const drafter_desc *d = &s->dm->d;
    const model_config *b = d->cfg;
    const int H = b->hidden_size, nkv = b->n_kv_heads, hd = b->head_dim, nt = d->n_taps;
    scratch *x = &s->s;
    for (int i = 0; i < m; i++)
        for (int t = 0; t < nt; t++)
            memcpy(s->feat + ((size_t)i * nt + t) * H, taps + ((size_t)t * rows + (size_t)(row0 + i)) * H,
                   sizeof(float) * (size_t)H);
    op_matmul(s->tp, s->g, s->feat, m, d->fc, NULL);
    op_rmsnorm(s->g, s->g, d->hidden_norm, m, H, b->rms_norm_eps);
    for (int i = 0; i < m; i++) x->pos[i] = pos0 + i;
    for (int l = 0; l < b->n_layers; l++) {
        const wlayer *L = &d->layers[l];
        op_matmul(s->tp, x->k, s->g, m, L->wk, NULL);
        op_rmsnorm(x->k, x->k, L->k_norm, m * nkv, hd, b->rms_norm_eps);
        op_rope(x->k, m, nkv, hd, x->pos, d->inv_freq);
        op_matmul(s->tp, x->v, s->g, m, L->wv, NULL);
        kv_store(s->kv, l, x->k, x->v, m);
    }
    kv_commit(s->kv, m);
    s->n_lastctx = m;
}

static int cpu_dstate_ingest(void *bs, int pos0, int n, const float *taps, int rows, int row0, char *err,
                             size_t errlen) {
    (void)err;
    (void)errlen;
    cpu_dstate *s = bs;
    kv_truncate(s->kv, pos0);
    for (int i = 0; i < n; i += CTX_CHUNK) {
        int m = n - i < CTX_CHUNK ? n - i : CTX_CHUNK;
        ingest_chunk(s, pos0 + i, m, taps, rows, row0 + i);
    }
    return 0;
}

/* Runs [anchor, mask x (B-1)] at positions spos.. through the layers (the
   block's K/V right after the context, uncommitted); leaves h =
   RMSNorm(X, norm) in s.xb [B][H]. */
static void block_forward(cpu_dstate *s, int anchor) {
    const drafter_desc *d = &s->dm->d;
    const model_config *b = d->cfg;
    const int B = d->block_size, spos = kv_len(s->kv);
    scratch *x = &s->s;
    int *tok = s->tok;
    for (int i = 0; i < B; i++) {
        tok[i] = i ? d->mask_token_id : anchor;
        x->pos[i] = spos + i;
    }
    op_embed(x->x, d->embed, tok, B);
    for (int l = 0; l < b->n_layers; l++) cpu_layer(s->tp, x, &d->layers[l], b, d->inv_freq, s->kv, l, B, 0, spos);
    op_rmsnorm(x->xb, x->x, d->final_norm, B, b->hidden_size, b->rms_norm_eps);
}

/* DSpark's rows: e = W1[prev] (markov_e), then from h_j and e the
   confidence (conf_of) and z = head row j + W2 . e (z_of) */
static void markov_e(cpu_dstate *s, int prev) {
    if (s->dm->d.markov_rank > 0) op_embed(s->e, s->dm->d.w1, &prev, 1);
}

static float conf_of(cpu_dstate *s, int j) {
    const drafter_desc *d = &s->dm->d;
    const int H = d->cfg->hidden_size, R = d->markov_rank;
    float logit;
    memcpy(s->cin, s->s.xb + (size_t)j * H, sizeof(float) * (size_t)H);
    if (d->conf_markov) memcpy(s->cin + H, s->e, sizeof(float) * (size_t)R);
    op_matmul(NULL, &logit, s->cin, 1, d->conf_w, &d->conf_b);
    return 1.0f / (1.0f + expf(-logit));
}

static void z_of(cpu_dstate *s, int j, float *z) {
    const drafter_desc *d = &s->dm->d;
    const int V = d->cfg->vocab_size;
    memcpy(z, s->base + (size_t)j * V, sizeof(float) * (size_t)V);
    if (d->markov_rank > 0) {
        op_matmul(s->tp, s->bias, s->e, 1, d->w2, NULL);
        op_add(z, s->bias, V);
    }
}

static int cpu_dstate_propose(void *bs, int anchor, int n, int chain, float conf_th, int *draft, float *conf,
                              char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    cpu_dstate *s = bs;
    const drafter_desc *d = &s->dm->d;
    const int H = d->cfg->hidden_size, V = d->cfg->vocab_size;
    block_forward(s, anchor);
    if (!d->dspark) {
        /* mask row j (1..B-1) drafts the token at position s+j */
        op_matmul(s->tp, s->base, s->s.xb + (size_t)H, n, d->lm_head, NULL);
        for (int j = 0; chain && j < n; j++) draft[j] = op_argmax(s->base + (size_t)j * V, V);
        return 0;
    }
    /* DSpark: row j drafts position s+j+1, left to right */
    op_matmul(s->tp, s->base, s->s.xb, n, d->lm_head, NULL);
    for (int j = 0, prev = anchor; chain && j < n; j++) {
        markov_e(s, prev);
        if (d->conf_w && (conf[j] = conf_of(s, j)) < conf_th) break;
        float *z = s->zl + (size_t)j * V;
        z_of(s, j, z);
        draft[j] = op_argmax(z, V);
        prev = draft[j];
    }
    return 0;
}

static int cpu_dstate_row(void *bs, int j, int prev, float conf_th, float *conf, float *z, char *err,
                          size_t errlen) {
    (void)err;
    (void)errlen;
    cpu_dstate *s = bs;
    const int V = s->dm->d.cfg->vocab_size;
    markov_e(s, prev);
    if (s->dm->d.conf_w && (*conf = conf_of(s, j)) < conf_th) return 0;
    z_of(s, j, z);
    memcpy(s->zl + (size_t)j * V, z, sizeof(float) * (size_t)V);
    return 0;
}

static int cpu_dstate_read_last(const void *bs, float *base, float *z, int rows, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    const cpu_dstate *s = bs;
    size_t n = sizeof(float) * (size_t)rows * (size_t)s->dm->d.cfg->vocab_size;
    if (base) memcpy(base, s->base, n);
    if (z) memcpy(z, s->zl, n);
    return 0;
}

static int cpu_dstate_read_ctx(const void *bs, float *g, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    const cpu_dstate *s = bs;
    memcpy(g, s->g, sizeof(float) * (size_t)s->n_lastctx * (size_t)s->dm->d.cfg->hidden_size);
    return s->n_lastctx;
}

const backend backend_cpu = {
    .name = "cpu",
    .describe = cpu_describe,
    .model_create = cpu_model_create,
    .model_free = cpu_model_free,
    .model_caps = cpu_model_caps,
    .samples_rows = cpu_samples_rows,
    .ctx_create = cpu_ctx_create,
    .ctx_free = cpu_ctx_free,
    .ctx_len = cpu_ctx_len,
    .ctx_capacity = cpu_ctx_capacity,
    .ctx_truncate = cpu_ctx_truncate,
    .ctx_release = cpu_ctx_release,
    .ctx_copy = cpu_ctx_copy,
    .ctx_pos_bytes = cpu_ctx_pos_bytes,
    .ctx_kept_from = cpu_ctx_kept_from,
    .ctx_save = cpu_ctx_save,
    .ctx_load = cpu_ctx_load,
    .block_rows = KV_PAGE,
    .kv_pages = cpu_kv_pages,
    .ctx_block_take = cpu_ctx_block_take,
    .ctx_block_put = cpu_ctx_block_put,
    .block_drop = cpu_block_drop,
    .ctx_bytes = cpu_ctx_bytes,
    .forward = cpu_forward,
    .forward_multi = cpu_forward_multi,
    .dmodel_create = cpu_dmodel_create,
    .dmodel_free = cpu_dmodel_free,
    .dstate_create = cpu_dstate_create,
    .dstate_free = cpu_dstate_free,
    .dstate_len = cpu_dstate_len,
    .dstate_capacity = cpu_dstate_capacity,
    .dstate_truncate = cpu_dstate_truncate,
    .dstate_copy = cpu_dstate_copy,
    .dstate_pos_bytes = cpu_dstate_pos_bytes,
    .dstate_save = cpu_dstate_save,
    .dstate_load = cpu_dstate_load,
    .dstate_block_take = cpu_dstate_block_take,
    .dstate_block_put = cpu_dstate_block_put,
    .dstate_ingest = cpu_dstate_ingest,
    .dstate_propose = cpu_dstate_propose,
    .dstate_row = cpu_dstate_row,
    .dstate_read_last = cpu_dstate_read_last,
    .dstate_read_ctx = cpu_dstate_read_ctx,
    .dstate_ctx_chunk = CTX_CHUNK,
    .tensor_parallel = cpu_tpar_backend,
};

/* ---- the layer pieces the tensor-parallel emulation shares (cpu_internal.h) ---- */

void cpu_scratch_init(cpu_scratch *s, const model_config *c, size_t B) { scratch_init(s, c, B); }
void cpu_scratch_free(cpu_scratch *s) { scratch_free(s); }
size_t cpu_scratch_bytes(const model_config *c, size_t B) {
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t QD = (size_t)c->n_heads * (size_t)c->head_dim, KD = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    return sizeof(float) * B * (2 * H + 2 * QD + 2 * KD + 2 * I) + sizeof(int) * B;
}
void cpu_mm(tpool *tp, float *y, const float *x, int M, int Mpre, const tensor *W, const float *b) {
    mm(tp, y, x, M, Mpre, W, b);
}
void cpu_layer_qkv(tpool *tp, cpu_scratch *s, const wlayer *L, const model_config *c, const float *inv_freq, int M,
                   int Mpre) {
    layer_qkv(tp, s, L, c, inv_freq, M, Mpre);
}
void cpu_layer_attn(tpool *tp, cpu_scratch *s, const wlayer *L, const model_config *c, kv_cache *kv, int l, int off,
                    int M, int n_past) {
    layer_attn(tp, s, L, c, kv, l, off, M, n_past);
}
void cpu_moe_mlp(tpool *tp, cpu_scratch *s, const wmoe *e, int M, int Mpre, int H) { moe_mlp(tp, s, e, M, Mpre, H); }
int cpu_check_desc(const model_desc *d, char *err, size_t errlen) {
    if (d->kv_bits && !kv_bits_ok(d->kv_bits))
        return ds_err(err, errlen, "--kv-bits %d: the CPU's KV cache stores 32, 16 or 8 bits", d->kv_bits);
    return check_layers(d->cfg, d->layers, err, errlen);
}
int cpu_group_rows(void) { return g_group_rows; }
void cpu_tap_copy(const model_batch *b, const float *x, int layer, int row0, int M, int H) {
    tap_copy(b, x, layer, row0, M, H);
}
