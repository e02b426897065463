/* jinja_lex: splits a template into tokens the way Jinja2's lexer does with
 * trim_blocks and lstrip_blocks on: data, {{ }}, {% %} (with - and +
 * whitespace control), comments, {% raw %} blocks, and inside tags names,
 * numbers, string literals (Python escapes) and operators. A single
 * trailing newline of the template is dropped (keep_trailing_newline off),
 * and \r\n / \r in data become \n. */
#include "text/jinja_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

typedef struct {
    const char *s;
    size_t n, pos;
    int line;
    size_t line_start;
    jtok *t;
    size_t nt, cap;
    const char *name;
    char *err;
    size_t errlen;
    int line_starting;
    size_t cache_pos;
    int cache_line;
} lexer;

static int col_of(lexer *L, size_t pos) {
    /* recompute line/col from scratch for the given position */
    int col = 1;
    for (size_t i = pos; i > 0 && L->s[i - 1] != '\n'; i--) col++;
    return col;
}
static int line_of(lexer *L, size_t pos) {
    if (pos < L->cache_pos) { L->cache_pos = 0; L->cache_line = 1; }
    int line = L->cache_line;
    for (size_t i = L->cache_pos; i < pos && i < L->n; i++)
        if (L->s[i] == '\n') line++;
    L->cache_pos = pos;
    L->cache_line = line;
    return line;
}

static int lex_fail(lexer *L, size_t pos, const char *msg) {
    return ds_err(L->err, L->errlen, "%s:%d:%d: syntax error: %s", L->name, line_of(L, pos), col_of(L, pos), msg);
}

static jtok *push(lexer *L, jtok_type t, size_t pos) {
    if (L->nt == L->cap) {
        L->cap = L->cap ? L->cap * 2 : 64;
        L->t = xrealloc(L->t, L->cap * sizeof(jtok));
    }
    jtok *k = &L->t[L->nt++];
    memset(k, 0, sizeof *k);
    k->t = t;
    k->line = line_of(L, pos);
    k->col = col_of(L, pos);
    return k;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Python str.rstrip() length of s[0..n) */
static size_t rstrip_len(const char *s, size_t n) {
    while (n > 0) {
        /* step back one code point */
        size_t i = n - 1;
        while (i > 0 && ((unsigned char)s[i] & 0xc0) == 0x80) i--;
        uint32_t cp;
        ju_decode(s, n, i, &cp);
        if (!ju_isspace(cp)) break;
        n = i;
    }
    return n;
}
static int all_space(const char *s, size_t n) {
    if (n == 0) return 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += ju_decode(s, n, i, &cp);
        if (!ju_isspace(cp)) return 0;
    }
    return 1;
}

static void push_data(lexer *L, size_t start, const char *s, size_t n) {
    if (n == 0) return;
    jtok *k = push(L, JT_DATA, start);
    jbuf b = {0};
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\r') {
            jbuf_putc(&b, '\n');
            if (i + 1 < n && s[i + 1] == '\n') i++;
        } else jbuf_putc(&b, s[i]);
    }
    k->s = b.p ? b.p : xstrdup("");
    k->n = b.n;
}

/* Applies - / lstrip_blocks to the data before a tag, then emits it. */
static void emit_text(lexer *L, size_t start, size_t end, char sign, int is_block) {
    const char *s = L->s + start;
    size_t n = end - start;
    if (sign == '-') n = rstrip_len(s, n);
    else if (sign != '+' && is_block) {
        size_t lpos = 0;
        for (size_t i = n; i > 0; i--)
            if (s[i - 1] == '\n') { lpos = i; break; }
        if ((lpos > 0 || L->line_starting) && all_space(s + lpos, n - lpos)) n = lpos;
    }
    push_data(L, start, s, n);
}

