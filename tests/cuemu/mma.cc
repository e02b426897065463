// The tensor-core matmul (src/engine/cuda/cuda_mma.cu, k_mma) run on the CPU by emu.h
// must agree with a double reference, and the tiles a block takes must
// leave a row's bits alone. Shapes: 1-16 rows (one and two row groups),
// widths off the 16-row tiles, K from one chunk a warp to several, one,
// two and four tiles a block; the plain store with a bias, the residual
// add, the SwiGLU and GELU gating, a folded RMSNorm; row-major and
// tile-major weights. And the q/k/v projection's fused tail (run_qkv), the
// pre-cut add and store (run_cut), the folded norm run apart
// (run_norm_split), the embedding (run_embed), RMSNorm, and the steps of
// cuda_elem.cu against the CPU ops' f32 formulas (run_elem).
#include "../../src/engine/cuda/cuda_mma.cu"
#include "../../src/engine/cuda/cuda_ops.cu"
#include "../../src/engine/cuda/cuda_quant.cu" /* (what cuda_ops.cu reaches for quantized matrices) */
#include "../../src/engine/cuda/cuda_elem.cu"

/* what the launchers reach in cuda_gemm.cu: no cuBLAS here, the matmuls all take k_mma */
int cu_gemm_takes(const cu_gemm *, const dmat *, int) { return 0; }
void cu_gemm_matmul(cu_gemm *, cu_go, int, float *, const float *, int, const dmat *, const dmat *,
                    const float *, const float *, float) {
    emu::fail("cuBLAS called with no groups taken");
}

#include "check.h"

extern "C" {
#include "engine/kv.h" /* the CPU's row rules, for the KV store at 16 and 8 bits */
}

/* the launches' tuning (the defaults) and stream */
static const cu_tuning tn = cu_tuning_defaults();
static const cu_go G = cu_go_on(nullptr, &tn);

/* a bf16 matrix [N][K] and its tile-major copy (16-row x 32-column tiles of
   1 KB, row r of a tile at r * 32, edges zero) */
struct mat {
    std::vector<__nv_bfloat16> w, t;
    dmat d;
    mat(int N, int K, bool tiled) {
        w.resize((size_t)N * K);
        for (auto &v : w) v = __float2bfloat16_rn(0.1f * frand());
        const int nc = (K + 31) / 32;
        if (tiled) {
            t.assign((size_t)((N + 15) / 16) * nc * 512, __nv_bfloat16{0});
            for (int n = 0; n < N; n++)
                for (int k = 0; k < K; k++) t[((size_t)(n / 16) * nc + k / 32) * 512 + (n % 16) * 32 + k % 32] = w[(size_t)n * K + k];
        }
        d = dmat{w.data(), DT_BF16, N, K, tiled ? (void *)t.data() : NULL};
    }
    double at(int n, int k) const { return __bfloat162float(w[(size_t)n * d.K + k]); }
};

enum { ST, ADD, GLU, GEG };
static bool gated(int epi) { return epi == GLU || epi == GEG; }
/* gelu_tanh(g) * u in double */
static double geglu_ref(double g, double u) {
    return 0.5 * g * (1 + tanh(sqrt(2 / M_PI) * (g + 0.044715 * g * g * g))) * u;
}
struct mcase {
    int M, N, K, epi, norm, tiled;
};

/* the double reference of y for case c (y0: the output before an add) */
static std::vector<double> reference(const mcase &c, const std::vector<float> &x, const mat &W, const mat &W2,
                                     const std::vector<float> &bias, const std::vector<float> &gn,
                                     const std::vector<float> &y0) {
    std::vector<double> y((size_t)c.M * c.N);
    for (int m = 0; m < c.M; m++) {
        std::vector<double> xr(c.K);
        double ss = 0;
        for (int k = 0; k < c.K; k++) ss += (double)x[(size_t)m * c.K + k] * x[(size_t)m * c.K + k];
        const double r = c.norm ? 1.0 / sqrt(ss / c.K + 1e-6) : 1.0;
        for (int k = 0; k < c.K; k++) xr[k] = x[(size_t)m * c.K + k] * r * (c.norm ? gn[k] : 1.0f);
        for (int n = 0; n < c.N; n++) {
            double s = 0, u = 0;
            for (int k = 0; k < c.K; k++) s += xr[k] * W.at(n, k);
            if (gated(c.epi)) {
                for (int k = 0; k < c.K; k++) u += xr[k] * W2.at(n, k);
                y[(size_t)m * c.N + n] = c.epi == GEG ? geglu_ref(s, u) : s / (1 + exp(-s)) * u;
            } else {
                s += bias.empty() ? 0.0 : bias[n];
                y[(size_t)m * c.N + n] = c.epi == ADD ? y0[(size_t)m * c.N + n] + s : s;
            }
        }
    }
    return y;
}

