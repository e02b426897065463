/* Golden forward tests: dspark's logits, greedy continuations and layer
 * taps against transformers (fp32 from the same saved weights), for the
 * checkpoints tools/gen_golden_models.py made under tests/data/models/ and
 * for the bundled model (tools/gen_bundled_golden.py).
 * Also chunked prefill, KV truncation, scalar-vs-SIMD, and load errors. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/json.h"
#include "engine/model.h"
#include "engine/ops.h"
#include "spec/registry.h"
#include "hooks.h"
#include "test.h"
#include "base/util.h"

static const char *MODELS[] = {"qwen3-bf16",  "qwen3-f16-sharded", "qwen3-f32-untied", "qwen2-bf16-legacy",
                               "llama3-bf16", "llama3-f16-legacy", "mistral-bf16", "mistral-swa-bf16",
                               "gemma3-bf16", "qwen3moe-bf16", "bundled"};
#define N_MODELS (int)(sizeof MODELS / sizeof MODELS[0])

typedef struct {
    char dir[512];       /* the checkpoint */
    char gold_dir[512];  /* golden.json, logits.bin, hidden.bin */
    int n_prompt, n_tokens, vocab, hidden, n_taps;
    int tokens[128], greedy_from;
    int taps[8];
    float *logits; /* [n_tokens][vocab] */
    float *hidden_ref; /* [n_taps][n_tokens][hidden] or NULL */
} golden;

static float *read_f32(const char *path, size_t count) {
    char err[256];
    size_t len;
    char *buf = ds_read_file(path, &len, err, sizeof err);
    if (!buf) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return NULL;
    }
    if (len != count * sizeof(float)) {
        test_fail(__FILE__, __LINE__, "%s: %zu bytes, expected %zu", path, len, count * sizeof(float));
        free(buf);
        return NULL;
    }
    return (float *)buf;
}

static int int_array(const cJSON *a, int *out, int cap) {
    int n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a) {
        if (n < cap) out[n] = v->valueint;
        n++;
    }
    return n;
}

/* "bundled": the default model in models/ with its goldens in
   tests/data/bundled/target (tools/gen_bundled_golden.py); else a golden
   checkpoint under tests/data/models/ holding both. */
static int load_golden(golden *g, const char *name) {
    memset(g, 0, sizeof *g);
    if (!strcmp(name, "bundled")) {
        snprintf(g->dir, sizeof g->dir, "%s/../../models/%s", test_data_dir(), DSPARK_DEFAULT_MODEL);
        snprintf(g->gold_dir, sizeof g->gold_dir, "%s/bundled/target", test_data_dir());
    } else {
        snprintf(g->dir, sizeof g->dir, "%s/models/%s", test_data_dir(), name);
        snprintf(g->gold_dir, sizeof g->gold_dir, "%s", g->dir);
    }
    char path[600], err[256];
    snprintf(path, sizeof path, "%s/golden.json", g->gold_dir);
    cJSON *j = json_parse_file(path, err, sizeof err);
    if (!j) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return -1;
    }
    int prompt[128];
    g->n_prompt = int_array(cJSON_GetObjectItem(j, "prompt"), prompt, 128);
    g->n_tokens = int_array(cJSON_GetObjectItem(j, "tokens"), g->tokens, 128);
    g->n_taps = int_array(cJSON_GetObjectItem(j, "taps"), g->taps, 8);
    g->vocab = cJSON_GetObjectItem(j, "vocab")->valueint;
    g->hidden = cJSON_GetObjectItem(j, "hidden")->valueint;
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/logits.bin", g->gold_dir);
    g->logits = read_f32(path, (size_t)g->n_tokens * (size_t)g->vocab);
    if (g->n_taps) {
        snprintf(path, sizeof path, "%s/hidden.bin", g->gold_dir);
        g->hidden_ref = read_f32(path, (size_t)g->n_taps * (size_t)g->n_tokens * (size_t)g->hidden);
    }
    return g->logits ? 0 : -1;
}

