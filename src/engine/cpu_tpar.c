/* cpu_tpar: tensor parallelism emulated on the CPU (--tensor-parallel N
 * with --device cpu). A test vehicle for the sharding (tpar.h) and the
 * collectives (coll.h), not a speedup: the N ranks run one after another
 * in one process, each over its own slices and KV cache with the CPU
 * backend's own layer pieces (cpu_internal.h) and the whole thread pool,
 * so a forward costs about what the whole model's does, plus N times the
 * norms and adds that every rank repeats.
 *
 * Each rank keeps its own residual stream, as a rank on its own device
 * would: every rank computes the norms from the same reduced rows (the
 * same bits), its q/k/v, attention and o over its heads, and its
 * gate/up/down over its MLP columns; the o and down partials go through
 * coll_all_reduce_sum (rank order), the embedding's masked gathers through
 * the same all-reduce (exact), the LM head's logits shards through
 * coll_all_gather. The taps (the drafters' features) are rank 0's rows.
 *
 * This file's table is backend_cpu's with the targets' functions replaced
 * (cpu_tpar_backend): the drafters run as on the CPU, on "rank 0", fed the
 * taps. It has no forward_multi, so model_forward_multi runs the
 * sequences in turn (its definition). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "engine/coll.h"
#include "engine/cpu_internal.h"
#include "engine/kv.h"
#include "engine/model.h"
#include "engine/ops.h"
#include "engine/quant.h"
#include "engine/tpar.h"

/* logits rows the LM head's shards take at a time */
#define TP_HEAD_ROWS 32

typedef struct {
    model_desc d;
    tpar_model *tm;
    coll *cm;
    int ranks;
    int quant;   /* a layer matmul is quantized: the prefill family runs */
    int *window; /* [n_layers]: each layer's sliding window (kv_set_windows) */
} tp_model;

typedef struct {
    const tp_model *m;
    tpool *tp;
    int max_batch;
    kv_cache **kv;    /* [ranks]: each rank's KV heads */
    cpu_scratch *s;   /* [ranks]: max_batch rows of the rank's shapes */
    float **lg;       /* [ranks]: TP_HEAD_ROWS rows of the rank's logits shard */
    float *logit_scratch; /* logits of argmax-only forwards */
    size_t n_logit_scratch;
} tp_ctx;

static int layer_quant(const wlayer *L) {
    const tensor *w[] = {L->wq, L->wk, L->wv, L->wo, L->wg, L->wu, L->wd};
    int q = 0;
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) q |= w[i] && dtype_is_quant(w[i]->dtype);
    for (int e = 0; L->moe && e < L->moe->n_experts; e++)
        q |= dtype_is_quant(L->moe->gate[e]->dtype) | dtype_is_quant(L->moe->up[e]->dtype) |
             dtype_is_quant(L->moe->down[e]->dtype);
    return q;
}

static void tp_model_free(void *bm) {
    tp_model *m = bm;
    if (!m) return;
    tpar_model_free(m->tm);
    coll_free(m->cm);
    free(m->window);
    free(m);
}

static int tp_model_create(void **out, const model_desc *d, int device, char *err, size_t errlen) {
    (void)device;
    *out = NULL;
    if (cpu_check_desc(d, err, errlen) != 0) return -1;
    tp_model *m = xcalloc(1, sizeof *m);
    m->d = *d;
    m->ranks = d->tp_ranks;
    /* the whole matrices take the CPU's layout first: row slices of them
       are then views, and copies keep it where their shape allows */
    cpu_layout(&m->d);
    if (tpar_model_make(&m->tm, &m->d, m->ranks, err, errlen) != 0) {
        free(m);
        return -1;
    }
    m->cm = coll_cpu_create(m->ranks);
    const model_config *c = d->cfg;
    m->window = xcalloc((size_t)c->n_layers, sizeof(int));
    for (int l = 0; l < c->n_layers; l++) {
        m->window[l] = wlayer_window(&d->layers[l]);
        m->quant |= layer_quant(&d->layers[l]);
    }
    *out = m;
    return 0;
}

static void tp_model_caps(const void *bm, backend_caps *caps) {
    const tp_model *m = bm;
    *caps = (backend_caps){.kv_low_bits = 1, .group_rows = m->quant ? BACKEND_GROUP_ROWS : 0};
}

