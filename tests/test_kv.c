/* KV cache: store/commit/truncate bookkeeping and layout. */
#include <string.h>

#include "engine/kv.h"
#include "test.h"

TEST(kv_store_truncate) {
    kv_cache *kv;
    char err[256];
    CHECK(kv_create(&kv, NULL, 2, 3, 4, 10, 32, err, sizeof err) == 0);
    CHECK_EQ_INT(kv_len(kv), 0);
    CHECK_EQ_INT(kv_capacity(kv), 10);
    float k[2 * 3 * 4], v[2 * 3 * 4];
    for (int i = 0; i < 24; i++) k[i] = (float)i, v[i] = (float)(100 + i);
    for (int l = 0; l < 2; l++) kv_store(kv, l, k, v, 2);
    kv_commit(kv, 2);
    CHECK_EQ_INT(kv_len(kv), 2);
    /* layer 1, kv head 2, position 1 = row 1 head 2 of the input */
    kv_view w1 = kv_layer(kv, 1), w0 = kv_layer(kv, 0);
    const float *K = kv_view_row(&w1, 0, 2, 1, 4), *V = kv_view_row(&w1, 1, 2, 1, 4);
    for (int d = 0; d < 4; d++) {
        CHECK_EQ_INT((int)K[d], (1 * 3 + 2) * 4 + d);
        CHECK_EQ_INT((int)V[d], 100 + (1 * 3 + 2) * 4 + d);
    }
    kv_truncate(kv, 1);
    CHECK_EQ_INT(kv_len(kv), 1);
    kv_truncate(kv, 5); /* never grows */
    CHECK_EQ_INT(kv_len(kv), 1);
    for (int l = 0; l < 2; l++) kv_store(kv, l, v, k, 1);
    kv_commit(kv, 1);
    CHECK_EQ_INT((int)((const float *)kv_view_row(&w0, 0, 0, 1, 4))[0], 100); /* overwritten at pos 1 */
    kv_free(kv);
    CHECK(kv_create(&kv, NULL, 0, 1, 1, 1, 32, err, sizeof err) != 0);
    kv_free(NULL);
}

/* rows of positions [0, n) of layer l, K then V, as stored */
static int same_rows(kv_cache *a, kv_cache *b, int n) {
    for (int l = 0; l < kv_layers(a); l++) {
        kv_view wa = kv_layer(a, l), wb = kv_layer(b, l);
        for (int w = 0; w < 2; w++)
            for (int g = 0; g < 2; g++)
                for (int t = 0; t < n; t++)
                    if (memcmp(kv_view_row(&wa, w, g, t, 8), kv_view_row(&wb, w, g, t, 8), 8 * sizeof(float)))
                        return 0;
    }
    return 1;
}

static void fill(kv_cache *kv, int n, float base) {
    float k[2 * 8], v[2 * 8];
    for (int p = 0; p < n; p++) {
        for (int i = 0; i < 16; i++) k[i] = base + (float)(kv_len(kv) * 16 + i), v[i] = -k[i];
        for (int l = 0; l < kv_layers(kv); l++) kv_store(kv, l, k, v, 1);
        kv_commit(kv, 1);
    }
}

/* Pages: caches of one pool share a prefix's pages, a write into a shared
   page copies it first (the other cache reads what it did), the prefix
   cache's blocks go out and back in by reference, another pool's cache
   takes copies, and pages nothing holds go back. */
