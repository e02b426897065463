/* ops: the CPU backend's entry points (see ops.h). This file owns the
 * portable scalar kernels, the choice between them, the AVX2 kernels of
 * ops_avx2.c and the AVX-512 matmul of ops_avx512.c, the split of matmul and attention over the thread pool, and
 * the per-thread scratch the kernels use.
 *
 * Threaded ops hand out work in chunks through an atomic counter rather
 * than fixed ranges: on a shared VM one core is often slower than the
 * other, and a static split would make the fast thread wait. Chunks never
 * change results: each output is computed by the same code whichever
 * thread takes it (ops_internal.h). Built with -DDS_NO_SIMD (the fuzz
 * build), nothing here refers to the SIMD kernels. */
#include "engine/ops.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu.h"
#include "engine/ops_internal.h"
#include "engine/quant.h"
#include "base/util.h"

/* ------------------------------------------------------- kernel choice */

static atomic_int g_level = -1; /* -1: not decided yet (CPU not probed) */

int ops_max_level(void) {
#ifdef DS_HAVE_AVX2_PATH
    if (cpu_has_avx512()) return 2;
    if (cpu_has_avx2()) return 1;
#endif
    return 0;
}

int ops_level(void) {
    int v = atomic_load_explicit(&g_level, memory_order_relaxed);
    if (v < 0) {
        v = ops_max_level();
        atomic_store_explicit(&g_level, v, memory_order_relaxed);
    }
    return v;
}

int ops_set_level(int level) {
    int prev = ops_level(), mx = ops_max_level();
    atomic_store_explicit(&g_level, level < 0 ? 0 : level > mx ? mx : level, memory_order_relaxed);
    return prev;
}

int ops_simd_active(void) { return ops_level() > 0; }

int ops_use_simd(int on) {
    int prev = ops_simd_active();
    ops_set_level(on ? ops_max_level() : 0);
    return prev;
}

/* ------------------------------------------------------------ scratch */

/* One growable buffer per thread, found through a pthread key whose
 * destructor frees it when the thread exits (pool workers exit in
 * tp_free), so nothing leaks and the token loop allocates only when a
 * shape grows past everything seen before. */
typedef struct {
    void *p;
    size_t cap;
} scratch_buf;

static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;

static void scratch_destroy(void *p) {
    scratch_buf *s = p;
    free(s->p);
    free(s);
}

static void scratch_key_init(void) {
    if (pthread_key_create(&g_scratch_key, scratch_destroy) != 0) {
        fprintf(stderr, "dspark: pthread_key_create failed\n");
        abort();
    }
}

void *ops_scratch(size_t bytes) {
    pthread_once(&g_scratch_once, scratch_key_init);
    scratch_buf *s = pthread_getspecific(g_scratch_key);
    if (!s) {
        s = xcalloc(1, sizeof *s);
        pthread_setspecific(g_scratch_key, s);
    }
    if (s->cap < bytes) {
        free(s->p);
        size_t cap = bytes + bytes / 4 + 4096;
        s->p = xaligned(cap);
        s->cap = cap;
    }
    return s->p;
}

/* -------------------------------------------------------------- matmul */

static size_t elt_size(ds_dtype dt) { return dt == DT_F32 ? 4 : 2; }

static void scalar_to_f32(float *y, const void *x, ds_dtype dt, int64_t n) {
    if (dt == DT_F32) {
        memmove(y, x, (size_t)n * sizeof(float));
    } else if (dt == DT_BF16) {
        const uint16_t *h = x;
        for (int64_t i = 0; i < n; i++) y[i] = ds_bf16_to_f32(h[i]);
    } else {
        const uint16_t *h = x;
        for (int64_t i = 0; i < n; i++) y[i] = ds_f16_to_f32(h[i]);
    }
}

/* fp32 dot with 8 partial sums (the compiler can keep them in SSE
 * registers without reassociating anything) */
