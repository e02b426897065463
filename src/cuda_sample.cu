// cuda_sample: sampler_rows (sampler.h) on the device, so a sampled decode
// or verify reads back token ids instead of vocabulary-wide logits rows.
//
// One block per logits row. The softmax numerators e = exp((logit - max) / T)
// go to a scratch row; every mass is a sum of integer weights
// W = floor(e * 2^S) (e <= 1, S chosen so a row's sum stays below 2^62),
// exact in any order, so the kept set and the draws are deterministic
// however the threads' additions interleave. The filters keep a prefix of
// the (e descending, id ascending) order, as the host's do:
//   top-k: the largest key v (the bits of e, monotone for e >= 0) with at
//          least k tokens at or above it, found by a 16-way search over the
//          key range (8 passes over the row); of the tokens tied at v, the
//          first ones in id order;
//   top-p: the same search over mass: the largest v whose tokens at or
//          above it carry top_p of the kept mass;
//   min-p: e >= min_p (the top token's e is exp(0) = 1).
// Dropped tokens get e = 0. A draw walks the kept tokens in id order until
// the running weight passes u times the kept mass: per-warp sums over
// contiguous id ranges, then one warp scans its range.
#include "cuda_ops.cuh"

#define SMP_THREADS 512
#define SMP_WARPS (SMP_THREADS / 32)
#define SMP_WAYS 16 /* thresholds per search pass */

typedef unsigned long long u64;

__device__ __forceinline__ u64 warp_sum64(u64 v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ u64 weight(float e, float scale) { return __float2ull_rz(e * scale); }

/* the block's sums of v[0..N) (every thread gets them); sm: [SMP_WARPS][N] */
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

__device__ u64 block_mass(const float *e, int V, float scale, u64 *sm) {
    u64 s[1] = {0};
    for (int i = threadIdx.x; i < V; i += SMP_THREADS) s[0] += weight(e[i], scale);
    block_sums<1>(s, sm);
    return s[0];
}

/* S(>= t): the count (MASS 0) or weight of the tokens whose key is >= t */
template <bool MASS>
__device__ __forceinline__ u64 amount(float e, float scale) {
    return MASS ? weight(e, scale) : 1ull;
}

/* The largest key v with S(>= v) >= target (target >= 1, <= S(>= 0)), with
   S(> v) in *above and S(>= v) in *at. Each pass splits the open range
   [lo, hi) into SMP_WAYS steps and measures S at each step's start. */
template <bool MASS>
__device__ unsigned find_cut(const float *e, int V, float scale, u64 target, u64 total, u64 *above, u64 *at,
                             u64 *sm) {
    unsigned lo = 0, hi = 0x3f800001u; /* keys of e in [0, 1] */
    u64 s_lo = total, s_hi = 0;         /* S(>= lo) >= target > S(>= hi) */
    while (hi - lo > 1) {
        unsigned step = (hi - lo + SMP_WAYS - 1) / SMP_WAYS;
        unsigned t[SMP_WAYS];
#pragma unroll
        for (int b = 0; b < SMP_WAYS; b++) {
            u64 x = (u64)lo + (u64)(b + 1) * step;
            t[b] = x < hi ? (unsigned)x : hi;
        }
        u64 s[SMP_WAYS];
#pragma unroll
        for (int b = 0; b < SMP_WAYS; b++) s[b] = 0;
        for (int i = threadIdx.x; i < V; i += SMP_THREADS) {
            float x = e[i];
            unsigned k = __float_as_uint(x);
            if (k <= lo) continue;
            u64 a = amount<MASS>(x, scale);
#pragma unroll
            for (int b = 0; b < SMP_WAYS; b++) s[b] += k >= t[b] ? a : 0ull;
        }
        block_sums<SMP_WAYS>(s, sm);
        /* S(>= t[b]) is s[b]; the last step start still reaching target */
        int b = -1;
#pragma unroll
        for (int i = 0; i < SMP_WAYS; i++)
            if (t[i] < hi && s[i] >= target) b = i;
        if (b >= 0) {
            lo = t[b];
            s_lo = s[b];
        }
        int nb = b + 1;
        if (nb < SMP_WAYS && t[nb] < hi) {
            hi = t[nb];
            s_hi = s[nb];
        } else if (b < 0) {
            hi = t[0];
            s_hi = s[0];
        }
    }
    *above = s_hi;
    *at = s_lo;
    return lo;
}

/* Contiguous id range of warp w: [w * R, min(V, (w + 1) * R)) */
__device__ __forceinline__ int warp_range(int V) { return ((V + SMP_WARPS - 1) / SMP_WARPS + 31) & ~31; }

/* Keeps the tokens with key > v and the first r tokens with key == v in id
   order (ties: how many have key == v); the others get e = 0. */
__device__ void keep_prefix(float *e, int V, unsigned v, u64 r, u64 ties, u64 *sm) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, R = warp_range(V);
    const int i0 = w * R, i1 = min(V, i0 + R);
    u64 base = 0;
    if (r < ties) { /* ranks among the ties: count each warp's range first */
        unsigned c = 0;
        for (int i = i0 + lane; i < i1; i += 32) c += __float_as_uint(e[i]) == v;
        u64 cc[1] = {c};
        cc[0] = warp_sum64(cc[0]);
        if (lane == 0) sm[w] = cc[0];
        __syncthreads();
        for (int i = 0; i < w; i++) base += sm[i];
        __syncthreads();
    }
    for (int s = i0; s < i1; s += 32) {
        int i = s + lane;
        unsigned k = i < i1 ? __float_as_uint(e[i]) : 0u;
        unsigned tie = __ballot_sync(0xffffffffu, i < i1 && k == v);
        if (i < i1) {
            u64 rank = base + __popc(tie & ((1u << lane) - 1u));
            if (k < v || (k == v && rank >= r)) e[i] = 0.0f;
        }
        base += __popc(tie);
    }
    __syncthreads();
}

