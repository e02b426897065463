/* Tests for tensor.c and safetensors.c: good files (f32/f16/bf16, sharded
 * sets with an index) and every malformed case the loader must refuse with
 * an error naming the file and the tensor. Fixtures are written from C into
 * the scratch directory, so no binary files are committed. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/safetensors.h"
#include "test.h"
#include "base/util.h"

/* ---- fixture writers ---- */

static const char *sub_dir(const char *name) {
    static char path[8][512];
    static int k;
    char *p = path[k++ % 8];
    snprintf(p, 512, "%s/%s", test_tmp_dir(), name);
    if (mkdir(p, 0755) != 0 && errno != EEXIST) perror(p);
    return p;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return;
    }
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

/* Builds an image: u64 header length (hlen_override when nonzero, else the
 * real one), the header, then data. Caller frees. */
static unsigned char *make_image(const char *header, const void *data, size_t dlen, uint64_t hlen_override,
                                 size_t *out_n) {
    size_t hl = strlen(header);
    size_t n = 8 + hl + dlen;
    unsigned char *buf = xmalloc(n);
    uint64_t L = hlen_override ? hlen_override : hl;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(L >> (8 * i));
    memcpy(buf + 8, header, hl);
    if (dlen) memcpy(buf + 8 + hl, data, dlen);
    *out_n = n;
    return buf;
}

static void write_st(const char *path, const char *header, const void *data, size_t dlen) {
    size_t n;
    unsigned char *img = make_image(header, data, dlen, 0, &n);
    write_bytes(path, img, n);
    free(img);
}

/* The good three-tensor file: a F32 [2,3], b F16 [4], c BF16 [2,2]. */
static const float A_VALS[6] = {1.0f, -2.0f, 3.5f, 0.25f, 100.0f, -0.125f};
static const float B_VALS[4] = {0.5f, -1.0f, 65504.0f, 0.0f};
static const float C_VALS[4] = {3.140625f, -7.5f, 1e-3f, 2.0f};

static size_t good_data(unsigned char *d) {
    memcpy(d, A_VALS, 24);
    for (int i = 0; i < 4; i++) {
        uint16_t h = ds_f32_to_f16(B_VALS[i]);
        memcpy(d + 24 + 2 * i, &h, 2);
    }
    for (int i = 0; i < 4; i++) {
        uint16_t h = ds_f32_to_bf16(C_VALS[i]);
        memcpy(d + 32 + 2 * i, &h, 2);
    }
    return 40;
}

#define GOOD_HEADER                                                                                            \
    "{\"__metadata__\":{\"format\":\"pt\"},"                                                                  \
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"                                        \
    "\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[24,32]},"                                         \
    "\"c\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[32,40]}}      "

/* the same tensors, listed in another order */
#define GOOD_HEADER_REV                                                                                        \
    "{\"c\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[32,40]},"                                     \
    "\"b\":{\"data_offsets\":[24,32],\"shape\":[4],\"dtype\":\"F16\"},"                                         \
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}"

static void check_good(const st_file *f, const char *file) {
    CHECK_EQ_INT(st_count(f), 3);
    const tensor *a = st_find(f, "a"), *b = st_find(f, "b"), *c = st_find(f, "c");
    CHECK(a && b && c);
    if (!a || !b || !c) return;
    CHECK(st_find(f, "d") == NULL);
    CHECK(st_find(f, "") == NULL);
    CHECK_EQ_INT(a->dtype, DT_F32);
    CHECK_EQ_INT(a->ndim, 2);
    CHECK_EQ_INT(a->shape[0], 2);
    CHECK_EQ_INT(a->shape[1], 3);
    CHECK_EQ_INT(a->nbytes, 24);
    CHECK_EQ_INT(tensor_numel(a), 6);
    CHECK(strcmp(a->file, file) == 0);
    for (int i = 0; i < 6; i++) {
        float v;
        memcpy(&v, (const char *)a->data + 4 * i, 4);
        CHECK_NEAR(v, A_VALS[i], 0);
    }
    CHECK_EQ_INT(b->dtype, DT_F16);
    CHECK_EQ_INT(b->ndim, 1);
    CHECK_EQ_INT(b->nbytes, 8);
    for (int i = 0; i < 4; i++) {
        uint16_t h;
        memcpy(&h, (const char *)b->data + 2 * i, 2);
        CHECK_NEAR(ds_f16_to_f32(h), B_VALS[i], 0);
    }
    CHECK_EQ_INT(c->dtype, DT_BF16);
    CHECK_EQ_INT(tensor_numel(c), 4);
    for (int i = 0; i < 4; i++) {
        uint16_t h;
        memcpy(&h, (const char *)c->data + 2 * i, 2);
        CHECK_NEAR(ds_bf16_to_f32(h), C_VALS[i], fabs(C_VALS[i]) * 0.004);
    }
    CHECK((const char *)b->data == (const char *)a->data + 24);
    CHECK((const char *)c->data == (const char *)a->data + 32);
}

