// The attention as the forward calls it (cu_attention: the split kernel,
// then k_attn_combine; cu_attention_tiled: the prefill kernel k_attn_tc)
// run on the CPU by emu.h, against a double reference, under each launch
// switch: the default two-stage shape, the spread shape (one stage, the kv
// heads interleaved), the first chunk requested after the wait, the verify
// rows on 8 warps instead of 16 (cu_tuning's att_wide 0). Each must give
// the default's bits, and each row alone (a decode step at its position)
// the batch's bits. With a sliding window (a row at position p seeing p -
// window + 1 .. p), the same at window widths inside a chunk, across
// chunks and spans, smaller than the batch and wider than the context; and
// the prefill kernel's rows, run from a later first row (whose blocks skip
// other chunks before the window), the whole batch's bits.
#include "../../src/engine/cuda/cuda_attn.cu"
#include "check.h"
#include "no_ops.h"

#include "no_attn_wg.h"

/* the launches' tuning: att_spread, att_early and att_wide varied */
static cu_tuning tn = cu_tuning_defaults();

struct acase {
    int M, nh, nkv, hd, np;
    int win; /* the sliding window (0: none) */
};

struct inputs {
    int cap;
    std::vector<float> q, k, v;
    explicit inputs(const acase &a) : cap(a.np + a.M + 7) {
        q.resize((size_t)a.M * a.nh * a.hd);
        k.resize((size_t)a.nkv * cap * a.hd);
        v.resize(k.size());
        for (float &x : q) x = frand();
        for (float &x : k) x = frand();
        for (float &x : v) x = frand();
    }
};

static cu_kv kvf(const inputs &in) {
    return cu_kv_f32(const_cast<float *>(in.k.data()), const_cast<float *>(in.v.data()));
}

/* rows m0.. of the causal attention of M rows after n_past positions */
static std::vector<float> gpu(const acase &a, const inputs &in, int m0, int M, int n_past, int tiled) {
    std::vector<float> out((size_t)M * a.nh * a.hd, NAN), part(cu_attn_part_floats(a.nh, a.hd, in.cap), NAN);
    const float *q = in.q.data() + (size_t)m0 * a.nh * a.hd;
    const float scale = 1.0f / sqrtf((float)a.hd);
    if (tiled)
        cu_attention_tiled(cu_go_on(nullptr, &tn), out.data(), q, kvf(in), part.data(), nullptr, M, a.nh, a.nkv, a.hd,
                           in.cap, &n_past, scale, a.win);
    else
        cu_attention(cu_go_on(nullptr, &tn), out.data(), q, kvf(in), part.data(), M, a.nh, a.nkv, a.hd, in.cap,
                     &n_past, scale, 1, 0, cu_attn_spread_for(&tn, n_past), a.win);
    return out;
}

static double rel_to_reference(const acase &a, const inputs &in, const std::vector<float> &out) {
    const int G = a.nh / a.nkv, hd = a.hd;
    std::vector<double> want(out.size());
    for (int m = 0; m < a.M; m++)
        for (int h = 0; h < a.nh; h++) {
            const int L = a.np + m + 1, kvh = h / G, lo = a.win > 0 && L - a.win > 0 ? L - a.win : 0;
            const float *qv = &in.q[((size_t)m * a.nh + h) * hd];
            std::vector<double> s(L), o(hd, 0.0);
            double mx = -INFINITY, sum = 0;
            for (int p = lo; p < L; p++) {
                double d = 0;
                for (int j = 0; j < hd; j++) d += (double)qv[j] * in.k[((size_t)kvh * in.cap + p) * hd + j];
                s[p] = d / sqrt((double)hd);
                mx = fmax(mx, s[p]);
            }
            for (int p = lo; p < L; p++) {
                const double e = exp(s[p] - mx);
                sum += e;
                for (int j = 0; j < hd; j++) o[j] += e * in.v[((size_t)kvh * in.cap + p) * hd + j];
            }
            for (int j = 0; j < hd; j++) want[((size_t)m * a.nh + h) * hd + j] = o[j] / sum;
        }
    return rel_off(out, want);
}

