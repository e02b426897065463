/* toolcall: see toolcall.h. This file holds format detection, call ids,
 * the plumbing the parsers share (toolcall_internal.h: the result builder,
 * tool schemas and schema typing), the JSON formats (hermes, llama3,
 * mistral), the Qwen3-Coder XML format and the streaming gate. The
 * Python-literal and Gemma formats are in toolcall_py.c. */
#include "server/toolcall.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/toolcall_internal.h"
#include "base/util.h"

/* ---- format detection ---- */

tc_format tc_format_for_template(const char *t) {
    if (!t) return TC_NONE;
    if (strstr(t, "<tool_call>")) return strstr(t, "<function=") ? TC_XML : TC_HERMES;
    if (strstr(t, "[TOOL_CALLS]")) return TC_MISTRAL;
    if (strstr(t, "<|tool_call_start|>")) return TC_PYTHONIC;
    if (strstr(t, "<|tool_call>") || strstr(t, "tool_code")) return TC_GEMMA;
    if (strstr(t, "<|python_tag|>") || strstr(t, "ipython") ||
        (strstr(t, "\"parameters\"") && strstr(t, "<|eot_id|>")))
        return TC_LLAMA3;
    return TC_NONE;
}

const char *tc_format_name(tc_format f) {
    switch (f) {
    case TC_HERMES: return "hermes";
    case TC_XML: return "xml";
    case TC_LLAMA3: return "llama3";
    case TC_MISTRAL: return "mistral";
    case TC_PYTHONIC: return "pythonic";
    case TC_GEMMA: return "gemma";
    default: return "none";
    }
}

/* ---- shared plumbing ---- */

cJSON *tc_need(cJSON *v) {
    if (!v) {
        fprintf(stderr, "dspark: out of memory building JSON\n");
        abort();
    }
    return v;
}

/* a cJSON value made by make from s[0..n) (not NUL-terminated) */
static cJSON *json_n(cJSON *(*make)(const char *), const char *s, size_t n) {
    char *t = xmalloc(n + 1);
    memcpy(t, s, n);
    t[n] = 0;
    cJSON *v = tc_need(make(t));
    free(t);
    return v;
}

cJSON *tc_str(const char *s, size_t n) { return json_n(cJSON_CreateString, s, n); }
static cJSON *raw_n(const char *s, size_t n) { return json_n(cJSON_CreateRaw, s, n); }

void tc_obj_set(cJSON *obj, const char *key, cJSON *v) {
    if (cJSON_GetObjectItemCaseSensitive(obj, key)) cJSON_ReplaceItemInObjectCaseSensitive(obj, key, v);
    else cJSON_AddItemToObject(obj, key, v);
}

int tc_is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

size_t tc_skip_ws(const char *s, size_t p, size_t end) {
    while (p < end && tc_is_ws(s[p])) p++;
    return p;
}

size_t tc_find(const char *s, size_t from, size_t end, const char *lit) {
    size_t ln = strlen(lit);
    if (from >= end || end - from < ln) return TC_NPOS;
    const char *h = memmem(s + from, end - from, lit, ln);
    return h ? (size_t)(h - s) : TC_NPOS;
}

size_t tc_next(tc_build *b, int slot, size_t p, const char *lit) {
    tc_memo *m = &b->memo[slot];
    if (m->ok && p >= m->from && (m->at == TC_NPOS || p <= m->at)) return m->at;
    m->ok = 1;
    m->from = p;
    m->at = tc_find(b->s, p, b->n, lit);
    return m->at;
}

int tc_at(const char *s, size_t p, size_t end, const char *lit) {
    size_t ln = strlen(lit);
    return p <= end && end - p >= ln && memcmp(s + p, lit, ln) == 0;
}

