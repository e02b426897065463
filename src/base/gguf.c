/* gguf: the strict GGUF reader (base/gguf.h).
 *
 * Layout of a file (little-endian throughout):
 *   "GGUF", u32 version (2 or 3), u64 n_tensors, u64 n_kv,
 *   n_kv x { string key, u32 value type, value },
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset },
 *   padding to general.alignment, then the data section; each tensor's
 *   offset is relative to the data section's start.
 * A string is u64 length + bytes (no NUL); an array is u32 element type +
 * u64 count + elements.
 *
 * Nothing read from the file is trusted before it is checked: every read
 * goes through a cursor that refuses to pass the end, counts are bounded by
 * the bytes left (each entry needs a minimum number of bytes), every size
 * product is checked for overflow. Strings and arrays are copied into an
 * arena the gguf owns, NUL-terminated and naturally aligned, so callers
 * never read the (possibly unaligned) file bytes for metadata. Tensor data
 * stays in the image (mapped, read, or the caller's memory). */
#include "base/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64 /* ggml's GGML_MAX_NAME: a tensor name is shorter */
#define GGUF_DEFAULT_ALIGN 32
#define GGUF_MAX_SPLITS 9999

/* ---- ggml types: block elements and bytes; blk 0: known, not accepted ---- */

typedef struct {
    const char *name;
    int blk;
    int bytes;
} type_info;

#define QK_K 256
static const type_info TYPES[] = {
    [GGML_F32] = {"F32", 1, 4},
    [GGML_F16] = {"F16", 1, 2},
    [GGML_Q4_0] = {"Q4_0", 32, 2 + 16},
    [GGML_Q4_1] = {"Q4_1", 32, 2 + 2 + 16},
    [4] = {"Q4_2", 0, 0},
    [5] = {"Q4_3", 0, 0},
    [GGML_Q5_0] = {"Q5_0", 32, 2 + 4 + 16},
    [GGML_Q5_1] = {"Q5_1", 32, 2 + 2 + 4 + 16},
    [GGML_Q8_0] = {"Q8_0", 32, 2 + 32},
    [9] = {"Q8_1", 0, 0},
    [GGML_Q2_K] = {"Q2_K", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4},
    [GGML_Q3_K] = {"Q3_K", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12},
    [GGML_Q4_K] = {"Q4_K", QK_K, 2 + 2 + QK_K / 2 + 12},
    [GGML_Q5_K] = {"Q5_K", QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12},
    [GGML_Q6_K] = {"Q6_K", QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16},
    [15] = {"Q8_K", 0, 0},
    [16] = {"IQ2_XXS", 0, 0},
    [17] = {"IQ2_XS", 0, 0},
    [18] = {"IQ3_XXS", 0, 0},
    [19] = {"IQ1_S", 0, 0},
    [20] = {"IQ4_NL", 0, 0},
    [21] = {"IQ3_S", 0, 0},
    [22] = {"IQ2_S", 0, 0},
    [23] = {"IQ4_XS", 0, 0},
    [24] = {"I8", 0, 0},
    [25] = {"I16", 0, 0},
    [26] = {"I32", 0, 0},
    [27] = {"I64", 0, 0},
    [28] = {"F64", 0, 0},
    [29] = {"IQ1_M", 0, 0},
    [GGML_BF16] = {"BF16", 1, 2},
    [34] = {"TQ1_0", 0, 0},
    [35] = {"TQ2_0", 0, 0},
    [39] = {"MXFP4", 0, 0},
};
#define N_TYPES (sizeof TYPES / sizeof TYPES[0])

const char *gguf_type_name(uint32_t type) {
    if (type >= N_TYPES || TYPES[type].blk == 0) return NULL;
    return TYPES[type].name;
}

static const char *VTYPE_NAMES[GGUF_VTYPE_COUNT] = {"u8",   "i8",    "u16", "i16", "u32", "i32", "f32",
                                                    "bool", "string", "array", "u64", "i64", "f64"};
