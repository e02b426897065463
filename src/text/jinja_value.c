/* jinja_value: the Jinja value type with Python semantics: reference
 * counting, str() and repr() as Python prints them (True, None, 1.0, 1e-05,
 * ['a'], {'k': 1}), equality and ordering, conversion from cJSON, and
 * json.dumps as transformers' tojson filter calls it. */
#include "text/jinja_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* ---- string builder ---- */
void jbuf_put(jbuf *b, const char *s, size_t n) {
    if (b->overflow) return;
    if (b->n + n + 1 > JJ_MAX_OUTPUT + (size_t)1) {
        b->overflow = 1;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->n + n + 1) cap *= 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
void jbuf_puts(jbuf *b, const char *s) { jbuf_put(b, s, strlen(s)); }
void jbuf_putc(jbuf *b, char c) { jbuf_put(b, &c, 1); }
void jbuf_free(jbuf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}
jv jbuf_to_str(jbuf *b) {
    jv v = jv_str(b->p ? b->p : "", b->n);
    jbuf_free(b);
    return v;
}

/* ---- UTF-8 ---- */
size_t ju_decode(const char *s, size_t n, size_t i, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s + i;
    size_t left = n - i;
    unsigned c = u[0];
    if (c < 0x80 || left < 2) { *cp = c; return 1; }
    if ((c & 0xe0) == 0xc0 && (u[1] & 0xc0) == 0x80) { *cp = ((c & 0x1fu) << 6) | (u[1] & 0x3fu); return 2; }
    if ((c & 0xf0) == 0xe0 && left >= 3 && (u[1] & 0xc0) == 0x80 && (u[2] & 0xc0) == 0x80) {
        *cp = ((c & 0x0fu) << 12) | ((u[1] & 0x3fu) << 6) | (u[2] & 0x3fu);
        return 3;
    }
    if ((c & 0xf8) == 0xf0 && left >= 4 && (u[1] & 0xc0) == 0x80 && (u[2] & 0xc0) == 0x80 && (u[3] & 0xc0) == 0x80) {
        *cp = ((c & 0x07u) << 18) | ((u[1] & 0x3fu) << 12) | ((u[2] & 0x3fu) << 6) | (u[3] & 0x3fu);
        return 4;
    }
    *cp = c;
    return 1;
}
void ju_encode(jbuf *b, uint32_t cp) {
    char t[4];
    if (cp < 0x80) { t[0] = (char)cp; jbuf_put(b, t, 1); }
    else if (cp < 0x800) { t[0] = (char)(0xc0 | (cp >> 6)); t[1] = (char)(0x80 | (cp & 0x3f)); jbuf_put(b, t, 2); }
    else if (cp < 0x10000) {
        t[0] = (char)(0xe0 | (cp >> 12)); t[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); t[2] = (char)(0x80 | (cp & 0x3f));
        jbuf_put(b, t, 3);
    } else {
        t[0] = (char)(0xf0 | (cp >> 18)); t[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); t[3] = (char)(0x80 | (cp & 0x3f));
        jbuf_put(b, t, 4);
    }
}
size_t ju_len(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n;) { uint32_t cp; i += ju_decode(s, n, i, &cp); k++; }
    return k;
}
size_t ju_offset(const char *s, size_t n, size_t cpi) {
    size_t i = 0;
    while (cpi > 0 && i < n) { uint32_t cp; i += ju_decode(s, n, i, &cp); cpi--; }
    return i;
}
int ju_isspace(uint32_t c) {
    return (c >= 9 && c <= 13) || c == ' ' || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* ---- construction and reference counting ---- */
jstr *jstr_new(size_t n) {
    jstr *s = xmalloc(sizeof(jstr) + n + 1);
    s->rc = 1;
    s->safe = 0;
    s->len = n;
    s->s[n] = 0;
    return s;
}
jv jv_str(const char *p, size_t n) {
    jstr *s = jstr_new(n);
    if (n) memcpy(s->s, p, n);
    return jv_str_take(s);
}
jv jv_cstr(const char *p) { return jv_str(p, strlen(p)); }
jv jv_str_take(jstr *s) { jv v; v.t = JV_STR; v.u.s = s; return v; }
jv jv_undef_hint(const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    jv v = jv_cstr(tmp);
    v.t = JV_UNDEF;
    return v;
}
jv jv_list(size_t cap) {
    jlist *l = xcalloc(1, sizeof *l);
    l->rc = 1;
    if (cap) { l->v = xmalloc(cap * sizeof(jv)); l->cap = cap; }
    jv v; v.t = JV_LIST; v.u.l = l;
    return v;
}
jv jv_dict(void) {
    jdict *d = xcalloc(1, sizeof *d);
    d->rc = 1;
    jv v; v.t = JV_DICT; v.u.d = d;
    return v;
}
void jv_list_push(jv list, jv item) {
    jlist *l = list.u.l;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 4;
        l->v = xrealloc(l->v, l->cap * sizeof(jv));
    }
    l->v[l->n++] = item;
}
static long dict_find(jdict *d, jv key) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], key)) return (long)i;
    return -1;
}
jv jv_dict_get(jv dv, jv key) {
    long i = dict_find(dv.u.d, key);
    return i < 0 ? jv_undef() : dv.u.d->v[i];
}
int jv_dict_has(jv dv, jv key) { return dict_find(dv.u.d, key) >= 0; }
void jv_dict_set(jv dv, jv key, jv val) {
    jdict *d = dv.u.d;
    long i = dict_find(d, key);
    if (i >= 0) {
        jv_unref(key);
        jv_unref(d->v[i]);
        d->v[i] = val;
        return;
    }
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 4;
        d->k = xrealloc(d->k, d->cap * sizeof(jv));
        d->v = xrealloc(d->v, d->cap * sizeof(jv));
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->n++;
}
jv jv_dict_gets(jv dv, const char *key) {
    jdict *d = dv.u.d;
    size_t kl = strlen(key);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].u.s->len == kl && memcmp(d->k[i].u.s->s, key, kl) == 0) return d->v[i];
    return jv_undef();
}
void jv_dict_sets(jv d, const char *key, jv val) { jv_dict_set(d, jv_cstr(key), val); }

