/* jinja_filters: Jinja2's filters, tests, operators, attribute and item
 * access, and the Python str / dict / list methods templates call, with
 * Python's results (Unicode-aware case mapping and whitespace, floor
 * division and modulo signs, str.split rules, json.dumps for tojson as
 * transformers overrides it). The immutable sandbox's rules apply: methods
 * that mutate a list or dict are refused. */
#include "text/jinja_internal.h"

/* The (key, value) tuples of a dict or namespace, in insertion order. */
static jv dict_items(jv d) {
    jv l = jv_list(d.u.d->n);
    for (size_t i = 0; i < d.u.d->n; i++) {
        jv p = jv_list(2);
        p.u.l->tuple = 1;
        jv_list_push(p, jv_ref(d.u.d->k[i]));
        jv_list_push(p, jv_ref(d.u.d->v[i]));
        jv_list_push(l, p);
    }
    return l;
}

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/util.h"

#define FAIL(...) jj_fail(c, at, __VA_ARGS__)

/* ---- small helpers ---- */
static int is_int(jv v) { return v.t == JV_INT || v.t == JV_BOOL; }
static int64_t ival(jv v) { return v.t == JV_INT ? v.u.i : (int64_t)v.u.b; }
static int is_numv(jv v) { return v.t == JV_INT || v.t == JV_BOOL || v.t == JV_FLOAT; }
static double fval(jv v) { return v.t == JV_FLOAT ? v.u.f : (double)ival(v); }
static jv to_str(jv v) {
    if (v.t == JV_STR) return jv_ref(v);
    jbuf b = {0};
    jv_to_str(&b, v);
    return jbuf_to_str(&b);
}
static const char *S(jv v) { return v.u.s->s; }
static size_t SL(jv v) { return v.u.s->len; }

