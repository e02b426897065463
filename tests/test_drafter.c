/* Drafter tests: the DFlash, DSpark and DSpark markov_rank-0 forward passes
 * against the PyTorch reference (tools/gen_golden_drafters.py, fixtures in
 * tests/data/drafters), the drafter cache bookkeeping (a drafter fed
 * round by round must equal one fed everything at once), the confidence
 * cut, embedding aliasing, loader refusals, and lossless greedy decoding
 * with every drafter through the spec loop. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/cuda/cuda_backend.h"
#include "spec/drafter.h"
#include "base/json.h"
#include "spec/lookup.h"
#include "engine/ops.h"
#include "spec/registry.h"
#include "spec/spec.h"
#include "hooks.h"
#include "test.h"
#include "text/tokenizer.h"
#include "base/util.h"

typedef struct {
    model *m;
    tpool *tp;
    int V, H;
} target;

static int open_target(target *t, const char *name) {
    char dir[600], err[512];
    memset(t, 0, sizeof *t);
    snprintf(dir, sizeof dir, "%s/%s", test_data_dir(), name);
    if (model_load(&t->m, dir, NULL, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return -1;
    }
    t->tp = tp_create(2);
    t->V = model_cfg(t->m)->vocab_size;
    t->H = model_cfg(t->m)->hidden_size;
    return 0;
}

static void close_target(target *t) {
    tp_free(t->tp);
    model_free(t->m);
}

static dmodel *open_drafter(const target *t, const char *name, char *err, size_t errlen) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/drafters/%s", test_data_dir(), name);
    dmodel *dm = NULL;
    if (dmodel_load(&dm, dir, t->m, NULL, err, errlen) != 0) return NULL;
    return dm;
}

static sampler *greedy(int V) {
    sampler_params sp = {.temperature = 0, .top_p = 1};
    sampler *s;
    char err[256];
    sampler_create(&s, &sp, V, err, sizeof err);
    return s;
}

static float *read_f32(const char *dir, const char *file, size_t n) {
    char path[700], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    size_t len;
    char *b = ds_read_file(path, &len, err, sizeof err);
    if (!b || len != n * sizeof(float)) {
        test_fail(__FILE__, __LINE__, "%s: %s (%zu bytes, want %zu)", path, b ? "wrong size" : err, len,
                  n * sizeof(float));
        free(b);
        return NULL;
    }
    float *f = xmalloc(len);
    memcpy(f, b, len);
    free(b);
    return f;
}

static int ints(const cJSON *a, int *out, int cap) {
    int n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a) if (n < cap) out[n++] = v->valueint;
    return n;
}

#define TOL_CPU 2e-5
/* With the target and drafter on a GPU the f32 sums run in other orders (K
   split over 8 warps, tensor-core accumulation) and the bf16-weight
   matmuls multiply each activation as a bf16 head and tail (within 2^-17
   of it): up to 2.1e-4 relative was measured on the drafter logits after
   the taps have passed the target's layers (2.4e-5 with TF32's 2^-21
   cut), so the GPU gets 5e-4, half the design's 1e-3 bound on logits and
   far below the ~4e-3 of a single bf16 rounding. Drafts are compared
   exactly either way. */
#define TOL_GPU 5e-4

/* Feeds the target features of rows ids[0..n) at positions pos.. to d
   through a verify-style forward on s. Returns the argmax of the last row. */
static int feed(seq *s, drafter *d, const int *ids, int n, int V, int H) {
    char err[512];
    float *logits = xmalloc(sizeof(float) * (size_t)n * (size_t)V);
    float *taps = xmalloc(sizeof(float) * (size_t)d->n_taps * (size_t)n * (size_t)H);
    int pos = seq_len(s);
    int rc = seq_append_taps(s, ids, n, n, logits, d->n_taps, d->tap_layers, taps, err, sizeof err);
    if (rc != 0) test_fail(__FILE__, __LINE__, "%s", err);
    d->features(d->self, pos, n, taps, n, 0);
    int y = op_argmax(logits + (size_t)(n - 1) * V, V);
    free(logits);
    free(taps);
    return y;
}

/* tdir: the target (relative to tests/data); ddir: the drafter; dir: its
   golden files. */
