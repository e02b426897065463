/* api_fields: the OpenAI dialects' fields that shape the target's
 * distribution (penalties, logit_bias, ignore_eos) and its output format
 * (response_format, Responses' text.format). See api.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "server/api_internal.h"

#define BAD(...) ds_err(err, errlen, __VA_ARGS__)

/* logit_bias {"<id>": bias in [-100, 100]} (OpenAI). The ids are checked
   against the vocabulary by the server, which knows it. */
static int logit_bias(const cJSON *v, api_request *r, char *err, size_t errlen) {
    if (!v) return 0;
    if (!cJSON_IsObject(v))
        return BAD("'logit_bias' must be an object mapping token ids (as strings) to a bias in [-100, 100], "
                   "e.g. {\"198\": -100}");
    int n = cJSON_GetArraySize(v);
    if (n > API_MAX_BIAS) return BAD("'logit_bias' may hold at most %d entries (got %d)", API_MAX_BIAS, n);
    r->bias_id = xmalloc(sizeof(int) * (size_t)(n ? n : 1));
    r->bias = xmalloc(sizeof(float) * (size_t)(n ? n : 1));
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        const char *k = e->string ? e->string : "";
        char *end = NULL;
        long id = strtol(k, &end, 10);
        if (!*k || *end || id < 0 || id > 0x7fffffff || (k[0] == '0' && k[1]))
            return BAD("'logit_bias' key \"%.32s\" is not a token id (a non-negative integer as a string)", k);
        double b = cJSON_IsNumber(e) ? e->valuedouble : NAN;
        if (!(b >= -100 && b <= 100)) return BAD("'logit_bias[\"%s\"]' must be a number in [-100, 100]", k);
        for (int i = 0; i < r->n_bias; i++)
            if (r->bias_id[i] == (int)id) return BAD("'logit_bias' lists token id %ld twice", id);
        r->bias_id[r->n_bias] = (int)id;
        r->bias[r->n_bias++] = (float)b;
    }
    return 0;
}

int api_penalties(const cJSON *b, api_request *r, char *err, size_t errlen) {
    double rp = -1, lrp = -1;
    long long last_n = -2;
    if (api_opt_num(b, "presence_penalty", "presence_penalty", -2, 2, 0, &r->presence, err, errlen) ||
        api_opt_num(b, "frequency_penalty", "frequency_penalty", -2, 2, 0, &r->frequency, err, errlen) ||
        api_opt_num(b, "repetition_penalty", "repetition_penalty", 0, 100, 1, &rp, err, errlen) ||
        api_opt_num(b, "repeat_penalty", "repeat_penalty", 0, 100, 1, &lrp, err, errlen) ||
        api_opt_int(b, "repeat_last_n", "repeat_last_n", -1, 1e9, &last_n, err, errlen) ||
        api_opt_bool(b, "ignore_eos", "ignore_eos", &r->ignore_eos, err, errlen) ||
        logit_bias(api_get(b, "logit_bias"), r, err, errlen))
        return -1;
    if (rp > 0 && lrp > 0 && rp != lrp)
        return BAD("'repetition_penalty' (%g) and 'repeat_penalty' (%g) are the same setting: give one", rp, lrp);
    /* vLLM's repetition_penalty looks at the whole context, llama.cpp's
       repeat_penalty at the last repeat_last_n tokens (64 by default) */
    r->repetition = rp > 0 ? rp : lrp > 0 ? lrp : 1;
    r->rep_window = last_n >= -1 ? (int)last_n : rp > 0 ? -1 : 64;
    return 0;
}

/* the "json_schema" form's schema (must be an object when present) */
static int take_schema(const cJSON *s, const char *name, api_request *r, char *err, size_t errlen) {
    if (!s) {
        r->json_mode = API_JSON_OBJECT;
        return 0;
    }
    if (!cJSON_IsObject(s)) return BAD("'%s' must be a JSON Schema object", name);
    r->json_mode = API_JSON_SCHEMA;
    r->json_schema = api_must(cJSON_Duplicate(s, 1));
    return 0;
}

int api_response_format(const cJSON *b, api_request *r, char *err, size_t errlen) {
    if (r->kind == API_RESPONSES) {
        const cJSON *text = api_get(b, "text");
        if (text && !cJSON_IsObject(text)) return BAD("'text' must be an object");
        const cJSON *f = api_get(text, "format");
        if (!f) return 0;
        const char *t = cJSON_IsObject(f) ? api_str(api_get(f, "type")) : NULL;
        if (!t) return BAD("'text.format' must be an object with a string 'type'");
        if (!strcmp(t, "text")) return 0;
        if (!strcmp(t, "json_object")) {
            r->json_mode = API_JSON_OBJECT;
            return 0;
        }
        if (strcmp(t, "json_schema"))
            return BAD("'text.format.type' must be \"text\", \"json_object\" or \"json_schema\" (got \"%.32s\")", t);
        const cJSON *st = api_get(f, "strict");
        if (st && !cJSON_IsBool(st)) return BAD("'text.format.strict' must be a boolean");
        if (!api_get(f, "schema")) return BAD("'text.format.schema' is required for the json_schema format");
        return take_schema(api_get(f, "schema"), "text.format.schema", r, err, errlen);
    }
    const cJSON *rf = api_get(b, "response_format");
    if (!rf) return 0;
    const char *t = cJSON_IsObject(rf) ? api_str(api_get(rf, "type")) : NULL;
    if (!t) return BAD("'response_format' must be an object with a string 'type'");
    if (!strcmp(t, "text")) return 0;
    if (!strcmp(t, "json_object")) /* llama.cpp's extension: a schema beside the type */
        return take_schema(api_get(rf, "schema"), "response_format.schema", r, err, errlen);
    if (strcmp(t, "json_schema"))
        return BAD("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\" (got \"%.32s\")", t);
    const cJSON *js = api_get(rf, "json_schema");
    if (!cJSON_IsObject(js))
        return BAD("'response_format.json_schema' must be an object {\"name\": ..., \"schema\": {...}}");
    const cJSON *st = api_get(js, "strict");
    if (st && !cJSON_IsBool(st)) return BAD("'response_format.json_schema.strict' must be a boolean");
    const cJSON *nm = api_get(js, "name");
    if (nm && !api_str(nm)) return BAD("'response_format.json_schema.name' must be a string");
    return take_schema(api_get(js, "schema"), "response_format.json_schema.schema", r, err, errlen);
}
