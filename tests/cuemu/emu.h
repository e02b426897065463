// emu.h: runs a CUDA kernel's source on the CPU, for checking a kernel's
// indexing, masking, work split and synchronisation where no GPU is at
// hand. Each CUDA thread of a block is a fiber (ucontext) on one host
// thread; __syncthreads and the warp-wide operations (shuffles, mma.sync)
// are rendezvous that yield to the other fibers until every live thread of
// the block (or lane of the warp) has arrived, and a round in which no
// fiber can move is reported as a deadlock (a barrier some threads never
// reach). cp.async copies are held per thread until its wait_group lets
// them land, so a read of shared memory before the wait (or before the
// barrier after it) sees the block's initial NaNs instead of the data;
// a group lands at its commit on a coin toss, and warps are left out of
// scheduling passes at random, so a stage refilled while another warp
// still reads it shows too. Blocks run one after another, in an order
// drawn anew each launch; a thread-block cluster's blocks run together.
//
// What it is not: a timing model, or the tensor core's arithmetic (an mma
// is the exact product of its operands, TF32-truncated or bf16, summed in
// double and rounded once). The kernel sources and cuda_ops.cuh compile
// here as they are, with DSPARK_CUEMU defined: the CUDA headers they
// include (tests/cuemu/fake) bring this one, which gives the CUDA syntax,
// types, intrinsics and runtime calls they use CPU meanings, and
// cuda_ops.cuh leaves out its inline-assembly helpers (mma, cp.async) for
// the ones below. __shared__ variables become function statics (one per
// block, as blocks run in turn; one per cluster for a clustered launch, so
// clustered kernels keep theirs in DYN_SMEM); DYN_SMEM is the block's
// buffer.
#ifndef DS_CUEMU_H
#define DS_CUEMU_H

#include <ucontext.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#ifndef DSPARK_CUEMU
#error "tests/cuemu builds define DSPARK_CUEMU"
#endif

/* ---- CUDA syntax ---------------------------------------------------------- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__
#define __launch_bounds__(...)

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct float4 {
    float x, y, z, w;
};
struct float2 {
    float x, y;
};
struct uint4 {
    uint32_t x, y, z, w;
};
struct uint2 {
    uint32_t x, y;
};
/* the round-to-nearest arithmetic intrinsics (never contracted into an FMA:
   the host build has no FMA contraction either, -ffp-contract=off below is
   not needed on x86-64 without -mfma) */
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
static inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
static inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
/* round to nearest even (the default mode's nearbyint); a NaN gives 0 as on
   the device, values past int's range its ends */
