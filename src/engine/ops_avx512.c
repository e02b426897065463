/* ops_avx512: the AVX-512 matmul behind ops.h. Compiled with -mavx512f
 * -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c (the Makefile does that for
 * *_avx512.c) and called by ops.c only after cpu_has_avx512() said yes;
 * the other ops stay on the AVX2 kernels, which such CPUs also run.
 *
 * It computes exactly what the AVX2 matmul computes, bit for bit: each
 * output is one 8-lane fp32 FMA chain over k in order (lane k % 8), the
 * K tail zero-padded, reduced by hsum4's fixed pairing, plus the bias. A
 * 512-bit register simply holds the 8-lane accumulators of two W rows
 * side by side (x broadcast to both halves), so the AVX2 and AVX-512
 * levels agree with each other as well as across M and thread counts.
 *
 * M == 1 (decode) is bound by memory bandwidth and runs the AVX2 direct
 * loop (avx2_matmul_direct), which already reads as fast as this machine
 * streams. Small M (verify, short prefill chunks: 2 <= M <= OPS_PAIRS_MAX_M)
 * runs the pairs loop here (see "small M" below): W still streamed once,
 * each 8 weights widened once per up to 12 x rows. Large M (prefill) runs
 * the blocked loop: per chunk of OPS_NC W rows and K tile of OPS_KC
 * columns, the tile is widened once into f32 scratch with rows interleaved
 * in pairs (8 values of row 2p, then 8 of row 2p+1, per 8 columns), and a
 * 6 x-row by 8 W-row register block (24 zmm accumulators; Zen 4/5 and
 * Intel cores have two 512-bit FMA pipes) runs over it from L1/L2, the
 * accumulators carried in scratch between K tiles.
 *
 * Weights in the rows8 layout (tensor.h) hold, per 8 columns of a block
 * of 8 rows, the rows' pieces one after another, i.e. already the pairs
 * of rows side by side that the blocked loop packs its tiles into. Up to
 * OPS_R8_MAX_M rows (more on small matrices: ops_r8_in_place) read them
 * in place with the blocked loop's register kernel (see "rows8, small
 * M"), other small M with the pairs loop on half blocks (4 rows, every
 * other line of the block's run), large M packs tiles from them as from
 * row-major rows, with other strides. */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <string.h>

#include "engine/ops_internal.h"

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")

/* 8 weights at p widened to f32 (rem < 8: the first rem, zeros after,
 * nothing read past them) */
