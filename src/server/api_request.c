/* api_request: see api.h. The shared helpers (api_internal.h), the OpenAI
 * dialects (chat completions, completions, Responses) and api_parse; the
 * Anthropic dialect is in api_messages.c. */
#include "server/api.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api_internal.h"
#include "base/strbuf.h"
#include "base/util.h"

#define BAD(...) ds_err(err, errlen, __VA_ARGS__)

/* ---- helpers ---- */

cJSON *api_must(cJSON *j) {
    if (!j) {
        fprintf(stderr, "dspark: out of memory building JSON\n");
        abort();
    }
    return j;
}

const cJSON *api_get(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

const char *api_str(const cJSON *v) { return cJSON_IsString(v) && v->valuestring ? v->valuestring : NULL; }

void api_set(cJSON *obj, const char *key, cJSON *item) {
    api_must(item);
    if (cJSON_GetObjectItemCaseSensitive(obj, key)) cJSON_ReplaceItemInObjectCaseSensitive(obj, key, item);
    else cJSON_AddItemToObject(obj, key, item);
}

cJSON *api_add_msg(cJSON *arr, const char *role, const char *content) {
    cJSON *m = api_must(cJSON_CreateObject());
    cJSON_AddItemToArray(arr, m);
    api_must(cJSON_AddStringToObject(m, "role", role));
    api_must(cJSON_AddStringToObject(m, "content", content));
    return m;
}

void api_join(strbuf *sb, const char *sep, const char *text) {
    if (!text[0]) return;
    if (sb->n) sb_puts(sb, sep);
    sb_puts(sb, text);
}

int api_args(const cJSON *a, const char *where, cJSON **out, char *err, size_t errlen) {
    *out = NULL;
    if (cJSON_IsObject(a)) {
        *out = api_must(cJSON_Duplicate(a, 1));
        return 0;
    }
    if (a && !cJSON_IsString(a)) return BAD("'%s' must be a JSON object or a string holding one", where);
    const char *s = a ? api_str(a) : "";
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    if (!*s) {
        *out = api_must(cJSON_CreateObject());
        return 0;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(s, &end, 1);
    if (!j) return BAD("'%s' is not valid JSON", where);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return BAD("'%s' must hold a JSON object", where);
    }
    *out = j;
    return 0;
}

cJSON *api_call(const char *id, const char *name, cJSON *args) {
    cJSON *c = api_must(cJSON_CreateObject());
    api_must(cJSON_AddStringToObject(c, "id", id));
    api_must(cJSON_AddStringToObject(c, "type", "function"));
    cJSON *f = api_must(cJSON_AddObjectToObject(c, "function"));
    api_must(cJSON_AddStringToObject(f, "name", name));
    cJSON_AddItemToObject(f, "arguments", args);
    return c;
}

void api_add_tool(api_request *r, const char *name, const char *desc, const cJSON *params) {
    if (!r->tools) r->tools = api_must(cJSON_CreateArray());
    cJSON *t = api_must(cJSON_CreateObject());
    cJSON_AddItemToArray(r->tools, t);
    api_must(cJSON_AddStringToObject(t, "type", "function"));
    cJSON *f = api_must(cJSON_AddObjectToObject(t, "function"));
    api_must(cJSON_AddStringToObject(f, "name", name));
    if (desc) api_must(cJSON_AddStringToObject(f, "description", desc));
    if (params) {
        cJSON_AddItemToObject(f, "parameters", api_must(cJSON_Duplicate(params, 1)));
    } else {
        cJSON *p = api_must(cJSON_AddObjectToObject(f, "parameters"));
        api_must(cJSON_AddStringToObject(p, "type", "object"));
        api_must(cJSON_AddObjectToObject(p, "properties"));
    }
}

int api_finish_tools(api_request *r, char *err, size_t errlen) {
    if (r->tools && cJSON_GetArraySize(r->tools) == 0) {
        cJSON_Delete(r->tools);
        r->tools = NULL;
    }
    if (r->tool_choice == TOOL_CHOICE_NONE) {
        cJSON_Delete(r->tools);
        r->tools = NULL;
        return 0;
    }
    if (r->tool_choice == TOOL_CHOICE_REQUIRED && !r->tools)
        return BAD("'tool_choice' requires a tool call but no tools were given in 'tools'");
    if (r->tool_choice == TOOL_CHOICE_NAMED) {
        const cJSON *t;
        cJSON_ArrayForEach(t, r->tools) {
            const char *n = api_str(cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(t, "function"), "name"));
            if (n && !strcmp(n, r->tool_choice_name)) return 0;
        }
        return BAD("'tool_choice' names the tool \"%.64s\", which is not among 'tools'", r->tool_choice_name);
    }
    return 0;
}