static inline int __float2int_rn(float x) {
    if (x != x) return 0;
    if (x >= 2147483647.0f) return 2147483647;
    if (x <= -2147483648.0f) return (-2147483647 - 1);
    return (int)nearbyintf(x);
}
static inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return {x, y}; }
static inline uint32_t __float_as_uint(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float __uint_as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

typedef int cudaError_t;
typedef struct emu_stream_ *cudaStream_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaDeviceAttr {
    cudaDevAttrMaxSharedMemoryPerBlockOptin,
    cudaDevAttrMaxSharedMemoryPerMultiprocessor,
    cudaDevAttrMultiProcessorCount,
    cudaDevAttrComputeCapabilityMajor,
    cudaDevAttrComputeCapabilityMinor,
};
enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
struct cudaFuncAttributes {
    size_t sharedSizeBytes;
    int ptxVersion;
};
enum cudaLaunchAttributeID { cudaLaunchAttributeClusterDimension, cudaLaunchAttributeProgrammaticStreamSerialization };
struct cudaLaunchAttribute {
    cudaLaunchAttributeID id;
    union {
        struct {
            unsigned x, y, z;
        } clusterDim;
        int programmaticStreamSerializationAllowed;
    } val;
};
struct cudaLaunchConfig_t {
    dim3 gridDim, blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    cudaLaunchAttribute *attrs;
    unsigned numAttrs;
};

/* the built-in variables: threadIdx is set to the running fiber's at each
   switch to it */
inline dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace emu {

/* the device the launchers see: an H200's shared memory, few SMs (so a
   block takes several of a kernel's work items in turn; cuda_ops.cuh's
   sm_count reads this once, at a process's first launch) */
inline int sms = 6, smem_optin = 232448, smem_per_sm = 233472;

struct copy16 {
    void *dst;
    const void *src;
};

struct fiber {
    ucontext_t ctx;
    std::vector<char> stack;
    int tid = 0; /* in its block */
    int blk = 0; /* its block's place in the cluster running (0 outside clusters) */
    bool done = false;
    struct barrier *wait = nullptr; /* the rendezvous it waits at, and that one's generation */
    unsigned wait_gen = 0;
    std::vector<std::vector<copy16>> groups; /* committed cp.async groups, oldest first */
    std::vector<copy16> open;                /* issued since the last commit */
};

struct barrier {
    int lo = 0, hi = 0; /* the threads it waits for (fiber indices) */
    int count = 0;
    unsigned gen = 0;
    bool block = false; /* a block's __syncthreads (see try_release) */
};

/* The blocks running together: one, or a thread-block cluster's (a
   launch with a cluster dimension): fiber i is thread i % nthreads of
   the i / nthreads-th. */
inline std::vector<fiber> fibers;
inline int cur = -1, nthreads = 0, nblocks = 1;
inline std::vector<dim3> running; /* their blockIdx */
inline ucontext_t sched;
inline std::function<void()> body;
inline std::vector<barrier> block_bar; /* a block each */
inline barrier cluster_bar;
inline std::vector<barrier> warp_bar;  /* [block][warp] */
inline std::vector<uint32_t> slots; /* [block][warp][lane][16] words exchanged at warp rendezvous */
inline bool progress; /* whether the scheduler's pass ran a fiber */
inline int laggard = 0; /* the warp the scheduler holds back (see run_blocks) */
/* the running blocks' dynamic shared memory (DYN_SMEM), smem_stride bytes a block */
inline std::vector<float4> smem_buf;
inline size_t smem_stride = 0;

[[noreturn]] inline void fail(const char *what) {
    fprintf(stderr, "cuemu: %s (grid %u,%u,%u of %u threads, block %u,%u,%u, thread %d)\n", what, gridDim.x, gridDim.y,
            gridDim.z, blockDim.x * blockDim.y * blockDim.z, blockIdx.x, blockIdx.y, blockIdx.z,
            cur >= 0 ? fibers[cur].tid : -1);
    fflush(NULL);
    _exit(2); /* (from a fiber's stack: no exit handlers) */
}

/* the schedule's random choices (xorshift, fixed seed: a failure repeats) */
inline uint64_t rng = 0x2545f4914f6cdd1dull;
inline unsigned coin() {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng >> 33);
}
inline fiber &me() { return fibers[cur]; }
inline int lane() { return me().tid % 32; }
inline int warp() { return me().tid / 32; }
inline int warps_per_block() { return (nthreads + 31) / 32; }
inline int gwarp() { return me().blk * warps_per_block() + warp(); } /* among the running blocks' */
/* the calling thread's block's dynamic shared memory */
inline void *dyn_smem() { return reinterpret_cast<unsigned char *>(smem_buf.data()) + (size_t)me().blk * smem_stride; }
inline void yield() { swapcontext(&me().ctx, &sched); }

inline int exited(int lo, int hi) {
    int n = 0;
    for (int i = lo; i < hi; i++) n += fibers[i].done;
    return n;
}

/* opens b's next generation where every live thread it waits for has
   arrived */
inline bool try_release(barrier &b) {
    if (b.count + exited(b.lo, b.hi) < b.hi - b.lo) return false;
    b.count = 0;
    b.gen++;
    if (b.block) laggard = (int)(coin() % (nblocks * warps_per_block())); /* another after each barrier */
    return true;
}

/* waits until every live thread b waits for has arrived; the scheduler
   leaves a waiting fiber alone until then */
inline void rendezvous(barrier &b) {
    const unsigned g = b.gen;
    b.count++;
    if (try_release(b)) return;
    me().wait = &b;
    me().wait_gen = g;
    while (b.gen == g) yield();
    me().wait = nullptr;
}

inline void syncthreads() { rendezvous(block_bar[me().blk]); }
/* barrier.cluster.arrive + wait: every live thread of the cluster's blocks */
inline void cluster_sync() { rendezvous(cluster_bar); }
inline void syncwarp() { rendezvous(warp_bar[gwarp()]); }
inline uint32_t *my_slot(int l = -1) { return &slots[((size_t)gwarp() * 32 + (l < 0 ? lane() : l)) * 16]; }

/* cp.async: held until a wait lets the group land */
inline void cp_issue(void *dst, const void *src) { me().open.push_back({dst, src}); }
inline void cp_land(const std::vector<copy16> &g) {
    for (const copy16 &c : g) memcpy(c.dst, c.src, 16);
}
/* a committed group lands at once (as it may on the GPU) on one commit in
   two, else at the wait that covers it; either way wait_group counts it */
inline void cp_commit() {
    std::vector<copy16> &open = me().open;
    if (coin() & 1) {
        cp_land(open);
        open.clear();
    }
    me().groups.push_back(std::move(open));
    open.clear();
}
/* all but the newest n committed groups land (uncommitted copies stay, as
   on the GPU) */
inline void cp_wait(int n) {
    std::vector<std::vector<copy16>> &gs = me().groups;
    while ((int)gs.size() > n) {
        cp_land(gs.front());
        gs.erase(gs.begin());
    }
}

inline void trampoline() {
    body();
    fiber &f = me();
    if (!f.open.empty()) fail("cp.async copies issued but never committed at the thread's end");
    cp_wait(0);
    f.done = true;
    /* uc_link returns to the scheduler */
}

/* runs the blocks `blocks` (one, or a cluster's) of the kernel call k
   together on blockDim threads each, their dynamic shared memory
   smem_bytes each, NaN-filled (0xff bytes) so a read of anything not yet
   written shows */
inline void run_blocks(const std::vector<dim3> &blocks, size_t smem_bytes, const std::function<void()> &k) {
    nthreads = (int)(blockDim.x * blockDim.y * blockDim.z);
    nblocks = (int)blocks.size();
    running = blocks;
    const int nw = warps_per_block(), total = nblocks * nthreads;
    smem_stride = (smem_bytes + 15) / 16 * 16;
    if (smem_buf.size() * 16 < smem_stride * nblocks) smem_buf.resize(smem_stride * nblocks / 16);
    if (smem_bytes) memset(smem_buf.data(), 0xff, smem_stride * nblocks);
    if ((int)fibers.size() < total) fibers.resize(total);
    warp_bar.assign((size_t)nblocks * nw, barrier());
    block_bar.assign(nblocks, barrier());
    for (int b = 0; b < nblocks; b++) {
        block_bar[b].lo = b * nthreads;
        block_bar[b].hi = (b + 1) * nthreads;
        block_bar[b].block = true;
        for (int w = 0; w < nw; w++) {
            barrier &wb = warp_bar[(size_t)b * nw + w];
            wb.lo = b * nthreads + w * 32;
            wb.hi = w * 32 + 32 < nthreads ? wb.lo + 32 : (b + 1) * nthreads;
        }
    }
    cluster_bar = barrier();
    cluster_bar.hi = total;
    slots.assign((size_t)nblocks * nw * 32 * 16, 0);
    body = k;
    for (int i = 0; i < total; i++) {
        fiber &f = fibers[i];
        f.tid = i % nthreads;
        f.blk = i / nthreads;
        f.done = false;
        f.wait = nullptr;
        f.groups.clear();
        f.open.clear();
        if (f.stack.empty()) f.stack.resize(128 << 10);
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.data();
        f.ctx.uc_stack.ss_size = f.stack.size();
        f.ctx.uc_link = &sched;
        makecontext(&f.ctx, trampoline, 0);
    }
    /* passes over the warps: in most, each warp is left out with odds of
       one in three, and one warp (the laggard, drawn again at each block
       barrier) runs in one pass in 32, so warps drift far apart between
       block barriers and a stage refilled, or a buffer rewritten, while
       another warp still reads it shows; after a pass that ran no fiber,
       one with every warp, and if that runs none either (all wait at
       rendezvous that never open), the blocks are stuck */
    const int gw = nblocks * nw;
    laggard = (int)(coin() % gw);
    bool all = true;
    for (;;) {
        bool live = false;
        progress = false;
        for (int w = 0; w < gw; w++) {
            const bool run = all || (w == laggard ? coin() % 32 == 0 : coin() % 3 != 0);
            for (cur = warp_bar[w].lo; cur < warp_bar[w].hi; cur++) {
                fiber &f = fibers[cur];
                if (f.done) continue;
                live = true;
                if (!run) continue;
                /* a waiting fiber runs only once its rendezvous opens (a
                   thread's exit may open it) */
                if (f.wait && f.wait->gen == f.wait_gen && !try_release(*f.wait)) continue;
                progress = true;
                const int t = f.tid;
                threadIdx = dim3((unsigned)t % blockDim.x, (unsigned)t / blockDim.x % blockDim.y,
                                 (unsigned)t / (blockDim.x * blockDim.y));
                blockIdx = running[f.blk];
                swapcontext(&sched, &fibers[cur].ctx);
            }
        }
        cur = -1;
        if (!live) break;
        if (!progress && all) fail("deadlock: threads wait at a barrier or warp operation the others never reach");
        all = !progress;
    }
}

/* a launch: every block (or cluster of cx blocks along x) in turn, in an
   order drawn anew each launch (a GPU promises none: a kernel whose last
   block to finish does more, or one that assumes block 0 runs first,
   shows); a cluster's blocks run together (cluster_sync meets across
   them), so a clustered kernel keeps its shared memory in DYN_SMEM (its
   __shared__ statics would be one for the whole cluster) */
inline void launch(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()> &k, unsigned cx = 1) {
    if (smem_bytes > (size_t)smem_optin) fail("a launch asks for more shared memory than the device gives");
    if (cx < 1 || grid.x % cx) fail("a grid that is not a whole number of clusters");
    gridDim = grid;
    blockDim = block;
    std::vector<dim3> order; /* each cluster's first block */
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x += cx) order.push_back(dim3(x, y, z));
    for (size_t i = order.size(); i > 1; i--) std::swap(order[i - 1], order[coin() % i]);
    for (const dim3 &b : order) {
        std::vector<dim3> blocks;
        for (unsigned j = 0; j < cx; j++) blocks.push_back(dim3(b.x + j, b.y, b.z));
        run_blocks(blocks, smem_bytes, k);
    }
}

