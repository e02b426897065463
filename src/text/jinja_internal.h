/* jinja_internal: what the Jinja pieces share: the value type (Python
 * semantics: None, Undefined, bool, int, float, str, list, dict, namespace,
 * loop, callables), tokens, the AST, and the evaluation context. Values are
 * reference counted; constants owned by a parsed template are immortal
 * (rc < 0), so a template can be rendered from many threads at once. */
#ifndef DS_JINJA_INTERNAL_H
#define DS_JINJA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "text/jinja.h"

/* ---- bounds ---- */
#define JJ_MAX_ITERS 1000000L      /* loop iterations per render */
#define JJ_MAX_DEPTH 200           /* nested macro calls / evaluation depth */
#define JJ_MAX_PARSE_DEPTH 200     /* nesting of expressions and blocks */
#define JJ_MAX_OUTPUT (64u << 20)  /* bytes of output (and of any one string) */

/* ---- values ---- */
typedef enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_FUNC, JV_MACRO, JV_LOOP
} jv_type;

typedef struct jstr jstr;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jfunc jfunc;
typedef struct jmacro jmacro;
typedef struct jloop jloop;

typedef struct jv {
    jv_type t;
    union {
        int b;
        int64_t i;
        double f;
        jstr *s;    /* JV_STR; JV_UNDEF: optional hint ("'x' is undefined"), may be NULL */
        jlist *l;   /* JV_LIST (tuples are lists) */
        jdict *d;   /* JV_DICT, JV_NS */
        jfunc *fn;  /* JV_FUNC */
        jmacro *m;  /* JV_MACRO */
        jloop *lp;  /* JV_LOOP */
    } u;
} jv;

struct jstr {
    int rc;
    int safe; /* Markup */
    size_t len;
    char s[];
};
struct jlist {
    int rc;
    int tuple; /* prints as (a, b) */
    size_t n, cap;
    jv *v;
};
struct jdict {
    int rc;
    size_t n, cap;
    jv *k, *v;
};

struct jnode;
struct jscope;

typedef enum {
    JF_RANGE, JF_NAMESPACE, JF_DICT, JF_RAISE, JF_STRFTIME, JF_LIPSUM_UNUSED, JF_METHOD, JF_LOOP_CYCLE, JF_UNSAFE
} jfunc_kind;

struct jfunc {
    int rc;
    jfunc_kind kind;
    jv self;          /* bound object for methods */
    const char *name; /* method name (static string) */
};

struct jmacro {
    int rc;
    const struct jnode *def;   /* MACRO or CALLBLOCK node */
    struct jscope *scope;      /* caller(): the call site's scope; NULL once the call is over */
    int is_caller;
};

struct jloop {
    int rc;
    jlist *items;
    int64_t index0;
    int depth0;
};

static inline jv jv_undef(void) { jv v; v.t = JV_UNDEF; v.u.s = NULL; return v; }
static inline jv jv_none(void) { jv v; v.t = JV_NONE; v.u.i = 0; return v; }
static inline jv jv_bool(int b) { jv v; v.t = JV_BOOL; v.u.i = 0; v.u.b = !!b; return v; }
static inline jv jv_int(int64_t i) { jv v; v.t = JV_INT; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v; v.t = JV_FLOAT; v.u.f = f; return v; }

jv jv_str(const char *s, size_t n);
jv jv_cstr(const char *s);
jv jv_str_take(jstr *s);
jstr *jstr_new(size_t n); /* len n, NUL-terminated, uninitialized */
jv jv_undef_hint(const char *fmt, ...);
jv jv_list(size_t cap);
jv jv_dict(void);
void jv_list_push(jv list, jv item); /* takes item */
jv jv_dict_get(jv d, jv key);        /* borrowed; JV_UNDEF with u.s==NULL when missing */
int jv_dict_has(jv d, jv key);
void jv_dict_set(jv d, jv key, jv val); /* takes key and val */
jv jv_dict_gets(jv d, const char *key); /* borrowed */
void jv_dict_sets(jv d, const char *key, jv val); /* takes val */

jv jv_ref(jv v);
void jv_unref(jv v);
void jv_make_immortal(jv v);
int jv_is_heap(jv v);

int jv_truthy(jv v);
int jv_equal(jv a, jv b);
/* -1/0/1 into *cmp; returns -1 when the types do not order (TypeError). */
int jv_compare(jv a, jv b, int *cmp);
const char *jv_type_name(jv v); /* Python type name: 'str', 'int', 'dict', ... */

/* string builder */
typedef struct jbuf {
    char *p;
    size_t n, cap;
    int overflow;
} jbuf;
void jbuf_put(jbuf *b, const char *s, size_t n);
void jbuf_puts(jbuf *b, const char *s);
void jbuf_putc(jbuf *b, char c);
void jbuf_free(jbuf *b);
jv jbuf_to_str(jbuf *b); /* takes the buffer */

/* Python str(v) / repr(v) appended to b. Returns -1 for values that have no
 * string form we support (never for plain data). */