static float scalar_dot(const float *a, const float *b, int n) {
    float acc[8] = {0};
    int k = 0;
    for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[k + j] * b[k + j];
    for (int j = 0; k < n; k++, j++) acc[j] += a[k] * b[k];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* row n of an N x K weight (row-major or rows8) widened into w by cvt
   (a piece of 8 at a time for rows8) */
typedef void (*to_f32_fn)(float *y, const void *x, ds_dtype dt, int64_t n);
static void weight_row_f32(float *w, const void *W, ds_dtype dt, int r8, int64_t K, int64_t n, to_f32_fn cvt) {
    size_t es = elt_size(dt);
    if (!r8) {
        cvt(w, (const char *)W + (size_t)(n * K) * es, dt, K);
        return;
    }
    for (int64_t k = 0; k < K; k += 8) cvt(w + k, (const char *)W + tensor_off(K, 1, n, k) * es, dt, 8);
}

static void scalar_matmul_rows(float *y, const float *x, int M, int K, int N, const void *W, ds_dtype dt, int r8,
                               const float *bias, int n0, int n1) {
    float *w = ops_scratch((size_t)K * sizeof(float) + 64);
    for (int n = n0; n < n1; n++) {
        weight_row_f32(w, W, dt, r8, K, n, scalar_to_f32);
        for (int m = 0; m < M; m++) {
            float v = scalar_dot(x + (size_t)m * K, w, K);
            y[(size_t)m * N + n] = bias ? v + bias[n] : v;
        }
    }
}

typedef struct {
    float *y;
    const float *x;
    int M, K, N;
    const void *W;
    ds_dtype dt;
    int r8;       /* W in the rows8 layout */
    const float *bias;
    int simd;     /* kernel level (ops_level) */
    float *xp;    /* x packed for avx512_matmul_pairs, or NULL */
    int unit;     /* W rows per chunk */
    int n_chunks;
    atomic_int next; /* next chunk to hand out */
} mm_ctx;

static void mm_worker(void *p, int ith, int nth) {
    (void)ith;
    (void)nth;
    mm_ctx *c = p;
    for (;;) {
        int ci = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (ci >= c->n_chunks) break;
        int n0 = ci * c->unit;
        int n1 = n0 + c->unit < c->N ? n0 + c->unit : c->N;
#ifdef DS_HAVE_AVX2_PATH
        if (c->xp) {
            avx512_matmul_pairs(c->y, c->xp, c->M, c->K, c->N, c->W, c->dt, c->r8, c->bias, n0, n1);
            continue;
        }
        if (c->simd == 2) {
            avx512_matmul_rows(c->y, c->x, c->M, c->K, c->N, c->W, c->dt, c->r8, c->bias, n0, n1);
            continue;
        }
        if (c->simd) {
            avx2_matmul_rows(c->y, c->x, c->M, c->K, c->N, c->W, c->dt, c->r8, c->bias, n0, n1);
            continue;
        }
#endif
        scalar_matmul_rows(c->y, c->x, c->M, c->K, c->N, c->W, c->dt, c->r8, c->bias, n0, n1);
    }
}

/* Quantized weights: x quantized once per call by quant_act_fill (in this
 * thread's scratch, which quant_matmul_act leaves alone), then
 * quant_matmul_act over chunks of W rows. Its results do not depend on the
 * chunking, so the chunks are sized for the memory stream alone: a few per
 * thread of at least 64 rows up to verify widths (W read once, all M rows
 * per block), OPS_NC rows for prefill. */
typedef struct {
    float *y;
    const void *act;
    int M, K, N;
    const tensor *W;
    const float *bias;
    int unit, n_chunks;
    char *work; /* the prefill family's per-thread work memory (NULL: the exact path) */
    size_t work_bytes;
    atomic_int next;
} qmm_ctx;

static void qmm_worker(void *p, int ith, int nth) {
    (void)nth;
    qmm_ctx *c = p;
    for (;;) {
        int ci = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (ci >= c->n_chunks) break;
        int n0 = ci * c->unit;
        int n1 = n0 + c->unit < c->N ? n0 + c->unit : c->N;
        if (c->work)
            quant_pre_matmul(c->y, c->N, c->act, c->M, c->K, c->W, c->bias, n0, n1, c->work + (size_t)ith * c->work_bytes);
        else
            quant_matmul_act(c->y, c->N, c->act, c->M, c->K, c->W, c->bias, n0, n1);
    }
}

/* the activations of rows [8c, 8c + 8) per chunk c, on the pool at
 * prefill widths (the fill is a few percent of a prefill matmul) */
typedef struct {
    void *act;
    const float *x;
    int M, K;
    const tensor *W;
    int pre; /* the prefill family's activations */
    atomic_int next;
} qfill_ctx;

static void qfill_worker(void *p, int ith, int nth) {
    (void)ith;
    (void)nth;
    qfill_ctx *c = p;
    const size_t rs = c->pre ? quant_pre_row_bytes(c->K) : quant_act_row_bytes(c->K);
    for (;;) {
        const int m0 = 8 * atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (m0 >= c->M) break;
        const int n = c->M - m0 < 8 ? c->M - m0 : 8;
        if (c->pre)
            quant_pre_fill((char *)c->act + (size_t)m0 * rs, c->x + (size_t)m0 * c->K, n, c->K, c->W);
        else
            quant_act_fill((char *)c->act + (size_t)m0 * rs, c->x + (size_t)m0 * c->K, n, c->K, c->W);
    }
}

static void op_matmul_quant(tpool *tp, float *y, const float *x, int M, const tensor *W, const float *bias, int pre) {
    int N = (int)W->shape[0], K = (int)W->shape[1];
    if (M <= 0 || N <= 0) return;
    int nth = tp_size(tp);
    /* the activations, then (prefill family) each thread's work memory */
    const size_t ab = ((pre ? quant_pre_bytes(M, K) : quant_act_bytes(M, K)) + 63) & ~(size_t)63;
    const size_t wb = pre ? (quant_pre_work_bytes(K) + 63) & ~(size_t)63 : 0;
    char *act = ops_scratch(ab + (size_t)(nth > 0 ? nth : 1) * wb);
    if (M >= 16 && nth > 1) {
        qfill_ctx f = {.act = act, .x = x, .M = M, .K = K, .W = W, .pre = pre};
        atomic_init(&f.next, 0);
        tp_run(tp, qfill_worker, &f);
    } else if (pre) {
        quant_pre_fill(act, x, M, K, W);
    } else {
        quant_act_fill(act, x, M, K, W);
    }
    qmm_ctx c = {.y = y, .act = act, .M = M, .K = K, .N = N, .W = W, .bias = bias,
                 .work = pre ? act + ab : NULL, .work_bytes = wb};
    if (M <= 16) {
        int unit = (N + nth * 4 - 1) / (nth * 4);
        unit = (unit + 15) & ~15;
        c.unit = unit < 64 ? 64 : unit;
    } else {
        c.unit = OPS_NC;
    }
    c.n_chunks = (N + c.unit - 1) / c.unit;
    atomic_init(&c.next, 0);
    if (c.n_chunks == 1) tp = NULL;
    tp_run(tp, qmm_worker, &c);
}

void op_matmul_pre(tpool *tp, float *y, const float *x, int M, const tensor *W, const float *bias) {
    if (dtype_is_quant(W->dtype) && quant_pre_fast()) {
        op_matmul_quant(tp, y, x, M, W, bias, 1);
        return;
    }
    op_matmul(tp, y, x, M, W, bias);
}

void op_matmul(tpool *tp, float *y, const float *x, int M, const tensor *W, const float *bias) {
    if (dtype_is_quant(W->dtype)) {
        op_matmul_quant(tp, y, x, M, W, bias, 0);
        return;
    }
    if (W->dtype != DT_F32 && W->dtype != DT_F16 && W->dtype != DT_BF16) {
        /* weights are validated at load; reaching this is a programming error */
        fprintf(stderr, "dspark: op_matmul: unsupported weight dtype %d (%s)\n", (int)W->dtype,
                W->name ? W->name : "?");
        abort();
    }
    int N = (int)W->shape[0], K = W->ndim > 1 ? (int)W->shape[1] : 1;
    if (M <= 0 || N <= 0) return;
    int nth = tp_size(tp);
    /* rows8 weights: every chunk below starts at a multiple of 8 rows */
    mm_ctx c = {.y = y, .x = x, .M = M, .K = K, .N = N, .W = W->data, .dt = W->dtype, .r8 = W->rows8, .bias = bias,
                .simd = ops_level()};
#ifdef DS_HAVE_AVX2_PATH
    /* small M on AVX-512 streams W in place (the pairs loop, or rows8's) */
    const int stream = M == 1 || (c.simd == 2 && M <= OPS_PAIRS_MAX_M && K >= 1);
    if (stream && M >= 2 && !(c.r8 && ops_r8_in_place(M, N, K, c.dt))) {
        /* x packed once, then read by every thread: it lives in this
         * thread's scratch, which avx512_matmul_pairs leaves alone */
        c.xp = ops_scratch(avx512_pairs_floats(M, K) * sizeof(float));
        avx512_pack_pairs(c.xp, x, M, K);
    }
#else
    const int stream = M == 1;
#endif
    if (stream) {
        /* W streamed from memory once: a few chunks per thread of at least
         * 64 rows (long streams; the kernels prefetch within a chunk) */
        int unit = (N + nth * 4 - 1) / (nth * 4);
        unit = (unit + 15) & ~15;
        c.unit = unit < 64 ? 64 : unit;
    } else {
        c.unit = OPS_NC;
    }
    c.n_chunks = (N + c.unit - 1) / c.unit;
    atomic_init(&c.next, 0);
    if (c.n_chunks == 1) tp = NULL;
    tp_run(tp, mm_worker, &c);
}

/* ----------------------------------------------------------- attention */

void ops_kv_rows(float *dst, const attn_args *a, int which, int g, int t0, int n) {
    const int hd = a->head_dim;
    const void *base = kv_view_row(&a->kv, which, g, t0, hd);
    if (a->kv.bits == 32) {
        memcpy(dst, base, (size_t)n * (size_t)hd * sizeof(float));
    } else if (a->kv.bits == 16) {
        kv_dequant_f16(base, n * hd, dst);
    } else {
        const float *sc = kv_view_scale(&a->kv, which, g, t0);
        for (int i = 0; i < n; i++)
            kv_dequant_i8((const int8_t *)base + (size_t)i * (size_t)hd, sc[i], hd, dst + (size_t)i * (size_t)hd);
    }
}

/* position t's K (which 0) or V row of head g as f32: in place for an f32
   cache, else widened into tmp[hd] */
static const float *kv_row(const attn_args *a, int which, int g, int t, float *tmp) {
    if (a->kv.bits == 32) return kv_view_row(&a->kv, which, g, t, a->head_dim);
    ops_kv_rows(tmp, a, which, g, t, 1);
    return tmp;
}

void scalar_attn_task(const attn_args *a, int g, int m0, int qb) {
    const int hd = a->head_dim, r = a->n_heads / a->n_kv_heads;
    int m1 = m0 + qb < a->M ? m0 + qb : a->M;
    int T = a->n_past + (a->full ? a->M : m1);
    float *s = ops_scratch(((size_t)T + 2 * (size_t)hd) * sizeof(float) + 64);
    float *o = s + T, *tmp = o + hd;
    for (int m = m0; m < m1; m++) {
        int L = a->full ? T : a->n_past + m + 1, lo = ops_attn_lo(a, m);
        for (int hh = 0; hh < r; hh++) {
            int h = g * r + hh;
            const float *q = a->q + ((size_t)m * a->n_heads + h) * hd;
            float mx = -INFINITY;
            for (int t = lo; t < L; t++) {
                s[t] = scalar_dot(q, kv_row(a, 0, g, t, tmp), hd) * a->scale;
                if (s[t] > mx) mx = s[t];
            }
            float sum = 0.0f;
            for (int t = lo; t < L; t++) {
                s[t] = expf(s[t] - mx);
                sum += s[t];
            }
            for (int d = 0; d < hd; d++) o[d] = 0.0f;
            for (int t = lo; t < L; t++) {
                const float *vr = kv_row(a, 1, g, t, tmp);
                float p = s[t];
                for (int d = 0; d < hd; d++) o[d] += p * vr[d];
            }
            float *dst = a->out + ((size_t)m * a->n_heads + h) * hd;
            for (int d = 0; d < hd; d++) dst[d] = o[d] / sum;
        }
    }
}

typedef struct {
    attn_args a;
    int qb, n_kv, n_tasks, simd;
    atomic_int next;
} at_ctx;

static void at_worker(void *p, int ith, int nth) {
    (void)ith;
    (void)nth;
    at_ctx *c = p;
    for (;;) {
        int ci = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (ci >= c->n_tasks) break;
        /* latest query blocks first: they see the most positions, and
         * finishing with the cheap ones evens out the threads */
        int t = c->n_tasks - 1 - ci;
        int g = t % c->n_kv, m0 = (t / c->n_kv) * c->qb;
#ifdef DS_HAVE_AVX2_PATH
        if (c->simd) {
            avx2_attn_task(&c->a, g, m0, c->qb);
            continue;
        }
#endif
        scalar_attn_task(&c->a, g, m0, c->qb);
    }
}

static void attention(tpool *tp, float *out, const float *q, int M, int n_heads, int n_kv_heads, int head_dim,
                      const kv_view *kv, int n_past, float scale, int full, int window) {
    if (M <= 0 || n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0) return;
    at_ctx c;
    c.a = (attn_args){.out = out, .q = q, .kv = *kv, .M = M, .n_heads = n_heads, .n_kv_heads = n_kv_heads,
                      .head_dim = head_dim, .n_past = n_past, .full = full, .scale = scale,
                      .window = full ? 0 : window};
    c.qb = ops_attn_qb(n_heads / n_kv_heads);
    c.n_kv = n_kv_heads;
    c.n_tasks = ((M + c.qb - 1) / c.qb) * n_kv_heads;
    c.simd = ops_simd_active() && head_dim % 8 == 0;
    atomic_init(&c.next, 0);
    if (c.n_tasks == 1) tp = NULL;
    tp_run(tp, at_worker, &c);
}

void op_attention_kv(tpool *tp, float *out, const float *q, int M, int n_heads, int n_kv_heads, int head_dim,
                     const kv_view *kv, int n_past, float scale, int full, int window) {
    attention(tp, out, q, M, n_heads, n_kv_heads, head_dim, kv, n_past, scale, full, window);
}

/* contiguous [n_kv][kv_stride][hd] f32 arrays as a view of one page */
static void attention_f32(tpool *tp, float *out, const float *q, int M, int n_heads, int n_kv_heads, int head_dim,
                          const float *k, const float *v, int kv_stride, int n_past, float scale, int full) {
    const void *kp[1] = {k}, *vp[1] = {v};
    kv_view w = {.bits = 32, .k = kp, .v = vp, .plen = kv_stride, .shift = KV_FLAT_SHIFT};
    attention(tp, out, q, M, n_heads, n_kv_heads, head_dim, &w, n_past, scale, full, 0);
}

void op_attention(tpool *tp, float *out, const float *q, int M, int n_heads, int n_kv_heads,
                  int head_dim, const float *k, const float *v, int kv_stride, int n_past, float scale) {
    attention_f32(tp, out, q, M, n_heads, n_kv_heads, head_dim, k, v, kv_stride, n_past, scale, 0);
}

void op_attention_block(tpool *tp, float *out, const float *q, int M, int n_heads, int n_kv_heads, int head_dim,
                        const float *k, const float *v, int kv_stride, int n_past, float scale) {
    attention_f32(tp, out, q, M, n_heads, n_kv_heads, head_dim, k, v, kv_stride, n_past, scale, 1);
}

/* --------------------------------------------------------- elementwise */

void op_rmsnorm(float *y, const float *x, const float *w, int M, int D, float eps) {
#ifdef DS_HAVE_AVX2_PATH
    if (ops_simd_active()) {
        avx2_rmsnorm(y, x, w, M, D, eps);
        return;
    }
#endif
    for (int m = 0; m < M; m++) {
        const float *xr = x + (size_t)m * D;
        float *yr = y + (size_t)m * D;
        float ss = scalar_dot(xr, xr, D);
        float r = 1.0f / sqrtf(ss / (float)D + eps);
        for (int i = 0; i < D; i++) yr[i] = w[i] * (xr[i] * r);
    }
}

void op_rope(float *x, int M, int n_heads, int head_dim, const int *pos, const float *inv_freq) {
    /* cos/sin once per (row, frequency), shared by all heads; done in
     * chunks so any head_dim works without a large stack array */
    enum { CH = 128 };
    float cs[CH], sn[CH];
    int half = head_dim / 2;
    for (int m = 0; m < M; m++) {
        for (int i0 = 0; i0 < half; i0 += CH) {
            int i1 = i0 + CH < half ? i0 + CH : half;
            for (int i = i0; i < i1; i++) {
                float ang = (float)pos[m] * inv_freq[i];
                cs[i - i0] = cosf(ang);
                sn[i - i0] = sinf(ang);
            }
            for (int h = 0; h < n_heads; h++) {
                float *xh = x + ((size_t)m * n_heads + h) * head_dim;
                for (int i = i0; i < i1; i++) {
                    float a = xh[i], b = xh[i + half], c = cs[i - i0], s = sn[i - i0];
                    xh[i] = a * c - b * s;
                    xh[i + half] = b * c + a * s;
                }
            }
        }
    }
}

void op_swiglu(float *y, const float *gate, const float *up, int n) {
#ifdef DS_HAVE_AVX2_PATH
    if (ops_simd_active()) {
        avx2_swiglu(y, gate, up, n);
        return;
    }
#endif
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        y[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void op_geglu(float *y, const float *gate, const float *up, int n) {
    const float beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
    for (int i = 0; i < n; i++) {
        const float g = gate[i];
        const float cube = g * g * g;
        const float inner = beta * (g + kappa * cube);
        const float t = 0.5f * g * (1.0f + tanhf(inner));
        y[i] = t * up[i];
    }
}

void op_scale(float *x, float s, int n) {
    for (int i = 0; i < n; i++) x[i] *= s;
}

void op_softcap(float *x, float cap, int n) {
    for (int i = 0; i < n; i++) {
        const float d = x[i] / cap;
        x[i] = tanhf(d) * cap;
    }
}

void op_add(float *y, const float *x, int n) {
#ifdef DS_HAVE_AVX2_PATH
    if (ops_simd_active()) {
        avx2_add(y, x, n);
        return;
    }
#endif
    for (int i = 0; i < n; i++) y[i] += x[i];
}

void op_to_f32(float *y, const void *x, ds_dtype dt, int64_t n) {
#ifdef DS_HAVE_AVX2_PATH
    if (ops_simd_active()) {
        avx2_to_f32(y, x, dt, n);
        return;
    }
#endif
    scalar_to_f32(y, x, dt, n);
}

void op_embed(float *y, const tensor *emb, const int *tokens, int M) {
    int64_t D = emb->ndim > 1 ? emb->shape[1] : 1;
    if (dtype_is_quant(emb->dtype)) {
        /* a quantized table (quant_check'ed at load): rows dequantized exactly */
        for (int m = 0; m < M; m++) quant_row_f32(emb, tokens[m], y + (size_t)m * D);
        return;
    }
    /* rows8: a tied embedding, laid out for the LM head */
    for (int m = 0; m < M; m++) weight_row_f32(y + (size_t)m * D, emb->data, emb->dtype, emb->rows8, D, tokens[m], op_to_f32);
}

int scalar_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int op_argmax(const float *x, int n) {
#ifdef DS_HAVE_AVX2_PATH
    if (ops_simd_active()) return avx2_argmax(x, n);
#endif
    return scalar_argmax(x, n);
}

double op_exp_sum(float *e, const float *x, int n, float mx, float scale) {
#ifdef DS_HAVE_AVX2_PATH
    if (ops_simd_active()) return avx2_exp_sum(e, x, n, mx, scale);
#endif
    double sum = 0;
    for (int i = 0; i < n; i++) {
        float a = (x[i] - mx) * scale;
        e[i] = a < -104.0f ? 0.0f : expf(a);
        sum += e[i];
    }
    return sum;
}
