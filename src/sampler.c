/* sampler: see sampler.h. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "util.h"

typedef struct {
    float p;
    int id;
} cand;

struct sampler {
    sampler_params p;
    int vocab;
    uint64_t rng[4]; /* xoshiro256** state */
    cand *c;         /* [vocab] scratch */
};

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(sampler *s) {
    uint64_t *r = s->rng;
    uint64_t out = rotl(r[1] * 5, 7) * 9, t = r[1] << 17;
    r[2] ^= r[0];
    r[3] ^= r[1];
    r[1] ^= r[2];
    r[0] ^= r[3];
    r[2] ^= t;
    r[3] = rotl(r[3], 45);
    return out;
}

double sampler_uniform(sampler *s) { return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0); }

static int check_params(const sampler_params *p, char *err, size_t errlen) {
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return ds_err(err, errlen, "temperature must be a finite number >= 0 (got %g)", (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f) && p->top_p != 0.0f)
        return ds_err(err, errlen, "top-p must be in (0, 1] (got %g)", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return ds_err(err, errlen, "min-p must be in [0, 1] (got %g)", (double)p->min_p);
    if (p->top_k < 0) return ds_err(err, errlen, "top-k must be >= 0 (got %d)", p->top_k);
    return 0;
}

static void set_params(sampler *s, const sampler_params *p) {
    s->p = *p;
    if (s->p.top_p == 0.0f) s->p.top_p = 1.0f;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
}

int sampler_create(sampler **out, const sampler_params *p, int vocab, char *err, size_t errlen) {
    *out = NULL;
    if (check_params(p, err, errlen) != 0) return -1;
    if (vocab <= 0) return ds_err(err, errlen, "sampler: empty vocabulary");
    sampler *s = xcalloc(1, sizeof *s);
    s->vocab = vocab;
    set_params(s, p);
    s->c = xmalloc(sizeof(cand) * (size_t)vocab);
    *out = s;
    return 0;
}

int sampler_reset(sampler *s, const sampler_params *p, char *err, size_t errlen) {
    if (check_params(p, err, errlen) != 0) return -1;
    set_params(s, p);
    return 0;
}

void sampler_free(sampler *s) {
    if (!s) return;
    free(s->c);
    free(s);
}

int sampler_is_greedy(const sampler *s) { return s->p.temperature <= 0.0f; }

static int cmp_cand(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return x->id - y->id;
}

/* Sorts the k most probable candidates of c[0..n) to the front
 * (descending); the rest are left in unspecified order. */
static void top_sort(cand *c, int n, int k) {
    if (k >= n) {
        qsort(c, (size_t)n, sizeof(cand), cmp_cand);
        return;
    }
    /* quickselect the k largest to the front, then sort them */
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        cand piv = c[(lo + hi) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (cmp_cand(&c[i], &piv) < 0) i++;
            while (cmp_cand(&c[j], &piv) > 0) j--;
            if (i <= j) {
                cand t = c[i];
                c[i] = c[j];
                c[j] = t;
                i++;
                j--;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
    qsort(c, (size_t)k, sizeof(cand), cmp_cand);
}

/* Builds the kept candidate set in s->c[0..n) with probabilities summing
 * to 1, most probable first. Returns n. */
static int filter(sampler *s, const float *logits) {
    const int V = s->vocab;
    cand *c = s->c;
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    const float inv_t = 1.0f / s->p.temperature;
    double sum = 0;
    for (int i = 0; i < V; i++) {
        float e = expf((logits[i] - mx) * inv_t);
        c[i].p = e;
        c[i].id = i;
        sum += e;
    }
    for (int i = 0; i < V; i++) c[i].p = (float)(c[i].p / sum);
    int n = V;
    if (s->p.top_k > 0 && s->p.top_k < n) {
        top_sort(c, n, s->p.top_k);
        n = s->p.top_k;
    } else if (s->p.top_p < 1.0f || s->p.min_p > 0.0f) {
        /* sort a prefix big enough for the nucleus; fall back to all */
        int k = n < 256 ? n : 256;
        for (;;) {
            top_sort(c, n, k);
            double cum = 0;
            for (int i = 0; i < k; i++) cum += c[i].p;
            if (k == n || cum >= s->p.top_p) break;
            k = k * 4 < n ? k * 4 : n;
        }
        /* the prefix [0,k) is sorted and holds the nucleus; tail not needed
           for top-p, but min-p may keep more: min-p keeps p >= min_p*p_max,
           and everything kept by top-p is sorted, so restrict to k */
        if (s->p.top_p >= 1.0f) {
            /* only min-p: it may keep candidates beyond k; sort all */
            if (k < n) top_sort(c, n, n);
        } else {
            n = k;
        }
    }
    if (s->p.top_p < 1.0f) {
        /* keep the smallest prefix whose mass reaches top_p (at least 1) */
        double cum = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += c[i].p;
            if (cum >= s->p.top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (s->p.min_p > 0.0f) {
        float thr = s->p.min_p * c[0].p;
        int keep = 1;
        while (keep < n && c[keep].p >= thr) keep++;
        n = keep;
    }
    double z = 0;
    for (int i = 0; i < n; i++) z += c[i].p;
    for (int i = 0; i < n; i++) c[i].p = (float)(c[i].p / z);
    return n;
}

int sampler_sample(sampler *s, const float *logits) {
    if (sampler_is_greedy(s)) return op_argmax(logits, s->vocab);
    int n = filter(s, logits);
    double u = sampler_uniform(s), cum = 0;
    for (int i = 0; i < n; i++) {
        cum += s->c[i].p;
        if (u < cum) return s->c[i].id;
    }
    return s->c[n - 1].id;
}

void sampler_probs(sampler *s, const float *logits, float *probs) {
    memset(probs, 0, sizeof(float) * (size_t)s->vocab);
    if (sampler_is_greedy(s)) {
        probs[op_argmax(logits, s->vocab)] = 1.0f;
        return;
    }
    int n = filter(s, logits);
    for (int i = 0; i < n; i++) probs[s->c[i].id] = s->c[i].p;
}

int sampler_draw(sampler *s, const float *w, int n, double mass) {
    double u = sampler_uniform(s) * mass, cum = 0;
    int last = 0;
    for (int i = 0; i < n; i++) {
        if (w[i] <= 0.0f) continue;
        cum += w[i];
        last = i;
        if (u < cum) return i;
    }
    return last;
}