int jv_is_heap(jv v) {
    switch (v.t) {
    case JV_UNDEF: return v.u.s != NULL;
    case JV_STR: case JV_LIST: case JV_DICT: case JV_NS: case JV_FUNC: case JV_MACRO: case JV_LOOP: return 1;
    default: return 0;
    }
}
static int *rcp(jv v) {
    switch (v.t) {
    case JV_UNDEF: case JV_STR: return &v.u.s->rc;
    case JV_LIST: return &v.u.l->rc;
    case JV_DICT: case JV_NS: return &v.u.d->rc;
    case JV_FUNC: return &v.u.fn->rc;
    case JV_MACRO: return &v.u.m->rc;
    case JV_LOOP: return &v.u.lp->rc;
    default: return NULL;
    }
}
jv jv_ref(jv v) {
    if (jv_is_heap(v)) {
        int *r = rcp(v);
        if (*r >= 0) (*r)++;
    }
    return v;
}
void jv_unref(jv v) {
    if (!jv_is_heap(v)) return;
    int *r = rcp(v);
    if (*r < 0 || --(*r) > 0) return;
    switch (v.t) {
    case JV_UNDEF: case JV_STR: free(v.u.s); break;
    case JV_LIST:
        for (size_t i = 0; i < v.u.l->n; i++) jv_unref(v.u.l->v[i]);
        free(v.u.l->v);
        free(v.u.l);
        break;
    case JV_DICT: case JV_NS:
        for (size_t i = 0; i < v.u.d->n; i++) { jv_unref(v.u.d->k[i]); jv_unref(v.u.d->v[i]); }
        free(v.u.d->k);
        free(v.u.d->v);
        free(v.u.d);
        break;
    case JV_FUNC: jv_unref(v.u.fn->self); free(v.u.fn); break;
    case JV_MACRO: free(v.u.m); break;
    case JV_LOOP: { jv l; l.t = JV_LIST; l.u.l = v.u.lp->items; jv_unref(l); free(v.u.lp); break; }
    default: break;
    }
}
void jv_make_immortal(jv v) {
    if (!jv_is_heap(v)) return;
    *rcp(v) = -1;
    if (v.t == JV_LIST)
        for (size_t i = 0; i < v.u.l->n; i++) jv_make_immortal(v.u.l->v[i]);
    if (v.t == JV_DICT)
        for (size_t i = 0; i < v.u.d->n; i++) { jv_make_immortal(v.u.d->k[i]); jv_make_immortal(v.u.d->v[i]); }
}

