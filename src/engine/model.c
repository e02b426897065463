/* model: binding a checkpoint's weights into a description (desc.h), the
 * checks every forward gets, and dispatch to the model's backend. See
 * model.h. */
#include "engine/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/gguf_model.h"
#include "engine/kv.h"
#include "engine/memfit.h"
#include "engine/qspec.h"
#include "engine/safetensors.h"
#include "engine/sampler.h"
#include "engine/tpar.h"
#include "engine/wbind.h"
#include "base/util.h"

struct model {
    model_config cfg;
    qspec q;               /* config.json's declared quantization */
    st_set *st;
    const tensor *embed;   /* [V][H] */
    const tensor *lm_head; /* [V][H]; the embedding when tied */
    float *final_norm;     /* [H] */
    wlayer *layers;        /* [n_layers] */
    wmoe *moes;            /* [n_layers]: the experts of MLP_MOE layers (zeros elsewhere) */
    float *inv_freq;       /* [hd/2] */
    float *owned;          /* one block holding every f32 copy above */
    size_t weight_bytes;
    size_t mapped_bytes;   /* weights mapped from files (0: read) */
    model_desc desc;       /* the above as the backend reads it */
    const backend *be;
    void *bm;              /* the backend's copy */
    backend_caps caps;
    char device[256];
};

struct model_ctx {
    const model *m;
    void *bc; /* the backend's context: KV cache and scratch */
};

/* ---- loading ----------------------------------------------------------- */

/* The bytes of a weight matrix, with an MLX matrix's scales and biases. */
static size_t weight_stream_bytes(const tensor *t) {
    size_t n = t->nbytes;
    if (t->dtype == DT_MLX)
        n += 2 * (size_t)t->shape[0] * (size_t)(t->shape[1] / t->q.group) * dtype_size(t->q.sdtype);
    return n;
}

static int open_backend(model *m, const model_load_opts *opt, char *err, size_t errlen) {
    const char *d = opt && opt->device ? opt->device : getenv("DSPARK_DEVICE");
    int index;
    if (!(m->be = backend_for(d, &index, err, errlen))) return -1;
    const int ranks = opt && opt->tensor_parallel ? opt->tensor_parallel : 1;
    if (ranks < 1 || ranks > TPAR_MAX_RANKS)
        return ds_err(err, errlen, "--tensor-parallel %d: expected 1 to %d ranks", ranks, TPAR_MAX_RANKS);
    if (ranks > 1 && !m->be->tensor_parallel)
        return ds_err(err, errlen,
                      "--tensor-parallel %d: the %s backend does not split a model over devices yet (multi-GPU "
                      "tensor parallelism is not built); --device cpu runs the split as an emulation",
                      ranks, m->be->name);
    if (ranks > 1) m->be = m->be->tensor_parallel();
    m->desc = (model_desc){.cfg = &m->cfg,
                           .embed = m->embed,
                           .lm_head = m->lm_head,
                           .final_norm = m->final_norm,
                           .inv_freq = m->inv_freq,
                           .layers = m->layers,
                           .weights = m->st,
                           .row_major = opt && opt->row_major,
                           .kv_bits = opt && opt->kv_bits ? opt->kv_bits : 32,
                           .tp_ranks = ranks};
    if (m->be->model_create(&m->bm, &m->desc, index, err, errlen) != 0) return -1;
    m->be->model_caps(m->bm, &m->caps);
    if (!strcmp(m->be->name, "cpu")) {
        snprintf(m->device, sizeof m->device, "cpu");
    } else {
        char desc[200];
        m->be->describe(index, desc, sizeof desc);
        snprintf(m->device, sizeof m->device, "%s:%d: %s", m->be->name, index, desc);
    }
    return 0;
}

int model_path_is_gguf(const char *path) {
    size_t n = strlen(path);
    return n > 5 && strcmp(path + n - 5, ".gguf") == 0;
}

static void close_gguf_model(void *p) { gguf_model_close(p); }

/* A GGUF file as a checkpoint: its metadata as config.json and
 * generation_config.json texts through the same parser, its tensors under
 * HF names in the weight set, and Llama-3's RoPE factors when it has them
 * (*rope_freqs, valid while the set is open). */
