/* drafter: one sequence's drafter state and the drafter forward pass. See
 * drafter.h (and drafter_load.c for loading). When the target is on a GPU
 * the state and the forward pass are on that GPU (cuda_drafter.h); the
 * bookkeeping here (committed ids, what to ingest, the confidence cut,
 * sampling) is shared. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "spec/drafter_internal.h"
#include "engine/kv.h"
#include "engine/ops.h"
#include "base/util.h"

#define CTX_CHUNK 64 /* context rows ingested per forward */

struct dstate {
    const dmodel *dm;
    tpool *tp;
    sampler *smp;
    float conf_th;
    kv_cache *kv; /* context K/V at committed positions; a block's rows sit past kv_len, never committed */
    cuda_dstate *cu; /* instead of kv and the CPU scratch when the drafter is on a GPU */
    int *ids;     /* the committed context: prompt + emitted ids; the last one is the anchor */
    int n_ids, cap_ids;
    int broken; /* features arrived out of order: propose nothing until the next reset */
    /* scratch */
    float *x, *xb, *q, *att, *k, *v, *gate, *up, *feat, *g, *cin, *e, *bias, *base, *zl;
    int *pos;
    float conf[DRAFTER_MAX_BLOCK];
    int n_last, n_conf, n_lastctx;
};

int dstate_create(dstate **out, const dmodel *dm, int n_ctx, tpool *tp, sampler *smp, char *err, size_t errlen) {
    *out = NULL;
    const drafter_config *c = &dm->cfg;
    const model_config *b = &c->base;
    dstate *s = xcalloc(1, sizeof *s);
    const int B = c->block_size;
    int rc = dm->cu ? cuda_dstate_create(&s->cu, dm->cu, n_ctx + B, err, errlen)
                    : kv_create(&s->kv, b->n_layers, b->n_kv_heads, b->head_dim, n_ctx + B, err, errlen);
    if (rc != 0) {
        free(s);
        return -1;
    }
    size_t H = (size_t)b->hidden_size, I = (size_t)b->intermediate_size, V = (size_t)b->vocab_size;
    size_t QD = (size_t)b->n_heads * (size_t)b->head_dim, KD = (size_t)b->n_kv_heads * (size_t)b->head_dim;
    size_t R = (size_t)c->markov_rank, rows = (size_t)(B > CTX_CHUNK ? B : CTX_CHUNK);
    s->dm = dm;
    s->tp = tp;
    s->smp = smp;
    /* both paths: the head rows, the biased rows, the last context features */
    s->g = xaligned(sizeof(float) * (size_t)(s->cu ? cuda_dstate_ctx_chunk() : CTX_CHUNK) * H);
    s->base = xaligned(sizeof(float) * (size_t)B * V);
    s->zl = xaligned(sizeof(float) * (size_t)B * V);
    if (s->cu) {
        *out = s;
        return 0;
    }
    s->x = xaligned(sizeof(float) * (size_t)B * H);
    s->xb = xaligned(sizeof(float) * (size_t)B * H);
    s->q = xaligned(sizeof(float) * (size_t)B * QD);
    s->att = xaligned(sizeof(float) * (size_t)B * QD);
    s->k = xaligned(sizeof(float) * rows * KD);
    s->v = xaligned(sizeof(float) * rows * KD);
    s->gate = xaligned(sizeof(float) * (size_t)B * I);
    s->up = xaligned(sizeof(float) * (size_t)B * I);
    s->feat = xaligned(sizeof(float) * (size_t)CTX_CHUNK * (size_t)c->n_taps * H);
    s->cin = xaligned(sizeof(float) * (H + R + 1));
    s->e = xaligned(sizeof(float) * (R + 1));
    s->bias = xaligned(sizeof(float) * V);
    s->pos = xmalloc(sizeof(int) * rows);
    *out = s;
    return 0;
}

void dstate_free(dstate *s) {
    if (!s) return;
    kv_free(s->kv);
    cuda_dstate_free(s->cu);
    float *bufs[] = {s->x, s->xb, s->q, s->att, s->k, s->v, s->gate, s->up, s->feat,
                     s->g, s->cin, s->e, s->bias, s->base, s->zl};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(s->pos);
    free(s->ids);
    free(s);
}

/* the context cache, wherever it lives */
static int ctx_len(const dstate *s) { return s->cu ? cuda_dstate_len(s->cu) : kv_len(s->kv); }
static int ctx_capacity(const dstate *s) { return s->cu ? cuda_dstate_capacity(s->cu) : kv_capacity(s->kv); }
static void ctx_truncate(dstate *s, int len) {
    if (s->cu) cuda_dstate_truncate(s->cu, len);
    else kv_truncate(s->kv, len);
}

