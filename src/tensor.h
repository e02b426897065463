/* tensor: the plain description of a weight tensor that lives in an
 * mmapped file (or in memory we own). No ops here: ops.h works on these. */
#ifndef DS_TENSOR_H
#define DS_TENSOR_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DT_F32 = 0, DT_F16, DT_BF16, /* the float types weights may use */
    DT_F64, DT_I64, DT_I32, DT_I16, DT_I8, DT_U8, DT_BOOL, DT_F8_E4M3, DT_F8_E5M2,
    DT_COUNT
} ds_dtype;

#define TENSOR_MAX_DIMS 8

typedef struct {
    const char *name;   /* HF tensor name, e.g. "model.layers.0.mlp.up_proj.weight" */
    const char *file;   /* base name of the file it came from (for errors) */
    ds_dtype dtype;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS]; /* row-major; shape[0] is the outermost */
    const void *data;   /* ndim product * dtype_size bytes */
    size_t nbytes;
} tensor;

size_t dtype_size(ds_dtype t);
const char *dtype_name(ds_dtype t);            /* "BF16", "F32", ... (safetensors spelling) */
int dtype_from_name(const char *s, ds_dtype *out); /* 0 ok, -1 unknown */
int64_t tensor_numel(const tensor *t);

#endif
