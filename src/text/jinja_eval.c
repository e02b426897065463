/* jinja_eval: the tree-walking evaluator and the public jinja_parse /
 * jinja_render. Scoping follows Jinja2: a for-loop iteration, a macro call
 * and a with block get a fresh frame; `set` writes the innermost frame, so
 * values set inside a loop do not survive it (hence namespaces). Errors
 * carry the template name, line and column of the node that failed. Loop
 * iterations, call depth and output size are bounded. */
#include "text/jinja_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"

typedef struct rctx {
    jctx c;
    jbuf *out;
} rctx;

int jj_fail(jctx *c, const jnode *n, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = 1;
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n) ds_err(c->err, c->errlen, "%s:%d:%d: %s", c->t->name, n->line, n->col, msg);
    else ds_err(c->err, c->errlen, "%s: %s", c->t->name, msg);
    return -1;
}
int jj_fail_undef(jctx *c, const jnode *n, jv u) {
    if (u.t == JV_UNDEF && u.u.s) return jj_fail(c, n, "UndefinedError: %s", u.u.s->s);
    return jj_fail(c, n, "UndefinedError: value is undefined");
}

/* ---- scopes ---- */
static jv lookup(jscope *s, const char *name) {
    for (; s; s = s->parent) {
        jv v = jv_dict_gets(s->vars, name);
        if (v.t != JV_UNDEF || v.u.s) return v;
    }
    return jv_undef();
}
static void scope_set(jscope *s, const char *name, jv val) { jv_dict_sets(s->vars, name, val); }

static jv mkfunc(jfunc_kind k, jv self, const char *name) {
    jfunc *f = xcalloc(1, sizeof *f);
    f->rc = 1;
    f->kind = k;
    f->self = self;
    f->name = name;
    jv v;
    v.t = JV_FUNC;
    v.u.fn = f;
    return v;
}

static int exec_body(rctx *r, jscope *s, const jnode *body);
static int eval(rctx *r, jscope *s, const jnode *n, jv *out);

static int render_to_str(rctx *r, jscope *s, const jnode *body, jv *out) {
    jbuf b = {0};
    jbuf *saved = r->out;
    r->out = &b;
    int rc = exec_body(r, s, body);
    r->out = saved;
    if (rc) { jbuf_free(&b); return -1; }
    if (b.overflow) { jbuf_free(&b); return jj_fail(&r->c, body, "output too large"); }
    *out = jbuf_to_str(&b);
    return 0;
}

/* ---- calls ---- */
static int call_macro(rctx *r, const jnode *at, jmacro *m, jv *args, size_t nargs, char **kwn, jv *kwv, size_t nkw,
                      jv *out) {
    const jnode *def = m->def;
    if (m->is_caller && !m->scope) return jj_fail(&r->c, at, "caller() called after its call block ended");
    if (r->c.depth >= JJ_MAX_DEPTH) return jj_fail(&r->c, at, "macro recursion too deep (limit %d)", JJ_MAX_DEPTH);
    jscope frame;
    frame.vars = jv_dict();
    frame.parent = m->is_caller ? m->scope : r->c.root;
    int rc = 0;
    if (nargs > def->nkw) {
        rc = jj_fail(&r->c, at, "macro '%s' takes not more than %zu argument(s)", def->name ? def->name : "caller", def->nkw);
        goto done;
    }
    for (size_t i = 0; i < nargs; i++) scope_set(&frame, def->kwnames[i], jv_ref(args[i]));
    jv caller = jv_undef();
    for (size_t k = 0; k < nkw; k++) {
        if (!strcmp(kwn[k], "caller")) { caller = kwv[k]; continue; }
        size_t i;
        for (i = 0; i < def->nkw; i++)
            if (!strcmp(def->kwnames[i], kwn[k])) break;
        if (i == def->nkw) {
            rc = jj_fail(&r->c, at, "macro '%s' takes no keyword argument '%s'", def->name ? def->name : "caller", kwn[k]);
            goto done;
        }
        if (i < nargs) {
            rc = jj_fail(&r->c, at, "macro '%s' got multiple values for argument '%s'", def->name ? def->name : "caller", kwn[k]);
            goto done;
        }
        scope_set(&frame, def->kwnames[i], jv_ref(kwv[k]));
    }
    for (size_t i = nargs; i < def->nkw; i++) {
        jv have = jv_dict_gets(frame.vars, def->kwnames[i]);
        if (have.t != JV_UNDEF || have.u.s) continue;
        if (def->kwvals[i]) {
            jv d;
            if (eval(r, &frame, def->kwvals[i], &d)) { rc = -1; goto done; }
            scope_set(&frame, def->kwnames[i], d);
        } else {
            scope_set(&frame, def->kwnames[i], jv_undef_hint("parameter '%s' was not provided", def->kwnames[i]));
        }
    }
    if (caller.t == JV_MACRO) scope_set(&frame, "caller", jv_ref(caller));
    r->c.depth++;
    rc = render_to_str(r, &frame, def->b, out);
    r->c.depth--;
done:
    jv_unref(frame.vars);
    return rc;
}

