// cuda_attn: the attention kernels (split attention over the KV cache for
// decode, verify and drafter blocks, its combine, and the prefill attention
// for whole cuBLAS groups) and their launchers, declared in cuda_ops.cuh.
#include <cuda_runtime.h>

#include <math.h>

#include <type_traits>

#include "engine/cuda/cuda_ops.cuh"

#define ATT_THREADS 256
#define ATT_WARPS (ATT_THREADS / 32)

/* Split attention (flash-decoding). Positions are cut into chunks of
   ATT_CHUNK by absolute position; each chunk gives, per row and query head,
   its max score, sum of exponentials and unnormalised output, and a second
   kernel combines a row's chunks in chunk order. The chunking depends only
   on the row's own number of visible positions, so a row gives the same
   bits in any batch. Under a sliding window a row's chunks are those from
   the one its window starts in (positions before the start masked there):
   the chunks before are neither computed nor combined for it, and the
   blocks start from the first chunk of the batch's first row, so a long
   context costs a windowed layer about its window's chunks. Each kv head has nb blocks (about one per SM over all
   kv heads: attn_blocks) that take its chunks in turn (c, c + nb, ...) up
   to the last visible position, read from device memory, so a captured
   graph replays at any cache length without a grid sized for the whole
   window (which, for a 40k-position window, launched thousands of blocks
   that had nothing to do). */

/* Attention by (chunk, kv head, group of up to ATT_ROWS rows): the block
   stages the chunk's K (rows padded by 4 floats, so lanes reading different
   rows hit different banks) and V in shared memory once for all its rows,
   two chunks in flight (the next one's copy is issued before the current
   one is used; the spread shape has one stage, its K and V waited for
   apart), and the warps take items: a row with all G query heads
   sharing the kv head (each K/V value read from shared memory serves G
   heads), or, while the rows' heads fit the warps one each (decode), one
   (row, head) pair. In an item, lane l scores positions l and l+32 for each of
   its heads (full dot products, q broadcast from shared memory), the warp
   reduces max and sum per head, and lane l accumulates output dims
   4l..4l+3 (and 4l+128..) over the row's visible positions in order. A
   head's arithmetic is the same whatever the item holds (heads never mix),
   so a row's bits are the same in any batch; k_attn_combine merges its
   chunks. */
/* stage the GI query vectors of (row m, heads hq..) in the warp's qw */
template <int GI>
__device__ __forceinline__ void attn_stage_q(const float *q, float4 *qw, int m, int hq, int nh, int hd, int lane) {
    const int h4 = hd / 4;
    const float4 *qg = reinterpret_cast<const float4 *>(q + ((size_t)m * nh + hq) * hd);
    for (int i = lane; i < GI * h4; i += 32) qw[i] = qg[i];
    __syncwarp();
}

/* one item over one chunk, its q in qw. A score is a dot product kept as
   four partial sums (dims 4j, 4j+1, 4j+2, 4j+3 over j in order) added as
   (x + y) + (z + w), and an output dim the sum over even and over odd
   positions in order, then added: short dependency chains, the same
   operations for a head whatever else the item holds. */
/* the scores half: each head's weights exp(s - max) into ew, its max and
   sum into the partials; positions lo .. np - 1 of the chunk are the
   row's (lo > 0: its sliding window starts inside the chunk; WIN false:
   no window, lo not read), the others weigh exact zeros */
template <int GI, bool WIN>
__device__ __forceinline__ void attn_scores(const float4 *ks, const float4 *qw, float *ew, float *mpart, float *spart,
                                            int m, int m0, int hq, int nh, int hd, int np, int lo, float scale, int c,
                                            int nchunk, int lane) {
    const int h4 = hd / 4, kst = h4 + 1;
    float4 sc0[GI], sc1[GI];
#pragma unroll
    for (int g = 0; g < GI; g++) sc0[g] = sc1[g] = make_float4(0, 0, 0, 0);
    const float4 *k0 = ks + lane * kst, *k1 = ks + (lane + 32) * kst;
#pragma unroll 4
    for (int j = 0; j < h4; j++) {
        float4 a = k0[j], b = k1[j];
#pragma unroll
        for (int g = 0; g < GI; g++) {
            float4 qq = qw[g * h4 + j];
            sc0[g].x = fmaf(qq.x, a.x, sc0[g].x); sc0[g].y = fmaf(qq.y, a.y, sc0[g].y);
            sc0[g].z = fmaf(qq.z, a.z, sc0[g].z); sc0[g].w = fmaf(qq.w, a.w, sc0[g].w);
            sc1[g].x = fmaf(qq.x, b.x, sc1[g].x); sc1[g].y = fmaf(qq.y, b.y, sc1[g].y);
            sc1[g].z = fmaf(qq.z, b.z, sc1[g].z); sc1[g].w = fmaf(qq.w, b.w, sc1[g].w);
        }
    }
#pragma unroll
    for (int g = 0; g < GI; g++) {
        float d0 = (sc0[g].x + sc0[g].y) + (sc0[g].z + sc0[g].w), d1 = (sc1[g].x + sc1[g].y) + (sc1[g].z + sc1[g].w);
        const bool in0 = lane < np && (!WIN || lane >= lo), in1 = lane + 32 < np && (!WIN || lane + 32 >= lo);
        float s0 = in0 ? d0 * scale : -INFINITY, s1 = in1 ? d1 * scale : -INFINITY;
        float mx = warp_max(fmaxf(s0, s1));
        float e0 = in0 ? expf(s0 - mx) : 0.0f, e1 = in1 ? expf(s1 - mx) : 0.0f;
        float sum = warp_sum(e0 + e1);
        ew[g * ATT_CHUNK + lane] = e0;
        ew[g * ATT_CHUNK + lane + 32] = e1;
        if (lane == 0) {
            size_t slot = ((size_t)(m - m0) * nh + hq + g) * nchunk + c;
            mpart[slot] = mx;
            spart[slot] = sum;
        }
    }
    __syncwarp();
}

/* the output half: each head's unnormalised output over the chunk's
   weights in ew (positions before a window's start weigh +0 against the
   finite values still cached there, adding exact zeros) */