void dstate_set_confidence_threshold(dstate *s, float c) { s->conf_th = c; }
int dstate_ctx_len(const dstate *s) { return ctx_len(s); }

int dstate_last(const dstate *s, const float **base, const float **markov, const float **conf) {
    const dmodel *dm = s->dm;
    if (base) *base = s->base;
    if (markov) *markov = dm->cfg.kind == DRAFTER_DSPARK && dm->w2 ? s->zl : NULL;
    if (conf) *conf = dm->conf_w ? s->conf : NULL;
    if (s->cu) {
        /* the rows stay on the device until asked for */
        char err[256];
        int mk = dm->cfg.kind == DRAFTER_DSPARK && dm->w2;
        if (cuda_dstate_read_last(s->cu, s->base, mk ? s->zl : NULL, s->n_last, err, sizeof err) != 0) return 0;
    }
    return s->n_last;
}

const float *dstate_last_ctx(const dstate *s, int *n) {
    int rows = s->n_lastctx;
    if (s->cu) {
        char err[256];
        rows = cuda_dstate_read_ctx(s->cu, s->g, err, sizeof err);
        if (rows < 0) rows = 0;
    }
    if (n) *n = rows;
    return s->g;
}

/* ---- context ------------------------------------------------------------ */

static void ids_push(dstate *s, const int *ids, int n) {
    if (s->n_ids + n > s->cap_ids) {
        s->cap_ids = (s->n_ids + n) * 2 + 64;
        s->ids = xrealloc(s->ids, sizeof(int) * (size_t)s->cap_ids);
    }
    memcpy(s->ids + s->n_ids, ids, sizeof(int) * (size_t)n);
    s->n_ids += n;
}

static int d_reset(void *self, const int *ids, int n) {
    dstate *s = self;
    int keep = 0, have = ctx_len(s);
    while (keep < have && keep < n && keep < s->n_ids && s->ids[keep] == ids[keep]) keep++;
    ctx_truncate(s, keep);
    s->n_ids = 0;
    ids_push(s, ids, n);
    s->broken = 0;
    return keep;
}

static void d_commit(void *self, const int *ids, int n) { ids_push(self, ids, n); }

/* Context K/V for m rows at positions pos0..: C = RMSNorm(fc . F,
   hidden_norm); per layer RoPE(k_norm(k_proj C)) and v_proj C. */
static void ingest(dstate *s, int pos0, int m, const float *taps, int rows, int row0) {
    const dmodel *dm = s->dm;
    const drafter_config *c = &dm->cfg;
    const model_config *b = &c->base;
    const int H = b->hidden_size, nkv = b->n_kv_heads, hd = b->head_dim, nt = c->n_taps;
    for (int i = 0; i < m; i++)
        for (int t = 0; t < nt; t++)
            memcpy(s->feat + ((size_t)i * nt + t) * H, taps + ((size_t)t * rows + (size_t)(row0 + i)) * H,
                   sizeof(float) * (size_t)H);
    op_matmul(s->tp, s->g, s->feat, m, dm->fc, NULL);
    op_rmsnorm(s->g, s->g, dm->hidden_norm, m, H, b->rms_norm_eps);
    for (int i = 0; i < m; i++) s->pos[i] = pos0 + i;
    for (int l = 0; l < b->n_layers; l++) {
        const dlayer *L = &dm->layers[l];
        op_matmul(s->tp, s->k, s->g, m, L->wk, NULL);
        op_rmsnorm(s->k, s->k, L->k_norm, m * nkv, hd, b->rms_norm_eps);
        op_rope(s->k, m, nkv, hd, s->pos, dm->inv_freq);
        op_matmul(s->tp, s->v, s->g, m, L->wv, NULL);
        kv_store(s->kv, l, s->k, s->v, m);
    }
    kv_commit(s->kv, m);
    s->n_lastctx = m;
}

/* 1 when context rows pos0.. (n of them) can be taken: the context must stay
   contiguous from position 0 and leave room for a block */
static int features_fit(dstate *s, int pos0, int n) {
    if (s->broken) return 0;
    if (pos0 > ctx_len(s) || pos0 + n + s->dm->cfg.block_size > ctx_capacity(s)) {
        s->broken = 1;
        return 0;
    }
    return 1;
}

static void d_features_dev(void *self, int pos0, int n, const float *taps, int rows, int row0) {
    dstate *s = self;
    char err[256];
    if (features_fit(s, pos0, n) && cuda_dstate_ingest_dev(s->cu, pos0, n, taps, rows, row0, err, sizeof err) != 0)
        s->broken = 1;
}

