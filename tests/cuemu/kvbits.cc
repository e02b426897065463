// The attention kernels over a 16- and an 8-bit KV cache (cu_kv; --kv-bits)
// run on the CPU by emu.h: a cache filled by the CPU's row rules
// (engine/kv.c: kv_quant_f16, kv_quant_i8) is read by the decode / verify
// kernel (cu_attention) and the prefill kernel (cu_attention_tiled:
// k_attn_tc), and each output must be bit for bit the f32 kernel's over
// the cache widened by the CPU (kv_dequant_*), under each launch switch;
// every row of a batch (widths 1..16) the bits of that row alone at its
// position. (The store's bits against the CPU rule: mma.cc.)
#include "../../src/engine/cuda/cuda_attn.cu"
#include "check.h"
#include "no_ops.h"

extern "C" {
#include "engine/kv.h"
}

#include "no_attn_wg.h"

static cu_tuning tn = cu_tuning_defaults();

/* a cache of nkv heads x cap positions x hd in one storage, from f32 rows
   by the CPU's rules, and its widened f32 copy */
struct cache {
    int bits, nkv, cap, hd;
    std::vector<uint16_t> k16, v16;
    std::vector<int8_t> k8, v8;
    std::vector<float> ks, vs, kw, vw; /* scales (8 bits); the widened copy */
    cache(int bits_, int nkv_, int cap_, int hd_, const std::vector<float> &k, const std::vector<float> &v)
        : bits(bits_), nkv(nkv_), cap(cap_), hd(hd_), kw(k.size()), vw(v.size()) {
        const size_t rows = (size_t)nkv * cap;
        if (bits == 16) k16.resize(k.size()), v16.resize(v.size());
        if (bits == 8) k8.resize(k.size()), v8.resize(v.size()), ks.resize(rows), vs.resize(rows);
        for (size_t r = 0; r < rows; r++) {
            const size_t o = r * hd;
            if (bits == 16) {
                kv_quant_f16(&k[o], hd, &k16[o]);
                kv_quant_f16(&v[o], hd, &v16[o]);
                kv_dequant_f16(&k16[o], hd, &kw[o]);
                kv_dequant_f16(&v16[o], hd, &vw[o]);
            } else {
                kv_quant_i8(&k[o], hd, &k8[o], &ks[r]);
                kv_quant_i8(&v[o], hd, &v8[o], &vs[r]);
                kv_dequant_i8(&k8[o], ks[r], hd, &kw[o]);
                kv_dequant_i8(&v8[o], vs[r], hd, &vw[o]);
            }
        }
    }
    cu_kv low() {
        if (bits == 16) return cu_kv{k16.data(), v16.data(), NULL, NULL, 16};
        return cu_kv{k8.data(), v8.data(), ks.data(), vs.data(), 8};
    }
    cu_kv wide() { return cu_kv_f32(kw.data(), vw.data()); }
};

struct acase {
    int M, nh, nkv, hd, np;
};

/* rows m0 .. m0 + M - 1 of the causal attention after n_past positions */
static std::vector<float> run(const acase &a, const std::vector<float> &q, cu_kv kv, int cap, int m0, int M,
                              int n_past, int tiled) {
    std::vector<float> out((size_t)M * a.nh * a.hd, NAN), part(cu_attn_part_floats(a.nh, a.hd, cap), NAN);
    const float *qm = q.data() + (size_t)m0 * a.nh * a.hd;
    const float scale = 1.0f / sqrtf((float)a.hd);
    if (tiled)
        cu_attention_tiled(cu_go_on(nullptr, &tn), out.data(), qm, kv, part.data(), nullptr, M, a.nh, a.nkv, a.hd, cap,
                           &n_past, scale, 0);
    else
        cu_attention(cu_go_on(nullptr, &tn), out.data(), qm, kv, part.data(), M, a.nh, a.nkv, a.hd, cap, &n_past,
                     scale, 1, 0, cu_attn_spread_for(&tn, n_past), 0);
    return out;
}

static bool same(const std::vector<float> &x, const float *y) { return !memcmp(x.data(), y, sizeof(float) * x.size()); }

