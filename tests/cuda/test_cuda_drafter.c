/* The GPU drafters (cuda_drafter.h) against the CPU drafters on the same
 * inputs: one CPU target computes the taps, and a drafter bound to a CPU
 * copy of the target and one bound to a GPU copy ingest the same rows and
 * propose the same rounds. Their numerics differ only by f32 rounding (the
 * order of the sums), so the context features, the head rows, DSpark's
 * biased rows and confidences agree within a tolerance, and a draft must be
 * the CPU's wherever the CPU's top-1 margin exceeds twice the largest
 * difference measured between the two rows (an argmax cannot move by less).
 * Also: DSpark's confidence cut on the device chain, the sampled path (the
 * host sampler drawing from rows copied back), determinism (a repeated
 * proposal gives the same bits), and the drafter cost on a random drafter
 * of the published Qwen3-4B shape. Built only by `make test-cuda`. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_hooks.h"
#include "engine/cuda/cuda_drafter.h"
#include "spec/drafter.h"
#include "engine/ops.h"
#include "spec/registry.h"
#include "engine/sampler.h"
#include "spec/seq.h"
#include "hooks.h"
#include "test.h"
#include "cuda/cuda_test.h"
#include "base/util.h"

/* head rows and confidences: relative to the row's largest logit */
#define TOL_ROWS 1e-4
#define TOL_CONF 1e-4

/* max |a-b| over n, and max |b| */
static double max_diff(const float *a, const float *b, size_t n, double *mb) {
    double md = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= md)) md = d; /* NaN propagates */
        if (fabs((double)b[i]) > m) m = fabs((double)b[i]);
    }
    if (mb) *mb = m;
    return md;
}
#define rel_err test_rel_err

/* top-1 minus top-2 of x[n] */
static double margin(const float *x, int n) {
    double a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (x[i] > a) b = a, a = x[i];
        else if (x[i] > b) b = x[i];
    }
    return a - b;
}

typedef struct {
    model *tc, *tg;   /* the target on the CPU and on the GPU */
    dmodel *dc, *dg;  /* the drafter bound to each */
    tpool *tp;
    int V, H;
} pair;

static void close_pair(pair *p) {
    dmodel_free(p->dc);
    dmodel_free(p->dg);
    model_free(p->tc);
    model_free(p->tg);
    tp_free(p->tp);
}

static void dirs(const char *which, char *tdir, size_t tn, char *ddir, size_t dn) {
    if (!strncmp(which, "bundled-", 8)) {
        snprintf(tdir, tn, "%s/../../models/%s", test_data_dir(), DSPARK_DEFAULT_MODEL);
        snprintf(ddir, dn, "%s-%s", tdir, which + 8);
    } else {
        snprintf(tdir, tn, "%s/drafters/target", test_data_dir());
        snprintf(ddir, dn, "%s/drafters/%s", test_data_dir(), which);
    }
}

/* the pair for "dspark", "dflash", "dspark-r0" (the test drafters) or
   "bundled-dflash" / "bundled-dspark"; -1 (closed, failure reported) when
   something does not load */
static int open_pair(pair *p, const char *which) {
    char tdir[512], ddir[600], err[1024];
    dirs(which, tdir, sizeof tdir, ddir, sizeof ddir);
    memset(p, 0, sizeof *p);
    model_load_opts cpu = {.device = "cpu"}, gpu = {.device = "cuda"};
    if (model_load(&p->tc, tdir, &cpu, err, sizeof err) != 0 || model_load(&p->tg, tdir, &gpu, err, sizeof err) != 0 ||
        dmodel_load(&p->dc, ddir, p->tc, NULL, err, sizeof err) != 0 ||
        dmodel_load(&p->dg, ddir, p->tg, NULL, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        close_pair(p);
        return -1;
    }
    p->tp = tp_create(2);
    p->V = model_cfg(p->tc)->vocab_size;
    p->H = model_cfg(p->tc)->hidden_size;
    return 0;
}

/* The CPU target's taps for ids at the sequence's end, fed to both
   drafters; the argmax of the last row. */
static int feed2(seq *s, drafter *a, drafter *b, const int *ids, int n, int V, int H) {
    char err[512];
    float *logits = xmalloc(sizeof(float) * (size_t)V);
    float *taps = xmalloc(sizeof(float) * (size_t)a->n_taps * (size_t)n * (size_t)H);
    int pos = seq_len(s);
    if (seq_append_taps(s, ids, n, 1, logits, a->n_taps, a->tap_layers, taps, err, sizeof err) != 0)
        test_fail(__FILE__, __LINE__, "%s", err);
    a->features(a->self, pos, n, taps, n, 0);
    b->features(b->self, pos, n, taps, n, 0);
    int y = op_argmax(logits, V);
    free(logits);
    free(taps);
    return y;
}

static void prompt_ids(int *ids, int n, int V, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = 10 + (int)((seed >> 8) % (uint32_t)(V - 20));
    }
}