static void golden_dirs(const char *name, const char *tdir, const char *ddir, const char *dir) {
    target t;
    if (open_target(&t, tdir) != 0) return;
    const double TOL = strcmp(model_backend(t.m)->name, "cpu") ? TOL_GPU : TOL_CPU;
    char err[1024], path[700];
    dmodel *dm = NULL;
    if (dmodel_load(&dm, ddir, t.m, NULL, err, sizeof err) != 0) dm = NULL;
    CHECK_MSG(dm, "%s", err);
    snprintf(path, sizeof path, "%s/golden.json", dir);
    cJSON *g = json_parse_file(path, err, sizeof err);
    CHECK_MSG(g, "%s", err);
    if (!dm || !g) goto out0;
    const drafter_config *c = dmodel_cfg(dm);
    const int V = t.V, H = t.H, B = c->block_size, dspark = c->kind == DRAFTER_DSPARK;
    const int rows = dspark ? B : B - 1;
    CHECK_EQ_INT(cJSON_GetObjectItem(g, "block_size")->valueint, B);
    const cJSON *rounds = cJSON_GetObjectItem(g, "rounds");
    const int R = cJSON_GetArraySize(rounds);
    float *gl = read_f32(dir, "logits.bin", (size_t)R * rows * V);
    float *gz = dspark && c->markov_rank ? read_f32(dir, "zlogits.bin", (size_t)R * rows * V) : NULL;
    float *gctx = read_f32(dir, "ctx.bin", (size_t)cJSON_GetObjectItem(g, "ctx_rows")->valueint * H);
    sampler *smp = greedy(V);
    seq *s;
    dstate *ds;
    CHECK(seq_create(&s, t.m, 128, 64, t.tp, err, sizeof err) == 0);
    CHECK(dstate_create(&ds, dm, 128, t.tp, smp, err, sizeof err) == 0);
    drafter d = dstate_drafter(ds);
    int prompt[64], np = ints(cJSON_GetObjectItem(g, "prompt"), prompt, 64);
    CHECK_EQ_INT(d.reset(d.self, prompt, np), 0);
    int anchor = feed(s, &d, prompt, np, V, H);
    /* the prompt's context features */
    int nc;
    const float *ctx = dstate_last_ctx(ds, &nc);
    CHECK_EQ_INT(nc, np);
    if (gctx) CHECK_MSG(test_rel_err(ctx, gctx, (size_t)np * H) < TOL, "%s: context features differ", name);
    d.commit(d.self, &anchor, 1);
    for (int r = 0; r < R && gl; r++) {
        const cJSON *gr = cJSON_GetArrayItem(rounds, r);
        int gseq[128], gd[64], gcm[64];
        int ns = ints(cJSON_GetObjectItem(gr, "seq"), gseq, 128);
        int nd = ints(cJSON_GetObjectItem(gr, "drafts"), gd, 64);
        int ncm = ints(cJSON_GetObjectItem(gr, "commit"), gcm, 64);
        int a = cJSON_GetObjectItem(gr, "accept")->valueint;
        CHECK_EQ_INT(cJSON_GetObjectItem(gr, "anchor_pos")->valueint, seq_len(s));
        CHECK_EQ_INT(gseq[ns - 1], anchor);
        CHECK_EQ_INT(dstate_ctx_len(ds), seq_len(s));
        int draft[64];
        if (dspark && c->confidence && r == 0) {
            /* the confidence cut: the first position below the threshold */
            const cJSON *gc = cJSON_GetObjectItem(gr, "confidence");
            float th = 0.3f;
            int want = 0;
            while (want < B && cJSON_GetArrayItem(gc, want)->valuedouble >= th) want++;
            dstate_set_confidence_threshold(ds, th);
            CHECK_EQ_INT(d.propose(d.self, B, draft, NULL), want);
            CHECK(!memcmp(draft, gd, sizeof(int) * (size_t)want));
            dstate_set_confidence_threshold(ds, 0);
        }
        int k = d.propose(d.self, 64, draft, NULL);
        CHECK_EQ_INT(k, rows);
        CHECK_EQ_INT(nd, rows);
        CHECK_MSG(!memcmp(draft, gd, sizeof(int) * (size_t)rows), "%s round %d: drafts differ", name, r);
        const float *base, *mk, *conf;
        CHECK_EQ_INT(dstate_last(ds, &base, &mk, &conf), rows);
        double e = test_rel_err(base, gl + (size_t)r * rows * V, (size_t)rows * V);
        CHECK_MSG(e < TOL, "%s round %d: logits rel err %.3g", name, r, e);
        if (gz) {
            e = test_rel_err(mk, gz + (size_t)r * rows * V, (size_t)rows * V);
            CHECK_MSG(e < TOL, "%s round %d: Markov logits rel err %.3g", name, r, e);
        }
        const cJSON *gc = cJSON_GetObjectItem(gr, "confidence");
        CHECK_EQ_INT(conf != NULL, cJSON_GetArraySize(gc) > 0);
        for (int j = 0; conf && j < cJSON_GetArraySize(gc); j++)
            CHECK_NEAR(conf[j], cJSON_GetArrayItem(gc, j)->valuedouble, 2e-5);
        /* commit a drafts (prescribed, whatever the target thinks) and the
           target's next token, as a verify would */
        int rowsv[64];
        rowsv[0] = anchor;
        memcpy(rowsv + 1, draft, sizeof(int) * (size_t)a);
        int y = feed(s, &d, rowsv, a + 1, V, H);
        CHECK_EQ_INT(ncm, a + 1);
        CHECK_EQ_INT(y, gcm[a]);
        d.commit(d.self, gcm, ncm);
        anchor = gcm[a];
    }
    dstate_free(ds);
    seq_free(s);
    sampler_free(smp);
    free(gl);
    free(gz);
    free(gctx);
out0:
    cJSON_Delete(g);
    dmodel_free(dm);
    close_target(&t);
}

static void golden(const char *name) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/drafters/%s", test_data_dir(), name);
    golden_dirs(name, "drafters/target", dir, dir);
}

/* the bundled model's trained drafters (tools/gen_bundled_golden.py) */
static void golden_bundled(const char *kind) {
    char ddir[600], gdir[600];
    snprintf(ddir, sizeof ddir, "%s/../../models/%s-%s", test_data_dir(), DSPARK_DEFAULT_MODEL, kind);
    snprintf(gdir, sizeof gdir, "%s/bundled/%s", test_data_dir(), kind);
    golden_dirs(kind, "../../models/" DSPARK_DEFAULT_MODEL, ddir, gdir);
}

/* The bundled DSpark drafter leaves out the copies of the target's
   embedding and LM head: it takes the target's (its golden forward above
   is unchanged) */
TEST(drafter_bundled_takes_target_tables) {
    target t;
    if (open_target(&t, "../../models/" DSPARK_DEFAULT_MODEL) != 0) return;
    char dir[600], err[1024];
    snprintf(dir, sizeof dir, "%s/../../models/%s-dspark", test_data_dir(), DSPARK_DEFAULT_MODEL);
    dmodel *dm = NULL;
    CHECK_MSG(dmodel_load(&dm, dir, t.m, NULL, err, sizeof err) == 0, "%s", err);
    int ae = 0, ah = 0;
    if (dm) CHECK(dmodel_aliased(dm, &ae, &ah) == 1 && ae && ah);
    dmodel_free(dm);
    close_target(&t);
}

