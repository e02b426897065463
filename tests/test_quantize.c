/* Tests for `dspark quantize`: the encoders' round trips (engine/
 * quant_encode.h), the GGUF writer read back by the GGUF reader, and whole
 * checkpoints quantized to every type and checked tensor by tensor against
 * their source (names, shapes, metadata, values within each type's bound,
 * the bytes equal to a fresh encoding of the source row), the MLX folder
 * decoded back, and the errors a user can cause. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/gguf.h"
#include "base/gguf_write.h"
#include "base/util.h"
#include "cli/cli.h"
#include "engine/config.h"
#include "engine/quant.h"
#include "engine/quant_encode.h"
#include "engine/safetensors.h"
#include "test.h"

static uint64_t rng = 1;
static float gauss(void) {
    double u1 = ((ds_mix64(rng++) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = ((ds_mix64(rng++) >> 11) + 0.5) / 9007199254740992.0;
    return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Relative RMS error bounds on Gaussian rows, each about 1.3x what the
 * encoders (and llama.cpp's reference quantizer, byte-identical on such
 * rows) measure: Q8_0 0.0053, Q4_0 0.086, Q5_0 0.043, Q4_K 0.071, Q6_K 0.018. */
static double rms_bound(ds_dtype t) {
    switch (t) {
    case DT_Q8_0: return 0.007;
    case DT_Q4_0: return 0.11;
    case DT_Q5_0: return 0.056;
    case DT_Q4_K: return 0.093;
    case DT_Q6_K: return 0.024;
    default: return 0;
    }
}

/* The bound on one element's error for the 32-element types, as a fraction
 * of its block's largest magnitude: half a step (a full step for the clamped
 * top code of Q4_0/Q5_0) plus the scale's f16 rounding (2^-11 relative, times
 * the largest code). */
static double elem_bound(ds_dtype t, double amax) {
    switch (t) {
    case DT_Q8_0: return amax / 127 * (0.5 + 127.0 / 2048) + 1e-7;
    case DT_Q4_0: return amax / 8 * (1 + 8.0 / 2048) + 1e-7;
    case DT_Q5_0: return amax / 16 * (1 + 16.0 / 2048) + 1e-7;
    default: return INFINITY;
    }
}

static const ds_dtype TYPES[] = {DT_Q8_0, DT_Q4_0, DT_Q5_0, DT_Q4_K, DT_Q6_K};

TEST(quant_encode_roundtrip) {
    const int K = 1024, R = 64;
    float *x = malloc(sizeof(float) * K), *y = malloc(sizeof(float) * K);
    uint8_t *a = malloc((size_t)K * 2), *b = malloc((size_t)K * 2);
    for (int ti = 0; ti < 5; ti++) {
        ds_dtype t = TYPES[ti];
        double e2 = 0, n2 = 0;
        rng = 7;
        int elem_fail = 0;
        for (int r = 0; r < R; r++) {
            float s = r % 4 == 0 ? 0.01f : r % 4 == 1 ? 30.f : 1.f; /* scales far from 1 too */
            for (int i = 0; i < K; i++) x[i] = gauss() * s;
            size_t rb = qenc_row_bytes(t, K);
            CHECK(rb > 0);
            CHECK_EQ_INT(qenc_row(t, x, K, a), 0);
            CHECK_EQ_INT(qenc_row(t, x, K, b), 0);
            CHECK_MSG(!memcmp(a, b, rb), "%s: encoding is not deterministic", dtype_name(t));
            CHECK_EQ_INT(qenc_decode_row(t, a, K, y), 0);
            for (int i = 0; i < K; i++) {
                e2 += (double)(y[i] - x[i]) * (y[i] - x[i]) / (s * s);
                n2 += (double)x[i] * x[i] / (s * s);
            }
            for (int blk = 0; blk < K; blk += 32) {
                double amax = 0;
                for (int i = 0; i < 32; i++) amax = fmax(amax, fabs(x[blk + i]));
                for (int i = 0; i < 32; i++)
                    if (fabs(y[blk + i] - x[blk + i]) > elem_bound(t, amax)) elem_fail++;
            }
        }
        double rel = sqrt(e2 / n2);
        CHECK_MSG(rel < rms_bound(t), "%s: relative RMS error %.5f over %.5f", dtype_name(t), rel, rms_bound(t));
        CHECK_MSG(rel > rms_bound(t) / 3, "%s: relative RMS error %.5f implausibly small", dtype_name(t), rel);
        CHECK_MSG(!elem_fail, "%s: %d elements beyond the per-block bound", dtype_name(t), elem_fail);
        /* zero and constant rows */
        for (int i = 0; i < K; i++) x[i] = 0;
        qenc_row(t, x, K, a);
        qenc_decode_row(t, a, K, y);
        int nz = 0;
        for (int i = 0; i < K; i++) nz += y[i] != 0;
        CHECK_MSG(!nz, "%s: a zero row decodes to %d non-zeros", dtype_name(t), nz);
        for (int i = 0; i < K; i++) x[i] = -0.75f;
        qenc_row(t, x, K, a);
        qenc_decode_row(t, a, K, y);
        double worst = 0;
        for (int i = 0; i < K; i++) worst = fmax(worst, fabs(y[i] + 0.75));
        CHECK_MSG(worst < 0.75 * 0.01, "%s: a constant row is off by %g", dtype_name(t), worst);
    }
    /* the engine's dequantization (quant.h) reads the encoders' bytes as
       the encoders' own decoder does, bit for bit */
    for (int ti = 0; ti < 5; ti++) {
        ds_dtype t = TYPES[ti];
        for (int i = 0; i < K; i++) x[i] = gauss();
        qenc_row(t, x, K, a);
        tensor W = {.name = "w", .dtype = t, .ndim = 2, .shape = {1, K}, .data = a, .nbytes = qenc_row_bytes(t, K)};
        float *z = malloc(sizeof(float) * K);
        quant_row_f32(&W, 0, z);
        qenc_decode_row(t, a, K, y);
        CHECK_MSG(!memcmp(y, z, sizeof(float) * K), "%s: quant_row_f32 differs from the encoder's decoder", dtype_name(t));
        free(z);
    }
    {
        uint32_t q[256];
        float sc[32], bi[32], z[1024];
        for (int i = 0; i < K; i++) x[i] = gauss();
        qenc_mlx_row(x, K, 4, 64, q, sc, bi);
        tensor W = {.name = "w", .dtype = DT_MLX, .ndim = 2, .shape = {1, K}, .data = q, .nbytes = sizeof(uint32_t) * K / 8,
                    .q = {.bits = 4, .group = 64, .sdtype = DT_F32, .scales = sc, .biases = bi}};
        quant_row_f32(&W, 0, z);
        qenc_mlx_decode_row(q, sc, bi, K, 4, 64, y);
        CHECK_MSG(!memcmp(y, z, sizeof(float) * K), "mlx4: quant_row_f32 differs from the encoder's decoder");
    }
    /* geometry refusals */
    CHECK_EQ_INT(qenc_row(DT_Q4_K, x, 128, a), -1);
    CHECK_EQ_INT(qenc_row(DT_Q8_0, x, 48, a), -1);
    CHECK_EQ_INT(qenc_row(DT_BF16, x, 64, a), -1);
    CHECK_EQ_INT((int)qenc_row_bytes(DT_Q6_K, 512), 420);
    free(x);
    free(y);
    free(a);
    free(b);
}

