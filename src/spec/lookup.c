/* lookup: see lookup.h. */
#include "spec/lookup.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

typedef struct {
    uint64_t key; /* 0 = empty */
    int pos;      /* index of the id after the n-gram's most recent occurrence */
} slot;

#define LOOKUP_MAX_W 64 /* verify widths kept from lookup_set_costs */
/* Sized drafts: from an n-gram match at most SHORT_CAP ids; from a copy
   run (the match goes on back at least LONG_MATCH ids, followed up to
   LONG_SPAN) up to twice its length, within the cap the loop gives. */
#define SHORT_CAP 8
#define LONG_MATCH 8
#define LONG_SPAN 64

struct lookup {
    int nmax, nmin;
    int *ids;
    int n, cap;
    slot *tab;
    size_t tcap, used; /* tcap a power of two */
    /* match-sized drafts: verify times by width, and per match order the
       accepted drafts and the rejections seen; the last proposal (order,
       length, ids) waits for its commit */
    double t[LOOKUP_MAX_W];
    int n_t;
    long acc[LOOKUP_LONG + 1], rej[LOOKUP_LONG + 1]; /* by match order, LOOKUP_LONG for copy runs */
    int last_g, last_m, *last;
    int last_cap;
};

/* Prior per-draft acceptance of a g-gram match and its weight in rounds.
   Measured with lookup over raw completions of this repository's Python
   tools by the bundled code model: about 0.3 for unigram matches, 0.45
   for bigrams and 0.8 for trigrams and longer; 0.9 for copy runs, below
   what the held-out prompts' outputs give (0.99 per draft in copy runs,
   tools/lookup_sim.py's replay; 0.55 / 0.73 / 0.83 for shorter matches). */
static double prior_acc(int g) { return g <= 1 ? 0.3 : g == 2 ? 0.45 : g == LOOKUP_LONG ? 0.9 : 0.8; }
#define PRIOR_ROUNDS 8.0

static uint64_t ngram_key(const int *ids, int n) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n;
    for (int i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)ids[i];
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 33;
    }
    return h ? h : 1;
}

static slot *find(lookup *l, uint64_t key) {
    size_t m = l->tcap - 1;
    for (size_t i = (size_t)key & m;; i = (i + 1) & m)
        if (l->tab[i].key == key || l->tab[i].key == 0) return &l->tab[i];
}

static void grow(lookup *l) {
    slot *old = l->tab;
    size_t oc = l->tcap;
    l->tcap = oc ? oc * 2 : 1024;
    l->tab = xcalloc(l->tcap, sizeof(slot));
    for (size_t i = 0; i < oc; i++)
        if (old[i].key) *find(l, old[i].key) = old[i];
    free(old);
}

lookup *lookup_create(int ngram_max, int ngram_min) {
    lookup *l = xcalloc(1, sizeof *l);
    if (ngram_max > LOOKUP_MAX_NGRAM) ngram_max = LOOKUP_MAX_NGRAM;
    if (ngram_max < 1) ngram_max = 1;
    if (ngram_min < 1) ngram_min = 1;
    if (ngram_min > ngram_max) ngram_min = ngram_max;
    l->nmax = ngram_max;
    l->nmin = ngram_min;
    grow(l);
    return l;
}

void lookup_free(lookup *l) {
    if (!l) return;
    free(l->last);
    free(l->ids);
    free(l->tab);
    free(l);
}

int lookup_len(const lookup *l) { return l->n; }

void lookup_reset(lookup *l, const int *ids, int n) {
    l->n = 0;
    memset(l->tab, 0, l->tcap * sizeof(slot));
    l->used = 0;
    lookup_push(l, ids, n);
}

void lookup_push(lookup *l, const int *ids, int n) {
    for (int j = 0; j < n; j++) {
        if (l->n == l->cap) {
            l->cap = l->cap ? l->cap * 2 : 256;
            l->ids = xrealloc(l->ids, sizeof(int) * (size_t)l->cap);
        }
        int i = l->n;
        l->ids[l->n++] = ids[j];
        /* the n-grams ending just before i now have a follower: ids[i] */
        for (int g = l->nmin; g <= l->nmax && g <= i; g++) {
            if ((l->used + 1) * 2 > l->tcap) grow(l);
            slot *s = find(l, ngram_key(l->ids + i - g, g));
            if (!s->key) {
                s->key = ngram_key(l->ids + i - g, g);
                l->used++;
            }
            s->pos = i;
        }
    }
}