static void map_case(jbuf *b, const char *s, size_t n, int mode) { /* 0 lower, 1 upper */
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = ju_decode(s, n, i, &cp);
        if (cp < 0x80) {
            char ch = (char)cp;
            if (mode == 0 && ch >= 'A' && ch <= 'Z') ch = (char)(ch + 32);
            if (mode == 1 && ch >= 'a' && ch <= 'z') ch = (char)(ch - 32);
            jbuf_putc(b, ch);
        } else if (cp == 0xdf && mode == 1) jbuf_puts(b, "SS");
        else ju_encode(b, (uint32_t)(mode == 0 ? utf8proc_tolower((utf8proc_int32_t)cp) : utf8proc_toupper((utf8proc_int32_t)cp)));
        i += k;
    }
}
static jv str_case(jv s, int mode) {
    jbuf b = {0};
    map_case(&b, S(s), SL(s), mode);
    return jbuf_to_str(&b);
}
static int is_cased(uint32_t cp) {
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}
static jv py_title(jv s) {
    jbuf b = {0};
    int prev = 0;
    for (size_t i = 0; i < SL(s);) {
        uint32_t cp;
        size_t k = ju_decode(S(s), SL(s), i, &cp);
        uint32_t o = prev ? (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp) : (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp);
        ju_encode(&b, o);
        prev = is_cased(cp);
        i += k;
    }
    return jbuf_to_str(&b);
}
static jv py_capitalize(jv s) {
    jbuf b = {0};
    for (size_t i = 0; i < SL(s);) {
        uint32_t cp;
        size_t k = ju_decode(S(s), SL(s), i, &cp);
        ju_encode(&b, i == 0 ? (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
        i += k;
    }
    return jbuf_to_str(&b);
}
/* Jinja's title filter: capitalize pieces split at [-\s({\[<]+ */
static jv jinja_title(jv s) {
    jbuf b = {0};
    int at_start = 1;
    for (size_t i = 0; i < SL(s);) {
        uint32_t cp;
        size_t k = ju_decode(S(s), SL(s), i, &cp);
        int sep = ju_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        if (sep) { jbuf_put(&b, S(s) + i, k); at_start = 1; }
        else {
            ju_encode(&b, at_start ? (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
            at_start = 0;
        }
        i += k;
    }
    return jbuf_to_str(&b);
}

static int in_chars(uint32_t cp, jv chars) {
    if (chars.t != JV_STR) return ju_isspace(cp);
    for (size_t i = 0; i < SL(chars);) {
        uint32_t c2;
        i += ju_decode(S(chars), SL(chars), i, &c2);
        if (c2 == cp) return 1;
    }
    return 0;
}
static jv py_strip(jv s, jv chars, int left, int right) {
    size_t a = 0, e = SL(s);
    const char *p = S(s);
    if (left)
        while (a < e) {
            uint32_t cp;
            size_t k = ju_decode(p, e, a, &cp);
            if (!in_chars(cp, chars)) break;
            a += k;
        }
    if (right)
        while (e > a) {
            size_t i = e - 1;
            while (i > a && ((unsigned char)p[i] & 0xc0) == 0x80) i--;
            uint32_t cp;
            ju_decode(p, e, i, &cp);
            if (!in_chars(cp, chars)) break;
            e = i;
        }
    return jv_str(p + a, e - a);
}

static int starts_at_ws(const char *p, size_t n, size_t i, size_t *k) {
    uint32_t cp;
    *k = ju_decode(p, n, i, &cp);
    return ju_isspace(cp);
}

/* str.split / str.rsplit */
/* The code point that ends at byte e of p (e > 0): its value into *cp, its
 * start as the return value. */
static size_t cp_before(const char *p, size_t e, uint32_t *cp) {
    size_t i = e - 1;
    while (i > 0 && ((unsigned char)p[i] & 0xc0) == 0x80) i--;
    ju_decode(p, e, i, cp);
    return i;
}

static jv py_split(jv s, jv sep, int64_t maxsplit, int reverse) {
    jv out = jv_list(0);
    const char *p = S(s);
    size_t n = SL(s);
    if (sep.t != JV_STR) {
        /* whitespace split */
        if (!reverse) {
            size_t i = 0, k;
            int64_t splits = 0;
            for (;;) {
                while (i < n && starts_at_ws(p, n, i, &k)) i += k;
                if (i >= n) break;
                if (maxsplit >= 0 && splits >= maxsplit) {
                    jv_list_push(out, jv_str(p + i, n - i)); /* the rest keeps its trailing whitespace */
                    break;
                }
                size_t st = i;
                while (i < n && !starts_at_ws(p, n, i, &k)) i += k;
                jv_list_push(out, jv_str(p + st, i - st));
                splits++;
            }
        } else {
            /* rsplit on whitespace: collect from the right */
            jv tmp = jv_list(0);
            size_t e = n;
            int64_t splits = 0;
            for (;;) {
                while (e > 0) {
                    uint32_t cp;
                    size_t i = cp_before(p, e, &cp);
                    if (!ju_isspace(cp)) break;
                    e = i;
                }
                if (e == 0) break;
                if (maxsplit >= 0 && splits >= maxsplit) {
                    jv_list_push(tmp, jv_str(p, e)); /* the rest keeps its leading whitespace */
                    break;
                }
                size_t st = e;
                while (st > 0) {
                    uint32_t cp;
                    size_t i = cp_before(p, st, &cp);
                    if (ju_isspace(cp)) break;
                    st = i;
                }
                jv_list_push(tmp, jv_str(p + st, e - st));
                e = st;
                splits++;
            }
            for (size_t i = tmp.u.l->n; i > 0; i--) jv_list_push(out, jv_ref(tmp.u.l->v[i - 1]));
            jv_unref(tmp);
        }
        return out;
    }
    const char *q = S(sep);
    size_t m = SL(sep);
    if (!reverse) {
        size_t i = 0;
        int64_t splits = 0;
        for (;;) {
            const char *hit = (maxsplit < 0 || splits < maxsplit) ? memmem(p + i, n - i, q, m) : NULL;
            if (!hit) { jv_list_push(out, jv_str(p + i, n - i)); break; }
            jv_list_push(out, jv_str(p + i, (size_t)(hit - (p + i))));
            i = (size_t)(hit - p) + m;
            splits++;
        }
    } else {
        jv tmp = jv_list(0);
        size_t e = n;
        int64_t splits = 0;
        for (;;) {
            long hit = -1;
            if (maxsplit < 0 || splits < maxsplit)
                for (size_t i = e >= m ? e - m + 1 : 0; i > 0; i--)
                    if (memcmp(p + i - 1, q, m) == 0) { hit = (long)(i - 1); break; }
            if (hit < 0) { jv_list_push(tmp, jv_str(p, e)); break; }
            jv_list_push(tmp, jv_str(p + hit + m, e - (size_t)hit - m));
            e = (size_t)hit;
            splits++;
        }
        for (size_t i = tmp.u.l->n; i > 0; i--) jv_list_push(out, jv_ref(tmp.u.l->v[i - 1]));
        jv_unref(tmp);
    }
    return out;
}

static jv py_replace(jv s, jv old, jv nw, int64_t count) {
    jbuf b = {0};
    const char *p = S(s);
    size_t n = SL(s), m = SL(old);
    int64_t done = 0;
    if (m == 0) {
        for (size_t i = 0; i <= n;) {
            if (count < 0 || done < count) { jbuf_put(&b, S(nw), SL(nw)); done++; }
            if (i == n) break;
            uint32_t cp;
            size_t k = ju_decode(p, n, i, &cp);
            jbuf_put(&b, p + i, k);
            i += k;
        }
        return jbuf_to_str(&b);
    }
    size_t i = 0;
    while (i < n) {
        const char *hit = (count < 0 || done < count) ? memmem(p + i, n - i, S(old), m) : NULL;
        if (!hit) break;
        jbuf_put(&b, p + i, (size_t)(hit - (p + i)));
        jbuf_put(&b, S(nw), SL(nw));
        i = (size_t)(hit - p) + m;
        done++;
    }
    jbuf_put(&b, p + i, n - i);
    return jbuf_to_str(&b);
}

static int py_startswith(jv s, jv pre, int end) {
    if (SL(pre) > SL(s)) return 0;
    return memcmp(end ? S(s) + SL(s) - SL(pre) : S(s), S(pre), SL(pre)) == 0;
}

jv jj_escape(jv v) {
    if (v.t == JV_STR && v.u.s->safe) return jv_ref(v);
    jv s = to_str(v);
    jbuf b = {0};
    for (size_t i = 0; i < SL(s); i++) {
        char ch = S(s)[i];
        switch (ch) {
        case '&': jbuf_puts(&b, "&amp;"); break;
        case '<': jbuf_puts(&b, "&lt;"); break;
        case '>': jbuf_puts(&b, "&gt;"); break;
        case '"': jbuf_puts(&b, "&#34;"); break;
        case '\'': jbuf_puts(&b, "&#39;"); break;
        default: jbuf_putc(&b, ch);
        }
    }
    jv_unref(s);
    jv r = jbuf_to_str(&b);
    r.u.s->safe = 1;
    return r;
}

int jj_to_list(jctx *c, const jnode *at, jv v, jv *out) {
    switch (v.t) {
    case JV_UNDEF: *out = jv_list(0); return 0;
    case JV_LIST: {
        jv l = jv_list(v.u.l->n);
        for (size_t i = 0; i < v.u.l->n; i++) jv_list_push(l, jv_ref(v.u.l->v[i]));
        *out = l;
        return 0;
    }
    case JV_DICT: {
        jv l = jv_list(v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) jv_list_push(l, jv_ref(v.u.d->k[i]));
        *out = l;
        return 0;
    }
    case JV_STR: {
        jv l = jv_list(0);
        for (size_t i = 0; i < SL(v);) {
            uint32_t cp;
            size_t k = ju_decode(S(v), SL(v), i, &cp);
            jv_list_push(l, jv_str(S(v) + i, k));
            i += k;
        }
        *out = l;
        return 0;
    }
    default: return FAIL("TypeError: '%s' object is not iterable", jv_type_name(v));
    }
}

/* ---- operators ---- */
int jj_binop(jctx *c, const jnode *at, int op, jv a, jv b, jv *out) {
    static const char *opname[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (a.t == JV_UNDEF) return jj_fail_undef(c, at, a);
    if (b.t == JV_UNDEF) return jj_fail_undef(c, at, b);
    if (is_numv(a) && is_numv(b)) {
        if (is_int(a) && is_int(b)) {
            int64_t x = ival(a), y = ival(b), r = 0;
            switch (op) {
            case JO_ADD: if (__builtin_add_overflow(x, y, &r)) goto ovf; *out = jv_int(r); return 0;
            case JO_SUB: if (__builtin_sub_overflow(x, y, &r)) goto ovf; *out = jv_int(r); return 0;
            case JO_MUL: if (__builtin_mul_overflow(x, y, &r)) goto ovf; *out = jv_int(r); return 0;
            case JO_DIV: if (y == 0) return FAIL("ZeroDivisionError: division by zero"); *out = jv_float((double)x / (double)y); return 0;
            case JO_FLOORDIV: case JO_MOD: {
                if (y == 0) return FAIL("ZeroDivisionError: integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) goto ovf;
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) { q--; m += y; }
                *out = jv_int(op == JO_FLOORDIV ? q : m);
                return 0;
            }
            case JO_POW: {
                if (y < 0) { *out = jv_float(pow((double)x, (double)y)); return 0; }
                int64_t res = 1;
                for (int64_t i = 0; i < y; i++) {
                    if (__builtin_mul_overflow(res, x, &res)) goto ovf;
                    if (res == 0 || res == 1) break;
                }
                if (res == 1 && x == -1 && (y & 1)) res = -1;
                *out = jv_int(res);
                return 0;
            }
            default: break;
            }
        } else {
            double x = fval(a), y = fval(b);
            switch (op) {
            case JO_ADD: *out = jv_float(x + y); return 0;
            case JO_SUB: *out = jv_float(x - y); return 0;
            case JO_MUL: *out = jv_float(x * y); return 0;
            case JO_DIV: if (y == 0) return FAIL("ZeroDivisionError: float division by zero"); *out = jv_float(x / y); return 0;
            case JO_FLOORDIV: case JO_MOD: {
                if (y == 0) return FAIL("ZeroDivisionError: float floor division by zero");
                double mod = fmod(x, y), div = (x - mod) / y, fd;
                if (mod != 0) {
                    if ((y < 0) != (mod < 0)) { mod += y; div -= 1.0; }
                } else mod = copysign(0.0, y);
                if (div != 0) { fd = floor(div); if (div - fd > 0.5) fd += 1.0; }
                else fd = copysign(0.0, x / y);
                *out = jv_float(op == JO_MOD ? mod : fd);
                return 0;
            }
            case JO_POW: *out = jv_float(pow(x, y)); return 0;
            default: break;
            }
        }
    }
    if (op == JO_ADD && a.t == JV_STR && b.t == JV_STR) {
        int safe = a.u.s->safe || b.u.s->safe;
        jv ea = safe ? jj_escape(a) : jv_ref(a), eb = safe ? jj_escape(b) : jv_ref(b);
        if (SL(ea) + SL(eb) > JJ_MAX_OUTPUT) { jv_unref(ea); jv_unref(eb); return FAIL("string too large"); }
        jstr *s = jstr_new(SL(ea) + SL(eb));
        memcpy(s->s, S(ea), SL(ea));
        memcpy(s->s + SL(ea), S(eb), SL(eb));
        s->safe = safe;
        jv_unref(ea);
        jv_unref(eb);
        *out = jv_str_take(s);
        return 0;
    }
    if (op == JO_ADD && a.t == JV_LIST && b.t == JV_LIST) {
        jv l = jv_list(a.u.l->n + b.u.l->n);
        for (size_t i = 0; i < a.u.l->n; i++) jv_list_push(l, jv_ref(a.u.l->v[i]));
        for (size_t i = 0; i < b.u.l->n; i++) jv_list_push(l, jv_ref(b.u.l->v[i]));
        *out = l;
        return 0;
    }
    if (op == JO_MUL && (((a.t == JV_STR || a.t == JV_LIST) && is_int(b)) || ((b.t == JV_STR || b.t == JV_LIST) && is_int(a)))) {
        jv seq = is_int(b) ? a : b;
        int64_t k = is_int(b) ? ival(b) : ival(a);
        if (k < 0) k = 0;
        size_t unit = seq.t == JV_STR ? SL(seq) : seq.u.l->n;
        if (unit && (double)unit * (double)k > (double)(seq.t == JV_STR ? JJ_MAX_OUTPUT : JJ_MAX_ITERS)) return FAIL("sequence repetition too large");
        if (seq.t == JV_STR) {
            jbuf bb = {0};
            for (int64_t i = 0; i < k && unit; i++) jbuf_put(&bb, S(seq), SL(seq));
            *out = jbuf_to_str(&bb);
        } else {
            jv l = jv_list(0);
            for (int64_t i = 0; i < k; i++)
                for (size_t j = 0; j < unit; j++) jv_list_push(l, jv_ref(seq.u.l->v[j]));
            *out = l;
        }
        return 0;
    }
    if (op == JO_MOD && a.t == JV_STR) return FAIL("printf-style string formatting ('%%' on strings) is not supported");
    if (op == JO_ADD && a.t == JV_STR) return FAIL("TypeError: can only concatenate str (not \"%s\") to str", jv_type_name(b));
    if (op == JO_ADD && a.t == JV_LIST) return FAIL("TypeError: can only concatenate list (not \"%s\") to list", jv_type_name(b));
    return FAIL("TypeError: unsupported operand type(s) for %s: '%s' and '%s'", opname[op], jv_type_name(a), jv_type_name(b));
ovf:
    return FAIL("OverflowError: integer result out of range");
}

/* ---- attribute / item access ---- */
static const char *str_methods[] = {"startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip", "upper",
                                    "lower", "title", "capitalize", "replace", "count", "find", "rfind", "index",
                                    "join", "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper",
                                    "splitlines", "removeprefix", "removesuffix", "format", NULL};
static const char *dict_methods[] = {"items", "keys", "values", "get", NULL};
static const char *dict_unsafe[] = {"update", "pop", "popitem", "setdefault", "clear", "copy", "fromkeys", NULL};
static const char *list_methods[] = {"index", "count", NULL};
static const char *list_unsafe[] = {"append", "extend", "pop", "insert", "remove", "sort", "reverse", "clear", "copy", NULL};

static const char *find_name(const char **tab, const char *name) {
    for (int i = 0; tab[i]; i++)
        if (!strcmp(tab[i], name)) return tab[i];
    return NULL;
}
static jv method(jv self, const char *name) {
    jfunc *f = xcalloc(1, sizeof *f);
    f->rc = 1;
    f->kind = JF_METHOD;
    f->self = jv_ref(self);
    f->name = name;
    jv v;
    v.t = JV_FUNC;
    v.u.fn = f;
    return v;
}

int jj_getattr(jctx *c, const jnode *at, jv obj, const char *name, jv *out) {
    const char *m;
    switch (obj.t) {
    case JV_UNDEF: return jj_fail_undef(c, at, obj);
    case JV_DICT:
        if ((m = find_name(dict_methods, name))) { *out = method(obj, m); return 0; }
        if (find_name(dict_unsafe, name)) { *out = jv_undef_hint("access to attribute '%s' of 'dict' object is unsafe.", name); return 0; }
        {
            jv v = jv_dict_gets(obj, name);
            if (v.t != JV_UNDEF || v.u.s) { *out = jv_ref(v); return 0; }
        }
        *out = jv_undef_hint("'dict object' has no attribute '%s'", name);
        return 0;
    case JV_NS: {
        jv v = jv_dict_gets(obj, name);
        if (v.t != JV_UNDEF || v.u.s) { *out = jv_ref(v); return 0; }
        *out = jv_undef_hint("'jinja2.utils.Namespace object' has no attribute '%s'", name);
        return 0;
    }
    case JV_STR:
        if ((m = find_name(str_methods, name))) { *out = method(obj, m); return 0; }
        *out = jv_undef_hint("'str object' has no attribute '%s'", name);
        return 0;
    case JV_LIST:
        if ((m = find_name(list_methods, name))) { *out = method(obj, m); return 0; }
        if (find_name(list_unsafe, name)) { *out = jv_undef_hint("access to attribute '%s' of 'list' object is unsafe.", name); return 0; }
        *out = jv_undef_hint("'list object' has no attribute '%s'", name);
        return 0;
    case JV_LOOP: {
        jloop *lp = obj.u.lp;
        int64_t len = (int64_t)lp->items->n, i = lp->index0;
        if (!strcmp(name, "index")) *out = jv_int(i + 1);
        else if (!strcmp(name, "index0")) *out = jv_int(i);
        else if (!strcmp(name, "revindex")) *out = jv_int(len - i);
        else if (!strcmp(name, "revindex0")) *out = jv_int(len - i - 1);
        else if (!strcmp(name, "first")) *out = jv_bool(i == 0);
        else if (!strcmp(name, "last")) *out = jv_bool(i == len - 1);
        else if (!strcmp(name, "length")) *out = jv_int(len);
        else if (!strcmp(name, "depth")) *out = jv_int(1);
        else if (!strcmp(name, "depth0")) *out = jv_int(0);
        else if (!strcmp(name, "previtem")) *out = i > 0 ? jv_ref(lp->items->v[i - 1]) : jv_undef_hint("there is no previous item");
        else if (!strcmp(name, "nextitem")) *out = i + 1 < len ? jv_ref(lp->items->v[i + 1]) : jv_undef_hint("there is no next item");
        else if (!strcmp(name, "cycle")) {
            jfunc *f = xcalloc(1, sizeof *f);
            f->rc = 1;
            f->kind = JF_LOOP_CYCLE;
            f->self = jv_ref(obj);
            f->name = "cycle";
            out->t = JV_FUNC;
            out->u.fn = f;
        } else if (!strcmp(name, "changed")) return FAIL("loop.changed is not supported");
        else *out = jv_undef_hint("'LoopContext object' has no attribute '%s'", name);
        return 0;
    }
    case JV_NONE: *out = jv_undef_hint("'None' has no attribute '%s'", name); return 0;
    default: *out = jv_undef_hint("'%s object' has no attribute '%s'", jv_type_name(obj), name); return 0;
    }
}

int jj_getitem(jctx *c, const jnode *at, jv obj, jv key, jv *out) {
    switch (obj.t) {
    case JV_UNDEF: return jj_fail_undef(c, at, obj);
    case JV_DICT: case JV_NS: {
        jv v = jv_dict_get(obj, key);
        if (v.t != JV_UNDEF || v.u.s) { *out = jv_ref(v); return 0; }
        if (key.t == JV_STR && obj.t == JV_DICT) return jj_getattr(c, at, obj, S(key), out);
        jbuf b = {0};
        jv_repr(&b, key);
        *out = jv_undef_hint("'dict object' has no attribute %s", b.p ? b.p : "");
        jbuf_free(&b);
        return 0;
    }
    case JV_LIST: case JV_STR:
        if (is_int(key)) {
            int64_t len = obj.t == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)ju_len(S(obj), SL(obj));
            int64_t i = ival(key);
            if (i < 0) i += len;
            if (i < 0 || i >= len) {
                *out = jv_undef_hint("'%s object' has no element %lld", jv_type_name(obj), (long long)ival(key));
                return 0;
            }
            if (obj.t == JV_LIST) *out = jv_ref(obj.u.l->v[i]);
            else {
                size_t off = ju_offset(S(obj), SL(obj), (size_t)i);
                uint32_t cp;
                size_t k = ju_decode(S(obj), SL(obj), off, &cp);
                *out = jv_str(S(obj) + off, k);
            }
            return 0;
        }
        if (key.t == JV_STR) return jj_getattr(c, at, obj, S(key), out);
        *out = jv_undef_hint("'%s object' has no element", jv_type_name(obj));
        return 0;
    default:
        if (key.t == JV_STR) return jj_getattr(c, at, obj, S(key), out);
        *out = jv_undef_hint("'%s object' has no element", jv_type_name(obj));
        return 0;
    }
}

/* ---- methods ---- */
static int argstr(jctx *c, const jnode *at, jv *args, size_t nargs, size_t i, const char *fn) {
    if (i >= nargs) return FAIL("TypeError: %s() missing argument", fn);
    if (args[i].t != JV_STR) return FAIL("TypeError: %s() argument must be str, not %s", fn, jv_type_name(args[i]));
    return 0;
}

int jj_call_method(jctx *c, const jnode *at, jfunc *fn, jv *args, size_t nargs, char **kwn, jv *kwv, size_t nkw,
                   jv *out) {
    jv self = fn->self;
    const char *m = fn->name;
    if (nkw && strcmp(m, "split") && strcmp(m, "rsplit")) return FAIL("TypeError: %s() takes no keyword arguments", m);
    jv kw_sep = jv_none(), kw_max = jv_int(-1);
    for (size_t i = 0; i < nkw; i++) {
        if (!strcmp(kwn[i], "sep")) kw_sep = kwv[i];
        else if (!strcmp(kwn[i], "maxsplit")) kw_max = kwv[i];
        else return FAIL("TypeError: %s() got an unexpected keyword argument '%s'", m, kwn[i]);
    }
    if (self.t == JV_DICT) {
        if (!strcmp(m, "items") || !strcmp(m, "keys") || !strcmp(m, "values")) {
            if (m[0] != 'k' && m[0] != 'v') {
                *out = dict_items(self);
                return 0;
            }
            jv l = jv_list(self.u.d->n);
            for (size_t i = 0; i < self.u.d->n; i++)
                jv_list_push(l, jv_ref(m[0] == 'k' ? self.u.d->k[i] : self.u.d->v[i]));
            *out = l;
            return 0;
        }
        if (!strcmp(m, "get")) {
            if (nargs < 1 || nargs > 2) return FAIL("TypeError: get expected 1 or 2 arguments");
            jv v = jv_dict_get(self, args[0]);
            *out = (v.t != JV_UNDEF || v.u.s) ? jv_ref(v) : nargs > 1 ? jv_ref(args[1]) : jv_none();
            return 0;
        }
    }
    if (self.t == JV_LIST) {
        if (nargs != 1) return FAIL("TypeError: %s() takes exactly one argument", m);
        int64_t cnt = 0;
        for (size_t i = 0; i < self.u.l->n; i++)
            if (jv_equal(self.u.l->v[i], args[0])) {
                if (m[0] == 'i') { *out = jv_int((int64_t)i); return 0; }
                cnt++;
            }
        if (m[0] == 'i') return FAIL("ValueError: value is not in list");
        *out = jv_int(cnt);
        return 0;
    }
    if (self.t != JV_STR) return FAIL("TypeError: bad method call");
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        if (nargs != 1) return FAIL("TypeError: %s() takes exactly one argument here", m);
        int end = m[0] == 'e', r = 0;
        if (args[0].t == JV_STR) r = py_startswith(self, args[0], end);
        else if (args[0].t == JV_LIST) {
            for (size_t i = 0; i < args[0].u.l->n && !r; i++) {
                if (args[0].u.l->v[i].t != JV_STR) return FAIL("TypeError: tuple for %s must only contain str", m);
                r = py_startswith(self, args[0].u.l->v[i], end);
            }
        } else return FAIL("TypeError: %s first arg must be str or a tuple of str, not %s", m, jv_type_name(args[0]));
        *out = jv_bool(r);
        return 0;
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        jv sep = nargs > 0 ? args[0] : kw_sep;
        jv mx = nargs > 1 ? args[1] : kw_max;
        if (sep.t != JV_NONE && sep.t != JV_STR) return FAIL("TypeError: must be str or None, not %s", jv_type_name(sep));
        if (sep.t == JV_STR && SL(sep) == 0) return FAIL("ValueError: empty separator");
        if (!is_int(mx)) return FAIL("TypeError: maxsplit must be an integer");
        *out = py_split(self, sep, ival(mx), m[0] == 'r');
        return 0;
    }
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        jv chars = nargs > 0 ? args[0] : jv_none();
        if (chars.t != JV_NONE && chars.t != JV_STR) return FAIL("TypeError: %s arg must be None or str", m);
        *out = py_strip(self, chars, m[0] != 'r', m[0] != 'l');
        return 0;
    }
    if (nargs == 0) {
        if (!strcmp(m, "upper")) { *out = str_case(self, 1); return 0; }
        if (!strcmp(m, "lower")) { *out = str_case(self, 0); return 0; }
        if (!strcmp(m, "title")) { *out = py_title(self); return 0; }
        if (!strcmp(m, "capitalize")) { *out = py_capitalize(self); return 0; }
        if (!strcmp(m, "splitlines")) {
            jv l = jv_list(0);
            size_t st = 0, n = SL(self);
            const char *p = S(self);
            for (size_t i = 0; i < n; i++) {
                if (p[i] == '\n' || p[i] == '\r') {
                    jv_list_push(l, jv_str(p + st, i - st));
                    if (p[i] == '\r' && i + 1 < n && p[i + 1] == '\n') i++;
                    st = i + 1;
                }
            }
            if (st < n) jv_list_push(l, jv_str(p + st, n - st));
            *out = l;
            return 0;
        }
        if (!strncmp(m, "is", 2)) {
            int any = 0, ok = 1, cased = 0;
            for (size_t i = 0; i < SL(self) && ok;) {
                uint32_t cp;
                i += ju_decode(S(self), SL(self), i, &cp);
                any = 1;
                utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
                int alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
                int digit = cat == UTF8PROC_CATEGORY_ND;
                if (!strcmp(m, "isdigit")) ok = digit;
                else if (!strcmp(m, "isalpha")) ok = alpha;
                else if (!strcmp(m, "isalnum")) ok = alpha || digit || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
                else if (!strcmp(m, "isspace")) ok = ju_isspace(cp);
                else if (!strcmp(m, "islower")) { if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) ok = 0; if (cat == UTF8PROC_CATEGORY_LL) cased = 1; }
                else if (!strcmp(m, "isupper")) { if (cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT) ok = 0; if (cat == UTF8PROC_CATEGORY_LU) cased = 1; }
            }
            if (!strcmp(m, "islower") || !strcmp(m, "isupper")) ok = ok && cased;
            *out = jv_bool(any && ok);
            return 0;
        }
    }
    if (!strcmp(m, "replace")) {
        if (nargs < 2 || nargs > 3 || args[0].t != JV_STR || args[1].t != JV_STR || (nargs == 3 && !is_int(args[2])))
            return FAIL("TypeError: replace() takes (old: str, new: str[, count: int])");
        *out = py_replace(self, args[0], args[1], nargs == 3 ? ival(args[2]) : -1);
        return 0;
    }
    if (!strcmp(m, "count") || !strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index")) {
        if (argstr(c, at, args, nargs, 0, m)) return -1;
        if (nargs > 1) return FAIL("TypeError: %s() with start/end is not supported", m);
        jv sub = args[0];
        const char *p = S(self);
        size_t n = SL(self), k = SL(sub);
        if (m[0] == 'c') {
            int64_t cnt = 0;
            if (k == 0) cnt = (int64_t)ju_len(p, n) + 1;
            else
                for (const char *h = p; (h = memmem(h, n - (size_t)(h - p), S(sub), k)); h += k) cnt++;
            *out = jv_int(cnt);
            return 0;
        }
        long pos = -1;
        if (m[0] == 'r') {
            for (size_t i = n >= k ? n - k + 1 : 0; i > 0; i--)
                if (memcmp(p + i - 1, S(sub), k) == 0) { pos = (long)(i - 1); break; }
        } else {
            const char *h = memmem(p, n, S(sub), k);
            if (h) pos = (long)(h - p);
            if (k == 0) pos = 0;
        }
        if (pos < 0 && m[0] == 'i') return FAIL("ValueError: substring not found");
        *out = jv_int(pos < 0 ? -1 : (int64_t)ju_len(p, (size_t)pos));
        return 0;
    }
    if (!strcmp(m, "join")) {
        if (nargs != 1) return FAIL("TypeError: join() takes exactly one argument");
        jv l;
        if (jj_to_list(c, at, args[0], &l)) return -1;
        jbuf b = {0};
        for (size_t i = 0; i < l.u.l->n; i++) {
            if (l.u.l->v[i].t != JV_STR) {
                jbuf_free(&b);
                jv_unref(l);
                return FAIL("TypeError: sequence item %zu: expected str instance", i);
            }
            if (i) jbuf_put(&b, S(self), SL(self));
            jbuf_put(&b, S(l.u.l->v[i]), SL(l.u.l->v[i]));
        }
        jv_unref(l);
        *out = jbuf_to_str(&b);
        return 0;
    }
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        if (argstr(c, at, args, nargs, 0, m)) return -1;
        int suf = m[6] == 's';
        if (py_startswith(self, args[0], suf))
            *out = suf ? jv_str(S(self), SL(self) - SL(args[0])) : jv_str(S(self) + SL(args[0]), SL(self) - SL(args[0]));
        else *out = jv_ref(self);
        return 0;
    }
    return FAIL("str.%s() with these arguments is not supported", m);
}