static int open_gguf(model *m, const char *path, st_load mode, const float **rope_freqs, char *err, size_t errlen) {
    gguf_model *g;
    if (gguf_model_open(&g, path, mode == ST_LOAD_READ, err, errlen) != 0) return -1;
    char ctx[4200];
    snprintf(ctx, sizeof ctx, "%s (metadata)", path);
    const char *cj = gguf_model_config_json(g), *gj = gguf_model_generation_json(g);
    if (config_parse(&m->cfg, cj, strlen(cj), ctx, err, errlen) != 0 ||
        (gj && config_parse_generation(&m->cfg, gj, strlen(gj), ctx, err, errlen) != 0)) {
        gguf_model_close(g);
        return -1;
    }
    /* llama.cpp's converter stores Gemma's norms with their + 1 added */
    if (m->cfg.arch == ARCH_GEMMA3) m->cfg.norm_plus_one = 0;
    int nf = 0;
    *rope_freqs = gguf_model_rope_freqs(g, &nf);
    if (*rope_freqs && nf != m->cfg.head_dim / 2) {
        ds_err(err, errlen, "%s: rope_freqs.weight has %d factors; expected head_dim / 2 = %d", path, nf,
               m->cfg.head_dim / 2);
        gguf_model_close(g);
        return -1;
    }
    int n = gguf_model_tensor_count(g);
    const tensor **t = xmalloc(sizeof *t * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) t[i] = gguf_model_tensor_at(g, i);
    int rc = st_set_wrap(&m->st, t, n, g, close_gguf_model, path, err, errlen);
    free(t);
    return rc;
}

