/* Tensor parallelism on the CPU (engine/tpar.h, coll.h, cpu_tpar.c): the
 * plan's rules and refusals, slices of every weight format (their values,
 * and column shares whose products sum to the whole product), the
 * collectives' order, the golden checkpoints split over 2 and 4 emulated
 * ranks against the whole model (and transformers' logits), a row's bits
 * alone and in a batch at a fixed split, cache rows copied, saved and
 * loaded, speculative decoding against plain decoding at 2 ranks with the
 * bundled drafters and lookup, and the command line's option. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/json.h"
#include "base/util.h"
#include "cli/cli.h"
#include "engine/coll.h"
#include "engine/ops.h"
#include "engine/quant.h"
#include "engine/tpar.h"
#include "hooks.h"
#include "spec/lookup.h"
#include "spec/registry.h"
#include "spec/spec.h"
#include "test.h"

static uint32_t rng(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}
static float frand(uint32_t *s) { return (float)(rng(s) % 20001) / 10000.0f - 1.0f; }

/* ---- the plan -------------------------------------------------------------- */

static model_config shape(int nh, int nkv, int I) {
    model_config c;
    memset(&c, 0, sizeof c);
    c.n_layers = 2, c.hidden_size = 64, c.head_dim = 16, c.vocab_size = 100;
    c.n_heads = nh, c.n_kv_heads = nkv, c.intermediate_size = I;
    return c;
}

