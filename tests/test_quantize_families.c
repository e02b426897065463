/* `dspark quantize` for gemma3 and mistral: the golden fixtures
 * tests/data/models/{gemma3,mistral,mistral-swa}-bf16 written as GGUF in
 * llama.cpp's layout and loaded back by dspark.
 *   - F32 and BF16 files give the checkpoint's logits bit for bit (the same
 *     weight values; gemma3's norms stored as 1 + w computed in f32, which
 *     is what dspark folds into them when it loads the checkpoint).
 *   - A Q8_0 file gives the logits of the checkpoint with each matrix
 *     rounded through Q8_0 (written here as F32 safetensors) within 2e-3
 *     of the largest logit (measured 2.5e-4 mistral, 9.3e-4 gemma3: the
 *     quantized matmul's 16-bit activations, and gemma3's soft-cap
 *     squeezing its largest logit). Against the unrounded checkpoint these
 *     random networks move by the weights' rounding, measured 0.06 to 0.10
 *     (mistral) and 0.38 (gemma3) of the largest logit: held at 0.5, a
 *     sanity bound only.
 *   - The metadata llama.cpp reads (the architecture, mistral as llama;
 *     window, layer pattern, RoPE bases and scaling, soft-cap, the score
 *     scale where llama.cpp's rule differs) and the config dspark rebuilds
 *     from it equal the checkpoint's.
 *   - gemma3's multimodal layout (the text model under
 *     language_model.model., a vision tower beside it) writes the same
 *     text model, the tower left out. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "base/gguf.h"
#include "base/util.h"
#include "cli/cli.h"
#include "engine/config.h"
#include "engine/model.h"
#include "engine/quant_encode.h"
#include "engine/safetensors.h"
#include "test.h"

enum { QV = 512, QT = 36 }; /* the fixtures' vocabulary; prompt length (past mistral-swa's window of 16) */

/* every row's logits of a fixed prompt, as one batch */
static float *logits_of(const char *path) {
    model *m;
    char err[512];
    if (model_load(&m, path, NULL, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s: %s", path, err);
        return NULL;
    }
    model_ctx *c;
    if (mctx_create(&c, m, 64, QT, NULL, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        model_free(m);
        return NULL;
    }
    float *out = xmalloc(sizeof(float) * QT * QV);
    int ids[QT];
    for (int i = 0; i < QT; i++) ids[i] = (i * 37 + 11) % QV;
    model_batch b = {.n = QT, .tokens = ids, .n_logits = QT, .logits = out};
    if (model_forward(c, &b, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        free(out);
        out = NULL;
    }
    mctx_free(c);
    model_free(m);
    return out;
}

/* max |a - b| / max |a| over every logit */
static double rel_diff(const float *a, const float *b) {
    double mx = 0, dd = 0;
    for (size_t i = 0; i < (size_t)QT * QV; i++) {
        mx = fabs(a[i]) > mx ? fabs(a[i]) : mx;
        dd = fabs(a[i] - b[i]) > dd ? fabs(a[i] - b[i]) : dd;
    }
    return mx > 0 ? dd / mx : INFINITY;
}

static void fixture_dir(char *dir, size_t n, const char *name) {
    snprintf(dir, n, "%s/models/%s", test_data_dir(), name);
}

static int quantize_to(const char *dir, const char *type, char *out, size_t n) {
    char err[1024];
    const char *base = strrchr(dir, '/');
    snprintf(out, n, "%s/%s-%s.gguf", test_tmp_dir(), base ? base + 1 : dir, type);
    if (quantize_model(dir, out, type, 0, 2, NULL, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "quantize %s %s: %s", dir, type, err);
        return -1;
    }
    return 0;
}

/* ---- a safetensors writer (F32 tensors) ---- */

typedef struct {
    char name[160];
    int64_t shape[2];
    int ndim;
    float *data;
} ftensor;

static int write_f32_safetensors(const char *path, const ftensor *t, int n) {
    cJSON *h = cJSON_CreateObject();
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t cnt = (size_t)t[i].shape[0] * (t[i].ndim == 2 ? (size_t)t[i].shape[1] : 1);
        cJSON *e = cJSON_AddObjectToObject(h, t[i].name);
        cJSON_AddStringToObject(e, "dtype", "F32");
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t[i].ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + 4 * cnt)));
        off += 4 * cnt;
    }
    char *js = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t hl = strlen(js), pad = (8 - hl % 8) % 8;
    FILE *f = fopen(path, "wb");
    if (!f) return free(js), -1;
    uint64_t len = hl + pad;
    fwrite(&len, 8, 1, f);
    fwrite(js, 1, hl, f);
    for (size_t i = 0; i < pad; i++) fputc(' ', f);
    for (int i = 0; i < n; i++)
        fwrite(t[i].data, 4, (size_t)t[i].shape[0] * (t[i].ndim == 2 ? (size_t)t[i].shape[1] : 1), f);
    free(js);
    return fclose(f);
}

