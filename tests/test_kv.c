/* KV cache: store/commit/truncate bookkeeping and layout. */
#include <string.h>

#include "engine/kv.h"
#include "test.h"

TEST(kv_store_truncate) {
    kv_cache *kv;
    char err[256];
    CHECK(kv_create(&kv, 2, 3, 4, 10, 32, err, sizeof err) == 0);
    CHECK_EQ_INT(kv_len(kv), 0);
    CHECK_EQ_INT(kv_capacity(kv), 10);
    float k[2 * 3 * 4], v[2 * 3 * 4];
    for (int i = 0; i < 24; i++) k[i] = (float)i, v[i] = (float)(100 + i);
    for (int l = 0; l < 2; l++) kv_store(kv, l, k, v, 2);
    kv_commit(kv, 2);
    CHECK_EQ_INT(kv_len(kv), 2);
    /* layer 1, kv head 2, position 1 = row 1 head 2 of the input */
    const float *K = kv_k(kv, 1) + (2 * 10 + 1) * 4;
    const float *V = kv_v(kv, 1) + (2 * 10 + 1) * 4;
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
    CHECK_EQ_INT((int)kv_k(kv, 0)[(0 * 10 + 1) * 4], 100); /* overwritten at pos 1 */
    kv_free(kv);
    CHECK(kv_create(&kv, 0, 1, 1, 1, 32, err, sizeof err) != 0);
    kv_free(NULL);
}
