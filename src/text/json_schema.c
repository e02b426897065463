/* json_schema: JSON Schema to GBNF text (json_schema.h). Each schema
 * becomes an expression; objects, arrays, references and repeated parts
 * get rules of their own. The shared JSON rules (value, string, number,
 * ...) are appended at the end. */
#include "text/json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "base/util.h"

typedef struct {
    char *ref;
    char *name;
} ref_memo;

typedef struct {
    const cJSON *root;
    strbuf rules;
    ref_memo *refs;
    int nrefs, caprefs;
    int counter;
    int failed;
    char *err;
    size_t errlen;
    int depth;
} jsc;

static int jfail(jsc *c, const char *ptr, const char *fmt, ...) DS_PRINTF(3, 4);
static int jfail(jsc *c, const char *ptr, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = 1;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n = strlen(ptr);
    if (n > 100) /* the pointer's ends */
        ds_err(c->err, c->errlen, "json schema at '%.40s...%s': %s", ptr, ptr + n - 50, msg);
    else
        ds_err(c->err, c->errlen, "json schema at '%s': %s", ptr[0] ? ptr : "#", msg);
    return -1;
}

/* ptr + "/" + key (escaped as a JSON pointer token); malloc'd */
static char *ptr_join(const char *ptr, const char *key) {
    strbuf b = {0};
    sb_puts(&b, ptr[0] ? ptr : "#");
    sb_puts(&b, "/");
    for (const char *k = key; *k; k++) {
        if (*k == '~') sb_puts(&b, "~0");
        else if (*k == '/') sb_puts(&b, "~1");
        else sb_append(&b, k, 1);
    }
    return sb_take(&b);
}

static char *ptr_index(const char *ptr, const char *key, int i) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%d", i);
    char *a = ptr_join(ptr, key);
    char *b = ptr_join(a, tmp);
    free(a);
    return b;
}

/* a GBNF literal for bytes s[0..n) */
static void lit(strbuf *o, const char *s, size_t n) {
    sb_puts(o, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            char t[2] = {'\\', (char)ch};
            sb_append(o, t, 2);
        } else if (ch < 0x20 || ch == 0x7f) {
            sb_printf(o, "\\x%02X", ch);
        } else {
            sb_append(o, (const char *)&ch, 1);
        }
    }
    sb_puts(o, "\"");
}

/* the compact JSON text of v as a GBNF literal */
static void json_lit(strbuf *o, const cJSON *v) {
    char *t = cJSON_PrintUnformatted(v);
    if (!t) {
        sb_puts(o, "\"\"");
        return;
    }
    lit(o, t, strlen(t));
    free(t);
}

/* v as a grammar: scalars as their compact text, containers with the
   same bounded whitespace as the generated values */
static void json_value(strbuf *o, const cJSON *v, int depth) {
    if (depth > 64 || (!cJSON_IsArray(v) && !cJSON_IsObject(v))) {
        json_lit(o, v);
        return;
    }
    int obj = cJSON_IsObject(v);
    sb_puts(o, obj ? "\"{\" ws" : "\"[\" ws");
    for (const cJSON *k = v->child; k; k = k->next) {
        if (k != v->child) sb_puts(o, " \",\" ws");
        if (obj) {
            cJSON *ks = cJSON_CreateString(k->string);
            sb_puts(o, " ");
            json_lit(o, ks);
            cJSON_Delete(ks);
            sb_puts(o, " ws \":\" ws");
        }
        sb_puts(o, " ");
        json_value(o, k, depth + 1);
        sb_puts(o, " ws");
    }
    sb_puts(o, obj ? " \"}\"" : " \"]\"");
}

static char *new_name(jsc *c, const char *hint) {
    strbuf b = {0};
    sb_printf(&b, "s%d", c->counter++);
    if (hint && *hint) {
        sb_puts(&b, "-");
        int k = 0;
        for (const char *h = hint; *h && k < 24; h++, k++) {
            char ch = *h;
            int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
            sb_append(&b, ok ? h : "-", 1);
        }
    }
    return sb_take(&b);
}

static void define(jsc *c, const char *name, const char *body) {
    sb_printf(&c->rules, "%s ::= %s\n", name, body);
}

static int is_annotation(const char *k) {
    static const char *const ann[] = {"$schema", "$id", "$comment", "$anchor", "$defs", "definitions", "title",
                                      "description", "default", "examples", "deprecated", "readOnly", "writeOnly",
                                      "contentEncoding", "contentMediaType", "$vocabulary", NULL};
    for (int i = 0; ann[i]; i++)
        if (!strcmp(k, ann[i])) return 1;
    return 0;
}

static int is_refused(const char *k) {
    static const char *const no[] = {"pattern", "patternProperties", "propertyNames", "minProperties",
                                     "maxProperties", "dependentRequired", "dependentSchemas", "dependencies",
                                     "unevaluatedProperties", "unevaluatedItems", "contains", "minContains",
                                     "maxContains", "not", "if", "then", "else", "multipleOf", "$dynamicRef",
                                     "$recursiveRef", "$dynamicAnchor", "$recursiveAnchor", NULL};
    for (int i = 0; no[i]; i++)
        if (!strcmp(k, no[i])) return 1;
    return 0;
}

