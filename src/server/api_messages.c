/* api_messages: the Anthropic dialect of api_parse (POST /v1/messages and
 * /v1/messages/count_tokens, the body Claude Code sends): system prompt,
 * content blocks, tool_use / tool_result, mid-conversation system messages,
 * tools, tool_choice, thinking and output_config. See api.h for the rules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api.h"
#include "server/api_internal.h"
#include "base/strbuf.h"
#include "base/util.h"

#define BAD(...) ds_err(err, errlen, __VA_ARGS__)

enum { R_USER, R_ASSISTANT, R_SYSTEM };

static const char BILLING[] = "x-anthropic-billing-header:";

/* A system value (string or text blocks, joined "\n") appended to sb.
 * top: the request's "system", whose billing-header block is dropped. */
static int system_text(const cJSON *v, const char *where, int top, strbuf *sb, char *err, size_t errlen) {
    if (!v) return 0;
    if (api_str(v)) {
        sb_puts(sb, v->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(v)) return BAD("'%s' must be a string or an array of text blocks", where);
    int i = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, v) {
        const char *type = api_str(api_get(b, "type")), *text = api_str(api_get(b, "text"));
        if (!type || strcmp(type, "text") || !text)
            return BAD("'%s[%d]' must be a text block {\"type\": \"text\", \"text\": ...}", where, i);
        if (!top || strncmp(text, BILLING, sizeof BILLING - 1)) api_join(sb, "\n", text);
        i++;
    }
    return 0;
}

/* "<system-reminder>\n" + the text of system message m + "\n</system-reminder>" appended to sb ("\n\n"-joined). */
static int reminder(const cJSON *m, int mi, strbuf *sb, char *err, size_t errlen) {
    char where[48];
    snprintf(where, sizeof where, "messages[%d].content", mi);
    strbuf t = {0};
    if (system_text(api_get(m, "content"), where, 0, &t, err, errlen)) {
        sb_free(&t);
        return -1;
    }
    if (sb->n) sb_puts(sb, "\n\n");
    sb_puts(sb, "<system-reminder>\n");
    sb_puts(sb, sb_str(&t));
    sb_puts(sb, "\n</system-reminder>");
    sb_free(&t);
    return 0;
}

/* A tool_result's content: a string, or blocks (text joined "\n"; images
 * and documents become a placeholder; other blocks are skipped). */
static int result_text(const cJSON *c, const char *where, strbuf *sb, char *err, size_t errlen) {
    if (!c) return 0;
    if (api_str(c)) {
        sb_puts(sb, c->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(c)) return BAD("'%s' must be a string or an array of content blocks", where);
    int i = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, c) {
        const char *type = api_str(api_get(b, "type"));
        if (!type) return BAD("'%s[%d].type' must be a string", where, i);
        if (!strcmp(type, "text")) {
            const char *text = api_str(api_get(b, "text"));
            if (!text) return BAD("'%s[%d].text' must be a string", where, i);
            api_join(sb, "\n", text);
        } else if (!strcmp(type, "image") || !strcmp(type, "document")) {
            char ph[96];
            snprintf(ph, sizeof ph, "[%s omitted: " API_TEXT_ONLY "]", type);
            api_join(sb, "\n", ph);
        }
        i++;
    }
    return 0;
}

static int refuse_media(const char *type, int mi, int k, char *err, size_t errlen) {
    return BAD("%s content is not supported: " API_TEXT_ONLY " ('messages[%d].content[%d]')", type, mi, k);
}

/* A user turn: its tool results become tool messages (appended to
 * r->messages now), its text goes to text; *n_results counts the results. */
