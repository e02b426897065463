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
    /* 0: row-major. 1: a 2-D float weight stored in blocks of 8 rows, each
       block interleaved in pieces of 8 columns: piece k/8 of the block's
       rows 0..7, then piece k/8+1, ... (tensor_off), so that the 8 rows of
       a block stream as one contiguous run (the CPU decode matmul's
       layout; st_set_rows8 makes it) */
    int rows8;
} tensor;

size_t dtype_size(ds_dtype t);
const char *dtype_name(ds_dtype t);            /* "BF16", "F32", ... (safetensors spelling) */
int dtype_from_name(const char *s, ds_dtype *out); /* 0 ok, -1 unknown */
int64_t tensor_numel(const tensor *t);

/* Offset in elements of element (n, k) of an N x K matrix of K columns,
   row-major or in the rows8 layout. In both, the 8 elements of a piece
   (k a multiple of 8, K a multiple of 8 for rows8) are contiguous. */
static inline size_t tensor_off(int64_t K, int rows8, int64_t n, int64_t k) {
    if (!rows8) return (size_t)(n * K + k);
    return (size_t)((n & ~(int64_t)7) * K + (k & ~(int64_t)7) * 8 + (n & 7) * 8 + (k & 7));
}
/* Whether t can take the rows8 layout: 2-D F32/F16/BF16 with both
   dimensions multiples of 8, row-major now. */
int tensor_rows8_ok(const tensor *t);
/* Rearranges the N x K matrix at data (elements of es bytes) from
   row-major into the rows8 layout, in place, a block of 8 rows at a time. */
void tensor_to_rows8(void *data, size_t es, int64_t N, int64_t K);
/* Whether a and b hold the same dtype, shape and values, whatever their
   layouts. */
int tensor_same_values(const tensor *a, const tensor *b);

#endif