/* keywords understood here (besides annotations) */
static int is_known(const char *k) {
    static const char *const kw[] = {"type", "properties", "required", "additionalProperties", "items", "prefixItems",
                                     "additionalItems", "minItems", "maxItems", "enum", "const", "anyOf", "oneOf",
                                     "allOf", "$ref", "minLength", "maxLength", "format", "minimum", "maximum",
                                     "exclusiveMinimum", "exclusiveMaximum", "uniqueItems", NULL};
    for (int i = 0; kw[i]; i++)
        if (!strcmp(k, kw[i])) return 1;
    return 0;
}

static int gen(jsc *c, const cJSON *s, const char *ptr, strbuf *o);

/* a rule for schema s; returns its malloc'd name or NULL */
static char *gen_rule(jsc *c, const cJSON *s, const char *ptr, const char *hint) {
    strbuf body = {0};
    if (gen(c, s, ptr, &body) < 0) {
        sb_free(&body);
        return NULL;
    }
    char *name = new_name(c, hint);
    define(c, name, sb_str(&body));
    sb_free(&body);
    return name;
}

/* ---- $ref ---- */

static const cJSON *resolve_pointer(const cJSON *root, const char *ref) {
    if (ref[0] != '#') return NULL;
    const char *p = ref + 1;
    const cJSON *cur = root;
    while (*p) {
        if (*p != '/') return NULL;
        p++;
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char *tok = xmalloc(n + 1);
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (p[i] == '~' && i + 1 < n && (p[i + 1] == '0' || p[i + 1] == '1')) {
                tok[k++] = p[i + 1] == '0' ? '~' : '/';
                i++;
            } else {
                tok[k++] = p[i];
            }
        }
        tok[k] = 0;
        if (cJSON_IsArray(cur)) {
            char *end;
            long idx = strtol(tok, &end, 10);
            cur = (*tok && !*end && idx >= 0 && idx < 1000000) ? cJSON_GetArrayItem(cur, (int)idx) : NULL;
        } else if (cJSON_IsObject(cur)) {
            cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
        } else {
            cur = NULL;
        }
        free(tok);
        if (!cur) return NULL;
        p += n;
    }
    return cur;
}

static int gen_ref(jsc *c, const cJSON *s, const char *ptr, strbuf *o) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (!cJSON_IsString(r)) return jfail(c, ptr, "$ref must be a string");
    for (const cJSON *k = s->child; k; k = k->next)
        if (strcmp(k->string, "$ref") && !is_annotation(k->string) && (is_known(k->string) || is_refused(k->string)))
            return jfail(c, ptr, "'%s' beside $ref is not supported", k->string);
    const char *ref = r->valuestring;
    if (ref[0] != '#') return jfail(c, ptr, "$ref '%.100s': only local references ('#...') are supported", ref);
    for (int i = 0; i < c->nrefs; i++)
        if (!strcmp(c->refs[i].ref, ref)) {
            sb_puts(o, c->refs[i].name);
            return 0;
        }
    const cJSON *t = resolve_pointer(c->root, ref);
    if (!t) return jfail(c, ptr, "$ref '%.100s' does not resolve", ref);
    /* a chain of bare references must end somewhere */
    const cJSON *u = t;
    for (int hops = 0; cJSON_IsObject(u) && cJSON_GetObjectItemCaseSensitive(u, "$ref"); hops++) {
        const cJSON *rr = cJSON_GetObjectItemCaseSensitive(u, "$ref");
        if (hops > 64 || !cJSON_IsString(rr)) return jfail(c, ptr, "$ref '%.100s': a cycle of references", ref);
        u = resolve_pointer(c->root, rr->valuestring);
        if (!u) break;
    }
    if (c->nrefs == c->caprefs) {
        c->caprefs = c->caprefs ? 2 * c->caprefs : 8;
        c->refs = xrealloc(c->refs, (size_t)c->caprefs * sizeof *c->refs);
    }
    const char *slash = strrchr(ref, '/');
    char *name = new_name(c, slash ? slash + 1 : "root");
    c->refs[c->nrefs++] = (ref_memo){xstrdup(ref), name};
    strbuf body = {0};
    int rc = gen(c, t, ref, &body);
    if (rc == 0) define(c, name, sb_str(&body));
    sb_free(&body);
    if (rc == 0) sb_puts(o, name);
    return rc;
}

/* ---- types ---- */

static const char *const TYPES[] = {"object", "array", "string", "number", "integer", "boolean", "null"};

static int value_has_type(const cJSON *v, const char *t) {
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 9007199254740992.0;
    return 0;
}

