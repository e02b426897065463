/* Tests of engine/quant: dequantization of every format against golden
 * references (tests/data/quant_blocks, written by tools/gen_quant_golden.py
 * from gguf-py's NumPy dequantization and a NumPy MLX affine rule),
 * quant_matmul_rows against a double-precision dot of the reference rows,
 * scalar against SIMD, batch invariance (M, [n0, n1), threads), the ops
 * integration (op_matmul, op_embed) and quant_check's errors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ops_internal.h"
#include "engine/quant.h"
#include "engine/quant_internal.h"
#include "engine/threadpool.h"
#include "base/util.h"
#include "test.h"

typedef struct {
    char name[64];
    tensor t;
    void *data, *scales, *biases;
    float *ref; /* [N][K] */
} qcase;

static void *slurp(const char *dir, const char *name, const char *ext, size_t *len) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s%s", dir, name, ext);
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = xmalloc(n > 0 ? (size_t)n : 1);
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    *len = got;
    return b;
}

static ds_dtype dt_of(const char *s) {
    static const char *names[] = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"};
    for (int i = 0; i < 10; i++)
        if (!strcmp(s, names[i])) return (ds_dtype)(DT_Q8_0 + i);
    if (!strcmp(s, "MLX")) return DT_MLX;
    if (!strcmp(s, "F32")) return DT_F32;
    if (!strcmp(s, "F16")) return DT_F16;
    if (!strcmp(s, "BF16")) return DT_BF16;
    return DT_COUNT;
}

/* the fixture's cases; returns the count (0 with a failure when missing) */
static int load_cases(qcase **out) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/quant_blocks", test_data_dir());
    size_t len;
    char *man = slurp(dir, "manifest", ".txt", &len);
    CHECK_MSG(man != NULL, "missing %s/manifest.txt (tools/gen_quant_golden.py)", dir);
    if (!man) return 0;
    man = realloc(man, len + 1);
    man[len] = 0;
    qcase *cs = calloc(64, sizeof *cs);
    int n = 0;
    for (char *line = strtok(man, "\n"); line && n < 64; line = strtok(NULL, "\n")) {
        char name[64], dts[16], sds[16];
        long long N, K;
        int bits, group;
        if (sscanf(line, "%63s %15s %lld %lld %d %d %15s", name, dts, &N, &K, &bits, &group, sds) != 7) continue;
        qcase *c = &cs[n];
        snprintf(c->name, sizeof c->name, "%s", name);
        c->t.name = c->name;
        c->t.dtype = dt_of(dts);
        c->t.ndim = 2;
        c->t.shape[0] = N;
        c->t.shape[1] = K;
        c->data = slurp(dir, name, ".bin", &c->t.nbytes);
        c->t.data = c->data;
        size_t rl = 0;
        c->ref = slurp(dir, name, ".f32", &rl);
        CHECK_MSG(c->data && c->ref && rl == (size_t)(N * K) * 4, "%s: fixture files", name);
        if (c->t.dtype == DT_MLX) {
            size_t sl, bl;
            c->t.q.bits = bits;
            c->t.q.group = group;
            c->t.q.sdtype = dt_of(sds);
            c->scales = slurp(dir, name, ".scales", &sl);
            c->biases = slurp(dir, name, ".biases", &bl);
            c->t.q.scales = c->scales;
            c->t.q.biases = c->biases;
        }
        char err[256] = "";
        CHECK_MSG(quant_check(&c->t, err, sizeof err) == 0, "%s: %s", name, err);
        n++;
    }
    free(man);
    *out = cs;
    return n;
}