AI __m256 ld8(const void *p, ds_dtype dt, int rem) {
    if (dt == DT_F32) {
        if (rem >= 8) return _mm256_loadu_ps((const float *)p);
        return _mm256_maskz_loadu_ps((__mmask8)((1u << rem) - 1u), (const float *)p);
    }
    __m128i h = rem >= 8 ? _mm_loadu_si128((const __m128i *)p)
                         : _mm_maskz_loadu_epi16((__mmask8)((1u << rem) - 1u), p);
    if (dt == DT_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* 16 weights at p widened to f32 (the bf16/f16 bulk of pack_tile) */
AI __m512 ld16(const void *p, ds_dtype dt) {
    if (dt == DT_F32) return _mm512_loadu_ps((const float *)p);
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (dt == DT_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* the AVX2 path's hsum4: [sum(a), sum(b), sum(c), sum(d)], each lane
 * reduced as ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)) */
AI __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 t0 = _mm256_hadd_ps(a, b), t1 = _mm256_hadd_ps(c, d);
    __m256 t2 = _mm256_hadd_ps(t0, t1);
    return _mm_add_ps(_mm256_castps256_ps128(t2), _mm256_extractf128_ps(t2, 1));
}

/* ------------------------------------------------------------ blocked loop */

#define MR 6 /* x rows per register block */
#define NP 4 /* W row pairs per register block */
#define PAIR_LD (2 * OPS_KC) /* floats per packed row pair */

/* acc[i][p] (8 lanes of W row 2p, then 8 of row 2p+1) over columns
 * [0, len) of the tile: x rows xr[i], packed pairs at w + p*PAIR_LD.
 * Accumulators continue from io (unless first) and go back to io (unless
 * last) or are reduced into sums[i*8 + r]; io holds pair p of row i at
 * (i*ios + 2p)*8. */
AI void kern(const int mr, const int np, const float *const *xr, const float *w, int len, float *io, size_t ios,
             int first, int last, float *sums) {
    __m512 acc[MR][NP];
    UNROLL
    for (int i = 0; i < mr; i++)
        UNROLL
        for (int p = 0; p < np; p++)
            acc[i][p] = first ? _mm512_setzero_ps() : _mm512_load_ps(io + (i * ios + 2 * (size_t)p) * 8);
    int k = 0;
    for (; k + 8 <= len; k += 8) {
        __m512 wv[NP];
        UNROLL
        for (int p = 0; p < np; p++) wv[p] = _mm512_load_ps(w + (size_t)p * PAIR_LD + 2 * k);
        UNROLL
        for (int i = 0; i < mr; i++) {
            __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(xr[i] + k));
            UNROLL
            for (int p = 0; p < np; p++) acc[i][p] = _mm512_fmadd_ps(xv, wv[p], acc[i][p]);
        }
    }
    if (k < len) { /* K tail: x masked to zeros, the tile is zero-padded */
        __mmask8 m = (__mmask8)((1u << (len - k)) - 1u);
        UNROLL
        for (int i = 0; i < mr; i++) {
            __m512 xv = _mm512_broadcast_f32x8(_mm256_maskz_loadu_ps(m, xr[i] + k));
            UNROLL
            for (int p = 0; p < np; p++)
                acc[i][p] = _mm512_fmadd_ps(xv, _mm512_load_ps(w + (size_t)p * PAIR_LD + 2 * k), acc[i][p]);
        }
    }
    if (last) {
        UNROLL
        for (int i = 0; i < mr; i++)
            UNROLL
            for (int p = 0; p < np; p += 2) {
                __m512 a = acc[i][p], b = acc[i][p + 1 < np ? p + 1 : p];
                __m128 s = hsum4(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1), _mm512_castps512_ps256(b),
                                 _mm512_extractf32x8_ps(b, 1));
                _mm_storeu_ps(sums + i * 8 + 2 * p, s);
            }
    } else {
        UNROLL
        for (int i = 0; i < mr; i++)
            UNROLL
            for (int p = 0; p < np; p++) _mm512_store_ps(io + (i * ios + 2 * (size_t)p) * 8, acc[i][p]);
    }
}

#define KPARAMS const float *const *xr, const float *w, int len, float *io, size_t ios, int first, int last, \
                float *sums
#define KARGS xr, w, len, io, ios, first, last, sums

#define KROW(np)                                                            \
    switch (mr) {                                                           \
    case 6: kern(6, np, KARGS); break;                                      \
    case 5: kern(5, np, KARGS); break;                                      \
    case 4: kern(4, np, KARGS); break;                                      \
    case 3: kern(3, np, KARGS); break;                                      \
    case 2: kern(2, np, KARGS); break;                                      \
    default: kern(1, np, KARGS); break;                                     \
    }

static void kern_any(int mr, int np, KPARAMS) {
    switch (np) {
    case 4: KROW(4) break;
    case 3: KROW(3) break;
    case 2: KROW(2) break;
    default: KROW(1) break;
    }
}

/* y[m0+i][n+j] = sums[i*8 + j] (+ bias[n+j]) for the mr x nr block */
static void store_sums(float *y, int N, int m0, int mr, int n, int nr, const float *sums, const float *bias) {
    for (int i = 0; i < mr; i++) {
        float *yr = y + (size_t)(m0 + i) * N + n;
        for (int j = 0; j < nr; j++) yr[j] = bias ? sums[i * 8 + j] + bias[n + j] : sums[i * 8 + j];
    }
}