TEST(drafter_golden_dflash) { golden("dflash"); }
TEST(drafter_golden_dspark) { golden("dspark"); }
TEST(drafter_golden_dspark_markov_rank0) { golden("dspark-r0"); }
TEST(drafter_golden_bundled_dflash) { golden_bundled("dflash"); }
TEST(drafter_golden_bundled_dspark) { golden_bundled("dspark"); }

TEST(drafter_config_and_aliasing) {
    target t;
    if (open_target(&t, "drafters/target") != 0) return;
    char err[1024];
    dmodel *dm = open_drafter(&t, "dspark", err, sizeof err);
    CHECK_MSG(dm, "%s", err);
    int ae, ah;
    if (dm) {
        const drafter_config *c = dmodel_cfg(dm);
        CHECK_EQ_INT(c->kind, DRAFTER_DSPARK);
        CHECK_EQ_INT(c->block_size, 7);
        CHECK_EQ_INT(c->mask_token_id, 500);
        CHECK_EQ_INT(c->n_taps, 3);
        CHECK_EQ_INT(c->tap_layers[2], 4);
        CHECK_EQ_INT(c->markov_rank, 16);
        CHECK(c->confidence && c->confidence_with_markov);
        /* the copies equal the target's tied embedding */
        CHECK_EQ_INT(dmodel_aliased(dm, &ae, &ah), 1);
        CHECK(!strcmp(dmodel_kind_name(dm), "dspark"));
    }
    dmodel_free(dm);
    dm = open_drafter(&t, "dspark-r0", err, sizeof err);
    CHECK_MSG(dm, "%s", err);
    if (dm) {
        CHECK_EQ_INT(dmodel_aliased(dm, &ae, &ah), 0);
        CHECK(!ae && !ah);
        CHECK(!strcmp(dmodel_kind_name(dm), "dspark-r0"));
    }
    dmodel_free(dm);
    dm = open_drafter(&t, "dflash", err, sizeof err);
    CHECK_MSG(dm, "%s", err);
    if (dm) {
        CHECK_EQ_INT(dmodel_cfg(dm)->block_size, 16);
        CHECK_EQ_INT(dmodel_cfg(dm)->kind, DRAFTER_DFLASH);
        CHECK(!strcmp(dmodel_kind_name(dm), "dflash"));
    }
    dmodel_free(dm);
    close_target(&t);

    /* the published fallback for missing target_layer_ids */
    drafter_config c;
    const char *cfg = "{\"architectures\":[\"DFlashDraftModel\"],\"model_type\":\"qwen3\",\"vocab_size\":1000,"
                      "\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":5,"
                      "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"max_position_embeddings\":512,"
                      "\"block_size\":16,\"num_target_layers\":36,\"dflash_config\":{\"mask_token_id\":999}}";
    CHECK_MSG(drafter_config_parse(&c, cfg, strlen(cfg), "cfg", err, sizeof err) == 0, "%s", err);
    int want[5] = {1, 9, 17, 25, 33};
    CHECK_EQ_INT(c.n_taps, 5);
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(c.tap_layers[i], want[i]);
    CHECK_EQ_INT(c.mask_token_id, 999);
    /* the rule cannot spread 5 taps over 3 layers: refused, not garbage */
    char *bad = xstrdup(cfg), *at = strstr(bad, "\"num_target_layers\":36");
    memcpy(at, "\"num_target_layers\":3 ", 22);
    CHECK(drafter_config_parse(&c, bad, strlen(bad), "cfg", err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "give them explicitly"), "%s", err);
    free(bad);
}

/* Writes dir/config.json = the drafter's config with `from` replaced by
   `to`, and links its weights (or those of weights_from). */
static void variant(const char *out, const char *src, const char *weights_from, const char *from, const char *to) {
    char p[800], err[256];
    mkdir(out, 0755);
    snprintf(p, sizeof p, "%s/drafters/%s/config.json", test_data_dir(), src);
    size_t n;
    char *t = ds_read_file(p, &n, err, sizeof err);
    if (!t) return;
    char *hit = from ? strstr(t, from) : NULL;
    if (from && !hit) test_fail(__FILE__, __LINE__, "variant: \"%s\" not in %s", from, p);
    snprintf(p, sizeof p, "%s/config.json", out);
    FILE *f = fopen(p, "w");
    if (hit) fprintf(f, "%.*s%s%s", (int)(hit - t), t, to, hit + strlen(from));
    else fputs(t, f);
    fclose(f);
    free(t);
    char dst[800];
    snprintf(p, sizeof p, "%s/drafters/%s/model.safetensors", test_data_dir(), weights_from ? weights_from : src);
    snprintf(dst, sizeof dst, "%s/model.safetensors", out);
    unlink(dst);
    char *abs = realpath(p, NULL);
    if (!abs || symlink(abs, dst) != 0) test_fail(__FILE__, __LINE__, "symlink %s", dst);
    free(abs);
}