static std::vector<float> run(const mcase &c, const std::vector<float> &x, const mat &W, const mat &W2,
                              const std::vector<float> &bias, const std::vector<float> &gn, const std::vector<float> &y0) {
    std::vector<float> y = y0;
    const float *b = bias.empty() ? NULL : bias.data();
    if (c.epi == GEG) /* (the layer's entry point: the folded norm, or the plain kernel) */
        cu_layer_matmul(G, (cu_gemm *)NULL, MM_GEGLU, y.data(), x.data(), c.M, &W.d, &W2.d, NULL,
                        c.norm ? gn.data() : NULL, 1e-6f, NULL, cu_cut{});
    else if (c.epi == GLU && c.norm) cu_matmul_swiglu_norm(G, y.data(), x.data(), c.M, &W.d, &W2.d, gn.data(), 1e-6f, NULL);
    else if (c.epi == GLU) cu_matmul_swiglu(G, y.data(), x.data(), c.M, &W.d, &W2.d);
    else if (c.epi == ADD) cu_matmul_add(G, y.data(), x.data(), c.M, &W.d, b);
    else if (c.norm) cu_matmul_norm(G, y.data(), x.data(), c.M, &W.d, b, gn.data(), 1e-6f);
    else cu_matmul(G, y.data(), x.data(), c.M, &W.d, b);
    return y;
}

static void run_case(const mcase &c) {
    mat W(c.N, c.K, c.tiled), W2(gated(c.epi) ? c.N : 1, gated(c.epi) ? c.K : 32, c.tiled);
    std::vector<float> x((size_t)c.M * c.K), gn(c.K), y0((size_t)c.M * c.N), bias;
    for (float &v : x) v = frand();
    for (float &v : gn) v = 1.0f + 0.5f * frand();
    for (float &v : y0) v = c.epi == ADD ? frand() : 0.0f;
    if (c.epi == ST) {
        bias.resize(c.N);
        for (float &v : bias) v = frand();
    }
    const std::vector<double> ref = reference(c, x, W, W2, bias, gn, y0);
    char what[160];
    snprintf(what, sizeof what, "M=%d N=%d K=%d %s%s %s", c.M, c.N, c.K,
             c.epi == ST ? "store" : c.epi == ADD ? "add" : c.epi == GLU ? "swiglu" : "geglu",
             c.norm ? " +norm" : "", c.tiled ? "tile-major" : "row-major");
    /* one, two and four tiles a block (the SwiGLU: two and four, gate and
       up tiles in pairs; counts the launcher does not take itself are
       cu_mma_tiles_force's, the op benchmark's) */
    double worst = 0;
    std::vector<float> first;
    for (int tiles : {1, 2, 4}) {
        if (gated(c.epi) && tiles == 1) continue;
        cu_mma_tiles_force(tiles);
        const std::vector<float> yr = run(c, x, W, W2, bias, gn, y0);
        /* the tiles a block take do not enter a row's operations */
        if (first.empty()) first = yr;
        else
            EXPECT(!memcmp(first.data(), yr.data(), sizeof(float) * yr.size()),
                   "%s: %d tiles a block differ from the first count's bits", what, tiles);
        const double rel = rel_off(yr, ref);
        EXPECT(rel < 2e-5, "%s, %d tiles: off the reference by %.3g", what, tiles, rel);
        worst = fmax(worst, rel);
    }
    cu_mma_tiles_force(0);
    printf("  %-44s within %.2g of the reference\n", what, worst);
}

/* The q/k/v projection with its tail (cu_matmul_norm_qkv: the matmul's
   blocks, the last of a head's to finish, apply the per-head q/k RMSNorm
   and RoPE and store k and v in the caches) against the same projection
   followed by the separate kernel (cu_matmul_norm, cu_qkv_post_run): the
   same bits in q, the caches and the projection; and the counts left at
   zero for the next call. */