static int value_matches_types(const cJSON *v, const cJSON *type) {
    if (!type) return 1;
    if (cJSON_IsString(type)) return value_has_type(v, type->valuestring);
    for (const cJSON *t = type->child; t; t = t->next)
        if (cJSON_IsString(t) && value_has_type(v, t->valuestring)) return 1;
    return 0;
}

static int gen_enum(jsc *c, const cJSON *s, const char *ptr, strbuf *o) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
    for (const cJSON *k = s->child; k; k = k->next)
        if (strcmp(k->string, "enum") && strcmp(k->string, "const") && strcmp(k->string, "type") &&
            !is_annotation(k->string) && (is_known(k->string) || is_refused(k->string)))
            return jfail(c, ptr, "'%s' beside enum/const is not supported", k->string);
    if (en && !cJSON_IsArray(en)) return jfail(c, ptr, "enum must be an array");
    int n = 0;
    strbuf alts = {0};
    for (const cJSON *v = en ? en->child : NULL; v; v = v->next) {
        if (!value_matches_types(v, type)) continue;
        if (cn && !cJSON_Compare(v, cn, 1)) continue;
        if (n++) sb_puts(&alts, " | ");
        json_value(&alts, v, 0);
    }
    if (!en && cn && value_matches_types(cn, type)) {
        n++;
        json_value(&alts, cn, 0);
    }
    if (!n) {
        sb_free(&alts);
        return jfail(c, ptr, "enum/const: no value is allowed (none matches the type)");
    }
    sb_printf(o, "(%s)", sb_str(&alts));
    sb_free(&alts);
    return 0;
}

static int get_count(jsc *c, const cJSON *s, const char *key, const char *ptr, long *out, long dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    *out = dflt;
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
        return jfail(c, ptr, "%s must be a non-negative integer", key);
    if (v->valuedouble > GRAMMAR_MAX_REPEAT)
        return jfail(c, ptr, "%s %.0f is above the supported %d", key, v->valuedouble, GRAMMAR_MAX_REPEAT);
    *out = (long)v->valuedouble;
    return 0;
}

static void rep_suffix(strbuf *o, long min, long max) {
    if (max < 0) sb_printf(o, "{%ld,}", min);
    else sb_printf(o, "{%ld,%ld}", min, max);
}

static int gen_string(jsc *c, const cJSON *s, const char *ptr, strbuf *o) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    long mn, mx;
    if (get_count(c, s, "minLength", ptr, &mn, 0) < 0 || get_count(c, s, "maxLength", ptr, &mx, -1) < 0) return -1;
    if (mx >= 0 && mx < mn) return jfail(c, ptr, "maxLength %ld is below minLength %ld", mx, mn);
    if (fmt) {
        if (!cJSON_IsString(fmt)) return jfail(c, ptr, "format must be a string");
        const char *f = fmt->valuestring;
        const char *rule = !strcmp(f, "date") ? "date" : !strcmp(f, "time") ? "time" : !strcmp(f, "date-time") ? "date-time" : !strcmp(f, "uuid") ? "uuid" : NULL;
        if (!rule) return jfail(c, ptr, "format '%.60s' is not supported (date, time, date-time, uuid are)", f);
        if (mn || mx >= 0) return jfail(c, ptr, "minLength/maxLength beside format is not supported");
        sb_printf(o, "\"\\\"\" %s \"\\\"\"", rule);
        return 0;
    }
    if (!mn && mx < 0) {
        sb_puts(o, "string");
        return 0;
    }
    sb_puts(o, "\"\\\"\" char");
    rep_suffix(o, mn, mx);
    sb_puts(o, " \"\\\"\"");
    return 0;
}

/* ---- integer ranges ---- */

static void digits_of(int64_t v, char *out) { snprintf(out, 24, "%lld", (long long)v); }

/* equal-length digit strings x <= y from position i: numbers between them */
static void same_len(strbuf *o, const char *x, const char *y, int i, int L) {
    if (i == L - 1) {
        if (x[i] == y[i]) sb_printf(o, "\"%c\"", x[i]);
        else sb_printf(o, "[%c-%c]", x[i], y[i]);
        return;
    }
    if (x[i] == y[i]) {
        sb_printf(o, "\"%c\" ", x[i]);
        same_len(o, x, y, i + 1, L);
        return;
    }
    int lo0 = 1, hi9 = 1;
    for (int k = i + 1; k < L; k++) {
        if (x[k] != '0') lo0 = 0;
        if (y[k] != '9') hi9 = 0;
    }
    if (lo0 && hi9) {
        sb_printf(o, "[%c-%c] [0-9]{%d}", x[i], y[i], L - i - 1);
        return;
    }
    /* x[i] then x's rest up to all nines; the digits between; y[i] then
       all zeros up to y's rest */
    char hi[24], lo[24];
    memcpy(hi, y, (size_t)L);
    memset(hi + i + 1, '9', (size_t)(L - i - 1));
    memcpy(lo, x, (size_t)L);
    memset(lo + i + 1, '0', (size_t)(L - i - 1));
    sb_printf(o, "(\"%c\" (", x[i]);
    same_len(o, x, hi, i + 1, L);
    sb_puts(o, ")");
    int a = x[i] + 1, b = hi9 ? y[i] : y[i] - 1;
    if (a <= b) sb_printf(o, " | [%c-%c] [0-9]{%d}", a, b, L - i - 1);
    if (!hi9) {
        sb_printf(o, " | \"%c\" (", y[i]);
        same_len(o, lo, y, i + 1, L);
        sb_puts(o, ")");
    }
    sb_puts(o, ")");
}

