/* wbind: see wbind.h. */
#include "engine/wbind.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ops.h"
#include "engine/quant.h"
#include "base/util.h"

void wbind_init(wbind *b, st_set *st, const qspec *q, const char *what, char *err, size_t errlen) {
    memset(b, 0, sizeof *b);
    b->st = st;
    b->q = q;
    b->what = what;
    b->err = err;
    b->errlen = errlen;
}

void wbind_done(wbind *b) {
    for (int i = 0; i < b->n_names; i++) free(b->names[i]);
    free(b->names);
    b->names = NULL;
    b->n_names = b->cap_names = 0;
}

static void claim(wbind *b, const char *name) {
    if (b->n_names == b->cap_names) {
        b->cap_names = b->cap_names ? 2 * b->cap_names : 64;
        b->names = xrealloc(b->names, sizeof(char *) * (size_t)b->cap_names);
    }
    b->names[b->n_names++] = xstrdup(name);
}

static void shape_str(char *out, size_t n, const tensor *t) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < t->ndim && o < n - 24; i++)
        o += (size_t)snprintf(out + o, n - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
}

/* An MLX-quantized matrix: name's U32 words with module.scales and
 * module.biases beside them, joined into one DT_MLX tensor. */
static const tensor *mlx_weight(wbind *b, const char *name, const tensor *w, int64_t d0, int64_t d1) {
    char module[256], sn[300], bn[300], got[128];
    size_t nl = strlen(name);
    if (d1 <= 0 || nl < 8 || strcmp(name + nl - 7, ".weight") != 0 || nl - 7 >= sizeof module) {
        ds_err(b->err, b->errlen, "%s: tensor \"%s\" has dtype U32; expected BF16, F16 or F32", w->file, name);
        return NULL;
    }
    memcpy(module, name, nl - 7);
    module[nl - 7] = 0;
    snprintf(sn, sizeof sn, "%s.scales", module);
    snprintf(bn, sizeof bn, "%s.biases", module);
    claim(b, sn);
    claim(b, bn);
    const tensor *s = st_set_find(b->st, sn), *bi = st_set_find(b->st, bn);
    if (!s || !bi) {
        ds_err(b->err, b->errlen, "%s: tensor \"%s\" is U32 (MLX-quantized) but \"%s\" is missing", w->file, name,
               s ? bn : sn);
        return NULL;
    }
    if (!b->q || !b->q->bits) {
        ds_err(b->err, b->errlen,
               "%s: tensor \"%s\" is U32 (MLX-quantized) but config.json declares no \"quantization\"", w->file,
               name);
        return NULL;
    }
    shape_str(got, sizeof got, w);
    if (w->ndim != 2 || w->shape[0] != d0 || (w->shape[1] * 32) % d1 != 0) {
        ds_err(b->err, b->errlen, "%s: quantized tensor \"%s\" has words [%s]; expected [%lld, %lld * bits / 32]",
               w->file, name, got, (long long)d0, (long long)d1);
        return NULL;
    }
    int bits = (int)(w->shape[1] * 32 / d1);
    shape_str(got, sizeof got, s);
    if (s->ndim != 2 || s->shape[0] != d0 || s->shape[1] <= 0 || d1 % s->shape[1] != 0) {
        ds_err(b->err, b->errlen, "%s: tensor \"%s\" has shape [%s]; expected [%lld, %lld / group_size]", s->file,
               sn, got, (long long)d0, (long long)d1);
        return NULL;
    }
    int group = (int)(d1 / s->shape[1]);
    if (bi->ndim != 2 || bi->shape[0] != s->shape[0] || bi->shape[1] != s->shape[1] || bi->dtype != s->dtype) {
        ds_err(b->err, b->errlen, "%s: tensor \"%s\" differs from \"%s\" in shape or dtype", bi->file, bn, sn);
        return NULL;
    }
    int eb, eg;
    if (!qspec_for(b->q, module, &eb, &eg)) {
        ds_err(b->err, b->errlen, "%s: tensor \"%s\" is quantized but config.json declares \"%s\" unquantized",
               w->file, name, module);
        return NULL;
    }
    if (eb != bits || eg != group) {
        ds_err(b->err, b->errlen,
               "%s: tensor \"%s\" holds %d-bit values in groups of %d; config.json declares %d bits, group_size %d",
               w->file, name, bits, group, eb, eg);
        return NULL;
    }
    tensor q = *w;
    q.dtype = DT_MLX;
    q.shape[1] = d1;
    q.q.bits = bits;
    q.q.group = group;
    q.q.sdtype = s->dtype;
    q.q.scales = s->data;
    q.q.biases = bi->data;
    if (quant_check(&q, b->err, b->errlen) != 0) return NULL;
    return st_set_derive(b->st, &q);
}