void tc_utf8_put(strbuf *b, unsigned cp) {
    char u[4];
    size_t k;
    if (cp < 0x80) {
        u[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        k = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        k = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        k = 4;
    }
    sb_append(b, u, k);
}

int tc_json_number(const char *s, size_t n, int *is_int) {
    size_t i = 0;
    *is_int = 1;
    if (i < n && s[i] == '-') i++;
    if (i >= n || s[i] < '0' || s[i] > '9') return 0;
    if (s[i] == '0') i++;
    else
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    if (i < n && s[i] == '.') {
        *is_int = 0;
        if (++i >= n || s[i] < '0' || s[i] > '9') return 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        *is_int = 0;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || s[i] < '0' || s[i] > '9') return 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    return i == n;
}

cJSON *tc_json_exact(const char *s, size_t n) {
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    if (!v) return NULL;
    size_t q = tc_skip_ws(s, (size_t)(end - s), n);
    if (q != n) {
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}

/* ---- the result builder ---- */

void tb_add(tc_build *b, const char *name, size_t name_len, cJSON *args) {
    char *txt = cJSON_PrintUnformatted(args);
    cJSON_Delete(args);
    if (!txt) tc_need(NULL);
    tb_add_text(b, name, name_len, xstrdup(txt));
    cJSON_free(txt);
}

void tb_add_text(tc_build *b, const char *name, size_t name_len, char *args) {
    if (b->n_calls == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 4;
        b->calls = xrealloc(b->calls, sizeof(tc_call) * (size_t)b->cap);
    }
    tc_call *c = &b->calls[b->n_calls++];
    ds_unique_id(c->id, sizeof c->id, "call_");
    c->name = xmalloc(name_len + 1);
    memcpy(c->name, name, name_len);
    c->name[name_len] = 0;
    c->arguments = args;
}

void tb_rollback(tc_build *b, int mark) {
    while (b->n_calls > mark) {
        tc_call *c = &b->calls[--b->n_calls];
        free(c->name);
        free(c->arguments);
    }
}

void tb_cut(tc_build *b, size_t start, size_t end) {
    sb_append(&b->text, b->s + b->kept, start - b->kept);
    b->kept = end;
}

static void tb_finish(tc_build *b, tc_result *out) {
    out->n = b->n_calls;
    if (b->n_calls == 0) {
        free(b->calls);
        sb_free(&b->text);
        out->calls = NULL;
        out->text = xmalloc(b->n + 1);
        if (b->n) memcpy(out->text, b->s, b->n);
        out->text[b->n] = 0;
        return;
    }
    out->calls = b->calls;
    sb_append(&b->text, b->s + b->kept, b->n - b->kept);
    size_t a = 0, e = b->text.n;
    const char *t = sb_str(&b->text);
    while (a < e && tc_is_ws(t[a])) a++;
    while (e > a && tc_is_ws(t[e - 1])) e--;
    out->text = xmalloc(e - a + 1);
    memcpy(out->text, t + a, e - a);
    out->text[e - a] = 0;
    sb_free(&b->text);
}

void tc_each_block(tc_build *b, const char *marker, size_t (*block)(tc_build *, size_t)) {
    size_t pos = 0, ml = strlen(marker);
    for (;;) {
        size_t m = tc_find(b->s, pos, b->n, marker);
        if (m == TC_NPOS) return;
        int mark = b->n_calls;
        size_t end = block(b, m);
        if (end && b->n_calls > mark) {
            tb_cut(b, m, end);
            pos = end;
        } else {
            tb_rollback(b, mark);
            pos = m + ml;
        }
    }
}

/* ---- tool schemas and schema typing ---- */

const cJSON *tc_tool_find(const cJSON *tools, const char *name) {
    if (!cJSON_IsArray(tools) || !name) return NULL;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsObject(fn)) fn = t;
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (cJSON_IsString(nm) && strcmp(nm->valuestring, name) == 0) return fn;
    }
    return NULL;
}

const cJSON *tc_tool_params(const cJSON *tools, const char *name) {
    const cJSON *fn = tc_tool_find(tools, name);
    if (!fn) return NULL;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    if (!cJSON_IsObject(p)) p = cJSON_GetObjectItemCaseSensitive(fn, "input_schema");
    return cJSON_IsObject(p) ? p : NULL;
}

