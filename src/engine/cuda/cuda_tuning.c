/* cuda_tuning: see cuda_tuning.h. */
#include "engine/cuda/cuda_tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "engine/cuda/cuda_backend.h"

cu_tuning cu_tuning_defaults(void) {
    return (cu_tuning){.pdl = 1,
                       .pdl_late = -1,
                       .swiglu2 = -1,
                       .fma = 0,
                       .qkv_tail = 1,
                       .cut = 1,
                       .gemm_rows = CUDA_GEMM_MIN_ROWS,
                       .argmax_split = 1,
                       .graphs = 1,
                       .att_wg = 1,
                       .att_spread = -1,
                       .att_wide = 1,
                       .att_early = 1,
                       .sample = -1,
                       .prefill_rows = CUDA_PREFILL_ROWS,
                       .chain = 1,
                       .omit = 0};
}

/* a field by name, with its value range */
static const struct {
    const char *name;
    size_t off;
    int lo, hi;
} fields[] = {
    {"pdl", offsetof(cu_tuning, pdl), 0, 1},
    {"pdl_late", offsetof(cu_tuning, pdl_late), -1, 1},
    {"swiglu2", offsetof(cu_tuning, swiglu2), -1, 1},
    {"fma", offsetof(cu_tuning, fma), 0, 1},
    {"qkv_tail", offsetof(cu_tuning, qkv_tail), 0, 1},
    {"cut", offsetof(cu_tuning, cut), 0, 1},
    {"gemm_rows", offsetof(cu_tuning, gemm_rows), 0, 1 << 20},
    {"argmax_split", offsetof(cu_tuning, argmax_split), 0, 1},
    {"graphs", offsetof(cu_tuning, graphs), 0, 1},
    {"att_wg", offsetof(cu_tuning, att_wg), 0, 1},
    {"att_spread", offsetof(cu_tuning, att_spread), -1, 1},
    {"att_wide", offsetof(cu_tuning, att_wide), 0, 1},
    {"att_early", offsetof(cu_tuning, att_early), 0, 1},
    {"sample", offsetof(cu_tuning, sample), -1, 1},
    {"prefill_rows", offsetof(cu_tuning, prefill_rows), 1, 1 << 20},
    {"chain", offsetof(cu_tuning, chain), 0, 1},
    {"omit", offsetof(cu_tuning, omit), 0, 31},
};

static const char *const omit_names[] = {"qkv", "attn", "o", "gateup", "down"};

/* an integer of lo..hi: the whole of s */
static int parse_int(const char *s, int lo, int hi, int *v) {
    char *end;
    long x = strtol(s, &end, 10);
    if (!*s || *end || x < lo || x > hi) return -1;
    *v = (int)x;
    return 0;
}

/* omit's value: 0, or kernel names joined by '+' */
static int parse_omit(char *s, int *v, char *err, size_t errlen) {
    if (!strcmp(s, "0")) return *v = 0, 0;
    int o = 0;
    char *save = NULL;
    for (char *t = strtok_r(s, "+", &save); t; t = strtok_r(NULL, "+", &save)) {
        int k = 0;
        while (k < 5 && strcmp(t, omit_names[k])) k++;
        if (k == 5) return ds_err(err, errlen, "CUDA tuning: omit: no kernel '%s' (qkv, attn, o, gateup, down)", t);
        o |= 1 << k;
    }
    if (!o) return ds_err(err, errlen, "CUDA tuning: omit: no kernel named");
    *v = o;
    return 0;
}

int cu_tuning_parse(const char *spec, cu_tuning *t, char *err, size_t errlen) {
    if (!spec || !*spec) return 0;
    cu_tuning n = *t;
    char *buf = xstrdup(spec), *save = NULL;
    int rc = 0;
    for (char *f = strtok_r(buf, ",/", &save); f && !rc; f = strtok_r(NULL, ",/", &save)) {
        char *eq = strchr(f, '=');
        if (!eq) {
            rc = ds_err(err, errlen, "CUDA tuning: '%s' is not name=value", f);
            break;
        }
        *eq = '\0';
        const char *name = f;
        char *val = eq + 1;
        size_t i = 0;
        while (i < sizeof fields / sizeof fields[0] && strcmp(fields[i].name, name)) i++;
        if (i == sizeof fields / sizeof fields[0]) {
            rc = ds_err(err, errlen, "CUDA tuning: no setting '%s'", name);
            break;
        }
        int *p = (int *)((char *)&n + fields[i].off), v;
        if (!strcmp(name, "omit")) {
            rc = parse_omit(val, p, err, errlen);
        } else if (!strcmp(name, "fma") && !strcmp(val, "fma")) {
            *p = 1;
        } else if (parse_int(val, fields[i].lo, fields[i].hi, &v) != 0) {
            rc = ds_err(err, errlen, "CUDA tuning: %s=%s: not an integer from %d to %d", name, val, fields[i].lo,
                        fields[i].hi);
        } else {
            *p = v;
        }
    }
    free(buf);
    if (!rc) *t = n;
    return rc;
}