/* ---- sorting ---- */
typedef struct {
    jctx *c;
    const jnode *at;
    int ci; /* case-insensitive */
    int failed;
} sortctx;

static jv sort_key(jv v, int ci) {
    if (ci && v.t == JV_STR) return str_case(v, 0);
    return jv_ref(v);
}
static int cmp_vals(sortctx *sc, jv a, jv b) {
    jv ka = sort_key(a, sc->ci), kb = sort_key(b, sc->ci);
    int r = 0;
    if (jv_compare(ka, kb, &r) < 0 && !sc->failed) {
        sc->failed = 1;
        jj_fail(sc->c, sc->at, "TypeError: '<' not supported between instances of '%s' and '%s'", jv_type_name(ka), jv_type_name(kb));
    }
    jv_unref(ka);
    jv_unref(kb);
    return r;
}
/* stable merge sort of items by keys */
static void msort(sortctx *sc, jv *items, jv *keys, size_t n, jv *ti, jv *tk) {
    if (n < 2) return;
    size_t h = n / 2;
    msort(sc, items, keys, h, ti, tk);
    msort(sc, items + h, keys + h, n - h, ti, tk);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        if (cmp_vals(sc, keys[j], keys[i]) < 0) { ti[k] = items[j]; tk[k++] = keys[j++]; }
        else { ti[k] = items[i]; tk[k++] = keys[i++]; }
    }
    while (i < h) { ti[k] = items[i]; tk[k++] = keys[i++]; }
    while (j < n) { ti[k] = items[j]; tk[k++] = keys[j++]; }
    memcpy(items, ti, n * sizeof(jv));
    memcpy(keys, tk, n * sizeof(jv));
}