const cJSON *tc_prop_schema(const cJSON *params, const char *key) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
    const cJSON *p = cJSON_IsObject(props) ? cJSON_GetObjectItemCaseSensitive(props, key) : NULL;
    return cJSON_IsObject(p) ? p : NULL;
}

enum { TY_STR = 1, TY_INT = 2, TY_NUM = 4, TY_BOOL = 8, TY_NULL = 16, TY_OBJ = 32, TY_ARR = 64 };

static unsigned type_bit(const char *t) {
    static const struct { const char *name; unsigned bit; } names[] = {
        {"string", TY_STR}, {"integer", TY_INT}, {"number", TY_NUM}, {"boolean", TY_BOOL},
        {"null", TY_NULL}, {"object", TY_OBJ}, {"array", TY_ARR}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(t, names[i].name) == 0) return names[i].bit;
    return 0;
}

static unsigned value_type(const cJSON *v) {
    if (cJSON_IsString(v)) return TY_STR;
    if (cJSON_IsBool(v)) return TY_BOOL;
    if (cJSON_IsNull(v)) return TY_NULL;
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        return d >= -9e18 && d <= 9e18 && d == (double)(int64_t)d ? TY_INT : TY_NUM;
    }
    if (cJSON_IsObject(v)) return TY_OBJ;
    if (cJSON_IsArray(v)) return TY_ARR;
    return 0;
}

/* The JSON types a property schema allows (0: unknown): from "type", else
 * the members of anyOf/oneOf/allOf, else the values of enum/const. */
static unsigned schema_types(const cJSON *prop, int depth) {
    if (!cJSON_IsObject(prop) || depth > 4) return 0;
    unsigned m = 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(prop, "type"), *e;
    if (cJSON_IsString(t)) m = type_bit(t->valuestring);
    else if (cJSON_IsArray(t))
        cJSON_ArrayForEach(e, t) if (cJSON_IsString(e)) m |= type_bit(e->valuestring);
    static const char *const alts[] = {"anyOf", "oneOf", "allOf"};
    for (int i = 0; i < 3 && !m; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(prop, alts[i]);
        if (cJSON_IsArray(a)) cJSON_ArrayForEach(e, a) m |= schema_types(e, depth + 1);
    }
    if (!m) {
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(prop, "enum");
        if (cJSON_IsArray(en)) cJSON_ArrayForEach(e, en) m |= value_type(e);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(prop, "const");
        if (c) m |= value_type(c);
    }
    return m;
}

static int eq_ci(const char *s, size_t n, const char *lit) {
    size_t ln = strlen(lit);
    if (n != ln) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != lit[i]) return 0;
    }
    return 1;
}

/* t[0..n) (already trimmed) as one of the types in m, or NULL. */
static cJSON *typed(const char *t, size_t n, unsigned m) {
    int is_int;
    if ((m & TY_NULL) && (eq_ci(t, n, "null") || (n == 4 && memcmp(t, "None", 4) == 0)))
        return tc_need(cJSON_CreateNull());
    if ((m & TY_BOOL) && eq_ci(t, n, "true")) return tc_need(cJSON_CreateTrue());
    if ((m & TY_BOOL) && eq_ci(t, n, "false")) return tc_need(cJSON_CreateFalse());
    if ((m & (TY_INT | TY_NUM)) && tc_json_number(t, n, &is_int) && (is_int || (m & TY_NUM)))
        return raw_n(t, n);
    if ((m & (TY_OBJ | TY_ARR)) && n && (t[0] == '{' || t[0] == '[')) {
        cJSON *v = tc_json_exact(t, n);
        if (v && ((cJSON_IsObject(v) && (m & TY_OBJ)) || (cJSON_IsArray(v) && (m & TY_ARR)))) return v;
        cJSON_Delete(v);
    }
    return NULL;
}