static void run_qkv(int M, int nh, int nkv, int hd, int H) {
    const int N = (nh + 2 * nkv) * hd, cap = 40, n_past = 7;
    mat W(N, H, true);
    std::vector<float> x((size_t)M * H), gn(H), bias(N), qn(hd), kn(hd), inv(hd / 2);
    for (float &v : x) v = frand();
    for (float &v : gn) v = 1.0f + 0.5f * frand();
    for (float &v : bias) v = 0.1f * frand();
    for (float &v : qn) v = 1.0f + 0.5f * frand();
    for (float &v : kn) v = 1.0f + 0.5f * frand();
    for (int i = 0; i < hd / 2; i++) inv[i] = powf(10000.0f, -2.0f * i / hd);
    std::vector<int> pos(M), cnt(nh + 2 * nkv, 0);
    for (int m = 0; m < M; m++) pos[m] = n_past + m;
    char what[96];
    snprintf(what, sizeof what, "q/k/v tail M=%d nh=%d nkv=%d hd=%d", M, nh, nkv, hd);
    struct out {
        std::vector<float> y, q, kc, vc;
    };
    auto go = [&](int how) { /* 0 separate, 1 fused */
        out o{std::vector<float>((size_t)M * N, NAN), std::vector<float>((size_t)M * nh * hd, NAN),
              std::vector<float>((size_t)nkv * cap * hd, 0.0f), std::vector<float>((size_t)nkv * cap * hd, 0.0f)};
        cu_qkv_tail t = {cu_qkv_fused_args(o.q.data(), o.y.data(), cu_kv_f32(o.kc.data(), o.vc.data()), qn.data(), kn.data(),
                                           pos.data(), inv.data(), nh, nkv, hd, cap, &n_past, 1e-6f),
                         cnt.data()};
        if (how == 1) {
            EXPECT(cu_matmul_norm_qkv(G, o.y.data(), x.data(), M, &W.d, bias.data(), gn.data(), 1e-6f, &t),
                   "%s: the fused kernel did not take it", what);
        } else {
            cu_matmul_norm(G, o.y.data(), x.data(), M, &W.d, bias.data(), gn.data(), 1e-6f);
            cu_qkv_post_run(G, &t.a, M);
        }
        return o;
    };
    const out sep = go(0);
    {
        const out f = go(1);
        EXPECT(!memcmp(f.y.data(), sep.y.data(), sizeof(float) * f.y.size()) &&
                   !memcmp(f.q.data(), sep.q.data(), sizeof(float) * f.q.size()) &&
                   !memcmp(f.kc.data(), sep.kc.data(), sizeof(float) * f.kc.size()) &&
                   !memcmp(f.vc.data(), sep.vc.data(), sizeof(float) * f.vc.size()),
               "%s: the fused tail differs from the separate kernel", what);
        for (int c : cnt) EXPECT(c == 0, "%s: a head's count left at %d", what, c);
    }
    /* a 16- and an 8-bit cache (--kv-bits), by the fused tail and the
       separate kernel: each stored row is the CPU's rule (kv_quant_f16,
       kv_quant_i8) applied to the f32 store's row, bit for bit, with its
       scale; q and the projection as at 32 bits */
    for (int bits : {16, 8}) {
        const size_t rows = (size_t)nkv * cap, n = rows * hd;
        for (int how = 0; how < 2; how++) {
            std::vector<uint16_t> k16(n, 0), v16(n, 0);
            std::vector<int8_t> k8(n, 0), v8(n, 0);
            std::vector<float> ks(rows, 0.0f), vs(rows, 0.0f), y((size_t)M * N, NAN), q((size_t)M * nh * hd, NAN);
            const cu_kv kv = bits == 16 ? cu_kv{k16.data(), v16.data(), NULL, NULL, 16}
                                        : cu_kv{k8.data(), v8.data(), ks.data(), vs.data(), 8};
            cu_qkv_tail t = {cu_qkv_fused_args(q.data(), y.data(), kv, qn.data(), kn.data(), pos.data(), inv.data(), nh,
                                               nkv, hd, cap, &n_past, 1e-6f),
                             cnt.data()};
            if (how == 1) {
                EXPECT(cu_matmul_norm_qkv(G, y.data(), x.data(), M, &W.d, bias.data(), gn.data(), 1e-6f, &t),
                       "%s: the fused kernel did not take it", what);
            } else {
                cu_matmul_norm(G, y.data(), x.data(), M, &W.d, bias.data(), gn.data(), 1e-6f);
                cu_qkv_post_run(G, &t.a, M);
            }
            int bad = 0;
            for (int h = 0; h < nkv; h++)
                for (int m = 0; m < M; m++) {
                    const size_t r = (size_t)h * cap + n_past + m, o = r * hd;
                    if (bits == 16) {
                        uint16_t wk[256], wv[256];
                        kv_quant_f16(&sep.kc[o], hd, wk);
                        kv_quant_f16(&sep.vc[o], hd, wv);
                        bad += memcmp(wk, &k16[o], 2 * hd) != 0 || memcmp(wv, &v16[o], 2 * hd) != 0;
                    } else {
                        int8_t wk[256], wv[256];
                        float sk, sv;
                        kv_quant_i8(&sep.kc[o], hd, wk, &sk);
                        kv_quant_i8(&sep.vc[o], hd, wv, &sv);
                        bad += memcmp(wk, &k8[o], hd) != 0 || memcmp(wv, &v8[o], hd) != 0 ||
                               memcmp(&sk, &ks[r], 4) != 0 || memcmp(&sv, &vs[r], 4) != 0;
                    }
                }
            EXPECT(bad == 0, "%s, %d bits, %s: %d stored rows differ from the CPU's rule", what, bits,
                   how ? "fused" : "separate", bad);
            EXPECT(!memcmp(q.data(), sep.q.data(), sizeof(float) * q.size()) &&
                       !memcmp(y.data(), sep.y.data(), sizeof(float) * y.size()),
                   "%s, %d bits: q or the projection differ from the f32 cache's run", what, bits);
            for (int c : cnt) EXPECT(c == 0, "%s: a head's count left at %d", what, c);
        }
    }
    printf("  %-44s fused = separate; 16/8-bit stores = the CPU's rules\n", what);
}

