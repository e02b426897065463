/* quant_avx512: level 2 of quant_matmul_rows for Q4_0, Q8_0, Q4_K, Q6_K and
 * MLX 4/8-bit (the other formats run quant_avx2.c's kernels at level 2).
 * Compiled with the Makefile's AVX-512 flags, called by quant.c only when
 * ops_level() == 2.
 *
 * Q4_0, Q4_K and Q6_K multiply exactly dequantized f32 weights with x
 * (see "GGUF: exact weights" below). Q8_0 and MLX keep quant_avx2.c's
 * arithmetic with 16 lanes instead of 8: per block / group FMAs over its
 * widened integer elements in element order (lane k % 16), its f32 scale
 * applied by one FMA into a 16-lane accumulator, blocks in order, the MLX
 * bias term as its value times the group's x sum (16 lanes); the lanes
 * reduced by hsum16's fixed pairing. So each output depends on x[m] and
 * row n only, as at every level, and differs from level 1 by rounding
 * only. Why 16 lanes: on Zen 4 the widening (vpmovsxbd, vcvtdq2ps) and
 * FMAs issue half as many instructions per element as the AVX2 kernels,
 * which are issue-bound at M = 1 rather than bound by memory. */
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

/* ------------------------------------------------ GGUF: exact weights
 *
 * Q4_0, Q4_K and Q6_K dequantize each weight exactly (the f32
 * operations of quant.c's deq_*, in the same order) into 16-lane vectors
 * and FMA them into one 16-lane f32 accumulator per (m, n), lane k % 16,
 * k increasing; y = hsum16(acc). No block scale is factored out, so each
 * x row costs two FMAs per 32 weights and all the unpacking is shared by
 * the x rows of a pass. A pass covers mt x rows and nr W rows (nr rows
 * give independent FMA chains when mt is small: the FMA latency, not its
 * throughput, bounds one chain). Neither mt nor nr nor the row range
 * changes the operations that produce one (m, n).
 *
 * Unpacking, per 32 elements: Q4_0 builds the 16-entry table d * (i - 8)
 * (one vmulps, bit-equal to deq_q4_0's products) and looks the nibbles up
 * with vpermps, which reads the low 4 bits of each dword index, so the
 * high nibble needs one shift and no mask; Q4_K likewise with the table
 * dl * i - ml of each sub-block (mul then sub, as deq_q4_k); Q6_K widens
 * the integers to f32 and multiplies by d * sc. */

/* The loops over r and m unrolled whole, so the accumulators and weight
 * vectors live in registers (GCC -O2 keeps such arrays in memory). */
#define UNR _Pragma("GCC unroll 16")
/* Most x rows (GMT) and W rows (GNR) per pass. Passes of 16 x rows measured
 * slower than two of 8 (16 accumulators plus the weights spill). */
#define GMT 8
#define GNR 4

/* acc[r][m] += w0[r] * x[m][k, k+16) then w1[r] * x[m][k+16, k+32) */
#define GSTEP(k, w0, w1)                                                                            \
    do {                                                                                            \
        UNR for (int m = 0; m < mt; m++) {                                                          \
            const float *xm_ = x + (size_t)m * K + (k);                                             \
            const __m512 x0_ = _mm512_loadu_ps(xm_), x1_ = _mm512_loadu_ps(xm_ + 16);               \
            UNR for (int r = 0; r < nr; r++)                                                        \
                acc[r][m] = _mm512_fmadd_ps((w1)[r], x1_, _mm512_fmadd_ps((w0)[r], x0_, acc[r][m])); \
        }                                                                                           \
    } while (0)

/* Prefetch distance in passes: a pass reads nr rows side by side, which
 * the hardware stream prefetcher follows poorly (measured: M = 1 at half
 * the old kernel's speed without it); each block load prefetches the same
 * offset GPF passes ahead (2 measured a little better than 1, 0 worst). */
#define GPF 2

/* f16 at p broadcast to 16 f32 lanes */
AI __m512 f16x16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _mm512_cvtph_ps(_mm256_set1_epi16((short)h));
}

AI __m512 lut16(const float *base) { return _mm512_loadu_ps(base); }
static const float k_iota[2][16] = {{-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7},
                                    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}};

AI void g_q4_0(const uint8_t *const *rows, size_t pf, int K, const float *x, int mt, int nr, __m512 acc[GNR][GMT]) {
    const __m512 io = lut16(k_iota[0]);
    for (int b = 0; b < K / 32; b++) {
        __m512 w0[GNR], w1[GNR];
        UNR for (int r = 0; r < nr; r++) {
            const uint8_t *blk = rows[r] + (size_t)b * 18;
            _mm_prefetch((const char *)blk + pf, _MM_HINT_T0);
            const __m512 t = _mm512_mul_ps(f16x16(blk), io);
            const __m512i z = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2)));
            w0[r] = _mm512_permutexvar_ps(z, t);
            w1[r] = _mm512_permutexvar_ps(_mm512_srli_epi32(z, 4), t);
        }
        GSTEP((size_t)b * 32, w0, w1);
    }
}

