/* gguf: a strict reader of GGUF files (versions 2 and 3), one file or a
 * split set (NAME-00001-of-0000N.gguf and its siblings). Everything is
 * checked before it is trusted: magic, version, counts against the file's
 * size, string lengths, key uniqueness, value types, array sizes, tensor
 * dims and types, each tensor's byte range inside the data section and
 * aligned to general.alignment, no two tensors overlapping. A bad file is
 * an error naming the file and what is wrong, never a crash.
 *
 * This layer knows nothing of models: tensors are ggml type ids and dims
 * in ggml order (ne[0] the row length); engine/gguf_model.h turns them into
 * a model's tensors and config, text/tok_gguf.h into a tokenizer. */
#ifndef DS_GGUF_H
#define DS_GGUF_H

#include <stddef.h>
#include <stdint.h>

/* Metadata value types, numbered as the file spells them. */
typedef enum {
    GGUF_U8 = 0, GGUF_I8, GGUF_U16, GGUF_I16, GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL,
    GGUF_STRING, GGUF_ARRAY, GGUF_U64, GGUF_I64, GGUF_F64,
    GGUF_VTYPE_COUNT
} gguf_vtype;

/* ggml tensor type ids the reader accepts (their block sizes are checked
 * against the byte ranges); any other id is an error naming it. */
enum {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q5_0 = 6, GGML_Q5_1 = 7, GGML_Q8_0 = 8,
    GGML_Q2_K = 10, GGML_Q3_K = 11, GGML_Q4_K = 12, GGML_Q5_K = 13, GGML_Q6_K = 14, GGML_BF16 = 30,
};

/* A string from the file, NUL-terminated in memory the reader owns (len
 * excludes the NUL; the bytes may hold a NUL of their own). */
typedef struct {
    const char *s;
    size_t len;
} gguf_str;

typedef struct {
    const char *key;
    gguf_vtype type;
    /* scalars: the value in the field of its kind (integers and bool in i
       or u, as the type's signedness says; floats in f) */
    int64_t i;
    uint64_t u;
    double f;
    gguf_str str;
    /* GGUF_ARRAY: element type and count; numeric elements packed as the
       file stores them (little-endian, naturally aligned copy), string
       elements as gguf_str[n]. Nested arrays are refused. */
    gguf_vtype elt;
    uint64_t n;
    const void *arr;
} gguf_kv;

typedef struct {
    const char *name;
    const char *file;  /* base name of the file that holds it */
    uint32_t type;     /* GGML_* */
    int ndim;          /* 1..4 */
    int64_t ne[4];     /* ggml order: ne[0] is the innermost (a row's length); unused dims 1 */
    const void *data;
    size_t nbytes;
} gguf_tensor;

typedef struct gguf gguf;

/* Opens path: a lone .gguf, or the first (or any) part of a split set,
 * whose other parts are opened beside it (split.count / split.no checked,
 * tensors the union, metadata the first part's). read_into_memory: read
 * the files into anonymous memory instead of mapping them. */
int gguf_open(gguf **out, const char *path, int read_into_memory, char *err, size_t errlen);
/* Parses a complete in-memory image (the fuzzer's and the tests' entry);
 * the image must outlive the gguf. */
int gguf_open_mem(gguf **out, const void *data, size_t size, const char *name, char *err, size_t errlen);
void gguf_close(gguf *g);

uint32_t gguf_version(const gguf *g);
int gguf_kv_count(const gguf *g);
const gguf_kv *gguf_kv_at(const gguf *g, int i);
const gguf_kv *gguf_find(const gguf *g, const char *key); /* NULL when absent */
/* Typed lookups: 0 ok, -1 absent, -2 present with another type (ints
 * accept every integer type whose value fits; floats accept F32/F64). */
int gguf_get_int(const gguf *g, const char *key, int64_t *v);
int gguf_get_float(const gguf *g, const char *key, double *v);
int gguf_get_str(const gguf *g, const char *key, gguf_str *v);

int gguf_tensor_count(const gguf *g);
const gguf_tensor *gguf_tensor_at(const gguf *g, int i);
const gguf_tensor *gguf_find_tensor(const gguf *g, const char *name);

/* A ggml type's name ("Q4_K"), or NULL for an id the reader does not know. */
const char *gguf_type_name(uint32_t type);

#endif
