/* cuda_ops: the device kernels of the CUDA backend behind host launchers
 * (cuda_ops.cu), shared by the target's forward pass (cuda_backend.cu) and
 * the drafters'. Launchers only enqueue on the given stream; callers check
 * cudaGetLastError after a sequence. Activations are f32; matrices (dmat)
 * are in their file dtype (bf16, f16 or f32), row-major [N][K].
 *
 * Every kernel computes a row with the same instruction sequence whatever
 * the number of rows in the launch, so a row inside a batch is bit-identical
 * to the row alone (the lossless guarantee of speculative decoding on the
 * GPU rests on this; tests/cuda checks it). */
#ifndef DS_CUDA_OPS_CUH
#define DS_CUDA_OPS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_tuning.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "base/util.h"
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return ds_err(err, errlen, "CUDA: %s: %s", #call, cudaGetErrorString(e_)); \
    } while (0)

#define CK_LAUNCH()                                                                                \
    do {                                                                                           \
        cudaError_t e_ = cudaGetLastError();                                                       \
        if (e_ != cudaSuccess) return ds_err(err, errlen, "CUDA kernel launch: %s", cudaGetErrorString(e_)); \
    } while (0)

#define CU_GEMM_MIN_ROWS CUDA_GEMM_MIN_ROWS
#define ATT_MAX_HD 256 /* largest head_dim the attention kernels take */
#define ATT_MAX_G 8    /* query heads per kv head */
#define ATT_CHUNK 64   /* positions per split-attention partial */
#define ATT_ROWS 32    /* rows per attention launch (bounds the partials scratch) */
#define ATT_SPREAD_FROM 1024 /* cache length from which the decode attention takes the spread shape */

/* the first position a causal row at position p sees under a sliding
   window of `window` positions (0: none): p - window + 1, or 0 */