cJSON *tc_value_from_text(const char *s, size_t n, const cJSON *prop, int quoted) {
    unsigned m = schema_types(prop, 0);
    if (quoted && (m == 0 || (m & TY_STR))) return tc_str(s, n);
    size_t a = 0, e = n;
    while (a < e && tc_is_ws(s[a])) a++;
    while (e > a && tc_is_ws(s[e - 1])) e--;
    const char *t = s + a;
    size_t tn = e - a;
    cJSON *v = NULL;
    int is_int;
    if (m == 0) { /* no schema: short single-line JSON scalars only */
        if (tn == 4 && memcmp(t, "null", 4) == 0) v = tc_need(cJSON_CreateNull());
        else if (tn == 4 && memcmp(t, "true", 4) == 0) v = tc_need(cJSON_CreateTrue());
        else if (tn == 5 && memcmp(t, "false", 5) == 0) v = tc_need(cJSON_CreateFalse());
        else if (tn <= 32 && tc_json_number(t, tn, &is_int)) v = raw_n(t, tn);
    } else if (m != TY_STR) {
        v = typed(t, tn, m);
    }
    return v ? v : tc_str(s, n);
}

void tc_coerce_string(cJSON **v, const cJSON *prop) {
    if (!cJSON_IsString(*v)) return;
    unsigned m = schema_types(prop, 0);
    if (!m || (m & TY_STR)) return;
    const char *s = (*v)->valuestring;
    size_t a = 0, e = strlen(s);
    while (a < e && tc_is_ws(s[a])) a++;
    while (e > a && tc_is_ws(s[e - 1])) e--;
    cJSON *nv = typed(s + a, e - a, m);
    if (nv) {
        cJSON_Delete(*v);
        *v = nv;
    }
}

/* ---- JSON formats ----
 * Arguments are passed on as their source text less insignificant
 * whitespace, so numbers keep their spelling (a 64-bit id survives), when
 * that text is strict JSON and reads back as what cJSON parsed; otherwise
 * cJSON prints them. */

/* cJSON's notion of whitespace: any byte <= 32. */
static size_t jws(const char *s, size_t p, size_t end) {
    while (p < end && (unsigned char)s[p] <= ' ') p++;
    return p;
}

/* The end of the JSON value at s[p] in text cJSON has accepted. */
static size_t json_skip(const char *s, size_t p, size_t end) {
    if (p >= end) return end;
    if (s[p] == '"') {
        for (p++; p < end; p++) {
            if (s[p] == '\\') p++;
            else if (s[p] == '"') return p + 1;
        }
        return end;
    }
    if (s[p] == '{' || s[p] == '[') {
        int d = 0;
        while (p < end) {
            char c = s[p];
            if (c == '"') {
                p = json_skip(s, p, end);
                continue;
            }
            if (c == '{' || c == '[') d++;
            else if ((c == '}' || c == ']') && --d == 0) return p + 1;
            p++;
        }
        return end;
    }
    while (p < end && (unsigned char)s[p] > ' ' && s[p] != ',' && s[p] != '}' && s[p] != ']') p++;
    return p;
}

/* The span of the value of the first member spelled key in the object
 * s[a..e). Returns 0 when there is none. */
static int json_member(const char *s, size_t a, size_t e, const char *key, size_t *va, size_t *ve) {
    size_t kl = strlen(key), p = jws(s, a, e);
    if (p >= e || s[p] != '{') return 0;
    p = jws(s, p + 1, e);
    while (p < e && s[p] == '"') {
        size_t ke = json_skip(s, p, e);
        int match = ke - p == kl + 2 && memcmp(s + p + 1, key, kl) == 0;
        p = jws(s, ke, e);
        if (p >= e || s[p] != ':') return 0;
        p = jws(s, p + 1, e);
        size_t q = json_skip(s, p, e);
        if (match) {
            *va = p;
            *ve = q;
            return 1;
        }
        p = jws(s, q, e);
        if (p >= e || s[p] != ',') return 0;
        p = jws(s, p + 1, e);
    }
    return 0;
}

/* s[a..e) without whitespace outside strings; NULL when it holds what a
 * strict reader could refuse (a number cJSON took leniently, a raw control
 * character in a string). */
