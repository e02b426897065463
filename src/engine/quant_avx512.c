/* quant_avx512: level 2 of the quantized matmul (AVX-512 with VNNI and
 * VBMI), every format, and the level-2 activation quantizer. Compiled with
 * the Makefile's AVX-512 flags plus the target pragma below; quant.c calls
 * it only when ops_level() == 2 and avx512_quant_ok().
 *
 * Arithmetic (quant.h, level 2): a weight row is read in spans of 256
 * elements (a K-quant super-block, eight 32-element blocks, or 256 MLX
 * elements), each span as up to four chunks of 64 elements. A chunk's
 * unsigned elements u (64 bytes), widened to int16 in the order of the x
 * row's qp plane, meet its 64 16-bit values in two vpdpwssd whose
 * accumulator starts at the x row's cor lanes (-off times the lane's
 * 4-element sum of q_x), so lane i is the exact integer dot of elements
 * 4i..4i+3 of (u - off) with q_x (widen and dotw below; the other exact
 * route, q as two int8 planes 256 hi + lo through two vpdpbusd and a
 * shift and add, measured up to 18% slower at M = 16 and 512, none
 * faster). Then
 *   acc = fma(float(lane), a_s * dx, acc)     (a_s * dx: one f32 product)
 * and after a span's chunks, for formats with a min term,
 *   acc = fma(c_s, dx * xsum_s, acc)          (unit s of the span, lane s);
 * y = hsum16(acc) + bias. Each (m, n) runs exactly this sequence whatever
 * the tile of x rows and W rows it shares (the tile only shares the
 * unpacked weights and the x loads), so results do not depend on M, on
 * [n0, n1) or on the thread; the formats without their own unpacking below
 * go through quant_unpack_span into the same values, so both routes give
 * the same bits (tests/test_quant.c checks it).
 *
 * Cost at M = 1 (Q4_0): per 64 weights two 16-byte loads, a shift, a mask,
 * two byte permutes, two dots, a convert, a product and an FMA, about 12
 * vector instructions for 36 bytes, where widening the weights to f32 took
 * 3-5 per 16; each x row of a tile adds two loads and two dots. */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__F16C__)

#pragma GCC target("avx512vnni,avx512vbmi")

#include <cpuid.h>
#include <immintrin.h>

#include "engine/cpu.h"
#include "engine/quant_internal.h"

#define AI static inline __attribute__((always_inline))
#define UNR _Pragma("GCC unroll 16")

/* computed once and cached atomically (as cpu.c's), so any thread may ask */
int avx512_quant_ok(void) {
    static int ok = -1;
    int v = __atomic_load_n(&ok, __ATOMIC_RELAXED);
    if (v < 0) {
        unsigned a, b, c, d;
        v = 0;
        if (cpu_has_avx512() && __get_cpuid_max(0, NULL) >= 7) {
            __cpuid_count(7, 0, a, b, c, d);
            v = ((c >> 1) & 1) && ((c >> 11) & 1); /* AVX512_VBMI, AVX512_VNNI */
        }
        __atomic_store_n(&ok, v, __ATOMIC_RELAXED);
    }
    return v;
}

AI float hsum16(__m512 a) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    t = _mm_add_ss(t, _mm_movehdup_ps(t));
    return _mm_cvtss_f32(t);
}

/* ------------------------------------------------- activation quantizer */

/* quant_x_block's rule, 32 elements at a time: the max of |x| is exact,
 * the division is IEEE (vdivps, not a reciprocal), vrndscaleps rounds half
 * to even like nearbyintf, so q and d equal the scalar ones bit for bit */