/* The error allowed for x under MLX scale s and bias b: half a step, plus
 * the distance to the codes' range when x lies beyond it (the snapped scale
 * may not reach the far end of the group), plus, when the scale and bias
 * were rounded to bf16 (rounded = 1), 2^-8 of their contribution. */
static double mlx_tol(float x, float s, float b, int bits, int rounded) {
    double n = (1 << bits) - 1, a = fmin(b, b + n * s), z = fmax(b, b + n * s);
    double d = x < a ? a - x : x > z ? x - z : 0;
    return d + fabs(s) * 0.5 * 1.0001 + (rounded ? (fabs(s) * n + fabs(b)) / 256 : 0) + 1e-6 * (fabs(b) + 1e-3);
}

TEST(quant_encode_mlx) {
    const int K = 512;
    float x[512], y[512], sc[16], bi[16];
    uint32_t q[128];
    static const int GROUPS[3] = {32, 64, 128};
    for (int bits = 4; bits <= 8; bits += 4)
        for (int gi = 0; gi < 3; gi++) {
            int g = GROUPS[gi];
            rng = 11;
            for (int i = 0; i < K; i++) x[i] = gauss() * (i < K / 2 ? 1.f : 0.05f);
            x[3] = 0; /* zero must come back exactly when the group straddles it */
            CHECK_EQ_INT(qenc_mlx_row(x, K, bits, g, q, sc, bi), 0);
            uint32_t q2[128];
            float sc2[16], bi2[16];
            qenc_mlx_row(x, K, bits, g, q2, sc2, bi2);
            CHECK(!memcmp(q, q2, sizeof(uint32_t) * (size_t)(K * bits / 32)) && !memcmp(sc, sc2, sizeof(float) * (size_t)(K / g)));
            qenc_mlx_decode_row(q, sc, bi, K, bits, g, y);
            int bad = 0, far = 0;
            for (int gr = 0; gr < K / g; gr++) {
                float lo = INFINITY, hi = -INFINITY;
                for (int i = 0; i < g; i++) {
                    lo = fminf(lo, x[gr * g + i]);
                    hi = fmaxf(hi, x[gr * g + i]);
                }
                for (int i = 0; i < g; i++) {
                    double e = fabs(y[gr * g + i] - x[gr * g + i]);
                    bad += e > mlx_tol(x[gr * g + i], sc[gr], bi[gr], bits, 0);
                    /* overall: the snapped scale costs at most one plain step */
                    far += e > (hi - lo) / ((1 << bits) - 1) * 1.1 + 1e-6;
                }
            }
            CHECK_MSG(!bad, "mlx%d g%d: %d elements off their nearest code", bits, g, bad);
            CHECK_MSG(!far, "mlx%d g%d: %d elements beyond a step", bits, g, far);
            CHECK_MSG(fabsf(y[3]) <= 1e-6f * fabsf(bi[0]), "mlx%d g%d: zero decodes to %g", bits, g, y[3]);
        }
    /* the packing: elements from the low bits up */
    for (int i = 0; i < 32; i++) x[i] = (float)(i % 16);
    qenc_mlx_row(x, 32, 4, 32, q, sc, bi);
    /* 0..15: max is the edge of larger magnitude, so the scale is -1 and the
       codes count down from 15: element i gets code 15 - i */
    CHECK_MSG(q[0] == 0x89abcdefu && q[2] == 0x89abcdefu && q[1] == 0x01234567u, "packed %08x %08x", q[0], q[1]);
    CHECK(sc[0] == -1.f && bi[0] == 15.f);
    CHECK_EQ_INT(qenc_mlx_row(x, 48, 4, 32, q, sc, bi), -1);
    CHECK_EQ_INT(qenc_mlx_row(x, 64, 3, 32, q, sc, bi), -1);
}

