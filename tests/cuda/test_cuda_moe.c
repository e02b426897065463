/* The experts' MLP of an MoE layer on the GPU (src/engine/cuda/cuda_moe.cu)
 * against a double-precision reference of engine/moe's rule (desc.h wmoe):
 * x + sum over each row's top-k experts (softmax of the router logits, the
 * lower index first among equals, renormalized or not) of weight *
 * down_e(silu(gate_e x') * up_e x'), x' the RMSNorm of x, over the weights
 * as the CPU dequantizes them. For bf16, f16 and f32 experts, Q8_0, Q4_K
 * with Q6_K down projections (a GGUF Q4_K_M's mix), MLX 4-bit, and gate and
 * up in different formats (run apart), with top 8 of 32 experts and top 2
 * not renormalized:
 *   - every row of a 160-row (prefill-sized) launch within 2e-4 of the
 *     row's largest MLP output, its experts the reference's (rows whose
 *     k-th and k+1-th router logits are within 1e-4, where f32 rounding
 *     may pick either, are left out and counted);
 *   - batch invariance: the rows of every launch of 1-16 rows, and each of
 *     18 rows alone, bit-equal to those rows of the 160-row launch, and the
 *     experts read from tile-major copies bit-equal too;
 *   - an expert in another format than the others is refused by name.
 * Built only by `make test-cuda` (tests/cuda/), run on a machine with a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cuda/cuda_hooks.h"
#include "engine/desc.h"
#include "engine/quant.h"
#include "engine/quant_encode.h"
#include "engine/tensor.h"
#include "test.h"
#include "cuda/cuda_test.h"

enum { MH = 256, MI = 256, MROWS = 160 };

static uint64_t mrng = 0x6d6f65ULL;
static float mrand(void) { /* uniform in [-1, 1) */
    mrng ^= mrng << 13;
    mrng ^= mrng >> 7;
    mrng ^= mrng << 17;
    return (float)((mrng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* a matrix [N][K] of random values of size `amp` in format dt (MLX: 4 bits,
   groups of 64, f32 scales), and the values the CPU reads from it */
typedef struct {
    tensor t;
    void *data;
    float *sc, *bi, *ref; /* ref [N][K]: the dequantized values */
} mmat;

static void mmat_make(mmat *m, const char *name, ds_dtype dt, int N, int K, float amp) {
    memset(m, 0, sizeof *m);
    m->t.name = name;
    m->t.dtype = dt;
    m->t.ndim = 2;
    m->t.shape[0] = N;
    m->t.shape[1] = K;
    m->ref = xmalloc(sizeof(float) * (size_t)N * K);
    float *row = xmalloc(sizeof(float) * (size_t)K);
    if (dt == DT_MLX) {
        const int bits = 4, group = 64, words = K * bits / 32;
        uint32_t *q = xmalloc(sizeof(uint32_t) * (size_t)N * words);
        m->sc = xmalloc(sizeof(float) * (size_t)N * (K / group));
        m->bi = xmalloc(sizeof(float) * (size_t)N * (K / group));
        for (int n = 0; n < N; n++) {
            for (int k = 0; k < K; k++) row[k] = amp * mrand();
            qenc_mlx_row(row, K, bits, group, q + (size_t)n * words, m->sc + (size_t)n * (K / group),
                         m->bi + (size_t)n * (K / group));
        }
        m->data = q;
        m->t.nbytes = sizeof(uint32_t) * (size_t)N * words;
        m->t.q.bits = bits, m->t.q.group = group, m->t.q.sdtype = DT_F32;
        m->t.q.scales = m->sc, m->t.q.biases = m->bi;
    } else if (dtype_is_quant(dt)) {
        const size_t rb = qenc_row_bytes(dt, K);
        uint8_t *d = xmalloc(rb * (size_t)N);
        for (int n = 0; n < N; n++) {
            for (int k = 0; k < K; k++) row[k] = amp * mrand();
            qenc_row(dt, row, K, d + rb * (size_t)n);
        }
        m->data = d;
        m->t.nbytes = rb * (size_t)N;
    } else {
        const size_t es = dtype_size(dt), n_all = (size_t)N * K;
        uint8_t *d = xmalloc(es * n_all);
        for (size_t i = 0; i < n_all; i++) {
            const float v = amp * mrand();
            if (dt == DT_BF16) ((uint16_t *)d)[i] = ds_f32_to_bf16(v);
            else if (dt == DT_F16) ((uint16_t *)d)[i] = ds_f32_to_f16(v);
            else ((float *)d)[i] = v;
        }
        m->data = d;
        m->t.nbytes = es * n_all;
    }
    m->t.data = m->data;
    for (int n = 0; n < N; n++) {
        if (dtype_is_quant(dt)) {
            quant_row_f32(&m->t, n, m->ref + (size_t)n * K);
            continue;
        }
        for (int k = 0; k < K; k++) {
            const size_t i = (size_t)n * K + k;
            m->ref[i] = dt == DT_BF16 ? ds_bf16_to_f32(((const uint16_t *)m->data)[i])
                        : dt == DT_F16 ? ds_f16_to_f32(((const uint16_t *)m->data)[i])
                                       : ((const float *)m->data)[i];
        }
    }
    free(row);
}

static void mmat_free(mmat *m) {
    free(m->data), free(m->sc), free(m->bi), free(m->ref);
}

/* a layer's experts: the router and E experts' gate, up, down */
typedef struct {
    wmoe w;
    mmat router, *g, *u, *d;
    const tensor **tg, **tu, **td;
} moe_set;

static void moe_make(moe_set *s, int E, int K, int norm, ds_dtype rdt, ds_dtype gdt, ds_dtype udt, ds_dtype ddt) {
    memset(s, 0, sizeof *s);
    mmat_make(&s->router, "router", rdt, E, MH, 0.2f);
    s->g = xcalloc((size_t)E, sizeof(mmat)), s->u = xcalloc((size_t)E, sizeof(mmat)), s->d = xcalloc((size_t)E, sizeof(mmat));
    s->tg = xcalloc((size_t)E, sizeof(tensor *)), s->tu = xcalloc((size_t)E, sizeof(tensor *));
    s->td = xcalloc((size_t)E, sizeof(tensor *));
    for (int e = 0; e < E; e++) {
        mmat_make(&s->g[e], "gate", gdt, MI, MH, 0.12f);
        mmat_make(&s->u[e], "up", udt, MI, MH, 0.12f);
        mmat_make(&s->d[e], "down", ddt, MH, MI, 0.12f);
        s->tg[e] = &s->g[e].t, s->tu[e] = &s->u[e].t, s->td[e] = &s->d[e].t;
    }
    s->w = (wmoe){.n_experts = E, .top_k = K, .norm_topk = norm, .inter = MI, .router = &s->router.t,
                  .gate = s->tg, .up = s->tu, .down = s->td};
}

static void moe_free(moe_set *s) {
    mmat_free(&s->router);
    for (int e = 0; e < s->w.n_experts; e++) mmat_free(&s->g[e]), mmat_free(&s->u[e]), mmat_free(&s->d[e]);
    free(s->g), free(s->u), free(s->d), free(s->tg), free(s->tu), free(s->td);
}

/* the reference for row x[H]: out[H] = x + the experts' sum, sel[K] its
   experts ascending, *gap the distance between its k-th and k+1-th
   largest router logits */
static void moe_ref(const moe_set *s, const float *x, const float *gn, float eps, double *out, int *sel, double *gap) {
    const int E = s->w.n_experts, K = s->w.top_k;
    double xn[MH], lg[64] = {0}, p[64], ss = 0, h[MI], acc[MH] = {0};
    for (int k = 0; k < MH; k++) ss += (double)x[k] * x[k];
    const double r = 1.0 / sqrt(ss / MH + eps);
    for (int k = 0; k < MH; k++) xn[k] = x[k] * r * gn[k];
    double mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++) {
        double a = 0;
        for (int k = 0; k < MH; k++) a += s->router.ref[(size_t)e * MH + k] * xn[k];
        lg[e] = a;
        mx = a > mx ? a : mx;
    }
    for (int e = 0; e < E; e++) sum += p[e] = exp(lg[e] - mx);
    int taken[64] = {0}, pick[32] = {0};
    double w[32], tot = 0;
    for (int k = 0; k < K; k++) {
        int b = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (b < 0 || p[e] > p[b])) b = e;
        taken[b] = 1, pick[k] = b, w[k] = p[b] / sum, tot += w[k];
    }
    double next = -INFINITY;
    for (int e = 0; e < E; e++)
        if (!taken[e] && lg[e] > next) next = lg[e];
    *gap = lg[pick[K - 1]] - next;
    for (int k = 0; k < K; k++) {
        const int e = pick[k];
        const double wk = s->w.norm_topk ? w[k] / tot : w[k];
        for (int i = 0; i < MI; i++) {
            double a = 0, b = 0;
            for (int k2 = 0; k2 < MH; k2++) {
                a += s->g[e].ref[(size_t)i * MH + k2] * xn[k2];
                b += s->u[e].ref[(size_t)i * MH + k2] * xn[k2];
            }
            h[i] = a / (1 + exp(-a)) * b;
        }
        for (int o = 0; o < MH; o++) {
            double a = 0;
            for (int i = 0; i < MI; i++) a += s->d[e].ref[(size_t)o * MI + i] * h[i];
            acc[o] += wk * a;
        }
    }
    for (int o = 0; o < MH; o++) out[o] = x[o] + acc[o];
    for (int k = 0; k < K; k++) sel[k] = pick[k];
    for (int k = 1; k < K; k++) /* ascending */
        for (int u = k; u > 0 && sel[u - 1] > sel[u]; u--) {
            const int t = sel[u];
            sel[u] = sel[u - 1], sel[u - 1] = t;
        }
}

