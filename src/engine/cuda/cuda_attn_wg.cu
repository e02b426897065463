// cuda_attn_wg: the prefill attention on Hopper's warpgroup mmas (wgmma,
// sm_90a builds on a compute capability 9.0 device), taken by
// cu_attention_tiled for head dims 64 and 128 in place of k_attn_tc.
#include <cuda_runtime.h>

#include <math.h>

#include "engine/cuda/cuda_ops.cuh"

/* The same work as k_attn_tc (cuda_attn.cu: a block of TC_QV query vectors
   of one kv head over one span of AT_SPLIT positions, the same partials for
   k_attn_combine, the same three-product TF32 arithmetic, hi.hi + hi.lo +
   lo.hi) issued as wgmma m64nNk8 over a warpgroup of 128 threads: warp w
   holds the mma rows 16w .. 16w + 15 (vectors), lane (g, t) the rows
   16w + g and + 8, as in k_attn_tc. wgmma reads its B operand straight from
   shared memory, in "core matrices" of 8 rows x 16 bytes with the
   operand's K dimension contiguous (no swizzle; the next 4 of K 128 bytes
   on, the next 8 rows SB bytes on). So K and V go through shared memory in
   that form, already cut into TF32 head and tail:

   - k_wg_prep turns the layer's cache, once per call, into images of
     WG_P-position chunks: per kv head and chunk, K's head and tail (rows =
     positions, K = head dims) and V's head and tail transposed (rows = head
     dims, K = positions; slots 8b + t and 8b + 4 + t hold positions 8b + 2t
     and 8b + 2t + 1, the order of P's accumulator columns, so P serves as
     the A operand as it stands). A block copies a chunk's images as they
     are: no cut and no transposition per block.
   - the queries stay f32 in shared memory (the same layout, rows =
     vectors) and are cut into A fragments in registers.

   The profile that led here (k_attn_tc, docs/history/benchmarks-log.md): 1.64
   instructions a cycle, most of them not mmas, every warp cutting the same
   K and V values out of scalar loads. Shared memory (32 positions a chunk,
   head dim 128): 32 KB of queries, 32 KB of K, 32 KB of V, so two blocks
   fit an SM; the next chunk's K is copied while the current one's P V
   runs, and its V while the next scores run. */
#define WG_P 32

template <int HD> struct wg_shape {
    static constexpr int KT = HD / 8;             /* k steps of the scores; 8-dim groups of V */
    static constexpr int SBK = HD * 32;           /* bytes between 8-row groups of Qs and the K images */
    static constexpr int SBV = WG_P * 32;         /* bytes between 8-dim groups of the V images */
    static constexpr int IMG = WG_P * HD;         /* floats of one image (a chunk's K or V head, or tail) */
    static constexpr size_t smem = sizeof(float) * ((size_t)TC_QV * HD + 4 * (size_t)IMG);
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_D32                                                                                                         \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29," \
    "%30,%31}"
#define WG_O32(d)                                                                                                      \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),        \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),        \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),       \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

/* a shared-memory operand: no swizzle, K-adjacent core matrices lbo bytes
   apart, row-adjacent ones sbo bytes apart */
__device__ __forceinline__ uint64_t wg_desc(const float *p, uint32_t lbo, uint32_t sbo) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a & 0x3ffffu) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32;
}

/* d (64 x N, the accumulator layout of k_attn_tc's tiles side by side) +=
   A (64 x 8: this warp's rows, fragment a0..a3 as mma.sync m16n8k8's) . B
   (N x 8 at descriptor b)^T, N = 64 or 32 */
