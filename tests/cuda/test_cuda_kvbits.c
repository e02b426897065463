/* --kv-bits 16 and 8 on the GPU, kernel by kernel: the q/k/v tail's store
 * (fused and separate) writes each row as the CPU's rule (engine/kv.c:
 * kv_quant_f16, kv_quant_i8) applied to the row the f32 cache receives, bit
 * for bit, scales included; the decode / verify attention and the prefill
 * attention (k_attn_tc, or k_attn_wg on an sm_90a build on Hopper) over a
 * 16- or 8-bit cache give the bits of the f32 kernels over the cache
 * widened by the CPU (kv_dequant_*), and every row of a batch of 1..16 rows
 * the bits of that row alone. The model-level checks (golden logits within
 * the bound, speculative = plain decoding within each storage) are
 * tests/test_kvbits.c's, run with DSPARK_DEVICE=cuda by scripts/test-cuda.
 * Built only by `make test-cuda`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cuda/cuda_hooks.h"
#include "engine/kv.h"
#include "test.h"
#include "cuda/cuda_test.h"

static uint64_t rng = 0x51ed270b27bd3a5full;
#define frand() cu_frand(&rng)

TEST(cuda_kvbits_store) {
    if (!have_gpu()) return;
    const int shapes[][3] = {{1, 128, 256}, {3, 64, 128}, {9, 128, 264}, {16, 64, 512}}; /* M, hd, K */
    const int nh = 4, nkv = 2, cap = 40, len = 7;
    char err[512];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int M = shapes[s][0], hd = shapes[s][1], K = shapes[s][2], N = (nh + 2 * nkv) * hd;
        const size_t nq = (size_t)M * nh * hd, nc = (size_t)nkv * cap * hd, rows = (size_t)nkv * cap;
        float *x = xmalloc(sizeof(float) * M * K), *b = xmalloc(sizeof(float) * N), *g = xmalloc(sizeof(float) * K);
        float *qn = xmalloc(sizeof(float) * hd), *kn = xmalloc(sizeof(float) * hd), *f = xmalloc(sizeof(float) * hd / 2);
        uint16_t *w = xmalloc(sizeof(uint16_t) * N * K);
        int *pos = xmalloc(sizeof(int) * M);
        for (int i = 0; i < M * K; i++) x[i] = 2.0f * frand();
        for (int i = 0; i < N * K; i++) w[i] = ds_f32_to_bf16(0.1f * frand());
        for (int i = 0; i < N; i++) b[i] = 0.5f * frand();
        for (int i = 0; i < K; i++) g[i] = 1.0f + 0.5f * frand();
        for (int i = 0; i < hd; i++) qn[i] = 1.0f + 0.5f * frand(), kn[i] = 1.0f + 0.5f * frand();
        for (int i = 0; i < hd / 2; i++) f[i] = powf(10000.0f, -2.0f * i / hd);
        for (int m = 0; m < M; m++) pos[m] = len + m;
        float *q32 = xmalloc(sizeof(float) * nq), *k32 = xmalloc(sizeof(float) * nc), *v32 = xmalloc(sizeof(float) * nc);
        CHECK_MSG(cuda_test_qkv(q32, k32, v32, x, M, w, K, b, g, qn, kn, pos, f, nh, nkv, hd, cap, len, 0, err,
                                sizeof err) == 0,
                  "%s", err);
        for (int bits = 16; bits >= 8; bits -= 8)
            for (int fused = 0; fused < 2; fused++) {
                const size_t eb = nc * (size_t)(bits / 8);
                unsigned char *kc = xmalloc(eb), *vc = xmalloc(eb), *want = xmalloc(eb);
                float *q = xmalloc(sizeof(float) * nq), *ks = xmalloc(sizeof(float) * rows),
                      *vs = xmalloc(sizeof(float) * rows);
                CHECK_MSG(cuda_test_qkv_kv(q, bits, kc, vc, bits == 8 ? ks : NULL, bits == 8 ? vs : NULL, x, M, w, K,
                                           b, g, qn, kn, pos, f, nh, nkv, hd, cap, len, fused, err, sizeof err) == 0,
                          "%s", err);
                CHECK_MSG(!memcmp(q, q32, sizeof(float) * nq), "M=%d hd=%d %d bits: q differs from the f32 run", M, hd,
                          bits);
                int bad = 0;
                for (int which = 0; which < 2; which++) {
                    const float *src = which ? v32 : k32;
                    const unsigned char *got = which ? vc : kc;
                    const float *gs = which ? vs : ks;
                    for (int h = 0; h < nkv; h++)
                        for (int m = 0; m < M; m++) {
                            const size_t r = (size_t)h * cap + (size_t)(len + m), o = r * hd;
                            if (bits == 16) {
                                kv_quant_f16(src + o, hd, (uint16_t *)(void *)want);
                                bad += memcmp(want, got + 2 * o, 2 * (size_t)hd) != 0;
                            } else {
                                float sc;
                                kv_quant_i8(src + o, hd, (int8_t *)want, &sc);
                                bad += memcmp(want, got + o, (size_t)hd) != 0 || memcmp(&sc, gs + r, 4) != 0;
                            }
                        }
                }
                CHECK_MSG(bad == 0, "M=%d hd=%d %d bits %s: %d stored rows differ from the CPU's rule", M, hd, bits,
                          fused ? "fused" : "separate", bad);
                free(kc), free(vc), free(want), free(q), free(ks), free(vs);
            }
        free(x), free(b), free(g), free(qn), free(kn), free(f), free(w), free(pos), free(q32), free(k32), free(v32);
    }
}

