/* kv-share: what taking a cached prefix costs on the CPU, by reference
 * (the pages of one pool, engine/kv.h) against by copy (the stored bits
 * copied into another context, as a cache of another pool takes them and
 * as every prefix was taken before the caches were paged). One cache holds
 * N positions of a model's KV geometry; then, timed (best of REPS):
 *   slot copy    kv_copy_prefix into a context of another pool (a copy)
 *   slot share   kv_copy_prefix into a context of the same pool
 *   blocks copy  kv_save_rows of each 128-position block to host memory,
 *                then kv_load_rows of them into a fresh context (the
 *                prefix block cache's store and load by copy)
 *   blocks share kv_pages_take of each block, then kv_pages_put of them
 *                into a fresh context (the same by reference)
 * and the memory the pool holds with the two contexts and the blocks.
 *   build/kv-share LAYERS KV_HEADS HEAD_DIM BITS N [REPS]
 * (bench/build-tool.sh kv-share builds it.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "engine/kv.h"

static kv_cache *make(kv_pool *pool, int L, int nkv, int hd, int bits, int cap) {
    char err[256];
    kv_cache *kv;
    if (kv_create(&kv, pool, L, nkv, hd, cap, bits, err, sizeof err) != 0) {
        fprintf(stderr, "kv-share: %s\n", err);
        exit(1);
    }
    return kv;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: kv-share LAYERS KV_HEADS HEAD_DIM BITS N [REPS]\n");
        return 2;
    }
    const int L = atoi(argv[1]), nkv = atoi(argv[2]), hd = atoi(argv[3]), bits = atoi(argv[4]), N = atoi(argv[5]);
    const int reps = argc > 6 ? atoi(argv[6]) : 3, nb = N / KV_PAGE;
    if (L <= 0 || nkv <= 0 || hd <= 0 || !kv_bits_ok(bits) || nb <= 0 || reps <= 0) {
        fprintf(stderr, "kv-share: bad arguments\n");
        return 2;
    }
    kv_pool *pool = kv_pool_new(nkv, hd, bits);
    kv_cache *a = make(pool, L, nkv, hd, bits, N);
    float *k = xaligned(sizeof(float) * 256 * (size_t)nkv * (size_t)hd), *v = xaligned(sizeof(float) * 256 * (size_t)nkv * (size_t)hd);
    uint32_t s = 1;
    for (int t0 = 0; t0 < N; t0 += 256) {
        const int m = N - t0 < 256 ? N - t0 : 256;
        for (size_t i = 0; i < (size_t)m * (size_t)nkv * (size_t)hd; i++) {
            k[i] = ((s = s * 1664525u + 1013904223u) >> 9) * 0x1p-22f - 1.0f;
            v[i] = ((s = s * 1664525u + 1013904223u) >> 9) * 0x1p-22f - 1.0f;
        }
        for (int l = 0; l < L; l++) kv_store(a, l, k, v, m);
        kv_commit(a, m);
    }
    free(k), free(v);
    const size_t gb = kv_bytes_per_pos(L, nkv, hd, bits) * (size_t)N;
    printf("%d layers x %d KV heads x %d, --kv-bits %d, %d positions (%d blocks): %.2f GB of KV\n", L, nkv, hd, bits, N,
           nb, (double)gb / 1e9);
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    const size_t blk = kv_bytes_per_pos(L, nkv, hd, bits) * KV_PAGE;
    unsigned char *host = xmalloc(blk * (size_t)nb);
    kv_page **pages = xmalloc(sizeof *pages * (size_t)nb * (size_t)L);
    kv_pool_stats st;
    for (int r = 0; r < reps; r++) {
        kv_pool *other = kv_pool_new(nkv, hd, bits);
        kv_cache *c = make(other, L, nkv, hd, bits, N), *d = make(pool, L, nkv, hd, bits, N);
        double t = ds_now();
        if (kv_copy_prefix(c, a, N) != 0) return 1;
        best[0] = ds_now() - t < best[0] ? ds_now() - t : best[0];
        t = ds_now();
        if (kv_copy_prefix(d, a, N) != 0) return 1;
        best[1] = ds_now() - t < best[1] ? ds_now() - t : best[1];
        kv_free(c), kv_free(d);
        kv_pool_unref(other);
        /* the block cache: out of a and into a fresh context */
        kv_cache *e = make(pool, L, nkv, hd, bits, N), *f = make(pool, L, nkv, hd, bits, N);
        t = ds_now();
        for (int b = 0; b < nb; b++) kv_save_rows(a, b * KV_PAGE, KV_PAGE, host + blk * (size_t)b);
        for (int b = 0; b < nb; b++) kv_load_rows(e, b * KV_PAGE, KV_PAGE, host + blk * (size_t)b);
        best[2] = ds_now() - t < best[2] ? ds_now() - t : best[2];
        t = ds_now();
        for (int b = 0; b < nb; b++) kv_pages_take(a, b, pages + (size_t)b * (size_t)L);
        for (int b = 0; b < nb; b++) kv_pages_put(f, b, pages + (size_t)b * (size_t)L);
        best[3] = ds_now() - t < best[3] ? ds_now() - t : best[3];
        if (r == reps - 1) kv_pool_get_stats(pool, &st);
        for (int b = 0; b < nb; b++) kv_pages_drop(pages + (size_t)b * (size_t)L, L);
        kv_free(e), kv_free(f);
    }
    const char *what[4] = {"slot copy", "slot share", "blocks copy (store + load)", "blocks share (take + put)"};
    for (int i = 0; i < 4; i++) printf("%-28s %10.3f ms\n", what[i], best[i] * 1e3);
    printf("the pool, holding the source, a context loaded by copy and one by reference: %.2f GB (%lld pages, %lld "
           "shared)\n",
           (double)st.pages * (double)st.page_bytes / 1e9, (long long)st.pages, (long long)st.shared);
    free(host), free(pages);
    kv_free(a);
    kv_pool_unref(pool);
    return 0;
}