static int call_builtin(rctx *r, const jnode *at, jfunc *f, jv *args, size_t nargs, char **kwn, jv *kwv, size_t nkw,
                        jv *out) {
    jctx *c = &r->c;
    switch (f->kind) {
    case JF_RANGE: {
        int64_t a = 0, b = 0, st = 1;
        for (size_t i = 0; i < nargs; i++)
            if (args[i].t != JV_INT && args[i].t != JV_BOOL)
                return jj_fail(c, at, "TypeError: range() expects integers, got %s", jv_type_name(args[i]));
#define IV(x) ((x).t == JV_INT ? (x).u.i : (int64_t)(x).u.b)
        if (nargs == 1) b = IV(args[0]);
        else if (nargs == 2) { a = IV(args[0]); b = IV(args[1]); }
        else if (nargs == 3) { a = IV(args[0]); b = IV(args[1]); st = IV(args[2]); }
        else return jj_fail(c, at, "TypeError: range expected 1 to 3 arguments, got %zu", nargs);
#undef IV
        if (st == 0) return jj_fail(c, at, "ValueError: range() arg 3 must not be zero");
        double cnt = st > 0 ? ceil(((double)b - (double)a) / (double)st) : ceil(((double)a - (double)b) / (double)-st);
        if (cnt > (double)JJ_MAX_ITERS) return jj_fail(c, at, "OverflowError: range too big, maximum size for range is %ld", JJ_MAX_ITERS);
        *out = jv_list(cnt > 0 ? (size_t)cnt : 0);
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st) jv_list_push(*out, jv_int(i));
        return 0;
    }
    case JF_NAMESPACE: case JF_DICT: {
        jv d = jv_dict();
        for (size_t i = 0; i < nargs; i++) {
            if (args[i].t == JV_DICT || args[i].t == JV_NS) {
                for (size_t k = 0; k < args[i].u.d->n; k++)
                    jv_dict_set(d, jv_ref(args[i].u.d->k[k]), jv_ref(args[i].u.d->v[k]));
            } else if (args[i].t == JV_LIST) {
                for (size_t k = 0; k < args[i].u.l->n; k++) {
                    jv p = args[i].u.l->v[k];
                    if (p.t != JV_LIST || p.u.l->n != 2) { jv_unref(d); return jj_fail(c, at, "TypeError: %s() sequence element is not a pair", f->kind == JF_DICT ? "dict" : "namespace"); }
                    jv_dict_set(d, jv_ref(p.u.l->v[0]), jv_ref(p.u.l->v[1]));
                }
            } else {
                jv_unref(d);
                return jj_fail(c, at, "TypeError: %s() argument must be a mapping", f->kind == JF_DICT ? "dict" : "namespace");
            }
        }
        for (size_t i = 0; i < nkw; i++) jv_dict_set(d, jv_cstr(kwn[i]), jv_ref(kwv[i]));
        if (f->kind == JF_NAMESPACE) d.t = JV_NS;
        *out = d;
        return 0;
    }
    case JF_RAISE: {
        jbuf b = {0};
        if (nargs > 0) jv_to_str(&b, args[0]);
        int rc = jj_fail(c, at, "raise_exception: %s", b.p ? b.p : "");
        jbuf_free(&b);
        return rc;
    }
    case JF_STRFTIME: {
        if (nargs != 1 || args[0].t != JV_STR) return jj_fail(c, at, "TypeError: strftime_now() takes one string argument");
        time_t now = time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        char buf[512];
        size_t n = args[0].u.s->len ? strftime(buf, sizeof buf, args[0].u.s->s, &tmv) : 0;
        *out = jv_str(buf, n);
        return 0;
    }
    case JF_LOOP_CYCLE: {
        if (nargs == 0) return jj_fail(c, at, "TypeError: no items for cycling given");
        jloop *lp = f->self.u.lp;
        *out = jv_ref(args[lp->index0 % (int64_t)nargs]);
        return 0;
    }
    case JF_METHOD: return jj_call_method(c, at, f, args, nargs, kwn, kwv, nkw, out);
    default: return jj_fail(c, at, "SecurityError: access to '%s' is unsafe", f->name ? f->name : "?");
    }
}