/* a cache of nkv x cap rows of hd in `bits`, by the CPU's rules, and its
   widened f32 copy (kw, vw) */
typedef struct {
    void *k, *v;
    float *ks, *vs, *kw, *vw;
} lowcache;
static lowcache make_cache(int bits, int nkv, int cap, int hd) {
    const size_t rows = (size_t)nkv * cap, n = rows * hd;
    lowcache c = {xmalloc(n * (size_t)(bits / 8)), xmalloc(n * (size_t)(bits / 8)), xmalloc(sizeof(float) * rows),
                  xmalloc(sizeof(float) * rows), xmalloc(sizeof(float) * n), xmalloc(sizeof(float) * n)};
    float *row = xmalloc(sizeof(float) * hd);
    for (int which = 0; which < 2; which++)
        for (size_t r = 0; r < rows; r++) {
            for (int i = 0; i < hd; i++) row[i] = (which ? 1.0f : 3.0f) * frand();
            const size_t o = r * hd;
            float *wide = (which ? c.vw : c.kw) + o;
            if (bits == 16) {
                uint16_t *e = (uint16_t *)(which ? c.v : c.k) + o;
                kv_quant_f16(row, hd, e);
                kv_dequant_f16(e, hd, wide);
            } else {
                int8_t *e = (int8_t *)(which ? c.v : c.k) + o;
                float *sc = (which ? c.vs : c.ks) + r;
                kv_quant_i8(row, hd, e, sc);
                kv_dequant_i8(e, *sc, hd, wide);
            }
        }
    free(row);
    return c;
}
static void free_cache(lowcache *c) { free(c->k), free(c->v), free(c->ks), free(c->vs), free(c->kw), free(c->vw); }

TEST(cuda_kvbits_attention) {
    if (!have_gpu()) return;
    /* nh, nkv, hd, n_past; prefill at 130 rows takes the prefill kernel */
    const int shapes[][4] = {{8, 2, 64, 150}, {32, 8, 128, 700}, {16, 2, 128, 2100}, {4, 1, 32, 20}};
    char err[512];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int nh = shapes[s][0], nkv = shapes[s][1], hd = shapes[s][2], np = shapes[s][3], Mmax = 130;
        const int cap = np + Mmax + 3;
        const size_t row = (size_t)nh * hd;
        const float scale = 1.0f / sqrtf((float)hd);
        float *q = xmalloc(sizeof(float) * Mmax * row), *lo = xmalloc(sizeof(float) * Mmax * row),
              *wi = xmalloc(sizeof(float) * Mmax * row), *one = xmalloc(sizeof(float) * row);
        for (size_t i = 0; i < Mmax * row; i++) q[i] = frand();
        for (int bits = 16; bits >= 8; bits -= 8) {
            lowcache c = make_cache(bits, nkv, cap, hd);
            const float *ks = bits == 8 ? c.ks : NULL, *vs = bits == 8 ? c.vs : NULL;
            int bad = 0, alone = 0;
            /* decode and verify widths, and a prefill group (tiled) */
            for (int M = 1; M <= 16; M++) {
                CHECK_MSG(cuda_test_attention_kv(lo, q, M, nh, nkv, hd, bits, c.k, c.v, ks, vs, cap, np, scale, 0, err,
                                                 sizeof err) == 0 &&
                              cuda_test_attention(wi, q, M, nh, nkv, hd, c.kw, c.vw, cap, np, scale, 0, err,
                                                  sizeof err) == 0,
                          "%s", err);
                bad += memcmp(lo, wi, sizeof(float) * M * row) != 0;
                for (int m = 0; m < M; m++) { /* row m alone at its position */
                    CHECK_MSG(cuda_test_attention_kv(one, q + m * row, 1, nh, nkv, hd, bits, c.k, c.v, ks, vs, cap,
                                                     np + m, scale, 0, err, sizeof err) == 0,
                              "%s", err);
                    alone += memcmp(one, lo + m * row, sizeof(float) * row) != 0;
                }
            }
            CHECK_MSG(bad == 0, "nh=%d nkv=%d hd=%d %d bits: %d widths differ from f32 over the widened cache", nh, nkv,
                      hd, bits, bad);
            CHECK_MSG(alone == 0, "nh=%d nkv=%d hd=%d %d bits: %d rows alone differ from their batch", nh, nkv, hd,
                      bits, alone);
            CHECK_MSG(cuda_test_attention_kv(lo, q, Mmax, nh, nkv, hd, bits, c.k, c.v, ks, vs, cap, np, scale, 1, err,
                                             sizeof err) == 0 &&
                          cuda_test_attention(wi, q, Mmax, nh, nkv, hd, c.kw, c.vw, cap, np, scale, 1, err,
                                              sizeof err) == 0,
                      "%s", err);
            CHECK_MSG(!memcmp(lo, wi, sizeof(float) * Mmax * row),
                      "nh=%d nkv=%d hd=%d %d bits: the prefill attention%s differs from f32 over the widened cache", nh,
                      nkv, hd, bits, cuda_test_attn_wg_ready(hd) ? " (warpgroup mma)" : "");
            free_cache(&c);
        }
        free(q), free(lo), free(wi), free(one);
    }
}
