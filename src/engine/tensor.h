/* tensor: the plain description of a weight tensor that lives in an
 * mmapped file (or in memory we own). No ops here: ops.h works on these. */
#ifndef DS_TENSOR_H
#define DS_TENSOR_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DT_F32 = 0, DT_F16, DT_BF16, /* the float types weights may use */
    DT_F64, DT_I64, DT_I32, DT_I16, DT_I8, DT_U8, DT_BOOL, DT_F8_E4M3, DT_F8_E5M2,
    DT_U32,                      /* MLX's packed words, as safetensors spells them */
    /* Quantized weight formats (engine/quant.h). GGUF's block types: each
       row of K elements is K/QK blocks laid end to end, as ggml stores
       them. They have no safetensors spelling. */
    DT_Q8_0, DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q2_K, DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K,
    /* MLX affine: data is the uint32 words [N][K*bits/32] (elements packed
       from the low bits up), .q holds bits, group size, scales, biases */
    DT_MLX,
    DT_COUNT
} ds_dtype;

/* The first dtype that is a quantized weight format. */
#define DT_FIRST_QUANT DT_Q8_0

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
    /* DT_MLX only: w[n][k] = scales[n][k/group] * q[n][k] + biases[n][k/group],
       scales and biases [N][K/group] in sdtype (F32, F16 or BF16) */
    struct {
        int bits, group;
        ds_dtype sdtype;
        const void *scales, *biases;
    } q;
} tensor;

/* Bytes of one element; 0 for the quantized formats (engine/quant.h gives
   their row sizes). */
size_t dtype_size(ds_dtype t);
const char *dtype_name(ds_dtype t); /* "BF16", "F32", ... (safetensors spelling); "Q4_K", "MLX" */
/* A safetensors dtype string; 0 ok, -1 unknown (the quantized formats
   have no safetensors spelling). */
int dtype_from_name(const char *s, ds_dtype *out);
static inline int dtype_is_quant(ds_dtype t) { return t >= DT_FIRST_QUANT && t < DT_COUNT; }
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