const tensor *wbind_get(wbind *b, const char *name, int64_t d0, int64_t d1) {
    claim(b, name);
    const tensor *t = st_set_find(b->st, name);
    if (!t) {
        ds_err(b->err, b->errlen, "missing tensor \"%s\" (required by %s config)", name, b->what);
        return NULL;
    }
    if (t->dtype == DT_U32) return mlx_weight(b, name, t, d0, d1);
    if (dtype_is_quant(t->dtype) && d1 > 0) {
        char got[128];
        shape_str(got, sizeof got, t);
        if (t->ndim != 2 || t->shape[0] != d0 || t->shape[1] != d1) {
            ds_err(b->err, b->errlen, "%s: tensor \"%s\" has shape [%s]; expected [%lld, %lld]", t->file, name, got,
                   (long long)d0, (long long)d1);
            return NULL;
        }
        return quant_check(t, b->err, b->errlen) == 0 ? t : NULL;
    }
    if (t->dtype != DT_F32 && t->dtype != DT_F16 && t->dtype != DT_BF16) {
        ds_err(b->err, b->errlen, "%s: tensor \"%s\" has dtype %s; expected BF16, F16 or F32", t->file, name,
               dtype_name(t->dtype));
        return NULL;
    }
    int want_nd = d1 > 0 ? 2 : 1;
    if (t->ndim != want_nd || t->shape[0] != d0 || (want_nd == 2 && t->shape[1] != d1)) {
        char got[128] = "", want[64];
        size_t o = 0;
        for (int i = 0; i < t->ndim && o < sizeof got - 24; i++)
            o += (size_t)snprintf(got + o, sizeof got - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        if (want_nd == 2) snprintf(want, sizeof want, "%lld, %lld", (long long)d0, (long long)d1);
        else snprintf(want, sizeof want, "%lld", (long long)d0);
        ds_err(b->err, b->errlen, "%s: tensor \"%s\" has shape [%s]; expected [%s]", t->file, name, got, want);
        return NULL;
    }
    return t;
}

static int cmp_str(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

/* Tensors some exporters add that carry no weights we need. */
static int ignorable(const char *name) {
    size_t n = strlen(name);
    const char *suf = "rotary_emb.inv_freq";
    size_t s = strlen(suf);
    return n >= s && strcmp(name + n - s, suf) == 0;
}

int wbind_check_leftovers(wbind *b) {
    qsort(b->names, (size_t)b->n_names, sizeof(char *), cmp_str);
    for (int i = 0; i < st_set_count(b->st); i++) {
        const tensor *t = st_set_get(b->st, i);
        const char *key = t->name;
        if (ignorable(key)) continue;
        int skip = 0;
        for (int k = 0; k < b->n_skip; k++) skip |= strncmp(key, b->skip[k], strlen(b->skip[k])) == 0;
        if (skip) continue;
        if (!bsearch(&key, b->names, (size_t)b->n_names, sizeof(char *), cmp_str))
            return ds_err(b->err, b->errlen, "%s: unexpected tensor \"%s\" (not part of a %s with this config)",
                          t->file, t->name, b->what);
    }
    return 0;
}

float *wbind_f32(float **pool, const tensor *t) {
    if (!t) return NULL;
    float *p = *pool;
    op_to_f32(p, t->data, t->dtype, tensor_numel(t));
    *pool += tensor_numel(t);
    return p;
}

size_t wbind_layer_floats(const model_config *c) {
    size_t H = (size_t)c->hidden_size, hd = (size_t)c->head_dim;
    size_t QD = (size_t)c->n_heads * hd, KD = (size_t)c->n_kv_heads * hd;
    return (c->post_norms ? 4 : 2) * H + (c->qk_norm ? 2 * hd : 0) + (c->attention_bias ? QD + 2 * KD : 0) +
           (c->o_bias ? H : 0);
}

/* mlx-lm's layout of a mixture of experts: each of gate_proj, up_proj and
   down_proj stacked over the experts, module PREFIXmlp.switch_mlp.NAME
   ([E][rows][cols] floats, or [E][rows][words] U32 with [E][rows][groups]
   scales and biases under the module's declared bits and group size),
   sliced into one matrix an expert (views of the stacked data) */
static int switch_mlp(wbind *b, const char *prefix, const char *proj, int E, int64_t rows, int64_t cols,
                      const tensor **out) {
    char module[256], wn[300], sn[300], bn[300], got[128];
    snprintf(module, sizeof module, "%smlp.switch_mlp.%s", prefix, proj);
    snprintf(wn, sizeof wn, "%s.weight", module);
    claim(b, wn);
    const tensor *w = st_set_find(b->st, wn);
    if (!w) return ds_err(b->err, b->errlen, "missing tensor \"%s\" (required by %s config)", wn, b->what);
    shape_str(got, sizeof got, w);
    const int quant = w->dtype == DT_U32;
    if (w->ndim != 3 || w->shape[0] != E || w->shape[1] != rows || (!quant && w->shape[2] != cols) ||
        (quant && (w->shape[2] * 32) % cols != 0))
        return ds_err(b->err, b->errlen, "%s: tensor \"%s\" has shape [%s]; expected [%d, %lld, %lld%s]", w->file, wn,
                      got, E, (long long)rows, (long long)cols, quant ? " * bits / 32" : "");
    if (!quant && w->dtype != DT_F32 && w->dtype != DT_F16 && w->dtype != DT_BF16)
        return ds_err(b->err, b->errlen, "%s: tensor \"%s\" has dtype %s; expected BF16, F16, F32 or U32", w->file, wn,
                      dtype_name(w->dtype));
    const tensor *sc = NULL, *bi = NULL;
    int bits = 0, group = 0;
    if (quant) {
        snprintf(sn, sizeof sn, "%s.scales", module);
        snprintf(bn, sizeof bn, "%s.biases", module);
        claim(b, sn);
        claim(b, bn);
        sc = st_set_find(b->st, sn), bi = st_set_find(b->st, bn);
        if (!sc || !bi)
            return ds_err(b->err, b->errlen, "%s: tensor \"%s\" is U32 (MLX-quantized) but \"%s\" is missing", w->file,
                          wn, sc ? bn : sn);
        if (sc->ndim != 3 || sc->shape[0] != E || sc->shape[1] != rows || sc->shape[2] <= 0 || cols % sc->shape[2] ||
            bi->ndim != 3 || bi->shape[0] != E || bi->shape[1] != rows || bi->shape[2] != sc->shape[2] ||
            bi->dtype != sc->dtype)
            return ds_err(b->err, b->errlen, "%s: \"%s\" and \"%s\" must be [%d, %lld, %lld / group_size] alike", sc->file,
                          sn, bn, E, (long long)rows, (long long)cols);
        bits = (int)(w->shape[2] * 32 / cols), group = (int)(cols / sc->shape[2]);
        int eb, eg;
        if (!b->q || !b->q->bits || !qspec_for(b->q, module, &eb, &eg))
            return ds_err(b->err, b->errlen, "%s: tensor \"%s\" is quantized but config.json declares \"%s\" unquantized",
                          w->file, wn, module);
        if (eb != bits || eg != group)
            return ds_err(b->err, b->errlen,
                          "%s: tensor \"%s\" holds %d-bit values in groups of %d; config.json declares %d bits, "
                          "group_size %d",
                          w->file, wn, bits, group, eb, eg);
    }
    const size_t wb = w->nbytes / (size_t)E, sb = sc ? sc->nbytes / (size_t)E : 0;
    for (int e = 0; e < E; e++) {
        tensor t = *w;
        t.ndim = 2;
        t.shape[0] = rows;
        t.shape[1] = cols;
        t.data = (const char *)w->data + (size_t)e * wb;
        t.nbytes = wb;
        if (quant) {
            t.dtype = DT_MLX;
            t.q.bits = bits;
            t.q.group = group;
            t.q.sdtype = sc->dtype;
            t.q.scales = (const char *)sc->data + (size_t)e * sb;
            t.q.biases = (const char *)bi->data + (size_t)e * sb;
            if (quant_check(&t, b->err, b->errlen) != 0) return -1;
        }
        if (!(out[e] = st_set_derive(b->st, &t))) return ds_err(b->err, b->errlen, "out of memory");
    }
    return 0;
}

static int wbind_moe(wbind *b, const char *prefix, const model_config *c, wmoe *moe) {
    const int64_t H = c->hidden_size, Im = c->moe_intermediate_size;
    const int E = c->moe_experts;
    memset(moe, 0, sizeof *moe);
    moe->n_experts = E, moe->top_k = c->moe_top_k, moe->norm_topk = c->moe_norm_topk, moe->inter = (int)Im;
    moe->gate = xcalloc((size_t)E * 3, sizeof(tensor *));
    moe->up = moe->gate + E, moe->down = moe->up + E;
    char name[256];
    snprintf(name, sizeof name, "%smlp.gate.weight", prefix);
    if (!(moe->router = wbind_get(b, name, E, H))) return -1;
    snprintf(name, sizeof name, "%smlp.switch_mlp.gate_proj.weight", prefix);
    if (st_set_find(b->st, name))
        return switch_mlp(b, prefix, "gate_proj", E, Im, H, moe->gate) || switch_mlp(b, prefix, "up_proj", E, Im, H, moe->up) ||
                       switch_mlp(b, prefix, "down_proj", E, H, Im, moe->down)
                   ? -1
                   : 0;
    for (int e = 0; e < E; e++) {
        snprintf(name, sizeof name, "%smlp.experts.%d.gate_proj.weight", prefix, e);
        if (!(moe->gate[e] = wbind_get(b, name, Im, H))) return -1;
        snprintf(name, sizeof name, "%smlp.experts.%d.up_proj.weight", prefix, e);
        if (!(moe->up[e] = wbind_get(b, name, Im, H))) return -1;
        snprintf(name, sizeof name, "%smlp.experts.%d.down_proj.weight", prefix, e);
        if (!(moe->down[e] = wbind_get(b, name, H, Im))) return -1;
    }
    return 0;
}

int wbind_layer(wbind *b, const char *prefix, const model_config *c, int l, float **pool, wlayer *L, wmoe *moe) {
    int64_t H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    int64_t QD = (int64_t)c->n_heads * hd, KD = (int64_t)c->n_kv_heads * hd;
    char name[256];
    memset(L, 0, sizeof *L);
    L->attn = ATTN_CAUSAL; /* a drafter loader sets its own kind */
    L->mlp = MLP_SWIGLU;
    L->window = c->sliding[l] ? c->sliding_window : 0;
#define W(field, suffix, d0, d1)                                          \
    do {                                                                  \
        snprintf(name, sizeof name, "%s%s", prefix, suffix);              \
        if (!(L->field = wbind_get(b, name, d0, d1))) return -1;          \
    } while (0)
#define F(field, suffix, d0)                                              \
    do {                                                                  \
        snprintf(name, sizeof name, "%s%s", prefix, suffix);              \
        const tensor *t_ = wbind_get(b, name, d0, 0);                     \
        if (!t_) return -1;                                               \
        L->field = wbind_f32(pool, t_);                                   \
    } while (0)
    W(wq, "self_attn.q_proj.weight", QD, H);
    W(wk, "self_attn.k_proj.weight", KD, H);
    W(wv, "self_attn.v_proj.weight", KD, H);
    W(wo, "self_attn.o_proj.weight", H, QD);
    if (c->moe[l]) {
        L->mlp = MLP_MOE;
        if (c->mlp_gelu) return ds_err(b->err, b->errlen, "%s: a GELU-gated MoE layer is not supported", b->what);
        if (!moe || wbind_moe(b, prefix, c, moe) != 0) return -1;
        L->moe = moe;
    } else {
        W(wg, "mlp.gate_proj.weight", I, H);
        W(wu, "mlp.up_proj.weight", I, H);
        W(wd, "mlp.down_proj.weight", H, I);
        if (c->mlp_gelu) L->mlp = MLP_GEGLU;
    }
    F(attn_norm, "input_layernorm.weight", H);
    if (c->post_norms) { /* Gemma: post_attention_layernorm is the attention output's */
        F(post_attn_norm, "post_attention_layernorm.weight", H);
        F(mlp_norm, "pre_feedforward_layernorm.weight", H);
        F(post_mlp_norm, "post_feedforward_layernorm.weight", H);
    } else {
        F(mlp_norm, "post_attention_layernorm.weight", H);
    }
    if (c->qk_norm) {
        F(q_norm, "self_attn.q_norm.weight", hd);
        F(k_norm, "self_attn.k_norm.weight", hd);
    }
    if (c->norm_plus_one) { /* Gemma's RMSNorm scales by (1 + w), in f32 as transformers does */
        float *nw[] = {L->attn_norm, L->mlp_norm, L->post_attn_norm, L->post_mlp_norm, L->q_norm, L->k_norm};
        const int64_t nn[] = {H, H, H, H, hd, hd};
        for (int i = 0; i < 6; i++)
            for (int64_t j = 0; nw[i] && j < nn[i]; j++) nw[i][j] = 1.0f + nw[i][j];
    }
    if (c->attention_bias) {
        F(bq, "self_attn.q_proj.bias", QD);
        F(bk, "self_attn.k_proj.bias", KD);
        F(bv, "self_attn.v_proj.bias", KD);
    }
    if (c->o_bias) F(bo, "self_attn.o_proj.bias", H);
#undef W
#undef F
    return 0;
}

void wbind_moe_free(wmoe *moe) {
    free((void *)moe->gate);
    memset(moe, 0, sizeof *moe);
}
