/* jinja_parse: tokens to AST, following Jinja2's parser (operator
 * precedence, filters and tests binding tighter than unary minus' operand,
 * `a if c else b`, comparison chains, tuples, slices), and the statements
 * chat templates use: if/elif/else, for (with else, filter `if`, targets
 * unpacking), set (expression, namespace attribute, block form), macro,
 * call blocks, filter blocks, with, break/continue (loopcontrols), and
 * generation blocks (transformers' AssistantTracker). Anything else is a
 * syntax error naming the tag. */
#include "text/jinja_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

typedef struct {
    jtok *t;
    size_t n, i;
    const char *name;
    char *err;
    size_t errlen;
    int depth;
    int in_loop;
    int failed;
} parser;

static jtok *cur(parser *P) { return &P->t[P->i]; }
static jtok *peek(parser *P, size_t k) { return &P->t[P->i + k < P->n ? P->i + k : P->n - 1]; }
static void adv(parser *P) { if (P->i + 1 < P->n) P->i++; }

static const char *tok_desc(jtok *k, char *buf, size_t n) {
    switch (k->t) {
    case JT_DATA: return "template data";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_BLOCK_END: return "'%}'";
    case JT_NAME: snprintf(buf, n, "'%.40s'", k->s); return buf;
    case JT_STRING: return "string";
    case JT_INT: return "integer";
    case JT_FLOAT: return "float";
    case JT_OP: snprintf(buf, n, "'%s'", k->s); return buf;
    case JT_EOF: return "end of template";
    }
    return "?";
}