static int kv_bits_of(const tp_model *m) { return m->d.kv_bits ? m->d.kv_bits : 32; }
static int rank_vocab(const tp_model *m, int r) { return m->tm->rank[r].v1 - m->tm->rank[r].v0; }

static void tp_ctx_free(void *bc) {
    tp_ctx *x = bc;
    if (!x) return;
    for (int r = 0; r < x->m->ranks; r++) {
        kv_free(x->kv[r]);
        if (x->s[r].x) cpu_scratch_free(&x->s[r]);
        free(x->lg[r]);
    }
    free(x->kv);
    free(x->s);
    free(x->lg);
    free(x->logit_scratch);
    free(x);
}

static int tp_ctx_create(void **out, void *bm, int n_ctx, int max_batch, tpool *tp, char *err, size_t errlen) {
    *out = NULL;
    const tp_model *m = bm;
    const model_config *c = m->d.cfg;
    const int R = m->ranks;
    tp_ctx *x = xcalloc(1, sizeof *x);
    x->m = m;
    x->tp = tp;
    x->max_batch = max_batch;
    x->kv = xcalloc((size_t)R, sizeof *x->kv);
    x->s = xcalloc((size_t)R, sizeof *x->s);
    x->lg = xcalloc((size_t)R, sizeof *x->lg);
    for (int r = 0; r < R; r++) {
        if (kv_create(&x->kv[r], NULL, c->n_layers, m->tm->plan.kv_heads, c->head_dim, n_ctx, kv_bits_of(m), err, errlen) !=
            0) {
            tp_ctx_free(x);
            return -1;
        }
        kv_set_windows(x->kv[r], m->window);
        cpu_scratch_init(&x->s[r], &m->tm->rank[r].cfg, (size_t)max_batch);
        x->lg[r] = xaligned(sizeof(float) * TP_HEAD_ROWS * (size_t)rank_vocab(m, r));
    }
    *out = x;
    return 0;
}

static int tp_ctx_len(const void *bc) { return kv_len(((const tp_ctx *)bc)->kv[0]); }
static int tp_ctx_capacity(const void *bc) { return kv_capacity(((const tp_ctx *)bc)->kv[0]); }
static void tp_ctx_truncate(void *bc, int len) {
    tp_ctx *x = bc;
    for (int r = 0; r < x->m->ranks; r++) kv_truncate(x->kv[r], len);
}

static size_t tp_ctx_bytes(const void *bm, int n_ctx, int max_batch) {
    const tp_model *m = bm;
    const model_config *c = m->d.cfg;
    size_t B = (size_t)(max_batch > 0 ? max_batch : 64), b = 0;
    for (int r = 0; r < m->ranks; r++)
        b += kv_bytes_resident(c->n_layers, m->tm->plan.kv_heads, c->head_dim, kv_bits_of(m), m->window, n_ctx) +
             cpu_scratch_bytes(&m->tm->rank[r].cfg, B) + sizeof(float) * TP_HEAD_ROWS * (size_t)rank_vocab(m, r);
    return b + sizeof(float) * (size_t)MODEL_SAMPLE_ROWS * (size_t)c->vocab_size;
}

static size_t tp_ctx_release(void *bc) {
    tp_ctx *x = bc;
    size_t b = 0;
    for (int r = 0; r < x->m->ranks; r++) b += kv_release(x->kv[r]);
    return b;
}

static int tp_ctx_copy(void *dst, const void *src, int n, char *err, size_t errlen) {
    tp_ctx *d = dst;
    const tp_ctx *s = src;
    for (int r = 0; r < d->m->ranks; r++)
        if (kv_copy_prefix(d->kv[r], s->kv[r], n) != 0) {
            /* the ranks' caches are alike, so only the first can refuse (then nothing changed); past it, the
               ranks would disagree: empty them all (the sequence recomputes) */
            if (r) tp_ctx_truncate(d, 0);
            return ds_err(err, errlen, "cache copy: %d positions do not fit (source holds %d, destination takes %d)", n,
                          kv_len(s->kv[0]), kv_capacity(d->kv[0]));
        }
    return 0;
}

/* one position's rows of one rank; a position's rows in host memory are
   the ranks' in rank order: [rank][n][...] as kv_save_rows lays each out */