static char *json_compact(const char *s, size_t a, size_t e) {
    strbuf b = {0};
    for (size_t p = a; p < e;) {
        char c = s[p];
        size_t q = p + 1;
        int is_int;
        if (c == '"') {
            q = json_skip(s, p, e);
            for (size_t i = p; i < q; i++)
                if ((unsigned char)s[i] < ' ') goto fail;
        } else if ((unsigned char)c <= ' ') {
            p = q;
            continue;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            while (q < e && ((s[q] >= '0' && s[q] <= '9') || s[q] == '.' || s[q] == 'e' || s[q] == 'E' ||
                             s[q] == '+' || s[q] == '-'))
                q++;
            if (!tc_json_number(s + p, q - p, &is_int)) goto fail;
        }
        sb_append(&b, s + p, q - p);
        p = q;
    }
    return sb_take(&b);
fail:
    sb_free(&b);
    return NULL;
}

/* The arguments text for the object v, whose source is s[a..e) (s NULL:
 * unknown). */
static char *args_text(const cJSON *v, const char *s, size_t a, size_t e) {
    if (s) {
        char *t = json_compact(s, a, e);
        if (t) {
            cJSON *back = cJSON_Parse(t);
            int same = back && cJSON_Compare(back, v, 1);
            cJSON_Delete(back);
            if (same) return t;
            free(t);
        }
    }
    char *p = cJSON_PrintUnformatted(v);
    if (!p) tc_need(NULL);
    char *t = xstrdup(p);
    cJSON_free(p);
    return t;
}

/* Parses the JSON object or array at s[p..] (after whitespace); *start and
 * *end get its span. NULL when there is none. */
static cJSON *json_at(const tc_build *b, size_t p, size_t *start, size_t *end) {
    p = tc_skip_ws(b->s, p, b->n);
    if (p >= b->n || (b->s[p] != '{' && b->s[p] != '[')) return NULL;
    const char *e = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(b->s + p, b->n - p, &e, 0);
    if (v) {
        *start = p;
        *end = (size_t)(e - b->s);
    }
    return v;
}

/* Adds the call in o (source s[oa..oe), or s NULL): {"name": ..,
 * "arguments"|"parameters": {..} or a string holding an object}, also
 * wrapped as {"function": {..}}. strict: the arguments key must be present
 * and, when tools are given, the name must be one of them. Returns 0, or
 * -1 with nothing added. */
static int json_call(tc_build *b, const cJSON *o, int strict, const char *s, size_t oa, size_t oe) {
    if (!cJSON_IsObject(o)) return -1;
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(o, "function");
    if (cJSON_IsObject(fn) && !cJSON_GetObjectItemCaseSensitive(o, "name")) {
        o = fn;
        if (s && !json_member(s, oa, oe, "function", &oa, &oe)) s = NULL;
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (!cJSON_IsString(name) || !name->valuestring[0]) return -1;
    const char *key = "arguments";
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!a) a = cJSON_GetObjectItemCaseSensitive(o, key = "parameters");
    if (strict && (!a || (b->tools && !tc_tool_find(b->tools, name->valuestring)))) return -1;
    char *txt;
    size_t va = 0, ve = 0;
    if (!a || cJSON_IsNull(a)) {
        txt = xstrdup("{}");
    } else if (cJSON_IsObject(a)) {
        int found = s && json_member(s, oa, oe, key, &va, &ve);
        txt = args_text(a, found ? s : NULL, va, ve);
    } else if (cJSON_IsString(a)) {
        const char *t = a->valuestring;
        size_t n = strlen(t);
        if (tc_skip_ws(t, 0, n) == n) {
            txt = xstrdup("{}");
        } else {
            cJSON *args = tc_json_exact(t, n);
            if (!cJSON_IsObject(args)) {
                cJSON_Delete(args);
                return -1;
            }
            txt = args_text(args, t, 0, n);
            cJSON_Delete(args);
        }
    } else {
        return -1;
    }
    tb_add_text(b, name->valuestring, strlen(name->valuestring), txt);
    return 0;
}