/* lookup_propose, also giving how far back the match runs (g, or more up
   to LONG_SPAN: the ids before both occurrences that agree too) */
static int match(lookup *l, int k, int *out, int *n_used, int *run) {
    *n_used = 0;
    *run = 0;
    for (int g = l->nmax; g >= l->nmin; g--) {
        if (g > l->n) continue;
        const int *suf = l->ids + l->n - g;
        slot *s = find(l, ngram_key(suf, g));
        if (!s->key) continue;
        int e = s->pos; /* ids[e-g..e) is the occurrence, e < n */
        if (memcmp(l->ids + e - g, suf, sizeof(int) * (size_t)g) != 0) continue; /* hash collision */
        int r = g;
        while (r < LONG_SPAN && e - r - 1 >= 0 && l->ids[e - r - 1] == l->ids[l->n - r - 1]) r++;
        int m = l->n - e < k ? l->n - e : k;
        memcpy(out, l->ids + e, sizeof(int) * (size_t)m);
        *n_used = g;
        *run = r;
        return m;
    }
    return 0;
}

int lookup_propose(lookup *l, int k, int *out, int *n_used) {
    int g, run, m = match(l, k, out, &g, &run);
    if (n_used) *n_used = g;
    return m;
}

void lookup_set_costs(lookup *l, const double *t, int n) {
    if (n > LOOKUP_MAX_W) n = LOOKUP_MAX_W;
    l->n_t = 0;
    for (int i = 0; i < n; i++) {
        if (!(t[i] > 0)) break; /* widths past a missing time are not used */
        l->t[i] = t[i];
        l->n_t = i + 1;
    }
}

int lookup_draft_len(const lookup *l, int g, int k) {
    if (l->n_t < 2 || k <= 0) return k < 0 ? 0 : k;
    if (g < 0) g = 0;
    if (g > LOOKUP_LONG) g = LOOKUP_LONG;
    double a = (l->acc[g] + PRIOR_ROUNDS * prior_acc(g)) / (l->acc[g] + l->rej[g] + PRIOR_ROUNDS);
    double best = 1.0 / l->t[0], e = 1, p = 1;
    int best_L = 0;
    for (int L = 1; L <= k && L < l->n_t; L++) {
        p *= a;
        e += p;
        double r = e / l->t[L];
        if (r > best * (1 + 1e-12)) {
            best = r;
            best_L = L;
        }
    }
    return best_L;
}

static int d_reset(void *self, const int *ids, int n) {
    lookup *l = self;
    lookup_reset(l, ids, n);
    memset(l->acc, 0, sizeof l->acc);
    memset(l->rej, 0, sizeof l->rej);
    l->last_m = 0;
    return n;
}
static int d_propose(void *self, int k, int *draft, float *q) {
    (void)q;
    lookup *l = self;
    int g, run, m = match(l, k, draft, &g, &run);
    l->last_m = 0;
    if (m <= 0 || l->n_t < 2) return m;
    if (run >= LONG_MATCH) {
        g = LOOKUP_LONG;
        if (m > 2 * run) m = 2 * run;
    } else if (m > SHORT_CAP) {
        m = SHORT_CAP;
    }
    m = lookup_draft_len(l, g, m);
    if (m == 0) return 0;
    if (m > l->last_cap) { /* kept to learn from the commit */
        l->last = xrealloc(l->last, sizeof(int) * (size_t)m);
        l->last_cap = m;
    }
    memcpy(l->last, draft, sizeof(int) * (size_t)m);
    l->last_g = g;
    l->last_m = m;
    return m;
}
/* ids: the round's emitted tokens (accepted drafts, then the target's
   own); a draft that disagrees with them was rejected */
static void d_commit(void *self, const int *ids, int n) {
    lookup *l = self;
    if (l->last_m > 0) {
        int a = 0;
        while (a < l->last_m && a < n && ids[a] == l->last[a]) a++;
        l->acc[l->last_g] += a;
        if (a < l->last_m && a < n) l->rej[l->last_g]++;
        l->last_m = 0;
    }
    lookup_push(l, ids, n);
}

drafter lookup_drafter(lookup *l) {
    drafter d = {.self = l, .deterministic = 1, .reset = d_reset, .propose = d_propose, .commit = d_commit};
    return d;
}