/* bytes of a scalar of each type; 0 for string and array */
static const uint8_t VTYPE_SIZE[GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/* ---- arena: the gguf's copies of strings and arrays ---- */

typedef struct arena_blk {
    struct arena_blk *next;
    size_t used, cap;
    max_align_t data[]; /* aligned for any element type */
} arena_blk;

static void *arena_alloc(arena_blk **a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!*a || (*a)->cap - (*a)->used < n) {
        size_t cap = n > ((size_t)64 << 10) ? n : ((size_t)64 << 10);
        arena_blk *b = xmalloc(sizeof *b + cap);
        b->next = *a;
        b->used = 0;
        b->cap = cap;
        *a = b;
    }
    void *p = (char *)(*a)->data + (*a)->used;
    (*a)->used += n;
    return p;
}

static void arena_free(arena_blk *a) {
    while (a) {
        arena_blk *n = a->next;
        free(a);
        a = n;
    }
}

/* ---- one file of the set ---- */

typedef struct {
    char *path;            /* as opened (messages) */
    const char *base;      /* its base name (tensor .file) */
    const uint8_t *img;    /* the whole file */
    size_t size;
    void *map;             /* our mapping (mmap or anonymous), or NULL: caller's memory */
    uint32_t version;
    int nkv, nt;
    gguf_kv *kv;
    gguf_tensor *t;
    arena_blk *arena;
} part;

struct gguf {
    part *parts;
    int nparts;
    int nt;
    gguf_tensor *t;         /* the union of the parts' tensors, part by part */
    const gguf_tensor **tsorted; /* by name */
    const gguf_kv **kvsorted;    /* part 0's kvs by key */
};

/* ---- the cursor ---- */

typedef struct {
    const uint8_t *p;
    size_t n, off;
    const char *file;
    char *err;
    size_t errlen;
} rd;

static int rd_need(rd *r, size_t k, const char *what) {
    if (r->n - r->off < k)
        return ds_err(r->err, r->errlen, "%s: truncated: %s needs %zu bytes at offset %zu, file has %zu", r->file,
                      what, k, r->off, r->n);
    return 0;
}

static int rd_u32(rd *r, uint32_t *v, const char *what) {
    if (rd_need(r, 4, what)) return -1;
    uint32_t x = 0;
    for (int i = 3; i >= 0; i--) x = (x << 8) | r->p[r->off + (size_t)i];
    r->off += 4;
    *v = x;
    return 0;
}

static int rd_u64(rd *r, uint64_t *v, const char *what) {
    if (rd_need(r, 8, what)) return -1;
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = (x << 8) | r->p[r->off + (size_t)i];
    r->off += 8;
    *v = x;
    return 0;
}

/* A string into the arena (NUL-terminated). what names it in errors. */
static int rd_str(rd *r, arena_blk **a, gguf_str *s, const char *what) {
    uint64_t len;
    if (rd_u64(r, &len, what)) return -1;
    if (len > r->n - r->off)
        return ds_err(r->err, r->errlen, "%s: %s: string length %" PRIu64 " at offset %zu passes the end of the file (%zu)",
                      r->file, what, len, r->off - 8, r->n);
    char *c = arena_alloc(a, (size_t)len + 1);
    memcpy(c, r->p + r->off, (size_t)len);
    c[len] = 0;
    r->off += (size_t)len;
    s->s = c;
    s->len = (size_t)len;
    return 0;
}

/* Reads a scalar of type t (not string/array) into kv's fields. */
static void scalar_from(gguf_kv *kv, gguf_vtype t, const uint8_t *b) {
    uint64_t x = 0;
    for (int i = VTYPE_SIZE[t] - 1; i >= 0; i--) x = (x << 8) | b[i];
    switch (t) {
    case GGUF_U8: case GGUF_U16: case GGUF_U32: case GGUF_U64: case GGUF_BOOL:
        kv->u = x;
        kv->i = x <= (uint64_t)INT64_MAX ? (int64_t)x : 0;
        break;
    case GGUF_I8: kv->i = (int8_t)(uint8_t)x; break;
    case GGUF_I16: kv->i = (int16_t)(uint16_t)x; break;
    case GGUF_I32: kv->i = (int32_t)(uint32_t)x; break;
    case GGUF_I64: memcpy(&kv->i, &x, 8); break;
    case GGUF_F32: {
        uint32_t w = (uint32_t)x;
        float f;
        memcpy(&f, &w, 4);
        kv->f = f;
        break;
    }
    case GGUF_F64: memcpy(&kv->f, &x, 8); break;
    default: break;
    }
    if (t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64) kv->u = kv->i >= 0 ? (uint64_t)kv->i : 0;
}