template <int GI>
__device__ __forceinline__ void attn_pv(const float4 *vs, const float *ew, float *opart, int m, int m0, int hq, int nh,
                                        int hd, int np, int c, int nchunk, int lane) {
    const int h4 = hd / 4;
    for (int d4 = lane; d4 < h4; d4 += 32) {
        float4 oe[GI], oo[GI];
#pragma unroll
        for (int g = 0; g < GI; g++) oe[g] = oo[g] = make_float4(0, 0, 0, 0);
        int p = 0;
#pragma unroll 2
        for (; p + 1 < np; p += 2) {
            float4 v = vs[p * h4 + d4], u = vs[(p + 1) * h4 + d4];
#pragma unroll
            for (int g = 0; g < GI; g++) {
                float e = ew[g * ATT_CHUNK + p], f = ew[g * ATT_CHUNK + p + 1];
                oe[g].x = fmaf(e, v.x, oe[g].x); oe[g].y = fmaf(e, v.y, oe[g].y);
                oe[g].z = fmaf(e, v.z, oe[g].z); oe[g].w = fmaf(e, v.w, oe[g].w);
                oo[g].x = fmaf(f, u.x, oo[g].x); oo[g].y = fmaf(f, u.y, oo[g].y);
                oo[g].z = fmaf(f, u.z, oo[g].z); oo[g].w = fmaf(f, u.w, oo[g].w);
            }
        }
        if (p < np) {
            float4 v = vs[p * h4 + d4];
#pragma unroll
            for (int g = 0; g < GI; g++) {
                float e = ew[g * ATT_CHUNK + p];
                oe[g].x = fmaf(e, v.x, oe[g].x); oe[g].y = fmaf(e, v.y, oe[g].y);
                oe[g].z = fmaf(e, v.z, oe[g].z); oe[g].w = fmaf(e, v.w, oe[g].w);
            }
        }
#pragma unroll
        for (int g = 0; g < GI; g++)
            reinterpret_cast<float4 *>(opart + (((size_t)(m - m0) * nh + hq + g) * nchunk + c) * hd)[d4] =
                make_float4(oe[g].x + oo[g].x, oe[g].y + oo[g].y, oe[g].z + oo[g].z, oe[g].w + oo[g].w);
    }
    __syncwarp();
}

template <int GI, bool WIN>
__device__ __forceinline__ void attn_item(const float4 *ks, const float4 *vs, const float4 *qw, float *ew,
                                          float *opart, float *mpart, float *spart, int m, int m0, int hq, int nh,
                                          int hd, int np, int lo, float scale, int c, int nchunk, int lane) {
    attn_scores<GI, WIN>(ks, qw, ew, mpart, spart, m, m0, hq, nh, hd, np, lo, scale, c, nchunk, lane);
    attn_pv<GI>(vs, ew, opart, m, m0, hq, nh, hd, np, c, nchunk, lane);
}

/* The combine: merges a row's partials (one per span positions) for one
   head, on COMB_THREADS threads (a block's first ones; the others only
   meet its barriers). The max is exact in any order; thread t takes
   chunks t, t + COMB_THREADS, ... in order for the sum of exponentials
   (exp(m_c - max) s_c), then a butterfly a warp and the warps' sums in
   warp order; the chunk weights exp(m_c - max) go to shared memory
   (COMB_W at a time); and thread t accumulates dims t, t + COMB_THREADS
   over the chunks in order. The partial outputs are staged in shared
   memory COMB_TF floats (whole chunks) at a time, all threads loading,
   the first tile requested by cp.async with the maxima and sums before
   anything waits, so a row of up to COMB_TF / hd chunks (4096 positions at
   hd 128) costs one round trip to L2. Nothing depends on the batch. */
#define COMB_THREADS 128
#define COMB_W 1024
#define COMB_TF 8192
struct comb_smem {
    float w[COMB_W], red[COMB_THREADS / 32], bc[2];
    float4 ot[COMB_TF / 4];
};
/* row m (slots from m0), head h, L visible positions, its chunks from c0
   on (those before its sliding window are not its own) */
