/* tpar: the sharding plan and the ranks' shares of a model. See tpar.h. */
#include "engine/tpar.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "engine/quant.h"

/* ---- the plan ------------------------------------------------------------ */

int tpar_plan_make(tpar_plan *p, const model_config *c, int ranks, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    if (ranks < 1 || ranks > TPAR_MAX_RANKS)
        return ds_err(err, errlen, "--tensor-parallel %d: expected 1 to %d ranks", ranks, TPAR_MAX_RANKS);
    const int nh = c->n_heads, nkv = c->n_kv_heads;
    if (nh % ranks)
        return ds_err(err, errlen,
                      "--tensor-parallel %d: the model's %d attention heads do not split into %d equal shares "
                      "(the ranks must divide the head count)",
                      ranks, nh, ranks);
    if (ranks <= nkv ? nkv % ranks : ranks % nkv)
        return ds_err(err, errlen,
                      "--tensor-parallel %d: the model's %d KV heads split over ranks that divide them, or are "
                      "replicated when their count divides the ranks; %d ranks do neither",
                      ranks, nkv, ranks);
    int dense = c->moe_experts <= 0, moe = 0;
    for (int l = 0; c->moe_experts > 0 && l < c->n_layers; l++) {
        if (c->moe[l]) moe = 1;
        else dense = 1;
    }
    if (dense && c->intermediate_size % ranks)
        return ds_err(err, errlen,
                      "--tensor-parallel %d: the MLP's %d columns (intermediate_size) do not split into %d equal "
                      "shares",
                      ranks, c->intermediate_size, ranks);
    if (moe && c->moe_intermediate_size % ranks)
        return ds_err(err, errlen,
                      "--tensor-parallel %d: each expert's %d columns (moe_intermediate_size) do not split into %d "
                      "equal shares",
                      ranks, c->moe_intermediate_size, ranks);
    if (c->vocab_size < ranks)
        return ds_err(err, errlen, "--tensor-parallel %d: a vocabulary of %d ids does not split over %d ranks", ranks,
                      c->vocab_size, ranks);
    p->ranks = ranks;
    p->heads = nh / ranks;
    p->kv_heads = ranks <= nkv ? nkv / ranks : 1;
    p->kv_share = ranks <= nkv ? 1 : ranks / nkv;
    p->inter = dense ? c->intermediate_size / ranks : 0;
    p->moe_inter = moe ? c->moe_intermediate_size / ranks : 0;
    return 0;
}

int tpar_q_head0(const tpar_plan *p, int r) { return r * p->heads; }

int tpar_kv_head0(const tpar_plan *p, const model_config *c, int r) {
    return p->kv_share > 1 ? r * c->n_kv_heads / p->ranks : r * p->kv_heads;
}

void tpar_vocab(int ranks, int V, int r, int *v0, int *v1) {
    *v0 = (int)((int64_t)r * V / ranks);
    *v1 = (int)((int64_t)(r + 1) * V / ranks);
}

/* ---- slices ---------------------------------------------------------------- */

/* the columns a cut of W must fall on: its GGUF block, its MLX group, 1 for floats */
static int col_unit(const tensor *W) {
    if (W->dtype == DT_MLX) return W->q.group;
    if (dtype_is_quant(W->dtype)) return quant_block_elems(W->dtype);
    return 1;
}

static const char *unit_name(const tensor *W) { return W->dtype == DT_MLX ? "groups" : "blocks"; }

int tpar_check_cols(const tensor *W, int ranks, char *err, size_t errlen) {
    const int64_t K = W->shape[1];
    const int u = col_unit(W);
    const char *nm = W->name ? W->name : "?";
    if (K % ranks)
        return ds_err(err, errlen, "--tensor-parallel %d: %s has %" PRId64 " input columns, which do not split into %d "
                      "equal shares", ranks, nm, K, ranks);
    if ((K / ranks) % u)
        return ds_err(err, errlen,
                      "--tensor-parallel %d: %s (%s, %s of %d columns) would split its %" PRId64
                      " input columns into shares of %" PRId64 ", not on its %s' boundaries (a share must be a "
                      "multiple of %d)",
                      ranks, nm, dtype_name(W->dtype), unit_name(W), u, K, K / ranks, unit_name(W), u);
    return 0;
}