/* the exchange behind the shuffles: lane l's v to the lane that asks for l */
inline uint32_t shfl(uint32_t v, int src) {
    *my_slot() = v;
    syncwarp();
    uint32_t r = *my_slot(src & 31);
    syncwarp();
    return r;
}

inline float tf32_of(uint32_t b) { return __uint_as_float(b & 0xffffe000u); }
inline float bf16_of(uint32_t w, int hi) { return __uint_as_float(hi ? w & 0xffff0000u : w << 16); }

/* a warp's vote: bit l set where lane l is live and its pred is not 0 */
inline uint32_t ballot(int pred) {
    my_slot()[1] = pred != 0;
    syncwarp();
    uint32_t b = 0;
    const int first = me().blk * nthreads + warp() * 32; /* lane 0's fiber */
    for (int l = 0; l < 32; l++)
        if (warp() * 32 + l < nthreads && !fibers[first + l].done && my_slot(l)[1]) b |= 1u << l;
    syncwarp();
    return b;
}

/* an mma.sync m16n8kK with f32 accumulators: every lane's fragments
   gathered, each lane's four outputs D = C + A B from them, D (r, n) at
   lane 4 (r % 8) + n / 2, register 2 (r >= 8) + n % 2; a(r, k) and b(k, n)
   read an operand from the gathered registers (s(lane)[0..3]: A, [4..5]:
   B) */