int api_opt_num(const cJSON *obj, const char *key, const char *name, double lo, double hi, int lo_open,
                double *out, char *err, size_t errlen) {
    const cJSON *v = api_get(obj, key);
    if (!v) return 0;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= lo && d <= hi) || (lo_open && d == lo))
        return BAD("'%s' must be a number in %s%g, %g]", name, lo_open ? "(" : "[", lo, hi);
    *out = d;
    return 0;
}

int api_opt_int(const cJSON *obj, const char *key, const char *name, double lo, double hi, long long *out,
                char *err, size_t errlen) {
    const cJSON *v = api_get(obj, key);
    if (!v) return 0;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!isfinite(d) || d != floor(d)) return BAD("'%s' must be an integer", name);
    if (d < lo) return BAD("'%s' must be an integer >= %.0f", name, lo);
    if (d > hi) return BAD("'%s' must be at most %.0f", name, hi);
    *out = (long long)d;
    return 0;
}

int api_opt_bool(const cJSON *obj, const char *key, const char *name, int *out, char *err, size_t errlen) {
    const cJSON *v = api_get(obj, key);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return BAD("'%s' must be true or false", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

int api_stop(const cJSON *v, const char *name, api_request *r, char *err, size_t errlen) {
    if (!v) return 0;
    if (cJSON_IsString(v)) {
        r->stop = xmalloc(sizeof(char *));
        if (v->valuestring[0]) r->stop[r->n_stop++] = xstrdup(v->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(v)) return BAD("'%s' must be a string or an array of strings", name);
    int n = cJSON_GetArraySize(v);
    if (n > API_MAX_STOP) return BAD("'%s' may hold at most %d strings (got %d)", name, API_MAX_STOP, n);
    r->stop = xcalloc((size_t)(n ? n : 1), sizeof(char *));
    int i = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, v) {
        if (!cJSON_IsString(s)) return BAD("'%s[%d]' must be a string", name, i);
        if (s->valuestring[0]) r->stop[r->n_stop++] = xstrdup(s->valuestring);
        i++;
    }
    return 0;
}

int api_common(const cJSON *b, api_request *r, char *err, size_t errlen) {
    const cJSON *m = api_get(b, "model");
    if (m && !api_str(m)) return BAD("'model' must be a string");
    if (m) r->model = xstrdup(m->valuestring);
    long long k = r->top_k;
    if (api_opt_num(b, "temperature", "temperature", 0, 2, 0, &r->temperature, err, errlen) ||
        api_opt_num(b, "top_p", "top_p", 0, 1, 1, &r->top_p, err, errlen) ||
        api_opt_int(b, "top_k", "top_k", 0, 1e9, &k, err, errlen) ||
        api_opt_bool(b, "stream", "stream", &r->stream, err, errlen))
        return -1;
    r->top_k = (long)k;
    return 0;
}

int api_effort(const char *s, char out[8]) {
    char low[16];
    size_t n = strlen(s);
    if (n >= sizeof low) return 0;
    for (size_t i = 0; i <= n; i++) low[i] = (char)tolower((unsigned char)s[i]);
    const char *lvl = NULL;
    if (!strcmp(low, "minimal") || !strcmp(low, "low")) lvl = "low";
    else if (!strcmp(low, "medium")) lvl = "medium";
    else if (!strcmp(low, "high") || !strcmp(low, "xhigh") || !strcmp(low, "max")) lvl = "high";
    else if (!strcmp(low, "none")) {
        out[0] = 0;
        return 2;
    }
    if (!lvl) return 0;
    snprintf(out, 8, "%s", lvl);
    return 1;
}

void api_finish_vars(api_request *r) {
    if (r->thinking >= 0) api_set(r->template_vars, "enable_thinking", cJSON_CreateBool(r->thinking));
    if (r->reasoning_effort[0])
        api_set(r->template_vars, "reasoning_effort", cJSON_CreateString(r->reasoning_effort));
    else
        cJSON_DeleteItemFromObjectCaseSensitive(r->template_vars, "reasoning_effort");
}

/* ---- OpenAI pieces ---- */

static int is_text_part(const char *t) {
    return !strcmp(t, "text") || !strcmp(t, "input_text") || !strcmp(t, "output_text");
}

static int is_media_part(const char *t) {
    static const char *const media[] = {"image_url", "image", "input_image", "input_audio",
                                        "audio",     "file",  "input_file"};
    for (size_t i = 0; i < sizeof media / sizeof media[0]; i++)
        if (!strcmp(t, media[i])) return 1;
    return 0;
}

/* Appends the text of an OpenAI content value (string, or an array of
 * parts whose text parts are joined by "\n") to sb. */
static int openai_content(const cJSON *c, const char *where, strbuf *sb, char *err, size_t errlen) {
    if (!c) return 0;
    if (cJSON_IsString(c)) {
        sb_puts(sb, c->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(c)) return BAD("'%s' must be a string, null or an array of content parts", where);
    int i = 0, any = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, c) {
        const char *text = NULL;
        if (cJSON_IsString(p)) {
            text = p->valuestring;
        } else if (cJSON_IsObject(p)) {
            const char *type = api_str(api_get(p, "type"));
            if (!type) return BAD("'%s[%d].type' must be a string", where, i);
            if (is_text_part(type)) {
                text = api_str(api_get(p, "text"));
                if (!text) return BAD("'%s[%d].text' must be a string", where, i);
            } else if (is_media_part(type)) {
                return BAD(API_NO_MEDIA " ('%s[%d]' is a \"%s\" part)", where, i, type);
            } else if (!strcmp(type, "refusal")) {
                text = api_str(api_get(p, "refusal"));
            }
        } else {
            return BAD("'%s[%d]' must be an object", where, i);
        }
        if (text) {
            if (any) sb_puts(sb, "\n");
            sb_puts(sb, text);
            any = 1;
        }
        i++;
    }
    return 0;
}

/* tools: [{type:"function", function:{name, description?, parameters?}}],
 * also the flat Responses form {type:"function", name, ...}; entries of
 * other types are skipped. */
static int openai_tools(const cJSON *v, api_request *r, char *err, size_t errlen) {
    if (!v) return 0;
    if (!cJSON_IsArray(v)) return BAD("'tools' must be an array");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, v) {
        if (!cJSON_IsObject(t)) return BAD("'tools[%d]' must be an object", i);
        const cJSON *type = api_get(t, "type");
        if (type && !api_str(type)) return BAD("'tools[%d].type' must be a string", i);
        if (type && strcmp(type->valuestring, "function") != 0) {
            i++;
            continue;
        }
        const cJSON *f = api_get(t, "function");
        const char *pre = "";
        if (f) {
            if (!cJSON_IsObject(f)) return BAD("'tools[%d].function' must be an object", i);
            pre = "function.";
        } else {
            f = t;
        }
        const cJSON *name = api_get(f, "name"), *desc = api_get(f, "description"), *par = api_get(f, "parameters");
        if (!api_str(name) || !name->valuestring[0])
            return BAD("'tools[%d].%sname' must be a non-empty string", i, pre);
        if (desc && !api_str(desc)) return BAD("'tools[%d].%sdescription' must be a string", i, pre);
        if (par && !cJSON_IsObject(par)) return BAD("'tools[%d].%sparameters' must be a JSON object", i, pre);
        api_add_tool(r, name->valuestring, api_str(desc), par);
        i++;
    }
    return 0;
}

/* tool_choice: "auto" | "none" | "required" | {type:"function",
 * function:{name}} (or the Responses form {type:"function", name}). */
static int openai_tool_choice(const cJSON *v, api_request *r, char *err, size_t errlen) {
    static const char usage[] =
        "'tool_choice' must be \"auto\", \"none\", \"required\" or "
        "{\"type\": \"function\", \"function\": {\"name\": ...}}";
    if (!v) return 0;
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        if (!strcmp(s, "auto")) r->tool_choice = TOOL_CHOICE_AUTO;
        else if (!strcmp(s, "none")) r->tool_choice = TOOL_CHOICE_NONE;
        else if (!strcmp(s, "required")) r->tool_choice = TOOL_CHOICE_REQUIRED;
        else return BAD("%s", usage);
        return 0;
    }
    if (!cJSON_IsObject(v)) return BAD("%s", usage);
    const char *type = api_str(api_get(v, "type"));
    if (type && strcmp(type, "function") != 0) return BAD("%s", usage);
    const cJSON *f = api_get(v, "function");
    const char *name = api_str(api_get(cJSON_IsObject(f) ? f : v, "name"));
    if (!name)
        return BAD("'tool_choice' must name a function: {\"type\": \"function\", \"function\": {\"name\": ...}}");
    r->tool_choice = TOOL_CHOICE_NAMED;
    r->tool_choice_name = xstrdup(name);
    return 0;
}

