/* spec-batch: N generations stepped together (spec_run.h: one
 * model_forward_multi a step) against the same N one after another
 * (spec_generate), on the bundled model and its DSpark drafter, greedy.
 *   bench/spec-batch.sh [--threads T] [--new N] [--runs 1,2,4,8]
 *                       [--modes plain,dspark] [--draft K] [--reps R]
 *                       [--batch-rows B[,B2...]]
 * For each mode and run count it prints, as the median over R repetitions
 * (the order of the two ways alternates each repetition), the aggregate
 * tokens/s (all runs' ids over the wall time, prefill included) and the
 * mean per-run tokens/s (a run's ids over the time from its start to its
 * end: one after another, the wait for the runs before it is not counted),
 * the best aggregate of each way (on a shared machine the least disturbed
 * repetition), and checks that both ways give the same ids.
 * --batch-rows B: the batch-level draft rule under test, each run's cap
 * min(K, max(1, B / runs decoding)) (0: off, each run's own cap K); several
 * values are measured side by side, alternating. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "engine/model.h"
#include "spec/drafter.h"
#include "spec/registry.h"
#include "spec/spec_run.h"
#include "text/tokenizer.h"

#define MAXR 16

static const char *const TEXTS[] = {
    "def quicksort(xs):\n    \"\"\"Sort a list of integers.\"\"\"\n",
    "import json\n\ndef load(path):\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n",
    "# read a CSV file and sum the second column\nimport csv\n",
    "def is_prime(n):\n",
    "for i in range(3):\n    for j in range(3):\n",
    "def binary_search(a, x):\n    lo, hi = 0, len(a)\n",
    "class Node:\n    def __init__(self, value, next=None):\n",
};

typedef struct {
    int n_runs_decoding; /* the batch rule's view: runs past their prefill, this step */
    int rows;            /* B */
    int k;
} batch_rule;

typedef struct {
    batch_rule *rule;
} cap_ctl;

static int rule_cap(void *ctl) {
    const batch_rule *b = ((cap_ctl *)ctl)->rule;
    int n = b->n_runs_decoding > 0 ? b->n_runs_decoding : 1;
    int c = b->rows / n;
    if (c < 1) c = 1;
    return c < b->k ? c : b->k;
}

typedef struct {
    seq *s[MAXR];
    sampler *smp[MAXR];
    dstate *ds[MAXR];
    drafter d[MAXR];
    int *prompt[MAXR], n_prompt[MAXR];
} pool;

static double median(double *v, int n) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (v[j] < v[i]) {
                double t = v[i];
                v[i] = v[j];
                v[j] = t;
            }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(const char *e) {
    fprintf(stderr, "spec-batch: %s\n", e);
    exit(1);
}

/* one way of running n generations; ids into out[i][new]; returns the
   wall seconds, per-run tok/s mean into *per_run */
static double run_way(pool *p, int n, int together, int spec, int k, int rows, int max_new, int *out,
                      double *per_run, long *total) {
    char err[512];
    spec_stats st[MAXR];
    spec_opts so[MAXR];
    batch_rule rule = {.rows = rows, .k = k};
    cap_ctl ctl = {.rule = &rule};
    for (int i = 0; i < n; i++) {
        seq_reset(p->s[i]);
        sampler_params sp = {.temperature = 0};
        if (sampler_reset(p->smp[i], &sp, err, sizeof err) != 0) die(err);
        so[i] = (spec_opts){.max_new = max_new, .max_draft = spec ? k : 0, .ignore_eos = 1};
        if (spec && rows) {
            so[i].next_cap = rule_cap;
            so[i].ctl = &ctl;
        }
    }
    double t_end[MAXR], t0 = ds_now();
    if (!together) {
        for (int i = 0; i < n; i++) {
            double ti = ds_now();
            rule.n_runs_decoding = 1;
            if (spec_generate(p->s[i], p->smp[i], spec ? &p->d[i] : NULL, p->prompt[i], p->n_prompt[i], &so[i],
                              out + (size_t)i * max_new, NULL, &st[i], err, sizeof err) != 0)
                die(err);
            t_end[i] = ds_now() - ti;
        }
    } else {
        spec_run *r[MAXR];
        for (int i = 0; i < n; i++)
            if (spec_run_create(&r[i], p->s[i], p->smp[i], spec ? &p->d[i] : NULL, p->prompt[i], p->n_prompt[i],
                                &so[i], out + (size_t)i * max_new, &st[i], err, sizeof err) != 0)
                die(err);
        for (int i = 0; i < n; i++) t_end[i] = -1;
        for (int left = n; left > 0;) {
            rule.n_runs_decoding = 0;
            for (int i = 0; i < n; i++) rule.n_runs_decoding += !spec_run_done(r[i]) && !spec_run_prefilling(r[i]);
            if (spec_step(r, n, err, sizeof err) != 0) die(err);
            left = 0;
            for (int i = 0; i < n; i++) {
                if (!spec_run_done(r[i])) left++;
                else if (t_end[i] < 0) t_end[i] = ds_now() - t0;
            }
        }
        for (int i = 0; i < n; i++) {
            if (spec_run_finish(r[i], NULL, err, sizeof err) != 0) die(err);
            spec_run_free(r[i]);
        }
    }
    double wall = ds_now() - t0;
    double pr = 0;
    *total = 0;
    for (int i = 0; i < n; i++) {
        pr += st[i].n_gen / t_end[i];
        *total += st[i].n_gen;
    }
    *per_run = pr / n;
    return wall;
}

