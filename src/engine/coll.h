/* coll: the collectives of tensor parallelism (tpar.h) behind one
 * interface. One process drives every rank: a call takes each rank's
 * buffer (in that rank's memory: the host for the CPU, its GPU for a
 * device implementation) and returns when every rank's result is in
 * place, so a backend calls it once per reduction point whatever N is.
 *
 * Semantics every implementation keeps, exactly:
 *   all_reduce_sum: each element of every rank's buffer becomes
 *     ((b0 + b1) + b2) + ... + b(N-1), in f32, in rank order. The order
 *     is fixed per element, so a row's sum never depends on how many rows
 *     the call carries (the batch) or where the row sits in it: the
 *     lossless rule (a row's bits never depend on its batch) survives the
 *     reduction.
 *   all_gather: rank q's shard [rows][cols[q]] lands in columns
 *     [off_q, off_q + cols[q]) of every rank's out [rows][ldo] (off_q the
 *     sum of the cols before q); pure copies, no arithmetic.
 *
 * The CPU implementation (coll_cpu_create) emulates N ranks in one
 * process. The NCCL one (coll_nccl_create) keeps the order too: NCCL's
 * ring and tree all-reduce add in an order that follows the message's
 * size and chunking (so the batch), which would break the rule; it takes
 * ncclAllGather of the partials into an [N][n] buffer on every device,
 * then a kernel that sums each element in rank order (the same bits on
 * every rank, and the CPU's), at N times the receive traffic of a ring
 * all-reduce. */
#ifndef DS_COLL_H
#define DS_COLL_H

#include <stddef.h>

typedef struct coll coll;

typedef struct {
    const char *name;
    int (*all_reduce_sum)(coll *c, float *const *buf, size_t n, char *err, size_t errlen);
    int (*all_gather)(coll *c, const float *const *shard, int rows, const int *cols, float *const *out, size_t ldo,
                      char *err, size_t errlen);
    void (*free)(coll *c);
} coll_ops;

struct coll {
    const coll_ops *ops;
    int ranks;
};

/* N ranks in one process, buffers in host memory: the sums on the calling
 * thread, element by element in rank order. An out of all_gather may be
 * NULL for a rank whose copy is not wanted (the emulation's ranks share
 * one host: the caller keeps one). */
coll *coll_cpu_create(int ranks);

/* The collectives over NCCL for ranks on CUDA devices devs[0..ranks-1]
 * (engine/cuda/cuda_coll.cu; CUDA builds only, libnccl.so.2 opened at run
 * time): buffers in device memory, each rank's work on streams[r] (NULL:
 * a stream of its own); a call returns once its results are in place.
 * NULL with err when NCCL cannot be opened or its communicators made. */
#ifdef __cplusplus
extern "C" {
#endif
coll *coll_nccl_create(int ranks, const int *devs, void *const *streams, char *err, size_t errlen);
#ifdef __cplusplus
}
#endif

static inline int coll_all_reduce_sum(coll *c, float *const *buf, size_t n, char *err, size_t errlen) {
    return c->ops->all_reduce_sum(c, buf, n, err, errlen);
}
static inline int coll_all_gather(coll *c, const float *const *shard, int rows, const int *cols, float *const *out,
                                  size_t ldo, char *err, size_t errlen) {
    return c->ops->all_gather(c, shard, rows, cols, out, ldo, err, errlen);
}
static inline void coll_free(coll *c) {
    if (c) c->ops->free(c);
}

#endif
