/* Golden forward tests of quantized checkpoints: the fixtures under
 * tests/data/quant_models/ (tools/gen_quant_models.py: MLX affine folders
 * and GGUF files quantized by independent tools, with references from a
 * float64 NumPy forward over the weights dequantized by those tools). For
 * each: the prompt in one batch (prefill), then every later position one
 * row at a time (decode) and in batches of 5 (verify widths), each row's
 * logits within QTOL of the largest reference logit of its row; greedy
 * ids equal to the reference's where its top-two margin exceeds the
 * tolerance. The worst error over the fixtures is printed. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/util.h"
#include "engine/model.h"
#include "engine/ops.h"
#include "hooks.h"
#include "test.h"

/* The references use f32 activations; the CPU quantizes every matmul's
   activations to 16 bits (quant.h: blocks of 32, d = amax / 32639), which
   on these small random models moves the logits by at most about 3e-4 of
   the largest one (decode, verify and prefill rows alike: the rule is the
   same at every width, and the prefill family differs in f32 order only). The bound is the 1e-2 tightened to 1e-3,
   a few times the measured worst; the int8 rule measured 0.028 to 0.067
   and fails it, and a wrong format or unit (a weight off by a sub-block's
   scale) is O(1). tests/test_quant.c holds each kernel to the quantized-x
   reference within f32 rounding. */
#define QTOL 1e-3

typedef struct {
    char model[1100];
    int n_prompt, n_tokens, vocab;
    int tokens[128];
    double margins[128];
    float *logits;
} qgold;

static int load_qgold(qgold *g, const char *dir) {
    memset(g, 0, sizeof *g);
    char path[1100], err[256];
    snprintf(g->model, sizeof g->model, "%s/model.gguf", dir);
    if (!ds_file_exists(g->model)) snprintf(g->model, sizeof g->model, "%s", dir);
    snprintf(path, sizeof path, "%s/golden.json", dir);
    cJSON *j = json_parse_file(path, err, sizeof err);
    if (!j) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return -1;
    }
    const cJSON *v;
    int n = 0;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(j, "prompt")) n++;
    g->n_prompt = n;
    n = 0;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(j, "tokens")) if (n < 128) g->tokens[n++] = v->valueint;
    g->n_tokens = n;
    n = 0;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(j, "margins")) if (n < 128) g->margins[n++] = v->valuedouble;
    g->vocab = cJSON_GetObjectItem(j, "vocab")->valueint;
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/logits.bin", dir);
    size_t len;
    g->logits = (float *)ds_read_file(path, &len, err, sizeof err);
    if (!g->logits || len != sizeof(float) * (size_t)g->n_tokens * (size_t)g->vocab) {
        test_fail(__FILE__, __LINE__, "%s: %s", path, g->logits ? "wrong size" : err);
        free(g->logits);
        return -1;
    }
    return 0;
}

/* Runs the whole sequence: prompt in one batch, the rest in batches of
 * `step` rows; returns the worst row error, and checks greedy ids. */