__device__ __forceinline__ void wg_mma(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint64_t b) {
    asm volatile("{.reg .pred p; setp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 " WG_D32 ", {%32,%33,%34,%35}, %36, p, 1, 1;}\n"
                 : WG_O32(d)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));
}
__device__ __forceinline__ void wg_mma(float (&d)[16], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint64_t b) {
    asm volatile("{.reg .pred p; setp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,"
                 "%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1;}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));
}

/* three products of a (head and tail) with the operand whose head is at bh
   and tail at bl, in k_attn_tc's order: lo.hi, hi.lo, hi.hi */
template <int N>
__device__ __forceinline__ void wg_mma3(float (&d)[N], const tf32x2 (&a)[4], uint64_t bh, uint64_t bl) {
    wg_mma(d, a[0].l, a[1].l, a[2].l, a[3].l, bh);
    wg_mma(d, a[0].h, a[1].h, a[2].h, a[3].h, bl);
    wg_mma(d, a[0].h, a[1].h, a[2].h, a[3].h, bh);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait_all() {
    asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
/* this thread's shared-memory writes are seen by the async proxy (wgmma) */
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

#endif

/* x's TF32 tail (tf32_cut) as a float */
__device__ __forceinline__ float tf32_lo(float x) { return __uint_as_float(tf32_cut(x).l); }


/* the images of chunk blockIdx.x of kv head blockIdx.y (of nch) from the
   cache's first *d_len + ntot positions (zeros past them); T: the cache's
   storage (kv_elem), 16- and 8-bit values widened exactly first, so the
   images are those of the widened f32 cache. Under a sliding window
   (window > 0) the chunks wholly before the first row's window (row 0 at
   position *d_len) are left as they are: no block reads them. */
template <typename T, int HD>
__global__ void k_wg_prep(float *img, const void *kc, const void *vc, const float *ksc, const float *vsc, int cap,
                          int nch, const int *d_len, int ntot, int window) {
    using S = wg_shape<HD>;
    constexpr int IMG = S::IMG;
    pdl_trigger();
    pdl_wait();
    const int n_pos = *d_len + ntot, p0 = blockIdx.x * WG_P, h = blockIdx.y;
    if (p0 >= n_pos || p0 + WG_P <= cu_win_lo(*d_len, window)) return;
    float4 *dst = reinterpret_cast<float4 *>(img + ((size_t)h * nch + blockIdx.x) * 4 * IMG);
    const size_t hp = (size_t)h * cap; /* the head's first row */
    const void *kg = static_cast<const T *>(kc) + hp * HD, *vg = static_cast<const T *>(vc) + hp * HD;
    const float *ksh = ksc ? ksc + hp : NULL, *vsh = vsc ? vsc + hp : NULL;
    /* K: granule i of an image is (position 8 (i / 2HD) + i % 8, dims 4 ((i / 8) % (HD / 4)) + 0..3) */
    for (int i = threadIdx.x; i < IMG / 4; i += blockDim.x) {
        const int p = 8 * (i / (2 * HD)) + i % 8, c4 = (i / 8) % (HD / 4);
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (p0 + p < n_pos) x = kv_load4<T>(kg, ksh, (size_t)(p0 + p), HD, 4 * c4);
        dst[i] = x;
        dst[IMG / 4 + i] = make_float4(tf32_lo(x.x), tf32_lo(x.y), tf32_lo(x.z), tf32_lo(x.w));
    }
    /* V: granule i is (dim 8 (i / 2P) + i % 8, slots 4 s4 + 0..3 with
       s4 = (i / 8) % (P / 4) = 2b + e: positions 8b + e + 2j) */
    for (int i = threadIdx.x; i < IMG / 4; i += blockDim.x) {
        const int d = 8 * (i / (2 * WG_P)) + i % 8, s4 = (i / 8) % (WG_P / 4), b = s4 / 2, e = s4 % 2;
        float v[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int p = p0 + 8 * b + e + 2 * j;
            v[j] = p < n_pos ? kv_load1<T>(vg, vsh, (size_t)p, HD, d) : 0.0f;
        }
        dst[2 * IMG / 4 + i] = make_float4(v[0], v[1], v[2], v[3]);
        dst[3 * IMG / 4 + i] = make_float4(tf32_lo(v[0]), tf32_lo(v[1]), tf32_lo(v[2]), tf32_lo(v[3]));
    }
}

template <int HD>
__global__ void __launch_bounds__(128, 2) k_attn_wg(const float *q, const float *img, float *opart, float *mpart,
                                                    float *spart, int nh, int G, int nch, const int *d_len, int M,
                                                    float scale, int first, int window) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using S = wg_shape<HD>;
    constexpr int KT = S::KT, SBK = S::SBK, SBV = S::SBV, IMG = S::IMG;
    pdl_trigger();
    pdl_wait();
    DYN_SMEM(float4, wg_sm4);
    float *Qs = reinterpret_cast<float *>(wg_sm4), *Ks = Qs + TC_QV * HD, *Vs = Ks + 2 * IMG;
    const int R = TC_QV / G;
    /* the last row groups (the most positions in a span) start first */
    const int m0 = (gridDim.x - 1 - blockIdx.x) * R, kvh = blockIdx.y, sp = blockIdx.z;
    const int rows = M - m0 < R ? M - m0 : R, nv = rows * G;
    const int len = *d_len + first; /* row 0's position */
    const int p_begin = sp * AT_SPLIT, last = len + m0 + rows;
    /* a sliding window: as k_attn_tc, the span and the chunks wholly before
       the first row's window (the lowest) are skipped */
    const int lo0 = cu_win_lo(len + m0, window);
    if (p_begin >= last || p_begin + AT_SPLIT <= lo0) return;
    const int p_end = last - p_begin < AT_SPLIT ? last : p_begin + AT_SPLIT;
    const int p_first = lo0 > p_begin ? p_begin + (lo0 - p_begin) / WG_P * WG_P : p_begin;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int va = warp * 16 + g, vb = va + 8;
    const float *ih = img + (size_t)kvh * nch * 4 * IMG; /* this kv head's chunks */
    /* two images (head and tail) of chunk c from part 0 (K) or 2 (V) into dst, one commit group */
    auto stage = [&](float *dst, int c, int part) {
        const float4 *src = reinterpret_cast<const float4 *>(ih + ((size_t)c * 4 + part) * IMG);
        for (int i = tid; i < 2 * IMG / 4; i += 128) cp_async16(dst + 4 * i, src + i);
        cp_async_commit();
    };
    /* the block's query vectors, zero-padded to TC_QV x HD, with the first K */
    for (int i = tid; i < TC_QV * HD / 4; i += 128) {
        const int v = i / (HD / 4), c4 = i % (HD / 4);
        float *dst = Qs + (v / 8) * (SBK / 4) + c4 * 32 + (v % 8) * 4;
        if (v < nv) cp_async16(dst, q + ((size_t)(m0 + v / G) * nh + kvh * G + v % G) * HD + 4 * c4);
        else *reinterpret_cast<float4 *>(dst) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    stage(Ks, p_first / WG_P, 0);
    stage(Vs, p_first / WG_P, 2);
    const int lima = va < nv ? len + m0 + va / G + 1 : 0, limb = vb < nv ? len + m0 + vb / G + 1 : 0;
    const int lowa = cu_win_lo(len + m0 + va / G, window), lowb = cu_win_lo(len + m0 + vb / G, window);
    float mxa = -INFINITY, mxb = -INFINITY, sa = 0.0f, sb = 0.0f;
    float o[KT][4]; /* output tile j: (va, 8j+2t), (va, 8j+2t+1), (vb, 8j+2t), (vb, 8j+2t+1) */
#pragma unroll
    for (int j = 0; j < KT; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    const float scale2 = scale * 1.44269504088896340736f;
    for (int p0 = p_first; p0 < p_end; p0 += WG_P) {
        const int np = p_end - p0 < WG_P ? p_end - p0 : WG_P, more = p0 + WG_P < p_end;
        cp_async_wait_one(); /* this chunk's K (its V may still be in flight) */
        fence_proxy_async();
        __syncthreads();
        /* scores: s[n][e] = positions 8n+2t+e of va, s[n][2 + e] of vb */
        float s[WG_P / 8][4];
#pragma unroll
        for (int n = 0; n < WG_P / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        wg_fence();
#pragma unroll
        for (int k = 0; k < KT; k++) {
            const float *qa = Qs + (2 * warp) * (SBK / 4) + (2 * k) * 32 + g * 4 + t;
            const tf32x2 a[4] = {tf32_cut(qa[0]), tf32_cut(qa[SBK / 4]), tf32_cut(qa[32]), tf32_cut(qa[SBK / 4 + 32])};
            wg_mma3(reinterpret_cast<float(&)[WG_P / 2]>(s), a, wg_desc(Ks + 2 * k * 32, 128, SBK),
                    wg_desc(Ks + IMG + 2 * k * 32, 128, SBK));
        }
        wg_wait_all();
        __syncthreads(); /* every warp's scores read: Ks takes the next chunk */
        if (more) stage(Ks, p0 / WG_P + 1, 0);
        float ca, cb;
        tc_softmax(s, np, p0, lima, limb, lowa, lowb, scale2, t, mxa, mxb, sa, sb, ca, cb);
        /* this chunk's V (the next K may still be in flight) */
        if (more) cp_async_wait_one();
        else cp_async_wait_all();
        fence_proxy_async();
        __syncthreads();
        /* O = O corr + P V: the chunk's P V from zero (k step kk: positions
           8kk .. 8kk+7, A columns t and t+4 = positions 8kk+2t, 8kk+2t+1),
           64 head dims at a time, added in f32 */
#pragma unroll
        for (int h = 0; h < KT / 8; h++) {
            float oc[32];
#pragma unroll
            for (int i = 0; i < 32; i++) oc[i] = 0.0f;
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < WG_P / 8; kk++) {
                const tf32x2 a[4] = {tf32_cut(s[kk][0]), tf32_cut(s[kk][2]), tf32_cut(s[kk][1]), tf32_cut(s[kk][3])};
                const int vo = 8 * h * (SBV / 4) + 2 * kk * 32;
                wg_mma3(oc, a, wg_desc(Vs + vo, 128, SBV), wg_desc(Vs + IMG + vo, 128, SBV));
            }
            wg_wait_all();
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float *oj = o[8 * h + j];
                oj[0] = fmaf(oj[0], ca, oc[4 * j]);
                oj[1] = fmaf(oj[1], ca, oc[4 * j + 1]);
                oj[2] = fmaf(oj[2], cb, oc[4 * j + 2]);
                oj[3] = fmaf(oj[3], cb, oc[4 * j + 3]);
            }
        }
        __syncthreads(); /* every warp's P V read: Vs takes the next chunk */
        if (more) stage(Vs, p0 / WG_P + 1, 2);
    }
    tc_store_partials(opart, mpart, spart, o, va, vb, nv, lima, limb, lowa, lowb, p_begin, p_begin + AT_SPLIT, m0, G, nh,
                      kvh, gridDim.z, sp, t, mxa, mxb, sa, sb, HD);
#else
    __trap(); /* the launcher takes this kernel only from an sm_90a build (cu_attn_wg_ready) */
#endif
}


int cu_attn_wg_ready(const cu_tuning *t, int hd) {
#if defined(DSPARK_WGMMA)
    static int cc = -1; /* the device's compute capability */
    if (cc < 0) cc = cu_device_cc(-1);
    return cc == 90 && t->att_wg && (hd == 64 || hd == 128);
#else
    (void)t, (void)hd;
    return 0;
#endif
}

static int wg_chunks(int cap) { return (cap + WG_P - 1) / WG_P; }

size_t cu_attn_wg_floats(int nkv, int hd, int cap) { return (size_t)nkv * wg_chunks(cap) * 4 * WG_P * hd; }

void cu_attn_wg_prep(cu_go st, float *img, cu_kv kv, int nkv, int hd, int cap, const int *d_len, int ntot,
                     int window) {
    const int nch = wg_chunks(cap);
    const void *k = kv.k, *v = kv.v;
    const float *ks = kv.ks, *vs = kv.vs;
    with_kv(kv.bits, [&](auto e) {
        using T = decltype(e);
        if (hd == 64) launch(k_wg_prep<T, 64>, dim3(nch, nkv), 256, st, img, k, v, ks, vs, cap, nch, d_len, ntot, window);
        else launch(k_wg_prep<T, 128>, dim3(nch, nkv), 256, st, img, k, v, ks, vs, cap, nch, d_len, ntot, window);
    });
}

template <int HD>
static void wg_run(cu_go st, const float *img, float *opart, float *mpart, float *spart, const float *q, int M,
                   int nh, int nkv, int cap, const int *d_len, float scale, int nsplit, int first, int window) {
    using S = wg_shape<HD>;
    static int sized = 0;
    if (!sized) {
        cudaFuncSetAttribute(k_attn_wg<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)S::smem);
        sized = 1;
    }
    const int G = nh / nkv, R = TC_QV / G;
    launch_smem(k_attn_wg<HD>, dim3((M + R - 1) / R, nkv, nsplit), 128, S::smem, st, q, img, opart, mpart, spart, nh,
                G, wg_chunks(cap), d_len, M, scale, first, window);
}

void cu_attn_wg(cu_go st, const float *img, float *opart, float *mpart, float *spart, const float *q, int M,
                int nh, int nkv, int hd, int cap, const int *d_len, float scale, int nsplit, int first, int window) {
    auto run = hd == 64 ? wg_run<64> : wg_run<128>;
    run(st, img, opart, mpart, spart, q, M, nh, nkv, cap, d_len, scale, nsplit, first, window);
}