/* reasoning_effort (or Responses reasoning.effort) v; *none set for "none". */
static int openai_effort(const cJSON *v, const char *name, api_request *r, int *none, char *err, size_t errlen) {
    static const char levels[] = "none, minimal, low, medium, high, xhigh";
    if (!v) return 0;
    if (!api_str(v)) return BAD("'%s' must be a string: one of %s", name, levels);
    int k = api_effort(v->valuestring, r->reasoning_effort);
    if (!k) return BAD("'%s' must be one of %s (got \"%.32s\")", name, levels, v->valuestring);
    *none = k == 2;
    return 0;
}

/* reasoning_budget (int >= 0) and reasoning_budget_message (string). */
static int openai_budget(const cJSON *b, api_request *r, char *err, size_t errlen) {
    long long budget = -1;
    if (api_opt_int(b, "reasoning_budget", "reasoning_budget", 0, 1e12, &budget, err, errlen)) return -1;
    r->thinking_budget = (long)budget;
    const cJSON *m = api_get(b, "reasoning_budget_message");
    if (m && !api_str(m)) return BAD("'reasoning_budget_message' must be a string");
    if (m) r->thinking_budget_message = xstrdup(m->valuestring);
    return 0;
}

/* Fields of chat and completions: max tokens, min_p, seed, stop, n, stream_options. */
static int openai_sampling(const cJSON *b, api_request *r, char *err, size_t errlen) {
    long long v = -1;
    if (api_opt_int(b, "max_tokens", "max_tokens", 1, 1e12, &v, err, errlen)) return -1;
    if (r->kind == API_CHAT &&
        api_opt_int(b, "max_completion_tokens", "max_completion_tokens", 1, 1e12, &v, err, errlen))
        return -1;
    r->max_tokens = (long)v;
    if (api_opt_num(b, "min_p", "min_p", 0, 1, 0, &r->min_p, err, errlen) ||
        api_opt_int(b, "seed", "seed", -9223372036854775808.0, 9223372036854774784.0, &r->seed, err, errlen) ||
        api_stop(api_get(b, "stop"), "stop", r, err, errlen))
        return -1;
    r->has_seed = api_get(b, "seed") != NULL;
    /* logprobs: chat (logprobs + top_logprobs) and completions (logprobs 0..5) */
    if (r->kind == API_CHAT) {
        int on = 0;
        long long top = 0;
        if (api_opt_bool(b, "logprobs", "logprobs", &on, err, errlen) ||
            api_opt_int(b, "top_logprobs", "top_logprobs", 0, 20, &top, err, errlen))
            return -1;
        r->logprobs = on ? (int)top : -1;
    } else {
        long long top = -1;
        if (api_opt_int(b, "logprobs", "logprobs", 0, 5, &top, err, errlen)) return -1;
        r->logprobs = (int)top;
    }
    long long n = 1;
    if (api_opt_int(b, "n", "n", 1, API_MAX_N, &n, err, errlen) || api_response_format(b, r, err, errlen) ||
        api_penalties(b, r, err, errlen))
        return -1;
    r->n = (int)n;
    const cJSON *so = api_get(b, "stream_options");
    if (so && !cJSON_IsObject(so)) return BAD("'stream_options' must be an object");
    return api_opt_bool(so, "include_usage", "stream_options.include_usage", &r->include_usage, err, errlen);
}

