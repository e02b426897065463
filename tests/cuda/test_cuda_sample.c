/* The GPU's sampler (src/engine/cuda/cuda_sample.cu): sampler_rows's answers from the
 * device against the double-precision reference (tests/sample_ref.c) on
 * vocabularies of several sizes, with ties cut by every filter; and sampled
 * generation on the bundled model, where the device samples each verify's
 * rows, against the same run sampled on the host from the same GPU's logits
 * rows (spec_generate brings the rows back when logits are emitted): the
 * same ids, in plain decoding and with lookup drafts. Built only by
 * `make test-cuda`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_hooks.h"
#include "spec/drafter.h"
#include "spec/lookup.h"
#include "engine/model.h"
#include "spec/registry.h"
#include "sample_ref.h"
#include "spec/seq.h"
#include "spec/spec.h"
#include "test.h"
#include "cuda/cuda_test.h"
#include "engine/threadpool.h"
#include "base/util.h"

static int device_rows(void *ctx, const float *rows, int n, int V, const sampler_params *p, const int *draft,
                       const double *u, int *got, char *err, size_t errlen) {
    (void)ctx;
    return cuda_test_sample_rows(got, rows, n, V, p, draft, u, err, errlen);
}

TEST(cuda_sample_rows_vs_reference) {
    if (!have_gpu()) return;
    const int Vs[] = {257, 1000, 6144, 151936};
    const sampler_params ps[] = {
        {.temperature = 0.7f, .top_p = 1.0f},
        {.temperature = 1.0f, .top_k = 20, .top_p = 1.0f},
        {.temperature = 0.3f, .top_k = 50, .top_p = 1.0f},
        {.temperature = 0.7f, .top_p = 0.95f},
        {.temperature = 1.5f, .top_p = 0.995f},
        {.temperature = 1.0f, .top_k = 40, .top_p = 0.8f},
        {.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.05f},
        {.temperature = 0.8f, .top_k = 100, .top_p = 0.9f, .min_p = 0.01f},
        {.temperature = 1.0f, .top_k = 1, .top_p = 1.0f},
    };
    ref_rows_suite(device_rows, NULL, Vs, 4, ps, (int)(sizeof ps / sizeof ps[0]), 777u);
}

/* Drafts with distributions (DSpark's sampled drafts): the device draws
   each draft from its q row as a GPU drafter does, and the verify accepts
   against p / q and draws rejected rows from max(0, p - q); both against
   the reference, with accepted and rejected rows both seen. q row j shares
   p row j's head tokens with other values, so drafts are often but not
   always accepted. */
TEST(cuda_sample_rows_q_vs_reference) {
    if (!have_gpu()) return;
    enum { N = 7, ROUNDS = 8 };
    const int Vs[] = {1000, 151936};
    const sampler_params ps[] = {
        {.temperature = 0.7f, .top_p = 1.0f},
        {.temperature = 0.6f, .top_k = 20, .top_p = 0.95f},
        {.temperature = 1.0f, .top_p = 0.9f},
        {.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.05f},
        {.temperature = 1.0f, .top_k = 1, .top_p = 1.0f},
    };
    uint32_t seed = 99u;
    int accepted = 0, rejected = 0;
    for (int v = 0; v < 2; v++) {
        int V = Vs[v];
        float *l = ref_test_rows(N, V, &seed), *ql = ref_test_rows(N - 1, V, &seed);
        for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
            int exact = 0, total = 0;
            for (int round = 0; round < ROUNDS; round++) {
                int draft[N], got[N], ex, acc;
                double uq[N], u[N];
                for (int j = 0; j < N; j++) uq[j] = ref_urand(&seed), u[j] = ref_urand(&seed);
                char err[512];
                if (cuda_test_sample_rows_q(draft, got, l, ql, N, V, &ps[k], uq, u, err, sizeof err) != 0) {
                    test_fail(__FILE__, __LINE__, "V %d params %zu: %s", V, k, err);
                    continue;
                }
                int bad = ref_rows_check(l, ql, N, V, ps[k], draft, uq, u, got, &ex, &acc);
                CHECK_MSG(bad == 0, "V %d params %zu round %d: %d rows differ from the reference", V, k, round, bad);
                for (int j = 0; j < N - 1; j++) rejected += got[j] >= 0;
                accepted += acc;
                exact += ex;
                total += N;
            }
            CHECK_MSG(exact >= total - 2, "V %d params %zu: %d of %d rows equal outright", V, k, exact, total);
        }
        free(l);
        free(ql);
    }
    CHECK_MSG(accepted > 20 && rejected > 20, "accepted %d, rejected %d rows (the test needs both)", accepted, rejected);
}