static size_t rank_pos_bytes(const tp_model *m) {
    const model_config *c = m->d.cfg;
    return kv_bytes_per_pos(c->n_layers, m->tm->plan.kv_heads, c->head_dim, kv_bits_of(m));
}
static size_t tp_ctx_pos_bytes(const void *bm) {
    const tp_model *m = bm;
    return (size_t)m->ranks * rank_pos_bytes(m);
}

static int tp_ctx_kept_from(const void *bc) {
    const tp_ctx *x = bc;
    int k = 0;
    for (int r = 0; r < x->m->ranks; r++)
        if (kv_kept_from(x->kv[r]) > k) k = kv_kept_from(x->kv[r]);
    return k;
}

static int tp_ctx_save(void *bc, int pos0, int n, void *host, char *err, size_t errlen) {
    tp_ctx *x = bc;
    const size_t part = (size_t)n * rank_pos_bytes(x->m);
    for (int r = 0; r < x->m->ranks; r++)
        if (kv_save_rows(x->kv[r], pos0, n, (char *)host + (size_t)r * part) != 0)
            return ds_err(err, errlen, "cache save: positions %d..%d do not fit (it holds %d, takes %d)", pos0, pos0 + n,
                          kv_len(x->kv[0]), kv_capacity(x->kv[0]));
    return 0;
}

static int tp_ctx_load(void *bc, int pos0, int n, const void *host, char *err, size_t errlen) {
    tp_ctx *x = bc;
    const size_t part = (size_t)n * rank_pos_bytes(x->m);
    for (int r = 0; r < x->m->ranks; r++)
        if (kv_load_rows(x->kv[r], pos0, n, (const char *)host + (size_t)r * part) != 0) {
            if (r) tp_ctx_truncate(x, 0); /* as in tp_ctx_copy */
            return ds_err(err, errlen, "cache load: positions %d..%d do not fit (it holds %d, takes %d)", pos0, pos0 + n,
                          kv_len(x->kv[0]), kv_capacity(x->kv[0]));
        }
    return 0;
}

/* ---- the forward ------------------------------------------------------------ */

/* every rank's buffer of n floats through the all-reduce */
static int reduce(tp_ctx *x, float *const *buf, size_t n, char *err, size_t errlen) {
    return coll_all_reduce_sum(x->m->cm, buf, n, err, errlen);
}

/* Layer l over the M rows of every rank's residual s[r].x (rows [0, Mpre)
   through the prefill family). */
static int tp_layer(tp_ctx *x, int l, int M, int Mpre, int n_past, char *err, size_t errlen) {
    const tp_model *m = x->m;
    const model_desc *d = &m->d;
    const model_config *c = d->cfg;
    const wlayer *F = &d->layers[l]; /* the whole layer: its o bias and post norms apply to reduced rows */
    const int R = m->ranks, H = c->hidden_size;
    const float eps = c->rms_norm_eps;
    float *buf[TPAR_MAX_RANKS];
    for (int r = 0; r < R; r++) {
        cpu_scratch *s = &x->s[r];
        const wlayer *L = &m->tm->rank[r].layers[l];
        const model_config *rc = &m->tm->rank[r].cfg;
        cpu_layer_qkv(x->tp, s, L, rc, d->inv_freq, M, Mpre);
        cpu_layer_attn(x->tp, s, L, rc, x->kv[r], l, 0, M, n_past);
        cpu_mm(x->tp, s->xb, s->att, M, Mpre, L->wo, NULL); /* a partial sum over the rank's heads */
        buf[r] = s->xb;
    }
    if (reduce(x, buf, (size_t)M * (size_t)H, err, errlen) != 0) return -1;
    for (int r = 0; r < R; r++) {
        cpu_scratch *s = &x->s[r];
        const wlayer *L = &m->tm->rank[r].layers[l];
        const int I = m->tm->rank[r].cfg.intermediate_size;
        for (int i = 0; F->bo && i < M; i++) op_add(s->xb + (size_t)i * H, F->bo, H);
        if (F->post_attn_norm) op_rmsnorm(s->xb, s->xb, F->post_attn_norm, M, H, eps);
        op_add(s->x, s->xb, M * H);
        op_rmsnorm(s->xb, s->x, F->mlp_norm, M, H, eps);
        if (L->mlp == MLP_MOE) {
            cpu_moe_mlp(x->tp, s, L->moe, M, Mpre, H); /* the rank's slices of each chosen expert */
        } else {
            cpu_mm(x->tp, s->gate, s->xb, M, Mpre, L->wg, NULL);
            cpu_mm(x->tp, s->up, s->xb, M, Mpre, L->wu, NULL);
            if (L->mlp == MLP_GEGLU) op_geglu(s->gate, s->gate, s->up, M * I);
            else op_swiglu(s->gate, s->gate, s->up, M * I);
            cpu_mm(x->tp, s->xb, s->gate, M, Mpre, L->wd, NULL); /* a partial sum over the rank's columns */
        }
    }
    if (reduce(x, buf, (size_t)M * (size_t)H, err, errlen) != 0) return -1;
    for (int r = 0; r < R; r++) {
        cpu_scratch *s = &x->s[r];
        if (F->post_mlp_norm) op_rmsnorm(s->xb, s->xb, F->post_mlp_norm, M, H, eps);
        op_add(s->x, s->xb, M * H);
    }
    return 0;
}

