/* model: weight binding and the forward pass. See model.h. */
#include "engine/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/cuda/cuda_backend.h"
#include "engine/kv.h"
#include "engine/ops.h"
#include "engine/safetensors.h"
#include "engine/sampler.h"
#include "engine/wbind.h"
#include "base/util.h"

typedef wlayer layer_w;

struct model {
    model_config cfg;
    st_set *st;
    const tensor *embed;   /* [V][H] */
    const tensor *lm_head; /* [V][H]; the embedding when tied */
    float *final_norm;     /* [H] */
    layer_w *layers;       /* [n_layers] */
    float *inv_freq;       /* [hd/2] */
    float *owned;          /* one block holding every f32 copy above */
    size_t weight_bytes;
    cuda_model *cu;        /* the GPU copy when the device is cuda */
    char device[256];
};

struct model_ctx {
    const model *m;
    kv_cache *kv;
    cuda_ctx *cu; /* instead of kv and the scratch when the model is on a GPU */
    tpool *tp;
    int max_batch;
    /* scratch, each sized for max_batch rows */
    float *x, *xb;        /* [B][H] */
    float *q, *att;       /* [B][nh*hd] */
    float *k, *v;         /* [B][nkv*hd] */
    float *gate, *up;     /* [B][I] */
    int *pos;             /* [B] */
    float *logit_scratch; /* logits of argmax-only forwards */
    size_t n_logit_scratch;
};

/* ---- loading ----------------------------------------------------------- */

/* "cpu", "cuda", "cuda:N" -> -1 (cpu) or the GPU index; -2 when malformed. */
static int parse_device(const char *d) {
    if (!d || !*d || !strcmp(d, "cpu")) return -1;
    if (!strcmp(d, "cuda")) return 0;
    if (!strncmp(d, "cuda:", 5)) {
        char *end;
        long g = strtol(d + 5, &end, 10);
        if (d[5] && !*end && g >= 0 && g < 64) return (int)g;
    }
    return -2;
}

/* On the CPU, the matmul weights read into memory take the rows8 layout
   (tensor.h), in which the decode matmul streams a block of 8 rows as one
   run with 8 independent chains: on a Zen 4 host 28-30 GB/s a thread where
   four row-major rows read 12-16 (docs/BENCHMARKS.md, bench/gemv-layout.c).
   The results are the same bits. A tied embedding is the LM head, so it
   is laid out for it (op_embed reads either layout); an untied one is only
   gathered and stays row-major, as do mapped files (--mmap) and shapes
   that are not multiples of 8. DSPARK_ROWS8=0 keeps every weight
   row-major (for comparisons). */
static void cpu_layout(model *m) {
    const char *e = getenv("DSPARK_ROWS8");
    if (e && !strcmp(e, "0")) return;
    const int per = 7, n = m->cfg.n_layers * per + 1;
    const tensor **w = xmalloc(sizeof *w * (size_t)n);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const layer_w *L = &m->layers[l];
        const tensor *lw[] = {L->wq, L->wk, L->wv, L->wo, L->wg, L->wu, L->wd};
        memcpy(w + (size_t)l * per, lw, sizeof lw);
    }
    w[n - 1] = m->lm_head;
    st_set_rows8(m->st, w, n);
    free(w);
}

static int open_device(model *m, const model_load_opts *opt, char *err, size_t errlen) {
    const char *d = opt && opt->device ? opt->device : getenv("DSPARK_DEVICE");
    int gpu = parse_device(d);
    snprintf(m->device, sizeof m->device, "cpu");
    if (gpu == -1) {
        cpu_layout(m);
        return 0;
    }
    if (gpu == -2) return ds_err(err, errlen, "device \"%s\": expected cpu, cuda or cuda:N", d);
    cuda_weights w = {.cfg = &m->cfg, .embed = m->embed, .lm_head = m->lm_head, .final_norm = m->final_norm,
                      .inv_freq = m->inv_freq, .layers = m->layers};
    if (cuda_model_create(&m->cu, &w, gpu, err, errlen) != 0) return -1;
    char desc[200];
    cuda_describe(gpu, desc, sizeof desc);
    snprintf(m->device, sizeof m->device, "cuda:%d: %s", gpu, desc);
    return 0;
}