static size_t hermes_block(tc_build *b, size_t m) {
    size_t start = 0, end = 0;
    cJSON *o = json_at(b, m + strlen("<tool_call>"), &start, &end);
    int ok = o && json_call(b, o, 0, b->s, start, end) == 0;
    cJSON_Delete(o);
    if (!ok) return 0;
    size_t q = tc_skip_ws(b->s, end, b->n);
    if (tc_at(b->s, q, b->n, "</tool_call>")) return q + strlen("</tool_call>");
    /* a missing closer is fine at the very end or before the next call */
    return q == b->n || tc_at(b->s, q, b->n, "<tool_call>") ? q : 0;
}

static void parse_llama3(tc_build *b) {
    const char *s = b->s;
    size_t n = b->n, p = tc_skip_ws(s, 0, n), start = p;
    if (tc_at(s, p, n, "<|python_tag|>")) {
        p += strlen("<|python_tag|>");
    } else if (p >= n || s[p] != '{') {
        start = tc_find(s, p, n, "<|python_tag|>");
        if (start == TC_NPOS) return;
        p = start + strlen("<|python_tag|>");
    }
    size_t block_end = 0;
    for (;;) {
        p = tc_skip_ws(s, p, n);
        size_t oa = 0, end = 0;
        if (p >= n || s[p] != '{') break;
        cJSON *o = json_at(b, p, &oa, &end);
        int ok = o && json_call(b, o, 1, s, oa, end) == 0;
        cJSON_Delete(o);
        if (!ok) break;
        p = block_end = end;
        size_t q = tc_skip_ws(s, p, n);
        if (q < n && s[q] == ';') p = block_end = q + 1;
    }
    if (b->n_calls) tb_cut(b, start, block_end);
}

static int mistral_name_char(char c) {
    return (unsigned char)c > ' ' && c != '[' && c != ']' && c != '{' && c != '}' && c != '<' && c != '>' && c != '"';
}

static size_t mistral_block(tc_build *b, size_t m) {
    const char *s = b->s;
    size_t n = b->n, p = tc_skip_ws(s, m + strlen("[TOOL_CALLS]"), n), end = 0;
    if (p < n && (s[p] == '[' || s[p] == '{')) { /* [TOOL_CALLS][{..}, ..] */
        size_t start = 0;
        cJSON *v = json_at(b, p, &start, &end);
        int ok = v != NULL;
        if (cJSON_IsArray(v)) {
            const cJSON *e;
            size_t ea = jws(s, start + 1, end);
            ok = cJSON_GetArraySize(v) > 0;
            cJSON_ArrayForEach(e, v) {
                size_t ee = json_skip(s, ea, end);
                if (ok && json_call(b, e, 0, s, ea, ee) != 0) ok = 0;
                ea = jws(s, ee, end);
                if (ea < end && s[ea] == ',') ea = jws(s, ea + 1, end);
            }
        } else if (v) {
            ok = json_call(b, v, 0, s, start, end) == 0;
        }
        cJSON_Delete(v);
        return ok ? end : 0;
    }
    size_t q = p; /* [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{..} */
    while (q < n && mistral_name_char(s[q])) q++;
    if (q == p) return 0;
    size_t name_end = q;
    if (tc_at(s, q, n, "[CALL_ID]")) {
        q += strlen("[CALL_ID]");
        while (q < n && mistral_name_char(s[q])) q++;
    }
    if (!tc_at(s, q, n, "[ARGS]")) return 0;
    q += strlen("[ARGS]");
    if (q >= n || s[q] != '{') return 0;
    size_t start = 0;
    cJSON *args = json_at(b, q, &start, &end);
    if (!cJSON_IsObject(args)) {
        cJSON_Delete(args);
        return 0;
    }
    tb_add_text(b, s + p, name_end - p, args_text(args, s, start, end));
    cJSON_Delete(args);
    return end;
}

/* ---- Qwen3-Coder XML ---- */

/* A name/key in <function=NAME> or <parameter=KEY>: up to '>', trimmed,
 * non-empty, without control characters. Returns the offset after '>' or
 * 0. */