TEST(gguf_write_roundtrip) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/w.gguf", test_tmp_dir());
    gguf_writer *w = gguf_w_new();
    gguf_w_u8(w, "t.u8", 200);
    gguf_w_i8(w, "t.i8", -5);
    gguf_w_u16(w, "t.u16", 60000);
    gguf_w_i16(w, "t.i16", -300);
    gguf_w_u32(w, "t.u32", 4000000000u);
    gguf_w_i32(w, "t.i32", -7);
    gguf_w_u64(w, "t.u64", 1ull << 40);
    gguf_w_i64(w, "t.i64", -(1ll << 40));
    gguf_w_f32(w, "t.f32", 0.5f);
    gguf_w_f64(w, "t.f64", 0.25);
    gguf_w_bool(w, "t.bool", 1);
    gguf_w_str(w, "t.str", "héllo");
    const char *strs[3] = {"a", "", "c c"};
    gguf_w_arr_str(w, "t.astr", strs, NULL, 3);
    int32_t ints[4] = {1, -2, 3, -4};
    gguf_w_arr(w, "t.ai32", GGUF_I32, ints, 4);
    int64_t ne1[2] = {32, 3}, ne2[1] = {5};
    CHECK_EQ_INT(gguf_w_add_tensor(w, "a", GGML_Q8_0, 2, ne1, err, sizeof err), 0);
    CHECK_EQ_INT(gguf_w_add_tensor(w, "b", GGML_F32, 1, ne2, err, sizeof err), 0);
    CHECK_EQ_INT(gguf_w_add_tensor(w, "a", GGML_F32, 1, ne2, err, sizeof err), -1); /* twice */
    int64_t bad[2] = {100, 2};
    CHECK_EQ_INT(gguf_w_add_tensor(w, "c", GGML_Q4_K, 2, bad, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "row length 100"), "%s", err);
    CHECK_EQ_INT(gguf_w_begin(w, path, err, sizeof err), 0);
    uint8_t da[102];
    for (int i = 0; i < 102; i++) da[i] = (uint8_t)i;
    float db[5] = {1, 2, 3, 4, 5};
    /* pieces that split one tensor and span two */
    CHECK_EQ_INT(gguf_w_data(w, da, 50, err, sizeof err), 0);
    uint8_t mix[72];
    memcpy(mix, da + 50, 52);
    memcpy(mix + 52, db, 20);
    CHECK_EQ_INT(gguf_w_data(w, mix, 72, err, sizeof err), 0);
    CHECK_EQ_INT(gguf_w_data(w, db, 1, err, sizeof err), -1); /* beyond the declared bytes */
    CHECK_EQ_INT(gguf_w_finish(w, err, sizeof err), 0);
    gguf_w_free(w);
    gguf *g;
    CHECK_MSG(gguf_open(&g, path, 0, err, sizeof err) == 0, "%s", err);
    if (!g) return;
    int64_t iv;
    double fv;
    gguf_str sv;
    CHECK(gguf_get_int(g, "t.u8", &iv) == 0 && iv == 200);
    CHECK(gguf_get_int(g, "t.i8", &iv) == 0 && iv == -5);
    CHECK(gguf_get_int(g, "t.u16", &iv) == 0 && iv == 60000);
    CHECK(gguf_get_int(g, "t.i16", &iv) == 0 && iv == -300);
    CHECK(gguf_get_int(g, "t.u32", &iv) == 0 && iv == 4000000000ll);
    CHECK(gguf_get_int(g, "t.i32", &iv) == 0 && iv == -7);
    CHECK(gguf_get_int(g, "t.u64", &iv) == 0 && iv == 1ll << 40);
    CHECK(gguf_get_int(g, "t.i64", &iv) == 0 && iv == -(1ll << 40));
    CHECK(gguf_get_float(g, "t.f32", &fv) == 0 && fv == 0.5);
    CHECK(gguf_get_float(g, "t.f64", &fv) == 0 && fv == 0.25);
    const gguf_kv *kv = gguf_find(g, "t.bool");
    CHECK(kv && kv->type == GGUF_BOOL && kv->u == 1);
    CHECK(gguf_get_str(g, "t.str", &sv) == 0 && !strcmp(sv.s, "héllo"));
    kv = gguf_find(g, "t.astr");
    CHECK(kv && kv->type == GGUF_ARRAY && kv->elt == GGUF_STRING && kv->n == 3);
    if (kv && kv->n == 3) {
        const gguf_str *s = kv->arr;
        CHECK(!strcmp(s[0].s, "a") && s[1].len == 0 && !strcmp(s[2].s, "c c"));
    }
    kv = gguf_find(g, "t.ai32");
    CHECK(kv && kv->elt == GGUF_I32 && kv->n == 4 && ((const int32_t *)kv->arr)[3] == -4);
    CHECK_EQ_INT(gguf_tensor_count(g), 2);
    const gguf_tensor *ta = gguf_find_tensor(g, "a"), *tb = gguf_find_tensor(g, "b");
    CHECK(ta && ta->type == GGML_Q8_0 && ta->ne[0] == 32 && ta->ne[1] == 3 && ta->nbytes == 102 &&
          !memcmp(ta->data, da, 102));
    CHECK(tb && tb->type == GGML_F32 && tb->ne[0] == 5 && !memcmp(tb->data, db, 20));
    CHECK(tb && ((uintptr_t)tb->data - (uintptr_t)ta->data) % 32 == 0);
    gguf_close(g);
    /* a duplicate key is reported at begin; nothing is left behind */
    w = gguf_w_new();
    gguf_w_u32(w, "k", 1);
    gguf_w_u32(w, "k", 2);
    snprintf(path, sizeof path, "%s/dup.gguf", test_tmp_dir());
    CHECK_EQ_INT(gguf_w_begin(w, path, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "written twice"), "%s", err);
    gguf_w_free(w);
    CHECK(!ds_file_exists(path));
}