/* attribute path "a.b.0" as Jinja's make_attrgetter does */
static int get_attr_path(jctx *c, const jnode *at, jv obj, jv attr, jv *out) {
    if (attr.t == JV_INT) return jj_getitem(c, at, obj, attr, out);
    if (attr.t != JV_STR) return FAIL("TypeError: attribute must be a string");
    jv cur = jv_ref(obj);
    const char *p = S(attr);
    while (1) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        jv key;
        int digits = len > 0;
        for (size_t i = 0; i < len; i++)
            if (p[i] < '0' || p[i] > '9') digits = 0;
        if (digits) key = jv_int(strtoll(p, NULL, 10));
        else key = jv_str(p, len);
        jv nx;
        int rc = jj_getitem(c, at, cur, key, &nx);
        jv_unref(key);
        jv_unref(cur);
        if (rc) return -1;
        cur = nx;
        if (!dot) break;
        p = dot + 1;
    }
    *out = cur;
    return 0;
}

/* ---- filters ---- */
static const char *filter_names[] = {"abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape",
                                     "first", "float", "indent", "int", "items", "join", "last", "length", "list",
                                     "lower", "map", "max", "min", "reject", "rejectattr", "replace", "reverse",
                                     "round", "safe", "select", "selectattr", "sort", "string", "sum", "title",
                                     "tojson", "trim", "truncate", "unique", "upper", "wordcount", NULL};
