/* quant_avx512: level 2 of quant_matmul_rows for Q4_0, Q8_0, Q4_K, Q6_K and
 * MLX 4/8-bit (the other formats run quant_avx2.c's kernels at level 2).
 * Compiled with the Makefile's AVX-512 flags, called by quant.c only when
 * ops_level() == 2.
 *
 * The arithmetic is quant_avx2.c's with 16 lanes instead of 8: per
 * (sub-)block one product and FMAs over its widened integer elements in
 * element order (lane k % 16), the block's f32 scale applied by one FMA into
 * a 16-lane accumulator, blocks in order; the min / bias terms as in
 * quant_avx2.c (x sums of 16 lanes here); the lanes reduced by hsum16's
 * fixed pairing. So each output depends on x[m] and row n only, as at every
 * level, and differs from level 1 by rounding only. Why 16 lanes: on Zen 4
 * the widening (vpmovsxbd, vcvtdq2ps) and FMAs issue half as many
 * instructions per element as the AVX2 kernels, which are issue-bound at
 * M = 1 rather than bound by memory. */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__F16C__)

#include <immintrin.h>

#include "engine/quant_internal.h"

#define AI static inline __attribute__((always_inline))
#define QNT 16
#define QMT 8

AI float hsum16(__m512 a) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    t = _mm_add_ss(t, _mm_movehdup_ps(t));
    return _mm_cvtss_f32(t);
}

AI float f16at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

AI __m512 i8x16(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }
AI __m512 u8x16(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)); }

AI __m512 dot32(__m512 q0, __m512 q1, const float *x) {
    return _mm512_fmadd_ps(q1, _mm512_loadu_ps(x + 16), _mm512_mul_ps(q0, _mm512_loadu_ps(x)));
}

typedef struct {
    const tensor *W;
    int K;
    size_t rb;
    int nsub;
} qargs;

AI void k_q4_0(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out) {
    (void)xs;
    const uint8_t *row = (const uint8_t *)a->W->data + (size_t)n * a->rb;
    const int K = a->K, nb = K / 32;
    __m512 acc[QMT];
    for (int m = 0; m < mt; m++) acc[m] = _mm512_setzero_ps();
    const __m128i m4 = _mm_set1_epi8(15), o8 = _mm_set1_epi8(8);
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = row + (size_t)b * 18;
        const __m512 d = _mm512_set1_ps(f16at(blk));
        __m128i raw = _mm_loadu_si128((const __m128i *)(blk + 2));
        __m512 q0 = i8x16(_mm_sub_epi8(_mm_and_si128(raw, m4), o8));
        __m512 q1 = i8x16(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), o8));
        for (int m = 0; m < mt; m++) acc[m] = _mm512_fmadd_ps(d, dot32(q0, q1, x + (size_t)m * K + b * 32), acc[m]);
    }
    for (int m = 0; m < mt; m++) out[m] = hsum16(acc[m]);
}

AI void k_q8_0(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out) {
    (void)xs;
    const uint8_t *row = (const uint8_t *)a->W->data + (size_t)n * a->rb;
    const int K = a->K, nb = K / 32;
    __m512 acc[QMT];
    for (int m = 0; m < mt; m++) acc[m] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = row + (size_t)b * 34;
        const __m512 d = _mm512_set1_ps(f16at(blk));
        __m512 q0 = i8x16(_mm_loadu_si128((const __m128i *)(blk + 2)));
        __m512 q1 = i8x16(_mm_loadu_si128((const __m128i *)(blk + 18)));
        for (int m = 0; m < mt; m++) acc[m] = _mm512_fmadd_ps(d, dot32(q0, q1, x + (size_t)m * K + b * 32), acc[m]);
    }
    for (int m = 0; m < mt; m++) out[m] = hsum16(acc[m]);
}

AI void k4_sm(const uint8_t *s12, int s, int *sc, int *mn) {
    if (s < 4) {
        *sc = s12[s] & 63;
        *mn = s12[s + 4] & 63;
    } else {
        *sc = (s12[s + 4] & 15) | (s12[s - 4] >> 6) << 4;
        *mn = (s12[s + 4] >> 4) | (s12[s] >> 6) << 4;
    }
}

AI void k_q4_k(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out) {
    const uint8_t *row = (const uint8_t *)a->W->data + (size_t)n * a->rb;
    const int K = a->K, nb = K / 256, ns = a->nsub;
    __m512 acc[QMT];
    float mins[QMT];
    for (int m = 0; m < mt; m++) {
        acc[m] = _mm512_setzero_ps();
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
                __m512 q0 = u8x16(_mm256_castsi256_si128(v)), q1 = u8x16(_mm256_extracti128_si256(v, 1));
                const int s = 2 * c + h;
                const __m512 dv = _mm512_set1_ps(dl[s]);
                const size_t k0 = (size_t)b * 256 + (size_t)s * 32;
                for (int m = 0; m < mt; m++) {
                    acc[m] = _mm512_fmadd_ps(dv, dot32(q0, q1, x + (size_t)m * K + k0), acc[m]);
                    mins[m] += ml[s] * xs[(size_t)m * ns + (size_t)b * 8 + s];
                }
            }
        }
    }
    for (int m = 0; m < mt; m++) out[m] = hsum16(acc[m]) - mins[m];
}

