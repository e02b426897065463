/* ops-bench: micro-benchmark of the CPU kernels on the Qwen3-0.6B shapes
 * (hidden 1024, intermediate 3072, 16/8 heads of 128, vocab 151936, bf16).
 *
 *   M = 1 matmul: GB/s of weights streamed. Each matrix is cycled through
 *     enough copies to exceed the L3, as in decode where every weight byte
 *     comes from DRAM once per token.
 *   M = 8, 16, 512 matmul: GFLOP/s (2*M*N*K / time).
 *   "model": the 28 layers' 7 matmuls (+ the LM head for one row) with
 *     distinct weights, i.e. the matmul part of one decode token or of a
 *     512-token prefill, as tok/s.
 *   attention (prefill 512, decode at 4k context) and the tp_run latency.
 *
 * Built by hand (not by make):
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -mavx2 -mfma -mf16c -c src/engine/ops_avx2.c -o /tmp/ops_avx2.o -Isrc
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c \
 *       -c src/engine/ops_avx512.c -o /tmp/ops_avx512.o -Isrc
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -pthread -Isrc bench/ops-bench.c src/engine/ops.c src/engine/threadpool.c \
 *       src/engine/cpu.c src/base/util.c src/engine/tensor.c /tmp/ops_avx2.o /tmp/ops_avx512.o -o /tmp/ops-bench -lm
 *   /tmp/ops-bench [threads...]        (default: 1 2)
 * Environment: OPS_BENCH_LEVEL=0/1/2 (scalar/AVX2/AVX-512), OPS_BENCH_M1=1
 * (decode only), OPS_BENCH_VERIFY=1 (also the matmuls of a verify forward:
 * the model's matrices and the LM head for M rows, M = 1..32, or the widths
 * listed, e.g. OPS_BENCH_VERIFY=1,8,16, up to 128), OPS_BENCH_REPS=n
 * (decode tokens / verify forwards timed), OPS_BENCH_FILE=
 * model.safetensors (model loops read a file mapping, as the engine does)
 * with OPS_BENCH_FILE_MODE=1 (MADV_HUGEPAGE) / 2 (copied to anonymous
 * memory) / 3 (copied, MADV_HUGEPAGE), OPS_BENCH_ROWS8=1 (the generated
 * weights in the rows8 layout, as the engine reads them).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/cpu.h"
#include "engine/ops.h"
#include "engine/ops_internal.h"
#include "engine/threadpool.h"
#include "base/util.h"

static uint64_t rs = 88172645463325252ULL;
static uint32_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 32);
}
static float frnd(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; }

static tensor make_bf16(int N, int K, float scale) {
    tensor t;
    memset(&t, 0, sizeof t);
    size_t n = (size_t)N * K;
    uint16_t *d = xaligned(n * 2);
    /* random bits are cheap to make; scale them through a small table */
    uint16_t tab[4096];
    for (int i = 0; i < 4096; i++) tab[i] = ds_f32_to_bf16(frnd() * scale);
    for (size_t i = 0; i < n; i++) d[i] = tab[rnd() & 4095];
    t.name = "bench";
    t.dtype = DT_BF16;
    t.ndim = 2;
    t.shape[0] = N;
    t.shape[1] = K;
    t.data = d;
    t.nbytes = n * 2;
    /* OPS_BENCH_ROWS8=1: in the layout the engine gives weights it reads
     * into memory (tensor.h) */
    const char *r8 = getenv("OPS_BENCH_ROWS8");
    if (r8 && atoi(r8) && tensor_rows8_ok(&t)) {
        tensor_to_rows8(d, 2, N, K);
        t.rows8 = 1;
    }
    return t;
}