/* The first id (skipping id `skip`) where the running weight of e in id
   order passes target (< the weight of all but skip) */
__device__ int draw(const float *e, int V, float scale, int skip, u64 target, u64 *sm, int *sres) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, R = warp_range(V);
    const int i0 = w * R, i1 = min(V, i0 + R);
    u64 s = 0;
    for (int i = i0 + lane; i < i1; i += 32) s += i == skip ? 0ull : weight(e[i], scale);
    s = warp_sum64(s);
    if (lane == 0) sm[w] = s;
    __syncthreads();
    /* the warp whose range holds the target, and the weight before it */
    u64 before = 0;
    int ww = -1;
    for (int i = 0; i < SMP_WARPS; i++) {
        if (ww < 0 && target < before + sm[i]) ww = i;
        if (ww < 0) before += sm[i];
    }
    if (threadIdx.x == 0) *sres = -1;
    __syncthreads();
    if (w == ww) {
        u64 base = before;
        for (int s0 = i0; s0 < i1; s0 += 32) {
            int i = s0 + lane;
            u64 x = i < i1 && i != skip ? weight(e[i], scale) : 0ull, inc = x;
            for (int o = 1; o < 32; o <<= 1) {
                u64 y = __shfl_up_sync(0xffffffffu, inc, o);
                if (lane >= o) inc += y;
            }
            unsigned hit = __ballot_sync(0xffffffffu, x > 0 && target < base + inc);
            if (hit) {
                if (lane == __ffs(hit) - 1) *sres = i;
                break;
            }
            base += __shfl_sync(0xffffffffu, inc, 31);
        }
    }
    __syncthreads();
    int r = *sres;
    __syncthreads();
    return r < 0 ? 0 : r;
}