__host__ __device__ inline int cu_win_lo(int p, int window) {
    return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

/* a kernel's dynamic shared memory, as an array of T named name (the CPU
   runs of tests/cuemu give it the block's buffer instead) */
#ifndef DSPARK_CUEMU
#define DYN_SMEM(T, name) extern __shared__ T name[]
#endif

/* floats of split-attention scratch for a cache of cap positions:
   partial outputs, maxima and sums */
static inline size_t cu_attn_part_floats(int nh, int hd, int cap) {
    return (size_t)ATT_ROWS * nh * ((cap + ATT_CHUNK - 1) / ATT_CHUNK) * (hd + 2);
}

/* ---- the KV cache's storage (--kv-bits) ---------------------------------- */

/* One layer's KV cache on the device: k and v [nkv][cap][hd] elements of
   `bits` (32: float, 16: IEEE f16 bits as uint16_t, 8: int8_t), and for 8
   bits one f32 scale per (kv head, position), ks and vs [nkv][cap] (NULL
   otherwise). The stored values follow engine/kv.c's row rules bit for bit
   (kv_f16_bits, kv_i8_row below): every row is quantized from that row
   alone, so a row's stored bits never depend on its batch. The drafters'
   caches are always f32 (cu_kv_f32). */
struct cu_kv {
    void *k, *v;
    float *ks, *vs;
    int bits;
};
static inline cu_kv cu_kv_f32(float *kc, float *vc) { return cu_kv{kc, vc, NULL, NULL, 32}; }

/* f32 -> IEEE f16 bits as kv_quant_f16 (engine/kv.c) computes them:
   saturated at +-65504 first (an outlier never becomes inf), then round to
   nearest even (ds_f32_to_f16's integer rule; a NaN keeps its sign with
   the quiet pattern 0x7e00), with no dependence on the device's
   conversion instructions */
__device__ __forceinline__ uint16_t kv_f16_bits(float f) {
    f = f > 65504.0f ? 65504.0f : f < -65504.0f ? -65504.0f : f;
    const uint32_t u = __float_as_uint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a < 0x38800000u) { /* an f16 subnormal or zero: units of 2^-24, the product exact */
        const float x = __fmul_rn(__uint_as_float(a), 16777216.0f);
        uint32_t m = (uint32_t)x;
        const float rem = __fsub_rn(x, (float)m);
        if (rem > 0.5f || (rem == 0.5f && (m & 1u))) m++;
        return (uint16_t)(sign | m);
    }
    const uint32_t e = (a >> 23) - 112u, m = a & 0x7fffffu, rest = m & 0x1fffu;
    uint32_t r = (e << 10) | (m >> 13);
    if (rest > 0x1000u || (rest == 0x1000u && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}
/* f16 bits -> f32, exact */
__device__ __forceinline__ float kv_f16_wide(uint16_t h) { return __half2float(__ushort_as_half(h)); }

/* kv_quant_i8's rule for one value, given the row's max |x| (amax over the
   row with fmaxf, exact in any order): zeros (and scale 0) for a row of
   zeros or a non-finite max, else q = rint(x * (127 / amax)) within
   +-127, scale = amax / 127, each step one IEEE-rounded operation as on
   the CPU */
__device__ __forceinline__ int8_t kv_i8_code(float x, float amax) {
    if (!(amax > 0.0f) || !isfinite(amax)) return 0;
    const float r = (float)__float2int_rn(__fmul_rn(x, __fdiv_rn(127.0f, amax)));
    return (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r);
}
__device__ __forceinline__ float kv_i8_scale(float amax) {
    return !(amax > 0.0f) || !isfinite(amax) ? 0.0f : __fdiv_rn(amax, 127.0f);
}

/* the storage types the attention kernels are instantiated for, and the
   exact widening of four stored values at element e of a row with scale
   sc (kv_dequant_*: f16 widened, q x scale rounded once) */
template <typename T> struct kv_elem;
template <> struct kv_elem<float> {
    static constexpr int bits = 32;
};
template <> struct kv_elem<uint16_t> {
    static constexpr int bits = 16;
    __device__ static __forceinline__ float4 wide4(const void *row, int e, float) {
        const uint2 u = *reinterpret_cast<const uint2 *>(static_cast<const uint16_t *>(row) + e);
        return make_float4(kv_f16_wide((uint16_t)(u.x & 0xffffu)), kv_f16_wide((uint16_t)(u.x >> 16)),
                           kv_f16_wide((uint16_t)(u.y & 0xffffu)), kv_f16_wide((uint16_t)(u.y >> 16)));
    }
};
template <> struct kv_elem<int8_t> {
    static constexpr int bits = 8;
    __device__ static __forceinline__ float4 wide4(const void *row, int e, float sc) {
        const uint32_t u = *reinterpret_cast<const uint32_t *>(static_cast<const int8_t *>(row) + e);
        return make_float4(__fmul_rn((float)(int8_t)(u & 0xffu), sc), __fmul_rn((float)(int8_t)((u >> 8) & 0xffu), sc),
                           __fmul_rn((float)(int8_t)((u >> 16) & 0xffu), sc), __fmul_rn((float)(int8_t)(u >> 24), sc));
    }
};
/* f(T{}) for the storage of kv.bits (32, 16 or 8) */
template <typename F> static void with_kv(int bits, F f) {
    if (bits == 16) f(uint16_t{});
    else if (bits == 8) f(int8_t{});
    else f(float{});
}
/* four values of position p (a row of hd elements; its scale from sc, a
   head's [cap] scales, or none) at element e, widened to f32: the float4
   as stored for f32 */
template <typename T>
__device__ __forceinline__ float4 kv_load4(const void *base, const float *sc, size_t p, int hd, int e) {
    if constexpr (kv_elem<T>::bits == 32) {
        return *reinterpret_cast<const float4 *>(static_cast<const float *>(base) + p * hd + e);
    } else {
        return kv_elem<T>::wide4(static_cast<const T *>(base) + p * hd, e, sc ? sc[p] : 0.0f);
    }
}
/* one value of position p at element e, widened the same way */
template <typename T>
__device__ __forceinline__ float kv_load1(const void *base, const float *sc, size_t p, int hd, int e) {
    const T x = static_cast<const T *>(base)[p * hd + e];
    if constexpr (kv_elem<T>::bits == 32) return x;
    else if constexpr (kv_elem<T>::bits == 16) return kv_f16_wide(x);
    else return __fmul_rn((float)x, sc[p]);
}

/* ---- launching ---------------------------------------------------------- */

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ---- tensor-core helpers (mma.sync m16n8k8 TF32) --------------------------- */

#ifndef DSPARK_CUEMU /* (tests/cuemu/emu.h gives the CPU its own mma_tf32 and mma_bf16) */
__device__ __forceinline__ void mma_tf32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* mma.sync m16n8k16 BF16 with f32 accumulation: A 16 x 16 (a0 row g, k 2t
   and 2t+1 in its low and high halves; a1 row g+8; a2, a3 the same at k
   2t+8 and 2t+9), B 16 x 8 (b0 k 2t and 2t+1 of column g, b1 k 2t+8 and
   2t+9), the accumulators as mma_tf32's */
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
#endif

/* x0 and x1 as bf16 heads (rounded to nearest even) and bf16 tails (x
   minus its head, exact in f32, then rounded), packed as a bf16x2 operand
   each (x0 in the low half): head plus tail carry x to within 2^-17 of
   its size, in six instructions a pair. An Inf or NaN x, or one whose
   head rounds to Inf (from 0x7f7f8000, about 3.3895e38), leaves a head and
   tail that add to NaN (a NaN tail, or an infinite one of the other sign),
   so its products' sum is NaN. */
struct bf16x2_cut {
    uint32_t h, l;
};
__device__ __forceinline__ bf16x2_cut bf16_cut2(float x0, float x1) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
    const uint32_t hb = *reinterpret_cast<const uint32_t *>(&h);
    const __nv_bfloat162 l =
        __floats2bfloat162_rn(x0 - __uint_as_float(hb << 16), x1 - __uint_as_float(hb & 0xffff0000u));
    return {hb, *reinterpret_cast<const uint32_t *>(&l)};
}

/* a matmul's pre-cut input (in, for cu_matmul_add_cut) or the pre-cut
   copy of its output that the SwiGLU epilogue writes (out); NULL: none.
   r (or NULL): with in, the rows' RMSNorm scales from cu_norm_cut, in
   being the norm weights times the rows, pre-cut: the matmul scales its
   sums by them as the folded norm does (the folded norm's bits). */
struct cu_cut {
    const uint32_t *in;
    uint32_t *out;
    const float *r;
};

/* An activation row cut ahead of its matmul (the pre-cut input of
   cu_matmul_add_cut, written by the kernel that produces the row): K u32
   words, word 2p the bf16x2 heads of values 2p and 2p + 1 (bf16_cut2),
   word 2p + 1 their tails, so the same bytes as the f32 row and the
   matmul loads its operands as they are. bf16_cut_put stores value k's
   head and tail (the halves bf16_cut2 gives it). */
__device__ __forceinline__ void bf16_cut_put(uint32_t *row, int k, float v) {
    const __nv_bfloat16 h = __float2bfloat16_rn(v), l = __float2bfloat16_rn(v - __bfloat162float(h));
    __nv_bfloat16 *p = reinterpret_cast<__nv_bfloat16 *>(row) + 4 * (k >> 1) + (k & 1);
    p[0] = h;
    p[2] = l;
}

#ifndef DSPARK_CUEMU /* (tests/cuemu/emu.h: the CPU's cp.async) */
/* 16-byte asynchronous copies into shared memory (the attention kernels) */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* all but the most recently committed group have landed */
__device__ __forceinline__ void cp_async_wait_one() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }
#endif

/* x as a TF32 head and tail, for the matmul's two-mma products and the
   attention's three-mma ones: the head is x as it stands (the tensor core
   reads a TF32 operand's top 19 bits and ignores the 13 below, so it
   multiplies x truncated), the tail x minus that truncation (exact),
   itself truncated by the tensor core: the two carry x to within 2^-21 of
   its size, in two instructions (a rounded head and tail, as
   cvt.rna.tf32.f32 gives, carry it to 2^-22 but cost five with the Inf and
   NaN guard). An Inf or NaN x leaves a NaN tail, so its products are NaN. */
struct tf32x2 {
    uint32_t h, l;
};
__device__ __forceinline__ tf32x2 tf32_cut(float x) {
    uint32_t b = __float_as_uint(x);
    return {b, __float_as_uint(x - __uint_as_float(b & 0xffffe000u))};
}

/* The prefill attention kernels' online softmax over one staged chunk
   (k_attn_tc, k_attn_wg), one vector per row of a lane quad (lanes 4g ..
   4g+3): s[n][e] is position 8n + 2t + e of vector a, s[n][2 + e] of vector
   b (the mma accumulator layout); positions at or past np in the chunk (at
   p0), at or past a vector's limit, or before its window's first position
   (lowa, lowb: 0 without a window) are masked. Scores are scaled into
   base-2 units by scale2; leaves exp2 of them less the new maxima in s and
   the factors that correct the vectors' earlier sums and outputs in ca,
   cb. A chunk wholly masked for a vector before any of its positions
   leaves its maximum -inf, its sum and output +0 (the factor 1): exactly
   as if the chunk were not run, so skipping such chunks changes no bit. */
