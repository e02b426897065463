/* grammar: the builder, the lowering to flat rules over byte sets, the
 * left-recursion check, and the pushdown matcher (grammar.h). The GBNF
 * text parser is in grammar_parse.c. */
#include "text/grammar_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* ---- the builder ---- */

enum { X_LIT, X_CLASS, X_REF, X_SEQ, X_ALT, X_REP };
typedef struct {
    int kind;
    int a, n;     /* LIT: bytes offset, length; CLASS: ranges offset, pairs; REF: rule; SEQ/ALT: kids offset, count; REP: item */
    int min, max; /* REP bounds; CLASS: min = negate */
} gx;

typedef struct {
    char *name;
    int def; /* expression, or -1 */
} gb_rule_t;

struct gram_builder {
    gx *x;
    int nx, capx;
    char *bytes;
    size_t nbytes, capbytes;
    uint32_t *ranges;
    int nranges, capranges;
    int *kids;
    int nkids, capkids;
    gb_rule_t *rules;
    int nrules, caprules;
    char err[256];
};

#define GROW(p, n, cap, need)                                                  \
    do {                                                                       \
        if ((size_t)(n) + (size_t)(need) > (size_t)(cap)) {                    \
            size_t nc_ = (size_t)(cap) ? (size_t)(cap) * 2 : 16;               \
            while (nc_ < (size_t)(n) + (size_t)(need)) nc_ *= 2;               \
            (p) = xrealloc((p), nc_ * sizeof *(p));                            \
            (cap) = nc_;                                                       \
        }                                                                      \
    } while (0)

static int gb_fail(gram_builder *b, const char *fmt, ...) DS_PRINTF(2, 3);
static int gb_fail(gram_builder *b, const char *fmt, ...) {
    if (!b->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->err, sizeof b->err, fmt, ap);
        va_end(ap);
    }
    return -1;
}

gram_builder *gb_new(void) { return xcalloc(1, sizeof(gram_builder)); }

void gb_free(gram_builder *b) {
    if (!b) return;
    for (int i = 0; i < b->nrules; i++) free(b->rules[i].name);
    free(b->rules);
    free(b->x);
    free(b->bytes);
    free(b->ranges);
    free(b->kids);
    free(b);
}

static int gb_add(gram_builder *b, int kind, int a, int n, int min, int max) {
    if (b->nx >= GRAMMAR_MAX_ELEMENTS) return gb_fail(b, "grammar too large (more than %d expressions)", GRAMMAR_MAX_ELEMENTS);
    GROW(b->x, b->nx, b->capx, 1);
    b->x[b->nx] = (gx){kind, a, n, min, max};
    return b->nx++;
}

static int gb_valid(const gram_builder *b, int e) { return e >= 0 && e < b->nx; }

int gb_rule(gram_builder *b, const char *name) {
    for (int i = 0; i < b->nrules; i++)
        if (!strcmp(b->rules[i].name, name)) return i;
    if (!name[0]) return gb_fail(b, "empty rule name");
    GROW(b->rules, b->nrules, b->caprules, 1);
    b->rules[b->nrules] = (gb_rule_t){xstrdup(name), -1};
    return b->nrules++;
}

int gb_lit(gram_builder *b, const char *s, size_t n) {
    if (n > GRAMMAR_MAX_ELEMENTS) return gb_fail(b, "literal too long");
    GROW(b->bytes, b->nbytes, b->capbytes, n + 1);
    memcpy(b->bytes + b->nbytes, s, n);
    int e = gb_add(b, X_LIT, (int)b->nbytes, (int)n, 0, 0);
    b->nbytes += n;
    return e;
}

int gb_class(gram_builder *b, const uint32_t *ranges, int npairs, int negate) {
    if (npairs < 0 || npairs > GRAMMAR_MAX_ELEMENTS / 2) return gb_fail(b, "bad class size");
    for (int i = 0; i < npairs; i++)
        if (ranges[2 * i] > ranges[2 * i + 1] || ranges[2 * i + 1] > 0x10FFFF)
            return gb_fail(b, "bad class range U+%X-U+%X", ranges[2 * i], ranges[2 * i + 1]);
    GROW(b->ranges, b->nranges, b->capranges, 2 * npairs + 1);
    if (npairs) memcpy(b->ranges + b->nranges, ranges, 2 * (size_t)npairs * sizeof *ranges);
    int e = gb_add(b, X_CLASS, b->nranges, npairs, negate ? 1 : 0, 0);
    b->nranges += 2 * npairs;
    return e;
}

int gb_ref(gram_builder *b, int rule) {
    if (rule < 0 || rule >= b->nrules) return gb_fail(b, "reference to an unknown rule id %d", rule);
    return gb_add(b, X_REF, rule, 0, 0, 0);
}

