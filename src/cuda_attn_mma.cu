// cuda_attn_mma: the split attention over the KV cache (decode, verify and
// drafter blocks) on tensor cores, cu_attention's kernel under
// DSPARK_CUDA_ATT_MMA=1 (declared in cuda_ops.cuh).
#include <cuda_runtime.h>

#include <math.h>

#include "cuda_ops.cuh"

/* The same partials as k_attn_rows (cuda_attn.cu): per row, query head and
   chunk of ATT_CHUNK positions, the chunk's max score, sum of exponentials
   and unnormalised output, which k_attn_combine merges; nb blocks per kv
   head take its chunks in turn up to the last visible position. What
   differs is the arithmetic. A block holds up to AMMA_VT tiles of 16 query
   vectors (vector v = row v / G, head v % G of the kv head; rows in
   groups of AMMA_VT * 16 / G, grid.y) and, for each staged chunk:

   1. scores: Q (16 x hd, a tile) times K^T (hd x 8, a position tile) on
      mma.sync m16n8k8 TF32, three products a step (hi.hi, hi.lo, lo.hi of
      tf32_cut's halves) in three accumulators, each over the head dim in
      order, added as hh + (hl + lh), into shared memory;
   2. softmax: a warp a vector, lane l positions l and l + 32, the scaled
      score, the warp's max, exp(s - max) and the warp's sum, as
      k_attn_rows does it, the weights P written back in place;
   3. output: P (16 x 64) times V (64 x 8, a dim tile), the same three
      products over the chunk's positions in order, added the same way,
      stored as the chunk's partial output.

   (vector tile, position tile) and (vector tile, dim tile) pairs are dealt
   to the warps, N adjacent tiles a warp at a time, N chosen from the
   number of vector tiles so the 8 warps have work at one row; which warp
   computes a pair, and which other tiles share its instructions, do not
   enter an element's arithmetic (an mma's output element is its own A row
   times its own B column), so a row gives the same bits in any batch,
   alone as a decode step or inside a verify. Masked positions weigh
   exactly zero against finite V: a chunk's rows past the last visible
   position are zeroed in V (K's are masked out of the scores).

   Why: a verify row's query heads share every K/V value, and k_attn_rows
   computes each (row, head) pair's dot products on CUDA cores, two items a
   warp in turn at 9-16 rows; the 16-row attention costs about 11 us a
   layer more than one row's (docs/BENCHMARKS.md, "A decode step kernel by
   kernel"). Here 16 rows of 4 heads are 4 vector tiles: 3 x 4 x 8 x 16 mmas
   for the scores and as many for the output, a chunk, spread over the 8
   warps. */
#define AMMA_THREADS 256
#define AMMA_WARPS (AMMA_THREADS / 32)
#define AMMA_VT 4                  /* vector tiles a block at most */
#define AMMA_SP (ATT_CHUNK + 4)    /* P's row stride: lane quads on distinct banks */

static_assert(ATT_CHUNK == 64, "a softmax lane takes positions l and l + 32; 8 position tiles a chunk");

/* floats of a block's shared memory: st stages of K (rows of HD + 4: the
   B-operand reads by rows g hit distinct banks) and V (rows of HD + 8:
   those by rows t do), the query tiles and the weights. Head dims 16, 32,
   64 and 128 (the test models' and Qwen3's). */
static size_t amma_smem(int HD, int nt, int st) {
    return sizeof(float) * ((size_t)st * ATT_CHUNK * (2 * HD + 12) + (size_t)nt * 16 * (HD + 4 + AMMA_SP));
}

/* the three-product sum of one mma element */
__device__ __forceinline__ float amma_sum(float hh, float hl, float lh) { return hh + (hl + lh); }

/* acc[n] += a . b[n] in three accumulators (hi.hi, hi.lo, lo.hi) */
template <int N>
__device__ __forceinline__ void amma3(float (&hh)[N][4], float (&hl)[N][4], float (&lh)[N][4], const tf32x2 (&a)[4],
                                      const tf32x2 (&b)[N][2]) {
#pragma unroll
    for (int n = 0; n < N; n++) {
        mma_tf32(hh[n], a[0].h, a[1].h, a[2].h, a[3].h, b[n][0].h, b[n][1].h);
        mma_tf32(hl[n], a[0].h, a[1].h, a[2].h, a[3].h, b[n][0].l, b[n][1].l);
        mma_tf32(lh[n], a[0].l, a[1].l, a[2].l, a[3].l, b[n][0].h, b[n][1].h);
    }
}

template <int N> __device__ __forceinline__ void amma_zero(float (&x)[N][4]) {
#pragma unroll
    for (int n = 0; n < N; n++) x[n][0] = x[n][1] = x[n][2] = x[n][3] = 0.0f;
}

