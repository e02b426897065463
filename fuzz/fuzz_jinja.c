/* fuzz_jinja: libFuzzer target for the Jinja template engine. The input is
 * parsed as a template and, when it parses, rendered against a small fixed
 * chat context (messages with tool calls, tools, flags). Any error is fine;
 * crashes, leaks, sanitizer reports and hangs are not (loops, recursion and
 * output are bounded by the engine). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "text/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char kCtx[] =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":\"Hi \\u4f60\\u597d \\ud83c\\udf0d\"},"
    "{\"role\":\"assistant\",\"content\":\"<think>\\nx\\n</think>\\n\\nok\",\"reasoning_content\":\"r\","
    "\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1,\"b\":[1.5,null,true]}}}]},"
    "{\"role\":\"tool\",\"content\":\"{\\\"t\\\": 21}\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}],"
    "\"add_generation_prompt\":true,\"enable_thinking\":false,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"n\":3}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static cJSON *vars;
    if (!vars) vars = cJSON_Parse(kCtx);
    char err[512];
    jinja_template *t = NULL;
    if (jinja_parse(&t, (const char *)data, size, "fuzz", err, sizeof err) != 0) {
        if (t) __builtin_trap();
        return 0;
    }
    char *out = NULL;
    size_t n = 0;
    if (jinja_render(t, vars, &out, &n, err, sizeof err) == 0) {
        if (!out) __builtin_trap();
    } else if (out) __builtin_trap();
    free(out);
    jinja_free(t);
    return 0;
}