static void d_features(void *self, int pos0, int n, const float *taps, int rows, int row0) {
    dstate *s = self;
    if (!features_fit(s, pos0, n)) return;
    if (s->cu) {
        char err[256];
        if (cuda_dstate_ingest(s->cu, pos0, n, taps, rows, row0, err, sizeof err) != 0) s->broken = 1;
        return;
    }
    kv_truncate(s->kv, pos0);
    for (int i = 0; i < n; i += CTX_CHUNK) {
        int m = n - i < CTX_CHUNK ? n - i : CTX_CHUNK;
        ingest(s, pos0 + i, m, taps, rows, row0 + i);
    }
}

/* ---- the block ------------------------------------------------------------ */

/* Runs [anchor, mask x (B-1)] at positions s.. through the layers; leaves
   h = RMSNorm(X, norm) in s->xb [B][H]. */
static void block_forward(dstate *s, int anchor, int spos) {
    const dmodel *dm = s->dm;
    const drafter_config *c = &dm->cfg;
    const model_config *b = &c->base;
    const int B = c->block_size, H = b->hidden_size, I = b->intermediate_size, hd = b->head_dim;
    const int nh = b->n_heads, nkv = b->n_kv_heads;
    const float eps = b->rms_norm_eps, scale = 1.0f / sqrtf((float)hd);
    int tok[DRAFTER_MAX_BLOCK];
    for (int i = 0; i < B; i++) {
        tok[i] = i ? c->mask_token_id : anchor;
        s->pos[i] = spos + i;
    }
    op_embed(s->x, dm->embed, tok, B);
    for (int l = 0; l < b->n_layers; l++) {
        const dlayer *L = &dm->layers[l];
        op_rmsnorm(s->xb, s->x, L->attn_norm, B, H, eps);
        op_matmul(s->tp, s->q, s->xb, B, L->wq, NULL);
        op_matmul(s->tp, s->k, s->xb, B, L->wk, NULL);
        op_matmul(s->tp, s->v, s->xb, B, L->wv, NULL);
        op_rmsnorm(s->q, s->q, L->q_norm, B * nh, hd, eps);
        op_rmsnorm(s->k, s->k, L->k_norm, B * nkv, hd, eps);
        op_rope(s->q, B, nh, hd, s->pos, dm->inv_freq);
        op_rope(s->k, B, nkv, hd, s->pos, dm->inv_freq);
        /* the block's rows go right after the context, uncommitted */
        kv_store(s->kv, l, s->k, s->v, B);
        /* no mask: every block row sees the context and the whole block */
        op_attention_block(s->tp, s->att, s->q, B, nh, nkv, hd, kv_k(s->kv, l), kv_v(s->kv, l), kv_capacity(s->kv),
                           spos, scale);
        op_matmul(s->tp, s->xb, s->att, B, L->wo, NULL);
        op_add(s->x, s->xb, B * H);
        op_rmsnorm(s->xb, s->x, L->mlp_norm, B, H, eps);
        op_matmul(s->tp, s->gate, s->xb, B, L->wg, NULL);
        op_matmul(s->tp, s->up, s->xb, B, L->wu, NULL);
        op_swiglu(s->gate, s->gate, s->up, B * I);
        op_matmul(s->tp, s->xb, s->gate, B, L->wd, NULL);
        op_add(s->x, s->xb, B * H);
    }
    op_rmsnorm(s->xb, s->x, dm->final_norm, B, H, eps);
}

/* The anchor's position when a block can be drafted now (k > 0), else -1;
   clears the last proposal's rows and confidences */
static int propose_pos(dstate *s, int k) {
    s->n_last = s->n_conf = 0;
    int spos = s->n_ids - 1;
    if (s->broken || spos < 0 || ctx_len(s) != spos || spos + s->dm->cfg.block_size > ctx_capacity(s) || k <= 0)
        return -1;
    return spos;
}

/* DSpark's confidence cut: records row j's confidence; 1 when drafting
   stops before row j */
static int conf_cut(dstate *s, int j, float conf) {
    s->conf[j] = conf;
    s->n_conf = j + 1;
    return conf < s->conf_th;
}

/* d_propose's proposal from the GPU: the block and the head run there and,
   when the choice is greedy, so does the choice (only the ids and the
   confidences come back); sampled DSpark rows come back one at a time as
   logits, and the host samples them exactly as the CPU path does. */
