/* quant: geometry and exact dequantization of the quantized weight formats,
 * the scalar matmul over them and the dispatch to the SIMD kernels.
 *
 * GGUF block types, as ggml lays them out (all multi-byte fields little
 * endian, f16 scales at any alignment, hence memcpy):
 *   Q8_0  32 elts, 34 B: d f16, q int8[32];                w = d*q
 *   Q4_0  32 elts, 18 B: d f16, qs[16];   element j < 16 is the low nibble of
 *         qs[j], element j+16 its high nibble;             w = d*(q-8)
 *   Q4_1  32 elts, 20 B: d, m f16, qs[16] (as Q4_0);        w = d*q + m
 *   Q5_0  32 elts, 22 B: d f16, qh u32, qs[16]; bit j of qh is bit 4 of
 *         element j (nibbles as Q4_0);                     w = d*(q-16)
 *   Q5_1  32 elts, 24 B: d, m f16, qh u32, qs[16];          w = d*q + m
 *   K types: super-blocks of 256 elements.
 *   Q2_K  84 B: scales[16] (low nibble scale, high nibble min), qs[64],
 *         d, dmin f16. Element h*128 + j*32 + l (h<2, j<4, l<32) is bits
 *         2j..2j+1 of qs[h*32+l]; its sub-block s = h*8 + j*2 + l/16;
 *         w = (d*sc_s)*q - dmin*mn_s
 *   Q3_K  110 B: hmask[32], qs[64], scales[12], d f16. Element as Q2_K for
 *         the low 2 bits; its high bit is bit h*4+j of hmask[l], and a
 *         clear high bit subtracts 4; 16 6-bit scales: the low 4 bits of
 *         scale s are the low (s < 8) or high (s >= 8) nibble of
 *         scales[s%8], the top 2 bits are bits 2(s/4).. of scales[8+s%4];
 *         w = (d*(sc_s-32)) * q
 *   Q4_K  144 B: d, dmin f16, scales[12], qs[128]. 8 sub-blocks of 32 with
 *         6-bit scale and min (for s < 4: scales[s] and scales[s+4] low 6
 *         bits; else low nibble / high nibble of scales[s+4] with the top 2
 *         bits of scales[s-4] / scales[s]). Element 64c + l (l < 32) is the
 *         low nibble of qs[32c+l] (sub-block 2c), element 64c+32+l its high
 *         nibble (sub-block 2c+1); w = (d*sc)*q - dmin*mn
 *   Q5_K  176 B: d, dmin, scales[12], qh[32], qs[128]: Q4_K plus bit 4 of
 *         element 64c+l (+32) from bit 2c (2c+1) of qh[l]
 *   Q6_K  210 B: ql[128], qh[64], scales int8[16], d f16. For half h and
 *         l < 32 (ql = ql + 64h, qh = qh + 32h): elements 128h + l,
 *         +32, +64, +96 take the low nibble of ql[l], of ql[l+32], the high
 *         nibble of ql[l], of ql[l+32] and, as bits 4-5, bits 0-1, 2-3,
 *         4-5, 6-7 of qh[l]; sub-block = element / 16; w = (d*sc)*(q-32)
 * The f32 operations follow ggml's order (the scale products first), so
 * that dequantization is bit-equal to ggml's and gguf-py's.
 *
 * MLX affine (DT_MLX): w = scale * q + bias per group of `group` elements.
 * The row's words, read as bytes, are one little-endian bit stream: element
 * e is the `bits` bits starting at bit e*bits, from the low bits of a byte
 * up, and an element may straddle bytes and words. For 2, 4 and 8 bits
 * that is MLX's packing of 32/bits elements per word from the low bits up;
 * for 3 and 5 bits MLX packs 8 elements into 3 and 5 bytes and for 6 bits 4
 * elements into 3 bytes, each pack filled from the low bit of its first
 * byte upwards (its CPU extract_bits), which is the same stream since
 * every pack is a whole number of bytes. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/quant_internal.h"

int quant_block_elems(ds_dtype t) {
    switch (t) {
    case DT_Q8_0: case DT_Q4_0: case DT_Q4_1: case DT_Q5_0: case DT_Q5_1: return 32;
    case DT_Q2_K: case DT_Q3_K: case DT_Q4_K: case DT_Q5_K: case DT_Q6_K: return 256;
    default: return 0;
    }
}

size_t quant_block_bytes(ds_dtype t) {
    switch (t) {
    case DT_Q8_0: return 34;
    case DT_Q4_0: return 18;
    case DT_Q4_1: return 20;
    case DT_Q5_0: return 22;
    case DT_Q5_1: return 24;
    case DT_Q2_K: return 84;
    case DT_Q3_K: return 110;
    case DT_Q4_K: return 144;
    case DT_Q5_K: return 176;
    case DT_Q6_K: return 210;
    default: return 0;
    }
}

size_t quant_row_bytes(ds_dtype t, int bits, int64_t K) {
    if (K <= 0) return 0;
    if (t == DT_MLX) return (size_t)K * (size_t)bits / 32 * 4;
    int qk = quant_block_elems(t);
    return qk ? (size_t)(K / qk) * quant_block_bytes(t) : 0;
}

int quant_check(const tensor *t, char *err, size_t errlen) {
    const char *nm = t->name ? t->name : "?";
    if (!dtype_is_quant(t->dtype)) return ds_err(err, errlen, "tensor %s: dtype %d is not a quantized format", nm, (int)t->dtype);
    if (t->ndim != 2 || t->shape[0] <= 0 || t->shape[1] <= 0)
        return ds_err(err, errlen, "tensor %s: a %s tensor must be 2-D with positive dimensions", nm, dtype_name(t->dtype));
    if (t->rows8) return ds_err(err, errlen, "tensor %s: a %s tensor cannot take the rows8 layout", nm, dtype_name(t->dtype));
    int64_t N = t->shape[0], K = t->shape[1];
    if (K > INT32_MAX || N > INT32_MAX)
        return ds_err(err, errlen, "tensor %s: shape [%" PRId64 "][%" PRId64 "] too large", nm, N, K);
    int bits = 0;
    if (t->dtype == DT_MLX) {
        bits = t->q.bits;
        int g = t->q.group;
        if (bits != 2 && bits != 3 && bits != 4 && bits != 5 && bits != 6 && bits != 8)
            return ds_err(err, errlen, "tensor %s: MLX bits %d not in {2,3,4,5,6,8}", nm, bits);
        if (g != 32 && g != 64 && g != 128)
            return ds_err(err, errlen, "tensor %s: MLX group size %d not in {32,64,128}", nm, g);
        if (K % g)
            return ds_err(err, errlen, "tensor %s: K = %" PRId64 " is not a multiple of the group size %d", nm, K, g);
        ds_dtype s = t->q.sdtype;
        if (s != DT_F32 && s != DT_F16 && s != DT_BF16)
            return ds_err(err, errlen, "tensor %s: MLX scales/biases dtype %s is not F32, F16 or BF16", nm, dtype_name(s));
        if (!t->q.scales || !t->q.biases) return ds_err(err, errlen, "tensor %s: MLX scales or biases missing", nm);
    } else {
        int qk = quant_block_elems(t->dtype);
        if (K % qk)
            return ds_err(err, errlen, "tensor %s: K = %" PRId64 " is not a multiple of the %s block (%d)", nm, K,
                          dtype_name(t->dtype), qk);
    }
    uint64_t want = (uint64_t)N * (uint64_t)quant_row_bytes(t->dtype, bits, K);
    if ((uint64_t)t->nbytes != want)
        return ds_err(err, errlen, "tensor %s: %zu bytes of data, %s [%" PRId64 "][%" PRId64 "] needs %" PRIu64, nm,
                      t->nbytes, dtype_name(t->dtype), N, K, want);
    if (!t->data) return ds_err(err, errlen, "tensor %s: no data", nm);
    return 0;
}

/* ------------------------------------------------------ dequantization */

