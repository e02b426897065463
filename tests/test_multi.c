/* model_forward_multi: the forwards of several sequences in one call are
 * bit for bit model_forward on each sequence in turn (logits, argmax ids,
 * sampled answers, taps, and the caches, which a following single forward
 * reads). Random mixes of decode rows, verifies of 2-16 rows, prefill
 * chunks of whole 128-row groups and odd sizes, logits row subsets, taps
 * and sampled rows with a sampler per sequence, over the bundled model at
 * every --kv-bits and over the quantized fixtures (whose prefill groups
 * take the prefill family). Then the errors: a bad batch in the middle,
 * one context twice, contexts of two models, too many sequences. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "spec/registry.h"
#include "hooks.h"
#include "test.h"

static uint32_t rnd(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* one sequence's batch and its outputs, for the multi run (a) and the
   reference run (b) */
typedef struct {
    model_batch ba, bb;
    int *tok, *rows, *draft, *ida, *idb;
    double *u;
    float *lga, *lgb, *tapa, *tapb;
    int taps[2];
    sampler *sa, *sb;
} mcase;

static const char *kind_name[] = {"decode", "verify", "prefill groups", "prefill odd", "sampled", "tapped"};

/* a random batch of kind k for a model of vocab V, n_layers, hidden H */
static void case_make(mcase *c, int k, uint32_t *s, int V, int n_layers, int H, int si) {
    memset(c, 0, sizeof *c);
    static const int odd[] = {77, 130, 200, 131, 255};
    int n = k == 0 ? 1 : k == 1 ? 2 + (int)(rnd(s) % 15) : k == 2 ? 128 * (1 + (int)(rnd(s) % 2))
            : k == 3 ? odd[rnd(s) % 5] : k == 4 ? 1 + (int)(rnd(s) % 8) : 3 + (int)(rnd(s) % 7);
    c->tok = xmalloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) c->tok[i] = (int)(rnd(s) % (uint32_t)V);
    model_batch b = {.n = n, .tokens = c->tok};
    if (k == 0) { /* argmax only, or logits too */
        b.n_logits = 1;
        c->ida = xmalloc(sizeof(int)), c->idb = xmalloc(sizeof(int));
        if (rnd(s) & 1) c->lga = xmalloc(sizeof(float) * (size_t)V), c->lgb = xmalloc(sizeof(float) * (size_t)V);
    } else if (k == 1 || k == 5) {
        b.n_logits = k == 1 ? n : 1;
        c->lga = xmalloc(sizeof(float) * (size_t)b.n_logits * V);
        c->lgb = xmalloc(sizeof(float) * (size_t)b.n_logits * V);
        c->ida = xmalloc(sizeof(int) * (size_t)b.n_logits), c->idb = xmalloc(sizeof(int) * (size_t)b.n_logits);
    } else if (k == 2 || k == 3) {
        /* the last row, or (odd sizes) an ascending subset of rows */
        int want = k == 2 ? 1 : 1 + (int)(rnd(s) % 5);
        c->rows = xmalloc(sizeof(int) * (size_t)want);
        int got = 0;
        for (int r = 0; r < n && got < want; r++)
            if (r == n - 1 || rnd(s) % (uint32_t)n < (uint32_t)want) c->rows[got++] = r;
        b.n_logits = got;
        b.logit_rows = k == 2 ? NULL : c->rows;
        if (k == 2) b.n_logits = 1;
        c->lga = xmalloc(sizeof(float) * (size_t)b.n_logits * V);
        c->lgb = xmalloc(sizeof(float) * (size_t)b.n_logits * V);
    } else { /* sampled: a verify's rows with drafts and uniforms */
        b.n_logits = n;
        c->draft = xmalloc(sizeof(int) * (size_t)n);
        c->u = xmalloc(sizeof(double) * (size_t)n);
        for (int i = 0; i < n; i++) {
            c->draft[i] = i + 1 < n ? c->tok[i + 1] : 0;
            c->u[i] = (double)(rnd(s) % 1000) / 1000.0;
        }
        c->ida = xmalloc(sizeof(int) * (size_t)n), c->idb = xmalloc(sizeof(int) * (size_t)n);
        sampler_params p = {.temperature = 0.7f + 0.1f * (float)(si % 3), .top_k = si % 2 ? 40 : 0, .top_p = 1,
                            .seed = 11u + (uint64_t)si};
        char err[256];
        CHECK(sampler_create(&c->sa, &p, V, err, sizeof err) == 0);
        CHECK(sampler_create(&c->sb, &p, V, err, sizeof err) == 0);
        b.draft = c->draft, b.u = c->u;
    }
    if (k == 5 || (k == 3 && rnd(s) % 2)) {
        c->taps[0] = -1, c->taps[1] = (int)(rnd(s) % (uint32_t)n_layers);
        b.n_taps = 2, b.tap_layers = c->taps;
        c->tapa = xmalloc(sizeof(float) * 2 * (size_t)n * H), c->tapb = xmalloc(sizeof(float) * 2 * (size_t)n * H);
    }
    c->ba = c->bb = b;
    c->ba.logits = c->lga, c->bb.logits = c->lgb;
    c->ba.taps = c->tapa, c->bb.taps = c->tapb;
    if (k == 4) {
        c->ba.smp = c->sa, c->bb.smp = c->sb;
        c->ba.sampled = c->ida, c->bb.sampled = c->idb;
    } else {
        c->ba.argmax = c->ida, c->bb.argmax = c->idb;
    }
}