/* W rows [n0, n0+nb), columns [k0, k0+kc) widened into pairs: pair p at
 * wf + p*PAIR_LD holds, per 8 columns, 8 values of row 2p then 8 of row
 * 2p+1; a missing last row and the columns past kc (up to a multiple of
 * 8) are zeros. */
static void pack_tile(float *wf, const void *W, ds_dtype dt, int r8, int K, int n0, int nb, int k0, int kc) {
    size_t es = dt == DT_F32 ? 4 : 2;
    for (int r = 0; r < nb + (nb & 1); r++) {
        float *dst = wf + (size_t)(r >> 1) * PAIR_LD + (r & 1) * 8;
        if (r >= nb) {
            for (int k = 0; k < kc; k += 8) _mm256_store_ps(dst + 2 * k, _mm256_setzero_ps());
            continue;
        }
        const char *src = (const char *)W + tensor_off(K, r8, n0 + r, k0) * es;
        int k = 0;
        if (r8) { /* pieces of 8 columns, 8 pieces apart; K a multiple of 8 */
            for (; k < kc; k += 8) _mm256_store_ps(dst + 2 * k, ld8(src + (size_t)k * 8 * es, dt, 8));
            int next = K - (k0 + kc) < OPS_KC ? K - (k0 + kc) : OPS_KC;
            if ((n0 + r) % (int)(64 / (8 * es)) == 0) /* the first row of each line (4 rows of bf16) */
                for (int b = 0; b < next; b += 8) _mm_prefetch(src + (size_t)(kc + b) * 8 * es, _MM_HINT_T0);
            continue;
        }
        for (; k + 16 <= kc; k += 16) {
            __m512 v = ld16(src + (size_t)k * es, dt);
            _mm256_store_ps(dst + 2 * k, _mm512_castps512_ps256(v));
            _mm256_store_ps(dst + 2 * k + 16, _mm512_extractf32x8_ps(v, 1));
        }
        for (; k < kc; k += 8) _mm256_store_ps(dst + 2 * k, ld8(src + (size_t)k * es, dt, kc - k));
        /* this row's next tile is needed after this tile's compute: fetch
         * it now instead of stalling on 64 short streams then */
        int next = K - (k0 + kc) < OPS_KC ? K - (k0 + kc) : OPS_KC;
        for (size_t b = 0; b < (size_t)next * es; b += 64) _mm_prefetch(src + (size_t)kc * es + b, _MM_HINT_T0);
    }
}

/* rows of the next register block: MR at a time, but never a lone row
 * left behind when it can be avoided */
static inline int block_rows(int rem) {
    if (rem <= MR) return rem;
    if (rem == MR + 1) return (rem + 1) / 2;
    return MR;
}

/* register blocks of x rows per pass over the W tile: their x tile (up
 * to 12 x OPS_KC f32) stays in L1 while W streams from L2 */
#define MB_BLOCKS 2

static void matmul_blocked(float *y, const float *x, int M, int K, int N, const void *W, ds_dtype dt, int r8,
                           const float *bias, int n0, int n1) {
    int nb = n1 - n0; /* <= OPS_NC */
    int multi = K > OPS_KC;
    size_t wf_floats = (size_t)(OPS_NC / 2) * PAIR_LD;
    size_t io_floats = multi ? (size_t)M * OPS_NC * 8 : 0;
    float *wf = ops_scratch((wf_floats + io_floats) * sizeof(float));
    float *iob = wf + wf_floats;
    float sums[MR * 8];
    const float *xr[MR];
    for (int k0 = 0; k0 < K; k0 += OPS_KC) {
        int kc = K - k0 < OPS_KC ? K - k0 : OPS_KC;
        int first = k0 == 0, last = k0 + kc >= K;
        pack_tile(wf, W, dt, r8, K, n0, nb, k0, kc);
        for (int mb0 = 0, mb1; mb0 < M; mb0 = mb1) {
            mb1 = mb0;
            for (int b = 0; b < MB_BLOCKS && mb1 < M; b++) mb1 += block_rows(M - mb1);
            for (int nl = 0; nl < nb;) {
                int nr = nb - nl >= 2 * NP ? 2 * NP : nb - nl;
                int np = (nr + 1) / 2;
                const float *w = wf + (size_t)(nl / 2) * PAIR_LD;
                for (int m0 = mb0, mr; m0 < mb1; m0 += mr) {
                    mr = block_rows(M - m0);
                    for (int i = 0; i < mr; i++) xr[i] = x + (size_t)(m0 + i) * K + k0;
                    float *io = multi ? iob + ((size_t)m0 * OPS_NC + nl) * 8 : NULL;
                    kern_any(mr, np, xr, w, kc, io, OPS_NC, first, last, sums);
                    if (last) store_sums(y, N, m0, mr, n0 + nl, nr, sums, bias);
                }
                nl += nr;
            }
        }
    }
}

