/* logitproc: see logitproc.h. */
#include "server/logitproc.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

enum { TH_GRAMMAR = 0, TH_START = 1, TH_INSIDE = 2 };

struct lproc {
    lproc_cfg c;
    int V;
    int *hist; /* prompt + taken ids */
    int n_hist, cap_hist, n_prompt;
    int *win, *gen; /* per id: count in the repetition window / among generated ids */
    int *touched;   /* ids whose counts were ever non-zero (apply visits only these) */
    uint8_t *is_touched;
    int n_touched;
    /* grammar */
    const gtok_trie *tr;
    gm_state *st, *saved_st;
    gm_masker *mk;
    uint64_t *bits;
    int think, saved_think, saved_n;
    char err[256];
};

int lproc_cfg_active(const lproc_cfg *c) {
    return c->presence != 0 || c->frequency != 0 || (c->repetition != 0 && c->repetition != 1 && c->rep_window) ||
           c->n_bias > 0 || c->g;
}

static void touch(lproc *p, int id) {
    if (p->is_touched[id]) return;
    p->is_touched[id] = 1;
    p->touched[p->n_touched++] = id;
}

/* the window is hist[n - W, n) after a push (W = rep_window > 0) */
static void push(lproc *p, int id) {
    if (id < 0 || id >= p->V) return;
    if (p->n_hist == p->cap_hist) {
        p->cap_hist = p->cap_hist ? 2 * p->cap_hist : 256;
        p->hist = xrealloc(p->hist, sizeof(int) * (size_t)p->cap_hist);
    }
    p->hist[p->n_hist++] = id;
    touch(p, id);
    if (p->n_hist > p->n_prompt) p->gen[id]++;
    p->win[id]++;
    int W = p->c.rep_window;
    if (W > 0 && p->n_hist > W) p->win[p->hist[p->n_hist - 1 - W]]--;
}

static void pop(lproc *p) {
    int n1 = p->n_hist, id = p->hist[--p->n_hist];
    if (n1 > p->n_prompt) p->gen[id]--;
    p->win[id]--;
    int W = p->c.rep_window;
    if (W > 0 && n1 > W) p->win[p->hist[n1 - 1 - W]]++;
}

lproc *lproc_new(const lproc_cfg *c, const gtok_trie *tr, int vocab, const int *prompt, int n) {
    lproc *p = xcalloc(1, sizeof *p);
    p->c = *c;
    p->V = vocab;
    p->win = xcalloc((size_t)vocab, sizeof(int));
    p->gen = xcalloc((size_t)vocab, sizeof(int));
    p->touched = xmalloc(sizeof(int) * (size_t)vocab);
    p->is_touched = xcalloc((size_t)vocab, 1);
    p->n_prompt = n;
    for (int i = 0; i < n; i++) push(p, prompt[i]);
    p->n_prompt = p->n_hist; /* ids outside the vocabulary are not kept */
    if (c->g) {
        p->tr = tr;
        p->st = gm_new(c->g);
        p->saved_st = gm_clone(p->st);
        p->mk = gm_masker_new(tr);
        p->bits = xmalloc(sizeof(uint64_t) * gtok_mask_words(gtok_trie_vocab(tr)));
        p->think = c->think_open >= 0 && c->think_close >= 0 ? c->think_start : TH_GRAMMAR;
    }
    p->saved_n = p->n_hist;
    p->saved_think = p->think;
    return p;
}

void lproc_free(lproc *p) {
    if (!p) return;
    free(p->hist);
    free(p->win);
    free(p->gen);
    free(p->touched);
    free(p->is_touched);
    gm_free(p->st);
    gm_free(p->saved_st);
    gm_masker_free(p->mk);
    free(p->bits);
    free(p);
}

static void lp_apply(void *self, const float *raw, float *w) {
    lproc *p = self;
    memcpy(w, raw, sizeof(float) * (size_t)p->V);
    const float r = p->c.repetition;
    const int rep = r != 0 && r != 1 && p->c.rep_window != 0;
    for (int i = 0; i < p->n_touched; i++) {
        int id = p->touched[i];
        if (rep && p->win[id] > 0) w[id] = w[id] > 0 ? w[id] / r : w[id] * r;
        if (p->gen[id] > 0) w[id] -= p->c.presence + p->c.frequency * (float)p->gen[id];
    }
    for (int i = 0; i < p->c.n_bias; i++) w[p->c.bias_id[i]] += p->c.bias[i];
}

static int lp_accept(void *self, int id) {
    lproc *p = self;
    if (id < 0 || id >= p->V) return 0;
    if (p->st) {
        if (p->think == TH_INSIDE) {
            if (id == p->c.think_close) p->think = TH_GRAMMAR;
        } else if (p->think == TH_START && id == p->c.think_open) {
            p->think = TH_INSIDE;
        } else {
            int r = gm_accept_token(p->tr, p->st, id);
            if (r < 0) snprintf(p->err, sizeof p->err, "%s", gm_error(p->st));
            if (r <= 0) return r;
            p->think = TH_GRAMMAR;
        }
    }
    push(p, id);
    return 1;
}

static int lp_mask(void *self, float *w) {
    lproc *p = self;
    if (!p->st || p->think == TH_INSIDE) return p->V;
    int tv = gtok_trie_vocab(p->tr);
    gm_token_mask(p->mk, p->st, p->bits);
    int n = 0;
    for (int i = 0; i < p->V; i++) {
        int ok = i < tv && (p->bits[i >> 6] >> (i & 63) & 1);
        if (p->think == TH_START && i == p->c.think_open) ok = 1;
        if (ok) n++;
        else w[i] = -INFINITY;
    }
    if (!n) snprintf(p->err, sizeof p->err, "the grammar allows no token here");
    return n;
}

static void lp_save(void *self) {
    lproc *p = self;
    p->saved_n = p->n_hist;
    p->saved_think = p->think;
    if (p->st) gm_copy(p->saved_st, p->st);
}

static void lp_restore(void *self) {
    lproc *p = self;
    while (p->n_hist > p->saved_n) pop(p);
    p->think = p->saved_think;
    if (p->st) gm_copy(p->st, p->saved_st);
}

static const char *lp_error(void *self) { return ((lproc *)self)->err; }

logit_proc lproc_iface(lproc *p) {
    return (logit_proc){.self = p, .apply = lp_apply, .accept = lp_accept, .mask = lp_mask, .save = lp_save,
                        .restore = lp_restore, .error = lp_error};
}
