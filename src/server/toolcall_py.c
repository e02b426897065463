/* toolcall_py: the tool-call formats written as code rather than JSON (see
 * toolcall.h): LFM2's pythonic call lists and Gemma 3's ```tool_code
 * blocks, both parsed with a hand-written Python-literal subset, and
 * Gemma 4's call:NAME{key:value} form with <|"|>-quoted strings.
 *
 * An argument's extent is found first by a bracket- and string-aware scan
 * (an unbalanced or truncated argument fails the whole call); within it a
 * literal (str, int, float, True/False/None, list, tuple, dict) becomes
 * its JSON value, and anything else (a name, an expression, a container
 * holding one, nesting past PY_MAX_DEPTH) is kept as its source text
 * string, as ast.literal_eval would refuse it. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/toolcall_internal.h"
#include "base/util.h"

#define PY_MAX_DEPTH 64     /* literal nesting; deeper values stay source text */
#define SCAN_MAX_DEPTH 256  /* bracket nesting an argument may have at all */
#define GQ "<|\"|>"         /* Gemma 4's string delimiter */
#define GQ_LEN 5

static size_t ws(const char *s, size_t p, size_t end) { return tc_skip_ws(s, p, end); }

static size_t rtrim(const char *s, size_t a, size_t e) {
    while (e > a && tc_is_ws(s[e - 1])) e--;
    return e;
}

