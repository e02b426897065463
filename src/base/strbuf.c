/* strbuf: see strbuf.h. */
#include "base/strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void reserve(strbuf *b, size_t extra) {
    size_t need = b->n + extra + 1;
    if (need <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap *= 2;
    b->s = xrealloc(b->s, cap);
    b->cap = cap;
}

void sb_append(strbuf *b, const char *s, size_t n) {
    reserve(b, n);
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void sb_puts(strbuf *b, const char *s) { sb_append(b, s, strlen(s)); }

void sb_printf(strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char tmp[256];
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof tmp) {
        sb_append(b, tmp, (size_t)k);
        return;
    }
    reserve(b, (size_t)k);
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

void sb_consume(strbuf *b, size_t n) {
    if (n >= b->n) {
        sb_clear(b);
        return;
    }
    memmove(b->s, b->s + n, b->n - n);
    b->n -= n;
    b->s[b->n] = 0;
}

void sb_clear(strbuf *b) {
    b->n = 0;
    if (b->s) b->s[0] = 0;
}

void sb_free(strbuf *b) {
    free(b->s);
    b->s = NULL;
    b->n = b->cap = 0;
}

char *sb_take(strbuf *b) {
    char *s = b->s ? b->s : xstrdup("");
    b->s = NULL;
    b->n = b->cap = 0;
    return s;
}