/* the embedding of rows [row0, row0+M): each rank gathers the ids it
   holds and -0.0 for the others, and the all-reduce joins them exactly */
static int tp_embed(tp_ctx *x, const model_batch *b, int row0, int M, char *err, size_t errlen) {
    const tp_model *m = x->m;
    const int R = m->ranks, H = m->d.cfg->hidden_size;
    float *buf[TPAR_MAX_RANKS];
    for (int r = 0; r < R; r++) {
        const tpar_rank *k = &m->tm->rank[r];
        float *y = x->s[r].x;
        for (int i = 0; i < M; i++) {
            const int t = b->tokens[row0 + i] - k->v0;
            if (t >= 0 && t < k->v1 - k->v0) op_embed(y + (size_t)i * H, k->embed, &t, 1);
            else
                for (int h = 0; h < H; h++) y[(size_t)i * H + h] = -0.0f;
        }
        buf[r] = y;
    }
    return reduce(x, buf, (size_t)M * (size_t)H, err, errlen);
}

/* n rows of every rank's s->xb (normed) through its LM head shard into
   the logits rows lg [n][V], TP_HEAD_ROWS at a time */
static int tp_head(tp_ctx *x, int n, float *lg, char *err, size_t errlen) {
    const tp_model *m = x->m;
    const model_config *c = m->d.cfg;
    const int R = m->ranks, H = c->hidden_size, V = c->vocab_size;
    int cols[TPAR_MAX_RANKS];
    const float *shard[TPAR_MAX_RANKS];
    float *outs[TPAR_MAX_RANKS] = {0};
    for (int r0 = 0; r0 < n; r0 += TP_HEAD_ROWS) {
        const int k = n - r0 < TP_HEAD_ROWS ? n - r0 : TP_HEAD_ROWS;
        for (int r = 0; r < R; r++) {
            cols[r] = rank_vocab(m, r);
            op_matmul(x->tp, x->lg[r], x->s[r].xb + (size_t)r0 * H, k, m->tm->rank[r].lm_head, NULL);
            if (c->final_softcap > 0) op_softcap(x->lg[r], c->final_softcap, k * cols[r]);
            shard[r] = x->lg[r];
        }
        outs[0] = lg + (size_t)r0 * V; /* the ranks share this host: rank 0's copy is the one kept */
        if (coll_all_gather(m->cm, shard, k, cols, outs, (size_t)V, err, errlen) != 0) return -1;
    }
    return 0;
}

/* rows [row0, row0+M) of the batch, those before pre_end through the
   prefill family; the logits of its requested rows */
