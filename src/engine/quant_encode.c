/* quant_encode: see quant_encode.h. Byte layouts (little-endian, as ggml
 * stores them on the hosts we support):
 *   Q8_0  34 B / 32:  f16 d, int8 q[32]                      x = d * q
 *   Q4_0  18 B / 32:  f16 d, u8 qs[16] (lo nibble: elements 0..15, hi: 16..31)
 *                                                            x = d * (q - 8)
 *   Q5_0  22 B / 32:  f16 d, u32 qh (bit j: the 5th bit of element j),
 *                     u8 qs[16] as Q4_0                      x = d * (q - 16)
 *   Q4_K 144 B / 256: f16 d, f16 dmin, u8 scales[12] (eight 6-bit scales
 *                     and mins), u8 qs[128]                  x = d*sc*q - dmin*m
 *   Q6_K 210 B / 256: u8 ql[128] (low 4 bits), u8 qh[64] (high 2 bits),
 *                     int8 scales[16], f16 d                 x = d * sc * (q - 32) */
#include "engine/quant_encode.h"

#include <math.h>
#include <string.h>

#include "base/util.h"

/* Round half to even, like ggml's nearest_int (the default FP rounding
 * mode; nothing here changes it). */
static inline int nint(float x) { return (int)lrintf(x); }
static inline float f16r(float x) { return ds_f16_to_f32(ds_f32_to_f16(x)); }
static inline void put_f16(uint8_t *p, float x) {
    uint16_t h = ds_f32_to_f16(x);
    memcpy(p, &h, 2);
}
static inline float get_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return ds_f16_to_f32(h);
}

int qenc_supported(ds_dtype t) {
    return t == DT_Q8_0 || t == DT_Q4_0 || t == DT_Q5_0 || t == DT_Q4_K || t == DT_Q6_K;
}
int qenc_block_elems(ds_dtype t) {
    return t == DT_Q4_K || t == DT_Q6_K ? 256 : qenc_supported(t) ? 32 : 0;
}
size_t qenc_block_bytes(ds_dtype t) {
    switch (t) {
    case DT_Q8_0: return 34;
    case DT_Q4_0: return 18;
    case DT_Q5_0: return 22;
    case DT_Q4_K: return 144;
    case DT_Q6_K: return 210;
    default: return 0;
    }
}
size_t qenc_row_bytes(ds_dtype t, int64_t K) {
    int be = qenc_block_elems(t);
    if (!be || K <= 0 || K % be) return 0;
    return (size_t)(K / be) * qenc_block_bytes(t);
}

/* ---- the 32-element types ---- */

static void enc_q8_0(const float *x, uint8_t *b) {
    float amax = 0;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    float d = amax / 127.f, id = d ? 1.f / d : 0.f;
    put_f16(b, d);
    /* halves round away from zero here (roundf), as ggml's Q8_0 does */
    for (int i = 0; i < 32; i++) b[2 + i] = (uint8_t)(int8_t)roundf(x[i] * id);
}

/* Q4_0 / Q5_0: the scale maps the element of largest magnitude (with its
 * sign) onto the most negative code, -8 (-16), so that extreme is exact and
 * the other side gets the one extra positive step. */
static float signed_max(const float *x, int n) {
    float amax = 0, m = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            m = x[i];
        }
    return m;
}

static void enc_q4_0(const float *x, uint8_t *b) {
    float d = signed_max(x, 32) / -8.f, id = d ? 1.f / d : 0.f;
    put_f16(b, d);
    for (int j = 0; j < 16; j++) {
        /* + 8.5 then truncation: round half up into the code range 0..15 */
        int q0 = (int)(x[j] * id + 8.5f), q1 = (int)(x[j + 16] * id + 8.5f);
        q0 = q0 > 15 ? 15 : q0;
        q1 = q1 > 15 ? 15 : q1;
        b[2 + j] = (uint8_t)(q0 | (q1 << 4));
    }
}