__device__ __forceinline__ void attn_combine_row(comb_smem &cs, float *out, const float *opart, const float *mpart,
                                                 const float *spart, int nh, int hd, int m, int h, int m0, int L,
                                                 int c0, int nchunk, int span, uint32_t *outc) {
    static_assert(ATT_MAX_HD <= 2 * COMB_THREADS, "two dims per thread");
    static_assert(COMB_TF >= ATT_MAX_HD, "a staged tile holds a chunk");
    static_assert(COMB_W >= COMB_THREADS, "a thread's first chunk has its weight in the first tile");
    float *const w = cs.w, *const red = cs.red, *const bc = cs.bc;
    float4 *const ot = cs.ot;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int nc = (L + span - 1) / span - c0;
    size_t base = ((size_t)(m - m0) * nh + h) * nchunk + c0;
    const int per = COMB_TF / hd; /* chunks per staged tile */
    /* the first tile (the first chunks of the first weights' tile), as one cp.async group */
    int n0 = nc < per ? nc : per;
    if (n0 > COMB_W) n0 = COMB_W;
    {
        const float4 *src = reinterpret_cast<const float4 *>(opart + base * hd);
        for (int i = tid; i < n0 * hd / 4; i += COMB_THREADS) cp_async16(ot + i, src + i);
        cp_async_commit();
    }
    /* this thread's first chunk's max and sum, held */
    const float mt = tid < nc ? mpart[base + tid] : -INFINITY,
                st = tid < nc ? spart[base + tid] : 0.0f;
    float mx = mt;
    for (int c = tid + COMB_THREADS; c < nc; c += COMB_THREADS) mx = fmaxf(mx, mpart[base + c]);
    mx = warp_max(mx);
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    if (tid == 0) {
        float v = red[0];
        for (int i = 1; i < COMB_THREADS / 32; i++) v = fmaxf(v, red[i]);
        bc[0] = v;
    }
    __syncthreads();
    mx = bc[0];
    float s = tid < nc ? expf(mt - mx) * st : 0.0f;
    for (int c = tid + COMB_THREADS; c < nc; c += COMB_THREADS)
        s = fmaf(expf(mpart[base + c] - mx), spart[base + c], s);
    s = warp_sum(s);
    if (lane == 0) red[warp] = s; /* (thread 0 read red before the barrier above) */
    __syncthreads();
    if (tid == 0) {
        float v = red[0];
        for (int i = 1; i < COMB_THREADS / 32; i++) v += red[i];
        bc[1] = 1.0f / v;
    }
    float acc0 = 0.0f, acc1 = 0.0f;
    const int d0 = tid, d1 = tid + COMB_THREADS;
    for (int t0 = 0; t0 < nc; t0 += COMB_W) {
        int n = nc - t0 < COMB_W ? nc - t0 : COMB_W;
        __syncthreads(); /* the previous tile's weights are used up */
        for (int c = tid; c < n; c += COMB_THREADS)
            w[c] = expf((t0 == 0 && c == tid ? mt : mpart[base + t0 + c]) - mx);
        __syncthreads();
        for (int s0 = 0; s0 < n; s0 += per) {
            const int ns = n - s0 < per ? n - s0 : per;
            if (t0 || s0) {
                const float4 *src = reinterpret_cast<const float4 *>(opart + (base + t0 + s0) * hd);
                __syncthreads(); /* the previous tile is used up */
                for (int i = tid; i < ns * hd / 4; i += COMB_THREADS) ot[i] = src[i];
            } else {
                cp_async_wait_all(); /* the first tile, requested at the start */
            }
            __syncthreads();
            const float *of = reinterpret_cast<const float *>(ot);
            if (d0 < hd) {
#pragma unroll 4
                for (int c = 0; c < ns; c++) acc0 = fmaf(w[s0 + c], of[c * hd + d0], acc0);
            }
            if (d1 < hd) {
#pragma unroll 4
                for (int c = 0; c < ns; c++) acc1 = fmaf(w[s0 + c], of[c * hd + d1], acc1);
            }
        }
    }
    __syncthreads();
    float inv = bc[1];
    float *o = out + ((size_t)m * nh + h) * hd;
    uint32_t *oc = outc ? outc + (size_t)m * nh * hd : NULL; /* the pre-cut copy: row m of nh * hd values */
    if (d0 < hd) {
        o[d0] = acc0 * inv;
        if (oc) bf16_cut_put(oc, h * hd + d0, o[d0]);
    }
    if (d1 < hd) {
        o[d1] = acc1 * inv;
        if (oc) bf16_cut_put(oc, h * hd + d1, o[d1]);
    }
}

/* grid (rows x heads), COMB_THREADS threads: a (row, head) a block;
   window (causal only; 0: none) the rows' sliding window */
__global__ void __launch_bounds__(COMB_THREADS) k_attn_combine(float *out, const float *opart, const float *mpart,
                                                               const float *spart, int nh, int hd, const int *d_len,
                                                               int nchunk, int m0, int M, int causal, int first,
                                                               int span, int window, uint32_t *outc) {
    __shared__ comb_smem cs;
    pdl_trigger();
    pdl_wait();
    const int m = m0 + (int)blockIdx.x / nh, h = blockIdx.x % nh;
    const int L = *d_len + first + (causal ? m + 1 : M);
    const int c0 = causal ? cu_win_lo(L - 1, window) / span : 0;
    attn_combine_row(cs, out, opart, mpart, spart, nh, hd, m, h, m0, L, c0, nchunk, span, outc);
}

/* shared memory of k_attn_rows with ns stages of padded K and V, each
   warp's q rows and weights */
static size_t att_smem(int G, int h4, int ns, int nw = ATT_WARPS) {
    return (ns * (ATT_CHUNK * (h4 + 1) + ATT_CHUNK * h4) + nw * G * h4) * sizeof(float4) +
           nw * G * ATT_CHUNK * sizeof(float);
}

/* T: the cache's storage (kv_elem): f32 rows are copied to shared memory by
   cp.async as they stand; 16- and 8-bit rows are loaded, widened exactly
   (kv_load4) and stored there as f32, so everything after the staging is
   the f32 kernel's arithmetic on the widened cache. WIN: the launch's rows
   have a sliding window (window > 0, causal); without, the window's
   bounds are compiled out, so a layer without one keeps the registers it
   had before windows (with them, some group sizes spill a few words) */