template <int NT>
__device__ __forceinline__ void tc_softmax(float (&s)[NT][4], int np, int p0, int lima, int limb, int lowa, int lowb,
                                           float scale2, int t, float &mxa, float &mxb, float &sa, float &sb, float &ca,
                                           float &cb) {
    float cma = -INFINITY, cmb = -INFINITY;
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int p = 8 * n + 2 * t + e;
            s[n][e] = p < np && p0 + p < lima && p0 + p >= lowa ? s[n][e] * scale2 : -INFINITY;
            s[n][2 + e] = p < np && p0 + p < limb && p0 + p >= lowb ? s[n][2 + e] * scale2 : -INFINITY;
            cma = fmaxf(cma, s[n][e]);
            cmb = fmaxf(cmb, s[n][2 + e]);
        }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        cma = fmaxf(cma, __shfl_xor_sync(0xffffffffu, cma, off));
        cmb = fmaxf(cmb, __shfl_xor_sync(0xffffffffu, cmb, off));
    }
    const float mna = fmaxf(mxa, cma), mnb = fmaxf(mxb, cmb);
    ca = mna == -INFINITY ? 1.0f : exp2f(mxa - mna);
    cb = mnb == -INFINITY ? 1.0f : exp2f(mxb - mnb);
    float csa = 0.0f, csb = 0.0f;
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            s[n][e] = s[n][e] == -INFINITY ? 0.0f : exp2f(s[n][e] - mna);
            s[n][2 + e] = s[n][2 + e] == -INFINITY ? 0.0f : exp2f(s[n][2 + e] - mnb);
            csa += s[n][e];
            csb += s[n][2 + e];
        }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        csa += __shfl_xor_sync(0xffffffffu, csa, off);
        csb += __shfl_xor_sync(0xffffffffu, csb, off);
    }
    mxa = mna;
    mxb = mnb;
    sa = sa * ca + csa;
    sb = sb * cb + csb;
}

/* The prefill attention kernels' partials of a block's span sp (of nsplit)
   for this lane's vectors a and b (of the block's nv; vector v is row m0 +
   v / G, head kvh G + v % G): the maximum in natural units, the sum, and
   the output tiles o[j] (dims 8j + 2t, + 1) below hd. The combine never
   reads spans a row does not reach, nor those that end before its window
   (lowa, lowb; the span ends at p_stop), so those are not written. */
template <int KT>
__device__ __forceinline__ void tc_store_partials(float *opart, float *mpart, float *spart, const float (&o)[KT][4],
                                                  int va, int vb, int nv, int lima, int limb, int lowa, int lowb,
                                                  int p_begin, int p_stop, int m0, int G, int nh, int kvh, int nsplit,
                                                  int sp, int t, float mxa, float mxb, float sa, float sb, int hd) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int v = h ? vb : va, lim = h ? limb : lima, low = h ? lowb : lowa;
        if (v >= nv || lim <= p_begin || low >= p_stop) continue;
        size_t slot = ((size_t)(m0 + v / G) * nh + kvh * G + v % G) * nsplit + sp;
        if (t == 0) {
            mpart[slot] = (h ? mxb : mxa) * 0.69314718055994530942f;
            spart[slot] = h ? sb : sa;
        }
        float *dst = opart + slot * hd + 2 * t;
#pragma unroll
        for (int j = 0; j < KT; j++)
            if (8 * j + 2 * t < hd) *reinterpret_cast<float2 *>(dst + 8 * j) = make_float2(o[j][2 * h], o[j][2 * h + 1]);
    }
}

/* the current device's SM count (launch shapes are chosen from it) */
static inline int sm_count(void) {
    static int sms = 0;
    if (!sms) {
        int dev = 0;
        cudaGetDevice(&dev);
        if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1) sms = 128;
    }
    return sms;
}

/* Programmatic dependent launch: a kernel lets the next one in its stream be
   scheduled once all its blocks have started (pdl_trigger) and waits for the
   previous kernel's completion and memory (pdl_wait) before it reads
   anything an earlier kernel wrote. The matmuls issue their first weight
   loads before waiting, so one kernel's weight stream overlaps the previous
   kernel's tail. Launched without the attribute, both are no-ops. Every
   write comes after the wait, so a kernel never races an earlier one. */
__device__ __forceinline__ void pdl_trigger() {
#if __CUDA_ARCH__ >= 900 /* (older GPUs have no programmatic dependent launch: see pdl_enabled) */
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* device gpu's compute capability as major * 10 + minor (0 if unknown;
   -1: the current device) */
static inline int cu_device_cc(int gpu) {
    int ma = 0, mi = 0;
    if (gpu < 0 && cudaGetDevice(&gpu) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&ma, cudaDevAttrComputeCapabilityMajor, gpu) != cudaSuccess ||
        cudaDeviceGetAttribute(&mi, cudaDevAttrComputeCapabilityMinor, gpu) != cudaSuccess)
        return 0;
    return ma * 10 + mi;
}

/* The virtual architecture (major * 10 + minor) this build's kernels run
   from on the current device, 0 where the runtime does not say; -1 with
   the reason in err when the build has no kernel image for the device
   (another GPU than it was built for). */
int cu_code_arch(char *err, size_t errlen);
/* whether the kernels running on the current device were compiled with
   what compute capability 9.0 adds (clusters, programmatic dependent
   launch): the device has it and the code is no older (where the runtime
   does not say, the device decides) */
static inline int cu_hopper_code(void) {
    static int on = -1;
    if (on < 0) {
        int a = cu_code_arch(NULL, 0);
        on = cu_device_cc(-1) >= 90 && (a == 0 || a >= 90);
    }
    return on;
}

