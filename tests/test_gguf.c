/* Tests of the GGUF reader (base/gguf.h) against files gguf-py's GGUFWriter
 * wrote (tests/data/gguf, tools/gen_gguf_fixtures.py) and against files
 * corrupted here, each of which must be refused with a message and no
 * out-of-bounds access (the images are exact-size heap copies, so ASan
 * sees any read past the end). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/gguf.h"
#include "base/util.h"
#include "test.h"

static char *fixture(const char *name) {
    static char p[4][512];
    static int k;
    char *b = p[k++ & 3];
    snprintf(b, 512, "%s/gguf/%s", test_data_dir(), name);
    return b;
}

static uint8_t *load(const char *name, size_t *n) {
    char err[256];
    uint8_t *d = (uint8_t *)ds_read_file(fixture(name), n, err, sizeof err);
    CHECK_MSG(d != NULL, "%s", err);
    return d;
}

TEST(gguf_types_read_back) {
    char err[512];
    gguf *g = NULL;
    for (int mode = 0; mode < 2; mode++) {
        CHECK_MSG(gguf_open(&g, fixture("types.gguf"), mode, err, sizeof err) == 0, "%s", err);
        if (!g) return;
        CHECK_EQ_INT(gguf_version(g), 3);
        int64_t i;
        double f;
        gguf_str s;
        const gguf_kv *kv;
        CHECK(gguf_get_int(g, "t.u8", &i) == 0 && i == 200);
        CHECK(gguf_get_int(g, "t.i8", &i) == 0 && i == -100);
        CHECK(gguf_get_int(g, "t.u16", &i) == 0 && i == 60000);
        CHECK(gguf_get_int(g, "t.i16", &i) == 0 && i == -30000);
        CHECK(gguf_get_int(g, "t.u32", &i) == 0 && i == 4000000000LL);
        CHECK(gguf_get_int(g, "t.i32", &i) == 0 && i == -2000000000LL);
        CHECK(gguf_get_int(g, "t.i64", &i) == 0 && i == -9000000000000000000LL);
        CHECK(gguf_get_int(g, "t.u64", &i) == -2); /* does not fit int64 */
        CHECK((kv = gguf_find(g, "t.u64")) && kv->type == GGUF_U64 && kv->u == 18000000000000000000ULL);
        CHECK(gguf_get_float(g, "t.f32", &f) == 0 && f == 1.5);
        CHECK(gguf_get_float(g, "t.f64", &f) == 0 && f == -2.25e100);
        CHECK(gguf_get_float(g, "t.i32", &f) == -2);
        CHECK(gguf_get_int(g, "t.f32", &i) == -2);
        CHECK(gguf_get_int(g, "absent", &i) == -1);
        CHECK((kv = gguf_find(g, "t.bool")) && kv->type == GGUF_BOOL && kv->u == 1);
        CHECK(gguf_get_int(g, "t.bool", &i) == -2);
        CHECK(gguf_get_str(g, "t.str", &s) == 0 && s.len == strlen("h\xc3\xa9llo GGUF") &&
              strcmp(s.s, "h\xc3\xa9llo GGUF") == 0);
        CHECK(gguf_get_str(g, "t.empty", &s) == 0 && s.len == 0 && s.s[0] == 0);
        CHECK(gguf_get_str(g, "t.u8", &s) == -2);
        CHECK(gguf_get_int(g, "general.alignment", &i) == 0 && i == 64);
        CHECK(gguf_get_str(g, "general.architecture", &s) == 0 && strcmp(s.s, "test") == 0);
        kv = gguf_find(g, "t.arr_i32");
        CHECK(kv && kv->type == GGUF_ARRAY && kv->elt == GGUF_I32 && kv->n == 3);
        if (kv) {
            const int32_t *a = kv->arr;
            CHECK(a[0] == 1 && a[1] == -2 && a[2] == 3);
        }
        kv = gguf_find(g, "t.arr_f32");
        CHECK(kv && kv->elt == GGUF_F32 && kv->n == 2 && ((const float *)kv->arr)[1] == -0.25f);
        kv = gguf_find(g, "t.arr_u8");
        CHECK(kv && kv->elt == GGUF_U8 && kv->n == 3 && ((const uint8_t *)kv->arr)[2] == 255);
        kv = gguf_find(g, "t.arr_i64");
        CHECK(kv && kv->elt == GGUF_I64 && kv->n == 2 && ((const int64_t *)kv->arr)[1] == (1LL << 40));
        kv = gguf_find(g, "t.arr_f64");
        CHECK(kv && kv->elt == GGUF_F64 && kv->n == 1 && ((const double *)kv->arr)[0] == 0.125);
        kv = gguf_find(g, "t.arr_bool");
        CHECK(kv && kv->elt == GGUF_BOOL && kv->n == 2 && ((const uint8_t *)kv->arr)[0] == 1);
        kv = gguf_find(g, "t.arr_str");
        CHECK(kv && kv->elt == GGUF_STRING && kv->n == 3);
        if (kv) {
            const gguf_str *a = kv->arr;
            CHECK(strcmp(a[0].s, "a") == 0 && a[1].len == 0 && a[2].len == 3 && strcmp(a[2].s, "ccc") == 0);
        }
        for (int k = 0; k < gguf_kv_count(g); k++) CHECK(gguf_find(g, gguf_kv_at(g, k)->key) == gguf_kv_at(g, k));

        /* float tensors: [2][3] of i * 0.5 - 3, ggml dims reversed */
        const gguf_tensor *t = gguf_find_tensor(g, "f32");
        CHECK(t && t->type == GGML_F32 && t->ndim == 2 && t->ne[0] == 3 && t->ne[1] == 2 && t->nbytes == 24);
        if (t)
            for (int k = 0; k < 6; k++) {
                float v;
                memcpy(&v, (const char *)t->data + 4 * k, 4);
                CHECK(v == k * 0.5f - 3);
            }
        t = gguf_find_tensor(g, "f16");
        CHECK(t && t->type == GGML_F16 && t->nbytes == 12);
        if (t)
            for (int k = 0; k < 6; k++) {
                uint16_t h;
                memcpy(&h, (const char *)t->data + 2 * k, 2);
                CHECK(ds_f16_to_f32(h) == k * 0.5f - 3);
            }
        t = gguf_find_tensor(g, "bf16");
        CHECK(t && t->type == GGML_BF16 && t->nbytes == 12);
        if (t)
            for (int k = 0; k < 6; k++) {
                uint16_t h;
                memcpy(&h, (const char *)t->data + 2 * k, 2);
                CHECK(ds_bf16_to_f32(h) == k * 0.5f - 3);
            }
        t = gguf_find_tensor(g, "vec");
        CHECK(t && t->ndim == 1 && t->ne[0] == 5 && t->ne[1] == 1);
        t = gguf_find_tensor(g, "cube");
        CHECK(t && t->ndim == 3 && t->ne[0] == 4 && t->ne[1] == 3 && t->ne[2] == 2 && t->nbytes == 96);
        /* every block type: 2 rows, bytes (i * 7 + seed) & 255 */
        static const struct { const char *name; uint32_t type; int blk, bytes; } Q[] = {
            {"q4_0", GGML_Q4_0, 32, 18}, {"q4_1", GGML_Q4_1, 32, 20}, {"q5_0", GGML_Q5_0, 32, 22},
            {"q5_1", GGML_Q5_1, 32, 24}, {"q8_0", GGML_Q8_0, 32, 34}, {"q2_k", GGML_Q2_K, 256, 84},
            {"q3_k", GGML_Q3_K, 256, 110}, {"q4_k", GGML_Q4_K, 256, 144}, {"q5_k", GGML_Q5_K, 256, 176},
            {"q6_k", GGML_Q6_K, 256, 210},
        };
        for (int q = 0; q < 10; q++) {
            t = gguf_find_tensor(g, Q[q].name);
            int nblk = Q[q].blk == 32 ? 2 : 1;
            CHECK_MSG(t && t->type == Q[q].type && t->ndim == 2 && t->ne[0] == nblk * Q[q].blk && t->ne[1] == 2 &&
                          t->nbytes == (size_t)(2 * nblk * Q[q].bytes),
                      "tensor %s", Q[q].name);
            CHECK(gguf_type_name(Q[q].type) != NULL);
            if (!t) continue;
            CHECK_EQ_INT((uintptr_t)((const uint8_t *)t->data - (const uint8_t *)gguf_find_tensor(g, "f32")->data) % 64, 0);
            const uint8_t *b = t->data;
            int bad = 0;
            for (size_t k = 0; k < t->nbytes; k++) bad += b[k] != (uint8_t)((k * 7 + (size_t)q) & 255);
            CHECK_EQ_INT(bad, 0);
        }
        CHECK_EQ_INT(gguf_tensor_count(g), 15);
        CHECK(strcmp(gguf_tensor_at(g, 0)->file, "types.gguf") == 0);
        CHECK(gguf_find_tensor(g, "nope") == NULL);
        CHECK(strcmp(gguf_type_name(GGML_Q4_K), "Q4_K") == 0 && gguf_type_name(16) == NULL);
        gguf_close(g);
        g = NULL;
    }
}