template <typename T, int G, int NW, bool WIN>
__global__ void __launch_bounds__(32 * NW) k_attn_rows(const float *q, const void *kc, const void *vc, float *opart,
                                                           float *mpart, float *spart, int nh, int nkv, int hd, int cap,
                                                           const int *d_len, int M, float scale, int nchunk, int m0,
                                                           int causal, int first, int two, int inter, int early,
                                                           const float *ksc, const float *vsc, int window) {
    static_assert(ATT_CHUNK == 64, "a lane scores positions lane and lane + 32");
    pdl_trigger();
    DYN_SMEM(float4, sm4);
    const int h4 = hd / 4, kst = h4 + 1; /* K row stride in float4s: hd + 4 floats */
    const int stage = ATT_CHUNK * kst + ATT_CHUNK * h4;                        /* float4s per stage */
    float4 *qs = sm4 + (two ? 2 : 1) * stage;                                 /* qs: [warp][G][h4] */
    float *es = reinterpret_cast<float *>(qs + NW * G * h4);           /* es: [warp][G][ATT_CHUNK] */
    /* nb blocks per kv head take its chunks in turn: consecutive blocks
       share a kv head, or (inter) take the kv heads in turn, so that the
       blocks holding a head's first chunks land on different SMs */
    const int nb = gridDim.x / nkv, kvh = inter ? blockIdx.x % nkv : blockIdx.x / nb;
    const int jb = inter ? blockIdx.x / nkv : blockIdx.x % nb;
    const int mr0 = m0; /* this block's rows: mr0 .. mr0 + R - 1 */
    const int R = M - m0 < ATT_ROWS ? M - m0 : ATT_ROWS;
    const int len = *d_len + first;
    const int Lmax = len + (causal ? mr0 + R : M); /* positions the group's last row sees */
    /* a sliding window (causal rows): the chunks wholly before the window
       of the group's first row (the lowest) are no row's, and the blocks
       take their chunks from the first one that is; a row's own first
       position, lo, masks the chunk its window starts in */
    const int cbase = WIN && causal ? cu_win_lo(len + mr0, window) / ATT_CHUNK : 0;
    auto row_lo = [&](int m) { return WIN && causal ? cu_win_lo(len + m, window) : 0; };
    const int whole = R * G > NW, items = whole ? R : R * G;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float4 *qw = qs + warp * G * h4;
    float *ew = es + warp * G * ATT_CHUNK;
    /* chunk c's K (parts & 1) and V (parts & 2) into stage buf, as one cp.async group */
    auto issue = [&](int c, int buf, int parts) {
        int p0 = c * ATT_CHUNK, nmax = Lmax - p0 < ATT_CHUNK ? Lmax - p0 : ATT_CHUNK;
        float4 *ks = sm4 + buf * stage, *vs = ks + ATT_CHUNK * kst;
        if constexpr (kv_elem<T>::bits == 32) {
            const float4 *kg = reinterpret_cast<const float4 *>(static_cast<const float *>(kc) + ((size_t)kvh * cap + p0) * hd);
            const float4 *vg = reinterpret_cast<const float4 *>(static_cast<const float *>(vc) + ((size_t)kvh * cap + p0) * hd);
            for (int i = threadIdx.x; i < nmax * h4; i += 32 * NW) {
                int p = i / h4, j = i % h4;
                if (parts & 1) cp_async16(ks + p * kst + j, kg + i);
                if (parts & 2) cp_async16(vs + i, vg + i);
            }
        } else {
            const size_t hp = (size_t)kvh * cap + p0; /* the chunk's first row */
            const T *kg = static_cast<const T *>(kc) + hp * hd, *vg = static_cast<const T *>(vc) + hp * hd;
            const float *ksh = ksc ? ksc + hp : NULL, *vsh = vsc ? vsc + hp : NULL;
            for (int i = threadIdx.x; i < nmax * h4; i += 32 * NW) {
                int p = i / h4, j = i % h4;
                if (parts & 1) ks[p * kst + j] = kv_load4<T>(kg, ksh, p, hd, 4 * j);
                if (parts & 2) vs[i] = kv_load4<T>(vg, vsh, p, hd, 4 * j);
            }
        }
        cp_async_commit(); /* (an empty group for the widened rows: the waits below stay as they are) */
    };
    int c = cbase + jb, buf = 0;
    auto valid = [&](int ch) { return ch < nchunk && ch * ATT_CHUNK < Lmax; };
    /* the first chunk into stage 0: K and V as two groups where they are
       waited for apart, else as one */
    const int apart = !two && !whole;
    auto issue_first = [&]() {
        if (apart) {
            issue(c, 0, 1);
            issue(c, 0, 2);
        } else {
            issue(c, 0, 3);
        }
    };
    /* early: when all its positions come before *d_len (cu_attention:
       written before this forward), requested before waiting for the
       previous kernel */
    const int pre = early && valid(c) && (c + 1) * ATT_CHUNK <= *d_len;
    if (pre) issue_first();
    pdl_wait();
    if (!whole && warp < items) attn_stage_q<1>(q, qw, mr0 + warp / G, kvh * G + warp % G, nh, hd, lane);
    if (valid(c) && !pre) issue_first();
    if (apart) {
        /* One stage (the spread shape, or heads too large for two), a warp
           an item (decode): K and V land as separate groups, so the scores
           start once K is in, the next chunk's K is requested while this
           one's V is in use, and its V while its scores are computed; with
           two blocks an SM, one block's loads overlap the other's
           arithmetic. The same arithmetic as attn_item. Measured on an
           H200 (docs/history/benchmarks-log.md, "The decode attention's K and V
           apart"): Qwen3-8B t(1) at 8192 positions 5.68 -> 5.39 ms; the
           same split with two stages at 512 gained nothing. */
        const int r = warp / G, m = mr0 + r, L = len + (causal ? m + 1 : M), lo = row_lo(m);
        const float4 *ks = sm4, *vs = ks + ATT_CHUNK * kst;
        for (; valid(c); c += nb) {
            const int p0 = c * ATT_CHUNK, np = L - p0 < ATT_CHUNK ? L - p0 : ATT_CHUNK;
            const int mine = warp < items && p0 < L && (!WIN || p0 + ATT_CHUNK > lo);
            const int next = valid(c + nb);
            cp_async_wait_one(); /* K */
            __syncthreads();
            if (mine) attn_scores<1, WIN>(ks, qw, ew, mpart, spart, m, m0, kvh * G + warp % G, nh, hd, np, lo - p0,
                                          scale, c, nchunk, lane);
            __syncthreads(); /* K's readers are done */
            if (next) {
                issue(c + nb, 0, 1);
                cp_async_wait_one(); /* V */
            } else {
                cp_async_wait_all();
            }
            __syncthreads();
            if (mine) attn_pv<1>(vs, ew, opart, m, m0, kvh * G + warp % G, nh, hd, np, c, nchunk, lane);
            __syncthreads(); /* V's readers are done */
            if (next) issue(c + nb, 0, 2);
        }
    } else {
        for (; valid(c); c += nb) {
            /* two stages: the next chunk's copy goes out before this one is
               used (its stage was last read before the previous closing
               barrier); one stage (large heads): after */
            if (two && valid(c + nb)) {
                issue(c + nb, buf ^ 1, 3);
                cp_async_wait_one();
            } else {
                cp_async_wait_all();
            }
            __syncthreads();
            const int p0 = c * ATT_CHUNK;
            const float4 *ks = sm4 + buf * stage, *vs = ks + ATT_CHUNK * kst;
            for (int it = warp; it < items; it += NW) {
                int r = whole ? it : it / G, g0 = whole ? 0 : it % G;
                int m = mr0 + r, L = len + (causal ? m + 1 : M), lo = row_lo(m);
                if (p0 >= L || (WIN && p0 + ATT_CHUNK <= lo)) continue; /* (past the row, or before its window) */
                int np = L - p0 < ATT_CHUNK ? L - p0 : ATT_CHUNK;
                if (whole) {
                    attn_stage_q<G>(q, qw, m, kvh * G, nh, hd, lane);
                    attn_item<G, WIN>(ks, vs, qw, ew, opart, mpart, spart, m, m0, kvh * G, nh, hd, np, lo - p0, scale,
                                      c, nchunk, lane);
                } else { /* the warp's one item: its q was staged before the loop */
                    attn_item<1, WIN>(ks, vs, qw, ew, opart, mpart, spart, m, m0, kvh * G + g0, nh, hd, np, lo - p0,
                                      scale, c, nchunk, lane);
                }
            }
            __syncthreads(); /* this stage's readers are done before it is refilled */
            if (two) buf ^= 1;
            else if (valid(c + nb)) issue(c + nb, 0, 3);
        }
    }
}