static jnode *pfail(parser *P, jtok *k, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static jnode *pfail(parser *P, jtok *k, const char *fmt, ...) {
    if (P->failed) return NULL;
    P->failed = 1;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ds_err(P->err, P->errlen, "%s:%d:%d: syntax error: %s", P->name, k->line, k->col, msg);
    return NULL;
}
static jnode *unexpected(parser *P, const char *expected) {
    char b[64];
    return pfail(P, cur(P), "expected %s, got %s", expected, tok_desc(cur(P), b, sizeof b));
}

static int is_op(jtok *k, const char *op) { return k->t == JT_OP && strcmp(k->s, op) == 0; }
static int is_name(jtok *k, const char *nm) { return k->t == JT_NAME && strcmp(k->s, nm) == 0; }
static int skip_op(parser *P, const char *op) {
    if (is_op(cur(P), op)) { adv(P); return 1; }
    return 0;
}
static int skip_name(parser *P, const char *nm) {
    if (is_name(cur(P), nm)) { adv(P); return 1; }
    return 0;
}
static int expect_op(parser *P, const char *op) {
    if (skip_op(P, op)) return 1;
    char e[16];
    snprintf(e, sizeof e, "'%s'", op);
    unexpected(P, e);
    return 0;
}

static jnode *mk(parser *P, jnode_kind k, jtok *at) {
    (void)P;
    jnode *n = xcalloc(1, sizeof *n);
    n->k = k;
    n->line = at->line;
    n->col = at->col;
    return n;
}
static void add_kid(jnode *n, jnode *kid) {
    n->kids = xrealloc(n->kids, (n->nkids + 1) * sizeof *n->kids);
    n->kids[n->nkids++] = kid;
}
static void add_kw(jnode *n, const char *name, jnode *val) {
    n->kwnames = xrealloc(n->kwnames, (n->nkw + 1) * sizeof *n->kwnames);
    n->kwvals = xrealloc(n->kwvals, (n->nkw + 1) * sizeof *n->kwvals);
    n->kwnames[n->nkw] = xstrdup(name);
    n->kwvals[n->nkw] = val;
    n->nkw++;
}

void jj_free_node(jnode *n) {
    if (!n) return;
    jj_free_node(n->a);
    jj_free_node(n->b);
    jj_free_node(n->c);
    jj_free_node(n->d);
    for (size_t i = 0; i < n->nkids; i++) jj_free_node(n->kids[i]);
    free(n->kids);
    for (size_t i = 0; i < n->nkw; i++) {
        free(n->kwnames[i]);
        if (n->kwvals) jj_free_node(n->kwvals[i]);
    }
    free(n->kwnames);
    free(n->kwvals);
    free(n->ops);
    free(n->name);
    if (jv_is_heap(n->val)) {
        /* immortal constants: free by hand */
        jv v = n->val;
        if (v.t == JV_STR || v.t == JV_UNDEF) free(v.u.s);
    }
    free(n);
}

static jnode *parse_expr(parser *P);
static jnode *parse_or(parser *P);
static jnode *parse_unary(parser *P, int with_filter);
static jnode *parse_primary(parser *P);
static jnode *parse_postfix(parser *P, jnode *node);
static jnode *parse_tuple(parser *P, int simplified, int with_condexpr, int explicit_parens);
static jnode *parse_body(parser *P, const char **ends, int nends, int *which);

static int enter(parser *P) {
    if (++P->depth > JJ_MAX_PARSE_DEPTH) {
        pfail(P, cur(P), "template nested too deeply");
        return 0;
    }
    return 1;
}
#define LEAVE(P, v) do { P->depth--; return (v); } while (0)

static jnode *parse_condexpr(parser *P) {
    if (!enter(P)) return NULL;
    jnode *e1 = parse_or(P);
    while (e1 && is_name(cur(P), "if")) {
        jtok *at = cur(P);
        adv(P);
        jnode *e2 = parse_or(P);
        jnode *e3 = NULL;
        if (!e2) { jj_free_node(e1); LEAVE(P, NULL); }
        if (skip_name(P, "else")) {
            e3 = parse_condexpr(P);
            if (!e3) { jj_free_node(e1); jj_free_node(e2); LEAVE(P, NULL); }
        }
        jnode *n = mk(P, JN_COND, at);
        n->a = e2; /* condition */
        n->b = e1; /* then */
        n->c = e3; /* else (may be NULL) */
        e1 = n;
    }
    LEAVE(P, e1);
}
static jnode *parse_expr(parser *P) { return parse_condexpr(P); }

static jnode *parse_not(parser *P);
/* A left-associative chain "sub KEYWORD sub KEYWORD ..." of node kind. */
static jnode *parse_chain(parser *P, const char *keyword, jnode *(*sub)(parser *), jnode_kind kind) {
    jnode *l = sub(P);
    while (l && is_name(cur(P), keyword)) {
        jtok *at = cur(P);
        adv(P);
        jnode *r = sub(P);
        if (!r) { jj_free_node(l); return NULL; }
        jnode *n = mk(P, kind, at);
        n->a = l; n->b = r;
        l = n;
    }
    return l;
}
static jnode *parse_and(parser *P) { return parse_chain(P, "and", parse_not, JN_AND); }
static jnode *parse_or(parser *P) { return parse_chain(P, "or", parse_and, JN_OR); }
static jnode *parse_compare(parser *P);
static jnode *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        if (!enter(P)) return NULL;
        jtok *at = cur(P);
        adv(P);
        jnode *x = parse_not(P);
        if (!x) LEAVE(P, NULL);
        jnode *n = mk(P, JN_NOT, at);
        n->a = x;
        LEAVE(P, n);
    }
    return parse_compare(P);
}
static jnode *parse_math1(parser *P);
static jnode *parse_compare(parser *P) {
    jnode *first = parse_math1(P);
    if (!first) return NULL;
    jnode *cmp = NULL;
    for (;;) {
        jtok *k = cur(P);
        int op = -1;
        if (k->t == JT_OP) {
            if (!strcmp(k->s, "==")) op = JO_EQ;
            else if (!strcmp(k->s, "!=")) op = JO_NE;
            else if (!strcmp(k->s, "<")) op = JO_LT;
            else if (!strcmp(k->s, "<=")) op = JO_LE;
            else if (!strcmp(k->s, ">")) op = JO_GT;
            else if (!strcmp(k->s, ">=")) op = JO_GE;
            if (op >= 0) adv(P);
        } else if (is_name(k, "in")) { op = JO_IN; adv(P); }
        else if (is_name(k, "not") && is_name(peek(P, 1), "in")) { op = JO_NOTIN; adv(P); adv(P); }
        if (op < 0) break;
        jnode *r = parse_math1(P);
        if (!r) { jj_free_node(cmp ? cmp : first); return NULL; }
        if (!cmp) {
            cmp = mk(P, JN_COMPARE, k);
            add_kid(cmp, first);
        }
        add_kid(cmp, r);
        cmp->ops = xrealloc(cmp->ops, cmp->nkids * sizeof(int));
        cmp->ops[cmp->nkids - 2] = op;
    }
    return cmp ? cmp : first;
}
static jnode *binop(parser *P, jtok *at, int op, jnode *l, jnode *r) {
    jnode *n = mk(P, JN_BINOP, at);
    n->op = op; n->a = l; n->b = r;
    return n;
}
static jnode *parse_concat(parser *P);
static jnode *parse_math1(parser *P) {
    jnode *l = parse_concat(P);
    while (l && (is_op(cur(P), "+") || is_op(cur(P), "-"))) {
        jtok *at = cur(P);
        int op = at->s[0] == '+' ? JO_ADD : JO_SUB;
        adv(P);
        jnode *r = parse_concat(P);
        if (!r) { jj_free_node(l); return NULL; }
        l = binop(P, at, op, l, r);
    }
    return l;
}
static jnode *parse_math2(parser *P);
static jnode *parse_concat(parser *P) {
    jnode *l = parse_math2(P);
    if (!l || !is_op(cur(P), "~")) return l;
    jnode *n = mk(P, JN_CONCAT, cur(P));
    add_kid(n, l);
    while (skip_op(P, "~")) {
        jnode *r = parse_math2(P);
        if (!r) { jj_free_node(n); return NULL; }
        add_kid(n, r);
    }
    return n;
}
static jnode *parse_pow(parser *P);
static jnode *parse_math2(parser *P) {
    jnode *l = parse_pow(P);
    for (;;) {
        if (!l) return NULL;
        jtok *at = cur(P);
        int op = -1;
        if (is_op(at, "*")) op = JO_MUL;
        else if (is_op(at, "/")) op = JO_DIV;
        else if (is_op(at, "//")) op = JO_FLOORDIV;
        else if (is_op(at, "%")) op = JO_MOD;
        if (op < 0) return l;
        adv(P);
        jnode *r = parse_pow(P);
        if (!r) { jj_free_node(l); return NULL; }
        l = binop(P, at, op, l, r);
    }
}
static jnode *parse_pow(parser *P) {
    jnode *l = parse_unary(P, 1);
    while (l && is_op(cur(P), "**")) {
        jtok *at = cur(P);
        adv(P);
        jnode *r = parse_unary(P, 1);
        if (!r) { jj_free_node(l); return NULL; }
        l = binop(P, at, JO_POW, l, r);
    }
    return l;
}