static void enc_q5_0(const float *x, uint8_t *b) {
    float d = signed_max(x, 32) / -16.f, id = d ? 1.f / d : 0.f;
    put_f16(b, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        int q0 = (int)(x[j] * id + 16.5f), q1 = (int)(x[j + 16] * id + 16.5f);
        q0 = q0 > 31 ? 31 : q0;
        q1 = q1 > 31 ? 31 : q1;
        b[6 + j] = (uint8_t)((q0 & 15) | ((q1 & 15) << 4));
        qh |= (uint32_t)(q0 >> 4) << j;
        qh |= (uint32_t)(q1 >> 4) << (j + 16);
    }
    memcpy(b + 2, &qh, 4);
}

/* ---- Q4_K ---- */

/* Fits x[n] ~ scale * L + min with L in [0, nmax] and min <= 0, weighting
 * each element's squared error by w. Starting from the plain min/max grid,
 * it tries nstep inverse scales (nmax + rmin + rdelta * s) / range; for each
 * rounding it solves the weighted least-squares (scale, min) in closed form
 * (min clamped to 0 when the fit wants it positive, the scale then refit)
 * and keeps the rounding whose fit has the smallest weighted error. Returns
 * the scale; *neg_min gets -min (>= 0). */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min, float rmin,
                           float rdelta, int nstep) {
    float lo = x[0], hi = x[0], sw = w[0], swx = w[0] * x[0];
    for (int i = 1; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
        sw += w[i];
        swx += w[i] * x[i];
    }
    if (lo > 0) lo = 0; /* the offset only ever moves values down */
    if (hi == lo) {
        memset(L, 0, (size_t)n);
        *neg_min = -lo;
        return 0.f;
    }
    float iscale = nmax / (hi - lo), scale = 1.f / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        int l = nint(iscale * (x[i] - lo));
        l = l < 0 ? 0 : l > nmax ? nmax : l;
        L[i] = (uint8_t)l;
        float e = scale * l + lo - x[i];
        best += w[i] * e * e;
    }
    uint8_t cand[256];
    for (int s = 0; s <= nstep; s++) {
        float is = (rmin + rdelta * s + nmax) / (hi - lo);
        float sl = 0, sl2 = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            int l = nint(is * (x[i] - lo));
            l = l < 0 ? 0 : l > nmax ? nmax : l;
            cand[i] = (uint8_t)l;
            sl += w[i] * l;
            sl2 += w[i] * l * l;
            sxl += w[i] * l * x[i];
        }
        float det = sw * sl2 - sl * sl;
        if (det <= 0) continue;
        float sc = (sw * sxl - swx * sl) / det;
        float mn = (sl2 * swx - sl * sxl) / det;
        if (mn > 0) {
            mn = 0;
            sc = sxl / sl2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float e = sc * cand[i] + mn - x[i];
            err += w[i] * e * e;
        }
        if (err < best) {
            memcpy(L, cand, (size_t)n);
            best = err;
            scale = sc;
            lo = mn;
        }
    }
    *neg_min = -lo;
    return scale;
}

/* The j-th 6-bit scale and min of a Q4_K block's 12 packed bytes: the first
 * four pairs sit in the low 6 bits of bytes 0..3 and 4..7; the last four
 * keep their low nibbles in bytes 8..11 and their top 2 bits in the spare
 * top bits of bytes 0..7. */