int jj_call_value(jctx *c, const jnode *at, jv fn, jv *args, size_t nargs, char **kwn, jv *kwv, size_t nkw,
                  jv *out) {
    rctx *r = (rctx *)c;
    if (fn.t == JV_MACRO) return call_macro(r, at, fn.u.m, args, nargs, kwn, kwv, nkw, out);
    if (fn.t == JV_FUNC) return call_builtin(r, at, fn.u.fn, args, nargs, kwn, kwv, nkw, out);
    if (fn.t == JV_UNDEF) return jj_fail_undef(c, at, fn);
    return jj_fail(c, at, "TypeError: '%s' object is not callable", jv_type_name(fn));
}

/* ---- expressions ---- */
static int eval_args(rctx *r, jscope *s, const jnode *n, jv **args, jv **kwv) {
    *args = n->nkids ? xcalloc(n->nkids, sizeof(jv)) : NULL;
    *kwv = n->nkw ? xcalloc(n->nkw, sizeof(jv)) : NULL;
    for (size_t i = 0; i < n->nkids; i++)
        if (eval(r, s, n->kids[i], &(*args)[i])) return -1;
    for (size_t i = 0; i < n->nkw; i++)
        if (eval(r, s, n->kwvals[i], &(*kwv)[i])) return -1;
    return 0;
}
static void free_args(const jnode *n, jv *args, jv *kwv) {
    for (size_t i = 0; i < n->nkids && args; i++) jv_unref(args[i]);
    for (size_t i = 0; i < n->nkw && kwv; i++) jv_unref(kwv[i]);
    free(args);
    free(kwv);
}

/* applies the filter chain f (whose innermost input is NULL) to v (taken) */
static int apply_filter_chain(rctx *r, jscope *s, const jnode *f, jv v, jv *out) {
    if (!f) { *out = v; return 0; }
    jv in;
    if (apply_filter_chain(r, s, f->a, v, &in)) return -1;
    jv *args, *kwv;
    int rc = eval_args(r, s, f, &args, &kwv);
    if (!rc) rc = jj_filter(&r->c, f, f->name, in, args, f->nkids, f->kwnames, kwv, f->nkw, out);
    free_args(f, args, kwv);
    jv_unref(in);
    return rc;
}

static int64_t norm_index(int64_t i, int64_t len) {
    if (i < 0) i += len;
    return i;
}