static void deq_q8_0(const uint8_t *b, float *y) {
    float d = quant_f16(b);
    for (int j = 0; j < 32; j++) y[j] = d * (float)(int8_t)b[2 + j];
}

static void deq_q4_0(const uint8_t *b, float *y) {
    float d = quant_f16(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((qs[j] & 15) - 8);
        y[j + 16] = d * (float)((qs[j] >> 4) - 8);
    }
}

static void deq_q4_1(const uint8_t *b, float *y) {
    float d = quant_f16(b), m = quant_f16(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)(qs[j] & 15) + m;
        y[j + 16] = d * (float)(qs[j] >> 4) + m;
    }
}

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static void deq_q5_0(const uint8_t *b, float *y) {
    float d = quant_f16(b);
    uint32_t qh = le32(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4;
        int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
        y[j] = d * (float)(lo - 16);
        y[j + 16] = d * (float)(hi - 16);
    }
}

static void deq_q5_1(const uint8_t *b, float *y) {
    float d = quant_f16(b), m = quant_f16(b + 2);
    uint32_t qh = le32(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4;
        int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
        y[j] = d * (float)lo + m;
        y[j + 16] = d * (float)hi + m;
    }
}

static void deq_q2_k(const uint8_t *b, float *y) {
    const uint8_t *sc = b, *qs = b + 16;
    float d = quant_f16(b + 80), dmin = quant_f16(b + 82);
    for (int e = 0; e < 256; e++) {
        int h = e >> 7, j = (e >> 5) & 3, l = e & 31, s = h * 8 + j * 2 + (l >> 4);
        int q = (qs[h * 32 + l] >> (2 * j)) & 3;
        float dl = d * (float)(sc[s] & 15), ml = dmin * (float)(sc[s] >> 4);
        y[e] = dl * (float)q - ml;
    }
}