static int copy_text(const char *from, const char *to) {
    char err[256];
    size_t n;
    char *d = ds_read_file(from, &n, err, sizeof err);
    FILE *f = d ? fopen(to, "wb") : NULL;
    int rc = f && fwrite(d, 1, n, f) == n ? 0 : -1;
    if (f) fclose(f);
    free(d);
    return rc;
}

/* src's tensors (BF16 or F16) as F32 into dst, "model." renamed to prefix
   (NULL: as they are), plus an optional extra vector; with q8 each 2-D
   matrix rounded through Q8_0 (the fixtures' rows are whole blocks) */
static int write_variant(const char *src, const char *dst, const char *config_text, const char *prefix, int q8,
                         const char *extra) {
    char err[512], p[800];
    st_set *st;
    if (st_set_open(&st, src, err, sizeof err) != 0) return test_fail(__FILE__, __LINE__, "%s", err), -1;
    mkdir(dst, 0755);
    int n = st_set_count(st);
    ftensor *t = xcalloc((size_t)n + 1, sizeof *t);
    for (int i = 0; i < n; i++) {
        const tensor *s = st_set_get(st, i);
        int64_t K = s->shape[s->ndim - 1], N = s->ndim == 2 ? s->shape[0] : 1;
        if (prefix && !strncmp(s->name, "model.", 6)) snprintf(t[i].name, sizeof t[i].name, "%s%s", prefix, s->name + 6);
        else snprintf(t[i].name, sizeof t[i].name, "%s", s->name);
        t[i].ndim = s->ndim;
        t[i].shape[0] = s->shape[0], t[i].shape[1] = s->ndim == 2 ? s->shape[1] : 0;
        t[i].data = xmalloc(sizeof(float) * (size_t)(N * K));
        for (int64_t k = 0; k < N * K; k++) {
            uint16_t h = ((const uint16_t *)s->data)[k];
            t[i].data[k] = s->dtype == DT_BF16 ? ds_bf16_to_f32(h) : ds_f16_to_f32(h);
        }
        if (q8 && s->ndim == 2 && K % 32 == 0) {
            uint8_t *blk = xmalloc(qenc_row_bytes(DT_Q8_0, K));
            for (int64_t r = 0; r < N; r++) {
                qenc_row(DT_Q8_0, t[i].data + r * K, K, blk);
                qenc_decode_row(DT_Q8_0, blk, K, t[i].data + r * K);
            }
            free(blk);
        }
    }
    int nt = n;
    if (extra) { /* a tensor of another network (a vision tower's) */
        snprintf(t[nt].name, sizeof t[nt].name, "%s", extra);
        t[nt].ndim = 1, t[nt].shape[0] = 8;
        t[nt].data = xcalloc(8, sizeof(float));
        nt++;
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dst);
    int rc = write_f32_safetensors(p, t, nt);
    for (int i = 0; i < nt; i++) free(t[i].data);
    free(t);
    st_set_close(st);
    snprintf(p, sizeof p, "%s/config.json", dst);
    if (config_text) {
        FILE *f = fopen(p, "w");
        rc |= !f || fputs(config_text, f) < 0;
        if (f) fclose(f);
    } else {
        char from[800];
        snprintf(from, sizeof from, "%s/config.json", src);
        rc |= copy_text(from, p);
    }
    return rc;
}

