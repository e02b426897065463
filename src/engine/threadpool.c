/* threadpool: persistent workers for the CPU kernels (see threadpool.h).
 *
 * Decode calls tp_run a couple of hundred times per token, each run lasting
 * tens to hundreds of microseconds, so dispatch must cost well under a
 * microsecond. The protocol:
 *
 *   caller                              worker i (1 <= i < n)
 *   fn, ctx = ...   (plain stores)      spin: load_acquire(gen) != seen ?
 *   pending = n - 1                       (after ~TP_SPIN_NS: sleep on cv)
 *   gen += 1        (seq_cst)           fn(ctx, i, n)
 *   if sleepers: broadcast cv           pending -= 1   (release)
 *   fn(ctx, 0, n)
 *   spin until load_acquire(pending) == 0
 *
 * fn/ctx are published by the release in `gen += 1` and read after the
 * acquire that observes it; the caller rewrites them only after every
 * worker's release decrement of `pending`, so there is no data race.
 * Sleeping uses a mutex + condvar with a sleeper count. The lost-wakeup
 * race is closed by the Dekker pattern over two seq_cst operations: the
 * worker increments `sleepers` then rereads `gen` (under the mutex); the
 * caller increments `gen` then reads `sleepers`. At least one of them sees
 * the other's write, and a caller that sees a sleeper takes the mutex, so
 * the broadcast cannot fall between the worker's check and its wait. */
#include "engine/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/cpu.h"
#include "base/util.h"

/* How long an idle worker spins before it sleeps. Long enough to cover the
 * serial gaps between ops of one token (and between tokens), short enough
 * that an idle server does not burn a core for long. */
#define TP_SPIN_NS 2000000LL
#define TP_YIELD_NS 50000LL

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

typedef struct {
    struct tpool *tp;
    int ith;
} worker_arg;

struct tpool {
    int n;
    pthread_t *threads;  /* [n-1] */
    worker_arg *args;    /* [n-1] */
    /* each hot atomic on its own cache line, so spinning readers of one do
     * not slow down writers of another */
    _Alignas(64) atomic_uint gen; /* bumped once per tp_run (and by tp_free) */
    _Alignas(64) atomic_int pending; /* workers still running the current fn */
    _Alignas(64) atomic_int sleepers; /* workers blocked (or about to) on cv */
    atomic_int stop;
    tp_fn fn;  /* the current job; see the protocol above */
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void *worker_main(void *p) {
    worker_arg *a = p;
    tpool *tp = a->tp;
    unsigned seen = 0; /* gen starts at 0 and the pool is built before any run */
    for (;;) {
        unsigned g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        if (g == seen) {
            long long t0 = now_ns();
            for (int it = 1;; it++) {
                cpu_relax();
                g = atomic_load_explicit(&tp->gen, memory_order_acquire);
                if (g != seen) break;
                if ((it & 63) == 0) {
                    long long dt = now_ns() - t0;
                    if (dt > TP_SPIN_NS) break;
                    /* past the usual gap between two ops, let a thread that
                     * has work run (more threads than free cores); not
                     * sooner: the syscall delays our reaction to `gen` */
                    if (dt > TP_YIELD_NS) sched_yield();
                }
            }
        }
        if (g == seen) {
            pthread_mutex_lock(&tp->mu);
            atomic_fetch_add(&tp->sleepers, 1); /* seq_cst: see the header comment */
            while ((g = atomic_load(&tp->gen)) == seen) pthread_cond_wait(&tp->cv, &tp->mu);
            atomic_fetch_sub(&tp->sleepers, 1);
            pthread_mutex_unlock(&tp->mu);
        }
        seen = g;
        if (atomic_load_explicit(&tp->stop, memory_order_relaxed)) break;
        tp->fn(tp->ctx, a->ith, tp->n);
        atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_release);
    }
    return NULL;
}

tpool *tp_create(int n_threads) {
    if (n_threads <= 0) n_threads = cpu_count();
    if (n_threads > 1024) n_threads = 1024;
    tpool *tp = xaligned(sizeof *tp);
    tp->n = n_threads;
    tp->threads = NULL;
    tp->args = NULL;
    atomic_init(&tp->gen, 0);
    atomic_init(&tp->pending, 0);
    atomic_init(&tp->sleepers, 0);
    atomic_init(&tp->stop, 0);
    tp->fn = NULL;
    tp->ctx = NULL;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    if (n_threads == 1) return tp;

    tp->threads = xcalloc((size_t)n_threads - 1, sizeof *tp->threads);
    tp->args = xcalloc((size_t)n_threads - 1, sizeof *tp->args);
    /* workers never handle signals: the process's handlers (SIGINT for the
     * CLI, SIGPIPE for the server) should run on threads that expect them */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int started = 0;
    for (int i = 1; i < n_threads; i++) {
        tp->args[i - 1].tp = tp;
        tp->args[i - 1].ith = i;
        if (pthread_create(&tp->threads[i - 1], NULL, worker_main, &tp->args[i - 1]) != 0) break;
        started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (started != n_threads - 1) {
        /* could not get every thread: run with those we have. Workers read
         * tp->n only inside a run, after the release in tp_run publishes it. */
        fprintf(stderr, "dspark: could only start %d of %d threads\n", started + 1, n_threads);
        tp->n = started + 1;
    }
    return tp;
}

void tp_free(tpool *tp) {
    if (!tp) return;
    if (tp->n > 1) {
        atomic_store_explicit(&tp->stop, 1, memory_order_relaxed);
        atomic_fetch_add(&tp->gen, 1); /* releases stop */
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->cv);
        pthread_mutex_unlock(&tp->mu);
        for (int i = 0; i < tp->n - 1; i++) pthread_join(tp->threads[i], NULL);
    }
    pthread_cond_destroy(&tp->cv);
    pthread_mutex_destroy(&tp->mu);
    free(tp->threads);
    free(tp->args);
    free(tp);
}

int tp_size(const tpool *tp) { return tp ? tp->n : 1; }

void tp_run(tpool *tp, tp_fn fn, void *ctx) {
    if (!tp || tp->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    tp->fn = fn;
    tp->ctx = ctx;
    atomic_store_explicit(&tp->pending, tp->n - 1, memory_order_relaxed);
    atomic_fetch_add(&tp->gen, 1); /* seq_cst: publishes fn/ctx/pending */
    if (atomic_load(&tp->sleepers) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->cv);
        pthread_mutex_unlock(&tp->mu);
    }
    fn(ctx, 0, tp->n);
    /* the workers run the same amount of work, so this wait is usually
     * short; a long one means a worker is waiting for a core (more threads
     * than cores), so then give ours away */
    long long t0 = 0;
    for (unsigned it = 1; atomic_load_explicit(&tp->pending, memory_order_acquire) != 0; it++) {
        cpu_relax();
        if ((it & 63) == 0) {
            if (!t0) t0 = now_ns();
            else if (now_ns() - t0 > TP_YIELD_NS) sched_yield();
        }
    }
}

void tp_range(int n, int ith, int nth, int *lo, int *hi) {
    if (nth < 1) nth = 1;
    int base = n / nth, rem = n % nth;
    *lo = ith * base + (ith < rem ? ith : rem);
    *hi = *lo + base + (ith < rem ? 1 : 0);
}