static int decode_string(lexer *L, size_t pos, const char *s, size_t n, jtok *k) {
    jbuf b = {0};
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\r') { jbuf_putc(&b, '\n'); if (i + 1 < n && s[i + 1] == '\n') i++; continue; }
        if (c != '\\' || i + 1 >= n) { jbuf_putc(&b, c); continue; }
        char e = s[++i];
        switch (e) {
        case '\n': break;
        case '\\': jbuf_putc(&b, '\\'); break;
        case '\'': jbuf_putc(&b, '\''); break;
        case '"': jbuf_putc(&b, '"'); break;
        case 'a': jbuf_putc(&b, '\a'); break;
        case 'b': jbuf_putc(&b, '\b'); break;
        case 'f': jbuf_putc(&b, '\f'); break;
        case 'n': jbuf_putc(&b, '\n'); break;
        case 'r': jbuf_putc(&b, '\r'); break;
        case 't': jbuf_putc(&b, '\t'); break;
        case 'v': jbuf_putc(&b, '\v'); break;
        case 'x': case 'u': case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int d = 0; d < nd; d++) {
                char h = i + 1 < n ? s[i + 1] : 0;
                int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (v < 0) { jbuf_free(&b); return lex_fail(L, pos, "truncated \\x/\\u escape in string literal"); }
                cp = cp * 16 + (uint32_t)v;
                i++;
            }
            if (cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) {
                jbuf_free(&b);
                return lex_fail(L, pos, "escape out of range in string literal");
            }
            ju_encode(&b, cp);
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = (uint32_t)(e - '0');
                for (int d = 0; d < 2 && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '7'; d++) cp = cp * 8 + (uint32_t)(s[++i] - '0');
                ju_encode(&b, cp);
            } else if (e == 'N') {
                jbuf_free(&b);
                return lex_fail(L, pos, "\\N{...} escapes are not supported");
            } else {
                jbuf_putc(&b, '\\');
                jbuf_putc(&b, e);
            }
        }
    }
    k->s = b.p ? b.p : xstrdup("");
    k->n = b.n;
    return 0;
}

static const char *ops3[] = {NULL};
static const char *ops2[] = {"//", "**", "==", "!=", ">=", "<=", NULL};
static const char ops1[] = "+-*/%~[](){}<>=.:|,;";