int jj_filter_exists(const char *name) { return find_name(filter_names, name) != NULL; }

/* positional-or-keyword argument i named nm */
static jv farg(jv *args, size_t nargs, char **kwn, jv *kwv, size_t nkw, size_t i, const char *nm, jv def) {
    if (i < nargs) return args[i];
    for (size_t k = 0; k < nkw; k++)
        if (!strcmp(kwn[k], nm)) return kwv[k];
    return def;
}
#define ARG(i, nm, def) farg(args, nargs, kwn, kwv, nkw, (i), (nm), (def))

static int check_kw(jctx *c, const jnode *at, const char *fname, char **kwn, size_t nkw, const char *const *allowed) {
    for (size_t k = 0; k < nkw; k++) {
        int ok = 0;
        for (int i = 0; allowed[i]; i++)
            if (!strcmp(allowed[i], kwn[k])) ok = 1;
        if (!ok) return FAIL("TypeError: %s() got an unexpected keyword argument '%s'", fname, kwn[k]);
    }
    return 0;
}

static int select_like(jctx *c, const jnode *at, const char *name, jv v, jv *args, size_t nargs, jv *out) {
    int attr = !strcmp(name, "selectattr") || !strcmp(name, "rejectattr");
    int reject = name[0] == 'r';
    jv l;
    if (jj_to_list(c, at, v, &l)) return -1;
    jv res = jv_list(0);
    size_t ai = 0;
    jv attrname = jv_none();
    if (attr) {
        if (nargs < 1) { jv_unref(l); jv_unref(res); return FAIL("TypeError: %s() missing attribute name", name); }
        attrname = args[0];
        ai = 1;
    }
    const char *test = NULL;
    if (nargs > ai) {
        if (args[ai].t != JV_STR) { jv_unref(l); jv_unref(res); return FAIL("TypeError: test name must be a string"); }
        test = S(args[ai]);
        if (!jj_test_exists(test)) { jv_unref(l); jv_unref(res); return FAIL("TemplateRuntimeError: No test named '%s'.", test); }
    }
    int rc = 0;
    for (size_t i = 0; i < l.u.l->n && !rc; i++) {
        jv item = l.u.l->v[i], x;
        if (attr) rc = get_attr_path(c, at, item, attrname, &x);
        else x = jv_ref(item);
        if (rc) break;
        int t;
        if (test) rc = jj_test(c, at, test, x, args + ai + 1, nargs - ai - 1, &t);
        else t = jv_truthy(x);
        jv_unref(x);
        if (!rc && (reject ? !t : t)) jv_list_push(res, jv_ref(item));
    }
    jv_unref(l);
    if (rc) { jv_unref(res); return -1; }
    *out = res;
    return 0;
}

static int do_indent(jctx *c, const jnode *at, jv s, jv width, jv first, jv blank, jv *out) {
    jbuf ind = {0};
    if (width.t == JV_STR) jbuf_put(&ind, S(width), SL(width));
    else if (is_int(width)) for (int64_t i = 0; i < ival(width) && i < 10000; i++) jbuf_putc(&ind, ' ');
    else { return FAIL("TypeError: indent width must be an int or str"); }
    jv str = to_str(s);
    /* s += "\n"; lines = s.splitlines() */
    jv lines = jv_list(0);
    const char *p = S(str);
    size_t n = SL(str), st = 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] == '\n' || p[i] == '\r') {
            jv_list_push(lines, jv_str(p + st, i - st));
            if (p[i] == '\r' && i + 1 < n && p[i + 1] == '\n') i++;
            st = i + 1;
        }
    jv_list_push(lines, jv_str(p + st, n - st)); /* the appended "\n" ends the last line */
    jbuf b = {0};
    const char *is = ind.p ? ind.p : "";
    if (jv_truthy(first)) jbuf_put(&b, is, ind.n);
    for (size_t i = 0; i < lines.u.l->n; i++) {
        jv ln = lines.u.l->v[i];
        if (i) {
            jbuf_putc(&b, '\n');
            if (jv_truthy(blank) || SL(ln)) jbuf_put(&b, is, ind.n);
        }
        jbuf_put(&b, S(ln), SL(ln));
    }
    jv_unref(lines);
    jv_unref(str);
    jbuf_free(&ind);
    *out = jbuf_to_str(&b);
    return 0;
}