static float *make_x(size_t n) {
    float *x = xaligned(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = frnd();
    return x;
}

/* best-of-reps time of one op_matmul over copies cycled round-robin */
static double time_matmul(tpool *tp, const tensor *ws, int ncopy, int M, const float *x, float *y, int reps) {
    double best = 1e30;
    op_matmul(tp, y, x, M, &ws[0], NULL); /* warm up code and scratch */
    for (int r = 0; r < reps; r++) {
        double t0 = ds_now();
        int iters = ncopy;
        for (int i = 0; i < iters; i++) op_matmul(tp, y, x, M, &ws[i % ncopy], NULL);
        double dt = (ds_now() - t0) / iters;
        if (dt < best) best = dt;
    }
    return best;
}

/* STREAM-like read probe: each thread folds its part of a 512 MiB buffer
 * with xor (which the compiler vectorises, unlike a float sum) */
typedef struct {
    const uint64_t *a;
    size_t n;
    uint64_t out[64];
} rd_ctx;

static void read_fn(void *p, int ith, int nth) {
    rd_ctx *c = p;
    size_t lo = c->n * (size_t)ith / (size_t)nth, hi = c->n * (size_t)(ith + 1) / (size_t)nth;
    uint64_t acc[8] = {0};
    for (size_t i = lo; i + 8 <= hi; i += 8)
        for (int j = 0; j < 8; j++) acc[j] ^= c->a[i + j];
    c->out[ith * 8 % 64] = acc[0] ^ acc[1] ^ acc[2] ^ acc[3] ^ acc[4] ^ acc[5] ^ acc[6] ^ acc[7];
}

static double read_bw(tpool *tp) {
    static uint64_t *buf;
    size_t n = (512u << 20) / 8;
    if (!buf) {
        buf = xaligned(n * 8);
        for (size_t i = 0; i < n; i++) buf[i] = i * 0x9e3779b97f4a7c15ULL;
    }
    rd_ctx c = {.a = buf, .n = n};
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = ds_now();
        tp_run(tp, read_fn, &c);
        double dt = ds_now() - t0;
        if (dt < best) best = dt;
    }
    return (double)n * 8 / best / 1e9;
}

static void noop(void *ctx, int ith, int nth) {
    (void)ctx;
    (void)ith;
    (void)nth;
}