static void run_case(const acase &a) {
    const inputs in(a);
    char what[128];
    snprintf(what, sizeof what, "M=%d nh=%d nkv=%d hd=%d n_past=%d window=%d", a.M, a.nh, a.nkv, a.hd, a.np, a.win);
    /* switch settings: spread, early, wide; the first is the default */
    const int modes[][3] = {{0, 1, 1}, {1, 1, 1}, {0, 0, 1}, {1, 0, 1}, {0, 1, 0}, {0, 0, 0}};
    const char *names[] = {"default", "spread", "late first chunk", "spread, late", "narrow", "narrow, late"};
    std::vector<float> base;
    printf("  %s:", what);
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        /* (under a window the default, spread and narrow shapes: the
           others change nothing the window touches) */
        if (a.win && i != 0 && i != 1 && i != 4) continue;
        tn.att_spread = modes[i][0];
        tn.att_early = modes[i][1];
        tn.att_wide = modes[i][2];
        const std::vector<float> out = gpu(a, in, 0, a.M, a.np, 0);
        const double rel = rel_to_reference(a, in, out);
        EXPECT(rel < 1e-5, "%s, %s: off the reference by %.3g", what, names[i], rel);
        if (i == 0) base = out;
        else
            EXPECT(!memcmp(out.data(), base.data(), sizeof(float) * out.size()), "%s, %s: not the default's bits", what,
                   names[i]);
        /* each row alone at its position */
        const size_t row = (size_t)a.nh * a.hd;
        for (int m = 0; m < a.M; m++) {
            const std::vector<float> one = gpu(a, in, m, 1, a.np + m, 0);
            EXPECT(!memcmp(one.data(), out.data() + m * row, sizeof(float) * row), "%s, %s: row %d alone differs",
                   what, names[i], m);
        }
        printf(" %s %.1g;", names[i], rel);
    }
    tn = cu_tuning_defaults();
    if (cu_attn_tiled_ok(a.nh, a.nkv, a.hd)) {
        const std::vector<float> all = gpu(a, in, 0, a.M, a.np, 1);
        const double rel = rel_to_reference(a, in, all);
        EXPECT(rel < 1e-5, "%s, the prefill kernel: off the reference by %.3g", what, rel);
        printf(" prefill %.1g", rel);
        /* under a window, the rows from m0 on as a batch of their own
           (other row blocks, another first row for the skips): the same
           bits */
        const size_t row = (size_t)a.nh * a.hd;
        const int starts[] = {1, a.M / 2};
        for (int m0 : starts) {
            if (!a.win || m0 < 1 || m0 >= a.M) continue;
            const std::vector<float> part = gpu(a, in, m0, a.M - m0, a.np + m0, 1);
            EXPECT(!memcmp(part.data(), all.data() + m0 * row, sizeof(float) * part.size()),
                   "%s, the prefill kernel: rows from %d as their own batch differ", what, m0);
        }
    }
    printf("\n");
}

/* k_attn_combine alone over nc chunks of made-up partials (row 0 of one
   launch, nh heads), against a double reference: a row's first staged
   tile requested by cp.async, later tiles loaded in turn, and past COMB_W
   chunks a second tile of weights */
