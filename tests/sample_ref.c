/* The sampler's rule computed independently in double precision with a full
 * sort (sampler.h): the reference the host sampler and the GPU's are held
 * to (test_sampler.c, tests/cuda/test_cuda_sample.c). */
#include "sample_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

float ref_urand(uint32_t *seed) {
    *seed = *seed * 1103515245u + 12345u;
    return (float)((*seed >> 8) & 0xffffff) / 16777216.0f;
}

float *ref_test_rows(int n, int V, uint32_t *seed) {
    float *l = malloc(sizeof(float) * (size_t)n * V);
    for (int j = 0; j < n; j++) {
        float *r = l + (size_t)j * V;
        for (int i = 0; i < V; i++) r[i] = ref_urand(seed) * 4.0f - 2.0f;
        for (int i = 0; i < 30; i++) r[(i * 7919 + j) % V] = 6.0f + ref_urand(seed) * 6.0f;
        if (j % 2) /* quantised: many exact ties */
            for (int i = 0; i < V; i++) r[i] = roundf(r[i] * 2.0f) * 0.5f;
        if (j == 4) r[V / 2] = -INFINITY; /* a masked token */
    }
    return l;
}

int ref_test_draft(int j, int V, uint32_t *seed) {
    int pick = (int)(ref_urand(seed) * 3);
    return pick == 0 ? (int)(ref_urand(seed) * V) : ((int)(ref_urand(seed) * 30) * 7919 + j) % V;
}

static const double *ref_e;
static int by_e(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (ref_e[x] != ref_e[y]) return ref_e[x] < ref_e[y] ? 1 : -1;
    return x - y;
}

void ref_filter(const float *l, int V, sampler_params p, double *out) {
    double mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    double *e = malloc(sizeof(double) * V);
    int *id = malloc(sizeof(int) * V);
    for (int i = 0; i < V; i++) e[i] = exp((l[i] - mx) / p.temperature), id[i] = i;
    ref_e = e;
    qsort(id, V, sizeof(int), by_e);
    int n = p.top_k > 0 && p.top_k < V ? p.top_k : V;
    double mass = 0;
    for (int i = 0; i < n; i++) mass += e[id[i]];
    if (p.top_p > 0 && p.top_p < 1) {
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += e[id[i]];
            if (cum >= p.top_p * mass) {
                n = i + 1;
                break;
            }
        }
    }
    if (p.min_p > 0) {
        int keep = 1;
        while (keep < n && e[id[keep]] >= p.min_p * e[id[0]]) keep++;
        n = keep;
    }
    double z = 0;
    for (int i = 0; i < n; i++) z += e[id[i]];
    memset(out, 0, sizeof(double) * V);
    for (int i = 0; i < n; i++) out[id[i]] = e[id[i]] / z;
    free(e);
    free(id);
}

/* the first id in order (skipping skip) where the running sum of p passes
   u times the sum */
static int walk(const double *p, int V, int skip, double u) {
    double tot = 0, cum = 0;
    for (int i = 0; i < V; i++) tot += i == skip ? 0 : p[i];
    int last = 0;
    for (int i = 0; i < V; i++) {
        if (i == skip || p[i] <= 0) continue;
        cum += p[i];
        last = i;
        if (u * tot < cum) return i;
    }
    return last;
}

/* Row j's answer against draft d: the last row (j = n - 1) a draw from p
   with ua; else accepted (-1) when ua < p(d) / q(d), or a draw with ub
   from max(0, p - q), from p when that has no mass. q NULL: one-hot at d
   (accepted when ua < p(d); the residual is p without d). r: [V] scratch. */
static int ref_row(const double *p, const double *q, double *r, int V, int j, int n, int d, double ua, double ub) {
    if (j == n - 1) return walk(p, V, -1, ua);
    int in = d >= 0 && d < V;
    double pd = in ? p[d] : 0, qd = !q ? 1.0 : in ? q[d] : 0;
    if (qd < 1e-8) qd = 1e-8;
    if (ua < pd / qd) return -1;
    if (!q) return walk(p, V, 1 - pd > 1e-8 ? d : -1, ub);
    double mass = 0;
    for (int i = 0; i < V; i++) {
        r[i] = p[i] > q[i] ? p[i] - q[i] : 0;
        mass += r[i];
    }
    return walk(mass > 1e-8 ? r : p, V, -1, ub);
}

int ref_rows_check(const float *logits, const float *qlogits, int n, int V, sampler_params p, const int *draft,
                   const double *uq, const double *u, const int *got, int *exact, int *accepted) {
    double *pr = malloc(sizeof(double) * V), *qr = qlogits ? malloc(sizeof(double) * V) : NULL;
    double *r = malloc(sizeof(double) * V);
    int bad = 0, ex = 0, acc = 0;
    for (int j = 0; j < n; j++) {
        ref_filter(logits + (size_t)j * V, V, p, pr);
        int d = j < n - 1 ? draft[j] : -1;
        if (qr && j < n - 1) {
            ref_filter(qlogits + (size_t)j * V, V, p, qr);
            int ok = 0; /* the draft itself: a draw from q */
            for (int a = -1; a <= 1 && !ok; a++) ok = walk(qr, V, -1, uq[j] + a * REF_SLACK) == d;
            bad += !ok;
        }
        double ua = u[j], ub = j < n - 1 ? u[j + 1] : 0;
        acc += got[j] == -1;
        if (ref_row(pr, qr, r, V, j, n, d, ua, ub) == got[j]) {
            ex++;
            continue;
        }
        /* rounding: u within REF_SLACK of a boundary may fall either side */
        int ok = 0;
        for (int a = -1; a <= 1 && !ok; a++)
            for (int b = -1; b <= 1 && !ok; b++)
                ok = ref_row(pr, qr, r, V, j, n, d, ua + a * REF_SLACK, ub + b * REF_SLACK) == got[j];
        bad += !ok;
    }
    free(pr);
    free(qr);
    free(r);
    if (exact) *exact = ex;
    if (accepted) *accepted = acc;
    return bad;
}

void ref_rows_suite(rows_fn f, void *ctx, const int *Vs, int nV, const sampler_params *ps, int np, uint32_t seed) {
    enum { N = 7, ROUNDS = 6 };
    for (int v = 0; v < nV; v++) {
        int V = Vs[v];
        float *l = ref_test_rows(N, V, &seed);
        for (int k = 0; k < np; k++) {
            int exact = 0, total = 0;
            for (int round = 0; round < ROUNDS; round++) {
                int draft[N], got[N], ex, n = round == 0 ? 1 : N;
                double u[N];
                for (int j = 0; j < N; j++) {
                    draft[j] = ref_test_draft(j, V, &seed);
                    u[j] = ref_urand(&seed);
                }
                char err[512];
                /* n == 1: a plain decode step (a row alone, drawn) */
                const float *rows = n == 1 ? l + (size_t)(N - 1) * V : l;
                if (f(ctx, rows, n, V, &ps[k], draft, u, got, err, sizeof err) != 0) {
                    test_fail(__FILE__, __LINE__, "V %d params %d: %s", V, k, err);
                    continue;
                }
                int bad = ref_rows_check(rows, NULL, n, V, ps[k], draft, NULL, u, got, &ex, NULL);
                if (bad)
                    test_fail(__FILE__, __LINE__, "V %d params %d round %d: %d rows differ from the reference", V, k,
                              round, bad);
                exact += ex;
                total += n;
            }
            if (exact < total - 2)
                test_fail(__FILE__, __LINE__, "V %d params %d: %d of %d rows equal outright", V, k, exact, total);
        }
        free(l);
    }
}