/* ---- the tests ---- */

static const char *const FIXTURES[] = {"gemma3-bf16", "mistral-bf16", "mistral-swa-bf16"};

TEST(quantize_families_float_exact) {
    for (int f = 0; f < 3; f++) {
        char dir[600], out[800];
        fixture_dir(dir, sizeof dir, FIXTURES[f]);
        float *ref = logits_of(dir);
        static const char *TY[] = {"F32", "BF16"};
        for (int ti = 0; ti < 2 && ref; ti++) {
            if (quantize_to(dir, TY[ti], out, sizeof out)) continue;
            float *got = logits_of(out);
            if (got)
                CHECK_MSG(!memcmp(ref, got, sizeof(float) * QT * QV), "%s %s: logits differ from the checkpoint's (%g)",
                          FIXTURES[f], TY[ti], rel_diff(ref, got));
            free(got);
        }
        free(ref);
    }
}

TEST(quantize_families_q8_0) {
    for (int f = 0; f < 3; f++) {
        char dir[600], out[800], dq[800];
        fixture_dir(dir, sizeof dir, FIXTURES[f]);
        snprintf(dq, sizeof dq, "%s/%s-q8-rounded", test_tmp_dir(), FIXTURES[f]);
        if (quantize_to(dir, "Q8_0", out, sizeof out) || write_variant(dir, dq, NULL, NULL, 1, NULL)) continue;
        float *ref = logits_of(dir), *rounded = logits_of(dq), *got = logits_of(out);
        if (ref && rounded && got) {
            double e = rel_diff(rounded, got), e0 = rel_diff(ref, got);
            CHECK_MSG(e <= 2e-3, "%s Q8_0: %g from the Q8_0-rounded weights' logits", FIXTURES[f], e);
            CHECK_MSG(e0 > 0 && e0 <= 0.5, "%s Q8_0: %g from the checkpoint's logits", FIXTURES[f], e0);
        }
        free(ref), free(rounded), free(got);
    }
}

static int64_t meta_i(gguf *g, const char *key) {
    int64_t v;
    return gguf_get_int(g, key, &v) == 0 ? v : -1;
}
static double meta_f(gguf *g, const char *key) {
    double v;
    return gguf_get_float(g, key, &v) == 0 ? v : NAN;
}

/* what the GGUF's config says equals what the checkpoint's says */
static void check_same_config(const char *dir, const char *path, const char *what) {
    model_config a, b;
    char err[512];
    model *m;
    if (config_load(&a, dir, err, sizeof err) != 0 || model_load(&m, path, NULL, err, sizeof err) != 0) {
        CHECK_MSG(0, "%s: %s", what, err);
        return;
    }
    b = *model_cfg(m);
    model_free(m);
    /* a mistral without a window is a llama (the same file either way) */
    ds_arch arch = a.arch == ARCH_MISTRAL && !a.sliding_window ? ARCH_LLAMA : a.arch;
    CHECK_MSG(b.arch == arch, "%s: arch %s, read back %s", what, config_arch_name(a.arch), config_arch_name(b.arch));
    CHECK_EQ_INT(b.n_layers, a.n_layers);
    CHECK_EQ_INT(b.head_dim, a.head_dim);
    CHECK_EQ_INT(b.n_kv_heads, a.n_kv_heads);
    CHECK_EQ_INT(b.sliding_window, a.sliding_window);
    CHECK_MSG(!memcmp(a.sliding, b.sliding, (size_t)a.n_layers), "%s: the sliding layers differ", what);
    CHECK(a.rope_theta == b.rope_theta && a.rope_type == b.rope_type && a.rope_factor == b.rope_factor);
    CHECK(a.rope_local_theta == b.rope_local_theta);
    CHECK_MSG(a.attn_scale == b.attn_scale, "%s: score scale %.9g, read back %.9g", what, a.attn_scale, b.attn_scale);
    CHECK(a.final_softcap == b.final_softcap && a.embed_scale == b.embed_scale && a.rms_norm_eps == b.rms_norm_eps);
    CHECK_EQ_INT(b.tie_word_embeddings, a.tie_word_embeddings);
    CHECK_EQ_INT(b.norm_plus_one, 0); /* the file's norms carry the + 1 */
}

