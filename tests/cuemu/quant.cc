// The quantized matmul and embedding (src/engine/cuda/cuda_quant.cu) run on
// the CPU by emu.h, against the CPU's exact dequantization (quant.c's
// quant_row_f32): every GGUF block type and MLX affine at every bit width
// (scales in f32, f16 and bf16); the gathered embedding rows bit-equal to
// quant_row_f32's (the kernels' dequantization is exact, in the format's
// order); the tensor-core matmul within a sum-scaled tolerance of a double
// reference at 1, 2, 3, 7, 9, 16 and 17 rows, with a bias, the residual
// add and the SwiGLU, and a stack of parts in different formats (a GGUF
// q/k/v), on K of several units a warp (the loads ahead, twice over); each
// row of every launch wider than one bit-equal to that row alone, so a row
// has the same bits at every width (batch invariance; the blocks run in a
// random order, so the grid does not enter either); and the prefill
// groups' bf16 copy of a matrix (cu_qdequant_bf16) bit-equal to
// quant_row_f32's rows rounded to nearest bf16. (emu.h's mma is exact
// products summed in double, not the tensor core's accumulation, so the
// GPU's own bits are checked by tests/cuda; what is checked here is which
// operands meet in which order.)
#include "../../src/engine/cuda/cuda_ops.cu"
#include "../../src/engine/cuda/cuda_quant.cu"

extern "C" {
#include "engine/quant.h"
/* what quant.c reaches in the rest of the CPU engine, which this test does
   not link: quant_row_f32 needs none of it */
int ops_level(void) { return 0; }
void *ops_scratch(size_t) { emu::fail("ops_scratch called"); }
void avx2_quant_matmul(float *, int, const void *, int, int, const tensor *, const float *, int64_t, int64_t) {
    emu::fail("avx2_quant_matmul called");
}
int avx512_quant_ok(void) { return 0; }
void avx512_quant_matmul(float *, int, const void *, int, int, const tensor *, const float *, int64_t, int64_t, int) {
    emu::fail("avx512_quant_matmul called");
}
void avx2_quant_x(const float *, int, int16_t *, float *) { emu::fail("avx2_quant_x called"); }
void avx512_quant_x(const float *, int, int16_t *, float *) { emu::fail("avx512_quant_x called"); }
/* the prefill family's level-2 entry points (quant_internal.h; the row
   view passed by value is four pointers) */
struct pre_row_view { void *q, *cor, *dx, *dsx; };
void avx512_pre_row(pre_row_view, const float *, int, int) { emu::fail("avx512_pre_row called"); }
void avx512_pre_matmul(float *, int, const void *, int, int, const tensor *, const float *, int64_t, int64_t, void *) {
    emu::fail("avx512_pre_matmul called");
}
}

#include "check.h"

static const cu_tuning tn = cu_tuning_defaults();
static const cu_go G = cu_go_on(nullptr, &tn);

/* a random quantized [N][K] matrix of format dt (bits, group, sdt: MLX's):
   random bytes, its f16 scales set to small finite values */
