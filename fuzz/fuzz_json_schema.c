/* fuzz_json_schema: libFuzzer target for the JSON Schema compiler. The
 * input is a schema (JSON text), then a NUL byte, then a candidate instance
 * (at most 64 KiB and 2 KiB). A schema that does not parse as JSON is
 * skipped; a refused one must come with a message naming a place ("json
 * schema"); an accepted one must give a grammar, and an instance the
 * grammar accepts must be a JSON document (cJSON parses it whole), as must
 * each of a few fixed probes it accepts. Crashes, leaks, sanitizer reports
 * and timeouts (runaway compilation) are failures as well. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "text/json_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_json(const grammar *g, const char *s, size_t n) {
    if (grammar_matches(g, s, n) != 1) return;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    if (!j || end != s + n) __builtin_trap();
    cJSON_Delete(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t slen = nul ? (size_t)(nul - data) : size;
    size_t ilen = nul ? size - slen - 1 : 0;
    if (slen > 65536 || ilen > 2048) return 0;
    cJSON *schema = cJSON_ParseWithLength((const char *)data, slen);
    if (!schema) return 0;
    char err[300] = "";
    grammar *g = json_schema_grammar(schema, err, sizeof err);
    if (!g) {
        if (!strstr(err, "json schema")) __builtin_trap();
    } else {
        static const char *const probes[] = {"{}", "[]", "null", "0", "-1", "1.5e3", "\"\"", "true", "{\"a\":1}",
                                             "[1,\"x\",null]", "\"\\ud800\"", "\"\\ud83d\\ude00\""};
        for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++) check_json(g, probes[k], strlen(probes[k]));
        if (nul) check_json(g, (const char *)nul + 1, ilen);
        grammar_free(g);
    }
    cJSON_Delete(schema);
    return 0;
}