typedef struct {
    int n;
} counter;
static void count_row(void *ctx, int id, const float *row) {
    (void)id;
    (void)row;
    ((counter *)ctx)->n++;
}

/* one sampled generation; host: logits rows come back (emitted) and the
   host samples them, else the device samples. dm (or NULL): a drafter on
   the target's GPU (DSpark: its drafts drawn there when the device
   samples); else with_lookup: lookup drafts */
static int generate(model *m, const dmodel *dm, const int *prompt, int n_prompt, sampler_params p, int with_lookup,
                    int host, int *ids, int n, spec_stats *st, char *err, size_t errlen) {
    /* with dm, with_lookup: the drafter inside lookup's hybrid (as `dspark
       run` drafts), which takes lookup's copy runs when it finds one */
    seq *s;
    if (seq_create(&s, m, 1024, 64, NULL, err, errlen) != 0) return -1;
    sampler *smp;
    if (sampler_create(&smp, &p, model_cfg(m)->vocab_size, err, errlen) != 0) {
        seq_free(s);
        return -1;
    }
    lookup *lk = lookup_create(3, 1);
    drafter d = lookup_drafter(lk);
    dstate *ds = NULL;
    lookup_hybrid *h = NULL;
    tpool *tp = NULL;
    int rc = 0;
    if (dm) {
        tp = tp_create(1);
        rc = dstate_create(&ds, dm, 1024, tp, smp, err, errlen);
        if (rc == 0) d = dstate_drafter(ds);
        if (rc == 0 && with_lookup) {
            h = lookup_hybrid_create(d, model_cfg(m)->vocab_size);
            d = lookup_hybrid_drafter(h);
        }
        if (rc == 0 && !d.propose_resident) rc = ds_err(err, errlen, "the GPU DSpark offers no device proposals");
    }
    counter c = {0};
    spec_opts o = {.max_new = n, .max_draft = dm ? 7 : with_lookup ? 8 : 0, .ignore_eos = 1,
                   .emit_logits = host ? count_row : NULL, .emit_ctx = &c};
    if (rc == 0) rc = spec_generate(s, smp, dm || with_lookup ? &d : NULL, prompt, n_prompt, &o, ids, NULL, st, err,
                                    errlen);
    if (rc == 0 && host && c.n != st->n_gen) rc = ds_err(err, errlen, "logits rows emitted %d of %d", c.n, st->n_gen);
    lookup_hybrid_free(h);
    dstate_free(ds);
    tp_free(tp);
    lookup_free(lk);
    sampler_free(smp);
    seq_free(s);
    return rc;
}

enum { GEN_N = 200 };

/* The bundled model on the GPU, with the device sampler forced (its
   vocabulary is below CUDA_SAMPLE_MIN_VOCAB), sampled under each of ps[np]
   in two variants (generate's with_lookup) with no drafter or the bundled
   drafter named by suffix ("dspark"): the device-sampled run and the
   host-sampled one give the same GEN_N ids; st[k][v]: the device run's
   stats. -1 when something did not load (failure reported). */