/* Q3_K's 16 signed 6-bit scales (already minus 32) */
static void q3k_scales(const uint8_t *s12, int *sc) {
    for (int s = 0; s < 16; s++) {
        int lo = s < 8 ? s12[s] & 15 : s12[s - 8] >> 4;
        int hi = (s12[8 + (s & 3)] >> (2 * (s >> 2))) & 3;
        sc[s] = (lo | hi << 4) - 32;
    }
}

static void deq_q3_k(const uint8_t *b, float *y) {
    const uint8_t *hm = b, *qs = b + 32;
    float d = quant_f16(b + 108);
    int sc[16];
    q3k_scales(b + 96, sc);
    for (int e = 0; e < 256; e++) {
        int h = e >> 7, j = (e >> 5) & 3, l = e & 31, s = h * 8 + j * 2 + (l >> 4);
        int q = (qs[h * 32 + l] >> (2 * j)) & 3;
        if (!((hm[l] >> (h * 4 + j)) & 1)) q -= 4;
        float dl = d * (float)sc[s];
        y[e] = dl * (float)q;
    }
}

/* Q4_K / Q5_K: the 6-bit scale and min of sub-block s (0..7) */
static void k4_scale_min(const uint8_t *s12, int s, int *sc, int *mn) {
    if (s < 4) {
        *sc = s12[s] & 63;
        *mn = s12[s + 4] & 63;
    } else {
        *sc = (s12[s + 4] & 15) | (s12[s - 4] >> 6) << 4;
        *mn = (s12[s + 4] >> 4) | (s12[s] >> 6) << 4;
    }
}

static void deq_q4_k(const uint8_t *b, float *y) {
    float d = quant_f16(b), dmin = quant_f16(b + 2);
    const uint8_t *qs = b + 16;
    for (int s = 0; s < 8; s++) {
        int sc, mn;
        k4_scale_min(b + 4, s, &sc, &mn);
        float dl = d * (float)sc, ml = dmin * (float)mn;
        const uint8_t *q = qs + 32 * (s >> 1);
        int sh = (s & 1) * 4;
        for (int l = 0; l < 32; l++) y[s * 32 + l] = dl * (float)((q[l] >> sh) & 15) - ml;
    }
}

static void deq_q5_k(const uint8_t *b, float *y) {
    float d = quant_f16(b), dmin = quant_f16(b + 2);
    const uint8_t *qh = b + 16, *qs = b + 48;
    for (int s = 0; s < 8; s++) {
        int sc, mn;
        k4_scale_min(b + 4, s, &sc, &mn);
        float dl = d * (float)sc, ml = dmin * (float)mn;
        const uint8_t *q = qs + 32 * (s >> 1);
        int sh = (s & 1) * 4;
        for (int l = 0; l < 32; l++) {
            int v = ((q[l] >> sh) & 15) | ((qh[l] >> s) & 1) << 4;
            y[s * 32 + l] = dl * (float)v - ml;
        }
    }
}