/* Prefill attention (cu_attention_tiled) on tensor cores: a block takes
   TC_QV query vectors (R = TC_QV / G consecutive rows x the G query heads of
   one kv head, vector v = row v / G, head v % G) and one span of AT_SPLIT
   positions, stages the queries once and the span's K and V in chunks of
   TC_P positions in shared memory, and keeps an online softmax per vector.
   Warp w owns vectors 16 w .. + 15 as the rows of mma.sync m16n8k8 TF32
   tiles (lane g = lane / 4, t = lane % 4 holds vectors 16 w + g and + 8):
   the scores of a chunk are Q (16 x hd) times K^T, and the output O (16 x
   hd, in registers) becomes O corr + P (16 x TC_P) times V. K, V, Q and P
   are f32, so each product is three mmas, hi.hi + hi.lo + lo.hi of
   tf32_cut's halves (the lo.lo term and the truncations are about 2^-20 of
   the product).
   P's accumulator layout (columns 2t, 2t+1 of each 8 positions) is used as
   the A operand's columns t, t+4 as it stands, V's rows taken in the same
   order (a permutation of k shared by A and B gives the same dot product).
   The head dim is padded with zeros to HD (32, 64 or 128). An output
   element is computed from its own vector's row of each tile only, and a
   vector's masked positions add exact zeros (P = 0 against finite V: the
   staged rows past a chunk's end hold zeros or an earlier chunk's values),
   so the result does not depend on the batch; k_attn_combine merges a
   row's spans. Under a sliding window a vector's positions before its
   window are masked the same way, and the spans and chunks wholly before
   the window of the block's first row are skipped (they would add exact
   nothing: tc_softmax). On an sm_90a build and a compute capability 9.0 device,
   cu_attention_tiled takes k_attn_wg (cuda_attn_wg.cu) instead for head
   dims 64 and 128. */
#define TC_P 64
#define TC_MINB 2
#define TC_THREADS 128
#define AT_MAX_HD 128

static int tc_hd(int hd) { return hd <= 32 ? 32 : hd <= 64 ? 64 : 128; }
static size_t tc_smem(int HD) { return sizeof(float) * (2 * (size_t)TC_P + TC_QV) * (HD + 4); }

/* d[n] += a.b[n] for N tiles in three mmas each (lo.hi, hi.lo, hi.hi; a's
   fragment a0..a3, b[n] the tile's b0, b1), each pass over all N tiles in
   turn so that consecutive mmas are independent (the instruction's
   latency is hidden behind the other tiles' rather than waited out) */
template <int N>
__device__ __forceinline__ void mma3_tf32(float (&d)[N][4], const tf32x2 (&a)[4], const tf32x2 (&b)[N][2]) {
#pragma unroll
    for (int n = 0; n < N; n++) mma_tf32(d[n], a[0].l, a[1].l, a[2].l, a[3].l, b[n][0].h, b[n][1].h);
#pragma unroll
    for (int n = 0; n < N; n++) mma_tf32(d[n], a[0].h, a[1].h, a[2].h, a[3].h, b[n][0].l, b[n][1].l);
#pragma unroll
    for (int n = 0; n < N; n++) mma_tf32(d[n], a[0].h, a[1].h, a[2].h, a[3].h, b[n][0].h, b[n][1].h);
}

/* T: the cache's storage, staged as in k_attn_rows (16- and 8-bit rows
   widened exactly into the f32 chunk) */