TEST(drafter_load_errors) {
    target t, other;
    if (open_target(&t, "drafters/target") != 0) return;
    if (open_target(&other, "models/qwen3-bf16") != 0) return;
    static const struct {
        const char *src, *weights, *from, *to, *want;
        int other_target;
    } cases[] = {
        /* (no embedding / LM head of its own is allowed: the target's are taken) */
        {"dspark", "dflash", NULL, NULL, "missing tensor \"markov_head.markov_w1.weight\"", 0},
        {"dflash", "dspark", NULL, NULL, "unexpected tensor", 0},
        {"dspark", NULL, "\"markov_rank\": 16", "\"markov_rank\": 8", "markov_head.markov_w1.weight", 0},
        {"dspark", NULL, "\"markov_head_type\": \"vanilla\"", "\"markov_head_type\": \"rnn\"", "rnn", 0},
        {"dspark", NULL, "\"mask_token_id\": 500", "\"mask_token_id\": 600", "mask_token_id", 0},
        {"dspark", NULL, "\"num_target_layers\": 6", "\"num_target_layers\": 8", "8-layer target", 0},
        {"dspark", NULL, "\"Qwen3DSparkModel\"", "\"Qwen3ForCausalLM\"", "not a drafter", 0},
        {"dflash", NULL, "\"use_sliding_window\": false", "\"use_sliding_window\": true", "sliding", 0},
        {"dflash", NULL, "\"mask_token_id\": 500", "\"mask_token_id\": 500, \"causal\": true", "causal", 0},
        {"dspark", NULL, NULL, NULL, "6-layer target", 1},
        {"dspark", NULL, "\"num_target_layers\": 6,", "", "below the target's last layer", 1},
        {"dspark", NULL, "\"block_size\": 7", "\"block_size\": 700", "block_size", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[600], err[1024] = "";
        snprintf(dir, sizeof dir, "%s/drafter-bad-%zu", test_tmp_dir(), i);
        variant(dir, cases[i].src, cases[i].weights, cases[i].from, cases[i].to);
        dmodel *dm = NULL;
        int rc = dmodel_load(&dm, dir, cases[i].other_target ? other.m : t.m, NULL, err, sizeof err);
        CHECK_MSG(rc != 0 && !dm, "case %zu loaded", i);
        CHECK_MSG(strstr(err, cases[i].want), "case %zu: want \"%s\" in: %s", i, cases[i].want, err);
        dmodel_free(dm);
    }
    close_target(&other);
    close_target(&t);
}

/* ---- lossless through the spec loop ---- */

/* A drafter that runs the neural drafter every round (so its cache
   bookkeeping is exercised with real acceptances) but proposes the known
   greedy continuation with periodic errors: random drafters are almost
   never accepted on their own. */
typedef struct {
    drafter inner;
    const int *ref;
    int n_ref, pos, round, vocab, every;
} steer;

static int st_reset(void *self, const int *ids, int n) {
    steer *s = self;
    s->pos = n;
    s->round = 0;
    return s->inner.reset(s->inner.self, ids, n);
}
static int st_propose(void *self, int k, int *draft, float *q) {
    steer *s = self;
    int got = s->inner.propose(s->inner.self, k, draft, q);
    s->round++;
    for (int i = 0; i < got; i++) {
        int t = s->pos + i < s->n_ref ? s->ref[s->pos + i] : 1;
        if ((s->round * 5 + i) % s->every == s->every - 1) t = (t + 3) % s->vocab;
        draft[i] = t;
    }
    return got;
}
static void st_commit(void *self, const int *ids, int n) {
    steer *s = self;
    s->pos += n;
    s->inner.commit(s->inner.self, ids, n);
}
static void st_features(void *self, int pos0, int n, const float *taps, int rows, int row0) {
    steer *s = self;
    s->inner.features(s->inner.self, pos0, n, taps, rows, row0);
}

static void ignore_logits(void *ctx, int id, const float *logits) {
    (void)ctx, (void)id, (void)logits;
}

/* spec_opts.prefill_chunk for gen_last (0: the default) */
static int g_prefill_chunk;

/* last (or NULL): the last logits row; rows: every verify brings its logits
   rows back (an emit_logits hook) instead of the greedy ids-only path */
static int gen_last(const target *t, drafter *d, int k, const int *prompt, int n, int max_new, int *out,
                    spec_stats *st, float *last, int rows) {
    seq *s;
    char err[512];
    if (seq_create(&s, t->m, 512, 64, t->tp, err, sizeof err) != 0) return -1;
    sampler *smp = greedy(t->V);
    int stop[2] = {7, 9};
    spec_opts so = {.max_new = max_new, .max_draft = k, .stop = stop, .n_stop = 2,
                    .emit_logits = rows ? ignore_logits : NULL, .prefill_chunk = g_prefill_chunk};
    int rc = spec_generate(s, smp, d, prompt, n, &so, out, last, st, err, sizeof err);
    if (rc != 0) test_fail(__FILE__, __LINE__, "%s", err);
    sampler_free(smp);
    seq_free(s);
    return rc ? -1 : st->n_gen;
}

static int gen(const target *t, drafter *d, int k, const int *prompt, int n, int max_new, int *out, spec_stats *st) {
    return gen_last(t, d, k, prompt, n, max_new, out, st, NULL, 0);
}

TEST(drafter_lossless_greedy) {
    target t;
    if (open_target(&t, "drafters/target") != 0) return;
    const char *names[] = {"dspark", "dflash", "dspark-r0"};
    char err[1024];
    sampler *smp = greedy(t.V);
    int mismatches = 0;
    for (int di = 0; di < 3; di++) {
        dmodel *dm = open_drafter(&t, names[di], err, sizeof err);
        CHECK_MSG(dm, "%s", err);
        if (!dm) continue;
        dstate *ds;
        CHECK(dstate_create(&ds, dm, 200, t.tp, smp, err, sizeof err) == 0);
        long accepted = 0;
        for (int pi = 0; pi < 20; pi++) {
            int prompt[32], n = 3 + pi % 11;
            uint32_t r = 777u + (uint32_t)pi * 31u;
            for (int i = 0; i < n; i++) {
                r = r * 1664525u + 1013904223u;
                prompt[i] = 10 + (int)((r >> 8) % 480);
            }
            int base[64], got[64];
            spec_stats st;
            /* the baseline's last logits row as its own decode step computed
               it; the ids-only runs recompute it at the end */
            float *lb = xmalloc(sizeof(float) * (size_t)t.V), *lg = xmalloc(sizeof(float) * (size_t)t.V);
            int nb = gen_last(&t, NULL, 0, prompt, n, 40, base, &st, lb, 1);
            for (int k = 1; k <= 16; k++) {
                drafter d = dstate_drafter(ds);
                int ng = gen_last(&t, &d, k, prompt, n, 40, got, &st, k % 4 == 1 ? lg : NULL, 0);
                if (ng != nb || memcmp(got, base, sizeof(int) * (size_t)nb))
                    if (mismatches++ < 5) test_fail(__FILE__, __LINE__, "%s prompt %d k %d", names[di], pi, k);
                if (k % 4 == 1 && memcmp(lg, lb, sizeof(float) * (size_t)t.V))
                    if (mismatches++ < 5)
                        test_fail(__FILE__, __LINE__, "%s prompt %d k %d: last logits row differs", names[di], pi, k);
                /* steered: real acceptances through the same drafter state */
                int ref[128];
                memcpy(ref, prompt, sizeof(int) * (size_t)n);
                memcpy(ref + n, base, sizeof(int) * (size_t)nb);
                steer sv = {.inner = dstate_drafter(ds), .ref = ref, .n_ref = n + nb, .vocab = t.V,
                            .every = 2 + (k + pi) % 5};
                drafter sd = {.self = &sv, .deterministic = 1, .n_taps = sv.inner.n_taps,
                              .tap_layers = sv.inner.tap_layers, .reset = st_reset, .propose = st_propose,
                              .commit = st_commit, .features = st_features};
                ng = gen_last(&t, &sd, k, prompt, n, 40, got, &st, lg, 0);
                accepted += st.n_accepted;
                if (ng != nb || memcmp(got, base, sizeof(int) * (size_t)nb))
                    if (mismatches++ < 5)
                        test_fail(__FILE__, __LINE__, "%s steered prompt %d k %d", names[di], pi, k);
                if (memcmp(lg, lb, sizeof(float) * (size_t)t.V))
                    if (mismatches++ < 5)
                        test_fail(__FILE__, __LINE__, "%s steered prompt %d k %d: last logits row differs", names[di],
                                  pi, k);
                /* the drafter's context is exactly the committed positions */
                CHECK_EQ_INT(dstate_ctx_len(ds), n + ng - 1);
            }
            free(lb);
            free(lg);
        }
        CHECK_MSG(accepted > 100, "%s: steered drafts were hardly accepted (%ld)", names[di], accepted);
        dstate_free(ds);
        dmodel_free(dm);
    }
    CHECK_EQ_INT(mismatches, 0);
    sampler_free(smp);
    close_target(&t);
}

/* After rounds with partial acceptance, the drafter's cache equals that of
   a drafter fed the same committed sequence in one go: the next proposal
   (drafts and logits) is identical. */
TEST(drafter_cache_incremental_equals_fresh) {
    target t;
    if (open_target(&t, "drafters/target") != 0) return;
    char err[1024];
    sampler *smp = greedy(t.V);
    const char *names[] = {"dspark", "dflash"};
    for (int di = 0; di < 2; di++) {
        dmodel *dm = open_drafter(&t, names[di], err, sizeof err);
        CHECK_MSG(dm, "%s", err);
        if (!dm) continue;
        dstate *a, *b;
        CHECK(dstate_create(&a, dm, 200, t.tp, smp, err, sizeof err) == 0);
        CHECK(dstate_create(&b, dm, 200, t.tp, smp, err, sizeof err) == 0);
        int prompt[12] = {11, 22, 33, 44, 55, 66, 77, 88, 99, 111, 122, 133}, base[64];
        spec_stats st;
        int nb = gen(&t, NULL, 0, prompt, 12, 30, base, &st);
        int ref[64];
        memcpy(ref, prompt, sizeof prompt);
        memcpy(ref + 12, base, sizeof(int) * (size_t)nb);
        steer sv = {.inner = dstate_drafter(a), .ref = ref, .n_ref = 12 + nb, .vocab = t.V, .every = 3};
        drafter sd = {.self = &sv, .deterministic = 1, .n_taps = sv.inner.n_taps, .tap_layers = sv.inner.tap_layers,
                      .reset = st_reset, .propose = st_propose, .commit = st_commit, .features = st_features};
        int got[64];
        int ng = gen(&t, &sd, 5, prompt, 12, 30, got, &st);
        CHECK(st.n_accepted > 3);
        /* fresh: the committed sequence (prompt + all but the last emitted
           id) in one prefill, then the last id as the anchor */
        int total = 12 + ng - 1;
        seq *s;
        CHECK(seq_create(&s, t.m, 200, 64, t.tp, err, sizeof err) == 0);
        drafter db = dstate_drafter(b);
        db.reset(db.self, ref, total);
        feed(s, &db, ref, total, t.V, t.H);
        db.commit(db.self, &ref[total], 1);
        int da[64], dbb[64];
        int ka = sv.inner.propose(sv.inner.self, 16, da, NULL), kb = db.propose(db.self, 16, dbb, NULL);
        CHECK_EQ_INT(ka, kb);
        CHECK(ka > 0 && !memcmp(da, dbb, sizeof(int) * (size_t)ka));
        const float *la, *lb;
        int ra = dstate_last(a, &la, NULL, NULL), rb = dstate_last(b, &lb, NULL, NULL);
        CHECK_EQ_INT(ra, rb);
        CHECK_MSG(test_rel_err(la, lb, (size_t)ra * t.V) < 1e-5, "%s: incremental and fresh drafter logits differ",
                  names[di]);
        seq_free(s);
        dstate_free(a);
        dstate_free(b);
        dmodel_free(dm);
    }
    sampler_free(smp);
    close_target(&t);
}

/* A sampling drafter whose q overlaps the target's p without equalling it,
   so that drafts are often accepted and rejections exercise the residual
   max(0, p - q): it runs the neural drafter (its state and q, or its
   one-hot argmax for DFlash), then draws each draft from
   q = (p' + q_drafter) / 2, with p' the target's distribution at a lower
   temperature (computed on its own target context). q is exactly the
   distribution each draft was drawn from. */
typedef struct {
    drafter inner;
    seq *ws;
    sampler *sharp;
    int *ids, n, V;
    float *qi, *lg;
    uint32_t rng;
} mixer;

static int mx_reset(void *self, const int *ids, int n) {
    mixer *m = self;
    memcpy(m->ids, ids, sizeof(int) * (size_t)n);
    m->n = n;
    return m->inner.reset(m->inner.self, ids, n);
}
static void mx_commit(void *self, const int *ids, int n) {
    mixer *m = self;
    memcpy(m->ids + m->n, ids, sizeof(int) * (size_t)n);
    m->n += n;
    m->inner.commit(m->inner.self, ids, n);
}
static void mx_features(void *self, int pos0, int n, const float *taps, int rows, int row0) {
    mixer *m = self;
    m->inner.features(m->inner.self, pos0, n, taps, rows, row0);
}
static int mx_propose(void *self, int k, int *draft, float *q) {
    mixer *m = self;
    char err[256];
    int got = m->inner.propose(m->inner.self, k, draft, m->inner.deterministic ? NULL : m->qi);
    if (seq_prefill(m->ws, m->ids, m->n, m->lg, err, sizeof err) < 0) return 0;
    for (int j = 0; j < got; j++) {
        float *qj = q + (size_t)j * m->V;
        sampler_probs(m->sharp, m->lg, qj);
        for (int i = 0; i < m->V; i++) {
            float qd = m->inner.deterministic ? (i == draft[j] ? 1.0f : 0.0f) : m->qi[(size_t)j * m->V + i];
            qj[i] = 0.5f * qj[i] + 0.5f * qd;
        }
        m->rng = m->rng * 1664525u + 1013904223u;
        double u = (m->rng >> 8) / 16777216.0, cum = 0;
        int pick = -1;
        for (int i = 0; i < m->V && pick < 0; i++) {
            cum += qj[i];
            if (u < cum && qj[i] > 0) pick = i;
        }
        for (int i = m->V - 1; pick < 0 && i >= 0; i--)
            if (qj[i] > 0) pick = i;
        draft[j] = pick;
        if (j + 1 < got && seq_step(m->ws, pick, m->lg, err, sizeof err) != 0) return j + 1;
    }
    return got;
}

/* Deterministic drafts for the mixer's context: the target's own greedy
   continuation (the inner drafter still proposes and reads its features,
   its drafts are dropped) */
static int mx_propose_greedy(void *self, int k, int *draft, float *q) {
    (void)q;
    mixer *m = self;
    char err[256];
    int got = m->inner.propose(m->inner.self, k, draft, NULL);
    if (seq_prefill(m->ws, m->ids, m->n, m->lg, err, sizeof err) < 0) return 0;
    for (int j = 0; j < got; j++) {
        draft[j] = op_argmax(m->lg, m->V);
        if (j + 1 < got && seq_step(m->ws, draft[j], m->lg, err, sizeof err) != 0) return j + 1;
    }
    return got;
}

/* Sampled speculative decoding keeps the target's distribution: the joint
   distribution of the 1st (from the prefill) and 2nd (from a verify round)
   generated tokens (top-k 4 keeps the cells few) over many seeds equals
   baseline's, with DSpark (its sampled drafts and q) and DFlash (one-hot
   argmax drafts) inside a mixer whose q is deliberately unlike p (half a
   sharper target distribution, half the random drafter's), so that about
   half the drafts are accepted and the rest resample from max(0, p - q);
   and, with DFlash reading the taps, deterministic drafts (the target's
   greedy continuation: one-hot q, so the rounds go through the forward's
   sampler_rows with the taps). Two-sample chi-square test; with the
   residual replaced by p it fails. */
TEST(drafter_sampling_distribution) {
    target t;
    if (open_target(&t, "drafters/target") != 0) return;
    char err[1024];
    enum { N = 2500, MAXC = 4096 };
    const int prompt[6] = {376, 280, 119, 187, 320, 332};
    /* the last: DFlash's features, the target's greedy drafts */
    const char *names[] = {NULL, "dspark", "dflash", "dflash"};
    enum { NM = 4 };
    static long cnt[NM][MAXC];
    int n_keys = 0; /* cells: (t2 * V + t3) */
    static int cell_key[MAXC];
    long accepted[NM] = {0};
    memset(cnt, 0, sizeof cnt);
    float *qi = xmalloc(sizeof(float) * 8 * (size_t)t.V), *lg = xmalloc(sizeof(float) * (size_t)t.V);
    for (int mi = 0; mi < NM; mi++) {
        dmodel *dm = NULL;
        dstate *ds = NULL;
        seq *s, *ws = NULL;
        sampler *smp, *sharp;
        sampler_params sp = {.temperature = 0.9f, .top_k = 4, .top_p = 1, .seed = 1};
        sampler_params sps = {.temperature = 0.4f, .top_k = 4, .top_p = 1, .seed = 1};
        CHECK(sampler_create(&smp, &sp, t.V, err, sizeof err) == 0);
        CHECK(sampler_create(&sharp, &sps, t.V, err, sizeof err) == 0);
        if (names[mi]) {
            dm = open_drafter(&t, names[mi], err, sizeof err);
            CHECK_MSG(dm, "%s", err);
            if (!dm) continue;
            CHECK(seq_create(&ws, t.m, 64, 64, t.tp, err, sizeof err) == 0);
        }
        CHECK(seq_create(&s, t.m, 64, 64, t.tp, err, sizeof err) == 0);
        int ctx_ids[64];
        for (int i = 0; i < N; i++) {
            sampler_free(smp);
            sp.seed = 1000003ull * (uint64_t)(i + 1) + (uint64_t)mi * 7;
            sampler_create(&smp, &sp, t.V, err, sizeof err);
            drafter d;
            mixer mx;
            if (dm) {
                dstate_free(ds); /* a fresh state bound to this seed's sampler */
                dstate_create(&ds, dm, 64, t.tp, smp, err, sizeof err);
                mx = (mixer){.inner = dstate_drafter(ds), .ws = ws, .sharp = sharp, .ids = ctx_ids, .V = t.V, .qi = qi,
                             .lg = lg, .rng = 12345u + (uint32_t)i * 2654435761u};
                d = (drafter){.self = &mx, .deterministic = 0, .n_taps = mx.inner.n_taps,
                              .tap_layers = mx.inner.tap_layers, .reset = mx_reset, .propose = mx_propose,
                              .commit = mx_commit, .features = mx_features};
                if (mi == NM - 1) d.deterministic = 1, d.propose = mx_propose_greedy;
            }
            spec_opts so = {.max_new = 3, .max_draft = 3, .ignore_eos = 1};
            spec_stats st;
            int out[4];
            if (spec_generate(s, smp, dm ? &d : NULL, prompt, 6, &so, out, NULL, &st, err, sizeof err) != 0) {
                test_fail(__FILE__, __LINE__, "%s", err);
                break;
            }
            accepted[mi] += st.n_accepted;
            int key = out[0] * t.V + out[1], c = -1;
            for (int j = 0; j < n_keys; j++)
                if (cell_key[j] == key) c = j;
            if (c < 0 && n_keys < MAXC) {
                c = n_keys++;
                cell_key[c] = key;
            }
            if (c >= 0) cnt[mi][c]++;
        }
        seq_free(s);
        seq_free(ws);
        dstate_free(ds);
        dmodel_free(dm);
        sampler_free(smp);
        sampler_free(sharp);
    }
    free(qi);
    free(lg);
    for (int mi = 1; mi < NM; mi++) {
        double chi = 0;
        int df = -1;
        for (int c = 0; c < n_keys; c++) {
            double a = (double)cnt[0][c], b = (double)cnt[mi][c];
            if (a + b == 0) continue;
            chi += (a - b) * (a - b) / (a + b);
            df++;
        }
        /* about p < 1e-6 for chi-square with df degrees of freedom */
        double lim = df + 7.0 * sqrt(2.0 * df) + 15.0;

        CHECK_MSG(accepted[mi] > N / 4, "%s: only %ld drafts accepted", names[mi], accepted[mi]);
        CHECK_MSG(chi < lim, "%s: chi-square %.1f with %d cells exceeds %.1f", names[mi], chi, df + 1, lim);
        if (getenv("DSPARK_TEST_VERBOSE"))
            fprintf(stderr, "  %s: chi2 %.1f df %d (limit %.1f), accepted drafts %ld\n", names[mi], chi, df, lim,
                    accepted[mi]);
    }
    close_target(&t);
}

/* A second turn whose prompt extends the first reuses both caches (only the
   new rows are prefilled, the drafter keeps its context) and generates
   exactly what a fresh sequence and drafter generate. */
TEST(drafter_prefix_reuse_across_turns) {
    target t;
    if (open_target(&t, "drafters/target") != 0) return;
    char err[1024];
    sampler *smp = greedy(t.V);
    dmodel *dm = open_drafter(&t, "dspark", err, sizeof err);
    CHECK_MSG(dm, "%s", err);
    if (!dm) goto out;
    dstate *ds, *fresh;
    seq *s, *s2;
    CHECK(dstate_create(&ds, dm, 200, t.tp, smp, err, sizeof err) == 0);
    CHECK(dstate_create(&fresh, dm, 200, t.tp, smp, err, sizeof err) == 0);
    CHECK(seq_create(&s, t.m, 200, 64, t.tp, err, sizeof err) == 0);
    CHECK(seq_create(&s2, t.m, 200, 64, t.tp, err, sizeof err) == 0);
    int stop[2] = {7, 9};
    spec_opts so = {.max_new = 20, .max_draft = 4, .stop = stop, .n_stop = 2};
    spec_stats st;
    int p1[8] = {101, 102, 103, 104, 105, 106, 107, 108}, out1[32], out2[32], out3[32], p2[64];
    drafter d = dstate_drafter(ds);
    CHECK(spec_generate(s, smp, &d, p1, 8, &so, out1, NULL, &st, err, sizeof err) == 0);
    int n2 = 8;
    memcpy(p2, p1, sizeof p1);
    memcpy(p2 + n2, out1, sizeof(int) * (size_t)st.n_gen);
    n2 += st.n_gen;
    p2[n2++] = 250;
    p2[n2++] = 251;
    CHECK(spec_generate(s, smp, &d, p2, n2, &so, out2, NULL, &st, err, sizeof err) == 0);
    /* cached: everything but the first turn's last id; new: that id and two more */
    CHECK_EQ_INT(st.n_prefilled, 3);
    int ng2 = st.n_gen;
    drafter df = dstate_drafter(fresh);
    CHECK(spec_generate(s2, smp, &df, p2, n2, &so, out3, NULL, &st, err, sizeof err) == 0);
    CHECK_EQ_INT(st.n_prefilled, n2);
    CHECK_EQ_INT(st.n_gen, ng2);
    CHECK(!memcmp(out2, out3, sizeof(int) * (size_t)ng2));
    /* a prefill chunk that would cut the GPU's matmul groups differently */
    spec_opts bad = so;
    bad.prefill_chunk = CUDA_GEMM_MIN_ROWS + 1;
    err[0] = 0;
    CHECK(spec_generate(s2, smp, &df, p2, n2, &bad, out3, NULL, &st, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "prefill chunk of") && strstr(err, "positive multiple"), "%s", err);
    bad.prefill_chunk = -CUDA_GEMM_MIN_ROWS;
    CHECK(spec_generate(s2, smp, &df, p2, n2, &bad, out3, NULL, &st, err, sizeof err) == -1);
    seq_free(s);
    seq_free(s2);
    dstate_free(ds);
    dstate_free(fresh);
    dmodel_free(dm);
out:
    sampler_free(smp);
    close_target(&t);
}

/* The bundled model: every mode gives baseline's greedy output on 20
   held-out code prompts (windows of this repository's own Python tools,
   which the training corpus cannot contain), with the trained drafters,
   whose drafts are often accepted. */
TEST(drafter_bundled_lossless) {
    target t;
    if (open_target(&t, "../../models/" DSPARK_DEFAULT_MODEL) != 0) return;
    char err[1024], tdir[600], ddir[2][700];
    snprintf(tdir, sizeof tdir, "%s/../../models/%s", test_data_dir(), DSPARK_DEFAULT_MODEL);
    tokenizer *tok = NULL;
    CHECK_MSG(tok_load(&tok, tdir, err, sizeof err) == 0, "%s", err);
    const char *kinds[2] = {"dspark", "dflash"};
    dmodel *dm[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        snprintf(ddir[i], sizeof ddir[i], "%s-%s", tdir, kinds[i]);
        CHECK_MSG(dmodel_load(&dm[i], ddir[i], t.m, NULL, err, sizeof err) == 0, "%s", err);
    }
    const char *files[] = {"tools/gen_golden_drafters.py", "tools/gen_golden_models.py", "tools/train/drafters.py",
                           "tools/train/target.py"};
    sampler *smp = greedy(t.V);
    long drafted = 0, accepted = 0;
    int n_prompts = 0, mismatches = 0;
    for (int fi = 0; fi < 4 && tok && dm[0] && dm[1]; fi++) {
        char path[700];
        snprintf(path, sizeof path, "%s/../../%s", test_data_dir(), files[fi]);
        size_t len;
        char *src = ds_read_file(path, &len, err, sizeof err);
        CHECK_MSG(src, "%s", err);
        if (!src) continue;
        for (int w = 0; w < 5; w++) {
            /* a window of about 600 bytes starting at a line boundary */
            size_t at = len / 6 * (size_t)(w + 1);
            while (at < len && src[at] != '\n') at++;
            size_t n = len - at < 600 ? len - at : 600;
            int *ids = NULL;
            int np = tok_encode(tok, src + at, n, 0, &ids, err, sizeof err);
            if (np < 8) {
                free(ids);
                continue;
            }
            n_prompts++;
            int base[64], got[64];
            spec_stats st;
            int nb = gen(&t, NULL, 0, ids, np, 48, base, &st);
            static const struct { int kind, k; } runs[] = {{0, 1}, {0, 3}, {0, 7}, {1, 1}, {1, 4}, {1, 15}, {2, 4}};
            for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
                dstate *ds = NULL;
                lookup *lk = NULL;
                drafter d;
                if (runs[r].kind < 2) {
                    dstate_create(&ds, dm[runs[r].kind], 512, t.tp, smp, err, sizeof err);
                    d = dstate_drafter(ds);
                } else {
                    lk = lookup_create(3, 1);
                    d = lookup_drafter(lk);
                }
                /* every other run prefills in 128-row chunks (the prompts
                   are 170-260 tokens: two or three chunks, against one) */
                g_prefill_chunk = r % 2 ? 128 : 0;
                int ng = gen(&t, &d, runs[r].k, ids, np, 48, got, &st);
                g_prefill_chunk = 0;
                if (runs[r].kind == 0 && runs[r].k == 7) {
                    drafted += st.n_drafted;
                    accepted += st.n_accepted;
                }
                if (ng != nb || memcmp(got, base, sizeof(int) * (size_t)nb))
                    if (mismatches++ < 5)
                        test_fail(__FILE__, __LINE__, "%s window %d: mode %d cap %d differs from baseline", files[fi],
                                  w, runs[r].kind, runs[r].k);
                dstate_free(ds);
                lookup_free(lk);
            }
            free(ids);
        }
        free(src);
    }
    CHECK_EQ_INT(mismatches, 0);
    CHECK_MSG(n_prompts >= 20, "only %d prompts", n_prompts);
    /* a trained drafter is accepted far more often than a random one (a
       loose floor, not a speed claim) */
    CHECK_MSG(accepted * 10 > drafted, "DSpark accepted %ld of %ld drafts", accepted, drafted);
    if (getenv("DSPARK_TEST_VERBOSE")) fprintf(stderr, "  DSpark cap 7: %ld of %ld drafts accepted\n", accepted, drafted);
    sampler_free(smp);
    for (int i = 0; i < 2; i++) dmodel_free(dm[i]);
    tok_free(tok);
    close_target(&t);
}