/* Greedy rounds on both drafters: rows, confidences and clear-margin drafts
   agree; DSpark's confidence cut and the determinism of repeated proposals
   on the GPU. */
static void compare_greedy(const char *which) {
    if (!have_gpu()) return;
    char err[512];
    pair p;
    if (open_pair(&p, which) != 0) return;
    const drafter_config *c = dmodel_cfg(p.dc);
    const int V = p.V, H = p.H, B = c->block_size, dspark = c->kind == DRAFTER_DSPARK;
    const int rows = dspark ? B : B - 1;
    sampler_params sp = {.temperature = 0, .top_p = 1};
    sampler *smp;
    seq *s;
    dstate *sc, *sg;
    CHECK(sampler_create(&smp, &sp, V, err, sizeof err) == 0);
    CHECK(seq_create(&s, p.tc, 256, 64, p.tp, err, sizeof err) == 0);
    CHECK(dstate_create(&sc, p.dc, 256, p.tp, smp, err, sizeof err) == 0);
    CHECK_MSG(dstate_create(&sg, p.dg, 256, p.tp, smp, err, sizeof err) == 0, "%s", err);
    drafter dc = dstate_drafter(sc), dg = dstate_drafter(sg);
    CHECK_EQ_INT(dg.deterministic, dc.deterministic);
    /* 140 rows: two CPU chunks of 64 + 12, one GPU chunk of 128 + 12 */
    int ids[160], np = 140;
    prompt_ids(ids, np, V, 99u + (uint32_t)B);
    dc.reset(dc.self, ids, np);
    dg.reset(dg.self, ids, np);
    int anchor = feed2(s, &dc, &dg, ids, np, V, H);
    int nc, ng;
    const float *cc = dstate_last_ctx(sc, &nc), *cg = dstate_last_ctx(sg, &ng);
    CHECK_EQ_INT(nc, 12);
    CHECK_EQ_INT(ng, 12);
    double e = rel_err(cg, cc, (size_t)nc * H), worst_rows = 0, worst_conf = 0;
    CHECK_MSG(e < TOL_ROWS, "%s: context features rel err %.3g", which, e);
    dc.commit(dc.self, &anchor, 1);
    dg.commit(dg.self, &anchor, 1);
    float *bc = xmalloc(sizeof(float) * (size_t)rows * V), *zc = xmalloc(sizeof(float) * (size_t)rows * V);
    int clear = 0, total = 0;
    for (int r = 0; r < 4; r++) {
        int da[64], db[64];
        int ka = dc.propose(dc.self, 64, da, NULL), kb = dg.propose(dg.self, 64, db, NULL);
        CHECK_EQ_INT(ka, rows);
        CHECK_EQ_INT(kb, rows);
        CHECK_EQ_INT(dstate_ctx_len(sg), dstate_ctx_len(sc));
        const float *base, *mk, *conf, *gbase, *gmk, *gconf;
        CHECK_EQ_INT(dstate_last(sc, &base, &mk, &conf), rows);
        memcpy(bc, base, sizeof(float) * (size_t)rows * V);
        if (mk) memcpy(zc, mk, sizeof(float) * (size_t)rows * V);
        CHECK_EQ_INT(dstate_last(sg, &gbase, &gmk, &gconf), rows);
        CHECK_EQ_INT(gmk != NULL, mk != NULL);
        CHECK_EQ_INT(gconf != NULL, conf != NULL);
        /* per row: the head rows always; the biased rows, confidences and
           drafts while the drafts before agree (DSpark rows chain on the
           previous draft), the draft itself where the CPU's margin is clear */
        int chain_ok = 1;
        for (int j = 0; j < rows; j++) {
            double mb, d = max_diff(gbase + (size_t)j * V, bc + (size_t)j * V, (size_t)V, &mb);
            if (mb > 0 && d / mb > worst_rows) worst_rows = d / mb;
            CHECK_MSG(d <= TOL_ROWS * mb, "%s round %d row %d: head rel err %.3g", which, r, j, d / mb);
            if (!chain_ok) continue;
            const float *rc = mk ? zc + (size_t)j * V : bc + (size_t)j * V;
            const float *rg = gmk ? gmk + (size_t)j * V : gbase + (size_t)j * V;
            if (gmk) {
                d = max_diff(rg, rc, (size_t)V, &mb);
                CHECK_MSG(d <= TOL_ROWS * mb, "%s round %d row %d: Markov rel err %.3g", which, r, j, d / mb);
            }
            if (conf) {
                double dc_ = fabs((double)gconf[j] - conf[j]);
                if (dc_ > worst_conf) worst_conf = dc_;
                CHECK_MSG(dc_ <= TOL_CONF, "%s round %d row %d: confidence %.7f vs %.7f", which, r, j, gconf[j],
                          conf[j]);
            }
            total++;
            if (margin(rc, V) > 2 * max_diff(rg, rc, (size_t)V, NULL)) {
                clear++;
                CHECK_MSG(da[j] == db[j], "%s round %d row %d: draft %d vs %d with a clear margin", which, r, j,
                          da[j], db[j]);
            }
            if (dspark && da[j] != db[j]) chain_ok = 0;
        }
        if (dspark && conf && r == 0) {
            /* the cut on the device chain: the first row whose confidence
               is below the threshold, the drafts before it unchanged, and
               a repeated proposal gives the same bits */
            float gc0[DRAFTER_MAX_BLOCK];
            memcpy(gc0, gconf, sizeof(float) * (size_t)rows);
            for (int w = 0; w < rows; w++) {
                float th = nextafterf(gc0[w], 1.0f);
                int want = 0, dd[64];
                while (want < rows && gc0[want] >= th) want++;
                dstate_set_confidence_threshold(sg, th);
                CHECK_EQ_INT(dg.propose(dg.self, 64, dd, NULL), want);
                CHECK(!memcmp(dd, db, sizeof(int) * (size_t)want));
                dstate_last(sg, NULL, NULL, &gconf);
                CHECK(!memcmp(gconf, gc0, sizeof(float) * (size_t)(want < rows ? want + 1 : rows)));
            }
            dstate_set_confidence_threshold(sg, 0);
        }
        /* determinism: the same proposal again gives the same drafts and rows */
        {
            int dd[64];
            float *b1 = xmalloc(sizeof(float) * (size_t)rows * V);
            dstate_last(sg, &gbase, NULL, NULL);
            memcpy(b1, gbase, sizeof(float) * (size_t)rows * V);
            CHECK_EQ_INT(dg.propose(dg.self, 64, dd, NULL), rows);
            CHECK(!memcmp(dd, db, sizeof(int) * (size_t)rows));
            dstate_last(sg, &gbase, NULL, NULL);
            CHECK(!memcmp(b1, gbase, sizeof(float) * (size_t)rows * V));
            free(b1);
        }
        /* commit r+1 of the CPU's drafts (whatever the target thinks) and the
           target's next token, the same to both */
        int a = r + 1 < rows ? r + 1 : rows, rowsv[64], cm[64];
        rowsv[0] = anchor;
        memcpy(rowsv + 1, da, sizeof(int) * (size_t)a);
        int y = feed2(s, &dc, &dg, rowsv, a + 1, V, H);
        memcpy(cm, da, sizeof(int) * (size_t)a);
        cm[a] = y;
        dc.commit(dc.self, cm, a + 1);
        dg.commit(dg.self, cm, a + 1);
        cc = dstate_last_ctx(sc, &nc);
        cg = dstate_last_ctx(sg, &ng);
        CHECK_EQ_INT(ng, nc);
        CHECK_MSG(rel_err(cg, cc, (size_t)nc * H) < TOL_ROWS, "%s round %d: context features differ", which, r);
        anchor = y;
    }
    CHECK_MSG(clear * 2 > total, "%s: only %d of %d rows had a clear margin", which, clear, total);
    fprintf(stderr, "     %s: rows rel err %.2g, confidence abs err %.2g, %d of %d drafts compared\n", which,
            worst_rows, worst_conf, clear, total);
    free(bc);
    free(zc);
    dstate_free(sc);
    dstate_free(sg);
    seq_free(s);
    sampler_free(smp);
    close_pair(&p);
}