/* The q/k/v matrix stacked (qd + 2 kd rows) as the GPU's layers hold it:
   the k and v rows read as views into it (cu_mat_rows: offsets into the
   row-major rows and, where qd and kd are multiples of 16, the tile-major
   tiles; the drafters' context ingest) give the bits of separate k and v
   matrices, and the stacked product's columns (the drafters' block, the
   norm folded in or not) the bits of the three products apart, at decode,
   block and ingest widths. */
static void run_rows_view(int M, int qd, int kd, int K, bool tiled) {
    const int N = qd + 2 * kd, nc = (K + 31) / 32;
    mat W(N, K, tiled);
    std::vector<float> x((size_t)M * K), gn(K);
    for (float &v : x) v = frand();
    for (float &v : gn) v = 1.0f + 0.5f * frand();
    char what[96];
    snprintf(what, sizeof what, "q/k/v rows M=%d qd=%d kd=%d K=%d %s", M, qd, kd, K, tiled ? "tile-major" : "row-major");
    const int r0s[3] = {0, qd, qd + kd}, ns[3] = {qd, kd, kd};
    std::vector<float> ys((size_t)M * N), yn((size_t)M * N);
    cu_matmul(G, ys.data(), x.data(), M, &W.d, NULL);
    cu_matmul_norm(G, yn.data(), x.data(), M, &W.d, NULL, gn.data(), 1e-6f);
    for (int i = 0; i < 3; i++) {
        const int r0 = r0s[i], n = ns[i];
        mat S(n, K, tiled); /* the rows as a matrix of their own */
        std::copy(W.w.begin() + (size_t)r0 * K, W.w.begin() + (size_t)(r0 + n) * K, S.w.begin());
        for (int r = 0; tiled && r < n; r++)
            for (int k = 0; k < K; k++) S.t[((size_t)(r / 16) * nc + k / 32) * 512 + (r % 16) * 32 + k % 32] = S.w[(size_t)r * K + k];
        const dmat v = cu_mat_rows(&W.d, r0, n);
        EXPECT((v.t != NULL) == (tiled && r0 % 16 == 0), "%s: rows %d..: a tile-major view %s", what, r0,
               v.t ? "where none fits" : "missing");
        std::vector<float> yv((size_t)M * n), ya((size_t)M * n), yb((size_t)M * n);
        cu_matmul(G, yv.data(), x.data(), M, &v, NULL);
        cu_matmul(G, ya.data(), x.data(), M, &S.d, NULL);
        cu_matmul_norm(G, yb.data(), x.data(), M, &S.d, NULL, gn.data(), 1e-6f);
        EXPECT(!memcmp(yv.data(), ya.data(), sizeof(float) * ya.size()), "%s: the view of rows %d.. differs", what, r0);
        for (int m = 0; m < M; m++) {
            EXPECT(!memcmp(ys.data() + (size_t)m * N + r0, ya.data() + (size_t)m * n, sizeof(float) * n),
                   "%s: row %d, the stacked product's columns %d.. differ from the matrix apart", what, m, r0);
            EXPECT(!memcmp(yn.data() + (size_t)m * N + r0, yb.data() + (size_t)m * n, sizeof(float) * n),
                   "%s: row %d, the stacked product's columns %d.. with the norm folded differ", what, m, r0);
        }
    }
    printf("  %-44s views and stacked = apart\n", what);
}

/* The residual add from pre-cut inputs (cu_matmul_add_cut: each value's
   bf16 head and tail as the producing kernel writes them, bf16_cut_put's
   layout) gives the f32 rows' bits, and the SwiGLU's pre-cut copy of its
   output is that layout. */