void avx512_quant_x(const float *x, int K, int16_t *q, float *d) {
    const __m512 lim = _mm512_set1_ps((float)QX_MAX), nlim = _mm512_set1_ps(-(float)QX_MAX);
    for (int b = 0; b < K / 32; b++) {
        const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float dd = amax / (float)QX_MAX;
        d[b] = dd;
        if (dd == 0.0f) {
            memset(q + 32 * b, 0, 32 * sizeof *q);
            continue;
        }
        const __m512 dv = _mm512_set1_ps(dd);
        __m512 r0 = _mm512_roundscale_ps(_mm512_div_ps(v0, dv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 r1 = _mm512_roundscale_ps(_mm512_div_ps(v1, dv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r0 = _mm512_max_ps(_mm512_min_ps(r0, lim), nlim);
        r1 = _mm512_max_ps(_mm512_min_ps(r1, lim), nlim);
        _mm256_storeu_si256((__m256i *)(q + 32 * b), _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(r0)));
        _mm256_storeu_si256((__m256i *)(q + 32 * b + 16), _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(r1)));
    }
}

/* ------------------------------------------------------ weight unpacking
 *
 * Per format: span_head fills a[16] / c[16] (unit scales and min terms,
 * quant.h's table, the f32 values quant_unpack_span computes) and chunk
 * returns the 64 unsigned elements of chunk j; elements past the row's
 * end may hold anything (their x and scales are zero) but are never read
 * from outside the row. */

enum { F_GEN, F_Q8_0, F_Q4_0, F_Q5_0, F_Q4_K, F_Q5_K, F_Q6_K, F_MLX };

typedef struct {
    const tensor *W;
    int K, nsp, off, hasmin, fmt;
    size_t rb;
    size_t span_bytes, pf; /* bytes of a full span of a row; prefetch distance */
    /* MLX */
    int bits, group;
    __m512i pidx, sctrl, emask;
    __m512i gidx;
} wctx;

AI uint16_t ld16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* the d of nb (<= 8) 32-element blocks of bb bytes, per unit (lanes past
 * 2 nb 0.0): the f16 fields gathered in general registers (the integer
 * units are idle here), then converted together (cvtph is exact) */
AI __m512 b32_scales(const uint8_t *b, size_t bb, int nb) {
    uint64_t lo = 0, hi = 0;
    if (nb == 8) {
        lo = (uint64_t)ld16(b) | (uint64_t)ld16(b + bb) << 16 | (uint64_t)ld16(b + 2 * bb) << 32 |
             (uint64_t)ld16(b + 3 * bb) << 48;
        hi = (uint64_t)ld16(b + 4 * bb) | (uint64_t)ld16(b + 5 * bb) << 16 | (uint64_t)ld16(b + 6 * bb) << 32 |
             (uint64_t)ld16(b + 7 * bb) << 48;
    } else {
        for (int i = 0; i < nb && i < 4; i++) lo |= (uint64_t)ld16(b + i * bb) << (16 * i);
        for (int i = 4; i < nb; i++) hi |= (uint64_t)ld16(b + i * bb) << (16 * (i - 4));
    }
    const __m128i h = _mm_insert_epi64(_mm_cvtsi64_si128((long long)lo), (long long)hi, 1);
    const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    return _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_cvtph_ps(h)));
}

/* Q4_K / Q5_K: a = d * sc, c = -(dmin * mn) per unit (the 12 scale bytes
 * regrouped into 8 scales and 8 mins, quant.c's k4_scale_min) */
AI void k4_head(const uint8_t *blk, __m512 *a, __m512 *c) {
    uint32_t u[4];
    memcpy(u, blk + 4, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    const uint32_t t = u[1] & 0x3f3f3f3fu;
    u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    u[2] = t;
    u[0] &= 0x3f3f3f3fu;
    const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)u)));
    const __m512 dd = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(_cvtsh_ss(ld16(blk))), _mm512_set1_ps(_cvtsh_ss(ld16(blk + 2))));
    const __m512 p = _mm512_mul_ps(dd, v);
    *a = _mm512_permutexvar_ps(_mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0), p);
    const __m512 mn = _mm512_permutexvar_ps(_mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8), p);
    *c = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(mn), _mm512_set1_epi32((int)0x80000000u)));
}

/* MLX: the scales or biases of the span's groups, per unit */
AI __m512 mlx_sb(const wctx *w, const void *p, size_t g0, int ng) {
    const __mmask16 k = (__mmask16)((1u << ng) - 1u);
    __m512 g;
    switch (w->W->q.sdtype) {
    case DT_F32: g = _mm512_maskz_loadu_ps(k, (const float *)p + g0); break;
    case DT_F16:
        g = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_maskz_loadu_epi16((__mmask8)k, (const uint16_t *)p + g0)));
        break;
    default: /* BF16: the high half of an f32 */
        g = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, (const uint16_t *)p + g0)), 16));
    }
    return _mm512_permutexvar_ps(w->gidx, g);
}

typedef struct {
    const uint8_t *row; /* the W row */
    int64_t n;
    uint8_t *u;         /* F_GEN: the unpacked span (QSPAN bytes) */
} wrow;

/* a, c of row r's span sp (and, for F_GEN, its elements into r->u) */
AI void span_head(const wctx *w, int fmt, wrow *r, int sp, int nb32, __m512 *a, __m512 *c) {
    switch (fmt) {
    case F_Q8_0: *a = b32_scales(r->row + (size_t)sp * 8 * 34, 34, nb32); break;
    case F_Q4_0: *a = b32_scales(r->row + (size_t)sp * 8 * 18, 18, nb32); break;
    case F_Q5_0: *a = b32_scales(r->row + (size_t)sp * 8 * 22, 22, nb32); break;
    case F_Q4_K: k4_head(r->row + (size_t)sp * 144, a, c); break;
    case F_Q5_K: k4_head(r->row + (size_t)sp * 176, a, c); break;
    case F_Q6_K: {
        const uint8_t *b = r->row + (size_t)sp * 210;
        *a = _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(ld16(b + 208))),
                           _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 192)))));
        break;
    }
    case F_MLX: {
        const int g = w->group, per = QSPAN / g, left = (w->K - sp * QSPAN) / g;
        const size_t g0 = (size_t)r->n * (size_t)(w->K / g) + (size_t)sp * (size_t)per;
        const int ng = left < per ? left : per;
        *a = mlx_sb(w, w->W->q.scales, g0, ng);
        *c = mlx_sb(w, w->W->q.biases, g0, ng);
        break;
    }
    default: {
        float fa[16], fc[16];
        quant_unpack_span(w->W, r->n, sp, r->u, fa, fc);
        *a = _mm512_loadu_ps(fa);
        *c = _mm512_loadu_ps(fc);
    }
    }
}