TEST(gguf_split_set) {
    char err[512];
    gguf *g = NULL;
    /* any part opens the set; metadata is the first part's */
    const char *names[] = {"split-00001-of-00003.gguf", "split-00003-of-00003.gguf"};
    for (int k = 0; k < 2; k++) {
        CHECK_MSG(gguf_open(&g, fixture(names[k]), k, err, sizeof err) == 0, "%s", err);
        if (!g) continue;
        CHECK_EQ_INT(gguf_tensor_count(g), 3);
        gguf_str s;
        CHECK(gguf_get_str(g, "t.first", &s) == 0 && strcmp(s.s, "part one") == 0);
        for (int i = 0; i < 3; i++) {
            char nm[8];
            snprintf(nm, sizeof nm, "t%d", i);
            const gguf_tensor *t = gguf_find_tensor(g, nm);
            CHECK(t && t->ne[0] == 4 && ((const float *)t->data)[3] == (float)i);
            char fn[64];
            snprintf(fn, sizeof fn, "split-%05d-of-00003.gguf", i + 1);
            CHECK(t && strcmp(t->file, fn) == 0);
        }
        gguf_close(g);
        g = NULL;
    }
    /* a missing part: copy two of the three into a scratch directory */
    char dir[600], p[700];
    snprintf(dir, sizeof dir, "%s/gguf-split", test_tmp_dir());
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s %s %s/", dir, fixture("split-00001-of-00003.gguf"),
             fixture("split-00002-of-00003.gguf"), dir);
    CHECK(system(cmd) == 0);
    snprintf(p, sizeof p, "%s/split-00001-of-00003.gguf", dir);
    CHECK(gguf_open(&g, p, 0, err, sizeof err) != 0 && strstr(err, "split-00003-of-00003.gguf"));
    /* a part renamed out of its place: its split.no disagrees */
    snprintf(cmd, sizeof cmd, "cp %s/split-00002-of-00003.gguf %s/split-00003-of-00003.gguf", dir, dir);
    CHECK(system(cmd) == 0);
    CHECK(gguf_open(&g, p, 0, err, sizeof err) != 0 && strstr(err, "split"));
    /* a part under a name that is not the split pattern */
    snprintf(cmd, sizeof cmd, "cp %s/split-00002-of-00003.gguf %s/lone.gguf", dir, dir);
    CHECK(system(cmd) == 0);
    snprintf(p, sizeof p, "%s/lone.gguf", dir);
    CHECK(gguf_open(&g, p, 0, err, sizeof err) != 0 && strstr(err, "siblings"));
    CHECK(g == NULL);
}