static int gb_list(gram_builder *b, int kind, const int *items, int n) {
    if (n < 0) return gb_fail(b, "negative item count");
    for (int i = 0; i < n; i++)
        if (!gb_valid(b, items[i])) return gb_fail(b, "invalid expression %d", items[i]);
    if (kind == X_ALT && n == 0) return gb_fail(b, "an alternative of nothing");
    if (n == 1) return items[0];
    GROW(b->kids, b->nkids, b->capkids, n + 1);
    if (n) memcpy(b->kids + b->nkids, items, (size_t)n * sizeof *items);
    int e = gb_add(b, kind, b->nkids, n, 0, 0);
    b->nkids += n;
    return e;
}

int gb_seq(gram_builder *b, const int *items, int n) { return gb_list(b, X_SEQ, items, n); }
int gb_alt(gram_builder *b, const int *items, int n) { return gb_list(b, X_ALT, items, n); }

int gb_rep(gram_builder *b, int item, int min, int max) {
    if (!gb_valid(b, item)) return gb_fail(b, "invalid expression %d", item);
    if (min < 0 || min > GRAMMAR_MAX_REPEAT || max > GRAMMAR_MAX_REPEAT || (max >= 0 && max < min) || max < -1)
        return gb_fail(b, "bad repetition bounds {%d,%d} (at most %d)", min, max, GRAMMAR_MAX_REPEAT);
    return gb_add(b, X_REP, item, 0, min, max);
}

int gb_define(gram_builder *b, int rule, int expr) {
    if (rule < 0 || rule >= b->nrules) return gb_fail(b, "unknown rule id %d", rule);
    if (!gb_valid(b, expr)) return gb_fail(b, "invalid expression for rule '%s'", b->rules[rule].name);
    if (b->rules[rule].def >= 0) return gb_fail(b, "rule '%s' is defined twice", b->rules[rule].name);
    b->rules[rule].def = expr;
    return 0;
}

/* ---- lowering ---- */

typedef struct {
    uint32_t *el;
    int n, cap;
} evec;

typedef struct {
    const gram_builder *b;
    evec *rules;
    char **names;
    int nrules, caprules;
    uint64_t (*sets)[4];
    int nsets, capsets;
    int *set_hash; /* open addressing, -1 empty */
    int hash_cap;
    long total;
    int failed;
    char *err;
    size_t errlen;
    int depth;
} lower_ctx;

static int lfail(lower_ctx *c, const char *fmt, ...) DS_PRINTF(2, 3);
static int lfail(lower_ctx *c, const char *fmt, ...) {
    if (!c->failed) {
        va_list ap;
        va_start(ap, fmt);
        if (c->err && c->errlen) vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    c->failed = 1;
    return -1;
}

static int new_rule(lower_ctx *c, const char *owner, const char *what) {
    if (c->nrules >= (1 << 29)) return lfail(c, "too many rules");
    int oldcap = c->caprules;
    GROW(c->rules, c->nrules, c->caprules, 1);
    if (c->caprules != oldcap) c->names = xrealloc(c->names, c->caprules * sizeof *c->names);
    c->rules[c->nrules] = (evec){0};
    size_t l = strlen(owner) + strlen(what) + 24;
    c->names[c->nrules] = xmalloc(l);
    snprintf(c->names[c->nrules], l, "%s_%s%d", owner, what, c->nrules);
    return c->nrules++;
}

static void emit(lower_ctx *c, int r, uint32_t e) {
    if (c->failed) return;
    if (++c->total > GRAMMAR_MAX_ELEMENTS) {
        lfail(c, "grammar too large (more than %d elements after expanding repetitions)", GRAMMAR_MAX_ELEMENTS);
        return;
    }
    evec *v = &c->rules[r];
    GROW(v->el, v->n, v->cap, 1);
    v->el[v->n++] = e;
}

static uint64_t set_key(const uint64_t s[4]) {
    uint64_t h = DS_FNV_SEED;
    for (int i = 0; i < 4; i++) h = ds_mix64(h ^ s[i]);
    return h;
}

static int intern_set(lower_ctx *c, const uint64_t s[4]) {
    if ((c->nsets + 1) * 2 > c->hash_cap) {
        int nc = c->hash_cap ? c->hash_cap * 2 : 256;
        free(c->set_hash);
        c->set_hash = xmalloc((size_t)nc * sizeof(int));
        for (int i = 0; i < nc; i++) c->set_hash[i] = -1;
        c->hash_cap = nc;
        for (int i = 0; i < c->nsets; i++) {
            size_t h = (size_t)set_key(c->sets[i]) & (size_t)(nc - 1);
            while (c->set_hash[h] >= 0) h = (h + 1) & (size_t)(nc - 1);
            c->set_hash[h] = i;
        }
    }
    size_t h = (size_t)set_key(s) & (size_t)(c->hash_cap - 1);
    while (c->set_hash[h] >= 0) {
        if (!memcmp(c->sets[c->set_hash[h]], s, 32)) return c->set_hash[h];
        h = (h + 1) & (size_t)(c->hash_cap - 1);
    }
    GROW(c->sets, c->nsets, c->capsets, 1);
    memcpy(c->sets[c->nsets], s, 32);
    c->set_hash[h] = c->nsets;
    return c->nsets++;
}

static void emit_range(lower_ctx *c, int r, int lo, int hi) {
    uint64_t s[4] = {0, 0, 0, 0};
    for (int i = lo; i <= hi; i++) s[i >> 6] |= 1ull << (i & 63);
    emit(c, r, GE_MAKE(GE_SET, intern_set(c, s)));
}

static int utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

static void utf8_put(uint32_t cp, uint8_t *o) {
    int n = utf8_len(cp);
    if (n == 1) {
        o[0] = (uint8_t)cp;
    } else if (n == 2) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
    } else if (n == 3) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
    } else {
        o[0] = (uint8_t)(0xF0 | (cp >> 18));
        o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    }
}