static void run_case(const acase &a, int bits) {
    const int cap = a.np + a.M + 5;
    std::vector<float> q((size_t)a.M * a.nh * a.hd), k((size_t)a.nkv * cap * a.hd), v(k.size());
    for (float &x : q) x = frand();
    for (float &x : k) x = 3.0f * frand();
    for (float &x : v) x = frand();
    k[7] = 0.0f; /* (values of every size: a zero, an f16 subnormal, one past f16's range) */
    k[9] = 3e-6f;
    v[11] = 70000.0f;
    cache c(bits, a.nkv, cap, a.hd, k, v);
    char what[112];
    snprintf(what, sizeof what, "%d bits M=%d nh=%d nkv=%d hd=%d n_past=%d", bits, a.M, a.nh, a.nkv, a.hd, a.np);
    const int modes[][3] = {{0, 1, 1}, {1, 1, 1}, {0, 0, 1}, {0, 1, 0}};
    const char *names[] = {"default", "spread", "late first chunk", "narrow"};
    const size_t row = (size_t)a.nh * a.hd;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        tn.att_spread = modes[i][0], tn.att_early = modes[i][1], tn.att_wide = modes[i][2];
        const std::vector<float> low = run(a, q, c.low(), cap, 0, a.M, a.np, 0), wide = run(a, q, c.wide(), cap, 0, a.M, a.np, 0);
        EXPECT(same(low, wide.data()), "%s, %s: not the f32 kernel's bits over the widened cache", what, names[i]);
        for (int m = 0; m < a.M; m++) {
            const std::vector<float> one = run(a, q, c.low(), cap, m, 1, a.np + m, 0);
            EXPECT(same(one, low.data() + m * row), "%s, %s: row %d alone differs from the batch", what, names[i], m);
        }
    }
    tn = cu_tuning_defaults();
    if (cu_attn_tiled_ok(a.nh, a.nkv, a.hd)) {
        const std::vector<float> low = run(a, q, c.low(), cap, 0, a.M, a.np, 1), wide = run(a, q, c.wide(), cap, 0, a.M, a.np, 1);
        EXPECT(same(low, wide.data()), "%s, the prefill kernel: not its bits over the widened cache", what);
    }
    printf("  %s: decode/verify and prefill = f32 over the widened cache; rows alone = the batch\n", what);
}

/* the rules the kernels are built on (cuda_ops.cuh) against the CPU's:
   kv_f16_bits = ds_f32_to_f16 after saturation, kv_i8_code / kv_i8_scale
   = kv_quant_i8, over rows of every size */
static void run_rules(void) {
    int bad = 0;
    for (int t = 0; t < 20000; t++) {
        float x[8];
        const float mag = ldexpf(1.0f, (t % 60) - 40);
        for (float &e : x) e = mag * frand();
        if (t % 97 == 0) x[3] = 1e9f; /* past f16's range */
        if (t % 83 == 0) x[1] = INFINITY;
        if (t % 79 == 0) for (float &e : x) e = 0.0f;
        uint16_t h[8];
        float xn[8]; /* (a NaN for the f16 rule only: the CPU's int8 rule converts it with no defined result) */
        memcpy(xn, x, sizeof x);
        if (t % 89 == 0) xn[5] = -NAN;
        kv_quant_f16(xn, 8, h);
        for (int i = 0; i < 8; i++) bad += kv_f16_bits(xn[i]) != h[i];
        int8_t q[8];
        float sc;
        kv_quant_i8(x, 8, q, &sc);
        float amax = 0.0f;
        for (float e : x) amax = fmaxf(amax, fabsf(e));
        for (int i = 0; i < 8; i++) bad += kv_i8_code(x[i], amax) != q[i];
        const float sd = kv_i8_scale(amax);
        bad += memcmp(&sc, &sd, 4) != 0;
    }
    EXPECT(bad == 0, "the device rules differ from the CPU's in %d values", bad);
    printf("  the f16 and int8 rules = the CPU's over 20000 rows (zeros, subnormals, outliers, NaN, inf)\n");
}

int main(void) {
    emu::sms = 3;
    run_rules();
    const acase cases[] = {
        {1, 8, 2, 64, 150},   /* decode */
        {9, 8, 2, 64, 70},    /* a verify */
        {16, 4, 1, 32, 20},   /* 16 rows, a cache shorter than a chunk */
        {3, 16, 2, 128, 90},  /* eight heads a kv head */
        {5, 4, 1, 64, 300},   /* several blocks a kv head */
        {2, 4, 2, 128, 2100}, /* more than one prefill span */
    };
    for (int bits : {16, 8})
        for (const acase &a : cases) run_case(a, bits);
    if (failures) {
        fprintf(stderr, "cuemu kv-bits: %d checks failed\n", failures);
        return 1;
    }
    printf("cuemu kv-bits: attention over 16- and 8-bit caches = the f32 kernels over the widened cache, rows alone the "
           "batch's, the row rules the CPU's\n");
    return 0;
}