/* Parses an exact-size heap copy of d[0..n). */
static int parse_copy(const uint8_t *d, size_t n, char *err, size_t errlen) {
    uint8_t *c = xmalloc(n ? n : 1);
    memcpy(c, d, n);
    gguf *g = NULL;
    int rc = gguf_open_mem(&g, c, n, "x.gguf", err, errlen);
    if (rc == 0) {
        /* touch every tensor byte range's ends */
        volatile unsigned s = 0;
        for (int i = 0; i < gguf_tensor_count(g); i++) {
            const gguf_tensor *t = gguf_tensor_at(g, i);
            if (t->nbytes) s += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
        }
        (void)s;
    }
    gguf_close(g);
    free(c);
    return rc;
}

TEST(gguf_truncation) {
    size_t n;
    uint8_t *d = load("types.gguf", &n);
    if (!d) return;
    char err[512];
    CHECK_MSG(parse_copy(d, n, err, sizeof err) == 0, "%s", err);
    /* the last tensor's end: every shorter prefix must be refused */
    gguf *g = NULL;
    size_t need = 0;
    if (gguf_open_mem(&g, d, n, "t", err, sizeof err) == 0) {
        for (int i = 0; i < gguf_tensor_count(g); i++) {
            const gguf_tensor *t = gguf_tensor_at(g, i);
            size_t e = (size_t)((const uint8_t *)t->data - d) + t->nbytes;
            if (e > need) need = e;
        }
        gguf_close(g);
    }
    CHECK(need > 0 && need <= n);
    int bad = 0;
    for (size_t k = 0; k < need; k++) bad += parse_copy(d, k, err, sizeof err) == 0;
    CHECK_EQ_INT(bad, 0);
    CHECK(parse_copy(d, 100, err, sizeof err) != 0 && strstr(err, "x.gguf") && strstr(err, "truncated"));
    /* version 2 reads the same */
    d[4] = 2;
    CHECK_MSG(parse_copy(d, n, err, sizeof err) == 0, "%s", err);
    free(d);
}