static size_t xml_name(const char *s, size_t p, size_t n, size_t *a, size_t *e) {
    size_t q = p;
    while (q < n && s[q] != '>' && s[q] != '<' && ((unsigned char)s[q] >= ' ' || s[q] == '\t')) q++;
    if (q >= n || s[q] != '>') return 0;
    *a = p;
    *e = q;
    while (*a < *e && tc_is_ws(s[*a])) (*a)++;
    while (*e > *a && tc_is_ws(s[*e - 1])) (*e)--;
    return *e > *a ? q + 1 : 0;
}

static size_t min3(size_t a, size_t b, size_t c) {
    size_t m = a < b ? a : b;
    return m < c ? m : c;
}

/* A <tool_call> block of one or more functions; it cannot reach past the
 * next <tool_call> (a special token). */
static size_t xml_block(tc_build *b, size_t m) {
    const char *s = b->s;
    size_t p = m + strlen("<tool_call>"), last = 0;
    size_t n = tc_next(b, 3, p, "<tool_call>");
    if (n == TC_NPOS) n = b->n;
    for (;;) {
        p = tc_skip_ws(s, p, n);
        if (!tc_at(s, p, n, "<function=")) break;
        size_t na, ne;
        p = xml_name(s, p + strlen("<function="), n, &na, &ne);
        if (!p) return 0;
        char *name = xmalloc(ne - na + 1);
        memcpy(name, s + na, ne - na);
        name[ne - na] = 0;
        const cJSON *params = tc_tool_params(b->tools, name);
        cJSON *args = tc_need(cJSON_CreateObject());
        int ok = 0;
        for (;;) {
            p = tc_skip_ws(s, p, n);
            if (tc_at(s, p, n, "</function>")) {
                p += strlen("</function>");
                ok = 1;
                break;
            }
            if (!tc_at(s, p, n, "<parameter=")) break;
            size_t ka, ke;
            size_t v = xml_name(s, p + strlen("<parameter="), n, &ka, &ke);
            if (!v) break;
            /* the value ends at its closer or, when that is missing, where
             * the next parameter or the function's end begins */
            size_t close = tc_next(b, 0, v, "</parameter>");
            size_t ve = min3(close, tc_next(b, 1, v, "<parameter="), tc_next(b, 2, v, "</function>"));
            if (ve == TC_NPOS || ve >= n) break;
            p = ve == close ? close + strlen("</parameter>") : ve;
            size_t va = v;
            if (va < ve && s[va] == '\n') va++;
            if (ve > va && s[ve - 1] == '\n') ve--;
            char *key = xmalloc(ke - ka + 1);
            memcpy(key, s + ka, ke - ka);
            key[ke - ka] = 0;
            tc_obj_set(args, key, tc_value_from_text(s + va, ve - va, tc_prop_schema(params, key), 0));
            free(key);
        }
        if (ok) tb_add(b, name, ne - na, args);
        else cJSON_Delete(args);
        free(name);
        if (!ok) return 0;
        last = p;
    }
    if (!last) return 0;
    p = tc_skip_ws(s, last, n);
    return tc_at(s, p, n, "</tool_call>") ? p + strlen("</tool_call>") : last;
}

/* ---- parse entry points ---- */

void tc_parse(tc_format f, const char *text, size_t n, const cJSON *tools, tc_result *out) {
    tc_build b = {.s = text ? text : "", .n = text ? n : 0, .tools = cJSON_IsArray(tools) ? tools : NULL};
    switch (f) {
    case TC_HERMES: tc_each_block(&b, "<tool_call>", hermes_block); break;
    case TC_XML: tc_each_block(&b, "<tool_call>", xml_block); break;
    case TC_LLAMA3: parse_llama3(&b); break;
    case TC_MISTRAL: tc_each_block(&b, "[TOOL_CALLS]", mistral_block); break;
    case TC_PYTHONIC: tc_parse_pythonic(&b); break;
    case TC_GEMMA: tc_parse_gemma(&b); break;
    default: break;
    }
    tb_finish(&b, out);
}

void tc_result_free(tc_result *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) {
        free(r->calls[i].name);
        free(r->calls[i].arguments);
    }
    free(r->calls);
    free(r->text);
    r->calls = NULL;
    r->text = NULL;
    r->n = 0;
}