TEST(quantize_families_metadata) {
    char dir[600], out[800];
    gguf *g;
    char err[512];
    gguf_str s;
    /* gemma3: layers s, s, f, s (not llama.cpp's default period of 6, so a
       flag a layer), window 16, bases 1e6 / 1e4, linear scaling 2 on the
       global layers, soft-cap 5, query_pre_attn_scalar 24 (llama.cpp would
       take 1/sqrt(32)) */
    fixture_dir(dir, sizeof dir, "gemma3-bf16");
    if (quantize_to(dir, "F32", out, sizeof out) == 0 && gguf_open(&g, out, 0, err, sizeof err) == 0) {
        CHECK(gguf_get_str(g, "general.architecture", &s) == 0 && !strcmp(s.s, "gemma3"));
        CHECK_EQ_INT(meta_i(g, "gemma3.block_count"), 4);
        CHECK_EQ_INT(meta_i(g, "gemma3.attention.key_length"), 32);
        CHECK_EQ_INT(meta_i(g, "gemma3.attention.sliding_window"), 16);
        const gguf_kv *pat = gguf_find(g, "gemma3.attention.sliding_window_pattern");
        CHECK(pat && pat->type == GGUF_ARRAY && pat->elt == GGUF_BOOL && pat->n == 4 &&
              !memcmp(pat->arr, "\1\1\0\1", 4));
        CHECK(meta_f(g, "gemma3.rope.freq_base") == 1e6 && meta_f(g, "gemma3.rope.freq_base_swa") == 1e4);
        CHECK(gguf_get_str(g, "gemma3.rope.scaling.type", &s) == 0 && !strcmp(s.s, "linear"));
        CHECK(meta_f(g, "gemma3.rope.scaling.factor") == 2.0 && meta_f(g, "gemma3.final_logit_softcapping") == 5.0);
        CHECK(meta_f(g, "gemma3.attention.scale") == (double)(float)pow(24, -0.5));
        CHECK(!gguf_find_tensor(g, "output.weight")); /* tied */
        /* the norms with Gemma's + 1, in f32 */
        st_set *st;
        if (st_set_open(&st, dir, err, sizeof err) == 0) {
            static const char *const N[][2] = {{"blk.1.attn_norm.weight", "model.layers.1.input_layernorm.weight"},
                                               {"blk.1.post_attention_norm.weight", "model.layers.1.post_attention_layernorm.weight"},
                                               {"blk.1.ffn_norm.weight", "model.layers.1.pre_feedforward_layernorm.weight"},
                                               {"blk.1.post_ffw_norm.weight", "model.layers.1.post_feedforward_layernorm.weight"},
                                               {"blk.1.attn_q_norm.weight", "model.layers.1.self_attn.q_norm.weight"},
                                               {"blk.1.attn_k_norm.weight", "model.layers.1.self_attn.k_norm.weight"},
                                               {"output_norm.weight", "model.norm.weight"}};
            for (size_t i = 0; i < sizeof N / sizeof N[0]; i++) {
                const gguf_tensor *gt = gguf_find_tensor(g, N[i][0]);
                const tensor *t = st_set_find(st, N[i][1]);
                int ok = gt && t && gt->type == GGML_F32 && gt->ne[0] == t->shape[0];
                for (int64_t k = 0; ok && k < t->shape[0]; k++)
                    ok = ((const float *)gt->data)[k] == 1.0f + ds_bf16_to_f32(((const uint16_t *)t->data)[k]);
                CHECK_MSG(ok, "%s is not 1 + %s", N[i][0], N[i][1]);
            }
            st_set_close(st);
        }
        gguf_close(g);
        check_same_config(dir, out, "gemma3");
    }
    /* mistral: llama.cpp's llama (q/k rows permuted, checked by the exact
       logits), head size 32 beside hidden / heads = 16; the window where
       one is set, on every layer */
    for (int w = 0; w < 2; w++) {
        fixture_dir(dir, sizeof dir, w ? "mistral-swa-bf16" : "mistral-bf16");
        if (quantize_to(dir, "BF16", out, sizeof out) || gguf_open(&g, out, 0, err, sizeof err)) continue;
        CHECK(gguf_get_str(g, "general.architecture", &s) == 0 && !strcmp(s.s, "llama"));
        CHECK_EQ_INT(meta_i(g, "llama.attention.key_length"), 32);
        CHECK_EQ_INT(meta_i(g, "llama.rope.dimension_count"), 32);
        CHECK_EQ_INT(meta_i(g, "llama.vocab_size"), QV);
        CHECK_EQ_INT(meta_i(g, "general.file_type"), 32);
        CHECK(meta_f(g, "llama.rope.freq_base") == 1e6);
        CHECK_EQ_INT(meta_i(g, "llama.attention.sliding_window"), w ? 16 : -1);
        CHECK(!gguf_find(g, "llama.attention.sliding_window_pattern"));
        CHECK(gguf_find_tensor(g, "output.weight") && !strcmp(gguf_type_name(gguf_find_tensor(g, "blk.0.attn_q.weight")->type), "BF16"));
        gguf_close(g);
        check_same_config(dir, out, w ? "mistral-swa" : "mistral");
    }
}