/* 64 elements of 32-element blocks b and b + 1 (b alone when !two) */
AI __m512i chunk_b32(int fmt, const uint8_t *b0, int two) {
    const size_t bb = fmt == F_Q8_0 ? 34 : fmt == F_Q4_0 ? 18 : 22;
    const uint8_t *b1 = two ? b0 + bb : b0;
    if (fmt == F_Q8_0) {
        const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + 2))),
                                             _mm256_loadu_si256((const __m256i *)(b1 + 2)), 1);
        return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
    }
    const int qo = fmt == F_Q4_0 ? 2 : 6;
    /* 128-bit lanes: qs0, qs0 >> 4, qs1, qs1 >> 4 (low then high nibbles) */
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b0 + qo)))),
                                   _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b1 + qo))), 1);
    v = _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)), _mm512_set1_epi8(15));
    if (fmt == F_Q5_0) {
        uint32_t h0, h1;
        memcpy(&h0, b0 + 2, 4);
        memcpy(&h1, b1 + 2, 4);
        v = _mm512_mask_add_epi8(v, (__mmask64)h0 | (__mmask64)h1 << 32, v, _mm512_set1_epi8(16));
    }
    return v;
}

AI __m512i chunk(const wctx *w, int fmt, const wrow *r, int sp, int j, int nb32) {
    switch (fmt) {
    case F_Q8_0: case F_Q4_0: case F_Q5_0: {
        const size_t bb = fmt == F_Q8_0 ? 34 : fmt == F_Q4_0 ? 18 : 22;
        return chunk_b32(fmt, r->row + (size_t)(sp * 8 + 2 * j) * bb, 2 * j + 1 < nb32);
    }
    case F_Q4_K: case F_Q5_K: {
        const int five = fmt == F_Q5_K;
        const uint8_t *b = r->row + (size_t)sp * (five ? 176 : 144);
        const uint8_t *qs = b + 16 + 32 * five + 32 * j;
        __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qs));
        v = _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0)), _mm512_set1_epi8(15));
        if (five) {
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 16)));
            const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * j))), _mm256_set1_epi8((char)(2 << (2 * j))), 1);
            v = _mm512_mask_add_epi8(v, _mm512_test_epi8_mask(qh, sel), v, _mm512_set1_epi8(16));
        }
        return v;
    }
    case F_Q6_K: {
        const uint8_t *b = r->row + (size_t)sp * 210;
        const int h = j >> 1, hi = j & 1;
        __m512i lo = _mm512_loadu_si512((const void *)(b + 64 * h));
        if (hi) lo = _mm512_srli_epi16(lo, 4);
        const __m512i H = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h)));
        /* elements 0-31 of the chunk take bits (4hi, 4hi+1) of qh[l], 32-63
         * bits (4hi+2, 4hi+3), moved to bits 4-5 by one 16-bit shift (bits
         * crossing into the other byte of the lane fall outside 0x30) */
        __m512i hb;
        if (hi)
            hb = _mm512_srlv_epi16(H, _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1));
        else
            hb = _mm512_sllv_epi16(H, _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1));
        hb = _mm512_and_si512(hb, _mm512_set1_epi8(0x30));
        return _mm512_ternarylogic_epi32(lo, _mm512_set1_epi8(15), hb, 0xEA); /* (lo & 15) | hb */
    }
    case F_MLX: {
        const int bits = w->bits;
        const int e0 = sp * QSPAN + 64 * j, ne = w->K - e0 < 64 ? 32 : 64;
        const uint8_t *p = r->row + (size_t)e0 * (size_t)bits / 8;
        const int nbytes = ne * bits / 8;
        const __m512i raw = _mm512_maskz_loadu_epi8(nbytes == 64 ? ~(__mmask64)0 : ((__mmask64)1 << nbytes) - 1, p);
        if (bits == 8) return raw;
        return _mm512_and_si512(_mm512_multishift_epi64_epi8(w->sctrl, _mm512_permutexvar_epi8(w->pidx, raw)), w->emask);
    }
    default: return _mm512_loadu_si512((const void *)(r->u + 64 * j));
    }
}

/* ----------------------------------------------------------- the kernel */

/* most x rows per tile: 6 x 4 W rows keeps the 24 accumulators and the
 * rows' widened chunks in the 32 registers; measured against 4 x 4 on one
 * core (M = 256, K = N = 1024): Q4_0 +11%, Q4_K +20%, Q8_0 +15% (8 x 4
 * spills on Q4_K, 6 x 3 and 8 x 2 are slower) */
#ifndef GMT
#define GMT 6
#endif
#ifndef GPF
#define GPF 2 /* prefetch distance in tiles of GNR rows */
#endif
#ifndef GNR
#define GNR 4 /* most W rows per tile */
#endif

/* the format's offset where the format fixes it (the x row's cor lanes
 * are then read only where it is not 0); -1: w->off decides */
