/* qspec: see qspec.h. */
#include "engine/qspec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/json.h"
#include "base/util.h"

int qspec_supported(int bits, int group) {
    int b_ok = bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
    return b_ok && (group == 32 || group == 64 || group == 128);
}

/* bits and group_size of an object: the defaults when absent (def_*), both
 * required when no defaults (def_bits 0). */
static int read_pair(const cJSON *o, int def_bits, int def_group, int *bits, int *group, const char *ctx,
                     const char *what, char *err, size_t errlen) {
    int64_t b = def_bits, g = def_group;
    int rb = json_opt_int(o, "bits", 1, 64, &b, ctx, err, errlen);
    int rg = json_opt_int(o, "group_size", 1, 1 << 20, &g, ctx, err, errlen);
    if (rb < 0 || rg < 0) return -1;
    if ((rb == 0 && !def_bits) || (rg == 0 && !def_group))
        return ds_err(err, errlen, "%s: %s needs \"bits\" and \"group_size\"", ctx, what);
    if (!qspec_supported((int)b, (int)g))
        return ds_err(err, errlen,
                      "%s: %s has bits %lld and group_size %lld (supported: bits 2, 3, 4, 5, 6, 8; group_size 32, "
                      "64, 128)",
                      ctx, what, (long long)b, (long long)g);
    *bits = (int)b;
    *group = (int)g;
    return 0;
}

static int parse_obj(qspec *q, const cJSON *o, const char *ctx, char *err, size_t errlen) {
    if (!cJSON_IsObject(o)) return ds_err(err, errlen, "%s: \"quantization\" must be an object", ctx);
    const char *s = NULL;
    if (json_opt_str(o, "quant_method", &s, ctx, err, errlen) < 0) return -1;
    if (s && strcmp(s, "mlx") != 0 && strcmp(s, "affine") != 0)
        return ds_err(err, errlen,
                      "%s: quantization method \"%.64s\" is not supported (MLX affine folders and GGUF files are)",
                      ctx, s);
    s = NULL;
    if (json_opt_str(o, "mode", &s, ctx, err, errlen) < 0) return -1;
    if (s && strcmp(s, "affine") != 0)
        return ds_err(err, errlen, "%s: MLX quantization mode \"%.64s\" is not supported (only affine)", ctx, s);
    if (read_pair(o, 0, 0, &q->bits, &q->group, ctx, "\"quantization\"", err, errlen) < 0) return -1;
    int n = 0;
    for (const cJSON *e = o->child; e; e = e->next)
        if (cJSON_IsObject(e) || cJSON_IsFalse(e) || cJSON_IsTrue(e)) n++;
    q->ov = xcalloc((size_t)(n ? n : 1), sizeof *q->ov);
    for (const cJSON *e = o->child; e; e = e->next) {
        if (!(cJSON_IsObject(e) || cJSON_IsFalse(e) || cJSON_IsTrue(e))) continue;
        qspec_override *v = &q->ov[q->n++];
        v->module = xstrdup(e->string);
        if (cJSON_IsFalse(e)) continue; /* bits 0 */
        if (cJSON_IsTrue(e)) {
            v->bits = q->bits;
            v->group = q->group;
            continue;
        }
        char what[300];
        snprintf(what, sizeof what, "\"quantization\".\"%.200s\"", e->string);
        if (read_pair(e, q->bits, q->group, &v->bits, &v->group, ctx, what, err, errlen) < 0) return -1;
    }
    return 0;
}

int qspec_parse(qspec *q, const char *text, size_t n, const char *ctx, char *err, size_t errlen) {
    memset(q, 0, sizeof *q);
    cJSON *root = json_parse(text, n, ctx, err, errlen);
    if (!root) return -1;
    int rc = 0;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "quantization");
    if (!o || cJSON_IsNull(o)) o = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    if (o && !cJSON_IsNull(o)) rc = parse_obj(q, o, ctx, err, errlen);
    cJSON_Delete(root);
    if (rc) qspec_free(q);
    return rc;
}

int qspec_load(qspec *q, const char *dir, char *err, size_t errlen) {
    char path[4096];
    memset(q, 0, sizeof *q);
    if (ds_path_join(path, sizeof path, dir, "config.json") != 0) return ds_err(err, errlen, "%s: path too long", dir);
    size_t n = 0;
    char *text = ds_read_file(path, &n, err, errlen);
    if (!text) return -1;
    int rc = qspec_parse(q, text, n, path, err, errlen);
    free(text);
    return rc;
}

void qspec_free(qspec *q) {
    for (int i = 0; i < q->n; i++) free(q->ov[i].module);
    free(q->ov);
    memset(q, 0, sizeof *q);
}

int qspec_for(const qspec *q, const char *module, int *bits, int *group) {
    for (int i = 0; i < q->n; i++) {
        if (strcmp(q->ov[i].module, module) != 0) continue;
        *bits = q->ov[i].bits;
        *group = q->ov[i].group;
        return q->ov[i].bits != 0;
    }
    *bits = q->bits;
    *group = q->group;
    return q->bits != 0;
}