TEST(tpar_plan_rules) {
    char err[512];
    tpar_plan p;
    model_config c = shape(8, 4, 96);
    CHECK(tpar_plan_make(&p, &c, 1, err, sizeof err) == 0 && p.heads == 8 && p.kv_heads == 4 && p.kv_share == 1);
    CHECK(tpar_plan_make(&p, &c, 2, err, sizeof err) == 0 && p.heads == 4 && p.kv_heads == 2 && p.inter == 48);
    for (int r = 0; r < 2; r++) CHECK(tpar_q_head0(&p, r) == 4 * r && tpar_kv_head0(&p, &c, r) == 2 * r);
    /* 8 ranks over 4 KV heads: each replicated on 2 ranks, each rank's one q head in its group */
    CHECK(tpar_plan_make(&p, &c, 8, err, sizeof err) == 0 && p.heads == 1 && p.kv_heads == 1 && p.kv_share == 2);
    for (int r = 0; r < 8; r++) {
        const int kv = tpar_kv_head0(&p, &c, r), q = tpar_q_head0(&p, r);
        CHECK_MSG(kv == r / 2 && q / (c.n_heads / c.n_kv_heads) == kv, "rank %d: q head %d, kv head %d", r, q, kv);
    }
    /* refusals, each naming what does not split */
    static const struct { int nh, nkv, I, ranks; const char *says; } bad[] = {
        {8, 4, 96, 3, "attention heads"}, {8, 4, 96, 0, "1 to 64"},      {8, 4, 96, 65, "1 to 64"},
        {6, 3, 96, 2, "KV heads"},        {12, 3, 96, 4, "KV heads"},    {8, 4, 90, 4, "intermediate_size"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = shape(bad[i].nh, bad[i].nkv, bad[i].I);
        err[0] = 0;
        CHECK_MSG(tpar_plan_make(&p, &c, bad[i].ranks, err, sizeof err) == -1 && strstr(err, bad[i].says),
                  "case %zu: %s", i, err);
    }
    /* experts: each expert's columns split, the dense width too only when a layer is dense */
    c = shape(4, 2, 90);
    c.moe_experts = 4, c.moe_top_k = 2, c.moe_intermediate_size = 24;
    c.moe[0] = c.moe[1] = 1;
    CHECK(tpar_plan_make(&p, &c, 2, err, sizeof err) == 0 && p.moe_inter == 12 && p.inter == 0);
    c.moe_intermediate_size = 30;
    CHECK(tpar_plan_make(&p, &c, 4, err, sizeof err) == -1 && strstr(err, "moe_intermediate_size"));
    int v0, v1, at = 0;
    for (int r = 0; r < 3; r++) {
        tpar_vocab(3, 100, r, &v0, &v1);
        CHECK(v0 == at && v1 > v0);
        at = v1;
    }
    CHECK(at == 100);
}

/* ---- slices of every weight format ------------------------------------------- */

/* a [N][K] matrix of format dt (GGUF types: random bytes of small values;
   MLX: random words, scales and biases), its buffers in *own */
static tensor make_mat(ds_dtype dt, int bits, int group, int64_t N, int64_t K, int rows8, uint32_t *s, void **own) {
    tensor t;
    memset(&t, 0, sizeof t);
    t.name = "test.mat";
    t.dtype = dt, t.ndim = 2, t.shape[0] = N, t.shape[1] = K;
    if (dt == DT_MLX) {
        t.q.bits = bits, t.q.group = group, t.q.sdtype = DT_F32;
        size_t wb = (size_t)N * quant_row_bytes(DT_MLX, bits, K), g = (size_t)(N * K / group);
        char *b = xaligned(wb + 2 * g * sizeof(float));
        for (size_t i = 0; i < wb; i++) b[i] = (char)rng(s);
        float *sc = (float *)(b + wb), *bi = sc + g;
        for (size_t i = 0; i < g; i++) sc[i] = 0.01f * (1 + (float)(rng(s) % 100)), bi[i] = 0.1f * frand(s);
        t.data = b, t.nbytes = wb, t.q.scales = sc, t.q.biases = bi;
        *own = b;
    } else if (dtype_is_quant(dt)) {
        t.nbytes = (size_t)N * quant_row_bytes(dt, 0, K);
        unsigned char *b = xaligned(t.nbytes);
        /* every byte below 0x40: each f16 scale finite and small */
        for (size_t i = 0; i < t.nbytes; i++) b[i] = (unsigned char)(rng(s) & 0x3f);
        t.data = b;
        *own = b;
    } else {
        const size_t es = dtype_size(dt);
        t.nbytes = (size_t)(N * K) * es;
        unsigned char *b = xaligned(t.nbytes);
        for (int64_t i = 0; i < N * K; i++) {
            float v = frand(s);
            if (dt == DT_F32) memcpy(b + i * 4, &v, 4);
            else {
                uint16_t h = dt == DT_BF16 ? ds_f32_to_bf16(v) : ds_f32_to_f16(v);
                memcpy(b + i * 2, &h, 2);
            }
        }
        if (rows8) tensor_to_rows8(b, es, N, K);
        t.rows8 = rows8;
        t.data = b;
        *own = b;
    }
    return t;
}

/* row n of W widened to f32 (any format, either layout) */
static void row_f32(const tensor *W, int64_t n, float *y) {
    if (dtype_is_quant(W->dtype)) {
        quant_row_f32(W, n, y);
        return;
    }
    const int64_t K = W->shape[1];
    const size_t es = dtype_size(W->dtype);
    for (int64_t k = 0; k < K; k++)
        op_to_f32(y + k, (const char *)W->data + tensor_off(K, W->rows8, n, k) * es, W->dtype, 1);
}

/* W's columns in `ranks` shares: each share's values are W's, and the sum
   of the shares' products (rank order) is the whole product to f32
   rounding (the quantized kernels' x blocks are the whole row's) */
static void check_shares(const tensor *W, int ranks, const char *what) {
    char err[512];
    const int64_t N = W->shape[0], K = W->shape[1], w = K / ranks;
    const int M = 3;
    uint32_t s = 99;
    float *x = xmalloc(sizeof(float) * (size_t)(M * K)), *xs = xmalloc(sizeof(float) * (size_t)(M * w));
    float *y = xmalloc(sizeof(float) * (size_t)(M * N)), *ys = xmalloc(sizeof(float) * (size_t)(M * N));
    float *sum = xcalloc((size_t)(M * N), sizeof(float)), *a = xmalloc(sizeof(float) * (size_t)K);
    float *b = xmalloc(sizeof(float) * (size_t)K);
    for (int64_t i = 0; i < M * K; i++) x[i] = frand(&s);
    op_matmul(NULL, y, x, M, W, NULL);
    for (int r = 0; r < ranks; r++) {
        tensor t;
        void *own;
        CHECK_MSG(tpar_slice(&t, &own, W, 0, N, r * w, w, err, sizeof err) == 0, "%s: %s", what, err);
        if (!t.data) continue;
        for (int64_t n = 0; n < N; n++) {
            row_f32(W, n, a);
            row_f32(&t, n, b);
            if (memcmp(a + r * w, b, sizeof(float) * (size_t)w)) {
                test_fail(__FILE__, __LINE__, "%s: rank %d's share of row %lld differs", what, r, (long long)n);
                break;
            }
        }
        for (int m = 0; m < M; m++) memcpy(xs + m * w, x + m * K + r * w, sizeof(float) * (size_t)w);
        op_matmul(NULL, ys, xs, M, &t, NULL);
        for (int64_t i = 0; i < M * N; i++) sum[i] = r ? sum[i] + ys[i] : ys[i];
        free(own);
    }
    double worst = 0;
    for (int m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            row_f32(W, n, a);
            double mag = 0;
            for (int64_t k = 0; k < K; k++) mag += fabs((double)x[m * K + k] * a[k]);
            double e = fabs((double)y[m * N + n] - sum[m * N + n]) / (mag > 0 ? mag : 1);
            worst = e > worst ? e : worst;
        }
    CHECK_MSG(worst <= 1e-5, "%s: the shares' sum is %.3g of sum|x w| from the whole product", what, worst);
    free(x), free(xs), free(y), free(ys), free(sum), free(a), free(b);
}

/* rows [8, 24) of W: a view (whole rows) or a copy (rows8 from 8) with the same values */
static void check_rows(const tensor *W, const char *what) {
    char err[512];
    tensor t;
    void *own;
    CHECK_MSG(tpar_slice(&t, &own, W, 8, 16, 0, W->shape[1], err, sizeof err) == 0, "%s: %s", what, err);
    CHECK_MSG(!own, "%s: whole rows from row 8 are a view", what);
    float *a = xmalloc(sizeof(float) * (size_t)W->shape[1]), *b = xmalloc(sizeof(float) * (size_t)W->shape[1]);
    for (int n = 0; n < 16; n++) {
        row_f32(W, 8 + n, a);
        row_f32(&t, n, b);
        CHECK_MSG(!memcmp(a, b, sizeof(float) * (size_t)W->shape[1]), "%s: row %d of the view", what, n);
    }
    free(a), free(b);
    free(own);
}

TEST(tpar_slice_formats) {
    uint32_t s = 7;
    char what[64], err[512];
    static const ds_dtype fl[] = {DT_F32, DT_F16, DT_BF16};
    for (int i = 0; i < 3; i++)
        for (int r8 = 0; r8 < 2; r8++) {
            void *own;
            tensor W = make_mat(fl[i], 0, 0, 32, 96, r8, &s, &own);
            snprintf(what, sizeof what, "%s%s", dtype_name(fl[i]), r8 ? " rows8" : "");
            check_rows(&W, what);
            check_shares(&W, 2, what);
            check_shares(&W, 3, what); /* floats split anywhere: shares of 32 */
            check_shares(&W, 12, what); /* shares of 8 */
            free(own);
        }
    for (ds_dtype dt = DT_Q8_0; dt <= DT_Q6_K; dt++) {
        const int u = quant_block_elems(dt);
        void *own;
        tensor W = make_mat(dt, 0, 0, 32, 2 * u * 2, 0, &s, &own);
        snprintf(what, sizeof what, "%s", dtype_name(dt));
        check_rows(&W, what);
        check_shares(&W, 2, what); /* shares of two blocks */
        check_shares(&W, 4, what); /* one block each */
        err[0] = 0;
        CHECK_MSG(tpar_check_cols(&W, 8, err, sizeof err) == -1 && strstr(err, "test.mat") && strstr(err, dtype_name(dt)),
                  "%s: %s", what, err);
        char blk[32], share[48];
        snprintf(blk, sizeof blk, "blocks of %d", u);
        snprintf(share, sizeof share, "shares of %d", u / 2);
        CHECK_MSG(strstr(err, blk) && strstr(err, share), "%s: %s", what, err);
        free(own);
    }
    static const int bits[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    for (int b = 0; b < 6; b++)
        for (int g = 0; g < 3; g++) {
            void *own;
            tensor W = make_mat(DT_MLX, bits[b], groups[g], 32, 4 * 128, 0, &s, &own);
            snprintf(what, sizeof what, "MLX %d-bit g%d", bits[b], groups[g]);
            check_rows(&W, what);
            check_shares(&W, 4, what);
            check_shares(&W, 512 / groups[g], what); /* one group each */
            err[0] = 0;
            CHECK_MSG(tpar_check_cols(&W, 1024 / groups[g], err, sizeof err) == -1 && strstr(err, "groups of"),
                      "%s: %s", what, err);
            free(own);
        }
}

/* ---- the collectives --------------------------------------------------------- */

TEST(tpar_coll_cpu) {
    char err[256];
    coll *c = coll_cpu_create(4);
    /* values whose sum depends on the order: ((1 + 1e8) - 1e8) + 1 is 1 in rank order (the first 1 is
       lost), 0 from the last rank down or in pairs */
    float b[4][3] = {{1, 1, 0}, {1e8f, 2, -0.0f}, {-1e8f, 3, -0.0f}, {1, 4, -0.0f}};
    float *bufs[4] = {b[0], b[1], b[2], b[3]};
    CHECK(coll_all_reduce_sum(c, bufs, 3, err, sizeof err) == 0);
    for (int r = 0; r < 4; r++) {
        CHECK(b[r][0] == 1 && b[r][1] == 10);
        CHECK(b[r][2] == 0 && !signbit(b[r][2])); /* +0 + -0 + ... = +0: an exact join */
    }
    float m0[2] = {-0.0f, -0.0f}, m1[2] = {-0.0f, 5};
    float *mb[2] = {m0, m1};
    coll *c2 = coll_cpu_create(2);
    CHECK(coll_all_reduce_sum(c2, mb, 2, err, sizeof err) == 0 && signbit(m0[0]) && m0[1] == 5);
    /* all-gather: shards of 1, 2, 3 and 1 columns over 2 rows */
    const float s0[2] = {0, 10}, s1[4] = {1, 2, 11, 12}, s2[6] = {3, 4, 5, 13, 14, 15}, s3[2] = {6, 16};
    const float *sh[4] = {s0, s1, s2, s3};
    const int cols[4] = {1, 2, 3, 1};
    float out[2][8], out3[2][8];
    float *outs[4] = {&out[0][0], NULL, NULL, &out3[0][0]};
    CHECK(coll_all_gather(c, sh, 2, cols, outs, 8, err, sizeof err) == 0);
    for (int i = 0; i < 7; i++) CHECK(out[0][i] == i && out[1][i] == 10 + i && out3[1][i] == 10 + i);
    CHECK(coll_all_gather(c, sh, 2, cols, outs, 6, err, sizeof err) == -1);
    coll_free(c);
    coll_free(c2);
}

/* ---- models ---------------------------------------------------------------------- */

/* "NAME": tests/data/models/NAME; "quant_models/NAME": its model.gguf or the
   folder; an absolute path as it is */
static void model_path(char *out, size_t n, const char *name) {
    char dir[600];
    if (name[0] == '/') snprintf(dir, sizeof dir, "%s", name);
    else if (strchr(name, '/')) snprintf(dir, sizeof dir, "%s/%s", test_data_dir(), name);
    else snprintf(dir, sizeof dir, "%s/models/%s", test_data_dir(), name);
    snprintf(out, n, "%s/model.gguf", dir);
    if (!ds_file_exists(out)) snprintf(out, n, "%s", dir);
}

static model *load(const char *name, int ranks, int kv_bits, char *err, size_t errlen) {
    char path[700];
    model_path(path, sizeof path, name);
    model_load_opts o = {.device = "cpu", .tensor_parallel = ranks, .kv_bits = kv_bits};
    model *m;
    return model_load(&m, path, &o, err, errlen) == 0 ? m : NULL;
}

/* the rows' logits [n][V] of one forward of ids (a fresh context of max_batch rows) */
static int forward_all(model *m, tpool *tp, const int *ids, int n, int max_batch, float *lg) {
    char err[512];
    model_ctx *x;
    if (mctx_create(&x, m, 256, max_batch, tp, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return -1;
    }
    model_batch b = {.n = n, .tokens = ids, .n_logits = n, .logits = lg};
    int rc = model_forward(x, &b, err, sizeof err);
    if (rc) test_fail(__FILE__, __LINE__, "%s", err);
    mctx_free(x);
    return rc;
}

/* the golden tokens (prompt + transformers' greedy continuation) and
   their logits; 0 or -1 */
static int golden(const char *name, int *tok, int *n, int *n_prompt, float **ref, int V) {
    char dir[600], path[700], err[256];
    model_path(dir, sizeof dir, name);
    char *slash = strrchr(dir, '/');
    if (strstr(dir, ".gguf") && slash) *slash = 0;
    snprintf(path, sizeof path, "%s/golden.json", dir);
    cJSON *j = json_parse_file(path, err, sizeof err);
    if (!j) return -1;
    const cJSON *v;
    *n = 0;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(j, "tokens")) if (*n < 128) tok[(*n)++] = v->valueint;
    *n_prompt = cJSON_GetArraySize(cJSON_GetObjectItem(j, "prompt"));
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/logits.bin", dir);
    size_t len;
    *ref = (float *)ds_read_file(path, &len, err, sizeof err);
    if (!*ref || len != sizeof(float) * (size_t)*n * (size_t)V) {
        free(*ref);
        *ref = NULL;
    }
    return 0;
}

/* name at each split of ranks[] against the whole model: every row within
   1e-4 of its largest logit, the same argmax (so the same greedy
   continuation), and within 1e-3 of transformers' logits */
static void split_vs_whole(const char *name, const int *ranks, int n_ranks) {
    char err[1024];
    tpool *tp = tp_create(2);
    model *m1 = load(name, 1, 0, err, sizeof err);
    CHECK_MSG(m1, "%s: %s", name, err);
    if (!m1) goto out;
    const int V = model_cfg(m1)->vocab_size;
    int tok[128], n, np;
    float *ref = NULL;
    if (golden(name, tok, &n, &np, &ref, V) != 0) {
        test_fail(__FILE__, __LINE__, "%s: no golden.json", name);
        goto out;
    }
    float *l1 = xmalloc(sizeof(float) * (size_t)n * V), *lr = xmalloc(sizeof(float) * (size_t)n * V);
    if (forward_all(m1, tp, tok, n, 64, l1) == 0)
        for (int k = 0; k < n_ranks; k++) {
            model *mr = load(name, ranks[k], 0, err, sizeof err);
            CHECK_MSG(mr && model_tensor_parallel(mr) == ranks[k], "%s at %d ranks: %s", name, ranks[k], err);
            if (!mr) continue;
            if (forward_all(mr, tp, tok, n, 64, lr) == 0)
                for (int i = 0; i < n; i++) {
                    const float *a = lr + (size_t)i * V, *b = l1 + (size_t)i * V;
                    double e = test_rel_err(a, b, (size_t)V), eg = ref ? test_rel_err(a, ref + (size_t)i * V, (size_t)V) : 0;
                    CHECK_MSG(e <= 1e-4, "%s at %d ranks, row %d: %.3g of the largest logit from the whole model",
                              name, ranks[k], i, e);
                    CHECK_MSG(eg <= 1e-3, "%s at %d ranks, row %d: %.3g from transformers'", name, ranks[k], i, eg);
                    CHECK_MSG(op_argmax(a, V) == op_argmax(b, V), "%s at %d ranks, row %d: another argmax", name,
                              ranks[k], i);
                    if (i >= np - 1 && i + 1 < n)
                        CHECK_MSG(op_argmax(a, V) == tok[i + 1], "%s at %d ranks: greedy id %d differs", name,
                                  ranks[k], i + 1 - np);
                }
            model_free(mr);
        }
    free(l1);
    free(lr);
    free(ref);
out:
    model_free(m1);
    tp_free(tp);
}

static const int R24[] = {2, 4};

TEST(tpar_golden_qwen3) { split_vs_whole("qwen3-bf16", R24, 2); }
/* one KV head: replicated on every rank */
TEST(tpar_golden_llama3) { split_vs_whole("llama3-bf16", R24, 2); }
/* q/k/v biases sliced with their rows */
TEST(tpar_golden_qwen2) { split_vs_whole("qwen2-bf16-legacy", R24, 2); }
/* post norms, GELU gating, sliding windows, the scaled embedding, the soft-cap */
TEST(tpar_golden_gemma3) { split_vs_whole("gemma3-bf16", R24, 2); }
TEST(tpar_golden_mistral_swa) { split_vs_whole("mistral-swa-bf16", R24, 2); }
/* each expert's columns */
TEST(tpar_golden_qwen3moe) { split_vs_whole("qwen3moe-bf16", R24, 2); }
TEST(tpar_golden_f32_f16) {
    split_vs_whole("qwen3-f32-untied", R24, 2);
    split_vs_whole("qwen3-f16-sharded", R24, 2);
}
/* MLX: o split on its groups of 64 (down stays bf16); 2-bit g128, 2 heads over 1 KV head */
TEST(tpar_golden_mlx) {
    static const int R2[] = {2};
    split_vs_whole("quant_models/qwen3-mlx-4bit-g64", R2, 1);
    split_vs_whole("quant_models/qwen3-256-mlx-2bit-g128", R2, 1);
    /* every row through the quantized prefill family */
    cpu_test_group_rows(1);
    split_vs_whole("quant_models/qwen3-256-mlx-2bit-g128", R2, 1);
    cpu_test_group_rows(0);
}

/* the bundled model as a Q8_0 GGUF (blocks of 32: o and down split at 2
   ranks), written once */
static const char *bundled_q8(void) {
    static char out[700];
    static int done;
    if (done) return done > 0 ? out : NULL;
    char dir[700], err[1024];
    test_bundled_path(dir, sizeof dir, "");
    snprintf(out, sizeof out, "%s/tpar-bundled-q8_0.gguf", test_tmp_dir());
    done = quantize_model(dir, out, "Q8_0", 0, 2, NULL, err, sizeof err) == 0 ? 1 : -1;
    CHECK_MSG(done > 0, "%s", err);
    return done > 0 ? out : NULL;
}

TEST(tpar_gguf_q8_0) {
    const char *path = bundled_q8();
    if (!path) return;
    char err[1024];
    tpool *tp = tp_create(2);
    model *m1 = load(path, 1, 0, err, sizeof err), *m2 = load(path, 2, 0, err, sizeof err);
    CHECK_MSG(m1 && m2, "%s", err);
    if (m1 && m2) {
        const int V = model_cfg(m1)->vocab_size;
        int ids[40];
        test_prompt_ids(ids, 40, 0, 5, V);
        float *a = xmalloc(sizeof(float) * 40 * (size_t)V), *b = xmalloc(sizeof(float) * 40 * (size_t)V);
        for (int g = 0; g < 2; g++) { /* the exact kernels, then every row through the prefill family */
            cpu_test_group_rows(g ? 1 : 0);
            if (forward_all(m1, tp, ids, 40, 64, a) || forward_all(m2, tp, ids, 40, 64, b)) break;
            for (int i = 0; i < 40; i++) {
                double e = test_rel_err(b + (size_t)i * V, a + (size_t)i * V, (size_t)V);
                CHECK_MSG(e <= 1e-4, "Q8_0 at 2 ranks, row %d (group rows %d): %.3g", i, g, e);
                CHECK(op_argmax(b + (size_t)i * V, V) == op_argmax(a + (size_t)i * V, V));
            }
        }
        cpu_test_group_rows(0);
        free(a);
        free(b);
    }
    model_free(m1);
    model_free(m2);
    tp_free(tp);
}

/* ---- refusals ---------------------------------------------------------------------- */

TEST(tpar_refusals) {
    static const struct { const char *name; int ranks; const char *says[3]; } bad[] = {
        {"qwen3-bf16", 3, {"--tensor-parallel 3", "4 attention heads"}},
        {"qwen3-bf16", 8, {"4 attention heads"}},
        {"qwen3-bf16", -1, {"1 to 64"}},
        {"qwen3-bf16", 65, {"1 to 64"}},
        /* quantized splits off their blocks, the tensor named */
        {"quant_models/qwen3-mlx-4bit-g64", 4, {"self_attn.o_proj.weight", "groups of 64", "shares of 32"}},
        {"quant_models/qwen3-q8_0", 2, {"mlp.down_proj.weight", "Q8_0, blocks of 32", "shares of 80"}},
        {"quant_models/qwen3-256-q4_k_m", 2, {"self_attn.o_proj.weight", "Q4_K, blocks of 256", "shares of 128"}},
        {"quant_models/qwen3-256-q3_k", 2, {"o_proj", "Q3_K"}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[1024] = "";
        model *m = load(bad[i].name, bad[i].ranks, 0, err, sizeof err);
        CHECK_MSG(!m, "%s at %d ranks loaded", bad[i].name, bad[i].ranks);
        model_free(m);
        for (int k = 0; k < 3 && bad[i].says[k]; k++)
            CHECK_MSG(strstr(err, bad[i].says[k]), "%s at %d ranks: \"%s\" lacks \"%s\"", bad[i].name, bad[i].ranks, err,
                      bad[i].says[k]);
    }
}

/* ---- a row's bits at a fixed split ---------------------------------------------------- */

/* rows alone (one forward a row), in one batch, in chunks of 5 rows, and
   beside another sequence (model_forward_multi): the same bits */
static void batch_invariance(const char *name, int ranks, int kv_bits) {
    char err[1024];
    tpool *tp = tp_create(2);
    model *m = load(name, ranks, kv_bits, err, sizeof err);
    CHECK_MSG(m, "%s: %s", name, err);
    if (!m) goto out;
    const int V = model_cfg(m)->vocab_size, n = 21;
    int ids[21], other[9];
    test_prompt_ids(ids, n, 0, 3, V);
    test_prompt_ids(other, 9, 0, 4, V);
    float *batch = xmalloc(sizeof(float) * (size_t)n * V), *alone = xmalloc(sizeof(float) * (size_t)n * V);
    float *chunked = xmalloc(sizeof(float) * (size_t)n * V), *multi = xmalloc(sizeof(float) * (size_t)n * V);
    float *ol = xmalloc(sizeof(float) * 9 * (size_t)V);
    model_ctx *x[3];
    CHECK(mctx_create(&x[0], m, 64, 64, tp, err, sizeof err) == 0);
    CHECK(mctx_create(&x[1], m, 64, 5, tp, err, sizeof err) == 0);
    CHECK(mctx_create(&x[2], m, 64, 64, tp, err, sizeof err) == 0);
    model_batch b = {.n = n, .tokens = ids, .n_logits = n, .logits = batch};
    CHECK_MSG(model_forward(x[0], &b, err, sizeof err) == 0, "%s", err);
    b.logits = chunked;
    CHECK_MSG(model_forward(x[1], &b, err, sizeof err) == 0, "%s", err);
    mctx_truncate(x[0], 0);
    for (int i = 0; i < n; i++) {
        model_batch r = {.n = 1, .tokens = ids + i, .n_logits = 1, .logits = alone + (size_t)i * V};
        CHECK_MSG(model_forward(x[0], &r, err, sizeof err) == 0, "%s", err);
    }
    mctx_truncate(x[0], 0);
    model_batch two[2] = {{.n = n, .tokens = ids, .n_logits = n, .logits = multi},
                          {.n = 9, .tokens = other, .n_logits = 9, .logits = ol}};
    model_ctx *pair[2] = {x[0], x[2]};
    CHECK_MSG(model_forward_multi(pair, two, 2, err, sizeof err) == 0, "%s", err);
    const size_t bytes = sizeof(float) * (size_t)n * V;
    CHECK_MSG(!memcmp(batch, alone, bytes), "%s at %d ranks (kv %d): rows alone differ from the batch", name, ranks,
              kv_bits);
    CHECK_MSG(!memcmp(batch, chunked, bytes), "%s at %d ranks: chunks of 5 rows differ", name, ranks);
    CHECK_MSG(!memcmp(batch, multi, bytes), "%s at %d ranks: beside another sequence differs", name, ranks);
    for (int i = 0; i < 3; i++) mctx_free(x[i]);
    free(batch), free(alone), free(chunked), free(multi), free(ol);
out:
    model_free(m);
    tp_free(tp);
}

TEST(tpar_batch_invariance) {
    batch_invariance("qwen3-bf16", 2, 0);
    batch_invariance("qwen3-bf16", 4, 8); /* replicated KV heads, an int8 cache */
    batch_invariance("gemma3-bf16", 2, 16);
    batch_invariance("qwen3moe-bf16", 2, 0);
    batch_invariance("quant_models/qwen3-256-mlx-2bit-g128", 2, 0);
}

/* ---- cache rows ------------------------------------------------------------------------ */

TEST(tpar_cache_rows) {
    char err[1024];
    tpool *tp = tp_create(2);
    model *m = load("qwen3-bf16", 4, 0, err, sizeof err);
    CHECK_MSG(m, "%s", err);
    if (!m) {
        tp_free(tp);
        return;
    }
    const int V = model_cfg(m)->vocab_size;
    int ids[30];
    test_prompt_ids(ids, 30, 0, 8, V);
    model_ctx *a, *b, *c;
    CHECK(mctx_create(&a, m, 64, 64, tp, err, sizeof err) == 0);
    CHECK(mctx_create(&b, m, 64, 64, tp, err, sizeof err) == 0);
    CHECK(mctx_create(&c, m, 64, 64, tp, err, sizeof err) == 0);
    float *la = xmalloc(sizeof(float) * 10 * (size_t)V), *lb = xmalloc(sizeof(float) * 10 * (size_t)V);
    model_batch p = {.n = 20, .tokens = ids, .n_logits = 0};
    CHECK(model_forward(a, &p, err, sizeof err) == 0);
    /* 4 ranks over 2 KV heads: each rank stores one head */
    const model_config *cf = model_cfg(m);
    CHECK_EQ_INT(mctx_pos_bytes(a), 4 * kv_bytes_per_pos(cf->n_layers, 1, cf->head_dim, 32));
    CHECK_MSG(mctx_copy_prefix(b, a, 16, err, sizeof err) == 0, "%s", err);
    size_t pb = mctx_pos_bytes(a);
    char *host = xmalloc(pb * 16);
    CHECK_MSG(mctx_save_rows(a, 0, 16, host, err, sizeof err) == 0, "%s", err);
    CHECK_MSG(mctx_load_rows(c, 0, 16, host, err, sizeof err) == 0, "%s", err);
    mctx_truncate(a, 16);
    model_batch t = {.n = 10, .tokens = ids + 16, .n_logits = 10, .logits = la};
    CHECK(model_forward(a, &t, err, sizeof err) == 0);
    t.logits = lb;
    CHECK(model_forward(b, &t, err, sizeof err) == 0);
    CHECK_MSG(!memcmp(la, lb, sizeof(float) * 10 * (size_t)V), "a copied prefix continues otherwise");
    CHECK(model_forward(c, &t, err, sizeof err) == 0);
    CHECK_MSG(!memcmp(la, lb, sizeof(float) * 10 * (size_t)V), "a loaded prefix continues otherwise");
    free(host), free(la), free(lb);
    mctx_free(a), mctx_free(b), mctx_free(c);
    model_free(m);
    tp_free(tp);
}

/* ---- lossless at 2 ranks ---------------------------------------------------------------- */

static int gen(model *m, tpool *tp, drafter *d, int k, const int *prompt, int n, int *out, spec_stats *st) {
    char err[512];
    seq *s;
    if (seq_create(&s, m, 512, 64, tp, err, sizeof err) != 0) return -1;
    sampler_params sp = {.temperature = 0, .top_p = 1};
    sampler *smp;
    sampler_create(&smp, &sp, model_cfg(m)->vocab_size, err, sizeof err);
    spec_opts so = {.max_new = 40, .max_draft = k};
    int rc = spec_generate(s, smp, d, prompt, n, &so, out, NULL, st, err, sizeof err);
    if (rc) test_fail(__FILE__, __LINE__, "%s", err);
    sampler_free(smp);
    seq_free(s);
    return rc ? -1 : st->n_gen;
}

/* the bundled model split over 2 ranks: DSpark, DFlash and lookup give
   plain decoding's output at 2 ranks, with drafts accepted */
TEST(tpar_lossless_bundled) {
    char dir[700], err[1024];
    tpool *tp = tp_create(2);
    test_bundled_path(dir, sizeof dir, "");
    model_load_opts o = {.device = "cpu", .tensor_parallel = 2};
    model *m = NULL;
    dmodel *dm[2] = {NULL, NULL};
    tokenizer *tok = NULL;
    CHECK_MSG(model_load(&m, dir, &o, err, sizeof err) == 0, "%s", err);
    CHECK_MSG(!m || tok_load(&tok, dir, err, sizeof err) == 0, "%s", err);
    for (int k = 0; m && k < 2; k++) {
        char dd[720];
        snprintf(dd, sizeof dd, "%s-%s", dir, k ? "dflash" : "dspark");
        CHECK_MSG(dmodel_load(&dm[k], dd, m, NULL, err, sizeof err) == 0, "%s", err);
    }
    if (!m || !tok || !dm[0] || !dm[1]) goto out;
    const char *text = "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
                       "def factorial(n):\n    if n < 2:\n        return 1\n    return n * factorial(n - 1)\n\n"
                       "for i in range(10):\n    print(i, fibonacci(i), factorial(i))\n\ndef ";
    int *ids = NULL;
    int n = tok_encode(tok, text, strlen(text), 0, &ids, err, sizeof err);
    CHECK_MSG(n > 8, "%s", err);
    long accepted = 0;
    if (n > 8) {
        int base[40], got[40];
        spec_stats st;
        int nb = gen(m, tp, NULL, 0, ids, n, base, &st);
        sampler_params sp = {.temperature = 0, .top_p = 1};
        sampler *smp;
        sampler_create(&smp, &sp, model_cfg(m)->vocab_size, err, sizeof err);
        for (int r = 0; r < 3; r++) {
            dstate *ds = NULL;
            lookup *lk = NULL;
            drafter d;
            if (r < 2) {
                CHECK(dstate_create(&ds, dm[r], 512, tp, smp, err, sizeof err) == 0);
                d = dstate_drafter(ds);
            } else {
                lk = lookup_create(3, 1);
                d = lookup_drafter(lk);
            }
            int ng = gen(m, tp, &d, r == 1 ? 15 : 7, ids, n, got, &st);
            accepted += st.n_accepted;
            CHECK_MSG(ng == nb && !memcmp(got, base, sizeof(int) * (size_t)nb),
                      "drafter %d at 2 ranks: speculative output differs from plain decoding", r);
            dstate_free(ds);
            lookup_free(lk);
        }
        sampler_free(smp);
    }
    CHECK_MSG(accepted > 0, "no draft accepted at 2 ranks");
    free(ids);
out:
    dmodel_free(dm[0]);
    dmodel_free(dm[1]);
    tok_free(tok);
    model_free(m);
    tp_free(tp);
}

/* ---- the command line --------------------------------------------------------------------- */

TEST(tpar_cli) {
    char args[1200], *out1 = NULL, *out2 = NULL, *e = NULL;
    char dir[700];
    model_path(dir, sizeof dir, "qwen3-bf16");
    snprintf(args, sizeof args, "run -m %s --prompt-ids 5,6,7,8 -n 12 --print-ids --no-warmup --mode baseline --device cpu", dir);
    CHECK(test_run_cli(args, &out1, NULL) == 0);
    snprintf(args, sizeof args, "run -m %s --prompt-ids 5,6,7,8 -n 12 --print-ids --no-warmup --tensor-parallel 2 "
                                "--mode lookup --max-draft 4 --device cpu", dir);
    CHECK(test_run_cli(args, &out2, &e) == 0);
    CHECK_MSG(out1 && out2 && !strcmp(out1, out2), "run at 2 ranks: \"%s\" against \"%s\"", out2 ? out2 : "",
              out1 ? out1 : "");
    CHECK_MSG(e && strstr(e, "2 ranks emulated on the CPU"), "%s", e ? e : "");
    free(out1), free(out2), free(e);
    static const struct { const char *flag; const char *says; } bad[] = {
        {"--tensor-parallel 3", "4 attention heads"},
        {"--tensor-parallel 0", "[1, 64]"},
        {"--tensor-parallel two", "[1, 64]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "logits -m %s --prompt-ids 5,6 -o %s/tp.bin --device cpu %s", dir, test_tmp_dir(),
                 bad[i].flag);
        e = NULL;
        CHECK(test_run_cli(args, NULL, &e) != 0);
        CHECK_MSG(e && strstr(e, bad[i].says), "%s: %s", bad[i].flag, e ? e : "");
        free(e);
    }
    /* accepted by every command that opens a model for generation */
    static const char *cmds[] = {"chat", "bench", "serve"};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "%s --help", cmds[i]);
        char *h = NULL;
        CHECK(test_run_cli(args, &h, NULL) == 0);
        CHECK_MSG(h && strstr(h, "--tensor-parallel"), "%s --help lacks --tensor-parallel", cmds[i]);
        free(h);
    }
}

/* ---- doctor's fits ---------------------------------------------------------------------- */

/* the largest registered build one rank of N GPUs takes: none in a byte,
   one in a big GPU, and never a smaller one on more GPUs of the same size */
TEST(tpar_doctor_fits) {
    const char *name, *kind;
    double w[4];
    CHECK(doctor_tp_largest(1, 1, &name, &kind, &w[0]) == 0 && !name && w[0] == 0);
    CHECK(doctor_tp_largest(1, 1e13, &name, &kind, &w[0]) == 1 && name && kind && w[0] > 0);
    static const double gib[] = {8, 24, 80};
    double one = 0, eight = 0;
    for (int g = 0; g < 3; g++) {
        double prev = 0;
        for (int r = 1, k = 0; r <= 8; r *= 2, k++) {
            int f = doctor_tp_largest(r, gib[g] * 1073741824.0, &name, &kind, &w[k % 4]);
            CHECK_MSG(w[k % 4] >= prev, "%g GiB: %d GPUs take %.3g bytes of weights, fewer take %.3g", gib[g], r,
                      w[k % 4], prev);
            if (f) prev = w[k % 4];
            if (g == 0 && r == 1) one = w[k % 4];
            if (g == 0 && r == 8) eight = w[k % 4];
        }
    }
    /* a split's rank holds a share of the weights and of the KV heads: 8 GPUs of 8 GiB take more than one */
    CHECK_MSG(eight > one, "8 GiB: 8 GPUs take %.3g bytes of weights, one takes %.3g", eight, one);
}
