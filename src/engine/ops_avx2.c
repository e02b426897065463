/* ops_avx2: the AVX2 + FMA + F16C kernels behind ops.h. Compiled with
 * -mavx2 -mfma -mf16c (the Makefile does that for *_avx2.c), and called
 * by ops.c only after cpu_has_avx2() said yes.
 *
 * Matmul (y = x W^T, W [N][K] in f32/f16/bf16) has two loops over one
 * register kernel, `kern`: a block of up to 3 x rows times 4 W rows whose
 * 12 accumulators are 8-lane fp32 partial dots, reduced at the end by
 * hsum4. The direct loop (decode, verify, small prefill: while x fits in
 * L2) streams W in place, widening bf16 (a 16-bit shift) or f16
 * (vcvtph2ps) in registers, with software prefetch one block of rows
 * ahead; at M == 1 it is bound by memory bandwidth. The blocked loop
 * (large M) works on a chunk of OPS_NC W rows: per K tile it widens the
 * chunk's tile to f32 once into per-thread scratch and runs every x row
 * over it from L1/L2; the partial accumulators of all rows live in scratch
 * between K tiles, so the arithmetic of an output is the same as in the
 * direct loop (see ops_internal.h on why that matters).
 *
 * Weights in the rows8 layout (tensor.h: blocks of 8 rows interleaved in
 * pieces of 8 columns) are read the same way with other strides: a row's
 * next piece is 8 pieces further, the next row's piece one piece further.
 * At M == 1 the direct loop then takes all 8 rows of a block at once,
 * one contiguous stream and 8 independent chains, without software
 * prefetch (bench/gemv-layout.c: 28-30 GB/s on one Zen 4 thread where four
 * row-major rows with prefetch read 12-16). */
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "engine/ops_internal.h"

#define AI static inline __attribute__((always_inline))
/* the register blocks index arrays of vectors by loop counters over
 * compile-time bounds; unrolled, they become plain registers */
#define UNROLL _Pragma("GCC unroll 4")
#define UNROLL8 _Pragma("GCC unroll 8")