/* A GPU drafter fed a verify's taps where the GPU target left them
   (seq_keep_taps_resident, features_resident) holds the same context features,
   bit for bit, and proposes the same drafts as one fed the same forward's
   taps through the host. */
static void compare_device_taps(const char *which) {
    if (!have_gpu()) return;
    char err[512];
    pair p;
    if (open_pair(&p, which) != 0) return;
    const int V = p.V, H = p.H;
    sampler_params sp = {.temperature = 0, .top_p = 1};
    sampler *smp;
    seq *s;
    dstate *sa, *sb;
    CHECK(sampler_create(&smp, &sp, V, err, sizeof err) == 0);
    CHECK_MSG(seq_create(&s, p.tg, 256, 64, NULL, err, sizeof err) == 0, "%s", err);
    CHECK_MSG(dstate_create(&sa, p.dg, 256, p.tp, smp, err, sizeof err) == 0, "%s", err);
    CHECK_MSG(dstate_create(&sb, p.dg, 256, p.tp, smp, err, sizeof err) == 0, "%s", err);
    drafter da = dstate_drafter(sa), db = dstate_drafter(sb);
    CHECK(da.features_resident != NULL);
    const int nt = da.n_taps;
    int ids[40];
    prompt_ids(ids, 40, V, 7u);
    da.reset(da.self, ids, 40);
    db.reset(db.self, ids, 40);
    /* the prompt's taps through the host for a; for b the same forward
       again, its taps left on the device (a speculative prefill's chunk:
       wider than a verify, so in the wide buffer) */
    int anchor;
    {
        float *lg = xmalloc(sizeof(float) * (size_t)V), *tp = xmalloc(sizeof(float) * (size_t)nt * 40 * (size_t)H);
        CHECK_MSG(seq_append_taps(s, ids, 40, 1, lg, nt, da.tap_layers, tp, err, sizeof err) == 0, "%s", err);
        da.features(da.self, 0, 40, tp, 40, 0);
        anchor = op_argmax(lg, V);
        seq_truncate(s, 0);
        int wr = 0;
        const float *wt = seq_resident_taps(s, 40, &wr);
        CHECK(wt != NULL && wr >= 40);
        seq_keep_taps_resident(s, 1);
        CHECK_MSG(seq_append_taps(s, ids, 40, 1, lg, nt, da.tap_layers, NULL, err, sizeof err) == 0, "%s", err);
        seq_keep_taps_resident(s, 0);
        CHECK_EQ_INT(op_argmax(lg, V), anchor);
        db.features_resident(db.self, 0, 40, wt, wr, 0);
        int na, nb;
        const float *ca = dstate_last_ctx(sa, &na), *cb = dstate_last_ctx(sb, &nb);
        CHECK_EQ_INT(na, 40);
        CHECK_EQ_INT(nb, 40);
        CHECK_MSG(!memcmp(ca, cb, sizeof(float) * (size_t)na * H), "%s prompt: context features differ", which);
        free(lg);
        free(tp);
    }
    da.commit(da.self, &anchor, 1);
    db.commit(db.self, &anchor, 1);
    float *taps = xmalloc(sizeof(float) * (size_t)nt * MODEL_RESIDENT_TAP_ROWS * (size_t)H);
    for (int r = 0; r < 6; r++) {
        int d1[64], d2[64], rows[MODEL_RESIDENT_TAP_ROWS], am[MODEL_RESIDENT_TAP_ROWS], am2[MODEL_RESIDENT_TAP_ROWS];
        int k = da.propose(da.self, 64, d1, NULL);
        CHECK_EQ_INT(db.propose(db.self, 64, d2, NULL), k);
        CHECK(!memcmp(d1, d2, sizeof(int) * (size_t)k));
        if (k > MODEL_RESIDENT_TAP_ROWS - 1) k = MODEL_RESIDENT_TAP_ROWS - 1;
        rows[0] = anchor;
        memcpy(rows + 1, d1, sizeof(int) * (size_t)k);
        int L = seq_len(s), trows = 0;
        CHECK_MSG(seq_append_argmax(s, rows, k + 1, am, nt, da.tap_layers, taps, err, sizeof err) == 0, "%s", err);
        seq_truncate(s, L); /* the same forward again, its taps left on the device */
        seq_keep_taps_resident(s, 1);
        CHECK_MSG(seq_append_argmax(s, rows, k + 1, am2, nt, da.tap_layers, NULL, err, sizeof err) == 0, "%s", err);
        seq_keep_taps_resident(s, 0);
        CHECK(!memcmp(am, am2, sizeof(int) * (size_t)(k + 1)));
        const float *dt = seq_resident_taps(s, k + 1, &trows);
        CHECK(dt != NULL && trows >= k + 1);
        int a = 0;
        while (a < k && am[a] == rows[a + 1]) a++;
        int ne = a + 1, cm[MODEL_RESIDENT_TAP_ROWS];
        da.features(da.self, L, ne, taps, k + 1, 0);
        db.features_resident(db.self, L, ne, dt, trows, 0);
        seq_truncate(s, L + ne);
        memcpy(cm, rows + 1, sizeof(int) * (size_t)a);
        cm[a] = am[a];
        da.commit(da.self, cm, ne);
        db.commit(db.self, cm, ne);
        int na, nb;
        const float *ca = dstate_last_ctx(sa, &na), *cb = dstate_last_ctx(sb, &nb);
        CHECK_EQ_INT(na, ne);
        CHECK_EQ_INT(nb, ne);
        CHECK_MSG(!memcmp(ca, cb, sizeof(float) * (size_t)na * H), "%s round %d: context features differ", which, r);
        anchor = am[a];
    }
    free(taps);
    dstate_free(sa);
    dstate_free(sb);
    seq_free(s);
    sampler_free(smp);
    close_pair(&p);
}

