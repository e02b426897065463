/* json: a thin typed-getter layer over cJSON. Every getter names the key
 * (and a context string such as the file name) in its error message, so
 * callers never produce a bare "parse error". */
#ifndef DS_JSON_H
#define DS_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

/* Parses text of length n. On failure returns NULL and writes
 * "<ctx>: invalid JSON at byte B (line L)". Free with cJSON_Delete. */
cJSON *json_parse(const char *text, size_t n, const char *ctx, char *err, size_t errlen);
/* Reads and parses a file; ctx in messages is the path. */
cJSON *json_parse_file(const char *path, char *err, size_t errlen);

/* Optional getters: return 0 and leave *out untouched when the key is
 * absent or JSON null; return -1 with an error when present but of the
 * wrong type or out of range; return 1 when found. */
int json_opt_int(const cJSON *obj, const char *key, int64_t lo, int64_t hi, int64_t *out,
                 const char *ctx, char *err, size_t errlen);
int json_opt_num(const cJSON *obj, const char *key, double *out, const char *ctx, char *err, size_t errlen);
int json_opt_bool(const cJSON *obj, const char *key, int *out, const char *ctx, char *err, size_t errlen);
/* *out points into the cJSON tree (valid until it is deleted). */
int json_opt_str(const cJSON *obj, const char *key, const char **out, const char *ctx, char *err, size_t errlen);

/* Required variants: absence is an error "<ctx>: missing \"key\"". */
int json_req_int(const cJSON *obj, const char *key, int64_t lo, int64_t hi, int64_t *out,
                 const char *ctx, char *err, size_t errlen);
int json_req_num(const cJSON *obj, const char *key, double *out, const char *ctx, char *err, size_t errlen);
int json_req_str(const cJSON *obj, const char *key, const char **out, const char *ctx, char *err, size_t errlen);

/* True when the number is an exact integer within [lo, hi]. */
int json_is_int(const cJSON *v, int64_t lo, int64_t hi);

#endif
