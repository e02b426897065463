/* coll: the collectives' interface and its CPU emulation. See coll.h. */
#include "engine/coll.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

static int cpu_all_reduce_sum(coll *c, float *const *buf, size_t n, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    const int R = c->ranks;
    for (size_t i = 0; i < n; i++) {
        float s = buf[0][i];
        for (int r = 1; r < R; r++) s += buf[r][i]; /* rank order, one f32 rounding each */
        for (int r = 0; r < R; r++) buf[r][i] = s;
    }
    return 0;
}

static int cpu_all_gather(coll *c, const float *const *shard, int rows, const int *cols, float *const *out, size_t ldo,
                          char *err, size_t errlen) {
    const int R = c->ranks;
    size_t w = 0;
    for (int q = 0; q < R; q++) w += (size_t)cols[q];
    if (w > ldo) return ds_err(err, errlen, "all-gather: %zu columns into rows of %zu", w, ldo);
    for (int r = 0; r < R; r++) {
        if (!out[r]) continue;
        size_t off = 0;
        for (int q = 0; q < R; q++) {
            for (int i = 0; i < rows; i++)
                memcpy(out[r] + (size_t)i * ldo + off, shard[q] + (size_t)i * (size_t)cols[q],
                       sizeof(float) * (size_t)cols[q]);
            off += (size_t)cols[q];
        }
    }
    return 0;
}

static void cpu_free(coll *c) { free(c); }

static const coll_ops cpu_ops = {
    .name = "cpu",
    .all_reduce_sum = cpu_all_reduce_sum,
    .all_gather = cpu_all_gather,
    .free = cpu_free,
};

coll *coll_cpu_create(int ranks) {
    coll *c = xcalloc(1, sizeof *c);
    c->ops = &cpu_ops;
    c->ranks = ranks;
    return c;
}