static void run_cut(int M, int N, int K) {
    mat W(N, K, true), Wg(K, 64, true), Wu(K, 64, true);
    std::vector<float> x((size_t)M * K), y0((size_t)M * N), bias(N), a((size_t)M * 64);
    for (float &v : y0) v = frand();
    for (float &v : bias) v = frand();
    for (float &v : a) v = frand();
    char what[96];
    snprintf(what, sizeof what, "pre-cut add M=%d N=%d K=%d", M, N, K);
    /* x and its pre-cut copy from the SwiGLU's epilogue */
    std::vector<uint32_t> xc((size_t)M * K, 0xdeadbeefu);
    cu_matmul_swiglu_norm(G, x.data(), a.data(), M, &Wg.d, &Wu.d, std::vector<float>(64, 1.0f).data(), 1e-6f, xc.data());
    std::vector<uint32_t> want((size_t)M * K);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) bf16_cut_put(want.data() + (size_t)m * K, k, x[(size_t)m * K + k]);
    EXPECT(!memcmp(xc.data(), want.data(), 4 * want.size()), "%s: the SwiGLU's pre-cut copy is not bf16_cut_put's", what);
    std::vector<float> yf = y0, yc = y0;
    cu_matmul_add(G, yf.data(), x.data(), M, &W.d, bias.data());
    EXPECT(cu_matmul_add_cut(G, yc.data(), xc.data(), M, &W.d, bias.data()) == 0, "%s: refused", what);
    EXPECT(!memcmp(yc.data(), yf.data(), sizeof(float) * yf.size()), "%s: not the f32 rows' bits", what);
    /* the plain product from the pre-cut input (a sublayer's output that a
       norm takes before the residual add): cu_layer_matmul takes it too */
    std::vector<float> sf((size_t)M * N, NAN), sc((size_t)M * N, NAN);
    cu_matmul(G, sf.data(), x.data(), M, &W.d, bias.data());
    cu_layer_matmul(G, (cu_gemm *)NULL, MM_STORE, sc.data(), NULL, M, &W.d, NULL, bias.data(), NULL, 0.0f, NULL,
                    cu_cut{xc.data(), NULL, NULL});
    EXPECT(!memcmp(sc.data(), sf.data(), sizeof(float) * sf.size()), "%s: the store from it not the f32 rows' bits", what);
    printf("  %-44s the f32 rows' bits (add, store)\n", what);
}

/* The folded norm run apart (cu_norm_split's path: cu_norm_cut, then the
   matmul from its pre-cut rows and scales): the pre-cut words are
   bf16_cut_put of gn . x, the scales within 1e-6 of a double reference,
   and the matmul gives the folded norm's bits (the plain store with a bias
   and the SwiGLU with its pre-cut copy) at every tile count. */
