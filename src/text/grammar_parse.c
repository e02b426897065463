/* grammar_parse: the GBNF-style text form of grammar.h, read into the
 * builder (gb_*). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "text/grammar.h"

#define MAX_NEST 200

typedef struct {
    const char *s;
    size_t n, i;
    gram_builder *b;
    int failed;
    char *err;
    size_t errlen;
    int depth;
    /* where each rule is first used, for "not defined" errors */
    size_t *use_at;
    int nuse;
} gp;

static int gp_fail(gp *p, size_t at, const char *fmt, ...) DS_PRINTF(3, 4);
static int gp_fail(gp *p, size_t at, const char *fmt, ...) {
    if (p->failed) return -1;
    p->failed = 1;
    int line = 1, col = 1;
    for (size_t k = 0; k < at && k < p->n; k++) {
        if (p->s[k] == '\n') line++, col = 1;
        else col++;
    }
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ds_err(p->err, p->errlen, "line %d, column %d: %s", line, col, msg);
    return -1;
}

static int is_name(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static int peek(const gp *p) { return p->i < p->n ? (unsigned char)p->s[p->i] : -1; }

/* Skips spaces, tabs, newlines and # comments. */
static void skip_ws(gp *p) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            p->i++;
        } else if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        } else {
            break;
        }
    }
}

static void skip_blank(gp *p) { /* spaces and tabs only */
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t')) p->i++;
}