/* rows8 streams: 1-4 KB ahead measured alike on a Zen 4 VM, better than none */
#define R8_PF_BYTES 2048

/* ---------------------------------------------------- rows8, small M */

/* The 8 rows of a rows8 block at w against mr x rows (xr), K columns: per
 * 8 columns the block holds row pairs (0,1), (2,3), (4,5), (6,7) as 16
 * contiguous weights, widened into one register [row 2p | row 2p+1] like
 * the blocked loop's packed pairs, x broadcast to both halves; so each
 * output is the 8-lane chain over k in order, and the hsum4 pairing gives
 * the bits of every other loop. pf: the first pass over the block
 * (streamed from memory), prefetching its run R8_PF_BYTES ahead. Sums go
 * to sums[i*8 + r]. */
AI void kern_r8(const int mr, const ds_dtype dt, const float *const *xr, const char *w, int K, int pf,
                float *sums) {
    const size_t es = dt == DT_F32 ? 4 : 2, step = 64 * es; /* bytes per 8 columns of the block */
    __m512 acc[MR][NP];
    UNROLL
    for (int i = 0; i < mr; i++)
        UNROLL
        for (int p = 0; p < NP; p++) acc[i][p] = _mm512_setzero_ps();
    for (int k = 0; k < K; k += 8) {
        const char *wk = w + (size_t)(k / 8) * step;
        if (pf)
            for (size_t o = 0; o < step; o += 64) _mm_prefetch(wk + R8_PF_BYTES + o, _MM_HINT_T0);
        __m512 wv[NP];
        UNROLL
        for (int p = 0; p < NP; p++) wv[p] = ld16(wk + (size_t)p * 16 * es, dt);
        UNROLL
        for (int i = 0; i < mr; i++) {
            __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(xr[i] + k));
            UNROLL
            for (int p = 0; p < NP; p++) acc[i][p] = _mm512_fmadd_ps(xv, wv[p], acc[i][p]);
        }
    }
    UNROLL
    for (int i = 0; i < mr; i++)
        UNROLL
        for (int p = 0; p < NP; p += 2) {
            __m512 a = acc[i][p], b = acc[i][p + 1];
            __m128 s = hsum4(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1), _mm512_castps512_ps256(b),
                             _mm512_extractf32x8_ps(b, 1));
            _mm_storeu_ps(sums + i * 8 + 2 * p, s);
        }
}

#define DEF_KR8(name, dt)                                                                           \
    static void name(int mr, const float *const *xr, const char *w, int K, int pf, float *sums) {    \
        switch (mr) {                                                                               \
        case 6: kern_r8(6, dt, xr, w, K, pf, sums); break;                                          \
        case 5: kern_r8(5, dt, xr, w, K, pf, sums); break;                                          \
        case 4: kern_r8(4, dt, xr, w, K, pf, sums); break;                                          \
        case 3: kern_r8(3, dt, xr, w, K, pf, sums); break;                                          \
        case 2: kern_r8(2, dt, xr, w, K, pf, sums); break;                                          \
        default: kern_r8(1, dt, xr, w, K, pf, sums); break;                                         \
        }                                                                                           \
    }