/* ---- chat completions ---- */

static int chat_tool_calls(const cJSON *tc, int mi, cJSON *msg, char *err, size_t errlen) {
    if (!cJSON_IsArray(tc)) return BAD("'messages[%d].tool_calls' must be an array", mi);
    cJSON *out = api_must(cJSON_AddArrayToObject(msg, "tool_calls"));
    int k = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, tc) {
        char where[96], idbuf[48];
        if (!cJSON_IsObject(c)) return BAD("'messages[%d].tool_calls[%d]' must be an object", mi, k);
        const cJSON *f = api_get(c, "function"), *id = api_get(c, "id");
        if (!cJSON_IsObject(f)) return BAD("'messages[%d].tool_calls[%d].function' must be an object", mi, k);
        const char *name = api_str(api_get(f, "name"));
        if (!name) return BAD("'messages[%d].tool_calls[%d].function.name' must be a string", mi, k);
        if (id && !api_str(id)) return BAD("'messages[%d].tool_calls[%d].id' must be a string", mi, k);
        snprintf(where, sizeof where, "messages[%d].tool_calls[%d].function.arguments", mi, k);
        cJSON *args;
        if (api_args(api_get(f, "arguments"), where, &args, err, errlen)) return -1;
        snprintf(idbuf, sizeof idbuf, "call_%d_%d", mi, k);
        cJSON_AddItemToArray(out, api_call(id ? id->valuestring : idbuf, name, args));
        k++;
    }
    if (!k) cJSON_DeleteItemFromObjectCaseSensitive(msg, "tool_calls");
    return 0;
}

