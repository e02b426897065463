/* jinja: a Jinja2 template interpreter, enough of the language for the
 * chat templates models ship (see docs/ARCHITECTURE.md), rendering exactly
 * as transformers does (sandboxed environment, trim_blocks and lstrip_blocks
 * on, autoescape off, the loopcontrols extension, and transformers' own
 * tojson: json.dumps(x, ensure_ascii=False, indent=..., separators=...,
 * sort_keys=...), not Jinja's HTML-escaping one).
 * Values passed in and out are cJSON trees. Parse errors and render errors
 * (including raise_exception) name the template, line and column. Loops and
 * recursion are bounded, so a hostile template cannot hang the process. */
#ifndef DS_JINJA_H
#define DS_JINJA_H

#include <stddef.h>
#include <cjson/cJSON.h>

typedef struct jinja_template jinja_template;

/* name appears in error messages (e.g. "tokenizer_config.json:chat_template"). */
int jinja_parse(jinja_template **out, const char *src, size_t len, const char *name, char *err, size_t errlen);
void jinja_free(jinja_template *t);

/* Renders with the top-level variables of vars (a JSON object; may be
 * NULL). Built-in callables: raise_exception(msg), strftime_now(fmt),
 * range, namespace, dict, and the usual filters/tests. *out is malloc'd and
 * NUL-terminated. Thread-safe: a parsed template may be rendered from
 * several threads at once. */
int jinja_render(const jinja_template *t, const cJSON *vars, char **out, size_t *out_len, char *err,
                 size_t errlen);

/* cJSON keeps no int/float distinction, but Python does (json.loads("3.0")
 * is 3.0, and templates print it so). jinja_json_mark_floats flags, in a
 * tree just parsed from json_text, the numbers written with a fraction or an
 * exponent (JINJA_CJSON_FLOAT in ->type; cJSON_Duplicate keeps it), and
 * rendering takes those as floats. Unflagged integral numbers are ints. */
#define JINJA_CJSON_FLOAT (1 << 12)
void jinja_json_mark_floats(cJSON *root, const char *json_text);
/* cJSON_Parse followed by jinja_json_mark_floats. */
cJSON *jinja_json_parse(const char *json_text);

#endif