int model_load(model **out, const char *dir, const model_load_opts *opt, char *err, size_t errlen) {
    *out = NULL;
    model *m = xcalloc(1, sizeof *m);
    if (config_load(&m->cfg, dir, err, errlen) != 0) goto fail;
    st_load mode = opt && opt->use_mmap ? ST_LOAD_MMAP : ST_LOAD_READ;
    if (st_set_open_mode(&m->st, dir, mode, err, errlen) != 0) goto fail;
    const model_config *c = &m->cfg;
    int64_t H = c->hidden_size, V = c->vocab_size, hd = c->head_dim;
    char what[64];
    snprintf(what, sizeof what, "%s model", config_arch_name(c->arch));
    wbind b;
    wbind_init(&b, m->st, what, err, errlen);
    char name[256];
    int ok = 1;
    const tensor *tn[4] = {0};

    m->embed = wbind_get(&b, "model.embed_tokens.weight", V, H);
    ok = ok && m->embed;
    tn[0] = ok ? wbind_get(&b, "model.norm.weight", H, 0) : NULL;
    ok = ok && tn[0];
    if (ok && !c->tie_word_embeddings) {
        m->lm_head = wbind_get(&b, "lm_head.weight", V, H);
        ok = m->lm_head != NULL;
    } else if (ok) {
        /* Tied: some exports still include a copy; accept it, use embed. */
        if (st_set_find(m->st, "lm_head.weight")) wbind_get(&b, "lm_head.weight", V, H);
        m->lm_head = m->embed;
    }
    /* f32 copies of norms and biases live in one block */
    m->owned = xaligned(sizeof(float) *
                        (wbind_layer_floats(c) * (size_t)c->n_layers + (size_t)H + (size_t)hd));
    float *pool = m->owned;
    if (ok) m->final_norm = wbind_f32(&pool, tn[0]);
    m->layers = xcalloc((size_t)c->n_layers, sizeof(layer_w));
    for (int l = 0; ok && l < c->n_layers; l++) {
        snprintf(name, sizeof name, "model.layers.%d.", l);
        ok = wbind_layer(&b, name, c, &pool, &m->layers[l]) == 0;
    }
    if (ok && wbind_check_leftovers(&b) != 0) ok = 0;
    wbind_done(&b);
    if (!ok) goto fail;

    m->inv_freq = pool;
    config_rope_inv_freq(c, m->inv_freq);
    for (int i = 0; i < st_set_count(m->st); i++) {
        const tensor *t = st_set_get(m->st, i);
        if (t->ndim == 2 && t != m->embed) m->weight_bytes += t->nbytes;
    }
    /* The LM head streams per token; the embedding is only gathered. */
    if (m->lm_head == m->embed) m->weight_bytes += m->embed->nbytes;
    if (open_device(m, opt, err, errlen) != 0) goto fail;
    *out = m;
    return 0;
fail:
    model_free(m);
    return -1;
}

void model_free(model *m) {
    if (!m) return;
    cuda_model_free(m->cu);
    st_set_close(m->st);
    free(m->layers);
    free(m->owned);
    free(m);
}

const model_config *model_cfg(const model *m) { return &m->cfg; }
const char *model_device(const model *m) { return m->device; }
int model_rows8(const model *m) { return m->cfg.n_layers > 0 && m->layers[0].wq->rows8; }
size_t model_weight_bytes(const model *m) { return m->weight_bytes; }
const tensor *model_embed(const model *m) { return m->embed; }
struct cuda_model *model_cuda(const model *m) { return m->cu; }
int model_samples_rows(const model *m) { return !m->cu || cuda_model_samples(m->cu); }
const tensor *model_lm_head(const model *m) { return m->lm_head; }

