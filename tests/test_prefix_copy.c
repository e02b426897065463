/* Prefix sharing between sequences (seq_copy_prefix, dstate_copy_prefix,
 * cli_spec's companion): a sequence given another's cached prefix then
 * prefills only the rest of its prompt, and everything after is bit for
 * bit what a sequence that computed the whole prompt gives (the copy takes
 * the stored bits, whatever --kv-bits stores); a drafter state given the
 * prefix's context drafts as one that ingested it. On the bundled model,
 * whose rows all take the exact kernels (bf16: no prefill family), at
 * every --kv-bits. Then the refusals. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "engine/model.h"
#include "engine/ops.h"
#include "engine/sampler.h"
#include "spec/drafter.h"
#include "spec/registry.h"
#include "spec/seq.h"
#include "spec/spec.h"
#include "test.h"

#define PC_CTX 1024
#define PC_NEW 48

TEST(prefix_copy_target) {
    const int bits[] = {32, 16, 8};
    for (int k = 0; k < 3; k++) {
        char dir[700], err[512];
        test_bundled_path(dir, sizeof dir, "");
        model *m;
        model_load_opts lo = {.kv_bits = bits[k]};
        if (model_load(&m, dir, &lo, err, sizeof err) != 0) {
            test_fail(__FILE__, __LINE__, "%s", err);
            return;
        }
        const int V = model_cfg(m)->vocab_size;
        tpool *tp = tp_create(2);
        seq *a, *b, *c;
        CHECK(seq_create(&a, m, PC_CTX, 256, tp, err, sizeof err) == 0);
        CHECK(seq_create(&b, m, PC_CTX, 256, tp, err, sizeof err) == 0);
        CHECK(seq_create(&c, m, PC_CTX, 256, tp, err, sizeof err) == 0);
        int pa[400], pb[420];
        test_prompt_ids(pa, 400, 300, 7, V);
        test_prompt_ids(pb, 420, 300, 9, V);
        float *la = xmalloc(sizeof(float) * (size_t)V), *lb = xmalloc(sizeof(float) * (size_t)V),
              *lc = xmalloc(sizeof(float) * (size_t)V);
        CHECK(seq_prefill(a, pa, 400, la, err, sizeof err) == 400);
        /* (a copy of whole prefill groups, and b and c chunk alike: on a
           backend with a prefill family, a row's bits are its group's) */
        CHECK_MSG(seq_copy_prefix(b, a, 256, err, sizeof err) == 0, "%s", err);
        CHECK_EQ_INT(seq_len(b), 256);
        CHECK(memcmp(seq_tokens(b), pa, sizeof(int) * 256) == 0);
        /* b computes only the 164 new rows; c the whole prompt */
        CHECK_EQ_INT(seq_prefill(b, pb, 420, lb, err, sizeof err), 164);
        CHECK_EQ_INT(seq_prefill(c, pb, 420, lc, err, sizeof err), 420);
        CHECK_MSG(memcmp(lb, lc, sizeof(float) * (size_t)V) == 0, "kv %d: the last row's logits differ", bits[k]);
        /* and the caches agree past the prompt: the same greedy steps */
        int id = op_argmax(lb, V);
        for (int t = 0; t < PC_NEW; t++) {
            CHECK(seq_step(b, id, lb, err, sizeof err) == 0);
            CHECK(seq_step(c, id, lc, err, sizeof err) == 0);
            CHECK_MSG(memcmp(lb, lc, sizeof(float) * (size_t)V) == 0, "kv %d: step %d differs", bits[k], t);
            id = op_argmax(lb, V);
        }
        /* a copy onto a sequence that held something else replaces it */
        CHECK(seq_copy_prefix(c, a, 10, err, sizeof err) == 0);
        CHECK_EQ_INT(seq_len(c), 10);
        /* refusals: more than the source holds, the sequence itself */
        CHECK(seq_copy_prefix(b, a, 401, err, sizeof err) != 0);
        CHECK_MSG(strstr(err, "source holds 400"), "%s", err);
        CHECK(seq_copy_prefix(a, a, 10, err, sizeof err) != 0);
        CHECK_MSG(strstr(err, "two contexts of one model"), "%s", err);
        CHECK_EQ_INT(seq_len(a), 400);
        free(la), free(lb), free(lc);
        seq_free(a), seq_free(b), seq_free(c);
        tp_free(tp);
        model_free(m);
    }
}

