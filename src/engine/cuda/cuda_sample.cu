// cuda_sample: sampler_rows (sampler.h) on the device, so a sampled decode
// or verify reads back token ids instead of vocabulary-wide logits rows.
//
// A cluster of SMP_CLUSTER blocks per logits row, each block a slice of the
// vocabulary, combining their sums through distributed shared memory. The
// softmax numerators e = exp((logit - max) / T) go to a scratch row; every
// mass is a sum of integer weights
// W = floor(e * 2^S) (e <= 1, S chosen so a row's sum stays below 2^62),
// exact in any order, so the kept set and the draws are deterministic
// however the threads' additions interleave. The filters keep a prefix of
// the (e descending, id ascending) order, as the host's do:
//   top-k: the largest key v (the bits of e, monotone for e >= 0) with at
//          least k tokens at or above it, found digit by digit from the
//          top (bits 29-19, 18-8, 7-0 of the key: three passes over the
//          row, each a histogram of the tokens that share the digits found
//          so far); of the tokens tied at v, the first ones in id order;
//   top-p: the same search over mass: the largest v whose tokens at or
//          above it carry top_p of the kept mass;
//   min-p: e >= min_p (the top token's e is exp(0) = 1).
// Dropped tokens get e = 0. A draw walks the kept tokens in id order until
// the running weight passes u times the kept mass: each thread sums a
// contiguous part of the ids, a scan over the cluster finds the part
// holding the target, and its thread walks it. The scratch rows are padded with zeros
// to whole float4s, so the unordered passes load 16 bytes at a time.
#include <cooperative_groups.h>

#include "engine/cuda/cuda_ops.cuh"

#define SMP_THREADS 512
#define SMP_WARPS (SMP_THREADS / 32)
#define SMP_SUMS 2    /* most sums one cluster reduction carries */
#define SMP_BINS 2048 /* bins of a cut's digit histogram (11 bits) */

#define SMP_CLUSTER 8 /* blocks per row, one slice of the vocabulary each */

namespace cg = cooperative_groups;
typedef unsigned long long u64;

__device__ __forceinline__ u64 warp_sum64(u64 v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ u64 weight(float e, float scale) { return __float2ull_rz(e * scale); }

/* A block's share of a row: the float4s [q0, q1) of the scratch row e, ids
   4 q0 .. 4 q1 - 1; and the shared memory its reductions use. Every
   cluster-wide reduction publishes the block's part in one of two buffers
   (alternating), so one cluster barrier per reduction suffices: a block
   reuses a buffer only after every block passed the next reduction's
   barrier, which each reaches after reading the previous one. */
struct slice {
    float *e;
    int q0, q1;
    u64 *sm;      /* [SMP_WARPS][SMP_SUMS] */
    u64 *cx;      /* [2][SMP_SUMS]: what the block publishes */
    u64 *bc;      /* [SMP_SUMS]: the cluster's sums, for the block */
    u64 *hist;    /* [2][SMP_BINS]: the block's digit histograms, by turns */
    int flip;
};

/* f(e, i) for every element of the block's share (two float4 loads in
   flight per thread) */
template <typename F>
__device__ __forceinline__ void each4(const slice &s, F f) {
    const float4 *e4 = reinterpret_cast<const float4 *>(s.e);
    for (int q = s.q0 + threadIdx.x; q < s.q1; q += 2 * SMP_THREADS) {
        int q2 = q + SMP_THREADS;
        float4 x = e4[q], y = q2 < s.q1 ? e4[q2] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        f(x.x, 4 * q), f(x.y, 4 * q + 1), f(x.z, 4 * q + 2), f(x.w, 4 * q + 3);
        if (q2 < s.q1) f(y.x, 4 * q2), f(y.y, 4 * q2 + 1), f(y.z, 4 * q2 + 2), f(y.w, 4 * q2 + 3);
    }
}

/* the block's sums of v[0..N) (every thread gets them) */
template <int N>
__device__ void block_sums(u64 (&v)[N], u64 *sm) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll
    for (int b = 0; b < N; b++) v[b] = warp_sum64(v[b]);
    if (lane == 0)
#pragma unroll
        for (int b = 0; b < N; b++) sm[w * N + b] = v[b];
    __syncthreads();
#pragma unroll
    for (int b = 0; b < N; b++) {
        u64 s = 0;
        for (int i = 0; i < SMP_WARPS; i++) s += sm[i * N + b];
        v[b] = s;
    }
    __syncthreads();
}