int model_default_context(const model *m) {
    const model_config *c = &m->cfg;
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    double mem = (pages > 0 && psize > 0) ? (double)pages * (double)psize : 8e9;
    double per = (double)kv_bytes_per_pos(c->n_layers, c->n_kv_heads, c->head_dim);
    double fit = (mem * 0.5 - (double)m->weight_bytes) / per;
    int n = c->max_position_embeddings;
    if (fit < n) n = fit < 256 ? 256 : (int)fit;
    return n;
}

/* ---- context ----------------------------------------------------------- */

int mctx_create(model_ctx **out, const model *m, int n_ctx, int max_batch, tpool *tp, char *err,
                size_t errlen) {
    *out = NULL;
    const model_config *c = &m->cfg;
    if (n_ctx <= 0) n_ctx = model_default_context(m);
    if (max_batch <= 0) max_batch = 64;
    model_ctx *x = xcalloc(1, sizeof *x);
    if (m->cu) {
        x->m = m;
        x->tp = tp;
        x->max_batch = max_batch;
        if (cuda_ctx_create(&x->cu, m->cu, n_ctx, max_batch, err, errlen) != 0) {
            free(x);
            return -1;
        }
        *out = x;
        return 0;
    }
    if (kv_create(&x->kv, c->n_layers, c->n_kv_heads, c->head_dim, n_ctx, err, errlen) != 0) {
        free(x);
        return -1;
    }
    size_t B = (size_t)max_batch, H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t QD = (size_t)c->n_heads * (size_t)c->head_dim, KD = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    x->m = m;
    x->tp = tp;
    x->max_batch = max_batch;
    x->x = xaligned(sizeof(float) * B * H);
    x->xb = xaligned(sizeof(float) * B * H);
    x->q = xaligned(sizeof(float) * B * QD);
    x->att = xaligned(sizeof(float) * B * QD);
    x->k = xaligned(sizeof(float) * B * KD);
    x->v = xaligned(sizeof(float) * B * KD);
    x->gate = xaligned(sizeof(float) * B * I);
    x->up = xaligned(sizeof(float) * B * I);
    x->pos = xmalloc(sizeof(int) * B);
    *out = x;
    return 0;
}

void mctx_free(model_ctx *x) {
    if (!x) return;
    cuda_ctx_free(x->cu);
    kv_free(x->kv);
    free(x->x);
    free(x->xb);
    free(x->q);
    free(x->att);
    free(x->k);
    free(x->v);
    free(x->gate);
    free(x->up);
    free(x->pos);
    free(x->logit_scratch);
    free(x);
}

const model *mctx_model(const model_ctx *x) { return x->m; }
int mctx_len(const model_ctx *x) { return x->cu ? cuda_ctx_len(x->cu) : kv_len(x->kv); }
int mctx_capacity(const model_ctx *x) { return x->cu ? cuda_ctx_capacity(x->cu) : kv_capacity(x->kv); }
void mctx_truncate(model_ctx *x, int len) {
    if (x->cu) cuda_ctx_truncate(x->cu, len);
    else kv_truncate(x->kv, len);
}

/* ---- forward ------------------------------------------------------------ */

static void tap_copy(const model_batch *b, const float *x, int layer, int row0, int M, int H) {
    for (int t = 0; t < b->n_taps; t++) {
        if (b->tap_layers[t] != layer) continue;
        float *dst = b->taps + ((size_t)t * (size_t)b->n + (size_t)row0) * (size_t)H;
        memcpy(dst, x, sizeof(float) * (size_t)M * (size_t)H);
    }
}