int tpar_slice(tensor *out, void **owned, const tensor *W, int64_t r0, int64_t nr, int64_t c0, int64_t nc, char *err,
               size_t errlen) {
    *owned = NULL;
    const char *nm = W->name ? W->name : "?";
    if (W->ndim != 2) return ds_err(err, errlen, "tensor %s: only a matrix is sliced", nm);
    const int64_t N = W->shape[0], K = W->shape[1];
    if (r0 < 0 || nr <= 0 || r0 + nr > N || c0 < 0 || nc <= 0 || c0 + nc > K)
        return ds_err(err, errlen, "tensor %s [%" PRId64 "][%" PRId64 "]: rows %" PRId64 "+%" PRId64 ", columns %" PRId64
                      "+%" PRId64 " fall outside it", nm, N, K, r0, nr, c0, nc);
    const int u = col_unit(W);
    if (c0 % u || nc % u)
        return ds_err(err, errlen, "tensor %s (%s): columns %" PRId64 "+%" PRId64 " miss its %s of %d", nm,
                      dtype_name(W->dtype), c0, nc, unit_name(W), u);
    *out = *W;
    out->shape[0] = nr;
    out->shape[1] = nc;
    const int whole = c0 == 0 && nc == K;
    if (W->dtype == DT_MLX) {
        const size_t es = dtype_size(W->q.sdtype), gs = (size_t)(K / u), ngs = (size_t)(nc / u);
        const size_t wrow = quant_row_bytes(DT_MLX, W->q.bits, K), nwrow = quant_row_bytes(DT_MLX, W->q.bits, nc);
        const size_t woff = quant_row_bytes(DT_MLX, W->q.bits, c0);
        out->nbytes = (size_t)nr * nwrow;
        if (whole) {
            out->data = (const char *)W->data + (size_t)r0 * wrow;
            out->q.scales = (const char *)W->q.scales + (size_t)r0 * gs * es;
            out->q.biases = (const char *)W->q.biases + (size_t)r0 * gs * es;
            return 0;
        }
        char *b = xaligned(out->nbytes + 2 * (size_t)nr * ngs * es);
        char *sc = b + out->nbytes, *bi = sc + (size_t)nr * ngs * es;
        for (int64_t i = 0; i < nr; i++) {
            memcpy(b + (size_t)i * nwrow, (const char *)W->data + (size_t)(r0 + i) * wrow + woff, nwrow);
            const size_t from = ((size_t)(r0 + i) * gs + (size_t)(c0 / u)) * es;
            memcpy(sc + (size_t)i * ngs * es, (const char *)W->q.scales + from, ngs * es);
            memcpy(bi + (size_t)i * ngs * es, (const char *)W->q.biases + from, ngs * es);
        }
        out->data = b, out->q.scales = sc, out->q.biases = bi;
        *owned = b;
        return 0;
    }
    if (dtype_is_quant(W->dtype)) {
        const size_t row = quant_row_bytes(W->dtype, 0, K), nrow = quant_row_bytes(W->dtype, 0, nc);
        const size_t off = quant_row_bytes(W->dtype, 0, c0);
        out->nbytes = (size_t)nr * nrow;
        if (whole) {
            out->data = (const char *)W->data + (size_t)r0 * row;
            return 0;
        }
        char *b = xaligned(out->nbytes);
        for (int64_t i = 0; i < nr; i++) memcpy(b + (size_t)i * nrow, (const char *)W->data + (size_t)(r0 + i) * row + off, nrow);
        out->data = b;
        *owned = b;
        return 0;
    }
    const size_t es = dtype_size(W->dtype);
    if (!es || W->dtype > DT_BF16) return ds_err(err, errlen, "tensor %s: %s is not a weight format", nm, dtype_name(W->dtype));
    out->nbytes = (size_t)(nr * nc) * es;
    if (whole && (!W->rows8 || (r0 % 8 == 0 && nr % 8 == 0))) {
        /* rows8 keeps each block of 8 rows as one run of 8 K elements */
        out->data = (const char *)W->data + (size_t)(r0 * K) * es;
        return 0;
    }
    char *b = xaligned(out->nbytes);
    for (int64_t i = 0; i < nr; i++) {
        if (!W->rows8) {
            memcpy(b + (size_t)(i * nc) * es, (const char *)W->data + (size_t)((r0 + i) * K + c0) * es, (size_t)nc * es);
            continue;
        }
        for (int64_t k = 0; k < nc; k++)
            memcpy(b + (size_t)(i * nc + k) * es, (const char *)W->data + tensor_off(K, 1, r0 + i, c0 + k) * es, es);
    }
    out->rows8 = 0;
    out->data = b;
    if (W->rows8 && tensor_rows8_ok(out)) {
        tensor_to_rows8(b, es, nr, nc);
        out->rows8 = 1;
    }
    *owned = b;
    return 0;
}

