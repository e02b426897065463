/* kv: see kv.h. */
#include "engine/kv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>

#include "base/util.h"

struct kv_cache {
    int n_layers, n_kv, hd, cap, len, bits, hi; /* hi: positions ever stored (for kv_release) */
    int *window;        /* [n_layers]: sliding layers' windows (0: full), or NULL (none slides) */
    int max_window;     /* the largest of them */
    int released;       /* sliding layers' rows below it gave their pages back */
    size_t esize;       /* bytes per element: 4, 2 or 1 */
    size_t layer_elems; /* n_kv * cap * hd */
    unsigned char *mem; /* [n_layers][2][n_kv][cap][hd] elements, then (bits 8)
                           scales [n_layers][2][n_kv][cap] f32; anonymous mmap */
    float *scales;
    size_t mem_bytes;
};

int kv_bits_ok(int bits) { return bits == 32 || bits == 16 || bits == 8; }

size_t kv_bytes_per_pos(int n_layers, int n_kv_heads, int head_dim, int bits) {
    size_t per_head = bits == 8 ? (size_t)head_dim + sizeof(float) : (size_t)head_dim * (size_t)(bits / 8);
    return (size_t)2 * (size_t)n_layers * (size_t)n_kv_heads * per_head;
}

int kv_create(kv_cache **out, int n_layers, int n_kv_heads, int head_dim, int capacity, int bits, char *err,
              size_t errlen) {
    *out = NULL;
    if (n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0 || capacity <= 0)
        return ds_err(err, errlen, "kv cache: invalid shape (layers %d, kv heads %d, head_dim %d, capacity %d)",
                      n_layers, n_kv_heads, head_dim, capacity);
    if (!kv_bits_ok(bits)) return ds_err(err, errlen, "kv cache: %d bits is not a storage (32, 16 or 8)", bits);
    size_t per = kv_bytes_per_pos(n_layers, n_kv_heads, head_dim, bits);
    if ((size_t)capacity > (SIZE_MAX / 2) / per)
        return ds_err(err, errlen, "kv cache: capacity %d is too large", capacity);
    kv_cache *kv = xcalloc(1, sizeof *kv);
    kv->n_layers = n_layers;
    kv->n_kv = n_kv_heads;
    kv->hd = head_dim;
    kv->cap = capacity;
    kv->bits = bits;
    kv->esize = (size_t)bits / 8;
    kv->layer_elems = (size_t)n_kv_heads * (size_t)capacity * (size_t)head_dim;
    size_t ebytes = (size_t)n_layers * 2 * kv->layer_elems * kv->esize;
    ebytes = (ebytes + 63) & ~(size_t)63; /* the scales start aligned */
    kv->mem_bytes = ebytes + (bits == 8 ? (size_t)n_layers * 2 * (size_t)n_kv_heads * (size_t)capacity * 4 : 0);
    /* Anonymous mapping: pages become resident only when written. */
    void *p = mmap(NULL, kv->mem_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        free(kv);
        return ds_err(err, errlen, "kv cache: cannot reserve %.1f MiB for %d positions",
                      (double)per * capacity / 1048576.0, capacity);
    }
    kv->mem = p;
    if (bits == 8) kv->scales = (float *)(void *)(kv->mem + ebytes);
    *out = kv;
    return 0;
}

void kv_free(kv_cache *kv) {
    if (!kv) return;
    munmap(kv->mem, kv->mem_bytes);
    free(kv->window);
    free(kv);
}

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
    size_t per_layer = kv_bytes_per_pos(1, n_kv_heads, head_dim, bits), b = 0;
    for (int l = 0; l < n_layers; l++) {
        const int keep = window && window[l] > 0 && window[l] + 2 * KV_SLACK < n ? window[l] + 2 * KV_SLACK : n;
        b += per_layer * (size_t)(keep > 0 ? keep : 0);
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
    size_t touched = kv_bytes_per_pos(kv->n_layers, kv->n_kv, kv->hd, kv->bits) * (size_t)kv->hi;
    kv->len = 0;
    kv->hi = 0;
    kv->released = 0;
    /* the pages read back as zeros when touched again */
    madvise(kv->mem, kv->mem_bytes, MADV_DONTNEED);
    return touched;
}

static unsigned char *elems(kv_cache *kv, int layer, int which) {
    return kv->mem + ((size_t)layer * 2 + (size_t)which) * kv->layer_elems * kv->esize;
}
static float *scales(kv_cache *kv, int layer, int which) {
    return kv->scales + ((size_t)layer * 2 + (size_t)which) * (size_t)kv->n_kv * (size_t)kv->cap;
}

/* The sliding layers' rows of positions that fell behind their windows
   give their pages back (whole pages inside each head's run of rows). */
static void drop_range(kv_cache *kv, int from, int target) {
    const size_t row = (size_t)kv->hd * kv->esize, pg = 4096;
    for (int l = 0; l < kv->n_layers; l++) {
        if (!kv->window[l]) continue;
        for (int w = 0; w < 2; w++)
            for (int h = 0; h < kv->n_kv; h++) {
                unsigned char *base = kv->mem + (((size_t)l * 2 + (size_t)w) * (size_t)kv->n_kv + (size_t)h) *
                                                    (size_t)kv->cap * row;
                uintptr_t a = (uintptr_t)(base + (size_t)from * row), b = (uintptr_t)(base + (size_t)target * row);
                a = (a + pg - 1) & ~(uintptr_t)(pg - 1);
                b &= ~(uintptr_t)(pg - 1);
                if (b > a) madvise((void *)a, (size_t)(b - a), MADV_DONTNEED);
            }
    }
}

