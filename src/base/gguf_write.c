/* gguf_write: see gguf_write.h. */
#include "base/gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bytes;

static void put(bytes *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void put_u32(bytes *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(bytes *b, uint64_t v) { put(b, &v, 8); }
static void put_str(bytes *b, const char *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}

typedef struct {
    char *name;
    uint32_t type;
    int ndim;
    int64_t ne[4];
    size_t nbytes;
    uint64_t off; /* from the start of the data section, GGUF_W_ALIGN-aligned */
} wtensor;

struct gguf_writer {
    bytes kv;        /* the metadata pairs as the file spells them */
    uint64_t n_kv;
    char **keys;     /* for the duplicate check */
    wtensor *t;
    int n_t, cap_t;
    uint64_t data_size; /* the data section's size: last offset + size */
    char bad[256];      /* the first setter error, reported by begin */
    /* after begin */
    FILE *f;
    char *path, *tmp;
    int cur;        /* the tensor gguf_w_data is filling */
    size_t cur_n;   /* its bytes so far */
    uint64_t pos;   /* bytes of the data section written (padding included) */
};

gguf_writer *gguf_w_new(void) { return xcalloc(1, sizeof(gguf_writer)); }

void gguf_w_free(gguf_writer *w) {
    if (!w) return;
    if (w->f) {
        fclose(w->f);
        unlink(w->tmp);
    }
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    for (int i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w->kv.p);
    free(w->path);
    free(w->tmp);
    free(w);
}

/* Starts a pair: its key and value type. 0, or -1 (recorded) on a duplicate. */
static int kv_head(gguf_writer *w, const char *key, gguf_vtype type) {
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key)) {
            if (!w->bad[0]) snprintf(w->bad, sizeof w->bad, "metadata key %s written twice", key);
            return -1;
        }
    w->keys = xrealloc(w->keys, sizeof(char *) * (size_t)(w->n_kv + 1));
    w->keys[w->n_kv++] = xstrdup(key);
    put_str(&w->kv, key, strlen(key));
    put_u32(&w->kv, (uint32_t)type);
    return 0;
}

#define SCALAR(fn, ctype, vt)                                            \
    void fn(gguf_writer *w, const char *key, ctype v) {                  \
        if (kv_head(w, key, vt) == 0) put(&w->kv, &v, sizeof v);         \
    }
SCALAR(gguf_w_u8, uint8_t, GGUF_U8)
SCALAR(gguf_w_i8, int8_t, GGUF_I8)
SCALAR(gguf_w_u16, uint16_t, GGUF_U16)
SCALAR(gguf_w_i16, int16_t, GGUF_I16)
SCALAR(gguf_w_u32, uint32_t, GGUF_U32)
SCALAR(gguf_w_i32, int32_t, GGUF_I32)
SCALAR(gguf_w_u64, uint64_t, GGUF_U64)
SCALAR(gguf_w_i64, int64_t, GGUF_I64)
SCALAR(gguf_w_f32, float, GGUF_F32)
SCALAR(gguf_w_f64, double, GGUF_F64)
#undef SCALAR

void gguf_w_bool(gguf_writer *w, const char *key, int v) {
    uint8_t b = v ? 1 : 0; /* the file's bool is one byte, 0 or 1 */
    if (kv_head(w, key, GGUF_BOOL) == 0) put(&w->kv, &b, 1);
}

void gguf_w_str_n(gguf_writer *w, const char *key, const char *s, size_t len) {
    if (kv_head(w, key, GGUF_STRING) == 0) put_str(&w->kv, s, len);
}
void gguf_w_str(gguf_writer *w, const char *key, const char *s) { gguf_w_str_n(w, key, s, strlen(s)); }

static size_t vtype_size(gguf_vtype t) {
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

void gguf_w_arr(gguf_writer *w, const char *key, gguf_vtype elt, const void *vals, uint64_t n) {
    size_t es = vtype_size(elt);
    if (!es) {
        if (!w->bad[0]) snprintf(w->bad, sizeof w->bad, "metadata key %s: array of value type %d", key, (int)elt);
        return;
    }
    if (kv_head(w, key, GGUF_ARRAY) != 0) return;
    put_u32(&w->kv, (uint32_t)elt);
    put_u64(&w->kv, n);
    put(&w->kv, vals, es * (size_t)n);
}

void gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *s, const size_t *len, uint64_t n) {
    if (kv_head(w, key, GGUF_ARRAY) != 0) return;
    put_u32(&w->kv, GGUF_STRING);
    put_u64(&w->kv, n);
    for (uint64_t i = 0; i < n; i++) put_str(&w->kv, s[i], len ? len[i] : strlen(s[i]));
}

/* Block geometry of the ggml types the reader accepts (base/gguf.h). */
static int type_geom(uint32_t type, int *blk, size_t *bytes_per_blk) {
    static const struct { uint32_t t; int blk; size_t bytes; } G[] = {
        {GGML_F32, 1, 4},     {GGML_F16, 1, 2},     {GGML_BF16, 1, 2},    {GGML_Q4_0, 32, 18},
        {GGML_Q4_1, 32, 20},  {GGML_Q5_0, 32, 22},  {GGML_Q5_1, 32, 24},  {GGML_Q8_0, 32, 34},
        {GGML_Q2_K, 256, 84}, {GGML_Q3_K, 256, 110}, {GGML_Q4_K, 256, 144}, {GGML_Q5_K, 256, 176},
        {GGML_Q6_K, 256, 210},
    };
    for (size_t i = 0; i < sizeof G / sizeof G[0]; i++)
        if (G[i].t == type) {
            *blk = G[i].blk;
            *bytes_per_blk = G[i].bytes;
            return 0;
        }
    return -1;
}

