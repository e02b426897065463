/* --kv-bits: the KV cache stored in f16 or int8 (kv.h). The row rules
 * (each row quantized alone, so its bits never depend on its batch), the
 * attention kernels over the widened rows (bit for bit op_attention over
 * the widened cache, scalar and SIMD alike), the logits against the f32
 * cache on the golden models (bounded below), and greedy speculative
 * output equal to plain decoding within each storage. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/util.h"
#include "engine/kv.h"
#include "engine/model.h"
#include "engine/ops.h"
#include "spec/lookup.h"
#include "spec/registry.h"
#include "spec/seq.h"
#include "spec/spec.h"
#include "hooks.h"
#include "test.h"

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

TEST(kvbits_row_rules) {
    float x[64], y[64];
    int8_t q[64];
    uint16_t h[64];
    float sc;
    uint32_t seed = 7;
    for (int i = 0; i < 64; i++) x[i] = 3.0f * frand(&seed);
    kv_quant_i8(x, 64, q, &sc);
    kv_dequant_i8(q, sc, 64, y);
    float amax = 0;
    for (int i = 0; i < 64; i++) amax = fmaxf(amax, fabsf(x[i]));
    CHECK(sc == amax / 127.0f);
    for (int i = 0; i < 64; i++) CHECK_MSG(fabsf(y[i] - x[i]) <= 0.5f * sc * 1.0001f, "int8 %d: %g vs %g", i, y[i], x[i]);
    kv_quant_f16(x, 64, h);
    kv_dequant_f16(h, 64, y);
    for (int i = 0; i < 64; i++) CHECK_MSG(fabsf(y[i] - x[i]) <= fabsf(x[i]) * 0x1p-11f, "f16 %d", i);
    /* f16 saturates rather than overflowing to inf; int8 of zeros is zeros */
    float big[2] = {1e6f, -7e4f};
    kv_quant_f16(big, 2, h);
    kv_dequant_f16(h, 2, y);
    CHECK(y[0] == 65504.0f && y[1] == -65504.0f);
    memset(x, 0, sizeof x);
    kv_quant_i8(x, 64, q, &sc);
    CHECK(sc == 0.0f && q[0] == 0 && q[63] == 0);
    CHECK(!kv_bits_ok(4) && kv_bits_ok(8) && kv_bits_ok(16) && kv_bits_ok(32));
    char err[256];
    kv_cache *kv;
    CHECK(kv_create(&kv, NULL, 1, 1, 8, 4, 12, err, sizeof err) != 0);
    CHECK(kv_bytes_per_pos(28, 8, 128, 32) == 229376 && kv_bytes_per_pos(28, 8, 128, 16) == 114688 &&
          kv_bytes_per_pos(28, 8, 128, 8) == 59136);
}

/* rows stored M at a time equal rows stored one by one, and attention over
   a 16- or 8-bit cache equals op_attention over its widened copy (bits),
   with the scalar and the SIMD kernels */