/* ---- whole checkpoints ---- */

static void src_row_f32(const tensor *t, int64_t K, int64_t n, float *y) {
    for (int64_t k = 0; k < K; k++) {
        size_t i = (size_t)(n * K + k);
        if (t->dtype == DT_F32) y[k] = ((const float *)t->data)[i];
        else {
            uint16_t h = ((const uint16_t *)t->data)[i];
            y[k] = t->dtype == DT_BF16 ? ds_bf16_to_f32(h) : ds_f16_to_f32(h);
        }
    }
}

static ds_dtype dt_of_ggml(uint32_t g) {
    switch (g) {
    case GGML_Q8_0: return DT_Q8_0;
    case GGML_Q4_0: return DT_Q4_0;
    case GGML_Q5_0: return DT_Q5_0;
    case GGML_Q4_K: return DT_Q4_K;
    case GGML_Q6_K: return DT_Q6_K;
    case GGML_F16: return DT_F16;
    default: return DT_F32;
    }
}

/* The HF name of a GGUF tensor name (the inverse of the converter's map). */
static int hf_name(const char *gg, char *out, size_t n) {
    static const char *const M[][2] = {
        {"attn_norm.weight", "input_layernorm.weight"}, {"attn_q.weight", "self_attn.q_proj.weight"},
        {"attn_k.weight", "self_attn.k_proj.weight"},   {"attn_v.weight", "self_attn.v_proj.weight"},
        {"attn_q.bias", "self_attn.q_proj.bias"},       {"attn_k.bias", "self_attn.k_proj.bias"},
        {"attn_v.bias", "self_attn.v_proj.bias"},       {"attn_output.weight", "self_attn.o_proj.weight"},
        {"attn_q_norm.weight", "self_attn.q_norm.weight"}, {"attn_k_norm.weight", "self_attn.k_norm.weight"},
        {"ffn_norm.weight", "post_attention_layernorm.weight"}, {"ffn_gate.weight", "mlp.gate_proj.weight"},
        {"ffn_up.weight", "mlp.up_proj.weight"},        {"ffn_down.weight", "mlp.down_proj.weight"},
    };
    int l, k;
    if (!strcmp(gg, "token_embd.weight")) return snprintf(out, n, "model.embed_tokens.weight"), 0;
    if (!strcmp(gg, "output_norm.weight")) return snprintf(out, n, "model.norm.weight"), 0;
    if (!strcmp(gg, "output.weight")) return snprintf(out, n, "lm_head.weight"), 0;
    if (sscanf(gg, "blk.%d.%n", &l, &k) == 1)
        for (size_t i = 0; i < sizeof M / sizeof M[0]; i++)
            if (!strcmp(gg + k, M[i][0])) return snprintf(out, n, "model.layers.%d.%s", l, M[i][1]), 0;
    return -1;
}

/* Quantizes dir to type and checks every tensor of the GGUF against the
 * source: shape, dtype choice, values within bound, bytes equal to a fresh
 * encoding of the (permuted) source row. Returns the open file (caller
 * closes) for further checks, or NULL. */