DEF_KR8(kr8_bf16, DT_BF16)
DEF_KR8(kr8_f16, DT_F16)
DEF_KR8(kr8_f32, DT_F32)

/* W rows [n0, n1) of rows8 weights (multiples of 8) for M x rows: each
 * block once from memory with the first MR x rows, again from L1/L2 for
 * the next MR */
static void matmul_r8(float *y, const float *x, int M, int K, int N, const void *W, ds_dtype dt, const float *bias,
                      int n0, int n1) {
    void (*kf)(int, const float *const *, const char *, int, int, float *) =
        dt == DT_BF16 ? kr8_bf16 : dt == DT_F16 ? kr8_f16 : kr8_f32;
    const size_t es = dt == DT_F32 ? 4 : 2;
    float sums[MR * 8];
    const float *xr[MR];
    for (int n = n0; n < n1; n += 8) {
        const char *w = (const char *)W + tensor_off(K, 1, n, 0) * es;
        for (int m0 = 0, mr; m0 < M; m0 += mr) {
            mr = block_rows(M - m0);
            for (int i = 0; i < mr; i++) xr[i] = x + (size_t)(m0 + i) * K;
            kf(mr, xr, w, K, m0 == 0, sums);
            store_sums(y, N, m0, mr, n, 8, sums, bias);
        }
    }
}

/* ------------------------------------------------------------ small M */

/* Small M (verify widths, 2 <= M <= OPS_PAIRS_MAX_M): W read in place,
 * x packed in pairs. A 512-bit accumulator holds the 8-lane chains of two
 * x rows against one W row, row 2p in the low half and row 2p+1 in the
 * high half: the x pair is packed side by side, and 8 weights are widened
 * and broadcast to both halves by one vpermw (from a 128-bit broadcast
 * load). A register block is up to PMP pairs by PNR W rows (24
 * accumulators), so each widening feeds up to 2 * PMP rows, where the AVX2
 * direct loop widened every weight once per 3 x rows. (On a Zen 5 VM a
 * step of an mp-pair block takes roughly (4 mp + 4) / 2 cycles from L1, as
 * if each shuffle took an FMA slot: 86 % of peak at mp = 6.) While
 * M fits one block, W is read once, from memory, with software prefetch of
 * the next block's rows; beyond, the pairs are split into passes over the
 * same PNR W rows, which the later passes find in L1. (Saving the widened
 * weights for the later passes was no faster.) Odd M leaves half of the
 * last pair unused. */
#define PMP 6 /* x row pairs per register block */
#define PNR 4 /* W rows per register block */

size_t avx512_pairs_floats(int M, int K) { return (size_t)((M + 1) / 2) * (size_t)((K + 7) / 8) * 16; }

/* x rows packed in pairs: 8 columns b of pair p at xp + (p*KB + b)*16, 8
 * of row 2p then 8 of row 2p+1; zeros past K and for a missing row 2p+1 */
void avx512_pack_pairs(float *xp, const float *x, int M, int K) {
    const int KB = (K + 7) / 8;
    for (int p = 0; p < (M + 1) / 2; p++) {
        const float *r0 = x + (size_t)(2 * p) * K, *r1 = 2 * p + 1 < M ? r0 + K : NULL;
        float *d = xp + (size_t)p * KB * 16;
        int b = 0;
        for (; 8 * b + 8 <= K; b++) {
            _mm256_store_ps(d + 16 * b, _mm256_loadu_ps(r0 + 8 * b));
            _mm256_store_ps(d + 16 * b + 8, r1 ? _mm256_loadu_ps(r1 + 8 * b) : _mm256_setzero_ps());
        }
        if (b < KB) {
            __mmask8 m = (__mmask8)((1u << (K - 8 * b)) - 1u);
            _mm256_store_ps(d + 16 * b, _mm256_maskz_loadu_ps(m, r0 + 8 * b));
            _mm256_store_ps(d + 16 * b + 8, r1 ? _mm256_maskz_loadu_ps(m, r1 + 8 * b) : _mm256_setzero_ps());
        }
    }
}