/* Appends to rule r one alternative per run of UTF-8 encodings of the code
 * points lo..hi (no surrogates) that is a product of byte ranges. */
static void utf8_alts(lower_ctx *c, int r, uint32_t lo, uint32_t hi) {
    if (lo > hi || c->failed) return;
    static const uint32_t bounds[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= bounds[i] && hi > bounds[i]) {
            utf8_alts(c, r, lo, bounds[i]);
            utf8_alts(c, r, bounds[i] + 1, hi);
            return;
        }
    int n = utf8_len(lo);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_alts(c, r, lo, lo | m);
                utf8_alts(c, r, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                utf8_alts(c, r, lo, (hi & ~m) - 1);
                utf8_alts(c, r, hi & ~m, hi);
                return;
            }
        }
    }
    uint8_t a[4], z[4];
    utf8_put(lo, a);
    utf8_put(hi, z);
    for (int i = 0; i < n; i++) emit_range(c, r, a[i], z[i]);
    emit(c, r, GE_MAKE(GE_END, 0));
}

static int cmp_u32pair(const void *x, const void *y) {
    const uint32_t *a = x, *b = y;
    return a[0] < b[0] ? -1 : a[0] > b[0];
}

/* Lowers a class into rule target: one byte set when it holds only ASCII,
 * else a reference to a new rule of UTF-8 alternatives. */
static void lower_class(lower_ctx *c, int target, const gx *x, const char *owner) {
    int np = x->n;
    uint32_t *rg = xmalloc((size_t)(2 * np + 2) * sizeof *rg);
    if (np) memcpy(rg, c->b->ranges + x->a, 2 * (size_t)np * sizeof *rg);
    qsort(rg, (size_t)np, 2 * sizeof *rg, cmp_u32pair);
    int m = 0; /* merge */
    for (int i = 0; i < np; i++) {
        if (m && rg[2 * i] <= rg[2 * (m - 1) + 1] + 1) {
            if (rg[2 * i + 1] > rg[2 * (m - 1) + 1]) rg[2 * (m - 1) + 1] = rg[2 * i + 1];
        } else {
            rg[2 * m] = rg[2 * i];
            rg[2 * m + 1] = rg[2 * i + 1];
            m++;
        }
    }
    if (x->min) { /* negate over 0..10FFFF */
        uint32_t *ng = xmalloc((size_t)(2 * m + 2) * sizeof *ng);
        int k = 0;
        uint32_t next = 0;
        for (int i = 0; i < m; i++) {
            if (rg[2 * i] > next) {
                ng[2 * k] = next;
                ng[2 * k + 1] = rg[2 * i] - 1;
                k++;
            }
            next = rg[2 * i + 1] + 1;
        }
        if (next <= 0x10FFFF) {
            ng[2 * k] = next;
            ng[2 * k + 1] = 0x10FFFF;
            k++;
        }
        free(rg);
        rg = ng;
        m = k;
    }
    uint64_t ascii[4] = {0, 0, 0, 0};
    int multi = 0;
    for (int i = 0; i < m; i++) {
        for (uint32_t cp = rg[2 * i]; cp <= rg[2 * i + 1] && cp < 0x80; cp++) ascii[cp >> 6] |= 1ull << (cp & 63);
        if (rg[2 * i + 1] >= 0x80) multi = 1;
    }
    if (!multi) {
        emit(c, target, GE_MAKE(GE_SET, intern_set(c, ascii)));
        free(rg);
        return;
    }
    int r = new_rule(c, owner, "class");
    if (r < 0) {
        free(rg);
        return;
    }
    if (ascii[0] | ascii[1]) {
        emit(c, r, GE_MAKE(GE_SET, intern_set(c, ascii)));
        emit(c, r, GE_MAKE(GE_END, 0));
    }
    for (int i = 0; i < m; i++) {
        uint32_t lo = rg[2 * i] < 0x80 ? 0x80 : rg[2 * i], hi = rg[2 * i + 1];
        if (lo > hi) continue;
        if (lo < 0xD800 && hi > 0xDFFF) {
            utf8_alts(c, r, lo, 0xD7FF);
            utf8_alts(c, r, 0xE000, hi);
        } else if (lo >= 0xD800 && hi <= 0xDFFF) {
            continue;
        } else if (lo >= 0xD800 && lo <= 0xDFFF) {
            utf8_alts(c, r, 0xE000, hi);
        } else if (hi >= 0xD800 && hi <= 0xDFFF) {
            utf8_alts(c, r, lo, 0xD7FF);
        } else {
            utf8_alts(c, r, lo, hi);
        }
    }
    free(rg);
    if (!c->failed && c->rules[r].n == 0) { /* only surrogates: nothing */
        uint64_t none[4] = {0, 0, 0, 0};
        emit(c, target, GE_MAKE(GE_SET, intern_set(c, none)));
        return;
    }
    emit(c, target, GE_MAKE(GE_REF, r));
}

