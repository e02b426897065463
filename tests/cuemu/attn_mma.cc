// The tensor-core split attention (src/cuda_attn_mma.cu, DSPARK_CUDA_ATT_MMA=1)
// run on the CPU by emu.h: every partial (a row's, head's and chunk's max
// score, sum of exponentials and unnormalised output) against a double
// reference, for decode and verify widths, one to eight query heads a kv
// head, head dims 16-128, causal and block (non-causal) rows, one and two
// K/V stages, the first chunk requested before the wait or after; and
// every row of a batch alone (a decode step at its position) giving the
// batch's partials bit for bit, which checks that a row's slot, mask and
// vector tile do not depend on the batch. Shared memory starts as NaNs and
// cp.async copies land only at their wait, so a read of a stage before
// its data, of a row the kernel should have zeroed, or of a weight before
// the softmax wrote it shows as a wrong or NaN partial.
#include "../../src/cuda_attn_mma.cu"

#include "check.h"
#include "no_ops.h"

struct acase {
    int M, nh, nkv, hd, np, causal;
};

/* the partials of rows m0.. of one pass, as cu_attention lays them out */
struct parts {
    std::vector<float> buf;
    float *o, *m, *s;
    parts(int nh, int hd, int nchunk) {
        const size_t slots = (size_t)ATT_ROWS * nh * nchunk;
        buf.assign(slots * (hd + 2), NAN);
        o = buf.data(), m = o + slots * hd, s = m + slots;
    }
};

/* one pass of rows m0 .. m0 + ATT_ROWS - 1 of q (M rows) at n_past */
static void run_pass(parts &p, const acase &a, const float *q, int M, const std::vector<float> &k,
                     const std::vector<float> &v, int cap, int n_past, int m0, int early) {
    const int nchunk = (cap + ATT_CHUNK - 1) / ATT_CHUNK;
    const float scale = 1.0f / sqrtf((float)a.hd);
    std::fill(p.buf.begin(), p.buf.end(), NAN);
    cu_attention_mma_pass(nullptr, p.o, p.m, p.s, q, k.data(), v.data(), M, a.nh, a.nkv, a.hd, cap, &n_past, scale,
                          nchunk, m0, a.causal, 0, early, cu_pf{});
}

/* checks one pass's partials against the double reference; returns the
   largest relative error of an output */
static double check_pass(const parts &p, const acase &a, const float *q, int M, const std::vector<float> &k,
                         const std::vector<float> &v, int cap, int n_past, int m0) {
    const int nchunk = (cap + ATT_CHUNK - 1) / ATT_CHUNK, G = a.nh / a.nkv, hd = a.hd;
    const double scale = 1.0 / sqrt((double)hd);
    const int R = M - m0 < ATT_ROWS ? M - m0 : ATT_ROWS;
    double worst = 0;
    std::vector<double> o(hd);
    for (int r = 0; r < R; r++) {
        const int m = m0 + r, L = n_past + (a.causal ? m + 1 : M);
        for (int h = 0; h < a.nh; h++) {
            const float *qv = q + ((size_t)m * a.nh + h) * hd;
            const int kvh = h / G;
            for (int c = 0; c * ATT_CHUNK < L; c++) {
                const int p0 = c * ATT_CHUNK, n = L - p0 < ATT_CHUNK ? L - p0 : ATT_CHUNK;
                std::vector<double> sc(n);
                double mx = -INFINITY;
                for (int i = 0; i < n; i++) {
                    const float *kp = &k[((size_t)kvh * cap + p0 + i) * hd];
                    double d = 0;
                    for (int j = 0; j < hd; j++) d += (double)qv[j] * kp[j];
                    sc[i] = d * scale;
                    mx = sc[i] > mx ? sc[i] : mx;
                }
                double sum = 0;
                std::fill(o.begin(), o.end(), 0.0);
                for (int i = 0; i < n; i++) {
                    const double e = exp(sc[i] - mx);
                    sum += e;
                    const float *vp = &v[((size_t)kvh * cap + p0 + i) * hd];
                    for (int j = 0; j < hd; j++) o[j] += e * vp[j];
                }
                const size_t slot = ((size_t)r * a.nh + h) * nchunk + c;
                EXPECT(fabs(p.m[slot] - mx) <= 1e-5 * (1 + fabs(mx)),
                       "M=%d nh=%d nkv=%d hd=%d np=%d causal=%d: row %d head %d chunk %d max %.9g, want %.9g", M, a.nh,
                       a.nkv, hd, n_past, a.causal, m, h, c, p.m[slot], mx);
                EXPECT(fabs(p.s[slot] - sum) <= 1e-5 * sum,
                       "M=%d nh=%d nkv=%d hd=%d np=%d causal=%d: row %d head %d chunk %d sum %.9g, want %.9g", M, a.nh,
                       a.nkv, hd, n_past, a.causal, m, h, c, p.s[slot], sum);
                double big = 0, err = 0;
                for (int j = 0; j < hd; j++) {
                    big = fmax(big, fabs(o[j]));
                    const double d = fabs(p.o[slot * hd + j] - o[j]);
                    err = d > err || d != d ? (d != d ? INFINITY : d) : err;
                }
                const double rel = err / (big > 0 ? big : 1);
                EXPECT(rel <= 1e-5, "M=%d nh=%d nkv=%d hd=%d np=%d causal=%d: row %d head %d chunk %d output off by %.3g",
                       M, a.nh, a.nkv, hd, n_past, a.causal, m, h, c, rel);
                worst = rel > worst ? rel : worst;
            }
        }
    }
    return worst;
}