int jj_filter(jctx *c, const jnode *at, const char *name, jv v, jv *args, size_t nargs, char **kwn, jv *kwv,
              size_t nkw, jv *out) {
    if (!strcmp(name, "tojson")) {
        static const char *const kw[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
        if (check_kw(c, at, name, kwn, nkw, kw)) return -1;
        jv ea = ARG(0, "ensure_ascii", jv_bool(0)), ind = ARG(1, "indent", jv_none());
        jv seps = ARG(2, "separators", jv_none()), sk = ARG(3, "sort_keys", jv_bool(0));
        jbuf indb = {0};
        const char *indent = NULL, *isep = NULL, *ksep = NULL;
        if (is_int(ind)) { for (int64_t i = 0; i < ival(ind) && i < 1000; i++) jbuf_putc(&indb, ' '); indent = indb.p ? indb.p : ""; }
        else if (ind.t == JV_STR) indent = S(ind);
        else if (ind.t != JV_NONE) return FAIL("TypeError: tojson indent must be an int, str or None");
        if (seps.t == JV_LIST) {
            if (seps.u.l->n != 2 || seps.u.l->v[0].t != JV_STR || seps.u.l->v[1].t != JV_STR) { jbuf_free(&indb); return FAIL("TypeError: tojson separators must be a pair of strings"); }
            isep = S(seps.u.l->v[0]);
            ksep = S(seps.u.l->v[1]);
        } else if (seps.t != JV_NONE) { jbuf_free(&indb); return FAIL("TypeError: tojson separators must be a pair of strings"); }
        jbuf b = {0};
        char e[200];
        int rc = jv_tojson(&b, v, jv_truthy(ea), indent, isep, ksep, jv_truthy(sk), e, sizeof e);
        jbuf_free(&indb);
        if (rc) { jbuf_free(&b); return FAIL("TypeError: %s", e); }
        *out = jbuf_to_str(&b);
        return 0;
    }
    if (!strcmp(name, "string")) {
        if (v.t == JV_STR) { *out = jv_ref(v); return 0; }
        *out = to_str(v);
        return 0;
    }
    if (!strcmp(name, "safe")) {
        jv s = to_str(v);
        if (!s.u.s->safe) {
            jv t = jv_str(S(s), SL(s));
            jv_unref(s);
            s = t;
            s.u.s->safe = 1;
        }
        *out = s;
        return 0;
    }
    if (!strcmp(name, "e") || !strcmp(name, "escape")) { *out = jj_escape(v); return 0; }
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        switch (v.t) {
        case JV_UNDEF: *out = jv_int(0); return 0;
        case JV_STR: *out = jv_int((int64_t)ju_len(S(v), SL(v))); return 0;
        case JV_LIST: *out = jv_int((int64_t)v.u.l->n); return 0;
        case JV_DICT: case JV_NS: *out = jv_int((int64_t)v.u.d->n); return 0;
        default: return FAIL("TypeError: object of type '%s' has no len()", jv_type_name(v));
        }
    }
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        jv def = ARG(0, "default_value", jv_undef());
        jv boolean = ARG(1, "boolean", jv_bool(0));
        int use = v.t == JV_UNDEF || (jv_truthy(boolean) && !jv_truthy(v));
        if (!use) *out = jv_ref(v);
        else *out = (def.t == JV_UNDEF && !def.u.s) ? jv_str("", 0) : jv_ref(def);
        return 0;
    }
    if (!strcmp(name, "list")) return jj_to_list(c, at, v, out);
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        jv l;
        if (jj_to_list(c, at, v, &l)) return -1;
        if (l.u.l->n == 0) *out = jv_undef_hint("No %s item, sequence was empty.", name);
        else *out = jv_ref(l.u.l->v[name[0] == 'f' ? 0 : l.u.l->n - 1]);
        jv_unref(l);
        return 0;
    }
    if (!strcmp(name, "join")) {
        jv sep = ARG(0, "d", jv_none());
        jv attr = ARG(1, "attribute", jv_none());
        jv l;
        if (jj_to_list(c, at, v, &l)) return -1;
        jbuf b = {0};
        for (size_t i = 0; i < l.u.l->n; i++) {
            if (i && sep.t != JV_NONE) jv_to_str(&b, sep);
            jv x = l.u.l->v[i];
            if (attr.t != JV_NONE) {
                jv y;
                if (get_attr_path(c, at, x, attr, &y)) { jbuf_free(&b); jv_unref(l); return -1; }
                jv_to_str(&b, y);
                jv_unref(y);
            } else jv_to_str(&b, x);
        }
        jv_unref(l);
        *out = jbuf_to_str(&b);
        return 0;
    }
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") || !strcmp(name, "capitalize") ||
        !strcmp(name, "trim") || !strcmp(name, "wordcount")) {
        jv s = to_str(v);
        if (name[0] == 'u') *out = str_case(s, 1);
        else if (name[0] == 'l') *out = str_case(s, 0);
        else if (name[0] == 't' && name[1] == 'i') *out = jinja_title(s);
        else if (name[0] == 'c') *out = py_capitalize(s);
        else if (name[0] == 'w') {
            /* Jinja counts \w+ runs */
            int64_t cnt = 0;
            int inword = 0;
            for (size_t i = 0; i < SL(s);) {
                uint32_t cp;
                i += ju_decode(S(s), SL(s), i, &cp);
                utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
                int w = cp == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
                        (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO) || (cat >= UTF8PROC_CATEGORY_MN && cat <= UTF8PROC_CATEGORY_ME);
                if (w && !inword) cnt++;
                inword = w;
            }
            *out = jv_int(cnt);
        } else {
            jv chars = ARG(0, "chars", jv_none());
            *out = py_strip(s, chars, 1, 1);
        }
        jv_unref(s);
        return 0;
    }
    if (!strcmp(name, "replace")) {
        jv s = to_str(v);
        jv old = ARG(0, "old", jv_none()), nw = ARG(1, "new", jv_none()), cnt = ARG(2, "count", jv_none());
        if (old.t != JV_STR || nw.t != JV_STR || (cnt.t != JV_NONE && !is_int(cnt))) {
            jv_unref(s);
            return FAIL("TypeError: replace(old, new, count=None) needs strings");
        }
        *out = py_replace(s, old, nw, cnt.t == JV_NONE ? -1 : ival(cnt));
        jv_unref(s);
        return 0;
    }
    if (!strcmp(name, "items")) {
        if (v.t == JV_UNDEF) { *out = jv_list(0); return 0; }
        if (v.t != JV_DICT && v.t != JV_NS) return FAIL("TypeError: Can only get item pairs from a mapping.");
        *out = dict_items(v);
        return 0;
    }
    if (!strcmp(name, "dictsort")) {
        if (v.t != JV_DICT) return FAIL("TypeError: dictsort needs a mapping");
        jv cs = ARG(0, "case_sensitive", jv_bool(0)), by = ARG(1, "by", jv_none()), rev = ARG(2, "reverse", jv_bool(0));
        int byval = by.t == JV_STR && !strcmp(S(by), "value");
        if (by.t != JV_NONE && !byval && (by.t != JV_STR || strcmp(S(by), "key")))
            return FAIL("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
        size_t n = v.u.d->n;
        jv *items = xmalloc((n + 1) * sizeof(jv)), *keys = xmalloc((n + 1) * sizeof(jv));
        jv *ti = xmalloc((n + 1) * sizeof(jv)), *tk = xmalloc((n + 1) * sizeof(jv));
        for (size_t i = 0; i < n; i++) {
            jv p = jv_list(2);
            p.u.l->tuple = 1;
            jv_list_push(p, jv_ref(v.u.d->k[i]));
            jv_list_push(p, jv_ref(v.u.d->v[i]));
            items[i] = p;
            keys[i] = byval ? v.u.d->v[i] : v.u.d->k[i];
        }
        sortctx sc = {c, at, !jv_truthy(cs), 0};
        msort(&sc, items, keys, n, ti, tk);
        jv l = jv_list(n);
        for (size_t i = 0; i < n; i++) jv_list_push(l, items[jv_truthy(rev) ? n - 1 - i : i]);
        free(items); free(keys); free(ti); free(tk);
        if (sc.failed) { jv_unref(l); return -1; }
        *out = l;
        return 0;
    }
    if (!strcmp(name, "map")) {
        jv l;
        if (jj_to_list(c, at, v, &l)) return -1;
        jv res = jv_list(l.u.l->n);
        jv attr = jv_none(), def = jv_undef();
        int has_def = 0;
        for (size_t k = 0; k < nkw; k++) {
            if (!strcmp(kwn[k], "attribute")) attr = kwv[k];
            else if (!strcmp(kwn[k], "default")) { def = kwv[k]; has_def = 1; }
        }
        int rc = 0;
        if (attr.t != JV_NONE) {
            for (size_t i = 0; i < l.u.l->n && !rc; i++) {
                jv x;
                rc = get_attr_path(c, at, l.u.l->v[i], attr, &x);
                if (rc) break;
                if (x.t == JV_UNDEF && has_def) { jv_unref(x); x = jv_ref(def); }
                jv_list_push(res, x);
            }
        } else {
            if (nargs < 1 || args[0].t != JV_STR) rc = FAIL("TypeError: map() needs a filter name or attribute=");
            else if (!jj_filter_exists(S(args[0]))) rc = FAIL("TemplateRuntimeError: No filter named '%s'.", S(args[0]));
            for (size_t i = 0; i < l.u.l->n && !rc; i++) {
                jv x;
                rc = jj_filter(c, at, S(args[0]), l.u.l->v[i], args + 1, nargs - 1, kwn, kwv, nkw, &x);
                if (!rc) jv_list_push(res, x);
            }
        }
        jv_unref(l);
        if (rc) { jv_unref(res); return -1; }
        *out = res;
        return 0;
    }
    if (!strcmp(name, "select") || !strcmp(name, "reject") || !strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
        return select_like(c, at, name, v, args, nargs, out);
    if (!strcmp(name, "sort") || !strcmp(name, "unique") || !strcmp(name, "min") || !strcmp(name, "max")) {
        int is_sort = name[0] == 's', is_unique = name[0] == 'u';
        jv rev = is_sort ? ARG(0, "reverse", jv_bool(0)) : jv_bool(0);
        jv cs = ARG(is_sort ? 1 : 0, "case_sensitive", jv_bool(0));
        jv attr = ARG(is_sort ? 2 : 1, "attribute", jv_none());
        jv l;
        if (jj_to_list(c, at, v, &l)) return -1;
        size_t n = l.u.l->n;
        jv *keys = xcalloc(n + 1, sizeof(jv));
        int rc = 0;
        for (size_t i = 0; i < n && !rc; i++) {
            if (attr.t != JV_NONE) rc = get_attr_path(c, at, l.u.l->v[i], attr, &keys[i]);
            else keys[i] = jv_ref(l.u.l->v[i]);
        }
        sortctx sc = {c, at, !jv_truthy(cs), 0};
        if (!rc && is_sort) {
            jv *ti = xmalloc((n + 1) * sizeof(jv)), *tk = xmalloc((n + 1) * sizeof(jv));
            msort(&sc, l.u.l->v, keys, n, ti, tk);
            free(ti);
            free(tk);
            if (jv_truthy(rev))
                for (size_t i = 0; i < n / 2; i++) { jv t = l.u.l->v[i]; l.u.l->v[i] = l.u.l->v[n - 1 - i]; l.u.l->v[n - 1 - i] = t; }
            /* Python's sort(reverse=True) keeps equal items stable in original order; approximate by stable reverse of a stable sort */
        }
        if (!rc && is_unique) {
            jv res = jv_list(0), seen = jv_list(0);
            for (size_t i = 0; i < n; i++) {
                jv k = sort_key(keys[i], sc.ci);
                int dup = 0;
                for (size_t j = 0; j < seen.u.l->n && !dup; j++) dup = jv_equal(seen.u.l->v[j], k);
                if (dup) jv_unref(k);
                else { jv_list_push(seen, k); jv_list_push(res, jv_ref(l.u.l->v[i])); }
            }
            jv_unref(seen);
            jv_unref(l);
            l = res;
        }
        if (!rc && (name[0] == 'm')) {
            if (n == 0) *out = jv_undef_hint("No aggregated item, sequence was empty.");
            else {
                size_t best = 0;
                for (size_t i = 1; i < n && !sc.failed; i++) {
                    int r = cmp_vals(&sc, keys[i], keys[best]);
                    if (name[1] == 'i' ? r < 0 : r > 0) best = i;
                }
                *out = jv_ref(l.u.l->v[best]);
            }
        }
        for (size_t i = 0; i < n; i++) jv_unref(keys[i]);
        free(keys);
        if (rc || sc.failed) { jv_unref(l); if (name[0] == 'm' && !rc) jv_unref(*out); return -1; }
        if (name[0] == 'm') jv_unref(l);
        else *out = l;
        return 0;
    }
    if (!strcmp(name, "reverse")) {
        if (v.t == JV_STR) {
            jv l;
            jj_to_list(c, at, v, &l);
            jbuf b = {0};
            for (size_t i = l.u.l->n; i > 0; i--) jbuf_put(&b, S(l.u.l->v[i - 1]), SL(l.u.l->v[i - 1]));
            jv_unref(l);
            *out = jbuf_to_str(&b);
            return 0;
        }
        jv l;
        if (jj_to_list(c, at, v, &l)) return -1;
        size_t n = l.u.l->n;
        for (size_t i = 0; i < n / 2; i++) { jv t = l.u.l->v[i]; l.u.l->v[i] = l.u.l->v[n - 1 - i]; l.u.l->v[n - 1 - i] = t; }
        *out = l;
        return 0;
    }
    if (!strcmp(name, "indent")) {
        jv w = ARG(0, "width", jv_int(4)), first = ARG(1, "first", jv_bool(0)), blank = ARG(2, "blank", jv_bool(0));
        return do_indent(c, at, v, w, first, blank, out);
    }
    if (!strcmp(name, "int")) {
        jv def = ARG(0, "default", jv_int(0));
        jv base = ARG(1, "base", jv_int(10));
        if (is_int(v)) { *out = jv_int(ival(v)); return 0; }
        if (v.t == JV_FLOAT) {
            if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18) { *out = jv_ref(def); return 0; }
            *out = jv_int((int64_t)v.u.f);
            return 0;
        }
        if (v.t == JV_STR) {
            jv t = py_strip(v, jv_none(), 1, 1);
            char *end;
            long long x = strtoll(S(t), &end, is_int(base) ? (int)ival(base) : 10);
            if (SL(t) && *end == 0) { *out = jv_int(x); jv_unref(t); return 0; }
            double d = strtod(S(t), &end);
            if (SL(t) && *end == 0 && isfinite(d) && fabs(d) < 9.2e18) { *out = jv_int((int64_t)d); jv_unref(t); return 0; }
            jv_unref(t);
        }
        *out = jv_ref(def);
        return 0;
    }
    if (!strcmp(name, "float")) {
        jv def = ARG(0, "default", jv_float(0.0));
        if (is_numv(v)) { *out = jv_float(fval(v)); return 0; }
        if (v.t == JV_STR) {
            jv t = py_strip(v, jv_none(), 1, 1);
            char *end;
            double d = strtod(S(t), &end);
            int ok = SL(t) && *end == 0;
            jv_unref(t);
            if (ok) { *out = jv_float(d); return 0; }
        }
        *out = jv_ref(def);
        return 0;
    }
    if (!strcmp(name, "abs")) {
        if (v.t == JV_INT) { if (v.u.i == INT64_MIN) return FAIL("OverflowError: integer out of range"); *out = jv_int(v.u.i < 0 ? -v.u.i : v.u.i); return 0; }
        if (v.t == JV_BOOL) { *out = jv_int(v.u.b); return 0; }
        if (v.t == JV_FLOAT) { *out = jv_float(fabs(v.u.f)); return 0; }
        return FAIL("TypeError: bad operand type for abs(): '%s'", jv_type_name(v));
    }
    if (!strcmp(name, "round")) {
        jv prec = ARG(0, "precision", jv_int(0)), meth = ARG(1, "method", jv_none());
        if (!is_numv(v) || !is_int(prec)) return FAIL("TypeError: round needs a number");
        double x = fval(v), p = pow(10.0, (double)ival(prec));
        const char *mm = meth.t == JV_STR ? S(meth) : "common";
        double r;
        if (!strcmp(mm, "floor")) r = floor(x * p) / p;
        else if (!strcmp(mm, "ceil")) r = ceil(x * p) / p;
        else if (!strcmp(mm, "common")) {
            /* Python round(): half to even on the decimal value */
            double y = x * p, fl = floor(y), diff = y - fl;
            r = diff > 0.5 ? fl + 1 : diff < 0.5 ? fl : (fmod(fl, 2) == 0 ? fl : fl + 1);
            r /= p;
        } else return FAIL("FilterArgumentError: method must be common, ceil or floor");
        *out = jv_float(r);
        return 0;
    }
    if (!strcmp(name, "sum")) {
        jv attr = ARG(0, "attribute", jv_none()), start = ARG(1, "start", jv_int(0));
        jv l;
        if (jj_to_list(c, at, v, &l)) return -1;
        jv acc = jv_ref(start);
        int rc = 0;
        for (size_t i = 0; i < l.u.l->n && !rc; i++) {
            jv x, nacc;
            if (attr.t != JV_NONE) rc = get_attr_path(c, at, l.u.l->v[i], attr, &x);
            else x = jv_ref(l.u.l->v[i]);
            if (rc) break;
            rc = jj_binop(c, at, JO_ADD, acc, x, &nacc);
            jv_unref(x);
            if (!rc) { jv_unref(acc); acc = nacc; }
        }
        jv_unref(l);
        if (rc) { jv_unref(acc); return -1; }
        *out = acc;
        return 0;
    }
    if (!strcmp(name, "attr")) {
        if (nargs != 1 || args[0].t != JV_STR) return FAIL("TypeError: attr() needs a name");
        return jj_getattr(c, at, v, S(args[0]), out);
    }
    if (!strcmp(name, "truncate")) {
        jv len = ARG(0, "length", jv_int(255)), kill = ARG(1, "killwords", jv_bool(0)), end = ARG(2, "end", jv_none()),
           lee = ARG(3, "leeway", jv_int(5));
        if (!is_int(len) || !is_int(lee)) return FAIL("TypeError: truncate length must be an int");
        jv s = to_str(v);
        const char *endstr = end.t == JV_STR ? S(end) : "...";
        int64_t n = (int64_t)ju_len(S(s), SL(s)), L = ival(len), el = (int64_t)ju_len(endstr, strlen(endstr));
        if (L < el) { jv_unref(s); return FAIL("AssertionError: expected length >= %lld", (long long)el); }
        if (n <= L + ival(lee)) { *out = s; return 0; }
        size_t cut = ju_offset(S(s), SL(s), (size_t)(L - el));
        jbuf b = {0};
        if (jv_truthy(kill)) jbuf_put(&b, S(s), cut);
        else {
            /* rsplit(" ", 1)[0] of the cut text */
            size_t k = cut;
            while (k > 0 && S(s)[k - 1] != ' ') k--;
            jbuf_put(&b, S(s), k > 0 ? k - 1 : cut);
        }
        jbuf_puts(&b, endstr);
        jv_unref(s);
        *out = jbuf_to_str(&b);
        return 0;
    }
    static const char *unsupported[] = {"batch", "center", "filesizeformat", "forceescape", "format", "groupby",
                                        "pprint", "random", "slice", "striptags", "urlencode", "urlize", "wordwrap",
                                        "xmlattr", NULL};
    if (find_name(unsupported, name)) return FAIL("the '%s' filter is not supported", name);
    return FAIL("TemplateAssertionError: No filter named '%s'.", name);
}