TEST(dtype_table) {
    CHECK_EQ_INT(dtype_size(DT_F32), 4);
    CHECK_EQ_INT(dtype_size(DT_BF16), 2);
    CHECK_EQ_INT(dtype_size(DT_F64), 8);
    CHECK_EQ_INT(dtype_size(DT_F8_E5M2), 1);
    CHECK_EQ_INT(dtype_size(DT_COUNT), 0);
    const char *names[] = {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL", "F8_E4M3", "F8_E5M2"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        ds_dtype t = DT_COUNT;
        CHECK_EQ_INT(dtype_from_name(names[i], &t), 0);
        CHECK(strcmp(dtype_name(t), names[i]) == 0);
    }
    ds_dtype t;
    CHECK_EQ_INT(dtype_from_name("bf16", &t), -1);
    CHECK_EQ_INT(dtype_from_name("Q4_0", &t), -1);
    CHECK_EQ_INT(dtype_from_name(NULL, &t), -1);
    tensor s = {0};
    CHECK_EQ_INT(tensor_numel(&s), 1); /* a scalar */
}

TEST(st_good_file) {
    const char *dir = sub_dir("st_good");
    char path[600];
    snprintf(path, sizeof path, "%s/good.safetensors", dir);
    unsigned char d[40];
    size_t dl = good_data(d);
    write_st(path, GOOD_HEADER, d, dl);
    char err[512] = "";
    st_file *f = NULL;
    int rc = st_open(&f, path, err, sizeof err);
    CHECK_MSG(rc == 0, "st_open: %s", err);
    if (f) {
        check_good(f, "good.safetensors");
        /* header order is kept for st_get */
        CHECK(strcmp(st_get(f, 0)->name, "a") == 0);
        CHECK(strcmp(st_get(f, 2)->name, "c") == 0);
        CHECK(st_get(f, 3) == NULL);
        CHECK(st_get(f, -1) == NULL);
    }
    st_close(f);

    /* reversed header order: same result */
    write_st(path, GOOD_HEADER_REV, d, dl);
    rc = st_open(&f, path, err, sizeof err);
    CHECK_MSG(rc == 0, "st_open: %s", err);
    if (f) {
        check_good(f, "good.safetensors");
        CHECK(strcmp(st_get(f, 0)->name, "c") == 0);
    }
    st_close(f);
    st_close(NULL);
}

TEST(st_open_mem_good) {
    unsigned char d[40];
    size_t dl = good_data(d), n;
    unsigned char *img = make_image(GOOD_HEADER, d, dl, 0, &n);
    char err[512] = "";
    st_file *f = NULL;
    CHECK_MSG(st_open_mem(&f, img, n, "mem.safetensors", err, sizeof err) == 0, "%s", err);
    if (f) {
        check_good(f, "mem.safetensors");
        CHECK((const unsigned char *)st_find(f, "a")->data == img + 8 + strlen(GOOD_HEADER));
    }
    st_close(f);
    free(img);
}