AI int fmt_off(int fmt) {
    switch (fmt) {
    case F_Q8_0: return 128;
    case F_Q4_0: return 8;
    case F_Q5_0: return 16;
    case F_Q6_K: return 32;
    case F_GEN: return -1;
    default: return 0;
    }
}

/* The 64 unsigned elements u of a chunk widened to int16 by two
 * zero-masked byte permutes, into the order of the x row's qp plane
 * (quant_internal.h): word p of w0 is element 4(p/2) + p%2, of w1 element
 * 4(p/2) + 2 + p%2 */
static const uint8_t wperm[2][64] __attribute__((aligned(64))) = {
#define P0(p) (uint8_t)(((p) & 1) ? 0 : 4 * ((p) / 4) + ((p) / 2 & 1))
#define P1(p) (uint8_t)(((p) & 1) ? 0 : 4 * ((p) / 4) + 2 + ((p) / 2 & 1))
#define R8(P, b) P(b), P(b + 1), P(b + 2), P(b + 3), P(b + 4), P(b + 5), P(b + 6), P(b + 7)
    {R8(P0, 0), R8(P0, 8), R8(P0, 16), R8(P0, 24), R8(P0, 32), R8(P0, 40), R8(P0, 48), R8(P0, 56)},
    {R8(P1, 0), R8(P1, 8), R8(P1, 16), R8(P1, 24), R8(P1, 32), R8(P1, 40), R8(P1, 48), R8(P1, 56)}};
#undef P0
#undef P1
#undef R8
AI void widen(__m512i u, __m512i *w0, __m512i *w1) {
    *w0 = _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, _mm512_load_si512((const void *)wperm[0]), u);
    *w1 = _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, _mm512_load_si512((const void *)wperm[1]), u);
}
/* lane i = cor_i + sum over elements 4i..4i+3 of u * q, exact: vpdpwssd
 * does not saturate, and every partial sum stays under 2^26 in magnitude
 * (cor and the products, quant_internal.h's bounds) */
AI __m512i dotw(__m512i cor, __m512i w0, __m512i w1, __m512i x0, __m512i x1) {
    return _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(cor, w0, x0), w1, x1);
}

/* out[r * GMT + i] = y of x row m0 + i and W row rows[r] (no bias), for a
 * tile of mt x rows and nr W rows */
AI void tile(const wctx *w, int fmt, const void *act, int m0, int mt, wrow *rows, int nr, float *out) {
    __m512 acc[GNR][GMT];
    UNR for (int r = 0; r < nr; r++) UNR for (int i = 0; i < mt; i++) acc[r][i] = _mm512_setzero_ps();
    const int K = w->K, has_off = fmt_off(fmt) < 0 ? w->off != 0 : fmt_off(fmt) != 0;
    quant_xrow xr[GMT];
    UNR for (int i = 0; i < mt; i++) xr[i] = quant_xrow_at(act, K, m0 + i);
    const __m512i idx[4] = {
        _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
        _mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4),
        _mm512_set_epi32(11, 11, 11, 11, 10, 10, 10, 10, 9, 9, 9, 9, 8, 8, 8, 8),
        _mm512_set_epi32(15, 15, 15, 15, 14, 14, 14, 14, 13, 13, 13, 13, 12, 12, 12, 12)};
    for (int sp = 0; sp < w->nsp; sp++) {
        const int left = K - sp * QSPAN, nb32 = left >= QSPAN ? 8 : left / 32, nch = (nb32 + 1) / 2;
        __m512 a[GNR], c[GNR], ad[GNR];
        UNR for (int r = 0; r < nr; r++) {
            /* the same span GPF tiles ahead: the hardware prefetcher follows
             * nr interleaved row streams poorly (measured: M = 1 from memory
             * slower than the f32 kernel without this) */
            const uint8_t *pf = rows[r].row + (size_t)sp * w->span_bytes + w->pf;
            for (size_t o = 0; o < w->span_bytes; o += 64) _mm_prefetch((const char *)pf + o, _MM_HINT_T0);
            c[r] = _mm512_setzero_ps();
            span_head(w, fmt, &rows[r], sp, nb32, &a[r], &c[r]);
            /* a_s * dx per unit: the same f32 products as a lane's a * dx */
            if (mt == 1) ad[r] = _mm512_mul_ps(a[r], _mm512_loadu_ps(xr[0].dxu + (size_t)sp * 16));
        }
        for (int j = 0; j < nch; j++) {
            __m512i u[GNR];
            __m512 al[GNR];
            const size_t e = (size_t)sp * QSPAN + 64 * (size_t)j;
            if (mt == 1) {
                /* one x row: a_s * dx taken from the span's products ad */
                const __m512i x0 = _mm512_loadu_si512((const void *)(xr[0].qp + e));
                const __m512i x1 = _mm512_loadu_si512((const void *)(xr[0].qp + e + 32));
                const __m512i cv = has_off ? _mm512_loadu_si512((const void *)(xr[0].cor + e / 4)) : _mm512_setzero_si512();
                UNR for (int r = 0; r < nr; r++) {
                    __m512i w0, w1;
                    widen(chunk(w, fmt, &rows[r], sp, j, nb32), &w0, &w1);
                    const __m512i il = dotw(cv, w0, w1, x0, x1);
                    acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(il), _mm512_permutexvar_ps(idx[j], ad[r]), acc[r][0]);
                }
                continue;
            }
            __m512i u1[GNR]; /* u[r], u1[r]: row r's chunk widened (widen's w0, w1) */
            UNR for (int r = 0; r < nr; r++) {
                u[r] = chunk(w, fmt, &rows[r], sp, j, nb32);
                widen(u[r], &u[r], &u1[r]);
                al[r] = _mm512_permutexvar_ps(idx[j], a[r]);
            }
            UNR for (int i = 0; i < mt; i++) {
                const __m512i x0 = _mm512_loadu_si512((const void *)(xr[i].qp + e));
                const __m512i x1 = _mm512_loadu_si512((const void *)(xr[i].qp + e + 32));
                const __m512 dxv = _mm512_loadu_ps(xr[i].dxl + e / 4);
                const __m512i cv = has_off ? _mm512_loadu_si512((const void *)(xr[i].cor + e / 4)) : _mm512_setzero_si512();
                UNR for (int r = 0; r < nr; r++) {
                    const __m512i il = dotw(cv, u[r], u1[r], x0, x1);
                    acc[r][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(il), _mm512_mul_ps(al[r], dxv), acc[r][i]);
                }
            }
        }
        if (w->hasmin) {
            UNR for (int i = 0; i < mt; i++) {
                const __m512 ds = _mm512_loadu_ps(xr[i].dsx + (size_t)sp * 16);
                UNR for (int r = 0; r < nr; r++) acc[r][i] = _mm512_fmadd_ps(c[r], ds, acc[r][i]);
            }
        }
    }
    UNR for (int r = 0; r < nr; r++) UNR for (int i = 0; i < mt; i++) out[r * GMT + i] = hsum16(acc[r][i]);
}

