/* fuzz_toolcall: libFuzzer target for tool-call parsing and the streaming
 * gate. The first byte picks the format ((b & 0x7f) % 7, in tc_format
 * order) and whether a small tools array is passed (b & 0x80); the rest is
 * the answer text. It is parsed whole, and pushed through the gate in
 * pseudo-random pieces of 1..16 bytes. Checked: ids are "call_" + 24
 * lowercase hex and distinct; names are non-empty; arguments parse as a
 * JSON object; with no calls the text is the input unchanged; the gate's
 * shown text followed by its held text is exactly the input; it withholds
 * no more than the longest marker - 1 bytes; once tripped it stays tripped
 * and shows nothing more; the held text is parsed too. Crashes, leaks and
 * sanitizer reports are failures as well. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/strbuf.h"
#include "server/toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char kTools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"location\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
    "\"metric\":{\"type\":\"boolean\"},\"ratio\":{\"type\":\"number\"},\"tags\":{\"type\":\"array\"},"
    "\"opts\":{\"type\":[\"object\",\"null\"]}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"a\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]},\"b\":{\"enum\":[1,2]}}}}}]";

static void check_result(const tc_result *r, const char *text, size_t n, const cJSON *tools, tc_format f) {
    if (!r->text) __builtin_trap();
    if (r->n == 0) {
        if (r->calls || memcmp(r->text, text, n) != 0 || r->text[n] != 0) __builtin_trap();
        return;
    }
    if (r->n < 0 || !r->calls || strlen(r->text) > n) __builtin_trap();
    for (int i = 0; i < r->n; i++) {
        const tc_call *c = &r->calls[i];
        if (strlen(c->id) != 29 || memcmp(c->id, "call_", 5) != 0) __builtin_trap();
        for (int k = 5; k < 29; k++)
            if (!((c->id[k] >= '0' && c->id[k] <= '9') || (c->id[k] >= 'a' && c->id[k] <= 'f'))) __builtin_trap();
        for (int j = 0; j < i; j++)
            if (strcmp(c->id, r->calls[j].id) == 0) __builtin_trap();
        if (!c->name || !c->name[0] || !c->arguments) __builtin_trap();
        cJSON *a = cJSON_Parse(c->arguments);
        if (!cJSON_IsObject(a)) __builtin_trap();
        cJSON_Delete(a);
        if (f == TC_LLAMA3 && tools) { /* a llama3 call must name a tool */
            int found = 0;
            const cJSON *t;
            cJSON_ArrayForEach(t, tools) {
                const cJSON *nm = cJSON_GetObjectItem(cJSON_GetObjectItem(t, "function"), "name");
                if (cJSON_IsString(nm) && strcmp(nm->valuestring, c->name) == 0) found = 1;
            }
            if (!found) __builtin_trap();
        }
    }
}

static size_t max_withheld(tc_format f) {
    switch (f) {
    case TC_HERMES:
    case TC_XML: return strlen("<tool_call>") - 1;
    case TC_MISTRAL: return strlen("[TOOL_CALLS]") - 1;
    case TC_PYTHONIC: return strlen("<|tool_call_start|>") - 1;
    case TC_GEMMA: return strlen("```tool_code") - 1;
    case TC_LLAMA3: return strlen("<|python_tag|>") - 1;
    default: return 3; /* a partial UTF-8 sequence */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static cJSON *tools_json;
    if (!tools_json) tools_json = cJSON_Parse(kTools);
    if (size < 1) return 0;
    tc_format f = (tc_format)((data[0] & 0x7f) % 7);
    const cJSON *tools = (data[0] & 0x80) ? tools_json : NULL;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;

    tc_result r;
    tc_parse(f, text, n, tools, &r);
    check_result(&r, text, n, tools, f);
    tc_result_free(&r);

    tc_gate *g = tc_gate_new(f);
    strbuf out = {0}, held = {0};
    uint32_t seed = (uint32_t)size * 2654435761u ^ data[0];
    size_t pos = 0;
    int tripped = 0;
    while (pos < n) {
        seed = seed * 1664525u + 1013904223u;
        size_t k = 1 + (seed >> 24) % 16;
        if (k > n - pos) k = n - pos;
        size_t before = out.n;
        int t = tc_gate_push(g, text + pos, k, &out);
        pos += k;
        if (tripped && (!t || out.n != before)) __builtin_trap();
        if (!t && pos - out.n > max_withheld(f)) __builtin_trap();
        tripped = t;
    }
    if (tc_gate_finish(g, &out, &held) != tripped) __builtin_trap();
    if (out.n + held.n != n || (n && memcmp(sb_str(&out), text, out.n) != 0) ||
        (held.n && memcmp(held.s, text + out.n, held.n) != 0))
        __builtin_trap();
    if (!tripped && held.n) __builtin_trap();
    if (tripped) {
        tc_parse(f, held.s, held.n, tools, &r);
        check_result(&r, sb_str(&held), held.n, tools, f);
        tc_result_free(&r);
    }
    tc_gate_free(g);
    sb_free(&out);
    sb_free(&held);
    return 0;
}