/* ---- a tiny writer for hand-made (and hand-broken) files ---- */

typedef struct {
    uint8_t b[4096];
    size_t n;
} img;

static void put(img *m, const void *p, size_t k) {
    if (m->n + k <= sizeof m->b) memcpy(m->b + m->n, p, k);
    m->n += k;
}
static void u32(img *m, uint32_t v) { put(m, &v, 4); }
static void u64(img *m, uint64_t v) { put(m, &v, 8); }
static void str(img *m, const char *s) {
    u64(m, strlen(s));
    put(m, s, strlen(s));
}

typedef struct {
    const char *name;
    uint32_t ndim, type;
    uint64_t ne[5];
    uint64_t off;
} tinfo;

/* header with kvs already written by kvfn; tensors; padding; data bytes */
static void build(img *m, uint32_t version, uint64_t nkv, void (*kvfn)(img *), const tinfo *t, int nt, uint32_t align,
                  size_t data) {
    m->n = 0;
    put(m, "GGUF", 4);
    u32(m, version);
    u64(m, (uint64_t)nt);
    u64(m, nkv);
    if (kvfn) kvfn(m);
    for (int i = 0; i < nt; i++) {
        str(m, t[i].name);
        u32(m, t[i].ndim);
        for (uint32_t j = 0; j < t[i].ndim; j++) u64(m, t[i].ne[j]);
        u32(m, t[i].type);
        u64(m, t[i].off);
    }
    while (m->n % align) put(m, "", 1);
    for (size_t i = 0; i < data; i++) put(m, "\x11", 1);
}