/* A drafter state given another's context prefix: the speculative run on
   the copied sequence and state equals the run on ones that computed the
   whole prompt (ids, and the rows the prefill computed), and the drafter
   reuses what was copied. */
TEST(prefix_copy_drafter) {
    char dir[700], err[512];
    test_bundled_path(dir, sizeof dir, "");
    model *m;
    if (model_load(&m, dir, NULL, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return;
    }
    const int V = model_cfg(m)->vocab_size;
    test_bundled_path(dir, sizeof dir, "-dspark");
    dmodel *dm;
    if (dmodel_load(&dm, dir, m, NULL, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        model_free(m);
        return;
    }
    tpool *tp = tp_create(2);
    sampler *smp;
    sampler_params sp = {.temperature = 0.0f};
    CHECK(sampler_create(&smp, &sp, V, err, sizeof err) == 0);
    seq *s[3];
    dstate *ds[3];
    for (int i = 0; i < 3; i++) {
        CHECK(seq_create(&s[i], m, PC_CTX, 256, tp, err, sizeof err) == 0);
        CHECK(dstate_create(&ds[i], dm, PC_CTX, tp, smp, err, sizeof err) == 0);
    }
    int pa[300], pb[330];
    test_prompt_ids(pa, 300, 256, 3, V);
    test_prompt_ids(pb, 330, 256, 5, V);
    int out[3][PC_NEW];
    spec_stats st[3];
    spec_opts o = {.max_new = PC_NEW, .max_draft = 6, .ignore_eos = 1};
    /* 0: the source run; 1: the copy; 2: the whole prompt */
    drafter d0 = dstate_drafter(ds[0]);
    CHECK(spec_generate(s[0], smp, &d0, pa, 300, &o, out[0], NULL, &st[0], err, sizeof err) == 0);
    const int held = dstate_ctx_len(ds[0]);
    CHECK_MSG(held >= 256, "the source drafter holds %d positions", held);
    CHECK_MSG(seq_copy_prefix(s[1], s[0], 256, err, sizeof err) == 0, "%s", err);
    CHECK_MSG(dstate_copy_prefix(ds[1], ds[0], 256, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(dstate_ctx_len(ds[1]), 256);
    drafter d1 = dstate_drafter(ds[1]), d2 = dstate_drafter(ds[2]);
    CHECK(spec_generate(s[1], smp, &d1, pb, 330, &o, out[1], NULL, &st[1], err, sizeof err) == 0);
    CHECK(spec_generate(s[2], smp, &d2, pb, 330, &o, out[2], NULL, &st[2], err, sizeof err) == 0);
    CHECK_MSG(memcmp(out[1], out[2], sizeof out[1]) == 0, "the copied run's ids differ from the whole prompt's");
    CHECK_EQ_INT(st[1].n_gen, st[2].n_gen);
    CHECK_EQ_INT(st[1].n_accepted, st[2].n_accepted);
    CHECK_MSG(st[1].n_prefilled == 330 - 256 && st[2].n_prefilled == 330, "rows computed: %d and %d",
              st[1].n_prefilled, st[2].n_prefilled);
    /* refusals */
    CHECK(dstate_copy_prefix(ds[1], ds[0], held + 1, err, sizeof err) != 0);
    CHECK(dstate_copy_prefix(ds[1], ds[1], 4, err, sizeof err) != 0);
    for (int i = 0; i < 3; i++) dstate_free(ds[i]), seq_free(s[i]);
    sampler_free(smp);
    tp_free(tp);
    dmodel_free(dm);
    model_free(m);
}