static int propose_cuda(dstate *s, int k, int *draft, float *q, int spos) {
    const dmodel *dm = s->dm;
    const drafter_config *c = &dm->cfg;
    const int B = c->block_size, V = c->base.vocab_size, dflash = c->kind == DRAFTER_DFLASH;
    const int n = dflash ? (k < B - 1 ? k : B - 1) : (k < B ? k : B);
    const int chain = dflash || sampler_is_greedy(s->smp) || !q;
    char err[256];
    float conf[DRAFTER_MAX_BLOCK];
    if (cuda_dstate_propose(s->cu, s->ids[spos], n, chain, draft, conf, err, sizeof err) != 0) return 0;
    s->n_last = n;
    if (dflash) return n;
    int prev = s->ids[spos];
    for (int j = 0; j < n; j++) {
        float *z = s->zl + (size_t)j * V;
        if (!chain && cuda_dstate_row(s->cu, j, prev, &conf[j], z, err, sizeof err) != 0) return j;
        if (dm->conf_w && conf_cut(s, j, conf[j])) return j;
        if (!chain) {
            sampler_probs(s->smp, z, q + (size_t)j * V);
            draft[j] = sampler_draw(s->smp, q + (size_t)j * V, V, 1.0);
        }
        prev = draft[j];
    }
    return n;
}

/* propose_dev (a GPU DSpark, sampling): the drafts drawn on the device with
   the caller's uniforms, their distributions left there */
static int d_propose_dev(void *self, int k, int *draft, const double *u, int *used, model_draft_q *q) {
    dstate *s = self;
    *used = 0;
    *q = (model_draft_q){0};
    const int B = s->dm->cfg.block_size, spos = propose_pos(s, k);
    if (spos < 0) return 0;
    int n = k < B ? k : B;
    char err[256];
    float conf[DRAFTER_MAX_BLOCK];
    if (cuda_dstate_propose_sampled(s->cu, s->ids[spos], n, sampler_get_params(s->smp), u, draft, conf, err,
                                    sizeof err) != 0)
        return 0;
    s->n_last = n;
    cuda_dstate_qrows(s->cu, &q->e, &q->tot);
    for (int j = 0; s->dm->conf_w && j < n; j++)
        if (conf_cut(s, j, conf[j])) {
            n = j;
            break;
        }
    *used = n; /* one draw per draft kept, as d_propose makes them */
    return n;
}

static int d_propose(void *self, int k, int *draft, float *q) {
    dstate *s = self;
    const dmodel *dm = s->dm;
    const drafter_config *c = &dm->cfg;
    const int B = c->block_size, H = c->base.hidden_size, V = c->base.vocab_size, R = c->markov_rank;
    const int spos = propose_pos(s, k);
    if (spos < 0) return 0;
    if (s->cu) return propose_cuda(s, k, draft, q, spos);
    block_forward(s, s->ids[spos], spos);
    if (c->kind == DRAFTER_DFLASH) {
        /* mask row j (1..B-1) drafts the token at position s+j */
        int n = k < B - 1 ? k : B - 1;
        op_matmul(s->tp, s->base, s->xb + (size_t)H, n, dm->lm_head, NULL);
        for (int j = 0; j < n; j++) draft[j] = op_argmax(s->base + (size_t)j * V, V);
        s->n_last = n;
        return n;
    }
    /* DSpark: row j drafts position s+j+1, left to right */
    int n = k < B ? k : B;
    op_matmul(s->tp, s->base, s->xb, n, dm->lm_head, NULL);
    s->n_last = n;
    int greedy = sampler_is_greedy(s->smp), prev = s->ids[spos];
    for (int j = 0; j < n; j++) {
        if (R > 0) op_embed(s->e, dm->w1, &prev, 1);
        if (dm->conf_w) {
            float logit;
            memcpy(s->cin, s->xb + (size_t)j * H, sizeof(float) * (size_t)H);
            if (c->confidence_with_markov) memcpy(s->cin + H, s->e, sizeof(float) * (size_t)R);
            op_matmul(NULL, &logit, s->cin, 1, dm->conf_w, &dm->conf_b);
            if (conf_cut(s, j, 1.0f / (1.0f + expf(-logit)))) return j;
        }
        float *z = s->zl + (size_t)j * V;
        memcpy(z, s->base + (size_t)j * V, sizeof(float) * (size_t)V);
        if (R > 0) {
            op_matmul(s->tp, s->bias, s->e, 1, dm->w2, NULL);
            op_add(z, s->bias, V);
        }
        if (greedy || !q) {
            draft[j] = op_argmax(z, V);
        } else {
            sampler_probs(s->smp, z, q + (size_t)j * V);
            draft[j] = sampler_draw(s->smp, q + (size_t)j * V, V, 1.0);
        }
        prev = draft[j];
    }
    return n;
}

drafter dstate_drafter(dstate *s) {
    const drafter_config *c = &s->dm->cfg;
    drafter d = {.self = s,
                 .deterministic = c->kind == DRAFTER_DFLASH,
                 .n_taps = c->n_taps,
                 .tap_layers = c->tap_layers,
                 .reset = d_reset,
                 .propose = d_propose,
                 .commit = d_commit,
                 .features = d_features,
                 .features_dev = s->cu ? d_features_dev : NULL,
                 .propose_dev = s->cu && c->kind == DRAFTER_DSPARK ? d_propose_dev : NULL};
    return d;
}
