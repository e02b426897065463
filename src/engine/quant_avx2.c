/* quant_avx2: the AVX2 + FMA + F16C matmul over quantized weights (level 1
 * of quant_matmul_rows; quant.c dispatches here after ops_level said so).
 *
 * Numerics (the same for every M, every [n0, n1) and every tiling, so that
 * a verify row is bit-equal to the decode row):
 * - Q4_0, Q8_0, Q4_K, Q6_K, MLX 4/8-bit: each (sub-)block's integer
 *   elements q (after the format's offset: q-8, q-32, Q3_K's -4) are
 *   widened exactly to f32 and dotted with x in 8 lanes (one product, then
 *   FMAs in element order within the block), then the lanes are scaled by
 *   the block's f32 scale (the format's d or d*sc, computed as ggml does)
 *   into an 8-lane accumulator: acc = fma(scale, dot, acc), blocks in
 *   order. The min / bias terms (Q4_K: dmin*mn, MLX: bias) multiply the
 *   block's sum of x (sumx: 8 lanes in order, reduced by hsum8; it depends
 *   on x[m] alone) and accumulate in one scalar f32 in block order:
 *   y = hsum8(acc) - mins (Q4_K) or + biases (MLX), then + bias[n].
 * - Every other format (and MLX 2/3/5/6 bits): each block dequantized
 *   exactly (quant.c's rule) and dotted with x by an 8-lane FMA chain over
 *   the row, y = hsum8(acc) (+ bias[n]).
 * hsum8 reduces the lanes with a fixed pairing. The results differ from
 * the scalar level's (a double dot of the dequantized row) by rounding
 * only; tests/test_quant.c bounds the difference.
 *
 * Work layout: W rows in tiles of QNT; for each tile the x rows in passes
 * of 8, 4, 2, 1 rows, each W block widened once per pass and applied to
 * all of the pass's rows (a verify step of M <= 8 rows reads W once from
 * memory; the tile stays in L1 between passes). */
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/quant_internal.h"

#define AI static inline __attribute__((always_inline))
#define QNT 16 /* W rows per tile */
#define QMT 8  /* most x rows per pass */

AI float hsum8(__m256 a) {
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    t = _mm_add_ss(t, _mm_movehdup_ps(t));
    return _mm_cvtss_f32(t);
}

AI float f16at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* the 8 signed bytes at p widened to f32 */
AI __m256 i8x8(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }
AI __m256 u8x8(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

/* dot of 32 elements q0..q3 with x[0..32): one product then 3 FMAs */
AI __m256 dot32(__m256 q0, __m256 q1, __m256 q2, __m256 q3, const float *x) {
    __m256 s = _mm256_mul_ps(q0, _mm256_loadu_ps(x));
    s = _mm256_fmadd_ps(q1, _mm256_loadu_ps(x + 8), s);
    s = _mm256_fmadd_ps(q2, _mm256_loadu_ps(x + 16), s);
    return _mm256_fmadd_ps(q3, _mm256_loadu_ps(x + 24), s);
}

typedef struct {
    const tensor *W;
    int K;
    size_t rb;   /* bytes per W row */
    int nsub;    /* sums of x per row (xs stride) */
} qargs;

/* ------------------------------------------------------------- Q4_0 */

AI void k_q4_0(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out) {
    (void)xs;
    const uint8_t *row = (const uint8_t *)a->W->data + (size_t)n * a->rb;
    const int K = a->K, nb = K / 32;
    __m256 acc[QMT];
    for (int m = 0; m < mt; m++) acc[m] = _mm256_setzero_ps();
    const __m128i m4 = _mm_set1_epi8(15), o8 = _mm_set1_epi8(8);
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = row + (size_t)b * 18;
        __m256 d = _mm256_set1_ps(f16at(blk));
        __m128i raw = _mm_loadu_si128((const __m128i *)(blk + 2));
        __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, m4), o8);
        __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), o8);
        __m256 q0 = i8x8(lo), q1 = i8x8(_mm_srli_si128(lo, 8)), q2 = i8x8(hi), q3 = i8x8(_mm_srli_si128(hi, 8));
        for (int m = 0; m < mt; m++) acc[m] = _mm256_fmadd_ps(d, dot32(q0, q1, q2, q3, x + (size_t)m * K + b * 32), acc[m]);
    }
    for (int m = 0; m < mt; m++) out[m] = hsum8(acc[m]);
}

/* ------------------------------------------------------------- Q8_0 */