/* ---- tests ---- */
static const char *test_names[] = {"defined", "undefined", "none", "boolean", "false", "true", "integer", "float",
                                   "number", "string", "mapping", "iterable", "sequence", "callable", "sameas",
                                   "escaped", "in", "eq", "equalto", "==", "ne", "!=", "gt", "greaterthan", ">",
                                   "ge", ">=", "lt", "lessthan", "<", "le", "<=", "odd", "even", "divisibleby",
                                   "lower", "upper", "filter", "test", NULL};
int jj_test_exists(const char *name) { return find_name(test_names, name) != NULL; }

int jj_test(jctx *c, const jnode *at, const char *name, jv v, jv *args, size_t nargs, int *res) {
    const char *n = name;
    if (!jj_test_exists(n)) return FAIL("TemplateAssertionError: No test named '%s'.", n);
    if (!strcmp(n, "defined")) *res = v.t != JV_UNDEF;
    else if (!strcmp(n, "undefined")) *res = v.t == JV_UNDEF;
    else if (!strcmp(n, "none")) *res = v.t == JV_NONE;
    else if (!strcmp(n, "boolean")) *res = v.t == JV_BOOL;
    else if (!strcmp(n, "false")) *res = v.t == JV_BOOL && !v.u.b;
    else if (!strcmp(n, "true")) *res = v.t == JV_BOOL && v.u.b;
    else if (!strcmp(n, "integer")) *res = v.t == JV_INT;
    else if (!strcmp(n, "float")) *res = v.t == JV_FLOAT;
    else if (!strcmp(n, "number")) *res = is_numv(v);
    else if (!strcmp(n, "string")) *res = v.t == JV_STR;
    else if (!strcmp(n, "mapping")) *res = v.t == JV_DICT;
    else if (!strcmp(n, "iterable")) *res = v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
    else if (!strcmp(n, "sequence")) *res = v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
    else if (!strcmp(n, "callable")) *res = v.t == JV_FUNC || v.t == JV_MACRO;
    else if (!strcmp(n, "escaped")) *res = v.t == JV_STR && v.u.s->safe;
    else if (!strcmp(n, "filter") || !strcmp(n, "test")) *res = v.t == JV_STR && (n[0] == 'f' ? jj_filter_exists(S(v)) : jj_test_exists(S(v)));
    else if (!strcmp(n, "lower") || !strcmp(n, "upper")) {
        jv s = to_str(v), l = str_case(s, n[0] == 'u');
        int has = 0;
        for (size_t i = 0; i < SL(s);) {
            uint32_t cp;
            i += ju_decode(S(s), SL(s), i, &cp);
            if (is_cased(cp)) has = 1;
        }
        *res = has && jv_equal(s, l);
        jv_unref(s);
        jv_unref(l);
    } else if (!strcmp(n, "odd") || !strcmp(n, "even")) {
        if (!is_int(v)) return FAIL("TypeError: %s test needs an integer", n);
        int64_t x = ival(v);
        *res = n[0] == 'o' ? (x % 2 != 0) : (x % 2 == 0);
    } else {
        if (nargs != 1) return FAIL("TypeError: test '%s' takes one argument", n);
        jv b = args[0];
        if (!strcmp(n, "sameas")) {
            *res = v.t == b.t && (jv_is_heap(v) ? v.u.s == b.u.s : jv_equal(v, b));
        } else if (!strcmp(n, "divisibleby")) {
            if (!is_int(v) || !is_int(b) || ival(b) == 0) return FAIL("TypeError: divisibleby needs non-zero integers");
            *res = ival(v) % ival(b) == 0;
        } else if (!strcmp(n, "in")) {
            if (b.t == JV_STR) {
                if (v.t != JV_STR) return FAIL("TypeError: 'in <string>' requires string as left operand");
                *res = SL(v) == 0 || memmem(S(b), SL(b), S(v), SL(v)) != NULL;
            } else if (b.t == JV_LIST) {
                *res = 0;
                for (size_t i = 0; i < b.u.l->n && !*res; i++) *res = jv_equal(v, b.u.l->v[i]);
            } else if (b.t == JV_DICT) *res = jv_dict_has(b, v);
            else return FAIL("TypeError: argument of type '%s' is not iterable", jv_type_name(b));
        } else if (!strcmp(n, "eq") || !strcmp(n, "equalto") || !strcmp(n, "==")) *res = jv_equal(v, b);
        else if (!strcmp(n, "ne") || !strcmp(n, "!=")) *res = !jv_equal(v, b);
        else {
            int cmp;
            if (jv_compare(v, b, &cmp) < 0) return FAIL("TypeError: '%s' not supported between instances of '%s' and '%s'", n, jv_type_name(v), jv_type_name(b));
            if (!strcmp(n, "gt") || !strcmp(n, "greaterthan") || !strcmp(n, ">")) *res = cmp > 0;
            else if (!strcmp(n, "ge") || !strcmp(n, ">=")) *res = cmp >= 0;
            else if (!strcmp(n, "lt") || !strcmp(n, "lessthan") || !strcmp(n, "<")) *res = cmp < 0;
            else *res = cmp <= 0;
        }
    }
    return 0;
}