int model_load(model **out, const char *dir, const model_load_opts *opt, char *err, size_t errlen) {
    *out = NULL;
    model *m = xcalloc(1, sizeof *m);
    st_load mode = opt && opt->use_mmap ? ST_LOAD_MMAP : ST_LOAD_READ;
    const float *rope_freqs = NULL;
    if (model_path_is_gguf(dir)) {
        if (open_gguf(m, dir, mode, &rope_freqs, err, errlen) != 0) goto fail;
    } else {
        if (config_load(&m->cfg, dir, err, errlen) != 0) goto fail;
        if (qspec_load(&m->q, dir, err, errlen) != 0) goto fail;
        if (st_set_open_mode(&m->st, dir, mode, err, errlen) != 0) goto fail;
    }
    const model_config *c = &m->cfg;
    int64_t H = c->hidden_size, V = c->vocab_size, hd = c->head_dim;
    char what[64];
    snprintf(what, sizeof what, "%s model", config_arch_name(c->arch));
    wbind b;
    wbind_init(&b, m->st, &m->q, what, err, errlen);
    char name[256];
    int ok = 1;
    const tensor *tn[4] = {0};

    /* the text model's tensors: model.* (a gemma3 checkpoint: under
       language_model.model.* as transformers 4 saved them, or
       model.language_model.*; its vision tower is not read) */
    const char *pfx = "model.", *head = "lm_head.weight";
    if (c->arch == ARCH_GEMMA3 && !st_set_find(m->st, "model.embed_tokens.weight")) {
        if (st_set_find(m->st, "language_model.model.embed_tokens.weight"))
            pfx = "language_model.model.", head = "language_model.lm_head.weight";
        else if (st_set_find(m->st, "model.language_model.embed_tokens.weight"))
            pfx = "model.language_model.";
        b.skip[b.n_skip++] = "vision_tower.";
        b.skip[b.n_skip++] = "multi_modal_projector.";
        b.skip[b.n_skip++] = "model.vision_tower.";
        b.skip[b.n_skip++] = "model.multi_modal_projector.";
    }
    snprintf(name, sizeof name, "%sembed_tokens.weight", pfx);
    m->embed = wbind_get(&b, name, V, H);
    ok = ok && m->embed;
    snprintf(name, sizeof name, "%snorm.weight", pfx);
    tn[0] = ok ? wbind_get(&b, name, H, 0) : NULL;
    ok = ok && tn[0];
    if (ok && !c->tie_word_embeddings) {
        m->lm_head = wbind_get(&b, head, V, H);
        ok = m->lm_head != NULL;
    } else if (ok) {
        /* Tied: some exports still include a copy; accept it, use embed. */
        if (st_set_find(m->st, head)) wbind_get(&b, head, V, H);
        m->lm_head = m->embed;
    }
    /* f32 copies of norms and biases live in one block (and the RoPE
       frequencies: the network's, and the sliding layers' own) */
    m->owned = xaligned(sizeof(float) *
                        (wbind_layer_floats(c) * (size_t)c->n_layers + (size_t)H + 2 * (size_t)hd));
    float *pool = m->owned;
    if (ok) m->final_norm = wbind_f32(&pool, tn[0]);
    if (ok && c->norm_plus_one)
        for (int64_t i = 0; i < H; i++) m->final_norm[i] = 1.0f + m->final_norm[i];
    m->layers = xcalloc((size_t)c->n_layers, sizeof(wlayer));
    if (c->moe_experts > 0) m->moes = xcalloc((size_t)c->n_layers, sizeof(wmoe));
    for (int l = 0; ok && l < c->n_layers; l++) {
        snprintf(name, sizeof name, "%slayers.%d.", pfx, l);
        ok = wbind_layer(&b, name, c, l, &pool, &m->layers[l], m->moes ? &m->moes[l] : NULL) == 0;
    }
    if (ok && wbind_check_leftovers(&b) != 0) ok = 0;
    wbind_done(&b);
    if (!ok) goto fail;

    m->inv_freq = pool;
    config_rope_inv_freq(c, m->inv_freq);
    if (rope_freqs)
        for (int i = 0; i < c->head_dim / 2; i++) m->inv_freq[i] /= rope_freqs[i];
    float *local = pool + hd;
    if (config_rope_inv_freq_local(c, local))
        for (int l = 0; l < c->n_layers; l++)
            if (c->sliding[l]) m->layers[l].inv_freq = local;
    /* the bytes a decode step streams: every layer matrix and the LM head
       (the embedding is only gathered) */
    for (int l = 0; l < c->n_layers; l++) {
        const wlayer *L = &m->layers[l];
        const tensor *w[7] = {L->wq, L->wk, L->wv, L->wo, L->wg, L->wu, L->wd};
        for (int i = 0; i < 7; i++)
            if (w[i]) m->weight_bytes += weight_stream_bytes(w[i]);
        if (L->moe) /* the router and a row's top_k experts (the experts are alike) */
            m->weight_bytes += weight_stream_bytes(L->moe->router) +
                               (size_t)L->moe->top_k * (weight_stream_bytes(L->moe->gate[0]) +
                                                        weight_stream_bytes(L->moe->up[0]) +
                                                        weight_stream_bytes(L->moe->down[0]));
    }
    m->weight_bytes += weight_stream_bytes(m->lm_head);
    if (mode == ST_LOAD_MMAP)
        for (int i = 0; i < st_set_count(m->st); i++) m->mapped_bytes += st_set_get(m->st, i)->nbytes;
    if (open_backend(m, opt, err, errlen) != 0) goto fail;
    *out = m;
    return 0;
fail:
    model_free(m);
    return -1;
}

void model_free(model *m) {
    if (!m) return;
    if (m->bm) m->be->model_free(m->bm);
    st_set_close(m->st);
    qspec_free(&m->q);
    if (m->moes)
        for (int l = 0; l < m->cfg.n_layers; l++) wbind_moe_free(&m->moes[l]);
    free(m->moes);
    free(m->layers);
    free(m->owned);
    free(m);
}

const model_config *model_cfg(const model *m) { return &m->cfg; }
const char *model_device(const model *m) { return m->device; }
int model_rows8(const model *m) { return m->cfg.n_layers > 0 && m->layers[0].wq->rows8; }
size_t model_weight_bytes(const model *m) { return m->weight_bytes; }
int model_kv_bits(const model *m) { return m->desc.kv_bits; }
int model_kv_low_bits(const model *m) { return m->caps.kv_low_bits; }
size_t model_mapped_bytes(const model *m) { return !strcmp(m->be->name, "cpu") ? m->mapped_bytes : 0; }
int model_tensor_parallel(const model *m) { return m->desc.tp_ranks > 1 ? m->desc.tp_ranks : 1; }

