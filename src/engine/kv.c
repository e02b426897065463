/* kv: see kv.h. */
#include "engine/kv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/util.h"

/* Pages come from arenas of ARENA_BYTES (an anonymous mapping each, whose
   memory becomes resident only when written); a page nothing references
   goes on the free list and gives its memory back (MADV_DONTNEED: it reads
   as zeros when taken again). Arenas stay mapped until the pool goes. The
   arenas ask for transparent huge pages: a head's rows lie in a run a
   page, spread over the arena, and with 4 KiB pages the address
   translation of those scattered runs made the attention at 16k positions
   up to 1.5x slower (docs/BENCHMARKS.md); freeing a page splits its huge
   page, which is then the 4 KiB case again. */
#define ARENA_BYTES ((size_t)64 << 20)

struct kv_page {
    unsigned char *mem;
    kv_pool *pool;
    int ref; /* atomic */
};

typedef struct arena {
    struct arena *next;
    unsigned char *mem;
    size_t bytes;
    kv_page *pages;
} arena;

struct kv_pool {
    pthread_mutex_t mu;
    int n_kv, hd, bits, ref; /* ref atomic: the creator, caches, page references */
    size_t esize, page_bytes, half; /* half: one of K, V's elements in bytes */
    size_t soff;                    /* bits 8: the scales' offset in a page */
    arena *arenas;
    kv_page **free;
    int n_free, n_total; /* free holds up to n_total: every page of the arenas */
    int64_t used, shared; /* atomic */
    unsigned char *zeros; /* a page of zeros (read-only), for given-back rows */
};

struct kv_cache {
    kv_pool *pool;
    int n_layers, n_kv, hd, cap, len, bits, n_pages; /* n_pages: per layer, cap / KV_PAGE rounded up */
    int *window;        /* [n_layers]: sliding layers' windows (0: full), or NULL (none slides) */
    int max_window;     /* the largest of them */
    int released;       /* sliding layers' pages below it went back (a multiple of KV_PAGE) */
    kv_page **pg;       /* [n_layers][n_pages]; NULL: none (never written, or given back) */
    const void **kb, **vb;    /* [n_layers][n_pages]: the view's arrays (zeros where pg is NULL) */
    const float **ksb, **vsb; /* bits 8 */
};

int kv_bits_ok(int bits) { return bits == 32 || bits == 16 || bits == 8; }

size_t kv_bytes_per_pos(int n_layers, int n_kv_heads, int head_dim, int bits) {
    size_t per_head = bits == 8 ? (size_t)head_dim + sizeof(float) : (size_t)head_dim * (size_t)(bits / 8);
    return (size_t)2 * (size_t)n_layers * (size_t)n_kv_heads * per_head;
}

/* ---------------------------------------------------------------- pool */

size_t kv_page_bytes(int n_kv_heads, int head_dim, int bits) {
    /* whole system pages: MADV_DONTNEED on a freed page then never reaches
       into its neighbour (it rounds the length up to a system page) */
    const size_t b = kv_bytes_per_pos(1, n_kv_heads, head_dim, bits) * KV_PAGE, sys = (size_t)sysconf(_SC_PAGESIZE);
    return (b + sys - 1) / sys * sys;
}