AI __m256 ld_bf16(const void *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

AI __m256 ld_f16(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

AI __m256 ld_w(const void *p, ds_dtype dt) {
    if (dt == DT_F32) return _mm256_loadu_ps((const float *)p);
    if (dt == DT_BF16) return ld_bf16(p);
    return ld_f16(p);
}

AI __m256i tail_mask(int rem) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* the first rem (< 8) elements at p widened, zeros after; never reads past them */
AI __m256 ld_w_tail(const void *p, ds_dtype dt, int rem, __m256i mask) {
    if (dt == DT_F32) return _mm256_maskload_ps((const float *)p, mask);
    uint16_t tmp[8] = {0};
    memcpy(tmp, p, (size_t)rem * 2);
    return dt == DT_BF16 ? ld_bf16(tmp) : ld_f16(tmp);
}

/* [sum(a), sum(b), sum(c), sum(d)], each lane reduced as
 * ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)) whatever the other arguments are */
AI __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 t0 = _mm256_hadd_ps(a, b), t1 = _mm256_hadd_ps(c, d);
    __m256 t2 = _mm256_hadd_ps(t0, t1);
    return _mm_add_ps(_mm256_castps256_ps128(t2), _mm256_extractf128_ps(t2, 1));
}

AI float hsum1(__m256 a) { return _mm_cvtss_f32(hsum4(a, a, a, a)); }

/* ---------------------------------------------------------------- matmul */

/* Software prefetch when W streams from memory: while a block of 4 rows
 * is consumed, the same position (less 256 bytes) of the next block's
 * rows is requested, i.e. one block (4 K weights) ahead. The hardware
 * prefetcher alone, with four interleaved row streams per thread, left
 * 30-40 % of the bandwidth unused on a Zen 5 VM; so did prefetching
 * within the current rows. */
#define PF_ROWS 4
#define PF_BYTES (-256)

/* acc[i][j] = dot(xr[i][0..len), w row j [0..len)) for i < MR, j < NR,
 * continuing 8-lane accumulators from io (unless first) and either saving
 * them back to io (unless last) or reducing them into sums[i*4 + j].
 * Element k of w row j is at (j*ldw + k*ks) elements for k a multiple of
 * 8 (ks 1: row-major; 8: rows8, len a multiple of 8) and the 7 after it;
 * io holds acc (i, j) at (i*ios + j)*8. NR is 8 only with MR 1. */
AI void kern(const int MR, const int NR, const ds_dtype dt, const int pf, const int ks, const float *const *xr,
             const void *w, size_t ldw, int len, float *io, size_t ios, int first, int last, float *sums) {
    __m256 acc[3][8];
    UNROLL
    for (int i = 0; i < MR; i++)
        UNROLL8
        for (int j = 0; j < NR; j++)
            acc[i][j] = first ? _mm256_setzero_ps() : _mm256_load_ps(io + (i * ios + (size_t)j) * 8);
    const size_t es = dt == DT_F32 ? 4 : 2;
    const char *wb = (const char *)w;
    int k = 0;
    for (; k + 8 <= len; k += 8) {
        if (pf && ((size_t)k * es) % 64 == 0) {
            UNROLL
            for (int j = 0; j < NR; j++) /* may point past W: integer arithmetic, prefetch never faults */
                _mm_prefetch((const char *)((uintptr_t)wb + ((size_t)(j + PF_ROWS) * ldw + (size_t)k) * es + PF_BYTES),
                             _MM_HINT_T0);
        }
        /* x rows in registers, one widened W vector at a time: 12
         * accumulators + 3 x + 1 w fit the 16 ymm registers without a
         * spill (which would put a store-forward into an FMA chain) */
        __m256 xv[3];
        UNROLL
        for (int i = 0; i < MR; i++) xv[i] = _mm256_loadu_ps(xr[i] + k);
        UNROLL8
        for (int j = 0; j < NR; j++) {
            __m256 wv = ld_w(wb + ((size_t)j * ldw + (size_t)k * ks) * es, dt);
            UNROLL
            for (int i = 0; i < MR; i++) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
        }
    }
    if (k < len) {
        int rem = len - k;
        __m256i mask = tail_mask(rem);
        __m256 wv[8];
        UNROLL8
        for (int j = 0; j < NR; j++) wv[j] = ld_w_tail(wb + ((size_t)j * ldw + (size_t)k * ks) * es, dt, rem, mask);
        UNROLL
        for (int i = 0; i < MR; i++) {
            __m256 xv = _mm256_maskload_ps(xr[i] + k, mask);
            UNROLL8
            for (int j = 0; j < NR; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    if (last && NR == 8) { /* MR == 1: rows 0-3 and 4-7, each output reduced as everywhere */
        _mm_storeu_ps(sums, hsum4(acc[0][0], acc[0][1], acc[0][2], acc[0][3]));
        _mm_storeu_ps(sums + 4, hsum4(acc[0][4], acc[0][5], acc[0][6], acc[0][7]));
    } else if (last) {
        UNROLL
        for (int i = 0; i < MR; i++) {
            __m128 s = hsum4(acc[i][0], acc[i][NR > 1 ? 1 : 0], acc[i][NR > 2 ? 2 : 0], acc[i][NR > 3 ? 3 : 0]);
            _mm_storeu_ps(sums + 4 * i, s);
        }
    } else {
        UNROLL
        for (int i = 0; i < MR; i++)
            UNROLL8
            for (int j = 0; j < NR; j++) _mm256_store_ps(io + (i * ios + (size_t)j) * 8, acc[i][j]);
    }
}

#define MR_MAX 3

/* Rows in the next register block when `rem` rows are left: 3 at a time,
 * but 4 as 2 + 2, so no lone row (a 1-row block does a third of the work
 * of a 3-row block in about the same time) remains unless M itself is 1. */
static inline int block_rows(int rem) { return rem == 4 ? 2 : rem < MR_MAX ? rem : MR_MAX; }

/* kern specialised for the (mr, nr, dt) triples the loops use */
#define KERN_ARGS xr, w, ldw, len, io, ios, first, last, sums
#define KERN_PARAMS const float *const *xr, const void *w, size_t ldw, int len, float *io, size_t ios, \
                    int first, int last, float *sums
#define DEF_KERN(name, dt, pf)                                              \
    static void name(int mr, int nr, KERN_PARAMS) {                         \
        if (nr == 4) {                                                      \
            if (mr == 3) kern(3, 4, dt, pf, 1, KERN_ARGS);                  \
            else if (mr == 2) kern(2, 4, dt, pf, 1, KERN_ARGS);             \
            else kern(1, 4, dt, pf, 1, KERN_ARGS);                          \
        } else {                                                            \
            if (mr == 3) kern(3, 1, dt, pf, 1, KERN_ARGS);                  \
            else if (mr == 2) kern(2, 1, dt, pf, 1, KERN_ARGS);             \
            else kern(1, 1, dt, pf, 1, KERN_ARGS);                          \
        }                                                                   \
    }
/* on rows8 weights: 8 rows (with one x row) or 4, no software prefetch */
#define DEF_KERN_R8(name, dt)                                               \
    static void name(int mr, int nr, KERN_PARAMS) {                         \
        if (nr == 8) kern(1, 8, dt, 0, 8, KERN_ARGS);                       \
        else if (mr == 3) kern(3, 4, dt, 0, 8, KERN_ARGS);                  \
        else if (mr == 2) kern(2, 4, dt, 0, 8, KERN_ARGS);                  \
        else kern(1, 4, dt, 0, 8, KERN_ARGS);                               \
    }
/* on data in cache (packed tiles, the KV cache block) */
DEF_KERN(kern_f32, DT_F32, 0)
/* on weights streamed from memory, with software prefetch */
DEF_KERN(kern_f32_mem, DT_F32, 1)
DEF_KERN(kern_bf16, DT_BF16, 1)
DEF_KERN(kern_f16, DT_F16, 1)
/* the same rows again for the next x rows: they are in L1 now */
DEF_KERN(kern_bf16_l1, DT_BF16, 0)
DEF_KERN(kern_f16_l1, DT_F16, 0)

DEF_KERN_R8(kern_bf16_r8, DT_BF16)
DEF_KERN_R8(kern_f16_r8, DT_F16)
DEF_KERN_R8(kern_f32_r8, DT_F32)

typedef void (*kern_fn)(int mr, int nr, KERN_PARAMS);

/* kern for W streamed from memory (first pass) or already in L1 */
static kern_fn kern_for(ds_dtype dt, int from_memory, int r8) {
    if (r8) return dt == DT_F32 ? kern_f32_r8 : dt == DT_BF16 ? kern_bf16_r8 : kern_f16_r8;
    if (dt == DT_F32) return from_memory ? kern_f32_mem : kern_f32;
    if (dt == DT_BF16) return from_memory ? kern_bf16 : kern_bf16_l1;
    return from_memory ? kern_f16 : kern_f16_l1;
}

/* y[m0+i][n+j] = sums[i*4 + j] (+ bias[n+j]) for the mr x nr block (nr 8: mr 1) */
static void store_sums(float *y, int N, int m0, int mr, int n, int nr, const float *sums, const float *bias) {
    for (int i = 0; i < mr; i++) {
        float *yr = y + (size_t)(m0 + i) * N + n;
        for (int j = 0; j < nr; j++) yr[j] = bias ? sums[i * 4 + j] + bias[n + j] : sums[i * 4 + j];
    }
}

/* M rows of x against W rows [n0, n1) read in place (no scratch); rows8
 * weights (r8) have n0, n1 and K multiples of 8. */
static void matmul_direct(float *y, const float *x, int M, int K, int N, const void *W, ds_dtype dt, int r8,
                          const float *bias, int n0, int n1) {
    kern_fn kmem = kern_for(dt, 1, r8), kl1 = kern_for(dt, 0, r8);
    size_t es = dt == DT_F32 ? 4 : 2, ldw = r8 ? 8 : (size_t)K;
    float sums[MR_MAX * 4];
    const float *xr[MR_MAX];
    for (int n = n0; n < n1;) {
        int nr = r8 && M == 1 ? 8 : n1 - n >= 4 ? 4 : 1;
        const void *w = (const char *)W + tensor_off(K, r8, n, 0) * es;
        for (int m0 = 0, mr; m0 < M; m0 += mr) {
            mr = block_rows(M - m0);
            for (int i = 0; i < mr; i++) xr[i] = x + (size_t)(m0 + i) * K;
            (m0 == 0 ? kmem : kl1)(mr, nr, xr, w, ldw, K, NULL, 0, 1, 1, sums);
            store_sums(y, N, m0, mr, n, nr, sums, bias);
        }
        n += nr;
    }
}

void avx2_matmul_direct(float *y, const float *x, int M, int K, int N, const void *W, ds_dtype dt, int r8,
                        const float *bias, int n0, int n1) {
    matmul_direct(y, x, M, K, N, W, dt, r8, bias, n0, n1);
}

/* Widens W rows [n0, n0+nb), columns [k0, k0+kc) into wf[nb][OPS_KC]. */
static void pack_tile(float *wf, const void *W, ds_dtype dt, int r8, int K, int n0, int nb, int k0, int kc) {
    size_t es = dt == DT_F32 ? 4 : 2, ks = r8 ? 8 : 1; /* piece k of a row at src + k*ks*es */
    for (int r = 0; r < nb; r++) {
        const char *src = (const char *)W + tensor_off(K, r8, n0 + r, k0) * es;
        float *dst = wf + (size_t)r * OPS_KC;
        int k = 0;
        if (dt == DT_BF16) {
            for (; k + 16 <= kc; k += 16) {
                _mm256_store_ps(dst + k, ld_bf16(src + k * ks * 2));
                _mm256_store_ps(dst + k + 8, ld_bf16(src + (k + 8) * ks * 2));
            }
        } else if (dt == DT_F16) {
            for (; k + 16 <= kc; k += 16) {
                _mm256_store_ps(dst + k, ld_f16(src + k * ks * 2));
                _mm256_store_ps(dst + k + 8, ld_f16(src + (k + 8) * ks * 2));
            }
        }
        for (; k + 8 <= kc; k += 8) _mm256_store_ps(dst + k, ld_w(src + k * ks * es, dt));
        if (k < kc) { /* row-major only: rows8 has K a multiple of 8 */
            int rem = kc - k;
            _mm256_store_ps(dst + k, ld_w_tail(src + k * es, dt, rem, tail_mask(rem)));
        }
        /* this row's next tile is needed after this tile's compute: fetch
         * it now instead of stalling on 64 short streams then (rows8: a
         * line holds the pieces of 4 rows (2 of f32), fetched with the first) */
        int next = K - (k0 + kc) < OPS_KC ? K - (k0 + kc) : OPS_KC;
        if (!r8)
            for (size_t b = 0; b < (size_t)next * es; b += 64) _mm_prefetch(src + (size_t)kc * es + b, _MM_HINT_T0);
        else if ((n0 + r) % (int)(64 / (8 * es)) == 0) /* the first row of each line */
            for (int b = 0; b < next; b += 8) _mm_prefetch(src + (size_t)(kc + b) * 8 * es, _MM_HINT_T0);
    }
}

/* register blocks of x rows per pass over the W tile in the blocked loop:
 * their x tile (up to 6 x OPS_KC f32) stays in L1 while W streams from L2 */
#define MB_BLOCKS 2

static void matmul_blocked(float *y, const float *x, int M, int K, int N, const void *W, ds_dtype dt, int r8,
                           const float *bias, int n0, int n1) {
    int nb = n1 - n0; /* <= OPS_NC */
    int multi = K > OPS_KC;
    size_t wf_floats = (size_t)OPS_NC * OPS_KC;
    size_t io_floats = multi ? (size_t)M * OPS_NC * 8 : 0;
    float *wf = ops_scratch((wf_floats + io_floats) * sizeof(float));
    float *iob = wf + wf_floats;
    float sums[MR_MAX * 4];
    const float *xr[MR_MAX];
    for (int k0 = 0; k0 < K || k0 == 0; k0 += OPS_KC) {
        int kc = K - k0 < OPS_KC ? K - k0 : OPS_KC;
        int first = k0 == 0, last = k0 + kc >= K;
        pack_tile(wf, W, dt, r8, K, n0, nb, k0, kc);
        for (int mb0 = 0, mb1; mb0 < M; mb0 = mb1) {
            /* MB_BLOCKS register blocks of x rows share one pass over W */
            mb1 = mb0;
            for (int b = 0; b < MB_BLOCKS && mb1 < M; b++) mb1 += block_rows(M - mb1);
            for (int nl = 0; nl < nb;) {
                int nr = nb - nl >= 4 ? 4 : 1;
                const float *w = wf + (size_t)nl * OPS_KC;
                for (int m0 = mb0, mr; m0 < mb1; m0 += mr) {
                    mr = block_rows(M - m0);
                    for (int i = 0; i < mr; i++) xr[i] = x + (size_t)(m0 + i) * K + k0;
                    float *io = multi ? iob + ((size_t)m0 * OPS_NC + nl) * 8 : NULL;
                    kern_f32(mr, nr, xr, w, OPS_KC, kc, io, OPS_NC, first, last, sums);
                    if (last) store_sums(y, N, m0, mr, n0 + nl, nr, sums, bias);
                }
                nl += nr;
            }
        }
        if (K == 0) break;
    }
}

/* The direct loop (W widened in registers once per block of 3 x rows, no
 * packing) is faster than the blocked one while all of x stays in L2, as
 * it is reread for every 4 W rows: on a Zen 5 VM, 1.5-2x at M = 2-4,
 * 15-25 % at 8-32, even at 48-96 with K = 1024, while at M = 512 the
 * blocked loop is 10-40 % faster. 384 KB leaves room in Zen 3's 512 KB L2. */
#define DIRECT_MAX_X_BYTES (384u << 10)

static int use_direct(int M, int K) {
    return M <= 8 || (size_t)M * (size_t)K * sizeof(float) <= DIRECT_MAX_X_BYTES;
}

void avx2_matmul_rows(float *y, const float *x, int M, int K, int N, const void *W, ds_dtype dt, int r8,
                      const float *bias, int n0, int n1) {
    if (use_direct(M, K)) {
        matmul_direct(y, x, M, K, N, W, dt, r8, bias, n0, n1);
        return;
    }
    for (int n = n0; n < n1; n += OPS_NC) {
        int e = n + OPS_NC < n1 ? n + OPS_NC : n1;
        matmul_blocked(y, x, M, K, N, W, dt, r8, bias, n, e);
    }
}

/* ------------------------------------------------------------------- exp */

/* exp(x) for a vector: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two
 * for an exact reduction), e^r by the Cephes degree-7 polynomial, 2^n built
 * in the exponent bits (as two factors, so that subnormal results and
 * n = 128 work). Relative error about 1.5e-7 over the normal range;
 * x > ln(FLT_MAX) gives inf, x < -104 gives 0, NaN stays NaN. */
AI __m256 exp256(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.72283935546875f), lo = _mm256_set1_ps(-104.0f);
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    __m256 big = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
    __m256 xc = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    __m256 r2 = _mm256_mul_ps(r, r);
    p = _mm256_fmadd_ps(p, r2, r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    __m256i n = _mm256_cvtps_epi32(fx);
    __m256i n1 = _mm256_srai_epi32(n, 1), n2 = _mm256_sub_epi32(n, n1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    __m256 res = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    res = _mm256_blendv_ps(res, _mm256_set1_ps(INFINITY), big);
    return _mm256_blendv_ps(res, x, nan);
}

void avx2_exp(float *y, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp256(_mm256_loadu_ps(x + i)));
    if (i < n) {
        float t[8] = {0};
        memcpy(t, x + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(t, exp256(_mm256_loadu_ps(t)));
        memcpy(y + i, t, (size_t)(n - i) * sizeof(float));
    }
}

/* op_exp_sum: exp256 of (x - mx) * scale, zeroed below -104; the sum in
 * two double accumulators of four lanes each (a tail shorter than 8 goes
 * through a buffer padded with -inf, which adds zeros) */
AI __m256 exp_shift(__m256 x, __m256 mx, __m256 scale) {
    __m256 a = _mm256_mul_ps(_mm256_sub_ps(x, mx), scale);
    return _mm256_andnot_ps(_mm256_cmp_ps(a, _mm256_set1_ps(-104.0f), _CMP_LT_OQ), exp256(a));
}
AI void add_pd(__m256d *s0, __m256d *s1, __m256 v) {
    *s0 = _mm256_add_pd(*s0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    *s1 = _mm256_add_pd(*s1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}
double avx2_exp_sum(float *e, const float *x, int n, float mx, float scale) {
    const __m256 m = _mm256_set1_ps(mx), sc = _mm256_set1_ps(scale);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = exp_shift(_mm256_loadu_ps(x + i), m, sc);
        _mm256_storeu_ps(e + i, v);
        add_pd(&s0, &s1, v);
    }
    if (i < n) {
        float t[8];
        for (int j = 0; j < 8; j++) t[j] = i + j < n ? x[i + j] : -INFINITY;
        __m256 v = exp_shift(_mm256_loadu_ps(t), m, sc);
        _mm256_storeu_ps(t, v);
        memcpy(e + i, t, (size_t)(n - i) * sizeof(float));
        add_pd(&s0, &s1, v);
    }
    double l[4];
    _mm256_storeu_pd(l, _mm256_add_pd(s0, s1));
    return (l[0] + l[1]) + (l[2] + l[3]);
}

/* ------------------------------------------------------------- attention */

/* out[i][d0..d0+8*DN) (+)= sum_t p[i][t] * v[t][d0..] for t in [t0, t1),
 * one FMA chain per output element over t in order. */
AI void pv_kern(const int MR, const int DN, float *const *o, const float *const *p, const float *v, int hd,
                int t0, int t1, int d0, int first) { /* v: the row of position t0 */
    __m256 acc[3][4];
    UNROLL
    for (int i = 0; i < MR; i++)
        UNROLL
        for (int j = 0; j < DN; j++)
            acc[i][j] = first ? _mm256_setzero_ps() : _mm256_load_ps(o[i] + d0 + 8 * j);
    for (int t = t0; t < t1; t++) {
        const float *vr = v + (size_t)(t - t0) * hd + d0;
        __m256 vv[4];
        UNROLL
        for (int j = 0; j < DN; j++) vv[j] = _mm256_loadu_ps(vr + 8 * j);
        UNROLL
        for (int i = 0; i < MR; i++) {
            __m256 pb = _mm256_broadcast_ss(p[i] + t);
            UNROLL
            for (int j = 0; j < DN; j++) acc[i][j] = _mm256_fmadd_ps(pb, vv[j], acc[i][j]);
        }
    }
    UNROLL
    for (int i = 0; i < MR; i++)
        UNROLL
        for (int j = 0; j < DN; j++) _mm256_store_ps(o[i] + d0 + 8 * j, acc[i][j]);
}

static void pv_block(int mr, int dn, float *const *o, const float *const *p, const float *v, int hd, int t0,
                     int t1, int d0, int first) {
    if (dn == 4) {
        if (mr == 3) pv_kern(3, 4, o, p, v, hd, t0, t1, d0, first);
        else if (mr == 2) pv_kern(2, 4, o, p, v, hd, t0, t1, d0, first);
        else pv_kern(1, 4, o, p, v, hd, t0, t1, d0, first);
    } else {
        if (mr == 3) pv_kern(3, 1, o, p, v, hd, t0, t1, d0, first);
        else if (mr == 2) pv_kern(2, 1, o, p, v, hd, t0, t1, d0, first);
        else pv_kern(1, 1, o, p, v, hd, t0, t1, d0, first);
    }
}

#define PV_TB 64 /* cache positions per PV block: their V rows stay in L1; also the K rows widened at once */

/* ops_kv_rows with AVX2 (the same exact widening; hd a multiple of 8):
   rows [t0, t0+n) of head g's K or V as f32 in dst, or, for an f32
   cache, the rows in place */
static const float *kv_rows(float *dst, const attn_args *a, int which, int g, int t0, int n) {
    const size_t hd = (size_t)a->head_dim;
    const void *base = kv_view_row(&a->kv, which, g, t0, a->head_dim);
    if (a->kv.bits == 32) return base;
    const size_t nn = (size_t)n * hd;
    if (a->kv.bits == 16) {
        const uint16_t *q = base;
        for (size_t i = 0; i < nn; i += 8) _mm256_store_ps(dst + i, ld_f16(q + i));
        return dst;
    }
    const int8_t *q = base;
    const float *sc = kv_view_scale(&a->kv, which, g, t0);
    for (int r = 0; r < n; r++) {
        const __m256 s = _mm256_set1_ps(sc[r]);
        for (size_t i = (size_t)r * hd; i < (size_t)(r + 1) * hd; i += 8) {
            __m256i w = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(q + i)));
            _mm256_store_ps(dst + i, _mm256_mul_ps(_mm256_cvtepi32_ps(w), s));
        }
    }
    return dst;
}

void avx2_attn_task(const attn_args *a, int g, int m0, int qb) {
    const int hd = a->head_dim, r = a->n_heads / a->n_kv_heads;
    int m1 = m0 + qb < a->M ? m0 + qb : a->M;
    const int nq = (m1 - m0) * r;
    const int T = a->n_past + (a->full ? a->M : m1); /* positions any query of the block sees */
    const size_t Tp = ((size_t)T + 7) & ~(size_t)7;
    /* scratch: the widened rows KV [PV_TB][hd] (a cache stored in 16 or 8
       bits), S [nq][Tp], O [nq][hd], then pointer arrays */
    const size_t kvb = a->kv.bits == 32 ? 0 : (size_t)PV_TB * (size_t)hd;
    size_t bytes = (kvb + (size_t)nq * (Tp + (size_t)hd)) * sizeof(float) + (size_t)nq * 3 * sizeof(void *) +
                   (size_t)nq * sizeof(float) + 64;
    float *KV = ops_scratch(bytes);
    float *S = KV + kvb;
    float *O = S + (size_t)nq * Tp;
    const float **qp = (const float **)(void *)(O + (size_t)nq * hd);
    const float **pp = qp + nq;
    float **op = (float **)(pp + nq);
    float *sum = (float *)(op + nq);
    for (int i = 0; i < nq; i++) {
        int m = m0 + i / r, h = g * r + i % r;
        qp[i] = a->q + ((size_t)m * a->n_heads + h) * hd;
        pp[i] = S + (size_t)i * Tp;
        op[i] = O + (size_t)i * hd;
    }

    /* scores: S[i][t] = dot(q_i, k_t) * scale, over blocks of PV_TB
       positions (a multiple of 4, so the 4- and 1-position steps fall as
       over the whole range) */
    float sums[MR_MAX * 4];
    /* a sliding window: the blocks before the block's first row's window
       are skipped (their p would be exact zeros: skipping them changes no
       bit), so T0 is a multiple of PV_TB whatever rows the block holds */
    const int T0 = (ops_attn_lo(a, m0) / PV_TB) * PV_TB;
    for (int tc = T0; tc < T; tc += PV_TB) {
        const int te = tc + PV_TB < T ? tc + PV_TB : T;
        const float *kb = kv_rows(KV, a, 0, g, tc, te - tc);
        for (int t0 = tc; t0 < te;) {
            int nr = T - t0 >= 4 ? 4 : 1;
            const float *w = kb + (size_t)(t0 - tc) * hd;
            for (int i0 = 0, mr; i0 < nq; i0 += mr) {
                mr = block_rows(nq - i0);
                kern_f32(mr, nr, qp + i0, w, (size_t)hd, hd, NULL, 0, 1, 1, sums);
                for (int i = 0; i < mr; i++)
                    for (int j = 0; j < nr; j++) S[(size_t)(i0 + i) * Tp + t0 + j] = sums[i * 4 + j] * a->scale;
            }
            t0 += nr;
        }
    }

    /* softmax over lo_i <= t < L_i = n_past + m + 1 (lo_i: the row's
       window, else 0); zeros from T0 to lo_i and beyond L_i, up to Tp. The
       vectors start at lo_i rounded down to 8 (the lanes before lo_i
       masked), so each lane sums the same positions whatever T0 is. */
    for (int i = 0; i < nq; i++) {
        float *s = S + (size_t)i * Tp;
        const int L = a->full ? T : a->n_past + m0 + i / r + 1, lo = ops_attn_lo(a, m0 + i / r), s0 = lo & ~7;
        __m256 mx = _mm256_set1_ps(-INFINITY);
        int t = lo;
        for (; t + 8 <= L; t += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + t));
        float mxs = -INFINITY;
        {
            float tmp[8];
            _mm256_storeu_ps(tmp, mx);
            for (int j = 0; j < 8; j++) mxs = tmp[j] > mxs ? tmp[j] : mxs;
        }
        for (; t < L; t++) mxs = s[t] > mxs ? s[t] : mxs;
        __m256 mv = _mm256_set1_ps(mxs), acc = _mm256_setzero_ps();
        for (t = T0; t < s0; t++) s[t] = 0.0f;
        for (t = s0; t < L; t += 8) {
            const int a0 = lo - t > 0 ? lo - t : 0, a1 = L - t < 8 ? L - t : 8;
            __m256 e;
            if (a0 == 0 && a1 == 8) {
                e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + t), mv));
            } else {
                __m256i mask = _mm256_andnot_si256(tail_mask(a0), tail_mask(a1));
                e = exp256(_mm256_sub_ps(_mm256_maskload_ps(s + t, mask), mv));
                e = _mm256_and_ps(e, _mm256_castsi256_ps(mask)); /* lanes before lo_i or past L_i: 0 */
            }
            _mm256_storeu_ps(s + t, e); /* within Tp */
            acc = _mm256_add_ps(acc, e);
        }
        for (; t < (int)Tp; t++) s[t] = 0.0f;
        sum[i] = hsum1(acc);
    }

    /* O[i] = sum_t p[i][t] v_t, in blocks of PV_TB positions */
    for (int t0 = T0; t0 < T; t0 += PV_TB) {
        int t1 = t0 + PV_TB < T ? t0 + PV_TB : T;
        const float *vb = kv_rows(KV, a, 1, g, t0, t1 - t0);
        for (int d0 = 0; d0 < hd;) {
            int dn = hd - d0 >= 32 ? 4 : 1;
            for (int i0 = 0, mr; i0 < nq; i0 += mr) {
                mr = block_rows(nq - i0);
                pv_block(mr, dn, op + i0, pp + i0, vb, hd, t0, t1, d0, t0 == T0);
            }
            d0 += dn * 8;
        }
    }

    for (int i = 0; i < nq; i++) {
        int m = m0 + i / r, h = g * r + i % r;
        float *dst = a->out + ((size_t)m * a->n_heads + h) * hd;
        __m256 sv = _mm256_set1_ps(sum[i]);
        for (int d = 0; d < hd; d += 8) _mm256_storeu_ps(dst + d, _mm256_div_ps(_mm256_load_ps(O + (size_t)i * hd + d), sv));
    }
}