/* 1 if at `name ::=` (the start of the next rule). */
static int at_rule_start(const gp *p) {
    size_t k = p->i;
    if (k >= p->n || !is_name((unsigned char)p->s[k])) return 0;
    while (k < p->n && is_name((unsigned char)p->s[k])) k++;
    while (k < p->n && (p->s[k] == ' ' || p->s[k] == '\t')) k++;
    return k + 3 <= p->n && !memcmp(p->s + k, "::=", 3);
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes one UTF-8 character at p->i; -1 if invalid. */
static long read_utf8(gp *p) {
    const unsigned char *s = (const unsigned char *)p->s + p->i;
    size_t left = p->n - p->i;
    unsigned c = s[0];
    int len = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    if (!len || (size_t)len > left) return -1;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    static const uint32_t minv[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < minv[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    p->i += (size_t)len;
    return (long)cp;
}

/* An escape after '\\' (p->i at the letter). *is_byte: \x gives a byte in
 * literals. Returns the value or -1. */
static long read_escape(gp *p, int *is_byte) {
    size_t at = p->i - 1;
    int c = peek(p);
    *is_byte = 0;
    if (c < 0) return gp_fail(p, at, "unterminated escape");
    p->i++;
    switch (c) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '\\': case '"': case '\'': case ']': case '[': case '-': case '^': return c;
    case 'x': case 'u': case 'U': {
        int nd = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        long v = 0;
        for (int k = 0; k < nd; k++) {
            int h = p->i < p->n ? hexval((unsigned char)p->s[p->i]) : -1;
            if (h < 0) return gp_fail(p, at, "\\%c needs %d hex digits", c, nd);
            v = v * 16 + h;
            p->i++;
        }
        if (c == 'x') {
            *is_byte = 1;
            return v;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return gp_fail(p, at, "\\%c%0*lX is not a Unicode scalar value", c, nd, v);
        return v;
    }
    default:
        return gp_fail(p, at, "unknown escape \\%c", c);
    }
}

static void put_utf8(char *o, int *n, uint32_t cp) {
    if (cp < 0x80) {
        o[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        o[(*n)++] = (char)(0xC0 | (cp >> 6));
        o[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        o[(*n)++] = (char)(0xE0 | (cp >> 12));
        o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        o[(*n)++] = (char)(0xF0 | (cp >> 18));
        o[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*n)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int parse_literal(gp *p) {
    size_t at = p->i++;
    size_t cap = 64, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (p->i >= p->n) {
            free(buf);
            return gp_fail(p, at, "unterminated literal");
        }
        if (n + 8 > cap) buf = xrealloc(buf, cap *= 2);
        char c = p->s[p->i++];
        if (c == '"') break;
        if (c == '\\') {
            int is_byte;
            long v = read_escape(p, &is_byte);
            if (v < 0) {
                free(buf);
                return -1;
            }
            if (is_byte) {
                buf[n++] = (char)v;
            } else {
                int k = 0;
                put_utf8(buf + n, &k, (uint32_t)v);
                n += (size_t)k;
            }
        } else {
            buf[n++] = c;
        }
    }
    int e = n ? gb_lit(p->b, buf, n) : gb_seq(p->b, NULL, 0);
    free(buf);
    return e;
}

static long class_char(gp *p) {
    if (p->i >= p->n) return -2;
    if (p->s[p->i] == '\\') {
        p->i++;
        int is_byte;
        return read_escape(p, &is_byte);
    }
    size_t at = p->i;
    long cp = read_utf8(p);
    if (cp < 0) return gp_fail(p, at, "invalid UTF-8 in a character class");
    return cp;
}

static int parse_class(gp *p) {
    size_t at = p->i++;
    int neg = 0;
    if (peek(p) == '^') neg = 1, p->i++;
    size_t cap = 16;
    int np = 0;
    uint32_t *rg = xmalloc(cap * sizeof *rg);
    int e = -1;
    for (;;) {
        if (p->i >= p->n) {
            gp_fail(p, at, "unterminated character class");
            goto out;
        }
        if (p->s[p->i] == ']') {
            p->i++;
            break;
        }
        size_t at_item = p->i;
        long lo = class_char(p), hi = lo;
        if (lo < 0) {
            if (lo == -2) gp_fail(p, at, "unterminated character class");
            goto out;
        }
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            hi = class_char(p);
            if (hi < 0) {
                if (hi == -2) gp_fail(p, at, "unterminated character class");
                goto out;
            }
            if (hi < lo) {
                gp_fail(p, at_item, "class range out of order (U+%04lX after U+%04lX)", hi, lo);
                goto out;
            }
        }
        if ((size_t)np * 2 + 2 > cap) rg = xrealloc(rg, (cap *= 2) * sizeof *rg);
        rg[2 * np] = (uint32_t)lo;
        rg[2 * np + 1] = (uint32_t)hi;
        np++;
    }
    e = gb_class(p->b, rg, np, neg);
out:
    free(rg);
    return e;
}

static int read_int(gp *p, int *v) {
    size_t at = p->i;
    long x = 0;
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return gp_fail(p, at, "expected a number");
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        x = x * 10 + (p->s[p->i++] - '0');
        if (x > GRAMMAR_MAX_REPEAT) return gp_fail(p, at, "repetition count above %d", GRAMMAR_MAX_REPEAT);
    }
    *v = (int)x;
    return 0;
}

static int parse_alt(gp *p);

static int parse_primary(gp *p) {
    int c = peek(p);
    size_t at = p->i;
    if (c == '"') return parse_literal(p);
    if (c == '[') return parse_class(p);
    if (c == '.') {
        p->i++;
        uint32_t all[2] = {0, 0x10FFFF};
        return gb_class(p->b, all, 1, 0);
    }
    if (c == '(') {
        if (++p->depth > MAX_NEST) return gp_fail(p, at, "parentheses nested deeper than %d", MAX_NEST);
        p->i++;
        int e = parse_alt(p);
        p->depth--;
        if (e < 0) return -1;
        skip_ws(p);
        if (peek(p) != ')') return gp_fail(p, at, "unclosed '('");
        p->i++;
        return e;
    }
    if (c >= 0 && is_name(c)) {
        size_t k = p->i;
        while (p->i < p->n && is_name((unsigned char)p->s[p->i])) p->i++;
        char name[128];
        if (p->i - k >= sizeof name) return gp_fail(p, at, "rule name too long");
        memcpy(name, p->s + k, p->i - k);
        name[p->i - k] = 0;
        int r = gb_rule(p->b, name);
        if (r < 0) return gp_fail(p, at, "bad rule name");
        if (r >= p->nuse) {
            p->use_at = xrealloc(p->use_at, (size_t)(r + 1) * sizeof *p->use_at);
            while (p->nuse <= r) p->use_at[p->nuse++] = (size_t)-1;
        }
        if (p->use_at[r] == (size_t)-1) p->use_at[r] = at;
        return gb_ref(p->b, r);
    }
    if (c < 0) return gp_fail(p, at, "unexpected end of grammar (expected an expression)");
    return gp_fail(p, at, "unexpected '%c' (expected an expression)", c);
}

static int parse_item(gp *p) {
    int e = parse_primary(p);
    while (e >= 0) {
        skip_blank(p);
        int c = peek(p);
        size_t at = p->i;
        if (c == '?') {
            p->i++;
            e = gb_rep(p->b, e, 0, 1);
        } else if (c == '*') {
            p->i++;
            e = gb_rep(p->b, e, 0, -1);
        } else if (c == '+') {
            p->i++;
            e = gb_rep(p->b, e, 1, -1);
        } else if (c == '{') {
            p->i++;
            skip_blank(p);
            int m, n;
            if (read_int(p, &m) < 0) return -1;
            skip_blank(p);
            n = m;
            if (peek(p) == ',') {
                p->i++;
                skip_blank(p);
                n = -1;
                if (peek(p) != '}' && read_int(p, &n) < 0) return -1;
                skip_blank(p);
            }
            if (peek(p) != '}') return gp_fail(p, p->i, "expected '}' in a repetition");
            p->i++;
            if (n >= 0 && n < m) return gp_fail(p, at, "repetition {%d,%d}: the maximum is below the minimum", m, n);
            e = gb_rep(p->b, e, m, n);
        } else {
            break;
        }
        if (e < 0) return gp_fail(p, at, "bad repetition");
    }
    return e;
}

static int parse_seq(gp *p) {
    int cap = 8, n = 0;
    int *items = xmalloc((size_t)cap * sizeof *items);
    for (;;) {
        skip_ws(p);
        int c = peek(p);
        if (c < 0 || c == '|' || c == ')' || at_rule_start(p)) break;
        int e = parse_item(p);
        if (e < 0) {
            free(items);
            return -1;
        }
        if (n == cap) items = xrealloc(items, (size_t)(cap *= 2) * sizeof *items);
        items[n++] = e;
    }
    int e = gb_seq(p->b, items, n);
    free(items);
    return e;
}

static int parse_alt(gp *p) {
    int cap = 4, n = 0;
    int *items = xmalloc((size_t)cap * sizeof *items);
    for (;;) {
        int e = parse_seq(p);
        if (e < 0) {
            free(items);
            return -1;
        }
        if (n == cap) items = xrealloc(items, (size_t)(cap *= 2) * sizeof *items);
        items[n++] = e;
        skip_ws(p);
        if (peek(p) != '|') break;
        p->i++;
    }
    int e = gb_alt(p->b, items, n);
    free(items);
    return e;
}

grammar *grammar_parse(const char *text, size_t len, const char *root, char *err, size_t errlen) {
    gp p = {.s = text, .n = len, .b = gb_new(), .err = err, .errlen = errlen};
    grammar *g = NULL;
    skip_ws(&p);
    while (p.i < p.n && !p.failed) {
        size_t at = p.i;
        if (!is_name((unsigned char)p.s[p.i])) {
            gp_fail(&p, at, "expected a rule name");
            break;
        }
        if (!at_rule_start(&p)) {
            gp_fail(&p, at, "expected '::=' after the rule name");
            break;
        }
        size_t k = p.i;
        while (is_name((unsigned char)p.s[p.i])) p.i++;
        char name[128];
        if (p.i - k >= sizeof name) {
            gp_fail(&p, at, "rule name too long");
            break;
        }
        memcpy(name, p.s + k, p.i - k);
        name[p.i - k] = 0;
        skip_blank(&p);
        p.i += 3;
        int r = gb_rule(p.b, name);
        int e = parse_alt(&p);
        if (e < 0 || r < 0) {
            if (!p.failed) gp_fail(&p, at, "rule '%s': %s", name, "bad expression");
            break;
        }
        skip_ws(&p);
        if (p.i < p.n && peek(&p) == ')') {
            gp_fail(&p, p.i, "unbalanced ')'");
            break;
        }
        if (gb_define(p.b, r, e) < 0) {
            gp_fail(&p, at, "rule '%s' is defined twice", name);
            break;
        }
    }
    if (!p.failed) {
        char berr[256] = "";
        g = gb_build(p.b, root, berr, sizeof berr);
        if (!g) {
            /* name the place of an undefined rule's first use */
            const char *q = strstr(berr, "' is referenced but not defined");
            if (q && !strncmp(berr, "rule '", 6)) {
                char name[128];
                size_t l = (size_t)(q - berr - 6);
                if (l < sizeof name) {
                    memcpy(name, berr + 6, l);
                    name[l] = 0;
                    int r = gb_rule(p.b, name);
                    if (r >= 0 && r < p.nuse && p.use_at[r] != (size_t)-1) {
                        gp_fail(&p, p.use_at[r], "%s", berr);
                        berr[0] = 0;
                    }
                }
            }
            if (berr[0]) ds_err(err, errlen, "%s", berr);
        }
    }
    free(p.use_at);
    gb_free(p.b);
    return g;
}