static int eval_slice(rctx *r, jscope *s, const jnode *n, jv *out) {
    jv obj, parts[3] = {jv_none(), jv_none(), jv_none()};
    if (eval(r, s, n->a, &obj)) return -1;
    const jnode *pn[3] = {n->b, n->c, n->d};
    int rc = 0;
    for (int i = 0; i < 3 && !rc; i++) {
        if (!pn[i]) continue;
        rc = eval(r, s, pn[i], &parts[i]);
        if (!rc && parts[i].t != JV_NONE && parts[i].t != JV_INT && parts[i].t != JV_BOOL)
            rc = jj_fail(&r->c, n, "TypeError: slice indices must be integers or None");
    }
    if (rc) goto done;
    if (obj.t == JV_UNDEF) { rc = jj_fail_undef(&r->c, n, obj); goto done; }
    if (obj.t != JV_LIST && obj.t != JV_STR) { rc = jj_fail(&r->c, n, "TypeError: '%s' object is not subscriptable", jv_type_name(obj)); goto done; }
    {
        int64_t len = obj.t == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)ju_len(obj.u.s->s, obj.u.s->len);
        int64_t step = parts[2].t == JV_NONE ? 1 : parts[2].t == JV_INT ? parts[2].u.i : parts[2].u.b;
        if (step == 0) { rc = jj_fail(&r->c, n, "ValueError: slice step cannot be zero"); goto done; }
        int64_t start, stop;
#define PV(x) ((x).t == JV_INT ? (x).u.i : (int64_t)(x).u.b)
        if (parts[0].t == JV_NONE) start = step > 0 ? 0 : len - 1;
        else {
            start = norm_index(PV(parts[0]), len);
            if (start < 0) start = step > 0 ? 0 : -1;
            if (start >= len) start = step > 0 ? len : len - 1;
        }
        if (parts[1].t == JV_NONE) stop = step > 0 ? len : -1;
        else {
            stop = norm_index(PV(parts[1]), len);
            if (stop < 0) stop = step > 0 ? 0 : -1;
            if (stop >= len) stop = step > 0 ? len : len - 1;
        }
#undef PV
        if (obj.t == JV_LIST) {
            jv l = jv_list(0);
            for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) jv_list_push(l, jv_ref(obj.u.l->v[i]));
            *out = l;
        } else {
            /* code point offsets */
            const char *p = obj.u.s->s;
            size_t bn = obj.u.s->len;
            size_t *offs = xmalloc(((size_t)len + 1) * sizeof(size_t));
            size_t bi = 0;
            for (int64_t i = 0; i < len; i++) { uint32_t cp; offs[i] = bi; bi += ju_decode(p, bn, bi, &cp); }
            offs[len] = bn;
            jbuf b = {0};
            if (step == 1) { if (stop > start) jbuf_put(&b, p + offs[start], offs[stop] - offs[start]); }
            else
                for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) jbuf_put(&b, p + offs[i], offs[i + 1] - offs[i]);
            free(offs);
            *out = jbuf_to_str(&b);
        }
    }
done:
    jv_unref(obj);
    for (int i = 0; i < 3; i++) jv_unref(parts[i]);
    return rc;
}

static int compare_op(rctx *r, const jnode *at, int op, jv a, jv b, int *res) {
    if (op == JO_EQ) { *res = jv_equal(a, b); return 0; }
    if (op == JO_NE) { *res = !jv_equal(a, b); return 0; }
    if (op == JO_IN || op == JO_NOTIN) {
        int found = 0;
        if (b.t == JV_STR) {
            if (a.t != JV_STR) return jj_fail(&r->c, at, "TypeError: 'in <string>' requires string as left operand, not %s", jv_type_name(a));
            found = a.u.s->len == 0 || memmem(b.u.s->s, b.u.s->len, a.u.s->s, a.u.s->len) != NULL;
        } else if (b.t == JV_LIST) {
            for (size_t i = 0; i < b.u.l->n && !found; i++) found = jv_equal(a, b.u.l->v[i]);
        } else if (b.t == JV_DICT || b.t == JV_NS) {
            found = jv_dict_has(b, a);
        } else if (b.t == JV_UNDEF) {
            found = 0;
        } else return jj_fail(&r->c, at, "TypeError: argument of type '%s' is not iterable", jv_type_name(b));
        *res = op == JO_IN ? found : !found;
        return 0;
    }
    int cmp;
    if (a.t == JV_UNDEF) return jj_fail_undef(&r->c, at, a);
    if (b.t == JV_UNDEF) return jj_fail_undef(&r->c, at, b);
    if (jv_compare(a, b, &cmp) < 0) {
        static const char *names[] = {[JO_LT] = "<", [JO_LE] = "<=", [JO_GT] = ">", [JO_GE] = ">="};
        return jj_fail(&r->c, at, "TypeError: '%s' not supported between instances of '%s' and '%s'", names[op],
                       jv_type_name(a), jv_type_name(b));
    }
    switch (op) {
    case JO_LT: *res = cmp < 0; break;
    case JO_LE: *res = cmp <= 0; break;
    case JO_GT: *res = cmp > 0; break;
    default: *res = cmp >= 0; break;
    }
    return 0;
}