/* Q6_K: the unsigned 6-bit element e (0..255) of a super-block at b */
static inline int q6k_elem(const uint8_t *b, int e) {
    int h = e >> 7, i = (e >> 5) & 3, l = e & 31;
    const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
    int lo = (ql[l + 32 * (i & 1)] >> (4 * (i >> 1))) & 15;
    int hi = (qh[l] >> (2 * i)) & 3;
    return lo | hi << 4;
}

static void deq_q6_k(const uint8_t *b, float *y) {
    float d = quant_f16(b + 208);
    const int8_t *sc = (const int8_t *)(b + 192);
    for (int e = 0; e < 256; e++) {
        float dl = d * (float)sc[e >> 4];
        y[e] = dl * (float)(q6k_elem(b, e) - 32);
    }
}

quant_deq_fn quant_deq_block(ds_dtype t) {
    switch (t) {
    case DT_Q8_0: return deq_q8_0;
    case DT_Q4_0: return deq_q4_0;
    case DT_Q4_1: return deq_q4_1;
    case DT_Q5_0: return deq_q5_0;
    case DT_Q5_1: return deq_q5_1;
    case DT_Q2_K: return deq_q2_k;
    case DT_Q3_K: return deq_q3_k;
    case DT_Q4_K: return deq_q4_k;
    case DT_Q5_K: return deq_q5_k;
    case DT_Q6_K: return deq_q6_k;
    default: return NULL;
    }
}

float quant_mlx_sb(const void *p, ds_dtype sdt, size_t i) {
    if (sdt == DT_F32) {
        float f;
        memcpy(&f, (const char *)p + i * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)p + i * 2, 2);
    return sdt == DT_BF16 ? ds_bf16_to_f32(h) : ds_f16_to_f32(h);
}

void quant_row_f32(const tensor *W, int64_t n, float *y) {
    const int64_t K = W->shape[1];
    if (W->dtype == DT_MLX) {
        const int bits = W->q.bits, g = W->q.group;
        const uint8_t *row = (const uint8_t *)W->data + (size_t)n * quant_row_bytes(DT_MLX, bits, K);
        const size_t g0 = (size_t)(n * (K / g));
        for (int64_t k = 0; k < K; k++) {
            float s = quant_mlx_sb(W->q.scales, W->q.sdtype, g0 + (size_t)(k / g));
            float b = quant_mlx_sb(W->q.biases, W->q.sdtype, g0 + (size_t)(k / g));
            y[k] = s * (float)quant_mlx_elem(row, bits, k) + b;
        }
        return;
    }
    quant_deq_fn f = quant_deq_block(W->dtype);
    if (!f) {
        fprintf(stderr, "dspark: quant_row_f32: %s is not a quantized tensor\n", W->name ? W->name : "?");
        abort();
    }
    const int qk = quant_block_elems(W->dtype);
    const size_t bb = quant_block_bytes(W->dtype);
    const uint8_t *row = (const uint8_t *)W->data + (size_t)n * quant_row_bytes(W->dtype, 0, K);
    for (int64_t k = 0; k < K; k += qk) f(row + (size_t)(k / qk) * bb, y + k);
}

/* ------------------------------------------------ activation quantizer */

float quant_x_block(const float *x, int16_t *q) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) {
        const float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
    }
    const float d = amax / (float)QX_MAX;
    if (d == 0.0f) {
        memset(q, 0, 32 * sizeof *q);
        return d;
    }
    for (int i = 0; i < 32; i++) {
        float v = nearbyintf(x[i] / d);
        /* a normal d keeps |x / d| <= QX_MAX * (1 + 2^-24), which rounds to
         * QX_MAX; only a subnormal d (its quotient inexact) can go past */
        v = v > (float)QX_MAX ? (float)QX_MAX : v < -(float)QX_MAX ? -(float)QX_MAX : v;
        q[i] = (int16_t)(int)v;
    }
    return d;
}