static int64_t pow10i(int k) {
    int64_t p = 1;
    while (k-- > 0) p *= 10;
    return p;
}

/* non-negative integers in [a, b] (b < 0: no bound), no leading zeros */
static void range_nonneg(strbuf *o, int64_t a, int64_t b) {
    char xs[24], ys[24];
    digits_of(a, xs);
    int la = (int)strlen(xs);
    sb_puts(o, "(");
    if (b < 0) {
        digits_of(pow10i(la) - 1, ys);
        same_len(o, xs, ys, 0, la);
        sb_printf(o, " | [1-9] [0-9]{%d,}", la);
    } else {
        digits_of(b, ys);
        int lb = (int)strlen(ys);
        for (int L = la; L <= lb; L++) {
            int64_t lo = L == 1 ? 0 : pow10i(L - 1), hi = pow10i(L) - 1;
            if (lo < a) lo = a;
            if (hi > b) hi = b;
            char x[24], y[24];
            digits_of(lo, x);
            digits_of(hi, y);
            if (L > la) sb_puts(o, " | ");
            same_len(o, x, y, 0, L);
        }
    }
    sb_puts(o, ")");
}

#define INT_LIMIT 1e15

static int bound(jsc *c, const cJSON *s, const char *ptr, int upper, int *has, int64_t *v) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(s, upper ? "maximum" : "minimum");
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, upper ? "exclusiveMaximum" : "exclusiveMinimum");
    *has = 0;
    double best = 0;
    int have = 0;
    if (m) {
        if (!cJSON_IsNumber(m)) return jfail(c, ptr, "%s must be a number", upper ? "maximum" : "minimum");
        best = upper ? floor(m->valuedouble) : ceil(m->valuedouble);
        have = 1;
        if (cJSON_IsTrue(x)) { /* draft 4 */
            if (m->valuedouble == best) best += upper ? -1 : 1;
            x = NULL;
        }
    }
    if (x && !cJSON_IsBool(x)) {
        if (!cJSON_IsNumber(x)) return jfail(c, ptr, "%s must be a number", upper ? "exclusiveMaximum" : "exclusiveMinimum");
        double e = upper ? floor(x->valuedouble) : ceil(x->valuedouble);
        if (e == x->valuedouble) e += upper ? -1 : 1;
        if (!have || (upper ? e < best : e > best)) best = e;
        have = 1;
    }
    if (!have) return 0;
    if (!(fabs(best) <= INT_LIMIT)) return jfail(c, ptr, "integer bound %g is outside +-10^15", best);
    *has = 1;
    *v = (int64_t)best;
    return 0;
}

static int gen_integer(jsc *c, const cJSON *s, const char *ptr, strbuf *o) {
    int hlo, hhi;
    int64_t lo = 0, hi = 0;
    if (bound(c, s, ptr, 0, &hlo, &lo) < 0 || bound(c, s, ptr, 1, &hhi, &hi) < 0) return -1;
    if (!hlo && !hhi) {
        sb_puts(o, "integer");
        return 0;
    }
    if (hlo && hhi && lo > hi) return jfail(c, ptr, "no integer lies between minimum %lld and maximum %lld", (long long)lo, (long long)hi);
    sb_puts(o, "(");
    int parts = 0;
    if (!hhi || hi >= 0) { /* non-negative part */
        range_nonneg(o, hlo && lo > 0 ? lo : 0, hhi ? hi : -1);
        parts++;
    }
    if (!hlo || lo < 0) { /* negative part: magnitudes */
        int64_t m1 = hhi && hi < 0 ? -hi : 1, m2 = hlo ? -lo : -1;
        if (parts) sb_puts(o, " | ");
        sb_puts(o, "\"-\" ");
        range_nonneg(o, m1, m2);
    }
    sb_puts(o, ")");
    return 0;
}