static void lower(lower_ctx *c, int target, int e, const char *owner);

/* An item repeated: inline when it is one element, else its own rule. */
static uint32_t rep_item(lower_ctx *c, int e, const char *owner) {
    int r = new_rule(c, owner, "item");
    if (r < 0) return GE_MAKE(GE_END, 0);
    lower(c, r, e, owner);
    emit(c, r, GE_MAKE(GE_END, 0));
    if (!c->failed && c->rules[r].n == 2 && GE_TYPE(c->rules[r].el[0]) != GE_END) return c->rules[r].el[0];
    return GE_MAKE(GE_REF, r);
}

static void lower(lower_ctx *c, int target, int e, const char *owner) {
    if (c->failed) return;
    if (++c->depth > 10000) {
        lfail(c, "grammar expression nested too deeply");
        c->depth--;
        return;
    }
    const gx *x = &c->b->x[e];
    switch (x->kind) {
    case X_LIT:
        for (int i = 0; i < x->n; i++) {
            uint8_t ch = (uint8_t)c->b->bytes[x->a + i];
            emit_range(c, target, ch, ch);
        }
        break;
    case X_CLASS:
        lower_class(c, target, x, owner);
        break;
    case X_REF:
        emit(c, target, GE_MAKE(GE_REF, x->a));
        break;
    case X_SEQ:
        for (int i = 0; i < x->n; i++) lower(c, target, c->b->kids[x->a + i], owner);
        break;
    case X_ALT: {
        int r = new_rule(c, owner, "alt");
        if (r < 0) break;
        for (int i = 0; i < x->n; i++) {
            lower(c, r, c->b->kids[x->a + i], owner);
            emit(c, r, GE_MAKE(GE_END, 0));
        }
        emit(c, target, GE_MAKE(GE_REF, r));
        break;
    }
    case X_REP: {
        if (x->max == 0) break;
        uint32_t item = rep_item(c, x->a, owner);
        if (c->failed) break;
        for (int i = 0; i < x->min; i++) emit(c, target, item);
        if (x->max < 0) { /* R ::= item R | () */
            int r = new_rule(c, owner, "rep");
            if (r < 0) break;
            emit(c, r, item);
            emit(c, r, GE_MAKE(GE_REF, r));
            emit(c, r, GE_MAKE(GE_END, 0));
            emit(c, r, GE_MAKE(GE_END, 0));
            emit(c, target, GE_MAKE(GE_REF, r));
        } else if (x->max > x->min) { /* R_k ::= item R_{k-1} | () */
            int prev = -1;
            for (int k = 0; k < x->max - x->min && !c->failed; k++) {
                int r = new_rule(c, owner, "opt");
                if (r < 0) break;
                emit(c, r, item);
                if (prev >= 0) emit(c, r, GE_MAKE(GE_REF, prev));
                emit(c, r, GE_MAKE(GE_END, 0));
                emit(c, r, GE_MAKE(GE_END, 0));
                prev = r;
            }
            if (prev >= 0) emit(c, target, GE_MAKE(GE_REF, prev));
        }
        break;
    }
    }
    c->depth--;
}

/* Refuses left recursion: a rule reaching itself through references at
 * the start of an alternative, past rules that can match the empty string. */