/* ---- truth, equality, order ---- */
int jv_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}
static int is_num(jv v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }
static double num(jv v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t inum(jv v) { return v.t == JV_INT ? v.u.i : (int64_t)v.u.b; }

int jv_equal(jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return inum(a) == inum(b);
        return num(a) == num(b);
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return a.u.s->len == b.u.s->len && memcmp(a.u.s->s, b.u.s->s, a.u.s->len) == 0;
    case JV_LIST:
        if (a.u.l->n != b.u.l->n) return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal(a.u.l->v[i], b.u.l->v[i])) return 0;
        return 1;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            long j = dict_find(b.u.d, a.u.d->k[i]);
            if (j < 0 || !jv_equal(a.u.d->v[i], b.u.d->v[j])) return 0;
        }
        return 1;
    case JV_NS: return a.u.d == b.u.d;
    case JV_FUNC: return a.u.fn == b.u.fn;
    case JV_MACRO: return a.u.m == b.u.m;
    case JV_LOOP: return a.u.lp == b.u.lp;
    default: return 0;
    }
}
int jv_compare(jv a, jv b, int *cmp) {
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) { int64_t x = inum(a), y = inum(b); *cmp = (x > y) - (x < y); }
        else { double x = num(a), y = num(b); *cmp = (x > y) - (x < y); }
        return 0;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int r = memcmp(a.u.s->s, b.u.s->s, n);
        if (r == 0) r = (a.u.s->len > b.u.s->len) - (a.u.s->len < b.u.s->len);
        *cmp = (r > 0) - (r < 0);
        return 0;
    }
    if (a.t == JV_LIST && b.t == JV_LIST) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_equal(a.u.l->v[i], b.u.l->v[i])) continue;
            return jv_compare(a.u.l->v[i], b.u.l->v[i], cmp);
        }
        *cmp = (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
        return 0;
    }
    return -1;
}
const char *jv_type_name(jv v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_FUNC: return "function";
    case JV_MACRO: return "Macro";
    case JV_LOOP: return "LoopContext";
    }
    return "object";
}

/* ---- str() and repr() ---- */
void jv_float_repr(jbuf *b, double f) {
    if (isnan(f)) { jbuf_puts(b, "nan"); return; }
    if (isinf(f)) { jbuf_puts(b, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0) { jbuf_puts(b, signbit(f) ? "-0.0" : "0.0"); return; }
    char t[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(t, sizeof t, "%.*e", prec - 1, f);
        if (strtod(t, NULL) == f) break;
    }
    /* t is d.ddde[+-]XX: split into digits and exponent like Python's repr */
    char digits[24];
    int nd = 0, neg = 0;
    const char *p = t;
    if (*p == '-') { neg = 1; p++; }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int exp = atoi(p + 1);
    if (neg) jbuf_putc(b, '-');
    if (exp < -4 || exp >= 16) {
        jbuf_putc(b, digits[0]);
        if (nd > 1) { jbuf_putc(b, '.'); jbuf_put(b, digits + 1, (size_t)nd - 1); }
        char e[16];
        snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        jbuf_puts(b, e);
    } else if (exp < 0) {
        jbuf_puts(b, "0.");
        for (int i = 0; i < -exp - 1; i++) jbuf_putc(b, '0');
        jbuf_put(b, digits, (size_t)nd);
    } else {
        for (int i = 0; i <= exp; i++) jbuf_putc(b, i < nd ? digits[i] : '0');
        jbuf_putc(b, '.');
        if (nd > exp + 1) jbuf_put(b, digits + exp + 1, (size_t)(nd - exp - 1));
        else jbuf_putc(b, '0');
    }
}

static void str_repr(jbuf *b, const char *s, size_t n) {
    int sq = 0, dq = 0;
    for (size_t i = 0; i < n; i++) { if (s[i] == '\'') sq = 1; if (s[i] == '"') dq = 1; }
    char q = (sq && !dq) ? '"' : '\'';
    jbuf_putc(b, q);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = ju_decode(s, n, i, &cp);
        if (cp == (uint32_t)q || cp == '\\') { jbuf_putc(b, '\\'); jbuf_putc(b, (char)cp); }
        else if (cp == '\n') jbuf_puts(b, "\\n");
        else if (cp == '\r') jbuf_puts(b, "\\r");
        else if (cp == '\t') jbuf_puts(b, "\\t");
        else if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) {
            char e[8];
            snprintf(e, sizeof e, "\\x%02x", cp);
            jbuf_puts(b, e);
        } else jbuf_put(b, s + i, k);
        i += k;
    }
    jbuf_putc(b, q);
}

void jv_repr(jbuf *b, jv v) {
    switch (v.t) {
    case JV_STR: str_repr(b, v.u.s->s, v.u.s->len); return;
    case JV_LIST:
        jbuf_putc(b, v.u.l->tuple ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jbuf_puts(b, ", ");
            jv_repr(b, v.u.l->v[i]);
        }
        if (v.u.l->tuple && v.u.l->n == 1) jbuf_putc(b, ',');
        jbuf_putc(b, v.u.l->tuple ? ')' : ']');
        return;
    case JV_DICT:
        jbuf_putc(b, '{');
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jbuf_puts(b, ", ");
            jv_repr(b, v.u.d->k[i]);
            jbuf_puts(b, ": ");
            jv_repr(b, v.u.d->v[i]);
        }
        jbuf_putc(b, '}');
        return;
    case JV_UNDEF: jbuf_puts(b, "Undefined"); return;
    default: jv_to_str(b, v); return;
    }
}