/* Thread-block clusters (and the distributed shared memory they share)
   exist from compute capability 9.0: a build for an older GPU compiles the
   sampler to a trap, and the backend never launches it there
   (cuda_model_samples). */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
/* the cluster's sums of v[0..N) over its blocks' parts p[N] (block totals,
   the same in every thread of a block); with below, the sums over the
   blocks of lower rank only */
template <int N>
__device__ void cluster_combine(u64 (&p)[N], slice &s, bool below) {
    static_assert(N <= SMP_SUMS, "the exchange buffers' size");
    cg::cluster_group cl = cg::this_cluster();
    u64 *mine = s.cx + s.flip * SMP_SUMS;
    s.flip ^= 1;
    if (threadIdx.x < N) mine[threadIdx.x] = p[threadIdx.x];
    cl.sync();
    if (threadIdx.x < N) {
        u64 t = 0;
        int nr = below ? (int)cl.block_rank() : SMP_CLUSTER;
        for (int r = 0; r < nr; r++) t += cl.map_shared_rank(mine, r)[threadIdx.x];
        s.bc[threadIdx.x] = t;
    }
    __syncthreads();
#pragma unroll
    for (int b = 0; b < N; b++) p[b] = s.bc[b];
    __syncthreads();
}

template <int N>
__device__ void cluster_sums(u64 (&v)[N], slice &s) {
    block_sums<N>(v, s.sm);
    cluster_combine<N>(v, s, false);
}

/* the sum of v over the threads before this one in the block; the
   block's total in *all (when not NULL) */
__device__ u64 block_excl_scan(u64 v, u64 *sm, u64 *all) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    u64 inc = v;
    for (int o = 1; o < 32; o <<= 1) {
        u64 y = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += y;
    }
    if (lane == 31) sm[w] = inc;
    __syncthreads();
    u64 before = 0, tot = 0;
    for (int i = 0; i < SMP_WARPS; i++) {
        if (i < w) before += sm[i];
        tot += sm[i];
    }
    __syncthreads();
    if (all) *all = tot;
    return before + inc - v;
}

/* the sum of v over the threads before this one in the cluster (block
   rank, then thread order) */
__device__ u64 cluster_excl_scan(u64 v, slice &s) {
    u64 tot[1];
    u64 before = block_excl_scan(v, s.sm, &tot[0]);
    cluster_combine<1>(tot, s, true);
    return tot[0] + before;
}

__device__ u64 cluster_mass(slice &s, float scale) {
    u64 v[1] = {0};
    each4(s, [&](float x, int) { v[0] += weight(x, scale); });
    cluster_sums<1>(v, s);
    return v[0];
}

/* The largest key v with S(>= v) >= target (target >= 1, <= S(>= 0)),
   S(>= t) being the count (MASS false) or weight of the tokens whose key
   (the bits of e, below 2^30 for e <= 1) is >= t; S(> v) in *above,
   S(>= v) in *at. v is found a digit at a time from the top (bits 29-19,
   18-8, 7-0): a pass histograms the digit of the tokens whose higher
   digits are those found so far, the cluster adds the blocks'
   histograms, and the digit is the highest bin where the running sum
   from the top (above the prefix's range, then bin by bin down) reaches
   target. Sums of integers: the same in any order. The passes use the two
   histogram buffers by turns, so one cluster barrier a pass suffices: a
   block clears a buffer only after the barrier of the pass in between,
   which every block reaches after reading it; callers put a cluster
   barrier between two searches (cluster_mass has one). */