TEST(cuda_drafter_device_taps_dspark) { compare_device_taps("dspark"); }
TEST(cuda_drafter_device_taps_bundled_dflash) { compare_device_taps("bundled-dflash"); }

TEST(cuda_drafter_dflash_vs_cpu) { compare_greedy("dflash"); }
TEST(cuda_drafter_dspark_vs_cpu) { compare_greedy("dspark"); }
TEST(cuda_drafter_dspark_r0_vs_cpu) { compare_greedy("dspark-r0"); }
TEST(cuda_drafter_bundled_dflash_vs_cpu) { compare_greedy("bundled-dflash"); }
TEST(cuda_drafter_bundled_dspark_vs_cpu) { compare_greedy("bundled-dspark"); }

/* 1 when the uniform u, drawn through q_c as sampler_draw does (cumulative
   in index order), lies farther from both edges of its token's interval
   than the rows' total difference sum |q_g - q_c|, which bounds how far
   any edge can move: then q_g gives the same token. */
static int clear_draw(const float *qc, const float *qg, int V, double u) {
    double bound = 0, cum = 0;
    for (int i = 0; i < V; i++) bound += fabs((double)qg[i] - (double)qc[i]);
    for (int i = 0; i < V; i++) {
        if (qc[i] <= 0.0f) continue;
        if (u < cum + qc[i]) return u - cum > bound + 1e-9 && cum + qc[i] - u > bound + 1e-9;
        cum += qc[i];
    }
    return 0;
}

