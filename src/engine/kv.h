/* kv: the key/value cache of one sequence. fp32, per layer laid out as
 * [n_kv_heads][capacity][head_dim] so that attention for one KV head reads
 * contiguous memory. The buffers are allocated once at creation and are
 * only touched (made resident) as positions fill, so a large capacity
 * costs address space, not memory, until it is used. Truncation is O(1):
 * speculative decoding rolls back rejected tokens with kv_truncate. */
#ifndef DS_KV_H
#define DS_KV_H

#include <stddef.h>
#include <stdint.h>

typedef struct kv_cache kv_cache;

int kv_create(kv_cache **out, int n_layers, int n_kv_heads, int head_dim, int capacity, char *err,
              size_t errlen);
void kv_free(kv_cache *kv);
int kv_len(const kv_cache *kv);      /* positions filled */
int kv_capacity(const kv_cache *kv);
/* Drops positions >= len (no-op when len >= kv_len). */
void kv_truncate(kv_cache *kv, int len);
/* Base of layer l's K or V block: [n_kv_heads][capacity][head_dim]. */
float *kv_k(kv_cache *kv, int layer);
float *kv_v(kv_cache *kv, int layer);
/* Stores M new rows for layer l at positions kv_len .. kv_len+M-1.
 * k and v are [M][n_kv_heads][head_dim]. The length advances only with
 * kv_commit, once every layer has been written. */
void kv_store(kv_cache *kv, int layer, const float *k, const float *v, int M);
void kv_commit(kv_cache *kv, int M);
/* Bytes one position costs across all layers (K and V). */
size_t kv_bytes_per_pos(int n_layers, int n_kv_heads, int head_dim);

#endif