template <bool MASS>
__device__ unsigned find_cut(slice &sl, float scale, u64 target, u64 *above, u64 *at) {
    cg::cluster_group cl = cg::this_cluster();
    const int shifts[3] = {19, 8, 0}, widths[3] = {11, 11, 8};
    __shared__ u64 found[3]; /* the cut bin, the sum above it, its own */
    unsigned pre = 0; /* the digits found so far */
    u64 acc = 0, hv = 0; /* S(> the prefix's range); the cut bin's sum */
    for (int r = 0; r < 3; r++) {
        const int sh = shifts[r], nb = 1 << widths[r], top = sh + widths[r];
        u64 *hist = sl.hist + (r & 1) * SMP_BINS;
        for (int i = threadIdx.x; i < nb; i += SMP_THREADS) hist[i] = 0;
        __syncthreads();
        /* count mode: 32-bit counts (the hardware adds them; a 64-bit add
           is a compare-and-swap loop), tokens of key 0 (dropped, padding)
           counted apart */
        unsigned *hc = reinterpret_cast<unsigned *>(hist), zeros = 0;
        each4(sl, [&](float x, int) {
            unsigned k = __float_as_uint(x);
            if ((k >> top) != pre) return;
            if (MASS) {
                u64 a = weight(x, scale);
                if (a) atomicAdd(&hist[(k >> sh) & (nb - 1)], a);
            } else if (k == 0) {
                zeros++;
            } else {
                atomicAdd(&hc[(k >> sh) & (nb - 1)], 1u);
            }
        });
        if (!MASS) {
            zeros = (unsigned)warp_sum64(zeros);
            if ((threadIdx.x & 31) == 0 && zeros) atomicAdd(&hc[0], zeros);
        }
        __syncthreads();
        cl.sync(); /* every block's histogram is complete */
        /* thread t: the cluster's sums of bins nb-1-c t .. nb-c (t+1), from the top */
        const int c = (nb + SMP_THREADS - 1) / SMP_THREADS;
        u64 h[(SMP_BINS + SMP_THREADS - 1) / SMP_THREADS], mine = 0;
#pragma unroll
        for (int i = 0; i < (SMP_BINS + SMP_THREADS - 1) / SMP_THREADS; i++) {
            int b = nb - 1 - ((int)threadIdx.x * c + i);
            h[i] = 0;
            if (i < c && b >= 0)
                for (int q = 0; q < SMP_CLUSTER; q++)
                    h[i] += MASS ? cl.map_shared_rank(hist, q)[b] : (u64)cl.map_shared_rank(hc, q)[b];
            mine += h[i];
        }
        u64 cum = acc + block_excl_scan(mine, sl.sm, NULL);
#pragma unroll
        for (int i = 0; i < (SMP_BINS + SMP_THREADS - 1) / SMP_THREADS; i++) {
            int b = nb - 1 - ((int)threadIdx.x * c + i);
            if (i < c && b >= 0 && cum < target && cum + h[i] >= target) { /* one thread, one bin */
                found[0] = (u64)b;
                found[1] = cum;
                found[2] = h[i];
            }
            cum += h[i];
        }
        __syncthreads();
        pre = (pre << widths[r]) | (unsigned)found[0];
        acc = found[1];
        hv = found[2];
        __syncthreads();
    }
    *above = acc;
    *at = acc + hv;
    return pre;
}

/* The ids [c0, c1) of this thread's contiguous part of the block's share
   (for the passes that go in id order) */
__device__ __forceinline__ void my_chunk(const slice &s, int *c0, int *c1) {
    int c = (s.q1 - s.q0 + SMP_THREADS - 1) / SMP_THREADS;
    *c0 = min(s.q1, s.q0 + (int)threadIdx.x * c) * 4;
    *c1 = min(s.q1, s.q0 + ((int)threadIdx.x + 1) * c) * 4;
}

/* Keeps the tokens with key > v and the first r tokens with key == v in id
   order (ties: how many have key == v); the others get e = 0. */
__device__ void keep_prefix(slice &s, unsigned v, u64 r, u64 ties) {
    float *e = s.e;
    if (r >= ties) {
        float4 *e4 = reinterpret_cast<float4 *>(e);
        for (int q = s.q0 + threadIdx.x; q < s.q1; q += SMP_THREADS) {
            float4 x = e4[q];
            x.x = __float_as_uint(x.x) < v ? 0.0f : x.x;
            x.y = __float_as_uint(x.y) < v ? 0.0f : x.y;
            x.z = __float_as_uint(x.z) < v ? 0.0f : x.z;
            x.w = __float_as_uint(x.w) < v ? 0.0f : x.w;
            e4[q] = x;
        }
        __syncthreads();
        return;
    }
    /* ranks among the ties: each thread's part in id order */
    int c0, c1;
    my_chunk(s, &c0, &c1);
    u64 c = 0;
    for (int i = c0; i < c1; i++) c += __float_as_uint(e[i]) == v;
    u64 rank = cluster_excl_scan(c, s);
    for (int i = c0; i < c1; i++) {
        unsigned k = __float_as_uint(e[i]);
        if (k < v || (k == v && rank++ >= r)) e[i] = 0.0f;
    }
    __syncthreads();
}