static int check_left_recursion(lower_ctx *c, const grammar *g) {
    int n = g->nrules;
    uint8_t *nullable = xcalloc((size_t)n, 1);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < n; r++) {
            if (nullable[r]) continue;
            for (int a = g->rule_alt[r]; a < g->rule_alt[r + 1] && !nullable[r]; a++) {
                int ok = 1;
                for (uint32_t p = g->alt[a]; GE_TYPE(g->el[p]) != GE_END; p++)
                    if (GE_TYPE(g->el[p]) == GE_SET || !nullable[GE_VAL(g->el[p])]) {
                        ok = 0;
                        break;
                    }
                if (ok) nullable[r] = 1, changed = 1;
            }
        }
    }
    /* iterative DFS over the left-corner edges; frames hold (rule, alt, pos) */
    uint8_t *color = xcalloc((size_t)n, 1);
    int *fr = xmalloc((size_t)n * 3 * sizeof(int));
    int rc = 0;
    for (int s = 0; s < n && !rc; s++) {
        if (color[s]) continue;
        int top = 0;
        fr[0] = s, fr[1] = g->rule_alt[s], fr[2] = -1;
        color[s] = 1;
        while (top >= 0 && !rc) {
            int *f = &fr[3 * top];
            int r = f[0];
            int next = -1;
            while (f[1] < g->rule_alt[r + 1]) {
                uint32_t p = f[2] < 0 ? g->alt[f[1]] : (uint32_t)f[2];
                uint32_t e = g->el[p];
                if (GE_TYPE(e) == GE_REF) {
                    int q = (int)GE_VAL(e);
                    f[2] = nullable[q] ? (int)p + 1 : -2;
                    if (f[2] == -2) f[1]++, f[2] = -1;
                    if (color[q] == 1) {
                        rc = lfail(c, "rule '%s' is left-recursive (it can reach itself without consuming input, "
                                   "e.g. a repetition of something that can be empty)",
                                   g->names[q]);
                        break;
                    }
                    if (color[q] == 0) {
                        next = q;
                        break;
                    }
                } else {
                    f[1]++, f[2] = -1;
                }
            }
            if (rc) break;
            if (next >= 0) {
                color[next] = 1;
                top++;
                fr[3 * top] = next, fr[3 * top + 1] = g->rule_alt[next], fr[3 * top + 2] = -1;
            } else if (f[1] >= g->rule_alt[r + 1]) {
                color[r] = 2;
                top--;
            }
        }
    }
    free(fr);
    free(color);
    free(nullable);
    return rc;
}

void grammar_free(grammar *g) {
    if (!g) return;
    for (int i = 0; i < g->nrules; i++) free(g->names[i]);
    free(g->names);
    free(g->el);
    free(g->alt);
    free(g->rule_alt);
    free(g->sets);
    free(g);
}

int grammar_rule_count(const grammar *g) { return g->nrules; }

grammar *gb_build(gram_builder *b, const char *root, char *err, size_t errlen) {
    if (!root) root = "root";
    if (b->err[0]) {
        ds_err(err, errlen, "%s", b->err);
        return NULL;
    }
    int ri = -1;
    for (int i = 0; i < b->nrules; i++) {
        if (!strcmp(b->rules[i].name, root)) ri = i;
        if (b->rules[i].def < 0) {
            ds_err(err, errlen, "rule '%s' is referenced but not defined", b->rules[i].name);
            return NULL;
        }
    }
    if (ri < 0) {
        ds_err(err, errlen, "no rule named '%s'", root);
        return NULL;
    }
    lower_ctx c = {.b = b, .err = err, .errlen = errlen};
    for (int i = 0; i < b->nrules; i++) {
        int oldcap = c.caprules;
        GROW(c.rules, c.nrules, c.caprules, 1);
        if (c.caprules != oldcap) c.names = xrealloc(c.names, c.caprules * sizeof *c.names);
        c.rules[c.nrules] = (evec){0};
        c.names[c.nrules++] = xstrdup(b->rules[i].name);
    }
    for (int i = 0; i < b->nrules && !c.failed; i++) {
        const gx *x = &b->x[b->rules[i].def];
        if (x->kind == X_ALT) {
            for (int k = 0; k < x->n; k++) {
                lower(&c, i, b->kids[x->a + k], b->rules[i].name);
                emit(&c, i, GE_MAKE(GE_END, 0));
            }
        } else {
            lower(&c, i, b->rules[i].def, b->rules[i].name);
            emit(&c, i, GE_MAKE(GE_END, 0));
        }
    }
    grammar *g = xcalloc(1, sizeof *g);
    g->nrules = c.nrules;
    g->names = c.names;
    g->sets = c.sets;
    g->nsets = c.nsets;
    g->root = ri;
    size_t nel = 0, nalt = 0;
    for (int r = 0; r < c.nrules; r++) {
        nel += (size_t)c.rules[r].n;
        for (int i = 0; i < c.rules[r].n; i++) nalt += GE_TYPE(c.rules[r].el[i]) == GE_END;
    }
    g->el = xmalloc((nel + 1) * sizeof *g->el);
    g->alt = xmalloc((nalt + 1) * sizeof *g->alt);
    g->rule_alt = xmalloc(((size_t)c.nrules + 1) * sizeof *g->rule_alt);
    size_t pe = 0, pa = 0;
    for (int r = 0; r < c.nrules; r++) {
        g->rule_alt[r] = (int)pa;
        int start = 1;
        for (int i = 0; i < c.rules[r].n; i++) {
            if (start) g->alt[pa++] = (uint32_t)pe;
            g->el[pe++] = c.rules[r].el[i];
            start = GE_TYPE(c.rules[r].el[i]) == GE_END;
        }
        free(c.rules[r].el);
    }
    g->el[pe] = GE_MAKE(GE_END, 0);
    g->nel = (int)pe;
    g->rule_alt[c.nrules] = (int)pa;
    free(c.rules);
    free(c.set_hash);
    if (!g->sets) g->sets = xcalloc(1, sizeof *g->sets);
    if (c.failed || check_left_recursion(&c, g) != 0) {
        grammar_free(g);
        return NULL;
    }
    return g;
}