/* (args, kw=..) after '(' has been seen (current token is '('). */
static int parse_call_args(parser *P, jnode *n) {
    if (!expect_op(P, "(")) return 0;
    int first = 1;
    while (!is_op(cur(P), ")")) {
        if (!first && !expect_op(P, ",")) return 0;
        if (is_op(cur(P), ")")) break;
        first = 0;
        if (is_op(cur(P), "*") || is_op(cur(P), "**")) {
            pfail(P, cur(P), "*args and **kwargs in calls are not supported");
            return 0;
        }
        if (cur(P)->t == JT_NAME && is_op(peek(P, 1), "=")) {
            char *nm = cur(P)->s;
            adv(P);
            adv(P);
            jnode *v = parse_expr(P);
            if (!v) return 0;
            add_kw(n, nm, v);
        } else {
            if (n->nkw) { pfail(P, cur(P), "positional argument follows keyword argument"); return 0; }
            jnode *v = parse_expr(P);
            if (!v) return 0;
            add_kid(n, v);
        }
    }
    adv(P);
    return 1;
}

static jnode *parse_dotted_name(parser *P, char **out) {
    if (cur(P)->t != JT_NAME) return unexpected(P, "a name");
    jbuf b = {0};
    jbuf_puts(&b, cur(P)->s);
    adv(P);
    while (is_op(cur(P), ".") && peek(P, 1)->t == JT_NAME) {
        adv(P);
        jbuf_putc(&b, '.');
        jbuf_puts(&b, cur(P)->s);
        adv(P);
    }
    *out = b.p;
    return (jnode *)1;
}

static jnode *parse_filter(parser *P, jnode *node, int start_inline) {
    while (is_op(cur(P), "|") || start_inline) {
        if (!start_inline) adv(P);
        start_inline = 0;
        jtok *at = cur(P);
        char *nm = NULL;
        if (!parse_dotted_name(P, &nm)) { jj_free_node(node); return NULL; }
        jnode *f = mk(P, JN_FILTER, at);
        f->name = nm;
        f->a = node;
        if (is_op(cur(P), "(") && !parse_call_args(P, f)) { jj_free_node(f); return NULL; }
        node = f;
    }
    return node;
}