AI void k_q8_0(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out) {
    (void)xs;
    const uint8_t *row = (const uint8_t *)a->W->data + (size_t)n * a->rb;
    const int K = a->K, nb = K / 32;
    __m256 acc[QMT];
    for (int m = 0; m < mt; m++) acc[m] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = row + (size_t)b * 34;
        __m256 d = _mm256_set1_ps(f16at(blk));
        __m128i r0 = _mm_loadu_si128((const __m128i *)(blk + 2)), r1 = _mm_loadu_si128((const __m128i *)(blk + 18));
        __m256 q0 = i8x8(r0), q1 = i8x8(_mm_srli_si128(r0, 8)), q2 = i8x8(r1), q3 = i8x8(_mm_srli_si128(r1, 8));
        for (int m = 0; m < mt; m++) acc[m] = _mm256_fmadd_ps(d, dot32(q0, q1, q2, q3, x + (size_t)m * K + b * 32), acc[m]);
    }
    for (int m = 0; m < mt; m++) out[m] = hsum8(acc[m]);
}

/* ------------------------------------------------------------- Q4_K */

/* the 6-bit scale and min of sub-block s (quant.c's k4_scale_min) */
AI void k4_sm(const uint8_t *s12, int s, int *sc, int *mn) {
    if (s < 4) {
        *sc = s12[s] & 63;
        *mn = s12[s + 4] & 63;
    } else {
        *sc = (s12[s + 4] & 15) | (s12[s - 4] >> 6) << 4;
        *mn = (s12[s + 4] >> 4) | (s12[s] >> 6) << 4;
    }
}

/* xs: the sums of x over each 32-element sub-block */
AI void k_q4_k(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out) {
    const uint8_t *row = (const uint8_t *)a->W->data + (size_t)n * a->rb;
    const int K = a->K, nb = K / 256, ns = a->nsub;
    __m256 acc[QMT];
    float mins[QMT];
    for (int m = 0; m < mt; m++) {
        acc[m] = _mm256_setzero_ps();
        mins[m] = 0.0f;
    }
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = row + (size_t)b * 144;
        const float d = f16at(blk), dmin = f16at(blk + 2);
        float dl[8], ml[8];
        for (int s = 0; s < 8; s++) {
            int sc, mn;
            k4_sm(blk + 4, s, &sc, &mn);
            dl[s] = d * (float)sc;
            ml[s] = dmin * (float)mn;
        }
        for (int c = 0; c < 4; c++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * c));
            for (int h = 0; h < 2; h++) {
                __m256i v = _mm256_and_si256(h ? _mm256_srli_epi16(raw, 4) : raw, m4);
                __m128i v0 = _mm256_castsi256_si128(v), v1 = _mm256_extracti128_si256(v, 1);
                __m256 q0 = u8x8(v0), q1 = u8x8(_mm_srli_si128(v0, 8)), q2 = u8x8(v1), q3 = u8x8(_mm_srli_si128(v1, 8));
                const int s = 2 * c + h;
                const __m256 dv = _mm256_set1_ps(dl[s]);
                const size_t k0 = (size_t)b * 256 + (size_t)s * 32;
                for (int m = 0; m < mt; m++) {
                    acc[m] = _mm256_fmadd_ps(dv, dot32(q0, q1, q2, q3, x + (size_t)m * K + k0), acc[m]);
                    mins[m] += ml[s] * xs[(size_t)m * ns + (size_t)b * 8 + s];
                }
            }
        }
    }
    for (int m = 0; m < mt; m++) out[m] = hsum8(acc[m]) - mins[m];
}

/* ------------------------------------------------------------- Q6_K */

AI void k_q6_k(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out) {
    (void)xs;
    const uint8_t *row = (const uint8_t *)a->W->data + (size_t)n * a->rb;
    const int K = a->K, nb = K / 256;
    __m256 acc[QMT];
    for (int m = 0; m < mt; m++) acc[m] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3), o32 = _mm256_set1_epi8(32);
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = row + (size_t)b * 210;
        const float d = f16at(blk + 208);
        const int8_t *sc = (const int8_t *)(blk + 192);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
            for (int i = 0; i < 4; i++) {
                /* elements 128h + 32i + l: nibble (i >> 1) of ql[l + 32 (i & 1)], bits 2i.. of qh[l] */
                __m256i lq = (i & 1) ? l1 : l0;
                __m256i lo = _mm256_and_si256((i >> 1) ? _mm256_srli_epi16(lq, 4) : lq, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * i), m2);
                __m256i v = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), o32);
                __m128i v0 = _mm256_castsi256_si128(v), v1 = _mm256_extracti128_si256(v, 1);
                __m256 q0 = i8x8(v0), q1 = i8x8(_mm_srli_si128(v0, 8)), q2 = i8x8(v1), q3 = i8x8(_mm_srli_si128(v1, 8));
                const int s = 8 * h + 2 * i;
                const __m256 d0 = _mm256_set1_ps(d * (float)sc[s]), d1 = _mm256_set1_ps(d * (float)sc[s + 1]);
                const size_t k0 = (size_t)b * 256 + (size_t)s * 16;
                for (int m = 0; m < mt; m++) {
                    const float *xm = x + (size_t)m * K + k0;
                    __m256 s0 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(xm + 8), _mm256_mul_ps(q0, _mm256_loadu_ps(xm)));
                    __m256 s1 = _mm256_fmadd_ps(q3, _mm256_loadu_ps(xm + 24), _mm256_mul_ps(q2, _mm256_loadu_ps(xm + 16)));
                    acc[m] = _mm256_fmadd_ps(d1, s1, _mm256_fmadd_ps(d0, s0, acc[m]));
                }
            }
        }
    }
    for (int m = 0; m < mt; m++) out[m] = hsum8(acc[m]);
}

