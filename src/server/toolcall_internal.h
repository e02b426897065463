/* toolcall_internal: what the tool-call parsers share (toolcall.c holds the
 * JSON and XML formats, the gate and this plumbing; toolcall_py.c the
 * Python-literal and Gemma formats). A parser scans the source for its
 * blocks; each block that parses completely adds its calls and is cut from
 * the text, a block that fails is rolled back and stays as text. */
#ifndef DS_TOOLCALL_INTERNAL_H
#define DS_TOOLCALL_INTERNAL_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "base/strbuf.h"
#include "server/toolcall.h"

#define TC_NPOS ((size_t)-1)

typedef struct {
    size_t from, at;     /* the first occurrence at or after from is at */
    int ok;
} tc_memo;

typedef struct {
    const char *s;       /* the answer text */
    size_t n;
    size_t kept;         /* s[0..kept) has been copied to text or cut */
    strbuf text;
    tc_call *calls;
    int n_calls, cap;
    const cJSON *tools;  /* a JSON array, or NULL */
    tc_memo memo[4];     /* tc_next's caches, one per literal a parser uses */
} tc_build;

/* Adds a call; takes ownership of args (a cJSON object). */
void tb_add(tc_build *b, const char *name, size_t name_len, cJSON *args);
/* Adds a call whose arguments are JSON object text (malloc'd; taken). */
void tb_add_text(tc_build *b, const char *name, size_t name_len, char *args);
/* Drops the calls added since n_calls was mark. */
void tb_rollback(tc_build *b, int mark);
/* Removes s[start..end) from the text (start >= kept). */
void tb_cut(tc_build *b, size_t start, size_t end);

/* Runs block(b, m) at every occurrence m of marker; block returns the
 * offset after the block or 0. A block that ends and added calls is cut
 * from the text, otherwise its calls are rolled back and the scan resumes
 * after the marker. */
void tc_each_block(tc_build *b, const char *marker, size_t (*block)(tc_build *b, size_t m));

/* Offset of lit in s[from..end), or TC_NPOS. */
size_t tc_find(const char *s, size_t from, size_t end, const char *lit);
/* The first occurrence of lit in b->s at or after p, or TC_NPOS, through
 * cache slot: each slot must always be used with the same literal. Keeps
 * repeated look-ups from ever-later positions linear overall. */
size_t tc_next(tc_build *b, int slot, size_t p, const char *lit);
/* Whether s[p..end) starts with lit. */
int tc_at(const char *s, size_t p, size_t end, const char *lit);
size_t tc_skip_ws(const char *s, size_t p, size_t end);
int tc_is_ws(char c);

/* The tool named name in tools (its "function" object, or the item itself
 * in the flat/Anthropic shape), or NULL. */
const cJSON *tc_tool_find(const cJSON *tools, const char *name);
/* That tool's parameter schema ("parameters" or "input_schema"), or NULL. */
const cJSON *tc_tool_params(const cJSON *tools, const char *name);
/* The schema of property key in params, or NULL. */
const cJSON *tc_prop_schema(const cJSON *params, const char *key);
/* A value from parameter text s[0..n) typed by the property schema prop:
 * quoted says the text was a string literal in the source. Without a
 * usable schema, quoted text is a string and unquoted short single-line
 * JSON scalars (numbers, true/false/null) are coerced, anything else is a
 * string. Never NULL. */
cJSON *tc_value_from_text(const char *s, size_t n, const cJSON *prop, int quoted);
/* Retypes *v when it is a string and prop's types exclude strings. */
void tc_coerce_string(cJSON **v, const cJSON *prop);
/* Sets obj[key] = v, replacing an earlier value. Takes v. */
void tc_obj_set(cJSON *obj, const char *key, cJSON *v);
/* Whether s[0..n) is a JSON number; *is_int says it has no fraction or
 * exponent. */
int tc_json_number(const char *s, size_t n, int *is_int);
/* v, or aborts when cJSON ran out of memory (v == NULL). */
cJSON *tc_need(cJSON *v);
/* A cJSON string of s[0..n). */
cJSON *tc_str(const char *s, size_t n);
/* Parses exactly s[0..n) (surrounding whitespace allowed) as JSON, or
 * NULL. */
cJSON *tc_json_exact(const char *s, size_t n);
/* Appends code point cp as UTF-8. */
void tc_utf8_put(strbuf *b, unsigned cp);

/* The Python-literal and Gemma parsers (toolcall_py.c). */
void tc_parse_pythonic(tc_build *b);
void tc_parse_gemma(tc_build *b);

#endif