void jv_to_str(jbuf *b, jv v);
void jv_repr(jbuf *b, jv v);
void jv_float_repr(jbuf *b, double f);
/* json.dumps(v, ensure_ascii, indent (NULL = none), separators, sort_keys).
 * Returns -1 with a message in err for unserializable values. */
int jv_tojson(jbuf *b, jv v, int ensure_ascii, const char *indent, const char *item_sep, const char *key_sep,
              int sort_keys, char *err, size_t errlen);
jv jv_from_cjson(const cJSON *j);

/* UTF-8 helpers */
size_t ju_decode(const char *s, size_t n, size_t i, uint32_t *cp); /* returns bytes consumed (>=1) */
void ju_encode(jbuf *b, uint32_t cp);
size_t ju_len(const char *s, size_t n);        /* code points */
int ju_isspace(uint32_t cp);                   /* Python str.isspace */
size_t ju_offset(const char *s, size_t n, size_t cpi); /* byte offset of code point index cpi (clamped) */

/* ---- tokens ---- */
typedef enum {
    JT_DATA, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END, JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP,
    JT_EOF
} jtok_type;

typedef struct jtok {
    jtok_type t;
    int line, col;
    char *s; /* data, name, decoded string, or operator text */
    size_t n;
    int64_t i;
    double f;
} jtok;

int jj_lex(const char *src, size_t len, jtok **toks, size_t *ntoks, const char *name, char *err, size_t errlen);
void jj_free_tokens(jtok *toks, size_t n);

/* ---- AST ---- */
typedef enum {
    /* expressions */
    JN_CONST, JN_NAME, JN_GETATTR, JN_GETITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST, JN_BINOP, JN_NEG, JN_POS,
    JN_NOT, JN_AND, JN_OR, JN_COND, JN_LIST, JN_TUPLE, JN_DICT, JN_CONCAT, JN_COMPARE,
    /* statements */
    JN_BODY, JN_OUTPUT, JN_PRINT, JN_IF, JN_FOR, JN_SET, JN_SETBLOCK, JN_MACRO, JN_CALLBLOCK, JN_FILTERBLOCK,
    JN_BREAK, JN_CONTINUE, JN_WITH, JN_NSREF
} jnode_kind;

typedef enum {
    JO_ADD, JO_SUB, JO_MUL, JO_DIV, JO_FLOORDIV, JO_MOD, JO_POW, JO_EQ, JO_NE, JO_LT, JO_LE, JO_GT, JO_GE, JO_IN,
    JO_NOTIN
} jop;

typedef struct jnode {
    jnode_kind k;
    int line, col;
    int op;            /* jop, negation flag for tests */
    jv val;            /* JN_CONST (immortal) */
    char *name;        /* NAME, GETATTR attr, FILTER/TEST name, MACRO name, NSREF attr */
    struct jnode *a, *b, *c, *d;
    struct jnode **kids; /* args, elements, statements, compare operands, macro defaults */
    size_t nkids;
    char **kwnames;    /* CALL/FILTER/TEST keyword names; MACRO/CALLBLOCK params; FOR targets */
    struct jnode **kwvals;
    size_t nkw;
    int *ops;          /* COMPARE operators */
} jnode;

struct jinja_template {
    char *name;
    jnode *root;
};

int jj_parse_tokens(jtok *toks, size_t n, jnode **root, const char *name, char *err, size_t errlen);
void jj_free_node(jnode *n);

/* ---- evaluation ---- */
typedef struct jscope {
    jv vars; /* dict */
    struct jscope *parent;
} jscope;

typedef struct jctx {
    const jinja_template *t;
    char *err;
    size_t errlen;
    int failed;
    long iters;
    int depth;
    jscope *root;
    int ctl; /* 1 break, 2 continue */
} jctx;

/* Formats an error at node n's position (first error wins); returns -1. */
int jj_fail(jctx *c, const jnode *n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Fails with the undefined's hint ("'x' is undefined"). */
int jj_fail_undef(jctx *c, const jnode *n, jv u);

int jj_call_value(jctx *c, const jnode *at, jv fn, jv *args, size_t nargs, char **kwn, jv *kwv, size_t nkw,
                  jv *out);
/* filters.c */
int jj_filter(jctx *c, const jnode *at, const char *name, jv v, jv *args, size_t nargs, char **kwn, jv *kwv,
              size_t nkw, jv *out);
int jj_filter_exists(const char *name);
int jj_test(jctx *c, const jnode *at, const char *name, jv v, jv *args, size_t nargs, int *res);
int jj_test_exists(const char *name);
int jj_getattr(jctx *c, const jnode *at, jv obj, const char *name, jv *out);
int jj_getitem(jctx *c, const jnode *at, jv obj, jv key, jv *out);
int jj_call_method(jctx *c, const jnode *at, jfunc *fn, jv *args, size_t nargs, char **kwn, jv *kwv, size_t nkw,
                   jv *out);
/* Iterable to a fresh list (strings by code point, dicts by key). */
int jj_to_list(jctx *c, const jnode *at, jv v, jv *out);
int jj_binop(jctx *c, const jnode *at, int op, jv a, jv b, jv *out);
jv jj_escape(jv v);

#endif
