/* The GPU's prefill path on a real checkpoint (the bundled model, bf16): the
 * layer matmuls of each whole 128-row group go through cuBLAS and its rows
 * through the prefill attention kernel, so a prompt's cache must come out
 * the same whether it is prefilled in one call or in calls of 128 rows (as
 * speculative decoding prefills for a drafter that reads taps): the same
 * logits bits at the end of the prompt and the same greedy continuation.
 * And the whole path against the CPU within the golden tolerance. Also:
 * the folded norms run apart and the pre-cut inputs (cu_norm_split, the
 * tuning's cut) give a forward the same bits as without.
 * Built only by `make test-cuda`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_hooks.h"
#include "engine/model.h"
#include "engine/ops.h"
#include "spec/registry.h"
#include "test.h"
#include "cuda/cuda_test.h"
#include "base/util.h"

#define N_PROMPT 300 /* two whole groups and 44 rows past them */
#define N_DECODE 8

/* prefill the prompt in calls of `chunk` rows (0: one call), then decode
   greedily; logits: the prompt's last row, then each decode step's row */
static int run(model *m, int chunk, const int *prompt, float *logits, int *ids, char *err, size_t errlen) {
    const int V = model_cfg(m)->vocab_size;
    model_ctx *c;
    if (mctx_create(&c, m, 512, 256, NULL, err, errlen) != 0) return -1;
    int rc = 0;
    for (int r0 = 0; !rc && r0 < N_PROMPT;) {
        int n = chunk ? (N_PROMPT - r0 < chunk ? N_PROMPT - r0 : chunk) : N_PROMPT;
        model_batch b = {.n = n, .tokens = prompt + r0, .n_logits = 1, .logits = logits};
        rc = model_forward(c, &b, err, errlen);
        r0 += n;
    }
    for (int i = 0; !rc && i < N_DECODE; i++) {
        ids[i] = op_argmax(logits + (size_t)i * V, V);
        model_batch b = {.n = 1, .tokens = ids + i, .n_logits = 1, .logits = logits + (size_t)(i + 1) * V};
        rc = model_forward(c, &b, err, errlen);
    }
    mctx_free(c);
    return rc;
}

/* the bundled model on device dev ("cuda" or "cpu"), or NULL and a failed
   test (no GPU, or the model does not load) */
static model *load_bundled(const char *dev) {
    if (!have_gpu()) return NULL;
    char dir[1024], err[1024];
    snprintf(dir, sizeof dir, "%s/../../models/%s", test_data_dir(), DSPARK_DEFAULT_MODEL);
    model *m;
    model_load_opts o = {.device = dev};
    if (model_load(&m, dir, &o, err, sizeof err) != 0) {
        test_fail(__FILE__, __LINE__, "%s", err);
        return NULL;
    }
    return m;
}