static void run_norm_split(int M, int N, int K, int epi) {
    mat W(N, K, true), W2(N, K, true);
    std::vector<float> x((size_t)M * K), gn(K), bias(N), r(M, NAN);
    for (float &v : x) v = 4.0f * frand();
    for (float &v : gn) v = 1.0f + 0.5f * frand();
    for (float &v : bias) v = frand();
    char what[96];
    snprintf(what, sizeof what, "norm apart M=%d N=%d K=%d %s", M, N, K,
             epi == GLU ? "swiglu" : epi == GEG ? "geglu" : "store");
    EXPECT(cu_norm_cut_ok(K), "%s: refused", what);
    std::vector<uint32_t> xc((size_t)M * K, 0xdeadbeefu), want((size_t)M * K);
    cu_norm_cut(G, xc.data(), r.data(), x.data(), gn.data(), M, K, 1e-6f);
    for (int m = 0; m < M; m++) {
        double ss = 0;
        for (int k = 0; k < K; k++) {
            const float v = x[(size_t)m * K + k];
            ss += (double)v * v;
            bf16_cut_put(want.data() + (size_t)m * K, k, v * gn[k]);
        }
        const double rd = 1.0 / sqrt(ss / K + 1e-6);
        EXPECT(fabs(r[m] - rd) <= 1e-6 * rd, "%s: row %d's scale %.9g, the reference %.9g", what, m, r[m], rd);
    }
    EXPECT(!memcmp(xc.data(), want.data(), 4 * want.size()), "%s: the pre-cut rows are not gn . x cut", what);
    for (int tiles : {1, 2, 4}) {
        if (gated(epi) && tiles == 1) continue;
        cu_mma_tiles_force(tiles);
        std::vector<float> yf((size_t)M * N, NAN), ys((size_t)M * N, NAN);
        std::vector<uint32_t> cf((size_t)M * N, 1u), cs((size_t)M * N, 2u);
        if (epi == GEG) {
            EXPECT(cu_layer_matmul(G, (cu_gemm *)NULL, MM_GEGLU, yf.data(), x.data(), M, &W.d, &W2.d, NULL, gn.data(),
                                   1e-6f, NULL, cu_cut{NULL, cf.data(), NULL}) == 1,
                   "%s: the folded GELU's pre-cut copy not written", what);
            EXPECT(cu_layer_matmul(G, (cu_gemm *)NULL, MM_GEGLU, ys.data(), NULL, M, &W.d, &W2.d, NULL, gn.data(), 1e-6f,
                                   NULL, cu_cut{xc.data(), cs.data(), r.data()}) == 1,
                   "%s: the GELU's pre-cut copy not written", what);
            EXPECT(!memcmp(cf.data(), cs.data(), 4 * cf.size()), "%s, %d tiles: the GELU's pre-cut copy differs", what,
                   tiles);
            std::vector<uint32_t> want((size_t)M * N);
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) bf16_cut_put(want.data() + (size_t)m * N, n, yf[(size_t)m * N + n]);
            EXPECT(!memcmp(cf.data(), want.data(), 4 * cf.size()), "%s: the GELU's pre-cut copy is not its output cut",
                   what);
        } else if (epi == GLU) {
            cu_matmul_swiglu_norm(G, yf.data(), x.data(), M, &W.d, &W2.d, gn.data(), 1e-6f, cf.data());
            EXPECT(cu_layer_matmul(G, (cu_gemm *)NULL, MM_SWIGLU, ys.data(), NULL, M, &W.d, &W2.d, NULL, gn.data(), 1e-6f, NULL,
                                   cu_cut{xc.data(), cs.data(), r.data()}) == 1,
                   "%s: the SwiGLU's pre-cut copy not written", what);
            EXPECT(!memcmp(cf.data(), cs.data(), 4 * cf.size()), "%s, %d tiles: the SwiGLU's pre-cut copy differs",
                   what, tiles);
        } else {
            cu_matmul_norm(G, yf.data(), x.data(), M, &W.d, bias.data(), gn.data(), 1e-6f);
            EXPECT(cu_layer_matmul(G, (cu_gemm *)NULL, MM_STORE, ys.data(), NULL, M, &W.d, NULL, bias.data(), gn.data(), 1e-6f,
                                   NULL, cu_cut{xc.data(), NULL, r.data()}) == 0,
                   "%s: a pre-cut copy reported", what);
        }
        EXPECT(!memcmp(yf.data(), ys.data(), sizeof(float) * yf.size()), "%s, %d tiles: not the folded norm's bits",
               what, tiles);
        if (!gated(epi)) { /* the LM head's entry point: the same */
            std::vector<float> yl((size_t)M * N, NAN);
            cu_matmul_norm(G, yf.data(), x.data(), M, &W.d, NULL, gn.data(), 1e-6f);
            EXPECT(cu_matmul_cut(G, yl.data(), xc.data(), M, &W.d, r.data()) == 0, "%s: refused", what);
            EXPECT(!memcmp(yf.data(), yl.data(), sizeof(float) * yf.size()),
                   "%s, %d tiles: cu_matmul_cut is not the folded norm's bits", what, tiles);
        }
    }
    cu_mma_tiles_force(0);
    printf("  %-44s the folded norm's bits\n", what);
}

/* Where the forward runs a norm apart (cu_norm_split): the MLP norm
   before gate+up and the final norm before the LM head, from 9 rows up
   to 16, never the attention norm or other widths. */
static void run_norm_split_sites(void) {
    struct {
        int site, M, want;
    } cases[] = {
        {CU_NS_GU, 16, 1}, {CU_NS_GU, 9, 1}, {CU_NS_GU, 8, 0}, {CU_NS_GU, 17, 0}, {CU_NS_LM, 9, 1},
        {CU_NS_LM, 1, 0},  {CU_NS_LM, 16, 1}, {1, 12, 0},       {0, 12, 0},
    };
    for (const auto &c : cases)
        EXPECT(cu_norm_split(c.site, c.M) == c.want, "site %d at %d rows: %d, want %d", c.site, c.M, !c.want, c.want);
    printf("  %-44s gate/up and the LM head from 9 rows\n", "where the norm runs apart");
}

/* The embedding (cu_embed): each row the token's bf16 row widened, bit
   for bit. */