/* ---- the matcher ---- */

#define GM_TABLE 4096 /* dedup table; > 2 * GM_MAX_STACKS */
#define GM_MAX_STEPS (1 << 20)

gm_scratch *gm_scratch_new(void) {
    gm_scratch *sc = xcalloc(1, sizeof *sc);
    sc->key_pos = xmalloc(GM_TABLE * sizeof(uint32_t));
    sc->key_par = xmalloc(GM_TABLE * sizeof(uint32_t));
    sc->key_gen = xcalloc(GM_TABLE, sizeof(uint32_t));
    sc->bufs = xmalloc(2 * GM_MAX_STACKS * sizeof(uint32_t));
    return sc;
}

static uint32_t htab_hash(uint64_t k) { return (uint32_t)ds_mix64(k); }

uint32_t *gm_htab_get(gm_htab *h, uint64_t key, int *found) {
    if (!h->cur) h->cur = 1;
    if ((h->n + 1) * 2 > h->cap) {
        uint32_t oc = h->cap, nc = oc ? oc * 2 : 4096;
        uint64_t *ok = h->key;
        uint32_t *ov = h->val, *og = h->gen;
        h->key = xmalloc(nc * sizeof *h->key);
        h->val = xmalloc(nc * sizeof *h->val);
        h->gen = xcalloc(nc, sizeof *h->gen);
        h->cap = nc;
        uint32_t cur = h->cur;
        h->cur = 1;
        for (uint32_t i = 0; i < oc; i++)
            if (og[i] == cur) {
                uint32_t j = htab_hash(ok[i]) & (nc - 1);
                while (h->gen[j] == 1) j = (j + 1) & (nc - 1);
                h->gen[j] = 1, h->key[j] = ok[i], h->val[j] = ov[i];
            }
        free(ok), free(ov), free(og);
    }
    uint32_t j = htab_hash(key) & (h->cap - 1);
    while (h->gen[j] == h->cur) {
        if (h->key[j] == key) {
            *found = 1;
            return &h->val[j];
        }
        j = (j + 1) & (h->cap - 1);
    }
    h->gen[j] = h->cur;
    h->key[j] = key;
    h->val[j] = 0;
    h->n++;
    *found = 0;
    return &h->val[j];
}

void gm_htab_reset(gm_htab *h) {
    h->n = 0;
    if (++h->cur == 0) {
        if (h->gen) memset(h->gen, 0, h->cap * sizeof *h->gen);
        h->cur = 1;
    }
}

void gm_htab_free(gm_htab *h) {
    free(h->key);
    free(h->val);
    free(h->gen);
    memset(h, 0, sizeof *h);
}

void gm_scratch_free(gm_scratch *sc) {
    if (!sc) return;
    gm_htab_free(&sc->nodes);
    free(sc->bufs);
    free(sc->key_pos);
    free(sc->key_par);
    free(sc->key_gen);
    free(sc->work);
    free(sc);
}

typedef struct {
    const grammar *g;
    gm_node **pool;
    uint32_t *npool, *cap;
    gm_scratch *sc;
    uint32_t *out;
    int nout;
    int fail;
    char *err;
    size_t errlen;
} gm_adv;

static uint32_t node_new(gm_adv *a, uint32_t pos, uint32_t parent) {
    uint32_t *slot = NULL;
    if (*a->npool >= GM_MAX_NODES) {
        if (!a->fail) ds_err(a->err, a->errlen, "grammar matcher: more than %u stack nodes (input nested too deeply)", GM_MAX_NODES);
        a->fail = 1;
        return 0;
    }
    if (a->sc->hashcons) {
        int found;
        slot = gm_htab_get(&a->sc->nodes, ((uint64_t)pos << 32) | parent, &found);
        if (found) return *slot;
    }
    if (*a->npool >= *a->cap) {
        *a->cap = *a->cap ? *a->cap * 2 : 256;
        *a->pool = xrealloc(*a->pool, *a->cap * sizeof(gm_node));
    }
    (*a->pool)[*a->npool] = (gm_node){pos, parent};
    if (slot) *slot = *a->npool;
    return (*a->npool)++;
}