TEST(st_edge_cases_ok) {
    /* scalar, zero-size tensors (also at the very end), a BF16 tensor at
     * an odd offset (unaligned: recorded as is), gaps between tensors, and
     * an empty header object */
    const char *h = "{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                    "\"u\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[4,5]},"
                    "\"odd\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[5,9]},"
                    "\"z0\":{\"dtype\":\"F32\",\"shape\":[0,7],\"data_offsets\":[9,9]},"
                    "\"z1\":{\"dtype\":\"I64\",\"shape\":[3,0],\"data_offsets\":[9,9]},"
                    "\"gap\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[12,14]},"
                    "\"end\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[14,14]}}";
    unsigned char d[14] = {0};
    size_t n;
    unsigned char *img = make_image(h, d, sizeof d, 0, &n);
    char err[512] = "";
    st_file *f = NULL;
    CHECK_MSG(st_open_mem(&f, img, n, "edge", err, sizeof err) == 0, "%s", err);
    if (f) {
        CHECK_EQ_INT(st_count(f), 7);
        const tensor *s = st_find(f, "s"), *odd = st_find(f, "odd"), *z0 = st_find(f, "z0"), *e = st_find(f, "end");
        CHECK(s && odd && z0 && e);
        if (s && odd && z0 && e) {
            CHECK_EQ_INT(s->ndim, 0);
            CHECK_EQ_INT(tensor_numel(s), 1);
            CHECK((const unsigned char *)odd->data == img + 8 + strlen(h) + 5);
            CHECK_EQ_INT(tensor_numel(z0), 0);
            CHECK_EQ_INT(z0->nbytes, 0);
            CHECK((const unsigned char *)e->data == img + n);
        }
    }
    st_close(f);
    free(img);

    img = make_image("{}", NULL, 0, 0, &n);
    CHECK_MSG(st_open_mem(&f, img, n, "empty", err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(st_count(f), 0);
    CHECK(st_find(f, "x") == NULL);
    st_close(f);
    free(img);
}

/* Expects st_open_mem to fail with a message containing every non-NULL
 * needle. */
static void expect_fail_mem(int line, const char *header, size_t dlen, uint64_t hlen_override, const char *n1,
                            const char *n2, const char *n3) {
    unsigned char zeros[256] = {0};
    size_t n;
    unsigned char *img = make_image(header, zeros, dlen, hlen_override, &n);
    char err[512] = "";
    st_file *f = (st_file *)1;
    int rc = st_open_mem(&f, img, n, "bad.safetensors", err, sizeof err);
    if (rc != -1 || f != NULL) test_fail(__FILE__, line, "expected failure for header %s", header);
    const char *needles[3] = {n1, n2, n3};
    for (int i = 0; i < 3; i++)
        if (needles[i] && !strstr(err, needles[i]))
            test_fail(__FILE__, line, "error \"%s\" lacks \"%s\"", err, needles[i]);
    if (rc == 0) st_close(f);
    free(img);
}
#define FAIL_MEM(h, dlen, n1, n2) expect_fail_mem(__LINE__, h, dlen, 0, "bad.safetensors", n1, n2)

TEST(st_malformed_headers) {
    /* JSON-level problems */
    FAIL_MEM("{\"a\":{\"dtype\":\"F32\",", 0, "JSON", NULL);
    FAIL_MEM("not json at all", 0, "JSON", NULL);
    FAIL_MEM("[1,2,3]", 0, "not a JSON object", NULL);
    FAIL_MEM("\"str\"", 0, "not a JSON object", NULL);
    FAIL_MEM("{} xx", 0, "unexpected bytes", NULL);
    FAIL_MEM("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__", NULL);
    FAIL_MEM("{\"__metadata__\":[]}", 0, "__metadata__", NULL);
    FAIL_MEM("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "__metadata__", NULL);
    /* entries */
    FAIL_MEM("{\"w\":5}", 0, "\"w\"", "not an object");
    FAIL_MEM("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "\"w\"", "dtype");
    FAIL_MEM("{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "\"w\"", "dtype");
    FAIL_MEM("{\"w\":{\"dtype\":\"Q4_K\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "\"w\"", "unknown dtype \"Q4_K\"");
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "\"w\"", "shape");
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "\"w\"", "shape");
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "\"w\"", "shape");
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4, "\"w\"", "shape");
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,4]}}", 4, "\"w\"", "shape");
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "\"w\"",
             "dimensions");
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4, "\"w\"",
             "too large");
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"shape\":[0,4294967296,4294967296],\"data_offsets\":[0,0]}}", 4, "\"w\"",
             "too large");
    FAIL_MEM("{\"w\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,4]}}", 4, "\"w\"",
             "shape");
    FAIL_MEM("{\"w\":{\"dtype\":\"F64\",\"shape\":[4503599627370496, 1024],\"data_offsets\":[0,4]}}", 4, "\"w\"",
             "too large");
    /* offsets */
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "\"w\"", "data_offsets");
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "\"w\"", "data_offsets");
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, "\"w\"", "data_offsets");
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}", 4, "\"w\"", "data_offsets");
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, "\"w\"", "data_offsets");
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{\"a\":1}}}", 4, "\"w\"", "data_offsets");
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, "\"w\"", "data_offsets");
    /* data region: truncated file */
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 15, "\"w\"", "truncated");
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9007199254740000,9007199254740004]}}", 8,
             "\"w\"", "truncated");
    /* shape/byte mismatch */
    FAIL_MEM("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,8]}}", 16, "\"w\"", "[2, 2]");
    FAIL_MEM("{\"w\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,8]}}", 16, "\"w\"", "needs 6 bytes");
    /* overlap, in either order, including a zero-size tensor inside another */
    FAIL_MEM("{\"p\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
             12, "\"p\"", "\"q\"");
    FAIL_MEM("{\"q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
             "\"p\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
             12, "\"p\"", "overlap");
    FAIL_MEM("{\"big\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
             "\"in\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
             "\"after\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[16,20]}}",
             20, "\"big\"", "\"in\"");
    FAIL_MEM("{\"big\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
             "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}}",
             16, "\"z\"", "overlap");
    FAIL_MEM("{\"s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             8, "\"s\"", "twice");
}