void quant_x_derive(quant_xrow r, int K, int off) {
    const int kp = quant_kp(K);
    memset(r.q + K, 0, (size_t)(kp - K) * sizeof *r.q);
    for (int b = K / 32; b < kp / 32; b++) r.d[b] = 0.0f;
    /* qp: per 64 elements, 4i, 4i+1 to words 2i, 2i+1 and 4i+2, 4i+3 to
     * words 32 + 2i, 33 + 2i (quant_internal.h) */
    for (int c = 0; c < kp; c += 64)
        for (int i = 0; i < 16; i++) {
            r.qp[c + 2 * i] = r.q[c + 4 * i];
            r.qp[c + 2 * i + 1] = r.q[c + 4 * i + 1];
            r.qp[c + 32 + 2 * i] = r.q[c + 4 * i + 2];
            r.qp[c + 33 + 2 * i] = r.q[c + 4 * i + 3];
        }
    for (int i = 0; i < kp / 4; i++) {
        const int16_t *q = r.q + 4 * i;
        r.cor[i] = -off * ((int32_t)q[0] + q[1] + q[2] + q[3]);
        r.dxl[i] = r.d[i / 8];
    }
    for (int u = 0; u < kp / 16; u++) {
        int32_t s = 0;
        for (int j = 0; j < 16; j++) s += r.q[16 * u + j];
        r.xs[u] = s;
        r.dsx[u] = r.d[u / 2] * (float)s;
        r.dxu[u] = r.d[u / 2];
    }
}

int quant_offset(const tensor *W) {
    switch (W->dtype) {
    case DT_Q8_0: return 128;
    case DT_Q4_0: return 8;
    case DT_Q5_0: return 16;
    case DT_Q3_K: return 4;
    case DT_Q6_K: return 32;
    default: return 0;
    }
}

int quant_has_min(const tensor *W) {
    switch (W->dtype) {
    case DT_Q4_1: case DT_Q5_1: case DT_Q2_K: case DT_Q4_K: case DT_Q5_K: case DT_MLX: return 1;
    default: return 0;
    }
}

size_t quant_act_row_bytes(int K) { return quant_act_stride(K); }

size_t quant_act_bytes(int M, int K) { return (size_t)(M > 0 ? M : 0) * quant_act_stride(K) + 64; }

void quant_act_fill(void *act, const float *x, int M, int K, const tensor *W) {
    const int off = quant_offset(W);
#ifdef DS_HAVE_AVX2_PATH
    const int lvl = ops_level();
#endif
    for (int m = 0; m < M; m++) {
        quant_xrow r = quant_xrow_at(act, K, m);
        const float *xm = x + (size_t)m * K;
#ifdef DS_HAVE_AVX2_PATH
        if (lvl == 2) avx512_quant_x(xm, K, r.q, r.d);
        else if (lvl == 1) avx2_quant_x(xm, K, r.q, r.d);
        else
#endif
            for (int b = 0; b < K / 32; b++) r.d[b] = quant_x_block(xm + 32 * b, r.q + 32 * b);
        quant_x_derive(r, K, off);
    }
}

/* ------------------------------------------------------ span unpacking */

/* Q4_K / Q5_K: the 6-bit scale and min of sub-block s (0..7) */
static void k4_scale_min(const uint8_t *s12, int s, int *sc, int *mn);

/* elements [e0, e0 + 32 * nb) of a 32-element-block row */
static void unpack_b32(const tensor *W, const uint8_t *row, int b0, int nb, uint8_t *u, float *a, float *c) {
    const ds_dtype t = W->dtype;
    const size_t bb = quant_block_bytes(t);
    for (int i = 0; i < nb; i++) {
        const uint8_t *b = row + (size_t)(b0 + i) * bb;
        uint8_t *o = u + 32 * i;
        float d = quant_f16(b), m = 0.0f;
        switch (t) {
        case DT_Q8_0:
            for (int j = 0; j < 32; j++) o[j] = (uint8_t)(b[2 + j] ^ 0x80);
            break;
        case DT_Q4_0:
        case DT_Q4_1: {
            const uint8_t *qs = b + (t == DT_Q4_0 ? 2 : 4);
            if (t == DT_Q4_1) m = quant_f16(b + 2);
            for (int j = 0; j < 16; j++) {
                o[j] = qs[j] & 15;
                o[j + 16] = qs[j] >> 4;
            }
            break;
        }
        default: { /* Q5_0, Q5_1 */
            const int one = t == DT_Q5_1;
            if (one) m = quant_f16(b + 2);
            uint32_t qh;
            memcpy(&qh, b + 2 + 2 * one, 4);
            const uint8_t *qs = b + 6 + 2 * one;
            for (int j = 0; j < 16; j++) {
                o[j] = (uint8_t)((qs[j] & 15) | ((qh >> j) & 1) << 4);
                o[j + 16] = (uint8_t)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
            }
        }
        }
        a[2 * i] = a[2 * i + 1] = d;
        c[2 * i] = c[2 * i + 1] = m;
    }
}