static int user_turn(const cJSON *m, int mi, api_request *r, strbuf *text, int *n_results, char *err,
                     size_t errlen) {
    const cJSON *c = api_get(m, "content");
    *n_results = 0;
    if (!c) return 0;
    if (api_str(c)) {
        sb_puts(text, c->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(c)) return BAD("'messages[%d].content' must be a string or an array of content blocks", mi);
    int k = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, c) {
        const char *type = api_str(api_get(b, "type"));
        if (!type) return BAD("'messages[%d].content[%d].type' must be a string", mi, k);
        if (!strcmp(type, "text")) {
            const char *t = api_str(api_get(b, "text"));
            if (!t) return BAD("'messages[%d].content[%d].text' must be a string", mi, k);
            api_join(text, "\n", t);
        } else if (!strcmp(type, "image") || !strcmp(type, "document")) {
            return refuse_media(type, mi, k, err, errlen);
        } else if (!strcmp(type, "tool_result")) {
            char where[64], name[64];
            const char *id = api_str(api_get(b, "tool_use_id"));
            if (!id) return BAD("'messages[%d].content[%d].tool_use_id' must be a string", mi, k);
            int is_error = 0;
            snprintf(name, sizeof name, "messages[%d].content[%d].is_error", mi, k);
            if (api_opt_bool(b, "is_error", name, &is_error, err, errlen)) return -1;
            snprintf(where, sizeof where, "messages[%d].content[%d].content", mi, k);
            strbuf t = {0}, out = {0};
            if (result_text(api_get(b, "content"), where, &t, err, errlen)) {
                sb_free(&t);
                return -1;
            }
            if (is_error) sb_puts(&out, "Error: ");
            sb_puts(&out, sb_str(&t));
            cJSON *o = api_add_msg(r->messages, "tool", sb_str(&out));
            sb_free(&t);
            sb_free(&out);
            api_must(cJSON_AddStringToObject(o, "tool_call_id", id));
            (*n_results)++;
        }
        /* tool_use, thinking, server-tool blocks, ... in a user turn: skipped */
        k++;
    }
    return 0;
}

/* An assistant turn: text, thinking -> reasoning_content, tool_use -> tool_calls. */
static int assistant_turn(const cJSON *m, int mi, api_request *r, char *err, size_t errlen) {
    cJSON *o = api_add_msg(r->messages, "assistant", "");
    const cJSON *c = api_get(m, "content");
    if (!c) return 0;
    if (api_str(c)) {
        api_set(o, "content", cJSON_CreateString(c->valuestring));
        return 0;
    }
    if (!cJSON_IsArray(c)) return BAD("'messages[%d].content' must be a string or an array of content blocks", mi);
    strbuf text = {0}, think = {0};
    cJSON *calls = api_must(cJSON_CreateArray());
    int k = 0, rc = -1;
    const cJSON *b;
    cJSON_ArrayForEach(b, c) {
        const char *type = api_str(api_get(b, "type"));
        if (!type) {
            BAD("'messages[%d].content[%d].type' must be a string", mi, k);
            goto done;
        }
        if (!strcmp(type, "text") || !strcmp(type, "thinking")) {
            const char *t = api_str(api_get(b, type));
            if (!t) {
                BAD("'messages[%d].content[%d].%s' must be a string", mi, k, type);
                goto done;
            }
            api_join(type[1] == 'e' ? &text : &think, "\n", t);
        } else if (!strcmp(type, "image") || !strcmp(type, "document")) {
            refuse_media(type, mi, k, err, errlen);
            goto done;
        } else if (!strcmp(type, "tool_use")) {
            const cJSON *id = api_get(b, "id");
            const char *name = api_str(api_get(b, "name"));
            if (id && !api_str(id)) {
                BAD("'messages[%d].content[%d].id' must be a string", mi, k);
                goto done;
            }
            if (!name) {
                BAD("'messages[%d].content[%d].name' must be a string", mi, k);
                goto done;
            }
            char where[64], idbuf[48];
            snprintf(where, sizeof where, "messages[%d].content[%d].input", mi, k);
            cJSON *args;
            if (api_args(api_get(b, "input"), where, &args, err, errlen)) goto done;
            snprintf(idbuf, sizeof idbuf, "toolu_%d_%d", mi, cJSON_GetArraySize(calls));
            cJSON_AddItemToArray(calls, api_call(id ? id->valuestring : idbuf, name, args));
        }
        /* redacted_thinking, server_tool_use, web_search_tool_result, ...: dropped */
        k++;
    }
    api_set(o, "content", cJSON_CreateString(sb_str(&text)));
    if (think.n) api_must(cJSON_AddStringToObject(o, "reasoning_content", think.s));
    if (cJSON_GetArraySize(calls)) {
        cJSON_AddItemToObject(o, "tool_calls", calls);
        calls = NULL;
    }
    rc = 0;
done:
    cJSON_Delete(calls);
    sb_free(&text);
    sb_free(&think);
    return rc;
}