/* vpermw indices (with a zero mask on the even words) turning 8 bf16 into
 * [w0..w7, w0..w7] as f32: word 2i+1 takes word i % 8, the high half of
 * dword i; the low halves are zeros */
AI __m512i bf16_bcast_idx(void) {
    return _mm512_set_epi16(7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0, 7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0,
                            0, 0);
}

/* 8 weights at p widened to f32 in both 256-bit halves (rem < 8: the first
 * rem, zeros after, nothing read past them) */
AI __m512 ld8x2(const void *p, ds_dtype dt, int rem, __m512i idx) {
    if (dt == DT_F32) return _mm512_broadcast_f32x8(ld8(p, dt, rem));
    __m128i h = rem >= 8 ? _mm_loadu_si128((const __m128i *)p)
                         : _mm_maskz_loadu_epi16((__mmask8)((1u << rem) - 1u), p);
    if (dt == DT_BF16)
        return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xaaaaaaaau, idx, _mm512_broadcast_i32x4(h)));
    return _mm512_cvtph_ps(_mm256_broadcastsi128_si256(h));
}

/* Software prefetch while W streams from memory: for every 64 bytes of a
 * row, the same position (less 256 bytes) of the row PNR further on, i.e.
 * one block ahead, as the AVX2 direct loop does (prefetching further ahead,
 * or into L2 only, measured no better). */
#define PF_BYTES (-256)

/* acc[i][j] += x pair i (8 columns b) * W row j (8 weights at column 8b,
 * rem of them, b*cs bytes into the row) broadcast to both halves */
AI void pairs_step(const int mp, const int nr, const ds_dtype dt, __m512 acc[PMP][PNR], const float *xp, size_t xps,
                   const char *w, size_t ldw, size_t cs, int b, int rem, __m512i idx) {
    __m512 xv[PMP];
    UNROLL
    for (int i = 0; i < mp; i++) xv[i] = _mm512_load_ps(xp + i * xps + (size_t)b * 16);
    UNROLL
    for (int j = 0; j < nr; j++) {
        __m512 wv = ld8x2(w + j * ldw + (size_t)b * cs, dt, rem, idx);
        UNROLL
        for (int i = 0; i < mp; i++) acc[i][j] = _mm512_fmadd_ps(xv[i], wv, acc[i][j]);
    }
}

/* The mp x nr block (nr <= PNR): y[2i + h][j] (+ bias[j]) = dot(x row 2i+h,
 * W row j) for the rows 2i+h < mrows, x from packed pairs xp (xps floats
 * apart), W rows at w (ldw bytes apart). Each output is the 8-lane chain
 * over k in order, lane k % 8, reduced by hsum4, as everywhere else. */