static void run_embed(int M, int V, int H) {
    mat E(V, H, false);
    std::vector<int> tok(M);
    for (int m = 0; m < M; m++) tok[m] = (int)((unsigned)(frand() * 1e6f + 1e6f) % (unsigned)V);
    std::vector<float> o((size_t)M * H, NAN);
    cu_embed(G, o.data(), &E.d, tok.data(), M);
    char what[96];
    snprintf(what, sizeof what, "embedding M=%d H=%d", M, H);
    for (int m = 0; m < M; m++)
        for (int i = 0; i < H; i++)
            EXPECT(o[(size_t)m * H + i] == __bfloat162float(E.w[(size_t)tok[m] * H + i]),
                   "%s: row %d is not token %d's at %d", what, m, tok[m], i);
    printf("  %-44s the tokens' rows\n", what);
}

/* 1 / rms of a row (eps 1e-6), in double: the norms' reference */
static double rms_inv(const float *row, int D) {
    double ss = 0;
    for (int i = 0; i < D; i++) ss += (double)row[i] * row[i];
    return 1.0 / sqrt(ss / D + 1e-6);
}

/* cu_rmsnorm (a block a row, a fixed tree) against a double reference */
static void run_rmsnorm(int M, int D) {
    std::vector<float> x((size_t)M * D), w(D), y((size_t)M * D, NAN);
    for (float &v : x) v = frand();
    for (float &v : w) v = 1.0f + 0.5f * frand();
    cu_rmsnorm(G, y.data(), x.data(), w.data(), M, D, 1e-6f);
    double err = 0;
    for (int m = 0; m < M; m++) {
        const double r = rms_inv(&x[(size_t)m * D], D);
        for (int i = 0; i < D; i++) {
            const double want = w[i] * x[(size_t)m * D + i] * r, got = y[(size_t)m * D + i];
            err = got != got ? INFINITY : fmax(err, fabs(got - want) / (fabs(want) + 1e-3));
        }
    }
    EXPECT(err < 1e-5, "rmsnorm M=%d D=%d: %.3g from the reference", M, D, err);
    printf("  %-44s %.2g from the reference\n", "rmsnorm", err);
}

/* the CPU ops' f32 formulas as engine/ops.c writes them (op_geglu,
   op_softcap), each operation rounded on its own (no contraction here) */
static float cpu_geglu(float g, float u) {
    const float beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
    const float cube = g * g * g;
    const float inner = beta * (g + kappa * cube);
    const float t = 0.5f * g * (1.0f + tanhf(inner));
    return t * u;
}
static float cpu_softcap(float x, float cap) {
    const float d = x / cap;
    return tanhf(d) * cap;
}

/* cuda_elem.cu's steps: GELU gating apart, the soft-cap and the scale give
   the CPU formulas' bits (the host's tanhf here; the device's is within 2
   ulp of it), GELU within 1e-6 of a double reference; a norm then residual
   add within 1e-6 of its double reference, each row its own */
static void run_elem(int M, int D) {
    const size_t n = (size_t)M * D;
    std::vector<float> g(n), u(n), x(n), y(n), w(D);
    for (size_t i = 0; i < n; i++) g[i] = 4.0f * frand(), u[i] = frand(), x[i] = 60.0f * frand(), y[i] = 3.0f * frand();
    for (float &v : w) v = 1.0f + 0.5f * frand();
    std::vector<float> gg = g;
    cu_geglu_apart(G, gg.data(), u.data(), n);
    std::vector<double> gref(n);
    for (size_t i = 0; i < n; i++) {
        const float want = cpu_geglu(g[i], u[i]);
        EXPECT(!memcmp(&gg[i], &want, 4), "geglu apart: %.9g at %zu, the CPU's formula %.9g", gg[i], i, want);
        gref[i] = geglu_ref(g[i], u[i]);
    }
    /* (relative to the largest value: 1 + tanh cancels for negative gates,
       in the CPU's f32 formula as here) */
    const double err = rel_off(gg, gref);
    EXPECT(err < 1e-6, "geglu apart: %.3g from the double reference", err);
    std::vector<float> xs = x, xc = x;
    cu_softcap(G, xc.data(), 30.0f, n);
    cu_scale(G, xs.data(), 8.0f, n);
    for (size_t i = 0; i < n; i++) {
        const float wc = cpu_softcap(x[i], 30.0f), ws = x[i] * 8.0f;
        EXPECT(!memcmp(&xc[i], &wc, 4), "softcap: %.9g at %zu, the CPU's formula %.9g", xc[i], i, wc);
        EXPECT(!memcmp(&xs[i], &ws, 4), "scale: %.9g at %zu, not x * s", xs[i], i);
    }
    std::vector<float> xa = x;
    cu_rmsnorm_add(G, xa.data(), y.data(), w.data(), M, D, 1e-6f);
    double ea = 0;
    for (int m = 0; m < M; m++) {
        const double r = rms_inv(&y[(size_t)m * D], D);
        for (int i = 0; i < D; i++) {
            const size_t k = (size_t)m * D + i;
            const double want = x[k] + w[i] * y[k] * r;
            ea = xa[k] != xa[k] ? INFINITY : fmax(ea, fabs(xa[k] - want) / (fabs(want) + 1e-3));
        }
    }
    EXPECT(ea < 1e-6, "rmsnorm add M=%d D=%d: %.3g from the reference", M, D, ea);
    /* a row alone: the batch's bits */
    std::vector<float> x1(x.begin() + (size_t)(M - 1) * D, x.end());
    cu_rmsnorm_add(G, x1.data(), y.data() + (size_t)(M - 1) * D, w.data(), 1, D, 1e-6f);
    EXPECT(!memcmp(x1.data(), xa.data() + (size_t)(M - 1) * D, 4 * (size_t)D), "rmsnorm add: the last row alone differs");
    char what[64];
    snprintf(what, sizeof what, "elementwise M=%d D=%d", M, D);
    printf("  %-44s the CPU formulas' bits; geglu %.2g, norm add %.2g\n", what, err, ea);
}