typedef void (*tile_fn)(const wctx *w, const void *act, int m0, int mt, wrow *rows, float *out);

#define TILES(f, F)                                                                                       \
    static void f(const wctx *w, const void *act, int m0, int mt, wrow *rows, float *out) {               \
        switch (mt) {                                                                                     \
        case GMT: tile(w, F, act, m0, GMT, rows, GNR, out); break;                                        \
        case 2: tile(w, F, act, m0, 2, rows, GNR, out); break;                                            \
        default: tile(w, F, act, m0, 1, rows, GNR, out); break;                                           \
        }                                                                                                 \
    }
TILES(t_gen, F_GEN)
TILES(t_q8_0, F_Q8_0)
TILES(t_q4_0, F_Q4_0)
TILES(t_q5_0, F_Q5_0)
TILES(t_q4_k, F_Q4_K)
TILES(t_q5_k, F_Q5_K)
TILES(t_q6_k, F_Q6_K)
TILES(t_mlx, F_MLX)

/* x rows per block of the prefill loop: the activations the tiles read
 * (qp, cor, dxl: about 4 bytes per element) stay in L2 while a chunk
 * of W rows passes over them */
#define XBLK 64

/* w's fields for W; returns the format whose unpacking the kernels use
 * (F_GEN for the others, or for all where generic != 0) */
static int wctx_init(wctx *w, const tensor *W, int K, int generic) {
    *w = (wctx){.W = W, .K = K, .nsp = quant_kp(K) / QSPAN, .off = quant_offset(W), .hasmin = quant_has_min(W),
                .rb = quant_row_bytes(W->dtype, W->q.bits, K)};
    w->span_bytes = W->dtype == DT_MLX ? (size_t)QSPAN * (size_t)W->q.bits / 8
                                       : (size_t)QSPAN / (size_t)quant_block_elems(W->dtype) * quant_block_bytes(W->dtype);
    w->pf = GPF * GNR * w->rb;
    int fmt = F_GEN;
    if (!generic) {
        switch (W->dtype) {
        case DT_Q8_0: fmt = F_Q8_0; break;
        case DT_Q4_0: fmt = F_Q4_0; break;
        case DT_Q5_0: fmt = F_Q5_0; break;
        case DT_Q4_K: fmt = F_Q4_K; break;
        case DT_Q5_K: fmt = F_Q5_K; break;
        case DT_Q6_K: fmt = F_Q6_K; break;
        case DT_MLX: fmt = F_MLX; break;
        default: break;
        }
    }
    if (fmt == F_MLX) {
        const int bits = W->q.bits, g = W->q.group;
        w->bits = bits;
        w->group = g;
        uint8_t pi[64], sc[64];
        for (int q = 0; q < 8; q++)
            for (int e = 0; e < 8; e++) {
                pi[8 * q + e] = (uint8_t)(q * bits + e); /* qword q: the bytes of elements 8q.. */
                sc[8 * q + e] = (uint8_t)(e * bits);     /* element 8q + e at bit e * bits of it */
            }
        w->pidx = _mm512_loadu_si512((const void *)pi);
        w->sctrl = _mm512_loadu_si512((const void *)sc);
        w->emask = _mm512_set1_epi8((char)((1 << bits) - 1));
        int gi[16];
        for (int s = 0; s < 16; s++) gi[s] = s * 16 / g;
        w->gidx = _mm512_loadu_si512((const void *)gi);
    }
    return fmt;
}