/* Sampled DSpark rows: the rows come back to the host sampler, so with the
   same seed the CPU and GPU drafters draw from q rows that agree within
   the tolerance, and the same draft wherever the draw is clear of its
   token's interval edges by more than the rows differ (a third sampler
   with the same seed replays the uniforms); a confidence threshold away
   from every confidence cuts both at the same row. Temperature only:
   q = softmax(z/T) moves continuously with z (a top-p or top-k edge would
   let a rounding-sized change move a whole token's mass in or out; the
   filters are the host sampler's, the same code on both). */
static void compare_sampled(const char *which) {
    if (!have_gpu()) return;
    char err[512];
    pair p;
    if (open_pair(&p, which) != 0) return;
    const drafter_config *c = dmodel_cfg(p.dc);
    const int V = p.V, H = p.H, B = c->block_size;
    sampler_params sp = {.temperature = 0.8f, .top_p = 1, .seed = 4242};
    sampler *mc, *mg;
    seq *s;
    dstate *sc, *sg;
    CHECK(sampler_create(&mc, &sp, V, err, sizeof err) == 0);
    CHECK(sampler_create(&mg, &sp, V, err, sizeof err) == 0);
    CHECK(seq_create(&s, p.tc, 256, 64, p.tp, err, sizeof err) == 0);
    CHECK(dstate_create(&sc, p.dc, 256, p.tp, mc, err, sizeof err) == 0);
    CHECK(dstate_create(&sg, p.dg, 256, p.tp, mg, err, sizeof err) == 0);
    drafter dc = dstate_drafter(sc), dg = dstate_drafter(sg);
    CHECK(!dg.deterministic);
    int ids[64], np = 30;
    prompt_ids(ids, np, V, 7u);
    dc.reset(dc.self, ids, np);
    dg.reset(dg.self, ids, np);
    int anchor = feed2(s, &dc, &dg, ids, np, V, H);
    dc.commit(dc.self, &anchor, 1);
    dg.commit(dg.self, &anchor, 1);
    float *qc = xmalloc(sizeof(float) * (size_t)B * V), *qg = xmalloc(sizeof(float) * (size_t)B * V);
    float confc[DRAFTER_MAX_BLOCK];
    int da[64], db[64], clear = 0, total = 0;
    sampler *mu; /* replays the drafters' uniforms: one per drafted row */
    CHECK(sampler_create(&mu, &sp, V, err, sizeof err) == 0);
    for (int rep = 0; rep < 3; rep++) {
        int ka = dc.propose(dc.self, B, da, qc), kb = dg.propose(dg.self, B, db, qg);
        CHECK_EQ_INT(ka, B);
        CHECK_EQ_INT(kb, B);
        int same_prev = 1;
        for (int j = 0; j < B; j++) {
            const float *a = qc + (size_t)j * V, *b = qg + (size_t)j * V;
            double u = sampler_uniform(mu), sum = 0;
            for (int i = 0; i < V; i++) sum += b[i];
            CHECK_NEAR(sum, 1.0, 1e-4);
            CHECK(b[db[j]] > 0);
            if (!same_prev) continue; /* later rows follow different drafts */
            CHECK_MSG(max_diff(b, a, (size_t)V, NULL) < 1e-4, "%s row %d: q differs", which, j);
            total++;
            if (clear_draw(a, b, V, u)) {
                clear++;
                CHECK_MSG(da[j] == db[j], "%s rep %d row %d: sampled draft %d vs %d, clear of the edges", which, rep,
                          j, da[j], db[j]);
            }
            same_prev = da[j] == db[j];
        }
    }
    CHECK_MSG(clear * 2 > total, "%s: only %d of %d draws were clear of the edges", which, clear, total);
    fprintf(stderr, "     %s: %d of %d sampled drafts compared (clear draws)\n", which, clear, total);
    const float *conf;
    dstate_last(sc, NULL, NULL, &conf);
    if (conf) {
        /* the cut: a block with seed 777 sets a threshold halfway in the
           widest gap between its CPU confidences; the same seed again with
           that threshold cuts both drafters at the first row below it */
        sampler_params sp2 = sp;
        sp2.seed = 777;
        sampler_reset(mc, &sp2, err, sizeof err);
        sampler_reset(mg, &sp2, err, sizeof err);
        sampler_reset(mu, &sp2, err, sizeof err);
        CHECK_EQ_INT(dc.propose(dc.self, B, da, qc), B);
        CHECK_EQ_INT(dg.propose(dg.self, B, db, qg), B);
        dstate_last(sc, NULL, NULL, &conf);
        memcpy(confc, conf, sizeof(float) * (size_t)B);
        float th = 0, gap = -1;
        for (int i = 0; i < B; i++)
            for (int j = 0; j < B; j++) {
                float lo = confc[i], hi = confc[j];
                int between = 0;
                for (int k = 0; k < B; k++) between |= confc[k] > lo && confc[k] < hi;
                if (hi > lo && !between && hi - lo > gap) gap = hi - lo, th = (lo + hi) / 2;
            }
        int want = 0, clear_cut = 1;
        while (want < B && confc[want] >= th) want++;
        /* the drafts before the cut decide the confidences up to it: the
           check needs them drawn the same on both */
        for (int j = 0; j < want && clear_cut; j++) {
            clear_cut = clear_draw(qc + (size_t)j * V, qg + (size_t)j * V, V, sampler_uniform(mu));
            if (clear_cut) CHECK_EQ_INT(db[j], da[j]);
            clear_cut = clear_cut && da[j] == db[j];
        }
        sampler_reset(mc, &sp2, err, sizeof err);
        sampler_reset(mg, &sp2, err, sizeof err);
        dstate_set_confidence_threshold(sc, th);
        dstate_set_confidence_threshold(sg, th);
        CHECK_EQ_INT(dc.propose(dc.self, B, da, qc), want);
        int kg = dg.propose(dg.self, B, db, qg);
        if (clear_cut) {
            CHECK_EQ_INT(kg, want);
            CHECK(!memcmp(da, db, sizeof(int) * (size_t)want));
        }
        fprintf(stderr, "     %s: sampled cut at %d of %d (threshold %.4f, gap %.4f)\n", which, want, B, th, gap);
    }
    free(qc);
    free(qg);
    dstate_free(sc);
    dstate_free(sg);
    seq_free(s);
    sampler_free(mc);
    sampler_free(mg);
    sampler_free(mu);
    close_pair(&p);
}