static int eval(rctx *r, jscope *s, const jnode *n, jv *out) {
    jctx *c = &r->c;
    *out = jv_undef();
    if (c->failed) return -1;
    if (c->depth > JJ_MAX_DEPTH * 4) return jj_fail(c, n, "expression nested too deeply");
    switch (n->k) {
    case JN_CONST: *out = n->val; return 0;
    case JN_NAME: {
        jv v = lookup(s, n->name);
        if (v.t != JV_UNDEF || v.u.s) { *out = jv_ref(v); return 0; }
        const char *nm = n->name;
        if (!strcmp(nm, "range")) *out = mkfunc(JF_RANGE, jv_none(), "range");
        else if (!strcmp(nm, "namespace")) *out = mkfunc(JF_NAMESPACE, jv_none(), "namespace");
        else if (!strcmp(nm, "dict")) *out = mkfunc(JF_DICT, jv_none(), "dict");
        else if (!strcmp(nm, "raise_exception")) *out = mkfunc(JF_RAISE, jv_none(), "raise_exception");
        else if (!strcmp(nm, "strftime_now")) *out = mkfunc(JF_STRFTIME, jv_none(), "strftime_now");
        else *out = jv_undef_hint("'%s' is undefined", nm);
        return 0;
    }
    case JN_GETATTR: {
        jv obj;
        if (eval(r, s, n->a, &obj)) return -1;
        int rc = jj_getattr(c, n, obj, n->name, out);
        jv_unref(obj);
        return rc;
    }
    case JN_GETITEM: {
        jv obj, key;
        if (eval(r, s, n->a, &obj)) return -1;
        if (eval(r, s, n->b, &key)) { jv_unref(obj); return -1; }
        int rc = jj_getitem(c, n, obj, key, out);
        jv_unref(obj);
        jv_unref(key);
        return rc;
    }
    case JN_SLICE: return eval_slice(r, s, n, out);
    case JN_CALL: {
        jv fn;
        if (eval(r, s, n->a, &fn)) return -1;
        jv *args, *kwv;
        int rc = eval_args(r, s, n, &args, &kwv);
        if (!rc) {
            c->depth++;
            rc = jj_call_value(c, n, fn, args, n->nkids, n->kwnames, kwv, n->nkw, out);
            c->depth--;
        }
        free_args(n, args, kwv);
        jv_unref(fn);
        return rc;
    }
    case JN_FILTER: {
        jv in;
        if (eval(r, s, n->a, &in)) return -1;
        jv *args, *kwv;
        int rc = eval_args(r, s, n, &args, &kwv);
        if (!rc) rc = jj_filter(c, n, n->name, in, args, n->nkids, n->kwnames, kwv, n->nkw, out);
        free_args(n, args, kwv);
        jv_unref(in);
        return rc;
    }
    case JN_TEST: {
        jv in;
        if (eval(r, s, n->a, &in)) return -1;
        jv *args, *kwv;
        int res = 0;
        int rc = eval_args(r, s, n, &args, &kwv);
        if (!rc) rc = jj_test(c, n, n->name, in, args, n->nkids, &res);
        free_args(n, args, kwv);
        jv_unref(in);
        if (!rc) *out = jv_bool(n->op ? !res : res);
        return rc;
    }
    case JN_BINOP: {
        jv a, b;
        if (eval(r, s, n->a, &a)) return -1;
        if (eval(r, s, n->b, &b)) { jv_unref(a); return -1; }
        int rc = jj_binop(c, n, n->op, a, b, out);
        jv_unref(a);
        jv_unref(b);
        return rc;
    }
    case JN_NEG: case JN_POS: {
        jv a;
        if (eval(r, s, n->a, &a)) return -1;
        int rc = 0;
        if (a.t == JV_INT) *out = jv_int(n->k == JN_NEG ? -a.u.i : a.u.i);
        else if (a.t == JV_BOOL) *out = jv_int(n->k == JN_NEG ? -a.u.b : a.u.b);
        else if (a.t == JV_FLOAT) *out = jv_float(n->k == JN_NEG ? -a.u.f : a.u.f);
        else if (a.t == JV_UNDEF) rc = jj_fail_undef(c, n, a);
        else rc = jj_fail(c, n, "TypeError: bad operand type for unary %c: '%s'", n->k == JN_NEG ? '-' : '+', jv_type_name(a));
        jv_unref(a);
        return rc;
    }
    case JN_NOT: {
        jv a;
        if (eval(r, s, n->a, &a)) return -1;
        *out = jv_bool(!jv_truthy(a));
        jv_unref(a);
        return 0;
    }
    case JN_AND: case JN_OR: {
        jv a;
        if (eval(r, s, n->a, &a)) return -1;
        int t = jv_truthy(a);
        if ((n->k == JN_AND && !t) || (n->k == JN_OR && t)) { *out = a; return 0; }
        jv_unref(a);
        return eval(r, s, n->b, out);
    }
    case JN_COND: {
        jv cnd;
        if (eval(r, s, n->a, &cnd)) return -1;
        int t = jv_truthy(cnd);
        jv_unref(cnd);
        if (t) return eval(r, s, n->b, out);
        if (n->c) return eval(r, s, n->c, out);
        *out = jv_undef_hint("the inline if-expression on line %d evaluated to false and no else section was defined.", n->line);
        return 0;
    }
    case JN_LIST: case JN_TUPLE: {
        jv l = jv_list(n->nkids);
        for (size_t i = 0; i < n->nkids; i++) {
            jv v;
            if (eval(r, s, n->kids[i], &v)) { jv_unref(l); return -1; }
            jv_list_push(l, v);
        }
        l.u.l->tuple = n->k == JN_TUPLE;
        *out = l;
        return 0;
    }
    case JN_DICT: {
        jv d = jv_dict();
        for (size_t i = 0; i + 1 < n->nkids; i += 2) {
            jv k, v;
            if (eval(r, s, n->kids[i], &k)) { jv_unref(d); return -1; }
            if (k.t == JV_LIST || k.t == JV_DICT || k.t == JV_UNDEF) {
                jv_unref(k);
                jv_unref(d);
                return jj_fail(c, n->kids[i], "TypeError: unhashable dict key");
            }
            if (eval(r, s, n->kids[i + 1], &v)) { jv_unref(k); jv_unref(d); return -1; }
            jv_dict_set(d, k, v);
        }
        *out = d;
        return 0;
    }
    case JN_CONCAT: {
        jbuf b = {0};
        for (size_t i = 0; i < n->nkids; i++) {
            jv v;
            if (eval(r, s, n->kids[i], &v)) { jbuf_free(&b); return -1; }
            jv_to_str(&b, v);
            jv_unref(v);
        }
        if (b.overflow) { jbuf_free(&b); return jj_fail(c, n, "string too large"); }
        *out = jbuf_to_str(&b);
        return 0;
    }
    case JN_COMPARE: {
        jv a;
        if (eval(r, s, n->kids[0], &a)) return -1;
        int res = 1;
        for (size_t i = 1; i < n->nkids; i++) {
            jv b;
            if (eval(r, s, n->kids[i], &b)) { jv_unref(a); return -1; }
            int rc = compare_op(r, n, n->ops[i - 1], a, b, &res);
            jv_unref(a);
            a = b;
            if (rc) { jv_unref(a); return -1; }
            if (!res) break;
        }
        jv_unref(a);
        *out = jv_bool(res);
        return 0;
    }
    default: return jj_fail(c, n, "internal error: not an expression");
    }
}