static void free_cases(qcase *cs, int n) {
    for (int i = 0; i < n; i++) {
        free(cs[i].data);
        free(cs[i].scales);
        free(cs[i].biases);
        free(cs[i].ref);
    }
    free(cs);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float frand(void) { return (float)(rnd() % 2000001) / 1000000.0f - 1.0f; }

TEST(quant_geometry) {
    CHECK_EQ_INT(quant_block_elems(DT_Q4_0), 32);
    CHECK_EQ_INT(quant_block_bytes(DT_Q4_0), 18);
    CHECK_EQ_INT(quant_block_elems(DT_Q6_K), 256);
    CHECK_EQ_INT(quant_block_bytes(DT_Q6_K), 210);
    CHECK_EQ_INT(quant_block_bytes(DT_F32), 0);
    CHECK_EQ_INT(quant_row_bytes(DT_Q4_K, 0, 1024), 4 * 144);
    CHECK_EQ_INT(quant_row_bytes(DT_MLX, 3, 256), 96);
    CHECK_EQ_INT(quant_row_bytes(DT_MLX, 4, 64), 32);
}

/* every row of every fixture equals its reference bit for bit: quant.c
 * follows ggml's order of f32 operations, which gguf-py's NumPy code also
 * follows, and the MLX reference is scale * q + bias in f32 */
TEST(quant_dequant_golden) {
    qcase *cs = NULL;
    int n = load_cases(&cs);
    CHECK(n >= 28);
    for (int i = 0; i < n; i++) {
        const qcase *c = &cs[i];
        int64_t N = c->t.shape[0], K = c->t.shape[1];
        float *row = xmalloc((size_t)K * sizeof(float));
        int bad = 0, nonzero = 0;
        for (int64_t r = 0; r < N; r++) {
            quant_row_f32(&c->t, r, row);
            for (int64_t k = 0; k < K; k++) {
                float want = c->ref[r * K + k];
                if (memcmp(&row[k], &want, 4) != 0) {
                    if (bad++ < 3)
                        test_fail(__FILE__, __LINE__, "%s row %lld elt %lld: %.9g, reference %.9g", c->name,
                                  (long long)r, (long long)k, row[k], want);
                }
                nonzero += want != 0.0f;
            }
        }
        CHECK_MSG(nonzero > K, "%s: reference mostly zeros", c->name);
        free(row);
    }
    free_cases(cs, n);
}

/* |y - dot| <= tol where dot is the double dot of x with the reference
 * row and tol = 1e-5 * sum|x_k w_k| + 1e-6 * |bias| + 1e-30: the scalar
 * level rounds a double sum once; the SIMD level sums in f32 in 8 lanes
 * with the block scale factored out (about K/8 + 40 roundings of partial
 * sums bounded by sum|x w|: under 1e-5 relative for these K). */
TEST(quant_matmul_vs_reference) {
    qcase *cs = NULL;
    int n = load_cases(&cs);
    const int M = 3;
    int prev = ops_level();
    for (int i = 0; i < n; i++) {
        const qcase *c = &cs[i];
        int N = (int)c->t.shape[0], K = (int)c->t.shape[1];
        float *x = xmalloc((size_t)M * K * sizeof(float)), *y = xmalloc((size_t)M * N * sizeof(float));
        float bias[8];
        for (int j = 0; j < M * K; j++) x[j] = frand();
        for (int j = 0; j < N && j < 8; j++) bias[j] = frand();
        for (int lvl = 0; lvl <= ops_max_level(); lvl++) {
            ops_set_level(lvl);
            quant_matmul_rows(y, N, x, M, K, &c->t, bias, 0, N);
            for (int m = 0; m < M; m++)
                for (int r = 0; r < N; r++) {
                    double d = 0, a = 0;
                    for (int k = 0; k < K; k++) {
                        d += (double)x[m * K + k] * c->ref[(size_t)r * K + k];
                        a += fabs((double)x[m * K + k] * c->ref[(size_t)r * K + k]);
                    }
                    d += bias[r];
                    double tol = 1e-5 * a + 1e-6 * fabs(bias[r]) + 1e-30;
                    CHECK_MSG(fabs(y[m * N + r] - d) <= tol, "%s level %d m %d n %d: %.9g vs %.9g (tol %g)", c->name,
                              lvl, m, r, y[m * N + r], d, tol);
                }
        }
        free(x);
        free(y);
    }
    ops_set_level(prev);
    free_cases(cs, n);
}

/* A random quantized tensor of N x K: random bytes with sane f16 scale
 * fields (GGUF) or random words, scales and biases (MLX). */
typedef struct {
    tensor t;
    uint8_t *data;
    uint16_t *sb;
} rtensor;

static void rand_tensor(rtensor *r, ds_dtype dt, int bits, int group, int N, int K) {
    memset(r, 0, sizeof *r);
    r->t.name = "rand";
    r->t.dtype = dt;
    r->t.ndim = 2;
    r->t.shape[0] = N;
    r->t.shape[1] = K;
    r->t.nbytes = (size_t)N * quant_row_bytes(dt, bits, K);
    r->data = xmalloc(r->t.nbytes);
    for (size_t i = 0; i < r->t.nbytes; i++) r->data[i] = (uint8_t)rnd();
    if (dt == DT_MLX) {
        size_t ng = (size_t)N * (size_t)(K / group);
        r->sb = xmalloc(2 * ng * sizeof(uint16_t));
        for (size_t i = 0; i < 2 * ng; i++) r->sb[i] = ds_f32_to_f16(frand() * 0.05f);
        r->t.q.bits = bits;
        r->t.q.group = group;
        r->t.q.sdtype = DT_F16;
        r->t.q.scales = r->sb;
        r->t.q.biases = r->sb + ng;
    } else {
        /* the f16 fields of each block (as tools/gen_quant_golden.py) */
        static const int offs[][3] = {{0, -1}, {0, -1}, {0, 2}, {0, -1}, {0, 2}, {80, 82}, {108, -1}, {0, 2}, {0, 2}, {208, -1}};
        const int *o = offs[dt - DT_Q8_0];
        size_t bb = quant_block_bytes(dt), nb = r->t.nbytes / bb;
        for (size_t b = 0; b < nb; b++)
            for (int j = 0; j < 2 && o[j] >= 0; j++) {
                uint16_t h = ds_f32_to_f16(frand() * 0.05f);
                memcpy(r->data + b * bb + (size_t)o[j], &h, 2);
            }
    }
    r->t.data = r->data;
}

static void free_rtensor(rtensor *r) {
    free(r->data);
    free(r->sb);
}

typedef struct { ds_dtype dt; int bits, group; } qfmt;
static const qfmt all_fmts[] = {
    {DT_Q8_0, 0, 0}, {DT_Q4_0, 0, 0}, {DT_Q4_1, 0, 0}, {DT_Q5_0, 0, 0}, {DT_Q5_1, 0, 0}, {DT_Q2_K, 0, 0},
    {DT_Q3_K, 0, 0}, {DT_Q4_K, 0, 0}, {DT_Q5_K, 0, 0}, {DT_Q6_K, 0, 0}, {DT_MLX, 4, 64}, {DT_MLX, 8, 32},
    {DT_MLX, 4, 128}, {DT_MLX, 3, 64}, {DT_MLX, 6, 32},
};
#define N_FMTS (int)(sizeof all_fmts / sizeof all_fmts[0])

/* scalar against SIMD on random tensors, relative to sum|x w| as above */
TEST(quant_scalar_vs_simd) {
    if (ops_max_level() == 0) return;
    const int N = 19, K = 512, M = 5;
    float *x = xmalloc((size_t)M * K * sizeof(float)), *y0 = xmalloc((size_t)M * N * sizeof(float));
    float *y1 = xmalloc((size_t)M * N * sizeof(float)), *w = xmalloc((size_t)K * sizeof(float));
    for (int j = 0; j < M * K; j++) x[j] = frand();
    int prev = ops_level();
    for (int f = 0; f < N_FMTS; f++) {
        rtensor r;
        rand_tensor(&r, all_fmts[f].dt, all_fmts[f].bits, all_fmts[f].group, N, K);
        ops_set_level(0);
        quant_matmul_rows(y0, N, x, M, K, &r.t, NULL, 0, N);
        for (int lvl = 1; lvl <= ops_max_level(); lvl++) {
            ops_set_level(lvl);
            quant_matmul_rows(y1, N, x, M, K, &r.t, NULL, 0, N);
            for (int n = 0; n < N; n++) {
                quant_row_f32(&r.t, n, w);
                for (int m = 0; m < M; m++) {
                    double a = 0;
                    for (int k = 0; k < K; k++) a += fabs((double)x[m * K + k] * w[k]);
                    CHECK_MSG(fabs((double)y0[m * N + n] - y1[m * N + n]) <= 1e-5 * a + 1e-30,
                              "%s/%d level %d m %d n %d: scalar %.9g simd %.9g", dtype_name(r.t.dtype), r.t.q.bits, lvl,
                              m, n, y0[m * N + n], y1[m * N + n]);
                }
            }
        }
        free_rtensor(&r);
    }
    ops_set_level(prev);
    free(x);
    free(y0);
    free(y1);
    free(w);
}

/* Row m of an M-row call equals the 1-row call on x[m], bit for bit, for
 * M = 1..17, and any split of [0, N) gives the same bits, at every level. */
TEST(quant_batch_invariance) {
    const int N = 37, K = 512, MX = 17;
    float *x = xmalloc((size_t)MX * K * sizeof(float)), *ya = xmalloc((size_t)MX * N * sizeof(float));
    float *y1 = xmalloc((size_t)MX * N * sizeof(float)), bias[37];
    for (int j = 0; j < MX * K; j++) x[j] = frand();
    for (int j = 0; j < N; j++) bias[j] = frand();
    int prev = ops_level();
    for (int f = 0; f < N_FMTS; f++) {
        rtensor r;
        rand_tensor(&r, all_fmts[f].dt, all_fmts[f].bits, all_fmts[f].group, N, K);
        for (int lvl = 0; lvl <= ops_max_level(); lvl++) {
            ops_set_level(lvl);
            for (int m = 0; m < MX; m++) quant_matmul_rows(y1 + (size_t)m * N, N, x + (size_t)m * K, 1, K, &r.t, bias, 0, N);
            for (int M = 2; M <= MX; M++) {
                quant_matmul_rows(ya, N, x, M, K, &r.t, bias, 0, N);
                CHECK_MSG(memcmp(ya, y1, (size_t)M * N * sizeof(float)) == 0, "%s/%d level %d: M=%d differs from M=1",
                          dtype_name(r.t.dtype), r.t.q.bits, lvl, M);
            }
            /* [0, 1), [1, 6), [6, 23), [23, N) with M = 7 */
            const int cut[5] = {0, 1, 6, 23, N};
            memset(ya, 0, (size_t)7 * N * sizeof(float));
            for (int c = 0; c < 4; c++) quant_matmul_rows(ya, N, x, 7, K, &r.t, bias, cut[c], cut[c + 1]);
            CHECK_MSG(memcmp(ya, y1, (size_t)7 * N * sizeof(float)) == 0, "%s/%d level %d: split [n0, n1) differs",
                      dtype_name(r.t.dtype), r.t.q.bits, lvl);
        }
        free_rtensor(&r);
    }
    ops_set_level(prev);
    free(x);
    free(ya);
    free(y1);
}

/* op_matmul on quantized weights (1 and 2 threads, M = 1, 7 and 40)
 * equals quant_matmul_rows; op_embed dequantizes the table's rows */
TEST(quant_ops_integration) {
    const int N = 300, K = 256, MX = 40;
    tpool *tp = tp_create(2);
    float *x = xmalloc((size_t)MX * K * sizeof(float)), *ya = xmalloc((size_t)MX * N * sizeof(float));
    float *yb = xmalloc((size_t)MX * N * sizeof(float)), *w = xmalloc((size_t)K * sizeof(float));
    for (int j = 0; j < MX * K; j++) x[j] = frand();
    const qfmt fm[3] = {{DT_Q4_0, 0, 0}, {DT_Q6_K, 0, 0}, {DT_MLX, 4, 64}};
    for (int f = 0; f < 3; f++) {
        rtensor r;
        rand_tensor(&r, fm[f].dt, fm[f].bits, fm[f].group, N, K);
        const int Ms[3] = {1, 7, MX};
        for (int i = 0; i < 3; i++) {
            quant_matmul_rows(yb, N, x, Ms[i], K, &r.t, NULL, 0, N);
            for (int t = 0; t < 2; t++) {
                op_matmul(t ? tp : NULL, ya, x, Ms[i], &r.t, NULL);
                CHECK_MSG(memcmp(ya, yb, (size_t)Ms[i] * N * sizeof(float)) == 0, "%s M=%d threads %d",
                          dtype_name(r.t.dtype), Ms[i], t + 1);
            }
        }
        int toks[3] = {0, 299, 17};
        op_embed(ya, &r.t, toks, 3);
        for (int i = 0; i < 3; i++) {
            quant_row_f32(&r.t, toks[i], w);
            CHECK(memcmp(ya + (size_t)i * K, w, (size_t)K * sizeof(float)) == 0);
        }
        free_rtensor(&r);
    }
    tp_free(tp);
    free(x);
    free(ya);
    free(yb);
    free(w);
}

static void check_err(const tensor *t, const char *want) {
    char err[256] = "";
    CHECK_EQ_INT(quant_check(t, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "blk.0.ffn_up") != NULL, "error does not name the tensor: %s", err);
    CHECK_MSG(strstr(err, want) != NULL, "error '%s' does not mention '%s'", err, want);
}

TEST(quant_check_errors) {
    uint8_t buf[4096] = {0};
    uint16_t sb[64] = {0};
    tensor t = {.name = "blk.0.ffn_up", .dtype = DT_Q4_0, .ndim = 2, .shape = {4, 64}, .data = buf, .nbytes = 4 * 36};
    char err[256] = "";
    CHECK_EQ_INT(quant_check(&t, err, sizeof err), 0);
    t.nbytes = 4 * 36 - 1;
    check_err(&t, "bytes");
    t.nbytes = 4 * 36;
    t.shape[1] = 48;
    check_err(&t, "multiple");
    t.shape[1] = 64;
    t.ndim = 3;
    check_err(&t, "2-D");
    t.ndim = 2;
    tensor m = {.name = "blk.0.ffn_up", .dtype = DT_MLX, .ndim = 2, .shape = {4, 128}, .data = buf, .nbytes = 4 * 64};
    m.q.bits = 4;
    m.q.group = 64;
    m.q.sdtype = DT_F16;
    m.q.scales = sb;
    m.q.biases = sb + 8;
    CHECK_EQ_INT(quant_check(&m, err, sizeof err), 0);
    m.q.bits = 7;
    check_err(&m, "bits");
    m.q.bits = 4;
    m.q.group = 48;
    check_err(&m, "group");
    m.q.group = 64;
    m.shape[1] = 96;
    check_err(&m, "multiple");
    m.shape[1] = 128;
    m.nbytes = 4 * 64 + 4;
    check_err(&m, "bytes");
    m.nbytes = 4 * 64;
    m.q.sdtype = DT_I8;
    check_err(&m, "F32");
    m.q.sdtype = DT_F16;
    m.q.biases = NULL;
    check_err(&m, "missing");
}