void avx512_quant_matmul(float *y, int ldy, const void *act, int M, int K, const tensor *W, const float *bias,
                         int64_t n0, int64_t n1, int generic) {
    wctx w;
    static const tile_fn tfs[] = {[F_GEN] = t_gen, [F_Q8_0] = t_q8_0, [F_Q4_0] = t_q4_0, [F_Q5_0] = t_q5_0,
                                  [F_Q4_K] = t_q4_k, [F_Q5_K] = t_q5_k, [F_Q6_K] = t_q6_k, [F_MLX] = t_mlx};
    const tile_fn tf = tfs[wctx_init(&w, W, K, generic)];
    const uint8_t *base = (const uint8_t *)W->data;
    float out[GNR * GMT];
    uint8_t ubuf[GNR][QSPAN] __attribute__((aligned(64)));
    for (int xb = 0; xb < M; xb += XBLK) {
        const int xe = xb + XBLK < M ? xb + XBLK : M;
        for (int64_t n = n0; n < n1; n += GNR) {
            /* past [n0, n1) a tile repeats its last row; those results are dropped */
            wrow rows[GNR];
            for (int r = 0; r < GNR; r++) {
                rows[r].n = n + r < n1 ? n + r : n1 - 1;
                rows[r].row = base + (size_t)rows[r].n * w.rb;
                rows[r].u = ubuf[r];
            }
            for (int m0 = xb; m0 < xe;) {
                const int rm = xe - m0, mt = rm >= GMT ? GMT : rm >= 2 ? 2 : 1;
                tf(&w, act, m0, mt, rows, out);
                for (int r = 0; r < GNR && n + r < n1; r++)
                    for (int i = 0; i < mt; i++)
                        y[(size_t)(m0 + i) * ldy + n + r] = bias ? out[r * GMT + i] + bias[n + r] : out[r * GMT + i];
                m0 += mt;
            }
        }
    }
}

/* ------------------------------------------------- the prefill family
 *
 * quant.h's prefill rule. Activations: quant_prow, each span's 64-byte
 * step t holding two 16-bit elements of every unit (lane s = unit s).
 * Weights: a panel of PNR W rows unpacked once per block of x rows into
 * the same order (u widened to int16, a and c per unit), so one vpdpwssd
 * adds two products of unit s to lane s, and after a span's eight steps
 * lane s holds the unit's exact integer sum (started at the x row's cor,
 * -off * sum q). Then per lane, as the scalar rule:
 *   acc = fma(float(sum) * a_s, dx_s, acc)   [+ fma(c_s, dsx_s, acc)]
 * and y = hsum16(acc) + bias, the pairs of quant.h. A tile shares only the
 * loads of weights and activations among its rows and columns. Per (m, n)
 * and span: eight dots, a convert, a product and an FMA (the kernel above:
 * eight dots and four of each). */

#define PNR 4 /* W rows per panel (quant.c's QPRE_NR) */
#define PMR 3 /* x rows per tile: PMR x PNR integer and float accumulators */

/* A span as 16 units x 8 dwords (two 16-bit elements each), h[k] holding
 * units 2k and 2k + 1, into its eight steps: st[t] lane s = dword t of unit
 * s (h[s / 2] dword 8 (s % 2) + t). Two-input dword permutes give, per
 * four units, steps 0-3 (or 4-7) in the four 128-bit lanes; a 4 x 4
 * transpose of 128-bit lanes finishes it. */
AI void steps8(const __m512i h[8], __m512i st[8]) {
    /* lane L: step t = L / 4 (+ 4), unit 4i + L % 4 = h[2i + (L%4)/2] dword ((L%4)%2) * 8 + t */
    const __m512i ilo = _mm512_set_epi32(27, 19, 11, 3, 26, 18, 10, 2, 25, 17, 9, 1, 24, 16, 8, 0);
    const __m512i ihi = _mm512_set_epi32(31, 23, 15, 7, 30, 22, 14, 6, 29, 21, 13, 5, 28, 20, 12, 4);
    __m512i ql[4], qh[4];
    for (int i = 0; i < 4; i++) {
        ql[i] = _mm512_permutex2var_epi32(h[2 * i], ilo, h[2 * i + 1]);
        qh[i] = _mm512_permutex2var_epi32(h[2 * i], ihi, h[2 * i + 1]);
    }
    for (int g = 0; g < 2; g++) {
        const __m512i *q = g ? qh : ql;
        const __m512i t0 = _mm512_shuffle_i64x2(q[0], q[1], 0x44), t1 = _mm512_shuffle_i64x2(q[0], q[1], 0xEE);
        const __m512i t2 = _mm512_shuffle_i64x2(q[2], q[3], 0x44), t3 = _mm512_shuffle_i64x2(q[2], q[3], 0xEE);
        st[4 * g + 0] = _mm512_shuffle_i64x2(t0, t2, 0x88);
        st[4 * g + 1] = _mm512_shuffle_i64x2(t0, t2, 0xDD);
        st[4 * g + 2] = _mm512_shuffle_i64x2(t1, t3, 0x88);
        st[4 * g + 3] = _mm512_shuffle_i64x2(t1, t3, 0xDD);
    }
}