AI void kern_pairs(const int mp, const int nr, const ds_dtype dt, const float *xp, size_t xps, const char *w,
                   size_t ldw, size_t cs, int K, float *y, size_t N, int mrows, const float *bias, int pf) {
    __m512 acc[PMP][PNR];
    UNROLL
    for (int i = 0; i < mp; i++)
        UNROLL
        for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_ps();
    const __m512i idx = bf16_bcast_idx();
    const size_t es = dt == DT_F32 ? 4 : 2;
    const int U = 64 / (8 * (int)es); /* steps per 64 bytes of a W row */
    const size_t run = (size_t)((K + 7) / 8) * cs; /* rows8: bytes of a block */
    int b = 0;
    for (; 8 * b + 8 <= K; b++) {
        /* pf: W is streamed from memory (the first pass over the pairs).
         * 1 (row-major): for every 64 bytes of the rows, their line one
         * block ahead, all at once (better than one row per step, by
         * 10-15 % at M = 8). 2 (rows8 half blocks): this half's bytes of
         * the step R8_PF_BYTES ahead into L1, and the same bytes of the
         * next block (run bytes on) into L2. The half's pass reads every
         * other line of the block's run; fetching both lines at once
         * (as before) asked memory for twice the bytes during the first
         * half's pass and none during the second's, where one block ahead
         * the stream is even: 20-35 % faster at 6-24 rows on a Zen 4 VM
         * (docs/history/benchmarks-log.md, "rows8 verify widths"). */
        if (pf == 2) {
            UNROLL
            for (size_t o = 0; o < cs / 2; o += 64) {
                _mm_prefetch(w + (size_t)b * cs + R8_PF_BYTES + o, _MM_HINT_T0);
                _mm_prefetch((const char *)((uintptr_t)w + run + (size_t)b * cs + o), _MM_HINT_T1);
            }
        } else if (pf && b % U == 0) {
            UNROLL
            for (int j = 0; j < nr; j++) /* may point past W: integer arithmetic, prefetch never faults */
                _mm_prefetch((const char *)((uintptr_t)w + (size_t)(j + PNR) * ldw + (size_t)b * 8 * es + PF_BYTES),
                             _MM_HINT_T0);
        }
        pairs_step(mp, nr, dt, acc, xp, xps, w, ldw, cs, b, 8, idx);
    }
    /* K tail: weights masked to zeros, x packed with zeros */
    if (8 * b < K) pairs_step(mp, nr, dt, acc, xp, xps, w, ldw, cs, b, K - 8 * b, idx);
    /* per pair: hsum4 of the low halves gives row 2i against W rows 0..3,
     * of the high halves row 2i+1 */
    const __mmask8 jm = (__mmask8)((1u << nr) - 1u);
    const __m128 bv = bias ? (nr == 4 ? _mm_loadu_ps(bias) : _mm_maskz_loadu_ps(jm, bias)) : _mm_setzero_ps();
    UNROLL
    for (int i = 0; i < mp; i++) {
        __m512 a0 = acc[i][0], a1 = acc[i][nr > 1 ? 1 : 0], a2 = acc[i][nr > 2 ? 2 : 0], a3 = acc[i][nr > 3 ? 3 : 0];
        __m128 lo = hsum4(_mm512_castps512_ps256(a0), _mm512_castps512_ps256(a1), _mm512_castps512_ps256(a2),
                          _mm512_castps512_ps256(a3));
        __m128 hi = hsum4(_mm512_extractf32x8_ps(a0, 1), _mm512_extractf32x8_ps(a1, 1), _mm512_extractf32x8_ps(a2, 1),
                          _mm512_extractf32x8_ps(a3, 1));
        if (bias) {
            lo = _mm_add_ps(lo, bv);
            hi = _mm_add_ps(hi, bv);
        }
        float *y0 = y + (size_t)(2 * i) * N;
        if (nr == 4) {
            if (2 * i < mrows) _mm_storeu_ps(y0, lo);
            if (2 * i + 1 < mrows) _mm_storeu_ps(y0 + N, hi);
        } else {
            if (2 * i < mrows) _mm_mask_storeu_ps(y0, jm, lo);
            if (2 * i + 1 < mrows) _mm_mask_storeu_ps(y0 + N, jm, hi);
        }
    }
}

#define PPARAMS const float *xp, size_t xps, const char *w, size_t ldw, size_t cs, int K, float *y, size_t N, \
                int mrows, const float *bias, int pf
#define PARGS xp, xps, w, ldw, cs, K, y, N, mrows, bias, pf

#define PROW(nr, dt)                                                        \
    switch (mp) {                                                           \
    case 6: kern_pairs(6, nr, dt, PARGS); break;                            \
    case 5: kern_pairs(5, nr, dt, PARGS); break;                            \
    case 4: kern_pairs(4, nr, dt, PARGS); break;                            \
    case 3: kern_pairs(3, nr, dt, PARGS); break;                            \
    case 2: kern_pairs(2, nr, dt, PARGS); break;                            \
    default: kern_pairs(1, nr, dt, PARGS); break;                           \
    }
