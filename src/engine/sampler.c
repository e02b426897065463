/* sampler: see sampler.h. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ops.h"
#include "base/util.h"

typedef struct {
    float p;
    int id;
} cand;

struct sampler {
    sampler_params p;
    int vocab;
    uint64_t rng[4]; /* xoshiro256** state */
    cand *c, *c2;    /* [vocab] scratch: the kept candidates, a sort's buffer */
    float *e;        /* [vocab] scratch: exp((logit - max) / T) */
    double mass;     /* the sum of e over the kept set */
    int nkept;       /* the kept set: every token (e) when 0, else c[0..nkept) in id order */
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

void sampler_peek(sampler *s, double *u, int n) {
    uint64_t keep[4];
    memcpy(keep, s->rng, sizeof keep);
    for (int i = 0; i < n; i++) u[i] = sampler_uniform(s);
    memcpy(s->rng, keep, sizeof keep);
}

void sampler_skip(sampler *s, int n) {
    for (int i = 0; i < n; i++) next_u64(s);
}

const sampler_params *sampler_get_params(const sampler *s) { return &s->p; }

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
    s->c2 = xmalloc(sizeof(cand) * (size_t)vocab);
    s->e = xmalloc(sizeof(float) * (size_t)vocab);
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
    free(s->c2);
    free(s->e);
    free(s);
}

int sampler_is_greedy(const sampler *s) { return s->p.temperature <= 0.0f; }

/* The candidates with e >= thr, in id order, their e as p. */
static int collect(cand *c, const float *e, int V, float thr) {
    int n = 0;
    for (int i = 0; i < V; i++)
        if (e[i] >= thr) {
            c[n].p = e[i];
            c[n].id = i;
            n++;
        }
    return n;
}

/* The largest power-of-two threshold on e with at least k tokens at or
   above it, 0 (every token) when none is: the candidates top-k needs
   (e <= 1; one pass by float exponent, four interleaved counts so that
   runs of one exponent do not chain). */
static float top_k_threshold(const float *e, int V, int k) {
    int cnt[4][128] = {{0}};
    for (int i = 0; i < V; i++) {
        uint32_t b;
        memcpy(&b, &e[i], sizeof b);
        b >>= 23;
        cnt[i & 3][b > 127 ? 127 : b]++;
    }
    int c = 0;
    for (uint32_t b = 127; b > 0; b--) {
        c += cnt[0][b] + cnt[1][b] + cnt[2][b] + cnt[3][b];
        if (c >= k) {
            uint32_t t = b << 23;
            float f;
            memcpy(&f, &t, sizeof f);
            return f;
        }
    }
    return 0.0f;
}

/* a candidate's sort key: its id, or the complemented bits of its p >= 0
   (ascending keys: p descending) */
static uint32_t cand_key(const cand *x, int by_id) {
    if (by_id) return (uint32_t)x->id;
    uint32_t k;
    memcpy(&k, &x->p, sizeof k);
    return ~k;
}

/* c[0..n) sorted stably by cand_key over its low `bits` bits: an LSD radix
   sort through tmp[n]. By p (32 bits) from id order: p descending, ties by
   id ascending. */
static void radix_sort(cand *c, cand *tmp, int n, int by_id, int bits) {
    for (int shift = 0; shift < bits; shift += 8) {
        int cnt[257] = {0};
        for (int i = 0; i < n; i++) cnt[(cand_key(&c[i], by_id) >> shift & 255) + 1]++;
        for (int d = 0; d < 256; d++) cnt[d + 1] += cnt[d];
        for (int i = 0; i < n; i++) tmp[cnt[cand_key(&c[i], by_id) >> shift & 255]++] = c[i];
        memcpy(c, tmp, sizeof(cand) * (size_t)n);
    }
}

/* Top-p's candidates: below this e (relative to the top token's 1) tokens
   are left out when the ones above carry the nucleus's mass, else none is */
#define TOP_P_PREFILTER 0x1p-24f

/* c[0..n) sorted by id (ids < V): insertion for a few, else the radix sort
   over the bits the ids use */
static void sort_by_id(cand *c, cand *tmp, int n, int V) {
    if (n > 32) {
        int bits = 0;
        while ((V - 1) >> bits) bits += 8;
        radix_sort(c, tmp, n, 1, bits);
        return;
    }
    for (int i = 1; i < n; i++) {
        cand x = c[i];
        int j = i;
        for (; j > 0 && c[j - 1].id > x.id; j--) c[j] = c[j - 1];
        c[j] = x;
    }
}

/* The filtered distribution of a logits row, as weights: the softmax
   numerators e = exp((logit - max) / T), and the kept set (s->nkept: 0
   for every token, weights s->e; else s->c[0..nkept) in id order, their e
   as p) with its weight in s->mass (p = e / mass). The filters run in
   transformers' order, each on the distribution the previous one left
   (renormalised): top-k, top-p (the smallest most-probable prefix reaching
   the mass), min-p (relative to the top token); ties are ordered by id.
   Without a filter nothing is sorted; otherwise only the candidates above a
   threshold that provably holds the kept set are. */