static int tp_chunk(tp_ctx *x, const model_batch *b, int row0, int M, int pre_end, int *next_logit, char *err,
                    size_t errlen) {
    const tp_model *m = x->m;
    const model_config *c = m->d.cfg;
    const int R = m->ranks, H = c->hidden_size;
    const int n_past = kv_len(x->kv[0]);
    for (int r = 0; r < R; r++)
        for (int i = 0; i < M; i++) x->s[r].pos[i] = b->pos ? b->pos[row0 + i] : n_past + i;
    if (tp_embed(x, b, row0, M, err, errlen) != 0) return -1;
    for (int r = 0; c->embed_scale > 0 && r < R; r++) op_scale(x->s[r].x, c->embed_scale, M * H);
    cpu_tap_copy(b, x->s[0].x, -1, row0, M, H);
    const int Mpre = pre_end <= row0 ? 0 : pre_end - row0 < M ? pre_end - row0 : M;
    for (int l = 0; l < c->n_layers; l++) {
        if (tp_layer(x, l, M, Mpre, n_past, err, errlen) != 0) return -1;
        cpu_tap_copy(b, x->s[0].x, l, row0, M, H);
    }
    for (int r = 0; r < R; r++) kv_commit(x->kv[r], M);
    int n_sel = 0, first = *next_logit;
    while (*next_logit < b->n_logits) {
        int row = b->logit_rows ? b->logit_rows[*next_logit] : b->n - b->n_logits + *next_logit;
        if (row >= row0 + M) break;
        for (int r = 0; r < R; r++)
            memcpy(x->s[r].xb + (size_t)n_sel * H, x->s[r].x + (size_t)(row - row0) * H, sizeof(float) * (size_t)H);
        n_sel++;
        (*next_logit)++;
    }
    if (!n_sel) return 0;
    for (int r = 0; r < R; r++) op_rmsnorm(x->s[r].xb, x->s[r].xb, m->d.final_norm, n_sel, H, c->rms_norm_eps);
    return tp_head(x, n_sel, b->logits + (size_t)first * (size_t)c->vocab_size, err, errlen);
}

static int tp_forward(void *bc, const model_batch *b, char *err, size_t errlen) {
    tp_ctx *x = bc;
    const int V = x->m->d.cfg->vocab_size;
    model_batch bb = *b;
    if (b->n_logits && !b->logits) { /* argmax or samples only */
        size_t need = (size_t)b->n_logits * (size_t)V;
        if (x->n_logit_scratch < need) {
            free(x->logit_scratch);
            x->logit_scratch = xmalloc(sizeof(float) * need);
            x->n_logit_scratch = need;
        }
        bb.logits = x->logit_scratch;
    }
    int next_logit = 0;
    const int g = cpu_group_rows();
    const int pre_end = x->m->quant ? b->n / g * g : 0; /* whole groups from the forward's first row */
    for (int row0 = 0; row0 < b->n; row0 += x->max_batch) {
        int M = b->n - row0 < x->max_batch ? b->n - row0 : x->max_batch;
        if (tp_chunk(x, &bb, row0, M, pre_end, &next_logit, err, errlen) != 0) return -1;
    }
    for (int i = 0; b->argmax && i < b->n_logits; i++) b->argmax[i] = op_argmax(bb.logits + (size_t)i * V, V);
    if (b->smp) sampler_rows(b->smp, bb.logits, b->n_logits, b->draft, b->u, b->sampled, 0);
    return 0;
}

/* ---- the table ------------------------------------------------------------------ */

static backend g_table;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void table_init(void) {
    g_table = backend_cpu; /* the drafters' functions and the rest as they are */
    g_table.model_create = tp_model_create;
    g_table.model_free = tp_model_free;
    g_table.model_caps = tp_model_caps;
    g_table.ctx_create = tp_ctx_create;
    g_table.ctx_free = tp_ctx_free;
    g_table.ctx_len = tp_ctx_len;
    g_table.ctx_capacity = tp_ctx_capacity;
    g_table.ctx_truncate = tp_ctx_truncate;
    g_table.ctx_bytes = tp_ctx_bytes;
    g_table.ctx_release = tp_ctx_release;
    g_table.ctx_copy = tp_ctx_copy;
    g_table.ctx_pos_bytes = tp_ctx_pos_bytes;
    g_table.ctx_kept_from = tp_ctx_kept_from;
    g_table.ctx_save = tp_ctx_save;
    g_table.ctx_load = tp_ctx_load;
    /* each rank's cache in a pool of its own: blocks travel as copies */
    g_table.block_rows = 0;
    g_table.kv_pages = NULL;
    g_table.ctx_block_take = NULL;
    g_table.ctx_block_put = NULL;
    g_table.block_drop = NULL;
    g_table.forward = tp_forward;
    g_table.forward_multi = NULL;   /* the sequences in turn */
    g_table.tensor_parallel = NULL; /* a split model splits no further */
}

const backend *cpu_tpar_backend(void) {
    pthread_once(&g_once, table_init);
    return &g_table;
}