int main(int argc, char **argv) {
    int threads = 2, max_new = 64, reps = 5, k = 6;
    const char *runs_s = "1,2,4,8", *modes = "plain,dspark", *rows_s = "0";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--new")) max_new = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--runs")) runs_s = argv[i + 1];
        else if (!strcmp(argv[i], "--modes")) modes = argv[i + 1];
        else if (!strcmp(argv[i], "--draft")) k = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch-rows")) rows_s = argv[i + 1];
        else {
            fprintf(stderr, "spec-batch: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (threads < 1 || max_new < 1 || reps < 1 || k < 1 || k > SPEC_MAX_DRAFT) die("bad option value");
    char err[512], dir[512];
    model *m;
    tokenizer *tok;
    dmodel *dm;
    snprintf(dir, sizeof dir, "models/%s", DSPARK_DEFAULT_MODEL);
    if (model_load(&m, dir, NULL, err, sizeof err) != 0 || tok_load(&tok, dir, err, sizeof err) != 0) die(err);
    snprintf(dir, sizeof dir, "models/%s-dspark", DSPARK_DEFAULT_MODEL);
    if (dmodel_load(&dm, dir, m, NULL, err, sizeof err) != 0) die(err);
    tpool *tp = tp_create(threads);
    const int V = model_cfg(m)->vocab_size;
    pool p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < MAXR; i++) {
        const char *t = TEXTS[i % 8];
        p.n_prompt[i] = tok_encode(tok, t, strlen(t), 0, &p.prompt[i], err, sizeof err);
        if (p.n_prompt[i] <= 0) die(err);
        sampler_params sp = {0};
        if (seq_create(&p.s[i], m, 1024, 64, tp, err, sizeof err) != 0 ||
            sampler_create(&p.smp[i], &sp, V, err, sizeof err) != 0 ||
            dstate_create(&p.ds[i], dm, 1024, tp, p.smp[i], err, sizeof err) != 0)
            die(err);
        p.d[i] = dstate_drafter(p.ds[i]);
    }
    int rows_v[8], n_rows = 0;
    for (const char *q = rows_s; *q && n_rows < 8;) {
        rows_v[n_rows++] = atoi(q);
        q = strchr(q, ',') ? strchr(q, ',') + 1 : q + strlen(q);
    }
    int *o1 = xmalloc(sizeof(int) * MAXR * (size_t)max_new), *o2 = xmalloc(sizeof(int) * MAXR * (size_t)max_new);
    printf("bundled model %s, %d threads, %d new ids a run (greedy), draft cap %d, median of %d\n",
           DSPARK_DEFAULT_MODEL, threads, max_new, k, reps);
    printf("%-7s %4s %5s | %12s %12s %9s | %12s %12s %9s | %s\n", "mode", "runs", "rows", "seq agg t/s",
           "seq run t/s", "seq best", "step agg t/s", "step run t/s", "step best", "step/seq (median, best)");
    for (const char *md = modes; *md;) {
        int spec = !strncmp(md, "dspark", 6);
        md = strchr(md, ',') ? strchr(md, ',') + 1 : md + strlen(md);
        for (const char *q = runs_s; *q;) {
            int n = atoi(q);
            q = strchr(q, ',') ? strchr(q, ',') + 1 : q + strlen(q);
            if (n < 1 || n > MAXR) die("--runs: 1..16");
            for (int ri = 0; ri < (spec ? n_rows : 1); ri++) {
                int rows = spec ? rows_v[ri] : 0;
                double sa[64], sr[64], ta[64], tr[64];
                for (int rep = 0; rep < reps && rep < 64; rep++) {
                    for (int w = 0; w < 2; w++) {
                        int together = (w + rep) % 2; /* alternate which way runs first */
                        double per;
                        long tot;
                        double wall = run_way(&p, n, together, spec, k, rows, max_new, together ? o2 : o1, &per, &tot);
                        if (together) {
                            ta[rep] = tot / wall;
                            tr[rep] = per;
                        } else {
                            sa[rep] = tot / wall;
                            sr[rep] = per;
                        }
                    }
                    if (memcmp(o1, o2, sizeof(int) * (size_t)n * (size_t)max_new)) die("ids differ between the ways");
                }
                double sbest = 0, tbest = 0;
                for (int i = 0; i < reps && i < 64; i++) {
                    if (sa[i] > sbest) sbest = sa[i];
                    if (ta[i] > tbest) tbest = ta[i];
                }
                double a = median(sa, reps), b = median(ta, reps);
                printf("%-7s %4d %5d | %12.1f %12.1f %9.1f | %12.1f %12.1f %9.1f | %.2fx %.2fx\n",
                       spec ? "dspark" : "plain", n, rows, a, median(sr, reps), sbest, b, median(tr, reps), tbest, b / a,
                       tbest / sbest);
                fflush(stdout);
            }
        }
    }
    return 0;
}