static jnode *parse_test(parser *P, jnode *node) {
    jtok *at = cur(P);
    adv(P); /* is */
    int neg = skip_name(P, "not");
    char *nm = NULL;
    if (!parse_dotted_name(P, &nm)) { jj_free_node(node); return NULL; }
    jnode *t = mk(P, JN_TEST, at);
    t->name = nm;
    t->op = neg;
    t->a = node;
    jtok *k = cur(P);
    if (is_op(k, "(")) {
        if (!parse_call_args(P, t)) { jj_free_node(t); return NULL; }
    } else if ((k->t == JT_NAME || k->t == JT_STRING || k->t == JT_INT || k->t == JT_FLOAT || is_op(k, "[") ||
                is_op(k, "{")) &&
               !is_name(k, "else") && !is_name(k, "or") && !is_name(k, "and")) {
        if (is_name(k, "is")) { jj_free_node(t); return pfail(P, k, "You cannot chain multiple tests with is"); }
        jnode *arg = parse_primary(P);
        if (arg) arg = parse_postfix(P, arg);
        if (!arg) { jj_free_node(t); return NULL; }
        add_kid(t, arg);
    }
    return t;
}

static jnode *parse_filter_expr(parser *P, jnode *node) {
    for (;;) {
        if (!node) return NULL;
        if (is_op(cur(P), "|")) node = parse_filter(P, node, 0);
        else if (is_name(cur(P), "is")) node = parse_test(P, node);
        else if (is_op(cur(P), "(")) {
            jnode *c = mk(P, JN_CALL, cur(P));
            c->a = node;
            if (!parse_call_args(P, c)) { jj_free_node(c); return NULL; }
            node = c;
        } else return node;
    }
}

static jnode *parse_unary(parser *P, int with_filter) {
    if (!enter(P)) return NULL;
    jtok *at = cur(P);
    jnode *node;
    if (is_op(at, "-") || is_op(at, "+")) {
        adv(P);
        jnode *x = parse_unary(P, 0);
        if (!x) LEAVE(P, NULL);
        node = mk(P, at->s[0] == '-' ? JN_NEG : JN_POS, at);
        node->a = x;
    } else {
        node = parse_primary(P);
    }
    if (node) node = parse_postfix(P, node);
    if (node && with_filter) node = parse_filter_expr(P, node);
    LEAVE(P, node);
}

static jnode *parse_subscribed(parser *P) {
    jtok *at = cur(P);
    jnode *args[3] = {NULL, NULL, NULL};
    if (is_op(at, ":")) {
        adv(P);
    } else {
        jnode *e = parse_expr(P);
        if (!e) return NULL;
        if (!is_op(cur(P), ":")) return e;
        args[0] = e;
        adv(P);
    }
    if (!is_op(cur(P), "]") && !is_op(cur(P), ",")) {
        if (!is_op(cur(P), ":")) {
            args[1] = parse_expr(P);
            if (!args[1]) { jj_free_node(args[0]); return NULL; }
        }
    }
    if (skip_op(P, ":")) {
        if (!is_op(cur(P), "]") && !is_op(cur(P), ",")) {
            args[2] = parse_expr(P);
            if (!args[2]) { jj_free_node(args[0]); jj_free_node(args[1]); return NULL; }
        }
    }
    jnode *s = mk(P, JN_SLICE, at);
    s->b = args[0]; s->c = args[1]; s->d = args[2];
    return s;
}

static jnode *parse_postfix(parser *P, jnode *node) {
    for (;;) {
        if (!node) return NULL;
        jtok *at = cur(P);
        if (is_op(at, ".")) {
            adv(P);
            jtok *k = cur(P);
            if (k->t == JT_NAME) {
                jnode *g = mk(P, JN_GETATTR, at);
                g->a = node;
                g->name = xstrdup(k->s);
                adv(P);
                node = g;
            } else if (k->t == JT_INT) {
                jnode *g = mk(P, JN_GETITEM, at);
                g->a = node;
                g->b = mk(P, JN_CONST, k);
                g->b->val = jv_int(k->i);
                adv(P);
                node = g;
            } else {
                jj_free_node(node);
                return unexpected(P, "a name after '.'");
            }
        } else if (is_op(at, "[")) {
            adv(P);
            jnode *idx = parse_subscribed(P);
            if (!idx) { jj_free_node(node); return NULL; }
            if (is_op(cur(P), ",")) {
                jj_free_node(idx);
                jj_free_node(node);
                return pfail(P, cur(P), "tuple subscripts are not supported");
            }
            if (!expect_op(P, "]")) { jj_free_node(idx); jj_free_node(node); return NULL; }
            if (idx->k == JN_SLICE) {
                idx->a = node;
                node = idx;
            } else {
                jnode *g = mk(P, JN_GETITEM, at);
                g->a = node;
                g->b = idx;
                node = g;
            }
        } else if (is_op(at, "(")) {
            jnode *c = mk(P, JN_CALL, at);
            c->a = node;
            if (!parse_call_args(P, c)) { jj_free_node(c); return NULL; }
            node = c;
        } else return node;
    }
}