static gguf *check_gguf(const char *dir, const char *type, const char *out) {
    char err[1024];
    CHECK_MSG(quantize_model(dir, out, type, 0, 2, NULL, err, sizeof err) == 0, "%s %s: %s", dir, type, err);
    gguf *g = NULL;
    CHECK_MSG(gguf_open(&g, out, 0, err, sizeof err) == 0, "%s", err);
    if (!g) return NULL;
    model_config c;
    st_set *st;
    if (config_load(&c, dir, err, sizeof err) || st_set_open(&st, dir, err, sizeof err)) {
        CHECK_MSG(0, "%s", err);
        return g;
    }
    int checked = 0;
    for (int i = 0; i < gguf_tensor_count(g); i++) {
        const gguf_tensor *gt = gguf_tensor_at(g, i);
        char hf[256];
        if (!strcmp(gt->name, "rope_freqs.weight")) {
            CHECK(c.rope_type == ROPE_LLAMA3 && gt->type == GGML_F32 && gt->ne[0] == c.head_dim / 2);
            continue;
        }
        CHECK_MSG(hf_name(gt->name, hf, sizeof hf) == 0, "unexpected tensor %s", gt->name);
        const tensor *t = st_set_find(st, hf);
        if (!t) {
            CHECK_MSG(0, "%s: no source %s", gt->name, hf);
            continue;
        }
        int64_t K = t->shape[t->ndim - 1], N = t->ndim == 2 ? t->shape[0] : 1;
        CHECK_MSG(gt->ne[0] == K && (t->ndim == 1 || gt->ne[1] == N), "%s: shape", gt->name);
        ds_dtype dt = dt_of_ggml(gt->type);
        if (t->ndim == 1) CHECK_MSG(dt == DT_F32, "%s: 1-D tensor stored as %s", gt->name, dtype_name(dt));
        int perm = c.arch == ARCH_LLAMA && (strstr(gt->name, "attn_q.") || strstr(gt->name, "attn_k."));
        size_t rb = gguf_w_row_bytes(gt->type, K);
        float *x = malloc(sizeof(float) * (size_t)K), *y = malloc(sizeof(float) * (size_t)K);
        uint8_t *enc = malloc(rb);
        double e2 = 0, n2 = 0;
        int same = 1;
        for (int64_t r = 0; r < N; r++) {
            int64_t s = r;
            if (perm) { /* the converter's rotary-pair order: row h*hd + 2i + j from h*hd + j*hd/2 + i */
                int64_t h = r / c.head_dim, w = r % c.head_dim;
                s = h * c.head_dim + (w % 2) * (c.head_dim / 2) + w / 2;
            }
            src_row_f32(t, K, s, x);
            const uint8_t *row = (const uint8_t *)gt->data + (size_t)r * rb;
            if (dt == DT_F32) memcpy(y, row, sizeof(float) * (size_t)K);
            else if (dt == DT_F16)
                for (int64_t k = 0; k < K; k++) y[k] = ds_f16_to_f32(((const uint16_t *)row)[k]);
            else {
                qenc_decode_row(dt, row, K, y);
                qenc_row(dt, x, K, enc);
                same &= !memcmp(enc, row, rb);
            }
            for (int64_t k = 0; k < K; k++) {
                e2 += (double)(y[k] - x[k]) * (y[k] - x[k]);
                n2 += (double)x[k] * x[k];
            }
        }
        double rel = n2 > 0 ? sqrt(e2 / n2) : sqrt(e2);
        double bound = dt == DT_F32 ? 0 : dt == DT_F16 ? 1e-3 : rms_bound(dt) * 1.5; /* small tensors: looser */
        CHECK_MSG(rel <= bound, "%s (%s): relative RMS error %.5f over %.5f", gt->name, dtype_name(dt), rel, bound);
        CHECK_MSG(same, "%s: bytes differ from a fresh encoding of the source rows", gt->name);
        free(x);
        free(y);
        free(enc);
        checked++;
    }
    int expect = st_set_count(st) - (st_set_find(st, "lm_head.weight") && c.tie_word_embeddings);
    CHECK_MSG(checked == expect, "%s: %d tensors checked, %d in the source", out, checked, expect);
    st_set_close(st);
    return g;
}

static const char *type_of(gguf *g, const char *name) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    return t ? gguf_type_name(t->type) : "(absent)";
}

