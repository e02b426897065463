/* kv: the key/value cache of one sequence on the CPU, per layer laid out
 * as [n_kv_heads][capacity][head_dim] so that attention for one KV head
 * reads contiguous memory. The buffers are allocated once at creation and
 * are only touched (made resident) as positions fill, so a large capacity
 * costs address space, not memory, until it is used. Truncation is O(1):
 * speculative decoding rolls back rejected tokens with kv_truncate.
 *
 * Storage (--kv-bits): 32 = f32 (exact, the default); 16 = IEEE f16
 * (round to nearest even, saturated at +-65504: 11 significant bits where
 * bf16 has 8, and K/V after the norms are far inside f16's range);
 * 8 = int8 with one f32 scale per (layer, K|V, kv head, position):
 * scale = max|x| / 127, q = rint(x * (127 / max|x|)). Every stored row is
 * quantized from that row alone (kv_quant_*), so a row's stored bits never
 * depend on the batch it came in, and the lossless rule (ARCHITECTURE.md,
 * invariant 1) holds within each setting. */
#ifndef DS_KV_H
#define DS_KV_H

#include <stddef.h>
#include <stdint.h>

typedef struct kv_cache kv_cache;

/* One layer's cache as the attention kernels read it. */
typedef struct {
    int bits;             /* 32: float, 16: uint16_t f16 bits, 8: int8_t */
    const void *k, *v;    /* [n_kv][stride][hd] */
    const float *ks, *vs; /* bits 8: [n_kv][stride] scales; else NULL */
    int stride;           /* positions per head (the capacity) */
} kv_view;

/* 1 when bits is a storage the caches take (32, 16, 8). */
int kv_bits_ok(int bits);

int kv_create(kv_cache **out, int n_layers, int n_kv_heads, int head_dim, int capacity, int bits, char *err,
              size_t errlen);
void kv_free(kv_cache *kv);
int kv_len(const kv_cache *kv);      /* positions filled */
int kv_capacity(const kv_cache *kv);
int kv_bits(const kv_cache *kv);
/* Drops positions >= len (no-op when len >= kv_len). Where sliding layers
 * have given rows back (kv_set_windows) and position len would attend to
 * one of them, the cache is emptied instead: kv_len says what is kept. */
void kv_truncate(kv_cache *kv, int len);
/* Sliding-window layers keep only their recent rows: window[l] > 0 for a
 * layer whose row at position p attends to p - window[l] + 1 .. p. Once
 * positions fall more than the largest such window plus KV_SLACK behind
 * the length, their rows in those layers give their pages back to the
 * system (the rows read as zeros, which the window masks), so a long
 * context costs those layers about window + KV_SLACK positions each.
 * KV_SLACK bounds how far a truncation may go back and keep the cache (a
 * speculative rollback is far shorter). Set once, before any store. */
#define KV_SLACK 256
void kv_set_windows(kv_cache *kv, const int *window);
/* The first position whose rows every layer still holds (0 until a
 * sliding layer gave rows back): rows below it cannot be saved or copied. */
int kv_kept_from(const kv_cache *kv);
/* Bytes a cache of n positions keeps resident at most, with the windows
 * (NULL: none) of its layers. */
size_t kv_bytes_resident(int n_layers, int n_kv_heads, int head_dim, int bits, const int *window, int n);
/* Empties the cache and gives its pages back to the system (the mapping
 * stays; positions fill again on demand). Returns the bytes released at
 * most (the touched part of the mapping). */
size_t kv_release(kv_cache *kv);
/* Layer l for the attention kernels. */
kv_view kv_layer(kv_cache *kv, int layer);
/* Base of layer l's K or V block as f32 [n_kv_heads][capacity][head_dim];
 * only for a 32-bit cache (NULL otherwise). */
float *kv_k(kv_cache *kv, int layer);
float *kv_v(kv_cache *kv, int layer);
/* Stores M new rows for layer l at positions kv_len .. kv_len+M-1.
 * k and v are [M][n_kv_heads][head_dim] in f32, quantized per (row, head)
 * to the cache's storage. The length advances only with kv_commit, once
 * every layer has been written. */
void kv_store(kv_cache *kv, int layer, const float *k, const float *v, int M);
void kv_commit(kv_cache *kv, int M);
/* Makes dst hold src's positions [0, n): the same geometry and storage,
 * n at most src's length and dst's capacity; the stored bits are copied,
 * so dst then reads exactly as src did there. 0, or -1 when the two do not
 * match or src's sliding layers no longer hold what position n attends to
 * (nothing changed). */
int kv_copy_prefix(kv_cache *dst, const kv_cache *src, int n);
/* Rows out and back in: kv_save_rows writes positions [pos0, pos0+n)
 * (all below kv_len) to out as [n_layers][2][n_kv_heads][n][row] stored
 * elements, then (8 bits) their scales [n_layers][2][n_kv_heads][n] f32:
 * n * kv_bytes_per_pos bytes, the stored bits as they are. kv_load_rows
 * puts such rows back at positions [pos0, pos0+n) of a cache of the same
 * geometry and storage (pos0 at most kv_len, the cache cut there first)
 * and sets the length to pos0+n, so the cache then reads exactly as the
 * saved one did there. 0, or -1 when the positions do not fit, or (save)
 * start below kv_kept_from, or (load) would leave a sliding layer without
 * the rows position pos0 attends to (nothing changed). */
int kv_save_rows(const kv_cache *kv, int pos0, int n, void *out);
int kv_load_rows(kv_cache *kv, int pos0, int n, const void *in);
/* Bytes one position costs across all layers (K and V) at a storage. */
size_t kv_bytes_per_pos(int n_layers, int n_kv_heads, int head_dim, int bits);

/* The row rules every backend follows (the CUDA store kernels compute the
 * same bits; tests compare them). x[n] -> q[n], *scale. */
void kv_quant_i8(const float *x, int n, int8_t *q, float *scale);
void kv_quant_f16(const float *x, int n, uint16_t *q);
/* q[n] back to f32 (x = q * scale; f16 widened exactly). */
void kv_dequant_i8(const int8_t *q, float scale, int n, float *x);
void kv_dequant_f16(const uint16_t *q, int n, float *x);

#endif