/* ------------------------------------------------------------ MLX 4/8 */

AI float sb_at(const void *p, ds_dtype sdt, size_t i) {
    if (sdt == DT_F32) {
        float f;
        memcpy(&f, (const char *)p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)p + 2 * i, 2);
    return sdt == DT_BF16 ? ds_bf16_to_f32(h) : _cvtsh_ss(h);
}

/* 8 elements of a packed MLX row widened to f32: 4-bit from one word, the
 * 8 nibbles low bits first; 8-bit from two words, bytes in order */
AI __m256 mlx4x8(const uint8_t *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32((int)w), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    return _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(15)));
}
AI __m256 mlx8x8(const uint8_t *p) { return u8x8(_mm_loadl_epi64((const __m128i *)p)); }

/* xs: the sums of x over each group */
AI void k_mlx(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out, int bits) {
    const tensor *W = a->W;
    const uint8_t *row = (const uint8_t *)W->data + (size_t)n * a->rb;
    const int K = a->K, g = W->q.group, ng = K / g, ns = a->nsub;
    const size_t s0 = (size_t)n * (size_t)ng;
    __m256 acc[QMT], sg[QMT];
    float bsum[QMT];
    for (int m = 0; m < mt; m++) {
        acc[m] = sg[m] = _mm256_setzero_ps();
        bsum[m] = 0.0f;
    }
    for (int gi = 0; gi < ng; gi++) {
        const float sc = sb_at(W->q.scales, W->q.sdtype, s0 + (size_t)gi);
        const float bi = sb_at(W->q.biases, W->q.sdtype, s0 + (size_t)gi);
        for (int k = 0; k < g; k += 32) {
            const size_t kk = (size_t)gi * g + (size_t)k;
            const uint8_t *p = row + kk * (size_t)bits / 8;
            __m256 q0, q1, q2, q3;
            if (bits == 4) {
                q0 = mlx4x8(p), q1 = mlx4x8(p + 4), q2 = mlx4x8(p + 8), q3 = mlx4x8(p + 12);
            } else {
                q0 = mlx8x8(p), q1 = mlx8x8(p + 8), q2 = mlx8x8(p + 16), q3 = mlx8x8(p + 24);
            }
            for (int m = 0; m < mt; m++) {
                const float *xm = x + (size_t)m * K + kk;
                if (k == 0) {
                    sg[m] = dot32(q0, q1, q2, q3, xm);
                } else { /* (sg[m] set at k == 0) */
                    sg[m] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(xm), sg[m]);
                    sg[m] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(xm + 8), sg[m]);
                    sg[m] = _mm256_fmadd_ps(q2, _mm256_loadu_ps(xm + 16), sg[m]);
                    sg[m] = _mm256_fmadd_ps(q3, _mm256_loadu_ps(xm + 24), sg[m]);
                }
            }
        }
        const __m256 sv = _mm256_set1_ps(sc);
        for (int m = 0; m < mt; m++) {
            acc[m] = _mm256_fmadd_ps(sv, sg[m], acc[m]);
            bsum[m] += bi * xs[(size_t)m * ns + gi];
        }
    }
    for (int m = 0; m < mt; m++) out[m] = hsum8(acc[m]) + bsum[m];
}
AI void k_mlx4(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out) {
    k_mlx(a, n, x, xs, mt, out, 4);
}
AI void k_mlx8(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out) {
    k_mlx(a, n, x, xs, mt, out, 8);
}

/* ------------------------------------------------------------ generic */

/* any format: each block (GGUF) or group (MLX) dequantized exactly into
 * registers' worth of f32 and dotted with x; one 8-lane chain per output */