static void free_golden(golden *g) {
    free(g->logits);
    free(g->hidden_ref);
}

/* Prefill the prompt (chunked by max_batch), compare all prompt rows, then
 * greedy-decode with the KV cache and compare each step's logits and ids. */
static void check_model(const char *name, int max_batch, tpool *tp) {
    golden g;
    if (load_golden(&g, name) != 0) return;
    char err[1024];
    model *m;
    if (model_load(&m, g.dir, NULL, err, sizeof err) != 0) {
        /* a family the device's backend refuses by name (a backend
           without its kernels) is said, not failed */
        if (strstr(err, "use --device cpu")) fprintf(stderr, "  %s: not on this device: %s\n", name, err);
        else test_fail(__FILE__, __LINE__, "%s: %s", name, err);
        free_golden(&g);
        return;
    }
    CHECK_EQ_INT(model_cfg(m)->vocab_size, g.vocab);
    model_ctx *c;
    CHECK(mctx_create(&c, m, 256, max_batch, tp, err, sizeof err) == 0);
    int V = g.vocab;
    float *lg = xmalloc(sizeof(float) * (size_t)g.n_tokens * (size_t)V);
    model_batch b = {.n = g.n_prompt, .tokens = g.tokens, .n_logits = g.n_prompt, .logits = lg};
    CHECK(model_forward(c, &b, err, sizeof err) == 0);
    double worst = 0;
    for (int r = 0; r < g.n_prompt; r++) {
        double e = test_rel_err(lg + (size_t)r * V, g.logits + (size_t)r * V, V);
        worst = e > worst ? e : worst;
    }
    /* greedy with KV cache: the next id must be the golden one */
    int ok_ids = 1;
    float *row = lg + (size_t)(g.n_prompt - 1) * V;
    for (int i = g.n_prompt; i < g.n_tokens; i++) {
        int id = op_argmax(row, V);
        if (id != g.tokens[i]) {
            test_fail(__FILE__, __LINE__, "%s (batch %d): greedy step %d gave %d, transformers %d", name, max_batch,
                      i - g.n_prompt, id, g.tokens[i]);
            ok_ids = 0;
            break;
        }
        float *next = lg + (size_t)i * V;
        model_batch d = {.n = 1, .tokens = &g.tokens[i], .n_logits = 1, .logits = next};
        if (i + 1 < g.n_tokens) {
            CHECK(model_forward(c, &d, err, sizeof err) == 0);
            double e = test_rel_err(next, g.logits + (size_t)i * V, V);
            worst = e > worst ? e : worst;
        }
        row = next;
    }
    CHECK_MSG(worst <= 1e-3, "%s (batch %d): max|diff|/max|ref| = %.3g > 1e-3", name, max_batch, worst);
    if (getenv("DSPARK_TEST_VERBOSE")) fprintf(stderr, "  %s batch %d: rel err %.3g\n", name, max_batch, worst);
    (void)ok_ids;
    free(lg);
    mctx_free(c);
    model_free(m);
    free_golden(&g);
}

TEST(model_golden_all) {
    for (int i = 0; i < N_MODELS; i++) check_model(MODELS[i], 64, NULL);
}

TEST(model_golden_chunked_threaded) {
    tpool *tp = tp_create(3);
    for (int i = 0; i < N_MODELS; i++) check_model(MODELS[i], 5, tp);
    tp_free(tp);
}

TEST(model_golden_scalar) {
    int prev = ops_use_simd(0);
    check_model("qwen3-bf16", 7, NULL);
    check_model("llama3-f16-legacy", 7, NULL);
    ops_use_simd(prev);
}