template <int K, typename FA, typename FB>
inline void mma_sync(float (&d)[4], const uint32_t (&regs)[6], FA a, FB b) {
    uint32_t *s = my_slot();
    for (int i = 0; i < 6; i++) s[i] = regs[i];
    syncwarp();
    const int g = lane() / 4, t = lane() % 4;
    float out[4];
    for (int e = 0; e < 4; e++) {
        const int r = g + 8 * (e >= 2), n = 2 * t + (e & 1);
        double acc = d[e];
        for (int k = 0; k < K; k++) acc += (double)a(r, k) * (double)b(k, n);
        out[e] = (float)acc;
    }
    syncwarp();
    for (int e = 0; e < 4; e++) d[e] = out[e];
}

/* TF32 m16n8k8: A (r, k) at lane 4 (r % 8) + k % 4, register (r >= 8) +
   2 (k >= 4); B (k, n) at lane 4 n + k % 4, register k >= 4; operands
   truncated to TF32 */
inline void mma_tf32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    mma_sync<8>(d, {a0, a1, a2, a3, b0, b1},
                [](int r, int k) { return tf32_of(my_slot(4 * (r % 8) + k % 4)[(r >= 8) + 2 * (k >= 4)]); },
                [](int k, int n) { return tf32_of(my_slot(4 * n + k % 4)[4 + (k >= 4)]); });
}