/* The first id where the running weight wf(i) in id order passes target
   (target < the weights' total): each thread sums its part, the one whose
   part holds the target walks it */
template <typename WF>
__device__ int draw(slice &s, WF wf, u64 target) {
    int c0, c1;
    my_chunk(s, &c0, &c1);
    u64 w = 0;
    for (int i = c0; i < c1; i++) w += wf(i);
    u64 before = cluster_excl_scan(w, s), hit[1] = {0};
    if (before <= target && target < before + w) {
        u64 cum = before;
        for (int i = c0; i < c1; i++) {
            cum += wf(i);
            if (target < cum) {
                hit[0] = (u64)i + 1;
                break;
            }
        }
    }
    cluster_sums<1>(hit, s); /* one thread of the cluster found it */
    return hit[0] ? (int)hit[0] - 1 : 0;
}

/* a draw with u from the weights wf(i) of total mass (> 0) */
template <typename WF>
__device__ int draw_at(slice &s, WF wf, double u, u64 mass) {
    u64 tgt = (u64)(u * (double)mass);
    return draw(s, wf, tgt < mass ? tgt : mass - 1);
}

#define SMP_RES_SCALE 2305843009213693952.0 /* 2^61: a residual probability's integer weight */

__global__ void __launch_bounds__(SMP_THREADS) k_sample_rows(int *out, const float *logits, float *escr, int V,
                                                             const cu_sample_args *a, float scale, u64 *tot,
                                                             int row_off) {
    pdl_trigger();
    pdl_wait();
    __shared__ u64 sm[SMP_WARPS * SMP_SUMS], cx[2 * SMP_SUMS], bc[SMP_SUMS], hist[2 * SMP_BINS];
    __shared__ float fm[SMP_WARPS];
    cg::cluster_group cl = cg::this_cluster();
    const int t = threadIdx.x, lane = t & 31, w = t >> 5, n = a->n, row = blockIdx.x / SMP_CLUSTER;
    const int j = a->row0 + row_off + row, V4 = (V + 3) / 4, Q = (V4 + SMP_CLUSTER - 1) / SMP_CLUSTER;
    const float *l = logits + (size_t)row * V;
    slice s;
    s.e = escr + (size_t)row * V4 * 4;
    s.q0 = min(V4, (int)cl.block_rank() * Q);
    s.q1 = min(V4, s.q0 + Q);
    s.sm = sm, s.cx = cx, s.bc = bc, s.hist = hist, s.flip = 0;
    const int i0 = 4 * s.q0, i1 = 4 * s.q1;
    /* the largest logit (NaN ones are skipped): the block's, then the
       cluster's (as ordered integers: the float order for non-NaN values) */
    float m = -INFINITY;
    for (int i = i0 + t; i < i1; i += 4 * SMP_THREADS) {
        float x0 = i < V ? l[i] : -INFINITY, x1 = i + SMP_THREADS < min(V, i1) ? l[i + SMP_THREADS] : -INFINITY;
        float x2 = i + 2 * SMP_THREADS < min(V, i1) ? l[i + 2 * SMP_THREADS] : -INFINITY;
        float x3 = i + 3 * SMP_THREADS < min(V, i1) ? l[i + 3 * SMP_THREADS] : -INFINITY;
        m = fmaxf(fmaxf(m, fmaxf(x0, x1)), fmaxf(x2, x3));
    }
    m = warp_max(m);
    if (lane == 0) fm[w] = m;
    __syncthreads();
    m = -INFINITY;
    for (int i = 0; i < SMP_WARPS; i++) m = fmaxf(m, fm[i]);
    {
        unsigned b = __float_as_uint(m);
        u64 key[1] = {b & 0x80000000u ? ~b : b | 0x80000000u}, best = 0;
        if (t == 0) cx[0] = key[0];
        cl.sync();
        for (int r = 0; r < SMP_CLUSTER; r++) best = max(best, cl.map_shared_rank(cx, r)[0]);
        unsigned k = (unsigned)best;
        m = __uint_as_float(k & 0x80000000u ? k & 0x7fffffffu : ~k);
        cl.sync(); /* cx is reused */
    }
    const float inv_t = a->inv_t;
    for (int i = i0 + t; i < i1; i += SMP_THREADS) {
        float x = i < V ? expf((l[i] - m) * inv_t) : 0.0f;
        s.e[i] = x >= 0.0f ? x : 0.0f; /* NaN (a NaN logit, or no finite one) weighs nothing */
    }
    __syncthreads();
    u64 total = cluster_mass(s, scale);
    if (a->top_k > 0 && a->top_k < V) {
        u64 above, at;
        /* padding counts as V4 * 4 - V more tokens of e = 0, below any cut
           that keeps fewer than V */
        unsigned v = find_cut<false>(s, scale, (u64)a->top_k, &above, &at);
        keep_prefix(s, v, (u64)a->top_k - above, at - above);
        total = cluster_mass(s, scale);
    }
    if (a->top_p < 1.0f && total > 0) {
        u64 target = (u64)ceil((double)a->top_p * (double)total), above, at;
        if (target < 1) target = 1;
        if (target > total) target = total;
        unsigned v = find_cut<true>(s, scale, target, &above, &at);
        u64 wv = weight(__uint_as_float(v), scale); /* > 0: the tokens at v carry mass */
        keep_prefix(s, v, (target - above + wv - 1) / wv, (at - above) / wv);
        total = cluster_mass(s, scale);
    }
    if (a->min_p > 0.0f) {
        for (int i = i0 + t; i < i1; i += SMP_THREADS)
            if (s.e[i] < a->min_p) s.e[i] = 0.0f;
        __syncthreads();
        total = cluster_mass(s, scale);
    }
    if (tot && t == 0 && cl.block_rank() == 0) tot[row] = total;
    /* sampler_rows's answer for the row: draft accepted (-1), or a draw
       from p without the draft (one-hot drafts) or from max(0, p - q) */
    double u = a->u[j];
    int r = -2;
    auto wp = [&](int i) { return weight(s.e[i], scale); };
    if (j < n - 1) {
        int d = a->draft[j];
        const bool in = d >= i0 && d < i1 && d < V;
        u64 wd[2] = {t == 0 && in ? weight(s.e[d], scale) : 0ull, 0ull};
        const float *qe = a->q ? a->q + (size_t)j * V4 * 4 : NULL;
        if (qe) wd[1] = t == 0 && in ? weight(qe[d], scale) : 0ull;
        cluster_sums<2>(wd, s);
        if (!qe) {
            if (u * (double)total < (double)wd[0]) {
                r = -1;
            } else {
                u = a->u[j + 1];
                if ((double)(total - wd[0]) > 1e-8 * (double)total)
                    r = draw_at(s, [&](int i) { return i == d ? 0ull : wp(i); }, u, total - wd[0]);
            }
        } else {
            const u64 zq = a->qtot[j];
            double pd = total ? (double)wd[0] / (double)total : 0.0, qd = zq ? (double)wd[1] / (double)zq : 0.0;
            if (qd < 1e-8) qd = 1e-8;
            if (u < pd / qd) {
                r = -1;
            } else {
                /* residual weights floor(max(0, p - q) * 2^61), each from its own
                   token's masses: deterministic in any order */
                const double ip = total ? 1.0 / (double)total : 0.0, iq = zq ? 1.0 / (double)zq : 0.0;
                auto wr = [&](int i) {
                    double v = (double)weight(s.e[i], scale) * ip - (double)weight(qe[i], scale) * iq;
                    return v > 0.0 ? (u64)(v * SMP_RES_SCALE) : 0ull;
                };
                u64 mr[1] = {0};
                for (int i = i0 + t; i < i1; i += SMP_THREADS) mr[0] += wr(i);
                cluster_sums<1>(mr, s);
                u = a->u[j + 1];
                if ((double)mr[0] > 1e-8 * SMP_RES_SCALE) r = draw_at(s, wr, u, mr[0]);
            }
        }
    }
    if (r == -2) /* the last row, or a residual with no mass: a draw from p */
        r = total ? draw_at(s, wp, u, total) : draw(s, wp, 0);
    if (t == 0 && cl.block_rank() == 0) out[row] = r;
    cl.sync(); /* no block leaves while another may still read its shared memory */
}