/* ---- the ranks' shares ------------------------------------------------------- */

void tpar_model_free(tpar_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    for (int r = 0; m->rank && r < m->plan.ranks; r++) {
        free(m->rank[r].layers);
        free(m->rank[r].moes);
    }
    free(m->rank);
    free(m->store);
    free((void *)m->expert_ptrs);
    free(m);
}

/* a slice of W kept by m (its tensor and any copy) */
static const tensor *keep(tpar_model *m, const tensor *W, int64_t r0, int64_t nr, int64_t c0, int64_t nc, char *err,
                          size_t errlen) {
    tensor t;
    void *own;
    if (tpar_slice(&t, &own, W, r0, nr, c0, nc, err, errlen) != 0) return NULL;
    if (own) {
        if (m->n_owned == m->cap_owned) {
            m->cap_owned = m->cap_owned ? 2 * m->cap_owned : 64;
            m->owned = realloc(m->owned, sizeof *m->owned * (size_t)m->cap_owned);
            if (!m->owned) abort();
        }
        m->owned[m->n_owned++] = own;
    }
    /* the store is sized before any slice is taken (no pointer into it moves) */
    m->store[m->n_store] = t;
    return &m->store[m->n_store++];
}

/* rows [r0, r0 + nr) of W, all columns */
static const tensor *rows(tpar_model *m, const tensor *W, int64_t r0, int64_t nr, char *err, size_t errlen) {
    return keep(m, W, r0, nr, 0, W->shape[1], err, errlen);
}

/* rank r's share of the input columns of W (o, down) */
static const tensor *cols(tpar_model *m, const tensor *W, int r, char *err, size_t errlen) {
    const int R = m->plan.ranks;
    if (tpar_check_cols(W, R, err, errlen) != 0) return NULL;
    const int64_t w = W->shape[1] / R;
    return keep(m, W, 0, W->shape[0], (int64_t)r * w, w, err, errlen);
}