kv_pool *kv_pool_new(int n_kv_heads, int head_dim, int bits) {
    kv_pool *p = xcalloc(1, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    p->n_kv = n_kv_heads;
    p->hd = head_dim;
    p->bits = bits;
    p->ref = 1;
    p->esize = (size_t)bits / 8;
    p->half = (size_t)n_kv_heads * KV_PAGE * (size_t)head_dim * p->esize;
    p->soff = 2 * p->half;
    p->page_bytes = kv_page_bytes(n_kv_heads, head_dim, bits);
    return p;
}

static void pool_ref(kv_pool *p) { __atomic_add_fetch(&p->ref, 1, __ATOMIC_RELAXED); }

void kv_pool_unref(kv_pool *p) {
    if (!p || __atomic_sub_fetch(&p->ref, 1, __ATOMIC_ACQ_REL)) return;
    for (arena *a = p->arenas, *n; a; a = n) {
        n = a->next;
        munmap(a->mem, a->bytes);
        free(a->pages);
        free(a);
    }
    if (p->zeros) munmap(p->zeros, p->page_bytes);
    free(p->free);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void kv_pool_get_stats(kv_pool *p, kv_pool_stats *st) {
    st->page_bytes = p->page_bytes;
    st->pages = __atomic_load_n(&p->used, __ATOMIC_RELAXED);
    st->shared = __atomic_load_n(&p->shared, __ATOMIC_RELAXED);
}

/* address space for pages; none left is out of memory, which aborts as
   xmalloc does */
static unsigned char *map_or_die(size_t bytes, int prot) {
    void *m = mmap(NULL, bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "dspark: out of memory (kv cache: cannot map %zu bytes)\n", bytes);
        abort();
    }
    return m;
}

/* a page of zeros (read-only), mapped once */
static const unsigned char *pool_zeros(kv_pool *p) {
    pthread_mutex_lock(&p->mu);
    if (!p->zeros) p->zeros = map_or_die(p->page_bytes, PROT_READ);
    pthread_mutex_unlock(&p->mu);
    return p->zeros;
}

/* a page with one reference; its rows read as zeros */
static kv_page *page_new(kv_pool *p) {
    pthread_mutex_lock(&p->mu);
    if (!p->n_free) {
        size_t n = ARENA_BYTES / p->page_bytes;
        if (n < 1) n = 1;
        arena *a = xcalloc(1, sizeof *a);
        a->bytes = n * p->page_bytes;
        a->mem = map_or_die(a->bytes, PROT_READ | PROT_WRITE);
        madvise(a->mem, a->bytes, MADV_HUGEPAGE);
        a->pages = xcalloc(n, sizeof *a->pages);
        a->next = p->arenas;
        p->arenas = a;
        p->n_total += (int)n;
        p->free = xrealloc(p->free, sizeof *p->free * (size_t)p->n_total);
        for (size_t i = n; i-- > 0;) {
            a->pages[i] = (kv_page){.mem = a->mem + i * p->page_bytes, .pool = p};
            p->free[p->n_free++] = &a->pages[i];
        }
    }
    kv_page *g = p->free[--p->n_free];
    pthread_mutex_unlock(&p->mu);
    g->ref = 1;
    __atomic_add_fetch(&p->used, 1, __ATOMIC_RELAXED);
    pool_ref(p);
    return g;
}

static void page_ref(kv_page *g) {
    if (__atomic_add_fetch(&g->ref, 1, __ATOMIC_ACQ_REL) == 2) __atomic_add_fetch(&g->pool->shared, 1, __ATOMIC_RELAXED);
}

/* drops a reference; returns 1 when that freed the page */
static int page_unref(kv_page *g) {
    if (!g) return 0;
    kv_pool *p = g->pool;
    int r = __atomic_sub_fetch(&g->ref, 1, __ATOMIC_ACQ_REL);
    if (r == 1) __atomic_sub_fetch(&p->shared, 1, __ATOMIC_RELAXED);
    if (r) return 0;
    madvise(g->mem, p->page_bytes, MADV_DONTNEED);
    __atomic_sub_fetch(&p->used, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&p->mu);
    p->free[p->n_free++] = g;
    pthread_mutex_unlock(&p->mu);
    kv_pool_unref(p);
    return 1;
}

/* ---------------------------------------------------------------- cache */

int kv_create(kv_cache **out, kv_pool *pool, int n_layers, int n_kv_heads, int head_dim, int capacity, int bits,
              char *err, size_t errlen) {
    *out = NULL;
    if (n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0 || capacity <= 0)
        return ds_err(err, errlen, "kv cache: invalid shape (layers %d, kv heads %d, head_dim %d, capacity %d)",
                      n_layers, n_kv_heads, head_dim, capacity);
    if (!kv_bits_ok(bits)) return ds_err(err, errlen, "kv cache: %d bits is not a storage (32, 16 or 8)", bits);
    if (pool && (pool->n_kv != n_kv_heads || pool->hd != head_dim || pool->bits != bits))
        return ds_err(err, errlen, "kv cache: its pool holds pages of another geometry");
    if (capacity > INT32_MAX - KV_PAGE) return ds_err(err, errlen, "kv cache: capacity %d is too large", capacity);
    kv_cache *kv = xcalloc(1, sizeof *kv);
    if (pool) pool_ref(pool);
    else pool = kv_pool_new(n_kv_heads, head_dim, bits);
    kv->pool = pool;
    kv->n_layers = n_layers;
    kv->n_kv = n_kv_heads;
    kv->hd = head_dim;
    kv->cap = capacity;
    kv->bits = bits;
    kv->n_pages = (capacity + KV_PAGE - 1) / KV_PAGE;
    const size_t n = (size_t)n_layers * (size_t)kv->n_pages;
    kv->pg = xcalloc(n, sizeof *kv->pg);
    kv->kb = xcalloc(n, sizeof *kv->kb);
    kv->vb = xcalloc(n, sizeof *kv->vb);
    if (bits == 8) kv->ksb = xcalloc(n, sizeof *kv->ksb), kv->vsb = xcalloc(n, sizeof *kv->vsb);
    const unsigned char *z = pool_zeros(pool);
    for (size_t i = 0; i < n; i++) {
        kv->kb[i] = z, kv->vb[i] = z;
        if (bits == 8) kv->ksb[i] = kv->vsb[i] = (const float *)(const void *)z;
    }
    *out = kv;
    return 0;
}

/* makes page j of layer l g (NULL: none), dropping the one it had */
static int set_page(kv_cache *kv, int l, int j, kv_page *g) {
    const size_t i = (size_t)l * (size_t)kv->n_pages + (size_t)j;
    kv_page *old = kv->pg[i];
    kv->pg[i] = g;
    const unsigned char *m = g ? g->mem : kv->pool->zeros;
    kv->kb[i] = m;
    kv->vb[i] = g ? m + kv->pool->half : m;
    if (kv->bits == 8) {
        kv->ksb[i] = (const float *)(const void *)(g ? m + kv->pool->soff : m);
        kv->vsb[i] = g ? kv->ksb[i] + (size_t)kv->n_kv * KV_PAGE : kv->ksb[i];
    }
    return page_unref(old);
}

static int drop_pages(kv_cache *kv) {
    int freed = 0;
    for (int l = 0; l < kv->n_layers; l++)
        for (int j = 0; j < kv->n_pages; j++) freed += set_page(kv, l, j, NULL);
    return freed;
}

void kv_free(kv_cache *kv) {
    if (!kv) return;
    drop_pages(kv);
    kv_pool_unref(kv->pool);
    free(kv->pg), free(kv->kb), free(kv->vb), free(kv->ksb), free(kv->vsb);
    free(kv->window);
    free(kv);
}

int kv_layers(const kv_cache *kv) { return kv->n_layers; }

void kv_set_windows(kv_cache *kv, const int *window) {
    int any = 0;
    for (int l = 0; l < kv->n_layers; l++) any |= window[l] > 0;
    if (!any) return;
    kv->window = xcalloc((size_t)kv->n_layers, sizeof(int));
    for (int l = 0; l < kv->n_layers; l++) {
        kv->window[l] = window[l] > 0 ? window[l] : 0;
        if (kv->window[l] > kv->max_window) kv->max_window = kv->window[l];
    }
}

int kv_kept_from(const kv_cache *kv) { return kv->released; }

size_t kv_bytes_resident(int n_layers, int n_kv_heads, int head_dim, int bits, const int *window, int n) {
    /* whole pages: a full layer those of n positions, a sliding one at
       most kv_window_pages */
    const size_t pb = kv_page_bytes(n_kv_heads, head_dim, bits);
    const int np = n > 0 ? (n + KV_PAGE - 1) / KV_PAGE : 0;
    size_t b = 0;
    for (int l = 0; l < n_layers; l++) {
        const int slide = window && window[l] > 0 ? kv_window_pages(window[l]) : 0;
        b += pb * (size_t)(slide && slide < np ? slide : np);
    }
    return b;
}

int kv_len(const kv_cache *kv) { return kv->len; }
int kv_capacity(const kv_cache *kv) { return kv->cap; }
int kv_bits(const kv_cache *kv) { return kv->bits; }

void kv_truncate(kv_cache *kv, int len) {
    if (len < 0) len = 0;
    if (len >= kv->len) return;
    if (kv->released && len < kv->released + kv->max_window) len = 0; /* the rows it would attend to are gone */
    kv->len = len;
    if (!len) kv->released = 0;
}

size_t kv_release(kv_cache *kv) {
    kv->len = 0;
    kv->released = 0;
    return (size_t)drop_pages(kv) * kv->pool->page_bytes;
}

/* page j of layer l, written only by this cache: taken when it has none,
   copied when it shares it (copy on write) */
static unsigned char *own_page(kv_cache *kv, int l, int j) {
    kv_page *g = kv->pg[(size_t)l * (size_t)kv->n_pages + (size_t)j];
    if (g && __atomic_load_n(&g->ref, __ATOMIC_ACQUIRE) == 1) return g->mem;
    kv_page *n = page_new(kv->pool);
    if (g) memcpy(n->mem, g->mem, kv->pool->page_bytes);
    set_page(kv, l, j, n);
    return n->mem;
}

/* The sliding layers' pages wholly behind `target` go back to the pool. */
static void drop_range(kv_cache *kv, int from, int target) {
    for (int l = 0; l < kv->n_layers; l++) {
        if (!kv->window[l]) continue;
        for (int j = from / KV_PAGE; j < target / KV_PAGE; j++) set_page(kv, l, j, NULL);
    }
}

static void drop_old(kv_cache *kv) {
    if (!kv->window) return;
    const int target = (kv->len - kv->max_window - KV_SLACK) / KV_PAGE * KV_PAGE;
    if (target - kv->released < KV_SLACK) return; /* (a few pages at a time) */
    drop_range(kv, kv->released, target);
    kv->released = target;
}

int kv_copy_prefix(kv_cache *dst, const kv_cache *src, int n) {
    if (dst == src || dst->n_layers != src->n_layers || dst->n_kv != src->n_kv || dst->hd != src->hd ||
        dst->bits != src->bits || n < 0 || n > src->len || n > dst->cap)
        return -1;
    if (src->released && n < src->released + src->max_window) return -1; /* rows position n attends to are gone */
    const int np = (n + KV_PAGE - 1) / KV_PAGE;
    dst->len = 0;
    for (int l = 0; l < src->n_layers; l++) {
        for (int j = 0; j < dst->n_pages; j++) {
            kv_page *g = j < np ? src->pg[(size_t)l * (size_t)src->n_pages + (size_t)j] : NULL;
            if (g && g->pool == dst->pool) { /* shared: the first write copies it */
                page_ref(g);
                set_page(dst, l, j, g);
            } else if (g) {
                kv_page *c = page_new(dst->pool);
                memcpy(c->mem, g->mem, dst->pool->page_bytes);
                set_page(dst, l, j, c);
            } else {
                set_page(dst, l, j, NULL); /* src gave it back, or beyond n */
            }
        }
    }
    dst->len = n;
    dst->released = src->released;
    drop_old(dst);
    return 0;
}

/* The rows of [pos0, pos0+n) between a cache and a packed buffer (see
   kv_save_rows); out: 1 cache -> buffer, 0 buffer -> cache (pages owned
   first). */
static void rows_xfer(kv_cache *kv, int pos0, int n, unsigned char *buf, int out) {
    const size_t row = (size_t)kv->hd * kv->pool->esize, nh = (size_t)kv->n_kv;
    const size_t nb = (size_t)kv->n_layers * 2 * nh;
    float *sc = (float *)(void *)(buf + nb * (size_t)n * row);
    for (int t = pos0; t < pos0 + n;) {
        const int j = t / KV_PAGE, o = t % KV_PAGE, c = KV_PAGE - o < pos0 + n - t ? KV_PAGE - o : pos0 + n - t;
        const size_t k = (size_t)(t - pos0);
        for (int l = 0; l < kv->n_layers; l++) {
            unsigned char *m = out ? (unsigned char *)kv->kb[(size_t)l * (size_t)kv->n_pages + (size_t)j]
                                   : own_page(kv, l, j);
            for (size_t w = 0; w < 2; w++)
                for (size_t h = 0; h < nh; h++) {
                    const size_t b = ((size_t)l * 2 + w) * nh + h, at = (w * nh + h) * KV_PAGE + (size_t)o;
                    unsigned char *pe = m + at * row, *be = buf + (b * (size_t)n + k) * row;
                    memcpy(out ? be : pe, out ? pe : be, (size_t)c * row);
                    if (kv->bits != 8) continue;
                    float *ps = (float *)(void *)(m + kv->pool->soff) + at, *bs = sc + b * (size_t)n + k;
                    memcpy(out ? bs : ps, out ? ps : bs, sizeof(float) * (size_t)c);
                }
        }
        t += c;
    }
}

int kv_save_rows(const kv_cache *kv, int pos0, int n, void *out) {
    if (pos0 < 0 || n < 0 || pos0 + n > kv->len || pos0 < kv->released) return -1;
    if (n) rows_xfer((kv_cache *)kv, pos0, n, out, 1);
    return 0;
}

int kv_load_rows(kv_cache *kv, int pos0, int n, const void *in) {
    if (pos0 < 0 || n < 0 || pos0 > kv->len || n > kv->cap - pos0) return -1;
    if (pos0 && kv->released && pos0 < kv->released + kv->max_window) return -1;
    if (!pos0) kv->released = 0;
    if (n) rows_xfer(kv, pos0, n, (unsigned char *)in, 0);
    kv->len = pos0 + n;
    drop_old(kv);
    return 0;
}

int kv_pages_take(kv_cache *kv, int b, kv_page **out) {
    if (b < 0 || (b + 1) * KV_PAGE > kv->len || b * KV_PAGE < kv->released) return -1;
    for (int l = 0; l < kv->n_layers; l++) {
        kv_page *g = kv->pg[(size_t)l * (size_t)kv->n_pages + (size_t)b];
        if (!g) { /* (never: a written position has its page) */
            kv_pages_drop(out, l);
            return -1;
        }
        page_ref(g);
        out[l] = g;
    }
    return 0;
}

int kv_pages_put(kv_cache *kv, int b, kv_page *const *pages) {
    const int pos0 = b * KV_PAGE;
    if (b < 0 || pos0 > kv->len || b >= kv->n_pages || (b + 1) * KV_PAGE > kv->cap) return -1;
    if (pos0 && kv->released && pos0 < kv->released + kv->max_window) return -1;
    for (int l = 0; l < kv->n_layers; l++)
        if (!pages[l] || pages[l]->pool != kv->pool) return -1;
    if (!pos0) kv->released = 0;
    for (int l = 0; l < kv->n_layers; l++) {
        page_ref(pages[l]);
        set_page(kv, l, b, pages[l]);
    }
    kv->len = pos0 + KV_PAGE;
    drop_old(kv);
    return 0;
}

void kv_pages_drop(kv_page *const *pages, int n) {
    for (int i = 0; i < n; i++) page_unref(pages[i]);
}

kv_view kv_layer(kv_cache *kv, int layer) {
    const size_t i = (size_t)layer * (size_t)kv->n_pages;
    kv_view w = {.bits = kv->bits, .k = kv->kb + i, .v = kv->vb + i, .plen = KV_PAGE, .shift = KV_PAGE_SHIFT};
    if (kv->bits == 8) w.ks = kv->ksb + i, w.vs = kv->vsb + i;
    return w;
}

void kv_quant_i8(const float *x, int n, int8_t *q, float *scale) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    if (!(amax > 0.0f) || !isfinite(amax)) { /* zeros (or a non-finite row: kept as zeros, never NaN codes) */
        memset(q, 0, (size_t)n);
        *scale = 0.0f;
        return;
    }
    const float inv = 127.0f / amax;
    for (int i = 0; i < n; i++) {
        float r = rintf(x[i] * inv); /* |x * inv| <= 127 up to rounding */
        q[i] = (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r);
    }
    *scale = amax / 127.0f;
}