__global__ void __launch_bounds__(SMP_THREADS) k_sample_rows(int *out, const float *logits, float *escr, int V,
                                                             const cu_sample_args *a, float scale) {
    pdl_trigger();
    pdl_wait();
    __shared__ u64 sm[SMP_WARPS * SMP_WAYS];
    __shared__ float fm[SMP_WARPS];
    __shared__ int sres;
    const int t = threadIdx.x, lane = t & 31, w = t >> 5, n = a->n, j = a->row0 + blockIdx.x;
    const float *l = logits + (size_t)blockIdx.x * V;
    float *e = escr + (size_t)blockIdx.x * V;
    /* the largest logit (NaN ones are skipped), then e */
    float m = -INFINITY;
    for (int i = t; i < V; i += SMP_THREADS) m = fmaxf(m, l[i]);
    m = warp_max(m);
    if (lane == 0) fm[w] = m;
    __syncthreads();
    m = -INFINITY;
    for (int i = 0; i < SMP_WARPS; i++) m = fmaxf(m, fm[i]);
    const float inv_t = a->inv_t;
    for (int i = t; i < V; i += SMP_THREADS) {
        float x = expf((l[i] - m) * inv_t);
        e[i] = x >= 0.0f ? x : 0.0f; /* NaN (a NaN logit, or no finite one) weighs nothing */
    }
    __syncthreads();
    u64 total = block_mass(e, V, scale, sm);
    if (a->top_k > 0 && a->top_k < V) {
        u64 above, at;
        unsigned v = find_cut<false>(e, V, scale, (u64)a->top_k, (u64)V, &above, &at, sm);
        keep_prefix(e, V, v, (u64)a->top_k - above, at - above, sm);
        total = block_mass(e, V, scale, sm);
    }
    if (a->top_p < 1.0f && total > 0) {
        u64 target = (u64)ceil((double)a->top_p * (double)total), above, at;
        if (target < 1) target = 1;
        if (target > total) target = total;
        unsigned v = find_cut<true>(e, V, scale, target, total, &above, &at, sm);
        u64 wv = weight(__uint_as_float(v), scale); /* > 0: the tokens at v carry mass */
        keep_prefix(e, V, v, (target - above + wv - 1) / wv, (at - above) / wv, sm);
        total = block_mass(e, V, scale, sm);
    }
    if (a->min_p > 0.0f) {
        for (int i = t; i < V; i += SMP_THREADS)
            if (e[i] < a->min_p) e[i] = 0.0f;
        __syncthreads();
        total = block_mass(e, V, scale, sm);
    }
    /* sampler_rows's answer for the row */
    double u = a->u[j];
    int skip = -1;
    u64 mass = total, tgt;
    if (j < n - 1) {
        int d = a->draft[j];
        u64 wd = d >= 0 && d < V ? weight(e[d], scale) : 0ull;
        if (u * (double)total < (double)wd) { /* accepted */
            if (t == 0) out[blockIdx.x] = -1;
            return;
        }
        if ((double)(total - wd) > 1e-8 * (double)total) {
            skip = d;
            mass = total - wd;
        }
        u = a->u[j + 1];
    }
    tgt = (u64)(u * (double)mass);
    if (tgt >= mass) tgt = mass ? mass - 1 : 0;
    int r = draw(e, V, scale, skip, tgt, sm, &sres);
    if (t == 0) out[blockIdx.x] = r;
}

void cu_sample_rows(cudaStream_t st, int *out, const float *logits, float *escr, int m, int V,
                    const cu_sample_args *a) {
    int bits = 1;
    while ((1ll << bits) < (long long)V) bits++;
    float scale = ldexpf(1.0f, 61 - bits); /* V * 2^(61 - bits) <= 2^61 */
    launch(k_sample_rows, m, SMP_THREADS, st, out, logits, escr, V, a, scale);
}

extern "C" int cuda_test_sample_rows(int *out, const float *logits, int n, int V, const sampler_params *p,
                                     const int *draft, const double *u, char *err, size_t errlen) {
    if (n < 1 || n > MODEL_SAMPLE_ROWS) return ds_err(err, errlen, "cuda_test_sample_rows: %d rows", n);
    cu_sample_args h;
    cu_sample_args_set(&h, p, draft, u, n);
    float *dl = NULL, *de = NULL;
    int *dout = NULL;
    cu_sample_args *da = NULL;
    CK(cudaMalloc(&dl, sizeof(float) * (size_t)n * V));
    CK(cudaMalloc(&de, sizeof(float) * (size_t)n * V));
    CK(cudaMalloc(&dout, sizeof(int) * (size_t)n));
    CK(cudaMalloc(&da, sizeof h));
    CK(cudaMemcpy(dl, logits, sizeof(float) * (size_t)n * V, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(da, &h, sizeof h, cudaMemcpyHostToDevice));
    cu_sample_rows(0, dout, dl, de, n, V, da);
    CK_LAUNCH();
    CK(cudaMemcpy(out, dout, sizeof(int) * (size_t)n, cudaMemcpyDeviceToHost));
    cudaFree(dl);
    cudaFree(de);
    cudaFree(dout);
    cudaFree(da);
    return 0;
}
