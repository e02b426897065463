/* Sampler tests: greedy, reproducibility by seed, and the empirical
 * distribution under temperature / top-k / top-p / min-p against the
 * distribution computed independently here in double precision. */
#include <stdlib.h>
#include <string.h>

#include "sample_ref.h"
#include "engine/sampler.h"
#include "test.h"

static const float LOGITS[6] = {2.0f, 1.5f, 0.7f, 0.0f, -1.0f, -3.0f};

/* reference: softmax(l/T), then keep the expected set, renormalise */
static void ref_dist(float T, const int *keep, int nkeep, double *out) {
    double mx = LOGITS[0], z = 0;
    double e[6];
    for (int i = 0; i < 6; i++) z += (e[i] = exp((LOGITS[i] - mx) / T));
    memset(out, 0, sizeof(double) * 6);
    double zk = 0;
    for (int i = 0; i < nkeep; i++) zk += e[keep[i]] / z;
    for (int i = 0; i < nkeep; i++) out[keep[i]] = e[keep[i]] / z / zk;
}

static void check_dist(sampler_params p, const int *keep, int nkeep) {
    sampler *s;
    char err[256];
    CHECK(sampler_create(&s, &p, 6, err, sizeof err) == 0);
    double want[6];
    ref_dist(p.temperature, keep, nkeep, want);
    float probs[6];
    sampler_probs(s, LOGITS, probs);
    for (int i = 0; i < 6; i++) CHECK_NEAR(probs[i], want[i], 1e-5);
    const int N = 200000;
    int cnt[6] = {0};
    for (int i = 0; i < N; i++) cnt[sampler_sample(s, LOGITS)]++;
    for (int i = 0; i < 6; i++) {
        double f = (double)cnt[i] / N;
        /* 5 sigma of a binomial proportion */
        double sd = sqrt(want[i] * (1 - want[i]) / N) + 1e-9;
        CHECK_MSG(fabs(f - want[i]) <= 5 * sd, "token %d: freq %.4f want %.4f", i, f, want[i]);
        if (want[i] == 0) CHECK_EQ_INT(cnt[i], 0);
    }
    sampler_free(s);
}

TEST(sampler_greedy) {
    sampler_params p = {0};
    sampler *s;
    char err[256];
    CHECK(sampler_create(&s, &p, 6, err, sizeof err) == 0);
    CHECK(sampler_is_greedy(s));
    CHECK_EQ_INT(sampler_sample(s, LOGITS), 0);
    float l2[6] = {0, 5, 5, 1, 2, 3};
    CHECK_EQ_INT(sampler_sample(s, l2), 1); /* first of equal maxima */
    sampler_free(s);
}

TEST(sampler_distributions) {
    int all[6] = {0, 1, 2, 3, 4, 5};
    check_dist((sampler_params){.temperature = 1.0f, .top_p = 1.0f}, all, 6);
    check_dist((sampler_params){.temperature = 0.5f, .top_p = 1.0f, .seed = 3}, all, 6);
    check_dist((sampler_params){.temperature = 2.0f, .top_p = 1.0f, .seed = 4}, all, 6);
    int top2[2] = {0, 1};
    check_dist((sampler_params){.temperature = 1.0f, .top_k = 2, .top_p = 1.0f, .seed = 5}, top2, 2);
    /* probs at T=1: .483 .293 .132 .065 .024 .003 -> top-p .7 keeps 2, .78 keeps 3 */
    check_dist((sampler_params){.temperature = 1.0f, .top_p = 0.7f, .seed = 6}, top2, 2);
    int top3[3] = {0, 1, 2};
    check_dist((sampler_params){.temperature = 1.0f, .top_p = 0.78f, .seed = 7}, top3, 3);
    /* min-p .2: threshold .091 -> keeps 3 */
    check_dist((sampler_params){.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.2f, .seed = 8}, top3, 3);
    /* top-k 4 then top-p .9 (of the renormalised 4? no: HF applies top-p to
       the top-k-filtered softmax) -> probs .497 .301 .135 .067: .9 keeps 3 */
    check_dist((sampler_params){.temperature = 1.0f, .top_k = 4, .top_p = 0.9f, .seed = 9}, top3, 3);
}

