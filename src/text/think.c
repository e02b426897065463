/* think: see think.h. The streaming splitter is a small state machine over
 * a buffer of held bytes; each push appends to the buffer and then runs the
 * machine until it needs more text. think_split_all is written separately,
 * directly from the rules, so the tests can check one against the other. */
#include "text/think.h"

#include <string.h>

#include "text/stopstr.h"

enum {
    TS_OFF,     /* no markers: everything is answer */
    TS_PENDING, /* not prefilled, first non-whitespace bytes not seen yet */
    TS_RSTART,  /* just inside a block: dropping newlines */
    TS_REASON,  /* inside a block */
    TS_ASTART,  /* after the closer: dropping whitespace */
    TS_ANSWER,  /* answer, passed through */
};

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

void think_init(think_split *t, const char *open, const char *close, int prefilled) {
    memset(t, 0, sizeof *t);
    if (!open || !*open || !close || !*close) {
        t->state = TS_OFF;
        return;
    }
    t->open = open;
    t->close = close;
    t->open_len = strlen(open);
    t->close_len = strlen(close);
    t->state = prefilled ? TS_RSTART : TS_PENDING;
}

/* Appends held[0..r) to out and drops it from held. */
static void emit(think_split *t, size_t r, strbuf *out) {
    if (!r) return;
    sb_append(out, t->held.s, r);
    sb_consume(&t->held, r);
}

static size_t trim_end(const char *s, size_t n) {
    while (n > 0 && is_ws(s[n - 1])) n--;
    return n;
}

static void run(think_split *t, strbuf *reason, strbuf *answer, int final) {
    for (;;) {
        strbuf *h = &t->held;
        switch (t->state) {
        case TS_OFF:
        case TS_ANSWER:
            emit(t, final ? h->n : utf8_cut_before(h->s, h->n, h->n), answer);
            return;
        case TS_ASTART: {
            size_t i = 0;
            while (i < h->n && is_ws(h->s[i])) i++;
            sb_consume(h, i);
            if (!h->n) return;
            t->state = TS_ANSWER;
            break;
        }
        case TS_PENDING: {
            size_t i = 0;
            while (i < h->n && is_ws(h->s[i])) i++;
            size_t rest = h->n - i;
            if (!rest && !final) return;
            if (rest >= t->open_len && !memcmp(h->s + i, t->open, t->open_len)) {
                sb_consume(h, i + t->open_len);
                t->state = TS_RSTART;
            } else if (!final && rest < t->open_len && !memcmp(h->s + i, t->open, rest)) {
                return; /* may still become the opener */
            } else {
                t->state = TS_ANSWER; /* no block: all of it, verbatim */
            }
            break;
        }
        case TS_RSTART: {
            size_t i = 0;
            while (i < h->n && (h->s[i] == '\n' || h->s[i] == '\r')) i++;
            sb_consume(h, i);
            if (!h->n) return;
            t->state = TS_REASON;
            break;
        }
        case TS_REASON: {
            const char *c = h->n ? memmem(h->s, h->n, t->close, t->close_len) : NULL;
            if (c) {
                size_t at = (size_t)(c - h->s);
                sb_append(reason, h->s, trim_end(h->s, at));
                sb_consume(h, at + t->close_len);
                t->state = TS_ASTART;
                break;
            }
            if (final) {
                sb_append(reason, sb_str(h), trim_end(sb_str(h), h->n));
                sb_clear(h);
                return;
            }
            /* hold the longest tail that begins the closer ... */
            size_t keep = t->close_len - 1 < h->n ? t->close_len - 1 : h->n;
            for (; keep > 0; keep--)
                if (!memcmp(h->s + h->n - keep, t->close, keep)) break;
            /* ... the whitespace before it, and a split UTF-8 sequence */
            size_t r = trim_end(h->s, h->n - keep);
            emit(t, utf8_cut_before(h->s, h->n, r), reason);
            return;
        }
        }
    }
}

void think_push(think_split *t, const char *s, size_t n, strbuf *reason, strbuf *answer) {
    if (!n) return;
    sb_append(&t->held, s, n);
    run(t, reason, answer, 0);
}

void think_finish(think_split *t, strbuf *reason, strbuf *answer) { run(t, reason, answer, 1); }

int think_in_reasoning(const think_split *t) { return t->state == TS_RSTART || t->state == TS_REASON; }

void think_free(think_split *t) { sb_free(&t->held); }

int think_markers_for_template(const char *src, const char **open, const char **close) {
    if (src && strstr(src, "<think>")) {
        *open = "<think>";
        *close = "</think>";
        return 1;
    }
    if (src && strstr(src, "<|channel>")) {
        *open = "<|channel>thought\n";
        *close = "<channel|>";
        return 1;
    }
    *open = *close = NULL;
    return 0;
}

/* Offset of the last occurrence of pat in s[0..n), or -1. */
static long last_of(const char *s, size_t n, const char *pat, size_t m) {
    if (!m || m > n) return -1;
    for (size_t i = n - m + 1; i-- > 0;)
        if (s[i] == pat[0] && !memcmp(s + i, pat, m)) return (long)i;
    return -1;
}

int think_prompt_prefilled(const char *prompt, size_t n, const char *open, const char *close) {
    if (!open || !*open || !close || !*close || !prompt) return 0;
    size_t m = strlen(open);
    long at = last_of(prompt, n, open, m);
    if (at < 0) return 0;
    for (size_t i = (size_t)at + m; i < n; i++)
        if (!is_ws(prompt[i])) return 0;
    return 1;
}

void think_split_all(const char *text, size_t n, const char *open, const char *close, int prefilled, strbuf *reason,
                     strbuf *answer) {
    if (!text) {
        text = "";
        n = 0;
    }
    if (!open || !*open || !close || !*close) {
        sb_append(answer, text, n);
        return;
    }
    size_t ol = strlen(open), cl = strlen(close), b = 0;
    if (!prefilled) {
        size_t i = 0;
        while (i < n && is_ws(text[i])) i++;
        if (n - i >= ol && !memcmp(text + i, open, ol)) {
            b = i + ol;
        } else {
            const char *c = n ? memmem(text, n, close, cl) : NULL;
            if (!c || memmem(text, (size_t)(c - text), open, ol)) {
                sb_append(answer, text, n);
                return;
            }
            /* a closer with no opener before it: as if prefilled */
        }
    }
    while (b < n && (text[b] == '\n' || text[b] == '\r')) b++;
    const char *c = memmem(text + b, n - b, close, cl);
    size_t end = c ? (size_t)(c - text) : n;
    sb_append(reason, text + b, trim_end(text + b, end - b));
    if (!c) return;
    size_t a = end + cl;
    while (a < n && is_ws(text[a])) a++;
    sb_append(answer, text + a, n - a);
}