TEST(quantize_gguf_types) {
    static const char *TY[] = {"Q8_0", "Q4_0", "Q4_K", "Q6_K", "Q4_K_M"};
    static const char *MODELS[] = {"qwen3-bf16", "llama3-bf16"};
    for (int m = 0; m < 2; m++)
        for (int ti = 0; ti < 5; ti++) {
            char dir[512], out[512];
            snprintf(dir, sizeof dir, "%s/models/%s", test_data_dir(), MODELS[m]);
            snprintf(out, sizeof out, "%s/%s-%s.gguf", test_tmp_dir(), MODELS[m], TY[ti]);
            gguf *g = check_gguf(dir, TY[ti], out);
            if (!g) continue;
            gguf_str s;
            int64_t v;
            double f;
            const char *arch = m ? "llama" : "qwen3";
            CHECK(gguf_get_str(g, "general.architecture", &s) == 0 && !strcmp(s.s, arch));
            char k[128];
#define KEYI(name, want)                                                           \
    snprintf(k, sizeof k, "%s." name, arch);                                        \
    CHECK_MSG(gguf_get_int(g, k, &v) == 0 && v == (want), "%s: %s", out, k)
            KEYI("block_count", 3);
            KEYI("embedding_length", 64);
            KEYI("feed_forward_length", 160);
            KEYI("context_length", 256);
            KEYI("attention.head_count", 4);
            KEYI("attention.head_count_kv", m ? 1 : 2);
            KEYI("attention.key_length", m ? 16 : 32);
#undef KEYI
            snprintf(k, sizeof k, "%s.rope.freq_base", arch);
            CHECK(gguf_get_float(g, k, &f) == 0 && f == (m ? 500000.0 : 1000000.0));
            snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", arch);
            CHECK(gguf_get_float(g, k, &f) == 0 && fabs(f - 1e-6) < 1e-12);
            CHECK(gguf_get_int(g, "general.quantization_version", &v) == 0 && v == 2);
            /* the test models' rows are 64 or 160 long: no K type fits, so
               llama.cpp's fallbacks decide */
            const char *w = type_of(g, "blk.0.ffn_up.weight");
            const char *want = ti == 0 ? "Q8_0" : ti == 1 ? "Q4_0" : ti == 3 ? "Q8_0" : "Q5_0";
            CHECK_MSG(!strcmp(w, want), "%s: ffn_up is %s, want %s", out, w, want);
            CHECK(!strcmp(type_of(g, "blk.0.attn_norm.weight"), "F32"));
            if (ti == 4) { /* Q4_K_M: of 3 layers only layer 2 (>= 7n/8) wants Q6_K, falling back to Q8_0 */
                CHECK(!strcmp(type_of(g, "blk.0.ffn_down.weight"), "Q5_0"));
                CHECK(!strcmp(type_of(g, "blk.1.ffn_down.weight"), "Q5_0"));
                CHECK(!strcmp(type_of(g, "blk.2.ffn_down.weight"), "Q8_0"));
                CHECK(!strcmp(type_of(g, "blk.1.attn_v.weight"), "Q5_0"));
                CHECK(!strcmp(type_of(g, m ? "output.weight" : "token_embd.weight"), "Q8_0"));
            }
            if (m) {
                CHECK(gguf_find_tensor(g, "output.weight") && gguf_find_tensor(g, "rope_freqs.weight"));
                const gguf_tensor *rf = gguf_find_tensor(g, "rope_freqs.weight");
                /* factor 8 for the long wavelengths, 1 for the short ones */
                if (rf) CHECK(((const float *)rf->data)[0] == 1.0f && ((const float *)rf->data)[7] == 8.0f);
            } else {
                CHECK(!gguf_find_tensor(g, "output.weight")); /* tied */
                CHECK(gguf_find_tensor(g, "blk.2.attn_q_norm.weight") != NULL);
            }
            gguf_close(g);
        }
}

/* The Q4_K_M choice where K types fit: a checkpoint of width 256 (written
 * here: 8 layers so the layer pattern shows). */
static int write_wide_llama(const char *dir) {
    mkdir(dir, 0755);
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    if (!f) return -1;
    const int H = 256, I = 512, L = 8, V = 64;
    fprintf(f, "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":%d,"
               "\"intermediate_size\":%d,\"num_hidden_layers\":%d,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
               "\"vocab_size\":%d,\"max_position_embeddings\":128,\"rms_norm_eps\":1e-05,\"rope_theta\":10000,"
               "\"tie_word_embeddings\":false,\"torch_dtype\":\"float32\"}\n", H, I, L, V);
    fclose(f);
    char hdr[32768];
    int hn = 0;
    size_t off = 0;
    struct { char n[96]; int a, b; } t[8 * 9 + 3];
    int nt = 0;
#define T2(name, x, y) (snprintf(t[nt].n, 96, "%s", name), t[nt].a = x, t[nt].b = y, nt++)
    T2("model.embed_tokens.weight", V, H);
    T2("model.norm.weight", H, 0);
    T2("lm_head.weight", V, H);
    for (int l = 0; l < L; l++) {
        char n[96];
        static const char *nm[9] = {"input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                                    "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
        int sh[9][2] = {{H, 0}, {H, 0}, {H, H}, {H / 2, H}, {H / 2, H}, {H, H}, {I, H}, {I, H}, {H, I}};
        for (int k = 0; k < 9; k++) {
            snprintf(n, sizeof n, "model.layers.%d.%s.weight", l, nm[k]);
            T2(n, sh[k][0], sh[k][1]);
        }
    }
#undef T2
    hn += snprintf(hdr + hn, sizeof hdr - (size_t)hn, "{");
    for (int i = 0; i < nt; i++) {
        size_t nb = (size_t)t[i].a * (t[i].b ? (size_t)t[i].b : 1) * 4;
        if (t[i].b)
            hn += snprintf(hdr + hn, sizeof hdr - (size_t)hn, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}",
                           i ? "," : "", t[i].n, t[i].a, t[i].b, off, off + nb);
        else
            hn += snprintf(hdr + hn, sizeof hdr - (size_t)hn, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}",
                           i ? "," : "", t[i].n, t[i].a, off, off + nb);
        off += nb;
    }
    hn += snprintf(hdr + hn, sizeof hdr - (size_t)hn, "}");
    while (hn % 8) hdr[hn++] = ' ';
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    f = fopen(p, "wb");
    if (!f) return -1;
    uint64_t hl = (uint64_t)hn;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, (size_t)hn, f);
    rng = 99;
    for (size_t i = 0; i < off / 4; i++) {
        float v = gauss() * 0.05f;
        fwrite(&v, 4, 1, f);
    }
    fclose(f);
    return 0;
}