/* ---- hybrid: lookup's copy runs inside a neural drafter's rounds ---- */

struct lookup_hybrid {
    lookup *l;
    drafter inner;
    int vocab, last_lookup;
    int rounds; /* proposals from lookup since the reset */
    int probed; /* 1: lookup_hybrid_ready found no copy run since the context last changed */
};

static int copy_run(lookup *l, int k, int *out) {
    int g, run, m = match(l, k, out, &g, &run);
    return m > 0 && run >= LOOKUP_HYBRID_RUN ? m : 0;
}

static int h_reset(void *self, const int *ids, int n) {
    lookup_hybrid *h = self;
    lookup_reset(h->l, ids, n);
    h->last_lookup = 0;
    h->rounds = 0;
    h->probed = 0;
    return h->inner.reset(h->inner.self, ids, n);
}
/* lookup's copy run for this round into draft (0: none, the drafter's
   turn), counted */
static int h_copy(lookup_hybrid *h, int k, int *draft) {
    int m = h->probed ? 0 : copy_run(h->l, k, draft); /* the cap's probe already looked */
    h->last_lookup = m > 0;
    h->rounds += m > 0;
    return m;
}
static int h_propose(void *self, int k, int *draft, float *q) {
    lookup_hybrid *h = self;
    int m = h_copy(h, k, draft);
    if (!m) return h->inner.propose(h->inner.self, k, draft, q);
    if (q) /* a deterministic draft: q one-hot at it */
        for (int i = 0; i < m; i++) {
            float *qi = q + (size_t)i * (size_t)h->vocab;
            memset(qi, 0, sizeof(float) * (size_t)h->vocab);
            qi[draft[i]] = 1.0f;
        }
    return m;
}
/* the same on the device: lookup's copy is deterministic (q one-hot, no
   uniforms), else the inner drafter's device proposal */
static int h_propose_resident(void *self, int k, int *draft, const double *u, int *used, model_draft_q *q) {
    lookup_hybrid *h = self;
    int m = h_copy(h, k, draft);
    if (!m) return h->inner.propose_resident(h->inner.self, k, draft, u, used, q);
    *used = 0;
    *q = (model_draft_q){0};
    return m;
}
static void h_commit(void *self, const int *ids, int n) {
    lookup_hybrid *h = self;
    lookup_push(h->l, ids, n);
    h->probed = 0;
    h->inner.commit(h->inner.self, ids, n);
}
static void h_features(void *self, int pos0, int n, const float *taps, int rows, int row0) {
    lookup_hybrid *h = self;
    h->inner.features(h->inner.self, pos0, n, taps, rows, row0);
}

static void h_features_resident(void *self, int pos0, int n, const float *taps, int rows, int row0) {
    lookup_hybrid *h = self;
    h->inner.features_resident(h->inner.self, pos0, n, taps, rows, row0);
}

lookup_hybrid *lookup_hybrid_create(drafter inner, int vocab) {
    lookup_hybrid *h = xcalloc(1, sizeof *h);
    h->l = lookup_create(3, 1);
    h->inner = inner;
    h->vocab = vocab;
    return h;
}

void lookup_hybrid_free(lookup_hybrid *h) {
    if (!h) return;
    lookup_free(h->l);
    free(h);
}

/* every method named: a copy of the inner drafter would hand the hybrid,
   as self, to any method not wrapped here */
drafter lookup_hybrid_drafter(lookup_hybrid *h) {
    const drafter *in = &h->inner;
    drafter d = {.self = h,
                 .deterministic = in->deterministic,
                 .n_taps = in->n_taps,
                 .tap_layers = in->tap_layers,
                 .reset = h_reset,
                 .propose = h_propose,
                 .commit = h_commit,
                 .features = in->features ? h_features : NULL,
                 .features_resident = in->features_resident ? h_features_resident : NULL,
                 .propose_resident = in->propose_resident ? h_propose_resident : NULL};
    return d;
}

int lookup_hybrid_ready(lookup_hybrid *h) {
    int one, ready = copy_run(h->l, 1, &one) > 0;
    h->probed = !ready;
    return ready;
}

int lookup_hybrid_last_was_lookup(const lookup_hybrid *h) { return h->last_lookup; }

int lookup_hybrid_rounds(const lookup_hybrid *h) { return h->rounds; }