/* an A fragment (rows g, g + 8 of a 16-row tile at a, columns k + t and
   k + t + 4; stride in floats) */
__device__ __forceinline__ void amma_afrag(tf32x2 (&a)[4], const float *r, int stride) {
    a[0] = tf32_cut(r[0]);
    a[1] = tf32_cut(r[8 * stride]);
    a[2] = tf32_cut(r[4]);
    a[3] = tf32_cut(r[8 * stride + 4]);
}

/* step 1 for vector tile vt and position tiles n0 .. n0 + N - 1: the raw
   scores into Ss (row v, column p) */
template <int HD, int N>
__device__ __forceinline__ void amma_scores(const float *Qs, const float *Ks, float *Ss, int vt, int n0, int g, int t) {
    constexpr int KS = HD + 4;
    float hh[N][4], hl[N][4], lh[N][4];
    amma_zero(hh), amma_zero(hl), amma_zero(lh);
    const float *qa = Qs + (vt * 16 + g) * KS + t;
#pragma unroll 4
    for (int k = 0; k < HD / 8; k++) {
        tf32x2 a[4], b[N][2];
        amma_afrag(a, qa + 8 * k, KS);
#pragma unroll
        for (int n = 0; n < N; n++) {
            const float *kr = Ks + (8 * (n0 + n) + g) * KS + 8 * k + t; /* B[k][n] = K[position n][dim k] */
            b[n][0] = tf32_cut(kr[0]);
            b[n][1] = tf32_cut(kr[4]);
        }
        amma3(hh, hl, lh, a, b);
    }
#pragma unroll
    for (int n = 0; n < N; n++) {
        float *s = Ss + (vt * 16 + g) * AMMA_SP + 8 * (n0 + n) + 2 * t;
        *reinterpret_cast<float2 *>(s) = make_float2(amma_sum(hh[n][0], hl[n][0], lh[n][0]),
                                                     amma_sum(hh[n][1], hl[n][1], lh[n][1]));
        *reinterpret_cast<float2 *>(s + 8 * AMMA_SP) = make_float2(amma_sum(hh[n][2], hl[n][2], lh[n][2]),
                                                                   amma_sum(hh[n][3], hl[n][3], lh[n][3]));
    }
}

/* where vector v's partials go (slot), or -1 where it has none in this
   chunk (a padding vector, or a row that sees no position of it) */
struct amma_rows {
    int mrow0, nv, G, nh, kvh, nchunk, m0, M, causal, len;
    /* positions vector v's row sees */
    __device__ __forceinline__ int seen(int v) const { return len + (causal ? mrow0 + v / G + 1 : M); }
    __device__ __forceinline__ long slot(int v, int c) const {
        if (v >= nv || c * ATT_CHUNK >= seen(v)) return -1;
        return ((long)(mrow0 + v / G - m0) * nh + kvh * G + v % G) * nchunk + c;
    }
    /* positions of chunk c vector v sees */
    __device__ __forceinline__ int np(int v, int c) const {
        const int L = seen(v) - c * ATT_CHUNK;
        return L < ATT_CHUNK ? L : ATT_CHUNK;
    }
};

/* step 3 for vector tile vt and dim tiles j0 .. j0 + N - 1: the partial
   outputs of the tile's vectors that have them */
template <int HD, int N>
__device__ __forceinline__ void amma_pv(const float *Ps, const float *Vs, float *opart, const amma_rows &rw, int c,
                                        int vt, int j0, int g, int t) {
    constexpr int VS = HD + 8;
    float hh[N][4], hl[N][4], lh[N][4];
    amma_zero(hh), amma_zero(hl), amma_zero(lh);
    const float *pa = Ps + (vt * 16 + g) * AMMA_SP + t;
#pragma unroll
    for (int kk = 0; kk < ATT_CHUNK / 8; kk++) {
        tf32x2 a[4], b[N][2];
        amma_afrag(a, pa + 8 * kk, AMMA_SP);
#pragma unroll
        for (int n = 0; n < N; n++) {
            const float *vr = Vs + (8 * kk + t) * VS + 8 * (j0 + n) + g; /* B[k][n] = V[position k][dim n] */
            b[n][0] = tf32_cut(vr[0]);
            b[n][1] = tf32_cut(vr[4 * VS]);
        }
        amma3(hh, hl, lh, a, b);
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const long slot = rw.slot(vt * 16 + g + 8 * h, c);
        if (slot < 0) continue;
        float *dst = opart + slot * HD + 2 * t;
#pragma unroll
        for (int n = 0; n < N; n++)
            *reinterpret_cast<float2 *>(dst + 8 * (j0 + n)) =
                make_float2(amma_sum(hh[n][2 * h], hl[n][2 * h], lh[n][2 * h]),
                            amma_sum(hh[n][2 * h + 1], hl[n][2 * h + 1], lh[n][2 * h + 1]));
    }
}

