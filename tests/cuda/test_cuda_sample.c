/* The GPU's sampler (src/cuda_sample.cu): sampler_rows's answers from the
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

#include "cuda_backend.h"
#include "lookup.h"
#include "model.h"
#include "registry.h"
#include "sample_ref.h"
#include "seq.h"
#include "spec.h"
#include "test.h"
#include "util.h"

static int have_gpu(void) {
    if (cuda_device_count() > 0) return 1;
    test_fail(__FILE__, __LINE__, "no CUDA device visible (make test-cuda needs a GPU)");
    return 0;
}

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

typedef struct {
    int n;
} counter;
static void count_row(void *ctx, int id, const float *row) {
    (void)id;
    (void)row;
    ((counter *)ctx)->n++;
}

/* one sampled generation; host: logits rows come back (emitted) and the
   host samples them, else the device samples */
static int generate(model *m, const int *prompt, int n_prompt, sampler_params p, int with_lookup, int host, int *ids,
                    int n, spec_stats *st, char *err, size_t errlen) {
    seq *s;
    if (seq_create(&s, m, 1024, 64, NULL, err, errlen) != 0) return -1;
    sampler *smp;
    if (sampler_create(&smp, &p, model_cfg(m)->vocab_size, err, errlen) != 0) {
        seq_free(s);
        return -1;
    }
    lookup *lk = lookup_create(3, 1);
    drafter d = lookup_drafter(lk);
    counter c = {0};
    spec_opts o = {.max_new = n, .max_draft = with_lookup ? 8 : 0, .ignore_eos = 1,
                   .emit_logits = host ? count_row : NULL, .emit_ctx = &c};
    int rc = spec_generate(s, smp, with_lookup ? &d : NULL, prompt, n_prompt, &o, ids, NULL, st, err, errlen);
    if (rc == 0 && host && c.n != st->n_gen) rc = ds_err(err, errlen, "logits rows emitted %d of %d", c.n, st->n_gen);
    lookup_free(lk);
    sampler_free(smp);
    seq_free(s);
    return rc;
}

TEST(cuda_sampled_generate_device_vs_host) {
    if (!have_gpu()) return;
    char dir[1024], err[1024];
    snprintf(dir, sizeof dir, "%s/../../models/%s", test_data_dir(), DSPARK_DEFAULT_MODEL);
    /* the bundled vocabulary is below CUDA_SAMPLE_MIN_VOCAB: the device
       sampler only by request */
    setenv("DSPARK_CUDA_SAMPLE", "1", 1);
    model *m;
    model_load_opts gpu = {.device = "cuda"};
    if (model_load(&m, dir, &gpu, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return;
    }
    /* a repetitive prompt so lookup drafts get accepted */
    int prompt[64];
    for (int i = 0; i < 64; i++) prompt[i] = 100 + (i % 16) * 37;
    const sampler_params ps[] = {
        {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 5},
        {.temperature = 1.0f, .top_p = 1.0f, .seed = 6},
        {.temperature = 0.6f, .top_p = 0.9f, .min_p = 0.02f, .seed = 7},
    };
    enum { N = 200 };
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++)
        for (int lk = 0; lk < 2; lk++) {
            int a[N], b[N];
            spec_stats sa, sb;
            CHECK_MSG(generate(m, prompt, 64, ps[k], lk, 0, a, N, &sa, err, sizeof err) == 0, "%s", err);
            CHECK_MSG(generate(m, prompt, 64, ps[k], lk, 1, b, N, &sb, err, sizeof err) == 0, "%s", err);
            CHECK_EQ_INT(sa.n_gen, N);
            CHECK_EQ_INT(sb.n_gen, N);
            int same = 0;
            while (same < N && a[same] == b[same]) same++;
            CHECK_MSG(same == N, "params %zu lookup %d: device and host sampling part at token %d", k, lk, same);
            if (lk) CHECK_MSG(sa.n_accepted > 0, "params %zu: no lookup draft accepted (the test needs some)", k);
        }
    model_free(m);
    unsetenv("DSPARK_CUDA_SAMPLE");
}
