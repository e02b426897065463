/* fuzz_api_request: libFuzzer target for the request-mapping layer
 * (api.h). The first byte picks the dialect (chat, completions, Responses,
 * messages, count_tokens); the rest is parsed as JSON and mapped. An
 * accepted request must have the documented shape (roles, string contents,
 * object arguments, ranges), and its messages and tools fed back as a chat
 * request must map to themselves; a refused one must answer 400 with a
 * message. Leaks are caught by the sanitizer. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int is_role(const char *r) {
    return !strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant") || !strcmp(r, "tool");
}

static void check_messages(const cJSON *msgs) {
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) < 1) __builtin_trap();
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"),
                    *content = cJSON_GetObjectItemCaseSensitive(m, "content"),
                    *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (!cJSON_IsString(role) || !is_role(role->valuestring) || !cJSON_IsString(content)) __builtin_trap();
        if (!calls) continue;
        if (strcmp(role->valuestring, "assistant") || !cJSON_IsArray(calls) || !cJSON_GetArraySize(calls))
            __builtin_trap();
        const cJSON *c;
        cJSON_ArrayForEach(c, calls) {
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
            if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(c, "id")) ||
                !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(f, "name")) ||
                !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(f, "arguments")))
                __builtin_trap();
        }
    }
}

/* Equal printed forms (cJSON_Compare misjudges objects with duplicate keys). */
static int same_json(const cJSON *a, const cJSON *b) {
    if (!a || !b) return a == b;
    char *x = cJSON_PrintUnformatted(a), *y = cJSON_PrintUnformatted(b);
    int same = x && y && !strcmp(x, y);
    free(x);
    free(y);
    return same;
}

static void check_request(const api_request *r, api_kind kind) {
    if (r->kind != kind || !cJSON_IsObject(r->template_vars) || r->n != 1) __builtin_trap();
    if (kind == API_COMPLETIONS ? (!r->prompt || r->messages) : (r->prompt != NULL)) __builtin_trap();
    if (kind != API_COMPLETIONS) check_messages(r->messages);
    if (r->tools && (!cJSON_IsArray(r->tools) || !cJSON_GetArraySize(r->tools))) __builtin_trap();
    if (r->tool_choice == TOOL_CHOICE_NONE && r->tools) __builtin_trap();
    if ((r->tool_choice == TOOL_CHOICE_NAMED) != (r->tool_choice_name != NULL)) __builtin_trap();
    if (r->n_stop < 0 || r->n_stop > API_MAX_STOP) __builtin_trap();
    for (int i = 0; i < r->n_stop; i++)
        if (!r->stop[i][0]) __builtin_trap();
    const char *e = r->reasoning_effort;
    if (e[0] && strcmp(e, "low") && strcmp(e, "medium") && strcmp(e, "high")) __builtin_trap();
    if (r->thinking < -1 || r->thinking > 1 || (r->drop_reasoning && r->thinking != 0)) __builtin_trap();
    if (r->max_tokens == 0 || r->max_tokens < -1 || r->top_k < -1 || r->thinking_budget < -1) __builtin_trap();
    if ((r->temperature != -1 && !(r->temperature >= 0 && r->temperature <= 2)) ||
        (r->top_p != -1 && !(r->top_p > 0 && r->top_p <= 1)) || (r->min_p != -1 && !(r->min_p >= 0 && r->min_p <= 1)))
        __builtin_trap();
    if (r->messages) {
        /* the normalized form is a fixed point of the chat mapping */
        cJSON *b = cJSON_CreateObject();
        cJSON_AddItemToObject(b, "messages", cJSON_Duplicate(r->messages, 1));
        if (r->tools) cJSON_AddItemToObject(b, "tools", cJSON_Duplicate(r->tools, 1));
        api_request again;
        char err[512];
        if (api_parse(API_CHAT, b, &again, err, sizeof err) != 0) __builtin_trap();
        if (!same_json(again.messages, r->messages) || !same_json(again.tools, r->tools)) __builtin_trap();
        api_request_free(&again);
        cJSON_Delete(b);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    api_kind kind = (api_kind)(data[0] % 5);
    cJSON *body = cJSON_ParseWithLength((const char *)data + 1, size - 1);
    if (!body) return 0;
    api_request r;
    char err[512];
    int rc = api_parse(kind, body, &r, err, sizeof err);
    cJSON_Delete(body); /* the request owns everything it holds */
    if (rc == 0) check_request(&r, kind);
    else if (rc != 400 || !err[0]) __builtin_trap();
    api_request_free(&r);
    return 0;
}