/* ---- statements ---- */
static int assign(rctx *r, jscope *s, const jnode *target, jv v) {
    if (target->k == JN_NAME) { scope_set(s, target->name, v); return 0; }
    if (target->k == JN_NSREF) {
        jv ns = lookup(s, target->a->name);
        if (ns.t != JV_NS) {
            jv_unref(v);
            return jj_fail(&r->c, target, "TemplateRuntimeError: cannot assign attribute on non-namespace object");
        }
        jv_dict_sets(ns, target->name, v);
        return 0;
    }
    /* tuple unpacking */
    jv l;
    if (jj_to_list(&r->c, target, v, &l)) { jv_unref(v); return -1; }
    jv_unref(v);
    if (l.u.l->n != target->nkids) {
        size_t have = l.u.l->n;
        jv_unref(l);
        return jj_fail(&r->c, target, "ValueError: %s values to unpack (expected %zu, got %zu)",
                       have > target->nkids ? "too many" : "not enough", target->nkids, have);
    }
    for (size_t i = 0; i < target->nkids; i++) scope_set(s, target->kids[i]->name, jv_ref(l.u.l->v[i]));
    jv_unref(l);
    return 0;
}

static int exec_for(rctx *r, jscope *s, const jnode *n) {
    jctx *c = &r->c;
    jv it, items;
    if (eval(r, s, n->b, &it)) return -1;
    if (it.t == JV_UNDEF) { jv_unref(it); items = jv_list(0); }
    else {
        int rc = jj_to_list(c, n->b, it, &items);
        jv_unref(it);
        if (rc) return -1;
    }
    int rc = 0;
    if (n->d) { /* loop filter: keep items for which the condition holds */
        jv kept = jv_list(0);
        for (size_t i = 0; i < items.u.l->n && !rc; i++) {
            if (++c->iters > JJ_MAX_ITERS) { rc = jj_fail(c, n, "loop iteration limit (%ld) exceeded", JJ_MAX_ITERS); break; }
            jscope f = {jv_dict(), s};
            jv cnd;
            rc = assign(r, &f, n->a, jv_ref(items.u.l->v[i]));
            if (!rc) rc = eval(r, &f, n->d, &cnd);
            if (!rc) {
                if (jv_truthy(cnd)) jv_list_push(kept, jv_ref(items.u.l->v[i]));
                jv_unref(cnd);
            }
            jv_unref(f.vars);
        }
        jv_unref(items);
        items = kept;
        if (rc) { jv_unref(items); return -1; }
    }
    size_t len = items.u.l->n;
    jloop *lp = xcalloc(1, sizeof *lp);
    lp->rc = 1;
    lp->items = items.u.l;
    jv loopv;
    loopv.t = JV_LOOP;
    loopv.u.lp = lp;
    for (size_t i = 0; i < len; i++) {
        if (++c->iters > JJ_MAX_ITERS) { rc = jj_fail(c, n, "loop iteration limit (%ld) exceeded", JJ_MAX_ITERS); break; }
        lp->index0 = (int64_t)i;
        jscope f = {jv_dict(), s};
        scope_set(&f, "loop", jv_ref(loopv));
        rc = assign(r, &f, n->a, jv_ref(items.u.l->v[i]));
        if (!rc) rc = exec_body(r, &f, n->kids[0]);
        jv_unref(f.vars);
        if (rc) break;
        if (c->ctl == 1) { c->ctl = 0; break; }
        c->ctl = 0;
    }
    jv_unref(loopv);
    if (rc) return -1;
    if (len == 0 && n->c) {
        jscope f = {jv_dict(), s};
        rc = exec_body(r, &f, n->c);
        jv_unref(f.vars);
    }
    return rc;
}