TEST(cuda_prefill_chunking_same_cache) {
    char err[1024];
    model *mg = load_bundled("cuda"), *mc = mg ? load_bundled("cpu") : NULL;
    if (!mc) {
        if (mg) model_free(mg);
        return;
    }
    const int V = model_cfg(mg)->vocab_size;
    int prompt[N_PROMPT];
    uint32_t r = 12345u;
    for (int i = 0; i < N_PROMPT; i++) {
        r = r * 1664525u + 1013904223u;
        prompt[i] = (int)((r >> 8) % 6000u);
    }
    size_t nl = (size_t)(N_DECODE + 1) * V;
    float *la = xmalloc(sizeof(float) * nl), *lb = xmalloc(sizeof(float) * nl), *lc = xmalloc(sizeof(float) * nl);
    int ia[N_DECODE], ib[N_DECODE], ic[N_DECODE];
    CHECK_MSG(run(mg, 0, prompt, la, ia, err, sizeof err) == 0, "%s", err);
    CHECK_MSG(run(mg, 128, prompt, lb, ib, err, sizeof err) == 0, "%s", err);
    CHECK_MSG(!memcmp(la, lb, sizeof(float) * nl), "prefill in one call and in 128-row calls give different logits");
    CHECK_MSG(!memcmp(ia, ib, sizeof ia), "prefill in one call and in 128-row calls continue differently");
    /* prefill chunks too wide for the device's memory: the context falls
       back to max_batch rows of scratch, with the same bits */
    float *ld = xmalloc(sizeof(float) * nl);
    int id[N_DECODE];
    int prev = cuda_test_prefill_rows(1 << 28); /* (models take the tuning when loaded) */
    model *mw = load_bundled("cuda");
    cuda_test_prefill_rows(prev);
    CHECK_MSG(mw && run(mw, 0, prompt, ld, id, err, sizeof err) == 0, "%s", err);
    if (mw) model_free(mw);
    CHECK_MSG(!memcmp(la, ld, sizeof(float) * nl), "the fallback to max_batch rows of scratch gives different logits");
    free(ld);
    /* the CPU reference: every logits row within the golden tolerance */
    CHECK_MSG(run(mc, 0, prompt, lc, ic, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i <= N_DECODE; i++) {
        double md = 0, mx = 0;
        for (int v = 0; v < V; v++) {
            double d = fabs((double)la[(size_t)i * V + v] - lc[(size_t)i * V + v]);
            if (!(d <= md)) md = d;
            if (fabs(lc[(size_t)i * V + v]) > mx) mx = fabs(lc[(size_t)i * V + v]);
        }
        CHECK_MSG(md <= 1e-3 * mx, "row %d: GPU prefill path vs CPU %.3g of %.3g", i, md, mx);
    }
    fprintf(stderr, "     GPU vs CPU greedy continuation: %s\n", memcmp(ia, ic, sizeof ia) ? "differs" : "same");
    free(la), free(lb), free(lc);
    model_free(mg);
    model_free(mc);
}

/* the logits of every row of a k-row batch after a 40-token prompt, in a
   context of its own */
static int batch_logits(model *m, const int *prompt, int k, float *logits, char *err, size_t errlen) {
    model_ctx *c;
    if (mctx_create(&c, m, 256, 64, NULL, err, errlen) != 0) return -1;
    model_batch p = {.n = 40, .tokens = prompt, .n_logits = 1, .logits = logits};
    int rc = model_forward(c, &p, err, errlen);
    model_batch b = {.n = k, .tokens = prompt + 40, .n_logits = k, .logits = logits};
    if (!rc) rc = model_forward(c, &b, err, errlen);
    mctx_free(c);
    return rc;
}

/* The pre-cut inputs and the folded norms run apart (the tuning's cut 1,
   the default: the MLP and final norms by their own kernel from 9 rows,
   the matmuls from its pre-cut rows and scales; o and down from pre-cut
   inputs) give a forward the bits of the folded norms and f32 inputs (cut
   0), at every width from one row: so the choice may follow the batch
   width without a verified row ever differing from the row decoded alone. */
TEST(cuda_norm_split_forward_same_bits) {
    char err[1024];
    model *ma = load_bundled("cuda");
    if (!ma) return;
    cu_tuning t, keep;
    cuda_hook_tuning_get(&keep);
    t = keep;
    t.cut = 0;
    cuda_hook_tuning_set(&t);
    model *mb = load_bundled("cuda");
    cuda_hook_tuning_set(&keep);
    if (!mb) {
        model_free(ma);
        return;
    }
    const int V = model_cfg(ma)->vocab_size;
    int prompt[56];
    uint32_t r = 777u;
    for (int i = 0; i < 56; i++) {
        r = r * 1664525u + 1013904223u;
        prompt[i] = (int)((r >> 8) % 6000u);
    }
    float *la = xmalloc(sizeof(float) * 16 * V), *lb = xmalloc(sizeof(float) * 16 * V);
    const int ks[] = {1, 5, 9, 16};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        const int k = ks[i];
        CHECK_MSG(batch_logits(ma, prompt, k, la, err, sizeof err) == 0, "%s", err);
        CHECK_MSG(batch_logits(mb, prompt, k, lb, err, sizeof err) == 0, "%s", err);
        CHECK_MSG(!memcmp(la, lb, sizeof(float) * k * V), "%d rows: the norms run apart give other logits", k);
    }
    free(la), free(lb);
    model_free(ma);
    model_free(mb);
}
