/* cuda_coll: coll.h's collectives over NCCL, for ranks on this host's GPUs
 * driven by one process (the CPU's emulation is engine/coll.c).
 *
 * all_reduce_sum keeps coll.h's order rather than NCCL's: NCCL's ring and
 * tree all-reduce add in an order that follows the message's size and
 * chunking, so a row's sum would depend on its batch. Each rank's buffer
 * is all-gathered (copies only) into [N][n] on every rank, then
 * k_rank_sum adds each element in rank order with __fadd_rn, the CPU's
 * f32 additions bit for bit, on every rank alike. all_gather pads the
 * shards to the widest one (NCCL gathers equal counts) and copies each
 * shard's columns into place.
 *
 * NCCL is opened at run time (libnccl.so.2): a build needs no NCCL, and a
 * machine without it gets an error naming the library when a split asks
 * for the collectives. Its few entry points are declared here (checked
 * against nccl.h where the toolkit has it). Each call returns once the
 * results are in place: its streams are synchronized. */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/coll.h"

typedef struct ncclComm *nccl_comm;
typedef int nccl_result; /* ncclResult_t: 0 is ncclSuccess */
enum { NCCL_FLOAT32 = 7 }; /* ncclFloat32 */
#if defined(__has_include)
#if __has_include(<nccl.h>)
#include <nccl.h>
static_assert((int)ncclFloat32 == NCCL_FLOAT32 && (int)ncclSuccess == 0, "NCCL's constants as declared here");
static_assert(sizeof(ncclResult_t) == sizeof(nccl_result), "ncclResult_t is an int-sized enum");
#endif
#endif

typedef struct {
    nccl_result (*init_all)(nccl_comm *, int, const int *);
    nccl_result (*destroy)(nccl_comm);
    nccl_result (*all_gather)(const void *, void *, size_t, int, nccl_comm, cudaStream_t);
    nccl_result (*group_start)(void);
    nccl_result (*group_end)(void);
    const char *(*error)(nccl_result);
} nccl_api;

typedef struct {
    coll base;
    nccl_api api;
    void *lib;
    int dev[64];
    nccl_comm comm[64];
    cudaStream_t st[64];
    int own_stream[64];
    float *gathered[64], *staging[64]; /* per rank: [N][n] of the gather, [rows][widest] of a padded shard */
    size_t cap_g, cap_s;               /* floats each rank's buffers hold */
} nccl_coll;

static int cerr(char *err, size_t errlen, const char *what, cudaError_t e) {
    snprintf(err, errlen, "collectives: %s: %s", what, cudaGetErrorString(e));
    return -1;
}
static int nerr(const nccl_coll *c, char *err, size_t errlen, const char *what, nccl_result r) {
    snprintf(err, errlen, "collectives: NCCL %s: %s", what, c->api.error ? c->api.error(r) : "failed");
    return -1;
}

/* y[i] = ((g[0][i] + g[1][i]) + ...) + g[R-1][i], each addition rounded on its own */
__global__ void k_rank_sum(const float *g, int R, size_t n, float *y) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float s = g[i];
        for (int r = 1; r < R; r++) s = __fadd_rn(s, g[(size_t)r * n + i]);
        y[i] = s;
    }
}

static void launch_rank_sum(const float *g, int R, size_t n, float *y, cudaStream_t st) {
    size_t blocks = (n + 255) / 256;
    k_rank_sum<<<(unsigned)(blocks < 4096 ? (blocks ? blocks : 1) : 4096), 256, 0, st>>>(g, R, n, y);
}

/* every rank's buffers grown to g and s floats */
static int reserve(nccl_coll *c, size_t g, size_t s, char *err, size_t errlen) {
    for (int r = 0; r < c->base.ranks; r++) {
        cudaError_t e = cudaSetDevice(c->dev[r]);
        if (e != cudaSuccess) return cerr(err, errlen, "cudaSetDevice", e);
        if (g > c->cap_g) {
            cudaFree(c->gathered[r]);
            c->gathered[r] = NULL;
            if ((e = cudaMalloc(&c->gathered[r], g * sizeof(float))) != cudaSuccess) return cerr(err, errlen, "cudaMalloc", e);
        }
        if (s > c->cap_s) {
            cudaFree(c->staging[r]);
            c->staging[r] = NULL;
            if ((e = cudaMalloc(&c->staging[r], s * sizeof(float))) != cudaSuccess) return cerr(err, errlen, "cudaMalloc", e);
        }
    }
    if (g > c->cap_g) c->cap_g = g;
    if (s > c->cap_s) c->cap_s = s;
    return 0;
}