TEST(quantize_q4_k_m_mix) {
    char dir[512], out[600];
    snprintf(dir, sizeof dir, "%s/wide-llama", test_tmp_dir());
    CHECK_EQ_INT(write_wide_llama(dir), 0);
    snprintf(out, sizeof out, "%s/wide.gguf", test_tmp_dir());
    gguf *g = check_gguf(dir, "Q4_K_M", out);
    if (!g) return;
    /* llama.cpp's pick for 8 layers: layers 0 and 7 (first/last eighth) and
       every third between (i - 1) % 3 == 2: layer 3 and 6 */
    static const int MORE[8] = {1, 0, 0, 1, 0, 0, 1, 1};
    for (int l = 0; l < 8; l++) {
        char n[64];
        const char *want = MORE[l] ? "Q6_K" : "Q4_K";
        snprintf(n, sizeof n, "blk.%d.attn_v.weight", l);
        CHECK_MSG(!strcmp(type_of(g, n), want), "%s: %s", n, type_of(g, n));
        snprintf(n, sizeof n, "blk.%d.ffn_down.weight", l);
        CHECK_MSG(!strcmp(type_of(g, n), want), "%s: %s", n, type_of(g, n));
        snprintf(n, sizeof n, "blk.%d.ffn_up.weight", l);
        CHECK_MSG(!strcmp(type_of(g, n), "Q4_K"), "%s: %s", n, type_of(g, n));
    }
    CHECK(!strcmp(type_of(g, "output.weight"), "Q6_K"));
    CHECK(!strcmp(type_of(g, "token_embd.weight"), "Q4_K"));
    int64_t v;
    CHECK(gguf_get_int(g, "general.file_type", &v) == 0 && v == 15);
    gguf_close(g);
}

TEST(quantize_tokenizer_meta) {
    char dir[512], out[600], err[1024];
    snprintf(dir, sizeof dir, "%s/tiny-qwen3-q", test_tmp_dir());
    mkdir(dir, 0755);
    if (test_write_tiny_qwen3(dir) != 0) {
        CHECK_MSG(0, "real tokenizer unavailable");
        return;
    }
    snprintf(out, sizeof out, "%s/tiny-qwen3.gguf", test_tmp_dir());
    CHECK_MSG(quantize_model(dir, out, "Q8_0", 0, 2, NULL, err, sizeof err) == 0, "%s", err);
    gguf *g;
    if (gguf_open(&g, out, 0, err, sizeof err) != 0) {
        CHECK_MSG(0, "%s", err);
        return;
    }
    gguf_str s;
    int64_t v;
    CHECK(gguf_get_str(g, "tokenizer.ggml.model", &s) == 0 && !strcmp(s.s, "gpt2"));
    CHECK(gguf_get_str(g, "tokenizer.ggml.pre", &s) == 0 && !strcmp(s.s, "qwen2"));
    const gguf_kv *tk = gguf_find(g, "tokenizer.ggml.tokens"), *tt = gguf_find(g, "tokenizer.ggml.token_type");
    CHECK(tk && tk->elt == GGUF_STRING && tk->n == 151936 && tt && tt->n == 151936);
    if (tk && tt && tk->n == 151936 && tt->n == 151936) {
        const gguf_str *ts = tk->arr;
        const int32_t *ty = tt->arr;
        CHECK(!strcmp(ts[151645].s, "<|im_end|>") && ty[151645] == 3);
        CHECK(!strcmp(ts[9707].s, "Hello") && ty[9707] == 1);
        CHECK(!strcmp(ts[151935].s, "[PAD151935]") && ty[151935] == 5);
    }
    const gguf_kv *mg = gguf_find(g, "tokenizer.ggml.merges");
    CHECK(mg && mg->n > 100000 && !strcmp(((const gguf_str *)mg->arr)[0].s, "\xc4\xa0 \xc4\xa0"));
    CHECK(gguf_get_int(g, "tokenizer.ggml.eos_token_id", &v) == 0 && v == 151645);
    CHECK(gguf_get_int(g, "tokenizer.ggml.padding_token_id", &v) == 0 && v == 151643);
    CHECK(gguf_get_int(g, "tokenizer.ggml.bos_token_id", &v) == -1);
    const gguf_kv *ab = gguf_find(g, "tokenizer.ggml.add_bos_token");
    CHECK(ab && ab->type == GGUF_BOOL && ab->u == 0);
    CHECK(gguf_get_str(g, "tokenizer.chat_template", &s) == 0 && strstr(s.s, "<|im_start|>"));
    gguf_close(g);
}