/* x row r by quant_pre_row_scalar's rule: avx512_quant_x's q and d (bit
 * for bit quant_x_block's), a span at a time, put into steps; the unit
 * sums by vpdpwssd against ones (exact) */
void avx512_pre_row(quant_prow r, const float *x, int K, int off) {
    const int nsp = quant_kp(K) / QSPAN;
    int16_t q[QSPAN] __attribute__((aligned(64)));
    float d[8];
    const __m512i one = _mm512_set1_epi16(1), offv = _mm512_set1_epi32(-off);
    const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    for (int sp = 0; sp < nsp; sp++) {
        const int left = K - sp * QSPAN, n = left < QSPAN ? left : QSPAN;
        memset(q + n, 0, (size_t)(QSPAN - n) * sizeof *q);
        for (int b = n / 32; b < 8; b++) d[b] = 0.0f;
        avx512_quant_x(x + (size_t)sp * QSPAN, n, q, d);
        __m512i h[8], st[8];
        for (int k = 0; k < 8; k++) h[k] = _mm512_load_si512((const void *)(q + 32 * k));
        steps8(h, st);
        __m512i xs = _mm512_setzero_si512();
        for (int t = 0; t < 8; t++) {
            _mm512_storeu_si512((void *)(r.q + (size_t)sp * QSPAN + 32 * t), st[t]);
            xs = _mm512_dpwssd_epi32(xs, st[t], one);
        }
        const __m512 dx = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_loadu_ps(d)));
        _mm512_storeu_si512((void *)(r.cor + 16 * sp), _mm512_mullo_epi32(xs, offv));
        _mm512_storeu_ps(r.dx + 16 * sp, dx);
        _mm512_storeu_ps(r.dsx + 16 * sp, _mm512_mul_ps(dx, _mm512_cvtepi32_ps(xs)));
    }
}

/* the panel: per row r and span sp, 8 steps of 32 int16 at
 * pq + (r * nsp + sp) * 256, and a, c at pa / pc + (r * nsp + sp) * 16 */
AI void panel_fmt(const wctx *w, int fmt, wrow *rows, int16_t *pq, float *pa, float *pc) {
    const int K = w->K, nsp = w->nsp;
    for (int r = 0; r < PNR; r++)
        for (int sp = 0; sp < nsp; sp++) {
            const int left = K - sp * QSPAN, nb32 = left >= QSPAN ? 8 : left / 32, nch = (nb32 + 1) / 2;
            __m512 a, c = _mm512_setzero_ps();
            span_head(w, fmt, &rows[r], sp, nb32, &a, &c);
            const size_t o = (size_t)r * (size_t)nsp + (size_t)sp;
            _mm512_store_ps(pa + 16 * o, a);
            _mm512_store_ps(pc + 16 * o, c);
            __m512i h[8], st[8];
            for (int j = 0; j < 4; j++) {
                const __m512i u = j < nch ? chunk(w, fmt, &rows[r], sp, j, nb32) : _mm512_setzero_si512();
                h[2 * j] = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(u));
                h[2 * j + 1] = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(u, 1));
            }
            steps8(h, st);
            for (int t = 0; t < 8; t++) _mm512_store_si512((void *)(pq + QSPAN * o + 32 * t), st[t]);
        }
}

typedef void (*panel_fn)(const wctx *w, wrow *rows, int16_t *pq, float *pa, float *pc);
#define PANEL(f, F) \
    static void f(const wctx *w, wrow *rows, int16_t *pq, float *pa, float *pc) { panel_fmt(w, F, rows, pq, pa, pc); }
PANEL(p_gen, F_GEN)
PANEL(p_q8_0, F_Q8_0)
PANEL(p_q4_0, F_Q4_0)
PANEL(p_q5_0, F_Q5_0)
PANEL(p_q4_k, F_Q4_K)
PANEL(p_q5_k, F_Q5_K)
PANEL(p_q6_k, F_Q6_K)
PANEL(p_mlx, F_MLX)