/* rank r's send of n floats gathered into every rank's c->gathered ([N][n]) */
static int gather(nccl_coll *c, const float *const *send, size_t n, char *err, size_t errlen) {
    nccl_result x = c->api.group_start();
    for (int r = 0; x == 0 && r < c->base.ranks; r++)
        x = c->api.all_gather(send[r], c->gathered[r], n, NCCL_FLOAT32, c->comm[r], c->st[r]);
    nccl_result y = c->api.group_end();
    if (x) return nerr(c, err, errlen, "all-gather", x);
    if (y) return nerr(c, err, errlen, "group", y);
    return 0;
}

static int sync_all(nccl_coll *c, char *err, size_t errlen) {
    for (int r = 0; r < c->base.ranks; r++) {
        cudaSetDevice(c->dev[r]);
        cudaError_t e = cudaStreamSynchronize(c->st[r]);
        if (e != cudaSuccess) return cerr(err, errlen, "a rank's stream", e);
    }
    return 0;
}

static int nccl_all_reduce_sum(coll *cb, float *const *buf, size_t n, char *err, size_t errlen) {
    nccl_coll *c = (nccl_coll *)cb;
    const int R = c->base.ranks;
    if (!n) return 0;
    if (reserve(c, (size_t)R * n, 0, err, errlen) != 0) return -1;
    if (gather(c, (const float *const *)buf, n, err, errlen) != 0) return -1;
    for (int r = 0; r < R; r++) {
        cudaSetDevice(c->dev[r]);
        launch_rank_sum(c->gathered[r], R, n, buf[r], c->st[r]);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return cerr(err, errlen, "the rank-order sum", e);
    }
    return sync_all(c, err, errlen);
}

static int nccl_all_gather(coll *cb, const float *const *shard, int rows, const int *cols, float *const *out,
                           size_t ldo, char *err, size_t errlen) {
    nccl_coll *c = (nccl_coll *)cb;
    const int R = c->base.ranks;
    size_t wide = 0, w = 0;
    for (int q = 0; q < R; q++) {
        wide = (size_t)cols[q] > wide ? (size_t)cols[q] : wide;
        w += (size_t)cols[q];
    }
    if (w > ldo) {
        snprintf(err, errlen, "all-gather: %zu columns into rows of %zu", w, ldo);
        return -1;
    }
    const size_t each = (size_t)rows * wide;
    if (!each) return 0;
    if (reserve(c, (size_t)R * each, each, err, errlen) != 0) return -1;
    const float *send[64];
    for (int r = 0; r < R; r++) { /* each shard padded to the widest */
        cudaSetDevice(c->dev[r]);
        cudaError_t e = cudaMemcpy2DAsync(c->staging[r], wide * sizeof(float), shard[r], (size_t)cols[r] * sizeof(float),
                                          (size_t)cols[r] * sizeof(float), (size_t)rows, cudaMemcpyDeviceToDevice, c->st[r]);
        if (e != cudaSuccess) return cerr(err, errlen, "a shard's copy", e);
        send[r] = c->staging[r];
    }
    if (gather(c, send, each, err, errlen) != 0) return -1;
    for (int r = 0; r < R; r++) {
        if (!out[r]) continue;
        cudaSetDevice(c->dev[r]);
        size_t off = 0;
        for (int q = 0; q < R; q++) {
            cudaError_t e = cudaMemcpy2DAsync(out[r] + off, ldo * sizeof(float), c->gathered[r] + (size_t)q * each,
                                              wide * sizeof(float), (size_t)cols[q] * sizeof(float), (size_t)rows,
                                              cudaMemcpyDeviceToDevice, c->st[r]);
            if (e != cudaSuccess) return cerr(err, errlen, "a gathered shard's copy", e);
            off += (size_t)cols[q];
        }
    }
    return sync_all(c, err, errlen);
}