/* Q4_K: dl[s] = d * sc_s in lanes 0-7, ml[s] = dmin * mn_s in lanes 8-15
 * (the 12 scale bytes regrouped as ggml does: bytes 0-7 the scales, 8-15
 * the mins; quant.c's k4_scale_min) */
AI void k4_dlml(const uint8_t *blk, float *out) {
    uint32_t u[4];
    memcpy(u, blk + 4, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    const uint32_t t = u[1] & 0x3f3f3f3fu;
    u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    u[2] = t;
    u[0] &= 0x3f3f3f3fu;
    const __m512 v = u8x16(_mm_loadu_si128((const __m128i *)u));
    const __m512 dd = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(f16at(blk)), _mm512_set1_ps(f16at(blk + 2)));
    _mm512_storeu_ps(out, _mm512_mul_ps(dd, v));
}

AI void g_q4_k(const uint8_t *const *rows, size_t pf, int K, const float *x, int mt, int nr, __m512 acc[GNR][GMT]) {
    const __m512 io = lut16(k_iota[1]);
    for (int b = 0; b < K / 256; b++) {
        float sm[GNR][16];
        UNR for (int r = 0; r < nr; r++) k4_dlml(rows[r] + (size_t)b * 144, sm[r]);
        for (int c = 0; c < 4; c++) {
            __m512 w0[GNR], w1[GNR], v0[GNR], v1[GNR];
            UNR for (int r = 0; r < nr; r++) {
                const uint8_t *q = rows[r] + (size_t)b * 144 + 16 + 32 * c;
                _mm_prefetch((const char *)q + pf, _MM_HINT_T0);
                const __m512i z0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
                const __m512i z1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + 16)));
                const __m512 tl = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(sm[r][2 * c]), io), _mm512_set1_ps(sm[r][8 + 2 * c]));
                const __m512 th =
                    _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(sm[r][2 * c + 1]), io), _mm512_set1_ps(sm[r][9 + 2 * c]));
                w0[r] = _mm512_permutexvar_ps(z0, tl);
                w1[r] = _mm512_permutexvar_ps(z1, tl);
                v0[r] = _mm512_permutexvar_ps(_mm512_srli_epi32(z0, 4), th);
                v1[r] = _mm512_permutexvar_ps(_mm512_srli_epi32(z1, 4), th);
            }
            const size_t k0 = (size_t)b * 256 + 64 * (size_t)c;
            GSTEP(k0, w0, w1);
            GSTEP(k0 + 32, v0, v1);
        }
    }
}

/* Q6_K: the 64 ql bytes of half h give elements 128h + l (+32) as low
 * nibbles and +64 (+96) as high nibbles; bits 4-5 come from qh[l] shifted
 * per 32-element chunk i by 2i, placed at bit 4 with one variable shift of
 * 16-bit lanes (bits moved across a byte boundary are masked off) */
AI void g_q6_k(const uint8_t *const *rows, size_t pf, int K, const float *x, int mt, int nr, __m512 acc[GNR][GMT]) {
    const __m512i sl01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i sr23 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30), o32 = _mm512_set1_epi8(32);
    for (int b = 0; b < K / 256; b++) {
        float dl[GNR][16];
        UNR for (int r = 0; r < nr; r++) {
            const uint8_t *blk = rows[r] + (size_t)b * 210;
            _mm512_storeu_ps(dl[r], _mm512_mul_ps(_mm512_set1_ps(f16at(blk + 208)),
                                                  i8x16(_mm_loadu_si128((const __m128i *)(blk + 192)))));
        }
        for (int h = 0; h < 2; h++) {
            __m512i v01[GNR], v23[GNR];
            UNR for (int r = 0; r < nr; r++) {
                const uint8_t *blk = rows[r] + (size_t)b * 210;
                const __m512i L = _mm512_loadu_si512((const void *)(blk + 64 * h));
                _mm_prefetch((const char *)blk + 64 * h + pf, _MM_HINT_T0);
                _mm_prefetch((const char *)blk + 64 * h + 128 + pf, _MM_HINT_T0);
                const __m512i H = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)));
                const __m512i h01 = _mm512_and_si512(_mm512_sllv_epi16(H, sl01), m30);
                const __m512i h23 = _mm512_and_si512(_mm512_srlv_epi16(H, sr23), m30);
                /* (lo & 15) | hi, then - 32 */
                v01[r] = _mm512_sub_epi8(_mm512_ternarylogic_epi32(L, m4, h01, 0xEA), o32);
                v23[r] = _mm512_sub_epi8(_mm512_ternarylogic_epi32(_mm512_srli_epi16(L, 4), m4, h23, 0xEA), o32);
            }
            for (int i = 0; i < 4; i++) {
                __m512 w0[GNR], w1[GNR];
                const int s = 8 * h + 2 * i;
                UNR for (int r = 0; r < nr; r++) {
                    const __m512i v = i < 2 ? v01[r] : v23[r];
                    __m128i e0, e1;
                    if (i & 1) {
                        e0 = _mm512_extracti32x4_epi32(v, 2);
                        e1 = _mm512_extracti32x4_epi32(v, 3);
                    } else {
                        e0 = _mm512_castsi512_si128(v);
                        e1 = _mm512_extracti32x4_epi32(v, 1);
                    }
                    w0[r] = _mm512_mul_ps(_mm512_set1_ps(dl[r][s]), i8x16(e0));
                    w1[r] = _mm512_mul_ps(_mm512_set1_ps(dl[r][s + 1]), i8x16(e1));
                }
                GSTEP((size_t)b * 256 + 128 * (size_t)h + 32 * (size_t)i, w0, w1);
            }
        }
    }
}