static void case_free(mcase *c) {
    void *p[] = {c->tok, c->rows, c->draft, c->ida, c->idb, c->u, c->lga, c->lgb, c->tapa, c->tapb};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
    sampler_free(c->sa);
    sampler_free(c->sb);
}

/* the outputs of sequence i agree bit for bit */
static int case_same(const char *what, int round, int i, int k, const mcase *c, int V, int H) {
    const model_batch *b = &c->ba;
    int ok = 1;
    if (c->lga && memcmp(c->lga, c->lgb, sizeof(float) * (size_t)b->n_logits * V)) ok = 0;
    if (c->ida && memcmp(c->ida, c->idb, sizeof(int) * (size_t)b->n_logits)) ok = 0;
    if (c->tapa && memcmp(c->tapa, c->tapb, sizeof(float) * 2 * (size_t)b->n * H)) ok = 0;
    CHECK_MSG(ok, "%s round %d: sequence %d (%s, %d rows): multi differs from single", what, round, i, kind_name[k],
              b->n);
    return ok;
}

enum { MAXSEQ = 7 };

/* Random mixes on m: n sequences, each with a prefix, then rounds of one
   multi forward on the contexts a against single forwards on b, then one
   decode row on each alone. */
static void mix(const char *what, model *m, uint32_t seed, int rounds, tpool *tp) {
    const model_config *cfg = model_cfg(m);
    const int V = cfg->vocab_size, H = cfg->hidden_size;
    char err[512];
    uint32_t s = seed;
    const int n = 2 + (int)(rnd(&s) % (MAXSEQ - 1));
    model_ctx *a[MAXSEQ], *b[MAXSEQ];
    static const int mb[] = {64, 16, 256, 32};
    for (int i = 0; i < n; i++) {
        int max_batch = mb[rnd(&s) % 4];
        CHECK(mctx_create(&a[i], m, 900, max_batch, tp, err, sizeof err) == 0);
        CHECK(mctx_create(&b[i], m, 900, max_batch, tp, err, sizeof err) == 0);
        int pre = (int)(rnd(&s) % 41);
        if (!pre) continue;
        int tok[40];
        for (int j = 0; j < pre; j++) tok[j] = (int)(rnd(&s) % (uint32_t)V);
        model_batch pb = {.n = pre, .tokens = tok};
        CHECK(model_forward(a[i], &pb, err, sizeof err) == 0);
        CHECK(model_forward(b[i], &pb, err, sizeof err) == 0);
    }
    for (int r = 0; r < rounds; r++) {
        mcase cs[MAXSEQ];
        model_batch ba[MAXSEQ];
        int kinds[MAXSEQ];
        for (int i = 0; i < n; i++) {
            kinds[i] = (int)(rnd(&s) % 6);
            if (kinds[i] == 4 && !model_samples_rows(m)) kinds[i] = 1; /* (a GPU without its sampler) */
            case_make(&cs[i], kinds[i], &s, V, cfg->n_layers, H, i);
            ba[i] = cs[i].ba;
        }
        int rc = model_forward_multi(a, ba, n, err, sizeof err);
        CHECK_MSG(rc == 0, "%s: %s", what, err);
        for (int i = 0; i < n; i++) {
            CHECK_MSG(model_forward(b[i], &cs[i].bb, err, sizeof err) == 0, "%s: %s", what, err);
            CHECK_EQ_INT(mctx_len(a[i]), mctx_len(b[i]));
            if (!rc) case_same(what, r, i, kinds[i], &cs[i], V, H);
            case_free(&cs[i]);
        }
    }
    /* the caches: one more row on each alone reads them */
    float *la = xmalloc(sizeof(float) * (size_t)V), *lb = xmalloc(sizeof(float) * (size_t)V);
    for (int i = 0; i < n; i++) {
        int t = (int)(rnd(&s) % (uint32_t)V);
        model_batch d = {.n = 1, .tokens = &t, .n_logits = 1};
        d.logits = la;
        CHECK(model_forward(a[i], &d, err, sizeof err) == 0);
        d.logits = lb;
        CHECK(model_forward(b[i], &d, err, sizeof err) == 0);
        CHECK_MSG(!memcmp(la, lb, sizeof(float) * (size_t)V),
                  "%s: sequence %d's cache differs after the multi forwards", what, i);
        mctx_free(a[i]);
        mctx_free(b[i]);
    }
    free(la);
    free(lb);
}