/* kern_pairs specialised: blocks of PNR W rows, and the last 1..PNR-1
 * rows of a range one at a time */
#define DEF_PKERN(name, dt)                                                 \
    static void name(int mp, int nr, PPARAMS) {                             \
        if (nr == PNR) PROW(PNR, dt)                                        \
        else PROW(1, dt)                                                    \
    }
DEF_PKERN(pkern_bf16, DT_BF16)
DEF_PKERN(pkern_f16, DT_F16)
DEF_PKERN(pkern_f32, DT_F32)

void avx512_matmul_pairs(float *y, const float *xp, int M, int K, int N, const void *W, ds_dtype dt, int r8,
                         const float *bias, int n0, int n1) {
    void (*kf)(int, int, PPARAMS) = dt == DT_BF16 ? pkern_bf16 : dt == DT_F16 ? pkern_f16 : pkern_f32;
    const int P = (M + 1) / 2;
    const size_t xps = (size_t)((K + 7) / 8) * 16, es = dt == DT_F32 ? 4 : 2;
    const size_t ldw = r8 ? 8 * es : (size_t)K * es, cs = r8 ? 64 * es : 8 * es;
    /* passes over the pairs: as few as PMP allows, as even as possible;
     * the later passes find the block's W rows in L1 */
    const int passes = (P + PMP - 1) / PMP;
    for (int n = n0; n < n1;) {
        int nr = n1 - n >= PNR ? PNR : 1;
        const char *w = (const char *)W + tensor_off(K, r8, n, 0) * es;
        const float *bn = bias ? bias + n : NULL;
        for (int q = 0, p0 = 0; q < passes; q++) {
            int mp = (P - p0) / (passes - q);
            int m0 = 2 * p0, mrows = 2 * mp < M - m0 ? 2 * mp : M - m0;
            kf(mp, nr, xp + (size_t)p0 * xps, xps, w, ldw, cs, K, y + (size_t)m0 * N + n, (size_t)N, mrows, bn,
               q > 0 ? 0 : r8 ? 2 : 1);
            p0 += mp;
        }
        n += nr;
    }
}

/* M == 1 (decode) runs the AVX2 direct loop, which already reads as fast
 * as this machine streams; 2 <= M <= OPS_PAIRS_MAX_M the pairs loop (the
 * dispatcher packs x once and calls avx512_matmul_pairs itself), or on
 * rows8 weights where ops_r8_in_place says matmul_r8; larger M the
 * blocked loop. */
void avx512_matmul_rows(float *y, const float *x, int M, int K, int N, const void *W, ds_dtype dt, int r8,
                        const float *bias, int n0, int n1) {
    if (K < 1 || M == 1) {
        avx2_matmul_direct(y, x, M, K, N, W, dt, r8, bias, n0, n1);
        return;
    }
    if (r8 && ops_r8_in_place(M, N, K, dt)) {
        matmul_r8(y, x, M, K, N, W, dt, bias, n0, n1);
        return;
    }
    if (M <= OPS_PAIRS_MAX_M) {
        float *xp = ops_scratch(avx512_pairs_floats(M, K) * sizeof(float));
        avx512_pack_pairs(xp, x, M, K);
        avx512_matmul_pairs(y, xp, M, K, N, W, dt, r8, bias, n0, n1);
        return;
    }
    for (int n = n0; n < n1; n += OPS_NC) {
        int e = n + OPS_NC < n1 ? n + OPS_NC : n1;
        matmul_blocked(y, x, M, K, N, W, dt, r8, bias, n, e);
    }
}

#else
/* Built without AVX-512 (the fuzz build leaves this file out; anything
 * else that compiles it plainly gets an empty unit). */
typedef int ops_avx512_empty_unit;
#endif