static void k_generic(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out) {
    (void)xs;
    const tensor *W = a->W;
    const int K = a->K;
    float wb[256] __attribute__((aligned(32)));
    __m256 acc[QMT];
    for (int m = 0; m < mt; m++) acc[m] = _mm256_setzero_ps();
    const uint8_t *row = (const uint8_t *)W->data + (size_t)n * a->rb;
    quant_deq_fn f = quant_deq_block(W->dtype);
    const int qk = W->dtype == DT_MLX ? W->q.group : quant_block_elems(W->dtype);
    const size_t bb = quant_block_bytes(W->dtype);
    for (int k0 = 0; k0 < K; k0 += qk) {
        if (f) {
            f(row + (size_t)(k0 / qk) * bb, wb);
        } else {
            const size_t gi = (size_t)n * (size_t)(K / qk) + (size_t)(k0 / qk);
            const float sc = sb_at(W->q.scales, W->q.sdtype, gi), bi = sb_at(W->q.biases, W->q.sdtype, gi);
            for (int j = 0; j < qk; j++) wb[j] = sc * (float)quant_mlx_elem(row, W->q.bits, k0 + j) + bi;
        }
        for (int m = 0; m < mt; m++) {
            const float *xm = x + (size_t)m * K + k0;
            for (int j = 0; j < qk; j += 8)
                acc[m] = _mm256_fmadd_ps(_mm256_load_ps(wb + j), _mm256_loadu_ps(xm + j), acc[m]);
        }
    }
    for (int m = 0; m < mt; m++) out[m] = hsum8(acc[m]);
}

/* ------------------------------------------------------------ dispatch */

typedef void (*qkern)(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out);

/* each kernel instantiated for passes of 8, 4, 2 and 1 rows (mt a
 * compile-time constant: the accumulators stay in registers) */
#define INST(k)                                                                                   \
    static void k##_p(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out) { \
        switch (mt) {                                                                             \
        case 8: k(a, n, x, xs, 8, out); break;                                                    \
        case 4: k(a, n, x, xs, 4, out); break;                                                    \
        case 2: k(a, n, x, xs, 2, out); break;                                                    \
        default: k(a, n, x, xs, 1, out); break;                                                   \
        }                                                                                         \
    }
INST(k_q4_0)
INST(k_q8_0)
INST(k_q4_k)
INST(k_q6_k)
INST(k_mlx4)
INST(k_mlx8)

/* sums of x over runs of `len` elements (a multiple of 8): 8 lanes in
 * order, hsum8; they depend on x alone */
static void xsums(float *xs, const float *x, int K, int len) {
    for (int s = 0; s < K / len; s++) {
        const float *p = x + (size_t)s * len;
        __m256 v = _mm256_loadu_ps(p);
        for (int j = 8; j < len; j += 8) v = _mm256_add_ps(v, _mm256_loadu_ps(p + j));
        xs[s] = hsum8(v);
    }
}

void avx2_quant_matmul_rows(float *y, int ldy, const float *x, int M, int K, const tensor *W, const float *bias,
                            int64_t n0, int64_t n1) {
    qargs a = {.W = W, .K = K, .rb = quant_row_bytes(W->dtype, W->q.bits, K), .nsub = 0};
    qkern kern = k_generic;
    int sub = 0; /* run length of the x sums the kernel needs, 0 none */
    switch (W->dtype) {
    case DT_Q4_0: kern = k_q4_0_p; break;
    case DT_Q8_0: kern = k_q8_0_p; break;
    case DT_Q4_K: kern = k_q4_k_p, sub = 32; break;
    case DT_Q6_K: kern = k_q6_k_p; break;
    case DT_MLX:
        if (W->q.bits == 4) kern = k_mlx4_p, sub = W->q.group;
        if (W->q.bits == 8) kern = k_mlx8_p, sub = W->q.group;
        break;
    default: break;
    }
    float *xs = NULL;
    if (sub) {
        a.nsub = K / sub;
        xs = ops_scratch((size_t)M * (size_t)a.nsub * sizeof(float) + 64);
        for (int m = 0; m < M; m++) xsums(xs + (size_t)m * a.nsub, x + (size_t)m * K, K, sub);
    }
    float out[QMT];
    for (int64_t nt = n0; nt < n1; nt += QNT) {
        const int64_t ne = nt + QNT < n1 ? nt + QNT : n1;
        for (int m0 = 0; m0 < M;) {
            const int r = M - m0, mt = r >= 8 ? 8 : r >= 4 ? 4 : r >= 2 ? 2 : 1;
            const float *xm = x + (size_t)m0 * K, *xsm = xs ? xs + (size_t)m0 * a.nsub : NULL;
            for (int64_t n = nt; n < ne; n++) {
                kern(&a, n, xm, xsm, mt, out);
                for (int i = 0; i < mt; i++) y[(size_t)(m0 + i) * ldy + n] = bias ? out[i] + bias[n] : out[i];
            }
            m0 += mt;
        }
    }
}

#endif