size_t model_ctx_bytes(const model *m, int n_ctx, int max_batch, int kv_bits) {
    const model_config *c = &m->cfg;
    size_t b = m->be->ctx_bytes(m->bm, n_ctx, max_batch);
    if (kv_bits && kv_bits != m->desc.kv_bits) { /* the same context with the cache in another storage */
        /* the KV heads the contexts store: one a rank where a split replicates them (tpar.h) */
        const int kvh = model_tensor_parallel(m) > c->n_kv_heads ? model_tensor_parallel(m) : c->n_kv_heads;
        int *win = xcalloc((size_t)c->n_layers, sizeof(int));
        for (int l = 0; l < c->n_layers; l++) win[l] = wlayer_window(&m->desc.layers[l]);
        const int have_bits = m->desc.kv_bits ? m->desc.kv_bits : 32;
        size_t have = kv_bytes_resident(c->n_layers, kvh, c->head_dim, have_bits, win, n_ctx);
        size_t want = kv_bytes_resident(c->n_layers, kvh, c->head_dim, kv_bits, win, n_ctx);
        free(win);
        b = b - have + want;
    }
    return b;
}

int model_device_mem(const model *m, size_t *free_b, size_t *total_b) {
    if (!m->be->mem_avail) return 0;
    return m->be->mem_avail(m->bm, free_b, total_b) == 0;
}
const tensor *model_embed(const model *m) { return m->embed; }
const backend *model_backend(const model *m) { return m->be; }
void *model_backend_model(const model *m) { return m->bm; }
const backend_caps *model_caps(const model *m) { return &m->caps; }
int model_samples_rows(const model *m) { return m->be->samples_rows(m->bm); }
const tensor *model_lm_head(const model *m) { return m->lm_head; }

int model_default_context(const model *m) {
    memfit_report r;
    char err[256];
    if (memfit_model(m, 1, 64, 0, NULL, &r, err, sizeof err) != 0) /* no /proc: the model's own window */
        return m->cfg.max_position_embeddings;
    return r.out.window >= MEMFIT_MIN_WINDOW ? r.out.window : MEMFIT_MIN_WINDOW;
}

/* ---- context ----------------------------------------------------------- */

int mctx_create(model_ctx **out, const model *m, int n_ctx, int max_batch, tpool *tp, char *err,
                size_t errlen) {
    *out = NULL;
    if (n_ctx <= 0) n_ctx = model_default_context(m);
    if (max_batch <= 0) max_batch = 64;
    model_ctx *x = xcalloc(1, sizeof *x);
    x->m = m;
    if (m->be->ctx_create(&x->bc, m->bm, n_ctx, max_batch, tp, err, errlen) != 0) {
        free(x);
        return -1;
    }
    *out = x;
    return 0;
}

void mctx_free(model_ctx *x) {
    if (!x) return;
    x->m->be->ctx_free(x->bc);
    free(x);
}

const model *mctx_model(const model_ctx *x) { return x->m; }
int mctx_len(const model_ctx *x) { return x->m->be->ctx_len(x->bc); }
int mctx_capacity(const model_ctx *x) { return x->m->be->ctx_capacity(x->bc); }
void mctx_truncate(model_ctx *x, int len) { x->m->be->ctx_truncate(x->bc, len); }
size_t mctx_release(model_ctx *x) {
    if (x->m->be->ctx_release) return x->m->be->ctx_release(x->bc);
    x->m->be->ctx_truncate(x->bc, 0);
    return 0;
}

int mctx_copy_prefix(model_ctx *dst, const model_ctx *src, int n, char *err, size_t errlen) {
    if (dst == src || dst->m != src->m) return ds_err(err, errlen, "cache copy: two contexts of one model are needed");
    if (n < 0 || n > mctx_len(src) || n > mctx_capacity(dst))
        return ds_err(err, errlen, "cache copy: %d positions (the source holds %d, the destination takes %d)", n,
                      mctx_len(src), mctx_capacity(dst));
    if (!dst->m->be->ctx_copy) return ds_err(err, errlen, "the %s backend does not copy caches", dst->m->be->name);
    return dst->m->be->ctx_copy(dst->bc, src->bc, n, err, errlen);
}