TEST(st_malformed_lengths) {
    /* header length beyond the limit, and beyond the file */
    expect_fail_mem(__LINE__, "{}", 0, (uint64_t)ST_MAX_HEADER + 1, "bad.safetensors", "limit", NULL);
    expect_fail_mem(__LINE__, "{}", 0, UINT64_MAX, "bad.safetensors", "limit", NULL);
    expect_fail_mem(__LINE__, "{}", 0, 3, "bad.safetensors", "truncated", NULL);
    char err[256];
    st_file *f = NULL;
    unsigned char img[8] = {2, 0, 0, 0, 0, 0, 0, 0};
    CHECK_EQ_INT(st_open_mem(&f, img, 5, "short.safetensors", err, sizeof err), -1);
    CHECK(strstr(err, "short.safetensors") && strstr(err, "truncated"));
    CHECK_EQ_INT(st_open_mem(&f, img, 0, "zero.safetensors", err, sizeof err), -1);
    CHECK(strstr(err, "zero.safetensors") != NULL);
    unsigned char z[8] = {0};
    CHECK_EQ_INT(st_open_mem(&f, z, 8, "nohdr.safetensors", err, sizeof err), -1);
    CHECK(strstr(err, "nohdr.safetensors") != NULL);
}

TEST(st_open_files_errors) {
    const char *dir = sub_dir("st_files");
    char path[600], err[512] = "";
    st_file *f = NULL;
    snprintf(path, sizeof path, "%s/missing.safetensors", dir);
    CHECK_EQ_INT(st_open(&f, path, err, sizeof err), -1);
    CHECK(strstr(err, "missing.safetensors") != NULL);
    CHECK_EQ_INT(st_open(&f, dir, err, sizeof err), -1);
    CHECK(strstr(err, "not a regular file") != NULL);
    snprintf(path, sizeof path, "%s/empty.safetensors", dir);
    write_bytes(path, "", 0);
    CHECK_EQ_INT(st_open(&f, path, err, sizeof err), -1);
    CHECK(strstr(err, "empty.safetensors") && strstr(err, "truncated"));
    /* a good file cut short: the last tensor runs past the end */
    unsigned char d[40];
    size_t dl = good_data(d), n;
    unsigned char *img = make_image(GOOD_HEADER, d, dl, 0, &n);
    snprintf(path, sizeof path, "%s/cut.safetensors", dir);
    write_bytes(path, img, n - 3);
    CHECK_EQ_INT(st_open(&f, path, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "cut.safetensors") && strstr(err, "\"c\"") && strstr(err, "truncated"), "%s", err);
    /* cut inside the header */
    write_bytes(path, img, 20);
    CHECK_EQ_INT(st_open(&f, path, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "cut.safetensors") && strstr(err, "truncated"), "%s", err);
    free(img);
    CHECK(f == NULL);
}

