/* gguf_write: a writer of GGUF version 3 files, the counterpart of the
 * reader in base/gguf.h (same type ids and value types).
 *
 * A file is made in three steps, so that a model far larger than memory
 * can be written one tensor at a time:
 *   1. metadata (gguf_w_* setters, any order, each key once) and tensor
 *      declarations (gguf_w_add_tensor: name, ggml type, dims; the byte
 *      size follows from the type's block geometry);
 *   2. gguf_w_begin(path): the header, metadata and tensor infos go to a
 *      temporary file beside path;
 *   3. gguf_w_data: the tensors' bytes, in declaration order, in pieces of
 *      any size; gguf_w_finish checks every declared byte came, flushes,
 *      and renames the temporary file onto path (so path is either the old
 *      file or a complete new one, never a torn one).
 * Tensor data offsets are multiples of GGUF_W_ALIGN (general.alignment is
 * left at its default, 32, so it is not written). Values are written
 * little-endian as the host stores them (the supported hosts are).
 *
 * Errors (a duplicate key, a dim that does not fit the type's block, an
 * I/O failure) are reported by the call that finds them, or, for the
 * setters (which return nothing), by gguf_w_begin. */
#ifndef DS_GGUF_WRITE_H
#define DS_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "base/gguf.h"

#define GGUF_W_ALIGN 32

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_w_new(void);
/* Frees w; an unfinished temporary file is removed. */
void gguf_w_free(gguf_writer *w);

void gguf_w_u8(gguf_writer *w, const char *key, uint8_t v);
void gguf_w_i8(gguf_writer *w, const char *key, int8_t v);
void gguf_w_u16(gguf_writer *w, const char *key, uint16_t v);
void gguf_w_i16(gguf_writer *w, const char *key, int16_t v);
void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_w_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_w_i64(gguf_writer *w, const char *key, int64_t v);
void gguf_w_f32(gguf_writer *w, const char *key, float v);
void gguf_w_f64(gguf_writer *w, const char *key, double v);
void gguf_w_bool(gguf_writer *w, const char *key, int v);
void gguf_w_str(gguf_writer *w, const char *key, const char *s);
void gguf_w_str_n(gguf_writer *w, const char *key, const char *s, size_t len);
/* An array of n numeric elements of type elt (not STRING or ARRAY), vals
 * packed as the host stores that type. */
void gguf_w_arr(gguf_writer *w, const char *key, gguf_vtype elt, const void *vals, uint64_t n);
/* An array of n strings; len may be NULL (then each is NUL-terminated). */
void gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *s, const size_t *len, uint64_t n);

/* Declares the next tensor: ne in ggml order (ne[0] the row length, a
 * multiple of the type's block), 1 <= ndim <= 4. 0, or -1 with err. */
int gguf_w_add_tensor(gguf_writer *w, const char *name, uint32_t type, int ndim, const int64_t *ne, char *err,
                      size_t errlen);
/* Bytes of one row of ne0 elements of a ggml type (0 when the type is
 * unknown or ne0 does not fit its block). */
size_t gguf_w_row_bytes(uint32_t type, int64_t ne0);

int gguf_w_begin(gguf_writer *w, const char *path, char *err, size_t errlen);
/* The next n bytes of tensor data (declaration order; a piece may span
 * tensors). Writing more than was declared is an error. */
int gguf_w_data(gguf_writer *w, const void *p, size_t n, char *err, size_t errlen);
int gguf_w_finish(gguf_writer *w, char *err, size_t errlen);

#endif