#else
__global__ void __launch_bounds__(SMP_THREADS) k_sample_rows(int *out, const float *logits, float *escr, int V,
                                                             const cu_sample_args *a, float scale, u64 *tot,
                                                             int row_off) {
    __trap();
}
#endif

static void launch_sample(int m, cu_go st, int *out, const float *logits, float *escr, int V,
                          const cu_sample_args *a, float scale, u64 *tot, int row_off) {
    launch_cluster(k_sample_rows, dim3(m * SMP_CLUSTER), dim3(SMP_THREADS), 0, SMP_CLUSTER, st, out, logits, escr, V, a,
                   scale, tot, row_off);
}

void cu_sample_rows(cu_go st, int *out, const float *logits, float *escr, int m, int V,
                    const cu_sample_args *a, u64 *tot, int row_off) {
    int bits = 1;
    while ((1ll << bits) < (long long)V) bits++;
    float scale = ldexpf(1.0f, 61 - bits); /* V * 2^(61 - bits) <= 2^61 */
    launch_sample(m, st, out, logits, escr, V, a, scale, tot, row_off);
}

/* device copies of logits rows, their sampler's scratch, kept masses,
   answers and arguments, for the test and benchmark entry points */
struct smp_bufs {
    float *l, *e;
    u64 *tot;
    int *out;
    cu_sample_args *a;
};

