/* json: see json.h. */
#include "base/json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

cJSON *json_parse(const char *text, size_t n, const char *ctx, char *err, size_t errlen) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!root) {
        size_t off = (end && end >= text && end <= text + n) ? (size_t)(end - text) : 0;
        int line = 1;
        for (size_t i = 0; i < off; i++) line += text[i] == '\n';
        ds_err(err, errlen, "%s: invalid JSON near byte %zu (line %d)", ctx, off, line);
    }
    return root;
}

cJSON *json_parse_file(const char *path, char *err, size_t errlen) {
    size_t n;
    char *text = ds_read_file(path, &n, err, errlen);
    if (!text) return NULL;
    cJSON *root = json_parse(text, n, path, err, errlen);
    free(text);
    return root;
}

int json_is_int(const cJSON *v, int64_t lo, int64_t hi) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d)) return 0;
    return d >= (double)lo && d <= (double)hi;
}

static const cJSON *get(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

int json_opt_int(const cJSON *obj, const char *key, int64_t lo, int64_t hi, int64_t *out,
                 const char *ctx, char *err, size_t errlen) {
    const cJSON *v = get(obj, key);
    if (!v) return 0;
    if (!json_is_int(v, lo, hi))
        return ds_err(err, errlen, "%s: \"%s\" must be an integer in [%lld, %lld]", ctx, key,
                      (long long)lo, (long long)hi);
    *out = (int64_t)v->valuedouble;
    return 1;
}

int json_opt_num(const cJSON *obj, const char *key, double *out, const char *ctx, char *err, size_t errlen) {
    const cJSON *v = get(obj, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return ds_err(err, errlen, "%s: \"%s\" must be a finite number", ctx, key);
    *out = v->valuedouble;
    return 1;
}

int json_opt_bool(const cJSON *obj, const char *key, int *out, const char *ctx, char *err, size_t errlen) {
    const cJSON *v = get(obj, key);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return ds_err(err, errlen, "%s: \"%s\" must be true or false", ctx, key);
    *out = cJSON_IsTrue(v);
    return 1;
}

int json_opt_str(const cJSON *obj, const char *key, const char **out, const char *ctx, char *err, size_t errlen) {
    const cJSON *v = get(obj, key);
    if (!v) return 0;
    if (!cJSON_IsString(v)) return ds_err(err, errlen, "%s: \"%s\" must be a string", ctx, key);
    *out = v->valuestring;
    return 1;
}

int json_req_int(const cJSON *obj, const char *key, int64_t lo, int64_t hi, int64_t *out,
                 const char *ctx, char *err, size_t errlen) {
    int r = json_opt_int(obj, key, lo, hi, out, ctx, err, errlen);
    if (r == 0) return ds_err(err, errlen, "%s: missing \"%s\"", ctx, key);
    return r;
}

int json_req_num(const cJSON *obj, const char *key, double *out, const char *ctx, char *err, size_t errlen) {
    int r = json_opt_num(obj, key, out, ctx, err, errlen);
    if (r == 0) return ds_err(err, errlen, "%s: missing \"%s\"", ctx, key);
    return r;
}

int json_req_str(const cJSON *obj, const char *key, const char **out, const char *ctx, char *err, size_t errlen) {
    int r = json_opt_str(obj, key, out, ctx, err, errlen);
    if (r == 0) return ds_err(err, errlen, "%s: missing \"%s\"", ctx, key);
    return r;
}