static void nccl_free(coll *cb) {
    nccl_coll *c = (nccl_coll *)cb;
    for (int r = 0; r < c->base.ranks; r++) {
        cudaSetDevice(c->dev[r]);
        if (c->comm[r]) c->api.destroy(c->comm[r]);
        if (c->own_stream[r]) cudaStreamDestroy(c->st[r]);
        cudaFree(c->gathered[r]);
        cudaFree(c->staging[r]);
    }
    if (c->lib) dlclose(c->lib);
    free(c);
}

static const coll_ops nccl_ops = {"nccl", nccl_all_reduce_sum, nccl_all_gather, nccl_free};

extern "C" coll *coll_nccl_create(int ranks, const int *devs, void *const *streams, char *err, size_t errlen) {
    if (ranks < 1 || ranks > 64) {
        snprintf(err, errlen, "collectives: %d ranks (1 to 64)", ranks);
        return NULL;
    }
    nccl_coll *c = (nccl_coll *)calloc(1, sizeof *c);
    if (!c) abort();
    c->base.ops = &nccl_ops;
    c->base.ranks = ranks;
    if (!(c->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL))) {
        snprintf(err, errlen, "collectives: cannot open libnccl.so.2 (NCCL, needed to split a model over GPUs): %s",
                 dlerror());
        free(c);
        return NULL;
    }
    struct { void **fn; const char *name; } sym[] = {
        {(void **)&c->api.init_all, "ncclCommInitAll"},   {(void **)&c->api.destroy, "ncclCommDestroy"},
        {(void **)&c->api.all_gather, "ncclAllGather"},   {(void **)&c->api.group_start, "ncclGroupStart"},
        {(void **)&c->api.group_end, "ncclGroupEnd"},     {(void **)&c->api.error, "ncclGetErrorString"},
    };
    for (size_t i = 0; i < sizeof sym / sizeof sym[0]; i++)
        if (!(*sym[i].fn = dlsym(c->lib, sym[i].name))) {
            snprintf(err, errlen, "collectives: libnccl.so.2 lacks %s", sym[i].name);
            nccl_free(&c->base);
            return NULL;
        }
    for (int r = 0; r < ranks; r++) {
        c->dev[r] = devs[r];
        cudaError_t e = cudaSetDevice(devs[r]);
        if (e == cudaSuccess && streams && streams[r]) c->st[r] = (cudaStream_t)streams[r];
        else if (e == cudaSuccess && (e = cudaStreamCreateWithFlags(&c->st[r], cudaStreamNonBlocking)) == cudaSuccess)
            c->own_stream[r] = 1;
        if (e != cudaSuccess) {
            cerr(err, errlen, "a rank's device", e);
            nccl_free(&c->base);
            return NULL;
        }
    }
    nccl_result x = c->api.init_all(c->comm, ranks, devs);
    if (x) {
        nerr(c, err, errlen, "communicators", x);
        memset(c->comm, 0, sizeof c->comm);
        nccl_free(&c->base);
        return NULL;
    }
    return &c->base;
}

/* for tests/cuda: k_rank_sum over host g [R][n] into host y [n], on the current device */
extern "C" int cuda_coll_test_rank_sum(const float *g, int R, size_t n, float *y) {
    float *dg = NULL, *dy = NULL;
    if (cudaMalloc(&dg, (size_t)R * n * sizeof(float)) != cudaSuccess || cudaMalloc(&dy, n * sizeof(float)) != cudaSuccess)
        return -1;
    cudaMemcpy(dg, g, (size_t)R * n * sizeof(float), cudaMemcpyHostToDevice);
    launch_rank_sum(dg, R, n, dy, 0);
    cudaError_t e = cudaMemcpy(y, dy, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(dg);
    cudaFree(dy);
    return e == cudaSuccess ? 0 : -1;
}

/* for tests/cuda: device memory on device dev from host code built without the CUDA headers */
extern "C" void *cuda_coll_test_alloc(int dev, size_t bytes) {
    void *p = NULL;
    if (cudaSetDevice(dev) != cudaSuccess || cudaMalloc(&p, bytes) != cudaSuccess) return NULL;
    return p;
}
extern "C" int cuda_coll_test_copy(int dev, void *dst, const void *src, size_t bytes, int to_device) {
    if (cudaSetDevice(dev) != cudaSuccess) return -1;
    return cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost) == cudaSuccess ? 0
                                                                                                                 : -1;
}
extern "C" void cuda_coll_test_free(int dev, void *p) {
    if (cudaSetDevice(dev) == cudaSuccess) cudaFree(p);
}