TEST(quantize_mlx) {
    char dir[512], out[600], p[700], err[1024];
    snprintf(dir, sizeof dir, "%s/models/qwen3-bf16", test_data_dir());
    for (int bits = 4; bits <= 8; bits += 4) {
        int group = bits == 4 ? 32 : 64;
        snprintf(out, sizeof out, "%s/qwen3-mlx%d", test_tmp_dir(), bits);
        CHECK_MSG(quantize_model(dir, out, bits == 4 ? "mlx4" : "mlx8", bits == 4 ? 32 : 0, 2, NULL, err, sizeof err) == 0,
                  "%s", err);
        snprintf(p, sizeof p, "%s/config.json", out);
        size_t n;
        char *cj = ds_read_file(p, &n, err, sizeof err);
        char want[64];
        snprintf(want, sizeof want, "\"bits\":\t%d", bits);
        CHECK_MSG(cj && strstr(cj, "\"quantization\"") && strstr(cj, want), "%s", cj ? cj : err);
        free(cj);
        st_set *src, *q;
        if (st_set_open(&src, dir, err, sizeof err) || st_set_open(&q, out, err, sizeof err)) {
            CHECK_MSG(0, "%s", err);
            continue;
        }
        int nq = 0;
        for (int i = 0; i < st_set_count(src); i++) {
            const tensor *t = st_set_get(src, i);
            size_t ln = strlen(t->name);
            if (t->ndim != 2 || t->shape[1] % group) { /* norms, rows not a whole number of groups: copied */
                const tensor *c = st_set_find(q, t->name);
                CHECK_MSG(c && c->dtype == t->dtype && c->nbytes == t->nbytes && !memcmp(c->data, t->data, t->nbytes),
                          "%s not copied", t->name);
                continue;
            }
            char nm[300];
            int64_t N = t->shape[0], K = t->shape[1];
            snprintf(nm, sizeof nm, "%.*s.scales", (int)(ln - 7), t->name);
            const tensor *sc = st_set_find(q, nm);
            snprintf(nm, sizeof nm, "%.*s.biases", (int)(ln - 7), t->name);
            const tensor *bi = st_set_find(q, nm);
            const tensor *w = st_set_find(q, t->name);
            if (!(sc && bi && w)) {
                CHECK_MSG(0, "%s: missing quantized parts", t->name);
                continue;
            }
            CHECK(w->dtype == DT_U32 && w->shape[0] == N && w->shape[1] == K * bits / 32);
            CHECK(sc->dtype == DT_BF16 && sc->shape[1] == K / group && bi->dtype == DT_BF16);
            float *x = malloc(sizeof(float) * (size_t)K), *y = malloc(sizeof(float) * (size_t)K);
            float *s = malloc(sizeof(float) * (size_t)(K / group)), *b = malloc(sizeof(float) * (size_t)(K / group));
            int bad = 0;
            for (int64_t r = 0; r < N; r++) {
                src_row_f32(t, K, r, x);
                for (int64_t gi = 0; gi < K / group; gi++) {
                    s[gi] = ds_bf16_to_f32(((const uint16_t *)sc->data)[r * (K / group) + gi]);
                    b[gi] = ds_bf16_to_f32(((const uint16_t *)bi->data)[r * (K / group) + gi]);
                }
                qenc_mlx_decode_row((const uint32_t *)w->data + r * (K * bits / 32), s, b, K, bits, group, y);
                for (int64_t k = 0; k < K; k++)
                    bad += fabs(y[k] - x[k]) > mlx_tol(x[k], s[k / group], b[k / group], bits, 1);
            }
            CHECK_MSG(!bad, "%s: %d values beyond bound", t->name, bad);
            nq++;
            free(x);
            free(y);
            free(s);
            free(b);
        }
        CHECK(nq > 10);
        /* an existing non-empty folder is never replaced */
        CHECK_EQ_INT(quantize_model(dir, out, "mlx4", 0, 2, NULL, err, sizeof err), -1);
        CHECK_MSG(strstr(err, "not empty"), "%s", err);
        st_set_close(src);
        st_set_close(q);
    }
}

TEST(quantize_errors) {
    char dir[512], out[600], err[1024];
    snprintf(dir, sizeof dir, "%s/models/qwen3-bf16", test_data_dir());
    snprintf(out, sizeof out, "%s/e.gguf", test_tmp_dir());
    CHECK_EQ_INT(quantize_model(dir, out, "Q3_X", 0, 1, NULL, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "unknown quantization type \"Q3_X\"") && strstr(err, "Q4_K_M"), "%s", err);
    CHECK_EQ_INT(quantize_model(dir, out, "Q8_0", 64, 1, NULL, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "MLX types"), "%s", err);
    CHECK_EQ_INT(quantize_model(dir, out, "mlx4", 48, 1, NULL, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "32, 64 or 128"), "%s", err);
    char nodir[600];
    snprintf(nodir, sizeof nodir, "%s/no-such-model", test_tmp_dir());
    CHECK_EQ_INT(quantize_model(nodir, out, "Q8_0", 0, 1, NULL, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "no-such-model"), "%s", err);
    CHECK_EQ_INT(quantize_model(dir, "/nonexistent-dir/x.gguf", "Q4_0", 0, 1, NULL, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "cannot write /nonexistent-dir/x.gguf"), "%s", err);
    CHECK(!ds_file_exists(out));
    /* the command line says the same */
    char args[1400], *e = NULL;
    snprintf(args, sizeof args, "quantize --model %s --out %s --type q9", dir, out);
    CHECK_EQ_INT(test_run_cli(args, NULL, &e), 1);
    CHECK_MSG(e && strstr(e, "unknown quantization type"), "%s", e ? e : "");
    free(e);
    snprintf(args, sizeof args, "quantize --model %s --type Q8_0", dir);
    CHECK_EQ_INT(test_run_cli(args, NULL, &e), 1);
    CHECK_MSG(e && strstr(e, "--out PATH is required"), "%s", e ? e : "");
    free(e);
    snprintf(args, sizeof args, "quantize --model %s --out %s --type Q4_K_M", dir, out);
    CHECK_EQ_INT(test_run_cli(args, NULL, &e), 0);
    CHECK_MSG(e && strstr(e, "wrote"), "%s", e ? e : "");
    free(e);
    CHECK(ds_file_exists(out));
}