/* BF16 m16n8k16: A (r, k) at lane 4 (r % 8) + (k % 8) / 2, register
   (r >= 8) + 2 (k >= 8), half k % 2; B (k, n) at lane 4 n + (k % 8) / 2,
   register k >= 8, half k % 2 */
inline void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    mma_sync<16>(d, {a0, a1, a2, a3, b0, b1},
                 [](int r, int k) { return bf16_of(my_slot(4 * (r % 8) + (k % 8) / 2)[(r >= 8) + 2 * (k >= 8)], k % 2); },
                 [](int k, int n) { return bf16_of(my_slot(4 * n + (k % 8) / 2)[4 + (k >= 8)], k % 2); });
}

} // namespace emu

static inline void __syncthreads() { emu::syncthreads(); }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu::syncwarp(); }
static inline float __shfl_xor_sync(unsigned mask, float v, int off) {
    if (mask != 0xffffffffu) emu::fail("a shuffle with a partial mask (not modelled)");
    return __uint_as_float(emu::shfl(__float_as_uint(v), emu::lane() ^ off));
}

static inline int __shfl_xor_sync(unsigned mask, int v, int off) {
    if (mask != 0xffffffffu) emu::fail("a shuffle with a partial mask (not modelled)");
    return (int)emu::shfl((uint32_t)v, emu::lane() ^ off);
}
static inline float __shfl_sync(unsigned mask, float v, int src) {
    if (mask != 0xffffffffu) emu::fail("a shuffle with a partial mask (not modelled)");
    return __uint_as_float(emu::shfl(__float_as_uint(v), src));
}
static inline float __shfl_down_sync(unsigned mask, float v, int delta) {
    if (mask != 0xffffffffu) emu::fail("a shuffle with a partial mask (not modelled)");
    const int src = emu::lane() + delta;
    const float r = __uint_as_float(emu::shfl(__float_as_uint(v), src < 32 ? src : emu::lane()));
    return r;
}
static inline unsigned __ballot_sync(unsigned mask, int pred) {
    if (mask != 0xffffffffu) emu::fail("a ballot with a partial mask (not modelled)");
    return emu::ballot(pred);
}
static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline void __threadfence() {}
static inline int atomicAdd(int *p, int v) {
    const int o = *p;
    *p += v;
    return o;
}
static inline unsigned atomicAdd(unsigned *p, unsigned v) {
    const unsigned o = *p;
    *p += v;
    return o;
}
template <typename T> static inline T __ldg(const T *p) { return *p; }
template <typename T> static inline T __ldcg(const T *p) { return *p; }

/* ---- bf16 and f16 (cuda_bf16.h, cuda_fp16.h) ------------------------------- */
struct __nv_bfloat16 {
    uint16_t x;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {(uint16_t)((u >> 16) | 0x40)}; /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1);
    return {(uint16_t)(u >> 16)};
}
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
static inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((uint32_t)h.x << 16); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}
struct __half {
    uint16_t x;
};
struct __half2 {
    __half x, y;
};
static inline float __half2float(__half h) {
    const uint32_t s = (uint32_t)(h.x & 0x8000) << 16, e = (h.x >> 10) & 31, m = h.x & 1023;
    if (e == 31) return __uint_as_float(s | 0x7f800000u | (m << 13));
    if (e) return __uint_as_float(s | ((e + 112) << 23) | (m << 13));
    return (s ? -1.0f : 1.0f) * (float)m * 5.9604644775390625e-8f; /* subnormal: m x 2^-24 */
}
static inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
static inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }

/* ---- the inline-assembly helpers of cuda_ops.cuh --------------------------- */
static inline void mma_tf32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                            uint32_t b1) {
    emu::mma_tf32(d, a0, a1, a2, a3, b0, b1);
}
static inline void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                            uint32_t b1) {
    emu::mma_bf16(d, a0, a1, a2, a3, b0, b1);
}
static inline void cp_async16(void *smem, const void *gmem) { emu::cp_issue(smem, gmem); }
static inline void cp_async_commit() { emu::cp_commit(); }
/* (cp.async.wait_all is commit_group then wait_group 0: the copies not yet
   committed land too) */
static inline void cp_async_wait_all() {
    emu::cp_commit();
    emu::cp_wait(0);
}
static inline void cp_async_wait_one() { emu::cp_wait(1); }
#define DYN_SMEM(T, name) T *const name = reinterpret_cast<T *>(emu::dyn_smem())
static inline void cluster_sync() { emu::cluster_sync(); }

/* ---- the runtime calls the launchers make ---------------------------------- */
static inline const char *cudaGetErrorString(cudaError_t) { return "(emulated)"; }
/* device memory is host memory here */
static inline cudaError_t cudaMalloc(void **p, size_t n) {
    *p = malloc(n ? n : 1);
    return *p ? cudaSuccess : cudaErrorInvalidValue;
}
static inline cudaError_t cudaFree(void *p) {
    free(p);
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) {
    memcpy(d, s, n);
    return cudaSuccess;
}
static inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    *free_b = (size_t)100 << 30, *total = (size_t)141 << 30;
    return cudaSuccess;
}
static inline cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
/* (launches run at once: a stream holds nothing to wait for, nor captures) */
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t) {
    memcpy(d, s, n);
    return cudaSuccess;
}
static inline cudaError_t cudaMallocHost(void **p, size_t n) {
    *p = malloc(n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaFreeHost(void *p) {
    free(p);
    return cudaSuccess;
}
enum cudaStreamCaptureStatus { cudaStreamCaptureStatusNone, cudaStreamCaptureStatusActive };
static inline cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus *s) {
    *s = cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
static inline cudaError_t cudaMemset(void *p, int v, size_t n) {
    memset(p, v, n);
    return cudaSuccess;
}
static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
static inline cudaError_t cudaGetDevice(int *d) {
    *d = 0;
    return cudaSuccess;
}
static inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr attr, int) {
    switch (attr) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = emu::smem_optin; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = emu::smem_per_sm; break;
    case cudaDevAttrMultiProcessorCount: *v = emu::sms; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    }
    return cudaSuccess;
}
template <typename F> static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, F) {
    a->sharedSizeBytes = 0; /* (static __shared__ variables are function statics here) */
    a->ptxVersion = 90;
    return cudaSuccess;
}
template <typename F> static inline cudaError_t cudaFuncSetAttribute(F, int, int) { return cudaSuccess; }
/* blocks an SM: what the shared memory allows, at most two */
template <typename F> static inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, F, int, size_t smem) {
    const int f = smem ? (int)(emu::smem_per_sm / (smem + 1024)) : 2;
    *n = f < 2 ? f : 2;
    return cudaSuccess;
}
/* clusters resident at once: the SMs' worth, where each block's shared memory fits */
template <typename F>
static inline cudaError_t cudaOccupancyMaxActiveClusters(int *n, F, const cudaLaunchConfig_t *cfg) {
    unsigned cx = 1;
    for (unsigned i = 0; i < cfg->numAttrs; i++)
        if (cfg->attrs[i].id == cudaLaunchAttributeClusterDimension) cx = cfg->attrs[i].val.clusterDim.x;
    *n = cfg->dynamicSmemBytes <= (size_t)emu::smem_optin && cx <= (unsigned)emu::sms ? emu::sms / (int)cx : 0;
    return cudaSuccess;
}
template <typename... KA, typename... A>
static inline cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t *cfg, void (*k)(KA...), A... args) {
    unsigned cx = 1;
    for (unsigned i = 0; i < cfg->numAttrs; i++)
        if (cfg->attrs[i].id == cudaLaunchAttributeClusterDimension) cx = cfg->attrs[i].val.clusterDim.x;
    emu::launch(cfg->gridDim, cfg->blockDim, cfg->dynamicSmemBytes, [&]() { k(args...); }, cx);
    return cudaSuccess;
}

#endif