/* The nearest index before / after i whose role is not system, or -1. */
static int prev_turn(const int *role, int i) {
    while (--i >= 0)
        if (role[i] != R_SYSTEM) return i;
    return -1;
}

static int next_turn(const int *role, int n, int i) {
    while (++i < n)
        if (role[i] != R_SYSTEM) return i;
    return -1;
}

static int convert(const cJSON *b, const cJSON *ms, int n, int *role, api_request *r, char *err, size_t errlen) {
    const cJSON **item = xmalloc(sizeof *item * (size_t)n);
    strbuf sys = {0}, text = {0};
    int rc = -1, i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, ms) {
        if (!cJSON_IsObject(m)) {
            BAD("'messages[%d]' must be an object", i);
            goto done;
        }
        const char *s = api_str(api_get(m, "role"));
        if (!s || (strcmp(s, "user") && strcmp(s, "assistant") && strcmp(s, "system"))) {
            BAD("'messages[%d].role' must be one of user, assistant, system", i);
            goto done;
        }
        role[i] = s[0] == 'u' ? R_USER : s[0] == 'a' ? R_ASSISTANT : R_SYSTEM;
        item[i++] = m;
    }
    if (system_text(api_get(b, "system"), "system", 1, &sys, err, errlen)) goto done;
    /* leading system messages join the system prompt */
    int first = 0;
    for (; first < n && role[first] == R_SYSTEM; first++) {
        char where[48];
        snprintf(where, sizeof where, "messages[%d].content", first);
        sb_clear(&text);
        if (system_text(api_get(item[first], "content"), where, 0, &text, err, errlen)) goto done;
        api_join(&sys, "\n\n", sb_str(&text));
    }
    if (first == n) {
        BAD("'messages': must include a user or assistant message");
        goto done;
    }
    r->messages = api_must(cJSON_CreateArray());
    if (sys.n) api_add_msg(r->messages, "system", sys.s);
    for (i = first; i < n; i++) {
        int p = prev_turn(role, i);
        sb_clear(&text);
        if (role[i] == R_ASSISTANT) {
            if (assistant_turn(item[i], i, r, err, errlen)) goto done;
        } else if (role[i] == R_SYSTEM) {
            /* folded into the previous user turn, else the next one, else a user message of its own */
            int nx = next_turn(role, n, i);
            if (role[p] == R_USER || (nx >= 0 && role[nx] == R_USER)) continue;
            if (reminder(item[i], i, &text, err, errlen)) goto done;
            api_add_msg(r->messages, "user", text.s);
        } else {
            int n_results;
            if (p >= 0 && role[p] == R_ASSISTANT)
                for (int j = p + 1; j < i; j++)
                    if (reminder(item[j], j, &text, err, errlen)) goto done;
            strbuf own = {0};
            int bad = user_turn(item[i], i, r, &own, &n_results, err, errlen);
            api_join(&text, "\n\n", sb_str(&own));
            sb_free(&own);
            if (bad) goto done;
            for (int j = i + 1; j < n && role[j] == R_SYSTEM; j++)
                if (reminder(item[j], j, &text, err, errlen)) goto done;
            if (!n_results || text.n) api_add_msg(r->messages, "user", sb_str(&text));
        }
    }
    rc = 0;
done:
    sb_free(&sys);
    sb_free(&text);
    free(item);
    return rc;
}

/* tools: [{name, description?, input_schema?}]; entries without a name or
 * with a type other than "custom" (server tools) are skipped. */
