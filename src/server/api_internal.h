/* api_internal: helpers shared by the request mappers of api_request.c
 * (common fields, OpenAI chat / completions / Responses) and
 * api_messages.c (Anthropic messages). Every function that can fail returns
 * 0, or -1 with err filled naming the field; whatever it built so far is
 * already attached to the api_request, so api_parse frees it on failure. */
#ifndef DS_API_INTERNAL_H
#define DS_API_INTERNAL_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "server/api.h"
#include "base/strbuf.h"

#define API_NO_MEDIA "image/audio/file content is not supported: dspark serves text-only models"
#define API_TEXT_ONLY "dspark serves text-only models"

/* Aborts on NULL (cJSON's out-of-memory result), like xmalloc. */
cJSON *api_must(cJSON *j);
/* obj[key], with JSON null counted as absent. */
const cJSON *api_get(const cJSON *obj, const char *key);
/* The string value of v, or NULL when v is not a string. */
const char *api_str(const cJSON *v);
/* Appends {"role": role, "content": content} to arr; returns it. */
cJSON *api_add_msg(cJSON *arr, const char *role, const char *content);
/* Sets obj[key] = item (replacing any); takes item. */
void api_set(cJSON *obj, const char *key, cJSON *item);
/* Appends text to sb, after sep when sb is not empty; empty text adds nothing. */
void api_join(strbuf *sb, const char *sep, const char *text);

/* Tool-call arguments (absent, an object, or a string holding a JSON
 * object; "" is {}) into *out (a new object). where names the field. */
int api_args(const cJSON *a, const char *where, cJSON **out, char *err, size_t errlen);
/* {"id": id, "type": "function", "function": {"name": name, "arguments": args}}; takes args. */
cJSON *api_call(const char *id, const char *name, cJSON *args);
/* Appends {"type":"function","function":{name, description?, parameters}}
 * to r->tools (created as needed); params NULL gives the empty object
 * schema. desc and params are copied. */
void api_add_tool(api_request *r, const char *name, const char *desc, const cJSON *params);
/* After tools and tool_choice are read: none drops the tools; required and
 * named need tools; a named tool must exist; an empty list becomes NULL. */
int api_finish_tools(api_request *r, char *err, size_t errlen);

/* Optional fields of obj (name: how the error message calls the field). */
int api_opt_num(const cJSON *obj, const char *key, const char *name, double lo, double hi, int lo_open,
                double *out, char *err, size_t errlen);
int api_opt_int(const cJSON *obj, const char *key, const char *name, double lo, double hi, long long *out,
                char *err, size_t errlen);
int api_opt_bool(const cJSON *obj, const char *key, const char *name, int *out, char *err, size_t errlen);
/* A stop string or list of them into r->stop. */
int api_stop(const cJSON *v, const char *name, api_request *r, char *err, size_t errlen);
/* model, temperature, top_p, top_k and stream, shared by all dialects. */
int api_common(const cJSON *body, api_request *r, char *err, size_t errlen);

/* Reasoning effort s into out: returns 1 for a level (out = low, medium
 * or high), 2 for "none" (out = ""), 0 for an unknown value. */
int api_effort(const char *s, char out[8]);
/* Sets enable_thinking / reasoning_effort in r->template_vars from
 * r->thinking and r->reasoning_effort (removing reasoning_effort when
 * none is set). */
void api_finish_vars(api_request *r);

/* presence_penalty, frequency_penalty, repetition_penalty / repeat_penalty
 * with repeat_last_n, logit_bias and ignore_eos (api_fields.c). */
int api_penalties(const cJSON *body, api_request *r, char *err, size_t errlen);
/* response_format (chat, completions) or text.format (Responses). */
int api_response_format(const cJSON *body, api_request *r, char *err, size_t errlen);

int api_parse_messages(const cJSON *body, api_request *r, char *err, size_t errlen);

#endif
