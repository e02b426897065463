// The experts' MLP of an MoE layer (src/engine/cuda/cuda_moe.cu) run on the
// CPU by emu.h, through its test hook (cuda_test_moe: the upload, the
// router matmul, k_moe_route, k_moe_plan, the gather, each chosen expert's
// matmuls launched by the host over its rows, the combine), bf16 experts:
// against a double reference of engine/moe's rule (the experts chosen and
// the outputs), with 8 experts of top 2 renormalized and 40 of top 5 not
// (more experts than a warp's lanes); every launch of 1-19 rows and every
// row alone bit-equal to those rows of a 20-row launch, and the experts'
// tile-major copies too; two experts with the same router row (every row
// ties them) taken lower index first; a row of NaNs still routed to
// distinct experts (no index out of range).
#include "../../src/engine/cuda/cuda_mma.cu"
#include "../../src/engine/cuda/cuda_ops.cu"
#include "../../src/engine/cuda/cuda_quant.cu" /* (what cuda_ops.cu reaches for quantized matrices) */
#include "../../src/engine/cuda/cuda_moe.cu"

/* what the launchers reach in cuda_gemm.cu: no cuBLAS here, the matmuls all take k_mma */
int cu_gemm_takes(const cu_gemm *, const dmat *, int) { return 0; }
void cu_gemm_matmul(cu_gemm *, cu_go, int, float *, const float *, int, const dmat *, const dmat *,
                    const float *, const float *, float) {
    emu::fail("cuBLAS called with no groups taken");
}
/* (cuda_backend.cu's: the tuning the test hook launches under) */
const cu_tuning *cu_tuning_hooked(void) {
    static const cu_tuning t = cu_tuning_defaults();
    return &t;
}

#include "check.h"

#include <algorithm>

enum { H = 64, I = 32, ROWS = 20 };

/* a bf16 matrix [N][K] as a tensor, and its values */
struct bmat {
    std::vector<uint16_t> w;
    std::vector<float> v;
    tensor t{};
    bmat(int N, int K, float amp) : w((size_t)N * K), v((size_t)N * K) {
        for (size_t i = 0; i < w.size(); i++) {
            w[i] = ds_f32_to_bf16(amp * frand());
            v[i] = ds_bf16_to_f32(w[i]);
        }
        t.name = "w";
        t.dtype = DT_BF16;
        t.ndim = 2;
        t.shape[0] = N, t.shape[1] = K;
        t.data = w.data();
        t.nbytes = w.size() * 2;
    }
};

struct experts {
    int E, K, norm;
    bmat router;
    std::vector<bmat> g, u, d;
    std::vector<const tensor *> tg, tu, td;
    wmoe w{};
    experts(int E_, int K_, int norm_) : E(E_), K(K_), norm(norm_), router(E_, H, 0.3f) {
        for (int e = 0; e < E; e++) g.emplace_back(I, H, 0.2f), u.emplace_back(I, H, 0.2f), d.emplace_back(H, I, 0.2f);
        /* expert 5's router row is expert 1's: every row ties them */
        for (int k = 0; k < H; k++) {
            router.w[5 * H + k] = router.w[1 * H + k];
            router.v[5 * H + k] = router.v[1 * H + k];
        }
        for (int e = 0; e < E; e++) tg.push_back(&g[e].t), tu.push_back(&u[e].t), td.push_back(&d[e].t);
        w.n_experts = E, w.top_k = K, w.norm_topk = norm, w.inter = I;
        w.router = &router.t, w.gate = tg.data(), w.up = tu.data(), w.down = td.data();
    }
    /* row x's reference output and experts (ascending) */
    void ref(const float *x, const float *gn, double *out, int *sel) const {
        double xn[H], lg[64], ss = 0;
        for (int k = 0; k < H; k++) ss += (double)x[k] * x[k];
        const double r = 1.0 / sqrt(ss / H + 1e-6);
        for (int k = 0; k < H; k++) xn[k] = x[k] * r * gn[k];
        double mx = -INFINITY, sum = 0;
        for (int e = 0; e < E; e++) {
            double a = 0;
            for (int k = 0; k < H; k++) a += router.v[(size_t)e * H + k] * xn[k];
            lg[e] = a, mx = fmax(mx, a);
        }
        double p[64], w_[32], tot = 0;
        int taken[64] = {0}, pick[32];
        for (int e = 0; e < E; e++) sum += p[e] = exp(lg[e] - mx);
        for (int k = 0; k < K; k++) {
            int b = -1;
            for (int e = 0; e < E; e++)
                if (!taken[e] && (b < 0 || p[e] > p[b])) b = e;
            taken[b] = 1, pick[k] = b, w_[k] = p[b] / sum, tot += w_[k];
        }
        for (int o = 0; o < H; o++) out[o] = x[o];
        for (int k = 0; k < K; k++) {
            const int e = pick[k];
            double h[I];
            for (int i = 0; i < I; i++) {
                double a = 0, b = 0;
                for (int c = 0; c < H; c++) a += g[e].v[(size_t)i * H + c] * xn[c], b += u[e].v[(size_t)i * H + c] * xn[c];
                h[i] = a / (1 + exp(-a)) * b;
            }
            for (int o = 0; o < H; o++) {
                double a = 0;
                for (int i = 0; i < I; i++) a += d[e].v[(size_t)o * I + i] * h[i];
                out[o] += (norm ? w_[k] / tot : w_[k]) * a;
            }
        }
        std::vector<int> s(pick, pick + K);
        std::sort(s.begin(), s.end());
        for (int k = 0; k < K; k++) sel[k] = s[k];
    }
};