static int tools(const cJSON *v, api_request *r, char *err, size_t errlen) {
    if (!v) return 0;
    if (!cJSON_IsArray(v)) return BAD("'tools' must be an array");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, v) {
        if (!cJSON_IsObject(t)) return BAD("'tools[%d]' must be an object", i);
        const cJSON *type = api_get(t, "type"), *name = api_get(t, "name"), *desc = api_get(t, "description"),
                    *schema = api_get(t, "input_schema");
        i++;
        if ((type && (!api_str(type) || strcmp(type->valuestring, "custom"))) || !name) continue;
        if (!api_str(name) || !name->valuestring[0]) return BAD("'tools[%d].name' must be a non-empty string", i - 1);
        if (desc && !api_str(desc)) return BAD("'tools[%d].description' must be a string", i - 1);
        if (schema && !cJSON_IsObject(schema)) return BAD("'tools[%d].input_schema' must be a JSON object", i - 1);
        api_add_tool(r, name->valuestring, api_str(desc), schema);
    }
    return 0;
}

static int tool_choice(const cJSON *v, api_request *r, char *err, size_t errlen) {
    if (!v) return 0;
    const char *type = api_str(api_get(v, "type"));
    if (!cJSON_IsObject(v) || !type)
        return BAD("'tool_choice' must be an object {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
    if (!strcmp(type, "auto")) r->tool_choice = TOOL_CHOICE_AUTO;
    else if (!strcmp(type, "any")) r->tool_choice = TOOL_CHOICE_REQUIRED;
    else if (!strcmp(type, "none")) r->tool_choice = TOOL_CHOICE_NONE;
    else if (!strcmp(type, "tool")) {
        const char *name = api_str(api_get(v, "name"));
        if (!name) return BAD("'tool_choice.name' must be a string when 'tool_choice.type' is \"tool\"");
        r->tool_choice = TOOL_CHOICE_NAMED;
        r->tool_choice_name = xstrdup(name);
    } else {
        return BAD("'tool_choice.type' must be one of auto, any, tool, none");
    }
    return 0;
}

static int thinking(const cJSON *b, api_request *r, char *err, size_t errlen) {
    const cJSON *th = api_get(b, "thinking");
    if (th) {
        if (!cJSON_IsObject(th)) return BAD("'thinking' must be an object");
        const char *type = api_str(api_get(th, "type"));
        if (!type || (strcmp(type, "enabled") && strcmp(type, "disabled") && strcmp(type, "adaptive")))
            return BAD("'thinking.type' must be one of enabled, disabled, adaptive");
        r->thinking = strcmp(type, "disabled") != 0;
        r->drop_reasoning = !r->thinking;
        long long budget = -1;
        if (!strcmp(type, "enabled") &&
            api_opt_int(th, "budget_tokens", "thinking.budget_tokens", 1, 1e12, &budget, err, errlen))
            return -1;
        r->thinking_budget = (long)budget;
    }
    /* output_config.effort: unknown values (and any effort while thinking is off) are ignored */
    const char *eff = api_str(api_get(api_get(b, "output_config"), "effort"));
    char lvl[8];
    if (eff && r->thinking != 0 && api_effort(eff, lvl) == 1) memcpy(r->reasoning_effort, lvl, sizeof lvl);
    return 0;
}

int api_parse_messages(const cJSON *b, api_request *r, char *err, size_t errlen) {
    const cJSON *ms = api_get(b, "messages");
    int n = cJSON_IsArray(ms) ? cJSON_GetArraySize(ms) : 0;
    if (n <= 0) return BAD("'messages': must be a non-empty array");
    int *role = xmalloc(sizeof *role * (size_t)n);
    int rc = convert(b, ms, n, role, r, err, errlen);
    free(role);
    if (rc || tools(api_get(b, "tools"), r, err, errlen) || tool_choice(api_get(b, "tool_choice"), r, err, errlen) ||
        api_finish_tools(r, err, errlen) || thinking(b, r, err, errlen))
        return -1;
    if (r->kind == API_MESSAGES && !api_get(b, "max_tokens")) return BAD("'max_tokens' is required");
    long long v = -1;
    if (api_opt_int(b, "max_tokens", "max_tokens", 1, 1e12, &v, err, errlen) ||
        api_stop(api_get(b, "stop_sequences"), "stop_sequences", r, err, errlen) || api_common(b, r, err, errlen))
        return -1;
    r->max_tokens = (long)v;
    /* Anthropic's range (api_common takes OpenAI's [0, 2]) */
    if (r->temperature > 1) return BAD("temperature: range: 0..1 (got %g)", r->temperature);
    api_finish_vars(r);
    return 0;
}
