/* kv: the key/value cache of one sequence on the CPU, in pages of
 * KV_PAGE positions from a pool (below): within a page, one layer's rows
 * are laid out [K|V][n_kv_heads][position][head_dim], so attention for one
 * KV head reads contiguous memory a page at a time. A page is taken when a
 * position first falls in it, so a large capacity costs a table of
 * pointers, not memory, until it is used. Truncation is O(1): speculative
 * decoding rolls back rejected tokens with kv_truncate.
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

/* Positions per page. A cache holds its rows in pages from a pool: one
 * page is one layer's K and V rows of KV_PAGE positions,
 * [2][n_kv][KV_PAGE][hd] elements then (8 bits) [2][n_kv][KV_PAGE] f32
 * scales. Pages are reference-counted: caches of one pool share a prefix's
 * whole pages (kv_copy_prefix) and the prefix cache keeps pages rather than
 * copies of them (kv_pages_take / kv_pages_put); a cache that writes into a
 * page it shares first copies it (copy on write), so sharing never changes
 * what a cache reads. A multiple of the attention kernels' position tile
 * (64), so a tile never crosses a page; the prefix cache's block equals it. */
#define KV_PAGE 128
#define KV_PAGE_SHIFT 7

/* A pool of pages of one geometry (KV heads, head_dim, storage), shared by
 * the caches of one model's contexts. Thread-safe: pages are taken, shared
 * and given back from any thread. A page no cache or holder references
 * gives its memory back to the system at once. */
typedef struct kv_pool kv_pool;
typedef struct kv_page kv_page;

typedef struct {
    size_t page_bytes; /* one page */
    int64_t pages;     /* pages referenced now (resident) */
    int64_t shared;    /* of them, pages referenced more than once */
} kv_pool_stats;

kv_pool *kv_pool_new(int n_kv_heads, int head_dim, int bits);
/* The pool goes when its last holder does: kv_pool_new's caller, each cache
 * created in it and each page reference (kv_pages_take). */
void kv_pool_unref(kv_pool *pool);
void kv_pool_get_stats(kv_pool *pool, kv_pool_stats *st);

/* One layer's cache as the attention kernels read it: position t of KV head
 * g is row (g * plen + (t & (plen_mask))) of page t >> shift. A cache's
 * view has plen KV_PAGE; a contiguous [n_kv][stride][hd] array is one page
 * with plen = stride (shift KV_FLAT_SHIFT). Pages a sliding layer gave
 * back read as zeros. */
#define KV_FLAT_SHIFT 30
typedef struct {
    int bits;                          /* 32: float, 16: uint16_t f16 bits, 8: int8_t */
    const void *const *k, *const *v;   /* [pages] rows [n_kv][plen][hd] */
    const float *const *ks, *const *vs; /* bits 8: [pages] scales [n_kv][plen]; else NULL */
    int plen, shift;
} kv_view;

/* Row t of KV head g, K (which 0) or V (1), in the view's storage. */
static inline const void *kv_view_row(const kv_view *w, int which, int g, int t, int hd) {
    const size_t at = ((size_t)g * (size_t)w->plen + (size_t)(t & ((1 << w->shift) - 1))) * (size_t)hd;
    const unsigned char *p = (const unsigned char *)(which ? w->v : w->k)[t >> w->shift];
    return p + at * (size_t)(w->bits / 8);
}
/* Its scale (8 bits). */
static inline const float *kv_view_scale(const kv_view *w, int which, int g, int t) {
    return (which ? w->vs : w->ks)[t >> w->shift] + (size_t)g * (size_t)w->plen + (size_t)(t & ((1 << w->shift) - 1));
}

/* 1 when bits is a storage the caches take (32, 16, 8). */
int kv_bits_ok(int bits);

/* A cache of n_layers layers in pool (NULL: a pool of its own; else of the
 * same KV heads, head_dim and storage), for up to capacity positions. */
int kv_create(kv_cache **out, kv_pool *pool, int n_layers, int n_kv_heads, int head_dim, int capacity, int bits,
              char *err, size_t errlen);
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
 * the length, the whole pages of those rows in those layers go back to
 * the pool (the rows read as zeros, which the window masks), so a long
 * context costs those layers about window + KV_SLACK positions each.
 * KV_SLACK bounds how far a truncation may go back and keep the cache (a
 * speculative rollback is far shorter). Set once, before any store. */
#define KV_SLACK 256
void kv_set_windows(kv_cache *kv, const int *window);
/* The first position whose rows every layer still holds (0 until a
 * sliding layer gave rows back): rows below it cannot be saved or copied. */
int kv_kept_from(const kv_cache *kv);
/* Bytes of one page (one layer's KV_PAGE positions, rounded up to whole
 * system pages). */
size_t kv_page_bytes(int n_kv_heads, int head_dim, int bits);
/* Pages a sliding layer of that window keeps at most: the window, the
 * slack and two pages (drop_old's rounding, the page the length is in). */
static inline int kv_window_pages(int window) { return (window + 2 * KV_SLACK) / KV_PAGE + 2; }
/* Bytes a cache of n positions keeps resident at most, with the windows
 * (NULL: none) of its layers. */
size_t kv_bytes_resident(int n_layers, int n_kv_heads, int head_dim, int bits, const int *window, int n);
/* Empties the cache and gives its pages back to the pool (positions fill
 * again on demand). Returns the bytes this freed (pages no other holder
 * references). */
size_t kv_release(kv_cache *kv);
/* Layer l for the attention kernels. */
kv_view kv_layer(kv_cache *kv, int layer);
/* Stores M new rows for layer l at positions kv_len .. kv_len+M-1.
 * k and v are [M][n_kv_heads][head_dim] in f32, quantized per (row, head)
 * to the cache's storage. The length advances only with kv_commit, once
 * every layer has been written. */
void kv_store(kv_cache *kv, int layer, const float *k, const float *v, int M);
void kv_commit(kv_cache *kv, int M);
/* Makes dst hold src's positions [0, n): the same geometry and storage,
 * n at most src's length and dst's capacity; in one pool dst shares src's
 * pages (no copy), else the stored bits are copied, so dst then reads
 * exactly as src did there. 0, or -1 when the two do not
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
/* Zero-copy blocks for the prefix cache: block b is positions
 * [b * KV_PAGE, (b+1) * KV_PAGE), one page per layer. kv_pages_take gives
 * out[n_layers] the pages of a whole block (below kv_len, at or above
 * kv_kept_from) with a reference each; kv_pages_put makes such pages the
 * cache's block b (b * KV_PAGE at most kv_len: the cache is cut there
 * first), taking references of its own, and sets the length to the block's
 * end, so the cache then reads as the one they came from did. kv_pages_drop
 * gives n references back. Pages of another pool or geometry are refused.
 * 0, or -1 (nothing changed). */
int kv_pages_take(kv_cache *kv, int b, kv_page **out);
int kv_pages_put(kv_cache *kv, int b, kv_page *const *pages);
void kv_pages_drop(kv_page *const *pages, int n);
int kv_layers(const kv_cache *kv);

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