static void run_combine(int nc, int nh, int hd) {
    std::vector<float> o((size_t)nh * nc * hd), mp((size_t)nh * nc), sp(mp.size()), out((size_t)nh * hd, NAN);
    for (float &x : o) x = frand();
    for (size_t i = 0; i < mp.size(); i++) mp[i] = 6.0f * frand(), sp[i] = 1.5f + frand();
    const int d_len = nc * ATT_CHUNK - 1; /* row 0 sees d_len + 1 positions: nc chunks */
    launch(k_attn_combine, nh, COMB_THREADS, cu_go_on(nullptr, &tn), out.data(), (const float *)o.data(), (const float *)mp.data(),
           (const float *)sp.data(), nh, hd, &d_len, nc, 0, 1, 1, 0, ATT_CHUNK, 0, (uint32_t *)nullptr);
    std::vector<double> want(out.size(), 0.0);
    for (int h = 0; h < nh; h++) {
        const size_t b = (size_t)h * nc;
        double mx = -INFINITY, sum = 0;
        for (int c = 0; c < nc; c++) mx = fmax(mx, mp[b + c]);
        for (int c = 0; c < nc; c++) sum += exp(mp[b + c] - mx) * sp[b + c];
        for (int d = 0; d < hd; d++) {
            for (int c = 0; c < nc; c++) want[(size_t)h * hd + d] += exp(mp[b + c] - mx) * o[(b + c) * hd + d];
            want[(size_t)h * hd + d] /= sum;
        }
    }
    const double rel = rel_off(out, want);
    EXPECT(rel < 1e-5, "combine of %d chunks, hd %d: off the reference by %.3g", nc, hd, rel);
    printf("  combine alone, %d chunks, hd %d: %.1g\n", nc, hd, rel);
}

int main(void) {
    emu::sms = 3; /* (read once) blocks take several chunks in turn */
    const acase cases[] = {
        {1, 8, 2, 64, 150},  /* decode */
        {9, 8, 2, 64, 70},   /* a verify: wide takes it (two whole rows a warp otherwise) */
        {4, 8, 4, 32, 63},   /* 3-4 rows: wide takes (row, head) pairs; a chunk's edge */
        {16, 4, 1, 32, 20},  /* 16 rows of one kv head, a cache shorter than a chunk */
        {3, 16, 2, 128, 90}, /* eight heads a kv head: whole rows, one stage past two */
        {33, 2, 2, 16, 5},   /* two launches (ATT_ROWS) */
        {2, 4, 1, 128, 2100}, /* more than 32 chunks a row */
        {1, 4, 1, 128, 4200}, /* more chunks than the combine's first staged tile */
        {5, 4, 1, 64, 300},   /* a kv head's three blocks, two chunks for some */
        {12, 8, 1, 32, 500},  /* eight heads a kv head, whole rows, three blocks */
        {1, 2, 1, 64, 700},   /* decode, three blocks: one pair */
        /* sliding windows */
        {1, 8, 2, 64, 150, 16},    /* decode, the window inside a chunk */
        {9, 8, 2, 64, 170, 100},   /* a verify, the window across chunks */
        {16, 4, 1, 32, 300, 64},   /* a chunk wide */
        {33, 2, 2, 16, 5, 3},      /* narrower than the batch: rows of the batch only, two launches */
        {12, 8, 1, 32, 500, 1},    /* each row itself alone */
        {4, 8, 4, 32, 63, 1000},   /* wider than the context */
        {5, 4, 1, 64, 2100, 400},  /* decode blocks from the window's chunks on, far into the cache */
        {18, 4, 1, 32, 2040, 300}, /* the prefill kernel's two row blocks, chunks skipped, across two spans */
        {6, 4, 1, 32, 2100, 30},   /* the first span before every row's window */
    };
    for (const acase &a : cases) run_case(a);
    run_combine(1, 3, 128);
    run_combine(66, 2, 128);  /* two staged tiles (64 chunks a tile at hd 128) */
    run_combine(1300, 2, 16); /* tiles of 512 chunks; a second tile of weights (COMB_W) */
    run_combine(200, 1, 256); /* 32 chunks a tile; two dims a thread */
    if (failures) {
        fprintf(stderr, "cuemu attention (whole): %d checks failed\n", failures);
        return 1;
    }
    printf("cuemu attention (whole): every launch shape within 1e-5 of the reference, the same-bits switches the "
           "default's bits, rows alone the batch's\n");
    return 0;
}