/* --------------------------------------------------------- elementwise */

void avx2_rmsnorm(float *y, const float *x, const float *w, int M, int D, float eps) {
    for (int m = 0; m < M; m++) {
        const float *xr = x + (size_t)m * D;
        float *yr = y + (size_t)m * D;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int i = 0;
        for (; i + 16 <= D; i += 16) {
            __m256 v0 = _mm256_loadu_ps(xr + i), v1 = _mm256_loadu_ps(xr + i + 8);
            a0 = _mm256_fmadd_ps(v0, v0, a0);
            a1 = _mm256_fmadd_ps(v1, v1, a1);
        }
        for (; i + 8 <= D; i += 8) {
            __m256 v0 = _mm256_loadu_ps(xr + i);
            a0 = _mm256_fmadd_ps(v0, v0, a0);
        }
        float ss = hsum1(_mm256_add_ps(a0, a1));
        for (; i < D; i++) ss += xr[i] * xr[i];
        float r = 1.0f / sqrtf(ss / (float)D + eps);
        __m256 rv = _mm256_set1_ps(r);
        for (i = 0; i + 8 <= D; i += 8)
            _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_mul_ps(_mm256_loadu_ps(xr + i), rv)));
        for (; i < D; i++) yr[i] = w[i] * (xr[i] * r);
    }
}