static void kv_none(img *m) { (void)m; }
static void kv_str(img *m) {
    str(m, "a.key");
    u32(m, GGUF_STRING);
    str(m, "value");
}
static void kv_dup(img *m) {
    kv_str(m);
    kv_str(m);
}
static void kv_badtype(img *m) {
    str(m, "a.key");
    u32(m, 13);
    u32(m, 0);
}
static void kv_hugestr(img *m) {
    str(m, "a.key");
    u32(m, GGUF_STRING);
    u64(m, 1ULL << 62);
}
static void kv_hugekey(img *m) {
    u64(m, 0xffffffffffffff00ULL);
    u64(m, 0); /* room enough for the count check */
    u64(m, 0);
}
static void kv_nested(img *m) {
    str(m, "a.key");
    u32(m, GGUF_ARRAY);
    u32(m, GGUF_ARRAY);
    u64(m, 1);
    u32(m, GGUF_U8);
    u64(m, 1);
    put(m, "\1", 1);
}
static void kv_hugearr(img *m) {
    str(m, "a.key");
    u32(m, GGUF_ARRAY);
    u32(m, GGUF_U32);
    u64(m, 1ULL << 61);
}
static void kv_hugestrarr(img *m) {
    str(m, "a.key");
    u32(m, GGUF_ARRAY);
    u32(m, GGUF_STRING);
    u64(m, 3);
    str(m, "x");
    u64(m, 1ULL << 40);
}
static void kv_bool2(img *m) {
    str(m, "a.key");
    u32(m, GGUF_BOOL);
    put(m, "\2", 1);
}
static void kv_align48(img *m) {
    str(m, "general.alignment");
    u32(m, GGUF_U32);
    u32(m, 48);
}
static void kv_align_u64(img *m) {
    str(m, "general.alignment");
    u32(m, GGUF_U64);
    u64(m, 64);
}
static void kv_align16(img *m) {
    str(m, "general.alignment");
    u32(m, GGUF_U32);
    u32(m, 16);
}