static int chat_messages(const cJSON *b, api_request *r, char *err, size_t errlen) {
    const cJSON *ms = api_get(b, "messages");
    if (!cJSON_IsArray(ms) || !cJSON_GetArraySize(ms)) return BAD("'messages' must be a non-empty array");
    r->messages = api_must(cJSON_CreateArray());
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, ms) {
        if (!cJSON_IsObject(m)) return BAD("'messages[%d]' must be an object", i);
        const char *role = api_str(api_get(m, "role"));
        if (role && !strcmp(role, "developer")) role = "system";
        if (!role || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
                      strcmp(role, "tool")))
            return BAD("'messages[%d].role' must be one of system, developer, user, assistant, tool", i);
        char where[64];
        snprintf(where, sizeof where, "messages[%d].content", i);
        strbuf sb = {0};
        if (openai_content(api_get(m, "content"), where, &sb, err, errlen)) {
            sb_free(&sb);
            return -1;
        }
        cJSON *o = api_add_msg(r->messages, role, sb_str(&sb));
        sb_free(&sb);
        if (!strcmp(role, "assistant")) {
            const char *key = "reasoning_content";
            const cJSON *rc = api_get(m, key);
            if (!rc) rc = api_get(m, key = "reasoning");
            if (rc && !api_str(rc)) return BAD("'messages[%d].%s' must be a string", i, key);
            if (rc) api_must(cJSON_AddStringToObject(o, "reasoning_content", rc->valuestring));
            const cJSON *tc = api_get(m, "tool_calls");
            if (tc && chat_tool_calls(tc, i, o, err, errlen)) return -1;
        }
        if (!strcmp(role, "tool")) {
            const cJSON *id = api_get(m, "tool_call_id");
            if (id && !api_str(id)) return BAD("'messages[%d].tool_call_id' must be a string", i);
            if (id) api_must(cJSON_AddStringToObject(o, "tool_call_id", id->valuestring));
        }
        const char *name = api_str(api_get(m, "name"));
        if (name) api_must(cJSON_AddStringToObject(o, "name", name));
        i++;
    }
    return 0;
}