template <typename T, int HD>
__global__ void __launch_bounds__(TC_THREADS, TC_MINB) k_attn_tc(const float *q, const void *kc, const void *vc,
                                                           const float *ksc, const float *vsc,
                                                           float *opart, float *mpart, float *spart, int nh, int G,
                                                           int hd, int cap, const int *d_len, int M, float scale,
                                                           int nsplit, int first, int window) {
    constexpr int KT = HD / 8, ST = HD + 4; /* k steps (and output tiles) over the head dim; smem row stride */
    pdl_trigger();
    pdl_wait();
    DYN_SMEM(float4, tc_sm4);
    float *Ks = reinterpret_cast<float *>(tc_sm4), *Vs = Ks + TC_P * ST, *Qs = Vs + TC_P * ST;
    const int R = TC_QV / G;
    /* the last row groups (the most positions in a span) start first */
    const int m0 = (gridDim.x - 1 - blockIdx.x) * R, kvh = blockIdx.y, sp = blockIdx.z;
    const int rows = M - m0 < R ? M - m0 : R, nv = rows * G;
    const int len = *d_len + first; /* row 0's position */
    const int p_begin = sp * AT_SPLIT, last = len + m0 + rows; /* positions the block's last row sees */
    /* a sliding window: the first row's is the lowest; a span wholly before
       it is no row's (the combine never reads it) */
    const int lo0 = cu_win_lo(len + m0, window);
    if (p_begin >= last || p_begin + AT_SPLIT <= lo0) return;
    const int p_end = last - p_begin < AT_SPLIT ? last : p_begin + AT_SPLIT;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int va = warp * 16 + g, vb = va + 8;
    /* K and V zeroed first: the padded dims and the rows a short chunk leaves */
    for (int i = threadIdx.x; i < 2 * TC_P * ST; i += TC_THREADS) Ks[i] = 0.0f;
    /* the block's query vectors, copied 16 bytes at a time (they land with
       the first chunk), zero-padded to TC_QV x HD */
    for (int i = threadIdx.x; i < TC_QV * HD / 4; i += TC_THREADS) {
        const int v = i / (HD / 4), d = 4 * (i % (HD / 4));
        if (v < nv && d < hd) cp_async16(Qs + v * ST + d, q + ((size_t)(m0 + v / G) * nh + kvh * G + v % G) * hd + d);
        else *reinterpret_cast<float4 *>(Qs + v * ST + d) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    const int lima = va < nv ? len + m0 + va / G + 1 : 0, limb = vb < nv ? len + m0 + vb / G + 1 : 0;
    const int lowa = cu_win_lo(len + m0 + va / G, window), lowb = cu_win_lo(len + m0 + vb / G, window);
    float mxa = -INFINITY, mxb = -INFINITY, sa = 0.0f, sb = 0.0f;
    float o[KT][4]; /* output tile j: (va, 8j+2t), (va, 8j+2t+1), (vb, 8j+2t), (vb, 8j+2t+1) */
#pragma unroll
    for (int j = 0; j < KT; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    /* the chunks (at multiples of TC_P, as without a window) from the one
       holding the first row's window start: those before it are wholly
       masked for every vector and would change no bit (tc_softmax) */
    const int p_first = lo0 > p_begin ? p_begin + (lo0 - p_begin) / TC_P * TC_P : p_begin;
    const size_t hp = (size_t)kvh * cap; /* the head's first row */
    const T *kg = static_cast<const T *>(kc) + hp * hd, *vgp = static_cast<const T *>(vc) + hp * hd;
    const float *ksh = ksc ? ksc + hp : NULL, *vsh = vsc ? vsc + hp : NULL;
    const int h4 = hd / 4;
    /* scores in base-2 units (exp2f is cheaper than expf); the maxima go out in natural units */
    const float scale2 = scale * 1.44269504088896340736f;
    for (int p0 = p_first; p0 < p_end; p0 += TC_P) {
        const int np = p_end - p0 < TC_P ? p_end - p0 : TC_P;
        __syncthreads(); /* the previous chunk's readers (and the zeroing) are done */
        for (int i = threadIdx.x; i < np * h4; i += TC_THREADS) {
            int p = i / h4, d = 4 * (i % h4);
            if constexpr (kv_elem<T>::bits == 32) {
                cp_async16(Ks + p * ST + d, kg + (size_t)(p0 + p) * hd + d);
                cp_async16(Vs + p * ST + d, vgp + (size_t)(p0 + p) * hd + d);
            } else {
                *reinterpret_cast<float4 *>(Ks + p * ST + d) = kv_load4<T>(kg, ksh, (size_t)(p0 + p), hd, d);
                *reinterpret_cast<float4 *>(Vs + p * ST + d) = kv_load4<T>(vgp, vsh, (size_t)(p0 + p), hd, d);
            }
        }
        cp_async_wait_all();
        __syncthreads();
        /* scores: s[n] = positions 8n+2t, 8n+2t+1 of va, then of vb */
        float s[TC_P / 8][4];
#pragma unroll
        for (int n = 0; n < TC_P / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int k = 0; k < KT; k++) {
            /* A: (va, 8k+t), (vb, 8k+t), (va, 8k+t+4), (vb, 8k+t+4) */
            const float *qa = Qs + (warp * 16 + g) * ST + 8 * k + t;
            const tf32x2 a[4] = {tf32_cut(qa[0]), tf32_cut(qa[8 * ST]), tf32_cut(qa[4]), tf32_cut(qa[8 * ST + 4])};
            tf32x2 b[TC_P / 8][2];
#pragma unroll
            for (int n = 0; n < TC_P / 8; n++) {
                const float *kr = Ks + (8 * n + g) * ST + 8 * k + t;
                b[n][0] = tf32_cut(kr[0]);
                b[n][1] = tf32_cut(kr[4]);
            }
            mma3_tf32(s, a, b);
        }
        float ca, cb;
        tc_softmax(s, np, p0, lima, limb, lowa, lowb, scale2, t, mxa, mxb, sa, sb, ca, cb);
        /* O = O corr + P V, the chunk's P V on the tensor cores from zero and
           the chunks added in f32 (the tensor cores' accumulation truncates;
           over a span's 2048 positions that came to 1.4e-5 of the output),
           in two halves of the head dim to spare registers. k step kk
           covers positions 8kk .. 8kk+7: column t = 8kk+2t, column t+4 =
           8kk+2t+1 */
#pragma unroll
        for (int j0 = 0; j0 < KT; j0 += KT / 2) {
            float oc[KT / 2][4];
#pragma unroll
            for (int j = 0; j < KT / 2; j++) oc[j][0] = oc[j][1] = oc[j][2] = oc[j][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < TC_P / 8; kk++) {
                const tf32x2 a[4] = {tf32_cut(s[kk][0]), tf32_cut(s[kk][2]), tf32_cut(s[kk][1]), tf32_cut(s[kk][3])};
                const float *vr = Vs + (8 * kk + 2 * t) * ST + 8 * j0 + g;
                tf32x2 b[KT / 2][2];
#pragma unroll
                for (int j = 0; j < KT / 2; j++) {
                    b[j][0] = tf32_cut(vr[8 * j]);
                    b[j][1] = tf32_cut(vr[ST + 8 * j]);
                }
                mma3_tf32(oc, a, b);
            }
#pragma unroll
            for (int j = 0; j < KT / 2; j++) {
                o[j0 + j][0] = fmaf(o[j0 + j][0], ca, oc[j][0]);
                o[j0 + j][1] = fmaf(o[j0 + j][1], ca, oc[j][1]);
                o[j0 + j][2] = fmaf(o[j0 + j][2], cb, oc[j][2]);
                o[j0 + j][3] = fmaf(o[j0 + j][3], cb, oc[j][3]);
            }
        }
    }
    tc_store_partials(opart, mpart, spart, o, va, vb, nv, lima, limb, lowa, lowb, p_begin, p_begin + AT_SPLIT, m0, G, nh,
                      kvh, nsplit, sp, t, mxa, mxb, sa, sb, hd);
}

/* ---- launchers ----------------------------------------------------------- */

/* f(std::integral_constant<int, G>) for a runtime G of 1 .. ATT_MAX_G: the
   attention kernels are instantiated per query heads per kv head */
template <typename F> static void with_g(int G, F f) {
    switch (G) {
    case 1: f(std::integral_constant<int, 1>()); break;
    case 2: f(std::integral_constant<int, 2>()); break;
    case 3: f(std::integral_constant<int, 3>()); break;
    case 4: f(std::integral_constant<int, 4>()); break;
    case 5: f(std::integral_constant<int, 5>()); break;
    case 6: f(std::integral_constant<int, 6>()); break;
    case 7: f(std::integral_constant<int, 7>()); break;
    default: f(std::integral_constant<int, 8>()); break;
    }
}

int cu_attn_spread_for(const cu_tuning *t, int len) {
    return t->att_spread >= 0 ? t->att_spread : len >= ATT_SPREAD_FROM;
}

/* blocks per kv head for k_attn_rows: about per_sm blocks per SM over all
   kv heads (one by default: each holds two chunks of K and V in shared
   memory, so one fits an SM), at least one, and no more than there are
   chunks */
static int attn_blocks(int nkv, int nchunk, int per_sm) {
    int nb = per_sm * sm_count() / nkv;
    if (nb < 1) nb = 1;
    return nb < nchunk ? nb : nchunk;
}

/* the largest dynamic shared memory k_attn_rows<T, G, NW, WIN> may take: what the
   device's opt-in limit leaves beside its static shared memory, the
   attribute raised to that once, or the default 48 KiB's share where the
   attribute cannot be raised */
template <typename T, int G, int NW, bool WIN> static int attn_optin(void) {
    static int optin = 0;
    if (!optin) {
        int dev = 0, lim = 0;
        cudaGetDevice(&dev);
        if (cudaDeviceGetAttribute(&lim, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) lim = 48 << 10;
        cudaFuncAttributes fa;
        const int fixed =
            cudaFuncGetAttributes(&fa, k_attn_rows<T, G, NW, WIN>) == cudaSuccess ? (int)fa.sharedSizeBytes : 0;
        if (cudaFuncSetAttribute(k_attn_rows<T, G, NW, WIN>, cudaFuncAttributeMaxDynamicSharedMemorySize, lim - fixed) !=
            cudaSuccess) {
            cudaGetLastError(); /* (not sticky) */
            lim = 48 << 10;
        }
        optin = lim - fixed;
    }
    return optin;
}

/* Verify rows on ATT_WIDE warps a block (unless the tuning's att_wide is
   0): where a launch's rows have more items than ATT_WARPS warps
   take one each (3-16 rows of Qwen3's four query heads a kv head), twice
   the warps take them, so that a 9-16-row verify's block runs one row's
   item a warp instead of two in turn, and 3-4 rows one (row, head) pair a
   warp. Which warp takes an item does not enter its arithmetic: the same
   bits. Measured on an H200 (docs/history/benchmarks-log.md, "The prepared switches
   measured"): Qwen3-8B t(16) at 512 positions 5.86 -> 5.78 ms, t(9)
   5.30 -> 5.19; t(1) and context 8192 unchanged. */
#define ATT_WIDE 16

/* one launch of k_attn_rows for rows m0 .. (ATT_ROWS of them at most);
   k_attn_combine follows */
template <typename T, int G, bool WIN>
static void attn_launch(cu_go st, float *opart, float *mpart, float *spart, const float *q, const cu_kv &kv, int M, int nh, int nkv, int hd, int cap, const int *d_len,
                       float scale, int nchunk, int m0, int causal, int first, int spread, int early, int window) {
    const int optin = attn_optin<T, G, ATT_WARPS, WIN>();
    int two = att_smem(G, hd / 4, 2) <= (size_t)optin, per_sm = 1, inter = 0;
    /* spread (long caches, cu_attn_spread_for): one K/V stage and as many
       blocks as fit the SMs that way (two per SM for the Qwen3 shapes), the
       kv heads interleaved over the blocks. Measured on an H200
       (docs/history/benchmarks-log.md, "Prefill attention on tensor cores"): a 16-row
       verify of Qwen3-8B 1.1 ms faster at context 8192, 0.3 ms slower at
       512, one row the same at 8192 and 0.05 ms slower at 512. Either way
       a chunk's partials are the same bits. */
    static int fit_hd = -1, fit = 0;
    if (spread) {
        if (fit_hd != hd) {
            if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, k_attn_rows<T, G, ATT_WARPS, WIN>, ATT_THREADS,
                                                              att_smem(G, hd / 4, 1)) != cudaSuccess)
                fit = 0;
            fit_hd = hd;
        }
        if (fit >= 2 && att_smem(G, hd / 4, 1) <= (size_t)optin) {
            two = 0;
            inter = 1;
            per_sm = fit;
        }
    }
    const int R = M - m0 < ATT_ROWS ? M - m0 : ATT_ROWS;
    const int grid = nkv * attn_blocks(nkv, nchunk, per_sm);
    /* (up to five heads a kv head: more would spill at 128 registers a thread) */
    const int wide = G <= 5 && two && !inter && R * G > ATT_WARPS && st.t->att_wide;
    if constexpr (G <= 5)
        if (wide && att_smem(G, hd / 4, 2, ATT_WIDE) <= (size_t)attn_optin<T, G, ATT_WIDE, WIN>()) {
            launch_smem(k_attn_rows<T, G, ATT_WIDE, WIN>, grid, 32 * ATT_WIDE, att_smem(G, hd / 4, 2, ATT_WIDE), st, q,
                        (const void *)kv.k, (const void *)kv.v, opart, mpart, spart, nh, nkv, hd, cap, d_len, M, scale,
                        nchunk, m0, causal, first, two, inter, early, (const float *)kv.ks, (const float *)kv.vs, window);
            return;
        }
    launch_smem(k_attn_rows<T, G, ATT_WARPS, WIN>, grid, ATT_THREADS, att_smem(G, hd / 4, two ? 2 : 1), st, q,
                (const void *)kv.k, (const void *)kv.v, opart, mpart, spart, nh, nkv, hd, cap, d_len, M, scale, nchunk,
                m0, causal, first, two, inter, early, (const float *)kv.ks, (const float *)kv.vs, window);
}

/* k_attn_rows' early requests (unless the tuning's att_early is 0; the
   same bits either way). Measured on an H200 (docs/history/benchmarks-log.md, "The
   decode attention's first chunk before the wait"): Qwen3-8B t(1) and
   t(16) 1-2% faster at 512 and 8192 positions. */

void cu_attention(cu_go st, float *out, const float *q, cu_kv kv, float *part, int M,
                  int nh, int nkv, int hd, int cap, const int *d_len, float scale, int causal, int first, int spread,
                  int window, uint32_t *outc) {
    int G = nh / nkv, nchunk = (cap + ATT_CHUNK - 1) / ATT_CHUNK;
    if (!causal) window = 0; /* (a drafter's block sees its whole context) */
    size_t parts = (size_t)ATT_ROWS * nh * nchunk;
    float *opart = part, *mpart = part + parts * hd, *spart = mpart + parts;
    for (int m0 = 0; m0 < M; m0 += ATT_ROWS) {
        int R = M - m0 < ATT_ROWS ? M - m0 : ATT_ROWS;
        with_kv(kv.bits, [&](auto e) {
            with_g(G, [&](auto g) {
                /* (a window has kernels of its own: see k_attn_rows' WIN) */
                if (window > 0)
                    attn_launch<decltype(e), decltype(g)::value, true>(st, opart, mpart, spart, q, kv, M, nh, nkv, hd,
                                                                       cap, d_len, scale, nchunk, m0, causal, first,
                                                                       spread, st.t->att_early, window);
                else
                    attn_launch<decltype(e), decltype(g)::value, false>(st, opart, mpart, spart, q, kv, M, nh, nkv, hd,
                                                                        cap, d_len, scale, nchunk, m0, causal, first,
                                                                        spread, st.t->att_early, 0);
            });
        });
        launch(k_attn_combine, R * nh, COMB_THREADS, cu_serial(st), /* (see cu_go's serial) */ out, opart, mpart, spart, nh, hd, d_len, nchunk, m0, M, causal, first,
               ATT_CHUNK, window, outc);
    }
}

int cu_attn_tiled_ok(int nh, int nkv, int hd) {
    return hd % 4 == 0 && hd <= AT_MAX_HD && nh % nkv == 0 && nh / nkv <= ATT_MAX_G;
}

template <typename T, int HD>
static void tc_launch(cu_go st, float *opart, float *mpart, float *spart, const float *q, const cu_kv &kv, int M, int nh, int nkv, int hd, int cap, const int *d_len, float scale,
                      int nsplit, int first, int window) {
    static int sized = 0;
    if (!sized) {
        cudaFuncSetAttribute(k_attn_tc<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)tc_smem(HD));
        sized = 1;
    }
    const int G = nh / nkv, R = TC_QV / G;
    launch_smem(k_attn_tc<T, HD>, dim3((M + R - 1) / R, nkv, nsplit), TC_THREADS, tc_smem(HD), st, q,
                (const void *)kv.k, (const void *)kv.v, (const float *)kv.ks, (const float *)kv.vs, opart,
                mpart, spart, nh, G, hd, cap, d_len, M, scale, nsplit, first, window);
}

