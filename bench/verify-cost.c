/* verify-cost: the cost of a speculative verify forward of width k
 * relative to a one-token decode, t(k)/t(1) for k = 1..16, at a given
 * context length. The ratio bounds the speedup a drafter can give: a round
 * that emits tau tokens for a width-k verify is worth tau / (t(k)/t(1))
 * decode steps (ignoring the drafter's own cost).
 *
 *   bench/verify-cost.sh MODEL_DIR [CONTEXT=256] [THREADS=0 (all)] [REPS=20] [ids|logits]
 *
 * DSPARK_BENCH_TUNING=SPEC (a CUDA build): the model's CUDA tuning (bench_tuning.h).
 * ids (the default): each row's argmax comes back, as a greedy verify asks;
 * logits: every row's vocabulary-wide logits come back, as a sampled one.
 * The first line is the prefill of CONTEXT tokens from an empty cache, in
 * chunks of the context's max_batch (256, as `dspark run`; DSPARK_BENCH_BATCH=N
 * sets it).
 *
 * Prints one line per k: width, median ms, ratio to k=1. Not run by tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"
#include "engine/threadpool.h"
#include "base/util.h"
#include "bench_tuning.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL_DIR [CONTEXT] [THREADS] [REPS]\n", argv[0]);
        return 1;
    }
    int ctx_len = argc > 2 ? atoi(argv[2]) : 256, threads = argc > 3 ? atoi(argv[3]) : 0,
        reps = argc > 4 ? atoi(argv[4]) : 20;
    int want_logits = argc > 5 && !strcmp(argv[5], "logits");
    if (ctx_len < 1 || reps < 1) return fprintf(stderr, "bad CONTEXT or REPS\n"), 1;
    char err[1024];
    model *m;
    if (bench_tuning_apply() != 0) return 1;
    model_load_opts lo = {0};
    if (model_load(&m, argv[1], &lo, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 1;
    tpool *tp = tp_create(threads);
    const int V = model_cfg(m)->vocab_size;
    enum { KMAX = 16 };
    model_ctx *c;
    const char *be = getenv("DSPARK_BENCH_BATCH"); /* rows per forward chunk (default 256, as dspark run) */
    int batch = be && atoi(be) > 0 ? atoi(be) : 256;
    if (mctx_create(&c, m, ctx_len + KMAX + 1, batch, tp, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 1;
    int *ids = xmalloc(sizeof(int) * (size_t)(ctx_len + KMAX));
    uint32_t s = 1;
    for (int i = 0; i < ctx_len + KMAX; i++) ids[i] = (int)((s = s * 1664525u + 1013904223u) >> 8) % V;
    float *logits = xmalloc(sizeof(float) * (size_t)KMAX * (size_t)V);
    model_batch pre = {.n = ctx_len, .tokens = ids, .n_logits = 1, .logits = logits};
    double tp0 = ds_now();
    if (model_forward(c, &pre, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 1;
    double tpre = ds_now() - tp0;
    /* once more from scratch: the first forward also pays one-off set-up */
    mctx_truncate(c, 0);
    tp0 = ds_now();
    if (model_forward(c, &pre, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 1;
    if (ds_now() - tp0 < tpre) tpre = ds_now() - tp0;
    printf("# prefill %d tokens: %.1f ms (%.0f tok/s)\n", ctx_len, tpre * 1e3, ctx_len / tpre);
    double *t = xmalloc(sizeof(double) * (size_t)reps), t1 = 0;
    printf("# %s, context %d, threads %d, median of %d, %s back\n# k  ms  t(k)/t(1)\n", argv[1], ctx_len, tp_size(tp),
           reps, want_logits ? "logits" : "argmax ids");
    int am[KMAX];
    for (int k = 1; k <= KMAX; k++) {
        for (int r = -2; r < reps; r++) { /* two warm-up runs */
            model_batch b = {.n = k, .tokens = ids + ctx_len, .n_logits = k, .logits = want_logits ? logits : NULL,
                             .argmax = want_logits ? NULL : am};
            double t0 = ds_now();
            if (model_forward(c, &b, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 1;
            if (r >= 0) t[r] = ds_now() - t0;
            mctx_truncate(c, ctx_len);
        }
        qsort(t, (size_t)reps, sizeof(double), cmp_d);
        double med = t[reps / 2];
        if (k == 1) t1 = med;
        printf("%2d %8.3f %6.2f\n", k, med * 1e3, med / t1);
        fflush(stdout);
    }
    free(t);
    free(logits);
    free(ids);
    mctx_free(c);
    tp_free(tp);
    model_free(m);
    return 0;
}
