/* kv-bits: the CPU's decode and verify attention over a KV cache stored in
 * f32, f16 and int8 (--kv-bits 32 / 16 / 8), one layer of Qwen3-0.6B's
 * heads (16 query, 8 KV heads of 128) at long contexts, with every layer's
 * cache (28 layers) larger than the last-level cache, as in a real decode:
 * each repetition reads the next layer's cache.
 *   bench/kv-bits.sh [THREADS=2] [CONTEXTS=4096,16384,32768]
 * Prints ms per layer and the KV bytes read per second, and the ratio to
 * the f32 cache. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "engine/kv.h"
#include "engine/ops.h"
#include "engine/threadpool.h"

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    const char *ctxs = argc > 2 ? argv[2] : "4096,16384,32768";
    const int L = 28, nh = 16, nkv = 8, hd = 128, bits[3] = {32, 16, 8};
    tpool *tp = tp_create(threads);
    float *q = xaligned(sizeof(float) * 16 * nh * hd), *o = xaligned(sizeof(float) * 16 * nh * hd);
    uint32_t s = 1;
    for (int i = 0; i < 16 * nh * hd; i++) q[i] = ((s = s * 1664525u + 1013904223u) >> 9) * 0x1p-23f - 0.5f;
    printf("threads %d, %d layers of %d query / %d KV heads of %d\n", threads, L, nh, nkv, hd);
    for (const char *p = ctxs; *p;) {
        int T = atoi(p);
        p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
        double base[2] = {0, 0};
        for (int b = 0; b < 3; b++) {
            char err[256];
            kv_cache *kv;
            if (kv_create(&kv, NULL, L, nkv, hd, T + 16, bits[b], err, sizeof err) != 0) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            /* fill: K/V rows ~ N(0, 1)-ish, 256 positions at a time */
            float *k = xaligned(sizeof(float) * 256 * nkv * hd), *v = xaligned(sizeof(float) * 256 * nkv * hd);
            for (int t0 = 0; t0 < T; t0 += 256) {
                int m = T - t0 < 256 ? T - t0 : 256;
                for (int i = 0; i < m * nkv * hd; i++) {
                    k[i] = ((s = s * 1664525u + 1013904223u) >> 9) * 0x1p-22f - 1.0f;
                    v[i] = ((s = s * 1664525u + 1013904223u) >> 9) * 0x1p-22f - 1.0f;
                }
                for (int l = 0; l < L; l++) kv_store(kv, l, k, v, m);
                kv_commit(kv, m);
            }
            free(k);
            free(v);
            const int widths[2] = {1, 8};
            for (int wi = 0; wi < 2; wi++) {
                int M = widths[wi];
                double best = 1e30;
                for (int r = 0; r < 3; r++) {
                    double t0 = ds_now();
                    for (int l = 0; l < L; l++) {
                        kv_view w = kv_layer(kv, l);
                        op_attention_kv(tp, o, q, M, nh, nkv, hd, &w, T - M, 1.0f / sqrtf((float)hd), 0, 0);
                    }
                    double dt = (ds_now() - t0) / L;
                    if (dt < best) best = dt;
                }
                if (b == 0) base[wi] = best;
                double bytes = (double)kv_bytes_per_pos(1, nkv, hd, bits[b]) * T;
                printf("context %6d  %s %2d rows  --kv-bits %2d  %7.3f ms/layer  %6.2f GB/s of KV  x%.2f vs f32\n", T,
                       M == 1 ? "decode" : "verify", M, bits[b], best * 1e3, bytes / best / 1e9, base[wi] / best);
            }
            kv_free(kv);
        }
    }
    tp_free(tp);
    free(q);
    free(o);
    return 0;
}