static void filter(sampler *s, const float *logits) {
    const int V = s->vocab;
    float mx = logits[op_argmax(logits, V)];
    if (mx != mx) { /* a NaN first logit: the largest of the others */
        mx = -INFINITY;
        for (int i = 0; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    }
    float *e = s->e;
    const double esum = op_exp_sum(e, logits, V, mx, 1.0f / s->p.temperature);
    const int top_k = s->p.top_k > 0 && s->p.top_k < V ? s->p.top_k : 0;
    const int top_p = s->p.top_p < 1.0f, min_p = s->p.min_p > 0.0f;
    s->mass = esum;
    s->nkept = 0;
    if (!top_k && !top_p && !min_p) return;
    cand *c = s->c;
    /* min-p alone keeps exactly the tokens with e >= min_p (the top one's e
       is exp(0) = 1) */
    float thr = top_k ? top_k_threshold(e, V, top_k) : top_p ? TOP_P_PREFILTER : s->p.min_p;
    int n = collect(c, e, V, thr);
    if (top_p && !top_k) { /* thr is the prefilter */
        double kept = 0;
        for (int i = 0; i < n; i++) kept += c[i].p;
        if (kept < s->p.top_p * esum) n = collect(c, e, V, 0.0f); /* the nucleus reaches below */
    }
    radix_sort(c, s->c2, n, 0, 32);
    double mass = esum;
    if (top_k) {
        n = top_k;
        mass = 0;
        for (int i = 0; i < n; i++) mass += c[i].p;
    }
    if (top_p) {
        /* the smallest prefix whose mass reaches top_p (at least 1) */
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += c[i].p;
            if (cum >= s->p.top_p * mass) {
                n = i + 1;
                break;
            }
        }
    }
    if (min_p) {
        float t = s->p.min_p * c[0].p;
        int keep = 1;
        while (keep < n && c[keep].p >= t) keep++;
        n = keep;
    }
    double z = 0;
    for (int i = 0; i < n; i++) z += c[i].p;
    s->mass = z;
    s->nkept = n;
    sort_by_id(c, s->c2, n, V);
}

/* The first index where the running sum of the weights w[0..n), index skip
   left out (-1: none), passes target (the last positive one if rounding
   leaves it short). */
static int walk(const float *w, int n, int skip, double target) {
    double cum = 0;
    int last = 0;
    for (int i = 0; i < n; i++) {
        if (i == skip || !(w[i] > 0.0f)) continue;
        cum += w[i];
        last = i;
        if (target < cum) return i;
    }
    return last;
}

/* The kept token whose weight the running sum in id order passes target
   at, token skip left out (-1: none) */
static int walk_kept(const sampler *s, int skip, double target) {
    if (!s->nkept) return walk(s->e, s->vocab, skip, target);
    double cum = 0;
    int last = s->c[0].id;
    for (int i = 0; i < s->nkept; i++) {
        if (s->c[i].id == skip || !(s->c[i].p > 0.0f)) continue;
        cum += s->c[i].p;
        last = s->c[i].id;
        if (target < cum) return last;
    }
    return last;
}

/* The kept weight of token d (0 outside the kept set) */
static double kept_weight(const sampler *s, int d) {
    if (d < 0 || d >= s->vocab) return 0.0;
    if (!s->nkept) return s->e[d];
    int lo = 0, hi = s->nkept;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s->c[mid].id < d) lo = mid + 1;
        else hi = mid;
    }
    return lo < s->nkept && s->c[lo].id == d ? s->c[lo].p : 0.0;
}

int sampler_sample(sampler *s, const float *logits) {
    if (sampler_is_greedy(s)) return op_argmax(logits, s->vocab);
    filter(s, logits);
    return walk_kept(s, -1, sampler_uniform(s) * s->mass);
}

void sampler_probs(sampler *s, const float *logits, float *probs) {
    if (sampler_is_greedy(s)) {
        memset(probs, 0, sizeof(float) * (size_t)s->vocab);
        probs[op_argmax(logits, s->vocab)] = 1.0f;
        return;
    }
    filter(s, logits);
    const float inv = (float)(1.0 / s->mass);
    if (!s->nkept) {
        for (int i = 0; i < s->vocab; i++) probs[i] = s->e[i] * inv;
        return;
    }
    memset(probs, 0, sizeof(float) * (size_t)s->vocab);
    for (int i = 0; i < s->nkept; i++) probs[s->c[i].id] = s->c[i].p * inv;
}

void sampler_rows(sampler *s, const float *logits, int n, const int *draft, const double *u, int *out, int all) {
    const int V = s->vocab;
    for (int j = 0; j < n; j++) {
        if (!all && j && out[j - 1] >= 0) { /* the round ended at row j - 1 */
            out[j] = -2;
            continue;
        }
        filter(s, logits + (size_t)j * V);
        if (j == n - 1) {
            out[j] = walk_kept(s, -1, u[j] * s->mass);
            continue;
        }
        int d = draft[j];
        double pd = kept_weight(s, d);
        if (u[j] * s->mass < pd) { /* accepted: u < p(d) */
            out[j] = -1;
            continue;
        }
        double rest = s->mass - pd; /* the residual: p without d, unless that leaves nothing */
        int skip = rest > 1e-8 * s->mass ? d : -1;
        out[j] = walk_kept(s, skip, u[j + 1] * (skip < 0 ? s->mass : rest));
    }
}

int sampler_draw(sampler *s, const float *w, int n, double mass) { return walk(w, n, -1, sampler_uniform(s) * mass); }