static int gen_number(jsc *c, const cJSON *s, const char *ptr, strbuf *o) {
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minimum");
    static const char *const others[] = {"maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
    for (int i = 0; others[i]; i++)
        if (cJSON_GetObjectItemCaseSensitive(s, others[i]))
            return jfail(c, ptr, "%s on a number is not supported (integer bounds are, and number minimum 0)", others[i]);
    if (!mn) {
        sb_puts(o, "number");
        return 0;
    }
    if (!cJSON_IsNumber(mn) || mn->valuedouble != 0)
        return jfail(c, ptr, "minimum on a number is supported only as 0 (integer bounds are supported)");
    sb_puts(o, "number-nonneg");
    return 0;
}

/* ---- arrays ---- */

static int gen_array(jsc *c, const cJSON *s, const char *ptr, strbuf *o) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalItems");
    const cJSON *uniq = cJSON_GetObjectItemCaseSensitive(s, "uniqueItems");
    if (uniq && !cJSON_IsFalse(uniq)) return jfail(c, ptr, "uniqueItems is not supported");
    const char *tuple_key = "prefixItems";
    const cJSON *rest = items;
    if (cJSON_IsArray(items)) { /* draft 4-7 tuples */
        if (prefix) return jfail(c, ptr, "items as an array beside prefixItems");
        prefix = items;
        tuple_key = "items";
        rest = addl;
    } else if (prefix && !cJSON_IsArray(prefix)) {
        return jfail(c, ptr, "prefixItems must be an array");
    }
    long mn, mx;
    if (get_count(c, s, "minItems", ptr, &mn, 0) < 0 || get_count(c, s, "maxItems", ptr, &mx, -1) < 0) return -1;
    if (mx >= 0 && mx < mn) return jfail(c, ptr, "maxItems %ld is below minItems %ld", mx, mn);
    int k = prefix ? cJSON_GetArraySize(prefix) : 0;
    char **pn = xcalloc((size_t)k + 1, sizeof *pn);
    char *rn = NULL;
    int rc = -1, i = 0;
    for (const cJSON *p = prefix ? prefix->child : NULL; p; p = p->next, i++) {
        char *pp = ptr_index(ptr, tuple_key, i);
        pn[i] = gen_rule(c, p, pp, "item");
        free(pp);
        if (!pn[i]) goto out;
    }
    int rest_none = cJSON_IsFalse(rest);
    if (rest && !rest_none) {
        char *pp = ptr_join(ptr, rest == addl ? "additionalItems" : "items");
        rn = cJSON_IsTrue(rest) ? xstrdup("value") : gen_rule(c, rest, pp, "items");
        free(pp);
        if (!rn) goto out;
    } else if (!rest) {
        rn = xstrdup("value");
    }
    if (rest_none && mn > k) {
        jfail(c, ptr, "minItems %ld but only %d items are allowed", mn, k);
        goto out;
    }
    long maxlen = mx >= 0 ? mx : -1;
    if (rest_none && (maxlen < 0 || maxlen > k)) maxlen = k;
    if (maxlen == 0) {
        sb_puts(o, "\"[\" ws \"]\"");
        rc = 0;
        goto out;
    }
    /* tail(j): the elements from index j on, each after a comma */
    char *tail = NULL; /* rule name of tail(j+1), built backwards */
    strbuf body = {0};
    {
        /* the part past the tuple items: rest repeated */
        long a = mn - (k > 1 ? k : 1), b = maxlen < 0 ? -1 : maxlen - (k > 1 ? k : 1);
        if (a < 0) a = 0;
        if (maxlen >= 0 && b < 0) b = 0;
        int start = k > 1 ? k : 1;
        sb_clear(&body);
        if (rn && (b < 0 || b > 0)) {
            sb_printf(&body, "(\",\" ws %s ws)", rn);
            rep_suffix(&body, a, b);
        }
        tail = new_name(c, "tail");
        define(c, tail, body.n ? sb_str(&body) : "\"\"");
        for (int j = start - 1; j >= 1; j--) { /* tuple items 1..k-1 */
            sb_clear(&body);
            if (maxlen >= 0 && j >= maxlen) {
                sb_puts(&body, "\"\"");
            } else if (j >= mn) {
                sb_printf(&body, "(\",\" ws %s ws %s)?", pn[j], tail);
            } else {
                sb_printf(&body, "\",\" ws %s ws %s", pn[j], tail);
            }
            char *t = new_name(c, "tail");
            define(c, t, sb_str(&body));
            free(tail);
            tail = t;
        }
    }
    sb_free(&body);
    const char *first = k > 0 ? pn[0] : rn;
    sb_printf(o, "\"[\" ws (%s ws %s)%s \"]\"", first, tail, mn == 0 ? "?" : "");
    free(tail);
    rc = 0;
out:
    for (int j = 0; j < k; j++) free(pn[j]);
    free(pn);
    free(rn);
    return rc;
}

/* ---- objects ---- */