struct qmat {
    std::vector<uint8_t> data, sc, bi;
    tensor t;
    qmat(ds_dtype dt, int N, int K, int bits = 0, int group = 0, ds_dtype sdt = DT_F16) {
        memset(&t, 0, sizeof t);
        t.name = "w";
        t.dtype = dt;
        t.ndim = 2;
        t.shape[0] = N;
        t.shape[1] = K;
        const size_t rb = cu_q_row_bytes(dt, bits, K);
        data.resize(rb * N);
        for (auto &b : data) b = (uint8_t)(frand() * 128 + 128);
        if (dt == DT_MLX) {
            const size_t n = (size_t)N * (K / group), es = sdt == DT_F32 ? 4 : 2;
            sc.resize(n * es);
            bi.resize(n * es);
            for (size_t i = 0; i < n; i++) {
                const float s = 0.02f * frand(), b = 0.1f * frand();
                if (sdt == DT_F32) {
                    memcpy(&sc[4 * i], &s, 4);
                    memcpy(&bi[4 * i], &b, 4);
                } else {
                    const uint16_t hs = sdt == DT_BF16 ? ds_f32_to_bf16(s) : ds_f32_to_f16(s);
                    const uint16_t hb = sdt == DT_BF16 ? ds_f32_to_bf16(b) : ds_f32_to_f16(b);
                    memcpy(&sc[2 * i], &hs, 2);
                    memcpy(&bi[2 * i], &hb, 2);
                }
            }
            t.q.bits = bits;
            t.q.group = group;
            t.q.sdtype = sdt;
            t.q.scales = sc.data();
            t.q.biases = bi.data();
        } else {
            /* the f16 fields of each block: d (and m / dmin) */
            static const struct {
                ds_dtype t;
                int bytes, off[2];
            } f16s[] = {{DT_Q8_0, 34, {0, -1}}, {DT_Q4_0, 18, {0, -1}}, {DT_Q4_1, 20, {0, 2}},
                        {DT_Q5_0, 22, {0, -1}}, {DT_Q5_1, 24, {0, 2}},  {DT_Q2_K, 84, {80, 82}},
                        {DT_Q3_K, 110, {108, -1}}, {DT_Q4_K, 144, {0, 2}}, {DT_Q5_K, 176, {0, 2}},
                        {DT_Q6_K, 210, {208, -1}}};
            for (const auto &f : f16s)
                if (f.t == dt)
                    for (size_t b = 0; b < data.size(); b += f.bytes)
                        for (int o : f.off)
                            if (o >= 0) {
                                const uint16_t h = ds_f32_to_f16(0.01f * frand());
                                memcpy(&data[b + o], &h, 2);
                            }
        }
        t.data = data.data();
        t.nbytes = data.size();
    }
    std::vector<float> row(int n) const {
        std::vector<float> r(t.shape[1]);
        quant_row_f32(&t, n, r.data());
        return r;
    }
};

static dev_pool pool;

static dmat up(const qmat &q) {
    dmat d;
    char err[256];
    if (cu_up_mat(&pool, &d, &q.t, err, sizeof err)) {
        fprintf(stderr, "upload: %s\n", err);
        exit(1);
    }
    return d;
}

static const char *fmt_name(const qmat &q, char *buf, size_t n) {
    if (q.t.dtype == DT_MLX)
        snprintf(buf, n, "MLX %d-bit g%d %s", q.t.q.bits, q.t.q.group, dtype_name(q.t.q.sdtype));
    else snprintf(buf, n, "%s", dtype_name(q.t.dtype));
    return buf;
}

/* the embedding gather: bit-equal to quant_row_f32's rows */
static void run_embed(const qmat &E, const char *what) {
    const dmat d = up(E);
    const int V = (int)E.t.shape[0], H = (int)E.t.shape[1], tok[4] = {0, V - 1, V / 2, 1 % V};
    std::vector<float> o((size_t)4 * H, NAN);
    cu_embed(G, o.data(), &d, tok, 4);
    int bad = 0;
    for (int m = 0; m < 4; m++) {
        const std::vector<float> r = E.row(tok[m]);
        for (int i = 0; i < H; i++) bad += memcmp(&o[(size_t)m * H + i], &r[i], 4) != 0;
    }
    EXPECT(!bad, "%s embed: %d values differ from quant_row_f32", what, bad);
}

enum { ST, ADD, GLU };

static double g_worst; /* the largest fraction of the tolerance a format's matmuls took */

/* y for M rows against the double reference of the dequantized rows:
   |y - ref| within 1e-5 of sum |x w| (f32 sums of up to K terms) */
