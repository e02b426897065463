/* stopstr: see stopstr.h. Each stop string runs a Knuth-Morris-Pratt
 * automaton over the pushed bytes, so a push costs O(bytes x stops)
 * however long the stop strings are. An automaton's state (the longest
 * suffix of the text that is a proper prefix of its string) says where the
 * earliest match of that string that could still complete would begin;
 * everything before the earliest such position (and before a complete but
 * not yet final match) is released. */
#include "text/stopstr.h"

#include <stdlib.h>
#include <string.h>

size_t utf8_cut_before(const char *s, size_t n, size_t p) {
    const unsigned char *u = (const unsigned char *)s;
    if (p > n) p = n;
    if (p < n && (u[p] & 0xC0) != 0x80) return p; /* p starts a character */
    size_t q = p;
    while (q > 0 && p - q < 3 && (u[q - 1] & 0xC0) == 0x80) q--;
    if (q == 0) return p;
    size_t lead = q - 1;
    unsigned char b = u[lead];
    size_t len = b >= 0xF0 && b < 0xF8 ? 4 : b >= 0xE0 && b < 0xF0 ? 3 : b >= 0xC0 && b < 0xE0 ? 2 : 1;
    return len > 1 && lead + len > p ? lead : p;
}

void stop_init(stop_matcher *m, const char *const *stops, int n) {
    memset(m, 0, sizeof *m);
    m->best = -1;
    m->matched = -1;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (stops[i] && stops[i][0]) k++;
    if (!k) return;
    m->stops = xcalloc((size_t)k, sizeof *m->stops);
    m->lens = xcalloc((size_t)k, sizeof *m->lens);
    m->fail = xcalloc((size_t)k, sizeof *m->fail);
    m->state = xcalloc((size_t)k, sizeof *m->state);
    for (int i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0]) continue;
        const char *p = stops[i];
        size_t len = strlen(p);
        size_t *f = xmalloc(len * sizeof *f);
        f[0] = 0;
        for (size_t j = 1, b = 0; j < len; j++) { /* prefix function */
            while (b > 0 && p[j] != p[b]) b = f[b - 1];
            if (p[j] == p[b]) b++;
            f[j] = b;
        }
        m->stops[m->n] = xstrdup(p);
        m->lens[m->n] = len;
        m->fail[m->n] = f;
        m->n++;
    }
}

/* Appends held[0..r) (cut back to a UTF-8 boundary) to out and drops it. */
static void release(stop_matcher *m, size_t r, strbuf *out) {
    r = utf8_cut_before(m->held.s, m->held.n, r);
    if (!r) return;
    sb_append(out, m->held.s, r);
    sb_consume(&m->held, r);
    m->base += r;
}

/* The winning match is final: release the text before it, drop the rest. */
static void finish_match(stop_matcher *m, strbuf *out) {
    size_t r = utf8_cut_before(m->held.s, m->held.n, m->best_at - m->base);
    sb_append(out, sb_str(&m->held), r);
    sb_free(&m->held);
    m->matched = m->best;
}

int stop_push(stop_matcher *m, const char *s, size_t n, strbuf *out) {
    if (m->matched >= 0) return 1;
    if (!m->n) {
        sb_append(out, s, n);
        return 0;
    }
    for (size_t j = 0; j < n; j++, m->pos++) {
        char c = s[j];
        for (int i = 0; i < m->n; i++) {
            const char *p = m->stops[i];
            size_t k = m->state[i];
            while (k > 0 && p[k] != c) k = m->fail[i][k - 1];
            if (p[k] == c) k++;
            if (k == m->lens[i]) {
                size_t at = m->pos + 1 - k;
                if (m->best < 0 || at < m->best_at) {
                    m->best = i;
                    m->best_at = at;
                }
                k = m->fail[i][k - 1];
            }
            m->state[i] = k;
        }
    }
    sb_append(&m->held, s, n);
    /* the earliest offset where a match could still begin */
    size_t hold = m->pos;
    for (int i = 0; i < m->n; i++)
        if (m->state[i] && m->pos - m->state[i] < hold) hold = m->pos - m->state[i];
    if (m->best >= 0) {
        if (hold >= m->best_at) {
            finish_match(m, out);
            return 1;
        }
    }
    release(m, hold - m->base, out);
    return 0;
}

void stop_flush(stop_matcher *m, strbuf *out) {
    if (m->matched >= 0) return;
    if (m->best >= 0) {
        finish_match(m, out);
        return;
    }
    if (m->held.n) sb_append(out, m->held.s, m->held.n);
    m->base += m->held.n;
    sb_clear(&m->held);
}

int stop_matched(const stop_matcher *m) { return m->matched >= 0; }

const char *stop_which(const stop_matcher *m) { return m->matched >= 0 ? m->stops[m->matched] : NULL; }

void stop_free(stop_matcher *m) {
    for (int i = 0; i < m->n; i++) {
        free(m->stops[i]);
        free(m->fail[i]);
    }
    free(m->stops);
    free(m->lens);
    free(m->fail);
    free(m->state);
    sb_free(&m->held);
    memset(m, 0, sizeof *m);
    m->best = m->matched = -1;
}