TEST(sampler_seed_reproducible) {
    sampler_params p = {.temperature = 1.0f, .top_p = 1.0f, .seed = 42};
    sampler *a, *b, *c;
    char err[256];
    CHECK(sampler_create(&a, &p, 6, err, sizeof err) == 0);
    CHECK(sampler_create(&b, &p, 6, err, sizeof err) == 0);
    p.seed = 43;
    CHECK(sampler_create(&c, &p, 6, err, sizeof err) == 0);
    int same = 1, diff = 0;
    for (int i = 0; i < 200; i++) {
        int x = sampler_sample(a, LOGITS), y = sampler_sample(b, LOGITS), z = sampler_sample(c, LOGITS);
        same &= x == y;
        diff += x != z;
    }
    CHECK(same);
    CHECK(diff > 0);
    sampler_free(a);
    sampler_free(b);
    sampler_free(c);
}

TEST(sampler_large_vocab_top_p) {
    /* a vocabulary bigger than the first sorted prefix (256) with a flat
       tail so the nucleus needs more than 256 candidates */
    int V = 5000;
    float *l = malloc(sizeof(float) * V);
    for (int i = 0; i < V; i++) l[i] = (i % 7 == 0) ? 0.5f : 0.0f;
    sampler_params p = {.temperature = 1.0f, .top_p = 0.6f, .seed = 1};
    sampler *s;
    char err[256];
    CHECK(sampler_create(&s, &p, V, err, sizeof err) == 0);
    float *pr = malloc(sizeof(float) * V);
    sampler_probs(s, l, pr);
    double sum = 0;
    int kept = 0;
    for (int i = 0; i < V; i++) {
        sum += pr[i];
        kept += pr[i] > 0;
    }
    CHECK_NEAR(sum, 1.0, 1e-4);
    /* mass of the 715 high tokens: 715*e^.5/(715*e^.5+4285) = .2749; so all
       high ones plus enough low ones to reach .6 */
    double zh = 715 * exp(0.5), z = zh + 4285;
    int need_low = (int)ceil((0.6 - zh / z) * z / 1.0);
    CHECK_MSG(abs(kept - (715 + need_low)) <= 1, "kept %d, want %d", kept, 715 + need_low);
    free(pr);
    free(l);
    sampler_free(s);
}

/* The filtered distribution on large vocabularies (a peaked head and a
   long flat tail, so the filters' candidate thresholds are taken and,
   where the nucleus or the top-k reaches into the tail, given up) against
   the filters computed here in double precision by a full sort. */
TEST(sampler_filters_large_vocab_vs_reference) {
    uint32_t lcg = 12345;
    const int Vs[] = {6144, 151936};
    const sampler_params ps[] = {
        {.temperature = 0.7f, .top_p = 1.0f},  {.temperature = 1.0f, .top_k = 20, .top_p = 1.0f},
        {.temperature = 0.3f, .top_k = 50, .top_p = 1.0f}, /* few tokens above 2^-24: the top-k reaches the tail */
        {.temperature = 0.7f, .top_p = 0.95f}, {.temperature = 1.5f, .top_p = 0.995f},
        {.temperature = 0.55f, .top_p = 0.99999f}, /* the nucleus reaches the tail, below 2^-24 of the top */
        {.temperature = 1.0f, .top_k = 40, .top_p = 0.8f}, {.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.05f},
        {.temperature = 0.8f, .top_k = 100, .top_p = 0.9f, .min_p = 0.01f},
    };
    for (int v = 0; v < 2; v++) {
        int V = Vs[v];
        float *l = malloc(sizeof(float) * V), *pr = malloc(sizeof(float) * V);
        double *want = malloc(sizeof(double) * V);
        for (int i = 0; i < V; i++) l[i] = ref_urand(&lcg) * 4.0f - 2.0f;       /* flat tail */
        for (int i = 0; i < 30; i++) l[(i * 7919) % V] = 6.0f + ref_urand(&lcg) * 6.0f; /* peaked head */
        l[V - 1] = -INFINITY; /* a masked token */
        for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
            sampler *s;
            char err[256];
            CHECK(sampler_create(&s, &ps[k], V, err, sizeof err) == 0);
            sampler_probs(s, l, pr);
            ref_filter(l, V, ps[k], want);
            int bad = 0;
            double sum = 0;
            for (int i = 0; i < V && bad < 3; i++) {
                sum += pr[i];
                if ((pr[i] > 0) != (want[i] > 0) || fabs(pr[i] - want[i]) > 1e-5 + 1e-4 * want[i]) {
                    test_fail(__FILE__, __LINE__, "V %d params %zu token %d: p %.9g want %.9g", V, k, i,
                              (double)pr[i], want[i]);
                    bad++;
                }
            }
            CHECK_NEAR(sum, 1.0, 1e-4);
            CHECK_EQ_INT(pr[V - 1] == 0.0f, 1);
            sampler_free(s);
        }
        free(l), free(pr), free(want);
    }
}