static jnode *const_node(parser *P, jtok *at, jv v) {
    jnode *n = mk(P, JN_CONST, at);
    jv_make_immortal(v);
    n->val = v;
    return n;
}

static jnode *parse_primary(parser *P) {
    if (!enter(P)) return NULL;
    jtok *k = cur(P);
    jnode *n = NULL;
    if (k->t == JT_NAME) {
        if (!strcmp(k->s, "true") || !strcmp(k->s, "True")) n = const_node(P, k, jv_bool(1));
        else if (!strcmp(k->s, "false") || !strcmp(k->s, "False")) n = const_node(P, k, jv_bool(0));
        else if (!strcmp(k->s, "none") || !strcmp(k->s, "None")) n = const_node(P, k, jv_none());
        else {
            n = mk(P, JN_NAME, k);
            n->name = xstrdup(k->s);
        }
        adv(P);
    } else if (k->t == JT_STRING) {
        jbuf b = {0};
        jbuf_put(&b, k->s, k->n);
        adv(P);
        while (cur(P)->t == JT_STRING) {
            jbuf_put(&b, cur(P)->s, cur(P)->n);
            adv(P);
        }
        n = const_node(P, k, jbuf_to_str(&b));
    } else if (k->t == JT_INT) {
        n = const_node(P, k, jv_int(k->i));
        adv(P);
    } else if (k->t == JT_FLOAT) {
        n = const_node(P, k, jv_float(k->f));
        adv(P);
    } else if (is_op(k, "(")) {
        adv(P);
        n = parse_tuple(P, 0, 1, 1);
        if (n && !expect_op(P, ")")) { jj_free_node(n); n = NULL; }
    } else if (is_op(k, "[")) {
        adv(P);
        n = mk(P, JN_LIST, k);
        while (!is_op(cur(P), "]")) {
            if (n->nkids && !expect_op(P, ",")) { jj_free_node(n); LEAVE(P, NULL); }
            if (is_op(cur(P), "]")) break;
            jnode *e = parse_expr(P);
            if (!e) { jj_free_node(n); LEAVE(P, NULL); }
            add_kid(n, e);
        }
        adv(P);
    } else if (is_op(k, "{")) {
        adv(P);
        n = mk(P, JN_DICT, k);
        while (!is_op(cur(P), "}")) {
            if (n->nkids && !expect_op(P, ",")) { jj_free_node(n); LEAVE(P, NULL); }
            if (is_op(cur(P), "}")) break;
            jnode *key = parse_expr(P);
            if (!key) { jj_free_node(n); LEAVE(P, NULL); }
            add_kid(n, key);
            if (!expect_op(P, ":")) { jj_free_node(n); LEAVE(P, NULL); }
            jnode *val = parse_expr(P);
            if (!val) { jj_free_node(n); LEAVE(P, NULL); }
            add_kid(n, val);
        }
        adv(P);
    } else {
        char b[64];
        n = pfail(P, k, "unexpected %s", tok_desc(k, b, sizeof b));
    }
    LEAVE(P, n);
}

/* Jinja's parse_tuple: a, b, c (or a single expression). */
static jnode *parse_tuple(parser *P, int simplified, int with_condexpr, int explicit_parens) {
    jtok *at = cur(P);
    jnode *items = mk(P, JN_TUPLE, at);
    int is_tuple = 0;
    for (;;) {
        if (items->nkids) {
            if (!skip_op(P, ",")) break;
            is_tuple = 1;
        }
        jtok *k = cur(P);
        if (k->t == JT_VAR_END || k->t == JT_BLOCK_END || is_op(k, ")") || is_name(k, "in") ||
            (!explicit_parens && k->t == JT_EOF))
            break;
        if (is_name(k, "if") && !with_condexpr) break;
        jnode *e = simplified ? parse_primary(P) : with_condexpr ? parse_expr(P) : parse_or(P);
        if (!e) { jj_free_node(items); return NULL; }
        add_kid(items, e);
        if (!is_op(cur(P), ",")) break;
    }
    if (!is_tuple) {
        if (items->nkids == 1) {
            jnode *e = items->kids[0];
            items->nkids = 0;
            jj_free_node(items);
            return e;
        }
        if (!explicit_parens) {
            char b[64];
            jj_free_node(items);
            return pfail(P, cur(P), "expected an expression, got %s", tok_desc(cur(P), b, sizeof b));
        }
    }
    return items;
}

static int expect_block_end(parser *P) {
    if (cur(P)->t == JT_BLOCK_END) { adv(P); return 1; }
    unexpected(P, "end of statement block");
    return 0;
}