TEST(gguf_corruptions) {
    char err[512];
    img m;
    const tinfo ok1[] = {{"w", 2, GGML_F32, {4, 2}, 0}};
    build(&m, 3, 1, kv_str, ok1, 1, 32, 32);
    CHECK_MSG(parse_copy(m.b, m.n, err, sizeof err) == 0, "%s", err);
    build(&m, 3, 1, kv_align16, ok1, 1, 16, 32); /* alignment 16 honoured */
    CHECK_MSG(parse_copy(m.b, m.n, err, sizeof err) == 0, "%s", err);
    build(&m, 3, 0, kv_none, NULL, 0, 1, 0); /* header only */
    CHECK_MSG(parse_copy(m.b, m.n, err, sizeof err) == 0, "%s", err);

    struct {
        const char *what, *msg;
        uint32_t version;
        uint64_t nkv;
        void (*kv)(img *);
        tinfo t[2];
        int nt;
        size_t data;
    } C[] = {
        {"bad version 1", "version 1", 1, 0, kv_none, {{0}}, 0, 0},
        {"bad version 4", "version 4", 4, 0, kv_none, {{0}}, 0, 0},
        {"big-endian", "big-endian", 0x03000000u, 0, kv_none, {{0}}, 0, 0},
        {"huge kv count", "metadata count", 3, 1ULL << 60, kv_none, {{0}}, 0, 0},
        {"duplicate key", "twice", 3, 2, kv_dup, {{0}}, 0, 0},
        {"unknown value type", "value type 13", 3, 1, kv_badtype, {{0}}, 0, 0},
        {"huge string", "string length", 3, 1, kv_hugestr, {{0}}, 0, 0},
        {"huge key", "string length", 3, 1, kv_hugekey, {{0}}, 0, 0},
        {"nested array", "nested", 3, 1, kv_nested, {{0}}, 0, 0},
        {"huge array", "array of", 3, 1, kv_hugearr, {{0}}, 0, 0},
        {"huge string in array", "element 1", 3, 1, kv_hugestrarr, {{0}}, 0, 0},
        {"bool 2", "bool", 3, 1, kv_bool2, {{0}}, 0, 0},
        {"alignment 48", "power of two", 3, 1, kv_align48, {{0}}, 0, 0},
        {"alignment u64", "general.alignment", 3, 1, kv_align_u64, {{0}}, 0, 0},
        {"misaligned", "not a multiple of the alignment", 3, 0, kv_none, {{"w", 1, GGML_F32, {4}, 4}}, 1, 64},
        {"out of range", "pass its end", 3, 0, kv_none, {{"w", 1, GGML_F32, {4}, 32}}, 1, 32},
        {"offset huge", "pass its end", 3, 0, kv_none, {{"w", 1, GGML_F32, {4}, 0xffffffffffffffe0ULL}}, 1, 32},
        {"overlap", "overlap", 3, 0, kv_none, {{"a", 1, GGML_F32, {16}, 0}, {"b", 1, GGML_F32, {4}, 32}}, 2, 96},
        {"same name", "twice", 3, 0, kv_none, {{"a", 1, GGML_F32, {4}, 0}, {"a", 1, GGML_F32, {4}, 32}}, 2, 64},
        {"unknown type", "unknown", 3, 0, kv_none, {{"w", 1, 99, {4}, 0}}, 1, 32},
        {"unsupported type", "IQ2_XXS", 3, 0, kv_none, {{"w", 1, 16, {256}, 0}}, 1, 128},
        {"row not a block multiple", "block of 32", 3, 0, kv_none, {{"w", 2, GGML_Q8_0, {48, 1}, 0}}, 1, 64},
        {"no dims", "dims", 3, 0, kv_none, {{"w", 0, GGML_F32, {0}, 0}}, 1, 32},
        {"5 dims", "dims", 3, 0, kv_none, {{"w", 5, GGML_F32, {1, 1, 1, 1, 1}, 0}}, 1, 32},
        {"size overflow", "overflows", 3, 0, kv_none, {{"w", 2, GGML_F32, {1ULL << 40, 1ULL << 40}, 0}}, 1, 32},
        {"dim overflow", "too large", 3, 0, kv_none, {{"w", 1, GGML_F32, {1ULL << 63}, 0}}, 1, 32},
        {"empty name", "name", 3, 0, kv_none, {{"", 1, GGML_F32, {4}, 0}}, 1, 32},
        {"long name", "name", 3, 0, kv_none,
         {{"a123456789012345678901234567890123456789012345678901234567890123", 1, GGML_F32, {4}, 0}}, 1, 32},
    };
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        build(&m, C[i].version, C[i].nkv, C[i].kv, C[i].t, C[i].nt, 32, C[i].data);
        err[0] = 0;
        int rc = parse_copy(m.b, m.n, err, sizeof err);
        CHECK_MSG(rc != 0 && strstr(err, C[i].msg) && strstr(err, "x.gguf"), "%s: rc %d, \"%s\"", C[i].what, rc, err);
    }
    /* bad magic; huge tensor count */
    build(&m, 3, 1, kv_str, ok1, 1, 32, 32);
    m.b[0] = 'X';
    CHECK(parse_copy(m.b, m.n, err, sizeof err) != 0 && strstr(err, "magic"));
    build(&m, 3, 1, kv_str, ok1, 1, 32, 32);
    uint64_t huge = 1ULL << 59;
    memcpy(m.b + 8, &huge, 8);
    CHECK(parse_copy(m.b, m.n, err, sizeof err) != 0 && strstr(err, "tensor count"));
    /* every single-byte corruption of a small valid file: no crash */
    build(&m, 3, 1, kv_str, ok1, 1, 32, 32);
    img c;
    for (size_t k = 0; k < m.n; k++)
        for (int v = 0; v < 256; v += 51) {
            c = m;
            c.b[k] = (uint8_t)v;
            (void)parse_copy(c.b, c.n, err, sizeof err);
        }
}