void quant_unpack_span(const tensor *W, int64_t n, int span, uint8_t u[QSPAN], float a[16], float c[16]) {
    const int64_t K = W->shape[1];
    const int e0 = span * QSPAN, ne = K - e0 < QSPAN ? (int)(K - e0) : QSPAN;
    memset(u, 0, QSPAN);
    for (int s = 0; s < 16; s++) a[s] = c[s] = 0.0f;
    if (W->dtype == DT_MLX) {
        const int bits = W->q.bits, g = W->q.group;
        const uint8_t *row = (const uint8_t *)W->data + (size_t)n * quant_row_bytes(DT_MLX, bits, K);
        const size_t g0 = (size_t)(n * (K / g));
        for (int k = 0; k < ne; k++) u[k] = (uint8_t)quant_mlx_elem(row, bits, e0 + k);
        for (int s = 0; s < ne / 16; s++) {
            const size_t gi = g0 + (size_t)((e0 + 16 * s) / g);
            a[s] = quant_mlx_sb(W->q.scales, W->q.sdtype, gi);
            c[s] = quant_mlx_sb(W->q.biases, W->q.sdtype, gi);
        }
        return;
    }
    const ds_dtype t = W->dtype;
    const uint8_t *row = (const uint8_t *)W->data + (size_t)n * quant_row_bytes(t, 0, K);
    if (quant_block_elems(t) == 32) {
        unpack_b32(W, row, e0 / 32, ne / 32, u, a, c);
        return;
    }
    const uint8_t *b = row + (size_t)span * quant_block_bytes(t);
    switch (t) {
    case DT_Q2_K: {
        const uint8_t *sc = b, *qs = b + 16;
        const float d = quant_f16(b + 80), dmin = quant_f16(b + 82);
        for (int e = 0; e < 256; e++) {
            int h = e >> 7, j = (e >> 5) & 3, l = e & 31;
            u[e] = (uint8_t)((qs[h * 32 + l] >> (2 * j)) & 3);
        }
        /* unit s = element / 16 = h*8 + j*2 + l/16: the format's sub-block */
        for (int s = 0; s < 16; s++) {
            a[s] = d * (float)(sc[s] & 15);
            c[s] = -(dmin * (float)(sc[s] >> 4));
        }
        break;
    }
    case DT_Q3_K: {
        const uint8_t *hm = b, *qs = b + 32, *s12 = b + 96;
        const float d = quant_f16(b + 108);
        for (int e = 0; e < 256; e++) {
            int h = e >> 7, j = (e >> 5) & 3, l = e & 31;
            u[e] = (uint8_t)(((qs[h * 32 + l] >> (2 * j)) & 3) | ((hm[l] >> (h * 4 + j)) & 1) << 2);
        }
        for (int s = 0; s < 16; s++) {
            int lo = s < 8 ? s12[s] & 15 : s12[s - 8] >> 4;
            int hi = (s12[8 + (s & 3)] >> (2 * (s >> 2))) & 3;
            a[s] = d * (float)((lo | hi << 4) - 32);
        }
        break;
    }
    case DT_Q4_K:
    case DT_Q5_K: {
        const int five = t == DT_Q5_K;
        const float d = quant_f16(b), dmin = quant_f16(b + 2);
        const uint8_t *qh = b + 16, *qs = b + 16 + 32 * five;
        for (int s = 0; s < 8; s++) {
            int sc, mn;
            k4_scale_min(b + 4, s, &sc, &mn);
            a[2 * s] = a[2 * s + 1] = d * (float)sc;
            c[2 * s] = c[2 * s + 1] = -(dmin * (float)mn);
            const uint8_t *q = qs + 32 * (s >> 1);
            const int sh = (s & 1) * 4;
            for (int l = 0; l < 32; l++)
                u[32 * s + l] = (uint8_t)(((q[l] >> sh) & 15) | (five ? ((qh[l] >> s) & 1) << 4 : 0));
        }
        break;
    }
    default: { /* Q6_K */
        const float d = quant_f16(b + 208);
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int e = 0; e < 256; e++) u[e] = (uint8_t)q6k_elem(b, e);
        for (int s = 0; s < 16; s++) a[s] = d * (float)sc[s];
    }
    }
}