static int rank_layer(tpar_model *m, int r, int l, char *err, size_t errlen) {
    const model_config *c = m->d->cfg;
    const tpar_plan *p = &m->plan;
    const wlayer *L = &m->d->layers[l];
    tpar_rank *k = &m->rank[r];
    wlayer *o = &k->layers[l];
    const int64_t hd = c->head_dim, q0 = (int64_t)tpar_q_head0(p, r) * hd, kv0 = (int64_t)tpar_kv_head0(p, c, r) * hd;
    const int64_t qn = (int64_t)p->heads * hd, kvn = (int64_t)p->kv_heads * hd;
    *o = *L;
    o->bo = NULL;
    o->post_attn_norm = o->post_mlp_norm = NULL;
    if (!(o->wq = rows(m, L->wq, q0, qn, err, errlen)) || !(o->wk = rows(m, L->wk, kv0, kvn, err, errlen)) ||
        !(o->wv = rows(m, L->wv, kv0, kvn, err, errlen)) || !(o->wo = cols(m, L->wo, r, err, errlen)))
        return -1;
    if (L->bq) o->bq = L->bq + q0, o->bk = L->bk + kv0, o->bv = L->bv + kv0;
    if (L->mlp != MLP_MOE) {
        const int64_t i0 = (int64_t)r * p->inter;
        if (!(o->wg = rows(m, L->wg, i0, p->inter, err, errlen)) || !(o->wu = rows(m, L->wu, i0, p->inter, err, errlen)) ||
            !(o->wd = cols(m, L->wd, r, err, errlen)))
            return -1;
        return 0;
    }
    const wmoe *e = L->moe;
    wmoe *x = &k->moes[l];
    const int E = e->n_experts;
    *x = *e;
    x->inter = p->moe_inter;
    const tensor **ptr = m->expert_ptrs + ((size_t)r * c->n_layers + (size_t)l) * 3 * (size_t)E;
    x->gate = ptr, x->up = ptr + E, x->down = ptr + 2 * E;
    const int64_t i0 = (int64_t)r * p->moe_inter;
    for (int j = 0; j < E; j++)
        if (!(ptr[j] = rows(m, e->gate[j], i0, p->moe_inter, err, errlen)) ||
            !(ptr[E + j] = rows(m, e->up[j], i0, p->moe_inter, err, errlen)) ||
            !(ptr[2 * E + j] = cols(m, e->down[j], r, err, errlen)))
            return -1;
    o->moe = x;
    return 0;
}

int tpar_model_make(tpar_model **out, const model_desc *d, int ranks, char *err, size_t errlen) {
    *out = NULL;
    const model_config *c = d->cfg;
    tpar_model *m = xcalloc(1, sizeof *m);
    if (tpar_plan_make(&m->plan, c, ranks, err, errlen) != 0) {
        free(m);
        return -1;
    }
    m->d = d;
    /* every slice a tensor of its own: 7 a layer (3 an expert), the embedding and the head */
    size_t per = 2;
    for (int l = 0; l < c->n_layers; l++) per += d->layers[l].moe ? 4 + 3 * (size_t)d->layers[l].moe->n_experts : 7;
    m->store = xcalloc(per * (size_t)ranks, sizeof(tensor));
    if (c->moe_experts > 0)
        m->expert_ptrs = xcalloc((size_t)ranks * (size_t)c->n_layers * 3 * (size_t)c->moe_experts, sizeof(tensor *));
    m->rank = xcalloc((size_t)ranks, sizeof *m->rank);
    for (int r = 0; r < ranks; r++) {
        tpar_rank *k = &m->rank[r];
        k->cfg = *c;
        k->cfg.n_heads = m->plan.heads;
        k->cfg.n_kv_heads = m->plan.kv_heads;
        if (m->plan.inter) k->cfg.intermediate_size = m->plan.inter;
        if (m->plan.moe_inter) k->cfg.moe_intermediate_size = m->plan.moe_inter;
        k->layers = xcalloc((size_t)c->n_layers, sizeof(wlayer));
        if (c->moe_experts > 0) k->moes = xcalloc((size_t)c->n_layers, sizeof(wmoe));
    }
    for (int r = 0; r < ranks; r++) {
        tpar_rank *k = &m->rank[r];
        for (int l = 0; l < c->n_layers; l++)
            if (rank_layer(m, r, l, err, errlen) != 0) goto fail;
        tpar_vocab(ranks, c->vocab_size, r, &k->v0, &k->v1);
        if (!(k->embed = rows(m, d->embed, k->v0, k->v1 - k->v0, err, errlen))) goto fail;
        k->lm_head = d->lm_head == d->embed ? k->embed : rows(m, d->lm_head, k->v0, k->v1 - k->v0, err, errlen);
        if (!k->lm_head) goto fail;
    }
    *out = m;
    return 0;
fail:
    tpar_model_free(m);
    return -1;
}