static int id_start(char c) {
    unsigned char u = (unsigned char)c;
    return (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u == '_' || u >= 0x80;
}
static int id_char(char c) { return id_start(c) || (c >= '0' && c <= '9'); }

static char *dup_n(const char *s, size_t n) {
    char *t = xmalloc(n + 1);
    memcpy(t, s, n);
    t[n] = 0;
    return t;
}

/* ---- Python literals ---- */

/* The end of the string literal whose opening quote is at s[p], or
 * TC_NPOS when it is not closed before end. */
static size_t py_skip_string(const char *s, size_t p, size_t end) {
    char q = s[p];
    int triple = end - p >= 3 && s[p + 1] == q && s[p + 2] == q;
    p += triple ? 3 : 1;
    while (p < end) {
        if (s[p] == '\\') {
            p += 2;
            continue;
        }
        if (s[p] == q) {
            if (!triple) return p + 1;
            if (end - p >= 3 && s[p + 1] == q && s[p + 2] == q) return p + 3;
        }
        p++;
    }
    return TC_NPOS;
}

/* The end of the expression starting at p: the first ',' (or ':' when
 * colon_stops) or unmatched closing bracket outside strings and brackets.
 * TC_NPOS when brackets mismatch or the text ends first. */
static size_t py_extent(const char *s, size_t p, size_t end, int colon_stops) {
    char st[SCAN_MAX_DEPTH];
    int d = 0;
    while (p < end) {
        char c = s[p];
        if (c == '\'' || c == '"') {
            p = py_skip_string(s, p, end);
            if (p == TC_NPOS) return TC_NPOS;
            continue;
        }
        if (c == '(' || c == '[' || c == '{') {
            if (d == SCAN_MAX_DEPTH) return TC_NPOS;
            st[d++] = c == '(' ? ')' : c == '[' ? ']' : '}';
        } else if (c == ')' || c == ']' || c == '}') {
            if (!d) return p;
            if (st[--d] != c) return TC_NPOS;
        } else if (!d && (c == ',' || (colon_stops && c == ':'))) {
            return p;
        }
        p++;
    }
    return TC_NPOS;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* k hex digits at s[p..end) into *v. */
static int hex_n(const char *s, size_t p, size_t end, int k, unsigned *v) {
    if (end - p < (size_t)k) return -1;
    *v = 0;
    for (int i = 0; i < k; i++) {
        int h = hexval(s[p + (size_t)i]);
        if (h < 0) return -1;
        *v = *v * 16 + (unsigned)h;
    }
    return 0;
}

/* Length of a string prefix (r, b, u and pairs; f makes it not a literal)
 * at s[p] followed by a quote; -1 when s[p] does not start a string. */
static int py_string_prefix(const char *s, size_t p, size_t end, int *raw, int *fmt) {
    int k = 0;
    *raw = *fmt = 0;
    while (p + (size_t)k < end && k < 2) {
        char c = s[p + (size_t)k];
        if (c == 'r' || c == 'R') *raw = 1;
        else if (c == 'f' || c == 'F') *fmt = 1;
        else if (c != 'b' && c != 'B' && c != 'u' && c != 'U') break;
        k++;
    }
    if (p + (size_t)k < end && (s[p + (size_t)k] == '\'' || s[p + (size_t)k] == '"')) return k;
    return -1;
}

/* Decodes one string literal body s[a..e) into out. -1 on a bad escape. */
static int py_unescape(const char *s, size_t a, size_t e, int raw, strbuf *out) {
    unsigned pending_hi = 0; /* a high surrogate waiting for its low half */
    for (size_t p = a; p < e;) {
        unsigned cp;
        if (s[p] != '\\' || raw || p + 1 >= e) {
            if (pending_hi) tc_utf8_put(out, 0xFFFD), pending_hi = 0;
            size_t q = p + 1;
            if (raw && s[p] == '\\' && q < e) q++; /* a raw escape keeps both */
            sb_append(out, s + p, q - p);
            p = q;
            continue;
        }
        char c = s[p + 1];
        p += 2;
        switch (c) {
        case 'n': cp = '\n'; break;
        case 't': cp = '\t'; break;
        case 'r': cp = '\r'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'v': cp = '\v'; break;
        case 'a': cp = '\a'; break;
        case '\\': case '\'': case '"': cp = (unsigned char)c; break;
        case '\n': continue; /* line continuation */
        case 'x':
            if (hex_n(s, p, e, 2, &cp)) return -1;
            p += 2;
            break;
        case 'u':
            if (hex_n(s, p, e, 4, &cp)) return -1;
            p += 4;
            break;
        case 'U':
            if (hex_n(s, p, e, 8, &cp) || cp > 0x10FFFF) return -1;
            p += 8;
            break;
        default:
            if (c >= '0' && c <= '7') {
                cp = (unsigned)(c - '0');
                for (int i = 0; i < 2 && p < e && s[p] >= '0' && s[p] <= '7'; i++, p++)
                    cp = cp * 8 + (unsigned)(s[p] - '0');
                break;
            }
            if (pending_hi) tc_utf8_put(out, 0xFFFD), pending_hi = 0;
            sb_append(out, s + p - 2, 2); /* unknown escapes stay as written */
            continue;
        }
        if (cp >= 0xDC00 && cp <= 0xDFFF && pending_hi) {
            cp = 0x10000 + ((pending_hi - 0xD800) << 10) + (cp - 0xDC00);
            pending_hi = 0;
        } else if (pending_hi) {
            tc_utf8_put(out, 0xFFFD);
            pending_hi = 0;
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            pending_hi = cp;
            continue;
        }
        tc_utf8_put(out, cp >= 0xDC00 && cp <= 0xDFFF ? 0xFFFD : cp);
    }
    if (pending_hi) tc_utf8_put(out, 0xFFFD);
    return 0;
}

/* A string literal (adjacent literals concatenated) at s[p]. */
static cJSON *py_string(const char *s, size_t p, size_t end, size_t *q) {
    strbuf out = {0};
    int raw, fmt, k;
    while ((k = py_string_prefix(s, p, end, &raw, &fmt)) >= 0) {
        if (fmt) break;
        size_t a = p + (size_t)k, e = py_skip_string(s, a, end);
        if (e == TC_NPOS) break;
        size_t ql = end - a >= 3 && s[a + 1] == s[a] && s[a + 2] == s[a] && e - a >= 6 ? 3 : 1;
        if (py_unescape(s, a + ql, e - ql, raw, &out) != 0) break;
        p = e;
        *q = p;
        size_t nx = ws(s, p, end);
        if (py_string_prefix(s, nx, end, &raw, &fmt) < 0) {
            cJSON *v = tc_str(sb_str(&out), out.n);
            sb_free(&out);
            return v;
        }
        p = nx;
    }
    sb_free(&out);
    return NULL;
}

/* A number (with an optional sign) at s[p]: decimal ints and floats (kept
 * as written when valid JSON), 0x/0o/0b ints, underscores. */
static cJSON *py_number(const char *s, size_t p, size_t end, size_t *q) {
    int neg = 0;
    if (s[p] == '-' || s[p] == '+') {
        neg = s[p] == '-';
        p = ws(s, p + 1, end);
    }
    char buf[72];
    size_t k = 0;
    buf[k++] = '-';
    size_t t0 = p;
    while (p < end) {
        char c = s[p];
        int sign_ok = (c == '+' || c == '-') && p > t0 && (s[p - 1] == 'e' || s[p - 1] == 'E') &&
                      !(k > 2 && (buf[2] == 'x' || buf[2] == 'X'));
        if (!(id_char(c) || c == '.' || sign_ok) || (unsigned char)c >= 0x80) break;
        if (c != '_') {
            if (k + 1 >= sizeof buf) return NULL;
            buf[k++] = c;
        }
        p++;
    }
    buf[k] = 0;
    const char *t = buf + 1; /* buf holds the number with a leading '-' */
    size_t tn = k - 1;
    if (!tn || !((t[0] >= '0' && t[0] <= '9') || (t[0] == '.' && tn > 1))) return NULL;
    *q = p;
    if (tn > 2 && t[0] == '0' && strchr("xXoObB", t[1])) {
        int base = (t[1] == 'x' || t[1] == 'X') ? 16 : (t[1] == 'o' || t[1] == 'O') ? 8 : 2;
        char *e;
        errno = 0;
        unsigned long long v = strtoull(t + 2, &e, base);
        if (*e || errno || t[2] == '-' || t[2] == '+') return NULL;
        char out[32];
        snprintf(out, sizeof out, "%s%llu", neg && v ? "-" : "", v);
        return tc_need(cJSON_CreateRaw(out));
    }
    int is_int;
    if (tc_json_number(t, tn, &is_int)) return tc_need(cJSON_CreateRaw(neg ? buf : t));
    if (strspn(t, "0123456789.eE+-") != tn) return NULL; /* 1j, 1abc, ... */
    char *e;
    double v = strtod(t, &e);
    if (*e || !isfinite(v)) return NULL;
    return tc_need(cJSON_CreateNumber(neg ? -v : v));
}

static cJSON *py_elem(const char *s, size_t a, size_t e, int depth);

/* A list or tuple at s[p] ('[' or '('): a JSON array; "(x)" is just x. */
static cJSON *py_seq(const char *s, size_t p, size_t end, size_t *q, int depth) {
    char close = s[p] == '[' ? ']' : ')';
    int tuple = s[p] == '(', n = 0, comma = 0;
    cJSON *arr = tc_need(cJSON_CreateArray());
    p++;
    for (;;) {
        p = ws(s, p, end);
        if (p >= end) goto fail;
        if (s[p] == close) break;
        size_t e = py_extent(s, p, end, 0);
        if (e == TC_NPOS || (s[e] != ',' && s[e] != close)) goto fail;
        cJSON *v = py_elem(s, p, e, depth + 1);
        if (!v) goto fail;
        cJSON_AddItemToArray(arr, v);
        n++;
        p = e;
        if (s[p] == ',') p++, comma = 1;
    }
    *q = p + 1;
    if (tuple && n == 1 && !comma) {
        cJSON *v = cJSON_DetachItemFromArray(arr, 0);
        cJSON_Delete(arr);
        return v;
    }
    return arr;
fail:
    cJSON_Delete(arr);
    return NULL;
}

/* A dict at s[p] == '{': a JSON object; keys that are not strings become
 * their source text. */
static cJSON *py_dict(const char *s, size_t p, size_t end, size_t *q, int depth) {
    cJSON *obj = tc_need(cJSON_CreateObject());
    p++;
    for (;;) {
        p = ws(s, p, end);
        if (p >= end) goto fail;
        if (s[p] == '}') break;
        size_t ke = py_extent(s, p, end, 1);
        if (ke == TC_NPOS || s[ke] != ':') goto fail;
        cJSON *k = py_elem(s, p, ke, depth + 1);
        if (!k) goto fail;
        size_t ka = ws(s, p, ke);
        char *key = cJSON_IsString(k) ? xstrdup(k->valuestring) : dup_n(s + ka, rtrim(s, ka, ke) - ka);
        cJSON_Delete(k);
        p = ke + 1;
        size_t ve = py_extent(s, p, end, 0);
        cJSON *v = ve == TC_NPOS || (s[ve] != ',' && s[ve] != '}') ? NULL : py_elem(s, p, ve, depth + 1);
        if (v) tc_obj_set(obj, key, v);
        free(key);
        if (!v) goto fail;
        p = ve;
        if (s[p] == ',') p++;
    }
    *q = p + 1;
    return obj;
fail:
    cJSON_Delete(obj);
    return NULL;
}

/* The literal starting at s[p], or NULL when there is none; *q gets the
 * offset after it. */
static cJSON *py_literal(const char *s, size_t p, size_t end, size_t *q, int depth) {
    if (p >= end || depth > PY_MAX_DEPTH) return NULL;
    int raw, fmt;
    char c = s[p];
    if (py_string_prefix(s, p, end, &raw, &fmt) >= 0) return py_string(s, p, end, q);
    if ((c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+') return py_number(s, p, end, q);
    if (c == '[' || c == '(') return py_seq(s, p, end, q, depth);
    if (c == '{') return py_dict(s, p, end, q, depth);
    if (!id_start(c)) return NULL;
    size_t e = p;
    while (e < end && id_char(s[e])) e++;
    static const struct { const char *w; int type; } words[] = {
        {"True", cJSON_True}, {"False", cJSON_False}, {"None", cJSON_NULL},
        {"true", cJSON_True}, {"false", cJSON_False}, {"null", cJSON_NULL}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (e - p == strlen(words[i].w) && memcmp(s + p, words[i].w, e - p) == 0) {
            *q = e;
            return tc_need(words[i].type == cJSON_NULL   ? cJSON_CreateNull()
                           : words[i].type == cJSON_True ? cJSON_CreateTrue()
                                                         : cJSON_CreateFalse());
        }
    return NULL;
}

/* The literal that is exactly s[a..e) (surrounding spaces aside), or NULL. */
static cJSON *py_elem(const char *s, size_t a, size_t e, int depth) {
    a = ws(s, a, e);
    e = rtrim(s, a, e);
    size_t q = a;
    cJSON *v = a < e ? py_literal(s, a, e, &q, depth) : NULL;
    if (v && ws(s, q, e) == e) return v;
    cJSON_Delete(v);
    return NULL;
}

/* An argument's value s[a..e): its literal, else its source text as a
 * string. NULL only when the expression is empty. */
static cJSON *py_value(const char *s, size_t a, size_t e) {
    cJSON *v = py_elem(s, a, e, 0);
    if (v) return v;
    a = ws(s, a, e);
    e = rtrim(s, a, e);
    return a < e ? tc_str(s + a, e - a) : NULL;
}

/* ---- calls ---- */

/* Parses NAME(ARGS) at s[p..end) (NAME may be dotted) and adds the call.
 * Keyword arguments keep their names; positional ones take the names of
 * the tool schema's properties in order (dropped without a schema). Returns
 * the offset after ')' or TC_NPOS. */
static size_t py_call(tc_build *b, size_t p, size_t end) {
    const char *s = b->s;
    strbuf name = {0};
    cJSON *args = NULL;
    for (;;) {
        if (p >= end || !id_start(s[p])) goto fail;
        size_t a = p;
        while (p < end && id_char(s[p])) p++;
        sb_append(&name, s + a, p - a);
        size_t k = ws(s, p, end);
        if (k < end && s[k] == '.') {
            sb_append(&name, ".", 1);
            p = ws(s, k + 1, end);
            continue;
        }
        p = k;
        break;
    }
    if (p >= end || s[p] != '(') goto fail;
    p++;
    const cJSON *params = tc_tool_params(b->tools, name.s);
    const cJSON *props = params ? cJSON_GetObjectItemCaseSensitive(params, "properties") : NULL;
    const cJSON *next_pos = cJSON_IsObject(props) ? props->child : NULL;
    args = tc_need(cJSON_CreateObject());
    for (;;) {
        p = ws(s, p, end);
        if (p >= end) goto fail;
        if (s[p] == ')') {
            p++;
            break;
        }
        size_t ka = p, ke = p;
        if (id_start(s[p])) { /* NAME = value ? */
            size_t k = p;
            while (k < end && id_char(s[k])) k++;
            size_t k2 = ws(s, k, end);
            if (k2 < end && s[k2] == '=' && (k2 + 1 >= end || s[k2 + 1] != '=')) {
                ke = k;
                p = k2 + 1;
            }
        }
        size_t e = py_extent(s, p, end, 0);
        if (e == TC_NPOS || (s[e] != ',' && s[e] != ')')) goto fail;
        cJSON *v = py_value(s, p, e);
        if (!v) goto fail;
        if (ke > ka) {
            char *key = dup_n(s + ka, ke - ka);
            tc_coerce_string(&v, tc_prop_schema(params, key));
            tc_obj_set(args, key, v);
            free(key);
        } else if (next_pos && next_pos->string) {
            tc_coerce_string(&v, next_pos);
            tc_obj_set(args, next_pos->string, v);
            next_pos = next_pos->next;
        } else {
            cJSON_Delete(v);
        }
        p = e;
        if (s[p] == ',') p++;
    }
    tb_add(b, name.s, name.n, args);
    sb_free(&name);
    return p;
fail:
    cJSON_Delete(args);
    sb_free(&name);
    return TC_NPOS;
}

/* A call, or print(call) (Gemma 3 wraps calls so), at s[p]. */
static size_t py_call_or_print(tc_build *b, size_t p, size_t end) {
    const char *s = b->s;
    if (tc_at(s, p, end, "print")) {
        size_t k = ws(s, p + 5, end);
        if (k < end && s[k] == '(') {
            int mark = b->n_calls;
            size_t q = py_call(b, ws(s, k + 1, end), end);
            if (q != TC_NPOS) {
                q = ws(s, q, end);
                if (q < end && s[q] == ')') return q + 1;
            }
            tb_rollback(b, mark);
        }
    }
    return py_call(b, p, end);
}

/* A non-empty list of calls [f(..), g(..)] at s[p] == '['. Returns the
 * offset after ']' or TC_NPOS (the caller rolls back added calls). */
static size_t py_call_list(tc_build *b, size_t p, size_t end, int allow_print) {
    const char *s = b->s;
    int n = 0;
    p++;
    for (;;) {
        p = ws(s, p, end);
        if (p >= end) return TC_NPOS;
        if (s[p] == ']') return n ? p + 1 : TC_NPOS;
        size_t q = allow_print ? py_call_or_print(b, p, end) : py_call(b, p, end);
        if (q == TC_NPOS) return TC_NPOS;
        n++;
        p = ws(s, q, end);
        if (p < end && s[p] == ',') p++;
        else if (p >= end || s[p] != ']') return TC_NPOS;
    }
}

#define PY_START "<|tool_call_start|>"
#define PY_END "<|tool_call_end|>"

/* <|tool_call_start|>[calls]<|tool_call_end|> (a single call without
 * brackets is accepted too). The block cannot reach past its closer or the
 * next opener (special tokens); a missing closer is fine there or at the
 * very end. */
static size_t pythonic_block(tc_build *b, size_t m) {
    const char *s = b->s;
    size_t p = m + strlen(PY_START);
    size_t close = tc_next(b, 0, p, PY_END), next = tc_next(b, 1, p, PY_START);
    size_t end = close < next ? close : next < b->n ? next : b->n;
    p = ws(s, p, end);
    size_t q = p < end && s[p] == '[' ? py_call_list(b, p, end, 0) : py_call(b, p, end);
    if (q == TC_NPOS || ws(s, q, end) != end) return 0;
    return end == close ? close + strlen(PY_END) : end;
}

void tc_parse_pythonic(tc_build *b) {
    const char *s = b->s;
    if (tc_find(s, 0, b->n, PY_START) != TC_NPOS) {
        tc_each_block(b, PY_START, pythonic_block);
        return;
    }
    size_t a = ws(s, 0, b->n), e = rtrim(s, a, b->n); /* the whole answer a call list? */
    if (a < e && s[a] == '[' && s[e - 1] == ']') {
        if (py_call_list(b, a, e, 0) == e) tb_cut(b, a, e);
        else tb_rollback(b, 0);
    }
}

/* ---- Gemma ---- */

/* Like py_extent for Gemma 4 values: strings are <|"|>..<|"|>. */
static size_t gm_extent(const char *s, size_t p, size_t end) {
    char st[SCAN_MAX_DEPTH];
    int d = 0;
    while (p < end) {
        if (tc_at(s, p, end, GQ)) {
            size_t q = tc_find(s, p + GQ_LEN, end, GQ);
            if (q == TC_NPOS) return TC_NPOS;
            p = q + GQ_LEN;
            continue;
        }
        char c = s[p];
        if (c == '{' || c == '[') {
            if (d == SCAN_MAX_DEPTH) return TC_NPOS;
            st[d++] = c == '{' ? '}' : ']';
        } else if (c == '}' || c == ']') {
            if (!d) return p;
            if (st[--d] != c) return TC_NPOS;
        } else if (!d && c == ',') {
            return p;
        }
        p++;
    }
    return TC_NPOS;
}

static cJSON *gm_container(const char *s, size_t p, size_t end, size_t *q, int depth, const cJSON *params);

/* The Gemma 4 value s[a..e) (one extent), typed by prop: a <|"|> string, a
 * nested object/array (JSON, or Gemma syntax; else its source text), or a
 * bare scalar. NULL when empty. */
static cJSON *gm_value(const char *s, size_t a, size_t e, const cJSON *prop, int depth) {
    a = ws(s, a, e);
    e = rtrim(s, a, e);
    if (a == e) return NULL;
    if (tc_at(s, a, e, GQ)) {
        size_t q = tc_find(s, a + GQ_LEN, e, GQ);
        if (q != TC_NPOS && q + GQ_LEN == e) return tc_value_from_text(s + a + GQ_LEN, q - a - GQ_LEN, prop, 1);
        return tc_str(s + a, e - a);
    }
    if (s[a] == '{' || s[a] == '[' || s[a] == '"') {
        cJSON *v = tc_json_exact(s + a, e - a);
        if (v) {
            tc_coerce_string(&v, prop);
            return v;
        }
        size_t q = a;
        if (s[a] != '"' && depth < PY_MAX_DEPTH) v = gm_container(s, a, e, &q, depth + 1, NULL);
        if (v && ws(s, q, e) == e) return v;
        cJSON_Delete(v);
        return tc_str(s + a, e - a);
    }
    return tc_value_from_text(s + a, e - a, prop, 0);
}

/* An object {k:v,..} (keys bare or <|"|>-quoted; params types its values)
 * or an array [v,..] at s[p]. */
static cJSON *gm_container(const char *s, size_t p, size_t end, size_t *q, int depth, const cJSON *params) {
    int is_obj = s[p] == '{';
    char close = is_obj ? '}' : ']';
    cJSON *c = tc_need(is_obj ? cJSON_CreateObject() : cJSON_CreateArray());
    p++;
    for (;;) {
        p = ws(s, p, end);
        if (p >= end) goto fail;
        if (s[p] == close) break;
        char *key = NULL;
        if (is_obj) {
            size_t ka, ke;
            if (tc_at(s, p, end, GQ)) {
                ka = p + GQ_LEN;
                ke = tc_find(s, ka, end, GQ);
                if (ke == TC_NPOS) goto fail;
                p = ws(s, ke + GQ_LEN, end);
            } else {
                ka = p;
                while (p < end && s[p] != ':' && s[p] != ',' && s[p] != '{' && s[p] != '}' && s[p] != '[' &&
                       s[p] != ']')
                    p++;
                ke = rtrim(s, ka, p);
                if (ke - ka >= 2 && s[ka] == '"' && s[ke - 1] == '"') ka++, ke--;
                if (ke == ka) goto fail;
            }
            if (p >= end || s[p] != ':') goto fail;
            p++;
            key = dup_n(s + ka, ke - ka);
        }
        size_t e = gm_extent(s, p, end);
        cJSON *v = NULL;
        if (e != TC_NPOS && (s[e] == ',' || s[e] == close))
            v = gm_value(s, p, e, key && params ? tc_prop_schema(params, key) : NULL, depth);
        if (v && key) tc_obj_set(c, key, v);
        else if (v) cJSON_AddItemToArray(c, v);
        free(key);
        if (!v) goto fail;
        p = e;
        if (s[p] == ',') p++;
    }
    *q = p + 1;
    return c;
fail:
    cJSON_Delete(c);
    return NULL;
}

#define GM_START "<|tool_call>"
#define GM_END "<tool_call|>"
#define GM_FENCE "```tool_code"

static int gm_name_char(char c) {
    return (unsigned char)c > ' ' && c != '{' && c != '}' && c != '<' && c != '>' && c != '(' && c != ')' && c != ',' &&
           c != '"' && c != '[' && c != ']';
}

/* <|tool_call>call:NAME{..}<tool_call|>. The call cannot reach past its
 * closer or the next opener (special tokens); the closer is optional. */
static size_t gemma4_block(tc_build *b, size_t m) {
    const char *s = b->s;
    size_t p = ws(s, m + strlen(GM_START), b->n), q;
    size_t close = tc_next(b, 0, p, GM_END), next = tc_next(b, 1, p, GM_START);
    size_t end = close < next ? close : next < b->n ? next : b->n;
    if (!tc_at(s, p, end, "call:")) return 0;
    p += 5;
    size_t a = p;
    while (p < end && gm_name_char(s[p])) p++;
    if (p == a || p >= end || s[p] != '{') return 0;
    char *name = dup_n(s + a, p - a);
    cJSON *args = gm_container(s, p, end, &q, 0, tc_tool_params(b->tools, name));
    if (args) tb_add(b, name, p - a, args);
    free(name);
    if (!args) return 0;
    p = ws(s, q, end);
    return p == close ? close + strlen(GM_END) : q;
}

/* ```tool_code\n calls \n``` (Gemma 3): one call per line (or ';'), a
 * call list, print(call) unwrapped; the closing fence may be missing at
 * the very end. */
static size_t tool_code_block(tc_build *b, size_t m) {
    const char *s = b->s;
    size_t p = m + strlen(GM_FENCE), close = tc_next(b, 2, p, "```");
    size_t end = close == TC_NPOS ? b->n : close;
    int cnt = 0;
    p = ws(s, p, end);
    if (p < end && s[p] == '[') {
        p = py_call_list(b, p, end, 1);
        if (p == TC_NPOS) return 0;
        cnt = 1;
    } else {
        while (p < end) {
            size_t q = py_call_or_print(b, p, end);
            if (q == TC_NPOS) return 0;
            cnt++;
            p = ws(s, q, end);
            if (p < end && s[p] == ';') p = ws(s, p + 1, end);
        }
    }
    if (!cnt || ws(s, p, end) != end) return 0;
    return close == TC_NPOS ? b->n : close + 3;
}

void tc_parse_gemma(tc_build *b) {
    size_t pos = 0, m1 = 0, m2 = 0;
    int have1 = 0, have2 = 0;
    for (;;) {
        if (!have1 || (m1 != TC_NPOS && m1 < pos)) m1 = tc_find(b->s, pos, b->n, GM_START), have1 = 1;
        if (!have2 || (m2 != TC_NPOS && m2 < pos)) m2 = tc_find(b->s, pos, b->n, GM_FENCE), have2 = 1;
        size_t m = m1 < m2 ? m1 : m2;
        if (m == TC_NPOS) return;
        int mark = b->n_calls;
        size_t end = m == m1 ? gemma4_block(b, m) : tool_code_block(b, m);
        if (end && b->n_calls > mark) {
            tb_cut(b, m, end);
            pos = end;
        } else {
            tb_rollback(b, mark);
            pos = m + 1;
        }
    }
}