/* What every launcher takes in place of a bare stream: the stream, the
   tuning its launches follow (cuda_tuning.h: the model's, never NULL), and
   the per-launch choices its caller makes, all explicit:

   serial: launched without programmatic dependent launch. Kernels are
   launched with it allowed (pdl_trigger / pdl_wait above) where the device
   takes it and t->pdl; two launches go without: the attention's combine
   and the o projection after it. Measured on an H200 (docs/history/benchmarks-log.md,
   "PDL where it pays"), PDL on them cost a Qwen3-8B decode step 0.45 ms at
   context 512 and 0.55 ms at 8192, more than PDL saves everywhere else,
   and on the o projection still 0.5-0.6 ms with the present matmul. Why is
   not known: the blocks become resident early and wait, but two o blocks
   an SM fit beside a combine block, so it is not a lack of room; nor is it
   the o blocks' weight requests before their wait, or all their warps
   waiting at once (both measured as slow).

   late: the late trigger, the tensor-core matmul letting the next kernel
   launch after its main loop instead of at its start (no result changes:
   a kernel's wait is for the whole previous grid wherever the trigger
   is); set for the chained decode step's launches (t->pdl_late -1), or
   for every launch or none by t->pdl_late 1 or 0 (cu_pdl_late). Measured
   on an H200 (docs/history/benchmarks-log.md, "The combine in one round trip measured;
   the late trigger"): the chained one-row step of Qwen3-8B 4,465 -> 4,438
   us; single forwards 0.03-0.08 ms slower at one row and 0.03 at 16, so
   those keep the trigger at the start.

   two: bf16 SwiGLU matmuls of 1-8 rows (four tiles a block) run two blocks
   an SM with two chunks in flight a warp (128 registers) instead of one
   block with three (184): the same bits, as neither changes a row's
   operations. Measured on an H200 (docs/history/benchmarks-log.md, "Two SwiGLU blocks
   an SM"): the Qwen3-8B gate+up 49.8 -> 47.9 us at one row and 51.4 ->
   49.1 at eight; a forward 1.1% faster at one row and 3% at eight with 512
   cached positions, but 1.2% slower at one row with 8192. So the forward
   sets it for the decode attention's short-cache shape only
   (cu_swiglu_two: t->swiglu2 -1), or at every length by t->swiglu2.

   It converts to its stream, for the runtime's calls. */
struct cu_go {
    cudaStream_t s;
    const cu_tuning *t;
    int serial, late, two;
    operator cudaStream_t() const { return s; }
};
/* launches on stream s under tuning t, no per-launch choice made */
static inline cu_go cu_go_on(cudaStream_t s, const cu_tuning *t) { return cu_go{s, t, 0, 0, 0}; }
/* g's launches without programmatic dependent launch */
static inline cu_go cu_serial(cu_go g) {
    g.serial = 1;
    return g;
}
/* whether g's tensor-core matmuls trigger late */
static inline int cu_pdl_late(const cu_go &g) { return g.t->pdl_late >= 0 ? g.t->pdl_late : g.late; }
/* whether the forward's gate/up runs two blocks an SM under the decode
   attention's shape spread (see cu_go's two) */
static inline int cu_swiglu_two(const cu_tuning *t, int spread) { return t->swiglu2 >= 0 ? t->swiglu2 : !spread; }

/* whether g's launches allow programmatic dependent launch: from compute
   capability 9.0 (Hopper); the kernels' pdl_trigger and pdl_wait compile
   to nothing for older GPUs, and a build for one run on a newer GPU must
   not launch them as if they waited */
static inline int pdl_enabled(const cu_go &g) { return !g.serial && g.t->pdl && cu_hopper_code(); }

/* Launches k with thread-block clusters of cluster blocks along x (0:
   none) and programmatic dependent launch where pdl_enabled. */
template <typename... KA, typename... A>
static inline void launch_cluster(void (*k)(KA...), dim3 grid, dim3 block, size_t smem, int cluster, cu_go st,
                                  A... args) {
    cudaLaunchAttribute at[2];
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = at;
    if (cluster > 0) {
        at[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
        at[cfg.numAttrs].val.clusterDim.x = cluster;
        at[cfg.numAttrs].val.clusterDim.y = 1;
        at[cfg.numAttrs].val.clusterDim.z = 1;
        cfg.numAttrs++;
    }
    if (pdl_enabled(st)) {
        at[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;
        cfg.numAttrs++;
    }
    cudaLaunchKernelEx(&cfg, k, (KA)args...);
}

template <typename... KA, typename... A>
static inline void launch_smem(void (*k)(KA...), dim3 grid, dim3 block, size_t smem, cu_go st, A... args) {
    launch_cluster(k, grid, block, smem, 0, st, args...);
}

template <typename... KA, typename... A>
static inline void launch(void (*k)(KA...), dim3 grid, dim3 block, cu_go st, A... args) {
    launch_smem(k, grid, block, 0, st, args...);
}

/* matmul epilogues: y = x.W^T (+ b); y += x.W^T (+ b), the residual add
   fused; y = silu(x.W^T) * (x.W2^T) with W the gate and W2 the up rows;
   y = gelu_tanh(x.W^T) * (x.W2^T) (cu_geglu; Gemma's MLP), the same rows */
enum { MM_STORE, MM_ADD, MM_SWIGLU, MM_GEGLU };
/* whether epilogue e gates: W the gate rows, W2 the up rows */
__host__ __device__ constexpr inline bool mm_gated(int e) { return e == MM_SWIGLU || e == MM_GEGLU; }

/* gelu_tanh(g) * u as op_geglu (engine/ops.c) computes it in f32, one
   IEEE-rounded operation at a time in its order (no FMA contraction):
   0.5 g (1 + tanh(beta (g + kappa g^3))) times u, beta = sqrt(2/pi) as the
   CPU rounds it to f32; tanhf is the device's (within 2 ulp of the CPU's) */
__device__ __forceinline__ float cu_geglu(float g, float u) {
    const float beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
    const float cube = __fmul_rn(__fmul_rn(g, g), g);
    const float inner = __fmul_rn(beta, __fadd_rn(g, __fmul_rn(kappa, cube)));
    const float t = __fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, tanhf(inner)));
    return __fmul_rn(t, u);
}

/* A device matrix [N][K] in row-major order (p), and, when t is not NULL,
   a tile-major copy for the tensor-core kernel: tiles of 16 rows x 32
   columns, each 1 KB contiguous (row r of the tile at r * 32), tile (R, c)
   (rows 16R.., columns 32c..) at ((R * ceil(K/32)) + c) * 512 elements, the
   edges zero-padded. A warp's fragment load is then 512 contiguous bytes
   instead of 8 rows x 64 bytes, which streams faster (bench/cuda-stream-probe.cu);
   the products and their order are the same either way. cuBLAS (prefill)
   and the embedding gather read p. */
struct dmat {
    void *p;
    ds_dtype dt;
    int N, K;
    void *t;
    /* A quantized matrix (dtype_is_quant(dt), cuda_quant.cu): p holds the
       file's bytes as they are (a GGUF type's blocks, row n the K/QK blocks
       at n * cu_q_row_bytes; MLX's packed words); for DT_MLX also bits,
       group, the scales' and biases' dtype sdt and the arrays sc, bi
       [N][K / group]. No tile-major copy (t stays NULL), and every fused
       path of bf16 weights (the tensor-core kernel, a folded norm, a
       pre-cut input) declines it through its predicate, so its bytes are
       only ever read by the quantized kernels (cuBLAS groups read a bf16
       copy they make: cu_qdequant_bf16). nsub (0: none): the matrix is a stack of nsub
       parts by rows, sub[i] each in its own format (a GGUF file's q, k and
       v of different types, stacked as one projection); dt is then the
       first part's and p is NULL. */
    int bits, group;
    ds_dtype sdt;
    void *sc, *bi;
    int nsub;
    const dmat *sub;
};

