/* multi-decode: decode throughput of N sequences, each one row a step,
 * run as one model_forward_multi a step ("multi") against N model_forward
 * calls one after another ("turns"), for N = 1, 2, 4, 8, 16.
 *
 *   bench/multi-decode.sh MODEL_DIR [CONTEXT=64] [THREADS=0 (all)] [STEPS=32] [REPS=5]
 *
 * Each sequence starts from its own prompt of CONTEXT random tokens and
 * decodes greedily (the argmax fed back); a rep runs STEPS steps in one
 * mode and rolls the caches back, the two modes alternate rep by rep (a
 * noisy machine drifts for both alike), and the median rep is printed as
 * tokens a second over all N sequences. Both modes must produce the same
 * ids (a row's bits never depend on its batch): a difference is reported
 * and the exit status is 1. DSPARK_BENCH_TUNING=SPEC (a CUDA build): the
 * model's CUDA tuning (bench_tuning.h). Not run by tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "bench_tuning.h"
#include "engine/model.h"
#include "engine/threadpool.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { NMAX = 16 };

/* STEPS steps of n sequences from their prompts' end; ids[step][seq] */
static double run(model_ctx **c, int n, int ctx_len, int steps, int multi, const int *first, int *ids, char *err,
                  size_t errlen) {
    int tok[NMAX], out[NMAX];
    model_batch b[NMAX];
    for (int i = 0; i < n; i++) {
        mctx_truncate(c[i], ctx_len);
        tok[i] = first[i];
    }
    double t0 = ds_now();
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < n; i++) b[i] = (model_batch){.n = 1, .tokens = &tok[i], .n_logits = 1, .argmax = &out[i]};
        if (multi) {
            if (model_forward_multi(c, b, n, err, errlen) != 0) return -1;
        } else {
            for (int i = 0; i < n; i++)
                if (model_forward(c[i], &b[i], err, errlen) != 0) return -1;
        }
        for (int i = 0; i < n; i++) ids[s * n + i] = tok[i] = out[i];
    }
    return ds_now() - t0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL_DIR [CONTEXT] [THREADS] [STEPS] [REPS]\n", argv[0]);
        return 1;
    }
    int ctx_len = argc > 2 ? atoi(argv[2]) : 64, threads = argc > 3 ? atoi(argv[3]) : 0,
        steps = argc > 4 ? atoi(argv[4]) : 32, reps = argc > 5 ? atoi(argv[5]) : 5;
    if (ctx_len < 1 || steps < 1 || reps < 1) return fprintf(stderr, "bad CONTEXT, STEPS or REPS\n"), 1;
    char err[1024];
    if (bench_tuning_apply() != 0) return 1;
    model *m;
    if (model_load(&m, argv[1], NULL, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 1;
    tpool *tp = tp_create(threads);
    const int V = model_cfg(m)->vocab_size;
    model_ctx *c[NMAX];
    int first[NMAX], *prompt = xmalloc(sizeof(int) * (size_t)ctx_len);
    uint32_t s = 1;
    for (int i = 0; i < NMAX; i++) {
        if (mctx_create(&c[i], m, ctx_len + steps + 1, 64, tp, err, sizeof err) != 0)
            return fprintf(stderr, "%s\n", err), 1;
        for (int j = 0; j < ctx_len; j++) prompt[j] = (int)((s = s * 1664525u + 1013904223u) >> 8) % V;
        model_batch pb = {.n = ctx_len, .tokens = prompt, .n_logits = 1, .argmax = &first[i]};
        if (model_forward(c[i], &pb, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 1;
    }
    int *ids[2];
    for (int k = 0; k < 2; k++) ids[k] = xmalloc(sizeof(int) * (size_t)steps * NMAX);
    double *t[2];
    for (int k = 0; k < 2; k++) t[k] = xmalloc(sizeof(double) * (size_t)reps);
    printf("model %s, device %s, context %d, %d steps, %d reps, threads %d\n", argv[1], model_device(m), ctx_len,
           steps, reps, tp_size(tp));
    printf("%3s %12s %12s %8s\n", "N", "turns tok/s", "multi tok/s", "multi/turns");
    int bad = 0;
    static const int ns[] = {1, 2, 4, 8, 16};
    for (int k = 0; k < 5; k++) {
        int n = ns[k];
        run(c, n, ctx_len, steps, 1, first, ids[1], err, sizeof err); /* warm */
        for (int r = 0; r < reps; r++)
            for (int mode = 0; mode < 2; mode++) {
                int md = r % 2 ? 1 - mode : mode; /* alternate which goes first */
                t[md][r] = run(c, n, ctx_len, steps, md, first, ids[md], err, sizeof err);
                if (t[md][r] < 0) return fprintf(stderr, "%s\n", err), 1;
            }
        if (memcmp(ids[0], ids[1], sizeof(int) * (size_t)steps * (size_t)n)) {
            fprintf(stderr, "N %d: the multi forward's ids differ from the turns'\n", n);
            bad = 1;
        }
        double med[2];
        for (int md = 0; md < 2; md++) {
            qsort(t[md], (size_t)reps, sizeof(double), cmp_d);
            med[md] = (double)n * steps / t[md][reps / 2];
        }
        printf("%3d %12.1f %12.1f %8.2f\n", n, med[0], med[1], med[1] / med[0]);
        fflush(stdout);
    }
    for (int i = 0; i < NMAX; i++) mctx_free(c[i]);
    model_free(m);
    tp_free(tp);
    return bad;
}