size_t mctx_pos_bytes(const model_ctx *x) {
    const backend *be = x->m->be;
    return be->ctx_pos_bytes && be->ctx_save && be->ctx_load ? be->ctx_pos_bytes(x->m->bm) : 0;
}

int mctx_kept_from(const model_ctx *x) { return x->m->be->ctx_kept_from ? x->m->be->ctx_kept_from(x->bc) : 0; }

int mctx_save_rows(model_ctx *x, int pos0, int n, void *host, char *err, size_t errlen) {
    if (!mctx_pos_bytes(x)) return ds_err(err, errlen, "the %s backend does not save cache rows", x->m->be->name);
    if (pos0 < 0 || n < 0 || pos0 + n > mctx_len(x))
        return ds_err(err, errlen, "cache save: positions %d..%d (the context holds %d)", pos0, pos0 + n, mctx_len(x));
    return x->m->be->ctx_save(x->bc, pos0, n, host, err, errlen);
}

int mctx_load_rows(model_ctx *x, int pos0, int n, const void *host, char *err, size_t errlen) {
    if (!mctx_pos_bytes(x)) return ds_err(err, errlen, "the %s backend does not load cache rows", x->m->be->name);
    if (pos0 < 0 || n < 0 || pos0 > mctx_len(x) || n > mctx_capacity(x) - pos0)
        return ds_err(err, errlen, "cache load: positions %d..%d (the context holds %d, takes %d)", pos0, pos0 + n,
                      mctx_len(x), mctx_capacity(x));
    return x->m->be->ctx_load(x->bc, pos0, n, host, err, errlen);
}

int model_get_kv_pages(const model *m, model_kv_pages *st) {
    memset(st, 0, sizeof *st);
    if (!m->be->kv_pages) return -1;
    st->page_tokens = m->be->block_rows;
    m->be->kv_pages(m->bm, &st->page_bytes, &st->held, &st->shared);
    return 0;
}

int64_t model_kv_pages_for(const model *m, int n) {
    model_kv_pages st;
    if (model_get_kv_pages(m, &st) != 0 || !st.page_bytes) return -1;
    /* a context's bytes less its scratch (which does not grow with n) */
    const size_t b = m->be->ctx_bytes(m->bm, n, 1) - m->be->ctx_bytes(m->bm, 0, 1);
    return (int64_t)(b / st.page_bytes);
}

struct mblock {
    const model *m; /* the model whose contexts take it */
    void *h;        /* the backend's handle */
};

int mctx_block_rows(const model_ctx *x) {
    const backend *be = x->m->be;
    return be->ctx_block_take && be->ctx_block_put && be->block_drop ? be->block_rows : 0;
}

mblock *mctx_block_take(model_ctx *x, int b, char *err, size_t errlen) {
    const int r = mctx_block_rows(x);
    if (!r) {
        ds_err(err, errlen, "the %s backend does not share cache blocks", x->m->be->name);
        return NULL;
    }
    if (b < 0 || (size_t)(b + 1) * (size_t)r > (size_t)mctx_len(x) || b * r < mctx_kept_from(x)) {
        ds_err(err, errlen, "cache block %d: positions %d..%d (the context holds %d..%d)", b, b * r, (b + 1) * r,
               mctx_kept_from(x), mctx_len(x));
        return NULL;
    }
    void *h = x->m->be->ctx_block_take(x->bc, b);
    if (!h) {
        ds_err(err, errlen, "cache block %d: the %s backend cannot share it", b, x->m->be->name);
        return NULL;
    }
    mblock *k = xmalloc(sizeof *k);
    k->m = x->m;
    k->h = h;
    return k;
}

int mctx_block_put(model_ctx *x, int b, const mblock *k, char *err, size_t errlen) {
    const int r = mctx_block_rows(x);
    if (!r) return ds_err(err, errlen, "the %s backend does not share cache blocks", x->m->be->name);
    if (k->m != x->m) return ds_err(err, errlen, "cache block %d: a block of another model", b);
    if (b < 0 || (size_t)b * (size_t)r > (size_t)mctx_len(x) || (size_t)(b + 1) * (size_t)r > (size_t)mctx_capacity(x))
        return ds_err(err, errlen, "cache block %d: positions %d..%d (the context holds %d, takes %d)", b, b * r,
                      (b + 1) * r, mctx_len(x), mctx_capacity(x));
    return x->m->be->ctx_block_put(x->bc, b, k->h, err, errlen);
}

