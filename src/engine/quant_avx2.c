/* quant_avx2: level 1 of the quantized matmul (AVX2 + FMA + F16C), every
 * format, and the level-1 activation quantizer; quant.c dispatches here
 * when ops_level() == 1 (or 2 on a machine without AVX-512 VNNI/VBMI).
 *
 * Arithmetic (quant.h, level 1): each weight span is unpacked by
 * quant_unpack_span (unsigned elements u, unit scales a and mins c); per
 * unit of 16 elements, (u - off) is widened to int16 and multiplied with
 * the int16 q_x pairwise by vpmaddwd (|q_x| <= 32639, so no pair reaches
 * the instruction's one saturating case), so lane i holds the exact integer dot of
 * the unit's elements 2i, 2i+1; then acc = fma(float(lane), a * dx, acc),
 * units in order. The min terms c_s * (dx * xsum_s) go to a second 8-lane
 * accumulator (unit s in lane s % 8, one FMA per 8 units); y = hsum8(acc)
 * + hsum8(macc) + bias. A pass shares one unpacked span among up to 4 x
 * rows; no (m, n) sees which rows share it. */
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include "engine/quant_internal.h"

#define AI static inline __attribute__((always_inline))
#define XMT 4 /* x rows per pass */

AI float hsum8(__m256 a) {
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    t = _mm_add_ss(t, _mm_movehdup_ps(t));
    return _mm_cvtss_f32(t);
}

/* quant_x_block's rule 32 elements at a time, bit for bit (exact max,
 * IEEE division, round half to even) */
void avx2_quant_x(const float *x, int K, int16_t *q, float *d) {
    const __m256 sgn = _mm256_set1_ps(-0.0f), lim = _mm256_set1_ps((float)QX_MAX), nlim = _mm256_set1_ps(-(float)QX_MAX);
    for (int b = 0; b < K / 32; b++) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sgn, v[i]));
        }
        __m128 t = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        t = _mm_max_ps(t, _mm_movehl_ps(t, t));
        t = _mm_max_ss(t, _mm_movehdup_ps(t));
        const float dd = _mm_cvtss_f32(t) / (float)QX_MAX;
        d[b] = dd;
        if (dd == 0.0f) {
            memset(q + 32 * b, 0, 32 * sizeof *q);
            continue;
        }
        const __m256 dv = _mm256_set1_ps(dd);
        __m256i iv[4];
        for (int i = 0; i < 4; i++) {
            __m256 r = _mm256_round_ps(_mm256_div_ps(v[i], dv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            iv[i] = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(r, lim), nlim));
        }
        /* packs works per 128-bit lane: elements 0-3, 8-11 | 4-7, 12-15;
         * the qword permute puts them back in order (no saturation: |q| <=
         * QX_MAX) */
        for (int h = 0; h < 2; h++) {
            const __m256i p = _mm256_packs_epi32(iv[2 * h], iv[2 * h + 1]);
            _mm256_storeu_si256((__m256i *)(q + 32 * b + 16 * h), _mm256_permute4x64_epi64(p, 0xD8));
        }
    }
}

AI void pass(const tensor *W, int K, const void *act, int m0, int mt, int64_t n, int off, int hasmin, float *out) {
    __m256 acc[XMT], macc[XMT];
    quant_xrow xr[XMT];
    for (int i = 0; i < mt; i++) {
        acc[i] = macc[i] = _mm256_setzero_ps();
        xr[i] = quant_xrow_at(act, K, m0 + i);
    }
    const __m256i o16 = _mm256_set1_epi16((short)off);
    uint8_t u[QSPAN];
    float a[16], c[16];
    const int nsp = quant_kp(K) / QSPAN;
    for (int sp = 0; sp < nsp; sp++) {
        quant_unpack_span(W, n, sp, u, a, c);
        for (int s = 0; s < 16; s++) {
            const __m256i w16 = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(u + 16 * s))), o16);
            const size_t e = (size_t)sp * QSPAN + 16 * (size_t)s;
            for (int i = 0; i < mt; i++) {
                const __m256i x16 = _mm256_loadu_si256((const __m256i *)(xr[i].q + e));
                const __m256 lane = _mm256_cvtepi32_ps(_mm256_madd_epi16(w16, x16));
                acc[i] = _mm256_fmadd_ps(lane, _mm256_set1_ps(a[s] * xr[i].d[e / 32]), acc[i]);
            }
        }
        if (hasmin)
            for (int h = 0; h < 2; h++)
                for (int i = 0; i < mt; i++)
                    macc[i] = _mm256_fmadd_ps(_mm256_loadu_ps(c + 8 * h), _mm256_loadu_ps(xr[i].dsx + (size_t)sp * 16 + 8 * h),
                                              macc[i]);
    }
    for (int i = 0; i < mt; i++) out[i] = hsum8(acc[i]) + hsum8(macc[i]);
}

void avx2_quant_matmul(float *y, int ldy, const void *act, int M, int K, const tensor *W, const float *bias,
                       int64_t n0, int64_t n1) {
    const int off = quant_offset(W), hasmin = quant_has_min(W);
    float out[XMT];
    for (int64_t n = n0; n < n1; n++)
        for (int m0 = 0; m0 < M; m0 += XMT) {
            const int mt = M - m0 < XMT ? M - m0 : XMT;
            switch (mt) {
            case 4: pass(W, K, act, m0, 4, n, off, hasmin, out); break;
            case 3: pass(W, K, act, m0, 3, n, off, hasmin, out); break;
            case 2: pass(W, K, act, m0, 2, n, off, hasmin, out); break;
            default: pass(W, K, act, m0, 1, n, off, hasmin, out); break;
            }
            for (int i = 0; i < mt; i++) y[(size_t)(m0 + i) * ldy + n] = bias ? out[i] + bias[n] : out[i];
        }
}

#endif