/* grid (nkv x nb, row groups of rg rows), AMMA_THREADS threads; nt: vector
   tiles the shared memory holds (the largest group's); two: two K/V
   stages (the next chunk's copy in flight while one is used), else one */
template <int HD>
__global__ void __launch_bounds__(AMMA_THREADS, 1)
    k_attn_mma(const float *q, const float *kc, const float *vc, float *opart, float *mpart, float *spart, int nh,
               int nkv, int cap, const int *d_len, int M, float scale, int nchunk, int m0, int causal, int first,
               int rg, int nt_max, int two, int early, cu_pf pf) {
    constexpr int KS = HD + 4, VS = HD + 8, H4 = HD / 4, STAGE = ATT_CHUNK * (KS + VS);
    pdl_trigger();
    if (pf.n[0] && blockIdx.y == 0) l2_prefetch(pf, blockIdx.x, gridDim.x);
    DYN_SMEM(float4, amma_sm4);
    float *sm = reinterpret_cast<float *>(amma_sm4);
    float *Qs = sm + (two ? 2 : 1) * STAGE, *Ps = Qs + nt_max * 16 * KS;
    const int G = nh / nkv, nb = gridDim.x / nkv, kvh = blockIdx.x / nb;
    const int R = M - m0 < ATT_ROWS ? M - m0 : ATT_ROWS; /* rows of this launch */
    const int mrow0 = m0 + blockIdx.y * rg, rows = m0 + R - mrow0 < rg ? m0 + R - mrow0 : rg;
    const int nv = rows * G, nt = (nv + 15) / 16;
    const amma_rows rw = {mrow0, nv, G, nh, kvh, nchunk, m0, M, causal, *d_len + first};
    const int Lmax = rw.seen(nv - 1); /* positions the block's last row sees */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    /* chunk c's K and V into stage buf as one cp.async group; V's rows past
       the last visible position zeroed */
    auto issue = [&](int c, int buf) {
        const int p0 = c * ATT_CHUNK, nmax = Lmax - p0 < ATT_CHUNK ? Lmax - p0 : ATT_CHUNK;
        float *ks = sm + buf * STAGE, *vs = ks + ATT_CHUNK * KS;
        const float *kg = kc + ((size_t)kvh * cap + p0) * HD, *vg = vc + ((size_t)kvh * cap + p0) * HD;
        for (int i = threadIdx.x; i < nmax * H4; i += AMMA_THREADS) {
            const int p = i / H4, d = 4 * (i % H4);
            cp_async16(ks + p * KS + d, kg + 4 * (size_t)i);
            cp_async16(vs + p * VS + d, vg + 4 * (size_t)i);
        }
        for (int i = threadIdx.x; i < (ATT_CHUNK - nmax) * H4; i += AMMA_THREADS)
            *reinterpret_cast<float4 *>(vs + (nmax + i / H4) * VS + 4 * (i % H4)) = make_float4(0, 0, 0, 0);
        cp_async_commit();
    };
    int c = blockIdx.x % nb, buf = 0;
    auto valid = [&](int ch) { return ch < nchunk && ch * ATT_CHUNK < Lmax; };
    /* early: the first chunk, when all of it was written before this forward */
    const int pre = early && valid(c) && (c + 1) * ATT_CHUNK <= *d_len;
    if (pre) issue(c, 0);
    pdl_wait();
    /* the query tiles, padding vectors zero */
    for (int i = threadIdx.x; i < nt * 16 * H4; i += AMMA_THREADS) {
        const int v = i / H4, d = 4 * (i % H4);
        float4 x = make_float4(0, 0, 0, 0);
        if (v < nv) x = *reinterpret_cast<const float4 *>(q + ((size_t)(mrow0 + v / G) * nh + kvh * G + v % G) * HD + d);
        *reinterpret_cast<float4 *>(Qs + v * KS + d) = x;
    }
    if (valid(c) && !pre) issue(c, 0);
    /* tiles a warp takes at a time: enough pairs for the 8 warps at one
       vector tile, more tiles a pair (shared A fragments) at more */
    const int ns = nt == 1 ? 1 : 2, nsu = nt * (8 / ns);
    const int npv = nt * (HD / 8) >= 32 ? 4 : nt * (HD / 8) >= 16 ? 2 : 1, npu = nt * (HD / 8) / npv;
    for (; valid(c); c += nb) {
        if (two && valid(c + nb)) {
            issue(c + nb, buf ^ 1);
            cp_async_wait_one();
        } else {
            cp_async_wait_all();
        }
        __syncthreads(); /* the chunk (and the query tiles) are in */
        const float *Ks = sm + buf * STAGE, *Vs = Ks + ATT_CHUNK * KS;
        for (int u = warp; u < nsu; u += AMMA_WARPS) {
            if (ns == 1) amma_scores<HD, 1>(Qs, Ks, Ps, u / 8, u % 8, g, t);
            else amma_scores<HD, 2>(Qs, Ks, Ps, u / 4, 2 * (u % 4), g, t);
        }
        __syncthreads(); /* the scores are in */
        for (int v = warp; v < nt * 16; v += AMMA_WARPS) {
            float *s = Ps + v * AMMA_SP;
            const long slot = rw.slot(v, c);
            if (slot < 0) { /* no weights: exact zeros against V */
                s[lane] = s[lane + 32] = 0.0f;
                continue;
            }
            const int np = rw.np(v, c);
            const float s0 = lane < np ? s[lane] * scale : -INFINITY, s1 = lane + 32 < np ? s[lane + 32] * scale : -INFINITY;
            const float mx = warp_max(fmaxf(s0, s1));
            const float e0 = lane < np ? expf(s0 - mx) : 0.0f, e1 = lane + 32 < np ? expf(s1 - mx) : 0.0f;
            const float sum = warp_sum(e0 + e1);
            s[lane] = e0;
            s[lane + 32] = e1;
            if (lane == 0) {
                mpart[slot] = mx;
                spart[slot] = sum;
            }
        }
        __syncthreads(); /* the weights are in */
        for (int u = warp; u < npu; u += AMMA_WARPS) {
            const int per = HD / 8 / npv, vt = u / per, j0 = (u % per) * npv;
            if (npv == 4) amma_pv<HD, 4>(Ps, Vs, opart, rw, c, vt, j0, g, t);
            else if (npv == 2) amma_pv<HD, 2>(Ps, Vs, opart, rw, c, vt, j0, g, t);
            else amma_pv<HD, 1>(Ps, Vs, opart, rw, c, vt, j0, g, t);
        }
        __syncthreads(); /* this stage's and the weights' readers are done */
        if (two) buf ^= 1;
        else if (valid(c + nb)) issue(c + nb, 0);
    }
}