/* bytes of a backend's resident memory (a GPU's) into host memory */
#ifdef DSPARK_CUDA
int cuda_test_read(void *dst, const void *src, size_t bytes, char *err, size_t errlen);
#define read_resident cuda_test_read
#else
static int read_resident(void *dst, const void *src, size_t bytes, char *err, size_t errlen) {
    (void)dst, (void)src, (void)bytes;
    return ds_err(err, errlen, "this build has no backend with resident memory");
}
#endif

/* Whole sequence in one batch, with taps; and truncation then refill. */
/* On a GPU: batch b (its taps came back into taps, [n_taps][n][H]) again
   from an empty context c with its taps left on the device (the wide
   buffer), then its first 5 rows (a verify's buffer): the same bits as
   the same forward's taps that came back (5 rows take the decode and
   verify kernels, whose bits need not match the wider batch's); a wide
   batch without its buffer asked for first is an error. On the CPU: taps
   cannot stay on the device. */
static void check_device_taps(const model *m, model_ctx *c, const model_batch *b, const float *taps, const char *name) {
    char err[1024];
    const int T = b->n, H = model_cfg(m)->hidden_size, nt = b->n_taps;
    model_batch bd = *b;
    bd.taps = NULL;
    bd.taps_resident = 1;
    mctx_truncate(c, 0);
    int wr = 0;
    const float *wt = mctx_resident_taps(c, T, &wr);
    if (!wt) {
        CHECK(model_forward(c, &bd, err, sizeof err) != 0);
        CHECK_MSG(strstr(err, "keeps at most 0 layers") != NULL, "%s", err);
        return;
    }
    float *back = xmalloc(sizeof(float) * (size_t)nt * T * H);
    CHECK(wr >= T);
    CHECK_MSG(model_forward(c, &bd, err, sizeof err) == 0, "%s", err);
    for (int t = 0; t < nt; t++) {
        CHECK_MSG(read_resident(back + (size_t)t * T * H, wt + (size_t)t * wr * H, sizeof(float) * (size_t)T * H,
                                 err, sizeof err) == 0, "%s", err);
        CHECK_MSG(!memcmp(back + (size_t)t * T * H, taps + (size_t)t * T * H, sizeof(float) * (size_t)T * H),
                  "%s: device taps of layer %d", name, b->tap_layers[t]);
    }
    int vr = 0;
    const float *vt = mctx_resident_taps(c, 5, &vr);
    CHECK(vt != NULL && vr >= 5 && vr < T);
    model_batch b5 = *b;
    b5.n = b5.n_logits = 5;
    b5.taps = back + (size_t)nt * 5 * H; /* [n_taps][5][H] after the 5 rows read back */
    mctx_truncate(c, 0);
    CHECK_MSG(model_forward(c, &b5, err, sizeof err) == 0, "%s", err);
    mctx_truncate(c, 0);
    bd.n = bd.n_logits = 5;
    CHECK_MSG(vt && model_forward(c, &bd, err, sizeof err) == 0, "%s", err);
    for (int t = 0; vt && t < nt; t++) {
        CHECK_MSG(read_resident(back, vt + (size_t)t * vr * H, sizeof(float) * 5 * H, err, sizeof err) == 0, "%s",
                  err);
        CHECK_MSG(!memcmp(back, b5.taps + (size_t)t * 5 * H, sizeof(float) * 5 * H),
                  "%s: device taps of layer %d, 5 rows", name, b->tap_layers[t]);
    }
    model_ctx *c2;
    CHECK(mctx_create(&c2, m, 128, 64, NULL, err, sizeof err) == 0);
    bd.n = bd.n_logits = T;
    CHECK(model_forward(c2, &bd, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "ask mctx_resident_taps first") != NULL, "%s", err);
    mctx_free(c2);
    free(back);
}

/* A prompt's last logits row has the same bits whether the forward runs
   it in wide chunks (max_batch 256: on a GPU, chunks of the prefill rows,
   1024 by default) or in max_batch-sized ones (a batch that asks more
   logits rows than max_batch: chunks of 128 rows), on the CPU and on a GPU:
   the cuBLAS groups start at the same rows either way. */