static int exec_stmt(rctx *r, jscope *s, const jnode *n) {
    jctx *c = &r->c;
    switch (n->k) {
    case JN_OUTPUT: jbuf_put(r->out, n->val.u.s->s, n->val.u.s->len); break;
    case JN_PRINT: {
        jv v;
        if (eval(r, s, n->a, &v)) return -1;
        jv_to_str(r->out, v);
        jv_unref(v);
        break;
    }
    case JN_BODY: return exec_body(r, s, n);
    case JN_IF: {
        jv cnd;
        if (eval(r, s, n->a, &cnd)) return -1;
        int t = jv_truthy(cnd);
        jv_unref(cnd);
        if (t) return exec_body(r, s, n->b);
        if (n->c) return n->c->k == JN_IF ? exec_stmt(r, s, n->c) : exec_body(r, s, n->c);
        break;
    }
    case JN_FOR: return exec_for(r, s, n);
    case JN_SET: {
        jv v;
        if (eval(r, s, n->b, &v)) return -1;
        return assign(r, s, n->a, v);
    }
    case JN_SETBLOCK: {
        jv v, f;
        if (render_to_str(r, s, n->b, &v)) return -1;
        if (apply_filter_chain(r, s, n->c, v, &f)) return -1;
        return assign(r, s, n->a, f);
    }
    case JN_FILTERBLOCK: {
        jv v, f;
        if (render_to_str(r, s, n->b, &v)) return -1;
        if (apply_filter_chain(r, s, n->c, v, &f)) return -1;
        jv_to_str(r->out, f);
        jv_unref(f);
        break;
    }
    case JN_MACRO: {
        jmacro *m = xcalloc(1, sizeof *m);
        m->rc = 1;
        m->def = n;
        jv v;
        v.t = JV_MACRO;
        v.u.m = m;
        scope_set(s, n->name, v);
        break;
    }
    case JN_CALLBLOCK: {
        jmacro *m = xcalloc(1, sizeof *m);
        m->rc = 1;
        m->def = n;
        m->scope = s;
        m->is_caller = 1;
        jv cv;
        cv.t = JV_MACRO;
        cv.u.m = m;
        const jnode *call = n->a;
        jv fn, res;
        int rc = eval(r, s, call->a, &fn);
        if (!rc) {
            jv *args, *kwv;
            rc = eval_args(r, s, call, &args, &kwv);
            if (!rc) {
                size_t nkw = call->nkw + 1;
                char **kwn = xmalloc(nkw * sizeof(char *));
                jv *kv = xmalloc(nkw * sizeof(jv));
                for (size_t i = 0; i < call->nkw; i++) { kwn[i] = call->kwnames[i]; kv[i] = kwv[i]; }
                kwn[call->nkw] = "caller";
                kv[call->nkw] = cv;
                rc = jj_call_value(c, call, fn, args, call->nkids, kwn, kv, nkw, &res);
                free(kwn);
                free(kv);
                if (!rc) { jv_to_str(r->out, res); jv_unref(res); }
            }
            free_args(call, args, kwv);
            jv_unref(fn);
        }
        m->scope = NULL;
        jv_unref(cv);
        return rc;
    }
    case JN_WITH: {
        jscope f = {jv_dict(), s};
        int rc = 0;
        for (size_t i = 0; i < n->nkids && !rc; i++) {
            jv v;
            rc = eval(r, s, n->kwvals[i], &v);
            if (!rc) rc = assign(r, &f, n->kids[i], v);
        }
        if (!rc) rc = exec_body(r, &f, n->b);
        jv_unref(f.vars);
        return rc;
    }
    case JN_BREAK: c->ctl = 1; break;
    case JN_CONTINUE: c->ctl = 2; break;
    default: return jj_fail(c, n, "internal error: not a statement");
    }
    if (r->out->overflow) return jj_fail(c, n, "output exceeds %u bytes", JJ_MAX_OUTPUT);
    return 0;
}