/* --------------------------------------------------------------- matmul */

/* Level 0: per unit the exact integer sums of row n's unpacked span with
 * x[m]'s quantized elements, combined in double in unit order (quant.h),
 * rounded once to f32, plus the bias in f32. Depends only on x[m] and row
 * n; uses the stack only. */
void quant_matmul_scalar(float *y, int ldy, const void *act, int M, int K, const tensor *W, const float *bias,
                         int64_t n0, int64_t n1) {
    const int off = quant_offset(W), nsp = quant_kp(K) / QSPAN;
    uint8_t u[QSPAN];
    float a[16], c[16];
    for (int64_t n = n0; n < n1; n++) {
        double acc[8];
        for (int m0 = 0; m0 < M; m0 += 8) {
            const int mt = M - m0 < 8 ? M - m0 : 8;
            for (int i = 0; i < mt; i++) acc[i] = 0.0;
            for (int sp = 0; sp < nsp; sp++) {
                quant_unpack_span(W, n, sp, u, a, c);
                for (int i = 0; i < mt; i++) {
                    const quant_xrow r = quant_xrow_at(act, K, m0 + i);
                    for (int s = 0; s < 16; s++) {
                        const int e = sp * QSPAN + 16 * s;
                        int32_t is = 0;
                        for (int j = 0; j < 16; j++) is += ((int32_t)u[16 * s + j] - off) * r.q[e + j];
                        const double dx = r.d[e / 32];
                        acc[i] += (double)a[s] * dx * (double)is + (double)c[s] * (double)r.dsx[e / 16];
                    }
                }
            }
            for (int i = 0; i < mt; i++) {
                const float v = (float)acc[i];
                y[(size_t)(m0 + i) * ldy + n] = bias ? v + bias[n] : v;
            }
        }
    }
}

void quant_matmul_act(float *y, int ldy, const void *act, int M, int K, const tensor *W, const float *bias,
                      int64_t n0, int64_t n1) {
    if (M <= 0 || n1 <= n0) return;
#ifdef DS_HAVE_AVX2_PATH
    const int lvl = ops_level();
    if (lvl == 2 && avx512_quant_ok()) {
        avx512_quant_matmul(y, ldy, act, M, K, W, bias, n0, n1, 0);
        return;
    }
    if (lvl >= 1) {
        avx2_quant_matmul(y, ldy, act, M, K, W, bias, n0, n1);
        return;
    }
#endif
    quant_matmul_scalar(y, ldy, act, M, K, W, bias, n0, n1);
}

void quant_matmul_rows(float *y, int ldy, const float *x, int M, int K, const tensor *W, const float *bias,
                       int64_t n0, int64_t n1) {
    if (M <= 0 || n1 <= n0) return;
    void *act = ops_scratch(quant_act_bytes(M, K));
    quant_act_fill(act, x, M, K, W);
    quant_matmul_act(y, ldy, act, M, K, W, bias, n0, n1);
}

/* ------------------------------------------------- the prefill family */

void quant_pre_row_scalar(quant_prow r, const float *x, int K, int off) {
    const int kp = quant_kp(K);
    memset(r.q, 0, (size_t)kp * sizeof *r.q);
    for (int b = 0; b < kp / 32; b++) {
        int16_t q[32] = {0};
        const float d = b < K / 32 ? quant_x_block(x + 32 * b, q) : 0.0f;
        for (int h = 0; h < 2; h++) {
            const int u = 2 * b + h;
            int32_t s = 0;
            for (int j = 0; j < 16; j++) {
                r.q[quant_pre_pos(16 * u + j)] = q[16 * h + j];
                s += q[16 * h + j];
            }
            r.cor[u] = -off * s;
            r.dx[u] = d;
            r.dsx[u] = d * (float)s;
        }
    }
}