TEST(model_prefill_chunk_invariant) {
    char dir[600], err[1024];
    snprintf(dir, sizeof dir, "%s/models/qwen3-bf16", test_data_dir());
    model *m;
    if (model_load(&m, dir, NULL, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return;
    }
    const int n = 600, V = model_cfg(m)->vocab_size;
    int *ids = xmalloc(sizeof(int) * n);
    uint32_t r = 7;
    for (int i = 0; i < n; i++) ids[i] = (int)((r = r * 1664525u + 1013904223u) >> 8) % V;
    float *wide = xmalloc(sizeof(float) * V), *all = xmalloc(sizeof(float) * (size_t)n * V);
    model_ctx *a = NULL, *b = NULL;
    if (mctx_create(&a, m, n + 8, 256, NULL, err, sizeof err) != 0 ||
        mctx_create(&b, m, n + 8, 128, NULL, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        mctx_free(a);
        free(ids), free(wide), free(all);
        model_free(m);
        return;
    }
    model_batch ba = {.n = n, .tokens = ids, .n_logits = 1, .logits = wide};
    model_batch bb = {.n = n, .tokens = ids, .n_logits = n, .logits = all};
    CHECK_MSG(model_forward(a, &ba, err, sizeof err) == 0, "%s", err);
    CHECK_MSG(model_forward(b, &bb, err, sizeof err) == 0, "%s", err);
    CHECK_MSG(!memcmp(wide, all + (size_t)(n - 1) * V, sizeof(float) * V),
              "the last row differs between wide chunks and max_batch chunks");
    mctx_free(a);
    mctx_free(b);
    free(ids), free(wide), free(all);
    model_free(m);
}

/* A CPU model read into memory keeps its matmul weights in the rows8
   layout (cpu_backend.c: cpu_layout); model_load_opts.row_major and --mmap keep them
   row-major. All three give the same bits: a prompt's logits and decode
   steps, tied (qwen3-bf16) and untied (qwen3-f32-untied, llama3-bf16). */
TEST(model_rows8_same_bits) {
    const char *names[] = {"qwen3-bf16", "qwen3-f32-untied", "llama3-bf16"};
    for (int k = 0; k < 3; k++) {
        char dir[600], err[1024];
        snprintf(dir, sizeof dir, "%s/models/%s", test_data_dir(), names[k]);
        float *lg[3] = {0};
        int V = 0;
        for (int way = 0; way < 3; way++) { /* rows8, row-major, --mmap */
            model *m;
            model_load_opts lo = {.use_mmap = way == 2, .row_major = way == 1};
            int rc = model_load(&m, dir, &lo, err, sizeof err);
            if (rc != 0) {
                test_fail(__FILE__, __LINE__, "%s", err);
                break;
            }
            V = model_cfg(m)->vocab_size;
            const int n = 19, steps = 3;
            int ids[19 + 3];
            for (int i = 0; i < n + steps; i++) ids[i] = (i * 37 + 11) % V;
            lg[way] = xmalloc(sizeof(float) * (size_t)(n + steps) * V);
            model_ctx *c;
            CHECK(mctx_create(&c, m, 64, 32, NULL, err, sizeof err) == 0);
            model_batch b = {.n = n, .tokens = ids, .n_logits = n, .logits = lg[way]};
            CHECK(model_forward(c, &b, err, sizeof err) == 0);
            for (int s = 0; s < steps; s++) { /* one-row forwards: the decode loop */
                model_batch d = {.n = 1, .tokens = ids + n + s, .n_logits = 1, .logits = lg[way] + (size_t)(n + s) * V};
                CHECK(model_forward(c, &d, err, sizeof err) == 0);
            }
            mctx_free(c);
            model_free(m);
        }
        if (lg[0] && lg[1] && lg[2]) {
            size_t bytes = sizeof(float) * (size_t)(19 + 3) * V;
            CHECK_MSG(!memcmp(lg[0], lg[1], bytes), "%s: rows8 and row-major weights differ", names[k]);
            CHECK_MSG(!memcmp(lg[0], lg[2], bytes), "%s: rows8 weights and mapped weights differ", names[k]);
        }
        for (int way = 0; way < 3; way++) free(lg[way]);
    }
}

TEST(model_taps_and_truncate) {
    const char *names[] = {"qwen3-bf16", "llama3-bf16", "bundled"};
    for (int k = 0; k < 3; k++) {
        golden g;
        if (load_golden(&g, names[k]) != 0) return;
        char err[1024];
        model *m;
        model_ctx *c;
        model_load_opts lo = {.use_mmap = k == 1}; /* both ways of loading weights */
        if (model_load(&m, g.dir, &lo, err, sizeof err) != 0) {
            test_fail(__FILE__, __LINE__, "%s", err);
            free_golden(&g);
            continue;
        }
        CHECK(mctx_create(&c, m, 128, 64, NULL, err, sizeof err) == 0);
        int V = g.vocab, H = g.hidden, T = g.n_tokens;
        float *lg = xmalloc(sizeof(float) * (size_t)T * V);
        float *taps = xmalloc(sizeof(float) * (size_t)g.n_taps * T * H);
        model_batch b = {.n = T, .tokens = g.tokens, .n_logits = T, .logits = lg,
                         .n_taps = g.n_taps, .tap_layers = g.taps, .taps = taps};
        CHECK(model_forward(c, &b, err, sizeof err) == 0);
        CHECK_EQ_INT(mctx_len(c), T);
        for (int r = 0; r < T; r++)
            CHECK_MSG(test_rel_err(lg + (size_t)r * V, g.logits + (size_t)r * V, V) <= 1e-3, "%s row %d", names[k], r);
        for (int t = 0; t < g.n_taps; t++)
            for (int r = 0; r < T; r++) {
                size_t o = ((size_t)t * T + r) * H;
                CHECK_MSG(test_rel_err(taps + o, g.hidden_ref + o, H) <= 1e-3, "%s tap layer %d row %d", names[k],
                          g.taps[t], r);
            }
        /* the same batch through a context that runs it in forwards of 8
           rows: each forward's taps land at its own rows */
        {
            model_ctx *c8;
            float *taps8 = xmalloc(sizeof(float) * (size_t)g.n_taps * T * H);
            float *lg8 = xmalloc(sizeof(float) * (size_t)V);
            int lastrow = T - 1;
            model_batch b8 = {.n = T, .tokens = g.tokens, .n_logits = 1, .logit_rows = &lastrow, .logits = lg8,
                              .n_taps = g.n_taps, .tap_layers = g.taps, .taps = taps8};
            CHECK(T > 16);
            CHECK(mctx_create(&c8, m, 128, 8, NULL, err, sizeof err) == 0);
            CHECK(model_forward(c8, &b8, err, sizeof err) == 0);
            CHECK_MSG(test_rel_err(lg8, g.logits + (size_t)lastrow * V, V) <= 1e-3, "%s: last row in 8-row forwards",
                      names[k]);
            for (int t = 0; t < g.n_taps; t++)
                for (int r = 0; r < T; r++) {
                    size_t o = ((size_t)t * T + r) * H;
                    CHECK_MSG(test_rel_err(taps8 + o, g.hidden_ref + o, H) <= 1e-3,
                              "%s tap layer %d row %d in 8-row forwards", names[k], g.taps[t], r);
                }
            mctx_free(c8);
            free(taps8);
            free(lg8);
        }
        /* roll back to 15 positions and redo the rest: same logits */
        mctx_truncate(c, 15);
        CHECK_EQ_INT(mctx_len(c), 15);
        int rows[3] = {0, 7, T - 16};
        float *lg2 = xmalloc(sizeof(float) * 3 * (size_t)V);
        model_batch r2 = {.n = T - 15, .tokens = g.tokens + 15, .n_logits = 3, .logit_rows = rows, .logits = lg2};
        CHECK(model_forward(c, &r2, err, sizeof err) == 0);
        for (int i = 0; i < 3; i++)
            CHECK(test_rel_err(lg2 + (size_t)i * V, g.logits + (size_t)(15 + rows[i]) * V, V) <= 1e-3);
        check_device_taps(m, c, &b, taps, names[k]);
        /* context full is an error, not a crash */
        mctx_truncate(c, 0);
        int many[200] = {0};
        model_batch big = {.n = 200, .tokens = many};
        CHECK(model_forward(c, &big, err, sizeof err) != 0);
        CHECK(strstr(err, "context window full") != NULL);
        int bad = V;
        model_batch oob = {.n = 1, .tokens = &bad};
        CHECK(model_forward(c, &oob, err, sizeof err) != 0);
        CHECK(strstr(err, "outside the vocabulary") != NULL);
        free(lg2);
        free(taps);
        free(lg);
        mctx_free(c);
        model_free(m);
        free_golden(&g);
    }
}

/* copies a fixture model into a scratch dir, with config.json edited */
static void make_variant(const char *dst, const char *src_name, const char *key, const char *value) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && cp %s/models/%s/*.json %s/models/%s/*.safetensors %s/",
             dst, dst, test_data_dir(), src_name, test_data_dir(), src_name, dst);
    CHECK(system(cmd) == 0);
    char path[600], err[256];
    snprintf(path, sizeof path, "%s/config.json", dst);
    size_t n;
    char *text = ds_read_file(path, &n, err, sizeof err);
    CHECK(text != NULL);
    if (!text) return;
    cJSON *j = cJSON_Parse(text);
    free(text);
    cJSON_DeleteItemFromObject(j, key);
    cJSON_AddItemToObject(j, key, cJSON_Parse(value));
    cJSON_DeleteItemFromObject(j, "layer_types"); /* would contradict an edited layer count */
    char *out = cJSON_Print(j);
    FILE *f = fopen(path, "w");
    fputs(out, f);
    fclose(f);
    free(out);
    cJSON_Delete(j);
}

static void expect_load_error(const char *dir, const char *needle1, const char *needle2) {
    model *m = NULL;
    char err[1024] = "";
    int r = model_load(&m, dir, NULL, err, sizeof err);
    CHECK_MSG(r != 0, "load of %s should fail", dir);
    CHECK_MSG(strstr(err, needle1) && (!needle2 || strstr(err, needle2)), "error \"%s\" lacks \"%s\"/\"%s\"", err,
              needle1, needle2 ? needle2 : "");
    model_free(m);
}

TEST(model_load_errors) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/variant", test_tmp_dir());
    make_variant(dir, "qwen3-bf16", "num_hidden_layers", "2");
    expect_load_error(dir, "unexpected tensor", "model.layers.2.");
    make_variant(dir, "qwen3-bf16", "num_hidden_layers", "4");
    expect_load_error(dir, "missing tensor", "model.layers.3.");
    make_variant(dir, "qwen3-bf16", "intermediate_size", "128");
    expect_load_error(dir, "mlp.gate_proj.weight", "shape");
    make_variant(dir, "qwen3-bf16", "tie_word_embeddings", "false");
    expect_load_error(dir, "missing tensor", "lm_head.weight");
    make_variant(dir, "qwen3-bf16", "model_type", "\"gpt2\"");
    expect_load_error(dir, "gpt2", NULL);
    make_variant(dir, "qwen3-bf16", "attention_bias", "true");
    expect_load_error(dir, "missing tensor", "q_proj.bias");
    expect_load_error("/nonexistent-dir", "config.json", NULL);
}
