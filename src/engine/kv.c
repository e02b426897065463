/* kv: see kv.h. */
#include "engine/kv.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/util.h"

struct kv_cache {
    int n_layers, n_kv, hd, cap, len;
    size_t layer_floats; /* n_kv * cap * hd */
    float *mem;          /* [n_layers][2][n_kv][cap][hd], anonymous mmap */
    size_t mem_bytes;
};

size_t kv_bytes_per_pos(int n_layers, int n_kv_heads, int head_dim) {
    return (size_t)2 * (size_t)n_layers * (size_t)n_kv_heads * (size_t)head_dim * sizeof(float);
}

int kv_create(kv_cache **out, int n_layers, int n_kv_heads, int head_dim, int capacity, char *err,
              size_t errlen) {
    *out = NULL;
    if (n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0 || capacity <= 0)
        return ds_err(err, errlen, "kv cache: invalid shape (layers %d, kv heads %d, head_dim %d, capacity %d)",
                      n_layers, n_kv_heads, head_dim, capacity);
    size_t per = kv_bytes_per_pos(n_layers, n_kv_heads, head_dim);
    if ((size_t)capacity > (SIZE_MAX / 2) / per)
        return ds_err(err, errlen, "kv cache: capacity %d is too large", capacity);
    kv_cache *kv = xcalloc(1, sizeof *kv);
    kv->n_layers = n_layers;
    kv->n_kv = n_kv_heads;
    kv->hd = head_dim;
    kv->cap = capacity;
    kv->layer_floats = (size_t)n_kv_heads * (size_t)capacity * (size_t)head_dim;
    kv->mem_bytes = per * (size_t)capacity;
    /* Anonymous mapping: pages become resident only when written. */
    void *p = mmap(NULL, kv->mem_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        free(kv);
        return ds_err(err, errlen, "kv cache: cannot reserve %.1f MiB for %d positions",
                      (double)per * capacity / 1048576.0, capacity);
    }
    kv->mem = p;
    *out = kv;
    return 0;
}

void kv_free(kv_cache *kv) {
    if (!kv) return;
    munmap(kv->mem, kv->mem_bytes);
    free(kv);
}

int kv_len(const kv_cache *kv) { return kv->len; }
int kv_capacity(const kv_cache *kv) { return kv->cap; }

void kv_truncate(kv_cache *kv, int len) {
    if (len < 0) len = 0;
    if (len < kv->len) kv->len = len;
}

float *kv_k(kv_cache *kv, int layer) { return kv->mem + (size_t)layer * 2 * kv->layer_floats; }
float *kv_v(kv_cache *kv, int layer) { return kv_k(kv, layer) + kv->layer_floats; }

void kv_store(kv_cache *kv, int layer, const float *k, const float *v, int M) {
    float *K = kv_k(kv, layer), *V = kv_v(kv, layer);
    size_t hd = (size_t)kv->hd, cap = (size_t)kv->cap;
    for (int m = 0; m < M; m++) {
        size_t pos = (size_t)kv->len + (size_t)m;
        for (int h = 0; h < kv->n_kv; h++) {
            size_t src = ((size_t)m * (size_t)kv->n_kv + (size_t)h) * hd;
            size_t dst = ((size_t)h * cap + pos) * hd;
            memcpy(K + dst, k + src, hd * sizeof(float));
            memcpy(V + dst, v + src, hd * sizeof(float));
        }
    }
}

void kv_commit(kv_cache *kv, int M) { kv->len += M; }