static int device_vs_host(const char *suffix, const sampler_params *ps, int np, spec_stats st[][2]) {
    char dir[1024], ddir[1100], err[1024];
    snprintf(dir, sizeof dir, "%s/../../models/%s", test_data_dir(), DSPARK_DEFAULT_MODEL);
    snprintf(ddir, sizeof ddir, "%s-%s", dir, suffix ? suffix : "");
    cu_tuning t, keep; /* the device sampler forced for the model loaded here */
    cuda_hook_tuning_get(&keep);
    t = keep;
    t.sample = 1;
    cuda_hook_tuning_set(&t);
    model *m = NULL;
    dmodel *dm = NULL;
    model_load_opts gpu = {.device = "cuda"};
    if (model_load(&m, dir, &gpu, err, sizeof err) != 0 ||
        (suffix && dmodel_load(&dm, ddir, m, NULL, err, sizeof err) != 0)) {
        test_fail(__FILE__, __LINE__, "%s", err);
        model_free(m);
        cuda_hook_tuning_set(&keep);
        return -1;
    }
    cuda_hook_tuning_set(&keep);
    /* a repetitive prompt so that drafts get accepted */
    int prompt[64];
    for (int i = 0; i < 64; i++) prompt[i] = 100 + (i % 16) * 37;
    for (int k = 0; k < np; k++)
        for (int v = 0; v < 2; v++) {
            int a[GEN_N], b[GEN_N];
            spec_stats sb;
            CHECK_MSG(generate(m, dm, prompt, 64, ps[k], v, 0, a, GEN_N, &st[k][v], err, sizeof err) == 0, "%s", err);
            CHECK_MSG(generate(m, dm, prompt, 64, ps[k], v, 1, b, GEN_N, &sb, err, sizeof err) == 0, "%s", err);
            CHECK_EQ_INT(st[k][v].n_gen, GEN_N);
            CHECK_EQ_INT(sb.n_gen, GEN_N);
            int same = 0;
            while (same < GEN_N && a[same] == b[same]) same++;
            CHECK_MSG(same == GEN_N, "params %d variant %d: device and host sampling part at token %d", k, v, same);
        }
    dmodel_free(dm);
    model_free(m);
    return 0;
}

/* plain decoding and lookup drafts */
TEST(cuda_sampled_generate_device_vs_host) {
    if (!have_gpu()) return;
    const sampler_params ps[] = {
        {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 5},
        {.temperature = 1.0f, .top_p = 1.0f, .seed = 6},
        {.temperature = 0.6f, .top_p = 0.9f, .min_p = 0.02f, .seed = 7},
    };
    spec_stats st[3][2];
    if (device_vs_host(NULL, ps, 3, st) != 0) return;
    for (int k = 0; k < 3; k++)
        CHECK_MSG(st[k][1].n_accepted > 0, "params %d: no lookup draft accepted (the test needs some)", k);
}

/* DSpark's sampled rounds on the GPU: drafts drawn on the device and
   accepted there against their distributions (p / q, residual max(0, p -
   q)), against the same run with the rows brought back and both the
   drafts and the acceptance sampled on the host: the same ids; alone and
   inside lookup's hybrid (as `dspark run` drafts: lookup's copy runs,
   one-hot, between DSpark's rounds). */
TEST(cuda_sampled_dspark_device_vs_host) {
    if (!have_gpu()) return;
    const sampler_params ps[] = {
        {.temperature = 0.6f, .top_k = 20, .top_p = 0.95f, .seed = 11},
        {.temperature = 1.0f, .top_p = 1.0f, .seed = 12},
        {.temperature = 0.8f, .top_p = 0.9f, .min_p = 0.02f, .seed = 13},
    };
    spec_stats st[3][2];
    if (device_vs_host("dspark", ps, 3, st) != 0) return;
    for (int k = 0; k < 3; k++)
        for (int hy = 0; hy < 2; hy++) {
            const spec_stats *a = &st[k][hy];
            CHECK_MSG(a->n_accepted > 0 && a->n_accepted < a->n_drafted,
                      "params %d hybrid %d: %ld of %ld drafts accepted (the test needs some of each)", k, hy,
                      a->n_accepted, a->n_drafted);
            fprintf(stderr, "     params %d hybrid %d: %ld of %ld drafts accepted in %d rounds\n", k, hy,
                    a->n_accepted, a->n_drafted, a->n_rounds);
        }
}