/* assignment target: name, ns.attr, or a tuple of names */
static jnode *parse_assign_target(parser *P, int with_namespace, int name_only_tuple) {
    jtok *k = cur(P);
    if (k->t != JT_NAME) return unexpected(P, "a name");
    if (with_namespace && is_op(peek(P, 1), ".") && peek(P, 2)->t == JT_NAME) {
        jnode *n = mk(P, JN_NSREF, k);
        n->a = mk(P, JN_NAME, k);
        n->a->name = xstrdup(k->s);
        adv(P);
        adv(P);
        n->name = xstrdup(cur(P)->s);
        adv(P);
        return n;
    }
    jnode *t = mk(P, JN_TUPLE, k);
    int paren = skip_op(P, "(");
    for (;;) {
        jtok *q = cur(P);
        if (q->t != JT_NAME) { jj_free_node(t); return unexpected(P, "a name"); }
        if (!strcmp(q->s, "true") || !strcmp(q->s, "false") || !strcmp(q->s, "none") || !strcmp(q->s, "True") ||
            !strcmp(q->s, "False") || !strcmp(q->s, "None")) {
            jj_free_node(t);
            return pfail(P, q, "can't assign to '%s'", q->s);
        }
        jnode *nm = mk(P, JN_NAME, q);
        nm->name = xstrdup(q->s);
        add_kid(t, nm);
        adv(P);
        if (!name_only_tuple || !skip_op(P, ",")) break;
        if (is_op(cur(P), ")") || is_name(cur(P), "in") || is_op(cur(P), "=")) break;
    }
    if (paren && !expect_op(P, ")")) { jj_free_node(t); return NULL; }
    if (t->nkids == 1 && !paren) {
        jnode *e = t->kids[0];
        t->nkids = 0;
        jj_free_node(t);
        return e;
    }
    return t;
}

static jnode *parse_for(parser *P, jtok *at) {
    jnode *n = mk(P, JN_FOR, at);
    n->a = parse_assign_target(P, 0, 1);
    if (!n->a) { jj_free_node(n); return NULL; }
    if (!skip_name(P, "in")) { jj_free_node(n); return unexpected(P, "'in'"); }
    n->b = parse_tuple(P, 0, 0, 0);
    if (!n->b) { jj_free_node(n); return NULL; }
    if (skip_name(P, "if")) {
        n->d = parse_expr(P);
        if (!n->d) { jj_free_node(n); return NULL; }
    }
    if (is_name(cur(P), "recursive")) { jj_free_node(n); return pfail(P, cur(P), "recursive for loops are not supported"); }
    if (!expect_block_end(P)) { jj_free_node(n); return NULL; }
    const char *ends[] = {"endfor", "else"};
    int which = -1;
    P->in_loop++;
    jnode *body = parse_body(P, ends, 2, &which);
    P->in_loop--;
    if (!body) { jj_free_node(n); return NULL; }
    add_kid(n, body);
    if (which == 1) {
        const char *e2[] = {"endfor"};
        n->c = parse_body(P, e2, 1, &which);
        if (!n->c) { jj_free_node(n); return NULL; }
    }
    return n;
}

static jnode *parse_if(parser *P, jtok *at) {
    jnode *n = mk(P, JN_IF, at);
    n->a = parse_tuple(P, 0, 1, 0);
    if (!n->a || !expect_block_end(P)) { jj_free_node(n); return NULL; }
    const char *ends[] = {"elif", "else", "endif"};
    int which = -1;
    n->b = parse_body(P, ends, 3, &which);
    if (!n->b) { jj_free_node(n); return NULL; }
    if (which == 0) {
        if (!enter(P)) { jj_free_node(n); return NULL; }
        n->c = parse_if(P, P->t[P->i - 1].t == JT_NAME ? &P->t[P->i - 1] : at);
        P->depth--;
        if (!n->c) { jj_free_node(n); return NULL; }
    } else if (which == 1) {
        const char *e2[] = {"endif"};
        n->c = parse_body(P, e2, 1, &which);
        if (!n->c) { jj_free_node(n); return NULL; }
    }
    return n;
}