/* rows [r0, r0 + n) of a quantized W (no parts) as a matrix of its own */
dmat cu_qmat_rows(const dmat *W, int r0, int n);
/* y = x . W^T (+ bias) for M rows with epilogue epi (MM_*; W2 the up rows
   of a SwiGLU, the same format as W), W quantized: tensor cores over each
   block's exact integers, its f32 scales and mins applied per sub-block,
   each row's sum in an order fixed by K alone (cuda_quant.cu states it).
   Not MM_GEGLU: a quantized GELU MLP runs gate and up apart (cu_up_layer) */
void cu_qmatmul(cu_go st, int epi, float *y, const float *x, int M, const dmat *W, const dmat *W2,
                const float *bias);
/* g[i] = silu(g[i]) * u[i] for i < n (a layer whose gate and up run
   apart): silu(g) = g / (1 + exp(-g)) in f32, as the CPU's op_swiglu */
void cu_swiglu_apart(cu_go st, float *g, const float *u, size_t n);
/* out[M][H] = rows tok[m] of the quantized E, dequantized */
void cu_qembed(cu_go st, float *out, const dmat *E, const int *tok, int M);
/* out[N][K] = the quantized W (a stack of parts too) dequantized exactly
   and rounded to nearest bf16: the weights of the prefill groups' cuBLAS
   GEMMs (cu_gemm) */
void cu_qdequant_bf16(cu_go st, __nv_bfloat16 *out, const dmat *W);

/* Rows [r0, r0 + n) of W as a matrix of its own, in W's memory (no copy):
   its row-major rows from r0 on and, where W has a tile-major copy and r0
   is a multiple of 16, that copy's tiles from tile row r0 / 16 on (the
   view's last tile may hold rows of W past the view, whose outputs the
   kernel drops as it drops a tile's zero padding); otherwise no tile-major
   copy (the kernels read the rows: the same bits). */
static inline dmat cu_mat_rows(const dmat *W, int r0, int n) {
    if (dtype_is_quant(W->dt)) {
        /* (a stack of parts: the part that holds the rows; views across
           parts are not taken by anything) */
        for (int i = 0, a = 0; i < W->nsub; a += W->sub[i].N, i++)
            if (r0 >= a && r0 + n <= a + W->sub[i].N) return cu_qmat_rows(&W->sub[i], r0 - a, n);
        return cu_qmat_rows(W, r0, n);
    }
    const size_t es = dtype_size(W->dt), nc = ((size_t)W->K + 31) / 32;
    dmat v = {(char *)W->p + (size_t)r0 * W->K * es, W->dt, n, W->K, NULL};
    if (W->t && r0 % 16 == 0) v.t = (char *)W->t + (size_t)(r0 / 16) * nc * 512 * es;
    return v;
}

__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
__device__ __forceinline__ float widen(float v) { return v; }

/* the tuning the test and bench entry points defined in src (cuda_sample.cu's)
   launch under: tests/cuda/cuda_hooks.h sets it, models take it when
   created (cuda_backend.cu) */
const cu_tuning *cu_tuning_hooked(void);

/* The device allocations of one set of weights, freed together. */
struct dev_pool {
    void **p;
    int n, cap;
};
int cu_dev_alloc(dev_pool *pl, void **p, size_t n, char *err, size_t errlen);
/* n host floats to the device; a NULL src leaves *dst NULL */
int cu_up_f32(dev_pool *pl, float **dst, const float *src, size_t n, char *err, size_t errlen);
/* a bf16 / f16 / f32 matrix tensor to the device, in its dtype */
int cu_up_mat(dev_pool *pl, dmat *d, const tensor *t, char *err, size_t errlen);
void cu_pool_free(dev_pool *pl);

/* ---- quantized matrices (cuda_quant.cu) ---- */
/* bytes of one row of K elements in dt (bits: MLX's) */
size_t cu_q_row_bytes(ds_dtype dt, int bits, int K);
/* 0 when t (a quantized tensor) has a shape the kernels take: 2-D, K a
   multiple of its block or group, MLX bits 2-6 or 8, group 32, 64 or 128,
   float scales, nbytes matching; else -1 with err */
int cu_q_geometry(const tensor *t, char *err, size_t errlen);
/* t (quantized) to the device as it is (cu_up_mat calls it) */
int cu_up_qmat(dev_pool *pl, dmat *d, const tensor *t, char *err, size_t errlen);
/* whether a and b have one format (dtype, width and MLX parameters) */
int cu_q_same_format(const dmat *a, const dmat *b);
/* 1 when W can have a tile-major copy (bf16 / f16, K a multiple of 8) */
int cu_tiles_ok(const dmat *W);
/* W's tile-major copy (W->t), allocated in pl and filled on the legacy
   default stream (the caller synchronizes before another stream reads it);
   nothing when !cu_tiles_ok */
int cu_tile_mat(dev_pool *pl, dmat *W, char *err, size_t errlen);
/* bytes of W's tile-major copy (0 when !cu_tiles_ok) */
size_t cu_tile_bytes(const dmat *W);
/* whether an optional allocation of `bytes` on the current device leaves
   the larger of 2 GiB and a sixteenth of its memory free (for what is
   allocated later: another context's cache, cuBLAS's workspace) */
int cu_room_for(size_t bytes);
/* whether tile-major copies of `bytes` are made on the current device:
   DSPARK_CUDA_TILED=0 / 1 decides (another value is warned about), else
   cu_room_for */
int cu_tiles_wanted(size_t bytes);
/* Tile-major copies of the n matrices (NULL entries and repeats skipped)
   when cu_tiles_wanted says so for their total, once: *done is set when
   decided (under a lock, so concurrent first calls make one set). Called
   by the first forward (or drafter pass) of a set of weights, not at load:
   by then the contexts, KV caches and drafters are allocated, so the
   copies only take memory that nothing asked for. */
int cu_tile_once(int *done, dev_pool *pl, dmat *const *mats, int n, char *err, size_t errlen);
/* for allocation errors: a hint naming the tile-major copies when this
   process has made some (they may hold the memory asked for), else "" */
const char *cu_tiles_hint(void);

/* the target's device embedding and LM head (the same dmat when tied), and
   its GPU index: drafters on the same GPU bind them */