TEST(kv_pages_shared) {
    char err[256];
    kv_pool *pool = kv_pool_new(2, 8, 32);
    kv_cache *a, *b, *c, *d;
    CHECK(kv_create(&a, pool, 3, 2, 8, 1000, 32, err, sizeof err) == 0);
    CHECK(kv_create(&b, pool, 3, 2, 8, 1000, 32, err, sizeof err) == 0);
    CHECK(kv_create(&c, pool, 3, 2, 8, 1000, 32, err, sizeof err) == 0);
    CHECK(kv_create(&d, pool, 3, 2, 16, 1000, 32, err, sizeof err) != 0 && strstr(err, "geometry"));
    CHECK(kv_create(&d, NULL, 3, 2, 8, 1000, 32, err, sizeof err) == 0); /* a pool of its own */
    kv_pool_stats st;
    fill(a, 300, 0.0f); /* pages 0, 1, 2 of each layer */
    kv_pool_get_stats(pool, &st);
    CHECK(st.pages == 9 && st.shared == 0 && st.page_bytes == 2 * 2 * KV_PAGE * 8 * 4);
    /* b takes 260 positions: the pages are a's */
    CHECK(kv_copy_prefix(b, a, 260) == 0 && kv_len(b) == 260 && same_rows(a, b, 260));
    kv_pool_get_stats(pool, &st);
    CHECK(st.pages == 9 && st.shared == 9);
    /* b writes position 260 (in page 2): its own copy of page 2 */
    fill(b, 5, 5000.0f);
    kv_pool_get_stats(pool, &st);
    CHECK(st.pages == 12 && st.shared == 6);
    CHECK(same_rows(a, b, 260) && !same_rows(a, b, 265));
    kv_view wa = kv_layer(a, 2);
    CHECK(((const float *)kv_view_row(&wa, 0, 1, 262, 8))[3] == (float)(262 * 16 + 8 + 3)); /* a's row as it was */
    /* a block out and into c, by reference */
    kv_page *pg[3];
    CHECK(kv_pages_take(a, 2, pg) != 0); /* positions 256..383: not whole in a */
    CHECK(kv_pages_take(a, 1, pg) == 0);
    CHECK(kv_pages_put(c, 1, pg) != 0); /* c holds nothing yet: block 1 does not follow */
    kv_page *p0[3];
    CHECK(kv_pages_take(a, 0, p0) == 0);
    CHECK(kv_pages_put(c, 0, p0) == 0 && kv_pages_put(c, 1, pg) == 0 && kv_len(c) == 2 * KV_PAGE);
    CHECK(same_rows(a, c, 2 * KV_PAGE));
    CHECK(kv_pages_put(d, 0, p0) != 0); /* another pool's */
    kv_pages_drop(p0, 3);
    kv_pages_drop(pg, 3);
    kv_pool_get_stats(pool, &st);
    CHECK(st.pages == 12);
    /* another pool: a copy */
    CHECK(kv_copy_prefix(d, a, 300) == 0 && same_rows(a, d, 300));
    kv_pool_get_stats(pool, &st);
    CHECK(st.pages == 12);
    /* a goes: b and c keep the pages they share with it, the rest go back */
    CHECK(kv_release(a) == 1 * 3 * st.page_bytes); /* (page 2: a's alone) */
    kv_pool_get_stats(pool, &st);
    CHECK(st.pages == 9 && st.shared == 6); /* b's pages 0, 1 (with c), b's page 2 */
    kv_free(a), kv_free(b), kv_free(c), kv_free(d);
    kv_pool_get_stats(pool, &st);
    CHECK(st.pages == 0 && st.shared == 0);
    kv_pool_unref(pool);
}

/* A sliding layer gives whole pages back once they fall behind its window
   and the slack; the full layers keep every page. */
TEST(kv_pages_window) {
    char err[256];
    kv_pool *pool = kv_pool_new(2, 8, 32);
    kv_cache *a;
    CHECK(kv_create(&a, pool, 2, 2, 8, 4000, 32, err, sizeof err) == 0);
    const int win[2] = {100, 0};
    kv_set_windows(a, win);
    fill(a, 3000, 0.0f);
    kv_pool_stats st;
    kv_pool_get_stats(pool, &st);
    const int full = (3000 + KV_PAGE - 1) / KV_PAGE;
    CHECK(kv_kept_from(a) > 0 && kv_kept_from(a) % KV_PAGE == 0);
    CHECK(kv_kept_from(a) >= 3000 - 100 - 2 * KV_SLACK - KV_PAGE);
    CHECK_EQ_INT((int)st.pages, full + full - kv_kept_from(a) / KV_PAGE);
    CHECK((size_t)st.pages * st.page_bytes <= kv_bytes_resident(2, 2, 8, 32, win, 3000));
    /* the window's rows read as stored */
    kv_view w = kv_layer(a, 0);
    CHECK(((const float *)kv_view_row(&w, 1, 0, 2950, 8))[2] == -(float)(2950 * 16 + 2));
    kv_free(a);
    kv_pool_unref(pool);
}