/* sampler_rows (a verify's rows with given uniforms: accept / residual
   draw / bonus draw) against the reference rule: every row equal, but for
   uniforms within rounding of a boundary; with ties in the logits so the
   filters cut through tied tokens */
static int host_rows(void *ctx, const float *rows, int n, int V, const sampler_params *p, const int *draft,
                     const double *u, int *got, char *err, size_t errlen) {
    (void)ctx;
    sampler *s;
    if (sampler_create(&s, p, V, err, errlen) != 0) return -1;
    sampler_rows(s, rows, n, draft, u, got, 1);
    sampler_free(s);
    return 0;
}

TEST(sampler_rows_vs_reference) {
    const int Vs[] = {1000, 151936};
    const sampler_params ps[] = {
        {.temperature = 0.7f, .top_p = 1.0f},
        {.temperature = 1.0f, .top_k = 20, .top_p = 1.0f},
        {.temperature = 0.7f, .top_p = 0.95f},
        {.temperature = 1.0f, .top_k = 40, .top_p = 0.8f},
        {.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.05f},
        {.temperature = 0.8f, .top_k = 100, .top_p = 0.9f, .min_p = 0.01f},
    };
    ref_rows_suite(host_rows, NULL, Vs, 2, ps, (int)(sizeof ps / sizeof ps[0]), 4242u);
}

/* drawing ahead: peek leaves the generator where it was, skip consumes */
TEST(sampler_peek_skip) {
    sampler_params p = {.temperature = 1.0f, .seed = 9};
    sampler *a, *b;
    char err[256];
    CHECK(sampler_create(&a, &p, 4, err, sizeof err) == 0);
    CHECK(sampler_create(&b, &p, 4, err, sizeof err) == 0);
    double u[5], w[5];
    sampler_peek(a, u, 5);
    sampler_peek(a, w, 5);
    CHECK(!memcmp(u, w, sizeof u));
    for (int i = 0; i < 5; i++) CHECK(sampler_uniform(b) == u[i]);
    sampler_skip(a, 3);
    CHECK(sampler_uniform(a) == u[3]);
    sampler_free(a);
    sampler_free(b);
}

TEST(sampler_bad_params) {
    sampler *s;
    char err[256];
    sampler_params p = {.temperature = -1.0f};
    CHECK(sampler_create(&s, &p, 6, err, sizeof err) != 0);
    CHECK(strstr(err, "temperature") != NULL);
    p = (sampler_params){.temperature = 1.0f, .top_p = 1.5f};
    CHECK(sampler_create(&s, &p, 6, err, sizeof err) != 0);
    CHECK(strstr(err, "top-p") != NULL);
    p = (sampler_params){.temperature = 1.0f, .top_p = 1.0f, .min_p = 2.0f};
    CHECK(sampler_create(&s, &p, 6, err, sizeof err) != 0);
}
