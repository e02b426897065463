/* safetensors: mmapped .safetensors files and sharded sets of them.
 * The header is validated strictly: size limits, JSON shape, known
 * dtypes, shapes matching byte lengths, offsets inside the data region,
 * no overlapping tensors, file not truncated. Errors name the file and
 * the tensor. */
#ifndef DS_SAFETENSORS_H
#define DS_SAFETENSORS_H

#include <stddef.h>

#include "engine/tensor.h"

#define ST_MAX_HEADER (100u << 20) /* refuse headers over 100 MiB */

typedef struct st_file st_file;

/* How a file's bytes are made available: mapped from the page cache, or
 * read into anonymous memory (costs the read at load, but on some machines
 * weights stream much faster from anonymous memory). */
typedef enum { ST_LOAD_MMAP = 0, ST_LOAD_READ } st_load;

/* Parses a complete in-memory file image (header + data). name is used in
 * messages and stored in each tensor's .file. The image must outlive the
 * st_file. */
int st_open_mem(st_file **out, const void *data, size_t size, const char *name, char *err, size_t errlen);
/* Opens path (mapped or read, per mode) and parses it. */
int st_open_mode(st_file **out, const char *path, st_load mode, char *err, size_t errlen);
/* st_open_mode with ST_LOAD_MMAP. */
int st_open(st_file **out, const char *path, char *err, size_t errlen);
void st_close(st_file *f);
int st_count(const st_file *f);
const tensor *st_get(const st_file *f, int i);
const tensor *st_find(const st_file *f, const char *name);

/* A model's weights: dir/model.safetensors, or the shards listed in
 * dir/model.safetensors.index.json (each tensor must be in the shard the
 * index names; a tensor in two shards is an error). */
typedef struct st_set st_set;
int st_set_open_mode(st_set **out, const char *dir, st_load mode, char *err, size_t errlen);
/* st_set_open_mode with ST_LOAD_MMAP. */
int st_set_open(st_set **out, const char *dir, char *err, size_t errlen);
void st_set_close(st_set *s);
int st_set_count(const st_set *s);
const tensor *st_set_get(const st_set *s, int i);
const tensor *st_set_find(const st_set *s, const char *name);
/* A set over n tensors another reader made (a GGUF model's, with HF
 * names): the pointers, their names and data stay valid until
 * st_set_close, which then calls release(owner). Two tensors of one name
 * are an error naming ctx. */
int st_set_wrap(st_set **out, const tensor *const *t, int n, void *owner, void (*release)(void *owner),
                const char *ctx, char *err, size_t errlen);
/* Keeps a copy of t (a tensor made from the set's own, e.g. a quantized
 * weight joined with its scales and biases) for as long as the set lives,
 * and returns it. */
const tensor *st_set_derive(st_set *s, const tensor *t);
/* Rearranges the tensors t[0..n) of the set into the rows8 layout
 * (tensor.h), each whose shard was read into memory (ST_LOAD_READ) and
 * whose shape allows it; the others (mapped files, other shapes, NULL)
 * stay as they are. Returns how many were rearranged. */
int st_set_rows8(st_set *s, const tensor *const *t, int n);

#endif
