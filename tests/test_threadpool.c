/* Tests for the thread pool: every thread index runs exactly once per
 * tp_run, many back-to-back runs (the decode pattern), runs after the
 * workers have gone to sleep, a NULL pool, and tp_range's partition. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/cpu.h"
#include "test.h"
#include "engine/threadpool.h"

typedef struct {
    atomic_int calls[8];
    atomic_int bad_nth;
    int expect_nth;
} count_ctx;

static void count_fn(void *p, int ith, int nth) {
    count_ctx *c = p;
    if (nth != c->expect_nth || ith < 0 || ith >= nth || ith >= 8) {
        atomic_fetch_add(&c->bad_nth, 1);
        return;
    }
    atomic_fetch_add(&c->calls[ith], 1);
}

TEST(tp_null_pool_runs_on_caller) {
    count_ctx c;
    memset(&c, 0, sizeof c);
    c.expect_nth = 1;
    tp_run(NULL, count_fn, &c);
    CHECK_EQ_INT(atomic_load(&c.calls[0]), 1);
    CHECK_EQ_INT(atomic_load(&c.bad_nth), 0);
    CHECK_EQ_INT(tp_size(NULL), 1);
}

TEST(tp_each_thread_once_per_run) {
    for (int n = 1; n <= 4; n++) {
        tpool *tp = tp_create(n);
        CHECK_EQ_INT(tp_size(tp), n);
        count_ctx c;
        memset(&c, 0, sizeof c);
        c.expect_nth = n;
        /* fewer runs when oversubscribed: each then waits for a core */
        int runs = n <= cpu_count() ? 20000 : 2000;
        for (int r = 0; r < runs; r++) tp_run(tp, count_fn, &c);
        CHECK_EQ_INT(atomic_load(&c.bad_nth), 0);
        for (int i = 0; i < n; i++) CHECK_EQ_INT(atomic_load(&c.calls[i]), runs);
        tp_free(tp);
    }
}

TEST(tp_default_size_is_cpu_count) {
    tpool *tp = tp_create(0);
    CHECK_EQ_INT(tp_size(tp), cpu_count());
    tp_free(tp);
    tp_free(NULL);
}

/* each thread fills its range with a value derived from the run number;
 * after tp_run returns, the caller must see every write (release/acquire
 * through the pool, no extra synchronisation) */
typedef struct {
    int *a;
    int n;
    int run;
} fill_ctx;

static void fill_fn(void *p, int ith, int nth) {
    fill_ctx *c = p;
    int lo, hi;
    tp_range(c->n, ith, nth, &lo, &hi);
    for (int i = lo; i < hi; i++) c->a[i] = c->run * 7 + i;
}

TEST(tp_results_visible_after_run) {
    for (int n = 2; n <= 4; n++) {
        tpool *tp = tp_create(n);
        fill_ctx c = {.n = 1001};
        c.a = calloc((size_t)c.n, sizeof(int));
        int bad = 0;
        for (int r = 0; r < 3000; r++) {
            c.run = r;
            tp_run(tp, fill_fn, &c);
            for (int i = 0; i < c.n; i++) bad += c.a[i] != r * 7 + i;
        }
        CHECK_EQ_INT(bad, 0);
        free(c.a);
        tp_free(tp);
    }
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

TEST(tp_wakes_sleeping_workers) {
    tpool *tp = tp_create(3);
    count_ctx c;
    memset(&c, 0, sizeof c);
    c.expect_nth = 3;
    /* gaps longer than the spin phase, so the workers are asleep each time,
     * and short gaps around the spin/sleep boundary */
    int gaps[] = {10, 1, 3, 0, 2, 5, 0, 1, 2, 4, 20, 0};
    int runs = 0;
    for (size_t i = 0; i < sizeof gaps / sizeof gaps[0]; i++) {
        sleep_ms(gaps[i]);
        tp_run(tp, count_fn, &c);
        runs++;
    }
    CHECK_EQ_INT(atomic_load(&c.bad_nth), 0);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(atomic_load(&c.calls[i]), runs);
    tp_free(tp);
}

TEST(tp_create_free_repeatedly) {
    for (int i = 0; i < 50; i++) {
        tpool *tp = tp_create(1 + i % 4);
        if (i % 2) {
            count_ctx c;
            memset(&c, 0, sizeof c);
            c.expect_nth = 1 + i % 4;
            tp_run(tp, count_fn, &c);
            CHECK_EQ_INT(atomic_load(&c.calls[0]), 1);
        }
        tp_free(tp);
    }
}

TEST(tp_range_partition) {
    int ns[] = {0, 1, 2, 7, 64, 1000, 1023};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        for (int nth = 1; nth <= 9; nth++) {
            int n = ns[a], prev = 0, mn = n + 1, mx = -1;
            for (int i = 0; i < nth; i++) {
                int lo, hi;
                tp_range(n, i, nth, &lo, &hi);
                CHECK_EQ_INT(lo, prev);
                CHECK(hi >= lo);
                if (hi - lo < mn) mn = hi - lo;
                if (hi - lo > mx) mx = hi - lo;
                prev = hi;
            }
            CHECK_EQ_INT(prev, n);
            CHECK(mx - mn <= 1);
        }
    }
}