TEST(quantize_families_gemma3_multimodal) {
    char dir[600], mm[800], out[800], out_mm[800], err[1024];
    fixture_dir(dir, sizeof dir, "gemma3-bf16");
    snprintf(mm, sizeof mm, "%s/gemma3-mm", test_tmp_dir());
    /* the fixture's config as a gemma3 checkpoint's text_config */
    size_t n;
    char p[700];
    snprintf(p, sizeof p, "%s/config.json", dir);
    char *txt = ds_read_file(p, &n, err, sizeof err);
    cJSON *tc = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    if (!tc) {
        CHECK_MSG(0, "%s", err);
        return;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "architectures"), cJSON_CreateString("Gemma3ForConditionalGeneration"));
    cJSON_AddStringToObject(root, "model_type", "gemma3");
    cJSON_AddItemToObject(root, "text_config", tc);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "vision_config"), "model_type", "siglip_vision_model");
    char *cfg = cJSON_Print(root);
    cJSON_Delete(root);
    int rc = write_variant(dir, mm, cfg, "language_model.model.", 0, "vision_tower.vision_model.post_layernorm.weight");
    free(cfg);
    CHECK(rc == 0);
    if (rc || quantize_to(dir, "BF16", out, sizeof out)) return;
    snprintf(out_mm, sizeof out_mm, "%s/gemma3-mm.gguf", test_tmp_dir());
    CHECK_MSG(quantize_model(mm, out_mm, "BF16", 0, 2, NULL, err, sizeof err) == 0, "%s", err);
    gguf *a, *b;
    if (gguf_open(&a, out, 0, err, sizeof err) || gguf_open(&b, out_mm, 0, err, sizeof err)) {
        CHECK_MSG(0, "%s", err);
        return;
    }
    CHECK_EQ_INT(gguf_tensor_count(b), gguf_tensor_count(a));
    for (int i = 0; i < gguf_tensor_count(a); i++) {
        const gguf_tensor *x = gguf_tensor_at(a, i), *y = gguf_find_tensor(b, x->name);
        CHECK_MSG(y && y->type == x->type && y->nbytes == x->nbytes && !memcmp(x->data, y->data, x->nbytes),
                  "%s differs in the multimodal layout's file", x->name);
    }
    gguf_close(a);
    gguf_close(b);
}
