/* cuda-timeline: the GPU's own timeline of decode steps, kernel by kernel,
 * from CUPTI's activity records (the start and end of every kernel and
 * copy the device ran, graph replays included), for a machine without
 * Nsight Systems. Kernels under programmatic dependent launch start early
 * and wait, so a start says little; what a kernel adds to a step is its
 * end less the previous one's end (its marginal cost in the chain), and
 * the step's time is the sum of those.
 *
 *   cuda-timeline MODEL_DIR [CONTEXT=512] [ROWS=1] [STEPS=8] [chain|forward]
 *
 * Runs with DSPARK_DEVICE=cuda. Prefills CONTEXT random ids, warms the
 * forward of ROWS rows (its graph), then records STEPS forwards of ROWS
 * rows at that cache length (forward: model_forward, argmax ids back, the
 * host reading each; chain, one row only: plain decoding's chained steps,
 * mctx_chain_*), and prints
 *   - each step's period (its last end less the previous step's);
 *   - every kernel and copy of the middle step in end order: name, grid,
 *     duration, marginal cost, and the start's offset from the previous
 *     end (negative: it was resident early);
 *   - per (kernel, grid) over all recorded steps: count per step, mean
 *     duration, mean marginal cost and its share of the step.
 * Built by scripts/cuda-pack (CUPTI linked); not run by tests. */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"
#include "engine/threadpool.h"
#include "base/util.h"
#include "bench_tuning.h"

typedef struct {
    unsigned long long start, end;
    char name[96];
    int grid, block;
} event;

static event *g_ev;
static size_t g_n, g_cap;
static size_t g_dropped;

#define CUPTI_CK(call)                                                                                       \
    do {                                                                                                     \
        CUptiResult r_ = (call);                                                                             \
        if (r_ != CUPTI_SUCCESS) {                                                                           \
            const char *s_ = "?";                                                                            \
            cuptiGetResultString(r_, &s_);                                                                   \
            fprintf(stderr, "cuda-timeline: %s: %s\n", #call, s_);                                           \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

/* the identifier of a mangled name (_Z5k_mmaI... -> k_mma, plus a short
   hash of the rest so that template instances stay apart), else the name */
static void short_name(char *out, size_t n, const char *mangled) {
    if (!mangled) {
        snprintf(out, n, "(unnamed)");
        return;
    }
    if (strncmp(mangled, "_Z", 2)) {
        snprintf(out, n, "%s", mangled);
        return;
    }
    const char *p = mangled + 2;
    int len = 0;
    while (*p >= '0' && *p <= '9') len = len * 10 + (*p++ - '0');
    if (len <= 0 || (size_t)len > strlen(p)) {
        snprintf(out, n, "%s", mangled);
        return;
    }
    unsigned h = 2166136261u;
    for (const char *q = p + len; *q; q++) h = (h ^ (unsigned char)*q) * 16777619u;
    snprintf(out, n, "%.*s#%04x", len, p, h & 0xffffu);
}

static void add_event(unsigned long long s, unsigned long long e, const char *name, int grid, int block) {
    if (g_n == g_cap) {
        g_cap = g_cap ? 2 * g_cap : 4096;
        g_ev = xrealloc(g_ev, sizeof(event) * g_cap);
    }
    event *v = &g_ev[g_n++];
    v->start = s;
    v->end = e;
    v->grid = grid;
    v->block = block;
    snprintf(v->name, sizeof v->name, "%s", name);
}

static void CUPTIAPI buf_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = 8u << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *r = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
            char nm[96];
            short_name(nm, sizeof nm, k->name);
            add_event(k->start, k->end, nm, k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ);
        } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *c = (const CUpti_ActivityMemcpy6 *)r;
            char nm[96];
            snprintf(nm, sizeof nm, "copy %s %llu B",
                     c->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "HtoD"
                     : c->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "DtoH"
                                                                      : "other",
                     (unsigned long long)c->bytes);
            add_event(c->start, c->end, nm, 0, 0);
        }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) g_dropped += dropped;
    free(buffer);
}

static int by_end(const void *a, const void *b) {
    const event *x = a, *y = b;
    return x->end < y->end ? -1 : x->end > y->end;
}

