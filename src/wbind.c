/* wbind: see wbind.h. */
#include "wbind.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "util.h"

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