void cu_attention_tiled(cu_go st, float *out, const float *q, cu_kv kv, float *part,
                        float *wg_img, int M, int nh, int nkv, int hd, int cap, const int *d_len, float scale,
                        int window) {
    int G = nh / nkv, nsplit = (cap + AT_SPLIT - 1) / AT_SPLIT;
    /* the partials share cu_attention's scratch: at most its slot count of rows x spans per pass */
    size_t parts = (size_t)ATT_ROWS * nh * ((cap + ATT_CHUNK - 1) / ATT_CHUNK);
    float *opart = part, *mpart = part + parts * hd, *spart = mpart + parts;
    int step = (int)(parts / ((size_t)nh * nsplit));
    int R = TC_QV / G;
    if (step >= R) step -= step % R;
    if (step < 1) step = 1;
    /* the kernel for the head dim and the cache's storage */
    auto pick = [&](auto e) {
        using T = decltype(e);
        return tc_hd(hd) == 32 ? tc_launch<T, 32> : tc_hd(hd) == 64 ? tc_launch<T, 64> : tc_launch<T, 128>;
    };
    auto run = kv.bits == 16 ? pick(uint16_t{}) : kv.bits == 8 ? pick(int8_t{}) : pick(float{});
    const int wg = wg_img && cu_attn_wg_ready(st.t, hd);
    if (wg) cu_attn_wg_prep(st, wg_img, kv, nkv, hd, cap, d_len, M, window);
    for (int m0 = 0; m0 < M; m0 += step) {
        int n = M - m0 < step ? M - m0 : step;
        const float *qm = q + (size_t)m0 * nh * hd;
        if (wg) cu_attn_wg(st, wg_img, opart, mpart, spart, qm, n, nh, nkv, hd, cap, d_len, scale, nsplit, m0, window);
        else run(st, opart, mpart, spart, qm, kv, n, nh, nkv, hd, cap, d_len, scale, nsplit, m0, window);
        launch(k_attn_combine, n * nh, COMB_THREADS, cu_serial(st), /* (see cu_go's serial) */ out + (size_t)m0 * nh * hd, opart, mpart, spart, nh, hd, d_len, nsplit, 0,
               n, 1, m0, AT_SPLIT, window, (uint32_t *)NULL);
    }
}
