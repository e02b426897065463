/* tensor: the dtype table (sizes and safetensors spellings) and element
 * counts for tensor descriptions. The safetensors and GGUF loaders map
 * their dtype strings through here, so a name is spelled in one place. */
#include "tensor.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[DT_COUNT] = {
    [DT_F32] = {"F32", 4},       [DT_F16] = {"F16", 2},         [DT_BF16] = {"BF16", 2},
    [DT_F64] = {"F64", 8},       [DT_I64] = {"I64", 8},         [DT_I32] = {"I32", 4},
    [DT_I16] = {"I16", 2},       [DT_I8] = {"I8", 1},           [DT_U8] = {"U8", 1},
    [DT_BOOL] = {"BOOL", 1},     [DT_F8_E4M3] = {"F8_E4M3", 1}, [DT_F8_E5M2] = {"F8_E5M2", 1},
};

size_t dtype_size(ds_dtype t) {
    if ((unsigned)t >= DT_COUNT) return 0;
    return dtypes[t].size;
}

const char *dtype_name(ds_dtype t) {
    if ((unsigned)t >= DT_COUNT) return "?";
    return dtypes[t].name;
}

int dtype_from_name(const char *s, ds_dtype *out) {
    if (!s) return -1;
    for (int i = 0; i < DT_COUNT; i++) {
        if (strcmp(s, dtypes[i].name) == 0) {
            *out = (ds_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* The product of the dimensions (1 for a scalar). Loaders overflow-check
 * shapes before building a tensor, so this cannot overflow for them. */
int64_t tensor_numel(const tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}