typedef struct {
    char name[96];
    int grid;
    long count;
    double dur, marg;
} agg;

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL_DIR [CONTEXT=512] [ROWS=1] [STEPS=8] [chain|forward]\n", argv[0]);
        return 1;
    }
    const int ctx_len = argc > 2 ? atoi(argv[2]) : 512, rows = argc > 3 ? atoi(argv[3]) : 1,
              steps = argc > 4 ? atoi(argv[4]) : 8;
    const int chain = argc > 5 && !strcmp(argv[5], "chain");
    if (ctx_len < 1 || rows < 1 || rows > 17 || steps < 2 || (chain && rows != 1)) {
        fprintf(stderr, "cuda-timeline: CONTEXT >= 1, ROWS 1..17 (1 for chain), STEPS >= 2\n");
        return 1;
    }
    char err[1024];
    /* (registered before the device is first used; enabled after the warm-up) */
    CUPTI_CK(cuptiActivityRegisterCallbacks(buf_requested, buf_completed));
    model *m;
    if (bench_tuning_apply() != 0) return 1;
    model_load_opts lo = {0};
    if (model_load(&m, argv[1], &lo, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 1;
    if (strcmp(model_backend(m)->name, "cuda")) return fprintf(stderr, "cuda-timeline: the model is not on a GPU (DSPARK_DEVICE=cuda)\n"), 1;
    tpool *tp = tp_create(1);
    const int V = model_cfg(m)->vocab_size;
    model_ctx *c;
    if (mctx_create(&c, m, ctx_len + steps + 32, 256, tp, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 1;
    int *ids = xmalloc(sizeof(int) * (size_t)(ctx_len + 32));
    uint32_t s = 1;
    for (int i = 0; i < ctx_len + 32; i++) ids[i] = (int)((s = s * 1664525u + 1013904223u) >> 8) % V;
    float *logits = xmalloc(sizeof(float) * (size_t)V);
    int am[17];
    model_batch pre = {.n = ctx_len, .tokens = ids, .n_logits = 1, .logits = logits};
    model_batch step = {.n = rows, .tokens = ids + ctx_len, .n_logits = rows, .argmax = am};
    if (model_forward(c, &pre, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 1;
    /* warm: the step's graph (and the chain's) captured before recording */
    for (int w = 0; w < 3; w++) {
        if (model_forward(c, &step, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 1;
        mctx_truncate(c, ctx_len);
    }
    int y = 0;
    if (chain && (mctx_chain_start(c, ids[ctx_len], err, sizeof err) != 0 ||
                  mctx_chain_next(c, 1, &y, err, sizeof err) != 0 || mctx_chain_next(c, 0, &y, err, sizeof err) != 0))
        return fprintf(stderr, "%s\n", err), 1;
    mctx_chain_end(c);
    mctx_truncate(c, ctx_len);

    CUPTI_CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    CUPTI_CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
    if (chain) {
        if (mctx_chain_start(c, ids[ctx_len], err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 1;
        for (int i = 0; i < steps; i++)
            if (mctx_chain_next(c, i + 1 < steps, &y, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 1;
        mctx_chain_end(c);
    } else {
        for (int i = 0; i < steps; i++) {
            if (model_forward(c, &step, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 1;
            mctx_truncate(c, ctx_len);
        }
    }
    CUPTI_CK(cuptiActivityFlushAll(1));
    CUPTI_CK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    CUPTI_CK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY));
    if (g_dropped) fprintf(stderr, "cuda-timeline: %zu records dropped\n", g_dropped);
    qsort(g_ev, g_n, sizeof(event), by_end);
    /* a chain's first step has one kernel more (cu_chain_set's): what ends
       first beyond a whole number of steps is left out */
    const size_t skip = g_n % (size_t)steps;
    if (skip > 1 || (skip && !chain)) {
        fprintf(stderr, "cuda-timeline: %zu records for %d steps: not the same kernels each step\n", g_n, steps);
        return 1;
    }
    memmove(g_ev, g_ev + skip, sizeof(event) * (g_n - skip));
    g_n -= skip;
    const size_t K = g_n / (size_t)steps;
    printf("%s, context %d, %d row%s, %s, %d steps of %zu kernels and copies\n", argv[1], ctx_len, rows,
           rows > 1 ? "s" : "", chain ? "chained" : "one forward at a time", steps, K);
    printf("\nstep periods (us):");
    for (int i = 1; i < steps; i++) printf(" %.1f", 1e-3 * (double)(g_ev[(i + 1) * K - 1].end - g_ev[i * K - 1].end));
    printf("\n");
    /* the middle step, event by event */
    const size_t mid = (size_t)(steps / 2) * K;
    printf("\n| # | kernel or copy | grid | block | duration, us | marginal, us | start - previous end, us |\n"
           "|---:|---|---:|---:|---:|---:|---:|\n");
    for (size_t i = mid; i < mid + K; i++) {
        const event *e = &g_ev[i], *p = &g_ev[i - 1];
        printf("| %zu | %s | %d | %d | %.2f | %.2f | %.2f |\n", i - mid, e->name, e->grid, e->block,
               1e-3 * (double)(e->end - e->start), 1e-3 * (double)(e->end - p->end),
               1e-3 * ((double)e->start - (double)p->end));
    }
    /* by (kernel, grid) over the steps after the first */
    agg *a = xcalloc(K, sizeof(agg));
    int na = 0;
    double total = 0;
    for (size_t i = K; i < g_n; i++) {
        const event *e = &g_ev[i];
        int j = 0;
        while (j < na && (strcmp(a[j].name, e->name) || a[j].grid != e->grid)) j++;
        if (j == na) {
            snprintf(a[na].name, sizeof a[na].name, "%s", e->name);
            a[na++].grid = e->grid;
        }
        double mg = 1e-3 * (double)(e->end - g_ev[i - 1].end);
        a[j].count++;
        a[j].dur += 1e-3 * (double)(e->end - e->start);
        a[j].marg += mg;
        total += mg;
    }
    const double per = (double)(steps - 1);
    printf("\nper step, over %d steps (%.1f us a step):\n\n| kernel or copy | grid | per step | mean duration, us "
           "| marginal per step, us | share |\n|---|---:|---:|---:|---:|---:|\n",
           steps - 1, total / per);
    for (int j = 0; j < na; j++)
        printf("| %s | %d | %.0f | %.2f | %.1f | %.1f%% |\n", a[j].name, a[j].grid, a[j].count / per,
               a[j].dur / (double)a[j].count, a[j].marg / per, 100.0 * a[j].marg / total);
    free(a);
    free(g_ev);
    free(ids);
    free(logits);
    mctx_free(c);
    tp_free(tp);
    model_free(m);
    return 0;
}