static int gen_object(jsc *c, const cJSON *s, const char *ptr, strbuf *o) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return jfail(c, ptr, "properties must be an object");
    if (req && !cJSON_IsArray(req)) return jfail(c, ptr, "required must be an array");
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
        return jfail(c, ptr, "additionalProperties must be a boolean or a schema");
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
        if (!cJSON_IsString(r)) return jfail(c, ptr, "required must hold strings");
    int np = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) np++;
    int nreq = req ? cJSON_GetArraySize(req) : 0;
    char *addl_name = NULL;
    if (addl && cJSON_IsObject(addl)) {
        char *pp = ptr_join(ptr, "additionalProperties");
        addl_name = gen_rule(c, addl, pp, "addl");
        free(pp);
        if (!addl_name) return -1;
    }
    if (np == 0 && nreq == 0) {
        if (cJSON_IsFalse(addl)) sb_puts(o, "\"{\" ws \"}\"");
        else if (!addl_name) sb_puts(o, "object");
        else
            sb_printf(o, "\"{\" ws (string ws \":\" ws %s ws (\",\" ws string ws \":\" ws %s ws)*)? \"}\"", addl_name,
                      addl_name);
        free(addl_name);
        return 0;
    }
    /* the members: declared properties, then required names not declared */
    int cap = np + nreq + 1, n = 0;
    const char **keys = xcalloc((size_t)cap, sizeof *keys);
    char **vals = xcalloc((size_t)cap, sizeof *vals);
    uint8_t *must = xcalloc((size_t)cap, 1);
    int rc = -1;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) {
        for (int j = 0; j < n; j++)
            if (!strcmp(keys[j], p->string)) {
                jfail(c, ptr, "property '%.60s' is declared twice", p->string);
                goto out;
            }
        keys[n] = p->string;
        char *pp = ptr_join(ptr, "properties");
        char *pq = ptr_join(pp, p->string);
        free(pp);
        vals[n] = gen_rule(c, p, pq, p->string);
        free(pq);
        if (!vals[n]) goto out;
        n++;
    }
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        int j = 0;
        while (j < n && strcmp(keys[j], r->valuestring)) j++;
        if (j == n) {
            if (cJSON_IsFalse(addl)) {
                jfail(c, ptr, "required property '%.60s' is not allowed (additionalProperties is false)", r->valuestring);
                goto out;
            }
            keys[n] = r->valuestring;
            vals[n] = xstrdup(addl_name ? addl_name : "value");
            n++;
        }
        must[j] = 1;
    }
    /* kv_i; tl_i: members from i on after a first one; st_i: the first
       member among i.. */
    char **kv = xcalloc((size_t)n + 1, sizeof *kv);
    strbuf b = {0};
    for (int i = 0; i < n; i++) {
        sb_clear(&b);
        cJSON *ks = cJSON_CreateString(keys[i]);
        json_lit(&b, ks);
        cJSON_Delete(ks);
        sb_printf(&b, " ws \":\" ws %s ws", vals[i]);
        kv[i] = new_name(c, "kv");
        define(c, kv[i], sb_str(&b));
    }
    char *tl_next = NULL; /* tl_{i+1} */
    char **tl = xcalloc((size_t)n + 1, sizeof *tl);
    for (int i = n - 1; i >= 0; i--) {
        sb_clear(&b);
        sb_printf(&b, must[i] ? "\",\" ws %s %s" : "(\",\" ws %s)? %s", kv[i], tl_next ? tl_next : "");
        tl[i] = new_name(c, "tl");
        define(c, tl[i], sb_str(&b));
        tl_next = tl[i];
    }
    int r0 = 0;
    while (r0 < n && !must[r0]) r0++;
    char *st_next = NULL;
    for (int i = (r0 < n ? r0 : n - 1); i >= 0; i--) {
        sb_clear(&b);
        sb_printf(&b, "%s %s", kv[i], i + 1 < n ? tl[i + 1] : "");
        if (!must[i]) sb_printf(&b, " | %s", st_next ? st_next : "\"\"");
        char *st = new_name(c, "st");
        define(c, st, sb_str(&b));
        free(st_next);
        st_next = st;
    }
    sb_free(&b);
    sb_printf(o, "\"{\" ws %s \"}\"", st_next ? st_next : "\"\"");
    free(st_next);
    for (int i = 0; i < n; i++) free(kv[i]), free(tl[i]);
    free(kv);
    free(tl);
    rc = 0;
out:
    for (int i = 0; i < cap; i++) free(vals[i]);
    free(vals);
    free(keys);
    free(must);
    free(addl_name);
    return rc;
}

/* ---- allOf ---- */