static int rd_kv(rd *r, arena_blk **a, gguf_kv *kv, uint64_t idx) {
    char what[96];
    snprintf(what, sizeof what, "key %" PRIu64, idx);
    gguf_str key;
    if (rd_str(r, a, &key, what)) return -1;
    if (key.len == 0 || memchr(key.s, 0, key.len))
        return ds_err(r->err, r->errlen, "%s: key %" PRIu64 " is empty or holds a NUL byte", r->file, idx);
    kv->key = key.s;
    uint32_t t;
    if (rd_u32(r, &t, kv->key)) return -1;
    if (t >= GGUF_VTYPE_COUNT)
        return ds_err(r->err, r->errlen, "%s: key \"%s\": unknown value type %u", r->file, kv->key, t);
    kv->type = (gguf_vtype)t;
    if (t == GGUF_STRING) return rd_str(r, a, &kv->str, kv->key);
    if (t != GGUF_ARRAY) {
        if (rd_need(r, VTYPE_SIZE[t], kv->key)) return -1;
        const uint8_t *b = r->p + r->off;
        if (t == GGUF_BOOL && b[0] > 1)
            return ds_err(r->err, r->errlen, "%s: key \"%s\": bool value %u is neither 0 nor 1", r->file, kv->key, b[0]);
        scalar_from(kv, (gguf_vtype)t, b);
        r->off += VTYPE_SIZE[t];
        return 0;
    }
    uint32_t et;
    uint64_t n;
    if (rd_u32(r, &et, kv->key) || rd_u64(r, &n, kv->key)) return -1;
    if (et >= GGUF_VTYPE_COUNT)
        return ds_err(r->err, r->errlen, "%s: key \"%s\": unknown array element type %u", r->file, kv->key, et);
    if (et == GGUF_ARRAY) return ds_err(r->err, r->errlen, "%s: key \"%s\": nested arrays are not allowed", r->file, kv->key);
    kv->elt = (gguf_vtype)et;
    /* each element needs at least its size (a string its 8-byte length) */
    size_t esz = et == GGUF_STRING ? 8 : VTYPE_SIZE[et];
    if (n > (r->n - r->off) / esz)
        return ds_err(r->err, r->errlen, "%s: key \"%s\": array of %" PRIu64 " %s elements passes the end of the file",
                      r->file, kv->key, n, VTYPE_NAMES[et]);
    kv->n = n;
    if (et == GGUF_STRING) {
        gguf_str *ss = arena_alloc(a, (size_t)n * sizeof *ss + 1);
        for (uint64_t i = 0; i < n; i++) {
            snprintf(what, sizeof what, "key \"%.48s\" element %" PRIu64, kv->key, i);
            if (rd_str(r, a, &ss[i], what)) return -1;
        }
        kv->arr = ss;
        return 0;
    }
    size_t nb = (size_t)n * esz;
    uint8_t *d = arena_alloc(a, nb + 1);
    memcpy(d, r->p + r->off, nb); /* little-endian host: the packed copy is the values */
    if (et == GGUF_BOOL)
        for (size_t i = 0; i < nb; i++)
            if (d[i] > 1)
                return ds_err(r->err, r->errlen, "%s: key \"%s\": bool element %zu is neither 0 nor 1", r->file,
                              kv->key, i);
    r->off += nb;
    kv->arr = d;
    return 0;
}

/* ---- sorting helpers ---- */

static int cmp_kvp(const void *a, const void *b) {
    return strcmp((*(const gguf_kv *const *)a)->key, (*(const gguf_kv *const *)b)->key);
}
static int cmp_tp(const void *a, const void *b) {
    return strcmp((*(const gguf_tensor *const *)a)->name, (*(const gguf_tensor *const *)b)->name);
}
static int cmp_tkey(const void *key, const void *b) {
    return strcmp((const char *)key, (*(const gguf_tensor *const *)b)->name);
}
static int cmp_kkey(const void *key, const void *b) {
    return strcmp((const char *)key, (*(const gguf_kv *const *)b)->key);
}