static model *load(const char *dir, int kv_bits) {
    char err[1024];
    model *m;
    model_load_opts lo = {.kv_bits = kv_bits};
    if (model_load(&m, dir, &lo, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s: %s", dir, err);
        return NULL;
    }
    return m;
}

static void bundled_dir(char *dir, size_t n) {
    snprintf(dir, n, "%s/../../models/%s", test_data_dir(), DSPARK_DEFAULT_MODEL);
}

TEST(multi_bundled) {
    char dir[600], what[64];
    bundled_dir(dir, sizeof dir);
    static const int bits[] = {32, 16, 8};
    tpool *tp = tp_create(2);
    for (int k = 0; k < 3; k++) {
        model *m = load(dir, bits[k]);
        if (!m) continue;
        for (int c = 0; c < 3; c++) {
            snprintf(what, sizeof what, "bundled kv %d, case %d", bits[k], c);
            mix(what, m, 1000u + 17u * (uint32_t)c + (uint32_t)k, 3, c == 1 ? NULL : tp);
        }
        model_free(m);
    }
    tp_free(tp);
}

/* every quantized fixture, the --kv-bits going round them; then a few of
   them with prefill groups of 8 rows, so that sequences with rows of both
   families meet in most steps */
TEST(multi_quant_fixtures) {
    char root[600];
    snprintf(root, sizeof root, "%s/quant_models", test_data_dir());
    DIR *d = opendir(root);
    CHECK_MSG(d != NULL, "%s: cannot open", root);
    if (!d) return;
    static const int bits[] = {32, 16, 8};
    int n_fix = 0;
    tpool *tp = tp_create(2);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char dir[1000], path[1100], what[400];
        snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
        snprintf(path, sizeof path, "%s/model.gguf", dir);
        if (!ds_file_exists(path)) {
            snprintf(path, sizeof path, "%s/config.json", dir);
            if (!ds_file_exists(path)) continue;
            snprintf(path, sizeof path, "%s", dir);
        }
        model *m = load(path, bits[n_fix % 3]);
        if (!m) continue;
        CHECK_MSG(model_caps(m)->group_rows == BACKEND_GROUP_ROWS, "%s: no prefill groups", e->d_name);
        snprintf(what, sizeof what, "%s kv %d", e->d_name, bits[n_fix % 3]);
        mix(what, m, 77u + (uint32_t)n_fix, 2, tp);
        if (n_fix % 4 == 0) {
            cpu_test_group_rows(8);
            snprintf(what, sizeof what, "%s kv %d, groups of 8", e->d_name, bits[n_fix % 3]);
            mix(what, m, 500u + (uint32_t)n_fix, 2, tp);
            cpu_test_group_rows(0);
        }
        model_free(m);
        n_fix++;
    }
    closedir(d);
    tp_free(tp);
    CHECK_MSG(n_fix >= 8, "only %d quantized fixtures under %s", n_fix, root);
}