static int parse_chat(const cJSON *b, api_request *r, char *err, size_t errlen) {
    if (chat_messages(b, r, err, errlen) || openai_tools(api_get(b, "tools"), r, err, errlen) ||
        openai_tool_choice(api_get(b, "tool_choice"), r, err, errlen) || api_finish_tools(r, err, errlen))
        return -1;
    const cJSON *kw = api_get(b, "chat_template_kwargs");
    if (kw && !cJSON_IsObject(kw)) return BAD("'chat_template_kwargs' must be an object");
    if (kw) {
        cJSON_Delete(r->template_vars);
        r->template_vars = api_must(cJSON_Duplicate(kw, 1));
        if (api_opt_bool(kw, "enable_thinking", "chat_template_kwargs.enable_thinking", &r->thinking, err, errlen))
            return -1;
    }
    if (api_opt_bool(b, "enable_thinking", "enable_thinking", &r->thinking, err, errlen)) return -1;
    int none = 0;
    const cJSON *eff = api_get(b, "reasoning_effort");
    if (eff) {
        if (openai_effort(eff, "reasoning_effort", r, &none, err, errlen)) return -1;
    } else if (kw && openai_effort(api_get(kw, "reasoning_effort"), "chat_template_kwargs.reasoning_effort", r,
                                   &none, err, errlen)) {
        return -1;
    }
    if (none && r->thinking < 0) r->thinking = 0;
    if (openai_budget(b, r, err, errlen) || api_common(b, r, err, errlen) || openai_sampling(b, r, err, errlen))
        return -1;
    api_finish_vars(r);
    return 0;
}

/* ---- completions ---- */

static int parse_completions(const cJSON *b, api_request *r, char *err, size_t errlen) {
    const cJSON *p = api_get(b, "prompt");
    if (cJSON_IsArray(p)) p = cJSON_GetArrayItem(p, 0);
    if (!api_str(p)) return BAD("'prompt' must be a string");
    r->prompt = xstrdup(p->valuestring);
    return api_common(b, r, err, errlen) || openai_sampling(b, r, err, errlen) ? -1 : 0;
}

/* ---- Responses ---- */

static char *print_json(const cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    if (!s) api_must(NULL);
    return s;
}

/* A function_call_output's output: a string, or parts / objects (text
 * parts give their text, images a placeholder, anything else its JSON). */
static void responses_output(const cJSON *o, strbuf *sb) {
    if (!o) return;
    if (cJSON_IsString(o)) {
        sb_puts(sb, o->valuestring);
        return;
    }
    const cJSON *p;
    if (cJSON_IsArray(o)) {
        cJSON_ArrayForEach(p, o) {
            const char *type = api_str(api_get(p, "type")), *text = api_str(api_get(p, "text"));
            if (cJSON_IsString(p)) {
                api_join(sb, "\n", p->valuestring);
            } else if (type && is_text_part(type) && text) {
                api_join(sb, "\n", text);
            } else if (type && is_media_part(type)) {
                char ph[128];
                snprintf(ph, sizeof ph, "[%s omitted: " API_TEXT_ONLY "]", strstr(type, "image") ? "image" : "file");
                api_join(sb, "\n", ph);
            } else {
                char *js = print_json(p);
                api_join(sb, "\n", js);
                free(js);
            }
        }
        return;
    }
    char *js = print_json(o);
    sb_puts(sb, js);
    free(js);
}

/* Appends a function_call item to the assistant message *last (created,
 * or reused when the previous message is an assistant one). */