TEST(cuda_drafter_dspark_sampled_vs_cpu) { compare_sampled("dspark"); }
TEST(cuda_drafter_dspark_r0_sampled_vs_cpu) { compare_sampled("dspark-r0"); }
TEST(cuda_drafter_bundled_dspark_sampled_vs_cpu) { compare_sampled("bundled-dspark"); }

/* ---- cost on the published Qwen3-4B drafter shape (random weights) ---- */

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static tensor mat(const void *data, const char *name, int64_t n, int64_t k) {
    tensor t = {.name = name, .dtype = DT_BF16, .ndim = 2, .shape = {n, k}, .data = data,
                .nbytes = (size_t)(n * k) * 2};
    return t;
}

/* median ms of reps rounds: ingest of `commit` rows, then a block */
static double round_ms(cuda_dstate *s, int ctx, int commit, const float *taps, int rows, int n, int chain, int reps,
                       char *err, size_t errlen) {
    double *t = xmalloc(sizeof(double) * (size_t)reps);
    int draft[32];
    float conf[32];
    for (int r = -3; r < reps; r++) {
        cuda_dstate_truncate(s, ctx);
        double t0 = ds_now();
        if (commit && cuda_dstate_ingest(s, ctx, commit, taps, rows, 0, err, errlen) != 0) break;
        if (n && cuda_dstate_propose(s, 1, n, chain, draft, conf, err, errlen) != 0) break;
        if (r >= 0) t[r] = ds_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_d);
    double m = t[reps / 2] * 1e3;
    free(t);
    return m;
}