/* The scalar op_argmax's answer: the first index of the largest value,
 * NaNs never chosen (but x[0], which then wins). Pass 1 keeps a running
 * maximum that skips NaNs (vmaxps returns its second operand when the
 * first is NaN), pass 2 finds the first element equal to it. */
int avx2_argmax(const float *x, int n) {
    if (n < 16 || x[0] != x[0]) return scalar_argmax(x, n);
    __m256 m0 = _mm256_set1_ps(x[0]), m1 = m0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, _mm256_max_ps(m0, m1));
    float mx = lanes[0];
    for (int j = 1; j < 8; j++)
        if (lanes[j] > mx) mx = lanes[j];
    for (int j = i; j < n; j++)
        if (x[j] > mx) mx = x[j];
    const __m256 mv = _mm256_set1_ps(mx);
    for (i = 0; i + 8 <= n; i += 8) {
        int bits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), mv, _CMP_EQ_OQ));
        if (bits) return i + __builtin_ctz((unsigned)bits);
    }
    for (; i < n; i++)
        if (x[i] == mx) return i;
    return 0; /* not reached: mx is one of the elements */
}

void avx2_swiglu(float *y, const float *gate, const float *up, int n) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 e = exp256(_mm256_xor_ps(g, sign));
        __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) {
        float g = gate[i];
        y[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void avx2_add(float *y, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] += x[i];
}

void avx2_to_f32(float *y, const void *x, ds_dtype dt, int64_t n) {
    int64_t i = 0;
    if (dt == DT_F32) {
        memmove(y, x, (size_t)n * sizeof(float));
        return;
    }
    const uint16_t *h = x;
    if (dt == DT_BF16) {
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, ld_bf16(h + i));
        for (; i < n; i++) y[i] = ds_bf16_to_f32(h[i]);
    } else {
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, ld_f16(h + i));
        for (; i < n; i++) y[i] = ds_f16_to_f32(h[i]);
    }
}

#else
/* Built without AVX2 (the fuzz build leaves this file out; anything else
 * that compiles it plainly gets an empty unit). */
typedef int ops_avx2_empty_unit;
#endif