void jv_to_str(jbuf *b, jv v) {
    char t[32];
    switch (v.t) {
    case JV_UNDEF: return;
    case JV_NONE: jbuf_puts(b, "None"); return;
    case JV_BOOL: jbuf_puts(b, v.u.b ? "True" : "False"); return;
    case JV_INT: snprintf(t, sizeof t, "%lld", (long long)v.u.i); jbuf_puts(b, t); return;
    case JV_FLOAT: jv_float_repr(b, v.u.f); return;
    case JV_STR: jbuf_put(b, v.u.s->s, v.u.s->len); return;
    case JV_LIST: case JV_DICT: jv_repr(b, v); return;
    case JV_NS:
        jbuf_puts(b, "<Namespace ");
        { jv d = v; d.t = JV_DICT; jv_repr(b, d); }
        jbuf_puts(b, ">");
        return;
    case JV_FUNC: jbuf_puts(b, "<built-in method>"); return;
    case JV_MACRO: jbuf_puts(b, "<Macro>"); return;
    case JV_LOOP: jbuf_puts(b, "<LoopContext>"); return;
    }
}

/* ---- JSON ---- */
static void json_str(jbuf *b, const char *s, size_t n, int ascii) {
    jbuf_putc(b, '"');
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = ju_decode(s, n, i, &cp);
        char e[16];
        switch (cp) {
        case '"': jbuf_puts(b, "\\\""); break;
        case '\\': jbuf_puts(b, "\\\\"); break;
        case '\n': jbuf_puts(b, "\\n"); break;
        case '\r': jbuf_puts(b, "\\r"); break;
        case '\t': jbuf_puts(b, "\\t"); break;
        case '\b': jbuf_puts(b, "\\b"); break;
        case '\f': jbuf_puts(b, "\\f"); break;
        default:
            if (cp < 0x20 || (ascii && cp >= 0x7f)) {
                if (cp >= 0x10000) {
                    uint32_t c2 = cp - 0x10000;
                    snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xd800 + (c2 >> 10), 0xdc00 + (c2 & 0x3ff));
                } else snprintf(e, sizeof e, "\\u%04x", cp);
                jbuf_puts(b, e);
            } else jbuf_put(b, s + i, k);
        }
        i += k;
    }
    jbuf_putc(b, '"');
}

static void json_nl(jbuf *b, const char *indent, int level) {
    jbuf_putc(b, '\n');
    for (int i = 0; i < level; i++) jbuf_puts(b, indent);
}

static int key_cmp(const void *x, const void *y) {
    const jv *a = *(const jv *const *)x, *c = *(const jv *const *)y;
    int r = 0;
    if (jv_compare(*a, *c, &r) < 0) return 0;
    return r;
}

