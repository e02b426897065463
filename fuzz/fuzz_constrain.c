/* fuzz_constrain: libFuzzer target for the output-format grammars a
 * request asks for (server/constrain.h). The input is a chat request body
 * (JSON: response_format, tools and tool_choice), then a NUL byte, then a
 * candidate answer (at most 64 KiB and 2 KiB). A body api_parse refuses is
 * skipped; a grammar constrain_grammar refuses must come with a message;
 * an answer an accepted grammar takes must be what the format promises: a
 * JSON document after the leading whitespace (response_format), or tool
 * calls the Hermes parser reads back with JSON-object arguments (tool
 * choice). Crashes, leaks and sanitizer reports are failures as well. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/api.h"
#include "server/constrain.h"
#include "server/toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t blen = nul ? (size_t)(nul - data) : size;
    size_t alen = nul ? size - blen - 1 : 0;
    if (blen > 65536 || alen > 2048) return 0;
    cJSON *body = cJSON_ParseWithLength((const char *)data, blen);
    if (!body) return 0;
    api_request q;
    char err[1024] = "";
    if (api_parse(API_CHAT, body, &q, err, sizeof err) == 0 && constrain_wanted(&q)) {
        grammar *g = constrain_grammar(&q, TC_HERMES, err, sizeof err);
        if (!g) {
            if (!err[0]) __builtin_trap();
        } else if (nul && grammar_matches(g, nul + 1, alen) == 1) {
            const char *s = (const char *)nul + 1;
            if (q.json_mode != API_JSON_NONE) {
                size_t i = 0;
                while (i < alen && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n')) i++;
                const char *end = NULL;
                cJSON *j = cJSON_ParseWithLengthOpts(s + i, alen - i, &end, 0);
                if (!j || end != s + alen) __builtin_trap();
                cJSON_Delete(j);
            } else {
                tc_result r;
                tc_parse(TC_HERMES, s, alen, q.tools, &r);
                if (r.n < 1) __builtin_trap();
                for (int k = 0; k < r.n; k++) {
                    cJSON *a = cJSON_Parse(r.calls[k].arguments);
                    if (!cJSON_IsObject(a)) __builtin_trap();
                    cJSON_Delete(a);
                }
                tc_result_free(&r);
            }
            grammar_free(g);
        } else {
            grammar_free(g);
        }
    }
    api_request_free(&q);
    cJSON_Delete(body);
    return 0;
}