static cJSON *merge_allof(jsc *c, const cJSON *s, const char *ptr) {
    cJSON *m = cJSON_CreateObject();
    /* the schema's own keywords, then each branch's */
    int nb = 0;
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    if (!cJSON_IsArray(all)) {
        jfail(c, ptr, "allOf must be an array");
        cJSON_Delete(m);
        return NULL;
    }
    const cJSON *srcs[256];
    srcs[nb++] = s;
    for (const cJSON *b = all->child; b; b = b->next) {
        if (nb == 256) {
            jfail(c, ptr, "allOf with more than 255 branches");
            cJSON_Delete(m);
            return NULL;
        }
        const cJSON *t = b;
        for (int hops = 0; cJSON_IsObject(t) && cJSON_GetObjectItemCaseSensitive(t, "$ref"); hops++) {
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(t, "$ref");
            if (hops > 64 || !cJSON_IsString(r) || !(t = resolve_pointer(c->root, r->valuestring))) {
                jfail(c, ptr, "allOf: a $ref that does not resolve (or a cycle)");
                cJSON_Delete(m);
                return NULL;
            }
        }
        if (cJSON_IsTrue(t)) continue;
        if (!cJSON_IsObject(t)) {
            jfail(c, ptr, "allOf: each branch must be a schema object");
            cJSON_Delete(m);
            return NULL;
        }
        srcs[nb++] = t;
    }
    for (int i = 0; i < nb; i++) {
        for (const cJSON *k = srcs[i]->child; k; k = k->next) {
            const char *key = k->string;
            if (!strcmp(key, "allOf") && i == 0) continue;
            if (is_annotation(key) || (i > 0 && !strcmp(key, "$ref"))) continue;
            cJSON *have = cJSON_GetObjectItemCaseSensitive(m, key);
            if (!have) {
                cJSON_AddItemToObject(m, key, cJSON_Duplicate(k, 1));
            } else if (!strcmp(key, "properties") && cJSON_IsObject(k) && cJSON_IsObject(have)) {
                for (const cJSON *p = k->child; p; p = p->next) {
                    const cJSON *q = cJSON_GetObjectItemCaseSensitive(have, p->string);
                    if (q && !cJSON_Compare(p, q, 1)) {
                        jfail(c, ptr, "allOf: property '%.60s' is declared differently in two branches", p->string);
                        cJSON_Delete(m);
                        return NULL;
                    }
                    if (!q) cJSON_AddItemToObject(have, p->string, cJSON_Duplicate(p, 1));
                }
            } else if (!strcmp(key, "required") && cJSON_IsArray(k) && cJSON_IsArray(have)) {
                for (const cJSON *r = k->child; r; r = r->next) {
                    int dup = 0;
                    for (const cJSON *q = have->child; q; q = q->next) dup |= cJSON_Compare(q, r, 1);
                    if (!dup) cJSON_AddItemToArray(have, cJSON_Duplicate(r, 1));
                }
            } else if (!cJSON_Compare(k, have, 1)) {
                jfail(c, ptr, "allOf: '%s' differs between branches (only properties and required are merged)", key);
                cJSON_Delete(m);
                return NULL;
            }
        }
    }
    return m;
}

/* ---- the dispatcher ---- */

