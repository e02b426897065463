/* Tensor parallelism with the model on a GPU: until the multi-GPU backend
 * exists, --tensor-parallel N > 1 on cuda is refused by name (never run
 * whole); the peer query doctor reads answers for every pair of visible
 * GPUs and refuses a device paired with itself; the collectives over
 * NCCL (engine/cuda/cuda_coll.cu): the device's rank-order sum bit-equal
 * to the CPU's emulation, and on every visible GPU (one rank each) the
 * all-reduce and an all-gather of uneven shards. Built only by
 * `make test-cuda` (tests/cuda/), run on a machine with a GPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "engine/backend.h"
#include "engine/coll.h"
#include "engine/model.h"
#include "test.h"

TEST(cuda_tpar_refused) {
    char dir[600], err[1024] = "";
    snprintf(dir, sizeof dir, "%s/models/qwen3-bf16", test_data_dir());
    model_load_opts o = {.device = "cuda", .tensor_parallel = 2};
    model *m = NULL;
    CHECK(model_load(&m, dir, &o, err, sizeof err) == -1 && !m);
    CHECK_MSG(strstr(err, "--tensor-parallel 2") && strstr(err, "not built"), "%s", err);
    model_free(m);
    o.tensor_parallel = 1; /* one rank is the whole model */
    CHECK_MSG(model_load(&m, dir, &o, err, sizeof err) == 0 && model_tensor_parallel(m) == 1, "%s", err);
    model_free(m);
}

TEST(cuda_tpar_peers) {
    const int n = backend_device_count("cuda");
    backend_peer_info p;
    char err[512] = "";
    CHECK(backend_query_peer("cuda", 0, 0, &p, err, sizeof err) == -1 && strstr(err, "distinct"));
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            if (a == b) continue;
            CHECK_MSG(backend_query_peer("cuda", a, b, &p, err, sizeof err) == 0, "%d-%d: %s", a, b, err);
            CHECK(p.peer_access || p.perf_rank == -1);
            printf("  GPUs %d-%d: peer %d, native atomics %d, performance rank %d\n", a, b, p.peer_access,
                   p.native_atomics, p.perf_rank);
        }
}

/* ---- the collectives on GPUs (engine/cuda/cuda_coll.cu) ---- */

int cuda_coll_test_rank_sum(const float *g, int R, size_t n, float *y);
void *cuda_coll_test_alloc(int dev, size_t bytes);
int cuda_coll_test_copy(int dev, void *dst, const void *src, size_t bytes, int to_device);
void cuda_coll_test_free(int dev, void *p);

/* the device's rank-order sum against the CPU's emulation, bit for bit,
   on values whose sum depends on the order */
TEST(cuda_coll_rank_sum) {
    enum { R = 5, N = 3001 };
    static float g[R][N], y[N], cpu[R][N];
    uint32_t s = 11;
    for (int r = 0; r < R; r++)
        for (int i = 0; i < N; i++) {
            s = s * 1664525u + 1013904223u;
            float v = (float)((int)(s >> 9) % 2001 - 1000);
            g[r][i] = (i % 3 == 0 && r == 1) ? 1e8f : (i % 3 == 0 && r == 3) ? -1e8f : v * 0.37f;
            cpu[r][i] = g[r][i];
        }
    CHECK(cuda_coll_test_rank_sum(&g[0][0], R, N, y) == 0);
    coll *c = coll_cpu_create(R);
    float *bufs[R];
    for (int r = 0; r < R; r++) bufs[r] = cpu[r];
    char err[256];
    CHECK(coll_all_reduce_sum(c, bufs, N, err, sizeof err) == 0);
    CHECK_MSG(!memcmp(y, cpu[0], sizeof y), "the device's rank-order sum differs from the CPU's");
    coll_free(c);
}

/* NCCL over every visible GPU (one rank each; at least the one): the
   all-reduce as the CPU emulates it, the all-gather of uneven shards */
TEST(cuda_coll_nccl) {
    int R = backend_device_count("cuda");
    if (R < 1) return; /* (make test-cuda runs on a machine with a GPU) */
    if (R > 8) R = 8;
    int devs[8];
    for (int r = 0; r < R; r++) devs[r] = r;
    char err[512];
    coll *c = coll_nccl_create(R, devs, NULL, err, sizeof err);
    if (!c) {
        printf("  NCCL not available here, not checked: %s\n", err);
        CHECK_MSG(strstr(err, "libnccl"), "%s", err);
        return;
    }
    enum { N = 777 };
    float *host[8], *dev[8], *outs[8];
    coll *cpu = coll_cpu_create(R);
    for (int r = 0; r < R; r++) {
        host[r] = xmalloc(sizeof(float) * N);
        for (int i = 0; i < N; i++) host[r][i] = (float)((i * 7 + r * 13) % 101) * 0.1f - (r == 1 ? 1e7f : 0);
        dev[r] = cuda_coll_test_alloc(r, sizeof(float) * N * 2);
        CHECK(dev[r] && cuda_coll_test_copy(r, dev[r], host[r], sizeof(float) * N, 1) == 0);
    }
    CHECK_MSG(coll_all_reduce_sum(c, dev, N, err, sizeof err) == 0, "%s", err);
    CHECK(coll_all_reduce_sum(cpu, host, N, err, sizeof err) == 0);
    float back[N];
    for (int r = 0; r < R; r++) {
        cuda_coll_test_copy(r, back, dev[r], sizeof back, 0);
        CHECK_MSG(!memcmp(back, host[0], sizeof back), "rank %d's all-reduce differs from the CPU's", r);
    }
    /* shards of 1 + r columns over 3 rows, gathered into rows of 64 on every rank */
    int cols[8];
    const float *sh[8];
    for (int r = 0; r < R; r++) {
        cols[r] = 1 + r;
        float v[3 * 8];
        for (int i = 0; i < 3 * cols[r]; i++) v[i] = (float)(100 * r + i);
        cuda_coll_test_copy(r, dev[r], v, sizeof(float) * 3 * (size_t)cols[r], 1);
        sh[r] = dev[r];
        outs[r] = dev[r] + N;
    }
    CHECK_MSG(coll_all_gather(c, sh, 3, cols, outs, 64, err, sizeof err) == 0, "%s", err);
    for (int r = 0; r < R; r++) {
        float o[3 * 64];
        cuda_coll_test_copy(r, o, outs[r], sizeof o, 0);
        for (int i = 0, off = 0; i < R; off += cols[i], i++)
            for (int row = 0; row < 3; row++)
                for (int k = 0; k < cols[i]; k++)
                    CHECK(o[row * 64 + off + k] == (float)(100 * i + row * cols[i] + k));
        cuda_coll_test_free(r, dev[r]);
        free(host[r]);
    }
    coll_free(cpu);
    coll_free(c);
}
