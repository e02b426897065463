/* model_forward_multi on the GPU (cuda_forward_multi): one call over
 * sequences of different cache lengths holding a decode row, a verify of 8
 * rows, a prefill chunk of 300 rows (two whole cuBLAS groups and 44 rows
 * past them), a 130-row chunk on a context too narrow for groups and a
 * tapped verify, against model_forward on twin contexts one after another:
 * the same logits and argmax bits, the same taps, and the same caches (a
 * decode row after them gives the same bits). The bundled model (bf16, at
 * 32- and 8-bit caches) and quantized fixtures (GGUF and MLX). Then the
 * multi form's refusals: taps left on the device. tests/test_multi.c's
 * random mixes run on the GPU too (scripts/test-cuda). Built only by
 * `make test-cuda`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cuda/cuda_hooks.h"
#include "engine/model.h"
#include "spec/registry.h"
#include "test.h"

enum { NS = 5, PRE_MAX = 40 };

static model *load_on_gpu(const char *path, int kv_bits) {
    if (cuda_device_count() <= 0) {
        test_fail(__FILE__, __LINE__, "no CUDA device visible (make test-cuda needs a GPU)");
        return NULL;
    }
    char err[1024];
    model *m;
    model_load_opts o = {.device = "cuda", .kv_bits = kv_bits};
    if (model_load(&m, path, &o, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s: %s", path, err);
        return NULL;
    }
    return m;
}

/* one call of NS sequences against their forwards in turn */
static void compare(const char *what, model *m) {
    const model_config *c = model_cfg(m);
    const int V = c->vocab_size, H = c->hidden_size;
    static const int pre[NS] = {5, 40, 0, 17, 29};       /* cached positions before the call */
    static const int rows[NS] = {1, 8, 300, 130, 6};     /* decode, verify, prefill with groups, narrow, tapped */
    static const int mbatch[NS] = {64, 64, 256, 64, 32}; /* 64: no cuBLAS groups in that context */
    static const int nlog[NS] = {1, 8, 1, 3, 2};
    char err[1024];
    model_ctx *a[NS], *b[NS];
    int *tok[NS];
    uint32_t s = 12345;
    for (int i = 0; i < NS; i++) {
        tok[i] = xmalloc(sizeof(int) * (size_t)(pre[i] + rows[i] + 1));
        for (int j = 0; j < pre[i] + rows[i] + 1; j++) tok[i][j] = (int)((s = s * 1664525u + 1013904223u) >> 8) % V;
        CHECK(mctx_create(&a[i], m, 512, mbatch[i], NULL, err, sizeof err) == 0);
        CHECK(mctx_create(&b[i], m, 512, mbatch[i], NULL, err, sizeof err) == 0);
        if (!pre[i]) continue;
        model_batch p = {.n = pre[i], .tokens = tok[i]};
        CHECK(model_forward(a[i], &p, err, sizeof err) == 0);
        CHECK(model_forward(b[i], &p, err, sizeof err) == 0);
    }
    static const int sel[3] = {0, 64, 129}; /* the narrow chunk's logits rows */
    int taps[2] = {-1, c->n_layers / 2};
    float *lga[NS], *lgb[NS];
    float *tpa = xmalloc(sizeof(float) * 2 * 6 * (size_t)H), *tpb = xmalloc(sizeof(float) * 2 * 6 * (size_t)H);
    int ida[NS][8], idb[NS][8];
    model_batch ba[NS], bb[NS];
    for (int i = 0; i < NS; i++) {
        lga[i] = xmalloc(sizeof(float) * (size_t)nlog[i] * V);
        lgb[i] = xmalloc(sizeof(float) * (size_t)nlog[i] * V);
        ba[i] = (model_batch){.n = rows[i], .tokens = tok[i] + pre[i], .n_logits = nlog[i], .logits = lga[i],
                              .argmax = ida[i]};
        if (i == 3) ba[i].logit_rows = sel;
        if (i == 4) ba[i].n_taps = 2, ba[i].tap_layers = taps, ba[i].taps = tpa;
        bb[i] = ba[i];
        bb[i].logits = lgb[i], bb[i].argmax = idb[i];
        if (i == 4) bb[i].taps = tpb;
    }
    ba[0].logits = NULL; /* the decode row: its argmax alone */
    bb[0].logits = NULL;
    CHECK_MSG(model_forward_multi(a, ba, NS, err, sizeof err) == 0, "%s: %s", what, err);
    for (int i = 0; i < NS; i++) {
        CHECK_MSG(model_forward(b[i], &bb[i], err, sizeof err) == 0, "%s: %s", what, err);
        CHECK_EQ_INT(mctx_len(a[i]), mctx_len(b[i]));
        if (ba[i].logits)
            CHECK_MSG(!memcmp(lga[i], lgb[i], sizeof(float) * (size_t)nlog[i] * V), "%s: sequence %d (%d rows): logits "
                      "differ from its forward alone", what, i, rows[i]);
        CHECK_MSG(!memcmp(ida[i], idb[i], sizeof(int) * (size_t)nlog[i]), "%s: sequence %d: argmax differs", what, i);
    }
    CHECK_MSG(!memcmp(tpa, tpb, sizeof(float) * 2 * 6 * (size_t)H), "%s: the taps differ", what);
    /* the caches: a decode row on each alone */
    float *la = xmalloc(sizeof(float) * (size_t)V), *lb = xmalloc(sizeof(float) * (size_t)V);
    for (int i = 0; i < NS; i++) {
        const int *t = tok[i] + pre[i] + rows[i];
        model_batch d = {.n = 1, .tokens = t, .n_logits = 1, .logits = la};
        CHECK(model_forward(a[i], &d, err, sizeof err) == 0);
        d.logits = lb;
        CHECK(model_forward(b[i], &d, err, sizeof err) == 0);
        CHECK_MSG(!memcmp(la, lb, sizeof(float) * (size_t)V), "%s: sequence %d's cache differs", what, i);
    }
    /* refused: taps left on the device (nothing runs) */
    int one = tok[0][0];
    model_batch r[2] = {{.n = 1, .tokens = &one, .n_logits = 1, .argmax = ida[0]},
                        {.n = 1, .tokens = &one, .n_taps = 1, .tap_layers = taps, .taps_resident = 1}};
    const int len0 = mctx_len(a[0]), len1 = mctx_len(a[1]);
    CHECK(model_forward_multi(a, r, 2, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "sequence 1") && strstr(err, "taps_resident"), "%s: error: %s", what, err);
    CHECK(mctx_len(a[0]) == len0 && mctx_len(a[1]) == len1);
    free(la);
    free(lb);
    free(tpa);
    free(tpb);
    for (int i = 0; i < NS; i++) {
        free(lga[i]);
        free(lgb[i]);
        free(tok[i]);
        mctx_free(a[i]);
        mctx_free(b[i]);
    }
}

TEST(cuda_multi_bundled) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/../../models/%s", test_data_dir(), DSPARK_DEFAULT_MODEL);
    static const int bits[] = {32, 8};
    for (int k = 0; k < 2; k++) {
        model *m = load_on_gpu(dir, bits[k]);
        if (!m) return;
        char what[64];
        snprintf(what, sizeof what, "bundled, kv %d", bits[k]);
        compare(what, m);
        model_free(m);
    }
}

TEST(cuda_multi_quant) {
    static const char *const fx[] = {"qwen3-q4_0/model.gguf", "qwen3-256-q4_k_m/model.gguf", "llama3-q8_0/model.gguf",
                                     "qwen3-mlx-4bit-g64"};
    for (size_t k = 0; k < sizeof fx / sizeof fx[0]; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/quant_models/%s", test_data_dir(), fx[k]);
        model *m = load_on_gpu(path, 32);
        if (!m) return;
        compare(fx[k], m);
        model_free(m);
    }
}