/* out[r * PMR + i] = y of x row m0 + i and panel row r (no bias) */
AI void pre_tile(const int16_t *pq, const float *pa, const float *pc, int nsp, const void *act, int K, int m0,
                 int mt, int hasmin, float *out) {
    __m512 fa[PMR][PNR];
    quant_prow xr[PMR];
    UNR for (int i = 0; i < mt; i++) {
        xr[i] = quant_prow_at(act, K, m0 + i);
        UNR for (int r = 0; r < PNR; r++) fa[i][r] = _mm512_setzero_ps();
    }
    for (int sp = 0; sp < nsp; sp++) {
        __m512i ia[PMR][PNR];
        UNR for (int i = 0; i < mt; i++) {
            const __m512i cv = _mm512_loadu_si512((const void *)(xr[i].cor + 16 * sp));
            UNR for (int r = 0; r < PNR; r++) ia[i][r] = cv;
        }
        UNR for (int t = 0; t < 8; t++) {
            __m512i wv[PNR];
            UNR for (int r = 0; r < PNR; r++)
                wv[r] = _mm512_load_si512((const void *)(pq + QSPAN * ((size_t)r * nsp + sp) + 32 * t));
            UNR for (int i = 0; i < mt; i++) {
                const __m512i xv = _mm512_loadu_si512((const void *)(xr[i].q + (size_t)sp * QSPAN + 32 * t));
                UNR for (int r = 0; r < PNR; r++) ia[i][r] = _mm512_dpwssd_epi32(ia[i][r], wv[r], xv);
            }
        }
        UNR for (int i = 0; i < mt; i++) {
            const __m512 dxv = _mm512_loadu_ps(xr[i].dx + 16 * sp);
            UNR for (int r = 0; r < PNR; r++) {
                const size_t o = 16 * ((size_t)r * nsp + sp);
                const __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(ia[i][r]), _mm512_load_ps(pa + o));
                fa[i][r] = _mm512_fmadd_ps(p, dxv, fa[i][r]);
            }
            if (hasmin) {
                const __m512 dsv = _mm512_loadu_ps(xr[i].dsx + 16 * sp);
                UNR for (int r = 0; r < PNR; r++)
                    fa[i][r] = _mm512_fmadd_ps(_mm512_load_ps(pc + 16 * ((size_t)r * nsp + sp)), dsv, fa[i][r]);
            }
        }
    }
    UNR for (int r = 0; r < PNR; r++) UNR for (int i = 0; i < mt; i++) out[r * PMR + i] = hsum16(fa[i][r]);
}

typedef void (*pre_tile_fn)(const int16_t *pq, const float *pa, const float *pc, int nsp, const void *act, int K,
                            int m0, float *out);
#define PTILE(f, MT, HM)                                                                                      \
    static void f(const int16_t *pq, const float *pa, const float *pc, int nsp, const void *act, int K, int m0, \
                  float *out) {                                                                               \
        pre_tile(pq, pa, pc, nsp, act, K, m0, MT, HM, out);                                                   \
    }
PTILE(pt3, PMR, 0)
PTILE(pt2, 2, 0)
PTILE(pt1, 1, 0)
PTILE(pt3m, PMR, 1)
PTILE(pt2m, 2, 1)
PTILE(pt1m, 1, 1)

void avx512_pre_matmul(float *y, int ldy, const void *act, int M, int K, const tensor *W, const float *bias,
                       int64_t n0, int64_t n1, void *work) {
    wctx w;
    static const panel_fn pfs[] = {[F_GEN] = p_gen, [F_Q8_0] = p_q8_0, [F_Q4_0] = p_q4_0, [F_Q5_0] = p_q5_0,
                                   [F_Q4_K] = p_q4_k, [F_Q5_K] = p_q5_k, [F_Q6_K] = p_q6_k, [F_MLX] = p_mlx};
    const panel_fn pf = pfs[wctx_init(&w, W, K, 0)];
    const int nsp = w.nsp;
    const pre_tile_fn tf[2][PMR] = {{pt1, pt2, pt3}, {pt1m, pt2m, pt3m}};
    int16_t *pq = (int16_t *)work;
    float *pa = (float *)(pq + (size_t)PNR * nsp * QSPAN), *pc = pa + (size_t)PNR * nsp * 16;
    /* x rows per block: their activations (quant_pre_stride bytes each)
     * stay in L2 while a chunk of W rows passes over them */
    int xblk = (int)((size_t)(768 << 10) / quant_pre_stride(K));
    xblk = xblk < PMR ? PMR : xblk > 192 ? 192 : xblk;
    const uint8_t *base = (const uint8_t *)W->data;
    uint8_t ubuf[PNR][QSPAN] __attribute__((aligned(64)));
    float out[PNR * PMR];
    for (int xb = 0; xb < M; xb += xblk) {
        const int xe = xb + xblk < M ? xb + xblk : M;
        for (int64_t n = n0; n < n1; n += PNR) {
            /* past [n0, n1) the panel repeats its last row; those results are dropped */
            wrow rows[PNR];
            for (int r = 0; r < PNR; r++) {
                rows[r].n = n + r < n1 ? n + r : n1 - 1;
                rows[r].row = base + (size_t)rows[r].n * w.rb;
                rows[r].u = ubuf[r];
            }
            pf(&w, rows, pq, pa, pc);
            for (int m0 = xb; m0 < xe;) {
                const int mt = xe - m0 < PMR ? xe - m0 : PMR;
                tf[w.hasmin][mt - 1](pq, pa, pc, nsp, act, K, m0, out);
                for (int r = 0; r < PNR && n + r < n1; r++)
                    for (int i = 0; i < mt; i++)
                        y[(size_t)(m0 + i) * ldy + n + r] = bias ? out[r * PMR + i] + bias[n + r] : out[r * PMR + i];
                m0 += mt;
            }
        }
    }
}

#endif