static int responses_call(const cJSON *it, int i, api_request *r, cJSON **last, char *err, size_t errlen) {
    const cJSON *id = api_get(it, "call_id");
    const char *idkey = "call_id";
    if (!id) id = api_get(it, idkey = "id");
    if (id && !api_str(id)) return BAD("'input[%d].%s' must be a string", i, idkey);
    const char *name = api_str(api_get(it, "name"));
    if (!name) return BAD("'input[%d].name' must be a string", i);
    char where[48], idbuf[48];
    snprintf(where, sizeof where, "input[%d].arguments", i);
    cJSON *args;
    if (api_args(api_get(it, "arguments"), where, &args, err, errlen)) return -1;
    const char *role = *last ? api_str(cJSON_GetObjectItemCaseSensitive(*last, "role")) : NULL;
    if (!role || strcmp(role, "assistant")) *last = api_add_msg(r->messages, "assistant", "");
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(*last, "tool_calls");
    if (!calls) calls = api_must(cJSON_AddArrayToObject(*last, "tool_calls"));
    snprintf(idbuf, sizeof idbuf, "call_%d_0", i);
    cJSON_AddItemToArray(calls, api_call(id ? id->valuestring : idbuf, name, args));
    return 0;
}

static int responses_input(const cJSON *in, api_request *r, strbuf *sys, char *err, size_t errlen) {
    if (api_str(in)) {
        api_add_msg(r->messages, "user", in->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(in)) return BAD("'input' must be a string or an array of items");
    if (!cJSON_GetArraySize(in)) return BAD("'input' must not be an empty array");
    cJSON *last = NULL;
    int i = 0, leading = 1;
    const cJSON *it;
    cJSON_ArrayForEach(it, in) {
        if (!cJSON_IsObject(it)) return BAD("'input[%d]' must be an object", i);
        const cJSON *tv = api_get(it, "type");
        if (tv && !api_str(tv)) return BAD("'input[%d].type' must be a string", i);
        const char *type = tv ? tv->valuestring : "message";
        if (!strcmp(type, "message")) {
            const char *role = api_str(api_get(it, "role"));
            if (role && !strcmp(role, "developer")) role = "system";
            if (!role || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant")))
                return BAD("'input[%d].role' must be one of user, assistant, system, developer", i);
            char where[48];
            snprintf(where, sizeof where, "input[%d].content", i);
            strbuf sb = {0};
            if (openai_content(api_get(it, "content"), where, &sb, err, errlen)) {
                sb_free(&sb);
                return -1;
            }
            if (leading && !strcmp(role, "system")) {
                api_join(sys, "\n\n", sb_str(&sb));
            } else {
                leading = 0;
                last = api_add_msg(r->messages, role, sb_str(&sb));
            }
            sb_free(&sb);
        } else if (!strcmp(type, "function_call")) {
            leading = 0;
            if (responses_call(it, i, r, &last, err, errlen)) return -1;
        } else if (!strcmp(type, "function_call_output")) {
            leading = 0;
            const char *id = api_str(api_get(it, "call_id"));
            if (!id) return BAD("'input[%d].call_id' must be a string", i);
            strbuf sb = {0};
            responses_output(api_get(it, "output"), &sb);
            last = api_add_msg(r->messages, "tool", sb_str(&sb));
            sb_free(&sb);
            api_must(cJSON_AddStringToObject(last, "tool_call_id", id));
        }
        /* reasoning, item_reference and unknown item types: skipped */
        i++;
    }
    return 0;
}

static int parse_responses(const cJSON *b, api_request *r, char *err, size_t errlen) {
    if (api_get(b, "previous_response_id"))
        return BAD("previous_response_id is not supported: this server is stateless; send the whole conversation "
                   "in input");
    if (api_get(b, "conversation"))
        return BAD("conversation is not supported: this server is stateless; send the whole conversation in input");
    if (api_response_format(b, r, err, errlen) || api_penalties(b, r, err, errlen)) return -1;
    const cJSON *in = api_get(b, "input");
    if (!in) return BAD("'input' is required");
    const cJSON *ins = api_get(b, "instructions");
    if (ins && !api_str(ins)) return BAD("'instructions' must be a string");
    strbuf sys = {0};
    if (ins) sb_puts(&sys, ins->valuestring);
    r->messages = api_must(cJSON_CreateArray());
    int rc = responses_input(in, r, &sys, err, errlen);
    if (!rc && sys.n) {
        cJSON *m = api_must(cJSON_CreateObject());
        api_must(cJSON_AddStringToObject(m, "role", "system"));
        api_must(cJSON_AddStringToObject(m, "content", sys.s));
        if (cJSON_GetArraySize(r->messages)) cJSON_InsertItemInArray(r->messages, 0, m);
        else cJSON_AddItemToArray(r->messages, m);
    }
    sb_free(&sys);
    if (rc) return -1;
    if (!cJSON_GetArraySize(r->messages)) return BAD("'input' holds no message or function call items");
    if (openai_tools(api_get(b, "tools"), r, err, errlen) ||
        openai_tool_choice(api_get(b, "tool_choice"), r, err, errlen) || api_finish_tools(r, err, errlen))
        return -1;
    const cJSON *rs = api_get(b, "reasoning");
    if (rs && !cJSON_IsObject(rs)) return BAD("'reasoning' must be an object");
    int none = 0;
    if (rs && openai_effort(api_get(rs, "effort"), "reasoning.effort", r, &none, err, errlen)) return -1;
    if (none) r->thinking = 0;
    long long v = -1;
    if (api_opt_int(b, "max_output_tokens", "max_output_tokens", 1, 1e12, &v, err, errlen)) return -1;
    r->max_tokens = (long)v;
    if (openai_budget(b, r, err, errlen) || api_common(b, r, err, errlen) ||
        api_opt_num(b, "min_p", "min_p", 0, 1, 0, &r->min_p, err, errlen) ||
        api_opt_int(b, "seed", "seed", -9223372036854775808.0, 9223372036854774784.0, &r->seed, err, errlen))
        return -1;
    r->has_seed = api_get(b, "seed") != NULL;
    api_finish_vars(r);
    return 0;
}

/* ---- dspark's extension ---- */

static int parse_x_dspark(const cJSON *b, api_request *r, char *err, size_t errlen) {
    const cJSON *x = api_get(b, "x_dspark");
    if (!x) return 0;
    if (!cJSON_IsObject(x)) return BAD("'x_dspark' must be an object, e.g. {\"speculative\": false}");
    const cJSON *f;
    cJSON_ArrayForEach(f, x) {
        if (!f->string || strcmp(f->string, "speculative"))
            return BAD("'x_dspark.%.64s' is not a known field: x_dspark takes only 'speculative' (a boolean)",
                       f->string ? f->string : "");
    }
    return api_opt_bool(x, "speculative", "x_dspark.speculative", &r->speculative, err, errlen);
}

/* ---- entry points ---- */

int api_parse(api_kind kind, const cJSON *body, api_request *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->max_tokens = -1;
    out->temperature = out->top_p = out->min_p = -1;
    out->top_k = -1;
    out->seed = -1;
    out->repetition = 1;
    out->rep_window = -1;
    out->thinking = -1;
    out->thinking_budget = -1;
    out->logprobs = -1;
    out->speculative = -1;
    out->tool_choice = TOOL_CHOICE_AUTO;
    out->n = 1;
    out->template_vars = api_must(cJSON_CreateObject());
    if (err && errlen) err[0] = 0;
    int rc;
    if (!cJSON_IsObject(body)) {
        rc = BAD("request body must be a JSON object");
    } else {
        switch (kind) {
        case API_CHAT: rc = parse_chat(body, out, err, errlen); break;
        case API_COMPLETIONS: rc = parse_completions(body, out, err, errlen); break;
        case API_RESPONSES: rc = parse_responses(body, out, err, errlen); break;
        case API_MESSAGES:
        case API_COUNT_TOKENS: rc = api_parse_messages(body, out, err, errlen); break;
        default: rc = BAD("unknown API kind %d", (int)kind); break;
        }
        if (!rc && kind != API_COUNT_TOKENS) rc = parse_x_dspark(body, out, err, errlen);
    }
    if (rc) {
        api_request_free(out);
        out->kind = kind;
        return 400;
    }
    return 0;
}

void api_request_free(api_request *r) {
    if (!r) return;
    cJSON_Delete(r->messages);
    cJSON_Delete(r->tools);
    cJSON_Delete(r->template_vars);
    free(r->prompt);
    free(r->model);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->thinking_budget_message);
    free(r->tool_choice_name);
    free(r->bias_id);
    free(r->bias);
    cJSON_Delete(r->json_schema);
    memset(r, 0, sizeof *r);
}