static void run_mm(const qmat &W, const qmat *W2, int M, int epi, bool use_bias, const char *what) {
    const int N = (int)W.t.shape[0], K = (int)W.t.shape[1];
    const dmat d = up(W), d2 = W2 ? up(*W2) : dmat{};
    std::vector<float> x((size_t)M * K), bias(N), y0((size_t)M * N), y;
    for (float &v : x) v = frand();
    for (float &v : bias) v = frand();
    for (float &v : y0) v = frand();
    y = epi == ADD ? y0 : std::vector<float>((size_t)M * N, NAN);
    const float *b = use_bias ? bias.data() : NULL;
    cu_qmatmul(G, epi == GLU ? MM_SWIGLU : epi == ADD ? MM_ADD : MM_STORE, y.data(), x.data(), M, &d,
               W2 ? &d2 : NULL, b);
    double worst = 0;
    for (int n = 0; n < N; n++) {
        const std::vector<float> w = W.row(n), u = W2 ? W2->row(n) : std::vector<float>();
        for (int m = 0; m < M; m++) {
            double s = 0, a = 0, su = 0, au = 0;
            for (int k = 0; k < K; k++) {
                const double xv = x[(size_t)m * K + k];
                s += xv * w[k];
                a += fabs(xv * w[k]);
                if (W2) {
                    su += xv * u[k];
                    au += fabs(xv * u[k]);
                }
            }
            double want, tol;
            if (epi == GLU) {
                want = s / (1 + exp(-s)) * su;
                tol = 1e-5 * (a * fabs(su) + au * fabs(s)) + 1e-6;
            } else {
                want = s + (b ? b[n] : 0.0) + (epi == ADD ? y0[(size_t)m * N + n] : 0.0);
                tol = 1e-5 * (a + fabs(want)) + 1e-6;
            }
            const double got = y[(size_t)m * N + n], off = fabs(got - want) / tol;
            worst = got != got ? INFINITY : fmax(worst, off);
        }
    }
    g_worst = fmax(g_worst, worst);
    EXPECT(worst <= 1.0, "%s M=%d N=%d K=%d epi=%d: %.3g of the tolerance from the reference", what, M, N, K, epi, worst);
    /* batch invariance: each row of the launch alone */
    if (M > 1) {
        int bad = 0;
        for (int m = 0; m < M; m++) {
            std::vector<float> y1 = epi == ADD ? std::vector<float>(y0.begin() + (size_t)m * N, y0.begin() + (size_t)(m + 1) * N)
                                               : std::vector<float>(N, NAN);
            cu_qmatmul(G, epi == GLU ? MM_SWIGLU : epi == ADD ? MM_ADD : MM_STORE, y1.data(), x.data() + (size_t)m * K, 1,
                       &d, W2 ? &d2 : NULL, b);
            bad += memcmp(y1.data(), y.data() + (size_t)m * N, sizeof(float) * N) != 0;
        }
        EXPECT(!bad, "%s M=%d epi=%d: %d rows differ from the row alone", what, M, epi, bad);
    }
}

/* the bf16 copy of the prefill groups: bf16(quant_row_f32) bit for bit */
static void run_deq(const dmat &d, const std::vector<const qmat *> &parts, const char *what) {
    size_t all = 0;
    for (const qmat *q : parts) all += (size_t)q->t.shape[0] * q->t.shape[1];
    std::vector<__nv_bfloat16> o(all);
    memset(o.data(), 0xff, sizeof(o[0]) * all);
    cu_qdequant_bf16(G, o.data(), &d);
    int bad = 0;
    size_t at = 0;
    for (const qmat *q : parts)
        for (int n = 0; n < (int)q->t.shape[0]; n++) {
            const std::vector<float> r = q->row(n);
            for (float v : r) bad += o[at++].x != ds_f32_to_bf16(v);
        }
    EXPECT(!bad, "%s bf16 copy: %d values differ from quant_row_f32's rounded", what, bad);
}

/* q, k and v in different formats as one stacked matrix (dmat's parts) */
static void run_parts(int M) {
    const int K = 256;
    qmat q(DT_Q4_K, 24, K), k(DT_Q4_K, 8, K), v(DT_Q6_K, 8, K);
    dmat parts[3] = {up(q), up(k), up(v)};
    dmat W = {};
    W.dt = DT_Q4_K;
    W.N = 40;
    W.K = K;
    W.nsub = 3;
    W.sub = parts;
    std::vector<float> x((size_t)M * K), bias(40), y((size_t)M * 40, NAN);
    for (float &e : x) e = frand();
    for (float &e : bias) e = frand();
    cu_qmatmul(G, MM_STORE, y.data(), x.data(), M, &W, NULL, bias.data());
    double worst = 0;
    const qmat *mats[3] = {&q, &k, &v};
    for (int n = 0, p = 0, r = 0; n < 40; n++, r++) {
        if (r == (int)mats[p]->t.shape[0]) p++, r = 0;
        const std::vector<float> w = mats[p]->row(r);
        for (int m = 0; m < M; m++) {
            double s = bias[n], a = 0;
            for (int kk = 0; kk < K; kk++) s += (double)x[(size_t)m * K + kk] * w[kk], a += fabs(x[(size_t)m * K + kk] * w[kk]);
            worst = fmax(worst, fabs(y[(size_t)m * 40 + n] - s) / (1e-5 * (a + fabs(s)) + 1e-6));
        }
    }
    EXPECT(worst <= 1.0, "q/k/v parts M=%d: %.3g of the tolerance", M, worst);
    run_deq(W, {&q, &k, &v}, "q/k/v parts");
}