/* Tokenizes inside {{ }} or {% %}; pos is just after the opening marker. */
static int lex_tag(lexer *L, int is_block, size_t open_pos) {
    char stack[JJ_MAX_PARSE_DEPTH];
    int depth = 0;
    (void)ops3;
    for (;;) {
        while (L->pos < L->n && is_ws(L->s[L->pos])) L->pos++;
        if (L->pos >= L->n) return lex_fail(L, open_pos, is_block ? "unclosed block tag ('%}' missing)" : "unclosed variable tag ('}}' missing)");
        const char *p = L->s + L->pos;
        size_t left = L->n - L->pos;
        if (depth == 0) {
            const char *end = is_block ? "%}" : "}}";
            if (left >= 3 && p[0] == '-' && memcmp(p + 1, end, 2) == 0) {
                push(L, is_block ? JT_BLOCK_END : JT_VAR_END, L->pos);
                L->pos += 3;
                while (L->pos < L->n && is_ws(L->s[L->pos])) L->pos++;
                L->line_starting = L->s[L->pos - 1] == '\n';
                return 0;
            }
            if (is_block && left >= 3 && p[0] == '+' && memcmp(p + 1, end, 2) == 0) {
                push(L, JT_BLOCK_END, L->pos);
                L->pos += 3;
                L->line_starting = 0;
                return 0;
            }
            if (left >= 2 && memcmp(p, end, 2) == 0) {
                push(L, is_block ? JT_BLOCK_END : JT_VAR_END, L->pos);
                L->pos += 2;
                L->line_starting = 0;
                if (is_block && L->pos < L->n && L->s[L->pos] == '\n') { L->pos++; L->line_starting = 1; }
                return 0;
            }
        }
        char c = p[0];
        if ((c >= '0' && c <= '9')) {
            /* float: digits[_digits] (.digits)? e[+-]digits | digits . digits */
            size_t i = 0;
            while (i < left && ((p[i] >= '0' && p[i] <= '9') || (p[i] == '_' && i + 1 < left && p[i + 1] >= '0' && p[i + 1] <= '9'))) i++;
            size_t j = i;
            int is_float = 0;
            if (j + 1 < left && p[j] == '.' && p[j + 1] >= '0' && p[j + 1] <= '9') {
                j++;
                while (j < left && ((p[j] >= '0' && p[j] <= '9') || (p[j] == '_' && j + 1 < left && p[j + 1] >= '0' && p[j + 1] <= '9'))) j++;
                is_float = 1;
            }
            if (j < left && (p[j] == 'e' || p[j] == 'E')) {
                size_t k = j + 1;
                if (k < left && (p[k] == '+' || p[k] == '-')) k++;
                if (k < left && p[k] >= '0' && p[k] <= '9') {
                    while (k < left && ((p[k] >= '0' && p[k] <= '9') || p[k] == '_')) k++;
                    j = k;
                    is_float = 1;
                }
            }
            char tmp[64];
            size_t tn = 0;
            if (is_float) {
                for (size_t q = 0; q < j && tn < sizeof tmp - 1; q++)
                    if (p[q] != '_') tmp[tn++] = p[q];
                tmp[tn] = 0;
                jtok *k = push(L, JT_FLOAT, L->pos);
                k->f = strtod(tmp, NULL);
                L->pos += j;
            } else {
                int base = 10;
                size_t q = 0;
                if (c == '0' && left > 1 && (p[1] == 'x' || p[1] == 'X' || p[1] == 'o' || p[1] == 'O' || p[1] == 'b' || p[1] == 'B')) {
                    base = (p[1] == 'x' || p[1] == 'X') ? 16 : (p[1] == 'o' || p[1] == 'O') ? 8 : 2;
                    q = 2;
                    i = 2;
                    while (i < left && (p[i] == '_' || (base == 16 ? ((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f') || (p[i] >= 'A' && p[i] <= 'F')) : (p[i] >= '0' && p[i] < '0' + base)))) i++;
                }
                for (; q < i && tn < sizeof tmp - 1; q++)
                    if (p[q] != '_') tmp[tn++] = p[q];
                tmp[tn] = 0;
                errno = 0;
                long long iv = strtoll(tmp, NULL, base);
                if (errno == ERANGE) return lex_fail(L, L->pos, "integer literal out of range");
                jtok *k = push(L, JT_INT, L->pos);
                k->i = iv;
                L->pos += i;
            }
            continue;
        }
        if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (unsigned char)c >= 0x80) {
            size_t i = 0;
            while (i < left && (p[i] == '_' || (p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= '0' && p[i] <= '9') || (unsigned char)p[i] >= 0x80)) i++;
            jtok *k = push(L, JT_NAME, L->pos);
            k->s = xmalloc(i + 1);
            memcpy(k->s, p, i);
            k->s[i] = 0;
            k->n = i;
            L->pos += i;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t i = 1;
            while (i < left && p[i] != c) {
                if (p[i] == '\\') i++;
                i++;
            }
            if (i >= left) return lex_fail(L, L->pos, "unterminated string literal");
            jtok *k = push(L, JT_STRING, L->pos);
            if (decode_string(L, L->pos, p + 1, i - 1, k)) return -1;
            L->pos += i + 1;
            continue;
        }
        size_t oplen = 0;
        for (int i = 0; ops2[i]; i++)
            if (left >= 2 && memcmp(p, ops2[i], 2) == 0) { oplen = 2; break; }
        if (!oplen && strchr(ops1, c) && c) oplen = 1;
        if (!oplen) {
            char m[64];
            snprintf(m, sizeof m, "unexpected char '%c'", c);
            return lex_fail(L, L->pos, m);
        }
        if (oplen == 1) {
            if (c == '(' || c == '[' || c == '{') {
                if (depth >= JJ_MAX_PARSE_DEPTH) return lex_fail(L, L->pos, "brackets nested too deeply");
                stack[depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
            } else if (c == ')' || c == ']' || c == '}') {
                if (depth == 0 || stack[depth - 1] != c) {
                    char m[64];
                    snprintf(m, sizeof m, "unexpected '%c'", c);
                    return lex_fail(L, L->pos, m);
                }
                depth--;
            }
        }
        jtok *k = push(L, JT_OP, L->pos);
        k->s = xmalloc(oplen + 1);
        memcpy(k->s, p, oplen);
        k->s[oplen] = 0;
        k->n = oplen;
        L->pos += oplen;
    }
}

/* Matches {%[-+]?\s*NAME\s*[-+]?%} at pos; returns end of the open sign info. */
static int match_word_tag(lexer *L, size_t pos, const char *word, char *sign_open, char *sign_close, size_t *end) {
    const char *s = L->s;
    size_t n = L->n, i = pos;
    if (i + 2 > n || s[i] != '{' || s[i + 1] != '%') return 0;
    i += 2;
    *sign_open = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) *sign_open = s[i++];
    while (i < n && is_ws(s[i])) i++;
    size_t wl = strlen(word);
    if (i + wl > n || memcmp(s + i, word, wl) != 0) return 0;
    i += wl;
    while (i < n && is_ws(s[i])) i++;
    *sign_close = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) *sign_close = s[i++];
    if (i + 2 > n || s[i] != '%' || s[i + 1] != '}') return 0;
    *end = i + 2;
    return 1;
}

int jj_lex(const char *src, size_t len, jtok **toks, size_t *ntoks, const char *name, char *err, size_t errlen) {
    lexer L = {0};
    /* Jinja splits the source on \r\n, \r and \n and joins it with \n,
     * dropping one trailing newline (keep_trailing_newline=False). */
    char *norm = xmalloc(len + 1);
    size_t nn = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[nn++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else norm[nn++] = src[i];
    }
    if (nn > 0 && norm[nn - 1] == '\n') nn--;
    norm[nn] = 0;
    L.s = norm;
    L.n = nn;
    L.name = name;
    L.err = err;
    L.errlen = errlen;
    L.line_starting = 1;
    L.cache_line = 1;
    int rc = 0;
    while (L.pos < L.n && rc == 0) {
        /* find the next tag opener */
        size_t i = L.pos;
        const char *hit = NULL;
        while (i + 1 < L.n) {
            if (L.s[i] == '{' && (L.s[i + 1] == '{' || L.s[i + 1] == '%' || L.s[i + 1] == '#')) { hit = L.s + i; break; }
            i++;
        }
        if (!hit) {
            push_data(&L, L.pos, L.s + L.pos, L.n - L.pos);
            L.pos = L.n;
            break;
        }
        char kind = hit[1];
        char sign = (i + 2 < L.n && (L.s[i + 2] == '-' || L.s[i + 2] == '+')) ? L.s[i + 2] : 0;
        char so, sc;
        size_t rend;
        if (kind == '%' && match_word_tag(&L, i, "raw", &so, &sc, &rend)) {
            emit_text(&L, L.pos, i, so, 1);
            /* raw body up to {% endraw %} */
            size_t j = rend, bodystart = rend;
            if (sc == '-') while (bodystart < L.n && is_ws(L.s[bodystart])) bodystart++;
            size_t eend = 0;
            char eo = 0, ec = 0;
            for (j = bodystart; j < L.n; j++)
                if (L.s[j] == '{' && match_word_tag(&L, j, "endraw", &eo, &ec, &eend)) break;
            if (j >= L.n) { rc = lex_fail(&L, i, "missing end of raw directive"); break; }
            L.line_starting = 0;
            emit_text(&L, bodystart, j, eo, 1);
            L.pos = eend;
            if (ec == '-') while (L.pos < L.n && is_ws(L.s[L.pos])) L.pos++;
            else if (ec != '+' && L.pos < L.n && L.s[L.pos] == '\n') L.pos++;
            L.line_starting = L.s[L.pos - 1] == '\n';
            continue;
        }
        emit_text(&L, L.pos, i, sign, kind != '{');
        L.pos = i + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t j = L.pos;
            int found = 0;
            for (; j + 1 < L.n; j++) {
                if ((L.s[j] == '-' || L.s[j] == '+') && j + 2 < L.n && L.s[j + 1] == '#' && L.s[j + 2] == '}') {
                    char cs = L.s[j];
                    L.pos = j + 3;
                    if (cs == '-') while (L.pos < L.n && is_ws(L.s[L.pos])) L.pos++;
                    found = 1;
                    break;
                }
                if (L.s[j] == '#' && L.s[j + 1] == '}') {
                    L.pos = j + 2;
                    if (L.pos < L.n && L.s[L.pos] == '\n') L.pos++;
                    found = 1;
                    break;
                }
            }
            if (!found) { rc = lex_fail(&L, i, "missing end of comment tag"); break; }
            L.line_starting = L.s[L.pos - 1] == '\n';
            continue;
        }
        push(&L, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, i);
        rc = lex_tag(&L, kind == '%', i);
    }
    if (rc == 0) push(&L, JT_EOF, L.n);
    free(norm);
    if (rc) {
        jj_free_tokens(L.t, L.nt);
        *toks = NULL;
        *ntoks = 0;
        return -1;
    }
    *toks = L.t;
    *ntoks = L.nt;
    return 0;
}

void jj_free_tokens(jtok *toks, size_t n) {
    if (!toks) return;
    for (size_t i = 0; i < n; i++) free(toks[i].s);
    free(toks);
}
