/* drafter: one sequence's drafter state: the bookkeeping (committed ids,
 * what to ingest, the confidence cut, sampling) around the forward pass,
 * which the target's backend runs (backend.h: dstate_*). See drafter.h
 * (and drafter_load.c for loading). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "spec/drafter_internal.h"

struct dstate {
    const dmodel *dm;
    const backend *be;
    void *bs; /* the backend's state: context K/V at committed positions and scratch */
    sampler *smp;
    float conf_th;
    int *ids;     /* the committed context: prompt + emitted ids; the last one is the anchor */
    int n_ids, cap_ids;
    int broken; /* features arrived out of order: propose nothing until the next reset */
    /* the last context chunk's features and the last proposal's rows
       (dstate_last_ctx, dstate_last), and the sampled DSpark rows */
    float *g, *base, *zl;
    float conf[DRAFTER_MAX_BLOCK];
    int n_last, n_conf;
};

int dstate_create(dstate **out, const dmodel *dm, int n_ctx, tpool *tp, sampler *smp, char *err, size_t errlen) {
    *out = NULL;
    const drafter_config *c = &dm->cfg;
    const model_config *b = &c->base;
    dstate *s = xcalloc(1, sizeof *s);
    const int B = c->block_size;
    s->be = dm->be;
    if (s->be->dstate_create(&s->bs, dm->bdm, n_ctx + B, tp, err, errlen) != 0) {
        free(s);
        return -1;
    }
    size_t H = (size_t)b->hidden_size, V = (size_t)b->vocab_size;
    s->dm = dm;
    s->smp = smp;
    s->g = xaligned(sizeof(float) * (size_t)s->be->dstate_ctx_chunk * H);
    s->base = xaligned(sizeof(float) * (size_t)B * V);
    s->zl = xaligned(sizeof(float) * (size_t)B * V);
    *out = s;
    return 0;
}

void dstate_free(dstate *s) {
    if (!s) return;
    s->be->dstate_free(s->bs);
    free(s->g);
    free(s->base);
    free(s->zl);
    free(s->ids);
    free(s);
}

/* the context cache, in the backend */
static int ctx_len(const dstate *s) { return s->be->dstate_len(s->bs); }
static int ctx_capacity(const dstate *s) { return s->be->dstate_capacity(s->bs); }
static void ctx_truncate(dstate *s, int len) { s->be->dstate_truncate(s->bs, len); }

void dstate_set_confidence_threshold(dstate *s, float c) { s->conf_th = c; }
int dstate_ctx_len(const dstate *s) { return ctx_len(s); }
const int *dstate_ids(const dstate *s, int *n) {
    *n = s->n_ids;
    return s->ids;
}

int dstate_last(const dstate *s, const float **base, const float **markov, const float **conf) {
    const dmodel *dm = s->dm;
    const int mk = dm->cfg.kind == DRAFTER_DSPARK && dm->w2;
    if (base) *base = s->base;
    if (markov) *markov = mk ? s->zl : NULL;
    if (conf) *conf = dm->conf_w ? s->conf : NULL;
    char err[256];
    if (s->be->dstate_read_last(s->bs, s->base, mk ? s->zl : NULL, s->n_last, err, sizeof err) != 0) return 0;
    return s->n_last;
}