typedef void (*gkern)(const uint8_t *const *rows, size_t rb, int K, const float *x, int mt, float *out);

/* out[r * GMT + m] for the pass's nr W rows and mt x rows */
#define GRUN(g, mt, nr)                                                                             \
    do {                                                                                            \
        __m512 acc[GNR][GMT];                                                                       \
        UNR for (int r = 0; r < (nr); r++)                                                          \
            UNR for (int m = 0; m < (mt); m++) acc[r][m] = _mm512_setzero_ps();                     \
        g(rows, GPF * (nr) * rb, K, x, (mt), (nr), acc);                                            \
        UNR for (int r = 0; r < (nr); r++)                                                          \
            UNR for (int m = 0; m < (mt); m++) out[r * GMT + m] = hsum16(acc[r][m]);                \
    } while (0)

/* W rows per pass for mt x rows (at most 16 accumulators) */
AI int g_nr(int mt) { return mt <= 2 ? 4 : 2; }

#define GINST(g)                                                                                    \
    static void g##_p(const uint8_t *const *rows, size_t rb, int K, const float *x, int mt, float *out) { \
        switch (mt) {                                                                               \
        case 8: GRUN(g, 8, 2); break;                                                               \
        case 4: GRUN(g, 4, 2); break;                                                               \
        case 2: GRUN(g, 2, 4); break;                                                               \
        default: GRUN(g, 1, 4); break;                                                              \
        }                                                                                           \
    }
GINST(g_q4_0)
GINST(g_q4_k)
GINST(g_q6_k)

static void gguf_rows(float *y, int ldy, const float *x, int M, int K, const tensor *W, const float *bias, int64_t n0,
                      int64_t n1) {
    gkern kern;
    switch (W->dtype) {
    case DT_Q4_0: kern = g_q4_0_p; break;
    case DT_Q4_K: kern = g_q4_k_p; break;
    default: kern = g_q6_k_p; break;
    }
    const size_t rb = quant_row_bytes(W->dtype, 0, K);
    const uint8_t *base = (const uint8_t *)W->data;
    float out[GNR * GMT];
    /* tiles of QNT W rows, kept in cache across the passes over x */
    for (int64_t nt = n0; nt < n1; nt += QNT) {
        const int64_t ne = nt + QNT < n1 ? nt + QNT : n1;
        for (int m0 = 0; m0 < M;) {
            const int rm = M - m0, mt = rm >= 8 ? 8 : rm >= 4 ? 4 : rm >= 2 ? 2 : 1, nr = g_nr(mt);
            const float *xm = x + (size_t)m0 * K;
            for (int64_t n = nt; n < ne; n += nr) {
                /* past the tile's end a pass repeats its last row; those
                 * results are dropped */
                const uint8_t *rows[GNR];
                UNR for (int r = 0; r < GNR; r++) rows[r] = base + (size_t)(n + r < ne ? n + r : ne - 1) * rb;
                kern(rows, rb, K, xm, mt, out);
                for (int r = 0; r < nr && n + r < ne; r++)
                    for (int i = 0; i < mt; i++)
                        y[(size_t)(m0 + i) * ldy + n + r] = bias ? out[r * GMT + i] + bias[n + r] : out[r * GMT + i];
            }
            m0 += mt;
        }
    }
}

/* Q8_0 keeps the factored arithmetic (per block a 16-lane dot of x with the
 * widened int8 elements, then one FMA by d): at M = 1 it measured ~20%
 * faster than the exact-weights path (one vmulps per 16 weights more) in
 * quant-bench and in decode; M >= 8 is slower this way. */
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
INST(k_q8_0)
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
    if (W->dtype != DT_MLX && W->dtype != DT_Q8_0) {
        gguf_rows(y, ldy, x, M, K, W, bias, n0, n1);
        return;
    }
    qkern kern = W->dtype == DT_Q8_0 ? k_q8_0_p : W->q.bits == 4 ? k_mlx4_p : k_mlx8_p;
    const int sub = W->dtype == DT_Q8_0 ? 0 : W->q.group;
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