const dmat *cu_model_embed(const cuda_model *m);
const dmat *cu_model_lm_head(const cuda_model *m);
int cu_model_gpu(const cuda_model *m);
/* the model's tuning (cuda_tuning.h), which its drafters follow too */
const cu_tuning *cu_model_tune(const cuda_model *m);

/* y[M][N] = x[M][K] . W^T (+ bias) */
void cu_matmul(cu_go st, float *y, const float *x, int M, const dmat *W, const float *bias);
/* y[M][N] += x . W^T (+ bias): the residual add fused */
void cu_matmul_add(cu_go st, float *y, const float *x, int M, const dmat *W, const float *bias);
/* y[M][N] = silu(x . Wg^T) * (x . Wu^T), each product exactly as cu_matmul's */
void cu_matmul_swiglu(cu_go st, float *y, const float *x, int M, const dmat *Wg, const dmat *Wu);
/* 1 when W takes the tensor-core kernel, which can fold an RMSNorm of its
   input in (cu_matmul_norm, cu_matmul_swiglu_norm) */
int cu_fuses_norm(const cu_tuning *t, const dmat *W);
/* 1 when M rows of W can take their input pre-cut (bf16_cut_put's layout):
   bf16 weights on the tensor-core kernel, 1-CU_CUT_ROWS rows (decode and
   verify) */
#define CU_CUT_ROWS 16
int cu_takes_cut(const cu_tuning *t, const dmat *W, int M);
/* cu_matmul_add from the input's pre-cut form xc alone (the same operands
   as the f32 input's, so the same bits); -1 and nothing enqueued unless
   cu_takes_cut(st.t, W, M) */
int cu_matmul_add_cut(cu_go st, float *y, const uint32_t *xc, int M, const dmat *W, const float *bias);
/* y = x . W^T from the input's pre-cut form xc alone, each row's sums
   times r[m] when r is not NULL (cu_norm_cut's scales: then the folded
   norm's bits); -1 and nothing enqueued unless cu_takes_cut(st.t, W, M) */
int cu_matmul_cut(cu_go st, float *y, const uint32_t *xc, int M, const dmat *W, const float *r = NULL);
/* The folded RMSNorm's own kernel (cu_norm_split): for each of M rows of
   x[M][K], r[m] = 1/sqrt(mean(x^2) + eps) summed in exactly the folded
   norm's order (k_mma: each warp's lane quads over their chunks, the
   quad by butterfly, the warps in order), and xc[m] the pre-cut form
   (bf16_cut_put's layout) of gn . x, the products the folded norm's blocks
   cut themselves. A matmul from cu_cut{xc, .., r} multiplies the same
   operands in the same order and scales by the same r: the folded norm's
   bits, so the choice may follow the batch width. Needs K % 8 == 0 and
   cu_norm_cut_ok(K) (the row fits the block's shared memory). */
void cu_norm_cut(cu_go st, uint32_t *xc, float *r, const float *x, const float *gn, int M, int K, float eps);
int cu_norm_cut_ok(int K);
/* Where the forward runs a folded norm as cu_norm_cut ahead of its
   matmul (the matmul then takes its input pre-cut, no norm and no cut in
   its blocks; the same bits): at 9-16 rows a folded-norm block spends most
   of its instructions on the norm's products and squares and the cut
   (gate+up alone 51.4 us without the norm, 74.7 with it, at 16 rows),
   which every block repeats for the whole input. Sites: CU_NS_GU (the MLP
   norm before gate+up) and CU_NS_LM (the final norm before the LM head),
   from CU_NS_ROWS rows up to CU_CUT_ROWS. Measured on an H100
   (docs/history/benchmarks-log.md, the prepared switches' A/B): a Qwen3-8B t(16) at
   512 positions 6.79 -> 6.59 ms, one row unchanged; the attention norm
   before q/k/v run apart as well gained nothing more. cu_norm_split:
   whether site's norm runs apart for M rows. */
enum { CU_NS_GU = 2, CU_NS_LM = 4 };
#define CU_NS_ROWS 9
int cu_norm_split(int site, int M);
/* y = RMSNorm(x, gn, eps) . W^T (+ bias), without a separate norm pass */
void cu_matmul_norm(cu_go st, float *y, const float *x, int M, const dmat *W, const float *bias,
                    const float *gn, float eps);
/* y = silu(RMSNorm(x) . Wg^T) * (RMSNorm(x) . Wu^T); yc (or NULL): y's
   pre-cut form as well, for cu_matmul_add_cut (so Wg's N, that matmul's
   K, is a multiple of 8: a row's pairs never straddle rows) */
void cu_matmul_swiglu_norm(cu_go st, float *y, const float *x, int M, const dmat *Wg, const dmat *Wu,
                           const float *gn, float eps, uint32_t *yc);
/* y = RMSNorm(x, w) per row of D */
void cu_rmsnorm(cu_go st, float *y, const float *x, const float *w, int M, int D, float eps);
/* ---- the steps some families add around the matmuls (cuda_elem.cu; each
   its CPU op's f32 operations, a value or a row from itself alone) ---- */
/* x[i] *= s for i < n (op_scale: an embedding's scale) */
void cu_scale(cu_go st, float *x, float s, size_t n);
/* x[m] += RMSNorm(y[m], w) for M rows of D (op_rmsnorm then op_add: a
   norm of a sublayer's output y before its residual add); x and y apart */
void cu_rmsnorm_add(cu_go st, float *x, const float *y, const float *w, int M, int D, float eps);
/* g[i] = gelu_tanh(g[i]) * u[i] for i < n (cu_geglu; op_geglu): a GELU
   MLP whose gate and up ran apart */
void cu_geglu_apart(cu_go st, float *g, const float *u, size_t n);
/* x[i] = tanh(x[i] / cap) * cap for i < n (op_softcap: logits soft-capped
   before anything reads them) */
void cu_softcap(cu_go st, float *x, float cap, size_t n);
/* out[M][H] = E[tok[m]] widened */
void cu_embed(cu_go st, float *out, const dmat *E, const int *tok, int M);
/* q[M][nh][hd], k/v[M][nkv][hd] of the rows at positions pos[]: q/k get
   their per-head RMSNorm (qn/kn, when not NULL) and NeoX RoPE; k (roped)
   and v are stored in the caches [nkv][cap][hd] at position *d_len + row. */
void cu_qkv_post(cu_go st, float *q, const float *k, const float *v, cu_kv kv, const float *qn,
                 const float *kn, const int *pos, const float *inv_freq, int M, int nh, int nkv, int hd, int cap,
                 const int *d_len, float eps);
/* cu_qkv_post's arguments: qout[m] gets the roped q heads of q[m] (rows
   qs apart), k[m] and v[m] (rows ks apart) go to the caches */