/* One chunk of at most max_batch rows: rows [row0, row0+M) of the batch. */
static void forward_chunk(model_ctx *x, const model_batch *b, int row0, int M, int *next_logit) {
    const model *m = x->m;
    const model_config *c = &m->cfg;
    const int H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    const int nh = c->n_heads, nkv = c->n_kv_heads;
    const float eps = c->rms_norm_eps, scale = 1.0f / sqrtf((float)hd);
    const int n_past = kv_len(x->kv);
    tpool *tp = x->tp;

    for (int i = 0; i < M; i++) x->pos[i] = b->pos ? b->pos[row0 + i] : n_past + i;
    op_embed(x->x, m->embed, b->tokens + row0, M);
    tap_copy(b, x->x, -1, row0, M, H);

    for (int l = 0; l < c->n_layers; l++) {
        const layer_w *L = &m->layers[l];
        /* attention block */
        op_rmsnorm(x->xb, x->x, L->attn_norm, M, H, eps);
        op_matmul(tp, x->q, x->xb, M, L->wq, L->bq);
        op_matmul(tp, x->k, x->xb, M, L->wk, L->bk);
        op_matmul(tp, x->v, x->xb, M, L->wv, L->bv);
        if (L->q_norm) {
            op_rmsnorm(x->q, x->q, L->q_norm, M * nh, hd, eps);
            op_rmsnorm(x->k, x->k, L->k_norm, M * nkv, hd, eps);
        }
        op_rope(x->q, M, nh, hd, x->pos, m->inv_freq);
        op_rope(x->k, M, nkv, hd, x->pos, m->inv_freq);
        kv_store(x->kv, l, x->k, x->v, M);
        op_attention(tp, x->att, x->q, M, nh, nkv, hd, kv_k(x->kv, l), kv_v(x->kv, l), kv_capacity(x->kv),
                     n_past, scale);
        op_matmul(tp, x->xb, x->att, M, L->wo, L->bo);
        op_add(x->x, x->xb, M * H);
        /* MLP block */
        op_rmsnorm(x->xb, x->x, L->mlp_norm, M, H, eps);
        op_matmul(tp, x->gate, x->xb, M, L->wg, NULL);
        op_matmul(tp, x->up, x->xb, M, L->wu, NULL);
        op_swiglu(x->gate, x->gate, x->up, M * I);
        op_matmul(tp, x->xb, x->gate, M, L->wd, NULL);
        op_add(x->x, x->xb, M * H);
        tap_copy(b, x->x, l, row0, M, H);
    }
    kv_commit(x->kv, M);

    /* logits for the requested rows of this chunk: gather, norm, LM head */
    int n_sel = 0, first = *next_logit;
    while (*next_logit < b->n_logits) {
        int r = b->logit_rows ? b->logit_rows[*next_logit] : b->n - b->n_logits + *next_logit;
        if (r >= row0 + M) break;
        memcpy(x->xb + (size_t)n_sel * (size_t)H, x->x + (size_t)(r - row0) * (size_t)H, sizeof(float) * (size_t)H);
        n_sel++;
        (*next_logit)++;
    }
    if (n_sel) {
        op_rmsnorm(x->xb, x->xb, m->final_norm, n_sel, H, eps);
        op_matmul(tp, b->logits + (size_t)first * (size_t)c->vocab_size, x->xb, n_sel, m->lm_head, NULL);
    }
}

int mctx_chain_ok(const model_ctx *x) { return x->cu && cuda_chain_ok(x->cu); }
int mctx_chain_start(model_ctx *x, int id, char *err, size_t errlen) {
    if (!mctx_chain_ok(x)) return ds_err(err, errlen, "chained decoding runs on a GPU only");
    if (id < 0 || id >= x->m->cfg.vocab_size)
        return ds_err(err, errlen, "token id %d is outside the vocabulary (0..%d)", id, x->m->cfg.vocab_size - 1);
    return cuda_chain_start(x->cu, id, err, errlen);
}
int mctx_chain_next(model_ctx *x, int more, int *id, char *err, size_t errlen) {
    if (!mctx_chain_ok(x)) return ds_err(err, errlen, "chained decoding runs on a GPU only");
    return cuda_chain_next(x->cu, more, id, err, errlen);
}
void mctx_chain_end(model_ctx *x) {
    if (x->cu) cuda_chain_end(x->cu);
}

const float *mctx_device_taps(model_ctx *x, int n, int *rows) {
    if (rows) *rows = 0;
    return x->cu ? cuda_ctx_taps(x->cu, n, rows) : NULL;
}