static bool run(const experts &x_, float *x, int M, const float *gn, int tiled, int *sel) {
    char err[256];
    if (cuda_test_moe(x, M, &x_.w, H, gn, 1e-6f, tiled, sel, err, sizeof err) != 0) {
        EXPECT(false, "cuda_test_moe: %s", err);
        return false;
    }
    return true;
}

static void check(int E, int K, int norm) {
    experts ex(E, K, norm);
    std::vector<float> x((size_t)ROWS * H), gn(H), all, part;
    for (float &v : x) v = frand();
    for (float &v : gn) v = 1.0f + 0.2f * frand();
    all = x;
    std::vector<int> sel((size_t)ROWS * K);
    if (!run(ex, all.data(), ROWS, gn.data(), 0, sel.data())) return;
    double worst = 0;
    for (int m = 0; m < ROWS; m++) {
        double out[H], big = 0, off = 0;
        int rs[32];
        ex.ref(&x[(size_t)m * H], gn.data(), out, rs);
        for (int k = 0; k < K; k++)
            EXPECT(sel[(size_t)m * K + k] == rs[k], "E=%d K=%d row %d: expert %d, the reference's %d", E, K, m,
                   sel[(size_t)m * K + k], rs[k]);
        bool has1 = false, has5 = false;
        for (int k = 0; k < K; k++) has1 |= sel[(size_t)m * K + k] == 1, has5 |= sel[(size_t)m * K + k] == 5;
        EXPECT(!has5 || has1, "E=%d K=%d row %d: expert 5 taken before 1, its equal", E, K, m);
        for (int o = 0; o < H; o++) {
            big = fmax(big, fabs(out[o] - x[(size_t)m * H + o]));
            off = fmax(off, fabs(all[(size_t)m * H + o] - out[o]));
        }
        worst = fmax(worst, off / big);
    }
    EXPECT(worst < 1e-4, "E=%d K=%d: %.3g of the largest output from the reference", E, K, worst);
    /* widths and rows alone: the 20-row launch's bits */
    for (int M = 1; M < ROWS; M++) {
        part.assign(x.begin(), x.begin() + (size_t)M * H);
        if (!run(ex, part.data(), M, gn.data(), 0, nullptr)) return;
        EXPECT(!memcmp(part.data(), all.data(), sizeof(float) * (size_t)M * H), "E=%d K=%d: %d rows differ from the 20",
               E, K, M);
    }
    for (int m = 0; m < ROWS; m++) {
        part.assign(x.begin() + (size_t)m * H, x.begin() + (size_t)(m + 1) * H);
        if (!run(ex, part.data(), 1, gn.data(), 0, nullptr)) return;
        EXPECT(!memcmp(part.data(), &all[(size_t)m * H], sizeof(float) * H), "E=%d K=%d: row %d alone differs", E, K,
               m);
    }
    part = x;
    if (run(ex, part.data(), ROWS, gn.data(), 1, nullptr))
        EXPECT(!memcmp(part.data(), all.data(), sizeof(float) * ROWS * H), "E=%d K=%d: the tile-major experts differ",
               E, K);
    /* a row of NaNs: distinct experts in range, the other rows unchanged */
    part = x;
    for (int k = 0; k < H; k++) part[3 * H + k] = NAN;
    if (run(ex, part.data(), 5, gn.data(), 0, sel.data())) {
        for (int a = 0; a < K; a++) {
            const int e = sel[3 * K + a];
            EXPECT(e >= 0 && e < E && (a == 0 || sel[3 * K + a - 1] < e), "E=%d K=%d: the NaN row's expert %d", E, K, e);
        }
        EXPECT(!memcmp(part.data(), all.data(), sizeof(float) * 3 * H) &&
                   !memcmp(&part[4 * H], &all[4 * H], sizeof(float) * H),
               "E=%d K=%d: a NaN row changed the others", E, K);
    }
    printf("  %d experts, top %d%s: %.2g of the largest output from the reference; widths 1-%d, rows alone, "
           "tile-major: the same bits\n",
           E, K, norm ? " renormalized" : "", worst, ROWS);
}

int main(void) {
    check(8, 2, 1);
    check(40, 5, 0);
    if (failures) {
        fprintf(stderr, "cuemu moe: %d checks failed\n", failures);
        return 1;
    }
    printf("cuemu moe: the experts' MLP follows the rule, a row's bits its own\n");
    return 0;
}