TEST(cuda_drafter_cost_qwen3_4b_shape) {
    if (!have_gpu()) return;
    const int H = 2560, I = 9728, V = 151936, nh = 32, nkv = 8, hd = 128, L = 5, nt = 5, R = 256, CTX = 1024;
    char err[512];
    model_config cfg = {.arch = ARCH_QWEN3, .vocab_size = V, .hidden_size = H, .intermediate_size = I,
                        .n_layers = L, .n_heads = nh, .n_kv_heads = nkv, .head_dim = hd,
                        .max_position_embeddings = 40960, .rms_norm_eps = 1e-6f, .rope_theta = 1e6, .qk_norm = 1};
    /* one buffer of bf16 noise behind every matrix (the values do not
       matter for the cost) */
    size_t big = (size_t)V * H;
    uint16_t *w = xmalloc(big * 2);
    uint32_t r = 1;
    for (size_t i = 0; i < (1u << 20); i++) w[i] = ds_f32_to_bf16((float)(((r = r * 1664525u + 1013904223u) >> 8) / 16777216.0 - 0.5) * 0.04f);
    for (size_t i = 1u << 20; i < big; i += 1u << 20) memcpy(w + i, w, 2 * (big - i < (1u << 20) ? big - i : 1u << 20));
    float *ones = xmalloc(sizeof(float) * (size_t)I), *inv = xmalloc(sizeof(float) * hd / 2);
    for (int i = 0; i < I; i++) ones[i] = 1.0f;
    config_rope_inv_freq(&cfg, inv);
    tensor wq = mat(w, "q", nh * hd, H), wk = mat(w, "k", nkv * hd, H), wv = mat(w, "v", nkv * hd, H),
           wo = mat(w, "o", H, nh * hd), wg = mat(w, "g", I, H), wu = mat(w, "u", I, H), wd = mat(w, "d", H, I),
           fc = mat(w, "fc", H, (int64_t)nt * H), emb = mat(w, "embed", V, H), w1 = mat(w, "w1", V, R),
           w2 = mat(w, "w2", V, R), cw = mat(w, "conf", 1, H + R);
    wlayer layers[5];
    for (int l = 0; l < L; l++)
        layers[l] = (wlayer){.wq = &wq, .wk = &wk, .wv = &wv, .wo = &wo, .wg = &wg, .wu = &wu, .wd = &wd,
                             .attn_norm = ones, .mlp_norm = ones, .q_norm = ones, .k_norm = ones};
    float *taps = xmalloc(sizeof(float) * (size_t)nt * CTX * H);
    for (size_t i = 0; i < (size_t)nt * CTX * H; i++) taps[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    for (int kind = 0; kind < 2; kind++) {
        int dspark = kind == 1, B = dspark ? 7 : 16, n = dspark ? 7 : 15;
        drafter_desc dw = {.cfg = &cfg, .dspark = dspark, .block_size = B, .mask_token_id = V - 1, .n_taps = nt,
                            .markov_rank = dspark ? R : 0, .conf_markov = dspark, .fc = &fc, .hidden_norm = ones,
                            .final_norm = ones, .inv_freq = inv, .layers = layers, .embed = &emb, .lm_head = &emb,
                            .w1 = dspark ? &w1 : NULL, .w2 = dspark ? &w2 : NULL, .conf_w = dspark ? &cw : NULL};
        for (int graphs = 1; graphs >= 0; graphs--) {
            /* (a drafter without a target takes the hooks' tuning when created) */
            cu_tuning t, keep;
            cuda_hook_tuning_get(&keep);
            t = keep;
            t.graphs = graphs;
            cuda_hook_tuning_set(&t);
            cuda_dmodel *m = NULL;
            int rc = cuda_dmodel_create(&m, &dw, NULL, 0, err, sizeof err);
            cuda_hook_tuning_set(&keep);
            if (rc != 0) {
                test_fail(__FILE__, __LINE__, "%s", err);
                break;
            }
            cuda_dstate *s = NULL;
            if (cuda_dstate_create(&s, m, 40960 + B, err, sizeof err) != 0) {
                test_fail(__FILE__, __LINE__, "%s", err);
                cuda_dmodel_free(m);
                break;
            }
            double t0 = ds_now();
            CHECK_MSG(cuda_dstate_ingest(s, 0, CTX, taps, CTX, 0, err, sizeof err) == 0, "%s", err);
            double tpre = (ds_now() - t0) * 1e3;
            double ing1 = round_ms(s, CTX, 1, taps, CTX, 0, 1, 30, err, sizeof err);
            double ing8 = round_ms(s, CTX, 8, taps, CTX, 0, 1, 30, err, sizeof err);
            double blk = round_ms(s, CTX, 0, taps, CTX, n, 1, 30, err, sizeof err);
            double rnd = round_ms(s, CTX, 4, taps, CTX, n, 1, 30, err, sizeof err);
            fprintf(stderr,
                    "     4B-shape %s (graphs %s), context %d (first ingest %.1f ms): ingest 1 row %.3f ms, 8 rows "
                    "%.3f ms; block + greedy %d drafts %.3f ms; round (ingest 4 + block) %.3f ms\n",
                    dspark ? "DSpark r256+conf" : "DFlash", graphs ? "on" : "off", CTX, tpre, ing1, ing8, n, blk, rnd);
            if (dspark) {
                /* the sampled path: the block without the chain, then the rows one by one */
                float *z = xmalloc(sizeof(float) * (size_t)V), conf;
                double tt[20];
                for (int k = -2; k < 20; k++) {
                    double ts = ds_now();
                    cuda_dstate_propose(s, 1, n, 0, NULL, NULL, err, sizeof err);
                    for (int j = 0; j < n; j++) cuda_dstate_row(s, j, 5 + j, &conf, z, err, sizeof err);
                    if (k >= 0) tt[k] = ds_now() - ts;
                }
                qsort(tt, 20, sizeof(double), cmp_d);
                fprintf(stderr, "     4B-shape DSpark sampled block + %d rows to the host: %.3f ms\n", n, tt[10] * 1e3);
                free(z);
            }
            cuda_dstate_free(s);
            cuda_dmodel_free(m);
        }
    }
    free(taps);
    free(ones);
    free(inv);
    free(w);
}