static void head_emit(gm_adv *a, uint32_t pos, uint32_t par, uint32_t known) {
    gm_scratch *sc = a->sc;
    uint32_t h = ((pos * 0x9E3779B1u) ^ (par * 0x85EBCA77u)) & (GM_TABLE - 1);
    while (sc->key_gen[h] == sc->gen) {
        if (sc->key_pos[h] == pos && sc->key_par[h] == par) return;
        h = (h + 1) & (GM_TABLE - 1);
    }
    if (a->nout >= GM_MAX_STACKS) {
        if (!a->fail)
            ds_err(a->err, a->errlen, "grammar matcher: more than %d parallel parses (the grammar is too ambiguous)",
                   GM_MAX_STACKS);
        a->fail = 1;
        return;
    }
    sc->key_gen[h] = sc->gen;
    sc->key_pos[h] = pos;
    sc->key_par[h] = par;
    uint32_t id = pos == UINT32_MAX ? 0 : known ? known : node_new(a, pos, par);
    a->out[a->nout++] = id;
}

static void work_push(gm_scratch *sc, uint32_t pos, uint32_t par) {
    GROW(sc->work, sc->nwork * 2, sc->capwork, 2);
    sc->work[2 * sc->nwork] = pos;
    sc->work[2 * sc->nwork + 1] = par;
    sc->nwork++;
}

/* The node for "continue at pos over parent", skipping ends of
 * alternatives (a reference in tail position reuses its parent). */
static uint32_t cont_node(gm_adv *a, uint32_t pos, uint32_t par) {
    const grammar *g = a->g;
    if (GE_TYPE(g->el[pos]) != GE_END) return node_new(a, pos, par);
    return par; /* par's own position is never an end */
}

static void expand(gm_adv *a, uint32_t pos, uint32_t par, uint32_t known) {
    const grammar *g = a->g;
    gm_scratch *sc = a->sc;
    long steps = 0;
    sc->nwork = 0;
    for (;;) {
        for (;;) {
            if (a->fail) return;
            if (++steps > GM_MAX_STEPS) {
                ds_err(a->err, a->errlen, "grammar matcher: expansion too large");
                a->fail = 1;
                return;
            }
            uint32_t e = g->el[pos];
            if (GE_TYPE(e) == GE_SET) {
                head_emit(a, pos, par, known);
                break;
            }
            if (GE_TYPE(e) == GE_END) {
                if (par == 0) {
                    head_emit(a, UINT32_MAX, 0, 0);
                    break;
                }
                gm_node n = (*a->pool)[par];
                known = par;
                pos = n.pos;
                par = n.parent;
                continue;
            }
            uint32_t r = GE_VAL(e);
            uint32_t cont = cont_node(a, pos + 1, par);
            for (int k = g->rule_alt[r + 1] - 1; k >= g->rule_alt[r]; k--) work_push(sc, g->alt[k], cont);
            break;
        }
        if (sc->nwork == 0) return;
        sc->nwork--;
        pos = sc->work[2 * sc->nwork];
        par = sc->work[2 * sc->nwork + 1];
        known = 0;
    }
}

int gm_advance(const grammar *g, gm_node **pool, uint32_t *npool, uint32_t *cappool, gm_scratch *sc,
               const uint32_t *in, int nin, uint8_t c, uint32_t *out, char *err, size_t errlen) {
    gm_adv a = {g, pool, npool, cappool, sc, out, 0, 0, err, errlen};
    if (++sc->gen == 0) {
        memset(sc->key_gen, 0, GM_TABLE * sizeof(uint32_t));
        sc->gen = 1;
    }
    for (int i = 0; i < nin && !a.fail; i++) {
        if (!in[i]) continue;
        gm_node n = (*pool)[in[i]];
        if (!gm_set_has(g, g->el[n.pos], c)) continue;
        expand(&a, n.pos + 1, n.parent, 0);
    }
    return a.fail ? -1 : a.nout;
}

static void state_init_pool(gm_state *s) {
    s->cappool = 256;
    s->pool = xmalloc(s->cappool * sizeof(gm_node));
    s->pool[0] = (gm_node){0, 0};
    s->npool = 1;
}

gm_state *gm_new(const grammar *g) {
    gm_state *s = xcalloc(1, sizeof *s);
    s->g = g;
    state_init_pool(s);
    s->capheads = GM_MAX_STACKS;
    s->heads = xmalloc((size_t)s->capheads * sizeof(uint32_t));
    s->scratch = gm_scratch_new();
    s->scratch->gen = 1;
    gm_adv a = {g, &s->pool, &s->npool, &s->cappool, s->scratch, s->heads, 0, 0, s->err, sizeof s->err};
    for (int k = g->rule_alt[g->root]; k < g->rule_alt[g->root + 1] && !a.fail; k++) {
        /* each alternative of the root starts over the sentinel */
        expand(&a, g->alt[k], 0, 0);
    }
    s->nheads = a.fail ? 0 : a.nout;
    s->live_after_compact = s->npool;
    return s;
}