int quant_pre_fast(void) {
#ifdef DS_HAVE_AVX2_PATH
    return ops_level() == 2 && avx512_quant_ok();
#else
    return 0;
#endif
}

size_t quant_pre_row_bytes(int K) { return quant_pre_stride(K); }
size_t quant_pre_bytes(int M, int K) { return (size_t)(M > 0 ? M : 0) * quant_pre_stride(K) + 64; }

void quant_pre_fill(void *act, const float *x, int M, int K, const tensor *W) {
    const int off = quant_offset(W);
#ifdef DS_HAVE_AVX2_PATH
    const int l2 = ops_level() == 2 && avx512_quant_ok();
#endif
    for (int m = 0; m < M; m++) {
        const quant_prow r = quant_prow_at(act, K, m);
#ifdef DS_HAVE_AVX2_PATH
        if (l2) {
            avx512_pre_row(r, x + (size_t)m * K, K, off);
            continue;
        }
#endif
        quant_pre_row_scalar(r, x + (size_t)m * K, K, off);
    }
}

/* the fixed 16-lane reduction of quant.h (the AVX-512 hsum16's pairs) */
static float pre_hsum(const float *a) {
    float h[8], t[4];
    for (int i = 0; i < 8; i++) h[i] = a[i] + a[i + 8];
    for (int i = 0; i < 4; i++) t[i] = h[i] + h[i + 4];
    return (t[0] + t[2]) + (t[1] + t[3]);
}

void quant_pre_matmul_scalar(float *y, int ldy, const void *act, int M, int K, const tensor *W, const float *bias,
                             int64_t n0, int64_t n1) {
    const int off = quant_offset(W), nsp = quant_kp(K) / QSPAN, hasmin = quant_has_min(W);
    uint8_t u[QSPAN];
    float a[16], c[16];
    for (int64_t n = n0; n < n1; n++) {
        float acc[8][16];
        for (int m0 = 0; m0 < M; m0 += 8) {
            const int mt = M - m0 < 8 ? M - m0 : 8;
            for (int i = 0; i < mt; i++)
                for (int s = 0; s < 16; s++) acc[i][s] = 0.0f;
            for (int sp = 0; sp < nsp; sp++) {
                quant_unpack_span(W, n, sp, u, a, c);
                for (int i = 0; i < mt; i++) {
                    const quant_prow r = quant_prow_at(act, K, m0 + i);
                    for (int s = 0; s < 16; s++) {
                        const int e = sp * QSPAN + 16 * s, un = e / 16;
                        int32_t is = 0;
                        for (int j = 0; j < 16; j++) is += ((int32_t)u[16 * s + j] - off) * r.q[quant_pre_pos(e + j)];
                        const float p = (float)is * a[s];
                        acc[i][s] = fmaf(p, r.dx[un], acc[i][s]);
                        if (hasmin) acc[i][s] = fmaf(c[s], r.dsx[un], acc[i][s]);
                    }
                }
            }
            for (int i = 0; i < mt; i++) {
                const float v = pre_hsum(acc[i]);
                y[(size_t)(m0 + i) * ldy + n] = bias ? v + bias[n] : v;
            }
        }
    }
}

/* the level-2 kernel's panel of unpacked W rows (quant_avx512.c: PNR
   rows, per span 256 int16 elements and 16 scales and 16 mins) */
#define QPRE_NR 4
size_t quant_pre_work_bytes(int K) { return (size_t)QPRE_NR * ((size_t)quant_kp(K) * 5 / 2) + 64; }

void quant_pre_matmul(float *y, int ldy, const void *act, int M, int K, const tensor *W, const float *bias,
                      int64_t n0, int64_t n1, void *work) {
    if (M <= 0 || n1 <= n0) return;
#ifdef DS_HAVE_AVX2_PATH
    if (ops_level() == 2 && avx512_quant_ok()) {
        avx512_pre_matmul(y, ldy, act, M, K, W, bias, n0, n1, work);
        return;
    }
#endif
    (void)work;
    quant_pre_matmul_scalar(y, ldy, act, M, K, W, bias, n0, n1);
}