TEST(kvbits_store_and_attention) {
    enum { L = 2, NKV = 2, NH = 4, HD = 64, CAP = 200, M = 7, NP = 150 };
    const int bits[2] = {16, 8};
    uint32_t seed = 99;
    float *k = xmalloc(sizeof(float) * CAP * NKV * HD), *v = xmalloc(sizeof(float) * CAP * NKV * HD);
    for (int i = 0; i < CAP * NKV * HD; i++) k[i] = 2.0f * frand(&seed), v[i] = frand(&seed);
    float *q = xmalloc(sizeof(float) * M * NH * HD);
    for (int i = 0; i < M * NH * HD; i++) q[i] = frand(&seed);
    float *kw = xmalloc(sizeof(float) * NKV * CAP * HD), *vw = xmalloc(sizeof(float) * NKV * CAP * HD);
    float *o1 = xmalloc(sizeof(float) * M * NH * HD), *o2 = xmalloc(sizeof(float) * M * NH * HD);
    tpool *tp = tp_create(2);
    char err[256];
    for (int b = 0; b < 2; b++) {
        kv_cache *a, *c;
        CHECK(kv_create(&a, NULL, L, NKV, HD, CAP, bits[b], err, sizeof err) == 0);
        CHECK(kv_create(&c, NULL, L, NKV, HD, CAP, bits[b], err, sizeof err) == 0);
        const int n = NP + M;
        for (int l = 0; l < L; l++) kv_store(a, l, k, v, n); /* one batch */
        kv_commit(a, n);
        for (int p = 0; p < n; p++) { /* one row at a time */
            for (int l = 0; l < L; l++) kv_store(c, l, k + (size_t)p * NKV * HD, v + (size_t)p * NKV * HD, 1);
            kv_commit(c, 1);
        }
        kv_view wa = kv_layer(a, 1), wc = kv_layer(c, 1);
        /* the same stored bits, and the widened copy (positions past the
           first page: the kernels read the rows page by page) */
        const size_t rb = (size_t)HD * (size_t)(bits[b] / 8);
        for (int g = 0; g < NKV; g++)
            for (int t = 0; t < n; t++) {
                size_t at = ((size_t)g * CAP + (size_t)t);
                for (int w = 0; w < 2; w++) {
                    const void *ra = kv_view_row(&wa, w, g, t, HD), *rc = kv_view_row(&wc, w, g, t, HD);
                    CHECK(!memcmp(ra, rc, rb));
                    float *dst = (w ? vw : kw) + at * HD;
                    if (bits[b] == 16) {
                        kv_dequant_f16(ra, HD, dst);
                    } else {
                        CHECK(*kv_view_scale(&wa, w, g, t) == *kv_view_scale(&wc, w, g, t));
                        kv_dequant_i8(ra, *kv_view_scale(&wa, w, g, t), HD, dst);
                    }
                }
            }
        for (int simd = 0; simd < 2; simd++) {
            int prev = ops_use_simd(simd);
            for (int full = 0; full < 2; full++) {
                op_attention_kv(tp, o1, q, M, NH, NKV, HD, &wa, NP, 0.125f, full, 0);
                if (full) op_attention_block(tp, o2, q, M, NH, NKV, HD, kw, vw, CAP, NP, 0.125f);
                else op_attention(tp, o2, q, M, NH, NKV, HD, kw, vw, CAP, NP, 0.125f);
                CHECK_MSG(!memcmp(o1, o2, sizeof(float) * M * NH * HD), "bits %d simd %d full %d: not the same bits",
                          bits[b], simd, full);
            }
            ops_use_simd(prev);
        }
        /* a row alone equals the row in its batch */
        op_attention_kv(tp, o1, q, M, NH, NKV, HD, &wa, NP, 0.125f, 0, 0);
        op_attention_kv(NULL, o2, q + (size_t)3 * NH * HD, 1, NH, NKV, HD, &wa, NP + 3, 0.125f, 0, 0);
        CHECK(!memcmp(o1 + (size_t)3 * NH * HD, o2, sizeof(float) * NH * HD));
        CHECK(kv_release(a) > 0 && kv_len(a) == 0);
        kv_free(a);
        kv_free(c);
    }
    tp_free(tp);
    free(k), free(v), free(q), free(kw), free(vw), free(o1), free(o2);
}

/* ---- golden models: logits against the f32 cache ---- */

typedef struct {
    int n_prompt, n_tok, tokens[128];
} gold;

static int read_gold(const char *dir, gold *g) {
    char path[700], err[256];
    snprintf(path, sizeof path, "%s/golden.json", dir);
    cJSON *j = json_parse_file(path, err, sizeof err);
    if (!j) return test_fail(__FILE__, __LINE__, "%s", err), -1;
    const cJSON *v;
    g->n_prompt = g->n_tok = 0;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(j, "prompt")) g->n_prompt++;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(j, "tokens")) if (g->n_tok < 128) g->tokens[g->n_tok++] = v->valueint;
    cJSON_Delete(j);
    return 0;
}