void gm_free(gm_state *s) {
    if (!s) return;
    free(s->pool);
    free(s->heads);
    gm_scratch_free(s->scratch);
    free(s);
}

void gm_copy(gm_state *dst, const gm_state *src) {
    if (dst == src) return;
    dst->g = src->g;
    if (dst->cappool < src->npool) {
        dst->cappool = src->cappool;
        dst->pool = xrealloc(dst->pool, dst->cappool * sizeof(gm_node));
    }
    memcpy(dst->pool, src->pool, src->npool * sizeof(gm_node));
    dst->npool = src->npool;
    memcpy(dst->heads, src->heads, (size_t)src->nheads * sizeof(uint32_t));
    dst->nheads = src->nheads;
    dst->live_after_compact = src->live_after_compact;
    memcpy(dst->err, src->err, sizeof dst->err);
}

gm_state *gm_clone(const gm_state *s) {
    gm_state *d = xcalloc(1, sizeof *d);
    d->cappool = s->npool > 16 ? s->npool : 16;
    d->pool = xmalloc(d->cappool * sizeof(gm_node));
    d->capheads = GM_MAX_STACKS;
    d->heads = xmalloc((size_t)d->capheads * sizeof(uint32_t));
    d->scratch = gm_scratch_new();
    d->scratch->gen = 1;
    gm_copy(d, s);
    return d;
}

static void compact(gm_state *s) {
    uint32_t *map = xcalloc(s->npool, sizeof(uint32_t));
    for (int i = 0; i < s->nheads; i++)
        for (uint32_t x = s->heads[i]; x && !map[x]; x = s->pool[x].parent) map[x] = 1;
    uint32_t nn = 1;
    for (uint32_t i = 1; i < s->npool; i++)
        if (map[i]) {
            map[i] = nn;
            s->pool[nn].pos = s->pool[i].pos;
            s->pool[nn].parent = map[s->pool[i].parent]; /* parents come first */
            nn++;
        }
    for (int i = 0; i < s->nheads; i++) s->heads[i] = map[s->heads[i]];
    s->npool = nn;
    s->live_after_compact = nn;
    free(map);
}

void gm_commit(gm_state *s, const uint32_t *out, int n) {
    memcpy(s->heads, out, (size_t)n * sizeof(uint32_t));
    s->nheads = n;
    if (s->npool > 2 * s->live_after_compact + 1024) compact(s);
}

int gm_accept_bytes(gm_state *s, const void *bytes, size_t n) {
    const uint8_t *p = bytes;
    if (n == 0) return 1;
    uint32_t save = s->npool;
    uint32_t *bufs = s->scratch->bufs;
    const uint32_t *cur = s->heads;
    int ncur = s->nheads;
    int rc = 1;
    for (size_t i = 0; i < n; i++) {
        uint32_t *out = bufs + (i & 1) * GM_MAX_STACKS;
        int k = gm_advance(s->g, &s->pool, &s->npool, &s->cappool, s->scratch, cur, ncur, p[i], out, s->err,
                           sizeof s->err);
        if (k <= 0) {
            rc = k;
            break;
        }
        cur = out;
        ncur = k;
    }
    if (rc == 1) {
        gm_commit(s, cur, ncur);
    } else {
        s->npool = save;
    }
    return rc;
}

int gm_accept_byte(gm_state *s, uint8_t c) { return gm_accept_bytes(s, &c, 1); }

int gm_is_complete(const gm_state *s) {
    for (int i = 0; i < s->nheads; i++)
        if (s->heads[i] == 0) return 1;
    return 0;
}

int gm_can_continue(const gm_state *s) {
    for (int i = 0; i < s->nheads; i++)
        if (s->heads[i] != 0) return 1;
    return 0;
}

void gm_next_bytes(const gm_state *s, uint64_t set[4]) {
    set[0] = set[1] = set[2] = set[3] = 0;
    for (int i = 0; i < s->nheads; i++) {
        if (!s->heads[i]) continue;
        const uint64_t *b = s->g->sets[GE_VAL(s->g->el[s->pool[s->heads[i]].pos])];
        for (int k = 0; k < 4; k++) set[k] |= b[k];
    }
}

int gm_stack_count(const gm_state *s) { return s->nheads; }
const char *gm_error(const gm_state *s) { return s->err; }

int grammar_matches(const grammar *g, const void *text, size_t n) {
    gm_state *s = gm_new(g);
    int rc = s->err[0] ? -1 : gm_accept_bytes(s, text, n);
    if (rc == 1) rc = gm_is_complete(s);
    gm_free(s);
    return rc;
}