typedef struct {
    const char *name;
    int E, K, norm;
    ds_dtype router, gate, up, down;
} moe_case;

static const moe_case cases[] = {
    {"bf16", 32, 8, 1, DT_BF16, DT_BF16, DT_BF16, DT_BF16},
    {"f16, router f32", 32, 8, 1, DT_F32, DT_F16, DT_F16, DT_F16},
    {"f32", 32, 8, 1, DT_F32, DT_F32, DT_F32, DT_F32},
    {"Q8_0, top 2 not renormalized", 32, 2, 0, DT_F32, DT_Q8_0, DT_Q8_0, DT_Q8_0},
    {"Q4_K, Q6_K down", 32, 8, 1, DT_BF16, DT_Q4_K, DT_Q4_K, DT_Q6_K},
    {"MLX 4-bit", 32, 8, 1, DT_BF16, DT_MLX, DT_MLX, DT_MLX},
    {"gate Q8_0, up Q4_K (apart)", 32, 8, 1, DT_F32, DT_Q8_0, DT_Q4_K, DT_Q8_0},
};

TEST(cuda_moe_vs_cpu) {
    if (!have_gpu()) return;
    const float eps = 1e-6f;
    char err[512];
    float *x = xmalloc(sizeof(float) * MROWS * MH), *gn = xmalloc(sizeof(float) * MH);
    float *all = xmalloc(sizeof(float) * MROWS * MH), *part = xmalloc(sizeof(float) * 16 * MH);
    int *sel = xmalloc(sizeof(int) * MROWS * 32);
    double out[MH];
    for (int i = 0; i < MROWS * MH; i++) x[i] = mrand();
    for (int k = 0; k < MH; k++) gn[k] = 1.0f + 0.2f * mrand();
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const moe_case *mc = &cases[c];
        moe_set s;
        moe_make(&s, mc->E, mc->K, mc->norm, mc->router, mc->gate, mc->up, mc->down);
        memcpy(all, x, sizeof(float) * MROWS * MH);
        if (cuda_test_moe(all, MROWS, &s.w, MH, gn, eps, 0, sel, err, sizeof err)) {
            test_fail(__FILE__, __LINE__, "%s: %s", mc->name, err);
            moe_free(&s);
            continue;
        }
        /* against the reference */
        double worst = 0;
        int skipped = 0, wrong_sel = 0;
        for (int m = 0; m < MROWS; m++) {
            int rsel[32];
            double gap, big = 0, off = 0;
            moe_ref(&s, x + (size_t)m * MH, gn, eps, out, rsel, &gap);
            if (gap < 1e-4) {
                skipped++;
                continue;
            }
            wrong_sel += memcmp(rsel, sel + (size_t)m * mc->K, sizeof(int) * (size_t)mc->K) != 0;
            for (int o = 0; o < MH; o++) {
                big = fmax(big, fabs(out[o] - x[(size_t)m * MH + o]));
                off = fmax(off, fabs(all[(size_t)m * MH + o] - out[o]));
            }
            worst = fmax(worst, off / (big > 0 ? big : 1));
        }
        CHECK_MSG(wrong_sel == 0, "%s: %d rows routed to other experts than the reference's", mc->name, wrong_sel);
        CHECK_MSG(worst <= 2e-4, "%s: max |out - reference| %.3g of the row's largest MLP output", mc->name, worst);
        CHECK_MSG(skipped <= MROWS / 10, "%s: %d of %d rows near a routing tie", mc->name, skipped, MROWS);
        fprintf(stderr, "  %s: %.2g of the largest output (%d rows near a tie left out)\n", mc->name, worst, skipped);
        /* every width 1..16 and rows alone: the 160-row launch's bits */
        int same = 1;
        for (int M = 1; M <= 16 && same; M++) {
            memcpy(part, x, sizeof(float) * (size_t)M * MH);
            if (cuda_test_moe(part, M, &s.w, MH, gn, eps, 0, NULL, err, sizeof err)) {
                test_fail(__FILE__, __LINE__, "%s: %s", mc->name, err);
                same = 0;
                break;
            }
            same = !memcmp(part, all, sizeof(float) * (size_t)M * MH);
            CHECK_MSG(same, "%s: a %d-row launch differs from those rows of the 160-row launch", mc->name, M);
        }
        const int alone[] = {0, 1, 2, 3, 5, 7, 8, 9, 11, 13, 15, 16, 63, 64, 100, 127, 128, 159};
        for (size_t i = 0; i < sizeof alone / sizeof alone[0] && same; i++) {
            const int m = alone[i];
            memcpy(part, x + (size_t)m * MH, sizeof(float) * MH);
            if (cuda_test_moe(part, 1, &s.w, MH, gn, eps, 0, NULL, err, sizeof err)) {
                test_fail(__FILE__, __LINE__, "%s: %s", mc->name, err);
                break;
            }
            same = !memcmp(part, all + (size_t)m * MH, sizeof(float) * MH);
            CHECK_MSG(same, "%s: row %d alone differs from the row in the 160-row launch", mc->name, m);
        }
        /* the tile-major copies (bf16 and f16 take them): the same bits */
        float *tiled = xmalloc(sizeof(float) * MROWS * MH);
        memcpy(tiled, x, sizeof(float) * MROWS * MH);
        if (cuda_test_moe(tiled, MROWS, &s.w, MH, gn, eps, 1, NULL, err, sizeof err))
            test_fail(__FILE__, __LINE__, "%s (tiled): %s", mc->name, err);
        else
            CHECK_MSG(!memcmp(tiled, all, sizeof(float) * MROWS * MH), "%s: the tile-major experts differ", mc->name);
        free(tiled);
        moe_free(&s);
    }
    /* an expert in another format than the others: refused by name */
    moe_set s;
    moe_make(&s, 8, 2, 1, DT_BF16, DT_BF16, DT_BF16, DT_BF16);
    mmat odd;
    mmat_make(&odd, "odd_expert", DT_F16, MI, MH, 0.12f);
    s.tu[5] = &odd.t;
    memcpy(part, x, sizeof(float) * MH);
    CHECK(cuda_test_moe(part, 1, &s.w, MH, gn, eps, 0, NULL, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "odd_expert") && strstr(err, "one format"), "the error: %s", err);
    mmat_free(&odd);
    moe_free(&s);
    free(x), free(gn), free(all), free(part), free(sel);
}