/* DSPARK_CUDA_ATT_MMA=1 (env_switch; cu_attention_mma at any time): off by
   default until measured, docs/BENCHMARKS.md "A decode step kernel by
   kernel". The switch is read per call, never per row count, so decode
   and verify rows always share a kernel. */
static int mma_mode(int set, int on) {
    static int mode = -2;
    return env_switch(&mode, "DSPARK_CUDA_ATT_MMA", set, on);
}

int cu_attention_mma(int on) { return mma_mode(1, on); }

int cu_attn_mma_takes(int nh, int nkv, int hd) {
    return mma_mode(0, 0) > 0 && (hd == 16 || hd == 32 || hd == 64 || hd == 128) && nkv > 0 && nh % nkv == 0 &&
           nh / nkv <= ATT_MAX_G;
}

/* the largest dynamic shared memory a block may take (raised once) */
template <int HD> static int amma_optin(void) {
    static int optin = 0;
    if (!optin) optin = smem_optin(k_attn_mma<HD>);
    return optin;
}

template <int HD>
static void amma_launch(cudaStream_t st, float *opart, float *mpart, float *spart, const float *q, const float *kc,
                        const float *vc, int M, int nh, int nkv, int cap, const int *d_len, float scale, int nchunk,
                        int m0, int causal, int first, int early, cu_pf pf) {
    const int G = nh / nkv, R = M - m0 < ATT_ROWS ? M - m0 : ATT_ROWS;
    int rg = AMMA_VT * 16 / G;
    if (rg > ATT_ROWS) rg = ATT_ROWS;
    const int rows = R < rg ? R : rg, nt = (rows * G + 15) / 16;
    const int optin = amma_optin<HD>(), two = amma_smem(HD, nt, 2) <= (size_t)optin;
    const int nb = cu_attn_blocks(nkv, nchunk, 1);
    launch_smem(k_attn_mma<HD>, dim3(nkv * nb, (R + rg - 1) / rg), AMMA_THREADS, amma_smem(HD, nt, two ? 2 : 1), st, q,
                kc, vc, opart, mpart, spart, nh, nkv, cap, d_len, M, scale, nchunk, m0, causal, first, rg, nt, two,
                early, pf);
}

void cu_attention_mma_pass(cudaStream_t st, float *opart, float *mpart, float *spart, const float *q, const float *kc,
                           const float *vc, int M, int nh, int nkv, int hd, int cap, const int *d_len, float scale,
                           int nchunk, int m0, int causal, int first, int early, cu_pf pf) {
    auto run = hd == 16 ? amma_launch<16> : hd == 32 ? amma_launch<32> : hd == 64 ? amma_launch<64> : amma_launch<128>;
    run(st, opart, mpart, spart, q, kc, vc, M, nh, nkv, cap, d_len, scale, nchunk, m0, causal, first, early, pf);
}