AI void k_q6_k(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out) {
    (void)xs;
    const uint8_t *row = (const uint8_t *)a->W->data + (size_t)n * a->rb;
    const int K = a->K, nb = K / 256;
    __m512 acc[QMT];
    for (int m = 0; m < mt; m++) acc[m] = _mm512_setzero_ps();
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
                __m256i lq = (i & 1) ? l1 : l0;
                __m256i lo = _mm256_and_si256((i >> 1) ? _mm256_srli_epi16(lq, 4) : lq, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * i), m2);
                __m256i v = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), o32);
                __m512 q0 = i8x16(_mm256_castsi256_si128(v)), q1 = i8x16(_mm256_extracti128_si256(v, 1));
                const int s = 8 * h + 2 * i;
                const __m512 d0 = _mm512_set1_ps(d * (float)sc[s]), d1 = _mm512_set1_ps(d * (float)sc[s + 1]);
                const size_t k0 = (size_t)b * 256 + (size_t)s * 16;
                for (int m = 0; m < mt; m++) {
                    const float *xm = x + (size_t)m * K + k0;
                    __m512 s0 = _mm512_mul_ps(q0, _mm512_loadu_ps(xm)), s1 = _mm512_mul_ps(q1, _mm512_loadu_ps(xm + 16));
                    acc[m] = _mm512_fmadd_ps(d1, s1, _mm512_fmadd_ps(d0, s0, acc[m]));
                }
            }
        }
    }
    for (int m = 0; m < mt; m++) out[m] = hsum16(acc[m]);
}

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

/* 16 elements of a packed MLX row: 4-bit from 8 bytes (low nibble first),
 * 8-bit from 16 bytes */
AI __m512 mlx4x16(const uint8_t *p) {
    __m128i w = _mm_loadl_epi64((const __m128i *)p), m4 = _mm_set1_epi8(15);
    __m128i e = _mm_unpacklo_epi8(_mm_and_si128(w, m4), _mm_and_si128(_mm_srli_epi16(w, 4), m4));
    return u8x16(e);
}
AI __m512 mlx8x16(const uint8_t *p) { return u8x16(_mm_loadu_si128((const __m128i *)p)); }

AI void k_mlx(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out, int bits) {
    const tensor *W = a->W;
    const uint8_t *row = (const uint8_t *)W->data + (size_t)n * a->rb;
    const int K = a->K, g = W->q.group, ng = K / g, ns = a->nsub;
    const size_t s0 = (size_t)n * (size_t)ng;
    __m512 acc[QMT], sg[QMT];
    float bsum[QMT];
    for (int m = 0; m < mt; m++) {
        acc[m] = sg[m] = _mm512_setzero_ps();
        bsum[m] = 0.0f;
    }
    for (int gi = 0; gi < ng; gi++) {
        const float sc = sb_at(W->q.scales, W->q.sdtype, s0 + (size_t)gi);
        const float bi = sb_at(W->q.biases, W->q.sdtype, s0 + (size_t)gi);
        for (int k = 0; k < g; k += 32) {
            const size_t kk = (size_t)gi * g + (size_t)k;
            const uint8_t *p = row + kk * (size_t)bits / 8;
            __m512 q0 = bits == 4 ? mlx4x16(p) : mlx8x16(p), q1 = bits == 4 ? mlx4x16(p + 8) : mlx8x16(p + 16);
            for (int m = 0; m < mt; m++) {
                const float *xm = x + (size_t)m * K + kk;
                if (k == 0) {
                    sg[m] = dot32(q0, q1, xm);
                } else {
                    sg[m] = _mm512_fmadd_ps(q0, _mm512_loadu_ps(xm), sg[m]);
                    sg[m] = _mm512_fmadd_ps(q1, _mm512_loadu_ps(xm + 16), sg[m]);
                }
            }
        }
        const __m512 sv = _mm512_set1_ps(sc);
        for (int m = 0; m < mt; m++) {
            acc[m] = _mm512_fmadd_ps(sv, sg[m], acc[m]);
            bsum[m] += bi * xs[(size_t)m * ns + gi];
        }
    }
    for (int m = 0; m < mt; m++) out[m] = hsum16(acc[m]) + bsum[m];
}
AI void k_mlx4(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out) {
    k_mlx(a, n, x, xs, mt, out, 4);
}
AI void k_mlx8(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out) {
    k_mlx(a, n, x, xs, mt, out, 8);
}

typedef void (*qkern)(const qargs *a, int64_t n, const float *x, const float *xs, int mt, float *out);

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

int avx512_quant_has(const tensor *W) {
    switch (W->dtype) {
    case DT_Q4_0: case DT_Q8_0: case DT_Q4_K: case DT_Q6_K: return 1;
    case DT_MLX: return W->q.bits == 4 || W->q.bits == 8;
    default: return 0;
    }
}

/* sums of x over runs of len (a multiple of 32) elements: 16 lanes, hsum16 */
static void xsums(float *xs, const float *x, int K, int len) {
    for (int s = 0; s < K / len; s++) {
        const float *p = x + (size_t)s * len;
        __m512 v = _mm512_loadu_ps(p);
        for (int j = 16; j < len; j += 16) v = _mm512_add_ps(v, _mm512_loadu_ps(p + j));
        xs[s] = hsum16(v);
    }
}

void avx512_quant_matmul_rows(float *y, int ldy, const float *x, int M, int K, const tensor *W, const float *bias,
                              int64_t n0, int64_t n1) {
    qargs a = {.W = W, .K = K, .rb = quant_row_bytes(W->dtype, W->q.bits, K), .nsub = 0};
    qkern kern;
    int sub = 0;
    switch (W->dtype) {
    case DT_Q4_0: kern = k_q4_0_p; break;
    case DT_Q8_0: kern = k_q8_0_p; break;
    case DT_Q4_K: kern = k_q4_k_p, sub = 32; break;
    case DT_Q6_K: kern = k_q6_k_p; break;
    default: kern = W->q.bits == 4 ? k_mlx4_p : k_mlx8_p, sub = W->q.group; break;
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