static double run_fixture(const char *name, const qgold *g, model *m, int step, tpool *tp) {
    char err[1024];
    model_ctx *c;
    if (mctx_create(&c, m, 256, 64, tp, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s: %s", name, err);
        return 1e9;
    }
    int V = g->vocab;
    float *lg = xmalloc(sizeof(float) * (size_t)g->n_tokens * (size_t)V);
    model_batch b = {.n = g->n_prompt, .tokens = g->tokens, .n_logits = g->n_prompt, .logits = lg};
    CHECK(model_forward(c, &b, err, sizeof err) == 0);
    for (int i = g->n_prompt; i < g->n_tokens; i += step) {
        int n = g->n_tokens - i < step ? g->n_tokens - i : step;
        model_batch d = {.n = n, .tokens = g->tokens + i, .n_logits = n, .logits = lg + (size_t)i * V};
        CHECK(model_forward(c, &d, err, sizeof err) == 0);
    }
    double worst = 0;
    for (int r = 0; r < g->n_tokens; r++) {
        double e = test_rel_err(lg + (size_t)r * V, g->logits + (size_t)r * V, V);
        worst = e > worst ? e : worst;
    }
    /* greedy ids: position p's argmax is token p+1 of the reference,
       wherever the reference's margin is clear of the tolerance */
    for (int p = g->n_prompt - 1; p + 1 < g->n_tokens; p++) {
        int gi = p - (g->n_prompt - 1);
        const float *ref = g->logits + (size_t)p * V;
        double mr = 0;
        for (int k = 0; k < V; k++) mr = fabs(ref[k]) > mr ? fabs(ref[k]) : mr;
        if (g->margins[gi] <= 2 * QTOL * mr) continue;
        int id = op_argmax(lg + (size_t)p * V, V);
        CHECK_MSG(id == g->tokens[p + 1], "%s (step %d): greedy at %d gave %d, the reference %d (margin %.3g)", name,
                  step, p, id, g->tokens[p + 1], g->margins[gi]);
    }
    free(lg);
    mctx_free(c);
    return worst;
}

static double g_worst, g_best; /* the worst and the best fixture's error */

static void check_all(tpool *tp) {
    char root[600];
    snprintf(root, sizeof root, "%s/quant_models", test_data_dir());
    DIR *d = opendir(root);
    CHECK_MSG(d != NULL, "%s: cannot open", root);
    if (!d) return;
    int n_fixtures = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char dir[1000], gj[1100];
        snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
        snprintf(gj, sizeof gj, "%s/golden.json", dir);
        if (!ds_file_exists(gj)) continue;
        qgold g;
        if (load_qgold(&g, dir) != 0) continue;
        char err[1024];
        model *m;
        if (model_load(&m, g.model, NULL, err, sizeof err) != 0) {
            test_fail(__FILE__, __LINE__, "%s: %s", e->d_name, err);
            free(g.logits);
            continue;
        }
        n_fixtures++;
        const int steps[] = {1, 5};
        for (int s = 0; s < 2; s++) {
            double w = run_fixture(e->d_name, &g, m, steps[s], tp);
            CHECK_MSG(w <= QTOL, "%s (rows of %d): max|diff|/max|ref| = %.3g > %g", e->d_name, steps[s], w, QTOL);
            g_worst = w > g_worst ? w : g_worst;
            g_best = w < g_best ? w : g_best;
            if (getenv("DSPARK_TEST_VERBOSE")) fprintf(stderr, "  %s step %d: rel err %.3g\n", e->d_name, steps[s], w);
        }
        model_free(m);
        free(g.logits);
    }
    closedir(d);
    CHECK_MSG(n_fixtures >= 8, "only %d quantized fixtures found under %s", n_fixtures, root);
}

TEST(quant_model_golden) {
    g_worst = 0;
    g_best = 1e30;
    check_all(NULL);
    fprintf(stderr, "  quantized fixtures: max|diff|/max|ref| per fixture %.2e to %.2e (bound %g)\n", g_best, g_worst,
            QTOL);
}

/* The prefill family (quant.h: the same 16-bit activations, another f32
   order) on every row, at the machine's level and on two threads: the same
   bound. Then level 0, where prefill rows take the exact kernels (ops.h's
   op_matmul_pre; the scalar family is held to the others in test_quant.c). */
TEST(quant_model_golden_prefill) {
    cpu_test_group_rows(1);
    g_worst = 0;
    g_best = 1e30;
    check_all(NULL);
    fprintf(stderr, "  prefill family: max|diff|/max|ref| per fixture %.2e to %.2e (bound %g)\n", g_best, g_worst,
            QTOL);
    tpool *tp = tp_create(2);
    check_all(tp);
    tp_free(tp);
    int prev = ops_use_simd(0);
    check_all(NULL);
    ops_use_simd(prev);
    cpu_test_group_rows(0);
}

TEST(quant_model_golden_threaded_scalar) {
    tpool *tp = tp_create(2);
    check_all(tp);
    int prev = ops_use_simd(0);
    check_all(NULL);
    ops_use_simd(prev);
    tp_free(tp);
}