static int tojson_rec(jbuf *b, jv v, int ascii, const char *indent, const char *isep, const char *ksep, int sort,
                      int level, char *err, size_t errlen) {
    char t[32];
    if (level > JJ_MAX_DEPTH) return ds_err(err, errlen, "tojson: nesting too deep");
    switch (v.t) {
    case JV_NONE: jbuf_puts(b, "null"); return 0;
    case JV_BOOL: jbuf_puts(b, v.u.b ? "true" : "false"); return 0;
    case JV_INT: snprintf(t, sizeof t, "%lld", (long long)v.u.i); jbuf_puts(b, t); return 0;
    case JV_FLOAT:
        if (isnan(v.u.f)) jbuf_puts(b, "NaN");
        else if (isinf(v.u.f)) jbuf_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else jv_float_repr(b, v.u.f);
        return 0;
    case JV_STR: json_str(b, v.u.s->s, v.u.s->len, ascii); return 0;
    case JV_LIST:
        if (v.u.l->n == 0) { jbuf_puts(b, "[]"); return 0; }
        jbuf_putc(b, '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jbuf_puts(b, isep);
            if (indent) json_nl(b, indent, level + 1);
            if (tojson_rec(b, v.u.l->v[i], ascii, indent, isep, ksep, sort, level + 1, err, errlen)) return -1;
        }
        if (indent) json_nl(b, indent, level);
        jbuf_putc(b, ']');
        return 0;
    case JV_DICT: {
        jdict *d = v.u.d;
        if (d->n == 0) { jbuf_puts(b, "{}"); return 0; }
        const jv **order = xmalloc(d->n * sizeof *order);
        for (size_t i = 0; i < d->n; i++) order[i] = &d->k[i];
        if (sort) qsort(order, d->n, sizeof *order, key_cmp);
        jbuf_putc(b, '{');
        int rc = 0;
        for (size_t i = 0; i < d->n && !rc; i++) {
            size_t idx = (size_t)(order[i] - d->k);
            jv k = d->k[idx];
            if (i) jbuf_puts(b, isep);
            if (indent) json_nl(b, indent, level + 1);
            if (k.t == JV_STR) json_str(b, k.u.s->s, k.u.s->len, ascii);
            else if (k.t == JV_INT || k.t == JV_FLOAT || k.t == JV_BOOL || k.t == JV_NONE) {
                jbuf tb = {0};
                if (tojson_rec(&tb, k, ascii, NULL, isep, ksep, 0, level + 1, err, errlen)) { jbuf_free(&tb); rc = -1; break; }
                json_str(b, tb.p ? tb.p : "", tb.n, ascii);
                jbuf_free(&tb);
            } else { rc = ds_err(err, errlen, "keys must be str, int, float, bool or None, not %s", jv_type_name(k)); break; }
            jbuf_puts(b, ksep);
            rc = tojson_rec(b, d->v[idx], ascii, indent, isep, ksep, sort, level + 1, err, errlen);
        }
        free(order);
        if (rc) return rc;
        if (indent) json_nl(b, indent, level);
        jbuf_putc(b, '}');
        return 0;
    }
    default: return ds_err(err, errlen, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

int jv_tojson(jbuf *b, jv v, int ascii, const char *indent, const char *isep, const char *ksep, int sort, char *err,
              size_t errlen) {
    if (!isep) isep = indent ? "," : ", ";
    if (!ksep) ksep = ": ";
    return tojson_rec(b, v, ascii, indent, isep, ksep, sort, 0, err, errlen);
}

jv jv_from_cjson(const cJSON *j) {
    if (!j || cJSON_IsNull(j)) return jv_none();
    if (cJSON_IsBool(j)) return jv_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        /* cJSON keeps no int/float distinction: integral values within
         * int64 are taken as ints unless jinja_json_mark_floats saw a
         * fraction or exponent in the source text. */
        if (!(j->type & JINJA_CJSON_FLOAT) && isfinite(d) && d == floor(d) && fabs(d) < 9.2e18)
            return jv_int((int64_t)d);
        return jv_float(d);
    }
    if (cJSON_IsString(j)) return jv_cstr(j->valuestring ? j->valuestring : "");
    if (cJSON_IsArray(j)) {
        jv l = jv_list(0);
        for (const cJSON *c = j->child; c; c = c->next) jv_list_push(l, jv_from_cjson(c));
        return l;
    }
    if (cJSON_IsObject(j)) {
        jv d = jv_dict();
        for (const cJSON *c = j->child; c; c = c->next) jv_dict_set(d, jv_cstr(c->string ? c->string : ""), jv_from_cjson(c));
        return d;
    }
    return jv_none();
}

/* Number literals appear in the text in the same order as a pre-order walk
 * of the tree meets number nodes (cJSON keeps members in document order). */
static void mark_floats(cJSON *j, const char **p) {
    for (; j; j = j->next) {
        if (cJSON_IsNumber(j)) {
            const char *s = *p;
            for (;;) { /* the next number literal outside strings */
                while (*s && *s != '"' && *s != '-' && (*s < '0' || *s > '9')) s++;
                if (*s != '"') break;
                for (s++; *s && *s != '"'; s++)
                    if (*s == '\\' && s[1]) s++;
                if (*s) s++;
            }
            int is_float = 0;
            while (*s == '-' || *s == '+' || *s == '.' || *s == 'e' || *s == 'E' || (*s >= '0' && *s <= '9')) {
                if (*s == '.' || *s == 'e' || *s == 'E') is_float = 1;
                s++;
            }
            if (is_float) j->type |= JINJA_CJSON_FLOAT;
            *p = s;
        }
        if (j->child) mark_floats(j->child, p);
    }
}

void jinja_json_mark_floats(cJSON *root, const char *json_text) {
    if (!root || !json_text) return;
    const char *p = json_text;
    mark_floats(root, &p);
}

cJSON *jinja_json_parse(const char *json_text) {
    cJSON *j = cJSON_Parse(json_text);
    jinja_json_mark_floats(j, json_text);
    return j;
}