/* ---- the streaming gate ---- */

static const char *const mk_tool_call[] = {"<tool_call>"};
static const char *const mk_mistral[] = {"[TOOL_CALLS]"};
static const char *const mk_pythonic[] = {"<|tool_call_start|>"};
static const char *const mk_gemma[] = {"<|tool_call>", "```tool_code"};
static const char *const mk_llama3[] = {"<|python_tag|>"};

struct tc_gate {
    tc_format f;
    const char *const *mk;
    int nmk;
    size_t maxlen;    /* longest marker */
    strbuf pend;      /* withheld: a possible marker start or a partial UTF-8 sequence */
    strbuf held;      /* from the marker on, once tripped */
    int tripped;
    int started;      /* llama3: a non-space character has been seen */
};

tc_gate *tc_gate_new(tc_format f) {
    tc_gate *g = xcalloc(1, sizeof *g);
    g->f = f;
    switch (f) {
    case TC_HERMES:
    case TC_XML: g->mk = mk_tool_call, g->nmk = 1; break;
    case TC_MISTRAL: g->mk = mk_mistral, g->nmk = 1; break;
    case TC_PYTHONIC: g->mk = mk_pythonic, g->nmk = 1; break;
    case TC_GEMMA: g->mk = mk_gemma, g->nmk = 2; break;
    case TC_LLAMA3: g->mk = mk_llama3, g->nmk = 1; break;
    default: break;
    }
    for (int i = 0; i < g->nmk; i++)
        if (strlen(g->mk[i]) > g->maxlen) g->maxlen = strlen(g->mk[i]);
    return g;
}

void tc_gate_free(tc_gate *g) {
    if (!g) return;
    sb_free(&g->pend);
    sb_free(&g->held);
    free(g);
}

/* Length of a tail of s[0..n) that is a proper prefix of a marker. */
static size_t marker_tail(const tc_gate *g, const char *s, size_t n) {
    size_t lim = g->maxlen ? g->maxlen - 1 : 0;
    for (size_t i = n > lim ? n - lim : 0; i < n; i++)
        for (int k = 0; k < g->nmk; k++) {
            size_t ml = strlen(g->mk[k]);
            if (n - i < ml && memcmp(s + i, g->mk[k], n - i) == 0) return n - i;
        }
    return 0;
}

/* Length of an incomplete UTF-8 sequence at the end of s[0..n). */
static size_t utf8_tail(const char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = c >= 0xF8 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > k ? k : 0;
    }
    return 0;
}

int tc_gate_push(tc_gate *g, const char *s, size_t n, strbuf *out) {
    if (g->tripped) {
        sb_append(&g->held, s, n);
        return 1;
    }
    sb_append(&g->pend, s, n);
    const char *p = sb_str(&g->pend);
    size_t len = g->pend.n, hit = TC_NPOS;
    for (int k = 0; k < g->nmk; k++) {
        size_t m = tc_find(p, 0, len, g->mk[k]);
        if (m < hit) hit = m;
    }
    if (g->f == TC_LLAMA3 && !g->started) {
        size_t i = tc_skip_ws(p, 0, len);
        if (i < len) {
            g->started = 1;
            if (p[i] == '{' && i < hit) hit = i;
        }
    }
    if (hit != TC_NPOS) {
        sb_append(out, p, hit);
        sb_append(&g->held, p + hit, len - hit);
        sb_clear(&g->pend);
        g->tripped = 1;
        return 1;
    }
    size_t keep = marker_tail(g, p, len);
    if (!keep) keep = utf8_tail(p, len);
    sb_append(out, p, len - keep);
    sb_consume(&g->pend, len - keep);
    return 0;
}

int tc_gate_finish(tc_gate *g, strbuf *out, strbuf *held) {
    int t = g->tripped;
    if (t && held) sb_append(held, sb_str(&g->held), g->held.n);
    if (!t && out) sb_append(out, sb_str(&g->pend), g->pend.n);
    sb_clear(&g->pend);
    sb_clear(&g->held);
    g->tripped = g->started = 0;
    return t;
}