/* every row's logits of the golden tokens: the prompt as one prefill, the
   rest decoded one row at a time (so both the prefill and the decode
   attention read the cache) */
static float *logits_at(const char *dir, const gold *g, int kv_bits, int *V) {
    model *m;
    char err[512];
    model_load_opts lo = {.kv_bits = kv_bits};
    if (model_load(&m, dir, &lo, err, sizeof err) != 0) return test_fail(__FILE__, __LINE__, "%s", err), NULL;
    *V = model_cfg(m)->vocab_size;
    model_ctx *c;
    float *lg = xmalloc(sizeof(float) * (size_t)g->n_tok * (size_t)*V);
    CHECK(mctx_create(&c, m, 256, 64, NULL, err, sizeof err) == 0);
    model_batch b = {.n = g->n_prompt, .tokens = g->tokens, .n_logits = g->n_prompt, .logits = lg};
    CHECK(model_forward(c, &b, err, sizeof err) == 0);
    for (int i = g->n_prompt; i < g->n_tok; i++) {
        model_batch d = {.n = 1, .tokens = &g->tokens[i], .n_logits = 1, .logits = lg + (size_t)i * (size_t)*V};
        CHECK(model_forward(c, &d, err, sizeof err) == 0);
    }
    mctx_free(c);
    model_free(m);
    return lg;
}

/* Bounds on max |logit - f32 cache's| / max |f32 cache's logit| over every
   row of every golden model (measured: docs/ARCHITECTURE.md, "KV storage") */
#define KV16_BOUND 3e-3
#define KV8_BOUND 6e-2

TEST(kvbits_golden_logits) {
    static const char *models[] = {"qwen3-bf16", "qwen3-f32-untied", "qwen2-bf16-legacy", "llama3-bf16",
                                   "llama3-f16-legacy", "bundled"};
    double worst[2] = {0, 0};
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        char dir[600], gdir[600];
        if (!strcmp(models[mi], "bundled")) {
            snprintf(dir, sizeof dir, "%s/../../models/%s", test_data_dir(), DSPARK_DEFAULT_MODEL);
            snprintf(gdir, sizeof gdir, "%s/bundled/target", test_data_dir());
        } else {
            snprintf(dir, sizeof dir, "%s/models/%s", test_data_dir(), models[mi]);
            snprintf(gdir, sizeof gdir, "%s", dir);
        }
        gold g;
        if (read_gold(gdir, &g) != 0) continue;
        int V;
        float *ref = logits_at(dir, &g, 32, &V);
        for (int b = 0; b < 2 && ref; b++) {
            float *lg = logits_at(dir, &g, b ? 8 : 16, &V);
            if (!lg) continue;
            double e = 0;
            for (int r = 0; r < g.n_tok - 1; r++) {
                double md = 0, mr = 0;
                for (int i = 0; i < V; i++) {
                    size_t at = (size_t)r * V + (size_t)i;
                    md = fmax(md, fabs((double)lg[at] - ref[at]));
                    mr = fmax(mr, fabs((double)ref[at]));
                }
                e = fmax(e, md / mr);
            }
            if (getenv("DSPARK_TEST_VERBOSE"))
                fprintf(stderr, "  %s --kv-bits %d: max|diff|/max|logit| %.3g vs the f32 cache\n", models[mi],
                        b ? 8 : 16, e);
            worst[b] = fmax(worst[b], e);
            free(lg);
        }
        free(ref);
    }
    CHECK_MSG(worst[0] <= KV16_BOUND, "--kv-bits 16: %.3g > %.3g", worst[0], KV16_BOUND);
    CHECK_MSG(worst[1] <= KV8_BOUND, "--kv-bits 8: %.3g > %.3g", worst[1], KV8_BOUND);
    CHECK(worst[0] > 0 && worst[1] > worst[0]); /* the storage is really used */
}

/* ---- lossless within each storage ---- */

/* a drafter that proposes a known continuation with every `every`-th draft
   wrong, so rounds accept some and reject some */