static const char *infer_type(const cJSON *s) {
    static const char *const objk[] = {"properties", "required", "additionalProperties", NULL};
    static const char *const arrk[] = {"items", "prefixItems", "minItems", "maxItems", "additionalItems", NULL};
    static const char *const strk[] = {"minLength", "maxLength", "format", NULL};
    static const char *const numk[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
    const char *const *groups[4] = {objk, arrk, strk, numk};
    const char *names[4] = {"object", "array", "string", "number"};
    const char *found = NULL;
    for (int g = 0; g < 4; g++)
        for (int i = 0; groups[g][i]; i++)
            if (cJSON_GetObjectItemCaseSensitive(s, groups[g][i])) {
                if (found && strcmp(found, names[g])) return "";
                found = names[g];
            }
    return found;
}

static int gen_type(jsc *c, const cJSON *s, const char *t, const char *ptr, strbuf *o) {
    if (!strcmp(t, "null")) sb_puts(o, "null");
    else if (!strcmp(t, "boolean")) sb_puts(o, "boolean");
    else if (!strcmp(t, "string")) return gen_string(c, s, ptr, o);
    else if (!strcmp(t, "integer")) return gen_integer(c, s, ptr, o);
    else if (!strcmp(t, "number")) return gen_number(c, s, ptr, o);
    else if (!strcmp(t, "array")) return gen_array(c, s, ptr, o);
    else if (!strcmp(t, "object")) return gen_object(c, s, ptr, o);
    else return jfail(c, ptr, "unknown type '%.40s'", t);
    return 0;
}

static int gen_body(jsc *c, const cJSON *s, const char *ptr, strbuf *o) {
    if (cJSON_IsTrue(s)) {
        sb_puts(o, "value");
        return 0;
    }
    if (cJSON_IsFalse(s)) return jfail(c, ptr, "the schema false allows nothing");
    if (!cJSON_IsObject(s)) return jfail(c, ptr, "a schema must be an object or a boolean");
    for (const cJSON *k = s->child; k; k = k->next)
        if (is_refused(k->string)) return jfail(c, ptr, "'%s' is not supported", k->string);
    if (cJSON_GetObjectItemCaseSensitive(s, "allOf")) {
        cJSON *m = merge_allof(c, s, ptr);
        if (!m) return -1;
        int rc = gen(c, m, ptr, o);
        cJSON_Delete(m);
        return rc;
    }
    if (cJSON_GetObjectItemCaseSensitive(s, "$ref")) return gen_ref(c, s, ptr, o);
    if (cJSON_GetObjectItemCaseSensitive(s, "enum") || cJSON_GetObjectItemCaseSensitive(s, "const"))
        return gen_enum(c, s, ptr, o);
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    const char *anykey = "anyOf";
    if (!any) any = cJSON_GetObjectItemCaseSensitive(s, "oneOf"), anykey = "oneOf";
    if (any) {
        if (!cJSON_IsArray(any) || !any->child) return jfail(c, ptr, "%s must be a non-empty array", anykey);
        for (const cJSON *k = s->child; k; k = k->next)
            if (strcmp(k->string, anykey) && !is_annotation(k->string) && is_known(k->string))
                return jfail(c, ptr, "'%s' beside %s is not supported", k->string, anykey);
        sb_puts(o, "(");
        int i = 0;
        for (const cJSON *b = any->child; b; b = b->next, i++) {
            char *pp = ptr_index(ptr, anykey, i);
            char *name = gen_rule(c, b, pp, anykey);
            free(pp);
            if (!name) return -1;
            sb_printf(o, "%s%s", i ? " | " : "", name);
            free(name);
        }
        sb_puts(o, ")");
        return 0;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (!type) {
        const char *t = infer_type(s);
        if (!t) {
            sb_puts(o, "value");
            return 0;
        }
        if (!*t) return jfail(c, ptr, "keywords of several types with no 'type'");
        return gen_type(c, s, t, ptr, o);
    }
    if (cJSON_IsString(type)) return gen_type(c, s, type->valuestring, ptr, o);
    if (!cJSON_IsArray(type) || !type->child) return jfail(c, ptr, "type must be a string or a non-empty array");
    sb_puts(o, "(");
    int i = 0;
    for (const cJSON *t = type->child; t; t = t->next) {
        if (!cJSON_IsString(t)) return jfail(c, ptr, "type must hold strings");
        int known = 0;
        for (int k = 0; k < 7; k++) known |= !strcmp(t->valuestring, TYPES[k]);
        if (!known) return jfail(c, ptr, "unknown type '%.40s'", t->valuestring);
        if (i++) sb_puts(o, " | ");
        if (gen_type(c, s, t->valuestring, ptr, o) < 0) return -1;
    }
    sb_puts(o, ")");
    return 0;
}

static int gen(jsc *c, const cJSON *s, const char *ptr, strbuf *o) {
    if (c->failed) return -1;
    if (++c->depth > JSON_SCHEMA_MAX_DEPTH) {
        c->depth--;
        return jfail(c, ptr, "schema nested deeper than %d", JSON_SCHEMA_MAX_DEPTH);
    }
    int rc = gen_body(c, s, ptr, o);
    c->depth--;
    return rc;
}

static const char COMMON[] =
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws (string ws \":\" ws value ws (\",\" ws string ws \":\" ws value ws)*)? \"}\"\n"
    "array ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" u4)\n"
    /* \\u escapes: no lone surrogates; a pair is one character */
    "u4 ::= [0-9a-cA-CefEF] hex{3} | [dD] [0-7] hex{2} | [dD] [89abAB] hex{2} \"\\\\u\" [dD] [c-fC-F] hex{2}\n"
    "number ::= \"-\"? number-nonneg\n"
    "number-nonneg ::= (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?\n"
    "integer ::= \"-\"? (\"0\" | [1-9] [0-9]*)\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "date ::= [0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])\n"
    "time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" ([0-5] [0-9] | \"60\") (\".\" [0-9]{1,9})? "
    "([zZ] | [-+] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "date-time ::= date [Tt ] time\n"
    "uuid ::= hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}\n"
    "hex ::= [0-9a-fA-F]\n";

char *json_schema_to_gbnf(const cJSON *schema, char *err, size_t errlen) {
    jsc c = {.root = schema, .err = err, .errlen = errlen};
    strbuf root = {0};
    int rc = schema ? gen(&c, schema, "#", &root) : (sb_puts(&root, "object"), 0);
    char *text = NULL;
    if (rc == 0) {
        strbuf all = {0};
        sb_printf(&all, "root ::= %s\n", sb_str(&root));
        sb_append(&all, sb_str(&c.rules), c.rules.n);
        sb_puts(&all, COMMON);
        sb_printf(&all, "ws ::= ([ \\t] | \"\\r\"? \"\\n\" [ \\t]{0,%d})?\n", JSON_SCHEMA_INDENT_MAX);
        text = sb_take(&all);
    }
    sb_free(&root);
    sb_free(&c.rules);
    for (int i = 0; i < c.nrefs; i++) free(c.refs[i].ref), free(c.refs[i].name);
    free(c.refs);
    return text;
}

grammar *json_schema_grammar(const cJSON *schema, char *err, size_t errlen) {
    char *text = json_schema_to_gbnf(schema, err, errlen);
    if (!text) return NULL;
    char gerr[256];
    grammar *g = grammar_parse(text, strlen(text), "root", gerr, sizeof gerr);
    if (!g && strstr(gerr, "left-recursive"))
        ds_err(err, errlen, "json schema: a recursion through $ref that consumes no input (%s)", gerr);
    else if (!g)
        ds_err(err, errlen, "json schema: the grammar is refused: %s", gerr);
    free(text);
    return g;
}