static jnode *parse_set(parser *P, jtok *at) {
    jnode *target = parse_assign_target(P, 1, 1);
    if (!target) return NULL;
    if (skip_op(P, "=")) {
        jnode *n = mk(P, JN_SET, at);
        n->a = target;
        n->b = parse_tuple(P, 0, 1, 0);
        if (!n->b || !expect_block_end(P)) { jj_free_node(n); return NULL; }
        return n;
    }
    jnode *n = mk(P, JN_SETBLOCK, at);
    n->a = target;
    if (is_op(cur(P), "|")) {
        /* filters applied to the block's output: a FILTER chain over a NULL input */
        n->c = parse_filter(P, NULL, 0);
        if (!n->c) { jj_free_node(n); return NULL; }
    }
    if (!expect_block_end(P)) { jj_free_node(n); return NULL; }
    const char *ends[] = {"endset"};
    int which;
    n->b = parse_body(P, ends, 1, &which);
    if (!n->b) { jj_free_node(n); return NULL; }
    return n;
}

/* (a, b=1, ...) parameter list for macro / call blocks */
static int parse_signature(parser *P, jnode *n) {
    if (!expect_op(P, "(")) return 0;
    while (!is_op(cur(P), ")")) {
        if (n->nkw && !expect_op(P, ",")) return 0;
        if (is_op(cur(P), ")")) break;
        jtok *k = cur(P);
        if (k->t != JT_NAME) { unexpected(P, "a parameter name"); return 0; }
        char *nm = k->s;
        adv(P);
        jnode *def = NULL;
        if (skip_op(P, "=")) {
            def = parse_expr(P);
            if (!def) return 0;
        } else {
            for (size_t i = 0; i < n->nkw; i++)
                if (n->kwvals[i]) { pfail(P, k, "non-default argument follows default argument"); return 0; }
        }
        add_kw(n, nm, def);
    }
    adv(P);
    return 1;
}

/* The body of a macro or call block, up to its end tag, into n->b. A body
 * is a new function scope: break/continue there do not reach an enclosing
 * loop. Frees n on error. */
static jnode *parse_callable_body(parser *P, jnode *n, const char *end_tag) {
    const char *ends[] = {end_tag};
    int which, saved = P->in_loop;
    P->in_loop = 0;
    n->b = parse_body(P, ends, 1, &which);
    P->in_loop = saved;
    if (!n->b) { jj_free_node(n); return NULL; }
    return n;
}

static jnode *parse_macro(parser *P, jtok *at) {
    jnode *n = mk(P, JN_MACRO, at);
    if (cur(P)->t != JT_NAME) { jj_free_node(n); return unexpected(P, "a macro name"); }
    n->name = xstrdup(cur(P)->s);
    adv(P);
    if (!parse_signature(P, n) || !expect_block_end(P)) { jj_free_node(n); return NULL; }
    return parse_callable_body(P, n, "endmacro");
}

static jnode *parse_callblock(parser *P, jtok *at) {
    jnode *n = mk(P, JN_CALLBLOCK, at);
    if (is_op(cur(P), "(") && !parse_signature(P, n)) { jj_free_node(n); return NULL; }
    n->a = parse_expr(P);
    if (!n->a) { jj_free_node(n); return NULL; }
    if (n->a->k != JN_CALL) { jj_free_node(n); return pfail(P, at, "expected call"); }
    if (!expect_block_end(P)) { jj_free_node(n); return NULL; }
    return parse_callable_body(P, n, "endcall");
}

static jnode *parse_filterblock(parser *P, jtok *at) {
    jnode *n = mk(P, JN_FILTERBLOCK, at);
    n->c = parse_filter(P, NULL, 1);
    if (!n->c || !expect_block_end(P)) { jj_free_node(n); return NULL; }
    const char *ends[] = {"endfilter"};
    int which;
    n->b = parse_body(P, ends, 1, &which);
    if (!n->b) { jj_free_node(n); return NULL; }
    return n;
}

static jnode *parse_with(parser *P, jtok *at) {
    jnode *n = mk(P, JN_WITH, at);
    while (cur(P)->t != JT_BLOCK_END) {
        if (n->nkids && !expect_op(P, ",")) { jj_free_node(n); return NULL; }
        jnode *t = parse_assign_target(P, 0, 0);
        if (!t) { jj_free_node(n); return NULL; }
        add_kid(n, t);
        if (!expect_op(P, "=")) { jj_free_node(n); return NULL; }
        jnode *v = parse_expr(P);
        if (!v) { jj_free_node(n); return NULL; }
        add_kw(n, "", v);
    }
    adv(P);
    const char *ends[] = {"endwith"};
    int which;
    n->b = parse_body(P, ends, 1, &which);
    if (!n->b) { jj_free_node(n); return NULL; }
    return n;
}