static void k4_scale_min(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

static void enc_q4_k(const float *x, uint8_t *b) {
    uint8_t L[256];
    float w[32], sc[8], mn[8], max_sc = 0, max_mn = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float s2 = 0;
        for (int i = 0; i < 32; i++) s2 += xs[i] * xs[i];
        float av = sqrtf(s2 / 32);
        /* weights favour large elements, floored by the sub-block's RMS */
        for (int i = 0; i < 32; i++) w[i] = av + fabsf(xs[i]);
        sc[j] = fit_scale_min(32, 15, xs, w, L + 32 * j, &mn[j], -1.f, 0.1f, 20);
        max_sc = fmaxf(max_sc, sc[j]);
        max_mn = fmaxf(max_mn, mn[j]);
    }
    uint8_t *scales = b + 4;
    memset(scales, 0, 12);
    float isc = max_sc > 0 ? 63.f / max_sc : 0.f, imn = max_mn > 0 ? 63.f / max_mn : 0.f;
    for (int j = 0; j < 8; j++) {
        int ls = nint(isc * sc[j]), lm = nint(imn * mn[j]);
        ls = ls > 63 ? 63 : ls;
        lm = lm > 63 ? 63 : lm;
        if (j < 4) {
            scales[j] = (uint8_t)ls;
            scales[j + 4] = (uint8_t)lm;
        } else {
            scales[j + 4] = (uint8_t)((ls & 15) | ((lm & 15) << 4));
            scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    put_f16(b, max_sc / 63.f);
    put_f16(b + 2, max_mn / 63.f);
    /* the codes are re-rounded against the scales as stored (f16 and 6-bit),
       so the decoder's values are the nearest ones the block can express */
    float d = get_f16(b), dmin = get_f16(b + 2);
    for (int j = 0; j < 8; j++) {
        int s, m;
        k4_scale_min(j, scales, &s, &m);
        float ds = d * s;
        if (!ds) continue; /* a zero scale: codes from the fit stay (they decode to -dm anyway) */
        float dm = dmin * m;
        for (int i = 0; i < 32; i++) {
            int l = nint((x[32 * j + i] + dm) / ds);
            L[32 * j + i] = (uint8_t)(l < 0 ? 0 : l > 15 ? 15 : l);
        }
    }
    uint8_t *qs = b + 16;
    for (int j = 0; j < 256; j += 64) /* 32 bytes per 64 elements: lo nibble j+l, hi j+l+32 */
        for (int l = 0; l < 32; l++) qs[j / 2 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
}

/* ---- Q6_K ---- */

/* Symmetric fit of x[n] ~ scale * (L - nmax), L in [0, 2 nmax): starting
 * from the scale that maps the largest-magnitude element onto -nmax, it
 * tries 18 nearby inverse scales (nmax + 0.1 s, s = -9..9) and keeps the
 * rounding whose least-squares scale explains most of x (max of
 * (sum w x l)^2 / sum w l^2, weights w = x^2). Returns that scale. */
static float fit_sym(int n, int nmax, const float *x, uint8_t *L) {
    float amax = 0, m = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            m = x[i];
        }
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float best_scale = 0, best = 0;
    for (int s = 0; s <= 18; s++) {
        int step = s == 0 ? 0 : s <= 9 ? s - 10 : s - 9; /* 0 first, then -9..-1, 1..9 */
        float is = -(nmax + 0.1f * step) / m;
        float sxl = 0, sl2 = 0;
        for (int i = 0; i < n; i++) {
            int l = nint(is * x[i]);
            l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
            float w = x[i] * x[i];
            sxl += w * x[i] * l;
            sl2 += w * l * l;
        }
        if (s == 0) {
            best_scale = sl2 ? sxl / sl2 : 0.f;
            best = best_scale * sxl;
        } else if (!(sl2 > 0 && sxl * sxl > best * sl2)) {
            continue;
        } else {
            best_scale = sxl / sl2;
            best = best_scale * sxl;
        }
        for (int i = 0; i < n; i++) {
            int l = nint(is * x[i]);
            l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
            L[i] = (uint8_t)(l + nmax);
        }
    }
    return best_scale;
}

static void enc_q6_k(const float *x, uint8_t *b) {
    uint8_t L[256];
    float sc[16], max_abs = 0, max_sc = 0;
    for (int j = 0; j < 16; j++) {
        sc[j] = fit_sym(16, 32, x + 16 * j, L + 16 * j);
        if (fabsf(sc[j]) > max_abs) {
            max_abs = fabsf(sc[j]);
            max_sc = sc[j];
        }
    }
    uint8_t *ql = b, *qh = b + 128;
    int8_t *scales = (int8_t *)(b + 192);
    if (max_abs < 1e-15f) { /* an all-zero block */
        memset(b, 0, 210);
        return;
    }
    /* the sub-block scales share one f16 d; each is an int8 multiple of it,
       the largest mapped onto -128 (its sign folded into d) */
    float iscale = -128.f / max_sc;
    put_f16(b + 208, 1.f / iscale);
    for (int j = 0; j < 16; j++) {
        int s = nint(iscale * sc[j]);
        scales[j] = (int8_t)(s > 127 ? 127 : s);
    }
    float d = get_f16(b + 208);
    for (int j = 0; j < 16; j++) {
        float ds = d * scales[j];
        if (!ds) continue;
        for (int i = 0; i < 16; i++) {
            int l = nint(x[16 * j + i] / ds);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            L[16 * j + i] = (uint8_t)(l + 32);
        }
    }
    /* per 128 elements: 64 bytes of low nibbles (element l and l+64 share a
       byte, as do l+32 and l+96) and 32 bytes of the four 2-bit tops */
    for (int h = 0; h < 256; h += 128) {
        uint8_t *lo = ql + h / 2, *hi = qh + h / 4;
        const uint8_t *q = L + h;
        for (int l = 0; l < 32; l++) {
            lo[l] = (uint8_t)((q[l] & 15) | ((q[l + 64] & 15) << 4));
            lo[l + 32] = (uint8_t)((q[l + 32] & 15) | ((q[l + 96] & 15) << 4));
            hi[l] = (uint8_t)((q[l] >> 4) | ((q[l + 32] >> 4) << 2) | ((q[l + 64] >> 4) << 4) | ((q[l + 96] >> 4) << 6));
        }
    }
}

int qenc_row(ds_dtype t, const float *x, int64_t K, void *dst) {
    size_t rb = qenc_row_bytes(t, K);
    if (!rb) return -1;
    int be = qenc_block_elems(t);
    size_t bb = qenc_block_bytes(t);
    uint8_t *b = dst;
    for (int64_t i = 0; i < K / be; i++, x += be, b += bb) {
        switch (t) {
        case DT_Q8_0: enc_q8_0(x, b); break;
        case DT_Q4_0: enc_q4_0(x, b); break;
        case DT_Q5_0: enc_q5_0(x, b); break;
        case DT_Q4_K: enc_q4_k(x, b); break;
        default: enc_q6_k(x, b); break;
        }
    }
    return 0;
}

/* ---- decoding (ggml's dequantization rules) ---- */

static void dec_block(ds_dtype t, const uint8_t *b, float *y) {
    switch (t) {
    case DT_Q8_0: {
        float d = get_f16(b);
        for (int i = 0; i < 32; i++) y[i] = d * (int8_t)b[2 + i];
        break;
    }
    case DT_Q4_0: {
        float d = get_f16(b);
        for (int j = 0; j < 16; j++) {
            y[j] = d * ((b[2 + j] & 15) - 8);
            y[j + 16] = d * ((b[2 + j] >> 4) - 8);
        }
        break;
    }
    case DT_Q5_0: {
        float d = get_f16(b);
        uint32_t qh;
        memcpy(&qh, b + 2, 4);
        for (int j = 0; j < 16; j++) {
            int q0 = (b[6 + j] & 15) | (int)(((qh >> j) & 1) << 4);
            int q1 = (b[6 + j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = d * (q0 - 16);
            y[j + 16] = d * (q1 - 16);
        }
        break;
    }
    case DT_Q4_K: {
        float d = get_f16(b), dmin = get_f16(b + 2);
        const uint8_t *qs = b + 16;
        for (int j = 0; j < 8; j++) {
            int s, m;
            k4_scale_min(j, b + 4, &s, &m);
            const uint8_t *q = qs + (j / 2) * 32;
            for (int i = 0; i < 32; i++) {
                int c = j & 1 ? q[i] >> 4 : q[i] & 15;
                y[32 * j + i] = d * s * c - dmin * m;
            }
        }
        break;
    }
    case DT_Q6_K: {
        float d = get_f16(b + 208);
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int h = 0; h < 256; h += 128) {
            const uint8_t *lo = b + h / 2, *hi = b + 128 + h / 4;
            for (int l = 0; l < 32; l++) {
                int q1 = ((lo[l] & 15) | ((hi[l] & 3) << 4)) - 32;
                int q2 = ((lo[l + 32] & 15) | (((hi[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((lo[l] >> 4) | (((hi[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((lo[l + 32] >> 4) | (((hi[l] >> 6) & 3) << 4)) - 32;
                y[h + l] = d * sc[(h + l) / 16] * q1;
                y[h + l + 32] = d * sc[(h + l + 32) / 16] * q2;
                y[h + l + 64] = d * sc[(h + l + 64) / 16] * q3;
                y[h + l + 96] = d * sc[(h + l + 96) / 16] * q4;
            }
        }
        break;
    }
    default: break;
    }
}

int qenc_decode_row(ds_dtype t, const void *src, int64_t K, float *y) {
    if (!qenc_row_bytes(t, K)) return -1;
    int be = qenc_block_elems(t);
    size_t bb = qenc_block_bytes(t);
    const uint8_t *b = src;
    for (int64_t i = 0; i < K / be; i++) dec_block(t, b + (size_t)i * bb, y + i * be);
    return 0;
}

/* ---- MLX affine ---- */

int qenc_mlx_row(const float *x, int64_t K, int bits, int group, uint32_t *q, float *scales, float *biases) {
    if ((bits != 4 && bits != 8) || (group != 32 && group != 64 && group != 128) || K <= 0 || K % group) return -1;
    const float n_bins = (float)((1 << bits) - 1);
    const int per_word = 32 / bits;
    for (int64_t g = 0; g < K / group; g++) {
        const float *xg = x + g * group;
        float lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i < group; i++) {
            lo = fminf(lo, xg[i]);
            hi = fmaxf(hi, xg[i]);
        }
        /* anchor at the edge of larger magnitude; the scale's sign makes
           codes count away from it, and snapping the scale so the edge is
           an integer number of steps from zero keeps 0.0 exact */
        int lo_edge = fabsf(lo) > fabsf(hi);
        float scale = fmaxf((hi - lo) / n_bins, 1e-7f);
        if (!lo_edge) scale = -scale;
        float edge = lo_edge ? lo : hi, bias = 0;
        float q0 = rintf(edge / scale);
        if (q0 != 0) {
            scale = edge / q0;
            bias = edge;
        }
        scales[g] = scale;
        biases[g] = bias;
        for (int i = 0; i < group; i += per_word) {
            uint32_t word = 0;
            for (int k = 0; k < per_word; k++) {
                float v = rintf((xg[i + k] - bias) / scale);
                v = fminf(fmaxf(v, 0.f), n_bins);
                word |= (uint32_t)v << (k * bits);
            }
            q[(g * group + i) / per_word] = word;
        }
    }
    return 0;
}

void qenc_mlx_decode_row(const uint32_t *q, const float *scales, const float *biases, int64_t K, int bits, int group,
                         float *y) {
    const int per_word = 32 / bits;
    const uint32_t mask = (1u << bits) - 1;
    for (int64_t k = 0; k < K; k++) {
        uint32_t c = (q[k / per_word] >> ((k % per_word) * bits)) & mask;
        y[k] = scales[k / group] * (float)c + biases[k / group];
    }
}