int main(void) {
    emu::sms = 3;
    const mcase cases[] = {
        {1, 40, 256, ST, 0, 1},   /* decode, a width off the tiles, 8 chunks: one a warp */
        {3, 64, 776, ST, 1, 0},   /* folded norm, K past the last whole chunk, several chunks a warp */
        {13, 48, 200, ST, 1, 1},  /* folded norm over two row groups */
        {8, 48, 520, ADD, 0, 1},  /* residual add */
        {9, 96, 264, ST, 0, 1},   /* two row groups */
        {16, 50, 392, ADD, 0, 0}, /* 16 rows, row-major */
        {2, 32, 264, GLU, 1, 1},  /* SwiGLU with a folded norm, four tiles */
        {12, 32, 136, GLU, 0, 1}, /* SwiGLU at 9-16 rows: two tiles */
        {1, 320, 64, ST, 0, 1},   /* twenty tiles, two chunks: six warps have none */
        {3, 160, 520, ADD, 0, 0}, /* ten tiles of 17 chunks */
        {1, 216, 776, ST, 1, 1},  /* fourteen one-tile blocks of 25 chunks (more than four an SM) */
        {1, 136, 776, ST, 1, 1},  /* nine one-tile blocks (three an SM): the register-capped kernel */
        {2, 32, 264, GEG, 1, 1},  /* GELU gating with a folded norm, four tiles */
        {12, 40, 136, GEG, 0, 0}, /* GELU gating at 9-16 rows, no norm, row-major */
    };
    for (const mcase &c : cases) run_case(c);
    run_qkv(1, 4, 2, 32, 64);
    run_qkv(5, 8, 2, 16, 96);
    run_qkv(12, 4, 1, 64, 128);
    run_rows_view(1, 64, 32, 96, true);   /* decode width, tiles offset */
    run_rows_view(16, 64, 32, 264, true); /* a drafter's block */
    run_rows_view(40, 48, 16, 72, true);  /* ingest rows (four row groups a block) */
    run_rows_view(5, 40, 20, 136, true);  /* rows off the tiles: row-major views */
    run_rows_view(9, 32, 16, 96, false);  /* no tile-major copy */
    run_cut(1, 48, 96);
    run_cut(7, 64, 320);
    run_cut(16, 32, 64);
    run_norm_split(1, 200, 264, ST);
    run_norm_split(9, 72, 96, ST);
    run_norm_split(16, 40, 520, ST);
    run_norm_split(13, 48, 1032, ST);
    run_norm_split(3, 64, 264, GLU);
    run_norm_split(12, 32, 776, GLU);
    run_norm_split(16, 48, 136, GLU);
    run_norm_split(2, 48, 264, GEG);
    run_norm_split(16, 32, 136, GEG);
    run_norm_split_sites();
    run_embed(1, 50, 64);
    run_embed(9, 300, 320);
    run_rmsnorm(3, 200);
    run_rmsnorm(1, 1000);
    run_elem(3, 200);
    run_elem(1, 1000);
    if (failures) {
        fprintf(stderr, "cuemu matmul: %d checks failed\n", failures);
        return 1;
    }
    printf("cuemu matmul: within 2e-5 of the reference, the same bits at every tile count\n");
    return 0;
}