int model_forward(model_ctx *x, const model_batch *b, char *err, size_t errlen) {
    const model_config *c = &x->m->cfg;
    if (b->n <= 0) return ds_err(err, errlen, "forward: empty batch");
    if (b->n_logits < 0 || b->n_logits > b->n)
        return ds_err(err, errlen, "forward: %d logit rows requested for a batch of %d", b->n_logits, b->n);
    if (b->n_logits && !b->logits && !b->argmax && !b->smp) return ds_err(err, errlen, "forward: no logits buffer");
    if (b->smp && sampler_is_greedy(b->smp))
        return ds_err(err, errlen, "forward: a greedy sampler takes argmax, not sampling");
    if (b->smp && (!b->n_logits || b->n_logits > MODEL_SAMPLE_ROWS || b->logits || b->argmax || b->logit_rows ||
                   !b->u || !b->sampled || (b->n_logits > 1 && !b->draft)))
        return ds_err(err, errlen, "forward: sampling takes the last 1..%d rows with uniforms, drafts and an output, "
                      "and no logits or argmax", MODEL_SAMPLE_ROWS);
    if (b->draft_q && (!x->cu || !b->smp || !cuda_model_samples(x->m->cu)))
        return ds_err(err, errlen, "forward: drafts' distributions in device memory need a GPU target that samples "
                      "the rows there");
    if (mctx_len(x) + b->n > mctx_capacity(x))
        return ds_err(err, errlen, "context window full: %d cached + %d new positions exceed the %d-position window",
                      mctx_len(x), b->n, mctx_capacity(x));
    for (int i = 0; i < b->n; i++) {
        if (b->tokens[i] < 0 || b->tokens[i] >= c->vocab_size)
            return ds_err(err, errlen, "token id %d at row %d is outside the vocabulary (0..%d)", b->tokens[i], i,
                          c->vocab_size - 1);
        if (b->pos && b->pos[i] < 0) return ds_err(err, errlen, "negative position at row %d", i);
    }
    for (int i = 0; b->logit_rows && i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n || (i && b->logit_rows[i] <= b->logit_rows[i - 1]))
            return ds_err(err, errlen, "forward: logit rows must be ascending indices into the batch");
    for (int t = 0; t < b->n_taps; t++)
        if (b->tap_layers[t] < -1 || b->tap_layers[t] >= c->n_layers)
            return ds_err(err, errlen, "forward: tap layer %d outside -1..%d", b->tap_layers[t], c->n_layers - 1);
    if (b->n_taps && !b->taps && !b->taps_on_device) return ds_err(err, errlen, "forward: no taps buffer");
    if (b->n_taps && b->taps_on_device && (!x->cu || b->n_taps > MODEL_DEVICE_TAPS))
        return ds_err(err, errlen, "forward: taps stay on the device only on a GPU, for at most %d layers",
                      MODEL_DEVICE_TAPS);
    if (x->cu) return cuda_forward(x->cu, b, err, errlen);
    model_batch bb = *b;
    if (b->n_logits && !b->logits) { /* argmax or samples only: the rows go to scratch */
        size_t need = (size_t)b->n_logits * (size_t)c->vocab_size;
        if (x->n_logit_scratch < need) {
            free(x->logit_scratch);
            x->logit_scratch = xmalloc(sizeof(float) * need);
            x->n_logit_scratch = need;
        }
        bb.logits = x->logit_scratch;
    }
    int next_logit = 0;
    for (int row0 = 0; row0 < b->n; row0 += x->max_batch) {
        int M = b->n - row0 < x->max_batch ? b->n - row0 : x->max_batch;
        forward_chunk(x, &bb, row0, M, &next_logit);
    }
    for (int i = 0; b->argmax && i < b->n_logits; i++)
        b->argmax[i] = op_argmax(bb.logits + (size_t)i * c->vocab_size, c->vocab_size);
    if (b->smp) sampler_rows(b->smp, bb.logits, b->n_logits, b->draft, b->u, b->sampled, 0);
    return 0;
}