static void bufs_free(smp_bufs *b) {
    cudaFree(b->l);
    cudaFree(b->e);
    cudaFree(b->tot);
    cudaFree(b->out);
    cudaFree(b->a);
}

/* n: 1 .. MODEL_SAMPLE_ROWS (the callers check it before building *h) */
static int bufs_up(smp_bufs *b, const float *logits, int n, int V, const cu_sample_args *h, char *err,
                   size_t errlen) {
    *b = smp_bufs{};
    if (cudaMalloc(&b->l, sizeof(float) * (size_t)n * V) != cudaSuccess ||
        cudaMalloc(&b->e, sizeof(float) * (size_t)n * cu_sample_stride(V)) != cudaSuccess ||
        cudaMalloc(&b->tot, sizeof(u64) * (size_t)n) != cudaSuccess ||
        cudaMalloc(&b->out, sizeof(int) * (size_t)n) != cudaSuccess || cudaMalloc(&b->a, sizeof *h) != cudaSuccess ||
        cudaMemcpy(b->l, logits, sizeof(float) * (size_t)n * V, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(b->a, h, sizeof *h, cudaMemcpyHostToDevice) != cudaSuccess) {
        bufs_free(b);
        return ds_err(err, errlen, "device sampler: cannot set up %d rows of %d: %s", n, V,
                      cudaGetErrorString(cudaGetLastError()));
    }
    return 0;
}

/* whether the current device runs the sampler (thread-block clusters:
   compute capability 9.0 on, in the device and in the build) */
static int smp_device_ok(void) { return cu_hopper_code(); }

/* the n rows of b sampled, their answers into out[n] */
static cudaError_t bufs_run(smp_bufs *b, int n, int V, int *out) {
    if (!smp_device_ok()) return cudaErrorNotSupported;
    cu_sample_rows(cu_go_on(0, cu_tuning_hooked()), b->out, b->l, b->e, n, V, b->a, b->tot, 0);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? cudaMemcpy(out, b->out, sizeof(int) * (size_t)n, cudaMemcpyDeviceToHost) : e;
}

extern "C" int cuda_test_sample_rows(int *out, const float *logits, int n, int V, const sampler_params *p,
                                     const int *draft, const double *u, char *err, size_t errlen) {
    if (n < 1 || n > MODEL_SAMPLE_ROWS) return ds_err(err, errlen, "device sampler: %d rows", n);
    cu_sample_args h;
    cu_sample_args_set(&h, p, draft, u, n);
    smp_bufs b;
    if (bufs_up(&b, logits, n, V, &h, err, errlen) != 0) return -1;
    cudaError_t e = bufs_run(&b, n, V, out);
    bufs_free(&b);
    if (e != cudaSuccess) return ds_err(err, errlen, "device sampler: %s", cudaGetErrorString(e));
    return 0;
}

extern "C" int cuda_test_sample_rows_q(int *drafts, int *out, const float *logits, const float *qlogits, int n, int V,
                                       const sampler_params *p, const double *uq, const double *u, char *err,
                                       size_t errlen) {
    if (n < 2 || n > MODEL_SAMPLE_ROWS) return ds_err(err, errlen, "device sampler: %d rows with drafts", n);
    /* the drafts: each q row drawn as a drafter's, its scratch and mass kept */
    cu_sample_args h;
    cu_sample_args_draws(&h, p, uq, n - 1);
    smp_bufs bq, bv = {};
    if (bufs_up(&bq, qlogits, n - 1, V, &h, err, errlen) != 0) return -1;
    cudaError_t e = bufs_run(&bq, n - 1, V, drafts);
    /* the verify of those drafts against q */
    int rc = 0;
    if (e == cudaSuccess) {
        cu_sample_args_set(&h, p, drafts, u, n);
        h.q = bq.e;
        h.qtot = bq.tot;
        rc = bufs_up(&bv, logits, n, V, &h, err, errlen);
        if (rc == 0) e = bufs_run(&bv, n, V, out);
    }
    bufs_free(&bq);
    bufs_free(&bv);
    if (rc != 0) return -1;
    if (e != cudaSuccess) return ds_err(err, errlen, "device sampler: %s", cudaGetErrorString(e));
    return 0;
}

extern "C" int cuda_bench_sample(int V, int rows, int peaked, const sampler_params *p, int reps, double *us, char *err,
                                 size_t errlen) {
    if (!smp_device_ok()) return ds_err(err, errlen, "device sampler: needs compute capability 9.0 or later");
    if (rows < 1 || rows > MODEL_SAMPLE_ROWS) return ds_err(err, errlen, "cuda_bench_sample: %d rows", rows);
    size_t n = (size_t)rows * V;
    float *h = (float *)xmalloc(sizeof(float) * n);
    uint32_t r = 1u;
    for (size_t i = 0; i < n; i++) {
        r = r * 1664525u + 1013904223u;
        float x = (float)(r >> 8) / 16777216.0f; /* [0, 1) */
        /* flat: a random-weight model's row; peaked: a trained model's
           (a head of 30 tokens 8-16 nats above a tail spread over 8) */
        h[i] = peaked ? ((i % (size_t)V) % 5003 < 30 ? 8.0f + 8.0f * x : -8.0f * x) : x;
    }
    int draft[MODEL_SAMPLE_ROWS];
    double u[MODEL_SAMPLE_ROWS];
    for (int i = 0; i < rows; i++) draft[i] = (i * 7919) % V, u[i] = 0.999; /* rejected: every row draws */
    cu_sample_args a;
    cu_sample_args_set(&a, p, draft, u, rows);
    smp_bufs b;
    int rc = bufs_up(&b, h, rows, V, &a, err, errlen);
    free(h);
    if (rc != 0) return -1;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cu_sample_rows(cu_go_on(0, cu_tuning_hooked()), b.out, b.l, b.e, rows, V, b.a, b.tot, 0);
    cudaEventRecord(e0, 0);
    for (int i = 0; i < reps; i++) cu_sample_rows(cu_go_on(0, cu_tuning_hooked()), b.out, b.l, b.e, rows, V, b.a, b.tot, 0);
    cudaEventRecord(e1, 0);
    cudaError_t e = cudaEventSynchronize(e1);
    if (e == cudaSuccess) e = cudaGetLastError();
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    *us = 1e3 * ms / reps;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    bufs_free(&b);
    if (e != cudaSuccess) return ds_err(err, errlen, "device sampler: %s", cudaGetErrorString(e));
    return 0;
}

extern "C" int cuda_bench_readback(int V, int rows, int reps, double *us, char *err, size_t errlen) {
    size_t bytes = sizeof(float) * (size_t)rows * V;
    float *d = NULL, *h = NULL;
    cudaStream_t st = NULL;
    cudaError_t e = cudaMalloc((void **)&d, bytes);
    if (e == cudaSuccess) e = cudaMallocHost((void **)&h, bytes);
    if (e == cudaSuccess) e = cudaMemset(d, 0, bytes);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, st); /* warm */
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    double t0 = ds_now();
    for (int i = 0; e == cudaSuccess && i < reps; i++) {
        e = cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    }
    *us = (ds_now() - t0) * 1e6 / reps;
    if (st) cudaStreamDestroy(st);
    cudaFreeHost(h);
    cudaFree(d);
    if (e != cudaSuccess) return ds_err(err, errlen, "logits readback: %s", cudaGetErrorString(e));
    return 0;
}