struct cu_qkv_args {
    float *qout;
    const float *q, *k, *v;
    int qs, ks;
    cu_kv kv; /* the layer's cache (its storage picks the store's rule) */
    const float *qn, *kn;
    const int *pos;
    const float *inv_freq;
    int nh, nkv, hd, cap;
    const int *d_len;
    float eps;
};
/* cu_qkv_post for M rows of the arguments *a */
void cu_qkv_post_run(cu_go st, const cu_qkv_args *a, int M);
/* the arguments for one fused projection qkv[M][nh*hd + 2*nkv*hd] (q, k, v
   side by side per row), the roped q written to q[M][nh*hd] */
cu_qkv_args cu_qkv_fused_args(float *q, const float *qkv, cu_kv kv, const float *qn, const float *kn,
                              const int *pos, const float *inv_freq, int nh, int nkv, int hd, int cap,
                              const int *d_len, float eps);
/* cu_qkv_post_run done by the projection's own matmul: each block counts
   itself done in cnt (one int a head, zero between uses, cu_qkv_tail_cnt
   of them), and the last block of a head's columns normalises, ropes and
   stores that head for every row, with the same code as the separate
   kernel, so the bits are the same either way. */
struct cu_qkv_tail {
    cu_qkv_args a;
    int *cnt;
};
static inline int cu_qkv_tail_cnt(int nh, int nkv) { return nh + 2 * nkv; }
/* y = RMSNorm(x, gn) . W^T + bias (W: the fused q/k/v projection) and the
   tail t; 1 when the tensor-core kernel takes it (M <= 16 rows in head-
   aligned column tiles), else 0 and nothing is enqueued; never under
   st.t->qkv_tail 0 (for comparisons). */
int cu_matmul_norm_qkv(cu_go st, float *y, const float *x, int M, const dmat *W, const float *bias,
                       const float *gn, float eps, const cu_qkv_tail *t);
/* Attention of M query rows q[M][nh*hd] over the cache kv into
   out[M][nh*hd]. causal: row m sees positions 0 .. *d_len + first + m;
   else every row sees 0 .. *d_len + first + M - 1 (a drafter's block). part: scratch of
   cu_attn_part_floats(nh, hd, cap). spread: the launch shape for long
   caches (cu_attn_spread_for; the same bits either way). The cache's
   positions before *d_len, and *d_len itself, must have been written by
   stream work that ended before this forward's first kernel (the forward's
   upload of its inputs is such a barrier): the blocks read them before
   waiting for the previous kernel (unless st.t->att_early is 0). window
   (causal only; 0: none): a sliding window, the row at position p seeing
   positions p - window + 1 .. p (transformers' kv_pos > q_pos - window);
   the 64-position chunks wholly before a row's window are neither read
   nor combined for it, and its positions before the window inside its
   first chunk add exact zeros, so its bits are those it has alone. outc
   (or NULL): out's pre-cut form as well (bf16_cut_put), for
   cu_matmul_add_cut. */
void cu_attention(cu_go st, float *out, const float *q, cu_kv kv, float *part, int M,
                  int nh, int nkv, int hd, int cap, const int *d_len, float scale, int causal, int first, int spread,
                  int window, uint32_t *outc = NULL);
/* Causal attention of prefill rows, as cu_attention with first 0, by a
   tensor-core kernel that stages the cache once per 64 query vectors (a
   different summation order: the forward uses it for the cuBLAS groups
   only). wg_img: cu_attn_wg_floats of scratch for the warpgroup-mma
   kernel, or NULL (k_attn_tc then, as where that kernel cannot run).
   window: cu_attention's (0: none); the spans and chunks wholly before
   the window of a block's first row are skipped (and never combined), so
   a row's bits do not depend on its neighbours. */
void cu_attention_tiled(cu_go st, float *out, const float *q, cu_kv kv, float *part,
                        float *wg_img, int M, int nh, int nkv, int hd, int cap, const int *d_len, float scale,
                        int window);
/* 1 when cu_attention_tiled takes these heads (head_dim <= 128) */
int cu_attn_tiled_ok(int nh, int nkv, int hd);
/* the prefill attention's block: TC_QV query vectors (TC_QV / G rows of G
   heads) over one span of AT_SPLIT positions */
#define TC_QV 64
#define AT_SPLIT 2048
/* 1 when cu_attention_tiled runs on the warpgroup-mma kernel
   (cuda_attn_wg.cu) for head dim hd: an sm_90a build (DSPARK_WGMMA), a
   compute capability 9.0 device, hd 64 or 128, and t->att_wg */
int cu_attn_wg_ready(const cu_tuning *t, int hd);
/* floats of its scratch for a cache of cap positions (the layer's K and V
   as cut and laid out for it: four times the layer's share of the cache) */
size_t cu_attn_wg_floats(int nkv, int hd, int cap);
/* the cache's first *d_len + ntot positions laid out in img for it (once
   per cu_attention_tiled call, before its passes); under a window (0:
   none) only from the first row's window on (no block reads an image
   before it) */
void cu_attn_wg_prep(cu_go st, float *img, cu_kv kv, int nkv, int hd, int cap,
                     const int *d_len, int ntot, int window);
/* its launch: the partials of cu_attention_tiled's pass of M rows, from img */
void cu_attn_wg(cu_go st, const float *img, float *opart, float *mpart, float *spart, const float *q, int M,
                int nh, int nkv, int hd, int cap, const int *d_len, float scale, int nsplit, int first, int window);
/* forces the tensor-core matmul's tiles a block (1, 2 or 4; 0: its own
   choice) and returns the previous setting; the FMA matmul alone (for the
   op benchmark, cuda_mma_bench.cu) */
int cu_mma_tiles_force(int n);
void cu_matmul_fma(cu_go st, float *y, const float *x, int M, const dmat *W);
/* whether cu_attention takes the spread shape for a cache of len
   positions: t->att_spread 0 or 1 forces it, else len >= ATT_SPREAD_FROM */
int cu_attn_spread_for(const cu_tuning *t, int len);
/* the split argmax's scratch (cu_argmax): a pair a slice of each of rows
   rows, and a count a row (zero between calls); all NULL where rows of n
   values take one block (k_argmax) */
struct cu_am {
    float *v;
    int *i;
    unsigned *cnt;
    int rows, nb;
};
int cu_am_create(cu_am *a, int rows, int n, char *err, size_t errlen);
void cu_am_free(cu_am *a);
/* out[m] = the first index of the largest of x[m][0..n) (op_argmax's rule);
   a (NULL: none): scratch for the split kernel, taken unless
   st.t->argmax_split is 0. A stream at a time per
   scratch. */