int main(int argc, char **argv) {
    int threads[8] = {1, 2}, nt = 2;
    if (argc > 1) {
        nt = 0;
        for (int i = 1; i < argc && nt < 8; i++) threads[nt++] = atoi(argv[i]);
    }
    /* OPS_BENCH_LEVEL=0/1/2 forces scalar / AVX2 / AVX-512 (clamped) */
    if (getenv("OPS_BENCH_LEVEL")) ops_set_level(atoi(getenv("OPS_BENCH_LEVEL")));
    static const char *lv[] = {"scalar", "avx2", "avx512"};
    printf("cpu: %s, %d cpus, kernels %s\n", cpu_name(), cpu_count(), lv[ops_level()]);

    const int H = 1024, I = 3072, V = 151936, L = 28, HQ = 2048, HKV = 1024;
    /* single-matrix shapes, each cycled through enough copies to pass 256 MB */
    struct { const char *name; int N, K; } sh[] = {{"up   3072x1024", I, H}, {"down 1024x3072", H, I}, {"head 151936x1024", V, H}};
    tensor *copies[3];
    int ncopies[3];
    for (int s = 0; s < 3; s++) {
        size_t bytes = (size_t)sh[s].N * sh[s].K * 2;
        int n = (int)((256u << 20) / bytes) + 1;
        ncopies[s] = n;
        copies[s] = xmalloc(sizeof(tensor) * (size_t)n);
        for (int i = 0; i < n; i++) copies[s][i] = make_bf16(sh[s].N, sh[s].K, 0.02f);
    }
    /* the model's own matrices, distinct per layer */
    struct { int N, K; } lsh[7] = {{HQ, H}, {HKV, H}, {HKV, H}, {H, HQ}, {I, H}, {I, H}, {H, I}};
    tensor *layers = xmalloc(sizeof(tensor) * L * 7);
    for (int l = 0; l < L; l++)
        for (int j = 0; j < 7; j++) layers[l * 7 + j] = make_bf16(lsh[j].N, lsh[j].K, 0.02f);
    tensor head = copies[2][0];
    /* OPS_BENCH_FILE=model.safetensors: the model loops read their weights
     * from a read-only file mapping (page cache), as the engine does,
     * instead of anonymous memory; the bytes are the file's (bf16 values
     * of a real checkpoint after the header) */
    const char *wf = getenv("OPS_BENCH_FILE");
    if (wf) {
        int fd = open(wf, O_RDONLY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) {
            fprintf(stderr, "ops-bench: cannot open %s\n", wf);
            return 1;
        }
        const char *base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (base == MAP_FAILED) return 1;
        /* OPS_BENCH_FILE_MODE: 1 = madvise(MADV_HUGEPAGE) on the mapping,
         * 2 = copy into anonymous memory, 3 = the same with MADV_HUGEPAGE */
        int fmode = getenv("OPS_BENCH_FILE_MODE") ? atoi(getenv("OPS_BENCH_FILE_MODE")) : 0;
        if (fmode == 1 && madvise((void *)base, (size_t)st.st_size, MADV_HUGEPAGE) != 0) perror("madvise");
        if (fmode >= 2) {
            size_t sz = ((size_t)st.st_size + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
            char *anon = mmap(NULL, sz + (2u << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (anon == MAP_FAILED) return 1;
            anon = (char *)(((uintptr_t)anon + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1));
            if (fmode == 3) madvise(anon, sz, MADV_HUGEPAGE);
            memcpy(anon, base, (size_t)st.st_size);
            base = anon;
        }
        size_t off = 4096 + 48; /* as the checkpoint: data at 48 mod 64 */
        for (int l = 0; l < L; l++)
            for (int j = 0; j < 7; j++) {
                size_t nb = (size_t)lsh[j].N * lsh[j].K * 2;
                if (off + nb > (size_t)st.st_size) off = 4096 + 48;
                layers[l * 7 + j].data = (void *)(base + off);
                off += nb;
            }
        size_t hb = (size_t)V * H * 2;
        if (off + hb > (size_t)st.st_size) off = 4096 + 48;
        head.data = (void *)(base + off);
        printf("model weights from %s (file mapping)\n", wf);
    }
    size_t model_bytes = (size_t)V * H * 2;
    for (int j = 0; j < 7; j++) model_bytes += (size_t)L * lsh[j].N * lsh[j].K * 2;

    const int MP = 512;
    float *x = make_x((size_t)MP * I), *y = xaligned((size_t)MP * I * sizeof(float));
    float *yh = xaligned((size_t)V * sizeof(float));
    float *yv = getenv("OPS_BENCH_VERIFY") ? xaligned((size_t)128 * V * sizeof(float)) : NULL;

    for (int ti = 0; ti < nt; ti++) {
        tpool *tp = tp_create(threads[ti]);
        int n = tp_size(tp);
        printf("\n== %d thread%s\n", n, n > 1 ? "s" : "");
        /* dispatch latency */
        {
            int runs = 200000;
            double t0 = ds_now();
            for (int i = 0; i < runs; i++) tp_run(tp, noop, NULL);
            printf("tp_run (empty)            %8.3f us\n", (ds_now() - t0) / runs * 1e6);
        }
        printf("read bandwidth (512 MiB)  %8.2f GB/s\n", read_bw(tp));
        for (int s = 0; s < 3; s++) {
            double t = time_matmul(tp, copies[s], ncopies[s], 1, x, s == 2 ? yh : y, s == 2 ? 5 : 3);
            double gb = (double)sh[s].N * sh[s].K * 2 / t / 1e9;
            printf("M=1   %-18s %8.3f ms  %6.2f GB/s\n", sh[s].name, t * 1e3, gb);
        }
        /* model decode: every matrix once for one row, plus the LM head */
        {
            /* best and mean of several tokens: the mean is what an
             * end-to-end run reports, and a shared VM spreads them */
            double best = 1e30, total = 0;
            int reps = getenv("OPS_BENCH_REPS") ? atoi(getenv("OPS_BENCH_REPS")) : 3;
            for (int r = 0; r < reps + 1; r++) {
                double t0 = ds_now();
                for (int l = 0; l < L; l++)
                    for (int j = 0; j < 7; j++) op_matmul(tp, y, x, 1, &layers[l * 7 + j], NULL);
                op_matmul(tp, yh, x, 1, &head, NULL);
                double dt = ds_now() - t0;
                if (r == 0) continue; /* first touch of a file mapping */
                total += dt;
                if (dt < best) best = dt;
            }
            printf("model decode matmuls      %8.2f ms/token  %6.2f tok/s  %6.2f GB/s (%.3f GB/token), mean %.2f tok/s\n",
                   best * 1e3, 1 / best, model_bytes / best / 1e9, model_bytes / 1e9, reps / total);
        }
        /* model verify: every matrix once for M rows, the LM head for all
         * M rows too (a speculative verify forward); times relative to the
         * first width */
        if (getenv("OPS_BENCH_VERIFY")) {
            int Ms[32] = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 17, 20, 24, 32}, nM = 14;
            const char *ml = getenv("OPS_BENCH_VERIFY");
            if (strchr(ml, ',')) {
                nM = 0;
                for (const char *q = ml; *q && nM < 32; q = strchr(q, ',') ? strchr(q, ',') + 1 : "") {
                    int v = atoi(q);
                    if (v >= 1 && v <= 128) Ms[nM++] = v;
                }
            }
            double t1 = 0;
            int reps = getenv("OPS_BENCH_REPS") ? atoi(getenv("OPS_BENCH_REPS")) : 3;
            for (int mi = 0; mi < nM; mi++) {
                int M = Ms[mi];
                double best = 1e30;
                for (int r = 0; r < reps + 1; r++) {
                    double t0 = ds_now();
                    for (int l = 0; l < L; l++)
                        for (int j = 0; j < 7; j++) op_matmul(tp, y, x, M, &layers[l * 7 + j], NULL);
                    op_matmul(tp, yv, x, M, &head, NULL);
                    double dt = ds_now() - t0;
                    if (r > 0 && dt < best) best = dt;
                }
                if (mi == 0) t1 = best;
                double fl = 0;
                for (int j = 0; j < 7; j++) fl += 2.0 * M * L * lsh[j].N * lsh[j].K;
                fl += 2.0 * M * V * H;
                printf("model verify M=%-3d        %8.2f ms  ratio %5.2f  %6.1f GFLOP/s\n", M, best * 1e3, best / t1,
                       fl / best / 1e9);
            }
        }
        if (getenv("OPS_BENCH_M1")) { /* quick mode for tuning the decode kernel */
            tp_free(tp);
            continue;
        }
        for (int s = 0; s < 2; s++) {
            int Ms[] = {2, 4, 8, 16, 32, 512};
            for (int mi = 0; mi < (int)(sizeof Ms / sizeof Ms[0]); mi++) {
                int M = Ms[mi];
                int nc = M >= 64 ? 2 : ncopies[s];
                double t = time_matmul(tp, copies[s], nc, M, x, y, M >= 64 ? 3 : 3);
                double gf = 2.0 * M * sh[s].N * sh[s].K / t / 1e9;
                printf("M=%-3d %-18s %8.3f ms  %6.1f GFLOP/s  %6.2f GB/s\n", M, sh[s].name, t * 1e3, gf,
                       (double)sh[s].N * sh[s].K * 2 / t / 1e9);
            }
        }
        /* model prefill: 512 rows through every layer, LM head for the last row */
        {
            double t0 = ds_now();
            for (int l = 0; l < L; l++)
                for (int j = 0; j < 7; j++) op_matmul(tp, y, x, MP, &layers[l * 7 + j], NULL);
            op_matmul(tp, yh, x, 1, &head, NULL);
            double dt = ds_now() - t0;
            double flop = 0;
            for (int j = 0; j < 7; j++) flop += 2.0 * MP * L * lsh[j].N * lsh[j].K;
            printf("model prefill-512 matmuls %8.1f ms  %6.1f tok/s  %6.1f GFLOP/s\n", dt * 1e3, MP / dt,
                   flop / dt / 1e9);
        }
        /* attention, Qwen3-0.6B heads: prefill of 512 rows, and decode at 4k */
        {
            int nh = 16, nkv = 8, hd = 128, ctx = 4096 + 1;
            float *q = make_x((size_t)MP * nh * hd), *k = make_x((size_t)nkv * ctx * hd), *v = make_x((size_t)nkv * ctx * hd);
            float *o = xaligned((size_t)MP * nh * hd * sizeof(float));
            for (size_t i = 0; i < (size_t)MP * nh * hd; i++) q[i] *= 0.3f;
            double dt = 1e30, t0;
            for (int r = 0; r < 3; r++) {
                t0 = ds_now();
                op_attention(tp, o, q, MP, nh, nkv, hd, k, v, ctx, 0, 1.0f / sqrtf(hd));
                double d = ds_now() - t0;
                if (d < dt) dt = d;
            }
            double flop = 4.0 * nh * hd * (MP * (MP + 1) / 2.0);
            printf("attention prefill-512     %8.2f ms/layer  %6.1f GFLOP/s  (x28 = %.0f ms)\n", dt * 1e3,
                   flop / dt / 1e9, dt * 28e3);
            double best = 1e30;
            for (int r = 0; r < 20; r++) { /* the KV (34 MB) partly stays in L3 */
                t0 = ds_now();
                op_attention(tp, o, q, 1, nh, nkv, hd, k, v, ctx, ctx - 1, 1.0f / sqrtf(hd));
                dt = ds_now() - t0;
                if (dt < best) best = dt;
            }
            printf("attention decode @4k      %8.3f ms/layer  %6.2f GB/s of KV\n", best * 1e3,
                   2.0 * nkv * ctx * hd * 4 / best / 1e9);
            free(q);
            free(k);
            free(v);
            free(o);
        }
        tp_free(tp);
    }
    return 0;
}