static int exec_body(rctx *r, jscope *s, const jnode *body) {
    for (size_t i = 0; i < body->nkids; i++) {
        if (exec_stmt(r, s, body->kids[i])) return -1;
        if (r->c.ctl) return 0;
    }
    return 0;
}

/* ---- public API ---- */
int jinja_parse(jinja_template **out, const char *src, size_t len, const char *name, char *err, size_t errlen) {
    *out = NULL;
    if (!name) name = "template";
    jtok *toks;
    size_t nt;
    if (jj_lex(src, len, &toks, &nt, name, err, errlen)) return -1;
    jnode *root;
    int rc = jj_parse_tokens(toks, nt, &root, name, err, errlen);
    jj_free_tokens(toks, nt);
    if (rc) return -1;
    jinja_template *t = xcalloc(1, sizeof *t);
    t->name = xstrdup(name);
    t->root = root;
    *out = t;
    return 0;
}

void jinja_free(jinja_template *t) {
    if (!t) return;
    jj_free_node(t->root);
    free(t->name);
    free(t);
}

int jinja_render(const jinja_template *t, const cJSON *vars, char **out, size_t *out_len, char *err, size_t errlen) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (vars && !cJSON_IsObject(vars)) return ds_err(err, errlen, "%s: render variables must be a JSON object", t->name);
    rctx r;
    memset(&r, 0, sizeof r);
    r.c.t = t;
    r.c.err = err;
    r.c.errlen = errlen;
    jbuf b = {0};
    r.out = &b;
    jscope root;
    root.vars = vars ? jv_from_cjson(vars) : jv_dict();
    root.parent = NULL;
    r.c.root = &root;
    int rc = exec_body(&r, &root, t->root);
    jv_unref(root.vars);
    if (rc) { jbuf_free(&b); return -1; }
    if (b.overflow) { jbuf_free(&b); return ds_err(err, errlen, "%s: output exceeds %u bytes", t->name, JJ_MAX_OUTPUT); }
    if (!b.p) b.p = xstrdup("");
    *out = b.p;
    if (out_len) *out_len = b.n;
    return 0;
}