size_t gguf_w_row_bytes(uint32_t type, int64_t ne0) {
    int blk;
    size_t bb;
    if (type_geom(type, &blk, &bb) != 0 || ne0 <= 0 || ne0 % blk) return 0;
    return (size_t)(ne0 / blk) * bb;
}

static uint64_t align_up(uint64_t x) { return (x + GGUF_W_ALIGN - 1) / GGUF_W_ALIGN * GGUF_W_ALIGN; }

int gguf_w_add_tensor(gguf_writer *w, const char *name, uint32_t type, int ndim, const int64_t *ne, char *err,
                      size_t errlen) {
    if (w->f) return ds_err(err, errlen, "gguf writer: tensor %s declared after the header was written", name);
    if (ndim < 1 || ndim > 4) return ds_err(err, errlen, "gguf writer: tensor %s has %d dims (1..4)", name, ndim);
    for (int i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name)) return ds_err(err, errlen, "gguf writer: tensor %s declared twice", name);
    size_t row = gguf_w_row_bytes(type, ne[0]);
    if (!row) return ds_err(err, errlen, "gguf writer: tensor %s: row length %lld does not fit ggml type %u", name,
                            (long long)ne[0], type);
    size_t nb = row;
    for (int i = 1; i < ndim; i++) {
        if (ne[i] <= 0) return ds_err(err, errlen, "gguf writer: tensor %s: dim %d is %lld", name, i, (long long)ne[i]);
        nb *= (size_t)ne[i];
    }
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? w->cap_t * 2 : 64;
        w->t = xrealloc(w->t, sizeof(wtensor) * (size_t)w->cap_t);
    }
    wtensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    t->name = xstrdup(name);
    t->type = type;
    t->ndim = ndim;
    for (int i = 0; i < 4; i++) t->ne[i] = i < ndim ? ne[i] : 1;
    t->nbytes = nb;
    t->off = align_up(w->data_size);
    w->data_size = t->off + nb;
    return 0;
}

static int wr(gguf_writer *w, const void *p, size_t n, char *err, size_t errlen) {
    if (n && fwrite(p, 1, n, w->f) != n)
        return ds_err(err, errlen, "%s: write failed: %s", w->tmp, strerror(errno));
    return 0;
}

int gguf_w_begin(gguf_writer *w, const char *path, char *err, size_t errlen) {
    if (w->bad[0]) return ds_err(err, errlen, "gguf writer: %s", w->bad);
    if (w->f || w->path) return ds_err(err, errlen, "gguf writer: begin called twice");
    size_t n = strlen(path) + 32;
    w->path = xstrdup(path);
    w->tmp = xmalloc(n);
    snprintf(w->tmp, n, "%s.tmp.%ld", path, (long)getpid());
    w->f = fopen(w->tmp, "wb");
    if (!w->f) return ds_err(err, errlen, "cannot write %s (creating %s): %s", path, w->tmp, strerror(errno));
    bytes h = {0};
    put(&h, "GGUF", 4);
    put_u32(&h, 3);
    put_u64(&h, (uint64_t)w->n_t);
    put_u64(&h, w->n_kv);
    put(&h, w->kv.p, w->kv.n);
    for (int i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(&h, t->name, strlen(t->name));
        put_u32(&h, (uint32_t)t->ndim);
        for (int d = 0; d < t->ndim; d++) put_u64(&h, (uint64_t)t->ne[d]);
        put_u32(&h, t->type);
        put_u64(&h, t->off);
    }
    static const uint8_t zero[GGUF_W_ALIGN];
    put(&h, zero, (size_t)(align_up(h.n) - h.n)); /* the data section starts aligned */
    int rc = wr(w, h.p, h.n, err, errlen);
    free(h.p);
    w->cur = 0;
    w->cur_n = 0;
    w->pos = 0;
    return rc;
}

int gguf_w_data(gguf_writer *w, const void *p, size_t n, char *err, size_t errlen) {
    if (!w->f) return ds_err(err, errlen, "gguf writer: data before begin");
    const uint8_t *b = p;
    static const uint8_t zero[GGUF_W_ALIGN];
    while (n) {
        if (w->cur >= w->n_t) return ds_err(err, errlen, "%s: more tensor data than declared", w->path);
        const wtensor *t = &w->t[w->cur];
        if (w->cur_n == 0 && w->pos < t->off) { /* the padding ahead of this tensor */
            if (wr(w, zero, (size_t)(t->off - w->pos), err, errlen)) return -1;
            w->pos = t->off;
        }
        size_t k = t->nbytes - w->cur_n;
        if (k > n) k = n;
        if (wr(w, b, k, err, errlen)) return -1;
        b += k;
        n -= k;
        w->cur_n += k;
        w->pos += k;
        if (w->cur_n == t->nbytes) {
            w->cur++;
            w->cur_n = 0;
        }
    }
    return 0;
}

int gguf_w_finish(gguf_writer *w, char *err, size_t errlen) {
    if (!w->f) return ds_err(err, errlen, "gguf writer: finish before begin");
    if (w->cur < w->n_t)
        return ds_err(err, errlen, "%s: tensor %s got %zu of its %zu bytes", w->path, w->t[w->cur].name, w->cur_n,
                      w->t[w->cur].nbytes);
    int bad = fflush(w->f) != 0 || fsync(fileno(w->f)) != 0;
    bad |= fclose(w->f) != 0;
    w->f = NULL;
    if (bad) {
        unlink(w->tmp);
        return ds_err(err, errlen, "%s: write failed: %s", w->tmp, strerror(errno));
    }
    if (rename(w->tmp, w->path) != 0) {
        int e = errno;
        unlink(w->tmp);
        return ds_err(err, errlen, "cannot rename %s to %s: %s", w->tmp, w->path, strerror(e));
    }
    return 0;
}