static jnode *parse_statement(parser *P) {
    jtok *at = cur(P);
    if (at->t != JT_NAME) return unexpected(P, "a tag name");
    const char *nm = at->s;
    adv(P);
    if (!strcmp(nm, "for")) return parse_for(P, at);
    if (!strcmp(nm, "if")) return parse_if(P, at);
    if (!strcmp(nm, "set")) return parse_set(P, at);
    if (!strcmp(nm, "macro")) return parse_macro(P, at);
    if (!strcmp(nm, "call")) return parse_callblock(P, at);
    if (!strcmp(nm, "filter")) return parse_filterblock(P, at);
    if (!strcmp(nm, "with")) return parse_with(P, at);
    if (!strcmp(nm, "break") || !strcmp(nm, "continue")) {
        if (!P->in_loop) return pfail(P, at, "'%s' outside of a loop", nm);
        if (!expect_block_end(P)) return NULL;
        return mk(P, nm[0] == 'b' ? JN_BREAK : JN_CONTINUE, at);
    }
    if (!strcmp(nm, "generation")) {
        if (!expect_block_end(P)) return NULL;
        const char *ends[] = {"endgeneration"};
        int which;
        return parse_body(P, ends, 1, &which);
    }
    if (!strcmp(nm, "block") || !strcmp(nm, "extends") || !strcmp(nm, "include") || !strcmp(nm, "import") ||
        !strcmp(nm, "from") || !strcmp(nm, "autoescape") || !strcmp(nm, "do"))
        return pfail(P, at, "the '%s' tag is not supported", nm);
    return pfail(P, at, "Encountered unknown tag '%s'.", nm);
}

/* Parses statements until one of ends (as a block tag) or EOF (ends==NULL).
 * *which = index of the end tag found; the end tag's block is consumed,
 * except for 'elif' whose expression follows. */
static jnode *parse_body(parser *P, const char **ends, int nends, int *which) {
    if (!enter(P)) return NULL;
    jnode *body = mk(P, JN_BODY, cur(P));
    for (;;) {
        jtok *k = cur(P);
        if (k->t == JT_EOF) {
            if (nends) {
                jj_free_node(body);
                pfail(P, k, "unexpected end of template, expected '%s'", ends[nends - 1]);
                LEAVE(P, NULL);
            }
            LEAVE(P, body);
        }
        if (k->t == JT_DATA) {
            jnode *o = mk(P, JN_OUTPUT, k);
            jv s = jv_str(k->s, k->n);
            jv_make_immortal(s);
            o->val = s;
            add_kid(body, o);
            adv(P);
        } else if (k->t == JT_VAR_BEGIN) {
            adv(P);
            jnode *e = parse_tuple(P, 0, 1, 0);
            if (!e) { jj_free_node(body); LEAVE(P, NULL); }
            jnode *o = mk(P, JN_PRINT, k);
            o->a = e;
            add_kid(body, o);
            if (cur(P)->t != JT_VAR_END) {
                jj_free_node(body);
                unexpected(P, "end of print statement");
                LEAVE(P, NULL);
            }
            adv(P);
        } else if (k->t == JT_BLOCK_BEGIN) {
            adv(P);
            jtok *tn = cur(P);
            if (tn->t == JT_NAME) {
                for (int i = 0; i < nends; i++) {
                    if (!strcmp(tn->s, ends[i])) {
                        adv(P);
                        *which = i;
                        if (strcmp(ends[i], "elif") != 0 && !expect_block_end(P)) { jj_free_node(body); LEAVE(P, NULL); }
                        LEAVE(P, body);
                    }
                }
                if (!strncmp(tn->s, "end", 3) || !strcmp(tn->s, "elif") || !strcmp(tn->s, "else")) {
                    jj_free_node(body);
                    if (nends) pfail(P, tn, "unexpected '%s', expected '%s'", tn->s, ends[nends - 1]);
                    else pfail(P, tn, "unexpected '%s'", tn->s);
                    LEAVE(P, NULL);
                }
            }
            jnode *s = parse_statement(P);
            if (!s) { jj_free_node(body); LEAVE(P, NULL); }
            add_kid(body, s);
        } else {
            jj_free_node(body);
            unexpected(P, "template data or a tag");
            LEAVE(P, NULL);
        }
    }
}

int jj_parse_tokens(jtok *toks, size_t n, jnode **root, const char *name, char *err, size_t errlen) {
    parser P = {0};
    P.t = toks;
    P.n = n;
    P.name = name;
    P.err = err;
    P.errlen = errlen;
    int which;
    *root = parse_body(&P, NULL, 0, &which);
    if (!*root) {
        if (!P.failed) ds_err(err, errlen, "%s: syntax error", name);
        return -1;
    }
    return 0;
}
