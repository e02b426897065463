/* threadpool: a persistent pool of worker threads. tp_run hands the same
 * function to every thread (the caller is thread 0) and returns when all
 * are done; kernels split their work by (ith, nth). Workers spin briefly
 * and then sleep, so back-to-back ops in the token loop pay no wake-up. */
#ifndef DS_THREADPOOL_H
#define DS_THREADPOOL_H

typedef struct tpool tpool;
typedef void (*tp_fn)(void *ctx, int ith, int nth);

/* n_threads <= 0 means the number of online CPUs. */
tpool *tp_create(int n_threads);
void tp_free(tpool *tp);
int tp_size(const tpool *tp);
/* Runs fn(ctx, i, n) for i in [0, n) concurrently; tp may be NULL (then
 * fn(ctx, 0, 1) runs on the caller). Not reentrant. */
void tp_run(tpool *tp, tp_fn fn, void *ctx);

/* Splits [0, n) into nth nearly equal ranges; range ith is [*lo, *hi). */
void tp_range(int n, int ith, int nth, int *lo, int *hi);

#endif
