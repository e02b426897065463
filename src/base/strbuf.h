/* strbuf: a growable byte buffer (always NUL-terminated) for building
 * response bodies and streaming text. Allocation failure aborts (xmalloc). */
#ifndef DS_STRBUF_H
#define DS_STRBUF_H

#include <stdarg.h>
#include <stddef.h>

#include "base/util.h"

typedef struct {
    char *s;   /* NUL-terminated; NULL until the first append */
    size_t n;  /* bytes used (without the NUL) */
    size_t cap;
} strbuf;

void sb_append(strbuf *b, const char *s, size_t n);
void sb_puts(strbuf *b, const char *s);
void sb_printf(strbuf *b, const char *fmt, ...) DS_PRINTF(2, 3);
/* Drops the first n bytes (n <= b->n). */
void sb_consume(strbuf *b, size_t n);
void sb_clear(strbuf *b);  /* keeps the allocation */
void sb_free(strbuf *b);
/* The text ("" when empty); valid until the next append. */
static inline const char *sb_str(const strbuf *b) { return b->s ? b->s : ""; }
/* Hands the string to the caller (malloc'd, "" when empty) and resets b. */
char *sb_take(strbuf *b);

#endif