void cu_argmax(cu_go st, int *out, const float *x, int M, int n, const cu_am *a = NULL);
/* chained decoding (cuda_chain_start): cu_chain_next sets a one-row
   forward's input to the argmax the previous step left in ids[0], at the
   position after the previous one's, with the cache one longer;
   cu_chain_set leaves the state a step at position at (and cache length
   at) would have left with argmax id, so that the next step takes id at
   position at + 1 */
void cu_chain_set(cu_go st, int *ids, int *pos, int *len, int id, int at);
void cu_chain_next(cu_go st, int *tok, int *pos, int *len, const int *ids);

/* ---- sampling (cuda_sample.cu) ---- */

/* what the device sampler reads: the sampler's parameters and a verify's
   drafts and uniforms (sampler_rows's arguments for n rows), and which of
   those rows a launch's logits rows are (row0 on). q (NULL: one-hot
   drafts): the drafts' own distributions, as the device sampler left them
   when it drew them (a GPU drafter's rows: the filtered numerators e in its
   scratch rows, stride cu_sample_stride, and their kept masses qtot); a
   draft d is then accepted when u < p(d) / q(d), and a rejected row draws
   from max(0, p - q) (spec_accept's rule). */
struct cu_sample_args {
    float inv_t, top_p, min_p;
    int top_k, n, row0;
    int draft[MODEL_SAMPLE_ROWS];
    double u[MODEL_SAMPLE_ROWS];
    const float *q;
    const unsigned long long *qtot;
};
static inline void cu_sample_args_set(cu_sample_args *a, const sampler_params *p, const int *draft, const double *u,
                                      int n) {
    a->inv_t = 1.0f / p->temperature;
    a->top_p = p->top_p > 0.0f && p->top_p < 1.0f ? p->top_p : 1.0f;
    a->min_p = p->min_p;
    a->top_k = p->top_k;
    a->n = n;
    a->row0 = 0;
    a->q = NULL;
    a->qtot = NULL;
    for (int i = 0; i < n; i++) {
        a->draft[i] = i < n - 1 ? draft[i] : -1;
        a->u[i] = u[i];
    }
}
/* arguments under which every one of n rows is a draw, row i with u[i] (a
   drafter's rows: a->n = 1) */
static inline void cu_sample_args_draws(cu_sample_args *a, const sampler_params *p, const double *u, int n) {
    cu_sample_args_set(a, p, NULL, u, 1);
    for (int i = 1; i < n; i++) a->u[i] = u[i];
}
/* floats per row of the device sampler's scratch */
static inline size_t cu_sample_stride(int V) { return ((size_t)V + 3) / 4 * 4; }
/* out[i] = sampler_rows's answer for row a->row0 + row_off + i of its a->n
   rows, i < m, from the logits rows x[m][V], with the arguments *a in
   device memory; escr: [m][cu_sample_stride(V)] floats of scratch (16-byte
   aligned), which keeps each row's filtered numerators; tot (NULL: not
   wanted): each row's kept mass, tot[i]. With a->n = 1 every row is a
   draw (with u[its row]): a drafter's rows, whose escr and tot a verify
   then reads as its q. */
void cu_sample_rows(cu_go st, int *out, const float *x, float *escr, int m, int V, const cu_sample_args *a,
                    unsigned long long *tot, int row_off);

/* ---- cuBLAS for prefill-sized batches (cuda_gemm.cu) ---- */

/* Whole groups of a tuning's gemm_rows rows of a batch (CUDA_GEMM_MIN_ROWS,
   above any verify width; 0 switches cuBLAS off, and a value at or below a
   verify width is for tests only: verify rows would then differ from
   decode rows) run their layer matmuls through
   cuBLAS bf16 GEMMs on the activations split into bf16 head and tail rows,
   one GEMM per group; the rows past the last whole group take the
   tensor-core kernel. */
struct cu_gemm;
/* groups of group rows (0: it takes none), scratch for batches of up to rows
   rows, matrices up to nmax x kmax; wmax: elements of bf16 scratch for a
   quantized matrix dequantized (0: quantized matrices are not taken) */
int cu_gemm_create(cu_gemm **out, int group, int rows, int kmax, int nmax, size_t wmax, char *err,
                   size_t errlen);
void cu_gemm_free(cu_gemm *g);
/* the leading rows of an M-row batch that g (may be NULL) takes for W: a
   multiple of its group, 0 when M is below a group or W is neither bf16
   nor a quantized matrix that fits the bf16 weight scratch */
int cu_gemm_takes(const cu_gemm *g, const dmat *W, int M);
/* y (epilogue epi, MM_*) = [RMSNorm(x, gn)] . W^T (+ bias); SwiGLU or
   GELU gating with W2; M a value cu_gemm_takes returned */
void cu_gemm_matmul(cu_gemm *g, cu_go st, int epi, float *y, const float *x, int M, const dmat *W,
                    const dmat *W2, const float *bias, const float *gn, float eps);
/* the first cuBLAS failure since the last check, as an error */
int cu_gemm_check(cu_gemm *g, char *err, size_t errlen);

/* One layer matmul of M rows, epilogue epi (MM_*), of the RMSNorm (gn, eps)
   of x when gn is not NULL: the whole cuBLAS groups g takes (g may be NULL)
   first, then the other rows by the kernels, the norm folded in where the
   tensor-core kernel takes W and otherwise written to xb ([M][K] scratch)
   first. With gn, only MM_STORE and the gated epilogues occur in the
   forward. cut.in (or NULL): x's pre-cut form as well, taken by a store or
   a residual add without a norm where cu_layer_takes_cut says so (the same
   bits as from x); with gn, cut.in and cut.r: the norm already run by cu_norm_cut
   (any epilogue; where cu_layer_takes_cut says so, as the forward checks
   before running it); cut.out (or NULL): where a gated epilogue writes y's pre-cut
   form when its kernel can (the tensor-core kernel with the norm folded
   in or run apart, no cuBLAS groups). Returns 1 when cut.out was written,
   else 0. */
int cu_layer_matmul(cu_go st, cu_gemm *g, int epi, float *y, const float *x, int M, const dmat *W,
                    const dmat *W2, const float *bias, const float *gn, float eps, float *xb, cu_cut cut);
/* whether cu_layer_matmul takes M rows of W from a pre-cut input:
   cu_takes_cut and no cuBLAS groups, unless t->cut is 0 (the same bits,
   for comparisons). The forward asks the input's producer for the pre-cut
   copy only then. */
int cu_layer_takes_cut(const cu_tuning *t, cu_gemm *g, const dmat *W, int M);

#endif