int main(void) {
    emu::sms = 3;
    const ds_dtype gg[] = {DT_Q8_0, DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q2_K, DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K};
    char name[64];
    for (ds_dtype t : gg) {
        /* 11 rows (a tile's rows past N); 22 units of 32 (32-element
           blocks) or 3 super-blocks (24 units): 2 or 3 units a warp */
        const int K = quant_block_elems(t) == 32 ? 704 : 768;
        qmat W(t, 11, K), U(t, 11, K), B(t, 21, K);
        fmt_name(W, name, sizeof name);
        run_embed(W, name);
        run_deq(up(W), {&W}, name);
        run_mm(W, NULL, 1, ST, true, name);
        run_mm(W, NULL, 2, ST, false, name);
        run_mm(W, NULL, 3, ADD, true, name);
        run_mm(B, NULL, 7, ST, true, name);
        run_mm(W, NULL, 9, ST, false, name);
        run_mm(W, &U, 16, GLU, false, name);
        run_mm(B, NULL, 17, ADD, false, name);
        printf("  %-24s embed and bf16 copy exact, matmul 1/2/3/7/9/16/17 rows within tolerance, rows batch-invariant (worst %.2f of the tolerance)\n",
               name, g_worst);
        g_worst = 0;
    }
    /* every GGUF type again over 17 steps of 256 elements: warps that take
       several (the step kernels' loads ahead, and a SwiGLU's reloads) */
    for (ds_dtype t : gg) {
        qmat W(t, 5, 17 * 256), U(t, 5, 17 * 256);
        fmt_name(W, name, sizeof name);
        run_mm(W, NULL, 1, ST, true, name);
        run_mm(W, &U, 9, GLU, false, name);
        run_mm(W, NULL, 16, ADD, false, name);
        printf("  %-24s K %d: matmul 1/9/16 rows within tolerance, rows batch-invariant (worst %.2f of the tolerance)\n",
               name, 17 * 256, g_worst);
        g_worst = 0;
    }
    /* MLX 4- and 8-bit over 17 steps of 128 elements and a half one (a
       warp taking several; a last step of fewer units) */
    const struct {
        int bits, group, K;
    } mlxk[] = {{4, 64, 2240}, {8, 32, 2240}, {4, 128, 2176}, {8, 128, 2176}, {4, 32, 2208}};
    for (const auto &f : mlxk) {
        qmat W(DT_MLX, 5, f.K, f.bits, f.group, DT_BF16), U(DT_MLX, 5, f.K, f.bits, f.group, DT_BF16);
        fmt_name(W, name, sizeof name);
        run_mm(W, NULL, 1, ST, true, name);
        run_mm(W, &U, 9, GLU, false, name);
        run_mm(W, NULL, 16, ADD, false, name);
        printf("  %-24s K %d: matmul 1/9/16 rows within tolerance, rows batch-invariant (worst %.2f of the tolerance)\n",
               name, f.K, g_worst);
        g_worst = 0;
    }
    const struct {
        int bits, group;
        ds_dtype sdt;
    } mlx[] = {{2, 32, DT_F16}, {3, 64, DT_BF16}, {4, 64, DT_BF16}, {5, 32, DT_F32},
               {6, 128, DT_F16}, {8, 64, DT_F16}, {4, 128, DT_F32}, {8, 32, DT_BF16}};
    for (const auto &f : mlx) {
        qmat W(DT_MLX, 9, 768, f.bits, f.group, f.sdt), U(DT_MLX, 9, 768, f.bits, f.group, f.sdt);
        fmt_name(W, name, sizeof name);
        run_embed(W, name);
        run_deq(up(W), {&W}, name);
        run_mm(W, NULL, 1, ST, true, name);
        run_mm(W, NULL, 2, ST, true, name);
        run_mm(W, NULL, 9, ADD, false, name);
        run_mm(W, &U, 3, GLU, false, name);
        run_mm(W, &U, 7, GLU, false, name);
        run_mm(W, NULL, 16, ST, true, name);
        run_mm(W, NULL, 17, ST, true, name);
        printf("  %-24s embed and bf16 copy exact, matmul 1/2/3/7/9/16/17 rows within tolerance, rows batch-invariant (worst %.2f of the tolerance)\n",
               name, g_worst);
        g_worst = 0;
    }
    run_parts(1);
    run_parts(5);
    cu_pool_free(&pool);
    if (failures) {
        fprintf(stderr, "cuemu quant: %d checks failed\n", failures);
        return 1;
    }
    printf("cuemu quant: every format exact in the gather and the bf16 copy, within 1e-5 of sum |x w| in the "
           "matmul, batch-invariant\n");
    return 0;
}