void kv_quant_f16(const float *x, int n, uint16_t *q) {
    for (int i = 0; i < n; i++) {
        float v = x[i];
        if (v > 65504.0f) v = 65504.0f; /* saturate: an outlier never becomes inf */
        if (v < -65504.0f) v = -65504.0f;
        q[i] = ds_f32_to_f16(v);
    }
}

void kv_dequant_i8(const int8_t *q, float scale, int n, float *x) {
    for (int i = 0; i < n; i++) x[i] = (float)q[i] * scale;
}

void kv_dequant_f16(const uint16_t *q, int n, float *x) {
    for (int i = 0; i < n; i++) x[i] = ds_f16_to_f32(q[i]);
}

void kv_store(kv_cache *kv, int layer, const float *k, const float *v, int M) {
    const size_t hd = (size_t)kv->hd, nh = (size_t)kv->n_kv, es = kv->pool->esize;
    unsigned char *m = NULL;
    for (int i = 0; i < M; i++) {
        const int pos = kv->len + i, o = pos % KV_PAGE;
        if (!m || !o) m = own_page(kv, layer, pos / KV_PAGE);
        for (size_t w = 0; w < 2; w++) {
            const float *src = w ? v : k;
            for (size_t h = 0; h < nh; h++) {
                const float *x = src + ((size_t)i * nh + h) * hd;
                const size_t at = (w * nh + h) * KV_PAGE + (size_t)o;
                unsigned char *d = m + at * hd * es;
                if (kv->bits == 32) memcpy(d, x, hd * sizeof(float));
                else if (kv->bits == 16) kv_quant_f16(x, (int)hd, (uint16_t *)(void *)d);
                else kv_quant_i8(x, (int)hd, (int8_t *)d, (float *)(void *)(m + kv->pool->soff) + at);
            }
        }
    }
}

void kv_commit(kv_cache *kv, int M) {
    kv->len += M;
    drop_old(kv);
}