/* ---- sets ---- */

static void write_index(const char *dir, const char *json) {
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_bytes(p, json, strlen(json));
}

static void write_shard(const char *dir, const char *name, const char *header, size_t dlen) {
    unsigned char zeros[64] = {0};
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    write_st(p, header, zeros, dlen);
}

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"
#define SH1_HDR                                                                                                \
    "{\"model.embed_tokens.weight\":{\"dtype\":\"BF16\",\"shape\":[4,2],\"data_offsets\":[0,16]},"              \
    "\"model.layers.0.mlp.up_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[16,24]}}"
#define SH2_HDR                                                                                                \
    "{\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"                           \
    "\"lm_head.weight\":{\"dtype\":\"F16\",\"shape\":[4,2],\"data_offsets\":[8,24]}}"
#define INDEX_OK                                                                                               \
    "{\"metadata\":{\"total_size\":48},\"weight_map\":{"                                                        \
    "\"lm_head.weight\":\"" SHARD2 "\",\"model.embed_tokens.weight\":\"" SHARD1 "\","                          \
    "\"model.layers.0.mlp.up_proj.weight\":\"" SHARD1 "\",\"model.norm.weight\":\"" SHARD2 "\"}}"

TEST(st_set_single_file) {
    const char *dir = sub_dir("set_single");
    char p[600], err[512] = "";
    unsigned char d[40];
    size_t dl = good_data(d);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    write_st(p, GOOD_HEADER, d, dl);
    st_set *s = NULL;
    CHECK_MSG(st_set_open(&s, dir, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(st_set_count(s), 3);
    const tensor *a = st_set_find(s, "a");
    CHECK(a && strcmp(a->file, "model.safetensors") == 0 && a->nbytes == 24);
    CHECK(st_set_find(s, "nope") == NULL);
    CHECK(st_set_get(s, 0) != NULL && st_set_get(s, 3) == NULL);
    st_set_close(s);
    st_set_close(NULL);
}

TEST(st_set_sharded) {
    const char *dir = sub_dir("set_sharded");
    char err[512] = "";
    write_shard(dir, SHARD1, SH1_HDR, 24);
    write_shard(dir, SHARD2, SH2_HDR, 24);
    write_index(dir, INDEX_OK);
    st_set *s = NULL;
    CHECK_MSG(st_set_open(&s, dir, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(st_set_count(s), 4);
    const tensor *e = st_set_find(s, "model.embed_tokens.weight"), *h = st_set_find(s, "lm_head.weight");
    CHECK(e && h);
    if (e && h) {
        CHECK(strcmp(e->file, SHARD1) == 0);
        CHECK(strcmp(h->file, SHARD2) == 0);
        CHECK_EQ_INT(h->dtype, DT_F16);
        CHECK_EQ_INT(e->shape[0], 4);
    }
    /* st_set_get covers every tensor once */
    int seen = 0;
    for (int i = 0; i < st_set_count(s); i++) seen += st_set_find(s, st_set_get(s, i)->name) == st_set_get(s, i);
    CHECK_EQ_INT(seen, 4);
    st_set_close(s);
}

static void expect_set_fail(int line, const char *dir, const char *n1, const char *n2, const char *n3) {
    char err[512] = "";
    st_set *s = (st_set *)1;
    int rc = st_set_open(&s, dir, err, sizeof err);
    if (rc != -1 || s != NULL) test_fail(__FILE__, line, "expected st_set_open(%s) to fail", dir);
    const char *needles[3] = {n1, n2, n3};
    for (int i = 0; i < 3; i++)
        if (needles[i] && !strstr(err, needles[i]))
            test_fail(__FILE__, line, "error \"%s\" lacks \"%s\"", err, needles[i]);
    if (rc == 0) st_set_close(s);
}

TEST(st_set_errors) {
    const char *dir = sub_dir("set_none");
    expect_set_fail(__LINE__, dir, "no model.safetensors or model.safetensors.index.json", "set_none", NULL);

    /* the index names a shard that is not there */
    dir = sub_dir("set_missing_shard");
    write_shard(dir, SHARD1, SH1_HDR, 24);
    write_index(dir, INDEX_OK);
    expect_set_fail(__LINE__, dir, "model.safetensors.index.json", SHARD2, NULL);

    /* a tensor listed for a shard that lacks it */
    dir = sub_dir("set_listed_absent");
    write_shard(dir, SHARD1, SH1_HDR, 24);
    write_shard(dir, SHARD2, SH2_HDR, 24);
    write_index(dir, "{\"weight_map\":{\"lm_head.weight\":\"" SHARD2 "\",\"model.embed_tokens.weight\":\"" SHARD1
                     "\",\"model.layers.0.mlp.up_proj.weight\":\"" SHARD1 "\",\"model.norm.weight\":\"" SHARD2
                     "\",\"model.ghost.weight\":\"" SHARD1 "\"}}");
    expect_set_fail(__LINE__, dir, "model.ghost.weight", SHARD1, "index.json");

    /* a tensor in a shard but not in the index */
    dir = sub_dir("set_unlisted");
    write_shard(dir, SHARD1, SH1_HDR, 24);
    write_shard(dir, SHARD2, SH2_HDR, 24);
    write_index(dir, "{\"weight_map\":{\"lm_head.weight\":\"" SHARD2 "\",\"model.embed_tokens.weight\":\"" SHARD1
                     "\",\"model.layers.0.mlp.up_proj.weight\":\"" SHARD1 "\"}}");
    expect_set_fail(__LINE__, dir, "model.norm.weight", SHARD2, "index.json");

    /* a tensor in the wrong shard (and so in two shards) */
    dir = sub_dir("set_two_shards");
    write_shard(dir, SHARD1, SH1_HDR, 24);
    write_shard(dir, SHARD2,
                "{\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"model.embed_tokens.weight\":{\"dtype\":\"BF16\",\"shape\":[4,2],\"data_offsets\":[8,24]}}",
                24);
    write_index(dir, "{\"weight_map\":{\"model.embed_tokens.weight\":\"" SHARD1
                     "\",\"model.layers.0.mlp.up_proj.weight\":\"" SHARD1 "\",\"model.norm.weight\":\"" SHARD2 "\"}}");
    expect_set_fail(__LINE__, dir, "model.embed_tokens.weight", SHARD2, SHARD1);

    /* shard names that escape the directory */
    dir = sub_dir("set_escape");
    write_index(dir, "{\"weight_map\":{\"w\":\"../x.safetensors\"}}");
    expect_set_fail(__LINE__, dir, "index.json", "\"w\"", "../x.safetensors");
    write_index(dir, "{\"weight_map\":{\"w\":\"/etc/passwd\"}}");
    expect_set_fail(__LINE__, dir, "index.json", "/etc/passwd", NULL);
    write_index(dir, "{\"weight_map\":{\"w\":\"\"}}");
    expect_set_fail(__LINE__, dir, "index.json", "\"w\"", NULL);
    write_index(dir, "{\"weight_map\":{\"w\":3}}");
    expect_set_fail(__LINE__, dir, "index.json", "\"w\"", NULL);
    /* index shape problems */
    write_index(dir, "{\"metadata\":{}}");
    expect_set_fail(__LINE__, dir, "index.json", "weight_map", NULL);
    write_index(dir, "{\"weight_map\":{}}");
    expect_set_fail(__LINE__, dir, "index.json", "weight_map", "empty");
    write_index(dir, "{\"weight_map\":{\"w\":\"a.safetensors\",\"w\":\"a.safetensors\"}}");
    expect_set_fail(__LINE__, dir, "index.json", "\"w\"", "twice");
    write_index(dir, "{\"weight_map\":");
    expect_set_fail(__LINE__, dir, "index.json", "JSON", NULL);
    write_index(dir, "[]");
    expect_set_fail(__LINE__, dir, "index.json", NULL, NULL);

    /* a malformed shard: the error names the shard and the tensor */
    dir = sub_dir("set_bad_shard");
    write_shard(dir, SHARD1, SH1_HDR, 24);
    write_shard(dir, SHARD2, SH2_HDR, 20);
    write_index(dir, INDEX_OK);
    expect_set_fail(__LINE__, dir, SHARD2, "lm_head.weight", "truncated");

    /* a malformed single file */
    dir = sub_dir("set_bad_single");
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", "12345678", 8);
    expect_set_fail(__LINE__, dir, "model.safetensors", "\"w\"", NULL);
}

TEST(st_set_many_tensors) {
    /* ~1000 tensors over 3 shards: lookups by name find every one */
    const char *dir = sub_dir("set_many");
    enum { N = 1000, SH = 3 };
    size_t cap = 200 * N;
    char *hdr[SH], *idx = xmalloc(cap);
    size_t hl[SH], il = 0;
    uint64_t off[SH] = {0};
    for (int s = 0; s < SH; s++) {
        hdr[s] = xmalloc(cap);
        hl[s] = (size_t)snprintf(hdr[s], cap, "{");
    }
    il += (size_t)snprintf(idx + il, cap - il, "{\"weight_map\":{");
    for (int i = 0; i < N; i++) {
        int s = (i * 7) % SH;
        hl[s] += (size_t)snprintf(hdr[s] + hl[s], cap - hl[s],
                                  "%s\"model.layers.%d.w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%llu,%llu]}",
                                  off[s] ? "," : "", i, (unsigned long long)off[s],
                                  (unsigned long long)(off[s] + 4));
        off[s] += 4;
        il += (size_t)snprintf(idx + il, cap - il, "%s\"model.layers.%d.w\":\"s%d.safetensors\"", i ? "," : "", i, s);
    }
    snprintf(idx + il, cap - il, "}}");
    for (int s = 0; s < SH; s++) {
        snprintf(hdr[s] + hl[s], cap - hl[s], "}");
        char name[32], p[600];
        snprintf(name, sizeof name, "s%d.safetensors", s);
        snprintf(p, sizeof p, "%s/%s", dir, name);
        unsigned char *d = xcalloc(off[s], 1);
        write_st(p, hdr[s], d, off[s]);
        free(d);
        free(hdr[s]);
    }
    write_index(dir, idx);
    free(idx);
    char err[512] = "";
    st_set *s = NULL;
    CHECK_MSG(st_set_open(&s, dir, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(st_set_count(s), N);
    int found = 0;
    for (int i = 0; i < N; i++) {
        char nm[64], want[32];
        snprintf(nm, sizeof nm, "model.layers.%d.w", i);
        snprintf(want, sizeof want, "s%d.safetensors", (i * 7) % SH);
        const tensor *t = st_set_find(s, nm);
        found += t && strcmp(t->name, nm) == 0 && strcmp(t->file, want) == 0;
    }
    CHECK_EQ_INT(found, N);
    CHECK(st_set_find(s, "model.layers.1000.w") == NULL);
    st_set_close(s);
}