TEST(multi_errors) {
    char dir[600], err[512];
    bundled_dir(dir, sizeof dir);
    model *m = load(dir, 32), *m2 = load(dir, 32);
    if (!m || !m2) {
        model_free(m);
        model_free(m2);
        return;
    }
    const int V = model_cfg(m)->vocab_size;
    model_ctx *c[3], *r[3];
    int pre[20];
    for (int j = 0; j < 20; j++) pre[j] = (j * 37) % V;
    for (int i = 0; i < 3; i++) {
        CHECK(mctx_create(&c[i], m, 64, 16, NULL, err, sizeof err) == 0);
        CHECK(mctx_create(&r[i], m, 64, 16, NULL, err, sizeof err) == 0);
        model_batch pb = {.n = 5 + 5 * i, .tokens = pre};
        CHECK(model_forward(c[i], &pb, err, sizeof err) == 0);
        CHECK(model_forward(r[i], &pb, err, sizeof err) == 0);
    }
    int good[3] = {1, 2, 3}, bad[3] = {4, V, 5};
    model_batch bs[3];
    for (int i = 0; i < 3; i++) bs[i] = (model_batch){.n = 3, .tokens = good};
    /* a token outside the vocabulary in sequence 1 */
    bs[1].tokens = bad;
    CHECK(model_forward_multi(c, bs, 3, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "sequence 1") && strstr(err, "vocabulary"), "error: %s", err);
    /* the window overflowing in sequence 2 */
    bs[1].tokens = good;
    int many[60] = {0};
    bs[2] = (model_batch){.n = 60, .tokens = many};
    CHECK(model_forward_multi(c, bs, 3, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "sequence 2") && strstr(err, "window"), "error: %s", err);
    /* logits rows out of order in sequence 0 */
    int rows[2] = {2, 1};
    float out[2];
    bs[2] = (model_batch){.n = 3, .tokens = good};
    bs[0].n_logits = 2, bs[0].logit_rows = rows, bs[0].logits = out;
    CHECK(model_forward_multi(c, bs, 3, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "sequence 0") && strstr(err, "ascending"), "error: %s", err);
    bs[0] = (model_batch){.n = 3, .tokens = good};
    /* nothing ran: every cache as before */
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(mctx_len(c[i]), 5 + 5 * i);
    /* one context twice; contexts of two models; none; too many */
    model_ctx *twice[3] = {c[0], c[1], c[0]};
    CHECK(model_forward_multi(twice, bs, 3, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "one context"), "error: %s", err);
    model_ctx *other;
    CHECK(mctx_create(&other, m2, 64, 16, NULL, err, sizeof err) == 0);
    model_ctx *mixed[2] = {c[0], other};
    CHECK(model_forward_multi(mixed, bs, 2, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "another model"), "error: %s", err);
    CHECK(model_forward_multi(c, bs, 0, err, sizeof err) != 0);
    enum { TOO = MODEL_MULTI_MAX + 1 };
    model_ctx *lots[TOO];
    model_batch lb[TOO];
    for (int i = 0; i < TOO; i++) {
        CHECK(mctx_create(&lots[i], m, 8, 4, NULL, err, sizeof err) == 0);
        lb[i] = (model_batch){.n = 1, .tokens = good};
    }
    CHECK(model_forward_multi(lots, lb, TOO, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "at most"), "error: %s", err);
    for (int i = 0; i < TOO; i++) {
        CHECK_EQ_INT(mctx_len(lots[i]), 0);
        mctx_free(lots[i]);
    }
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(mctx_len(c[i]), 5 + 5 * i);
    /* and the caches untouched: the good batches now give the reference's bits */
    float *oa = xmalloc(sizeof(float) * 3 * (size_t)V), *orf = xmalloc(sizeof(float) * 3 * (size_t)V);
    for (int i = 0; i < 3; i++)
        bs[i] = (model_batch){.n = 3, .tokens = good, .n_logits = 1, .logits = oa + (size_t)i * V};
    CHECK(model_forward_multi(c, bs, 3, err, sizeof err) == 0);
    for (int i = 0; i < 3; i++) {
        model_batch rb = {.n = 3, .tokens = good, .n_logits = 1, .logits = orf + (size_t)i * V};
        CHECK(model_forward(r[i], &rb, err, sizeof err) == 0);
    }
    CHECK(!memcmp(oa, orf, sizeof(float) * 3 * (size_t)V));
    free(oa);
    free(orf);
    mctx_free(other);
    for (int i = 0; i < 3; i++) mctx_free(c[i]), mctx_free(r[i]);
    model_free(m);
    model_free(m2);
}