typedef struct {
    uint64_t off, end;
    int idx;
} span;
static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : 0;
}

static const gguf_kv *part_find(const part *p, const char *key) {
    for (int i = 0; i < p->nkv; i++)
        if (strcmp(p->kv[i].key, key) == 0) return &p->kv[i];
    return NULL;
}

/* ---- parsing one image into a part ---- */

static int parse_part(part *p, char *err, size_t errlen) {
    rd r = {p->img, p->size, 0, p->path, err, errlen};
    if (p->size < 4 || memcmp(p->img, "GGUF", 4) != 0)
        return ds_err(err, errlen, "%s: not a GGUF file (bad magic)", p->path);
    r.off = 4;
    uint32_t ver;
    if (rd_u32(&r, &ver, "version")) return -1;
    if (ver == 1) return ds_err(err, errlen, "%s: GGUF version 1 is not supported (only 2 and 3)", p->path);
    if (ver != 2 && ver != 3) {
        if ((ver & 0xffff) == 0 && (ver >> 16) != 0)
            return ds_err(err, errlen, "%s: version 0x%08x: a big-endian GGUF file is not supported", p->path, ver);
        return ds_err(err, errlen, "%s: unsupported GGUF version %u (only 2 and 3)", p->path, ver);
    }
    p->version = ver;
    uint64_t nt, nkv;
    if (rd_u64(&r, &nt, "tensor count") || rd_u64(&r, &nkv, "metadata count")) return -1;
    /* a kv needs >= 13 bytes (key length, type, a 1-byte value), a tensor
       info >= 32 (name length, n_dims, one dim, type, offset) */
    size_t left = p->size - r.off;
    if (nkv > left / 13)
        return ds_err(err, errlen, "%s: metadata count %" PRIu64 " cannot fit in the file's %zu bytes", p->path, nkv,
                      p->size);
    if (nt > left / 32)
        return ds_err(err, errlen, "%s: tensor count %" PRIu64 " cannot fit in the file's %zu bytes", p->path, nt,
                      p->size);
    if (nkv > INT32_MAX || nt > INT32_MAX || nt + nkv > left / 13)
        return ds_err(err, errlen, "%s: %" PRIu64 " tensors and %" PRIu64 " keys cannot fit in the file's %zu bytes",
                      p->path, nt, nkv, p->size);
    p->kv = xcalloc(nkv ? (size_t)nkv : 1, sizeof *p->kv);
    for (uint64_t i = 0; i < nkv; i++) {
        if (rd_kv(&r, &p->arena, &p->kv[i], i)) return -1;
        p->nkv = (int)i + 1;
    }
    /* duplicate keys */
    if (p->nkv > 1) {
        const gguf_kv **s = xmalloc((size_t)p->nkv * sizeof *s);
        for (int i = 0; i < p->nkv; i++) s[i] = &p->kv[i];
        qsort(s, (size_t)p->nkv, sizeof *s, cmp_kvp);
        for (int i = 1; i < p->nkv; i++)
            if (strcmp(s[i - 1]->key, s[i]->key) == 0) {
                int rc = ds_err(err, errlen, "%s: key \"%s\" appears twice", p->path, s[i]->key);
                free(s);
                return rc;
            }
        free(s);
    }
    uint64_t align = GGUF_DEFAULT_ALIGN;
    const gguf_kv *ak = part_find(p, "general.alignment");
    if (ak) {
        if (ak->type != GGUF_U32)
            return ds_err(err, errlen, "%s: general.alignment has type %s, not u32", p->path, VTYPE_NAMES[ak->type]);
        if (ak->u == 0 || (ak->u & (ak->u - 1)))
            return ds_err(err, errlen, "%s: general.alignment %" PRIu64 " is not a power of two", p->path, ak->u);
        align = ak->u;
    }

    p->t = xcalloc(nt ? (size_t)nt : 1, sizeof *p->t);
    uint64_t *offs = xcalloc(nt ? (size_t)nt : 1, sizeof *offs);
    int rc = -1;
    for (uint64_t i = 0; i < nt; i++) {
        gguf_tensor *t = &p->t[i];
        char what[64];
        snprintf(what, sizeof what, "tensor %" PRIu64 " name", i);
        gguf_str nm;
        if (rd_str(&r, &p->arena, &nm, what)) goto out;
        if (nm.len == 0 || nm.len >= GGUF_MAX_NAME || memchr(nm.s, 0, nm.len)) {
            ds_err(err, errlen, "%s: tensor %" PRIu64 ": name \"%.80s\" is empty, holds a NUL or is %zu bytes (at most %d)",
                   p->path, i, nm.s, nm.len, GGUF_MAX_NAME - 1);
            goto out;
        }
        t->name = nm.s;
        t->file = p->base;
        p->nt = (int)i + 1;
        uint32_t nd;
        if (rd_u32(&r, &nd, t->name)) goto out;
        if (nd < 1 || nd > GGUF_MAX_DIMS) {
            ds_err(err, errlen, "%s: tensor \"%s\": %u dims (1 to %d allowed)", p->path, t->name, nd, GGUF_MAX_DIMS);
            goto out;
        }
        t->ndim = (int)nd;
        for (int j = 0; j < 4; j++) t->ne[j] = 1;
        for (uint32_t j = 0; j < nd; j++) {
            uint64_t v;
            if (rd_u64(&r, &v, t->name)) goto out;
            if (v > (uint64_t)INT64_MAX) {
                ds_err(err, errlen, "%s: tensor \"%s\": dim %u is %" PRIu64 ", too large", p->path, t->name, j, v);
                goto out;
            }
            t->ne[j] = (int64_t)v;
        }
        uint32_t ty;
        uint64_t off;
        if (rd_u32(&r, &ty, t->name) || rd_u64(&r, &off, t->name)) goto out;
        if (ty >= N_TYPES || TYPES[ty].blk == 0) {
            const char *tn = ty < N_TYPES ? TYPES[ty].name : NULL;
            ds_err(err, errlen, "%s: tensor \"%s\": ggml type %s (%u) is not supported", p->path, t->name,
                   tn ? tn : "unknown", ty);
            goto out;
        }
        t->type = ty;
        const type_info *ti = &TYPES[ty];
        if (t->ne[0] % ti->blk) {
            ds_err(err, errlen, "%s: tensor \"%s\": row length %" PRId64 " is not a multiple of %s's block of %d",
                   p->path, t->name, t->ne[0], ti->name, ti->blk);
            goto out;
        }
        /* bytes = ne0/blk * block bytes * ne1 * ne2 * ne3, each step checked */
        uint64_t nb = (uint64_t)(t->ne[0] / ti->blk);
        int ovf = __builtin_mul_overflow(nb, (uint64_t)ti->bytes, &nb);
        for (int j = 1; j < 4 && !ovf; j++) ovf = __builtin_mul_overflow(nb, (uint64_t)t->ne[j], &nb);
        if (ovf || nb > (uint64_t)SIZE_MAX) {
            ds_err(err, errlen, "%s: tensor \"%s\": byte size overflows", p->path, t->name);
            goto out;
        }
        if (off % align) {
            ds_err(err, errlen, "%s: tensor \"%s\": offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                   p->path, t->name, off, align);
            goto out;
        }
        t->nbytes = (size_t)nb;
        offs[i] = off;
    }
    /* data section: after the infos, padded to the alignment */
    uint64_t ds = ((uint64_t)r.off + align - 1) / align * align;
    if (nt > 0 && ds > p->size) {
        ds_err(err, errlen, "%s: data section would start at %" PRIu64 ", past the end of the file (%zu)", p->path, ds,
               p->size);
        goto out;
    }
    uint64_t dsize = nt > 0 ? p->size - ds : 0;
    span *sp = xmalloc((nt ? (size_t)nt : 1) * sizeof *sp);
    for (uint64_t i = 0; i < nt; i++) {
        gguf_tensor *t = &p->t[i];
        if (offs[i] > dsize || t->nbytes > dsize - offs[i]) {
            ds_err(err, errlen,
                   "%s: tensor \"%s\": bytes [%" PRIu64 ", %" PRIu64 ") of the data section pass its end (%" PRIu64
                   " bytes; truncated?)",
                   p->path, t->name, offs[i], offs[i] + (uint64_t)t->nbytes, dsize);
            free(sp);
            goto out;
        }
        t->data = p->img + ds + offs[i];
        sp[i] = (span){offs[i], offs[i] + t->nbytes, (int)i};
    }
    qsort(sp, (size_t)nt, sizeof *sp, cmp_span);
    /* sorted by start, a tensor overlaps an earlier one iff it starts
       before the furthest end seen so far; empty tensors overlap nothing */
    uint64_t far = 0;
    int far_idx = -1;
    for (uint64_t i = 0; i < nt; i++) {
        if (sp[i].end == sp[i].off) continue;
        if (far_idx >= 0 && sp[i].off < far) {
            ds_err(err, errlen, "%s: tensors \"%s\" and \"%s\" overlap in the data section", p->path,
                   p->t[far_idx].name, p->t[sp[i].idx].name);
            free(sp);
            goto out;
        }
        far = sp[i].end;
        far_idx = sp[i].idx;
    }
    free(sp);
    rc = 0;
out:
    free(offs);
    return rc;
}

static void part_free(part *p) {
    free(p->kv);
    free(p->t);
    arena_free(p->arena);
    if (p->map) munmap(p->map, p->size ? p->size : 1);
    free(p->path);
}

void gguf_close(gguf *g) {
    if (!g) return;
    for (int i = 0; i < g->nparts; i++) part_free(&g->parts[i]);
    free(g->parts);
    free(g->t);
    free(g->tsorted);
    free(g->kvsorted);
    free(g);
}

/* Builds the union of the parts' tensors and the lookup indexes; refuses a
 * tensor name that two tensors share (in one part or across parts). */
static int finish(gguf *g, char *err, size_t errlen) {
    int n = 0;
    for (int i = 0; i < g->nparts; i++) n += g->parts[i].nt;
    g->nt = n;
    g->t = xmalloc((n ? (size_t)n : 1) * sizeof *g->t);
    g->tsorted = xmalloc((n ? (size_t)n : 1) * sizeof *g->tsorted);
    int k = 0;
    for (int i = 0; i < g->nparts; i++)
        for (int j = 0; j < g->parts[i].nt; j++) g->t[k++] = g->parts[i].t[j];
    for (int i = 0; i < n; i++) g->tsorted[i] = &g->t[i];
    qsort(g->tsorted, (size_t)n, sizeof *g->tsorted, cmp_tp);
    for (int i = 1; i < n; i++)
        if (strcmp(g->tsorted[i - 1]->name, g->tsorted[i]->name) == 0)
            return ds_err(err, errlen, "%s: tensor \"%s\" appears twice (in %s and %s)", g->parts[0].path,
                          g->tsorted[i]->name, g->tsorted[i - 1]->file, g->tsorted[i]->file);
    part *p0 = &g->parts[0];
    g->kvsorted = xmalloc((p0->nkv ? (size_t)p0->nkv : 1) * sizeof *g->kvsorted);
    for (int i = 0; i < p0->nkv; i++) g->kvsorted[i] = &p0->kv[i];
    qsort(g->kvsorted, (size_t)p0->nkv, sizeof *g->kvsorted, cmp_kvp);
    return 0;
}

static const char *base_of(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int gguf_open_mem(gguf **out, const void *data, size_t size, const char *name, char *err, size_t errlen) {
    *out = NULL;
    gguf *g = xcalloc(1, sizeof *g);
    g->parts = xcalloc(1, sizeof *g->parts);
    g->nparts = 1;
    part *p = &g->parts[0];
    p->path = xstrdup(name ? name : "<memory>");
    p->base = base_of(p->path);
    p->img = data;
    p->size = data ? size : 0;
    if (parse_part(p, err, errlen) || finish(g, err, errlen)) {
        gguf_close(g);
        return -1;
    }
    *out = g;
    return 0;
}

/* Maps or reads path into p. */
static int load_file(part *p, const char *path, int read_into_memory, char *err, size_t errlen) {
    p->path = xstrdup(path);
    p->base = base_of(p->path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ds_err(err, errlen, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ds_err(err, errlen, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    if (size < 24) {
        close(fd);
        return ds_err(err, errlen, "%s: %zu bytes, too short for a GGUF header (truncated?)", path, size);
    }
    void *m;
    if (read_into_memory) {
        m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            close(fd);
            return ds_err(err, errlen, "%s: cannot allocate %.1f MiB to load it", path, (double)size / 1048576.0);
        }
        size_t done = 0;
        while (done < size) {
            size_t want = size - done < ((size_t)1 << 30) ? size - done : ((size_t)1 << 30);
            ssize_t r = pread(fd, (char *)m + done, want, (off_t)done);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                int e = errno;
                close(fd);
                munmap(m, size);
                return ds_err(err, errlen, "%s: read failed at byte %zu: %s", path, done,
                              r < 0 ? strerror(e) : "unexpected end");
            }
            done += (size_t)r;
        }
        mprotect(m, size, PROT_READ);
    } else {
        m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return ds_err(err, errlen, "%s: mmap failed: %s", path, strerror(e));
        }
    }
    close(fd);
    p->map = m;
    p->img = m;
    p->size = size;
    return parse_part(p, err, errlen);
}

/* An integer key of a split part, or -1 with err set. */
static int split_int(const part *p, const char *key, int64_t lo, int64_t hi, int64_t *v, char *err, size_t errlen) {
    const gguf_kv *kv = part_find(p, key);
    if (!kv) return ds_err(err, errlen, "%s: split part lacks \"%s\"", p->path, key);
    if (kv->type == GGUF_STRING || kv->type == GGUF_ARRAY || kv->type == GGUF_BOOL || kv->type == GGUF_F32 ||
        kv->type == GGUF_F64 || (kv->type == GGUF_U64 && kv->u > (uint64_t)INT64_MAX))
        return ds_err(err, errlen, "%s: \"%s\" is not an integer", p->path, key);
    if (kv->i < lo || kv->i > hi)
        return ds_err(err, errlen, "%s: \"%s\" is %" PRId64 " (expected %" PRId64 "..%" PRId64 ")", p->path, key,
                      kv->i, lo, hi);
    *v = kv->i;
    return 0;
}

int gguf_open(gguf **out, const char *path, int read_into_memory, char *err, size_t errlen) {
    *out = NULL;
    gguf *g = xcalloc(1, sizeof *g);
    g->parts = xcalloc(1, sizeof *g->parts);
    g->nparts = 1;
    if (load_file(&g->parts[0], path, read_into_memory, err, errlen)) goto fail;
    const gguf_kv *sc = part_find(&g->parts[0], "split.count");
    if (sc) {
        int64_t count, no;
        if (split_int(&g->parts[0], "split.count", 1, GGUF_MAX_SPLITS, &count, err, errlen) ||
            split_int(&g->parts[0], "split.no", 0, count - 1, &no, err, errlen))
            goto fail;
        if (count > 1) {
            /* siblings: PREFIX-%05d-of-%05d.gguf, this file one of them */
            size_t L = strlen(path);
            const char *tail = L >= 20 ? path + L - 20 : NULL; /* "-00001-of-00003.gguf" */
            int a = 0, b = 0, okname = tail && tail[0] == '-' && strcmp(tail + 15, ".gguf") == 0 &&
                                      memcmp(tail + 6, "-of-", 4) == 0;
            for (int i = 0; okname && i < 5; i++) {
                okname = tail[1 + i] >= '0' && tail[1 + i] <= '9' && tail[10 + i] >= '0' && tail[10 + i] <= '9';
                a = a * 10 + (tail[1 + i] - '0');
                b = b * 10 + (tail[10 + i] - '0');
            }
            if (!okname) {
                ds_err(err, errlen, "%s: split part %" PRId64 " of %" PRId64
                       " but the name is not PREFIX-NNNNN-of-NNNNN.gguf, so its siblings cannot be found",
                       path, no + 1, count);
                goto fail;
            }
            if (a != no + 1 || b != count) {
                ds_err(err, errlen, "%s: the name says part %d of %d but split.no/split.count say %" PRId64 " of %" PRId64,
                       path, a, b, no + 1, count);
                goto fail;
            }
            part given = g->parts[0];
            free(g->parts);
            g->parts = xcalloc((size_t)count, sizeof *g->parts);
            g->nparts = (int)count;
            g->parts[no] = given;
            size_t plen = L - 20;
            char *pp = xmalloc(L + 1);
            for (int64_t i = 0; i < count; i++) {
                if (i == no) continue;
                snprintf(pp, L + 1, "%.*s-%05d-of-%05d.gguf", (int)plen, path, (int)(i + 1), (int)count);
                if (load_file(&g->parts[i], pp, read_into_memory, err, errlen)) {
                    free(pp);
                    goto fail;
                }
            }
            free(pp);
            int64_t total = 0, sum = 0;
            for (int64_t i = 0; i < count; i++) {
                int64_t c2, n2;
                part *q = &g->parts[i];
                if (split_int(q, "split.count", 1, GGUF_MAX_SPLITS, &c2, err, errlen) ||
                    split_int(q, "split.no", 0, GGUF_MAX_SPLITS, &n2, err, errlen))
                    goto fail;
                if (c2 != count || n2 != i) {
                    ds_err(err, errlen, "%s: split.no %" PRId64 " / split.count %" PRId64 ", expected %" PRId64
                           " / %" PRId64, q->path, n2, c2, i, count);
                    goto fail;
                }
                sum += q->nt;
            }
            if (split_int(&g->parts[0], "split.tensors.count", 0, INT32_MAX, &total, err, errlen)) goto fail;
            if (total != sum) {
                ds_err(err, errlen, "%s: split.tensors.count is %" PRId64 " but the %" PRId64 " parts hold %" PRId64
                       " tensors", g->parts[0].path, total, count, sum);
                goto fail;
            }
        }
    }
    if (finish(g, err, errlen)) goto fail;
    *out = g;
    return 0;
fail:
    gguf_close(g);
    return -1;
}

/* ---- lookups ---- */

uint32_t gguf_version(const gguf *g) { return g->parts[0].version; }
int gguf_kv_count(const gguf *g) { return g->parts[0].nkv; }
const gguf_kv *gguf_kv_at(const gguf *g, int i) {
    return i >= 0 && i < g->parts[0].nkv ? &g->parts[0].kv[i] : NULL;
}
const gguf_kv *gguf_find(const gguf *g, const char *key) {
    const gguf_kv **r = bsearch(key, g->kvsorted, (size_t)g->parts[0].nkv, sizeof *g->kvsorted, cmp_kkey);
    return r ? *r : NULL;
}

int gguf_get_int(const gguf *g, const char *key, int64_t *v) {
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return -1;
    switch (kv->type) {
    case GGUF_U8: case GGUF_U16: case GGUF_U32: case GGUF_I8: case GGUF_I16: case GGUF_I32: case GGUF_I64:
        *v = kv->i;
        return 0;
    case GGUF_U64:
        if (kv->u > (uint64_t)INT64_MAX) return -2;
        *v = (int64_t)kv->u;
        return 0;
    default: return -2;
    }
}

int gguf_get_float(const gguf *g, const char *key, double *v) {
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return -1;
    if (kv->type != GGUF_F32 && kv->type != GGUF_F64) return -2;
    *v = kv->f;
    return 0;
}

int gguf_get_str(const gguf *g, const char *key, gguf_str *v) {
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return -1;
    if (kv->type != GGUF_STRING) return -2;
    *v = kv->str;
    return 0;
}

int gguf_tensor_count(const gguf *g) { return g->nt; }
const gguf_tensor *gguf_tensor_at(const gguf *g, int i) { return i >= 0 && i < g->nt ? &g->t[i] : NULL; }
const gguf_tensor *gguf_find_tensor(const gguf *g, const char *name) {
    const gguf_tensor **r = bsearch(name, g->tsorted, (size_t)g->nt, sizeof *g->tsorted, cmp_tkey);
    return r ? *r : NULL;
}