typedef struct {
    const int *ref;
    int n_ref, pos, every, vocab;
} oracle;
static int or_reset(void *self, const int *ids, int n) {
    (void)ids;
    ((oracle *)self)->pos = n;
    return 0;
}
static int or_propose(void *self, int k, int *draft, float *q) {
    (void)q;
    oracle *o = self;
    int n = 0;
    for (; n < k && o->pos + n < o->n_ref; n++) {
        draft[n] = o->ref[o->pos + n];
        if ((o->pos + n) % o->every == 0) draft[n] = (draft[n] + 1) % o->vocab;
    }
    return n;
}
static void or_commit(void *self, const int *ids, int n) {
    (void)ids;
    ((oracle *)self)->pos += n;
}

static int generate(model *m, tpool *tp, drafter *d, int k, const int *prompt, int n, int *out, char *err) {
    seq *s;
    if (seq_create(&s, m, 512, 64, tp, err, 512) != 0) return -1;
    sampler *smp;
    sampler_params sp = {.temperature = 0, .top_p = 1};
    sampler_create(&smp, &sp, model_cfg(m)->vocab_size, err, 512);
    spec_opts so = {.max_new = 80, .max_draft = k, .ignore_eos = 1};
    spec_stats st;
    int rc = spec_generate(s, smp, d, prompt, n, &so, out, NULL, &st, err, 512);
    sampler_free(smp);
    seq_free(s);
    return rc ? -1 : st.n_gen;
}

static void lossless_bits(const char *name, int bits) {
    char dir[600], err[512];
    snprintf(dir, sizeof dir, "%s/models/%s", test_data_dir(), name);
    model *m;
    model_load_opts lo = {.kv_bits = bits};
    if (model_load(&m, dir, &lo, err, sizeof err) != 0) return test_fail(__FILE__, __LINE__, "%s", err);
    CHECK_EQ_INT(model_kv_bits(m), bits);
    tpool *tp = tp_create(2);
    const int V = model_cfg(m)->vocab_size;
    int base[80], got[80], prompt[32], ref[120], mism = 0;
    lookup *lk = lookup_create(3, 1);
    for (int pi = 0; pi < 6; pi++) {
        uint32_t s = 4242u + (uint32_t)pi * 977u;
        int n = 4 + pi * 3;
        for (int j = 0; j < n; j++) prompt[j] = pi % 2 ? (int)(j % 3) + 5 : (int)((s = s * 1664525u + 1013904223u) % (uint32_t)V);
        int nb = generate(m, tp, NULL, 1, prompt, n, base, err);
        if (nb < 0) {
            test_fail(__FILE__, __LINE__, "%s", err);
            break;
        }
        memcpy(ref, prompt, sizeof(int) * (size_t)n);
        memcpy(ref + n, base, sizeof(int) * (size_t)nb);
        const int ks[3] = {2, 5, 16};
        for (int ki = 0; ki < 3; ki++)
            for (int which = 0; which < 2; which++) {
                oracle o = {.ref = ref, .n_ref = n + nb, .every = 3 + ki, .vocab = V};
                drafter d = which ? lookup_drafter(lk)
                                  : (drafter){.self = &o, .deterministic = 1, .reset = or_reset,
                                              .propose = or_propose, .commit = or_commit};
                int ng = generate(m, tp, &d, ks[ki], prompt, n, got, err);
                if (ng != nb || memcmp(got, base, sizeof(int) * (size_t)nb))
                    if (mism++ < 3)
                        test_fail(__FILE__, __LINE__, "%s --kv-bits %d prompt %d k %d drafter %d: not plain decoding",
                                  name, bits, pi, ks[ki], which);
            }
    }
    CHECK_EQ_INT(mism, 0);
    lookup_free(lk);
    tp_free(tp);
    model_free(m);
}

TEST(kvbits_lossless_greedy) {
    const int bits[2] = {16, 8};
    for (int b = 0; b < 2; b++) {
        lossless_bits("qwen3-bf16", bits[b]);
        lossless_bits("llama3-bf16", bits[b]);
    }
}