static void run_case(const acase &a, int early) {
    const int cap = a.np + a.M + 5, hd = a.hd, nchunk = (cap + ATT_CHUNK - 1) / ATT_CHUNK;
    std::vector<float> q((size_t)a.M * a.nh * hd), k((size_t)a.nkv * cap * hd), v(k.size());
    for (float &x : q) x = frand();
    for (float &x : k) x = frand();
    for (float &x : v) x = frand();
    parts batch(a.nh, hd, nchunk), alone(a.nh, hd, nchunk);
    double worst = 0;
    for (int m0 = 0; m0 < a.M; m0 += ATT_ROWS) {
        run_pass(batch, a, q.data(), a.M, k, v, cap, a.np, m0, early);
        const double w = check_pass(batch, a, q.data(), a.M, k, v, cap, a.np, m0);
        worst = w > worst ? w : worst;
        if (!a.causal) continue; /* a block's rows all see the whole block: no row stands alone */
        const int R = a.M - m0 < ATT_ROWS ? a.M - m0 : ATT_ROWS;
        for (int r = 0; r < R; r++) {
            const int m = m0 + r;
            run_pass(alone, a, q.data() + (size_t)m * a.nh * hd, 1, k, v, cap, a.np + m, 0, early);
            const int L = a.np + m + 1;
            for (int h = 0; h < a.nh; h++)
                for (int c = 0; c * ATT_CHUNK < L; c++) {
                    const size_t sb = ((size_t)r * a.nh + h) * nchunk + c, sa = (size_t)h * nchunk + c;
                    EXPECT(!memcmp(&batch.o[sb * hd], &alone.o[sa * hd], sizeof(float) * hd) &&
                               !memcmp(&batch.m[sb], &alone.m[sa], 4) && !memcmp(&batch.s[sb], &alone.s[sa], 4),
                           "M=%d nh=%d nkv=%d hd=%d np=%d: row %d head %d chunk %d alone differs from the batch's",
                           a.M, a.nh, a.nkv, hd, a.np, m, h, c);
                }
        }
    }
    printf("  M=%-2d nh=%-2d nkv=%d hd=%-3d n_past=%-4d causal=%d early=%d: worst output error %.2g\n", a.M, a.nh, a.nkv,
           hd, a.np, a.causal, early, worst);
}

/* argv[1] "one-stage": a device whose shared memory holds one K/V stage
   (the launcher's choice is cached per head dim, so a process of its own) */
int main(int argc, char **argv) {
    /* M, nh, nkv, hd, n_past, causal */
    const acase cases[] = {
        {1, 8, 2, 128, 200, 1},  /* decode, one vector tile of 4 used */
        {16, 8, 2, 128, 130, 1}, /* a 16-row verify: 4 vector tiles */
        {9, 4, 1, 64, 63, 1},    /* 36 vectors: 3 tiles; the cache ends a position before a chunk */
        {5, 16, 2, 32, 64, 1},   /* G 8: 5 rows = 40 vectors, the test models' head dim */
        {12, 16, 2, 16, 3, 1},   /* G 8: row groups of 8 (two), a cache shorter than a chunk */
        {33, 2, 2, 32, 7, 1},    /* G 1: 33 rows, two passes */
        {3, 6, 2, 64, 100, 1},   /* G 3: vectors across tile edges */
        {7, 4, 2, 32, 90, 0},    /* a drafter's block: every row sees the whole block */
    };
    /* three SMs (read once, at the first launch): one block a kv head
       takes every chunk where there are two kv heads or more, so each
       stage is refilled several times; three share one kv head's chunks
       in turn otherwise */
    emu::sms = 3;
    const int one = argc > 1 && !strcmp(argv[1], "one-stage");
    if (one) emu::smem_optin = 120000; /* head dim 128 then fits one stage, not two */
    for (int early = 0; early < 2; early++)
        for (const acase &a : cases)
            if (!one || a.hd == 128) run_case(a, early);
    if (failures) {
        fprintf(stderr, "cuemu attention: %d checks failed\n", failures);
        return 1;
    }
    printf("cuemu attention%s: all partials within 1e-5 of the reference, rows alone the batch's bits\n",
           one ? " (one K/V stage)" : "");
    return 0;
}