void mblock_free(mblock *k) {
    if (!k) return;
    k->m->be->block_drop(k->h);
    free(k);
}

/* ---- forward ------------------------------------------------------------ */

int mctx_chain_ok(const model_ctx *x) { return x->m->caps.chain && x->m->be->chain_ok(x->bc); }
int mctx_chain_start(model_ctx *x, int id, char *err, size_t errlen) {
    if (!mctx_chain_ok(x)) return ds_err(err, errlen, "chained decoding runs on a GPU only");
    if (id < 0 || id >= x->m->cfg.vocab_size)
        return ds_err(err, errlen, "token id %d is outside the vocabulary (0..%d)", id, x->m->cfg.vocab_size - 1);
    return x->m->be->chain_start(x->bc, id, err, errlen);
}
int mctx_chain_next(model_ctx *x, int more, int *id, char *err, size_t errlen) {
    if (!mctx_chain_ok(x)) return ds_err(err, errlen, "chained decoding runs on a GPU only");
    return x->m->be->chain_next(x->bc, more, id, err, errlen);
}
void mctx_chain_end(model_ctx *x) {
    if (x->m->caps.chain) x->m->be->chain_end(x->bc);
}

const float *mctx_resident_taps(model_ctx *x, int n, int *rows) {
    if (rows) *rows = 0;
    return x->m->caps.resident_taps ? x->m->be->resident_taps(x->bc, n, rows) : NULL;
}

static int batch_check(model_ctx *x, const model_batch *b, char *err, size_t errlen) {
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
    if (b->draft_q && (!x->m->caps.drafter_resident || !b->smp || !model_samples_rows(x->m)))
        return ds_err(err, errlen, "forward: drafts' distributions in a backend's memory need a target there that "
                      "samples the rows");
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
    if (b->n_taps && !b->taps && !b->taps_resident) return ds_err(err, errlen, "forward: no taps buffer");
    if (b->n_taps && b->taps_resident && b->n_taps > x->m->caps.resident_taps)
        return ds_err(err, errlen, "forward: the %s backend keeps at most %d layers' taps in its memory",
                      x->m->be->name, x->m->caps.resident_taps);
    return 0;
}

int model_forward(model_ctx *x, const model_batch *b, char *err, size_t errlen) {
    if (batch_check(x, b, err, errlen) != 0) return -1;
    return x->m->be->forward(x->bc, b, err, errlen);
}

int model_forward_multi(model_ctx *const *cs, const model_batch *bs, int n, char *err, size_t errlen) {
    if (n <= 0) return ds_err(err, errlen, "forward: no sequences");
    if (n > MODEL_MULTI_MAX) return ds_err(err, errlen, "forward: %d sequences, at most %d", n, MODEL_MULTI_MAX);
    for (int i = 0; i < n; i++) {
        if (cs[i]->m != cs[0]->m) return ds_err(err, errlen, "forward: sequence %d belongs to another model", i);
        for (int j = 0; j < i; j++)
            if (cs[j] == cs[i]) return ds_err(err, errlen, "forward: sequences %d and %d are one context", j, i);
        char e[400];
        if (batch_check(cs[i], &bs[i], e, sizeof e) != 0) return ds_err(err, errlen, "sequence %d: %s", i, e);
    }
    const backend *be = cs[0]->m->be;
    if (n == 1 || !be->forward_multi) {
        /* the definition: each sequence's forward in turn */
        for (int i = 0; i < n; i++)
            if (be->forward(cs[i]->bc, &bs[i], err, errlen) != 0) return -1;
        return 0;
    }
    void *bcs[MODEL_MULTI_MAX];
    for (int i = 0; i < n; i++) bcs[i] = cs[i]->bc;
    return be->forward_multi(bcs, bs, n, err, errlen);
}