const float *dstate_last_ctx(const dstate *s, int *n) {
    char err[256];
    int rows = s->be->dstate_read_ctx(s->bs, s->g, err, sizeof err);
    if (n) *n = rows < 0 ? 0 : rows;
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

int dstate_copy_prefix(dstate *dst, const dstate *src, int n, char *err, size_t errlen) {
    if (dst == src || dst->dm != src->dm) return ds_err(err, errlen, "drafter copy: two states of one drafter are needed");
    if (n < 0 || n > ctx_len(src) || n > src->n_ids)
        return ds_err(err, errlen, "drafter copy: %d positions, the source holds %d", n, ctx_len(src));
    if (!dst->be->dstate_copy) return ds_err(err, errlen, "the %s backend does not copy drafter caches", dst->be->name);
    if (dst->be->dstate_copy(dst->bs, src->bs, n, err, errlen) != 0) return -1;
    dst->n_ids = 0;
    ids_push(dst, src->ids, n);
    dst->broken = 0;
    return 0;
}

size_t dstate_pos_bytes(const dstate *s) {
    const backend *be = s->be;
    return be->dstate_pos_bytes && be->dstate_save && be->dstate_load ? be->dstate_pos_bytes(s->dm->bdm) : 0;
}

int dstate_save_rows(dstate *s, int pos0, int n, void *host, char *err, size_t errlen) {
    if (!dstate_pos_bytes(s)) return ds_err(err, errlen, "the %s backend does not save drafter rows", s->be->name);
    if (pos0 < 0 || n < 0 || pos0 + n > ctx_len(s))
        return ds_err(err, errlen, "drafter save: positions %d..%d (the context holds %d)", pos0, pos0 + n, ctx_len(s));
    return s->be->dstate_save(s->bs, pos0, n, host, err, errlen);
}

/* the rule and the bookkeeping of rows put back at [pos0, pos0+n) (a load
   by copy or by reference): load_fits before, loaded once the backend
   took them */
static int load_fits(const dstate *s, int pos0, int n, const char *what, char *err, size_t errlen) {
    const int B = s->dm->cfg.block_size;
    if (pos0 < 0 || n < 0 || pos0 > ctx_len(s) || pos0 > s->n_ids || pos0 + n + B > ctx_capacity(s))
        return ds_err(err, errlen, "%s: positions %d..%d (the context holds %d, takes %d)", what, pos0, pos0 + n,
                      ctx_len(s), ctx_capacity(s) - B);
    return 0;
}
static void loaded(dstate *s, const int *ids, int pos0, int n) {
    s->n_ids = pos0;
    ids_push(s, ids + pos0, n);
    s->broken = 0;
}

int dstate_load_rows(dstate *s, const int *ids, int pos0, int n, const void *host, char *err, size_t errlen) {
    if (!dstate_pos_bytes(s)) return ds_err(err, errlen, "the %s backend does not load drafter rows", s->be->name);
    if (load_fits(s, pos0, n, "drafter load", err, errlen) != 0 ||
        s->be->dstate_load(s->bs, pos0, n, host, err, errlen) != 0)
        return -1;
    loaded(s, ids, pos0, n);
    return 0;
}

struct dblock {
    const backend *be;
    void *h; /* the backend's handle (its block_drop frees it) */
};

int dstate_block_rows(const dstate *s) {
    const backend *be = s->be;
    return be->dstate_block_take && be->dstate_block_put && be->block_drop ? be->block_rows : 0;
}

dblock *dstate_block_take(dstate *s, int b, char *err, size_t errlen) {
    const int r = dstate_block_rows(s);
    if (!r || b < 0 || (b + 1) * r > ctx_len(s)) {
        ds_err(err, errlen, "drafter block %d: the context holds %d positions (blocks of %d)", b, ctx_len(s), r);
        return NULL;
    }
    void *h = s->be->dstate_block_take(s->bs, b);
    if (!h) {
        ds_err(err, errlen, "drafter block %d: its rows cannot be taken (the context holds %d)", b, ctx_len(s));
        return NULL;
    }
    dblock *k = xmalloc(sizeof *k);
    k->be = s->be;
    k->h = h;
    return k;
}

int dstate_block_put(dstate *s, const int *ids, int b, const dblock *blk, char *err, size_t errlen) {
    const int r = dstate_block_rows(s);
    char what[48];
    snprintf(what, sizeof what, "drafter block %d", b);
    if (!r || !blk || blk->be != s->be) return ds_err(err, errlen, "%s: not a block of this drafter's pages", what);
    if (load_fits(s, b * r, r, what, err, errlen) != 0 || s->be->dstate_block_put(s->bs, b, blk->h, err, errlen) != 0)
        return -1;
    loaded(s, ids, b * r, r);
    return 0;
}

void dblock_free(dblock *blk) {
    if (!blk) return;
    blk->be->block_drop(blk->h);
    free(blk);
}

static void d_commit(void *self, const int *ids, int n) { ids_push(self, ids, n); }

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

static void d_features_resident(void *self, int pos0, int n, const float *taps, int rows, int row0) {
    dstate *s = self;
    char err[256];
    if (features_fit(s, pos0, n) &&
        s->be->dstate_ingest_resident(s->bs, pos0, n, taps, rows, row0, err, sizeof err) != 0)
        s->broken = 1;
}

static void d_features(void *self, int pos0, int n, const float *taps, int rows, int row0) {
    dstate *s = self;
    char err[256];
    if (features_fit(s, pos0, n) && s->be->dstate_ingest(s->bs, pos0, n, taps, rows, row0, err, sizeof err) != 0)
        s->broken = 1;
}

/* ---- the block ------------------------------------------------------------ */

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

/* The backend runs the block and the head and, when the choice is greedy,
   the choice too (a GPU's device copies back only the ids and the
   confidences); sampled DSpark rows come one at a time as logits, given
   the previous draft, and are sampled here. */
static int d_propose(void *self, int k, int *draft, float *q) {
    dstate *s = self;
    const dmodel *dm = s->dm;
    const drafter_config *c = &dm->cfg;
    const int B = c->block_size, V = c->base.vocab_size, dflash = c->kind == DRAFTER_DFLASH;
    const int spos = propose_pos(s, k);
    if (spos < 0) return 0;
    const int n = dflash ? (k < B - 1 ? k : B - 1) : (k < B ? k : B);
    const int chain = dflash || sampler_is_greedy(s->smp) || !q;
    char err[256];
    float conf[DRAFTER_MAX_BLOCK];
    if (s->be->dstate_propose(s->bs, s->ids[spos], n, chain, s->conf_th, draft, conf, err, sizeof err) != 0)
        return 0;
    s->n_last = n;
    if (dflash) return n;
    int prev = s->ids[spos];
    for (int j = 0; j < n; j++) {
        float *z = s->zl + (size_t)j * V;
        if (!chain && s->be->dstate_row(s->bs, j, prev, s->conf_th, &conf[j], z, err, sizeof err) != 0) return j;
        if (dm->conf_w && conf_cut(s, j, conf[j])) return j;
        if (!chain) {
            sampler_probs(s->smp, z, q + (size_t)j * V);
            draft[j] = sampler_draw(s->smp, q + (size_t)j * V, V, 1.0);
        }
        prev = draft[j];
    }
    return n;
}

/* propose_resident (a GPU DSpark, sampling): the drafts drawn in the
   backend with the caller's uniforms, their distributions left there */
static int d_propose_resident(void *self, int k, int *draft, const double *u, int *used, model_draft_q *q) {
    dstate *s = self;
    *used = 0;
    *q = (model_draft_q){0};
    const int B = s->dm->cfg.block_size, spos = propose_pos(s, k);
    if (spos < 0) return 0;
    int n = k < B ? k : B;
    char err[256];
    float conf[DRAFTER_MAX_BLOCK];
    if (s->be->dstate_propose_sampled(s->bs, s->ids[spos], n, sampler_get_params(s->smp), u, draft, conf, err,
                                      sizeof err) != 0)
        return 0;
    s->n_last = n;
    s->be->dstate_qrows(s->bs, q);
    for (int j = 0; s->dm->conf_w && j < n; j++)
        if (conf_cut(s, j, conf[j])) {
            n = j;
            break;
        }
    *used = n; /* one draw per draft kept, as d_propose makes them */
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
                 .features_resident = s->be->dstate_ingest_resident ? d_features_resident : NULL,
                 .propose_resident =
                     s->be->dstate_propose_sampled && c->kind == DRAFTER_DSPARK ? d_propose_resident : NULL};
    return d;
}