static void drop_old(kv_cache *kv) {
    if (!kv->window) return;
    const int target = kv->len - kv->max_window - KV_SLACK;
    if (target - kv->released < KV_SLACK) return; /* (a few pages at a time) */
    drop_range(kv, kv->released, target);
    kv->released = target;
}

int kv_copy_prefix(kv_cache *dst, const kv_cache *src, int n) {
    if (dst == src || dst->n_layers != src->n_layers || dst->n_kv != src->n_kv || dst->hd != src->hd ||
        dst->bits != src->bits || n < 0 || n > src->len || n > dst->cap)
        return -1;
    if (src->released && n < src->released + src->max_window) return -1; /* rows position n attends to are gone */
    const size_t row = (size_t)src->hd * src->esize;
    for (int l = 0; l < src->n_layers; l++)
        for (int w = 0; w < 2; w++) {
            unsigned char *d = elems(dst, l, w);
            const unsigned char *s = elems((kv_cache *)src, l, w);
            for (int h = 0; h < src->n_kv; h++) /* head h's rows: [cap][hd] each */
                memcpy(d + (size_t)h * (size_t)dst->cap * row, s + (size_t)h * (size_t)src->cap * row, (size_t)n * row);
            if (src->bits == 8) {
                float *ds = scales(dst, l, w);
                const float *ss = scales((kv_cache *)src, l, w);
                for (int h = 0; h < src->n_kv; h++)
                    memcpy(ds + (size_t)h * (size_t)dst->cap, ss + (size_t)h * (size_t)src->cap, sizeof(float) * (size_t)n);
            }
        }
    dst->len = n;
    if (dst->hi < n) dst->hi = n;
    /* src's given-back rows came over as zeros: dst gives them back too */
    dst->released = 0;
    if (src->released && dst->window) drop_range(dst, 0, src->released);
    dst->released = src->released;
    drop_old(dst);
    return 0;
}

/* The rows of [pos0, pos0+n) between a cache and a packed buffer (see
   kv_save_rows); out: 1 cache -> buffer, 0 buffer -> cache. */
static void rows_xfer(kv_cache *kv, int pos0, int n, unsigned char *buf, int out) {
    const size_t row = (size_t)kv->hd * kv->esize, nb = (size_t)kv->n_layers * 2 * (size_t)kv->n_kv;
    for (size_t b = 0; b < nb; b++) {
        unsigned char *c = kv->mem + (b * (size_t)kv->cap + (size_t)pos0) * row, *p = buf + b * (size_t)n * row;
        memcpy(out ? p : c, out ? c : p, (size_t)n * row);
    }
    if (kv->bits != 8) return;
    float *sc = (float *)(void *)(buf + nb * (size_t)n * row);
    for (size_t b = 0; b < nb; b++) {
        float *c = kv->scales + b * (size_t)kv->cap + pos0, *p = sc + b * (size_t)n;
        memcpy(out ? p : c, out ? c : p, sizeof(float) * (size_t)n);
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
    if (kv->hi < kv->len) kv->hi = kv->len;
    drop_old(kv);
    return 0;
}

kv_view kv_layer(kv_cache *kv, int layer) {
    kv_view w = {.bits = kv->bits, .k = elems(kv, layer, 0), .v = elems(kv, layer, 1), .stride = kv->cap};
    if (kv->bits == 8) w.ks = scales(kv, layer, 0), w.vs = scales(kv, layer, 1);
    return w;
}

float *kv_k(kv_cache *kv, int layer) { return kv->bits == 32 ? (float *)(void *)elems(kv, layer, 0) : NULL; }
float *kv_v(kv_cache *kv, int layer) { return kv->bits == 32 ? (float *)(void *)elems(kv, layer, 1) : NULL; }

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
    size_t hd = (size_t)kv->hd, cap = (size_t)kv->cap;
    for (int w = 0; w < 2; w++) {
        unsigned char *dst = elems(kv, layer, w);
        float *sc = kv->bits == 8 ? scales(kv, layer, w) : NULL;
        const float *src = w ? v : k;
        for (int m = 0; m < M; m++) {
            size_t pos = (size_t)kv->len + (size_t)m;
            for (int h = 0; h < kv->n_kv; h++) {
                const float *x = src + ((size_t)m * (size_t)kv->n_kv + (size_t)h) * hd;
                size_t at = (size_t)h * cap + pos;
                if (kv->bits == 32) memcpy(dst + at * hd * 4, x, hd * sizeof(float));
                else if (kv->bits == 16) kv_quant_f16(x, (int)hd, (uint16_t *)(void *)(dst + at * hd * 2));
                else kv_quant_i8(x, (int)hd, (int8_t *)(dst + at * hd), sc + at);
            }
        }
    }
    if (kv->len + M > kv->hi) kv->hi = kv->len + M;
}

void kv_commit(kv_cache *kv, int M) {
    kv->len += M;
    drop_old(kv);
}
