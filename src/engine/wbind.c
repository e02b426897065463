/* wbind: see wbind.h. */
#include "engine/wbind.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ops.h"
#include "base/util.h"

void wbind_init(wbind *b, const st_set *st, const char *what, char *err, size_t errlen) {
    memset(b, 0, sizeof *b);
    b->st = st;
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

const tensor *wbind_get(wbind *b, const char *name, int64_t d0, int64_t d1) {
    claim(b, name);
    const tensor *t = st_set_find(b->st, name);
    if (!t) {
        ds_err(b->err, b->errlen, "missing tensor \"%s\" (required by %s config)", name, b->what);
        return NULL;
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
    return 2 * H + (c->qk_norm ? 2 * hd : 0) + (c->attention_bias ? QD + 2 * KD : 0) + (c->o_bias ? H : 0);
}

int wbind_layer(wbind *b, const char *prefix, const model_config *c, float **pool, wlayer *L) {
    L->attn = ATTN_CAUSAL; /* a drafter loader sets its own kind */
    L->mlp = MLP_SWIGLU;
    int64_t H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    int64_t QD = (int64_t)c->n_heads * hd, KD = (int64_t)c->n_kv_heads * hd;
    char name[256];
    memset(L, 0, sizeof *L);
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
    W(wg, "mlp.gate_proj.weight", I, H);
    W(wu, "mlp.up_proj.weight", I, H);
    W(wd, "mlp.down_proj.weight", H, I);
    F(attn_norm, "input_layernorm.weight", H);
    F(mlp_norm, "post_attention_layernorm.weight", H);
    if (c->qk_norm) {
        F(q_norm, "self_attn.q_norm.weight", hd);
        F(k_norm, "self_attn.k_norm.weight", hd);
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
